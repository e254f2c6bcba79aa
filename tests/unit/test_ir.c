/* test_ir.c — op shape rules, FLOP counts, the verifier and the printer. */
#include "ir.h"
#include "test.h"

static Shape S(int n, int64_t a, int64_t b, int64_t c) {
  int64_t d[3] = {a, b, c};
  return ir_shape(n, d);
}

int main(void) {
  SrcLoc loc = {0};
  diag_set_quiet_warnings(1);
  Graph *g = ir_graph_new("t");
  Value *x = ir_input(g, "x", S(3, 2, 8, 16), DT_F32, loc);
  Value *w = ir_param(g, "w", S(2, 32, 16, 0), loc, true, "normal");
  Value *in[3] = {x, w, NULL};
  Node *mm = ir_add(g, OP_MATMUL, in, 2, NULL, loc, NULL, "linear");
  ASSERT(1, mm != NULL);
  ASSERT(3, mm->out->shape.ndim);
  ASSERT(32, mm->out->shape.d[2].n);
  ASSERT_NEAR(2.0 * 2 * 8 * 32 * 16, ir_ops[OP_MATMUL].flops(mm), 0);

  /* matmul with the wrong inner dim is an error that names both sizes */
  Value *w2 = ir_param(g, "w2", S(2, 32, 17, 0), loc, true, "normal");
  in[1] = w2;
  int before = diag_error_count();
  ASSERT(1, ir_add(g, OP_MATMUL, in, 2, NULL, loc, NULL, "linear") == NULL);
  ASSERT(before + 1, diag_error_count());

  /* broadcast add of a bias */
  Value *b = ir_param(g, "b", S(1, 32, 0, 0), loc, false, "zeros");
  Value *ab[2] = {mm->out, b};
  Node *add = ir_add(g, OP_ADD, ab, 2, NULL, loc, NULL, "add");
  ASSERT(1, add != NULL);
  ASSERT(1, ir_shape_eq(&add->out->shape, &mm->out->shape));
  Value *ba[2] = {b, mm->out};
  ASSERT(1, ir_add(g, OP_ADD, ba, 2, NULL, loc, NULL, "add") == NULL);

  /* layernorm needs matching weight */
  Value *lw = ir_param(g, "lw", S(1, 32, 0, 0), loc, false, "ones");
  Value *ln[3] = {add->out, lw, b};
  Node *lnn = ir_add(g, OP_LAYERNORM, ln, 3, NULL, loc, NULL, "layernorm");
  ASSERT(1, lnn != NULL);

  /* reshape keeps numel */
  Attrs ra = {{2, 8, 4, 8}, 4, {0, 0}, NULL};
  Node *rs = ir_add(g, OP_RESHAPE, &lnn->out, 1, &ra, loc, NULL, "reshape");
  ASSERT(1, rs != NULL);
  Attrs bad = {{2, 8, 4, 9}, 4, {0, 0}, NULL};
  ASSERT(1, ir_add(g, OP_RESHAPE, &lnn->out, 1, &bad, loc, NULL, "reshape") == NULL);

  /* attention with GQA: 4 query heads over 2 kv heads */
  Value *k = ir_input(g, "k", ir_shape(4, (int64_t[]){2, 8, 2, 8}), DT_F32, loc);
  Value *qkv[3] = {rs->out, k, k};
  Attrs ca = {{1}, 1, {0, 0}, NULL};
  Node *at = ir_add(g, OP_ATTENTION, qkv, 3, &ca, loc, NULL, "attention");
  ASSERT(1, at != NULL);
  ASSERT_NEAR(4.0 * 2 * 4 * 8 * 8 * 8, ir_ops[OP_ATTENTION].flops(at), 0);
  Value *k3 = ir_input(g, "k3", ir_shape(4, (int64_t[]){2, 8, 3, 8}), DT_F32, loc);
  Value *bad_qkv[3] = {rs->out, k3, k3};
  ASSERT(1, ir_add(g, OP_ATTENTION, bad_qkv, 3, &ca, loc, NULL, "attention") == NULL);

  /* cross entropy: float logits, i32 targets, scalar result */
  Value *t = ir_input(g, "t", S(2, 2, 8, 0), DT_I32, loc);
  Value *xe[2] = {mm->out, t};
  Node *l = ir_add(g, OP_CROSS_ENTROPY, xe, 2, NULL, loc, NULL, "cross_entropy");
  ASSERT(1, l != NULL);
  ASSERT(0, l->out->shape.ndim);
  Value *xe_bad[2] = {mm->out, mm->out};
  ASSERT(1, ir_add(g, OP_CROSS_ENTROPY, xe_bad, 2, NULL, loc, NULL, "cross_entropy") == NULL);
  g->loss = l->out;

  /* gather: i32 indices */
  Value *emb = ir_param(g, "emb", S(2, 100, 16, 0), loc, true, "normal");
  Value *gi[2] = {emb, t};
  Node *ga = ir_add(g, OP_GATHER, gi, 2, NULL, loc, NULL, "embedding");
  ASSERT(1, ga != NULL);
  ASSERT(16, ga->out->shape.d[2].n);

  diag_reset();
  ASSERT(0, ir_verify(g));
  /* Corrupt a stored shape: the verifier must notice. */
  mm->out->shape.d[2].n = 31;
  ASSERT(-1, ir_verify(g));
  mm->out->shape.d[2].n = 32;
  diag_reset();
  ASSERT(0, ir_verify(g));

  ASSERT(32 * 16 + 32 * 17 + 32 + 32 + 100 * 16, ir_param_count(g));

  /* Printing is deterministic. */
  char *a = NULL, *c = NULL;
  size_t na = 0, nc = 0;
  FILE *fa = open_memstream(&a, &na), *fc = open_memstream(&c, &nc);
  ir_print(fa, g);
  ir_print(fc, g);
  fclose(fa);
  fclose(fc);
  ASSERT_STR(a, c);
  ASSERT(1, strstr(a, "matmul $x, @w : f32[2,8,32]") != NULL);
  free(a);
  free(c);

  ASSERT(4, ir_dtype_size(DT_F32));
  ASSERT(DT_BF16, ir_dtype_from_name("bf16"));
  ASSERT(-1, ir_dtype_from_name("f8"));
  TEST_MAIN_END();
}
