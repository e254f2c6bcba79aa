/* test_passes.c — autodiff and memplan invariants on every sample:
 * every parameter gets a gradient, the verifier accepts the backward graph,
 * no two buffers that are live at the same node overlap in the arena, and
 * the persistent sizes follow from the parameter count. */
#include <stdlib.h>

#include "passes.h"
#include "sema.h"
#include "runtime/dist_formulas.h"
#include "runtime/rt_optim.h"
#include "test.h"

static Value *root(Value *v) {
  while (v->alias) v = v->alias;
  return v;
}

static int64_t bytes_of(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* sp=ring: every attention is a ring over sp with the runtime's scratch, and
 * the plan's sp volume is the ring's (runtime/dist_formulas.h) per microbatch;
 * the step sums gradients over dp x sp. */
static void check_ring(Module *m, int sp) {
  Graph *g = m->graph;
  uint64_t vol = 0;
  int rings = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = g->nodes.data[i];
    if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_BWD) continue;
    ASSERT(sp, ir_ring_size(n));
    ASSERT(AX_SP, ir_comm_axis(n, NULL));
    bool fwd = n->op == OP_ATTENTION;
    const Shape *q = &n->in[fwd ? 0 : 1]->shape, *k = &n->in[fwd ? 1 : 2]->shape;
    size_t B = q->d[0].n, Tl = q->d[1].n, H = q->d[2].n, Hkv = k->d[2].n, D = q->d[3].n;
    size_t kv = B * Tl * Hkv * D;
    ASSERT(1, n->scratch != NULL);
    if (n->scratch)
      ASSERT((int64_t)(4 * (fwd ? rt_scratch_ring_fwd(B, Tl, H, Hkv, D)
                                : rt_scratch_ring_bwd(B, Tl, H, Hkv, D))),
             ir_numel(&n->scratch->shape) * ir_dtype_size(n->scratch->dtype));
    vol += fwd ? rt_vol_ring_fwd(kv, 4, sp) : rt_vol_ring_bwd(kv, 4, sp);
    rings++;
  }
  ASSERT(1, rings >= 2);
  uint64_t ax[AX_COUNT];
  plan_comm_bytes(m, ax);
  ASSERT(vol * (uint64_t)m->train.plan.mb, ax[AX_SP]);
  ASSERT(rt_vol_allreduce((uint64_t)m->mem.grad_bytes, m->train.plan.dp * sp), ax[AX_DATA]);
  ASSERT(0, ax[AX_DP]);
}


/* strategy: NULL for the sample's own, else e.g. "dp=4,zero=3" on 4 ranks. */
static void check_sample(const char *path, const char *strategy) {
  diag_reset();
  SrcFile *f = src_load(path);
  ASSERT(1, f != NULL);
  if (!f) return;
  Program *p = ast_parse(f);
  SemaOptions o = {0};
  o.strategy = strategy;
  if (strategy) o.mesh = "4";
  Module *m = p ? frontend_run(p, &o) : NULL;
  ASSERT(0, diag_error_count());
  if (!m || !m->graph) return;
  for (int i = 0; i < pass_count; i++) ASSERT(0, pass_list[i].run(m));
  ASSERT(0, ir_verify(m->graph));
  Graph *g = m->graph;

  /* every parameter has a gradient of its shape */
  for (int i = 0; i < g->params.len; i++) {
    Value *pv = g->params.data[i];
    ASSERT(1, pv->grad != NULL);
    if (pv->grad) ASSERT(1, ir_shape_eq(&pv->shape, &pv->grad->shape));
  }
  /* the backward seeds the loss gradient with 1/mb (1/(mb·sp) under sp=ring:
   * the loss is a mean over 1/sp of the tokens, summed over the sp ranks) */
  const Plan *pl = &m->train.plan;
  int ring = pl->sp_kind == SP_RING && pl->sp > 1 ? pl->sp : 1;
  Node *seed = g->nodes.data[g->nfwd];
  ASSERT(OP_FILL, seed->op);
  ASSERT_NEAR(1.0 / (pl->mb * ring), seed->a.f[0], 1e-12);
  if (ring > 1) check_ring(m, ring);

  /* persistent sizes: params, grads, AdamW's m and v (64-byte aligned each) */
  int64_t pb = 0;
  for (int i = 0; i < g->params.len; i++) pb += (bytes_of(g->params.data[i]) + 63) / 64 * 64;
  int nstate = !strcmp(m->train.opt.kind, "adamw") ? 2 : m->train.opt.momentum > 0 ? 1 : 0;
  int zero = m->train.plan.zero, dp = m->train.plan.dp;
  if (zero >= 2) {
    /* ZeRO-2/3: the buckets pad the flat layout to 16·dp elements each; a
     * rank keeps 1/dp of it as gradients (and ZeRO-3 as parameters) */
    int64_t flat = 0;
    for (int k = 0; k < g->buckets.len; k++) flat += ((Bucket *)g->buckets.data[k])->numel * 4;
    ASSERT(1, flat >= pb && flat < pb + g->buckets.len * 64 * dp);
    ASSERT(flat, m->mem.grad_bytes * dp);
    ASSERT(zero == 3 ? flat / dp : flat, m->mem.param_bytes);
    ASSERT(nstate * m->mem.grad_bytes, m->mem.optstate_bytes);
    for (int i = 0; i < g->params.len; i++) {
      Value *pv = g->params.data[i];
      ASSERT(1, root(pv->grad) != pv->grad && !root(pv->grad)->persistent);
    }
  } else {
    ASSERT(pb, m->mem.param_bytes);
    ASSERT(pb, m->mem.grad_bytes);
    ASSERT(nstate * pb, m->mem.optstate_bytes);
  }
  ASSERT(m->mem.persistent_bytes + m->mem.transient_peak, m->mem.arena_bytes);

  /* no overlap between simultaneously live transient buffers; all inside the arena */
  PtrVec roots = {0};
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    if (v->alias || v->live_start < 0) continue;
    vec_push(&roots, v);
    ASSERT(1, v->offset >= 0 && v->offset + bytes_of(v) <= m->mem.arena_bytes);
    if (v->offset % 64) ASSERT(0, v->offset % 64);
  }
  int overlaps = 0;
  for (int i = 0; i < roots.len; i++)
    for (int j = i + 1; j < roots.len; j++) {
      Value *a = roots.data[i], *b = roots.data[j];
      bool time = a->persistent || b->persistent ||
                  !(a->live_end < b->live_start || b->live_end < a->live_start);
      bool space = a->offset < b->offset + bytes_of(b) && b->offset < a->offset + bytes_of(a);
      if (time && space) overlaps++;
    }
  ASSERT(0, overlaps);
  /* aliases share their root's storage */
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    if (v->alias) ASSERT(root(v)->offset + ir_view_off(v), v->offset);
  }
  /* the peak is reached: some buffer ends exactly at the arena's top */
  int64_t top = m->mem.persistent_bytes;
  for (int i = 0; i < roots.len; i++) {
    Value *v = roots.data[i];
    int64_t end = v->offset + (bytes_of(v) + 63) / 64 * 64;
    if (end > top) top = end;
  }
  ASSERT(m->mem.arena_bytes, top);
}

/* ZeRO with Shampoo (zero.c owner_layout): every tensor lies whole in its
 * owner's chunk, the tensors of a chunk do not overlap, the chunk is the
 * fullest owner's; each tensor's state lies in the state region before the
 * workspace, and an owner's states do not overlap.  ZeRO-1 merges the
 * buckets (group_owner_buckets): every parameter in one bucket, and the
 * buckets padded by at most max_pad percent (< 0: not checked). */
static void check_owners(const char *path, const char *strategy, int max_pad) {
  diag_reset();
  SrcFile *f = src_load(path);
  ASSERT(1, f != NULL);
  if (!f) return;
  Program *p = ast_parse(f);
  SemaOptions o = {.strategy = strategy, .mesh = "4"};
  Module *m = p ? frontend_run(p, &o) : NULL;
  ASSERT(0, diag_error_count());
  if (!m || !m->graph) return;
  for (int i = 0; i < pass_count; i++) ASSERT(0, pass_list[i].run(m));
  Graph *g = m->graph;
  int dp = m->train.plan.dp;
  int64_t *state_end = calloc((size_t)dp, sizeof(int64_t));
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    ASSERT(1, b->owner != NULL);
    if (!b->owner) continue;
    ASSERT(b->chunk * dp, b->numel);
    int64_t *fill = calloc((size_t)dp, sizeof(int64_t)), most = 0;
    for (int j = 0; j < b->params.len; j++) {
      Value *v = b->params.data[j];
      int r = b->owner[j];
      int64_t n = ir_numel(&v->shape), lo = r * b->chunk + fill[r];
      ASSERT(lo, b->pos[j]);                       /* packed in parameter order */
      ASSERT(1, b->pos[j] + n <= (r + 1) * b->chunk);
      fill[r] += (n + 15) / 16 * 16;
      if (fill[r] > most) most = fill[r];
      if (!v->grad) continue;
      int64_t sb = (opt_state_elems(&m->train.opt, &v->shape) * 4 + 63) / 64 * 64;
      ASSERT(m->mem.zero_opt_offset + state_end[r], v->opt_offset);
      state_end[r] += sb;
      ASSERT(1, v->opt_offset + sb <= m->mem.opt_work_offset);
    }
    ASSERT(most, b->chunk);
    free(fill);
  }
  free(state_end);
  int64_t padded = 0, elems = 0, inb = 0;
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    padded += b->numel;
    for (int j = 0; j < b->params.len; j++) {
      elems += (ir_numel(&((Value *)b->params.data[j])->shape) + 15) / 16 * 16;
      inb++;
    }
  }
  ASSERT(g->params.len, inb);
  if (max_pad >= 0) {
    ASSERT(1, padded * 100 <= elems * (100 + max_pad));
    if (padded * 100 > elems * (100 + max_pad))
      fprintf(stderr, "%s %s: buckets of %lld elements for %lld\n", path, strategy,
              (long long)padded, (long long)elems);
  }
}

/* rt_shampoo_block_off's closed form against the sum it stands for: the
 * factors and roots (2 (r² + c²) elements) of every block before (bi, bj)
 * in row-major block order, and of all blocks at (number of row blocks, 0). */
static void check_block_off(void) {
  int bad = 0;
  for (int64_t R = 2; R < 30; R++)
    for (int64_t C = 2; C < 30; C += 3)
      for (int64_t b = 1; b < 33; b++) {
        int64_t nbr = rt_shampoo_nblocks(R, b), nbc = rt_shampoo_nblocks(C, b), off = 0;
        for (int64_t i = 0; i < nbr; i++)
          for (int64_t j = 0; j < nbc; j++) {
            bad += rt_shampoo_block_off(R, C, b, i, j) != off;
            int64_t r = rt_shampoo_bsize(R, b, i), c = rt_shampoo_bsize(C, b, j);
            off += 2 * (r * r + c * c);
          }
        bad += rt_shampoo_block_off(R, C, b, nbr, 0) != off;
      }
  ASSERT(0, bad);
}

int main(void) {
  diag_set_quiet_warnings(1);
  check_block_off();
  check_owners("dist/gpt_shampoo.shard", "dp=4,zero=2", -1);
  check_owners("dist/gpt_adafactor.shard", "dp=4,zero=3", -1);
  /* ZeRO-1: the layers' buckets merged, +45% padding (dp=4) before */
  check_owners("dist/gpt_shampoo.shard", "dp=4,zero=1", ZERO_GROUP_PAD_PCT);
  check_owners("dist/gpt_adafactor.shard", "dp=4,zero=1", ZERO_GROUP_PAD_PCT);
  const char *samples[] = {"../samples/mlp.shard", "../samples/gpt.shard", "../samples/llama.shard",
                           "../samples/mish.shard", "golden/gqa_rope.shard",
                           "golden/ring.shard"};
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) check_sample(samples[i], NULL);
  check_sample("../samples/gpt.shard", "dp=4,zero=2");
  check_sample("../samples/gpt.shard", "dp=4,zero=3");
  check_sample("../samples/gpt.shard", "tp=2,dp=2,zero=3");
  TEST_MAIN_END();
}
