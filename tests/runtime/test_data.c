/* test_data.c — token files in every format, windows and batches, shuffling,
 * rank splits, and the errors for bad files. */
#include "rt_test.h"

static char path_buf[512];
static const char *at(const char *dir, const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

/* n uint16 tokens, little-endian, optionally behind an llm.c header. */
static void write_tokens(const char *path, const uint16_t *tok, size_t n, int llmc) {
  size_t hdr = llmc ? 1024 : 0;
  unsigned char *buf = xcalloc(hdr + 2 * n, 1);
  if (llmc) {
    int32_t h[3] = {20240520, 1, (int32_t)n};
    for (int i = 0; i < 3; i++)
      for (int b = 0; b < 4; b++)
        buf[4 * i + b] = (unsigned char)((uint32_t)h[i] >> (8 * b));
  }
  for (size_t i = 0; i < n; i++) {
    buf[hdr + 2 * i] = (unsigned char)(tok[i] & 0xff);
    buf[hdr + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
  }
  write_file(path, buf, hdr + 2 * n);
  free(buf);
}

/* Every row of a batch is a window [w*T, w*T+T] of the token stream. */
static int window_of(const RtData *d, const int32_t *inp, const int32_t *tgt,
                     const uint16_t *tok) {
  for (size_t w = 0; w < d->nwin; w++) {
    int ok = 1;
    for (int t = 0; t < d->T && ok; t++)
      ok = inp[t] == tok[w * d->T + t] && tgt[t] == tok[w * d->T + t + 1];
    if (ok)
      return (int)w;
  }
  return -1;
}

static void test_u16_and_llmc(const char *dir) {
  enum { N = 1001, V = 50257 };
  static uint16_t tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = (uint16_t)((i * 7919) % V);
  for (int llmc = 0; llmc < 2; llmc++) {
    const char *p = at(dir, llmc ? "train.tok" : "train.bin"); // llm.c: found by magic
    write_tokens(p, tok, N, llmc);
    RtData d;
    ASSERT_OK(rt_data_open(&d, p, RT_DATA_AUTO, V, 4, 10, 0, 0));
    ASSERT(llmc ? RT_DATA_LLMC : RT_DATA_U16, d.format);
    ASSERT(N, d.ntok);
    ASSERT(100, d.nwin);
    int32_t inp[4 * 10], tgt[4 * 10];
    ASSERT_OK(rt_data_batch(&d, 0, 0, 4, inp, tgt));
    for (int r = 0; r < 4; r++)
      ASSERT(r, window_of(&d, inp + r * 10, tgt + r * 10, tok));
    ASSERT(tok[10], inp[10]);
    ASSERT(tok[11], tgt[10]);
    // step 24 takes windows 96..99; step 25 wraps to the next epoch
    ASSERT_OK(rt_data_batch(&d, 24, 0, 4, inp, tgt));
    ASSERT(99, window_of(&d, inp + 30, tgt + 30, tok));
    ASSERT_OK(rt_data_batch(&d, 25, 0, 4, inp, tgt));
    ASSERT(0, window_of(&d, inp, tgt, tok));
    rt_data_close(&d);
  }
}

static void test_text(const char *dir) {
  const char *text = "Hello, wörld! shardc reads bytes.\n";
  const char *p = at(dir, "input.txt");
  write_file(p, text, strlen(text));
  RtData d;
  ASSERT_OK(rt_data_open(&d, p, RT_DATA_AUTO, 256, 2, 8, 0, 0));
  ASSERT(RT_DATA_TEXT, d.format);
  ASSERT(strlen(text), d.ntok);
  int32_t inp[16], tgt[16];
  ASSERT_OK(rt_data_batch(&d, 0, 0, 2, inp, tgt));
  ASSERT('H', inp[0]);
  ASSERT('e', tgt[0]);
  ASSERT('w', inp[7]);
  ASSERT(0xc3, inp[8]); // window 1 starts at byte 8, with 'ö' as two byte tokens
  ASSERT(0xb6, inp[9]);
  ASSERT(0xb6, tgt[8]);
  rt_data_close(&d);
  // a byte beyond a small vocabulary is reported like any token
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, p, RT_DATA_TEXT, 128, 2, 8, 0, 0), "input.txt",
               "token id 195 at byte offset 8 (token 8)", "vocab 128");
}

static void test_shuffle(const char *dir) {
  enum { N = 1 + 37 * 5 };
  static uint16_t tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = (uint16_t)(i % 1000);
  const char *p = at(dir, "shuf.bin");
  write_tokens(p, tok, N, 0);
  RtData d, d2, d3;
  ASSERT_OK(rt_data_open(&d, p, RT_DATA_U16, 1000, 1, 5, 1, 42));
  ASSERT_OK(rt_data_open(&d2, p, RT_DATA_U16, 1000, 1, 5, 1, 42));
  ASSERT_OK(rt_data_open(&d3, p, RT_DATA_U16, 1000, 1, 5, 1, 43));
  ASSERT(37, d.nwin);
  int seen[37] = {0}, order[2][37], ident = 1, same_seed = 1, other_seed = 1, epochs = 1;
  for (int e = 0; e < 2; e++)
    for (int s = 0; s < 37; s++) {
      int32_t inp[5], tgt[5], inp2[5];
      ASSERT_OK(rt_data_batch(&d, e * 37 + s, 0, 1, inp, tgt));
      int w = window_of(&d, inp, tgt, tok);
      order[e][s] = w;
      if (e == 0 && w >= 0)
        seen[w]++;
      ident &= w == s;
      rt_data_batch(&d2, e * 37 + s, 0, 1, inp2, NULL);
      same_seed &= memcmp(inp, inp2, sizeof inp) == 0;
      rt_data_batch(&d3, e * 37 + s, 0, 1, inp2, NULL);
      other_seed &= memcmp(inp, inp2, sizeof inp) == 0;
    }
  int perm = 1;
  for (int w = 0; w < 37; w++)
    perm &= seen[w] == 1;
  epochs = memcmp(order[0], order[1], sizeof order[0]) == 0;
  ASSERT_TRUE(perm);        // each epoch visits every window once
  ASSERT_TRUE(!ident);      // in a shuffled order
  ASSERT_TRUE(same_seed);   // reproducible from the seed
  ASSERT_TRUE(!other_seed); // and another seed gives another order
  ASSERT_TRUE(!epochs);     // and every epoch is reshuffled
  rt_data_close(&d), rt_data_close(&d2), rt_data_close(&d3);

  // a rank's rows are the same rows the whole batch holds
  ASSERT_OK(rt_data_open(&d, p, RT_DATA_U16, 1000, 6, 5, 1, 7));
  int32_t all[6 * 5], part[6 * 5];
  ASSERT_OK(rt_data_batch(&d, 3, 0, 6, all, NULL));
  ASSERT_OK(rt_data_batch(&d, 3, 0, 2, part, NULL));
  ASSERT_OK(rt_data_batch(&d, 3, 2, 4, part + 2 * 5, NULL));
  ASSERT(0, memcmp(all, part, sizeof all));
  ASSERT_FAILS(RT_ERR_ARG, rt_data_batch(&d, 3, 4, 3, part, NULL), "shuf.bin",
               "rows [4, 7) of step 3 are outside the batch of 6");
  // a sequence shard's columns are those columns of the whole rows, targets too
  int32_t tall[6 * 5], cin[6 * 2], ctg[6 * 2];
  ASSERT_OK(rt_data_batch(&d, 3, 0, 6, all, tall));
  ASSERT_OK(rt_data_batch_cols(&d, 3, 0, 6, 3, 2, cin, ctg));
  int cols_ok = 1;
  for (int r = 0; r < 6; r++)
    for (int t = 0; t < 2; t++)
      cols_ok &= cin[r * 2 + t] == all[r * 5 + 3 + t] && ctg[r * 2 + t] == tall[r * 5 + 3 + t];
  ASSERT_TRUE(cols_ok);
  ASSERT_FAILS(RT_ERR_ARG, rt_data_batch_cols(&d, 3, 0, 6, 4, 2, cin, NULL), "shuf.bin",
               "token columns [4, 6) are outside the sequence of 5");
  rt_data_close(&d);
}

static void test_errors(const char *dir) {
  RtData d;
  ASSERT_FAILS(RT_ERR_IO, rt_data_open(&d, at(dir, "missing.bin"), RT_DATA_AUTO, 256, 1, 4, 0, 0),
               "missing.bin", "cannot open data file", "No such file");
  // B=4, T=8 needs 4*8+1 = 33 tokens
  static uint16_t tok[64];
  write_tokens(at(dir, "short.bin"), tok, 32, 0);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "short.bin"), RT_DATA_AUTO, 256, 4, 8, 0, 0),
               "short.bin", "32 tokens", "shorter than one batch", "needs 33 tokens");
  write_tokens(at(dir, "ok.bin"), tok, 33, 0);
  ASSERT_OK(rt_data_open(&d, at(dir, "ok.bin"), RT_DATA_AUTO, 256, 4, 8, 0, 0));
  rt_data_close(&d);
  write_file(at(dir, "empty.txt"), "", 0);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "empty.txt"), RT_DATA_AUTO, 256, 1, 4, 0, 0),
               "empty.txt", "0 tokens");
  // out of vocabulary, raw and behind an llm.c header (offset counts the header)
  tok[17] = 300;
  write_tokens(at(dir, "oov.bin"), tok, 64, 0);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "oov.bin"), RT_DATA_AUTO, 256, 1, 8, 0, 0),
               "oov.bin", "token id 300 at byte offset 34 (token 17)", "vocab 256");
  write_tokens(at(dir, "oov_llmc.bin"), tok, 64, 1);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "oov_llmc.bin"), RT_DATA_AUTO, 256, 1, 8, 0, 0),
               "oov_llmc.bin", "token id 300 at byte offset 1058 (token 17)");
  // malformed files
  write_file(at(dir, "odd.bin"), "abc", 3);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "odd.bin"), RT_DATA_AUTO, 256, 1, 1, 0, 0),
               "odd.bin", "3 bytes is not a whole number of uint16 tokens");
  write_tokens(at(dir, "trunc.bin"), tok, 64, 1);
  FILE *f = fopen(at(dir, "trunc.bin"), "r+b");
  ASSERT(0, ftruncate(fileno(f), 1024 + 100));
  fclose(f);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "trunc.bin"), RT_DATA_AUTO, 256, 1, 8, 0, 0),
               "trunc.bin", "header says 64 tokens (128 bytes) but the file holds 100 bytes");
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "ok.bin"), RT_DATA_LLMC, 256, 1, 8, 0, 0),
               "ok.bin", "not an llm.c token file");
  unsigned char v3[1024 + 8] = {0x88, 0xd8, 0x34, 0x01, 3, 0, 0, 0, 4, 0, 0, 0}; // version 3
  write_file(at(dir, "v3.bin"), v3, sizeof v3);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_data_open(&d, at(dir, "v3.bin"), RT_DATA_AUTO, 256, 1, 1, 0, 0),
               "v3.bin", "version 3 is not supported");
}

int main(void) {
  const char *dir = test_tmpdir();
  test_u16_and_llmc(dir);
  test_text(dir);
  test_shuffle(dir);
  test_errors(dir);
  test_tmpdir_remove(dir);
  TEST_MAIN_END();
}
