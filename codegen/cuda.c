/* cuda.c — the cuda target: how host C++ + CUDA kernels + cuBLASLt + NCCL
 * spell the per-rank program's instructions (emit.c writes everything
 * else, the same as for the cpu target).
 *
 * Buffers are F(offset) / I(offset) in the rank's device arena (FS / IS in
 * the microbatch's stash slot).  A kernel instruction is the launcher of
 * runtime/cuda/rtc.h with the cpu kernel's name and arguments and the
 * suffix _cu, so it is written by the cpu record with that suffix; a fused
 * elementwise chain is a device lambda run by rtc_foreach, its body from
 * the same scalar-expression writer (cexpr.c); collectives are NCCL calls
 * (runtime/cuda/rtc_dist.cu) on the mesh axes' communicators; scalars the
 * host reads or writes (a loss, the backward's seed) go through
 * rtc_get_f32 / rtc_set_f32.
 *
 * Instructions that have no CUDA kernel yet (2D-tensor-parallel SUMMA
 * matmuls, layernorms with split channels, ring attention, vocab-parallel
 * cross-entropy) are staged: their buffers are copied to the arena's host
 * mirror (HF / HI), the cpu runtime runs them there over MPI, and what they
 * write is copied back.  The plan header lists them; they are correct and
 * slow.
 */
#include <inttypes.h>
#include <string.h>

#include "cg.h"

#define P cg_printf

static const char *R(const Emit *e, PRef r) { return cg_ref(e, r); }

/* Whether the device code has no kernel for this instruction: it runs on
 * the host mirror through the cpu runtime. */
static bool staged(const PInstr *in) {
  if (in->kind != PI_KERNEL) return false;
  const Node *n = in->n;
  if (ir_summa_q(n) || ir_norm_split(n) || ir_ring_size(n) > 1) return true;
  return (n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) && n->a.i[1];
}

static int check(Module *m, const CgOptions *o) {
  const TrainCfg *t = &m->train;
  if (o && o->f64) {
    diag_fatal_noloc("--precision=fp64 builds are cpu-only (gradient checks); use --target cpu");
    return -1;
  }
  if (t->precision != DT_F32) {
    const char *msg = arena_printf(
        "precision %s is not generated yet by the cuda code generator (fp32 only; bf16 mixed "
        "precision is being built)",
        t->precision == DT_BF16 ? "bf16" : t->precision == DT_F16 ? "fp16" : "?");
    if (t->precision_loc.file)
      diag_error(t->precision_loc, "%s", msg);
    else
      diag_fatal_noloc("%s", msg);
    return -1;
  }
  if (t->opt.kind && strcmp(t->opt.kind, "adamw") && strcmp(t->opt.kind, "sgd")) {
    diag_fatal_noloc("optimizer %s is not generated yet by the cuda code generator (adamw and "
                     "sgd are); use --target cpu",
                     t->opt.kind);
    return -1;
  }
  /* The values the program touches are the cpu target's: f32 and i32. */
  return cg_target_cpu.check(m, o);
}

static void prelude(Emit *e) {
  const RankProg *p = e->m->rprog[0];
  bool ring = p->ring > 1, summa = e->m->train.plan.tp2d > 1;
  P(e, "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n#include \"rt_train.h\"\n");
  if (p->dist) P(e, "#include \"dist.h\"\n");
  if (ring) P(e, "#include \"dist_ring.h\"\n");
  if (summa) P(e, "#include \"dist_summa.h\"\n");
  P(e, "#include \"rtc_program.cuh\"\n");
  P(e, "\n/* Buffers of the microbatch being run (RtPass *p): device memory; HF, HI are\n"
       " * the arena's host mirror, for instructions staged through the host. */\n");
  P(e, "#define F(off) ((float *)(p->arena + (off)))\n");
  P(e, "#define I(off) ((int32_t *)(p->arena + (off)))\n");
  P(e, "#define HF(off) ((float *)(p->host + (off)))\n");
  P(e, "#define HI(off) ((int32_t *)(p->host + (off)))\n");
  if (p->pp > 1) {
    P(e, "#define FS(off) ((float *)(p->stash + (off)))\n#define IS(off) ((int32_t *)(p->stash + (off)))\n");
    P(e, "#define HFS(off) ((float *)(p->host + (p->stash - p->arena) + (off)))\n"
         "#define HIS(off) ((int32_t *)(p->host + (p->stash - p->arena) + (off)))\n");
  }
  P(e, "\n");
}

/* ---- fused loops: one device lambda over the elements ---- */

static const char *cname(const Value *v) {
  if (v->role == ROLE_GRAD) return arena_printf("d%d", v->grad_of->id);
  return arena_printf("x%d", v->id);
}

static void loop(Emit *e, const PLoop *L) {
  const char **argn = arena_alloc(sizeof(char *) * (size_t)(L->nin + 1));
  const char **lhs = arena_alloc(sizeof(char *) * (size_t)(L->nout + 1));
  P(e, "  {\n");
  for (int i = 0; i < L->nin; i++) {
    bool dup = false, written = false;
    for (int k = 0; k < i; k++) dup |= L->in[k].r.v == L->in[i].r.v;
    for (int k = 0; k < L->nout; k++) written |= L->out[k].r.v == L->in[i].r.v;
    if (!dup && !written)
      P(e, "    const %s *%s = %s;\n", L->in[i].r.v->dtype == DT_I32 ? "int32_t" : e->R,
        cname(L->in[i].r.v), R(e, L->in[i].r));
  }
  for (int k = 0; k < L->nout; k++) {
    bool dup = false;
    for (int j = 0; j < k; j++) dup |= L->out[j].r.v == L->out[k].r.v;
    if (!dup) P(e, "    %s *%s = %s;\n", e->R, cname(L->out[k].r.v), R(e, L->out[k].r));
  }
  for (int i = 0; i < L->nin; i++)
    argn[i] = arena_printf("%s[%s]", cname(L->in[i].r.v), L->in[i].bcast ? "j" : "i");
  for (int k = 0; k < L->nout; k++)
    lhs[k] = arena_printf("%s[%s]", cname(L->out[k].r.v), L->out[k].bcast ? "j" : "i");
  P(e, "    rtc_foreach(%" PRId64 ", [=] __device__(size_t i) {\n", L->n);
  if (L->inner) P(e, "      const size_t j = i %% %" PRId64 ";\n", L->inner);
  cg_emit_exprs(e->o, L->expr, lhs, L->op, L->nout, argn, "      ", e->f64);
  P(e, "    });\n  }\n");
}

/* ---- staged instructions ---- */

static int64_t ref_bytes(PRef r) {
  return ir_numel(&r.v->shape) * 4; /* f32 or i32 */
}

/* Copies each distinct buffer of refs between the device and the mirror. */
static void transfer(Emit *e, const PRef *refs, int n, const PRef *seen, int nseen, bool up) {
  for (int k = 0; k < n; k++) {
    if (!refs[k].v) continue;
    bool dup = false;
    for (int j = 0; j < nseen; j++)
      dup |= seen[j].v && seen[j].off == refs[k].off && seen[j].stash == refs[k].stash;
    for (int j = 0; j < k; j++)
      dup |= refs[j].v && refs[j].off == refs[k].off && refs[j].stash == refs[k].stash;
    if (dup) continue;
    Emit h = *e;
    h.host = 1;
    if (up)
      P(e, "  rtc_to_device(%s, %s, %" PRId64 ");\n", R(e, refs[k]), R(&h, refs[k]),
        ref_bytes(refs[k]));
    else
      P(e, "  rtc_to_host(%s, %s, %" PRId64 ");\n", R(&h, refs[k]), R(e, refs[k]),
        ref_bytes(refs[k]));
  }
}

static void stage(Emit *e, const PInstr *in) {
  P(e, "  // no CUDA kernel for this yet: staged through the host mirror (cpu runtime, MPI)\n");
  /* inputs, and a backward's outputs, which accumulate (a forward writes its own) */
  transfer(e, in->in, in->n->nin, NULL, 0, false);
  if (in->n->bwd) transfer(e, in->out, in->n->nout, in->in, in->n->nin, false);
  Emit h = *e;
  h.host = 1;
  h.S = "_f32";
  cg_target_cpu.instr(&h, in);
  transfer(e, in->out, in->n->nout, NULL, 0, true);
}

/* ---- communication: NCCL (runtime/cuda/rtc_dist.cu) ---- */

static void coll(Emit *e, const PInstr *in) {
  const Node *n = in->n;
  const Value *yv = n->out, *xv = n->in[0];
  const char *ax = cg_axis((int)n->a.i[2]);
  if (n->op == OP_ALLREDUCE) {
    if (in->out[0].off != in->in[0].off || in->out[0].stash != in->in[0].stash)
      P(e, "  rtc_copy(%s, %s, %" PRId64 ");\n", R(e, in->out[0]), R(e, in->in[0]),
        cg_numel(yv) * e->es);
    P(e, "  rtc_allreduce(p->mesh, %s, %s, %" PRId64 ");\n", ax, R(e, in->out[0]), cg_numel(yv));
    return;
  }
  bool gather = n->op == OP_ALLGATHER || n->op == OP_ALLGATHER_G;
  int64_t outer, inner;
  ir_dim_split(&(gather ? yv : xv)->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
  P(e, "  rtc_%s_dim(p->mesh, %s, %s, %s, %" PRId64 ", %" PRId64 ", %s);\n",
    gather ? "allgather" : "reduce_scatter", ax, R(e, in->out[0]), R(e, in->in[0]), outer, inner,
    R(e, in->scratch));
}

static void instr(Emit *e, const PInstr *in) {
  if (staged(in)) return stage(e, in);
  switch (in->kind) {
  case PI_LOOP:
    loop(e, in->loop);
    return;
  case PI_COLL:
    coll(e, in);
    return;
  case PI_BUCKET:
    if (in->req < 0) {
      const Node *n = in->n;
      P(e, "  rtc_reduce_scatter_acc(p->mesh, %s, %s, %s, %" PRId64 ", %s);\n",
        cg_axis((int)n->a.i[2]), R(e, in->out[0]), R(e, in->in[0]), cg_numel(n->out),
        R(e, in->scratch));
      return;
    }
    break; /* rt_bucket_*: the driver's, which the CUDA driver runs on NCCL's stream */
  case PI_KERNEL:
    if (in->n->op == OP_SHARD) {
      const Node *n = in->n;
      int64_t outer, inner;
      ir_dim_split(&n->in[0]->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
      P(e, "  rt_chunk_copy_cu(%s, %s, %" PRId64 ", %" PRId64 ", %d, p->mesh->coord[%s], %d);\n",
        R(e, in->out[0]), R(e, in->in[0]), outer, inner, (int)n->a.i[1],
        cg_axis((int)n->a.i[2]), e->es);
      return;
    }
    break;
  default:
    break;
  }
  /* loads, pipeline messages, seeds, copies, kernels: the cpu record's
   * text with this target's suffix and buffer accessors */
  cg_target_cpu.instr(e, in);
}

const Target cg_target_cuda = {"cuda", check, prelude, instr, cg_build_cuda, "model.cu", "_cu",
                               "rtc_memset", "rtc_copy", "rtc_get_f32(%s)",
                               "rtc_set_f32(%s, %s);"};
/* The same program built for this machine's CPU through the CUDA emulation
 * header (runtime/cuda/host/cuda_host.h): how CI without a GPU runs it. */
const Target cg_target_cuda_host = {"cuda-host", check, prelude, instr, cg_build_cuda_host,
                                    "model.cu", "_cu", "rtc_memset", "rtc_copy",
                                    "rtc_get_f32(%s)", "rtc_set_f32(%s, %s);"};
