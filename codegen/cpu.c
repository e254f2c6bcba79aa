/* cpu.c — the cpu target: how C + libshardrt + MPI spells the per-rank
 * program's instructions (emit.c writes everything else).  Buffers are
 * F(offset) / I(offset) in the arena, FS / IS in the microbatch's stash
 * slot; kernels are libshardrt calls (the _f32 or _f64 family); a fused
 * elementwise loop is a C loop whose body cexpr.c writes with shared
 * temporaries; collectives are dist.h calls on the mesh's communicators.
 */
#include <inttypes.h>
#include <string.h>

#include "cg.h"

#define P cg_printf

static const char *R(const Emit *e, PRef r) { return cg_ref(e, r); }

/* ---- checks ---- */

static int check(Module *m, const CgOptions *o) {
  const TrainCfg *t = &m->train;
  if (t->precision != DT_F32) {
    const char *msg = arena_printf(
        "precision %s is not implemented yet by the cpu code generator (only fp32)",
        t->precision == DT_BF16 ? "bf16" : t->precision == DT_F16 ? "fp16" : "?");
    if (t->precision_loc.file)
      diag_error(t->precision_loc, "%s", msg);
    else
      diag_fatal_noloc("%s", msg);
    return -1;
  }
  return cg_check_values(m, DT_F32);
}

/* Every value of the plan is f32, i32 or the 16-bit type half (the cuda
 * target's bf16; DT_F32: none), and has its place in the memory plan. */
int cg_check_values(Module *m, DType half) {
  for (int s = 0; s < (m->nstages > 1 ? m->nstages : 1); s++) {
    const Graph *g = m->nstages > 1 ? m->stages[s] : m->graph;
    for (int i = 0; i < g->values.len; i++) {
      const Value *v = g->values.data[i];
      if (v->dtype != DT_F32 && v->dtype != DT_I32 && v->dtype != half) {
        diag_fatal_noloc("value %s has type %s: the code generator handles f32 and i32%s only",
                         prog_vname(v), ir_dtype_name(v->dtype), half != DT_F32 ? " and bf16" : "");
        return -1;
      }
      if (v->live_start >= 0 && !v->alias && v->offset < 0 && v->role != ROLE_PARAM) {
        diag_fatal_noloc("internal: value %s has no place in the memory plan", prog_vname(v));
        return -1;
      }
    }
  }
  return 0;
}

/* ---- prelude ---- */

static void prelude(Emit *e) {
  const RankProg *p = e->m->rprog[0];
  bool ring = p->ring > 1, summa = e->m->train.plan.tp2d > 1;
  P(e, "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n#include \"rt_math.h\"\n"
       "#include \"rt_train.h\"\n");
  if (p->dist) P(e, "#include \"dist.h\"\n");
  if (ring) P(e, "#include \"dist_ring.h\"\n");
  if (summa) P(e, "#include \"dist_summa.h\"\n");
  P(e, "\n/* Buffers of the microbatch being run (RtPass *p). */\n");
  P(e, "#define F(off) ((%s *)(p->arena + (off)))\n", e->R);
  P(e, "#define I(off) ((int32_t *)(p->arena + (off)))\n");
  if (p->pp > 1)
    P(e, "#define FS(off) ((%s *)(p->stash + (off)))\n#define IS(off) ((int32_t *)(p->stash + (off)))\n",
      e->R);
  P(e, "\n");
}

/* ---- fused loops ---- */

static void loop(Emit *e, const PLoop *L) {
  const char **argn, **lhs;
  P(e, "  {\n");
  cg_loop_operands(e, L, &argn, &lhs);
  const char *ind = "      ";
  if (L->inner) {
    P(e, "    for (size_t r = 0; r < %" PRId64 "; r++)\n", L->n / L->inner);
    P(e, "      for (size_t j = 0; j < %" PRId64 "; j++) {\n", L->inner);
    P(e, "        const size_t i = r * %" PRId64 " + j;\n", L->inner);
    ind = "        ";
  } else {
    P(e, "    for (size_t i = 0; i < %" PRId64 "; i++) {\n", L->n);
  }
  cg_emit_exprs(e->o, L->expr, lhs, L->op, L->nout, argn, ind, e->f64 ? CG_F64 : CG_RTMATH);
  P(e, L->inner ? "      }\n  }\n" : "    }\n  }\n");
}

/* ---- kernels ---- */

/* The first position of this rank's sequence chunk, for rotary embeddings. */
static const char *rope_t0(const Node *n, const Shape *s) {
  if (!n->a.i[0]) return "0";
  return arena_printf("p->mesh->coord[%s] * %" PRId64, cg_axis((int)n->a.i[1]), s->d[1].n);
}

/* Ring attention over the sp communicator; its bytes go to the mesh's count. */
static void ring_attention(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  bool fwd = n->op == OP_ATTENTION;
  const Shape *q = &n->in[fwd ? 0 : 1]->shape, *k = &n->in[fwd ? 1 : 2]->shape;
  const char *ax = cg_axis((int)n->a.i[2]);
  P(e, "  // ring over %d sp ranks: K, V %stravel; scratch %s\n", (int)n->a.i[1],
    fwd ? "" : "(and dK, dV) ", cg_shape(e, n->scratch));
  P(e, "  rt_ring_attention_%s%s(p->mesh->comm[%s], &p->mesh->bytes[%s],\n      ",
    fwd ? "forward" : "backward", e->S, ax, ax);
  if (fwd)
    P(e, "%s, %s, %s, %s, %s,\n      ", R(e, in->out[0]), R(e, in->out[1]), R(e, in->in[0]),
      R(e, in->in[1]), R(e, in->in[2]));
  else
    P(e, "%s, %s, %s, %s, %s, %s, %s, %s, %s,\n      ", R(e, in->out[0]), R(e, in->out[1]),
      R(e, in->out[2]), R(e, in->in[0]), R(e, in->in[1]), R(e, in->in[2]), R(e, in->in[3]),
      R(e, in->in[4]), R(e, in->in[5]));
  P(e, "%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s);\n", q->d[0].n,
    q->d[1].n, q->d[2].n, k->d[2].n, q->d[3].n, n->a.i[0] ? 1 : 0, R(e, in->scratch));
}

/* 2D tensor parallelism: a SUMMA matmul (runtime/dist_summa.h), forward
 * (y = x·wᵀ) or backward (dx, dw accumulate; the bias add is its own node),
 * one line per argument group. */
static void summa(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  bool fwd = n->op == OP_MATMUL;
  const Value *x = n->in[fwd ? 0 : 1], *w = n->in[fwd ? 1 : 2];
  const char *row = cg_axis((int)n->a.i[1]), *col = cg_axis((int)n->a.i[2]);
  const char *fn = arena_printf("rt_summa_%s%s(", fwd ? "forward" : "backward", e->S);
  int ind = 2 + (int)strlen(fn);
  P(e, "  %sp->mesh->comm[%s], p->mesh->comm[%s],\n", fn, row, col);
  P(e, "%*s&p->mesh->bytes[%s], &p->mesh->bytes[%s],\n", ind, "", row, col);
  if (fwd)
    P(e, "%*s%s, %s, %s, NULL,\n", ind, "", R(e, in->out[0]), R(e, in->in[0]), R(e, in->in[1]));
  else
    P(e, "%*s%s, %s, NULL, %s, %s, %s,\n", ind, "", R(e, in->out[0]), R(e, in->out[1]),
      R(e, in->in[0]), R(e, in->in[1]), R(e, in->in[2]));
  P(e, "%*s%" PRId64 ", %" PRId64 ", %" PRId64 ", %s);\n", ind, "", cg_rows(x), cg_last_dim(x),
    w->shape.d[0].n, R(e, in->scratch));
}

/* A layernorm / rmsnorm with the channels split over a mesh axis (the grid
 * row): statistics all-reduced per row (runtime/dist_summa.h).  Lines:
 * communicator; outputs; inputs; sizes and scratch. */
static void norm_split(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  const char *ax = cg_axis((int)n->a.i[1]);
  bool ln = n->op == OP_LAYERNORM || n->op == OP_LAYERNORM_BWD;
  bool fwd = n->op == OP_LAYERNORM || n->op == OP_RMSNORM;
  const char *fn = arena_printf("rt_%s_split_%s%s(", ln ? "layernorm" : "rmsnorm",
                                fwd ? "forward" : "backward", e->S);
  int ind = 2 + (int)strlen(fn), nd = n->nout, nx = n->nin;
  const Value *xin = n->in[fwd ? 0 : 1];
  P(e, "  %sp->mesh->comm[%s], &p->mesh->bytes[%s],\n%*s", fn, ax, ax, ind, "");
  for (int j = 0; j < nd; j++) P(e, "%s%s", j ? ", " : "", R(e, in->out[j]));
  P(e, ",\n%*s", ind, "");
  for (int k = 0; k < nx; k++) P(e, "%s%s", k ? ", " : "", R(e, in->in[k]));
  P(e, ",\n%*s%" PRId64 ", %" PRId64 ", %" PRId64 ", ", ind, "", cg_rows(xin), cg_last_dim(xin),
    n->a.i[2]);
  if (fwd) P(e, "%.9g, ", n->a.f[0]);
  P(e, "(double *)%s);\n", R(e, in->scratch));
}

static void kernel(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  const PRef *x = in->in, *y = in->out;
  const Value *const *xv = (const Value *const *)n->in;
  const char *S = e->S;
  if (ir_summa_q(n)) return summa(e, in);
  if (ir_norm_split(n)) return norm_split(e, in);
  if (ir_ring_size(n) > 1) return ring_attention(e, in);
  switch (n->op) {
  case OP_MATMUL:
    P(e, "  rt_matmul_forward%s(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");\n", S,
      R(e, y[0]), R(e, x[0]), R(e, x[1]), R(e, in->bias), cg_rows(xv[0]), cg_last_dim(xv[0]),
      cg_last_dim(n->out));
    return;
  case OP_GELU: case OP_RELU: case OP_SILU:
    P(e, "  rt_%s_forward%s(%s, %s, %" PRId64 ");\n", ir_ops[n->op].name, S, R(e, y[0]),
      R(e, x[0]), cg_numel(n->out));
    return;
  case OP_LAYERNORM:
    if (n->a.f[0] == 1e-5)
      P(e, "  rt_layernorm_forward%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S,
        R(e, y[0]), R(e, y[1]), R(e, y[2]), R(e, x[0]), R(e, x[1]), R(e, x[2]), cg_rows(xv[0]),
        cg_last_dim(xv[0]));
    else
      P(e, "  rt_layernorm_forward_eps%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %.9g);\n",
        S, R(e, y[0]), R(e, y[1]), R(e, y[2]), R(e, x[0]), R(e, x[1]), R(e, x[2]), cg_rows(xv[0]),
        cg_last_dim(xv[0]), n->a.f[0]);
    return;
  case OP_RMSNORM:
    P(e, "  rt_rmsnorm_forward%s(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %.9g);\n", S, R(e, y[0]),
      R(e, y[1]), R(e, x[0]), R(e, x[1]), cg_rows(xv[0]), cg_last_dim(xv[0]), n->a.f[0]);
    return;
  case OP_SOFTMAX:
    P(e, "  rt_softmax_forward%s(%s, %s, %" PRId64 ", %" PRId64 ");\n", S, R(e, y[0]), R(e, x[0]),
      cg_rows(xv[0]), cg_last_dim(xv[0]));
    return;
  case OP_DROPOUT:
  case OP_DROPOUT_BWD: {
    bool fwd = n->op == OP_DROPOUT;
    /* the mask's site: (the stage and) the forward node, then the element's global index */
    uint64_t st = in->site >> 56, node = in->site >> 40 & 0xffff;
    P(e, "  rt_dropout_%s%s(%s, %s, %" PRId64 ", %.9g, p->seed, (uint64_t)p->step,\n"
         "  %*s(%s%" PRIu64 "ull << 40) + (uint64_t)p->row0 * %" PRId64 ");\n",
      fwd ? "forward" : "backward", S, R(e, y[0]), R(e, x[0]), cg_numel(xv[0]), n->a.f[0],
      fwd ? 20 : 21, "", st ? arena_printf("%" PRIu64 "ull << 56 | ", st) : "", node, in->row_elems);
    return;
  }
  case OP_GATHER:
    if (n->a.i[0]) {
      int64_t vl = xv[0]->shape.d[0].n;
      P(e, "  rt_check(rt_embedding_range_forward%s(%s, %s, %s, %" PRId64 ", p->mesh->coord[%s] * %" PRId64
           ", %" PRId64 ", %" PRId64 ", %d));  // vocab-parallel: rows outside this shard are 0\n",
        S, R(e, y[0]), R(e, x[1]), R(e, x[0]), cg_numel(xv[1]), cg_axis((int)n->a.i[2]), vl, vl,
        cg_last_dim(xv[0]), e->p->vocab);
      return;
    }
    P(e, "  rt_check(rt_embedding_forward%s(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 "));\n",
      S, R(e, y[0]), R(e, x[1]), R(e, x[0]), cg_numel(xv[1]), xv[0]->shape.d[0].n,
      cg_last_dim(xv[0]));
    return;
  case OP_SHARD: {
    int64_t outer, inner;
    ir_dim_split(&xv[0]->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
    P(e, "  rt_chunk_copy(%s, %s, %" PRId64 ", %" PRId64 ", %d, p->mesh->coord[%s], %d);\n",
      R(e, y[0]), R(e, x[0]), outer, inner, (int)n->a.i[1], cg_axis((int)n->a.i[2]),
      n->out->dtype == DT_I32 ? 4 : e->es);
    return;
  }
  case OP_SLICE:
    P(e, "  rt_slice_cols_forward%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ");\n",
      S, R(e, y[0]), R(e, x[0]), cg_rows(xv[0]), cg_last_dim(xv[0]), n->a.i[0], n->a.i[1]);
    return;
  case OP_ROPE:
  case OP_ROPE_BWD: {
    bool fwd = n->op == OP_ROPE;
    const Shape *s = &xv[fwd ? 0 : 1]->shape;
    P(e, "  rt_rope_%s%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %.9g, %s);\n",
      fwd ? "forward" : "backward", S, R(e, y[0]), R(e, x[0]), s->d[0].n, s->d[1].n, s->d[2].n,
      s->d[3].n, n->a.f[0], rope_t0(n, s));
    return;
  }
  case OP_ATTENTION: {
    const Shape *q = &xv[0]->shape, *k = &xv[1]->shape;
    P(e, "  rt_attention_forward%s(%s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64
         ", %" PRId64 ", %" PRId64 ", %d);\n",
      S, R(e, y[0]), R(e, y[1]), R(e, x[0]), R(e, x[1]), R(e, x[2]), q->d[0].n, q->d[1].n,
      q->d[2].n, k->d[2].n, q->d[3].n, n->a.i[0] ? 1 : 0);
    return;
  }
  case OP_CROSS_ENTROPY: {
    int s = in->ce_slot;
    const char *loss = arena_printf("%sce_loss%s[%d]", e->pre, e->sfx, s);
    const char *rows = arena_printf("%sce_rows%s[%d]", e->pre, e->sfx, s);
    if (n->a.i[1]) {
      int64_t vl = cg_last_dim(xv[0]);
      P(e, "  rt_check(rt_vp_crossentropy_forward%s(p->mesh, %s, &%s, %s, %s, %" PRId64
           ", %" PRId64 ", p->mesh->coord[%s] * %" PRId64 ", %" PRId64 ", (double *)%s));\n",
        S, cg_axis((int)n->a.i[3]), loss, R(e, x[0]), R(e, x[1]), cg_rows(xv[0]), vl,
        cg_axis((int)n->a.i[3]), vl, cg_xent_classes(n, vl * n->a.i[2]), R(e, in->scratch));
      P(e, "  %s = %" PRId64 ";\n", rows, cg_rows(xv[0]));
    } else if (cg_xent_classes(n, cg_last_dim(xv[0])) < cg_last_dim(xv[0])) {
      P(e, "  rt_check(rt_crossentropy_forward_ld%s(&%s, &%s, NULL, NULL, %s, %s, %" PRId64
           ", %" PRId64 ", %" PRId64 "));\n",
        S, loss, rows, R(e, x[0]), R(e, x[1]), cg_rows(xv[0]),
        cg_xent_classes(n, cg_last_dim(xv[0])), cg_last_dim(xv[0]));
    } else {
      P(e, "  rt_check(rt_crossentropy_forward%s(&%s, &%s, NULL, NULL, %s, %s, %" PRId64 ", %" PRId64
           "));\n",
        S, loss, rows, R(e, x[0]), R(e, x[1]), cg_rows(xv[0]), cg_last_dim(xv[0]));
    }
    cg_store(e, y[0], arena_printf("(%s)%s", e->R, loss));
    return;
  }
  /* ---- backward ---- */
  case OP_MATMUL_BWD:
    P(e, "  rt_matmul_backward%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");\n",
      S, R(e, y[0]), R(e, y[1]), R(e, in->dbias), R(e, x[0]), R(e, x[1]), R(e, x[2]),
      cg_rows(xv[1]), cg_last_dim(xv[1]), cg_last_dim(xv[0]));
    return;
  case OP_LAYERNORM_BWD:
    P(e, "  rt_layernorm_backward%s(%s, %s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S,
      R(e, y[0]), R(e, y[1]), R(e, y[2]), R(e, x[0]), R(e, x[1]), R(e, x[2]), R(e, x[3]),
      R(e, x[4]), cg_rows(xv[1]), cg_last_dim(xv[1]));
    return;
  case OP_RMSNORM_BWD:
    P(e, "  rt_rmsnorm_backward%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S,
      R(e, y[0]), R(e, y[1]), R(e, x[0]), R(e, x[1]), R(e, x[2]), R(e, x[3]), cg_rows(xv[1]),
      cg_last_dim(xv[1]));
    return;
  case OP_GELU_BWD: case OP_RELU_BWD: case OP_SILU_BWD: {
    const char *nm = n->op == OP_GELU_BWD ? "gelu" : n->op == OP_RELU_BWD ? "relu" : "silu";
    P(e, "  rt_%s_backward%s(%s, %s, %s, %" PRId64 ");\n", nm, S, R(e, y[0]), R(e, x[1]),
      R(e, x[0]), cg_numel(xv[0]));
    return;
  }
  case OP_SOFTMAX_BWD:
    P(e, "  rt_softmax_backward%s(%s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S, R(e, y[0]),
      R(e, x[0]), R(e, x[1]), cg_rows(xv[0]), cg_last_dim(xv[0]));
    return;
  case OP_ACC:
    P(e, "  rt_acc%s(%s, %s, %" PRId64 ");\n", S, R(e, y[0]), R(e, x[0]), cg_numel(xv[0]));
    return;
  case OP_SHARD_BWD: {
    int64_t outer, inner;
    ir_dim_split(&xv[1]->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
    P(e, "  rt_chunk_acc%s(%s, %s, %" PRId64 ", %" PRId64 ", %d, p->mesh->coord[%s]);\n", S,
      R(e, y[0]), R(e, x[0]), outer, inner, (int)n->a.i[1], cg_axis((int)n->a.i[2]));
    return;
  }
  case OP_GATHER_BWD:
    if (n->a.i[0]) {
      int64_t vl = xv[1]->shape.d[0].n;
      P(e, "  rt_embedding_range_backward%s(%s, %s, %s, %" PRId64 ", p->mesh->coord[%s] * %" PRId64
           ", %" PRId64 ", %" PRId64 ");\n",
        S, R(e, y[0]), R(e, x[0]), R(e, x[2]), cg_numel(xv[2]), cg_axis((int)n->a.i[2]), vl, vl,
        cg_last_dim(xv[1]));
      return;
    }
    P(e, "  rt_embedding_backward%s(%s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S, R(e, y[0]),
      R(e, x[0]), R(e, x[2]), cg_numel(xv[2]), cg_last_dim(xv[1]));
    return;
  case OP_SLICE_BWD:
    P(e, "  rt_slice_cols_backward%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ");\n",
      S, R(e, y[0]), R(e, x[0]), cg_rows(xv[1]), cg_last_dim(xv[1]), n->a.i[0], n->a.i[1]);
    return;
  case OP_ATTENTION_BWD: {
    const Shape *q = &xv[1]->shape, *k = &xv[2]->shape;
    P(e, "  rt_attention_backward%s(%s, %s, %s,\n      %s, %s, %s, %s, %s, %s, %" PRId64
         ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d);\n",
      S, R(e, y[0]), R(e, y[1]), R(e, y[2]), R(e, x[0]), R(e, x[1]), R(e, x[2]), R(e, x[3]),
      R(e, x[4]), R(e, x[5]), q->d[0].n, q->d[1].n, q->d[2].n, k->d[2].n, q->d[3].n,
      n->a.i[0] ? 1 : 0);
    return;
  }
  case OP_CROSS_ENTROPY_BWD: {
    const char *rows = arena_printf("%sce_rows%s[%d]", e->pre, e->sfx, in->ce_slot);
    if (n->a.i[1]) {
      int64_t vl = cg_last_dim(xv[1]), V = cg_xent_classes(n, vl * n->a.i[2]);
      if (V < vl * n->a.i[2])
        P(e, "  rt_vp_crossentropy_backward_acc_cls%s(p->mesh, %s, %s, %s, %s, %" PRId64
             ", %" PRId64 ", p->mesh->coord[%s] * %" PRId64 ", %" PRId64 ", %s, %s, (double *)%s);\n",
          S, cg_axis((int)n->a.i[3]), R(e, y[0]), R(e, x[1]), R(e, x[2]), cg_rows(xv[1]), vl,
          cg_axis((int)n->a.i[3]), vl, V, cg_load(e, x[0]), rows, R(e, in->scratch));
      else
        P(e, "  rt_vp_crossentropy_backward_acc%s(p->mesh, %s, %s, %s, %s, %" PRId64 ", %" PRId64
             ", p->mesh->coord[%s] * %" PRId64 ", %s, %s, (double *)%s);\n",
          S, cg_axis((int)n->a.i[3]), R(e, y[0]), R(e, x[1]), R(e, x[2]), cg_rows(xv[1]), vl,
          cg_axis((int)n->a.i[3]), vl, cg_load(e, x[0]), rows, R(e, in->scratch));
      return;
    }
    int64_t V = cg_xent_classes(n, cg_last_dim(xv[1]));
    if (V < cg_last_dim(xv[1])) {
      P(e, "  rt_crossentropy_backward%s_ld%s(%s, %s, NULL, %s, %" PRId64 ", %" PRId64 ", %" PRId64
           ", %s, %s);%s\n",
        in->assign ? "" : "_acc", S, R(e, y[0]), R(e, x[1]), R(e, x[2]), cg_rows(xv[1]), V,
        cg_last_dim(xv[1]), cg_load(e, x[0]), rows,
        in->assign ? "  // writes: the first contribution" : "");
      return;
    }
    P(e, "  rt_crossentropy_backward%s%s(%s, %s, NULL, %s, %" PRId64 ", %" PRId64 ", %s, %s);%s\n",
      in->assign ? "" : "_acc", S, R(e, y[0]), R(e, x[1]), R(e, x[2]), cg_rows(xv[1]),
      cg_last_dim(xv[1]), cg_load(e, x[0]), rows, in->assign ? "  // writes: the first contribution" : "");
    return;
  }
  default:
    P(e, "  #error \"no code for op %s\"\n", ir_ops[n->op].name);
  }
}

/* ---- communication ---- */

static void coll(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  const Value *yv = n->out, *xv = n->in[0];
  const char *ax = cg_axis((int)n->a.i[2]);
  if (n->op == OP_ALLREDUCE) {
    if (in->out[0].off != in->in[0].off || in->out[0].stash != in->in[0].stash)
      P(e, "  %s(%s, %s, %" PRId64 ");\n", cg_memcpy(e), R(e, in->out[0]), R(e, in->in[0]),
        cg_numel(yv) * e->es);
    P(e, "  rt_allreduce(p->mesh, %s, %s, %" PRId64 ", %d);\n", ax, R(e, in->out[0]), cg_numel(yv),
      e->es);
    return;
  }
  bool gather = n->op == OP_ALLGATHER || n->op == OP_ALLGATHER_G;
  int64_t outer, inner;
  ir_dim_split(&(gather ? yv : xv)->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
  P(e, "  rt_%s_dim(p->mesh, %s, %s, %s, %" PRId64 ", %" PRId64 ", %d, %s);\n",
    gather ? "allgather" : "reduce_scatter", ax, R(e, in->out[0]), R(e, in->in[0]), outer, inner,
    e->es, R(e, in->scratch));
}

/* A gradient bucket's reduction (passes/zero.c): ZeRO-2/3 reduce-scatter
 * into this rank's gradient shard every microbatch; plain dp (all-reduce)
 * and ZeRO-1 (reduce-scatter) start it in the last microbatch without
 * blocking (the step waits). */
static void bucket(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  const char *ax = cg_axis((int)n->a.i[2]);
  const Bucket *b = e->p->buckets->data[in->bucket];
  if (in->req < 0) {
    P(e, "  rt_reduce_scatter_acc(p->mesh, %s, %s, %s, %" PRId64 ", %d, %s);\n", ax,
      R(e, in->out[0]), R(e, in->in[0]), cg_numel(n->out), e->es, R(e, in->scratch));
    return;
  }
  P(e, "  if (p->last_mb)  // bucket %s: overlaps the rest of the backward\n", b->name);
  if (n->op == OP_GRAD_ALLREDUCE)
    P(e, "    rt_bucket_allreduce(p, %d, %s, %s, %" PRId64 ");\n", in->req, ax, R(e, in->in[0]),
      cg_numel(n->in[0]));
  else
    P(e, "    rt_bucket_reduce_scatter(p, %d, %s, %s, %s, %" PRId64 ");\n", in->req, ax,
      R(e, in->out[0]), R(e, in->in[0]), cg_numel(n->out));
}

static void instr(Emit *e, const PInstr *in) {
  switch (in->kind) {
  case PI_LOAD:
    P(e, "  // %s, %s\n  rt_load_batch(p, %s, %s);\n", prog_vname(in->out[0].v),
      prog_vname(in->out[1].v), R(e, in->out[0]), R(e, in->out[1]));
    return;
  case PI_RECV:
  case PI_SEND: {
    bool recv = in->kind == PI_RECV;
    PRef b = recv ? in->out[0] : in->in[0];
    /* scatter/gather: this tp rank's slice, the receive all-gathers it */
    const char *fn = in->split ? (recv ? "recv_gather" : "send_scatter") : (recv ? "recv" : "send");
    P(e, "  rt_pipe_%s(p, %d, %d, %d, %s, %" PRId64 ");  // %s %s stage %d%s\n", fn, in->peer_vs,
      in->lower_vs, in->grad, R(e, b), in->count, prog_vname(b.v), recv ? "from" : "to",
      in->peer_vs, in->split ? arena_printf(", 1/%d per tp rank", in->split) : "");
    return;
  }
  case PI_SEED:
    if (in->received) {
      P(e, "  /* %s: received from stage %d above */\n", R(e, in->out[0]), e->c->vs + 1);
    } else {
      char lit[64];
      cg_literal(lit, sizeof lit, in->value, e->f64);
      cg_store(e, in->out[0], lit);
    }
    return;
  case PI_COPY:
    P(e, "  %s(%s, %s, %" PRId64 ");  // not a view in the plan: a copy\n", cg_memcpy(e),
      R(e, in->out[0]), R(e, in->in[0]), in->bytes);
    return;
  case PI_LOOP:
    loop(e, in->loop);
    return;
  case PI_COLL:
    coll(e, in);
    return;
  case PI_BUCKET:
    bucket(e, in);
    return;
  case PI_POST:
    P(e, "  rt_pipe_post(p);  // the queued messages posted, then the receives' all-gathers\n");
    return;
  case PI_KERNEL:
    kernel(e, in);
    return;
  }
}

const Target cg_target_cpu = {"cpu",   check,    prelude,    instr, cg_build_cpu, "model.c",
                              "_f32",  "memset", "memcpy",   "*%s", "*%s = %s;",  NULL,
                              NULL,    NULL,     NULL,       NULL,        NULL,
                              NULL};
