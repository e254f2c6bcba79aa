/* emit.c — what every target writes from the per-rank programs: one file
 * holding, for each pipeline rank (one without a pipeline), its tables and
 * each chunk's forward() and backward() of one microbatch, and a main()
 * that hands them to the runtime's training driver (runtime/rt_train.h).
 *
 * Layout of the file: a header comment with the source, mesh, plan and
 * memory plan; the target's prelude; the whole model's full tensors and
 * their sharding (a mesh); per pipeline rank: its parameter table,
 * forward_cC / backward_cC of every chunk as straight-line calls on buffers
 * at their planned arena offsets (each with a model.shard:LINE comment, the
 * IR statements it runs and their shapes), its buckets, chunks, schedule
 * and step tables, and its RtProgram; main().  Symbols of pipeline rank r
 * carry the prefix r<r>_, so one file holds the whole pipeline.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg.h"

/* The built-in training text for token models without a `data` file. */
#define CG_BUILTIN_DATA "samples/data/tales.txt"

void cg_printf(Emit *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->o, fmt, ap);
  va_end(ap);
}
#define P cg_printf

/* The runtime's enumerator of mesh axis ax, from the one axis list
 * (runtime/dist_axes.h, which MeshAxis follows). */
const char *cg_axis(int ax) {
  static const char *const n[AX_COUNT] = {
#define CG_AX_NAME_(id, rt, ir) "RT_AX_" #id,
      RT_AXES(CG_AX_NAME_)
#undef CG_AX_NAME_
  };
  return ax >= 0 && ax < AX_COUNT ? n[ax] : "RT_AX_WORLD";
}

const char *cg_ref(const Emit *e, PRef r) {
  if (!r.v) return "NULL";
  bool i = r.v->dtype == DT_I32, h = r.v->dtype == DT_BF16 || r.v->dtype == DT_F16;
  return arena_printf("%s%s(%" PRId64 ")", i ? "I" : h ? "BF" : "F", r.stash ? "S" : "", r.off);
}

const char *cg_load(const Emit *e, PRef r) { return arena_printf(e->t->load_fmt, cg_ref(e, r)); }

void cg_store(Emit *e, PRef r, const char *val) {
  P(e, "  ");
  P(e, e->t->store_fmt, cg_ref(e, r), val);
  P(e, "\n");
}

/* ---- fused loops ---- */

static const char *loop_name(const Emit *e, const Value *v) {
  if (e->fields)
    for (int k = 0; k < e->fields->vals.len; k++)
      if (e->fields->vals.data[k] == v) return arena_printf("b%d", k);
  if (v->role == ROLE_GRAD) return arena_printf("d%d", v->grad_of->id);
  return arena_printf("x%d", v->id);
}

const char *cg_loop_name(const Emit *e, const Value *v) { return loop_name(e, v); }

int cg_def(Emit *e, const char *key, bool *fresh) {
  void *k = strmap_get(&e->defs, key);
  *fresh = !k;
  if (k) return (int)((intptr_t)k - 1);
  strmap_put(&e->defs, arena_strdup(key), (void *)(intptr_t)(e->ndefs + 1));
  return e->ndefs++;
}

void cg_def_write(Emit *e, const char *text) { vec_push(&e->pending, (void *)arena_strdup(text)); }

bool cg_is16(const Value *v) { return v && (v->dtype == DT_BF16 || v->dtype == DT_F16); }

/* The element type of a loop operand: 16-bit values are rtc_bf16 (cuda
 * target; the cpu target plans none), read through rtc_bf2f. */
static const char *loop_type(const Emit *e, const Value *v) {
  return v->dtype == DT_I32 ? "int32_t" : cg_is16(v) ? "rtc_bf16" : e->R;
}

/* A pointer to v's buffer: a local initialised with r, or field bK. */
static void loop_pointer(Emit *e, const char *cnst, const Value *v, PRef r) {
  if (e->fields) {
    vec_push(&e->fields->vals, (void *)v);
    vec_push(&e->fields->inits, (void *)cg_ref(e, r));
    P(e, "    %s%s *%s;\n", cnst, loop_type(e, v), loop_name(e, v));
    return;
  }
  P(e, "    %s%s *%s = %s;\n", cnst, loop_type(e, v), loop_name(e, v), cg_ref(e, r));
}

void cg_loop_operands(Emit *e, const PLoop *L, const char ***argn, const char ***lhs) {
  const char **an = arena_alloc(sizeof(char *) * (size_t)(L->nin + 1));
  const char **ln = arena_alloc(sizeof(char *) * (size_t)(L->nout + 1));
  /* Pointers: inputs const, outputs writable; a value both read and written
   * is declared once, writable. */
  for (int i = 0; i < L->nin; i++) {
    bool dup = false, written = false;
    for (int k = 0; k < i; k++) dup |= L->in[k].r.v == L->in[i].r.v;
    for (int k = 0; k < L->nout; k++) written |= L->out[k].r.v == L->in[i].r.v;
    if (!dup && !written) loop_pointer(e, "const ", L->in[i].r.v, L->in[i].r);
  }
  for (int k = 0; k < L->nout; k++) {
    bool dup = false;
    for (int j = 0; j < k; j++) dup |= L->out[j].r.v == L->out[k].r.v;
    if (!dup) loop_pointer(e, "", L->out[k].r.v, L->out[k].r);
  }
  for (int i = 0; i < L->nin; i++)
    an[i] = arena_printf(cg_is16(L->in[i].r.v) ? "rtc_bf2f(%s[%s])" : "%s[%s]",
                         loop_name(e, L->in[i].r.v), L->in[i].bcast ? "j" : "i");
  for (int k = 0; k < L->nout; k++)
    ln[k] = arena_printf("%s[%s]", loop_name(e, L->out[k].r.v), L->out[k].bcast ? "j" : "i");
  *argn = an;
  *lhs = ln;
}

const char *cg_memset(const Emit *e) { return e->t->memset_fn; }
const char *cg_memcpy(const Emit *e) { return e->t->memcpy_fn; }

int64_t cg_numel(const Value *v) { return ir_numel(&v->shape); }
int64_t cg_last_dim(const Value *v) { return v->shape.ndim ? v->shape.d[v->shape.ndim - 1].n : 1; }
int64_t cg_rows(const Value *v) {
  int64_t l = cg_last_dim(v);
  return cg_numel(v) / (l ? l : 1);
}
int64_t cg_xent_classes(const Node *n, int64_t cols) {
  return n->a.i[4] > 0 && n->a.i[4] < cols ? n->a.i[4] : cols;
}

const char *cg_shape(const Emit *e, const Value *v) {
  char buf[256];
  ir_shape_str(e->c ? e->c->g : NULL, v, buf, sizeof buf);
  return arena_strdup(buf);
}

const char *cg_c_escape(const char *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return arena_strdup("");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c < 0x20 || *c == 0x7f) fprintf(f, "\\%03o", *c);
    else fputc(*c, f);
  }
  fclose(f);
  char *r = arena_strdup(buf ? buf : "");
  free(buf);
  return r;
}

const char *cg_comment_safe(const char *s) {
  if (!strstr(s, "*/") && !strpbrk(s, "\n\r")) return s;
  char *r = arena_printf("%s", s);
  for (char *c = r; *c; c++) {
    if (c[0] == '*' && c[1] == '/') c[1] = '|';
    if (*c == '\n' || *c == '\r') *c = ' ';
  }
  return r;
}

int cg_needs_mpi(const Module *m) { return m->train.mesh && m->train.mesh->ndev > 1; }

const char *cg_default_data(Module *m) {
  const char *d = m->train.data;
  char *path;
  if (!d)
    path = arena_printf("%s/%s", SHARDC_SOURCE_DIR, CG_BUILTIN_DATA);
  else if (d[0] == '/' || !m->base_dir || !*m->base_dir || !strcmp(m->base_dir, "."))
    path = arena_strdup(d);
  else
    path = arena_printf("%s/%s", m->base_dir, d);
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) path = arena_printf("%s/%s", cwd, path);
  }
  return path;
}

/* ---- targets ---- */

const Target *cg_target(const char *name) {
  if (!name || !strcmp(name, "cpu")) return &cg_target_cpu;
  if (!strcmp(name, "cuda")) return &cg_target_cuda;
  if (!strcmp(name, "cuda-host")) return &cg_target_cuda_host;
  diag_fatal_noloc("--target %s: unknown target (cpu, cuda, or cuda-host: the CUDA program "
                   "built for this machine's CPU, for tests without a GPU)", name);
  return NULL;
}

static void plan_error(Module *m, const char *msg) {
  if (m->train.plan_loc.file)
    diag_error(m->train.plan_loc, "%s", msg);
  else
    diag_fatal_noloc("%s", msg);
}

/* What no target generates yet, whatever it is. */
static int check_program(Module *m) {
  const TrainCfg *t = &m->train;
  if (!t->opt.kind) {
    diag_fatal_noloc("code generation needs a train block with an optimizer");
    return -1;
  }
  if (t->plan.is_auto) {
    /* (the driver resolves auto by the search where there is a mesh) */
    plan_error(m, arena_printf("strategy auto searches the plans of a mesh: give one (a mesh "
                               "block, or --mesh N) or an explicit strategy such as dp=%d",
                               t->mesh ? t->mesh->ndev : 1));
    return -1;
  }
  if (!m->nrprog) {
    diag_fatal_noloc("the model has no loss to train (no backward pass was planned)");
    return -1;
  }
  const RankProg *p = m->rprog[0];
  const Graph *g = p->chunk[0].g;
  if (p->data == PDATA_NONE) {
    const Graph *w = m->nstages > 1 ? m->whole : m->graph;
    const char *why =
        w->inputs.len != 2
            ? arena_printf("the model takes %d inputs", w->inputs.len)
            : arena_printf("inputs %s and %s are neither (tokens, targets: i32[B,T] read by an "
                           "embedding and a cross_entropy) nor (x: f32[B,K], labels: i32[B])",
                           prog_vname(w->inputs.data[0]), prog_vname(w->inputs.data[1]));
    diag_fatal_noloc("no data loader for model '%s': %s", g->model, why);
    return -1;
  }
  const Value *in0 = g->inputs.data[0];
  if (in0->shape.d[0].n != t->microbatch) {
    diag_fatal_noloc("input %s has %lld rows, expected the microbatch %lld", prog_vname(in0),
                     (long long)in0->shape.d[0].n, (long long)t->microbatch);
    return -1;
  }
  return 0;
}

int cg_check(Module *m, const char *target, const CgOptions *o) {
  const Target *t = cg_target(target);
  if (!t) return -1;
  if (check_program(m)) return -1;
  return t->check(m, o);
}

/* ---- comments ---- */

static const char *ir_stmt(const Node *n) {
  char *s = arena_strdup("");
  for (int j = 0; j < n->nout; j++) s = arena_printf("%s%s%s", s, j ? ", " : "", prog_vname(n->outs[j]));
  s = arena_printf("%s %s %s", s, n->bwd ? "+=" : "=", ir_ops[n->op].name);
  for (int j = 0; j < n->nin; j++) s = arena_printf("%s%s%s", s, j ? ", " : " ", prog_vname(n->in[j]));
  return s;
}

const char *cg_where(const Node *n) {
  const char *scope = n->scope;
  if ((!scope || !*scope) && n->fwd) scope = n->fwd->scope;
  if (!n->loc.file) return "(no source)";
  const char *path = n->loc.file->path, *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (scope && *scope) return arena_printf("%s:%d (%s)", base, n->loc.line, scope);
  return arena_printf("%s:%d", base, n->loc.line);
}

/* "// model.shard:LINE (scope)  <IR statements>" then "// <shapes in> -> <shapes out>" */
static void comment(Emit *e, const PInstr *in) {
  const Node *const *ns = in->nodes;
  int count = in->nnodes;
  if (in->kind == PI_KERNEL && in->dbias.v) {
    /* a matmul_bwd that also sums its bias's gradient (the add_bwd first) */
    const Node *n = ns[1];
    P(e, "  // %s  %s; %s\n", cg_where(n), ir_stmt(ns[0]), ir_stmt(n));
    P(e, "  // %s, %s, %s -> %s, %s, %s\n", cg_shape(e, n->in[0]), cg_shape(e, n->in[1]),
      cg_shape(e, n->in[2]), n->outs[0] ? cg_shape(e, n->outs[0]) : "_",
      n->outs[1] ? cg_shape(e, n->outs[1]) : "_", cg_shape(e, in->dbias.v));
    return;
  }
  P(e, "  // %s  ", cg_where(ns[0]));
  for (int i = 0; i < count; i++) P(e, "%s%s", i ? "; " : "", ir_stmt(ns[i]));
  P(e, "\n  // ");
  /* Shapes: the first node's inputs, then what the group writes last. */
  const Node *n = ns[0];
  if (!n->nin) P(e, "()");
  for (int k = 0; k < n->nin; k++) P(e, "%s%s", k ? ", " : "", cg_shape(e, n->in[k]));
  for (int i = 1; i < count; i++)
    for (int k = 0; k < ns[i]->nin; k++) {
      bool internal = ns[i]->in[k] == ns[i - 1]->out;
      if (!internal) P(e, ", %s", cg_shape(e, ns[i]->in[k]));
    }
  P(e, " -> ");
  const Node *l = ns[count - 1];
  bool first = true;
  for (int j = 0; j < l->nout; j++) {
    if (!l->outs[j]) continue;
    P(e, "%s%s", first ? "" : ", ", cg_shape(e, l->outs[j]));
    first = false;
  }
  if (l->nout == 1 && !l->outs[0]) P(e, "_");
  P(e, "\n");
}

/* ---- blocks ---- */

/* The waits before in (and, run jointly, its partner): for gathers ahead
 * (PInstr.wait) and early (PInstr.early_wait), where the target runs them
 * so. */
void cg_early_wait(Emit *e, int early_wait) {
  if (!early_wait || !e->t->early_wait_fmt) return;
  P(e, "  ");
  P(e, e->t->early_wait_fmt, early_wait - 1);
  P(e, "  // the step's early gathers up to number %d\n", early_wait - 1);
}

void cg_waits(Emit *e, const PInstr *in) {
  for (int s = 0; e->t->wait_fmt && s < PROG_AHEAD_SLOTS; s++)
    if (in->wait >> s & 1) {
      P(e, "  ");
      P(e, e->t->wait_fmt, s);
      P(e, "  // the gather ahead in slot %d\n", s);
    }
  cg_early_wait(e, in->early_wait);
}

/* Instructions from..to-1 of bl (to never falls inside a joint pair). */
static void block_range(Emit *e, const PBlock *bl, int from, int to) {
  for (int j = from; j < to; j++) {
    const PInstr *in = &bl->ins[j];
    if (in->nnodes) comment(e, in);
    cg_waits(e, in);
    if (j + 1 < bl->n && bl->ins[j + 1].joint && e->t->pair) cg_waits(e, &bl->ins[j + 1]);
    for (int z = 0; z < in->nzero; z++)
      P(e, "  %s(%s, 0, %" PRId64 ");  // %s starts here\n", cg_memset(e), cg_ref(e, in->zero[z]),
        in->zero_bytes[z], prog_vname(in->zero_of[z]));
    /* the program runs it and the next jointly (PInstr.joint), where the
     * target can: the next's comment first; its zeroing is the call's */
    const PInstr *nx = j + 1 < bl->n ? &bl->ins[j + 1] : NULL;
    if (nx && nx->joint && e->t->pair) {
      if (nx->nnodes) comment(e, nx);
      e->t->pair(e, in, nx);
      j++;
      continue;
    }
    e->t->instr(e, in);
  }
}

static void block(Emit *e, const PBlock *bl) { block_range(e, bl, 0, bl->n); }

/* A forward or backward of more than CG_SPLIT_AT instructions (a model of
 * some 30 layers and more) is written as parts of about CG_PART each, one
 * function per part, that the function calls in turn: a C compiler's
 * optimiser is superlinear in a function's length (gcc -O3 on the
 * backward of a 512-layer model, one function of 33,000 lines: twice the
 * time of the same code in parts, and three times the memory).  The parts
 * are noinline, or the compiler puts them back.  Every instruction's text
 * is as it was: each is a statement or a block of its own; a part never
 * ends between two instructions run jointly.  Smaller blocks are one
 * function, as before. */
#define CG_SPLIT_AT 384
#define CG_PART 256

/* Writes the parts of bl as functions NAME_pK and returns their number,
 * or 0 when bl is written whole. */
static int block_parts(Emit *e, const PBlock *bl, const char *name) {
  if (bl->n <= CG_SPLIT_AT) return 0;
  int nparts = (bl->n + CG_PART - 1) / CG_PART, k = 0;
  for (int from = 0; from < bl->n; k++) {
    int to = (int)((int64_t)bl->n * (k + 1) / nparts);
    if (to <= from) to = from + 1;
    while (to < bl->n && bl->ins[to].joint) to++;
    P(e, "__attribute__((noinline)) static void %s%s%s_p%d(RtPass *p) {\n", e->pre, name, e->sfx, k);
    block_range(e, bl, from, to);
    P(e, "}\n\n");
    from = to;
  }
  return k;
}

/* The calls of a block's parts (block_parts), or the block itself. */
static void block_body(Emit *e, const PBlock *bl, const char *name, int nparts) {
  if (!nparts) {
    block(e, bl);
    return;
  }
  for (int k = 0; k < nparts; k++) P(e, "  %s%s%s_p%d(p);\n", e->pre, name, e->sfx, k);
}

static void chunk_functions(Emit *e) {
  const PChunk *c = e->c;
  if (c->nce)
    P(e, "/* Loss of each cross_entropy (in double) and the rows it averaged over. */\n"
         "static double %sce_loss%s[%d];\nstatic int %sce_rows%s[%d];\n\n",
      e->pre, e->sfx, c->nce, e->pre, e->sfx, c->nce);
  P(e, "/* ---- forward: one microbatch (p->row0 its first row in the global batch) ---- */\n");
  int fparts = block_parts(e, &c->fwd, "forward");
  P(e, "static double %sforward%s(RtPass *p) {\n", e->pre, e->sfx);
  block_body(e, &c->fwd, "forward", fparts);
  const Graph *g = c->g;
  if (g->pipe_out) {
    const char *sent = prog_vname(g->send_act[0]);
    for (int i = 1; i < g->nsend; i++)
      sent = arena_printf("%s%s%s", sent, i == g->nsend - 1 ? " and " : ", ", prog_vname(g->send_act[i]));
    P(e, "  return 0;  /* %s go%s to stage %d; the last stage has the loss */\n}\n\n", sent,
      g->nsend > 1 ? "" : "es", c->vs + 1);
  }
  else if (c->loss_slot >= 0)
    P(e, "  return %s;\n}\n\n",
      arena_printf(e->t->loss_fmt ? e->t->loss_fmt : "%s",
                   arena_printf("%sce_loss%s[%d]", e->pre, e->sfx, c->loss_slot)));
  else
    P(e, "  return %s;\n}\n\n", cg_load(e, c->loss));
  P(e, "/* ---- backward: the same microbatch; accumulates into gradients ---- */\n");
  int bparts = block_parts(e, &c->bwd, "backward");
  P(e, "static void %sbackward%s(RtPass *p) {\n", e->pre, e->sfx);
  block_body(e, &c->bwd, "backward", bparts);
  bool trails = false;
  for (int j = 0; j < c->bwd.n; j++) trails |= c->bwd.ins[j].trail;
  if (trails && e->t->trail_end)   /* the last trailing reduce-scatter, finished */
    P(e, "  %s\n", e->t->trail_end);
  P(e, "}\n\n");
  if (e->p->pairs) {
    P(e, "/* ---- the backward's receives alone, for a forward's post before it (pairs) ---- */\n");
    P(e, "static void %sbackward_in%s(RtPass *p) {\n", e->pre, e->sfx);
    int n = 0;
    for (int j = 0; j < c->bwd.n; j++)
      if (c->bwd.ins[j].kind == PI_RECV) e->t->instr(e, &c->bwd.ins[j]), n++;
    if (!n) P(e, "  (void)p;  // the last stage: nothing to receive\n");
    P(e, "}\n\n");
  }
  if (c->cast.n) {
    P(e, "/* ---- once per step, before the first microbatch: the 16-bit copies of the\n"
         " * parameters the kernels read (after the last step's update) ---- */\n");
    P(e, "static void %scast%s(RtPass *p) {\n", e->pre, e->sfx);
    if (!e->t->casts || !e->t->casts(e, &c->cast)) block(e, &c->cast);
    P(e, "}\n\n");
  }
}

/* A chunk's functions, after the definitions they are the first to use
 * (cg_def: the cuda target's elementwise functors, each written once in
 * the file).  The functions are written to memory first. */
static int chunk_with_defs(Emit *e) {
  FILE *out = e->o;
  char *buf = NULL;
  size_t len = 0;
  e->o = open_memstream(&buf, &len);
  if (!e->o) {
    e->o = out;
    diag_fatal_noloc("out of memory writing the program");
    return -1;
  }
  chunk_functions(e);
  int err = fclose(e->o);
  e->o = out;
  if (err || !buf) {
    free(buf);
    diag_fatal_noloc("out of memory writing the program");
    return -1;
  }
  if (e->pending.len)
    P(e, "/* ---- elementwise kernels first used below: each fused chain's body once, its\n"
         " * buffers as fields (the call site sets them); rtc_foreach runs it ---- */\n");
  for (int i = 0; i < e->pending.len; i++) fputs(e->pending.data[i], out);
  e->pending.len = 0;
  fwrite(buf, 1, len, out);
  free(buf);
  return 0;
}

/* ---- tables ---- */

static void dims(Emit *e, const Shape *s) {
  for (int k = 0; k < s->ndim; k++) P(e, "%s%" PRId64, k ? ", " : "", s->d[k].n);
}

static const char *lit(double v) {
  char b[64];
  cg_literal(b, sizeof b, v, 1);
  return arena_strdup(b);
}

static const char *init_name(int k) {
  return k == PINIT_ONES ? "RT_INIT_ONES" : k == PINIT_ZEROS ? "RT_INIT_ZEROS" : "RT_INIT_NORMAL";
}

/* {"name", ndim, {shape}, numel, offset, grad, opt, opt2, init, std, decay} */
static void param_row(Emit *e, const Value *v, const Shape *s, int64_t off, int64_t grad,
                      int64_t opt, int64_t opt2, int init, double std) {
  P(e, "    {\"%s\", %d, {", v->name, s->ndim);
  dims(e, s);
  P(e, "}, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %d},\n",
    ir_numel(s), off, grad, opt, opt2, init_name(init), lit(std), v->decay ? 1 : 0);
}

/* A tensor's sharding as a dist.h RtShard row: its full shape and 0, 1 (tp)
 * or 2 (the tp2d grid's row and column) split dims; the segments of a fused
 * q,k,v weight belong to its tp or tp-row split. */
static void shard_row(Emit *e, const Value *p, int owner) {
  P(e, "    {%d, {", p->gshape.ndim);
  dims(e, &p->gshape);
  int ns = 0;
  for (int d = 0; d < p->shape.ndim; d++) ns += p->shard.axis[d] >= 0;
  P(e, "}, %d, {", ns);
  if (!ns) P(e, "{0}");
  for (int d = 0, k = 0; d < p->shape.ndim; d++) {
    int ax = p->shard.axis[d];
    if (ax < 0) continue;
    bool segs = (ax == AX_TP || ax == AX_TPR) && p->shard.nseg > 1;
    P(e, "%s{%d, %s, %d, {", k++ ? ", " : "", d, cg_axis(ax), segs ? p->shard.nseg : 1);
    if (segs)
      for (int j = 0; j < p->shard.nseg; j++) P(e, "%s%" PRId64, j ? ", " : "", p->shard.seg[j]);
    else
      P(e, "%" PRId64, p->gshape.d[d].n);
    P(e, "}}");
  }
  P(e, "}, %d},  // %s\n", owner, p->name);
}

/* The whole model's full tensors (every pipeline rank's, the same table). */
static void global_tables(Emit *e, const RankProg *p) {
  P(e, "/* ---- the whole model as full tensors (init, checkpoints: the same file under any\n"
       " * plan), at offsets in a buffer of %" PRId64 " bytes, and how each is split%s ---- */\n",
    p->global_bytes, p->pp > 1 ? "\n * (with the pipeline rank holding it)" : "");
  P(e, "#define NGLOBAL %d\n", p->nglobal);
  P(e, "static const RtParam global[NGLOBAL] = {\n");
  for (int i = 0; i < p->nglobal; i++) {
    const PGlobal *g = &p->global[i];
    param_row(e, g->v, &g->v->gshape, g->offset, -1, g->opt, g->opt2, g->init, g->std);
  }
  P(e, "};\nstatic const RtShard shards[NGLOBAL] = {\n");
  for (int i = 0; i < p->nglobal; i++) shard_row(e, p->global[i].v, p->pp > 1 ? p->global[i].owner : -1);
  P(e, "};\n\n");
}

static void rank_tables(Emit *e) {
  const RankProg *p = e->p;
  const char *pre = e->pre;
  P(e, "/* ---- parameters: DSL name, shape, elements, arena offsets (bytes) of the\n"
       " * tensor, its gradient and optimizer state (-1: none), init, std, decay.");
  if (p->nscaled)
    P(e, "\n * normal_scaled init: std 0.02/sqrt(%d), one term per residual projection.", p->nscaled);
  P(e, " */\n");
  P(e, "static const RtParam %sparams[%d] = {\n", pre, p->nparam);
  for (int i = 0; i < p->nparam; i++) {
    const PParam *q = &p->param[i];
    param_row(e, q->v, &q->v->shape, q->offset, q->grad, q->opt, q->opt2, q->init, q->std);
  }
  P(e, "};\n\n");
  if (p->nphase) {
    P(e, "/* Shampoo's root phases (passes/optplace.c, stagger = true): per block of the\n"
         " * preconditioned parameters, in order, each row-major, the step of\n"
         " * precondition_every its roots are recomputed at. */\n"
         "static const int %sroot_phase[%d] = {", pre, p->nphase);
    for (int k = 0; k < p->nphase; k++) P(e, "%s%d,", k % 16 ? " " : "\n    ", p->phase[k]);
    P(e, "\n};\n\n");
  }
  if (!p->dist) return;
  P(e, "/* Weight of each gradient in the global norm: 1 / the tp ranks holding the\n"
       " * same elements%s. */\n", p->pp > 1 ? "; 0 for the last stage's copy of a tied embedding" : "");
  P(e, "static const double %snorm_w[%d] = {", pre, p->nparam);
  for (int i = 0; i < p->nparam; i++) P(e, "%s%s,", i % 8 ? " " : "\n    ", lit(p->param[i].norm_w));
  P(e, "\n};\n\n");
  if (p->pp > 1) {
    P(e, "/* Where this rank keeps each full tensor (-1: another pipeline rank). */\n");
    P(e, "static const int %slocal_of[NGLOBAL] = {", pre);
    for (int i = 0; i < p->nglobal; i++) P(e, "%s%d,", i % 16 ? " " : "\n    ", p->global[i].local);
    P(e, "\n};\n\n");
  }
  if (p->nunits) {
    P(e, "/* Shampoo's units placed over the %d data ranks (passes/optplace.c, greedy LPT):\n"
         " * {parameter, block row, block column, owning data rank, offset in its segment}. */\n"
         "static const RtOptUnit %sunits[%d] = {\n", p->uranks, pre, p->nunits);
    for (int k = 0; k < p->nunits; k++) {
      const OptUnit *u = &p->units[k];
      P(e, "    {%d, %" PRId64 ", %" PRId64 ", %d, %" PRId64 "},  // %s %" PRId64 "x%" PRId64 "\n",
        u->param, u->bi, u->bj, u->owner, u->pos, p->param[u->param].v->name, u->r, u->c);
    }
    P(e, "};\n\n");
  }
  if (p->afsplit) {
    P(e, "/* Adafactor of the parameters tp splits (passes/optplace.c): offsets (elements) in\n"
         " * the statistics buffer of the partial row sums, column sums, row-accumulator sum\n"
         " * and sum of squares (-1: none), ranks holding the same rows, full rows, columns,\n"
         " * elements. */\n"
         "static const RtAfSplit %safsplit[%d] = {\n", pre, p->nparam);
    for (int i = 0; i < p->nparam; i++) {
      const AfSplit *a = &p->afsplit[i];
      P(e, "    {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %" PRId64 ", %" PRId64
           ", %" PRId64 "},  // %s\n", a->s, a->t, a->x, a->q, lit(a->rep), a->rows, a->cols,
        a->numel, p->param[i].v->name);
    }
    P(e, "};\n\n");
  }
  if (p->zero < 1) return;
  P(e, "/* ZeRO-%d buckets (elements): the flat layout of the parameters, padded per\n"
       " * bucket to a multiple of 16·DP; rank r owns [flat + r·chunk, +chunk) of each,\n"
       " * at [shard, +chunk) of its %sgradient and optimizer-state shards. */\n"
       "static const RtBucket %sbuckets[%d] = {\n", p->zero, p->pshard ? "parameter, " : "", pre,
    p->buckets->len);
  for (int k = 0; k < p->buckets->len; k++) {
    const Bucket *b = p->buckets->data[k];
    P(e, "    {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "},  // %s\n", b->flat, b->numel,
      b->chunk, b->shard, b->name);
  }
  P(e, "};\n/* The bucket of each parameter. */\nstatic const int %sbucket_of[%d] = {", pre, p->nparam);
  for (int i = 0; i < p->nparam; i++) P(e, "%s%d,", i % 16 ? " " : "\n    ", p->param[i].bucket);
  P(e, "\n};\n\n");
}

static const char *sched_name(Schedule s) {
  return s == SCHED_GPIPE ? "GPipe" : s == SCHED_1F1B ? "1F1B" : "interleaved 1F1B";
}

static void step_table(Emit *e) {
  const RankProg *p = e->p;
  static const char *const kind[] = {"RT_STEP_WAIT",      "RT_STEP_ALLREDUCE", "RT_STEP_LOSS",
                                     "RT_STEP_NORM",      "RT_STEP_OPTIMIZER", "RT_STEP_ALLGATHER",
                                     "RT_STEP_OPT_GATHER", "RT_STEP_OPT_APPLY"};
  static const char *const loss[] = {"RT_LOSS_SUM", "RT_LOSS_LAST_STAGE"};
  static const char *const norm[] = {"RT_NORM_RANGE", "RT_NORM_PARAMS", "RT_NORM_PARAMS_DP0",
                                     "RT_NORM_ZERO"};
  static const char *const upd[] = {"RT_UPDATE_PARAMS", "RT_UPDATE_ZERO", "RT_UPDATE_PLACED",
                                    "RT_UPDATE_AF_SUMS", "RT_UPDATE_AF_SQUARES"};
  P(e, "/* The step after the microbatches: {op, axis, mode, byte offset, count, divisor}. */\n");
  P(e, "static const RtStepOp %sstep[%d] = {\n", e->pre, p->nstep);
  for (int j = 0; j < p->nstep; j++) {
    const PStep *s = &p->step[j];
    const char *mode = s->kind == PS_LOSS   ? loss[s->mode]
                       : s->kind == PS_NORM ? norm[s->mode]
                       : s->kind == PS_OPTIMIZER ? upd[s->mode]
                                                 : "0";
    P(e, "    {%s, %s, %s, %" PRId64 ", %" PRId64 ", %s},  // %s\n", kind[s->kind], cg_axis(s->axis),
      mode, s->off, s->count, lit(s->div), s->what);
  }
  P(e, "};\n\n");
}

static void chunk_table(Emit *e) {
  const RankProg *p = e->p;
  P(e, "/* The chunks: forward, backward, virtual stage, gradients (offset, bytes), stash\n"
       " * slots (offset, bytes of one, how many), the step's weight casts (or NULL), the\n"
       " * backward's receives alone (pairs, or NULL). */\n");
  P(e, "static const RtChunk %schunks[%d] = {\n", e->pre, p->nchunks);
  for (int c = 0; c < p->nchunks; c++) {
    const PChunk *ch = &p->chunk[c];
    const char *sfx = p->nchunks > 1 ? arena_printf("_c%d", c) : "";
    P(e, "    {%sforward%s, %sbackward%s, %d, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s},\n",
      e->pre, sfx, e->pre, sfx, ch->vs, ch->grads_off, ch->grads_bytes, ch->stash_off,
      ch->stash_bytes, ch->slots, ch->cast.n ? arena_printf("%scast%s", e->pre, sfx) : "NULL",
      p->pairs ? arena_printf("%sbackward_in%s", e->pre, sfx) : "NULL");
  }
  P(e, "};\n\n");
  if (p->pp <= 1) return;
  P(e, "/* This rank's part of the %s schedule: forward (1) or backward (0) of a\n"
       " * microbatch%s, in order. */\n", sched_name(p->m->train.plan.schedule),
    p->nchunks > 1 ? " of a chunk" : "");
  if (p->pairs)
    P(e, "/* pair 1: the forward's post also posts the receives of the backward after it\n"
         " * (on the cuda target with NCCL: Megatron's interleaved pairs). */\n");
  P(e, "static const RtAct %sorder[%d] = {", e->pre, p->nsched);
  for (int i = 0; i < p->nsched; i++)
    P(e, "%s{%d, %d, %d, %d},", i % 6 ? " " : "\n    ", p->sched[i].fwd, p->sched[i].mb,
      p->sched[i].chunk, p->sched[i].pair);
  P(e, "\n};\n\n");
}

static void program_struct(Emit *e) {
  const RankProg *p = e->p;
  const Module *m = e->m;
  const TrainCfg *t = &m->train;
  const Optimizer *o = &t->opt;
  const Plan *pl = &t->plan;
  const MemPlan *mp = p->mem;
  const char *pre = e->pre;
  char spec[256];
  plan_str(pl, spec, sizeof spec);
  bool cosine = !o->schedule || !strcmp(o->schedule, "cosine");
  P(e, "static const RtProgram %sprogram = {\n", pre);
  P(e, "    .name = \"%s\", .source = \"%s\", .mesh = \"%s\", .spec = \"%s\",\n", p->chunk[0].g->model,
    cg_c_escape(m->source), t->mesh ? t->mesh->name : "-", spec);
  P(e, "    .plan = PLAN, .f64 = %d,%s\n", e->f64,
    e->m->train.precision == DT_BF16 ? " .bf16 = 1,  /* 16-bit activations (passes/precision.c), GEMMs on bf16 tensor cores */" : "");
  P(e, "    .ranks = %d, .dp = %d, .tp = %d, .q = %d, .sp = %d, .pp = %d, .rank = %d, .nstages = %d, "
       ".ring = %d,\n",
    t->mesh ? t->mesh->ndev : 1, pl->dp, pl->tp * pl->tp2d * pl->tp2d, pl->tp2d > 1 ? pl->tp2d : 0,
    p->ring > 1 ? p->ring : 1, p->pp, p->rank, p->nstages, p->ring > 1);
  P(e, "    .mb = %d, .microbatch = %lld, .batch = %lld, .seq = %d,\n", p->mb,
    (long long)t->microbatch, (long long)t->batch, p->seq);
  P(e, "    .arena_bytes = %" PRId64 ", .persistent_bytes = %" PRId64 ", .comm_bytes = %" PRIu64 ",\n",
    mp->arena_bytes * e->p->scale, mp->persistent_bytes * e->p->scale, prog_comm_bytes(p, NULL));
  PlanFlops fl;
  plan_flops(m, &fl);
  P(e, "    .model_flops = %.9g, .peak_flops = %.9g,  /* for MFU: model FLOPs per step, device peak FLOP/s */\n",
    fl.model, fl.peak);
  P(e, "    .params = %sparams, .nparams = %d,%s\n", pre, p->nparam,
    p->dist ? arena_printf(" .norm_w = %snorm_w,", pre) : "");
  if (p->dist)
    P(e, "    .global = global, .nglobal = NGLOBAL, .global_bytes = %" PRId64 ", .shards = shards,%s\n",
      p->global_bytes, p->pp > 1 ? arena_printf(" .local_of = %slocal_of,", pre) : "");
  P(e, "    .zero = %d,%s .zaxis = %s, .nreq = %d,\n", p->zero, p->pshard ? " .pshard = 1," : "",
    cg_axis(p->zaxis), p->nreq);
  if (p->zero >= 1)
    P(e, "    .buckets = %sbuckets, .nbuckets = %d, .bucket_of = %sbucket_of, .zflat = %" PRId64
         ", .zgroup = %d,\n    .zshard = %" PRId64 ", .gshard_offset = %" PRId64 ", .zopt_offset = %" PRId64 ",\n",
      pre, p->buckets->len, pre, p->zflat, p->zgroup, p->zshard, p->gshard_off, p->zopt_off);
  P(e, "    .chunks = %schunks, .nchunks = %d,%s\n", pre, p->nchunks,
    p->pp > 1 ? arena_printf(" .order = %sorder, .norder = %d,%s", pre, p->nsched,
                             p->pipe_mpi ? " .pipe_mpi = 1," : "")
              : "");
  P(e, "    .step = %sstep, .nstep = %d,\n", pre, p->nstep);
  size_t ws = 0;
  for (int c = 0; e->t->kernel_ws && c < p->nchunks; c++)
    for (int b = 0; b < 2; b++) {
      const PBlock *bl = b ? &p->chunk[c].bwd : &p->chunk[c].fwd;
      for (int j = 0; j < bl->n; j++) {
        size_t w = e->t->kernel_ws(&bl->ins[j]);
        if (w > ws) ws = w;
      }
    }
  if (ws)
    P(e, "    .kernel_ws = %zu,  /* the launchers' scratch, after the arena (rtc_ws.h) */\n", ws);
  P(e, "    .steps = %lld, .seed = %lluull, .opt = %s, .lr = %s, .beta1 = %s, .beta2 = %s,\n",
    (long long)t->steps, (unsigned long long)t->seed,
    !strcmp(o->kind, "adamw") ? "RT_OPT_ADAMW" : !strcmp(o->kind, "sgd") ? "RT_OPT_SGD"
    : !strcmp(o->kind, "shampoo") ? "RT_OPT_SHAMPOO" : "RT_OPT_ADAFACTOR", lit(o->lr), lit(o->beta1),
    lit(o->beta2));
  if (!strcmp(o->kind, "shampoo"))
    P(e, "    .block = %d, .precondition_every = %d, .start_preconditioning = %d, .graft = %d, "
         ".root = %d, .graft_eps = %s,\n    .opt_work_offset = %" PRId64 ",\n",
      o->block, o->precondition_every, o->start_preconditioning, o->graft, o->root,
      lit(o->graft_eps), mp->opt_work_offset * e->p->scale);
  if (!strcmp(o->kind, "shampoo") && mp->root_work_bytes)
    P(e, "    .root_work_offset = %" PRId64 ", .root_work_bytes = %" PRId64
         ",  /* the root worker's scratch */\n",
      mp->root_work_offset * e->p->scale, mp->root_work_bytes * e->p->scale);
  if (p->nphase) P(e, "    .root_phase = %sroot_phase, .nroot_phase = %d,\n", pre, p->nphase);
  if (p->nunits)
    P(e, "    .units = %sunits, .nunits = %d, .useg = %" PRId64 ",\n", pre, p->nunits,
      (p->useg * 4 + 63) / 64 * 64 / 4);
  if (!strcmp(o->kind, "adafactor"))
    P(e, "    .decay_rate = %s, .clip_threshold = %s,\n", lit(o->decay_rate), lit(o->clip_threshold));
  if (p->afsplit)
    P(e, "    .afsplit = %safsplit, .afstats = %" PRId64 ",\n", pre, mp->opt_stats_offset * e->p->scale);
  P(e, "    .eps = %s, .weight_decay = %s, .momentum = %s, .clip = %s, .min_lr_ratio = %s,\n",
    lit(o->eps), lit(o->weight_decay), lit(o->momentum), lit(o->clip), lit(o->min_lr_ratio));
  P(e, "    .warmup = %d, .cosine = %d,\n", o->warmup, cosine ? 1 : 0);
  if (p->data == PDATA_TOKENS)
    P(e, "    .data = RT_TRAIN_TOKENS, .vocab = %d, .default_data = DEFAULT_DATA,\n};\n\n", p->vocab);
  else
    P(e, "    .data = RT_TRAIN_SYNTH, .features = %d, .classes = %d,\n};\n\n", p->features, p->classes);
}

/* ---- the file ---- */

static void c_string(Emit *e, const char *name, const char *text) {
  P(e, "static const char %s[] =\n", name);
  const char *s = text;
  while (*s) {
    P(e, "    \"");
    for (; *s && *s != '\n'; s++) {
      if (*s == '"' || *s == '\\') P(e, "\\%c", *s);
      else P(e, "%c", *s);
    }
    if (*s == '\n') {
      P(e, "\\n");
      s++;
    }
    P(e, "\"%s\n", *s ? "" : ";");
  }
  if (!*text) P(e, "    \"\";\n");
}

static char *plan_text(Module *m, const char *prefix) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return arena_strdup("");
  report_plan(f, m, prefix);
  fclose(f);
  char *s = arena_strdup(buf ? buf : "");
  free(buf);
  return s;
}

static const char *commas(int64_t n) {
  char b[64];
  report_commas(b, sizeof b, n);
  return arena_strdup(b);
}

static void header(Emit *e, Module *m) {
  const RankProg *p = m->rprog[0];
  int sc = p->scale;
  P(e, "/* %s — training program for model '%s' (%s), generated by shardc %s\n", e->t->file,
    p->chunk[0].g->model, cg_comment_safe(m->source), SHARDC_VERSION);
  P(e, " * for the %s target%s.  Do not edit: regenerate with\n", e->t->name,
    e->f64 ? " in f64 (gradient checks)" : "");
  P(e, " *   shardc build %s%s%s\n", cg_comment_safe(m->source), e->f64 ? " --precision=fp64" : "",
    e->t == &cg_target_cpu ? "" : arena_printf(" --target %s", e->t->name));
  P(e, " *\n");
  fputs(plan_text(m, " * "), e->o);
  for (int r = 0; r < m->nrprog; r++) {
    const RankProg *q = m->rprog[r];
    const MemPlan *mp = q->mem;
    int nb = 0, ndb = 0, nc = 0, nce = 0;
    for (int c = 0; c < q->nchunks; c++) {
      nb += q->chunk[c].nbias;
      ndb += q->chunk[c].ndbias;
      nc += q->chunk[c].nchains;
      nce += q->chunk[c].nchained;
    }
    P(e, " *\n");
    if (m->nrprog > 1) P(e, " * Pipeline rank %d (program r%d_program):\n", r, r);
    P(e, " * Arena per rank: %s bytes = persistent %s (params %s, grads %s, optimizer\n",
      commas(mp->arena_bytes * sc), commas(mp->persistent_bytes * sc),
      commas(mp->param_bytes * sc), commas(mp->grad_bytes * sc));
    P(e, " * %s) + transient peak %s (%d buffers, peak at node %d).\n",
      commas(mp->optstate_bytes * sc), commas(mp->transient_peak * sc), mp->nbuffers,
      mp->peak_node);
    P(e, " * Fused: %d bias add%s into matmuls, %d bias gradient%s into matmul backward,\n"
         " * %d elementwise chain%s (%d ops) into single loops.\n",
      nb, nb == 1 ? "" : "s", ndb, ndb == 1 ? "" : "s", nc, nc == 1 ? "" : "s", nce);
  }
  P(e, " *\n");
  P(e, " * forward() and backward() run one microbatch as straight-line calls on\n");
  P(e, " * buffers at their planned arena offsets: F(offset) is a %s buffer,\n", e->R);
  P(e, " * I(offset) an int32 one%s.  Backward calls accumulate\n",
    m->nstages > 1 ? ", FS/IS in the microbatch's stash slot" : "");
  P(e, " * (+=) into gradients; transient gradients are zeroed right before their\n");
  P(e, " * first writer (or written with =).  The runtime's driver (rt_train.h) runs\n");
  P(e, " * the schedule, the step, init, checkpoints and metrics from the tables.\n");
  P(e, " */\n");
}

int cg_emit(FILE *out, Module *m, const char *target, const CgOptions *o) {
  const Target *t = cg_target(target);
  if (!t) return -1;
  bool f64 = o && o->f64;
  if (f64) {
    /* (--gradcheck runs one rank: a tp, ring, pipeline or ZeRO layout is not that rank's program) */
    const Plan *pl = &m->train.plan;
    if (cg_needs_mpi(m) && (pl->tp * pl->tp2d * pl->tp2d > 1 || (pl->sp_kind == SP_RING && pl->sp > 1) ||
                            m->nstages > 1 || (pl->zero >= 1 && pl->dp > 1))) {
      diag_fatal_noloc("--precision=fp64 builds are for single-rank gradient checks; build with "
                       "--mesh 1 --strategy dp=1, or in fp32");
      return -1;
    }
    if (prog_build(m, 2) || plan_memory_check(m, 2)) return -1;
  }
  if (cg_check(m, target, o)) return -1;
  Emit e = {0};
  e.o = out;
  e.m = m;
  e.t = t;
  e.f64 = f64;
  e.R = f64 ? "double" : "float";
  e.S = f64 ? "_f64" : t->suffix;
  e.es = f64 ? 8 : 4;
  header(&e, m);
  t->prelude(&e);
  const RankProg *p0 = m->rprog[0];
  if (p0->data == PDATA_TOKENS)
    P(&e, "/* Training text when --data is not given (`shardc build` writes an absolute path). */\n"
          "#ifndef DEFAULT_DATA\n#define DEFAULT_DATA \"%s\"\n#endif\n\n",
      cg_c_escape(o && o->default_data ? o->default_data
                  : m->train.data      ? m->train.data
                                       : CG_BUILTIN_DATA));
  P(&e, "#define RANKS %d  /* mesh %s: launch with mpirun -np %d */\n\n",
    m->train.mesh ? m->train.mesh->ndev : 1, m->train.mesh ? m->train.mesh->name : "-",
    m->train.mesh ? m->train.mesh->ndev : 1);
  c_string(&e, "PLAN", plan_text(m, ""));
  P(&e, "\n");
  if (p0->dist) global_tables(&e, p0);
  for (int r = 0; r < m->nrprog; r++) {
    e.p = m->rprog[r];
    e.pre = m->nrprog > 1 ? arena_printf("r%d_", r) : "";
    if (m->nrprog > 1)
      P(&e, "/* ======== pipeline rank %d: stage%s %s ======== */\n\n", r,
        e.p->nchunks > 1 ? "s" : "",
        e.p->nchunks > 1 ? arena_printf("%d..%d by %d", r, r + (e.p->nchunks - 1) * e.p->pp, e.p->pp)
                         : arena_printf("%d", r));
    rank_tables(&e);
    for (int c = 0; c < e.p->nchunks; c++) {
      e.c = &e.p->chunk[c];
      e.sfx = e.p->nchunks > 1 ? arena_printf("_c%d", c) : "";
      if (e.p->nchunks > 1) P(&e, "/* ---- chunk %d: pipeline stage %d ---- */\n", c, e.c->vs);
      if (chunk_with_defs(&e)) return -1;
    }
    e.c = NULL;
    chunk_table(&e);
    step_table(&e);
    program_struct(&e);
  }
  if (m->nrprog > 1) {
    P(&e, "static const RtProgram *const programs[%d] = {", m->nrprog);
    for (int r = 0; r < m->nrprog; r++) P(&e, "%s&r%d_program", r ? ", " : "", r);
    P(&e, "};\n\n");
  } else {
    P(&e, "static const RtProgram *const programs[1] = {&program};\n\n");
  }
  P(&e, "int main(int argc, char **argv) { return rt_train_main(programs, %d, argc, argv); }\n",
    m->nrprog);
  return ferror(out) ? -1 : 0;
}
