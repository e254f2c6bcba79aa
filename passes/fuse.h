/* fuse.h — fusion decisions over one scheduled graph (fuse.c), read by the
 * per-rank program builder. */
#ifndef SHARDC_FUSE_H
#define SHARDC_FUSE_H

#include "ir.h"

/* A fused loop: at most FUSE_MAX_CHAIN nodes of at most IR_MAXIN inputs each. */
enum { FUSE_MAX_CHAIN = 24, FUSE_MAX_LOOP = FUSE_MAX_CHAIN * IR_MAXIN };

typedef struct Fusion {
  Graph *g;
  int nn;
  int *reads;           /* value id -> nodes that read its data */
  int *fwd_reads;       /* value id -> forward nodes that take it as an input */
  Node **fwd_reader;    /* value id -> the last such forward node */
  bool *skip;           /* node id -> runs as part of another node */
  Node **bias;          /* node id (matmul) -> the add whose bias it takes */
  Value **dbias;        /* node id (matmul_bwd) -> the bias gradient it sums */
  Node **dbias_node;    /* node id (matmul_bwd) -> the add_bwd that asked for it */
  int *chain_len;       /* node id -> length of the elementwise chain it starts */
  Node **next;          /* node id -> the next node of its chain, or NULL */
  bool *loop;           /* node id -> a recomputed node that runs as a loop, as
                         * its forward did inside a longer chain */
  int nbias, ndbias, nchains, nchained;
} Fusion;

/* Node ids must be schedule positions.  Which nodes fuse depends on the
 * graph alone: the memory plan keeps what a fused group reads alive until
 * the group's last node (fuse_windows), so no buffer a group writes lands on
 * one it still reads. */
Fusion *fuse_analyse(Graph *g);
/* For the memory plan, before any buffer is placed: last[i] = the position
 * of the last node of the fused group that node i belongs to (i alone). */
void fuse_windows(Graph *g, int *last);
/* The chain that starts at n (its length; 1 when n runs alone). */
int fuse_chain(const Fusion *f, Node *n, Node **ch);
/* Whether the k-th value of a chain is written to memory (the last, the
 * loss, or one a later node reads). */
bool fuse_chain_stored(const Fusion *f, Node *const *ch, int len, int k);
/* Broadcast size of node c's operands within a loop of numel(c->out): 0 when
 * all operands are full size, -1 when they disagree. */
int64_t fuse_bcast_of(const Node *c);
/* A reshape (or tp_copy) whose output is its input's storage: no code. */
bool fuse_is_view(const Node *n);
bool fuse_emits_code(const Node *n);
/* Whether node n reads the data of input k (a view reads nothing). */
bool fuse_reads_data(const Node *n, int k);
bool fuse_is_loop_op(OpKind op);
/* An elementwise forward op (add, sub, mul, scale, relu, gelu, silu, map) as
 * a scalar expression of its operands' expressions; NULL for other ops. */
SExpr *fuse_op_expr(const Node *n, SExpr *const *operands);
/* `fn`'s body or derivative `which` (-1: body) with its arguments replaced
 * by args[0..nargs). */
SExpr *fuse_fn_expr(const ScalarFn *fn, int which, SExpr *const *args);
/* The storage of a and b overlaps in the arena. */
bool fuse_overlaps(const Value *a, const Value *b);

#endif
