/* commcheck.h — proves that the communication a job's ranks issue in one
 * training step matches up and cannot hang.
 *
 * Input is, per rank, the exact ordered list of communication events its
 * generated program issues.  commcheck runs them all against MPI/NCCL
 * semantics:
 *   SEND  non-blocking (MPI_Isend): posted, and the rank moves on.
 *   RECV  blocks until the matching send is posted; matching is FIFO per
 *         ordered (sender, receiver) pair, and tag and bytes must agree.
 *   COLL  blocks until every member of its communicator is at a COLL on
 *         that communicator; then op and bytes must agree on all of them.
 * It reports the first mismatch, a deadlock (every blocked rank and what it
 * waits in), sends never received, and events naming a communicator their
 * rank is not a member of.  Cost is linear in the events (plus nranks^2 for
 * the per-pair queues).
 *
 * With `rendezvous` set the point-to-point events follow NCCL instead
 * (ncclSend/ncclRecv, grouped): a rank's consecutive SEND/RECV events of
 * one nonzero `group` are posted together (a group-0 event alone), and
 * the rank waits until each of them is matched: a SEND by the receiver's
 * posted RECV, a RECV by the sender's posted SEND.  A send therefore blocks
 * like a receive, and two ranks sending to each other before receiving
 * must do it in one group.  Matching stays FIFO per ordered pair.  An
 * event with group -1 keeps MPI's rules in such a program.
 */
#ifndef SHARDC_COMMCHECK_H
#define SHARDC_COMMCHECK_H

#include <stdint.h>

typedef enum { CEV_COLL, CEV_SEND, CEV_RECV } CevKind;

typedef struct CommEvent {
  CevKind kind;
  int comm;          /* COLL: communicator instance id, 0..ncomms-1 */
  const char *op;    /* COLL: "all-reduce", "all-gather", ...: equal on all members */
  uint64_t bytes;    /* COLL: equal on all members; SEND/RECV: equal to the peer's */
  int peer;          /* SEND/RECV: the other rank (may be the rank itself) */
  int tag;           /* SEND/RECV: equal to the peer's */
  const char *what;  /* for errors: "%41 all-reduce over tp (blocks.0.attn), forward of microbatch 2" */
  int group;         /* SEND/RECV under rendezvous: the NCCL group (0: alone; -1: MPI's rules,
                      * a message staged through the host) */
} CommEvent;

typedef struct CommProgram {
  int nranks;
  int *n;               /* events per rank */
  CommEvent **ev;       /* ev[rank][i] */
  int ncomms;
  int *comm_size;       /* members of each communicator instance */
  int **comm_members;   /* sorted world ranks */
  int rendezvous;       /* 1: NCCL point-to-point semantics (groups; sends block) */
} CommProgram;

/* 0, or -1 with a message in err (at most errcap bytes, cut with "..."). */
int commcheck(const CommProgram *p, char *err, int errcap);

/* Debug hook: breaks p in place before a check, so tests can prove the
 * check notices.  spec is one or more comma-separated edits, applied in order:
 *   drop:R:I   remove event I of rank R
 *   swap:R:I   swap events I and I+1 of rank R
 *   bytes:R:I  double the bytes of event I of rank R (0 becomes 1)
 *   tag:R:I    add 1 to the tag of event I of rank R (a send or a recv)
 * -1 with a message for a malformed spec or an index out of range (edits
 * before the bad one stay applied). */
int commcheck_mutate(CommProgram *p, const char *spec, char *err, int errcap);

#endif
