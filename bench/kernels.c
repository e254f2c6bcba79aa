/* kernels.c — times libshardrt's f32 kernels at the sizes of a GPT with
 * d=512, 8 heads, seq 256, vocab 256 (bench/kernels.sh runs it next to the
 * same operations in PyTorch and prints the table).
 *
 * usage: bench_kernels THREADS [B] [REPS] [median|min]
 *        bench_kernels --corename     (the kernel set OpenBLAS picked)
 * Prints one "name<TAB>ms" line per kernel: the median (or the fastest) of
 * REPS timed calls after two warm-up calls. It only uses API that every
 * libshardrt version has, so the same program measures the library before
 * and after a change.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardrt.h"

/* The thread knobs, set directly (weak: the bench links with or without
 * OpenMP, against OpenBLAS or another BLAS). */
extern void openblas_set_num_threads(int) __attribute__((weak));
extern void omp_set_num_threads(int) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

enum { D = 512, HEADS = 8, T = 256, V = 256, LAYERS = 8 };

static int reps = 10, use_min;

/* BENCH_CLOCK=cpu: process CPU time instead of wall time, which a busy
 * machine does not inflate; meaningful for single-threaded runs only. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(clock_id, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef void (*BenchFn)(void *ctx);

/* Median time of fn(ctx) in ms; pre(ctx), untimed, runs before each call
 * (re-zeroing accumulated gradients, restoring in-place buffers). */
static void bench(const char *name, BenchFn fn, BenchFn pre, void *ctx) {
  double t[64];
  int n = reps < 64 ? reps : 64;
  for (int i = 0; i < 2; i++) {
    if (pre)
      pre(ctx);
    fn(ctx);
  }
  for (int i = 0; i < n; i++) {
    if (pre)
      pre(ctx);
    double t0 = now_ms();
    fn(ctx);
    t[i] = now_ms() - t0;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  printf("%s\t%.4f\n", name, use_min ? t[0] : med);
  fflush(stdout);
}

static float *randf(size_t n, double std, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(std * rt_rng_normal(seed, 5, i));
  return x;
}

static float *zerosf(size_t n) {
  float *x = calloc(n ? n : 1, sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return x;
}

/* ---- matmul ---- */

typedef struct {
  int N, C, OC, bias;
  float *x, *w, *b, *out, *dout, *dx, *dw, *db;
} Mm;

static void mm_fwd(void *p) {
  Mm *m = p;
  rt_matmul_forward_f32(m->out, m->x, m->w, m->bias ? m->b : NULL, m->N, m->C, m->OC);
}

static void mm_bwd(void *p) {
  Mm *m = p;
  rt_matmul_backward_f32(m->dx, m->dw, m->bias ? m->db : NULL, m->dout, m->x, m->w, m->N,
                         m->C, m->OC);
}

static void matmul(const char *name, int N, int C, int OC, int bias) {
  Mm m = {N, C, OC, bias, randf((size_t)N * C, 1, 1), randf((size_t)OC * C, 0.02, 2),
          randf(OC, 0.1, 3), zerosf((size_t)N * OC), randf((size_t)N * OC, 1, 4),
          zerosf((size_t)N * C), zerosf((size_t)OC * C), zerosf(OC)};
  char nm[96];
  snprintf(nm, sizeof nm, "matmul %s fwd", name);
  bench(nm, mm_fwd, NULL, &m);
  snprintf(nm, sizeof nm, "matmul %s bwd", name);
  bench(nm, mm_bwd, NULL, &m); // accumulates; the values do not matter
  free(m.x), free(m.w), free(m.b), free(m.out), free(m.dout), free(m.dx), free(m.dw),
      free(m.db);
}

/* ---- attention ---- */

typedef struct {
  int B, H, causal;
  float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
} At;

static void at_fwd(void *p) {
  At *a = p;
  rt_attention_forward_f32(a->out, a->lse, a->q, a->k, a->v, a->B, T, a->H, a->H, D / HEADS,
                           a->causal);
}

static void at_bwd(void *p) {
  At *a = p;
  rt_attention_backward_f32(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->out, a->lse,
                            a->B, T, a->H, a->H, D / HEADS, a->causal);
}

static void attention(int B) {
  size_t n = (size_t)B * T * D;
  At a = {B,          HEADS,       1,         randf(n, 1, 11), randf(n, 1, 12),
          randf(n, 1, 13), zerosf(n), zerosf((size_t)B * HEADS * T), randf(n, 1, 14),
          zerosf(n),  zerosf(n),   zerosf(n)};
  bench("attention fwd", at_fwd, NULL, &a);
  bench("attention bwd", at_bwd, NULL, &a);
  free(a.q), free(a.k), free(a.v), free(a.out), free(a.lse), free(a.dout), free(a.dq),
      free(a.dk), free(a.dv);
}

/* ---- layernorm ---- */

typedef struct {
  int N, C;
  float *x, *w, *b, *out, *mean, *rstd, *dout, *dx, *dw, *db;
} Ln;

static void ln_fwd(void *p) {
  Ln *l = p;
  rt_layernorm_forward_f32(l->out, l->mean, l->rstd, l->x, l->w, l->b, l->N, l->C);
}

static void ln_bwd(void *p) {
  Ln *l = p;
  rt_layernorm_backward_f32(l->dx, l->dw, l->db, l->dout, l->x, l->w, l->mean, l->rstd,
                            l->N, l->C);
}

static void layernorm(int N) {
  size_t n = (size_t)N * D;
  Ln l = {N,         D,         randf(n, 1, 21), randf(D, 1, 22), randf(D, 1, 23),
          zerosf(n), zerosf(N), zerosf(N),       randf(n, 1, 24), zerosf(n),
          zerosf(D), zerosf(D)};
  bench("layernorm fwd", ln_fwd, NULL, &l);
  bench("layernorm bwd", ln_bwd, NULL, &l);
  free(l.x), free(l.w), free(l.b), free(l.out), free(l.mean), free(l.rstd), free(l.dout),
      free(l.dx), free(l.dw), free(l.db);
}

/* ---- gelu ---- */

typedef struct {
  size_t n;
  float *x, *out, *dout, *dx;
} Ge;

static void ge_fwd(void *p) {
  Ge *g = p;
  rt_gelu_forward_f32(g->out, g->x, g->n);
}

static void ge_bwd(void *p) {
  Ge *g = p;
  rt_gelu_backward_f32(g->dx, g->x, g->dout, g->n);
}

static void gelu(int N) {
  size_t n = (size_t)N * 4 * D;
  Ge g = {n, randf(n, 1, 31), zerosf(n), randf(n, 1, 32), zerosf(n)};
  bench("gelu fwd", ge_fwd, NULL, &g);
  bench("gelu bwd", ge_bwd, NULL, &g);
  free(g.x), free(g.out), free(g.dout), free(g.dx);
}

/* ---- cross-entropy: the backward is in place, as generated code uses it ---- */

typedef struct {
  int N;
  float *logits, *work, *lse;
  int32_t *tgt;
} Ce;

static void ce_fwd(void *p) {
  Ce *c = p;
  double loss;
  int nv;
  rt_crossentropy_forward_f32(&loss, &nv, NULL, c->lse, c->logits, c->tgt, c->N, V);
}

static void ce_restore(void *p) {
  Ce *c = p;
  memcpy(c->work, c->logits, (size_t)c->N * V * sizeof(float));
}

static void ce_bwd(void *p) {
  Ce *c = p;
  rt_crossentropy_backward_f32(c->work, c->work, c->lse, c->tgt, c->N, V, 1.0, c->N);
}

static void crossentropy(int N) {
  size_t n = (size_t)N * V;
  Ce c = {N, randf(n, 2, 41), zerosf(n), zerosf(N), malloc((size_t)N * sizeof(int32_t))};
  for (int i = 0; i < N; i++)
    c.tgt[i] = (int32_t)(rt_rng_u64(7, 7, (uint64_t)i) % V);
  bench("cross_entropy fwd", ce_fwd, NULL, &c);
  bench("cross_entropy bwd", ce_bwd, ce_restore, &c);
  free(c.logits), free(c.work), free(c.lse), free(c.tgt);
}

/* ---- embedding ---- */

typedef struct {
  int N;
  int32_t *tok;
  float *wte, *out, *dout, *dwte;
} Em;

static void em_fwd(void *p) {
  Em *e = p;
  rt_embedding_forward_f32(e->out, e->tok, e->wte, e->N, V, D);
}

static void em_bwd(void *p) {
  Em *e = p;
  rt_embedding_backward_f32(e->dwte, e->dout, e->tok, e->N, D);
}

static void embedding(int N) {
  Em e = {N, malloc((size_t)N * sizeof(int32_t)), randf((size_t)V * D, 1, 51),
          zerosf((size_t)N * D), randf((size_t)N * D, 1, 52), zerosf((size_t)V * D)};
  for (int i = 0; i < N; i++)
    e.tok[i] = (int32_t)(rt_rng_u64(8, 8, (uint64_t)i) % V);
  bench("embedding fwd", em_fwd, NULL, &e);
  bench("embedding bwd", em_bwd, NULL, &e);
  free(e.tok), free(e.wte), free(e.out), free(e.dout), free(e.dwte);
}

/* ---- adamw over every parameter of the model, one flat buffer ---- */

typedef struct {
  size_t n;
  float *p, *g, *m, *v;
  long t;
} Ad;

static void ad_step(void *p) {
  Ad *a = p;
  rt_adamw_step_f32(a->p, a->g, a->m, a->v, a->n, 1e-3, 0.9, 0.95, 1e-8, 0.1, ++a->t, 1.0);
}

static void adamw(void) {
  // per layer: qkv, proj, fc, fcproj weights+biases, two layernorms
  size_t per_layer = 12 * (size_t)D * D + 3 * D + D + 4 * D + D + 4 * D;
  size_t n = LAYERS * per_layer + (size_t)V * D + (size_t)T * D + 2 * D;
  Ad a = {n, randf(n, 0.02, 61), randf(n, 0.01, 62), zerosf(n), zerosf(n), 0};
  bench("adamw (all params)", ad_step, NULL, &a);
  free(a.p), free(a.g), free(a.m), free(a.v);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--corename") == 0) {
    printf("%s\n", openblas_get_corename ? openblas_get_corename() : "none");
    return 0;
  }
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int B = argc > 2 ? atoi(argv[2]) : 4;
  reps = argc > 3 ? atoi(argv[3]) : 10;
  use_min = argc > 4 && strcmp(argv[4], "min") == 0;
  const char *clk = getenv("BENCH_CLOCK");
  if (clk && strcmp(clk, "cpu") == 0)
    clock_id = CLOCK_PROCESS_CPUTIME_ID;
  if (threads < 1 || B < 1 || reps < 1) {
    fprintf(stderr, "usage: bench_kernels THREADS [B] [REPS] [median|min]\n");
    return 2;
  }
  if (openblas_set_num_threads)
    openblas_set_num_threads(threads);
  if (omp_set_num_threads)
    omp_set_num_threads(threads);
  int N = B * T;
  matmul("qkv", N, D, 3 * D, 1);
  matmul("attn proj", N, D, D, 1);
  matmul("mlp fc", N, D, 4 * D, 1);
  matmul("mlp proj", N, 4 * D, D, 1);
  matmul("lm head", N, D, V, 0);
  attention(B);
  layernorm(N);
  gelu(N);
  crossentropy(N);
  embedding(N);
  adamw();
  return 0;
}
