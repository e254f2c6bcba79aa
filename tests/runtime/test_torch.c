/* test_torch.c — the kernels against PyTorch. Writes random inputs to a
 * safetensors file, runs torch_ref.py (autograd in float64, plus float32 runs
 * of AdamW and RoPE), reads its outputs back and compares: our f64 kernels
 * tightly, our f32 kernels within float tolerance.
 * usage: rt_test_torch TESTDIR [PYTHON]   (exit 77 = skipped: no torch) */
#include "rt_test.h"

/* A tensor in both precisions: the f32 copy is the f64 data rounded, and the
 * f64 data is rounded too, so both kernels see identical inputs. */
typedef struct {
  double *d;
  float *f;
  size_t n;
} Buf;

#define MAXBUFS 128
static Buf *bufs[MAXBUFS];
static int nbufs;
static RtStWriter *writer;
static uint64_t seed_ctr = 1000;

static Buf *buf_new(size_t n) {
  Buf *b = xcalloc(1, sizeof *b);
  b->d = xcalloc(n, sizeof(double));
  b->f = xcalloc(n, sizeof(float));
  b->n = n;
  if (nbufs == MAXBUFS)
    abort();
  bufs[nbufs++] = b;
  return b;
}

/* A random input, registered in the file for torch. */
static Buf *input(const char *name, int ndim, const int64_t *shape, double std) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= (size_t)shape[i];
  Buf *b = buf_new(n);
  randn64(b->d, n, std, seed_ctr++);
  rt_f64_to_f32(b->f, b->d, n);
  rt_f32_to_f64(b->d, b->f, n);
  if (rt_st_add(writer, name, RT_F64, ndim, shape, b->d) != RT_OK) {
    fprintf(stderr, "%s\n", rt_last_error());
    exit(2);
  }
  return b;
}
#define SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static void meta(const char *key, double v) {
  char s[64];
  snprintf(s, sizeof s, "%.17g", v);
  rt_st_add_meta(writer, key, s);
}

static RtStFile *ref_file;

/* Compare a result with the reference tensor of that name (F64 or F32). */
static void cmp(const char *name, const Buf *b, double rtol64, double rtol32, double atol32) {
  const RtStTensor *t = rt_st_find(ref_file, name);
  test_checks++;
  if (!t || t->nbytes != b->n * rt_dtype_size(t->dtype) ||
      (t->dtype != RT_F64 && t->dtype != RT_F32)) {
    fprintf(stderr, "reference '%s' missing or of the wrong size\n", name);
    test_failures++;
    return;
  }
  double *ref = xcalloc(b->n, sizeof(double));
  if (t->dtype == RT_F64) {
    memcpy(ref, t->data, t->nbytes);
  } else {
    float *tmp = xcalloc(b->n, sizeof(float));
    memcpy(tmp, t->data, t->nbytes);
    rt_f32_to_f64(ref, tmp, b->n);
    free(tmp);
  }
  double scale = 0; // absolute tolerances relative to the tensor's magnitude
  for (size_t i = 0; i < b->n; i++)
    scale = fmax(scale, fabs(ref[i]));
  char what[160];
  if (rtol64 >= 0) {
    snprintf(what, sizeof what, "%s (f64 vs torch)", name);
    CHECK_CLOSE64(what, b->d, ref, b->n, rtol64, rtol64 * scale);
  }
  if (rtol32 >= 0) {
    snprintf(what, sizeof what, "%s (f32 vs torch)", name);
    CHECK_CLOSE32(what, b->f, ref, b->n, rtol32, atol32 * scale);
  }
  free(ref);
}

#define TIGHT 1e-10
#define LOOSE 1e-4

int main(int argc, char **argv) {
  const char *testdir = argc > 1 ? argv[1] : ".";
  const char *python = argc > 2 ? argv[2] : "/usr/bin/python3";
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", python);
  if (system(cmd) != 0) {
    printf("SKIP: %s cannot import torch (install python3-torch)\n", python);
    return 77;
  }
  const char *dir = test_tmpdir();
  char in_path[256], out_path[256];
  snprintf(in_path, sizeof in_path, "%s/in.safetensors", dir);
  snprintf(out_path, sizeof out_path, "%s/ref.safetensors", dir);
  writer = rt_st_writer_new();

  // ---- inputs ----
  enum { N = 6, C = 32, V = 50, B = 2 };
  Buf *ln_x = input("ln.x", SHAPE(N, C), 2), *ln_w = input("ln.w", SHAPE(C), 1),
      *ln_b = input("ln.b", SHAPE(C), 1), *ln_dout = input("ln.dout", SHAPE(N, C), 1);
  Buf *rms_x = input("rms.x", SHAPE(N, C), 2), *rms_w = input("rms.w", SHAPE(C), 1),
      *rms_dout = input("rms.dout", SHAPE(N, C), 1);
  meta("rms.eps", 1e-6);
  Buf *gelu_x = input("gelu.x", SHAPE(N, C), 3), *gelu_dout = input("gelu.dout", SHAPE(N, C), 1);
  Buf *silu_x = input("silu.x", SHAPE(N, C), 3), *silu_dout = input("silu.dout", SHAPE(N, C), 1);
  Buf *sm_x = input("softmax.x", SHAPE(N, C), 3), *sm_dout = input("softmax.dout", SHAPE(N, C), 1);
  Buf *sw_x = input("swiglu.x", SHAPE(N, 2 * C), 2), *sw_dout = input("swiglu.dout", SHAPE(N, C), 1);
  Buf *lin_x = input("lin.x", SHAPE(N, C), 1), *lin_w = input("lin.w", SHAPE(20, C), 0.2),
      *lin_b = input("lin.b", SHAPE(20), 1), *lin_dout = input("lin.dout", SHAPE(N, 20), 1);
  Buf *wte = input("emb.wte", SHAPE(V, C), 1), *emb_dout = input("emb.dout", SHAPE(N, C), 1);
  int32_t emb_tok[N] = {3, 7, 3, 49, 0, 3};
  ASSERT_OK(rt_st_add(writer, "emb.tokens", RT_I32, SHAPE(N), emb_tok));
  Buf *logits = input("ce.logits", SHAPE(N, V), 3);
  int32_t ce_tgt[N] = {4, RT_IGNORE_INDEX, 49, 0, 4, RT_IGNORE_INDEX};
  ASSERT_OK(rt_st_add(writer, "ce.targets", RT_I32, SHAPE(N), ce_tgt));
  meta("ce.dloss", 0.75);
  // attention cases {T, H, Hkv, D, causal}: within one block, partial query
  // and key blocks (RT_ATTN_QBLOCK 64, RT_ATTN_BLOCK 128), GQA, MQA
  enum { NATTN = 5 };
  static const int attn_cfg[NATTN][5] = {{37, 4, 2, 8, 1},   {70, 2, 2, 16, 0},
                                         {130, 4, 1, 8, 1},  {200, 4, 2, 16, 0},
                                         {257, 2, 1, 64, 1}};
  Buf *aq[NATTN], *ak[NATTN], *av[NATTN], *ado[NATTN];
  for (int c = 0; c < NATTN; c++) {
    int T = attn_cfg[c][0], H = attn_cfg[c][1], Hkv = attn_cfg[c][2], D = attn_cfg[c][3];
    char nm[64];
    snprintf(nm, sizeof nm, "attn%d.q", c);
    aq[c] = input(nm, SHAPE(B, T, H, D), 1);
    snprintf(nm, sizeof nm, "attn%d.k", c);
    ak[c] = input(nm, SHAPE(B, T, Hkv, D), 1);
    snprintf(nm, sizeof nm, "attn%d.v", c);
    av[c] = input(nm, SHAPE(B, T, Hkv, D), 1);
    snprintf(nm, sizeof nm, "attn%d.dout", c);
    ado[c] = input(nm, SHAPE(B, T, H, D), 1);
    snprintf(nm, sizeof nm, "attn%d.causal", c);
    meta(nm, attn_cfg[c][4]);
  }
  enum { RT = 9, RH = 3, RD = 16, RT0 = 500 };
  Buf *rope_x = input("rope.x", SHAPE(B, RT, RH, RD), 1),
      *rope_dout = input("rope.dout", SHAPE(B, RT, RH, RD), 1);
  meta("rope.theta", 10000), meta("rope.t0", RT0);
  enum { NP = 200, STEPS = 4 };
  Buf *ap = input("adamw.p", SHAPE(NP), 1), *ag = input("adamw.g", SHAPE(STEPS, NP), 0.1);
  meta("adamw.lr", 1e-2), meta("adamw.b1", 0.9), meta("adamw.b2", 0.95);
  meta("adamw.eps", 1e-8), meta("adamw.wd", 0.1);
  Buf *sp = input("sgd.p", SHAPE(NP), 1), *sg = input("sgd.g", SHAPE(STEPS, NP), 0.1);
  meta("sgd.lr", 0.1), meta("sgd.momentum", 0.9), meta("sgd.wd", 0.01);
  Buf *g0 = input("clip.g0", SHAPE(50), 1), *g1 = input("clip.g1", SHAPE(7, 3), 1);
  meta("clip.max_norm", 1.0);
  ASSERT_OK(rt_st_save(writer, in_path));
  rt_st_writer_free(writer);

  snprintf(cmd, sizeof cmd, "'%s' '%s/torch_ref.py' '%s' '%s'", python, testdir, in_path,
           out_path);
  if (system(cmd) != 0) {
    fprintf(stderr, "FAIL: %s\n", cmd);
    test_tmpdir_remove(dir);
    return 1;
  }
  ASSERT_OK(rt_st_open(&ref_file, out_path));
  if (!ref_file) {
    test_tmpdir_remove(dir);
    return 1;
  }

  // ---- layernorm ----
  Buf *out = buf_new(N * C), *mean = buf_new(N), *rstd = buf_new(N), *dx = buf_new(N * C),
      *dw = buf_new(C), *db = buf_new(C);
  rt_layernorm_forward_f64(out->d, mean->d, rstd->d, ln_x->d, ln_w->d, ln_b->d, N, C);
  rt_layernorm_forward_f32(out->f, mean->f, rstd->f, ln_x->f, ln_w->f, ln_b->f, N, C);
  rt_layernorm_backward_f64(dx->d, dw->d, db->d, ln_dout->d, ln_x->d, ln_w->d, mean->d, rstd->d, N, C);
  rt_layernorm_backward_f32(dx->f, dw->f, db->f, ln_dout->f, ln_x->f, ln_w->f, mean->f, rstd->f, N, C);
  cmp("ln.out", out, TIGHT, LOOSE, 1e-5);
  cmp("ln.dx", dx, TIGHT, LOOSE, 1e-5);
  cmp("ln.dw", dw, TIGHT, LOOSE, 1e-5);
  cmp("ln.db", db, TIGHT, LOOSE, 1e-5);

  // ---- rmsnorm ----
  Buf *out2 = buf_new(N * C), *dx2 = buf_new(N * C), *dw2 = buf_new(C);
  rt_rmsnorm_forward_f64(out2->d, rstd->d, rms_x->d, rms_w->d, N, C, 1e-6);
  rt_rmsnorm_forward_f32(out2->f, rstd->f, rms_x->f, rms_w->f, N, C, 1e-6);
  rt_rmsnorm_backward_f64(dx2->d, dw2->d, rms_dout->d, rms_x->d, rms_w->d, rstd->d, N, C);
  rt_rmsnorm_backward_f32(dx2->f, dw2->f, rms_dout->f, rms_x->f, rms_w->f, rstd->f, N, C);
  cmp("rms.out", out2, TIGHT, LOOSE, 1e-5);
  cmp("rms.dx", dx2, TIGHT, LOOSE, 1e-5);
  cmp("rms.dw", dw2, TIGHT, LOOSE, 1e-5);

  // ---- gelu, silu, softmax, swiglu ----
  Buf *go = buf_new(N * C), *gdx = buf_new(N * C);
  rt_gelu_forward_f64(go->d, gelu_x->d, N * C);
  rt_gelu_forward_f32(go->f, gelu_x->f, N * C);
  rt_gelu_backward_f64(gdx->d, gelu_x->d, gelu_dout->d, N * C);
  rt_gelu_backward_f32(gdx->f, gelu_x->f, gelu_dout->f, N * C);
  cmp("gelu.out", go, TIGHT, LOOSE, 1e-6);
  cmp("gelu.dx", gdx, TIGHT, LOOSE, 1e-6);
  Buf *so = buf_new(N * C), *sdx = buf_new(N * C);
  rt_silu_forward_f64(so->d, silu_x->d, N * C);
  rt_silu_forward_f32(so->f, silu_x->f, N * C);
  rt_silu_backward_f64(sdx->d, silu_x->d, silu_dout->d, N * C);
  rt_silu_backward_f32(sdx->f, silu_x->f, silu_dout->f, N * C);
  cmp("silu.out", so, TIGHT, LOOSE, 1e-6);
  cmp("silu.dx", sdx, TIGHT, LOOSE, 1e-6);
  Buf *smo = buf_new(N * C), *smdx = buf_new(N * C);
  rt_softmax_forward_f64(smo->d, sm_x->d, N, C);
  rt_softmax_forward_f32(smo->f, sm_x->f, N, C);
  rt_softmax_backward_f64(smdx->d, sm_dout->d, smo->d, N, C);
  rt_softmax_backward_f32(smdx->f, sm_dout->f, smo->f, N, C);
  cmp("softmax.out", smo, TIGHT, LOOSE, 1e-6);
  cmp("softmax.dx", smdx, TIGHT, LOOSE, 1e-6);
  Buf *swo = buf_new(N * C), *swdx = buf_new(N * 2 * C);
  rt_swiglu_forward_f64(swo->d, sw_x->d, sw_x->d + C, N, C, 2 * C);
  rt_swiglu_forward_f32(swo->f, sw_x->f, sw_x->f + C, N, C, 2 * C);
  rt_swiglu_backward_f64(swdx->d, swdx->d + C, sw_dout->d, sw_x->d, sw_x->d + C, N, C, 2 * C);
  rt_swiglu_backward_f32(swdx->f, swdx->f + C, sw_dout->f, sw_x->f, sw_x->f + C, N, C, 2 * C);
  cmp("swiglu.out", swo, TIGHT, LOOSE, 1e-6);
  cmp("swiglu.dx", swdx, TIGHT, LOOSE, 1e-6);

  // ---- linear ----
  Buf *lo = buf_new(N * 20), *ldx = buf_new(N * C), *ldw = buf_new(20 * C), *ldb = buf_new(20);
  rt_matmul_forward_f64(lo->d, lin_x->d, lin_w->d, lin_b->d, N, C, 20);
  rt_matmul_forward_f32(lo->f, lin_x->f, lin_w->f, lin_b->f, N, C, 20);
  rt_matmul_backward_f64(ldx->d, ldw->d, ldb->d, lin_dout->d, lin_x->d, lin_w->d, N, C, 20);
  rt_matmul_backward_f32(ldx->f, ldw->f, ldb->f, lin_dout->f, lin_x->f, lin_w->f, N, C, 20);
  cmp("lin.out", lo, TIGHT, LOOSE, 1e-5);
  cmp("lin.dx", ldx, TIGHT, LOOSE, 1e-5);
  cmp("lin.dw", ldw, TIGHT, LOOSE, 1e-5);
  cmp("lin.db", ldb, TIGHT, LOOSE, 1e-5);

  // ---- embedding ----
  Buf *eo = buf_new(N * C), *edw = buf_new(V * C);
  ASSERT_OK(rt_embedding_forward_f64(eo->d, emb_tok, wte->d, N, V, C));
  ASSERT_OK(rt_embedding_forward_f32(eo->f, emb_tok, wte->f, N, V, C));
  rt_embedding_backward_f64(edw->d, emb_dout->d, emb_tok, N, C);
  rt_embedding_backward_f32(edw->f, emb_dout->f, emb_tok, N, C);
  cmp("emb.out", eo, 0, 0, 0);
  cmp("emb.dwte", edw, TIGHT, 1e-6, 1e-6);

  // ---- cross-entropy: in place, as generated code will use it ----
  Buf *loss = buf_new(1), *dl = buf_new(N * V);
  memcpy(dl->d, logits->d, N * V * sizeof(double));
  memcpy(dl->f, logits->f, N * V * sizeof(float));
  int nv;
  ASSERT_OK(rt_crossentropy_forward_f64(&loss->d[0], &nv, NULL, NULL, logits->d, ce_tgt, N, V));
  rt_crossentropy_backward_f64(dl->d, dl->d, NULL, ce_tgt, N, V, 0.75, nv);
  double l32;
  ASSERT_OK(rt_crossentropy_forward_f32(&l32, &nv, NULL, NULL, logits->f, ce_tgt, N, V));
  loss->f[0] = (float)l32;
  rt_crossentropy_backward_f32(dl->f, dl->f, NULL, ce_tgt, N, V, 0.75, nv);
  ASSERT(4, nv);
  cmp("ce.loss", loss, TIGHT, 1e-6, 1e-6);
  cmp("ce.dlogits", dl, TIGHT, LOOSE, 1e-6);

  // ---- attention ----
  for (int c = 0; c < NATTN; c++) {
    int T = attn_cfg[c][0], H = attn_cfg[c][1], Hkv = attn_cfg[c][2], D = attn_cfg[c][3];
    int causal = attn_cfg[c][4];
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
    Buf *o = buf_new(nq), *lse = buf_new((size_t)B * H * T), *dq = buf_new(nq),
        *dk = buf_new(nk), *dv = buf_new(nk);
    rt_attention_forward_f64(o->d, lse->d, aq[c]->d, ak[c]->d, av[c]->d, B, T, H, Hkv, D, causal);
    rt_attention_forward_f32(o->f, lse->f, aq[c]->f, ak[c]->f, av[c]->f, B, T, H, Hkv, D, causal);
    rt_attention_backward_f64(dq->d, dk->d, dv->d, ado[c]->d, aq[c]->d, ak[c]->d, av[c]->d,
                              o->d, lse->d, B, T, H, Hkv, D, causal);
    rt_attention_backward_f32(dq->f, dk->f, dv->f, ado[c]->f, aq[c]->f, ak[c]->f, av[c]->f,
                              o->f, lse->f, B, T, H, Hkv, D, causal);
    char nm[64];
    const char *what[] = {"out", "lse", "dq", "dk", "dv"};
    Buf *res[] = {o, lse, dq, dk, dv};
    for (int i = 0; i < 5; i++) {
      snprintf(nm, sizeof nm, "attn%d.%s", c, what[i]);
      cmp(nm, res[i], TIGHT, LOOSE, 1e-5);
    }
  }

  // ---- rope ----
  size_t nr = (size_t)B * RT * RH * RD;
  Buf *ro = buf_new(nr), *rdx = buf_new(nr);
  rt_rope_forward_f64(ro->d, rope_x->d, B, RT, RH, RD, 10000, RT0);
  rt_rope_forward_f32(ro->f, rope_x->f, B, RT, RH, RD, 10000, RT0);
  rt_rope_backward_f64(rdx->d, rope_dout->d, B, RT, RH, RD, 10000, RT0);
  rt_rope_backward_f32(rdx->f, rope_dout->f, B, RT, RH, RD, 10000, RT0);
  cmp("rope.out", ro, TIGHT, -1, 0);
  cmp("rope.dx", rdx, TIGHT, 1e-3, 1e-3);
  cmp("rope.out32", ro, -1, 2e-6, 2e-6); // HF's own float32 arithmetic

  // ---- optimizers ----
  Buf *m = buf_new(NP), *v = buf_new(NP), *mom = buf_new(NP);
  for (int s = 0; s < STEPS; s++) {
    rt_adamw_step_f64(ap->d, ag->d + s * NP, m->d, v->d, NP, 1e-2, 0.9, 0.95, 1e-8, 0.1, s + 1, 1.0);
    rt_adamw_step_f32(ap->f, ag->f + s * NP, m->f, v->f, NP, 1e-2, 0.9, 0.95, 1e-8, 0.1, s + 1, 1.0);
    rt_sgd_step_f64(sp->d, sg->d + s * NP, mom->d, NP, 0.1, 0.9, 0.01, 1.0);
    rt_sgd_step_f32(sp->f, sg->f + s * NP, mom->f, NP, 0.1, 0.9, 0.01, 1.0);
  }
  cmp("adamw.p64", ap, 1e-13, 1e-6, 1e-7);
  cmp("adamw.m64", m, 1e-13, 1e-5, 1e-7);
  cmp("adamw.v64", v, 1e-13, 1e-5, 1e-7);
  cmp("adamw.p32", ap, -1, 1e-7, 1e-7); // torch's own float32 AdamW, to rounding
  cmp("sgd.p64", sp, 1e-13, 1e-6, 1e-7);

  // ---- clipping ----
  const double *gl[2] = {g0->d, g1->d};
  size_t ns[2] = {50, 21};
  Buf *norm = buf_new(1);
  norm->d[0] = sqrt(rt_sumsq_list_f64(gl, ns, 2));
  const float *glf[2] = {g0->f, g1->f};
  norm->f[0] = (float)sqrt(rt_sumsq_list_f32(glf, ns, 2));
  cmp("clip.norm", norm, TIGHT, 1e-6, 0);
  double sc = rt_clip_scale(norm->d[0], 1.0);
  ASSERT_TRUE(sc < 1);
  rt_scale_f64(g0->d, 50, sc), rt_scale_f64(g1->d, 21, sc);
  rt_scale_f32(g0->f, 50, sc), rt_scale_f32(g1->f, 21, sc);
  cmp("clip.g0c", g0, TIGHT, 1e-6, 1e-7);
  cmp("clip.g1c", g1, TIGHT, 1e-6, 1e-7);

  rt_st_close(ref_file);
  for (int i = 0; i < nbufs; i++) {
    free(bufs[i]->d);
    free(bufs[i]->f);
    free(bufs[i]);
  }
  test_tmpdir_remove(dir);
  TEST_MAIN_END();
}
