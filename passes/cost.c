/* cost.c — the cost model: kernels (roofline with efficiency curves),
 * collectives (alpha-beta per algorithm), pipeline schedules (simulated
 * action by action) and whole steps, over the per-rank programs.
 * cost.h says what each entry computes; explore.c holds the search's fast
 * evaluator, which uses the same formulas.  Memory comes from memplan. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "passes.h"
#include "runtime/profile_colls.h"
#include "runtime/rt_optim.h"

/* ---- hardware ---- */

const char *const cost_sf_names[COST_SF_N] = {"exp", "log", "tanh", "erf", "sin", "cos", "pow", "sqrt"};
const char *const cost_kern_names[COST_K_N] = {"gelu",      "gelu_bwd",      "silu",    "silu_bwd",
                                               "layernorm", "layernorm_bwd", "rmsnorm", "rmsnorm_bwd"};

void cost_hw_from_mesh(HwModel *hw, const Mesh *me, DType prec) {
  memset(hw, 0, sizeof *hw);
  bool gpu = strcmp(me->device->name, "cpu") != 0;
  bool half = prec == DT_BF16 || prec == DT_F16;
  hw->peak = half ? me->peak_bf16 : me->peak_tf32 > 0 ? me->peak_tf32 : me->peak_fp32;
  hw->elt = half ? 2 : prec == DT_F64 ? 8 : 4;
  /* First principles, no fit to any paper: a large cuBLAS GEMM reaches
   * 70-80% of the dense peak (790/989 TF/s measured on an H200); a
   * device-to-device copy ~90% of HBM bandwidth (4.3/4.8 TB/s); NCCL's bus
   * bandwidth ~80% of the link (370/450 GB/s on 8xH100).  A CPU core's
   * OpenBLAS SGEMM reaches ~85% of its FMA peak, a streaming loop ~60% of
   * the socket's bandwidth. */
  hw->gemm_eff = gpu ? 0.78 : 0.85;
  /* the GEMM dim at which efficiency halves: a tile's worth of rows (128 on
   * tensor cores; a register block's on a CPU) */
  hw->gemm_half = gpu ? 96 : 12;
  /* cuBLAS's tensor-core kernels need every matrix's rows 16-byte aligned;
   * with a dim such as GPT-2's vocabulary of 50257 (rows of 100,514 bytes
   * in bf16) the heuristic falls back to kernels that ran GPT-2's LM head
   * at 103-153 TFLOP/s on an H200 against 760-830 at 50304 (cuBLASLt 13.0,
   * bench/gemm_cuda.cu, bench/results/gpu_check-2026-12-04.txt): 0.16 of
   * the rate.  Measured for 16-bit GEMMs on tensor cores only: fp32 with
   * TF32 off runs on the CUDA cores, and OpenBLAS has no such cliff. */
  hw->unaligned_eff = gpu && half ? 0.16 : 1.0;
  hw->gpu_half = gpu && half;
  hw->mem_bw = me->mem_bw;
  hw->mem_eff = gpu ? 0.88 : 0.6;
  hw->launch_s = me->launch_s;
  hw->vec_flops = gpu ? me->peak_fp32 : 0;
  hw->intra_bw = me->intra_bw;
  hw->intra_lat = me->intra_lat;
  hw->inter_bw = me->inter_bw;
  hw->inter_lat = me->inter_lat;
  hw->link_eff = gpu ? 0.8 : 0.7;
  /* GPUs reduce buckets on their own stream (llm.c, DDP); MPI on a CPU
   * progresses a nonblocking collective only inside MPI calls */
  hw->overlap = gpu ? 0.9 : 0.0;
  hw->per_node = me->per_node;
  hw->nodes = me->nodes;
  /* One evaluation in a fused loop on a ~3 GHz core with 256-bit vectors:
   * rt_math.h's exp and tanh vectorize (~2 and ~4 cycles an element:
   * a polynomial, tanh's division); glibc's scalar log, sin, cos ~10 cycles,
   * pow ~20, erf ~45; sqrt vectorizes (~1.5).  A GPU evaluates them on its
   * special-function units under the memory time of the kernel: free. */
  static const double cpu_sf[COST_SF_N] = {0.7e-9, 4e-9, 1.5e-9, 14e-9, 3.5e-9, 3.5e-9, 6.5e-9, 0.5e-9};
  for (int k = 0; k < COST_SF_N; k++) hw->special[k] = gpu ? 0 : cpu_sf[k];
  snprintf(hw->source, sizeof hw->source, "catalog %s, %s", me->device->name,
           half ? "bf16" : hw->peak == me->peak_tf32 ? "tf32" : "fp32");
}

double cost_curve(const CostCurve *c, double x) {
  if (c->n == 0) return 0;
  if (c->n == 1 || x <= c->x[0]) return c->y[0];
  if (x >= c->x[c->n - 1]) return c->y[c->n - 1];
  int i = 1;
  while (c->x[i] < x) i++;
  double lx0 = log(c->x[i - 1]), lx1 = log(c->x[i]), f = (log(x) - lx0) / (lx1 - lx0);
  return exp(log(c->y[i - 1]) + f * (log(c->y[i]) - log(c->y[i - 1])));
}

/* ---- kernels ---- */

/* A dim's share of the efficiency: tiles are full once the dim reaches a
 * few of them (wave and tile quantisation smoothed). */
static double dim_eff(double x, double half) { return x / (x + half); }

double cost_gemm(const HwModel *hw, double M, double N, double K) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  double flops = 2 * M * N * K;
  double rate;
  if (hw->gemm.n) {
    rate = cost_curve(&hw->gemm, flops);
    /* The FLOPs curve was measured on shapes with no dim under 64 above a
     * few MFLOP; a thin dim (a row-parallel linear's split K, a vocabulary
     * split's N, a SUMMA block, an attention head's D) bounds the rate by
     * itself however large the others: the lower of the two bounds. */
    double md = M < N ? (M < K ? M : K) : (N < K ? N : K);
    if (hw->gemm_thin.n && md < hw->gemm_thin.x[hw->gemm_thin.n - 1]) {
      double thin = cost_curve(&hw->gemm_thin, md);
      if (thin < rate) rate = thin;
    }
  } else {
    /* the smallest dim limits a GEMM most; all three share the loss */
    double e = dim_eff(M, hw->gemm_half) * dim_eff(N, hw->gemm_half) * dim_eff(K, hw->gemm_half);
    rate = hw->peak * hw->gemm_eff * cbrt(e) * cbrt(e) * cbrt(e);
  }
  /* a dim of rows that are not 16-byte aligned (the three dims of a
   * linear's GEMMs are its two feature counts, always some matrix's row
   * length, and its tokens, a multiple of 8 in practice) */
  if (hw->unaligned_eff > 0 && hw->unaligned_eff < 1) {
    const double d3[3] = {M, N, K};
    for (int i = 0; i < 3; i++)
      if (fmod(d3[i] * hw->elt, 16.0) != 0) {
        rate *= hw->unaligned_eff;
        break;
      }
  }
  double bytes = (M * K + K * N + M * N) * hw->elt;
  double t_mem = bytes / (hw->mem_bw * hw->mem_eff);
  double t = flops / rate;
  return (t > t_mem ? t : t_mem) + hw->launch_s;
}

double cost_membound(const HwModel *hw, double bytes, double flops) {
  double bw = hw->bw.n ? cost_curve(&hw->bw, bytes) : hw->mem_bw * hw->mem_eff;
  double t = bytes / bw, tf = flops / (hw->peak * 0.5);
  return (t > tf ? t : tf) + hw->launch_s;
}

/* ---- collectives ---- */

const char *cost_alg_name(CostAlg a) {
  static const char *n[] = {"ring", "tree", "hierarchical", "p2p", "measured"};
  return n[a];
}

static const CostColl *measured(const HwModel *hw, const char *op, int n) {
  const CostColl *best = NULL;
  for (int i = 0; i < hw->ncoll; i++) {
    const CostColl *c = &hw->coll[i];
    if (strcmp(c->op, op)) continue;
    if (c->nranks == n) return c;
  }
  return best;
}

/* Ring steps' bytes factor and number of steps per op over n ranks. */
static void ring_shape(const char *op, int n, double *vol, double *steps) {
  if (!strcmp(op, "all_reduce")) {
    *vol = 2.0 * (n - 1) / n;
    *steps = 2.0 * (n - 1);
  } else if (!strcmp(op, "broadcast")) {
    *vol = 1; /* pipelined ring: the message once through every link */
    *steps = n - 1;
  } else if (!strcmp(op, "p2p")) {
    *vol = 1;
    *steps = 1;
  } else { /* all_gather, reduce_scatter */
    *vol = (double)(n - 1) / n;
    *steps = n - 1;
  }
}

double cost_coll(const HwModel *hw, const char *op, int n, int stride, double bytes, CostAlg *alg) {
  if (alg) *alg = ALG_RING;
  if (n <= 1 || bytes <= 0) return 0;
  const CostColl *mc = measured(hw, op, n);
  if (mc) {
    if (alg) *alg = ALG_MEASURED;
    /* beyond the largest message measured the time grows with the bytes
     * at that message's rate (a flat curve would price Shampoo's 100 MB
     * direction gather as 16 MiB's) */
    const CostCurve *c = &mc->t;
    if (c->n > 0 && bytes > c->x[c->n - 1]) return c->y[c->n - 1] * bytes / c->x[c->n - 1];
    return cost_curve(c, bytes);
  }
  /* Ranks fill nodes in order: a group of n ranks `stride` apart has k on
   * each node it touches, spread over nn nodes. */
  int P = hw->per_node > 0 ? hw->per_node : 1;
  int k = stride >= P ? 1 : P / stride;
  if (k > n) k = n;
  int nn = (n + k - 1) / k;
  double bi = hw->intra_bw * hw->link_eff, be = hw->inter_bw * hw->link_eff;
  double ai = hw->intra_lat, ae = hw->inter_lat;
  double vol, steps;
  ring_shape(op, n, &vol, &steps);
  if (!strcmp(op, "p2p")) {
    if (alg) *alg = ALG_P2P;
    return nn > 1 ? ae + bytes / be : ai + bytes / bi;
  }
  /* flat ring: every step waits for its slowest link */
  double a = nn > 1 ? ae : ai, b = nn > 1 ? (be < bi ? be : bi) : bi;
  double best = steps * a + vol * bytes / b;
  CostAlg ba = ALG_RING;
  /* tree (double binary tree; all-reduce and broadcast): log-depth latency,
   * the message up and down once */
  if (!strcmp(op, "all_reduce") || !strcmp(op, "broadcast")) {
    double depth = ceil(log2((double)n));
    double f = !strcmp(op, "all_reduce") ? 2 : 1;
    double t = f * depth * a + f * bytes / b;
    if (t < best) {
      best = t;
      ba = ALG_TREE;
    }
  }
  /* hierarchical over nodes: intra-node reduce-scatter, inter-node ring on
   * 1/k of the data (the k ranks of a node each over their own NIC share),
   * intra-node all-gather */
  if (nn > 1 && k > 1) {
    double iv, is, ev, es;
    ring_shape("reduce_scatter", k, &iv, &is);
    ring_shape(op, nn, &ev, &es);
    double intra = is * ai + iv * bytes / bi;
    double inter = es * ae + ev * (bytes / k) / be;
    double t = inter;
    if (!strcmp(op, "all_reduce"))
      t += 2 * intra;
    else if (!strcmp(op, "broadcast"))
      t += intra;
    else
      t = intra + es * ae + ev * bytes / (be * k);
    if (t < best) {
      best = t;
      ba = ALG_HIER;
    }
  }
  if (alg) *alg = ba;
  return best;
}

/* ---- nodes ---- */

double cost_node_flops(const Node *n) { return ir_ops[n->op].flops(n); }

/* Bytes of v: its dtype's (the precision pass gave 16-bit plans their
 * widths), fp32 as elt (8 in an fp64 plan). */
static double vbytes(const Value *v, int elt) {
  if (!v) return 0;
  int es = v->dtype == DT_F32 ? (elt == 8 ? 8 : 4) : ir_dtype_size(v->dtype);
  return (double)ir_numel(&v->shape) * es;
}

/* A fused loop's special-function time: each distinct call in its
 * expressions (cexpr.c prints shared subexpressions once) per element.
 * (The runtime's kernels evaluate exp as a vectorised polynomial, counted
 * in their FLOPs; the generated loops call libm one element at a time.) */
static double loop_special(const HwModel *hw, const PLoop *l) {
  enum { MAXV = 512 };
  const SExpr *seen[MAXV], *stack[MAXV];
  int nseen = 0, sp = 0;
  double per = 0;
  for (int k = 0; k < l->nout; k++)
    if (l->expr[k] && sp < MAXV) stack[sp++] = l->expr[k];
  while (sp > 0) {
    const SExpr *e = stack[--sp];
    bool dup = false;
    for (int i = 0; i < nseen && !dup; i++) dup = seen[i] == e;
    if (dup || nseen == MAXV) continue;
    seen[nseen++] = e;
    int f = -1;
    switch (e->kind) {
    case SX_EXP: f = COST_SF_EXP; break;
    case SX_LOG: f = COST_SF_LOG; break;
    case SX_TANH: f = COST_SF_TANH; break;
    case SX_ERF: f = COST_SF_ERF; break;
    case SX_SIN: f = COST_SF_SIN; break;
    case SX_COS: f = COST_SF_COS; break;
    case SX_POW: f = COST_SF_POW; break;
    case SX_SQRT: f = COST_SF_SQRT; break;
    default: break;
    }
    if (f >= 0) per += hw->special[f];
    const SExpr *kids[3] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
      if (kids[i] && sp < MAXV) stack[sp++] = kids[i];
  }
  return per * (double)l->n;
}

/* The CUDA target's fused attention (runtime/cuda/k_attention.cu), Tq
 * queries against Tk keys.  Measured (a GPU profile's curves): a row per
 * (batch, head) at D = 64, causal, scaled by D/64, twice unmasked, T²
 * past the longest measured.  Else from the device's figures: tiles of
 * 64 x 64, the causal ones above the diagonal skipped ((nt+1)/2nt of the
 * nt² tiles); its Tq x Tk x D products (the forward's s and o; the
 * backward's s, dp, dv, dk in one kernel and s, dp, dq in the other:
 * seven, as it recomputes rather than adds dq atomically) at the rate of
 * one GEMM over every head's rows (a kernel runs all the heads at once:
 * one head's product alone would price a small problem as underfilled
 * launches); and each score's softmax on the CUDA cores, issued by the
 * warps that issue the products and so not hidden behind them: an exp on
 * the special-function units (16 a clock an SM against 128 fp32 lanes:
 * peak/16 a second) and its fp32 operations at a lane a clock (peak/2 a
 * second: five in the forward, six in each backward kernel).  -1 on a CPU
 * (no vec_flops): the callers price the cpu runtime's kernel. */
double cost_attention(const HwModel *hw, bool fwd, bool causal, double B, double Tq, double Tk,
                      double H, double D) {
  const CostCurve *ac = fwd ? &hw->att : &hw->att_bwd;
  if (ac->n) {
    double T = sqrt(Tq * Tk), Tl = ac->x[ac->n - 1], row = cost_curve(ac, T);
    if (T > Tl) row *= (T / Tl) * (T / Tl); /* past the longest measured: T² */
    return B * H * row * (D / 64.0) * (causal ? 1.0 : 2.0) + hw->launch_s;
  }
  if (hw->vec_flops <= 0) return -1;
  double nt = ceil(Tk / 64), frac = causal ? (nt + 1) / (2 * nt) : 1.0;
  double prod = 2 * B * H * Tq * Tk * D; /* FLOPs of one Tq x Tk x D product over every head */
  double one = cost_gemm(hw, B * H * Tq, Tk, D) - hw->launch_s;
  double rate = one > 0 ? prod / one : hw->peak;
  double scores = B * H * Tq * Tk * frac * (fwd ? 1 : 2);
  double per = 16 / hw->vec_flops + (fwd ? 5 : 6) * 2 / hw->vec_flops;
  return (fwd ? 2 : 7) * prod * frac / rate + scores * per + hw->launch_s * (fwd ? 1 : 3);
}

double cost_node(const HwModel *hw, const Node *n) {
  int elt = hw->elt;
  switch (n->op) {
  case OP_MATMUL: {
    double K = (double)n->in[1]->shape.d[1].n, N = (double)n->in[1]->shape.d[0].n;
    double M = (double)ir_numel(&n->in[0]->shape) / K;
    return cost_gemm(hw, M, N, K);
  }
  case OP_MATMUL_BWD: {
    /* dx = dy·W, dW += dyᵀ·x: two GEMMs of the forward's size */
    double N = (double)n->in[2]->shape.d[0].n, K = (double)n->in[2]->shape.d[1].n;
    double M = (double)ir_numel(&n->in[0]->shape) / N;
    return cost_gemm(hw, M, K, N) + cost_gemm(hw, N, K, M);
  }
  case OP_ATTENTION:
  case OP_ATTENTION_BWD: {
    /* blocked like FlashAttention: per (batch, head) GEMMs over T x T x D */
    const Shape *q = &n->in[n->op == OP_ATTENTION ? 0 : 1]->shape;
    double B = (double)q->d[0].n, T = (double)q->d[1].n, H = (double)q->d[2].n,
           D = (double)q->d[3].n;
    double g = cost_attention(hw, n->op == OP_ATTENTION, n->a.i[0] != 0, B, T, T, H, D);
    if (g >= 0) return g;
    double flops = cost_node_flops(n);
    double one = cost_gemm(hw, T, T, D) - hw->launch_s; /* QKᵀ of one head */
    double rate = one > 0 ? 2 * T * T * D / one : hw->peak;
    /* softmax work between the products: memory-bound over the scores,
     * kept in cache by blocking, so a fraction of a pass */
    double t = flops / rate + B * H * cost_membound(hw, T * T * elt * 0.25, 5 * T * T) / 8;
    return t + hw->launch_s;
  }
  default: break;
  }
  /* the runtime's row and activation kernels at a profile's measured time
   * per element (their exp, divisions and extra passes over the rows) */
  int k = n->op == OP_GELU            ? COST_K_GELU
          : n->op == OP_GELU_BWD      ? COST_K_GELU_BWD
          : n->op == OP_SILU          ? COST_K_SILU
          : n->op == OP_SILU_BWD      ? COST_K_SILU_BWD
          : n->op == OP_LAYERNORM     ? COST_K_LAYERNORM
          : n->op == OP_LAYERNORM_BWD ? COST_K_LAYERNORM_BWD
          : n->op == OP_RMSNORM       ? COST_K_RMSNORM
          : n->op == OP_RMSNORM_BWD   ? COST_K_RMSNORM_BWD
                                      : -1;
  if (k >= 0 && hw->kern[k] > 0) {
    const Value *x = n->in[ir_ops[n->op].cls == OPC_B_UNARY || ir_ops[n->op].cls == OPC_B_NORM ? 1 : 0];
    return (double)ir_numel(&x->shape) * hw->kern[k] + hw->launch_s;
  }
  if (ir_is_comm(n->op) || ir_ops[n->op].cls == OPC_BUCKET || ir_ops[n->op].cls == OPC_LEAF ||
      ir_ops[n->op].cls == OPC_VIEW)
    return 0;
  /* a column slice moves its own columns only (rt_slice_cols_*: a row's
   * segment read, written): y's bytes twice; its backward adds dy into
   * those columns of dx (read, added, written): dy's bytes three times */
  if (n->op == OP_SLICE) return cost_membound(hw, 2 * vbytes(n->outs[0], elt), 0);
  if (n->op == OP_SLICE_BWD) return cost_membound(hw, 3 * vbytes(n->in[0], elt), cost_node_flops(n));
  double bytes = 0;
  for (int i = 0; i < n->nin; i++)
    if (ir_reads_data(n, i)) bytes += vbytes(n->in[i], elt);
  for (int i = 0; i < n->nout; i++) bytes += vbytes(n->outs[i], elt);
  return cost_membound(hw, bytes, cost_node_flops(n));
}

/* ---- a compiled plan ---- */

void cost_axis_group(const Plan *p, int axis, int *size, int *stride) {
  int T = p->tp * p->tp2d * p->tp2d, q = p->tp2d > 1 ? p->tp2d : 0;
  int sp = p->sp_kind == SP_RING ? p->sp : 1;
  *size = 1;
  *stride = 1;
  switch (axis) {
  case AX_WORLD: *size = T * sp * p->dp * p->pp; break;
  case AX_DP: *size = p->dp; *stride = T * sp; break;
  case AX_TP: *size = T; break;
  case AX_TPR: *size = q ? q : 1; break;
  case AX_TPC: *size = q ? q : 1; *stride = q ? q : 1; break;
  case AX_SP: *size = sp; *stride = T; break;
  case AX_PP: *size = p->pp; *stride = T * sp * p->dp; break;
  case AX_DATA: *size = p->dp * sp; *stride = T; break;
  case AX_EMBED: *size = p->pp > 1 ? 2 : 1; *stride = T * sp * p->dp * (p->pp - 1); break;
  default: break;
  }
}

/* The time of a communication given its counted volume V (bytes sent per
 * rank, runtime/dist_formulas.h) on an axis: the buffer size recovered
 * from V for the collective's formula. */
static double comm_time(const HwModel *hw, const Plan *p, const PComm *c, const Node *nd) {
  int n, stride;
  cost_axis_group(p, c->axis, &n, &stride);
  if (n <= 1 && c->kind != PC_P2P) return 0;
  double V = (double)c->bytes;
  switch (c->kind) {
  case PC_COLL: {
    const char *op = c->op;
    if (!strcmp(op, "all_reduce") || !strcmp(op, "grad_all_reduce") || strstr(op, "cross-entropy") ||
        strstr(op, "norm"))
      return cost_coll(hw, "all_reduce", n, stride, V * n / (2.0 * (n - 1)), NULL) *
             (strstr(op, "cross-entropy") ? 2 : 1);
    if (strstr(op, "gather"))
      return cost_coll(hw, "all_gather", n, stride, V * n / (n - 1.0), NULL);
    if (strstr(op, "scatter"))
      return cost_coll(hw, "reduce_scatter", n, stride, V * n / (n - 1.0), NULL);
    return cost_coll(hw, "all_reduce", n, stride, V * n / (2.0 * (n - 1)), NULL);
  }
  case PC_RING: {
    /* P-1 steps (forward; backward 2(P-1)+1), each a send to the next and a
     * receive from the previous rank at once */
    double steps = nd && nd->op == OP_ATTENTION_BWD ? 2.0 * (n - 1) + 1 : n - 1.0;
    return steps * cost_coll(hw, "p2p", 2, stride, V / steps, NULL);
  }
  case PC_SUMMA: {
    /* 2q broadcasts (forward; 4q backward: broadcasts and reduces) */
    double calls = nd && nd->op == OP_MATMUL_BWD ? 4.0 * n : 2.0 * n;
    return calls * cost_coll(hw, "broadcast", n, stride, V / calls * n / (n - 1.0), NULL);
  }
  case PC_P2P: {
    int pn, ps;
    cost_axis_group(p, AX_PP, &pn, &ps);
    return cost_coll(hw, "p2p", 2, ps, V, NULL);
  }
  default: return 0;
  }
}

/* Ring attention where collectives have a stream beside the kernels (the
 * CUDA target, runtime/cuda/rtc_ring.cu), cb one step's compute: a step's
 * K, V travel while it computes (hidden but for 1 - overlap of the shorter
 * of the two), the backward's dK, dV after it, and the next step waits for
 * both.  comm_time's units: P - 1 steps of (K, V) forward; backward also
 * P of (dK, dV), the last step's alone. */
static double ring_overlapped(const HwModel *hw, const Plan *p, const PInstr *in, double cb) {
  int P = ir_ring_size(in->n);
  bool bwd = in->n->op == OP_ATTENTION_BWD;
  double u = comm_time(hw, p, &in->comm, in->n) / (bwd ? 2.0 * (P - 1) + 1 : P - 1.0);
  double step = cb + u - hw->overlap * (cb < u ? cb : u);
  return (P - 1) * step + cb + (bwd ? P * u : 0);
}

/* The memory passes around SUMMA's local GEMMs (runtime/dist_summa.c):
 * the forward's output set to the bias (or zeroed by the BLAS at beta 0)
 * before the first step; in the backward every step writes its dX and dW
 * partials by GEMMs at beta 0 (the BLAS zeroes them first), and each rank,
 * root of one of the q steps' reduces, sums the received partial into its
 * own and adds the result to its gradient (three passes each). */
static double summa_passes(const HwModel *hw, const Node *n, int q) {
  double elt = hw->elt;
  if (n->op == OP_MATMUL) return cost_membound(hw, (double)ir_numel(&n->out->shape) * elt, 0);
  if (n->op != OP_MATMUL_BWD) return 0;
  double N = (double)n->in[2]->shape.d[0].n, K = (double)n->in[2]->shape.d[1].n;
  double M = (double)ir_numel(&n->in[0]->shape) / N;
  double t = 0;
  for (int k = 0; k < 2; k++) {
    double b = (k ? N : M) * K * elt;
    t += q * cost_membound(hw, b, 0) + 2 * cost_membound(hw, 3 * b, 0);
  }
  return t;
}

/* A GELU whose input a linear makes (its bias add first), or its backward:
 * the CUDA target's epilogue candidates (codegen/cuda.c pair()). */
double cost_instr(const HwModel *hw, const Module *m, const PInstr *in) {
  const Plan *p = &m->train.plan;
  double t = 0, ring_cb = -1; /* ring attention: one step's compute */
  switch (in->kind) {
  case PI_KERNEL:
    t = in->n ? cost_node(hw, in->n) : 0;
    /* a bias gradient summed by the matmul's backward: one more pass over
     * dy; on a GPU in 16 bits the dW GEMM's BGRADB epilogue sums it (up to
     * 64K features), then one pass over the bias adds it */
    if (in->n && in->n->op == OP_MATMUL_BWD && in->dbias.v) {
      if (hw->gpu_half && vbytes(in->dbias.v, hw->elt) <= 256 * 1024)
        t += cost_membound(hw, 3 * vbytes(in->dbias.v, hw->elt), 0);
      else
        t += cost_membound(hw, vbytes(in->n->in[0], hw->elt), 0) - hw->launch_s;
    }
    /* on a GPU in 16 bits the CUDA target runs a GELU after a linear in
     * the GEMM's GELU_AUX_BIAS epilogue (the activation written, the
     * pre-activation not read back), and the GELU's backward in the DGELU
     * epilogue of the GEMM before it (the pre-activation read, the
     * activation's gradient neither written nor read): where the program
     * pairs them (PInstr.joint; buffers that overlap keep them apart) */
    if (in->n && hw->gpu_half && in->joint)
      t = cost_membound(hw, vbytes(in->n->op == OP_GELU ? in->n->out : in->n->in[1], hw->elt),
                        0) - hw->launch_s;
    /* SUMMA runs the local GEMM once per step of the q x q grid (the node's
     * shapes are one step's blocks); ring attention once per K/V block that
     * arrives.  Under a causal mask rank r skips the blocks of later ranks,
     * but the ring's exchanges keep the ranks in step, and the last rank
     * computes in every one of the P steps (P - 1 unmasked blocks and its
     * own): the step waits for it */
    if (in->n && ir_summa_q(in->n) > 1) {
      int q = ir_summa_q(in->n);
      t = (t - hw->launch_s) * q + hw->launch_s;
      t += summa_passes(hw, in->n, q);
    }
    if (in->n && ir_ring_size(in->n) > 1) {
      ring_cb = t;
      t *= ir_ring_size(in->n);
    }
    break;
  case PI_LOOP: {
    const PLoop *l = in->loop;
    double bytes = 0, flops = 0;
    for (int k = 0; l && k < l->nin; k++)
      bytes += (l->in[k].bcast ? (double)l->inner : (double)l->n) * vbytes(l->in[k].r.v, hw->elt) /
               (double)ir_numel(&l->in[k].r.v->shape);
    /* an output broadcast over the rows (a bias gradient summed over
     * them) is one row, read and written from cache per row */
    for (int k = 0; l && k < l->nout; k++)
      bytes += (l->out[k].bcast ? (double)l->inner : (double)l->n) * vbytes(l->out[k].r.v, hw->elt) /
               (double)ir_numel(&l->out[k].r.v->shape) * (strcmp(l->op[k], "=") ? 2 : 1);
    for (int k = 0; k < in->nnodes; k++) flops += cost_node_flops(in->nodes[k]);
    t = cost_membound(hw, bytes, flops) + (l ? loop_special(hw, l) : 0);
    break;
  }
  case PI_COPY: t = cost_membound(hw, 2.0 * (double)in->bytes, 0); break;
  case PI_COLL: {
    /* along a dim with rows before it (a sequence-parallel activation split
     * over T): the runtime packs the reduce-scatter's input into its
     * scratch, or unpacks the all-gather's from it, a copy of the whole
     * tensor (runtime/dist.c, rtc_dist.cu) */
    const Node *n = in->n;
    if (n && (n->op == OP_ALLGATHER || n->op == OP_ALLGATHER_G || n->op == OP_REDUCE_SCATTER) &&
        n->a.i[1] > 1) {
      const Value *full = n->op == OP_REDUCE_SCATTER ? n->in[0] : n->out;
      int64_t outer, inner;
      ir_dim_split(&full->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
      if (outer > 1 && inner > 0) t = cost_membound(hw, 2.0 * vbytes(full, hw->elt), 0);
    }
    break;
  }
  case PI_LOAD: t = hw->launch_s; break;
  case PI_SEED: t = in->received ? 0 : hw->launch_s; break;
  default: break;
  }
  /* zeroing the first writer's gradients */
  for (int k = 0; k < in->nzero; k++) t += cost_membound(hw, (double)in->zero_bytes[k], 0); /* a memset each */
  /* communication: blocking inside the instruction (kernels with comm,
   * collectives, receives; a send's transfer is charged to its receiver),
   * but ring attention's where the target overlaps it */
  if (ring_cb >= 0 && in->comm.kind == PC_RING && hw->overlap > 0) {
    t += ring_overlapped(hw, p, in, ring_cb) - ring_cb * ir_ring_size(in->n);
  } else if (in->joint == PJ_DX && hw->overlap > 0) {
    /* a linear backward's dX all-reduce (or reduce-scatter, with its
     * packing) beside its dW GEMM (half of the backward's two GEMMs):
     * hidden but for 1 - overlap of the shorter */
    double c = t + comm_time(hw, p, &in->comm, in->n), dw = cost_node(hw, in->joint_with) / 2;
    t = c - hw->overlap * (c < dw ? c : dw);
  } else if (in->comm.kind != PC_NONE && in->kind != PI_SEND && in->kind != PI_BUCKET) {
    t += comm_time(hw, p, &in->comm, in->n);
  }
  if (in->kind == PI_BUCKET) t += comm_time(hw, p, &in->comm, in->n);
  if (in->kind == PI_RECV && in->split) t += comm_time(hw, p, &in->gather, NULL);
  return t;
}

/* One chunk's block: compute + blocking comm, and the asynchronous bucket
 * reductions it starts (in the last microbatch).
 *
 * ZeRO-3's gathers one layer ahead (PInstr.ahead) run, where collectives
 * have a stream beside the kernels (hw->overlap > 0: the CUDA target), on
 * that stream in issue order while the kernels after them go on; the
 * instruction that waits for one (PInstr.wait) stalls for what is left of
 * it, and the kernels meanwhile lose the share of the gather that overlap
 * does not hide.  Elsewhere (the cpu target) a gather blocks where it is. */
/* Early gathers (PInstr.early, ZeRO-1/2 with the masters sharded): where
 * the target overlaps them (hw->overlap > 0), the cast block issues them on
 * the communication stream one after another, each ending at end[k] (s
 * from the step's start), and the instruction that waits for number k
 * (PInstr.early_wait) stalls until then; the kernels meanwhile lose the
 * share of the gather that overlap does not hide.  t0: when the block
 * starts.  Elsewhere (early NULL) they block where they are and the waits
 * cost nothing. */
typedef struct Early {
  double *end;
  double t0;
} Early;

/* An instruction of t seconds whose collective (c of them) runs on a
 * stream beside the kernels that follow: the block loses its compute and
 * the share of c that overlap does not hide. */
static void beside(const HwModel *hw, double t, double c, double *busy, double *comm) {
  *comm += (1 - hw->overlap) * c;
  *busy += (t - c) + (1 - hw->overlap) * c;
}

static void block_time_e(const HwModel *hw, const Module *m, const PBlock *b, double *busy,
                         double *comm, double *async, bool last, Early *early) {
  *busy = *comm = *async = 0;
  double end[PROG_AHEAD_SLOTS] = {0}, stream_free = 0; /* times within the block */
  double tr_end[PROG_TRAILS];   /* trailing reduce-scatters in flight, oldest first */
  int ntr = 0;
  bool pending[PROG_AHEAD_SLOTS] = {false};
  for (int i = 0; i < b->n; i++) {
    const PInstr *in = &b->ins[i];
    for (int s = 0; s < PROG_AHEAD_SLOTS; s++)
      if ((in->wait >> s & 1) && pending[s]) {
        if (end[s] > *busy) *busy = end[s];
        pending[s] = false;
      }
    if (early && in->early_wait > 0 && early->end[in->early_wait - 1] - early->t0 > *busy)
      *busy = early->end[in->early_wait - 1] - early->t0;
    double t = cost_instr(hw, m, in);
    if (early && in->early > 0) {
      double c = comm_time(hw, &m->train.plan, &in->comm, in->n);
      double start = early->t0 + *busy, *e = early->end;
      if (in->early > 1 && e[in->early - 2] > start) start = e[in->early - 2];
      e[in->early - 1] = start + c;
      beside(hw, t, c, busy, comm);
      continue;
    }
    if (in->kind == PI_RECV) {
      /* the wait is the simulation's; a scatter/gather's all-gather over
       * tp (PInstr.split) blocks after it */
      if (in->split) {
        double c = comm_time(hw, &m->train.plan, &in->gather, NULL);
        *busy += c;
        *comm += c;
      }
      continue;
    }
    if (in->kind == PI_BUCKET && in->req >= 0) {
      if (last) *async += t;
      continue;
    }
    if (in->kind == PI_BUCKET && in->trail && hw->overlap > 0) {
      /* a trailing reduce-scatter: on the communication stream; the
       * PROG_TRAILS-th after it (or the block's end) waits for it */
      double c = comm_time(hw, &m->train.plan, &in->comm, in->n);
      if (ntr == PROG_TRAILS) {
        if (tr_end[0] > *busy) *busy = tr_end[0];
        for (int k = 1; k < ntr; k++) tr_end[k - 1] = tr_end[k];
        ntr--;
      }
      double start = stream_free > *busy ? stream_free : *busy;
      tr_end[ntr++] = stream_free = start + c;
      beside(hw, t, c, busy, comm);
      continue;
    }
    if (in->ahead > 0 && in->ahead <= PROG_AHEAD_SLOTS && hw->overlap > 0) {
      double c = comm_time(hw, &m->train.plan, &in->comm, in->n);
      int s = in->ahead - 1;
      double start = stream_free > *busy ? stream_free : *busy;
      end[s] = stream_free = start + c;
      pending[s] = true;
      beside(hw, t, c, busy, comm);
      continue;
    }
    if (in->comm.kind == PC_COLL || in->comm.kind == PC_RING || in->comm.kind == PC_SUMMA ||
        in->kind == PI_BUCKET) {
      double c = comm_time(hw, &m->train.plan, &in->comm, in->n);
      *comm += c;
    }
    *busy += t;
  }
  /* a gather the block leaves running is waited for by its end, and so are
   * the trailing reduce-scatters */
  for (int s = 0; s < PROG_AHEAD_SLOTS; s++)
    if (pending[s] && end[s] > *busy) *busy = end[s];
  for (int k = 0; k < ntr; k++)
    if (tr_end[k] > *busy) *busy = tr_end[k];
}

static void block_time(const HwModel *hw, const Module *m, const PBlock *b, double *busy,
                       double *comm, double *async, bool last) {
  block_time_e(hw, m, b, busy, comm, async, last, NULL);
}

/* The weight casts of a bf16 step: a loop each, but where kernels have a
 * launch cost to save (hw->overlap > 0: the CUDA target) the target runs
 * each run of them as one kernel over a table of segments
 * (rt_cast_bf16_multi_cu): one launch a run.  Under ZeRO-1/2 the block
 * also gathers the buckets' copies (early, as block_time_e prices them). */
static double cast_time(const HwModel *hw, const Module *m, const PBlock *b, Early *early) {
  double busy, cm, as;
  block_time_e(hw, m, b, &busy, &cm, &as, false, early);
  int loops = 0, runs = 0;
  for (int i = 0; i < b->n; i++)
    if (b->ins[i].kind == PI_LOOP) {
      loops++;
      runs += i == 0 || b->ins[i - 1].kind != PI_LOOP;
    }
  if (hw->overlap > 0) busy -= (loops - runs) * hw->launch_s;
  return busy;
}

/* An fp32 GEMM's seconds: the plan's own rate on a CPU; on a GPU whose
 * plan computes in 16 bits, Shampoo's SGEMMs run at the plain fp32 rate. */
static double gemm32(const HwModel *hw, double M, double N, double K) {
  double t = cost_gemm(hw, M, N, K);
  return hw->vec_flops > 0 && hw->peak > hw->vec_flops ? t * hw->peak / hw->vec_flops : t;
}

double cost_shampoo_block(const HwModel *hw, const Optimizer *o, double r, double c, double *roots) {
  const double eigh = hw->eigh_flops > 0 ? hw->eigh_flops : COST_EIGH_FLOPS;
  const int every = o->precondition_every > 0 ? o->precondition_every : 1;
  double root = 0;
  for (int f = 0; f < 2; f++) {
    double k = f ? c : r;
    root += o->root == RT_ROOT_NEWTON ? 80 * gemm32(hw, k, k, k) * (hw->vec_flops > 0 ? 1 : 2)
                                      : 9 * k * k * k / eigh;
  }
  *roots = root / every;
  /* the factors' SYRKs (on a GPU their lower triangles mirrored: a strided
   * pass; the cpu runtime keeps the upper ones only), the direction's two
   * GEMMs */
  const double mirror = hw->vec_flops > 0 ? cost_membound(hw, 8 * (r * r + c * c), 0) : 0;
  return COST_SYRK_OF_GEMM * (gemm32(hw, r, r, c) + gemm32(hw, c, c, r)) + mirror +
         gemm32(hw, r, c, r) + gemm32(hw, r, c, c);
}

double cost_shampoo_elems(const HwModel *hw, double e) {
  /* the gradient's scaling (2 passes), the grafting state with its
   * direction's norm (3), the rescaled direction with momentum (3; the
   * direction's norm reads the GEMM's output in cache): 8 passes, and a
   * square root and a division an element */
  return cost_membound(hw, 8 * e * 4, 10 * e) + 2 * e * hw->special[COST_SF_SQRT];
}

double cost_adafactor_elems(const HwModel *hw, double e, int phase) {
  /* the gradient's scaling (2 passes), its row and column sums (2: the
   * columns a tile at a time along the rows), the sums of squares of u (1,
   * u = g / sqrt(row) / sqrt(col): two square roots and two divisions an
   * element), the update with momentum (5: g, param, m read, param, m
   * written; u again): 10 passes, and 8 square roots or divisions an
   * element, which vectorize beside each other: 4 of the profile's sqrt
   * time (measured: 100 ms over 25.2M elements on one core here, 4.0 ns an
   * element; 1.6 of them the passes at 24 GB/s) */
  double passes = 10, special = 4;
  if (phase == COST_AF_SUMS) passes = 4, special = 0;
  else if (phase == COST_AF_SQUARES) passes = 1, special = 2;
  else if (phase == COST_AF_FINISH) passes = 5, special = 2;
  return cost_membound(hw, passes * e * 4, 2 * passes * e) + special * e * hw->special[COST_SF_SQRT];
}

void cost_shampoo_tensor(const HwModel *hw, const Optimizer *o, const Shape *s, double *t,
                         double *roots) {
  int64_t d[IR_MAXDIM], e = 1;
  for (int k = 0; k < s->ndim; k++) d[k] = s->d[k].n, e *= d[k];
  *t += cost_shampoo_elems(hw, (double)e);
  if (!rt_shampoo_preconditioned(s->ndim, d) || o->block < 1) return;
  const int64_t b = o->block;
  const int64_t R[2] = {b, d[0] % b}, C[2] = {b, d[1] % b};
  const int64_t NR[2] = {d[0] / b, d[0] % b ? 1 : 0}, NC[2] = {d[1] / b, d[1] % b ? 1 : 0};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      double n = (double)NR[i] * (double)NC[j], rt;
      if (n <= 0) continue;
      *t += n * cost_shampoo_block(hw, o, (double)R[i], (double)C[j], &rt);
      *roots += n * rt;
    }
}

/* Shampoo's optimizer step on rank program rp, seconds, and *roots of
 * them: placed, the slowest data rank's units; ZeRO, every owner's share
 * (the tensors over the ranks that share the shards); else every tensor of
 * the rank (its shards under tp). */
static double shampoo_rank(const HwModel *hw, const Module *m, const RankProg *rp, int mode,
                           double *roots) {
  const Optimizer *o = &m->train.opt;
  double t = 0, rt = 0;
  *roots = 0;
  if (mode == PO_PLACED && rp->nunits && rp->uranks > 0) {
    double *ts = calloc((size_t)rp->uranks * 2, sizeof *ts);
    if (!ts) return 0;
    for (int i = 0; i < rp->nunits; i++) {
      const OptUnit *u = &rp->units[i];
      if (u->owner < 0 || u->owner >= rp->uranks) continue;
      double x = cost_shampoo_elems(hw, (double)(u->r * u->c)), y = 0;
      if (u->blocked) x += cost_shampoo_block(hw, o, (double)u->r, (double)u->c, &y);
      ts[2 * u->owner] += x + y;
      ts[2 * u->owner + 1] += y;
    }
    int w = 0;
    for (int k = 1; k < rp->uranks; k++)
      if (ts[2 * k] > ts[2 * w]) w = k;
    t = ts[2 * w] - ts[2 * w + 1];
    *roots = ts[2 * w + 1];
    free(ts);
    return t + *roots;
  }
  for (int i = 0; i < rp->nparam; i++)
    if (rp->param[i].v->grad) cost_shampoo_tensor(hw, o, &rp->param[i].v->shape, &t, &rt);
  double share = mode == PO_ZERO && rp->zgroup > 1 ? rp->zgroup : 1;
  *roots = rt / share;
  return (t + rt) / share;
}

static double step_time(const HwModel *hw, const Module *m, const RankProg *rp, double *async_left,
                        double *roots, double *tail) {
  const Plan *p = &m->train.plan;
  double t = 0, fp32 = hw->elt == 8 ? 8 : 4; /* parameters and gradients: fp32 masters */
  int64_t nparam = 0;
  for (int i = 0; i < rp->nparam; i++) nparam += ir_numel(&rp->param[i].v->shape);
  /* a tp-split Adafactor program runs the sums and squares as phases of
   * their own before the update */
  bool af_split = false;
  for (int i = 0; i < rp->nstep; i++)
    af_split |= rp->step[i].kind == PS_OPTIMIZER && rp->step[i].mode == PO_AF_SUMS;
  for (int i = 0; i < rp->nstep; i++) {
    const PStep *s = &rp->step[i];
    int n, stride, part = COST_TAIL_OPT;
    const double t0 = t;
    cost_axis_group(p, s->axis, &n, &stride);
    switch (s->kind) {
    case PS_WAIT:
      t += *async_left;
      *async_left = 0;
      part = COST_TAIL_REDUCE;
      break;
    case PS_ALLREDUCE:
      t += cost_coll(hw, "all_reduce", n, stride, (double)s->count * fp32, NULL);
      part = COST_TAIL_REDUCE;
      break;
    case PS_LOSS:
    case PS_NORM:
      t += cost_coll(hw, "all_reduce", n, stride, 8, NULL) + hw->launch_s;
      if (s->kind == PS_NORM) t += cost_membound(hw, (double)nparam * fp32, 2.0 * nparam);
      part = COST_TAIL_SYNC;
      break;
    case PS_OPTIMIZER: {
      /* AdamW reads param, grad, m, v and writes param, m, v: 7 passes,
       * ZeRO: over the rank's shard only */
      double np = s->mode == PO_ZERO && rp->zshard ? (double)rp->zshard : (double)nparam;
      double rt = 0;
      const char *ok = m->train.opt.kind;
      if (ok && !strcmp(ok, "shampoo"))
        t += shampoo_rank(hw, m, rp, s->mode, &rt), *roots += rt;
      else if (ok && !strcmp(ok, "adafactor")) /* (a split program's few unsplit tensors priced alike) */
        t += cost_adafactor_elems(hw, np, s->mode == PO_AF_SUMS      ? COST_AF_SUMS
                                          : s->mode == PO_AF_SQUARES ? COST_AF_SQUARES
                                          : af_split                 ? COST_AF_FINISH
                                                                     : COST_AF_ALL);
      else
        t += cost_membound(hw, 7 * np * 4, 12 * np);
      break;
    }
    case PS_ALLGATHER: { /* one bucket's (step.count): its chunk from each rank */
      const Bucket *bk = s->count >= 0 && s->count < rp->buckets->len ? rp->buckets->data[s->count] : NULL;
      double bytes = bk ? (double)bk->chunk * n * fp32 : 0;
      t += cost_coll(hw, "all_gather", n, stride, bytes, NULL);
      part = COST_TAIL_GATHER;
      break;
    }
    case PS_OPT_GATHER: /* Shampoo's directions: each data rank's segment to all */
      t += cost_coll(hw, "all_gather", n, stride, (double)s->count * n * 4, NULL);
      part = COST_TAIL_GATHER;
      break;
    case PS_OPT_APPLY: /* read the directions and parameters, write the parameters */
      t += cost_membound(hw, 3.0 * nparam * 4, 2.0 * nparam);
      part = COST_TAIL_APPLY;
      break;
    }
    tail[part] += t - t0;
  }
  return t;
}

void cost_stage_rates(const HwModel *hw, int R, int per, const bool *running, double *rate) {
  int C = hw->cores;
  for (int k = 0; k < R; k++) rate[k] = 1;
  if (C <= 0 || hw->profile_np <= C || per < 1) return;
  enum { MAXC = 256 };
  if (C > MAXC) C = MAXC;
  int busy[MAXC] = {0};
  for (int k = 0; k < R; k++)
    if (running[k])
      for (int j = 0; j < per; j++) busy[(k * per + j) % C]++;
  /* the profile: profile_np ranks on C cores, cores / profile_np of one each */
  double base = (double)C / hw->profile_np;
  for (int k = 0; k < R; k++) {
    if (!running[k]) continue;
    int most = 1;
    for (int j = 0; j < per; j++)
      if (busy[(k * per + j) % C] > most) most = busy[(k * per + j) % C];
    rate[k] = 1.0 / most / base;
  }
}

/* Whether the CUDA target runs the step as CUDA graphs (runtime/train.c:
 * not under a pipeline whose messages are staged through the host
 * (commpass.c: an interleaved schedule whose NCCL groups could hang), nor
 * Shampoo or Adafactor, which run eagerly; --comm mpi and --no-graph are
 * run-time choices, not priced). */
static bool graphed(const HwModel *hw, const Module *m) {
  const char *o = m->train.opt.kind;
  bool staged = m->train.plan.pp > 1 && (m->nrprog < 1 || m->rprog[0]->pipe_mpi);
  return hw->overlap > 0 && !staged && !(o && (!strcmp(o, "shampoo") || !strcmp(o, "adafactor")));
}

const HwModel *cost_hw_graphed(const HwModel *hw, HwModel *tmp) {
  *tmp = *hw;
  tmp->launch_s = hw->launch_graph_s;
  return tmp;
}

int cost_module(const Module *m, const HwModel *hw, CostResult *r) {
  memset(r, 0, sizeof *r);
  const Plan *p = &m->train.plan;
  /* a graph's kernels at the replay's cost a kernel, where measured */
  HwModel hg;
  if (hw->launch_graph_s > 0 && graphed(hw, m)) hw = cost_hw_graphed(hw, &hg);
  int R = m->nrprog;
  if (R <= 0) return -1;
  int M = p->mb > 0 ? p->mb : 1;
  r->nstages = R;
  /* per rank and chunk: forward, backward (last microbatch's separately:
   * it starts the bucket reductions) */
  double fwd[MAX_STAGES][8], bwd[MAX_STAGES][8], async[MAX_STAGES];
  /* the early gathers' ends per rank, and the chunks' first forward and
   * backward (bit 2c, 2c+1) that have not run yet: those wait for them */
  Early early[MAX_STAGES];
  unsigned first[MAX_STAGES];
  int nvs = 0;
  for (int k = 0; k < R; k++) {
    const RankProg *rp = m->rprog[k];
    async[k] = 0;
    early[k] = (Early){NULL, 0};
    if (rp->nearly > 0 && hw->overlap > 0)
      early[k].end = calloc((size_t)rp->nearly, sizeof(double));
    first[k] = early[k].end ? ~0u : 0;
    for (int c = 0; c < rp->nchunks && c < 8; c++) {
      double b, cm, as;
      /* once per step, before the rank's first action: the weight casts */
      early[k].t0 = r->stage[k].cast_s;
      r->stage[k].cast_s += cast_time(hw, m, &rp->chunk[c].cast, early[k].end ? &early[k] : NULL);
      block_time(hw, m, &rp->chunk[c].fwd, &b, &cm, &as, false);
      fwd[k][c] = b;
      r->stage[k].fwd_s += b;
      r->stage[k].comm_s += cm;
      block_time(hw, m, &rp->chunk[c].bwd, &b, &cm, &as, true);
      bwd[k][c] = b;
      async[k] += as;
      r->stage[k].bwd_s += b;
      r->stage[k].comm_s += cm;
      nvs++;
    }
  }
  /* pipeline message time between neighbouring virtual stages (a cut that
   * carries several tensors: their messages one after another) */
  double msg = 0;
  if (R > 1) {
    const RankProg *rp = m->rprog[0];
    for (int i = 0; i < rp->chunk[0].fwd.n; i++)
      if (rp->chunk[0].fwd.ins[i].kind == PI_SEND)
        msg += comm_time(hw, p, &rp->chunk[0].fwd.ins[i].comm, NULL);
  }
  /* Simulate the schedule: each rank runs its actions in order; a forward
   * waits for the previous virtual stage's forward of the microbatch, a
   * backward for the next one's backward (messages take msg).  Ranks that
   * share cores (a profile measured with more ranks than cores) compute
   * faster while others wait: the simulation advances from event to event
   * with every running action progressing at its cost_stage_rates rate (each
   * pipeline rank's program stands for world / R ranks doing the same). */
  int S = nvs;
  double *fdone = calloc((size_t)(S * M + 1), sizeof(double)),
         *bdone = calloc((size_t)(S * M + 1), sizeof(double));
  bool *fset = calloc((size_t)(S * M + 1), 1), *bset = calloc((size_t)(S * M + 1), 1);
  double clock[MAX_STAGES] = {0}, left[MAX_STAGES] = {0}, dur[MAX_STAGES] = {0};
  bool running[MAX_STAGES] = {0};
  int pos[MAX_STAGES] = {0};
  int remaining = 0;
  for (int k = 0; k < R; k++) remaining += m->rprog[k]->nsched;
  int size, stride_unused;
  cost_axis_group(p, AX_WORLD, &size, &stride_unused);
  double per = (double)size / R, now = 0;
  while (remaining > 0) {
    double wake = INFINITY;
    int busy = 0;
    for (int k = 0; k < R; k++) {
      const RankProg *rp = m->rprog[k];
      if (!running[k] && pos[k] < rp->nsched) {
        const PAct *a = &rp->sched[pos[k]];
        int vs = rp->chunk[a->chunk].vs;
        double ready = r->stage[k].cast_s;   /* the rank starts after its weight casts */
        bool can = true;
        if (a->fwd && vs > 0) {
          can = fset[(vs - 1) * M + a->mb];
          if (can) ready = fdone[(vs - 1) * M + a->mb] + msg;
        } else if (!a->fwd && vs < S - 1) {
          can = bset[(vs + 1) * M + a->mb];
          if (can) ready = bdone[(vs + 1) * M + a->mb] + msg;
        }
        if (can && ready <= now) {
          running[k] = true;
          dur[k] = left[k] = a->fwd ? fwd[k][a->chunk] : bwd[k][a->chunk];
          unsigned bit = 1u << (2 * a->chunk + !a->fwd);
          if (first[k] & bit) { /* the chunk's first: it waits for the early gathers */
            const PChunk *ch = &rp->chunk[a->chunk];
            double b, cm, as;
            early[k].t0 = now;
            block_time_e(hw, m, a->fwd ? &ch->fwd : &ch->bwd, &b, &cm, &as, !a->fwd, &early[k]);
            dur[k] = left[k] = b;
            first[k] &= ~bit;
          }
        } else if (can && ready < wake) {
          wake = ready;
        }
      }
      busy += running[k];
    }
    if (!busy) {
      if (wake == INFINITY) break; /* cannot happen for a schedule sched_build accepted */
      now = wake;
      continue;
    }
    double rate[MAX_STAGES], dt = wake - now;
    cost_stage_rates(hw, R, (int)per, running, rate);
    int first = -1;
    for (int k = 0; k < R; k++)
      if (running[k] && left[k] / rate[k] <= dt) {
        dt = left[k] / rate[k];
        first = k;
      }
    now += dt;
    for (int k = 0; k < R; k++) {
      if (!running[k]) continue;
      left[k] -= dt * rate[k];
      if (k != first && left[k] > 1e-12 * (1 + dur[k])) continue;
      const RankProg *rp = m->rprog[k];
      const PAct *a = &rp->sched[pos[k]];
      int vs = rp->chunk[a->chunk].vs;
      clock[k] = now;
      if (a->fwd) {
        fdone[vs * M + a->mb] = now;
        fset[vs * M + a->mb] = true;
      } else {
        bdone[vs * M + a->mb] = now;
        bset[vs * M + a->mb] = true;
      }
      r->stage[k].busy_s += dur[k];
      running[k] = false;
      pos[k]++;
      remaining--;
    }
  }
  free(fdone);
  free(bdone);
  free(fset);
  free(bset);
  for (int k = 0; k < R; k++) free(early[k].end);
  /* the step: asynchronous bucket reductions (the part not hidden behind
   * the last backward), then the step's list */
  double step = 0, busy = 0;
  for (int k = 0; k < R; k++) {
    const RankProg *rp = m->rprog[k];
    double left = async[k] * (1 - hw->overlap), roots = 0, *tail = r->stage[k].tail;
    memset(tail, 0, sizeof r->stage[k].tail);
    double st = step_time(hw, m, rp, &left, &roots, tail);
    tail[COST_TAIL_ROOTS] = roots;
    /* a cpu pipeline rank's root worker computes Shampoo's roots while the
     * rank waits in the schedule (runtime/train.c): its idle time so far; a
     * GPU rank's eigh roots run on host threads from the step's start,
     * beside the whole schedule the GPU runs before the step tail */
    const bool host_eigh = m->cuda && hw->vec_flops > 0 && m->train.opt.kind &&
                           !strcmp(m->train.opt.kind, "shampoo") &&
                           m->train.opt.root == RT_ROOT_EIGH;
    if (opt_root_worker(m) || host_eigh) {
      double idle = host_eigh ? clock[k] : clock[k] - r->stage[k].busy_s;
      double hidden = roots < idle ? roots : idle > 0 ? idle : 0;
      st -= hidden;
      tail[COST_TAIL_OPT] -= hidden;
      tail[COST_TAIL_ROOTS] -= hidden;
      tail[COST_TAIL_HIDDEN] = hidden;
    }
    tail[COST_TAIL_REDUCE] += left;
    r->stage[k].busy_s += r->stage[k].cast_s;
    r->stage[k].step_s = st + left;
    r->stage[k].end_s = clock[k] + st + left;
    r->stage[k].bytes = (double)prog_comm_bytes(rp, NULL);
    if (r->stage[k].end_s > step) step = r->stage[k].end_s;
    busy += r->stage[k].busy_s;
  }
  /* ranks leave the step together (the loss and norm sums synchronise them) */
  r->step_s = step;
  r->bubble_frac = step > 0 && R > 1 ? 1 - busy / (R * step) : 0;
  /* model FLOPs of the whole mesh per step: each pipeline rank's chunks'
   * local forward FLOPs, times the ranks splitting a layer's work (tp,
   * tp2d's grid, the ring's sequence shards) and the data-parallel
   * replicas, times 3 (forward + backward), per microbatch */
  double f = 0;
  for (int k = 0; k < R; k++)
    for (int c = 0; c < m->rprog[k]->nchunks; c++) f += cost_model_flops_fwd(m->rprog[k]->chunk[c].g);
  int split = p->tp * p->tp2d * p->tp2d * (p->sp_kind == SP_RING ? p->sp : 1);
  r->model_flops = 3 * f * split * M * p->dp;
  r->tokens = (double)m->train.batch * (m->train.seq > 0 ? (double)m->train.seq : 1);
  return 0;
}

/* Forward FLOPs of one rank's graph for one microbatch: matmuls and
 * attention only, the convention of model FLOPs (Narayanan et al.;
 * REFERENCES.md).  A SUMMA matmul's shapes are one step's blocks, run q
 * times; a ring attention's one K/V block's, run once per block of the
 * ring (the caller scales a rank's figure by the ranks that split the
 * work). */
double cost_model_flops_fwd(const Graph *g) {
  double f = 0;
  for (int i = 0; i < (g->nfwd ? g->nfwd : g->nodes.len); i++) {
    const Node *n = g->nodes.data[i];
    if (n->op != OP_MATMUL && n->op != OP_ATTENTION) continue;
    double x = cost_node_flops(n);
    if (ir_summa_q(n) > 1) x *= ir_summa_q(n);
    if (ir_ring_size(n) > 1) x *= ir_ring_size(n);
    f += x;
  }
  return f;
}

/* ---- --emit=plan: predicted times ---- */

static const char *opname(const PInstr *in) {
  switch (in->kind) {
  case PI_LOAD: return "load";
  case PI_RECV: return "recv";
  case PI_SEND: return "send";
  case PI_POST: return "post";
  case PI_SEED: return "seed";
  case PI_COPY: return "copy";
  case PI_LOOP: return "fused loop";
  case PI_BUCKET: return in->req >= 0 ? "bucket reduction (overlapped)" : "bucket reduction";
  default: return in->n ? ir_ops[in->n->op].name : "?";
  }
}

const char *cost_time_str(double s) {
  static char buf[8][24];
  static int k;
  char *b = buf[k++ & 7];
  if (s >= 1)
    snprintf(b, 24, "%.3f s", s);
  else if (s >= 1e-3)
    snprintf(b, 24, "%.3f ms", s * 1e3);
  else
    snprintf(b, 24, "%.1f us", s * 1e6);
  return b;
}

int cost_eigh_on_gpu(const Module *m, const HwModel *hw, const CostResult *r, double *step_s,
                     double *roots_s, double *newton_s) {
  const Optimizer *o = &m->train.opt;
  CostResult own, rn;
  if (!o->kind || strcmp(o->kind, "shampoo") || o->root != RT_ROOT_EIGH || hw->vec_flops <= 0 ||
      (!r && cost_module(m, hw, &own)))
    return 0;
  if (!r) r = &own;
  if (r->step_s <= 0) return 0;
  double roots = 0;
  for (int k = 0; k < r->nstages; k++)
    if (r->stage[k].tail[COST_TAIL_ROOTS] > roots) roots = r->stage[k].tail[COST_TAIL_ROOTS];
  /* the same programs with Newton's roots priced (the placement's costs
   * weigh roots alike, so its choice would hardly move) */
  Module mn = *m;
  mn.train.opt.root = RT_ROOT_NEWTON;
  if (roots < 0.1 * r->step_s || cost_module(&mn, hw, &rn) || rn.step_s >= r->step_s) return 0;
  *step_s = r->step_s, *roots_s = roots, *newton_s = rn.step_s;
  return 1;
}

void cost_report(FILE *out, const Module *m, const HwModel *hw, const char *pf) {
  CostResult r;
  if (cost_module(m, hw, &r)) return;
  const Plan *p = &m->train.plan;
  int M = p->mb > 0 ? p->mb : 1;
  fprintf(out, "%scost:     predicted step %s (%s), %.0f tokens/s, %.3g model FLOPs/step; "
               "%.1f%% pipeline bubble\n",
          pf, cost_time_str(r.step_s), hw->source, r.step_s > 0 ? r.tokens / r.step_s : 0, r.model_flops,
          100 * r.bubble_frac);
  int ndev = m->train.mesh ? m->train.mesh->ndev : 1;
  if (r.step_s > 0)
    fprintf(out, "%s          %.3g TFLOP/s per device model FLOPs, MFU %.1f%% of %.3g TFLOP/s peak\n", pf,
            r.model_flops / r.step_s / ndev / 1e12, 100 * r.model_flops / r.step_s / ndev / hw->peak,
            hw->peak / 1e12);
  double es, er, en;
  if (cost_eigh_on_gpu(m, hw, &r, &es, &er, &en))
    fprintf(out, "%s          roots: Shampoo's root = eigh runs each root on the host CPU (LAPACK, "
                 "fp64), %s of the step beyond what host threads hide beside the GPU's forward "
                 "and backward; root = newton runs them on the GPU (fp64 GEMMs): predicted "
                 "step %s\n",
            pf, cost_time_str(er), cost_time_str(en));
  /* an LM head the precision pass padded (passes/precision.c, pad_heads):
   * its persistent copy, or (ZeRO-3) its casts before each reader */
  const Graph *g = m->graph;
  const Value *said[8];
  int nsaid = 0;
  for (int i = 0; g && i < g->wcasts.len + g->nodes.len; i++) {
    const Node *w = i < g->wcasts.len ? g->wcasts.data[i] : g->nodes.data[i - g->wcasts.len];
    if (w->op != OP_CAST || w->in[0]->shape.ndim != 2 || ir_cast_rows(w) <= w->in[0]->shape.d[0].n)
      continue;
    const Value *x = w->in[0];
    while (x->alias && !x->name) x = x->alias;
    bool again = false;
    for (int k = 0; k < nsaid; k++)
      again |= said[k] == x || (x->name && said[k]->name && !strcmp(said[k]->name, x->name));
    if (again || nsaid == 8) continue;
    said[nsaid++] = x;
    fprintf(out, "%s          padded: %s's 16-bit copy%s has %" PRId64 " rows, not %" PRId64
                 " (zeros), so the logits' rows are %" PRId64 " bytes, a multiple of 16, and cuBLAS "
                 "runs the head's GEMMs at its aligned rate; the extra columns stay out of the "
                 "loss (SHARDC_HEAD_PAD=0: unpadded)\n",
            pf, x->name ? x->name : "a weight", i < g->wcasts.len ? "" : ", cast before each use,",
            ir_cast_rows(w), w->in[0]->shape.d[0].n, ir_cast_rows(w) * hw->elt);
  }
  /* a GEMM dim whose rows are not 16-byte aligned (cost_gemm's penalty):
   * which, what it costs, and the step with aligned rows (the vocabulary
   * padded with unused rows, as Megatron-LM and llm.c pad it) */
  if (hw->unaligned_eff > 0 && hw->unaligned_eff < 1 && m->graph && r.step_s > 0) {
    int64_t bad = 0;
    for (int i = 0; i < m->graph->nodes.len && !bad; i++) {
      const Node *n = m->graph->nodes.data[i];
      if (n->op != OP_MATMUL) continue;
      for (int d = 0; d < 2 && !bad; d++)
        if (n->in[1]->shape.d[d].n * hw->elt % 16) bad = n->in[1]->shape.d[d].n;
    }
    /* the logits of a cross-entropy: padded rows stay out of its softmax
     * with `classes` */
    bool vocab = false;
    for (int i = 0; i < m->graph->nodes.len && bad; i++) {
      const Node *n = m->graph->nodes.data[i];
      if (n->op == OP_CROSS_ENTROPY && !n->a.i[1] &&
          n->in[0]->shape.d[n->in[0]->shape.ndim - 1].n == bad)
        vocab = true;
    }
    HwModel al = *hw;
    al.unaligned_eff = 1;
    CostResult ra;
    if (bad && !cost_module(m, &al, &ra) && ra.step_s < r.step_s)
      fprintf(out, "%s          unaligned: rows of %" PRId64 " features (%" PRId64 " bytes) are not a "
                   "multiple of 16 bytes, so cuBLAS runs their GEMMs at %.2f of its rate: %.0f%% of "
                   "the step; padded to %" PRId64 "%s the step would be about %s\n",
              pf, bad, bad * hw->elt, hw->unaligned_eff, 100 * (r.step_s - ra.step_s) / r.step_s,
              (bad + 63) / 64 * 64,
              vocab ? arena_printf(" (the unused rows kept out of the loss by "
                                   "`cross_entropy(..., classes = %" PRId64 ")`)", bad)
                    : "",
              cost_time_str(ra.step_s));
  }
  for (int k = 0; k < r.nstages; k++) {
    const RankProg *rp = m->rprog[k];
    fprintf(out, "%s  rank %d%s: %sforward %s + backward %s per microbatch (x%d; blocking comm %s), "
                 "step tail %s, busy %s, ends %s\n",
            pf, k, r.nstages > 1 ? " (pipeline)" : "",
            r.stage[k].cast_s > 0
                ? arena_printf("weight casts%s %s per step, ",
                               rp->mem->wcopy_gathered ? " and gathers" : "", cost_time_str(r.stage[k].cast_s))
                : "",
            cost_time_str(r.stage[k].fwd_s), cost_time_str(r.stage[k].bwd_s), M,
            cost_time_str(r.stage[k].comm_s), cost_time_str(r.stage[k].step_s), cost_time_str(r.stage[k].busy_s), cost_time_str(r.stage[k].end_s));
    /* the step tail by part */
    const double *tl = r.stage[k].tail;
    static const char *const tname[COST_TAIL_N] = {
        [COST_TAIL_REDUCE] = "gradient reductions", [COST_TAIL_SYNC] = "loss and norm sums",
        [COST_TAIL_OPT] = "optimizer", [COST_TAIL_GATHER] = "gathers",
        [COST_TAIL_APPLY] = "directions applied"};
    fprintf(out, "%s    step tail:", pf);
    const char *sep = " ";
    for (int part = 0; part < COST_TAIL_N; part++) {
      if (!tname[part] || tl[part] <= 0) continue;
      fprintf(out, "%s%s %s", sep, tname[part], cost_time_str(tl[part]));
      if (part == COST_TAIL_OPT && (tl[COST_TAIL_ROOTS] > 0 || tl[COST_TAIL_HIDDEN] > 0))
        fprintf(out, " (Shampoo's roots %s of it%s)", cost_time_str(tl[COST_TAIL_ROOTS]),
                tl[COST_TAIL_HIDDEN] > 0
                    ? arena_printf(", and %s by the root worker in idle time", cost_time_str(tl[COST_TAIL_HIDDEN]))
                    : "");
      sep = ", ";
    }
    fprintf(out, "\n");
    /* per op: count and predicted time over one microbatch, heaviest first */
    enum { NOPS = 64 };
    const char *name[NOPS];
    double t[NOPS], c[NOPS];
    int nops = 0;
    for (int ch = 0; ch < rp->nchunks; ch++)
      for (int d = 0; d < 2; d++) {
        const PBlock *b = d ? &rp->chunk[ch].bwd : &rp->chunk[ch].fwd;
        for (int i = 0; i < b->n; i++) {
          const char *nm = opname(&b->ins[i]);
          int j = 0;
          while (j < nops && strcmp(name[j], nm)) j++;
          if (j == nops) {
            if (nops == NOPS) continue;
            name[nops] = nm;
            t[nops] = c[nops] = 0;
            nops++;
          }
          t[j] += cost_instr(hw, m, &b->ins[i]);
          c[j] += 1;
        }
      }
    for (int a = 0; a < nops; a++)
      for (int b = a + 1; b < nops; b++)
        if (t[b] > t[a]) {
          double x = t[a]; t[a] = t[b]; t[b] = x;
          x = c[a]; c[a] = c[b]; c[b] = x;
          const char *s = name[a]; name[a] = name[b]; name[b] = s;
        }
    double tot = 0;
    for (int a = 0; a < nops; a++) tot += t[a];
    for (int a = 0; a < nops; a++)
      if (t[a] > 0)
        fprintf(out, "%s    %-30s %4.0f x  %10s per microbatch  %5.1f%%\n", pf, name[a], c[a], cost_time_str(t[a]),
                tot > 0 ? 100 * t[a] / tot : 0);
  }
}

/* ---- profiles (shardc calibrate) ----
 * {"shardc_profile": 1, "device": "cpu", "np": 4, "launch_s": 2e-06,
 *  (a GPU's also "launch_graph_s": a kernel of a replayed CUDA graph)
 *  "gemm": [[flops, flop_per_s], ...], "gemm_thin": [[smallest_dim, flop_per_s], ...],
 *  (a GPU's also "gemm_bf16" and "gemm_thin_bf16", which a 16-bit plan uses instead)
 *  "bw": [[bytes, bytes_per_s], ...],
 *  (a GPU's also "attention", "attention_bwd" and their _bf16: [[T, seconds a
 *  (batch, head) row at D = 64, causal], ...], the fused kernels measured)
 *  "coll": [{"op": "all_reduce", "n": 4, "t": [[bytes, seconds], ...]}, ...]}
 * A small reader for this shape of JSON: objects, arrays, numbers, strings.
 * A profile is input like a .shard file: every number is checked against
 * the range a machine can have (an infinite rate or a negative time would
 * reach the search as overflowing arithmetic), every error says where
 * (line, column and byte offset), and nesting is bounded (the skipping of
 * unknown keys recurses). */

enum { JSON_MAX_DEPTH = 64, PROFILE_MAX_RANKS = 1048576 };

typedef struct JReader {
  const char *s;    /* the next byte */
  const char *base; /* the file's first byte, for positions */
  const char *key;  /* the top-level key being read ("" outside one), for messages */
  int depth;        /* objects and arrays open around s */
  char *err;
  int errcap;
  int bad;
} JReader;

/* The first error only: "line L, column C (byte offset B): " and the message,
 * for the byte at p (columns count UTF-8 characters). */
static int jfail_at(JReader *j, const char *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int jfail_at(JReader *j, const char *p, const char *fmt, ...) {
  if (!j->bad) {
    int line = 1;
    long col = 1;
    for (const char *q = j->base; q < p; q++) {
      if (*q == '\n') line++, col = 1;
      else if ((*q & 0xC0) != 0x80) col++;
    }
    int n = snprintf(j->err, (size_t)j->errcap, "line %d, column %ld (byte offset %ld): ", line, col,
                     (long)(p - j->base));
    if (n >= 0 && n < j->errcap) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(j->err + n, (size_t)(j->errcap - n), fmt, ap);
      va_end(ap);
    }
  }
  j->bad = 1;
  return -1;
}

/* What the text at p is, for "found ...": a few printable bytes or the end. */
static const char *jfound(const char *p, char *buf, size_t cap) {
  if (!*p) return "the end of the file";
  size_t n = 0;
  buf[n++] = '\'';
  for (; *p && *p != '\n' && n + 6 < cap && n < 18; p++) {
    unsigned char c = (unsigned char)*p;
    if (c >= 32 && c < 127) buf[n++] = (char)c;
    else n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", c);
  }
  buf[n++] = '\'';
  buf[n] = 0;
  return buf;
}

/* " (in \"gemm\")" where a key is being read */
static const char *jin(const JReader *j, char *buf, size_t cap) {
  if (!j->key || !*j->key) return "";
  snprintf(buf, cap, " (in \"%s\")", j->key);
  return buf;
}

static void jws(JReader *j) {
  while (*j->s == ' ' || *j->s == '\n' || *j->s == '\t' || *j->s == '\r') j->s++;
}

static int jexpect(JReader *j, char c) {
  jws(j);
  if (*j->s != c) {
    char f[40], in[48];
    return jfail_at(j, j->s, "expected '%c', found %s%s", c, jfound(j->s, f, sizeof f), jin(j, in, sizeof in));
  }
  j->s++;
  return 0;
}

/* ',' and another item (1), or the closing bracket (0), or -1 */
static int jnext(JReader *j, char close) {
  jws(j);
  if (*j->s == ',') {
    j->s++;
    return 1;
  }
  if (*j->s == close) {
    j->s++;
    return 0;
  }
  char f[40], in[48];
  return jfail_at(j, j->s, "expected ',' or '%c', found %s%s", close, jfound(j->s, f, sizeof f),
                  jin(j, in, sizeof in));
}

static int jhex(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string into out (at most cap - 1 bytes kept), its escapes decoded:
 * \" \\ \/ \b \f \n \r \t and \uXXXX (a character past ASCII, or NUL, kept
 * as '?': the keys and names this reads are ASCII). */
static int jstring(JReader *j, char *out, int cap) {
  if (jexpect(j, '"')) return -1;
  const char *open = j->s - 1;
  int n = 0;
  for (;;) {
    unsigned char c = (unsigned char)*j->s;
    char in[48];
    if (!c) return jfail_at(j, open, "a string without its closing '\"'%s", jin(j, in, sizeof in));
    if (c == '"') break;
    if (c < 32)
      return jfail_at(j, j->s, "a control character (0x%02x) in a string: JSON writes it as an escape%s", c,
                      jin(j, in, sizeof in));
    char ch = (char)c;
    int len = 1;
    if (c == '\\') {
      len = 2;
      switch (j->s[1]) {
      case '"': case '\\': case '/': ch = j->s[1]; break;
      case 'b': ch = '\b'; break;
      case 'f': ch = '\f'; break;
      case 'n': ch = '\n'; break;
      case 'r': ch = '\r'; break;
      case 't': ch = '\t'; break;
      case 'u': {
        unsigned cp = 0;
        for (int k = 2; k < 6; k++) {
          int h = jhex(j->s[k]);
          if (h < 0) return jfail_at(j, j->s, "\\u needs four hex digits%s", jin(j, in, sizeof in));
          cp = cp * 16 + (unsigned)h;
        }
        ch = cp > 0 && cp < 128 ? (char)cp : '?';
        len = 6;
        break;
      }
      default: {
        char f[40];
        return jfail_at(j, j->s, "an unknown escape %s in a string%s", jfound(j->s, f, sizeof f),
                        jin(j, in, sizeof in));
      }
      }
    }
    if (n < cap - 1) out[n++] = ch;
    j->s += len;
  }
  out[n] = 0;
  j->s++;
  return 0;
}

/* A JSON number (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), finite:
 * no "inf", "nan", hex or 1e999 */
static int jnumber(JReader *j, double *v) {
  jws(j);
  const char *p = j->s, *q = p;
  if (*q == '-') q++;
  bool ok = *q >= '0' && *q <= '9';
  if (*q == '0') q++;
  else
    while (*q >= '0' && *q <= '9') q++;
  if (ok && *q == '.') {
    q++;
    ok = *q >= '0' && *q <= '9';
    while (*q >= '0' && *q <= '9') q++;
  }
  if (ok && (*q == 'e' || *q == 'E')) {
    q++;
    if (*q == '+' || *q == '-') q++;
    ok = *q >= '0' && *q <= '9';
    while (*q >= '0' && *q <= '9') q++;
  }
  bool glued = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '.' ||
               *q == '+' || *q == '-';
  char f[40], in[48];
  if (!ok || glued) return jfail_at(j, p, "expected a number, found %s%s", jfound(p, f, sizeof f), jin(j, in, sizeof in));
  *v = strtod(p, NULL);
  if (!isfinite(*v))
    return jfail_at(j, p, "the number %.*s is out of range%s", (int)(q - p < 24 ? q - p : 24), p, jin(j, in, sizeof in));
  j->s = q;
  return 0;
}

/* A number within [lo, hi] (whole when `whole`); the message names it. */
static int jrange(JReader *j, const char *name, double lo, double hi, const char *unit, bool whole, double *v) {
  jws(j);
  const char *p = j->s;
  if (jnumber(j, v)) return -1;
  if (whole && !(*v >= lo && *v <= hi && *v == floor(*v)))
    return jfail_at(j, p, "%s must be a whole number from %.0f to %.0f, got %.*s", name, lo, hi, (int)(j->s - p), p);
  if (!(*v >= lo && *v <= hi))
    return jfail_at(j, p, "%s must be between %g and %g%s, got %.*s", name, lo, hi, unit, (int)(j->s - p), p);
  return 0;
}

/* The range of a curve's x or y: what it is, the bounds, the unit */
typedef struct JRange {
  const char *what;
  double lo, hi;
  const char *unit;
} JRange;

/* Rates and sizes from a slow CPU's to far past any machine's (1e18 FLOP/s
 * is an exaflop on one rank); times from a picosecond to a quarter hour. */
static const JRange R_FLOPS = {"the GEMM's FLOPs", 1, 1e24, ""}, R_DIM = {"the smallest dim", 1, 1e9, ""},
                    R_BYTES = {"the bytes", 1, 1e15, ""}, R_SEQ = {"the sequence length", 1, 1e9, ""},
                    R_RATE = {"the rate", 1e3, 1e18, " FLOP/s"}, R_BW = {"the bandwidth", 1e3, 1e16, " bytes/s"},
                    R_TIME = {"the time", 1e-12, 1e3, " s"};

/* [[x, y], ...] into a curve (x increasing, each within its range) */
static int jcurve(JReader *j, CostCurve *c, const JRange *xr, const JRange *yr) {
  if (jexpect(j, '[')) return -1;
  c->n = 0;
  jws(j);
  if (*j->s == ']') {
    j->s++;
    return 0;
  }
  for (;;) {
    jws(j);
    const char *p = j->s;
    double x, y;
    if (jexpect(j, '[') || jnumber(j, &x) || jexpect(j, ',') || jnumber(j, &y) || jexpect(j, ']')) return -1;
    const JRange *r = !(x >= xr->lo && x <= xr->hi) ? xr : !(y >= yr->lo && y <= yr->hi) ? yr : NULL;
    if (r)
      return jfail_at(j, p, "%s: point %d: %s must be between %g and %g%s, got %g", j->key, c->n + 1, r->what,
                      r->lo, r->hi, r->unit, r == xr ? x : y);
    if (c->n && x <= c->x[c->n - 1])
      return jfail_at(j, p, "%s: point %d: the points must be in increasing order (%g after %g)", j->key,
                      c->n + 1, x, c->x[c->n - 1]);
    if (c->n == COST_CURVE_MAX)
      return jfail_at(j, p, "%s: more than %d points (limit is %d)", j->key, COST_CURVE_MAX, COST_CURVE_MAX);
    c->x[c->n] = x;
    c->y[c->n] = y;
    c->n++;
    int more = jnext(j, ']');
    if (more <= 0) return more;
  }
}

/* Any value, skipped (keys this shardc does not read), nested at most
 * JSON_MAX_DEPTH deep */
static int jskip(JReader *j) {
  jws(j);
  char c = *j->s;
  if (c == '"') {
    char tmp[8];
    return jstring(j, tmp, sizeof tmp);
  }
  if (c == '{' || c == '[') {
    if (j->depth >= JSON_MAX_DEPTH)
      return jfail_at(j, j->s, "arrays and objects nested too deep (limit is %d)", JSON_MAX_DEPTH);
    char close = c == '{' ? '}' : ']';
    j->s++;
    j->depth++;
    jws(j);
    if (*j->s == close) {
      j->s++;
      j->depth--;
      return 0;
    }
    for (;;) {
      if (c == '{') {
        char k[8];
        if (jstring(j, k, sizeof k) || jexpect(j, ':')) return -1;
      }
      if (jskip(j)) return -1;
      int more = jnext(j, close);
      if (more < 0) return -1;
      if (!more) break;
    }
    j->depth--;
    return 0;
  }
  if (!strncmp(j->s, "true", 4) || !strncmp(j->s, "null", 4)) {
    j->s += 4;
    return 0;
  }
  if (!strncmp(j->s, "false", 5)) {
    j->s += 5;
    return 0;
  }
  double v;
  return jnumber(j, &v);
}

/* A key of an object that may hold each of names[] once (bit k of *seen:
 * names[k] read); its index, n for a key it does not know, -1 on error. */
static int jkey(JReader *j, const char *const *names, int n, unsigned long *seen, char *key, int cap) {
  jws(j);
  const char *p = j->s;
  if (jstring(j, key, cap) || jexpect(j, ':')) return -1;
  for (int k = 0; k < n; k++)
    if (!strcmp(key, names[k])) {
      if (*seen >> k & 1) {
        char in[48];
        return jfail_at(j, p, "\"%s\" given twice%s", key, jin(j, in, sizeof in));
      }
      *seen |= 1ul << k;
      return k;
    }
  return n;
}

static const char *const coll_keys[] = {"op", "n", "t"};

static int jcoll(JReader *j, CostColl *c) {
  if (jexpect(j, '{')) return -1;
  memset(c, 0, sizeof *c);
  unsigned long seen = 0;
  for (;;) {
    char key[32];
    double v;
    int k = jkey(j, coll_keys, (int)(sizeof coll_keys / sizeof coll_keys[0]), &seen, key, sizeof key);
    if (k < 0) return -1;
    if (k == 0) {
      /* the collectives the cost model prices (a misspelt one would be
       * dropped, its operation priced from the catalog without a word) */
      static const char *const ops[PROFILE_NCOLL_OPS] = {PROFILE_COLL_OPS};
      jws(j);
      const char *at = j->s;
      if (jstring(j, c->op, sizeof c->op)) return -1;
      bool known = false;
      for (int o = 0; o < PROFILE_NCOLL_OPS; o++) known |= !strcmp(c->op, ops[o]);
      if (!known)
        return jfail_at(j, at, "coll: op must be all_reduce, all_gather, reduce_scatter, broadcast "
                        "or p2p, got \"%s\"", c->op);
    } else if (k == 1) {
      if (jrange(j, "coll: n", 1, PROFILE_MAX_RANKS, "", true, &v)) return -1;
      c->nranks = (int)v;
    } else if (k == 2) {
      if (jcurve(j, &c->t, &R_BYTES, &R_TIME)) return -1;
    } else if (jskip(j)) {
      return -1;
    }
    int more = jnext(j, '}');
    if (more <= 0) return more;
  }
}

/* {"name": seconds, ...} into out[k] for names[k] (names it does not know
 * are skipped); each between 0 and 1 ms; *nread counts those above 0. */
static int jtimes(JReader *j, const char *const *names, int n, double *out, const char *what, int *nread) {
  if (jexpect(j, '{')) return -1;
  jws(j);
  if (*j->s == '}') {
    j->s++;
    return 0;
  }
  unsigned long seen = 0;
  for (;;) {
    char name[24];
    double v;
    int k = jkey(j, names, n, &seen, name, sizeof name);
    if (k < 0) return -1;
    jws(j);
    const char *p = j->s;
    if (jnumber(j, &v)) return -1;
    if (!(v >= 0 && v < 1e-3))
      return jfail_at(j, p, "%s: %s: %s must be between 0 and 1 ms, got %g", j->key, name, what, v);
    if (k < n) out[k] = v;
    *nread += v > 0;
    int more = jnext(j, '}');
    if (more <= 0) return more;
  }
}

/* The keys a profile may hold, each once */
enum { PK_VERSION, PK_DEVICE, PK_NP, PK_CORES, PK_LAUNCH, PK_LAUNCH_GRAPH, PK_GEMM, PK_GEMM_THIN, PK_GEMM16,
       PK_THIN16, PK_BW, PK_ATT, PK_ATT_BWD, PK_ATT16, PK_ATT_BWD16, PK_SPECIAL, PK_KERNELS, PK_COLL,
       PK_EIGH, PK_N };
static const char *const profile_keys[PK_N] = {
    "shardc_profile", "device",    "np",        "cores",          "launch_s",          "launch_graph_s",
    "gemm",           "gemm_thin", "gemm_bf16", "gemm_thin_bf16", "bw",                "attention",
    "attention_bwd",  "attention_bf16", "attention_bwd_bf16", "special", "kernels",     "coll",
    "eigh_flops"};

/* The profile's text (NUL-terminated, len bytes) into h; 0 or -1 with the message in j->err. */
static int parse_profile(JReader *j, size_t len, HwModel *h, const HwModel *hw) {
  const char *nul = memchr(j->base, 0, len);
  if (nul) return jfail_at(j, nul, "a NUL byte: a profile is JSON text");
  if (!strncmp(j->s, "\xef\xbb\xbf", 3)) j->s += 3; /* a byte-order mark, as some editors write */
  jws(j);
  if (!*j->s) return jfail_at(j, j->s, "no profile: the file %s", len ? "holds only blanks" : "is empty");
  CostCurve gemm16 = {0}, thin16 = {0}, att16 = {0}, attb16 = {0};
  double version = 0;
  unsigned long seen = 0;
  int nread = 0; /* curve points, collectives, "special" and "kernels" figures read */
  if (jexpect(j, '{')) return -1;
  j->depth = 1;
  jws(j);
  if (*j->s == '}') j->s++;
  else
    for (;;) {
      char key[32];
      double v;
      j->key = "";
      int k = jkey(j, profile_keys, PK_N, &seen, key, sizeof key);
      if (k < 0) return -1;
      j->key = k < PK_N ? profile_keys[k] : key;
      int r = 0;
      CostCurve *cv = NULL;
      switch (k) {
      case PK_VERSION: {
        jws(j);
        const char *p = j->s;
        r = jnumber(j, &version);
        if (!r && version != 1)
          r = jfail_at(j, p, "shardc_profile must be 1 (the version this shardc reads), got %.*s", (int)(j->s - p), p);
        break;
      }
      case PK_DEVICE:
        r = jstring(j, h->profile_device, sizeof h->profile_device);
        /* printed in messages: printable ASCII only */
        for (char *c = h->profile_device; *c; c++)
          if (*c < 32 || *c > 126) *c = '?';
        break;
      case PK_NP:
        r = jrange(j, "np", 1, PROFILE_MAX_RANKS, "", true, &v);
        h->profile_np = (int)v;
        break;
      case PK_CORES:
        r = jrange(j, "cores", 1, PROFILE_MAX_RANKS, "", true, &v);
        h->cores = (int)v;
        break;
      case PK_LAUNCH:
        r = jrange(j, "launch_s", 0, 1, " s", false, &v);
        h->launch_s = v;
        break;
      case PK_LAUNCH_GRAPH:
        r = jrange(j, "launch_graph_s", 0, 1, " s", false, &v);
        h->launch_graph_s = v;
        break;
      case PK_EIGH: /* Shampoo's root = eigh on one host core (the cpu calibrator's) */
        r = jrange(j, "eigh_flops", 1e6, 1e15, " FLOP/s", false, &v);
        h->eigh_flops = v;
        nread++;
        break;
      case PK_GEMM: r = jcurve(j, cv = &h->gemm, &R_FLOPS, &R_RATE); break;
      case PK_GEMM_THIN: r = jcurve(j, cv = &h->gemm_thin, &R_DIM, &R_RATE); break;
      /* a GPU's GEMMs on bf16 tensor cores (precision = bf16 runs them) */
      case PK_GEMM16: r = jcurve(j, cv = &gemm16, &R_FLOPS, &R_RATE); break;
      /* the bf16 GEMMs' rate by their smallest dim (the cuda calibrator) */
      case PK_THIN16: r = jcurve(j, cv = &thin16, &R_DIM, &R_RATE); break;
      case PK_BW: r = jcurve(j, cv = &h->bw, &R_BYTES, &R_BW); break;
      case PK_ATT: r = jcurve(j, cv = &h->att, &R_SEQ, &R_TIME); break;
      case PK_ATT_BWD: r = jcurve(j, cv = &h->att_bwd, &R_SEQ, &R_TIME); break;
      case PK_ATT16: r = jcurve(j, cv = &att16, &R_SEQ, &R_TIME); break;
      case PK_ATT_BWD16: r = jcurve(j, cv = &attb16, &R_SEQ, &R_TIME); break;
      case PK_SPECIAL: r = jtimes(j, cost_sf_names, COST_SF_N, h->special, "a special function's time", &nread); break;
      case PK_KERNELS: r = jtimes(j, cost_kern_names, COST_K_N, h->kern, "a kernel's time per element", &nread); break;
      case PK_COLL:
        if ((r = jexpect(j, '['))) break;
        h->ncoll = 0;
        jws(j);
        if (*j->s == ']') {
          j->s++;
          break;
        }
        for (int more = 1; more > 0 && !r;) {
          CostColl c;
          if ((r = jcoll(j, &c))) break;
          if (h->ncoll < COST_MAXCOLL && c.t.n && c.nranks > 1) h->coll[h->ncoll++] = c, nread++;
          more = jnext(j, ']');
          if (more < 0) r = -1;
        }
        break;
      default: r = jskip(j); break;
      }
      if (r) return -1;
      if (cv) nread += cv->n;
      int more = jnext(j, '}');
      if (more < 0) return -1;
      if (!more) break;
    }
  j->key = "";
  jws(j);
  if (*j->s) {
    char f[40];
    return jfail_at(j, j->s, "text after the profile's closing '}': %s", jfound(j->s, f, sizeof f));
  }
  if (!((seen >> PK_VERSION) & 1)) return jfail_at(j, j->base, "not a shardc profile (no \"shardc_profile\": 1)");
  /* (counted as read: h starts as the mesh's model, which has figures of
   * its own) */
  if (!((seen >> PK_LAUNCH) & 1) && !((seen >> PK_LAUNCH_GRAPH) & 1) && !nread)
    return jfail_at(j, j->base, "the profile holds no measurements (no \"gemm\", \"bw\", \"coll\", \"launch_s\", ...)");
  /* A 16-bit plan's GEMMs at the bf16 rate where the profile has one (the
   * cpu profile has not: its fp32 BLAS runs them) */
  if (hw->elt == 2 && gemm16.n) {
    h->gemm = gemm16;
    h->gemm_thin = thin16; /* not the fp32 one: none where the profile has none */
  }
  if (hw->elt == 2 && att16.n) h->att = att16, h->att_bwd = attb16;
  return 0;
}

int cost_load_profile(HwModel *hw, const char *path, char *err, int errcap) {
  /* read as a source file is: a regular file of at most 4 MiB, a FIFO or
   * a device refused before it is opened (base/diag.c) */
  SrcFile *f = src_load(path);
  if (!f) {
    snprintf(err, (size_t)errcap, "cannot open it: %s", src_error());
    return -1;
  }
  JReader j = {.s = f->text, .base = f->text, .key = "", .err = err, .errcap = errcap};
  HwModel h = *hw;
  h.profile_device[0] = 0;
  if (parse_profile(&j, f->len, &h, hw)) return -1;
  if (h.gemm.n) h.peak = h.gemm.y[h.gemm.n - 1] / h.gemm_eff; /* what MFU is measured against */
  /* a hand-written profile may leave out the device and the rank count */
  char np[32] = "";
  if (h.profile_np > 0) snprintf(np, sizeof np, ", %d rank%s", h.profile_np, h.profile_np == 1 ? "" : "s");
  snprintf(h.source, sizeof h.source, "profile %s (%s%s)", path,
           h.profile_device[0] ? h.profile_device : "device not given", np);
  *hw = h;
  return 0;
}
