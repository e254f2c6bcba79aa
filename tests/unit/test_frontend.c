/* test_frontend.c — parsing, constants, parameter naming and lowering of
 * small programs held in strings. */
#include "passes.h"
#include "sema.h"
#include "test.h"

static Module *compile(const char *text) {
  diag_reset();
  SrcFile *f = src_from_string("t.shard", text);
  Program *p = ast_parse(f);
  if (!p || diag_error_count()) return NULL;
  SemaOptions o = {0};
  Module *m = frontend_run(p, &o);
  if (!m || diag_error_count()) return NULL;
  return m;
}

static Value *param_named(Graph *g, const char *name) {
  for (int i = 0; i < g->params.len; i++) {
    Value *v = g->params.data[i];
    if (!strcmp(v->name, name)) return v;
  }
  return NULL;
}

int main(void) {
  diag_set_quiet_warnings(1);

  /* Constant arithmetic, comments, optional commas, newlines. */
  Module *m = compile(
      "const a = 3, b = a * 4 + 1 # thirteen\n"
      "const c = (b - 1) / 4 // three\n"
      "model m(x: f32[B, 8], y: i32[B]) {\n"
      "  h = linear(x, b)\n"
      "  return cross_entropy(linear(h, c), y)\n"
      "}\n"
      "train { batch = 2 }\n");
  ASSERT(1, m != NULL);
  ASSERT(1, m && m->graph != NULL);
  if (m && m->graph) {
    Graph *g = m->graph;
    ASSERT(1, param_named(g, "linear_1.weight") != NULL);
    ASSERT(13, param_named(g, "linear_1.weight")->shape.d[0].n);
    ASSERT(3, param_named(g, "linear_2.weight")->shape.d[0].n);
    ASSERT(8 * 13 + 13 + 13 * 3 + 3, ir_param_count(g));
    ASSERT(2, g->inputs.len);
    ASSERT(2, ((Value *)g->inputs.data[0])->shape.d[0].n); /* B bound to batch */
  }

  /* Repeat naming: "blocks.<i>" from the single layer called; keyword and
   * default arguments; a layer used as an activation. */
  m = compile(
      "layer sq(x) { return x * x }\n"
      "layer block(x, width = 16, act = gelu) { return x + linear(act(linear(x, width)), 8) }\n"
      "model m(x: f32[B, 8], y: i32[B]) {\n"
      "  repeat 3 { x = block(x, act = sq) }\n"
      "  repeat 2 as extra { x = x + linear(x, 8, bias = false) }\n"
      "  return cross_entropy(x, y)\n"
      "}\n"
      "train { batch = 4 }\n");
  ASSERT(1, m && m->graph);
  if (m && m->graph) {
    Graph *g = m->graph;
    ASSERT(1, param_named(g, "blocks.0.linear_1.weight") != NULL);
    ASSERT(1, param_named(g, "blocks.2.linear_2.bias") != NULL);
    ASSERT(1, param_named(g, "extra.1.linear.weight") != NULL);
    ASSERT(1, param_named(g, "extra.1.linear.bias") == NULL);
    ASSERT(16, param_named(g, "blocks.1.linear_1.weight")->shape.d[0].n);
  }

  /* Explicit names; units in meshes; strategy from the train block. */
  m = compile(
      "model m(t: i32[B, T], y: i32[B, T]) {\n"
      "  x = embedding(t, 64, 32, name = \"wte\")\n"
      "  x = x + attention(layernorm(x), heads = 4, kv_heads = 2, rope = true, bias = false)\n"
      "  return cross_entropy(linear(x, 64, tied = embedding), y)\n"
      "}\n"
      "mesh m2 { nodes = 2, per_node = 2, device = A100_SXM, intra = 300 GB/s, inter = 200 Gb/s, memory = 40 GiB }\n"
      "train { model = m, mesh = m2, batch = 8, seq = 16, microbatch = 2, dp = 2, tp = 2 }\n");
  ASSERT(1, m && m->graph);
  if (m && m->graph) {
    Graph *g = m->graph;
    ASSERT(1, param_named(g, "wte.weight") != NULL);
    ASSERT((4 + 2 * 2) * 8, param_named(g, "attn.qkv.weight")->shape.d[0].n);
    ASSERT(1, param_named(g, "attn.qkv.bias") == NULL);
    Mesh *me = m->train.mesh;
    ASSERT(4, me->ndev);
    ASSERT_NEAR(300e9, me->intra_bw, 1);
    ASSERT_NEAR(25e9, me->inter_bw, 1);
    ASSERT_NEAR(40.0 * 1024 * 1024 * 1024, me->mem_bytes, 1);
    ASSERT_NEAR(312e12, me->peak_bf16, 1);
    ASSERT_NEAR(2039e9, me->mem_bw, 1);
    ASSERT(2, m->train.plan.dp);
    ASSERT(2, m->train.plan.tp);
    ASSERT(2, m->train.plan.mb); /* 8 / dp 2 / microbatch 2 */
    ASSERT(16, g->symval[1]);
    ASSERT(0, pass_shape(m));
  }

  /* Every figure of the hardware model can be overridden in the mesh block. */
  m = compile(
      "model m(x: f32[B, 8], y: i32[B]) { return cross_entropy(linear(x, 4), y) }\n"
      "mesh h { nodes = 2, per_node = 4, device = H100_SXM, peak_bf16 = 500 TF/s, peak_fp32 = 30 TF/s,\n"
      "         peak_tf32 = 200 TF/s, memory_bw = 2000 GB/s, launch_us = 7, intra_latency_us = 2,\n"
      "         inter_latency_us = 9, link = pcie, nics = 2, intra = 64 GB/s, inter = 100 Gb/s }\n"
      "train { model = m, mesh = h, batch = 8 }\n");
  ASSERT(1, m && m->train.mesh);
  if (m && m->train.mesh) {
    Mesh *me = m->train.mesh;
    ASSERT_NEAR(500e12, me->peak_bf16, 1);
    ASSERT_NEAR(30e12, me->peak_fp32, 1);
    ASSERT_NEAR(200e12, me->peak_tf32, 1);
    ASSERT_NEAR(2000e9, me->mem_bw, 1);
    ASSERT_NEAR(7e-6, me->launch_s, 1e-12);
    ASSERT_NEAR(2e-6, me->intra_lat, 1e-12);
    ASSERT_NEAR(9e-6, me->inter_lat, 1e-12);
    ASSERT(1, !strcmp(me->link, "pcie"));
    ASSERT(2, me->nics);
    ASSERT_NEAR(64e9, me->intra_bw, 1);
    ASSERT_NEAR(12.5e9, me->inter_bw, 1);
  }

  /* Errors: each of these must fail to compile. */
  const char *bad[] = {
      "model m(x: f32[B, 8]) { return x }",                          /* not a scalar */
      "model m(x: f32[B, 8], y: i32[B]) { return cross_entropy(linear(x, 4) + linear(x, 5), y) }",
      "layer l(x) { return l(x) }\nmodel m(x: f32[B, 8], y: i32[B]) { return cross_entropy(l(x), y) }",
      "const a = b, b = a",
      "const a = 1 / 0",
      "model m(x: f32[B, 8], y: i32[B]) { return cross_entropy(linear(x, 4, wat = 1), y) }",
      "model m(x) { return x }",
      "mesh q { device = cpu }",
      "mesh q { devices = 2, device = Z80 }",
      "train { strategy = \"tp=2\" }",
      "model m(x: f32[B, 8], y: i32[B]) { repeat 0 { x = x } return cross_entropy(x, y) }",
      "const x = 99999999999999999999999",
      "layer 3x",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    Module *b = compile(bad[i]);
    if (b) fprintf(stderr, "expected an error for: %s\n", bad[i]);
    ASSERT(1, b == NULL);
    ASSERT(1, diag_error_count() > 0);
  }

  /* Error recovery: two syntax errors in two declarations are both reported. */
  diag_reset();
  SrcFile *f = src_from_string("r.shard", "layer a(x) { x = = 1 }\nlayer b(x) { return ) }\n");
  ast_parse(f);
  ASSERT(2, diag_error_count());
  TEST_MAIN_END();
}
