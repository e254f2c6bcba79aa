/* cg.h — code generators: the per-rank programs (ir/rankprog.h) written
 * out as source for a target, linked against the runtime's training driver
 * (runtime/rt_train.h).
 *
 *   emit.c    what every target writes: the header with the plan, the tensor,
 *             bucket, chunk, schedule and step tables, each chunk's
 *             forward() and backward() walked instruction by instruction
 *             (with provenance and shape comments), main()
 *   cpu.c     the cpu target's record: how C + libshardrt + MPI spells a
 *             buffer, a kernel call, a fused loop, a collective
 *   cexpr.c   scalar expressions (imported C functions, fused elementwise
 *             chains) as C statements with common subexpressions shared
 *   build.c   `shardc build`: the file, then the C compiler
 */
#ifndef SHARDC_CG_H
#define SHARDC_CG_H

#include "passes.h"
#include "rankprog.h"

typedef struct CgOptions {
  /* Emit double arithmetic and the _f64 kernels, every arena offset doubled
   * (the f32 plan scaled by two stays disjoint): for gradient checks. */
  int f64;
  /* `shardc build`: the training text's absolute path, written into the
   * program as DEFAULT_DATA (not passed to the compiler: nvcc hands its
   * command line to a shell).  NULL: the model's `data` as written. */
  const char *default_data;
} CgOptions;

typedef struct Target Target;

/* The state of one emission. */
typedef struct Emit {
  FILE *o;
  const Module *m;
  const Target *t;
  const RankProg *p;      /* the pipeline rank being written */
  const PChunk *c;        /* its chunk being written */
  int f64;
  const char *R;          /* element type: float or double */
  const char *S;          /* kernel suffix: _f32 or _f64 */
  int es;                 /* element bytes */
  const char *pre;        /* symbol prefix of a pipeline rank's program: "" or "r1_" */
  const char *sfx;        /* a chunk's function suffix: "" or "_c1" */
  /* A fused loop written as a functor (cuda.c): cg_loop_operands declares
   * its buffers as the fields b0, b1, ... (cg_loop_name names them so) and
   * collects each one's reference, the call site's initialiser.  NULL:
   * locals named by value, initialised where declared. */
  struct CgFields *fields;
  /* File-scope definitions the functions use, each written once before the
   * first chunk that uses it (cg_def): the keys seen, the texts to write. */
  StrMap defs;
  PtrVec pending;
  int ndefs;
} Emit;

typedef struct CgFields {
  PtrVec vals;   /* const Value *, field k is bk */
  PtrVec inits;  /* const char *: its reference ("F(1024)") */
} CgFields;

/* The number of the definition keyed by key (a functor's body), and
 * whether it is new: the caller then hands its text to cg_def_write, which
 * emit.c writes before the functions of the chunk being written. */
int cg_def(Emit *e, const char *key, bool *fresh);
void cg_def_write(Emit *e, const char *text);

/* A target: how it spells what the program holds (QBE's struct Target,
 * tinygrad's renderers).  Everything else is emit.c's. */
struct Target {
  const char *name;
  /* What this target cannot generate for m yet: reports and returns -1. */
  int (*check)(Module *m, const CgOptions *o);
  /* Includes and buffer macros, after the header comment. */
  void (*prelude)(Emit *e);
  /* One instruction of a forward or backward block (its comment is written). */
  void (*instr)(Emit *e, const PInstr *in);
  /* How `shardc build` compiles the file. */
  int (*build)(Module *m, const char *dir, const char *src);
  /* The file's name in DIR ("model.c") and the kernels' suffix of an f32
   * program ("_f32"; f64 programs are the cpu's "_f64"). */
  const char *file, *suffix;
  /* How host code reaches a buffer: zeroing and copying bytes ("memset",
   * "memcpy"), reading a scalar ("*%s"), writing one ("*%s = %s;"). */
  const char *memset_fn, *memcpy_fn, *load_fmt, *store_fmt;
  /* How a forward returns its cross-entropy's loss slot ("ce_loss[0]"):
   * NULL for the slot itself. */
  const char *loss_fmt;
  /* The kernel workspace instruction in's launcher takes (bytes; the
   * program's region is the largest: runtime/cuda/rtc_ws.h); NULL: none. */
  size_t (*kernel_ws)(const PInstr *in);
  /* The body of a chunk's cast() (the step's weight casts, PChunk.cast) when
   * the target writes the block otherwise than instruction by instruction:
   * writes it and returns true, or returns false having written nothing
   * (emit.c then walks the block).  NULL: always walked. */
  bool (*casts)(Emit *e, const PBlock *bl);
  /* The wait for a gather ahead's slot (PInstr.wait) before the instruction
   * that first touches its buffer ("rtc_gather_wait(%d);"); NULL: the
   * target's gathers block (PInstr.ahead ignored). */
  const char *wait_fmt;
  /* The calls of two consecutive instructions a and b that the program
   * runs jointly (b->joint, passes/program.c: a matmul and the GELU after
   * it, runtime/cuda/rtc.h; a linear backward and its dX collective):
   * emit.c has written both comments and a's zero list; b's outputs the
   * call writes whole, zeroing them itself where it must.  NULL: the
   * target runs them one by one. */
  void (*pair)(Emit *e, const PInstr *a, const PInstr *b);
  /* The wait for the step's early gathers up to a number (PInstr.early_wait,
   * "rtc_gather_early_wait(%d);"); NULL: the target's early gathers block
   * (PInstr.early ignored). */
  const char *early_wait_fmt;
  /* The call that finishes a backward's last trailing reduce-scatter
   * (PInstr.trail) at its end ("rtc_reduce_scatter_finish();"); NULL: the
   * target's reduce-scatters block (PInstr.trail ignored). */
  const char *trail_end;
};

/* The waits a target writes before an instruction (emit.c), and the wait
 * for the early gathers up to number early_wait - 1 alone (0: none). */
void cg_waits(Emit *e, const PInstr *in);
void cg_early_wait(Emit *e, int early_wait);

extern const Target cg_target_cpu, cg_target_cuda, cg_target_cuda_host;

/* The target called name ("cpu", "cuda"), or NULL after reporting that it
 * is not generated yet. */
const Target *cg_target(const char *name);
/* 0 when `target` can generate m: its plan, precision, ops and inputs;
 * otherwise reports what is not implemented and returns -1. */
int cg_check(Module *m, const char *target, const CgOptions *o);
/* The program for target; 0 on success.  Deterministic text. */
int cg_emit(FILE *out, Module *m, const char *target, const CgOptions *o);

/* ---- emit.c, for the targets ---- */
void cg_printf(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "F(1234)", "I(1234)", "FS(64)" (stash-relative), "IS(64)", or "NULL". */
const char *cg_ref(const Emit *e, PRef r);
/* A scalar buffer read by host code ("*F(8)"), and the statement that
 * writes one ("  *F(8) = val;\n"), in the target's spelling. */
const char *cg_load(const Emit *e, PRef r);
void cg_store(Emit *e, PRef r, const char *val);
/* A fused loop's operands: declares its buffers as pointers named by value
 * (inputs const, a value both read and written once, writable; as fields
 * b0, b1, ... where e->fields is set) and gives each input's and output's
 * element expression ("x3[i]", "d7[j]" when broadcast over the inner dim)
 * for cg_emit_exprs. */
void cg_loop_operands(Emit *e, const PLoop *L, const char ***argn, const char ***lhs);
/* The pointer cg_loop_operands declares for v ("x3", "d7", "b1"). */
const char *cg_loop_name(const Emit *e, const Value *v);
/* Whether v is stored in 16 bits (precision = bf16: passes/precision.c). */
bool cg_is16(const Value *v);
/* cpu.c: every value f32, i32 or half (DT_F32: no 16-bit values), each
 * placed by the memory plan; an error otherwise. */
int cg_check_values(Module *m, DType half);
/* The target's memset / memcpy. */
const char *cg_memset(const Emit *e);
const char *cg_memcpy(const Emit *e);
/* "RT_AX_TP" */
const char *cg_axis(int ax);
/* "model.shard:LINE (scope)": where node n comes from, for comments. */
const char *cg_where(const Node *n);
/* "f32[B=4,T=64,128]" */
const char *cg_shape(const Emit *e, const Value *v);
int64_t cg_numel(const Value *v);
int64_t cg_rows(const Value *v);
int64_t cg_last_dim(const Value *v);
/* A cross-entropy's classes among cols columns of its logits (cols unless
 * `classes` gave fewer: the rest are a padded vocabulary's unused columns). */
int64_t cg_xent_classes(const Node *n, int64_t cols);

/* The data file a generated program reads by default: the train block's
 * `data` resolved against the model's directory, else the built-in text in
 * samples/data/ (absolute path; NULL when the model takes no token data). */
const char *cg_default_data(Module *m);
/* s as the inside of a C string literal (quotes, backslashes and control
 * characters escaped), and as text inside a C comment ("*" "/" broken). */
const char *cg_c_escape(const char *s);
const char *cg_comment_safe(const char *s);
/* Whether the program needs MPI (more than one rank). */
int cg_needs_mpi(const Module *m);

/* ---- build.c ---- */

/* `shardc build`: writes DIR/model.c (created with its parents) and compiles
 * it with cc, or mpicc when the plan has several ranks, against the runtime
 * into DIR/train.  Reports the compiler's output on failure.  0 on success. */
int cg_build(Module *m, const char *dir, const char *target, const CgOptions *o);
/* The targets' compile and link steps (build.c). */
int cg_build_cpu(Module *m, const char *dir, const char *src);
int cg_build_cuda(Module *m, const char *dir, const char *src);
int cg_build_cuda_host(Module *m, const char *dir, const char *src);

/* ---- cexpr.c ---- */

/* cg_emit_exprs's flags: double arithmetic; rt_math.h's vectorizable
 * rt_expf/rt_tanhf for float exp and tanh (the cpu target) */
enum { CG_F64 = 1, CG_RTMATH = 2 };
/* Emits `lhs[k] ops[k] roots[k];` for k < n, with every subexpression used
 * more than once computed once into `const T tN` temporaries (T = float, or
 * double with CG_F64).  argnames name SX_ARG k.  Math functions and literals
 * in float (expf, 1.5f) or double (exp, 1.5). */
void cg_emit_exprs(FILE *out, SExpr *const *roots, const char *const *lhs,
                   const char *const *ops, int n, const char *const *argnames,
                   const char *indent, int flags);
/* A C literal for v: "0.5f" (f32) or "0.5" (f64), shortest that round-trips. */
void cg_literal(char *buf, int cap, double v, int f64);

#endif
