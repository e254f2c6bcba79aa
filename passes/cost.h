/* cost.h — the cost model (passes/cost.c): predicted time of kernels,
 * collectives, pipeline schedules and whole training steps, from a hardware
 * model (the mesh's figures, or a profile measured by `shardc calibrate`).
 * Memory is never estimated here: it comes from the memory plan.
 *
 * Two evaluators share the per-op and per-collective formulas:
 *  - cost_module: a compiled plan, instruction by instruction over its
 *    per-rank programs, the schedule simulated action by action (the times
 *    `--emit=plan` prints);
 *  - cost_layers + cost_eval: the search's, from one layer's graph and the
 *    model's ops outside the layers, memoised, so a plan of a 175B model on
 *    1,024 devices costs microseconds (explore.c).
 */
#ifndef SHARDC_COST_H
#define SHARDC_COST_H

#include "rankprog.h"

/* A measured curve: y at x, x increasing; read by log-log interpolation. */
enum { COST_CURVE_MAX = 48, COST_MAXCOLL = 48 };
typedef struct CostCurve {
  int n;
  double x[COST_CURVE_MAX], y[COST_CURVE_MAX];
} CostCurve;

typedef struct CostColl {
  char op[24];        /* "all_reduce", "all_gather", "reduce_scatter", "broadcast", "p2p" */
  int nranks;
  CostCurve t;        /* seconds vs bytes per rank */
} CostColl;

/* The special functions a fused loop evaluates per element. */
enum { COST_SF_EXP, COST_SF_LOG, COST_SF_TANH, COST_SF_ERF, COST_SF_SIN, COST_SF_COS, COST_SF_POW,
       COST_SF_SQRT, COST_SF_N };
extern const char *const cost_sf_names[COST_SF_N];

/* The runtime kernels a profile times per element ("kernels"). */
enum { COST_K_GELU, COST_K_GELU_BWD, COST_K_SILU, COST_K_SILU_BWD, COST_K_LAYERNORM,
       COST_K_LAYERNORM_BWD, COST_K_RMSNORM, COST_K_RMSNORM_BWD, COST_K_N };
extern const char *const cost_kern_names[COST_K_N];

/* The hardware model one evaluation uses. */
typedef struct HwModel {
  char source[160];       /* "catalog H100_SXM, bf16" or "profile P.json (...)" */
  double peak;            /* dense FLOP/s at the plan's precision */
  double gemm_eff;        /* fraction of peak a large GEMM reaches */
  double gemm_half;       /* a GEMM dim at which that dim alone halves the efficiency */
  double unaligned_eff;   /* rate of a GEMM with a dim whose rows are not 16-byte aligned, as a
                           * fraction of the aligned one's (1: no such penalty) */
  bool gpu_half;          /* a GPU in 16 bits: the CUDA target's cuBLASLt epilogues take a
                           * linear's bias gradient and a GELU after it (runtime/cuda/k_matmul.cu) */
  double mem_bw, mem_eff; /* memory-bound kernels: bandwidth and the fraction reached */
  double launch_s;        /* per kernel call */
  double launch_graph_s;  /* per kernel of a replayed CUDA graph, where a profile measured it
                           * (0: launch_s) */
  double vec_flops;       /* a GPU's plain fp32 peak (CUDA cores: the attention kernels'
                           * softmax arithmetic and special functions); 0 on a CPU */
  double intra_bw, intra_lat, inter_bw, inter_lat;
  double link_eff;        /* bus bandwidth reached over a link's (NCCL: ~0.8) */
  double overlap;         /* fraction of an asynchronous reduction hidden behind compute */
  int per_node, nodes;
  int elt;                /* bytes per element of the plan's precision */
  /* a profile's measurements (n == 0: use the formulas) */
  CostCurve gemm;         /* FLOP/s vs the FLOPs of one GEMM */
  CostCurve gemm_thin;    /* FLOP/s vs the smallest dim of a GEMM whose other two are large */
  CostCurve bw;           /* bytes/s vs bytes one memory-bound kernel moves */
  CostCurve att, att_bwd; /* the fused attention kernels: seconds a (batch, head) row at
                           * D = 64, causal, vs the sequence length (a GPU profile's) */
  CostColl coll[COST_MAXCOLL];
  int ncoll;
  int profile_np;         /* ranks the profile's compute figures were measured with (0: none) */
  int cores;              /* the profiled machine's cores (0: unknown) */
  char profile_device[64];/* the profile's "device" ("cpu", "NVIDIA H200"; "": none) */
  /* seconds per evaluation of each special function (COST_SF_*) a fused
   * loop calls, on top of its memory time: libm on a CPU core runs them one
   * element at a time; a GPU's special-function units hide them (0) */
  double special[COST_SF_N];
  /* seconds per element of the runtime's row and activation kernels
   * (COST_K_*) as a profile measured them, operands cold (0: the
   * memory-bound formula) */
  double kern[COST_K_N];
  /* Shampoo's root = eigh in FLOP/s at 9k³ FLOPs a k x k factor: the
   * runtime's whole root (to fp64, LAPACK dsyevd, the root rebuilt by an
   * SYRK, back to fp32) on one host core, as a profile measured it at
   * k = 256 (0: COST_EIGH_FLOPS) */
  double eigh_flops;
} HwModel;

/* the runtime's root = eigh at k = 256 on one core of the reference
 * machine (AVX-512, OpenBLAS's SkylakeX kernels, 2026: 4.7 ms, dsyevd 3.2
 * of them), where no profile measured the host's */
#define COST_EIGH_FLOPS 32e9
/* an SYRK's time over its GEMM's (the same shape): OpenBLAS's SkylakeX
 * ssyrk at 256 x 256 x 256 ran at 0.69 of sgemm's (half the FLOPs in 1.38x
 * half the time) */
#define COST_SYRK_OF_GEMM 0.69


/* The mesh's figures at a precision (DT_F32: tf32 on a device with tensor
 * cores only when tf32 is set, else plain fp32). */
void cost_hw_from_mesh(HwModel *hw, const Mesh *me, DType prec);
/* Reads a profile written by `shardc calibrate` into hw (its measured
 * curves replace the formulas).  0, or -1 with a message in err. */
int cost_load_profile(HwModel *hw, const char *path, char *err, int errcap);

double cost_curve(const CostCurve *c, double x);

/* Seconds of one GEMM [M,K]x[K,N] (FLOPs 2MNK), reading and writing elt-byte data. */
double cost_gemm(const HwModel *hw, double M, double N, double K);
/* Seconds of the CUDA target's fused attention over B·H heads of Tq
 * queries and Tk keys (measured curves, else the device's figures); -1
 * where the model has neither (a CPU: the caller prices its kernel). */
double cost_attention(const HwModel *hw, bool fwd, bool causal, double B, double Tq, double Tk,
                      double H, double D);
/* Seconds of a memory-bound kernel moving `bytes` (with `flops` of arithmetic). */
double cost_membound(const HwModel *hw, double bytes, double flops);
/* Shampoo's step over one block of r x c (docs/cost-model.md): the factor
 * updates (two SYRKs, half their GEMMs' FLOPs) and the direction (two
 * GEMMs) in fp32, seconds per step; *roots: its two roots' share of a step
 * (precondition_every spreads them): 9k³ FLOPs an eigendecomposition at
 * hw->eigh_flops (fp64 LAPACK on a host core, the cuda target's too),
 * 160k³ for Newton's fp64 GEMMs. */
double cost_shampoo_block(const HwModel *hw, const Optimizer *o, double r, double c, double *roots);
/* ... and its passes over e elements (grafting, momentum, rescaling). */
double cost_shampoo_elems(const HwModel *hw, double e);
/* Adafactor's step over e elements (runtime k_optim2.inc), whole
 * (COST_AF_ALL) or one phase of a tensor that tp splits: the partial sums
 * (with the gradients' scaling), the accumulators and sums of squares, the
 * update. */
enum { COST_AF_ALL, COST_AF_SUMS, COST_AF_SQUARES, COST_AF_FINISH };
double cost_adafactor_elems(const HwModel *hw, double e, int phase);
/* One tensor's Shampoo step (its elements' passes and its blocks, in
 * rt_optim.h's blocking: full ones, then the ragged last row and column)
 * added to *t, and of it the roots to *roots. */
void cost_shampoo_tensor(const HwModel *hw, const Optimizer *o, const Shape *s, double *t,
                         double *roots);

/* Collective algorithms (alpha-beta; the slowest link bounds each phase). */
typedef enum { ALG_RING, ALG_TREE, ALG_HIER, ALG_P2P, ALG_MEASURED } CostAlg;
const char *cost_alg_name(CostAlg a);
/* Seconds of collective `op` over n ranks spaced `stride` ranks apart on the
 * mesh (ranks fill nodes in order), `bytes` per rank (the full buffer for
 * all_reduce and broadcast, the gathered result for all_gather, the input
 * for reduce_scatter); the fastest algorithm in *alg. */
double cost_coll(const HwModel *hw, const char *op, int n, int stride, double bytes, CostAlg *alg);

/* How fast each of R pipeline ranks computes, against the profile's
 * every-rank-busy figures, when only the `running` ones compute (rate[k],
 * for running k): ranks sharing cores are bound round robin
 * (runtime/threads.c: rank g on core g % cores), so a core's busy ranks
 * split it and waiting ones leave it to them; pipeline rank k's program
 * stands for the `per` consecutive ranks k·per.. (its stage's tp, sp and
 * dp ranks), which move at the pace of the most loaded core among theirs.
 * 1 unless the profile's ranks shared too few cores (cores < profile_np). */
void cost_stage_rates(const HwModel *hw, int R, int per, const bool *running, double *rate);

/* Seconds of one IR node run as a kernel (its FLOPs and bytes). */
double cost_node(const HwModel *hw, const Node *n);
/* Model FLOPs of the node (forward or backward rule of ops.def). */
double cost_node_flops(const Node *n);

/* ---- a compiled plan ---- */

/* The parts of a rank's step tail (CostStage.tail), as --emit=plan lists
 * them. */
enum {
  COST_TAIL_REDUCE,      /* gradient all-reduces and what is left of the bucket reductions */
  COST_TAIL_SYNC,        /* the loss and norm sums (and the norm's pass) */
  COST_TAIL_OPT,         /* the optimizer's compute, Shampoo's roots included */
  COST_TAIL_ROOTS,       /* of it, Shampoo's roots (the staggered mean, less what idle time hides) */
  COST_TAIL_HIDDEN,      /* Shampoo's roots a cpu pipeline rank's worker computes in idle time */
  COST_TAIL_GATHER,      /* ZeRO's parameter gathers, Shampoo's directions' all-gather */
  COST_TAIL_APPLY,       /* Shampoo's directions applied */
  COST_TAIL_N
};

typedef struct CostStage {
  double fwd_s, bwd_s;        /* one microbatch's forward and backward, per chunk summed */
  double comm_s;              /* of which blocking communication (of what runs beside the
                               * kernels, the share overlap does not hide) */
  double busy_s;              /* the rank's compute + blocking comm over the step */
  double cast_s;              /* the step's part before the microbatches (bf16 weight copies) */
  double step_s;              /* the step's part after the microbatches (reductions, optimizer) */
  double tail[COST_TAIL_N];   /* step_s by part (COST_TAIL_*) */
  double end_s;               /* when the rank finishes the step */
  double bytes;               /* bytes sent per step */
} CostStage;

typedef struct CostResult {
  double step_s;
  double bubble_frac;         /* idle fraction of the pipeline ranks over the step */
  double model_flops;         /* per step, whole mesh, no recompute */
  double recompute_flops;     /* extra per step, whole mesh */
  double tokens;              /* per step */
  int nstages;
  CostStage stage[MAX_STAGES];
} CostResult;

/* hw with a kernel at a replayed CUDA graph's cost (launch_graph_s), in
 * *tmp: how a graphed step's kernels are priced (cost_module, explore). */
const HwModel *cost_hw_graphed(const HwModel *hw, HwModel *tmp);
/* The step time of a compiled plan (after pass "program"), with per-
 * instruction times in *times when times is non-NULL (cost_instr). */
int cost_module(const Module *m, const HwModel *hw, CostResult *r);
/* One instruction's predicted time, as cost_module counts it. */
double cost_instr(const HwModel *hw, const Module *m, const PInstr *in);
/* The rank group of an axis under a plan: size and stride in rank order. */
void cost_axis_group(const Plan *p, int axis, int *size, int *stride);

/* Shampoo with root = eigh on a GPU (hw->vec_flops > 0): each root runs on
 * the host CPU (LAPACK in fp64), on host threads beside the GPU's forward
 * and backward (the cuda target, m->cuda), the rest at the optimizer step.
 * When that rest is over a tenth of the predicted step and root = newton
 * (fp64 GEMMs on the GPU) would be faster: 1, with the step, the roots' part
 * of it (the slowest rank's) and the step with root = newton; else 0. */
int cost_eigh_on_gpu(const Module *m, const HwModel *hw, const CostResult *r, double *step_s,
                     double *roots_s, double *newton_s);
/* A time for people: "1.015 s", "702.802 ms", "42.1 us" (arena-free, one of
 * 8 rotating buffers). */
const char *cost_time_str(double s);

/* The predicted times beside the plan (--emit=plan): step, tokens/s, MFU,
 * per pipeline rank its forward, backward and step, per op its time. */
void cost_report(FILE *out, const Module *m, const HwModel *hw, const char *prefix);

/* Model FLOPs of one training step (forward + backward, no recompute) of the
 * whole graph (the single-device graph of the model, after autodiff), per
 * microbatch: 3x the forward's for matmuls and attention (Narayanan). */
double cost_model_flops_fwd(const Graph *g);

#endif
