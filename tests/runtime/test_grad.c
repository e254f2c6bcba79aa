/* test_grad.c — every kernel's backward against central finite differences
 * in fp64. The loss is L = Σ out·w for a random w (so dout = w). Gradient
 * buffers start at ACC, not 0, which also checks that backward accumulates. */
#include "rt_test.h"

#define ACC 0.375

static double *vec(size_t n, uint64_t seed) {
  double *x = xcalloc(n, sizeof *x);
  randn64(x, n, 1.0, seed);
  return x;
}

static double *accbuf(size_t n) {
  double *g = xcalloc(n, sizeof *g);
  for (size_t i = 0; i < n; i++)
    g[i] = ACC;
  return g;
}

static void unacc(double *g, size_t n) {
  for (size_t i = 0; i < n; i++)
    g[i] -= ACC;
}

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

/* ---- matmul ---- */

typedef struct {
  int N, C, OC;
  double *x, *w, *b, *dout, *out;
} MatmulCtx;

static double matmul_loss(void *p) {
  MatmulCtx *c = p;
  rt_matmul_forward_f64(c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
  return dot(c->out, c->dout, (size_t)c->N * c->OC);
}

static void test_matmul(int bias) {
  MatmulCtx c = {.N = 5, .C = 7, .OC = 4};
  size_t nx = 5 * 7, nw = 4 * 7, no = 5 * 4;
  c.x = vec(nx, 1), c.w = vec(nw, 2), c.b = bias ? vec(4, 3) : NULL, c.dout = vec(no, 4);
  c.out = xcalloc(no, sizeof(double));
  double *dx = accbuf(nx), *dw = accbuf(nw), *db = accbuf(4);
  rt_matmul_backward_f64(dx, dw, bias ? db : NULL, c.dout, c.x, c.w, c.N, c.C, c.OC);
  unacc(dx, nx), unacc(dw, nw), unacc(db, 4);
  FD_CHECK("matmul dinp", matmul_loss, &c, c.x, nx, dx, 1000);
  FD_CHECK("matmul dweight", matmul_loss, &c, c.w, nw, dw, 1000);
  if (bias)
    FD_CHECK("matmul dbias", matmul_loss, &c, c.b, 4, db, 1000);
  else
    for (int i = 0; i < 4; i++)
      ASSERT_NEAR(0, db[i], 0); // NULL dbias is skipped
  free(c.x), free(c.w), free(c.b), free(c.dout), free(c.out), free(dx), free(dw), free(db);
}

/* ---- layernorm / rmsnorm ---- */

typedef struct {
  int N, C, rms;
  double *x, *w, *b, *dout, *out, *mean, *rstd;
} NormCtx;

static double norm_loss(void *p) {
  NormCtx *c = p;
  if (c->rms)
    rt_rmsnorm_forward_f64(c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-6);
  else
    rt_layernorm_forward_f64(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C);
  return dot(c->out, c->dout, (size_t)c->N * c->C);
}

static void test_norm(int rms) {
  NormCtx c = {.N = 6, .C = 9, .rms = rms};
  size_t n = 6 * 9;
  c.x = vec(n, 11), c.w = vec(9, 12), c.b = vec(9, 13), c.dout = vec(n, 14);
  for (size_t i = 0; i < n; i++) // a non-zero mean per row exercises the centering
    c.x[i] += 0.5 * (double)(i / 9);
  c.out = xcalloc(n, sizeof(double));
  c.mean = xcalloc(6, sizeof(double)), c.rstd = xcalloc(6, sizeof(double));
  norm_loss(&c);
  double *dx = accbuf(n), *dw = accbuf(9), *db = accbuf(9);
  if (rms)
    rt_rmsnorm_backward_f64(dx, dw, c.dout, c.x, c.w, c.rstd, c.N, c.C);
  else
    rt_layernorm_backward_f64(dx, dw, db, c.dout, c.x, c.w, c.mean, c.rstd, c.N, c.C);
  unacc(dx, n), unacc(dw, 9), unacc(db, 9);
  FD_CHECK(rms ? "rmsnorm dinp" : "layernorm dinp", norm_loss, &c, c.x, n, dx, 1000);
  FD_CHECK(rms ? "rmsnorm dweight" : "layernorm dweight", norm_loss, &c, c.w, 9, dw, 1000);
  if (!rms)
    FD_CHECK("layernorm dbias", norm_loss, &c, c.b, 9, db, 1000);
  free(c.x), free(c.w), free(c.b), free(c.dout), free(c.out), free(c.mean), free(c.rstd);
  free(dx), free(dw), free(db);
}

/* ---- pointwise activations ---- */

typedef struct {
  int kind; /* 0 gelu, 1 relu, 2 silu */
  size_t n;
  double *x, *dout, *out;
} ActCtx;

static void act_fwd(ActCtx *c) {
  if (c->kind == 0)
    rt_gelu_forward_f64(c->out, c->x, c->n);
  else if (c->kind == 1)
    rt_relu_forward_f64(c->out, c->x, c->n);
  else
    rt_silu_forward_f64(c->out, c->x, c->n);
}

static double act_loss(void *p) {
  ActCtx *c = p;
  act_fwd(c);
  return dot(c->out, c->dout, c->n);
}

static void test_act(int kind) {
  static const char *names[] = {"gelu", "relu", "silu"};
  ActCtx c = {.kind = kind, .n = 64};
  c.x = vec(c.n, 21), c.dout = vec(c.n, 22), c.out = xcalloc(c.n, sizeof(double));
  for (size_t i = 0; i < c.n; i++) { // spread out, and away from relu's kink
    c.x[i] *= 2.5;
    if (fabs(c.x[i]) < 1e-3)
      c.x[i] = 0.5;
  }
  double *dx = accbuf(c.n);
  if (kind == 0)
    rt_gelu_backward_f64(dx, c.x, c.dout, c.n);
  else if (kind == 1)
    rt_relu_backward_f64(dx, c.x, c.dout, c.n);
  else
    rt_silu_backward_f64(dx, c.x, c.dout, c.n);
  unacc(dx, c.n);
  char what[64];
  snprintf(what, sizeof what, "%s dinp", names[kind]);
  FD_CHECK(what, act_loss, &c, c.x, c.n, dx, 1000);
  // in place (out == inp) gives the same values
  act_fwd(&c);
  double *y = xcalloc(c.n, sizeof(double)), *xs = c.x, *keep = c.out;
  memcpy(y, c.x, c.n * sizeof(double));
  c.x = c.out = y;
  act_fwd(&c);
  CHECK_CLOSE64("in-place activation", y, keep, c.n, 0, 0);
  c.x = xs, c.out = keep;
  free(c.x), free(c.dout), free(c.out), free(dx), free(y);
}

/* ---- swiglu, both layouts ---- */

typedef struct {
  int N, C, ld;
  double *a, *b, *dout, *out;
} SwiCtx;

static double swi_loss(void *p) {
  SwiCtx *c = p;
  rt_swiglu_forward_f64(c->out, c->a, c->b, c->N, c->C, c->ld);
  return dot(c->out, c->dout, (size_t)c->N * c->C);
}

static void test_swiglu(int fused) {
  int N = 4, C = 6;
  if (fused) {
    double *inp = vec((size_t)N * 2 * C, 31), *dinp = accbuf((size_t)N * 2 * C);
    SwiCtx c = {N, C, 2 * C, inp, inp + C, vec((size_t)N * C, 32),
                xcalloc((size_t)N * C, sizeof(double))};
    rt_swiglu_backward_f64(dinp, dinp + C, c.dout, c.a, c.b, N, C, 2 * C);
    unacc(dinp, (size_t)N * 2 * C);
    FD_CHECK("swiglu fused (N,2C) dinp", swi_loss, &c, inp, (size_t)N * 2 * C, dinp, 1000);
    free(inp), free(dinp), free(c.dout), free(c.out);
  } else {
    size_t n = (size_t)N * C;
    SwiCtx c = {N, C, C, vec(n, 33), vec(n, 34), vec(n, 35), xcalloc(n, sizeof(double))};
    double *da = accbuf(n), *db = accbuf(n);
    rt_swiglu_backward_f64(da, db, c.dout, c.a, c.b, N, C, C);
    unacc(da, n), unacc(db, n);
    FD_CHECK("swiglu da", swi_loss, &c, c.a, n, da, 1000);
    FD_CHECK("swiglu db", swi_loss, &c, c.b, n, db, 1000);
    free(c.a), free(c.b), free(c.dout), free(c.out), free(da), free(db);
  }
}

/* ---- softmax ---- */

typedef struct {
  int N, C;
  double *x, *dout, *out;
} SmCtx;

static double sm_loss(void *p) {
  SmCtx *c = p;
  rt_softmax_forward_f64(c->out, c->x, c->N, c->C);
  return dot(c->out, c->dout, (size_t)c->N * c->C);
}

static void test_softmax(void) {
  SmCtx c = {5, 8, vec(40, 41), vec(40, 42), xcalloc(40, sizeof(double))};
  sm_loss(&c);
  double *dx = accbuf(40);
  rt_softmax_backward_f64(dx, c.dout, c.out, c.N, c.C);
  unacc(dx, 40);
  FD_CHECK("softmax dinp", sm_loss, &c, c.x, 40, dx, 1000);
  free(c.x), free(c.dout), free(c.out), free(dx);
}

/* ---- dropout ---- */

typedef struct {
  size_t n;
  double p;
  double *x, *dout, *out;
} DropCtx;

static double drop_loss(void *q) {
  DropCtx *c = q;
  rt_dropout_forward_f64(c->out, c->x, c->n, c->p, 99, 7, 1000);
  return dot(c->out, c->dout, c->n);
}

static void test_dropout(double p) {
  DropCtx c = {50, p, vec(50, 51), vec(50, 52), xcalloc(50, sizeof(double))};
  double *dx = accbuf(50);
  rt_dropout_backward_f64(dx, c.dout, c.n, p, 99, 7, 1000);
  unacc(dx, 50);
  FD_CHECK(p ? "dropout dinp" : "dropout p=0 dinp", drop_loss, &c, c.x, 50, dx, 1000);
  free(c.x), free(c.dout), free(c.out), free(dx);
}

/* ---- embedding and positional ---- */

typedef struct {
  int B, T, V, C, t0;
  int32_t *tok;
  double *wte, *wpe, *x, *dout, *out;
} EmbCtx;

static double emb_loss(void *p) {
  EmbCtx *c = p;
  int N = c->B * c->T;
  if (rt_embedding_forward_f64(c->out, c->tok, c->wte, N, c->V, c->C) != RT_OK)
    abort();
  return dot(c->out, c->dout, (size_t)N * c->C);
}

static double pos_loss(void *p) {
  EmbCtx *c = p;
  rt_positional_forward_f64(c->out, c->x, c->wpe, c->B, c->T, c->C, c->t0);
  return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}

static void test_embedding(void) {
  int32_t tok[8] = {3, 1, 3, 3, 0, 4, 1, 3}; // repeated tokens must sum
  EmbCtx c = {.B = 2, .T = 4, .V = 6, .C = 5, .t0 = 2, .tok = tok};
  size_t n = 8 * 5;
  c.wte = vec(6 * 5, 61), c.wpe = vec(9 * 5, 62), c.x = vec(n, 63), c.dout = vec(n, 64);
  c.out = xcalloc(n, sizeof(double));
  double *dwte = accbuf(30), *dwpe = accbuf(45), *dx = accbuf(n);
  rt_embedding_backward_f64(dwte, c.dout, tok, 8, 5);
  unacc(dwte, 30);
  FD_CHECK("embedding dwte (repeated tokens)", emb_loss, &c, c.wte, 30, dwte, 1000);
  ASSERT_NEAR(0, dwte[2 * 5 + 1], 0); // token 2 is never used
  rt_positional_backward_f64(dx, dwpe, c.dout, c.B, c.T, c.C, c.t0);
  unacc(dx, n), unacc(dwpe, 45);
  FD_CHECK("positional dinp", pos_loss, &c, c.x, n, dx, 1000);
  FD_CHECK("positional dwpe", pos_loss, &c, c.wpe, 45, dwpe, 1000);
  free(c.wte), free(c.wpe), free(c.x), free(c.dout), free(c.out);
  free(dwte), free(dwpe), free(dx);
}

/* ---- rope ---- */

typedef struct {
  int B, T, H, D, t0;
  double theta;
  double *x, *dout, *out;
} RopeCtx;

static double rope_loss(void *p) {
  RopeCtx *c = p;
  rt_rope_forward_f64(c->out, c->x, c->B, c->T, c->H, c->D, c->theta, c->t0);
  return dot(c->out, c->dout, (size_t)c->B * c->T * c->H * c->D);
}

static void test_rope(void) {
  RopeCtx c = {.B = 2, .T = 5, .H = 3, .D = 8, .t0 = 3, .theta = 10000.0};
  size_t n = 2 * 5 * 3 * 8;
  c.x = vec(n, 71), c.dout = vec(n, 72), c.out = xcalloc(n, sizeof(double));
  double *dx = accbuf(n);
  rt_rope_backward_f64(dx, c.dout, c.B, c.T, c.H, c.D, c.theta, c.t0);
  unacc(dx, n);
  FD_CHECK("rope dinp", rope_loss, &c, c.x, n, dx, 1000);
  // a rotation: norms are preserved, and in-place equals out-of-place
  rope_loss(&c);
  ASSERT_NEAR(dot(c.x, c.x, n), dot(c.out, c.out, n), 1e-9);
  double *y = xcalloc(n, sizeof(double));
  memcpy(y, c.x, n * sizeof(double));
  rt_rope_forward_f64(y, y, c.B, c.T, c.H, c.D, c.theta, c.t0);
  CHECK_CLOSE64("rope in place", y, c.out, n, 0, 0);
  free(c.x), free(c.dout), free(c.out), free(dx), free(y);
}

/* ---- attention ---- */

typedef struct {
  int B, T, H, Hkv, D, causal;
  double *q, *k, *v, *dout, *out, *lse;
} AttnCtx;

static double attn_loss(void *p) {
  AttnCtx *c = p;
  rt_attention_forward_f64(c->out, c->lse, c->q, c->k, c->v, c->B, c->T, c->H, c->Hkv, c->D,
                           c->causal);
  return dot(c->out, c->dout, (size_t)c->B * c->T * c->H * c->D);
}

/* Naive reference: full score matrix per (b,h). */
static void attn_naive(double *out, double *lse, const AttnCtx *c) {
  int B = c->B, T = c->T, H = c->H, Hkv = c->Hkv, D = c->D;
  double *s = xcalloc((size_t)T, sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        int hk = h / (H / Hkv), tend = c->causal ? t + 1 : T;
        const double *q = c->q + (((size_t)b * T + t) * H + h) * D;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < tend; j++) {
          const double *k = c->k + (((size_t)b * T + j) * Hkv + hk) * D;
          s[j] = dot(q, k, (size_t)D) / sqrt((double)D);
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < tend; j++)
          sum += exp(s[j] - mx);
        double *o = out + (((size_t)b * T + t) * H + h) * D;
        for (int i = 0; i < D; i++)
          o[i] = 0;
        for (int j = 0; j < tend; j++) {
          const double *v = c->v + (((size_t)b * T + j) * Hkv + hk) * D;
          for (int i = 0; i < D; i++)
            o[i] += exp(s[j] - mx) / sum * v[i];
        }
        lse[((size_t)b * H + h) * T + t] = mx + log(sum);
      }
  free(s);
}

static void test_attention(int B, int T, int H, int Hkv, int D, int causal) {
  AttnCtx c = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .causal = causal};
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
  c.q = vec(nq, 81), c.k = vec(nk, 82), c.v = vec(nk, 83), c.dout = vec(nq, 84);
  c.out = xcalloc(nq, sizeof(double)), c.lse = xcalloc(nl, sizeof(double));
  char what[128];
  snprintf(what, sizeof what, "attention B=%d T=%d H=%d Hkv=%d D=%d %s", B, T, H, Hkv, D,
           causal ? "causal" : "non-causal");
  attn_loss(&c);
  double *ref = xcalloc(nq, sizeof(double)), *ref_lse = xcalloc(nl, sizeof(double));
  attn_naive(ref, ref_lse, &c);
  CHECK_CLOSE64(what, c.out, ref, nq, 1e-12, 1e-12);
  CHECK_CLOSE64(what, c.lse, ref_lse, nl, 1e-12, 1e-12);
  double *dq = accbuf(nq), *dk = accbuf(nk), *dv = accbuf(nk);
  rt_attention_backward_f64(dq, dk, dv, c.dout, c.q, c.k, c.v, c.out, c.lse, B, T, H, Hkv, D,
                            causal);
  unacc(dq, nq), unacc(dk, nk), unacc(dv, nk);
  char w2[160];
  snprintf(w2, sizeof w2, "%s dq", what);
  FD_CHECK(w2, attn_loss, &c, c.q, nq, dq, 150);
  snprintf(w2, sizeof w2, "%s dk", what);
  FD_CHECK(w2, attn_loss, &c, c.k, nk, dk, 150);
  snprintf(w2, sizeof w2, "%s dv", what);
  FD_CHECK(w2, attn_loss, &c, c.v, nk, dv, 150);
  free(c.q), free(c.k), free(c.v), free(c.dout), free(c.out), free(c.lse);
  free(ref), free(ref_lse), free(dq), free(dk), free(dv);
}

/* NULL gradients are skipped and the others come out the same. */
static void test_attention_null_grads(void) {
  int B = 1, T = 140, H = 4, Hkv = 2, D = 8;
  AttnCtx c = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .causal = 1};
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
  c.q = vec(nq, 85), c.k = vec(nk, 86), c.v = vec(nk, 87), c.dout = vec(nq, 88);
  c.out = xcalloc(nq, sizeof(double)), c.lse = xcalloc(nl, sizeof(double));
  attn_loss(&c);
  double *dq = xcalloc(nq, sizeof(double)), *dk = xcalloc(nk, sizeof(double)),
         *dv = xcalloc(nk, sizeof(double));
  double *g1 = xcalloc(nq, sizeof(double)), *g2 = xcalloc(nk, sizeof(double)),
         *g3 = xcalloc(nk, sizeof(double));
#define BWD(dq_, dk_, dv_)                                                                 \
  rt_attention_backward_f64(dq_, dk_, dv_, c.dout, c.q, c.k, c.v, c.out, c.lse, B, T, H, Hkv, \
                            D, 1)
  BWD(dq, dk, dv);
  BWD(g1, NULL, NULL);
  BWD(NULL, g2, NULL);
  BWD(NULL, NULL, g3);
#undef BWD
  CHECK_CLOSE64("attention dq alone", g1, dq, nq, 0, 0);
  CHECK_CLOSE64("attention dk alone", g2, dk, nk, 0, 0);
  CHECK_CLOSE64("attention dv alone", g3, dv, nk, 0, 0);
  free(c.q), free(c.k), free(c.v), free(c.dout), free(c.out), free(c.lse);
  free(dq), free(dk), free(dv), free(g1), free(g2), free(g3);
}

/* ---- cross-entropy ---- */

typedef struct {
  int N, V;
  double dloss;
  int32_t *tgt;
  double *x;
} CeCtx;

static double ce_loss(void *p) {
  CeCtx *c = p;
  double loss;
  int nv;
  if (rt_crossentropy_forward_f64(&loss, &nv, NULL, NULL, c->x, c->tgt, c->N, c->V) != RT_OK)
    abort();
  return c->dloss * loss;
}

static void test_crossentropy(void) {
  int32_t tgt[7] = {2, RT_IGNORE_INDEX, 0, 8, 8, RT_IGNORE_INDEX, 5};
  CeCtx c = {7, 9, 1.7, tgt, vec(63, 91)};
  double loss;
  int nv;
  double *losses = xcalloc(7, sizeof(double)), *lse = xcalloc(7, sizeof(double));
  ASSERT_OK(rt_crossentropy_forward_f64(&loss, &nv, losses, lse, c.x, tgt, 7, 9));
  ASSERT(5, nv);
  ASSERT_NEAR(0, losses[1], 0);
  double sum = 0;
  for (int i = 0; i < 7; i++)
    sum += losses[i];
  ASSERT_NEAR(sum / 5, loss, 1e-14);
  double *dx = xcalloc(63, sizeof(double));
  for (int i = 0; i < 63; i++)
    dx[i] = 123; // written, not accumulated
  rt_crossentropy_backward_f64(dx, c.x, lse, tgt, 7, 9, c.dloss, nv);
  FD_CHECK("cross_entropy dlogits (ignore index)", ce_loss, &c, c.x, 63, dx, 1000);
  for (int i = 0; i < 9; i++)
    ASSERT_NEAR(0, dx[9 + i], 0);
  // lse == NULL recomputes; in place (dlogits == logits) gives the same
  double *dx2 = xcalloc(63, sizeof(double)), *inplace = xcalloc(63, sizeof(double));
  rt_crossentropy_backward_f64(dx2, c.x, NULL, tgt, 7, 9, c.dloss, nv);
  CHECK_CLOSE64("cross_entropy backward without lse", dx2, dx, 63, 1e-15, 1e-15);
  memcpy(inplace, c.x, 63 * sizeof(double));
  rt_crossentropy_backward_f64(inplace, inplace, lse, tgt, 7, 9, c.dloss, nv);
  CHECK_CLOSE64("cross_entropy backward in place", inplace, dx, 63, 0, 0);
  free(c.x), free(losses), free(lse), free(dx), free(dx2), free(inplace);
}

/* ---- slice_cols ---- */

typedef struct {
  double *x, *dout, *out;
} SliceCtx;

static double slice_loss(void *p) {
  SliceCtx *c = p;
  rt_slice_cols_forward_f64(c->out, c->x, 3, 7, 2, 4);
  return dot(c->out, c->dout, 12);
}

static void test_slice(void) {
  SliceCtx c = {vec(21, 101), vec(12, 102), xcalloc(12, sizeof(double))};
  double *dx = accbuf(21);
  rt_slice_cols_backward_f64(dx, c.dout, 3, 7, 2, 4);
  unacc(dx, 21);
  FD_CHECK("slice_cols dinp", slice_loss, &c, c.x, 21, dx, 1000);
  free(c.x), free(c.dout), free(c.out), free(dx);
}

/* The accumulating cross-entropy backward adds exactly what the writing one
 * writes; layernorm with an explicit epsilon equal to RT_LN_EPS matches. */
static void test_variants(void) {
  enum { N = 5, V = 7, C = 9 };
  double logits[N * V], w[N * V], a[N * V], prior[N * V];
  int32_t tg[N] = {0, 6, -1, 3, 2};
  for (int i = 0; i < N * V; i++) {
    logits[i] = sin(0.7 * i) * 2;
    prior[i] = a[i] = cos(0.3 * i);
  }
  rt_crossentropy_backward_f64(w, logits, NULL, tg, N, V, 1.5, 4);
  rt_crossentropy_backward_acc_f64(a, logits, NULL, tg, N, V, 1.5, 4);
  for (int i = 0; i < N * V; i++) ASSERT_NEAR(prior[i] + w[i], a[i], 1e-15);
  double x[N * C], wt[C], b[C], y1[N * C], y2[N * C], m1[N], m2[N], r1[N], r2[N];
  for (int i = 0; i < N * C; i++) x[i] = sin(1.3 * i);
  for (int i = 0; i < C; i++) wt[i] = 1 + 0.1 * i, b[i] = 0.05 * i;
  rt_layernorm_forward_f64(y1, m1, r1, x, wt, b, N, C);
  rt_layernorm_forward_eps_f64(y2, m2, r2, x, wt, b, N, C, RT_LN_EPS);
  for (int i = 0; i < N * C; i++) ASSERT_NEAR(y1[i], y2[i], 0);
  rt_layernorm_forward_eps_f64(y2, m2, r2, x, wt, b, N, C, 0.5);
  ASSERT_TRUE(r2[0] < r1[0]); /* a larger epsilon shrinks 1/std */
}

int main(void) {
  test_variants();
  test_matmul(1);
  test_matmul(0);
  test_norm(0);
  test_norm(1);
  for (int k = 0; k < 3; k++)
    test_act(k);
  test_swiglu(1);
  test_swiglu(0);
  test_softmax();
  test_dropout(0.3);
  test_dropout(0.0);
  test_embedding();
  test_rope();
  test_attention(2, 5, 2, 2, 4, 1);   // tiny, multi-batch
  test_attention(2, 9, 3, 3, 6, 0);   // non-causal MHA
  test_attention(1, 70, 4, 2, 8, 1);  // GQA, T not a multiple of the block
  test_attention(1, 70, 4, 1, 8, 0);  // MQA non-causal, two blocks
  test_attention(1, 150, 2, 1, 4, 1); // three blocks, causal
  // Blocks of RT_ATTN_QBLOCK queries and RT_ATTN_BLOCK keys, partial ones:
  test_attention(1, 200, 4, 2, 8, 0); // GQA, keys 128+72 (online rescale), queries 3x64+8
  test_attention(2, 257, 2, 1, 4, 1); // MQA causal, a last query block of one row
  test_attention(1, 129, 3, 3, 4, 0); // a last key block of one key
  test_attention_null_grads();
  test_crossentropy();
  test_slice();
  TEST_MAIN_END();
}
