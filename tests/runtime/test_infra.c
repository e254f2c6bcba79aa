/* test_infra.c — arena, random numbers and init, lr schedule, clipping and
 * norms, dropout masks, argument errors, metrics log, progress line, timers. */
#include "rt_test.h"

static void test_arena(void) {
  RtArena *a = rt_arena_create(1000);
  ASSERT_TRUE(a != NULL);
  ASSERT(0, (uintptr_t)a->base % 64);
  ASSERT(0, rt_arena_peak(a));
  ASSERT(0, a->base[999]); // zero-filled
  unsigned char *p = rt_arena_at(a, 128, 256);
  ASSERT_TRUE(p == a->base + 128);
  ASSERT(384, rt_arena_peak(a));
  rt_arena_at(a, 0, 64); // lower uses do not lower the peak
  ASSERT(384, rt_arena_peak(a));
  ASSERT_TRUE(rt_arena_at(a, 900, 100) != NULL);
  ASSERT(1000, rt_arena_peak(a));
  rt_clear_error();
  ASSERT_TRUE(rt_arena_at(a, 901, 100) == NULL);
  ASSERT_TRUE(strstr(rt_last_error(), "offset 901") != NULL);
  ASSERT_TRUE(rt_arena_at(a, (size_t)-8, 16) == NULL); // no wraparound
  ASSERT(1000, rt_arena_peak(a));
  rt_arena_destroy(a);

  a = rt_arena_create(256);
  void *x = rt_alloc(a, 10, 8), *y = rt_alloc(a, 10, 64);
  ASSERT_TRUE(x == a->base);
  ASSERT_TRUE(y == a->base + 64);
  ASSERT(74, rt_arena_peak(a));
  ASSERT_TRUE(rt_alloc(a, 200, 1) == NULL);
  ASSERT_TRUE(rt_alloc(a, 8, 3) == NULL); // not a power of two
  ASSERT_TRUE(rt_alloc(a, 182, 1) != NULL);
  ASSERT(256, rt_arena_peak(a));
  rt_arena_destroy(a);

#ifndef __SANITIZE_ADDRESS__ // ASan aborts on impossible allocations by default
  rt_clear_error();
  ASSERT_TRUE(rt_arena_create((size_t)1 << 62) == NULL);
  ASSERT_TRUE(strstr(rt_last_error(), "cannot allocate") != NULL);
#endif
  ASSERT_TRUE(rt_peak_rss() > 1000000); // a process is at least a megabyte

  /* a device arena's host mirror: 64 GiB mapped (more than this machine
   * holds), zero-filled, and only the pages written take memory */
  size_t rss0 = rt_peak_rss(), big = (size_t)64 << 30;
  RtArena *m = rt_arena_create_mirror(big);
  ASSERT_TRUE(m != NULL);
  if (m) {
    ASSERT(0, m->base[0]);
    ASSERT(0, m->base[big - 1]);
    memset(m->base + (big >> 1), 7, (size_t)1 << 20);
    ASSERT(7, m->base[(big >> 1) + 12345]);
    ASSERT_TRUE(rt_arena_at(m, big - 16, 16) != NULL);
    ASSERT_TRUE(rt_peak_rss() < rss0 + ((size_t)256 << 20));
    rt_arena_destroy(m);
  }
}

static void test_rng(void) {
  // fixed values: the generator is part of the checkpoint-reproducibility contract
  ASSERT_TRUE(rt_rng_u64(0, 0, 0) == rt_rng_u64(0, 0, 0));
  ASSERT_TRUE(rt_rng_u64(1, 0, 0) != rt_rng_u64(0, 0, 0));
  ASSERT_TRUE(rt_rng_u64(0, 1, 0) != rt_rng_u64(0, 0, 0));
  ASSERT_TRUE(rt_rng_u64(0, 0, 1) != rt_rng_u64(0, 0, 0));
  // moments of 200k normals and uniforms
  double s = 0, s2 = 0, u = 0;
  int n = 200000;
  for (int i = 0; i < n; i++) {
    double z = rt_rng_normal(5, 9, (uint64_t)i);
    s += z, s2 += z * z;
    u += rt_rng_uniform(5, 9, (uint64_t)i);
  }
  ASSERT_NEAR(0, s / n, 0.01);
  ASSERT_NEAR(1, s2 / n, 0.01);
  ASSERT_NEAR(0.5, u / n, 0.005);

  // init of a tensor does not depend on how it is sharded
  float whole[1000], shard[1000];
  rt_init_normal_f32(whole, 1000, 0.02, 1234, 7, 0);
  for (int r = 0; r < 4; r++)
    rt_init_normal_f32(shard + 250 * r, 250, 0.02, 1234, 7, 250 * (uint64_t)r);
  ASSERT(0, memcmp(whole, shard, sizeof whole));
  rt_init_normal_f32(shard, 1000, 0.02, 1234, 8, 0); // another tensor differs
  ASSERT_TRUE(memcmp(whole, shard, sizeof whole) != 0);
  double st = 0;
  for (int i = 0; i < 1000; i++)
    st += (double)whole[i] * whole[i];
  ASSERT_NEAR(0.02, sqrt(st / 1000), 0.002);
  rt_init_uniform_f32(shard, 1000, -0.5, 0.25, 1, 2, 3);
  int inrange = 1;
  for (int i = 0; i < 1000; i++)
    inrange &= shard[i] >= -0.5f && shard[i] < 0.25f;
  ASSERT_TRUE(inrange);
  rt_init_const_f32(shard, 1000, 1.5);
  ASSERT_NEAR(1.5, shard[999], 0);
}

static void test_dropout(void) {
  size_t n = 20000;
  float *x = xcalloc(n, sizeof(float)), *y = xcalloc(n, sizeof(float)),
        *z = xcalloc(n, sizeof(float));
  for (size_t i = 0; i < n; i++)
    x[i] = 1;
  rt_dropout_forward_f32(y, x, n, 0.1, 42, 3, 0);
  size_t zeros = 0;
  for (size_t i = 0; i < n; i++) {
    zeros += y[i] == 0;
    if (y[i] != 0 && fabsf(y[i] - 1 / 0.9f) > 1e-6f)
      zeros = n; // kept values are scaled by 1/(1-p)
  }
  ASSERT_NEAR(0.1, (double)zeros / n, 0.01);
  // reproducible, sharding-independent, step-dependent
  rt_dropout_forward_f32(z, x, n / 2, 0.1, 42, 3, 0);
  rt_dropout_forward_f32(z + n / 2, x, n / 2, 0.1, 42, 3, n / 2);
  ASSERT(0, memcmp(y, z, n * sizeof(float)));
  rt_dropout_forward_f32(z, x, n, 0.1, 42, 4, 0);
  ASSERT_TRUE(memcmp(y, z, n * sizeof(float)) != 0);
  // p = 0 is a copy, in place too; p = 1 drops everything
  rt_dropout_forward_f32(z, x, n, 0, 42, 3, 0);
  ASSERT(0, memcmp(x, z, n * sizeof(float)));
  rt_dropout_forward_f32(z, z, n, 0, 42, 3, 0);
  ASSERT(0, memcmp(x, z, n * sizeof(float)));
  rt_dropout_forward_f32(z, x, n, 1, 42, 3, 0);
  ASSERT_NEAR(0, rt_sumsq_f32(z, n), 0);
  free(x), free(y), free(z);
}

static void test_lr_and_norms(void) {
  // warmup (0-based step) then cosine to min_lr at total_steps
  ASSERT_NEAR(6e-4 * 1 / 10, rt_lr(0, 6e-4, 10, 100, 0.1, RT_LR_COSINE), 1e-15);
  ASSERT_NEAR(6e-4 * 10 / 10, rt_lr(9, 6e-4, 10, 100, 0.1, RT_LR_COSINE), 1e-15);
  ASSERT_NEAR(6e-4, rt_lr(10, 6e-4, 10, 100, 0.1, RT_LR_COSINE), 1e-15);
  ASSERT_NEAR(6e-5 + 0.5 * (6e-4 - 6e-5), rt_lr(55, 6e-4, 10, 100, 0.1, RT_LR_COSINE), 1e-15);
  ASSERT_NEAR(6e-5, rt_lr(100, 6e-4, 10, 100, 0.1, RT_LR_COSINE), 1e-15);
  ASSERT_NEAR(6e-5, rt_lr(500, 6e-4, 10, 100, 0.1, RT_LR_COSINE), 1e-15);
  ASSERT_NEAR(6e-4, rt_lr(0, 6e-4, 0, 100, 0.0, RT_LR_CONSTANT), 0);
  ASSERT_NEAR(3e-4, rt_lr(1, 6e-4, 4, 100, 0.0, RT_LR_CONSTANT), 1e-15);
  ASSERT_NEAR(6e-4, rt_lr(99, 6e-4, 4, 100, 0.0, RT_LR_CONSTANT), 0);
  // clip: PyTorch's clip_grad_norm_ factor
  ASSERT_NEAR(1.0, rt_clip_scale(0.5, 1.0), 0);
  ASSERT_NEAR(1.0 / (4.0 + 1e-6), rt_clip_scale(4.0, 1.0), 1e-15);
  ASSERT_NEAR(1.0, rt_clip_scale(4.0, 0.0), 0);
  // global norm over a list of buffers
  float a[3] = {1, 2, 2}, b[2] = {4, 0};
  const float *bufs[2] = {a, b};
  size_t ns[2] = {3, 2};
  ASSERT_NEAR(25.0, rt_sumsq_list_f32(bufs, ns, 2), 0);
  // SGD with momentum against the PyTorch recurrence, by hand
  double p = 1.0, g = 0.5, mom = 0;
  rt_sgd_step_f64(&p, &g, &mom, 1, 0.1, 0.9, 0.01, 1.0); // d = 0.5 + 0.01·1
  ASSERT_NEAR(0.51, mom, 1e-15);
  ASSERT_NEAR(1.0 - 0.1 * 0.51, p, 1e-15);
  double p_before = p;
  rt_sgd_step_f64(&p, &g, &mom, 1, 0.1, 0.9, 0.01, 2.0); // grad_scale doubles g
  double d = 1.0 + 0.01 * p_before;
  ASSERT_NEAR(0.9 * 0.51 + d, mom, 1e-15);
  ASSERT_NEAR(p_before - 0.1 * (0.9 * 0.51 + d), p, 1e-15);
  double q = 2.0;
  rt_sgd_step_f64(&q, &g, NULL, 1, 0.1, 0.0, 0.0, 1.0);
  ASSERT_NEAR(1.95, q, 1e-15);
}

static void test_errors(void) {
  float wte[4 * 3] = {0}, out[2 * 3];
  int32_t bad[2] = {1, 4};
  ASSERT_FAILS(RT_ERR_ARG, rt_embedding_forward_f32(out, bad, wte, 2, 4, 3), "token 4",
               "position 1", "[0,4)");
  float logits[2 * 4] = {0};
  int32_t tgt[2] = {0, -7};
  double loss;
  int nv;
  ASSERT_FAILS(RT_ERR_ARG, rt_crossentropy_forward_f32(&loss, &nv, NULL, NULL, logits, tgt, 2, 4),
               "target -7", "row 1");
  int32_t ign[2] = {RT_IGNORE_INDEX, RT_IGNORE_INDEX};
  ASSERT_OK(rt_crossentropy_forward_f32(&loss, &nv, NULL, NULL, logits, ign, 2, 4));
  ASSERT(0, nv);
  ASSERT_NEAR(0, loss, 0);
  ASSERT(RT_ERR_IO, rt_errorf(RT_ERR_IO, "x %d", 5));
  ASSERT_STR("x 5", rt_last_error());
  rt_clear_error();
  ASSERT_STR("", rt_last_error());
  /* a message longer than the buffer ends in "…", never cut silently, and
   * never in the middle of a UTF-8 character */
  static char longmsg[6000];
  for (size_t i = 0; i + 2 < sizeof longmsg; i += 2)
    memcpy(longmsg + i, "\xc3\xa9", 2); /* é */
  rt_errorf(RT_ERR_IO, "start: %s", longmsg); /* odd: the cut falls inside an é */
  size_t n = strlen(rt_last_error());
  ASSERT_TRUE(n > 4000 && n < 4096);
  ASSERT_TRUE(!strncmp(rt_last_error(), "start: \xc3\xa9", 9));
  ASSERT_STR("\xc3\xa9\xe2\x80\xa6", rt_last_error() + n - 5); /* "é…" */
  rt_errorf(RT_ERR_IO, "%4095s", "fits");
  ASSERT(4095, strlen(rt_last_error()));
  ASSERT_TRUE(!strstr(rt_last_error(), "\xe2\x80\xa6"));
  rt_errorf(RT_ERR_IO, "%4096s", "cut");
  ASSERT_TRUE(strstr(rt_last_error(), "\xe2\x80\xa6") != NULL);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static void test_metrics(const char *dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  RtMetrics m;
  ASSERT_OK(rt_metrics_open(&m, path, 0));
  ASSERT_OK(rt_metrics_log(&m, 1, 4.17, 0.0006, 12.3, 10400, 0.0421, 0.421));
  ASSERT_OK(rt_metrics_log(&m, 2, 3.1415926535, 6e-4 / 7, 9.87654321, 1234567.8, 312.34567, 0.31583));
  ASSERT_OK(rt_metrics_log(&m, 3, NAN, 1e-3, 1, INFINITY, NAN, NAN));
  ASSERT_OK(rt_metrics_close(&m));
  ASSERT_STR("{\"step\":1,\"loss\":4.17,\"lr\":0.0006,\"step_ms\":12.3,\"tokens_per_s\":10400,"
             "\"model_tflops_per_device\":0.0421,\"mfu\":0.421}\n"
             "{\"step\":2,\"loss\":3.14159265,\"lr\":8.57143e-05,\"step_ms\":9.87654,\"tokens_per_s\":1234568,"
             "\"model_tflops_per_device\":312.3,\"mfu\":0.3158}\n"
             "{\"step\":3,\"loss\":null,\"lr\":0.001,\"step_ms\":1,\"tokens_per_s\":null,"
             "\"model_tflops_per_device\":null,\"mfu\":null}\n",
             slurp(path));
  ASSERT_OK(rt_metrics_open(&m, path, 1)); // append keeps the old lines
  ASSERT_OK(rt_metrics_log(&m, 4, 2.5, 0, 0, 0, 0, 0));
  ASSERT_OK(rt_metrics_close(&m));
  ASSERT_TRUE(strstr(slurp(path), "\"step\":1,") && strstr(slurp(path), "{\"step\":4,\"loss\":2.5,"));
  ASSERT_OK(rt_metrics_open(&m, NULL, 0)); // logging off
  ASSERT_OK(rt_metrics_log(&m, 1, 1, 1, 1, 1, 1, 1));
  ASSERT_OK(rt_metrics_close(&m));
  snprintf(path, sizeof path, "%s/no/such/dir/log.jsonl", dir);
  ASSERT_FAILS(RT_ERR_IO, rt_metrics_open(&m, path, 0), "no/such/dir/log.jsonl",
               "cannot open metrics log");
}

static void test_progress(const char *dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/progress.txt", dir);
  FILE *f = fopen(path, "w");
  RtProgress p;
  rt_progress_init(&p, 10, 4, 0);
  p.out = f, p.tty = 0; // a log file: a line every 4 steps and at the end
  for (int s = 1; s <= 10; s++)
    rt_progress_step(&p, s, 4.0 / s, 12345, 0.0421, 0.421);
  rt_progress_done(&p);
  fclose(f);
  char *txt = slurp(path);
  int lines = 0;
  for (char *c = txt; *c; c++)
    lines += *c == '\n';
  ASSERT(3, lines); // steps 4, 8, 10
  ASSERT_TRUE(strstr(txt, "step 4/10 | loss 1.0000 | 12.3k tok/s | 42.1 GFLOP/s/dev | MFU 42.1% | ETA ") == txt);
  ASSERT_TRUE(strstr(txt, "step 10/10 | loss 0.4000") != NULL);
  ASSERT_TRUE(strchr(txt, '\r') == NULL);

  f = fopen(path, "w");
  rt_progress_init(&p, 3, 100, 0);
  p.out = f, p.tty = 1; // a terminal: one line redrawn with \r every step
  for (int s = 1; s <= 2; s++)
    rt_progress_step(&p, s, 1.0, 2e6, 312.3, 0.3158);
  rt_progress_done(&p);
  fclose(f);
  txt = slurp(path);
  ASSERT_TRUE(strncmp(txt, "\rstep 1/3 | loss 1.0000 | 2.00M tok/s | 312.3 TFLOP/s/dev | MFU 31.6% | ETA ?\033[K\rstep 2/3", 89) == 0);
  ASSERT('\n', txt[strlen(txt) - 1]);

  f = fopen(path, "w");
  rt_progress_init(&p, 1, 1, 0);
  p.out = f, p.tty = 0; // no FLOP count or no peak: those fields are left out
  rt_progress_step(&p, 1, 1.0, 12345, NAN, NAN);
  fclose(f);
  ASSERT_TRUE(strstr(slurp(path), "step 1/1 | loss 1.0000 | 12.3k tok/s | ETA ") == slurp(path));

  f = fopen(path, "w");
  rt_progress_init(&p, 3, 1, 1);
  p.out = f; // quiet prints nothing
  rt_progress_step(&p, 1, 1.0, 1, NAN, NAN);
  rt_progress_done(&p);
  fclose(f);
  ASSERT_STR("", slurp(path));
}

static void test_timer(void) {
  double t0 = rt_now();
  usleep(20000);
  double ms = rt_ms_since(t0);
  ASSERT_TRUE(ms >= 19.0 && ms < 2000.0);
  ASSERT_TRUE(rt_now() >= t0);
}

int main(void) {
  const char *dir = test_tmpdir();
  test_arena();
  test_rng();
  test_dropout();
  test_lr_and_norms();
  test_errors();
  test_metrics(dir);
  test_progress(dir);
  test_timer();
  test_tmpdir_remove(dir);
  TEST_MAIN_END();
}
