/* test_safetensors.c — round trip, exact header layout, reads and slices,
 * model/checkpoint mismatch reports, atomic save under failure, and every
 * kind of corrupt file giving a clear message. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "rt_test.h"

static char path_buf[512];
static const char *at(const char *dir, const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = xcalloc(*n + 1, 1);
  if (fread(b, 1, *n, f) != *n)
    *n = 0;
  fclose(f);
  return b;
}

static void test_roundtrip(const char *dir) {
  float w[6] = {1, 2, 3, 4, 5, 6.5f};
  double d[4] = {1e-300, -2, 3.25, 1e300};
  int32_t ids[3] = {-1, 0, 2147483647};
  uint16_t u[5] = {0, 1, 65535, 7, 8};
  float scalar = 42;
  int64_t sw[2] = {2, 3}, sd[1] = {4}, si[1] = {3}, su[1] = {5}, sz[2] = {0, 4};
  RtStWriter *wr = rt_st_writer_new();
  ASSERT_OK(rt_st_add(wr, "blocks.0.attn.qkv.weight", RT_F32, 2, sw, w));
  ASSERT_OK(rt_st_add(wr, "a.double", RT_F64, 1, sd, d));
  ASSERT_OK(rt_st_add(wr, "ids", RT_I32, 1, si, ids));
  ASSERT_OK(rt_st_add(wr, "tokens \"quoted\"", RT_U16, 1, su, u));
  ASSERT_OK(rt_st_add(wr, "scalar", RT_F32, 0, NULL, &scalar));
  ASSERT_OK(rt_st_add(wr, "empty", RT_F32, 2, sz, NULL));
  ASSERT_OK(rt_st_add_meta(wr, "step", "100"));
  ASSERT_OK(rt_st_add_meta(wr, "note", "caf\xc3\xa9 \"q\" \\ \n"));
  ASSERT_FAILS(RT_ERR_ARG, rt_st_add(wr, "ids", RT_I32, 1, si, ids), "'ids' added twice");
  ASSERT_FAILS(RT_ERR_ARG, rt_st_add(wr, "__metadata__", RT_I32, 1, si, ids), "invalid tensor name");
  ASSERT_FAILS(RT_ERR_ARG, rt_st_add_meta(wr, "step", "1"), "'step' added twice");
  const char *path = at(dir, "rt.safetensors");
  ASSERT_OK(rt_st_save(wr, path));
  rt_st_writer_free(wr);

  RtStFile *f;
  ASSERT_OK(rt_st_open(&f, path));
  if (!f)
    return;
  ASSERT(6, f->ntensors);
  ASSERT_STR("100", rt_st_meta(f, "step"));
  ASSERT_STR("caf\xc3\xa9 \"q\" \\ \n", rt_st_meta(f, "note"));
  ASSERT_TRUE(rt_st_meta(f, "nope") == NULL);
  float w2[6];
  ASSERT_OK(rt_st_read(f, "blocks.0.attn.qkv.weight", RT_F32, 2, sw, w2));
  ASSERT(0, memcmp(w, w2, sizeof w));
  double d2[4];
  ASSERT_OK(rt_st_read(f, "a.double", RT_F64, 1, sd, d2));
  ASSERT(0, memcmp(d, d2, sizeof d));
  int32_t ids2[3];
  ASSERT_OK(rt_st_read(f, "ids", RT_I32, 1, si, ids2));
  ASSERT(0, memcmp(ids, ids2, sizeof ids));
  uint16_t u2[5];
  ASSERT_OK(rt_st_read(f, "tokens \"quoted\"", RT_U16, 1, su, u2));
  ASSERT(0, memcmp(u, u2, sizeof u));
  float s2 = 0;
  ASSERT_OK(rt_st_read(f, "scalar", RT_F32, 0, NULL, &s2));
  ASSERT_NEAR(42, s2, 0);
  const RtStTensor *e = rt_st_find(f, "empty");
  ASSERT_TRUE(e && e->nbytes == 0 && e->ndim == 2 && e->shape[0] == 0);
  ASSERT_TRUE(rt_st_find(f, "missing") == NULL);

  // slices along dim 0 and 1 (tensor-parallel shards)
  float rows[3], cols[4];
  int64_t s1[1] = {2};
  ASSERT_OK(rt_st_read_slice(f, "blocks.0.attn.qkv.weight", RT_F32, 2, sw, 0, 1, 1, rows));
  ASSERT(0, memcmp(rows, w + 3, 3 * sizeof(float)));
  ASSERT_OK(rt_st_read_slice(f, "blocks.0.attn.qkv.weight", RT_F32, 2, sw, 1, 1, 2, cols));
  float want_cols[4] = {2, 3, 5, 6.5f};
  ASSERT(0, memcmp(cols, want_cols, sizeof cols));
  ASSERT_FAILS(RT_ERR_ARG,
               rt_st_read_slice(f, "blocks.0.attn.qkv.weight", RT_F32, 2, sw, 1, 2, 2, cols),
               "rt.safetensors", "'blocks.0.attn.qkv.weight'", "out of range");

  // read errors name the file and the tensor
  ASSERT_FAILS(RT_ERR_MISMATCH, rt_st_read(f, "nope", RT_F32, 1, s1, rows), "rt.safetensors",
               "tensor 'nope' not found");
  ASSERT_FAILS(RT_ERR_MISMATCH, rt_st_read(f, "a.double", RT_F32, 1, sd, rows),
               "rt.safetensors", "tensor 'a.double' has dtype F64, expected F32");
  int64_t bad[2] = {3, 2};
  ASSERT_FAILS(RT_ERR_MISMATCH, rt_st_read(f, "blocks.0.attn.qkv.weight", RT_F32, 2, bad, w2),
               "tensor 'blocks.0.attn.qkv.weight' has shape [2, 3], expected [3, 2]");

  // a model's expectations: everything wrong at once, in one message
  RtStSpec specs[] = {
      {"blocks.0.attn.qkv.weight", RT_F32, 2, {3, 2}},
      {"a.double", RT_F32, 1, {4}},
      {"ids", RT_I32, 1, {3}},
      {"lm_head.weight", RT_F32, 2, {4, 4}},
  };
  ASSERT_FAILS(RT_ERR_MISMATCH, rt_st_check(f, specs, 4, 0),
               "rt.safetensors: checkpoint does not match the model\n",
               "\n  missing tensors (1 of the 4 expected): 'lm_head.weight'\n",
               "\n  unexpected tensors (3 of the 6 in the file): 'empty', 'scalar', "
               "'tokens \"quoted\"'\n",
               "\n  tensor 'blocks.0.attn.qkv.weight' has shape [2, 3], expected [3, 2]\n",
               "\n  tensor 'a.double' has dtype F64, expected F32");
  // another model's file: the models, counts and the first few names, in a
  // few lines that fit the message (a model's hundreds of names once made
  // one line cut mid-word)
  enum { NS = 300 };
  static RtStSpec many[NS];
  static char names[NS][64];
  for (int i = 0; i < NS; i++) {
    snprintf(names[i], sizeof names[i], "transformer.h.%d.attention.dense.weight", i);
    many[i] = (RtStSpec){names[i], RT_F32, 1, {4}};
  }
  ASSERT_FAILS(RT_ERR_MISMATCH, rt_st_check_model(f, many, NS, 0, "gpt"),
               "checkpoint does not match the model\n"
               "  model: not recorded in the file, 'gpt' in this program\n"
               "  missing tensors (300 of the 300 expected): 'transformer.h.0.attention.dense."
               "weight', 'transformer.h.1.attention.dense.weight', 'transformer.h.2.attention."
               "dense.weight', 'transformer.h.3.attention.dense.weight', 'transformer.h.4."
               "attention.dense.weight' and 295 more\n"
               "  unexpected tensors (6 of the 6 in the file): 'a.double', "
               "'blocks.0.attn.qkv.weight', 'empty', 'ids', 'scalar' and 1 more");
  ASSERT_TRUE(!strstr(rt_last_error(), "\xe2\x80\xa6")); /* not cut */
  RtStSpec good[] = {
      {"blocks.0.attn.qkv.weight", RT_F32, 2, {2, 3}},
      {"a.double", RT_F64, 1, {4}},
      {"ids", RT_I32, 1, {3}},
  };
  ASSERT_OK(rt_st_check(f, good, 3, 1));
  ASSERT_FAILS(RT_ERR_MISMATCH, rt_st_check(f, good, 3, 0), "unexpected tensors");
  rt_st_close(f);

  // the header: sorted by name, metadata first, space-padded to 8 bytes
  size_t n;
  unsigned char *raw = slurp(path, &n);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)raw[i] << (8 * i);
  ASSERT(0, hlen % 8);
  const char *h = (const char *)raw + 8;
  const char *order[] = {"\"__metadata__\"", "\"a.double\"", "\"blocks.0.attn.qkv.weight\"",
                         "\"empty\"", "\"ids\"", "\"scalar\"", "\"tokens \\\"quoted\\\"\""};
  const char *prev = h;
  for (int i = 0; i < 7; i++) {
    const char *p = strstr(h, order[i]);
    ASSERT_TRUE(p && p >= prev);
    prev = p ? p : prev;
  }
  ASSERT(8 + hlen + 32 + 24 + 0 + 12 + 4 + 10, n);
  // the first tensor by name starts the data section
  ASSERT(0, memcmp(raw + 8 + hlen, d, sizeof d));
  free(raw);
}

static void test_exact_header(const char *dir) {
  float v[2] = {1, 2};
  int64_t s[1] = {2};
  RtStWriter *w = rt_st_writer_new();
  ASSERT_OK(rt_st_add(w, "b", RT_F32, 1, s, v));
  ASSERT_OK(rt_st_add(w, "a", RT_F32, 1, s, v));
  ASSERT_OK(rt_st_add_meta(w, "step", "3"));
  const char *path = at(dir, "exact.safetensors");
  ASSERT_OK(rt_st_save(w, path));
  rt_st_writer_free(w);
  size_t n;
  unsigned char *raw = slurp(path, &n);
  const char *want = "{\"__metadata__\":{\"step\":\"3\"},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
  size_t wl = strlen(want), padded = (wl + 7) / 8 * 8;
  ASSERT(padded, raw[0] | raw[1] << 8);
  ASSERT(0, memcmp(raw + 8, want, wl));
  for (size_t i = wl; i < padded; i++)
    ASSERT(' ', raw[8 + i]);
  ASSERT(8 + padded + 16, n);
  free(raw);
}

static void test_atomic(const char *dir) {
  const char *path = at(dir, "ckpt.safetensors");
  char p[512];
  snprintf(p, sizeof p, "%s", path);
  float old[4] = {1, 2, 3, 4};
  int64_t s4[1] = {4};
  RtStWriter *w = rt_st_writer_new();
  ASSERT_OK(rt_st_add(w, "x", RT_F32, 1, s4, old));
  ASSERT_OK(rt_st_save(w, p));
  rt_st_writer_free(w);
  size_t n0;
  unsigned char *before = slurp(p, &n0);

  // 1. the temp file cannot be created (its name is taken by a directory)
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
  ASSERT(0, mkdir(tmp, 0755));
  static float big[1 << 16];
  int64_t sb[1] = {1 << 16};
  w = rt_st_writer_new();
  ASSERT_OK(rt_st_add(w, "x", RT_F32, 1, sb, big));
  ASSERT_FAILS(RT_ERR_IO, rt_st_save(w, p), "ckpt.safetensors", "cannot create temporary file");
  rmdir(tmp);
  size_t n1;
  unsigned char *after = slurp(p, &n1);
  ASSERT(n0, n1);
  ASSERT(0, memcmp(before, after, n0));
  free(after);

  // 2. the disk fills up mid-write (a file size limit makes write() fail)
  struct rlimit old_lim, lim;
  getrlimit(RLIMIT_FSIZE, &old_lim);
  lim = old_lim;
  lim.rlim_cur = 4096;
  signal(SIGXFSZ, SIG_IGN);
  ASSERT(0, setrlimit(RLIMIT_FSIZE, &lim));
  ASSERT_FAILS(RT_ERR_IO, rt_st_save(w, p), "ckpt.safetensors", "temporary file",
               "File too large", "unchanged");
  setrlimit(RLIMIT_FSIZE, &old_lim);
  after = slurp(p, &n1);
  ASSERT(n0, n1);
  ASSERT(0, memcmp(before, after, n0));
  free(after);
  struct stat st;
  ASSERT(-1, stat(tmp, &st)); // the partial temp file was removed

  // 3. an unwritable directory (root ignores permissions: then only 1-2 apply)
  if (geteuid() != 0) {
    chmod(dir, 0555);
    ASSERT_FAILS(RT_ERR_IO, rt_st_save(w, p), "cannot create temporary file");
    chmod(dir, 0755);
  }
  // 4. a directory that does not exist
  char nodir[600];
  snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.safetensors", dir);
  ASSERT_FAILS(RT_ERR_IO, rt_st_save(w, nodir), "no/such/dir/x.safetensors");

  // 5. the target is not a regular file: refused, left as it was (a
  // rename would have replaced a FIFO or a device node, /dev/null as root)
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  ASSERT(0, mkfifo(fifo, 0644));
  ASSERT_FAILS(RT_ERR_IO, rt_st_save(w, fifo), "fifo: not saved", "not a regular file");
  ASSERT_TRUE(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", fifo, (long)getpid());
  ASSERT(-1, stat(tmp, &st));
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());

  // and a successful save replaces the file
  ASSERT_OK(rt_st_save(w, p));
  rt_st_writer_free(w);
  RtStFile *f;
  ASSERT_OK(rt_st_open(&f, p));
  ASSERT_TRUE(f && rt_st_find(f, "x")->nbytes == sizeof big);
  rt_st_close(f);
  ASSERT(-1, stat(tmp, &st));
  free(before);
}

/* A file with this header (length-prefixed) followed by ndata zero bytes. */
static const char *craft(const char *dir, const char *header, size_t ndata) {
  const char *path = at(dir, "bad.safetensors");
  size_t hl = strlen(header);
  unsigned char *buf = xcalloc(8 + hl + ndata, 1);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  write_file(path, buf, 8 + hl + ndata);
  free(buf);
  return path;
}

#define BAD(hdr, ndata, ...)                                                        \
  do {                                                                              \
    RtStFile *f_ = NULL;                                                            \
    ASSERT_FAILS(RT_ERR_FORMAT, rt_st_open(&f_, craft(dir, hdr, ndata)),            \
                 "bad.safetensors", __VA_ARGS__);                                   \
    ASSERT_TRUE(f_ == NULL);                                                        \
  } while (0)

static void test_corrupt(const char *dir) {
  RtStFile *f = NULL;
  const char *p = at(dir, "short.safetensors");
  write_file(p, "\x10\0\0\0\0", 5);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_st_open(&f, p), "short.safetensors", "file too short (5 bytes)");
  write_file(p, "", 0);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_st_open(&f, p), "file too short (0 bytes)");
  unsigned char hdr[20] = {0xe8, 0x03}; // header length 1000 in a 20-byte file
  write_file(p, hdr, sizeof hdr);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_st_open(&f, p), "short.safetensors",
               "header length 1000 goes beyond the end of the file (20 bytes)");
  ASSERT_FAILS(RT_ERR_IO, rt_st_open(&f, at(dir, "absent.safetensors")), "absent.safetensors",
               "No such file");

  // malformed JSON
  BAD("{\"a\":{\"dtype\":\"F32\",}", 0, "malformed JSON header");
  BAD("{\"a\":1", 0, "malformed JSON header", "expected ',' or '}'");
  BAD("[1,2]", 0, "malformed JSON header", "expected '{'");
  BAD("{} x", 0, "malformed JSON header", "trailing characters");
  BAD("{\"a\" 1}", 0, "expected ':'");
  BAD("{\"a\":\"\\q\"}", 0, "bad escape");
  BAD("{\"a\":\"\\ud800\"}", 0, "unpaired surrogate");
  BAD("{\"a\":01}", 0, "malformed JSON header");
  BAD("{\"a\":\"x", 0, "unterminated string");
  BAD("{\"a\":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}", 0, "nesting too deep");
  BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
      8, "duplicate key");
  // schema
  BAD("{\"w\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "tensor 'w'",
      "unknown dtype 'F8'");
  BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'w'", "missing field 'data_offsets'");
  BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
      "tensor 'w'", "unknown field 'x'");
  BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
      "not a non-negative integer");
  BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "tensor 'w'",
      "end before they begin");
  BAD("{\"__metadata__\":{\"step\":3}}", 0, "__metadata__ value of 'step' is not a string");
  BAD("{\"w\":5}", 0, "tensor 'w'", "not an object");
  // sizes and offsets
  BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
      "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8");
  BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "tensor 'w'",
      "out of range", "data section has 8 bytes");
  BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
      12, "tensors 'a' and 'b' overlap");
  BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
      20, "data bytes [8, 12) before tensor 'b' belong to no tensor");
  BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
      "data bytes [0, 4) before tensor 'a' belong to no tensor");
  BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
      "data section has 12 bytes but the tensors cover 8");
  BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8,
      "tensor 'a'", "shape [4611686018427387904, 4] is too large");

  // a well-formed hand-made file with escapes in names and padding is fine
  p = craft(dir, "{\"caf\\u00e9\\n\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}   ", 1);
  ASSERT_OK(rt_st_open(&f, p));
  ASSERT_TRUE(f && rt_st_find(f, "caf\xc3\xa9\n") != NULL);
  rt_st_close(f);
}

static void test_dtypes(void) {
  RtDtype dt;
  ASSERT(0, rt_dtype_parse("BF16", &dt));
  ASSERT(RT_BF16, dt);
  ASSERT(2, rt_dtype_size(dt));
  ASSERT(-1, rt_dtype_parse("F8", &dt));
  ASSERT_STR("U16", rt_dtype_name(RT_U16));
  ASSERT(1, rt_dtype_size(RT_BOOL));
}

int main(void) {
  const char *dir = test_tmpdir();
  test_dtypes();
  test_roundtrip(dir);
  test_exact_header(dir);
  test_atomic(dir);
  test_corrupt(dir);
  test_tmpdir_remove(dir);
  TEST_MAIN_END();
}
