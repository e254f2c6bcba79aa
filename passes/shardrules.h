/* shardrules.h — what the sharding passes share.
 *
 * shard.c (1D tensor parallelism over tp, then sp=ring over sp) and
 * shard2d.c (the q x q grid over tp-row and tp-col) each rewrite the
 * forward graph, node by node in program order, into the graph of one rank:
 * a node's rule, chosen by its op class (ir.h OpClass), gives its outputs
 * their local shapes and ShardSpecs and inserts the communication its
 * operands need.  A Sharder is one such rewrite over the pass's mesh axes,
 * each of P ranks; the rules that do not depend on the pass (views,
 * slices, conversions, the rewrite loop) are written here once.
 */
#ifndef SHARDC_SHARDRULES_H
#define SHARDC_SHARDRULES_H

#include "passes.h"

typedef struct Sharder Sharder;
typedef void (*ShardRule)(Sharder *s, Node *n);

/* A tensor-parallel pass's rules (shard.c's tp, shard2d.c's tp2d); every
 * such pass maps the op classes to them alike (sh_tp_rule). */
typedef struct TpRules {
  ShardRule leaf;         /* OPC_LEAF: a parameter's split */
  ShardRule elementwise;  /* OPC_UNARY, OPC_MAP and OPC_ROPE (on the heads) */
  ShardRule rowwise;      /* OPC_ROWWISE */
  ShardRule view;         /* OPC_VIEW: sh_view, or a pass's variant of it */
  ShardRule binary, norm, matmul, attention, gather, loss;
  int channels;           /* the mesh axis the channels (last dim) split over: slices */
} TpRules;

struct Sharder {
  Graph *g;
  int P;                  /* ranks along each of the pass's axes */
  uint32_t axes;          /* the pass's mesh axes, 1 << axis each */
  const char *what;       /* message prefix: "tensor parallel (tp=2)" */
  const TpRules *tp;      /* a tensor-parallel pass's rules, for sh_tp_rule */
  Value **repl;           /* value id -> the converted value its readers read, or NULL */
  ShardRule post;         /* after n is in the list: the conversion its readers need, or NULL */
  size_t cap;             /* entries of the pass's tables indexed by value id (0: none) */
  bool failed;
};

/* Reports "WHAT: message" at n and marks the rewrite failed. */
void sh_fail(Sharder *s, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The dim of v split over mesh axis ax, -1 for none. */
int sh_dim(const Value *v, int ax);
/* Whether v is whole on every rank of the pass: no dim split over its
 * axes and no pending partial sum over them. */
bool sh_whole(const Sharder *s, const Value *v);
/* The same over the mesh axes in `axes` (1 << axis each), for passes after
 * the shard passes (a pipeline message whole on every tp rank, program.c). */
bool sh_whole_over(const Value *v, uint32_t axes);
/* v replicated, no partial sums, no segments. */
void sh_clear(Value *v);
/* Every output of n gets from's spec; a gradient that would be partial
 * (from's gpartial) belongs to from alone. */
void sh_copy_spec(Node *n, const Value *from);
/* Re-runs n's shape rule on its (now local) operands. */
void sh_rerun(Sharder *s, Node *n);
/* A communication node op over mesh axis ax along dim converting v,
 * appended to the graph; its output starts with v's spec.  NULL after an
 * error. */
Value *sh_comm(Sharder *s, OpKind op, Value *v, int dim, int ax, const Node *at);
/* Whether dim d of v divides over P ranks; otherwise reports "NAME has N
 * WHAT, not divisible by P" at at. */
bool sh_divisible(Sharder *s, const Node *at, const Value *v, int d, const char *what);
/* The global size of the first of parameter p's nseg segments of dim d (or
 * of the whole dim when nseg <= 1) that P does not divide; 0 when all do. */
int64_t sh_bad_segment(const Value *p, int d, int nseg, int P);
/* Parameter p's dim d split over ax, in nseg > 1 segments of global sizes
 * p->tph_seg[] (a fused q,k,v weight: each rank keeps its part of each)
 * or as one piece. */
void sh_split_param(Sharder *s, Value *p, int d, int ax, int nseg);
/* Dropout with p > 0 draws each element's mask from (seed, node, step): a
 * rank's share of it would not be the single-device run's.  Reports
 * "dropout REFUSAL (its mask ...)" for such a node n; true when n is fine. */
bool sh_dropout_ok(Sharder *s, const Node *n, const char *refusal);
/* The matmul whose output only the cross-entropy xent reads (a projection
 * to the vocabulary, which the passes split over the vocabulary), or NULL. */
Node *sh_vocab_matmul(const Node *xent);

/* Rules every pass applies alike. */
void sh_view(Sharder *s, Node *n);           /* OPC_VIEW */
void sh_slice(Sharder *s, Node *n, int ax);  /* OPC_SLICE, channels split over ax */
/* A gather or cross-entropy n vocab-parallel over ax (-1: not): each rank
 * holds one block of the vocabulary (the table's rows, the logits' last
 * dim); its output starts replicated. */
void sh_vocab_parallel(Sharder *s, Node *n, int ax);
/* The rule of n's class from s->tp. */
void sh_tp_rule(Sharder *s, Node *n);

/* Rewrites s->g in place: node applies each node's rule in program order
 * (operands first replaced through s->repl, s->post after), then checks
 * that the loss is whole and renumbers the nodes.  0, or -1 after an
 * error. */
int sh_rewrite(Sharder *s, ShardRule node);

#endif
