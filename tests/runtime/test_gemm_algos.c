/* test_gemm_algos.c — the file of chosen GEMM algorithms (gemm_algos.h):
 * a round trip, the table's rules, and every kind of bad or stale file. */
#include "rt_test.h"

#include "gemm_algos.h"

static char path_buf[512];
static const char *at(const char *dir, const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

static RtGemmChoice choice(int seed) {
  RtGemmChoice c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < RT_GEMM_KEY_INTS; i++)
    c.key[i] = seed * 1000 + i * (i % 3 ? 1 : -1);
  c.key[2] = 131072;
  for (int i = 0; i < RT_GEMM_ALGO_WORDS; i++)
    c.algo[i] = ((uint64_t)seed << 40) ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
  c.ms = 0.25f + (float)seed;
  c.ms_first = 0.5f + (float)seed;
  c.cands = 8;
  c.source = RT_GEMM_TIMED;
  return c;
}

static void test_roundtrip(const char *dir) {
  const char *p = at(dir, "g.algos");
  RtGemmTable t = {0}, r = {0};
  RtGemmChoice a = choice(1), b = choice(2);
  ASSERT(1, rt_gemm_table_add(&t, &a));
  ASSERT(1, rt_gemm_table_add(&t, &b));
  RtGemmChoice a2 = a;
  a2.algo[0] ^= 1;
  ASSERT(0, rt_gemm_table_add(&t, &a2)); /* the key is there: the first stays */
  ASSERT(2, t.n);
  ASSERT_TRUE(rt_gemm_table_find(&t, a.key)->algo[0] == a.algo[0]);
  ASSERT_TRUE(rt_gemm_table_find(&t, choice(3).key) == NULL);
  ASSERT_OK(rt_gemm_table_write(&t, p, "NVIDIA H200", 130000));
  int stale = 1;
  char why[RT_GEMM_WHY_BYTES];
  ASSERT_OK(rt_gemm_table_read(&r, p, "NVIDIA H200", 130000, &stale, why));
  ASSERT(0, stale);
  ASSERT(2, r.n);
  for (int i = 0; i < 2; i++) {
    const RtGemmChoice *w = i ? &b : &a, *g = rt_gemm_table_find(&r, w->key);
    ASSERT_TRUE(g != NULL);
    if (!g)
      continue;
    ASSERT(0, memcmp(g->algo, w->algo, sizeof g->algo));
    ASSERT_NEAR(w->ms, g->ms, 1e-6);
    ASSERT_NEAR(w->ms_first, g->ms_first, 1e-6);
    ASSERT(8, g->cands);
    ASSERT(RT_GEMM_FILE, g->source);
  }
  /* another device or cuBLASLt: stale, no entries, the reason said */
  ASSERT_OK(rt_gemm_table_read(&r, p, "NVIDIA A100-SXM4-80GB", 130000, &stale, why));
  ASSERT(1, stale);
  ASSERT(0, r.n);
  ASSERT_TRUE(strstr(why, "NVIDIA H200") != NULL);
  ASSERT_OK(rt_gemm_table_read(&r, p, "NVIDIA H200", 120805, &stale, why));
  ASSERT(1, stale);
  ASSERT_TRUE(strstr(why, "130000") != NULL);
  /* a quote in the device's name cannot break the line */
  ASSERT_OK(rt_gemm_table_write(&t, p, "odd \"name\"", 1));
  ASSERT_OK(rt_gemm_table_read(&r, p, "odd \"name\"", 1, &stale, why));
  ASSERT(0, stale);
  ASSERT(2, r.n);
  /* a missing file: nothing, not an error */
  ASSERT_OK(rt_gemm_table_read(&r, at(dir, "none.algos"), "x", 1, &stale, why));
  ASSERT(0, stale);
  ASSERT(0, r.n);
  rt_gemm_table_free(&t);
  rt_gemm_table_free(&r);
}

/* A file with the header and the device line, then body. */
static void write_algos(const char *p, const char *body) {
  char buf[4096];
  snprintf(buf, sizeof buf,
           "# shardc GEMM algorithms (train --gemm-algos): test\n"
           "device \"GPU\" cublaslt 7\n%s", body);
  write_file(p, buf, strlen(buf));
}

static void test_bad(const char *dir) {
  const char *p = at(dir, "bad.algos");
  RtGemmTable r = {0};
  int stale = 0;
  char why[RT_GEMM_WHY_BYTES];
  /* not ours: an error (the driver must not overwrite it) */
  write_file(p, "step,loss\n1,4.2\n", 16);
  ASSERT_FAILS(RT_ERR_FORMAT, rt_gemm_table_read(&r, p, "GPU", 7, &stale, why),
               "is not a shardc GEMM algorithm file", "--gemm-algos");
  write_file(p, "", 0); /* empty: nothing to lose, rewritten */
  ASSERT_OK(rt_gemm_table_read(&r, p, "GPU", 7, &stale, why));
  ASSERT(1, stale);
  const char *good = "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 4 5 6 7 8 "
                     "ms 0.01 first 0.02 cands 3\n";
  write_algos(p, good);
  ASSERT_OK(rt_gemm_table_read(&r, p, "GPU", 7, &stale, why));
  ASSERT(0, stale);
  ASSERT(1, r.n);
  ASSERT(3, r.c[0].cands);
  ASSERT_TRUE(r.c[0].algo[7] == 8);
  /* ours but damaged: stale (time again, rewrite), the line named */
  const char *bad[] = {
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0\n",                            /* short key */
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 ms 1 first 1 cands 1\n",
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 4 5 6 7 zz ms 1 first 1 cands 1\n",
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 4 5 6 7 8 ms -1 first 1 cands 1\n",
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 4 5 6 7 8 ms 1 first 1 cands 1 x\n",
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 4 5 6 7 8 ms nan first 1 cands 1\n",
      "gemm 99999999999 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 1 2 3 4 5 6 7 8 ms 1 first 1 "
      "cands 1\n",
      "gemm 0 1 8 8 8 8 8 8 0 0 7 256 256 256 0 0 algo 11112222333344445 2 3 4 5 6 7 8 ms 1 "
      "first 1 cands 1\n",
      "garbage\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char body[1024];
    snprintf(body, sizeof body, "%s%s", good, bad[i]);
    write_algos(p, body);
    ASSERT_OK(rt_gemm_table_read(&r, p, "GPU", 7, &stale, why));
    ASSERT(1, stale);
    ASSERT(0, r.n);
    ASSERT_TRUE(strstr(why, "line 4") != NULL);
  }
  /* a bad device line; a header alone */
  write_file(p, "# shardc GEMM algorithms (train --gemm-algos)\ndevice GPU\n", 58);
  ASSERT_OK(rt_gemm_table_read(&r, p, "GPU", 7, &stale, why));
  ASSERT(1, stale);
  ASSERT_TRUE(strstr(why, "line 2") != NULL);
  write_file(p, "# shardc GEMM algorithms (train --gemm-algos)\n", 46);
  ASSERT_OK(rt_gemm_table_read(&r, p, "GPU", 7, &stale, why));
  ASSERT(1, stale);
  /* a line longer than the buffer */
  char big[3000];
  memset(big, '1', sizeof big - 2);
  big[sizeof big - 2] = '\n';
  big[sizeof big - 1] = 0;
  write_algos(p, big);
  ASSERT_OK(rt_gemm_table_read(&r, p, "GPU", 7, &stale, why));
  ASSERT(1, stale);
  ASSERT_TRUE(strstr(why, "longer") != NULL);
  /* a directory where the file would go: an I/O error, named */
  ASSERT_FAILS(RT_ERR_IO, rt_gemm_table_write(&r, dir, "GPU", 7), "cannot write");
  rt_gemm_table_free(&r);
}

/* Every rank runs the same algorithm for a shape: the file's or the lowest
 * rank's timed choice, else the heuristic's first. */
static void test_agree(void) {
  RtGemmTable all = {0}, out = {0};
  /* rank 0: shape 1 untimed, shape 2 timed; rank 1: shape 1 timed, shape 2
   * timed (another choice), shape 3 untimed; rank 2: shape 3 from the file */
  RtGemmChoice r0a = choice(1), r0b = choice(2), r1a = choice(1), r1b = choice(2), r1c = choice(3),
               r2c = choice(3);
  r0a.source = RT_GEMM_FIRST;
  r0a.algo[0] = 100;
  r1a.algo[0] = 101;
  r1b.algo[0] = 102;
  r1c.source = RT_GEMM_FIRST;
  r1c.algo[0] = 103;
  r2c.source = RT_GEMM_FILE;
  r2c.algo[0] = 104;
  const RtGemmChoice *seq[] = {&r0a, &r0b, &r1a, &r1b, &r1c, &r2c};
  rt_gemm_table_room(&all, 6); /* by hand: rt_gemm_table_add keeps one a key */
  for (int i = 0; i < 6; i++)
    all.c[i] = *seq[i];
  rt_gemm_table_agree(&out, &all);
  ASSERT(3, out.n);
  ASSERT_TRUE(rt_gemm_table_find(&out, choice(1).key)->algo[0] == 101); /* rank 1's timed */
  ASSERT_TRUE(rt_gemm_table_find(&out, choice(2).key)->algo[0] == r0b.algo[0]); /* rank 0's */
  ASSERT_TRUE(rt_gemm_table_find(&out, choice(3).key)->algo[0] == 104); /* the file's */
  ASSERT(RT_GEMM_FILE, rt_gemm_table_find(&out, choice(3).key)->source);
  /* nothing timed anywhere: the first rank's heuristic choice */
  all.n = 0;
  all.c[all.n++] = r1c;
  r1c.algo[0] = 999;
  all.c[all.n++] = r1c;
  rt_gemm_table_agree(&out, &all);
  ASSERT(1, out.n);
  ASSERT_TRUE(out.c[0].algo[0] == 103);
  rt_gemm_table_free(&all);
  rt_gemm_table_free(&out);
}

int main(void) {
  const char *dir = test_tmpdir();
  test_roundtrip(dir);
  test_bad(dir);
  test_agree();
  test_tmpdir_remove(dir);
  TEST_MAIN_END();
}
