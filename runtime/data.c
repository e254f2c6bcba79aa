/* data.c — token files (nanoGPT uint16, llm.c with header, raw text bytes)
 * cut into windows of T+1 tokens, served by (step, row) with no state. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES (256 * 4)
#define RT_DATA_SALT 0xDA7A5EEDF00DCAFEull

static uint32_t rd_le(const unsigned char *p, int nbytes) {
  uint32_t v = 0;
  for (int i = 0; i < nbytes; i++)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char *format_name(int format) {
  switch (format) {
  case RT_DATA_U16: return "uint16 tokens";
  case RT_DATA_LLMC: return "llm.c tokens";
  default: return "text bytes";
  }
}

void rt_data_close(RtData *d) {
  if (d->map)
    munmap(d->map, d->map_size);
  free(d->path);
  memset(d, 0, sizeof *d);
}

int rt_data_open(RtData *d, const char *path, int format, int vocab, int B, int T,
                 int shuffle, uint64_t seed) {
  memset(d, 0, sizeof *d);
  if (B < 1 || T < 1 || vocab < 1)
    return rt_errorf(RT_ERR_ARG, "%s: invalid data shape B=%d T=%d vocab=%d", path, B, T, vocab);
  struct stat st;
  int fd = rt_open_regular(path, &st);
  if (fd == -2)
    return rt_errorf(RT_ERR_IO, "%s: data file is not a regular file", path);
  if (fd < 0)
    return rt_errorf(RT_ERR_IO, "%s: cannot open data file: %s", path, strerror(errno));
  if (!(d->path = strdup(path))) {
    close(fd);
    return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", path);
  }
  d->map_size = (size_t)st.st_size;
  if (d->map_size > 0) {
    d->map = mmap(NULL, d->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (d->map == MAP_FAILED) {
      int err = errno;
      d->map = NULL;
      close(fd);
      rt_data_close(d);
      return rt_errorf(RT_ERR_IO, "%s: cannot read data file: %s", path, strerror(err));
    }
  }
  close(fd);
  d->B = B, d->T = T, d->vocab = vocab, d->shuffle = shuffle, d->seed = seed;

  const unsigned char *m = d->map;
  size_t size = d->map_size;
  if (format == RT_DATA_AUTO) {
    if (size >= LLMC_HEADER_BYTES && rd_le(m, 4) == LLMC_MAGIC)
      format = RT_DATA_LLMC;
    else if (ends_with(path, ".bin"))
      format = RT_DATA_U16;
    else
      format = RT_DATA_TEXT;
  }
  d->format = format;
  int rc = RT_OK;
  if (format == RT_DATA_LLMC) {
    if (size < LLMC_HEADER_BYTES || rd_le(m, 4) != LLMC_MAGIC) {
      rc = rt_errorf(RT_ERR_FORMAT, "%s: not an llm.c token file (no magic %d in a %d-byte header)",
                     path, LLMC_MAGIC, LLMC_HEADER_BYTES);
    } else {
      uint32_t version = rd_le(m + 4, 4), n = rd_le(m + 8, 4);
      d->tok_bytes = version == 1 ? 2 : version == 2 ? 4 : 0;
      if (!d->tok_bytes)
        rc = rt_errorf(RT_ERR_FORMAT, "%s: llm.c token file version %u is not supported (1: uint16, 2: uint32)",
                       path, version);
      else if ((size - LLMC_HEADER_BYTES) != (size_t)n * d->tok_bytes)
        rc = rt_errorf(RT_ERR_FORMAT, "%s: header says %u tokens (%zu bytes) but the file holds %zu bytes of tokens",
                       path, n, (size_t)n * d->tok_bytes, size - LLMC_HEADER_BYTES);
      d->tokens = m + LLMC_HEADER_BYTES;
      d->ntok = n;
    }
  } else if (format == RT_DATA_U16) {
    d->tok_bytes = 2;
    d->tokens = m;
    d->ntok = size / 2;
    if (size % 2)
      rc = rt_errorf(RT_ERR_FORMAT, "%s: %zu bytes is not a whole number of uint16 tokens", path, size);
  } else if (format == RT_DATA_TEXT) {
    d->tok_bytes = 1;
    d->tokens = m;
    d->ntok = size;
  } else {
    rc = rt_errorf(RT_ERR_ARG, "%s: unknown data format %d", path, format);
  }
  if (rc) {
    rt_data_close(d);
    return rc;
  }

  size_t need = (size_t)B * T + 1;
  d->nwin = d->ntok ? (d->ntok - 1) / (size_t)T : 0;
  if (d->nwin < (size_t)B) {
    rc = rt_errorf(RT_ERR_FORMAT,
                   "%s: %zu tokens (%s) is shorter than one batch of B=%d windows of T=%d (needs %zu tokens)",
                   path, d->ntok, format_name(format), B, T, need);
    rt_data_close(d);
    return rc;
  }
  size_t header = format == RT_DATA_LLMC ? LLMC_HEADER_BYTES : 0;
  for (size_t i = 0; i < d->ntok; i++) {
    uint32_t id = rd_le(d->tokens + i * d->tok_bytes, d->tok_bytes);
    if (id >= (uint32_t)vocab) {
      rc = rt_errorf(RT_ERR_FORMAT, "%s: token id %u at byte offset %zu (token %zu) is out of vocabulary (vocab %d)",
                     path, id, header + i * d->tok_bytes, i, vocab);
      rt_data_close(d);
      return rc;
    }
  }
  return RT_OK;
}

/* Position of index i in a seeded permutation of [0, n) for this epoch: a
 * 4-round Feistel network on the smallest even-bit power of two >= n,
 * cycle-walked back into range (a bijection, no table). */
static uint64_t permute(uint64_t i, uint64_t n, uint64_t seed, uint64_t epoch) {
  int bits = 2;
  while (bits < 62 && (1ull << bits) < n)
    bits += 2;
  int half = bits / 2;
  uint64_t mask = (1ull << half) - 1, x = i;
  do {
    uint64_t L = x >> half, R = x & mask;
    for (uint64_t r = 0; r < 4; r++) {
      uint64_t F = rt_rng_u64(seed ^ RT_DATA_SALT, epoch * 4 + r, R) & mask;
      uint64_t nl = R;
      R = L ^ F;
      L = nl;
    }
    x = (L << half) | R;
  } while (x >= n);
  return x;
}

int rt_data_batch(const RtData *d, long step, int row0, int nrows, int32_t *inputs,
                  int32_t *targets) {
  return rt_data_batch_cols(d, step, row0, nrows, 0, d->T, inputs, targets);
}

int rt_data_batch_cols(const RtData *d, long step, int row0, int nrows, int t0, int tn,
                       int32_t *inputs, int32_t *targets) {
  if (step < 0 || row0 < 0 || nrows < 0 || row0 + nrows > d->B)
    return rt_errorf(RT_ERR_ARG, "%s: batch rows [%d, %d) of step %ld are outside the batch of %d",
                     d->path, row0, row0 + nrows, step, d->B);
  if (t0 < 0 || tn < 0 || t0 + tn > d->T)
    return rt_errorf(RT_ERR_ARG, "%s: token columns [%d, %d) are outside the sequence of %d",
                     d->path, t0, t0 + tn, d->T);
  int T = d->T, tb = d->tok_bytes;
  for (int r = 0; r < nrows; r++) {
    uint64_t g = (uint64_t)step * (uint64_t)d->B + (uint64_t)(row0 + r);
    uint64_t epoch = g / d->nwin, i = g % d->nwin;
    uint64_t w = d->shuffle ? permute(i, d->nwin, d->seed, epoch) : i;
    const unsigned char *p = d->tokens + ((size_t)w * T + (size_t)t0) * tb;
    for (int t = 0; t < tn; t++) {
      if (inputs)
        inputs[(size_t)r * tn + t] = (int32_t)rd_le(p + (size_t)t * tb, tb);
      if (targets)
        targets[(size_t)r * tn + t] = (int32_t)rd_le(p + (size_t)(t + 1) * tb, tb);
    }
  }
  return RT_OK;
}
