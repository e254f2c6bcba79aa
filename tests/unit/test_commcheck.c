/* test_commcheck.c — the communication check on hand-built programs: rings,
 * pipeline exchanges built from every schedule, deadlocks, mismatches,
 * leftover sends, each mutation, and a large valid program for speed. */
#include <time.h>

#include "commcheck.h"
#include "schedule.h"
#include "test.h"

#define ASSERT_CONTAINS(needle, hay)                                                   \
  do {                                                                                 \
    const char *n_ = (needle), *h_ = (hay);                                            \
    test_checks++;                                                                     \
    if (!strstr(h_, n_)) {                                                             \
      fprintf(stderr, "%s:%d: expected \"%s\" in:\n%s\n", __FILE__, __LINE__, n_, h_); \
      test_failures++;                                                                 \
    }                                                                                  \
  } while (0)

static char err[4096];

/* ---- building programs ---- */

enum { MAXR = 64, MAXC = 64 };

typedef struct Prog {
  CommProgram p;
  int n[MAXR], cap[MAXR];
  CommEvent *ev[MAXR];
  int size[MAXC];
  int *members[MAXC];
  int mem[MAXC][MAXR];
} Prog;

static void prog_init(Prog *g, int nranks) {
  memset(g, 0, sizeof *g);
  g->p.nranks = nranks;
  g->p.n = g->n;
  g->p.ev = g->ev;
  g->p.comm_size = g->size;
  g->p.comm_members = g->members;
}

static void prog_free(Prog *g) {
  for (int r = 0; r < MAXR; r++) free(g->ev[r]);
}

/* A communicator over ranks given as a -1-terminated list; returns its id. */
static int comm(Prog *g, const int *ranks) {
  int c = g->p.ncomms++;
  g->members[c] = g->mem[c];
  for (int i = 0; ranks[i] >= 0; i++) g->mem[c][g->size[c]++] = ranks[i];
  return c;
}

static void add(Prog *g, int r, CommEvent e) {
  if (g->n[r] == g->cap[r]) {
    g->cap[r] = g->cap[r] ? 2 * g->cap[r] : 16;
    g->ev[r] = realloc(g->ev[r], sizeof(CommEvent) * (size_t)g->cap[r]);
  }
  g->ev[r][g->n[r]++] = e;
}

static void coll(Prog *g, int r, int c, const char *op, uint64_t bytes, const char *what) {
  add(g, r, (CommEvent){CEV_COLL, c, op, bytes, 0, 0, what, 0});
}
static void send(Prog *g, int r, int peer, int tag, uint64_t bytes, const char *what) {
  add(g, r, (CommEvent){CEV_SEND, 0, NULL, bytes, peer, tag, what, 0});
}
static void recv(Prog *g, int r, int peer, int tag, uint64_t bytes, const char *what) {
  add(g, r, (CommEvent){CEV_RECV, 0, NULL, bytes, peer, tag, what, 0});
}

/* The point-to-point traffic of a pipeline schedule: a forward receives the
 * activation from the previous virtual stage and sends its own to the
 * next; a backward receives the gradient from the next and sends one to
 * the previous.  Tags name the (direction, microbatch, receiving stage). */
static void from_sched(Prog *g, const PipeSched *s) {
  int pp = s->pp, last = pp * s->v - 1;
  prog_init(g, pp);
  for (int r = 0; r < pp; r++)
    for (int i = 0; i < s->n[r]; i++) {
      PipeAct a = s->act[r][i];
      int vs = a.chunk * pp + r;
#define TAG(fwd, vs) (((fwd) * s->m + a.mb) * (last + 1) + (vs))
      if (a.fwd) {
        if (vs > 0) recv(g, r, (vs - 1) % pp, TAG(1, vs), 4096, "activation");
        if (vs < last) send(g, r, (vs + 1) % pp, TAG(1, vs + 1), 4096, "activation");
      } else {
        if (vs < last) recv(g, r, (vs + 1) % pp, TAG(0, vs), 4096, "gradient");
        if (vs > 0) send(g, r, (vs - 1) % pp, TAG(0, vs - 1), 4096, "gradient");
      }
#undef TAG
    }
}

/* The same traffic as the CUDA runtime posts it (NCCL, rendezvous): an
 * action's receive joins the sends the previous action left in one group,
 * posted before its compute (the program's post instruction); the last
 * sends are a group of their own.  grouped 0: every message alone.
 * pairs: a forward followed by the backward of another microbatch posts
 * that backward's receive too, after its own, and the backward posts
 * nothing (commpass.c's pairs, Megatron's interleaved steady state). */
static void from_sched_nccl(Prog *g, const PipeSched *s, int grouped, int pairs) {
  int pp = s->pp, last = pp * s->v - 1;
  prog_init(g, pp);
  g->p.rendezvous = 1;
  int id = 0;
  for (int r = 0; r < pp; r++) {
    int pending = 0;   /* sends not yet posted */
    for (int i = 0; i < s->n[r];) {
      const PipeAct *x = &s->act[r][i];
      int seg = pairs && i + 1 < s->n[r] && x[0].fwd && !x[1].fwd && x[0].mb != x[1].mb ? 2 : 1;
      int start = g->n[r] - pending;
      for (int j = 0; j < seg; j++) {
        PipeAct a = x[j];
        int vs = a.chunk * pp + r;
#define TAG(fwd, vs) (((fwd) * s->m + a.mb) * (last + 1) + (vs))
        if (a.fwd ? vs > 0 : vs < last)
          recv(g, r, a.fwd ? (vs - 1) % pp : (vs + 1) % pp, TAG(a.fwd, vs), 4096, "recv");
      }
      ++id;
      for (int k = start; grouped && k < g->n[r]; k++) g->ev[r][k].group = id;
      pending = 0;
      for (int j = 0; j < seg; j++) {
        PipeAct a = x[j];
        int vs = a.chunk * pp + r;
        if (a.fwd && vs < last) send(g, r, (vs + 1) % pp, TAG(1, vs + 1), 4096, "send"), pending++;
        if (!a.fwd && vs > 0) send(g, r, (vs - 1) % pp, TAG(0, vs - 1), 4096, "send"), pending++;
#undef TAG
      }
      i += seg;
    }
    ++id;
    for (int k = g->n[r] - pending; grouped && k < g->n[r]; k++) g->ev[r][k].group = id;
  }
}

/* ---- cases ---- */

static void rings(void) {
  Prog g;
  /* Non-blocking sends first, then receives: fine. */
  prog_init(&g, 4);
  for (int r = 0; r < 4; r++) {
    send(&g, r, (r + 1) % 4, 7, 1024, "ring send");
    recv(&g, r, (r + 3) % 4, 7, 1024, "ring recv");
  }
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("", err);
  prog_free(&g);

  /* Everyone receives first: nobody ever posts a send. */
  prog_init(&g, 4);
  for (int r = 0; r < 4; r++) {
    recv(&g, r, (r + 3) % 4, 7, 1024, "ring recv");
    send(&g, r, (r + 1) % 4, 7, 1024, "ring send");
  }
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("deadlock: 4 ranks can never finish:", err);
  ASSERT_CONTAINS("rank 0 waits at event 0 in recv of 1024 bytes with tag 7 from rank 3 "
                  "(ring recv), rank 3 is blocked at its event 0", err);
  ASSERT_CONTAINS("rank 3 waits at event 0 in recv", err);
  prog_free(&g);

  /* A pair of blocking receives waiting on each other. */
  prog_init(&g, 2);
  recv(&g, 0, 1, 0, 8, "%3 recv x");
  send(&g, 0, 1, 0, 8, "%4 send y");
  recv(&g, 1, 0, 0, 8, "%9 recv y");
  send(&g, 1, 0, 0, 8, "%10 send x");
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("deadlock: 2 ranks can never finish: rank 0 waits at event 0 in recv of 8 bytes "
             "with tag 0 from rank 1 (%3 recv x), rank 1 is blocked at its event 0; rank 1 "
             "waits at event 0 in recv of 8 bytes with tag 0 from rank 0 (%9 recv y), rank 0 "
             "is blocked at its event 0", err);
  prog_free(&g);

  /* Receive from a rank that finished without sending. */
  prog_init(&g, 2);
  recv(&g, 1, 0, 0, 8, NULL);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("deadlock: 1 rank can never finish: rank 1 waits at event 0 in recv of 8 bytes "
             "with tag 0 from rank 0 (event 0), rank 0 has finished", err);
  prog_free(&g);

  /* Sending to oneself then receiving is fine (MPI_Isend to self). */
  prog_init(&g, 1);
  send(&g, 0, 0, 1, 8, NULL);
  recv(&g, 0, 0, 1, 8, NULL);
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  prog_free(&g);
}

static void pipelines(void) {
  /* Every schedule's exchange is consistent, with a data-parallel style
   * all-reduce over the whole pipeline at the end.  GPipe and 1F1B as the
   * CUDA runtime posts their messages (NCCL groups, sends blocking) finish
   * too; interleaved schedules posted so hang from 2 ranks and 4
   * microbatches on (a cycle of sends around the ranks; the check sees it),
   * and then finish with pairs (commpass.c: posted so they hang where the
   * microbatches are as many as the ranks, from 3 on). */
  int bad = 0, n = 0, hang = 0, hang_pairs = 0;
  for (int pp = 1; pp <= 8; pp++)
    for (int m = 1; m <= 16; m++)
      for (int k = 0; k < 3; k++)
        for (int v = k == 2 ? 2 : 1; v <= (k == 2 ? 3 : 1); v++) {
          PipeSched s;
          if (k == 2 && m % pp) continue;
          if (sched_build(&s, (Schedule)k, pp, m, v, err, sizeof err)) {
            bad++;
            continue;
          }
          Prog g;
          from_sched(&g, &s);
          int world[MAXR + 1];
          for (int r = 0; r < pp; r++) world[r] = r;
          world[pp] = -1;
          int c = comm(&g, world);
          for (int r = 0; r < pp; r++) coll(&g, r, c, "all-reduce", 1 << 20, "grads");
          if (commcheck(&g.p, err, sizeof err)) {
            fprintf(stderr, "schedule %d pp=%d m=%d v=%d: %s\n", k, pp, m, v, err);
            bad++;
          }
          prog_free(&g);
          /* (one rank is no pipeline: not posted so) */
          from_sched_nccl(&g, &s, 1, 0);
          bool nccl = pp > 1;
          if (nccl && k == 2) {
            int eager = commcheck(&g.p, err, sizeof err);
            if (eager) ASSERT_CONTAINS("deadlock: ", err);
            prog_free(&g);
            from_sched_nccl(&g, &s, 1, 1);
            int paired = commcheck(&g.p, err, sizeof err);
            hang += eager != 0;
            hang_pairs += paired != 0;
            if (eager && paired) {
              fprintf(stderr, "nccl: interleaved pp=%d m=%d v=%d hangs both ways: %s\n", pp, m, v, err);
              bad++;
            }
          } else if (nccl && commcheck(&g.p, err, sizeof err)) {
            fprintf(stderr, "nccl: schedule %d pp=%d m=%d v=%d: %s\n", k, pp, m, v, err);
            bad++;
          }
          n++;
          prog_free(&g);
          sched_free(&s);
        }
  ASSERT(0, bad);
  ASSERT(1, n > 100);
  ASSERT(1, hang >= 20 && hang_pairs >= 10);

  /* 1F1B on 4 ranks with the last stage's backwards in the wrong order:
   * the FIFO match pairs the wrong messages. */
  PipeSched s;
  ASSERT(0, sched_build(&s, SCHED_1F1B, 4, 4, 1, err, sizeof err));
  Prog g;
  from_sched(&g, &s);
  ASSERT(0, commcheck_mutate(&g.p, "tag:3:1", err, sizeof err));   /* rank 3: R0 S0 R1... */
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("send/recv mismatch in the 1st message from rank 3 to rank 2", err);
  prog_free(&g);
  /* ... and under NCCL's rules too */
  from_sched_nccl(&g, &s, 1, 0);
  ASSERT(0, commcheck_mutate(&g.p, "tag:3:1", err, sizeof err));
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("send/recv mismatch in the 1st message from rank 3 to rank 2", err);
  prog_free(&g);
  /* NCCL: a send blocks until it is received, so 1F1B's messages posted
   * one at a time (no groups) hang: rank 0 sends its second activation
   * while rank 1 sends its first gradient */
  from_sched_nccl(&g, &s, 0, 0);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("deadlock: ", err);
  ASSERT_CONTAINS("(in an NCCL group of events", err);
  ASSERT_CONTAINS("in send of 4096 bytes", err);
  /* ... but staged through MPI (group -1: MPI's rules in an NCCL program) they finish */
  for (int r = 0; r < g.p.nranks; r++)
    for (int i = 0; i < g.n[r]; i++) g.ev[r][i].group = -1;
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  prog_free(&g);
  sched_free(&s);

  /* Two stages exchanging a two-tensor cut, each receive posted in a group
   * of its own after the sends: rank 0's second send waits for rank 1's
   * second receive, which waits behind rank 1's first group, whose second
   * send waits for rank 0's second receive. */
  prog_init(&g, 2);
  g.p.rendezvous = 1;
  send(&g, 0, 1, 1, 8, "a1"), send(&g, 0, 1, 2, 8, "a2"), recv(&g, 0, 1, 3, 8, "g1");
  recv(&g, 0, 1, 4, 8, "g2");
  send(&g, 1, 0, 3, 8, "g1"), send(&g, 1, 0, 4, 8, "g2"), recv(&g, 1, 0, 1, 8, "a1");
  recv(&g, 1, 0, 2, 8, "a2");
  for (int r = 0; r < 2; r++) g.ev[r][0].group = g.ev[r][1].group = g.ev[r][2].group = 1;
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("deadlock: 2 ranks can never finish: rank 0 waits at event 1 (in an NCCL group "
             "of events 0-2) in send of 8 bytes with tag 2 to rank 1 (a2), rank 1 is blocked "
             "at its event 0; rank 1 waits at event 1 (in an NCCL group of events 0-2) in send "
             "of 8 bytes with tag 4 to rank 0 (g2), rank 0 is blocked at its event 0", err);
  /* all four in one group each: fine; under MPI's rules it was fine as it was */
  for (int r = 0; r < 2; r++) g.ev[r][3].group = 1;
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  for (int r = 0; r < 2; r++) g.ev[r][3].group = 0;
  g.p.rendezvous = 0;
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  prog_free(&g);

  /* NCCL: a send to oneself needs its receive in the same group */
  prog_init(&g, 1);
  g.p.rendezvous = 1;
  send(&g, 0, 0, 1, 8, NULL);
  recv(&g, 0, 0, 1, 8, NULL);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  g.ev[0][0].group = g.ev[0][1].group = 5;
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  prog_free(&g);
}

static void collectives(void) {
  Prog g;
  prog_init(&g, 2);
  int c = comm(&g, (int[]){0, 1, -1});
  coll(&g, 0, c, "all-reduce", 4096, "%41 all-reduce over tp (blocks.0.attn), forward of microbatch 2");
  coll(&g, 1, c, "all-gather", 2048, "%57 all-gather over tp (blocks.0.mlp)");
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("communicator 0 (ranks 0,1): rank 0 issues all-reduce of 4096 bytes (%41 all-reduce "
             "over tp (blocks.0.attn), forward of microbatch 2) but rank 1 issues all-gather of "
             "2048 bytes (%57 all-gather over tp (blocks.0.mlp))", err);
  prog_free(&g);

  /* Bytes only, on a larger communicator: only the odd one out is listed. */
  prog_init(&g, 8);
  c = comm(&g, (int[]){0, 1, 2, 3, 5, -1});
  for (int r = 0; r < 8; r++)
    if (r <= 3 || r == 5) coll(&g, r, c, "all-reduce", r == 3 ? 4 : 8, NULL);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("communicator 0 (ranks 0-3,5): rank 0 issues all-reduce of 8 bytes (event 0) but "
             "rank 3 issues all-reduce of 4 bytes (event 0)", err);
  prog_free(&g);

  /* Two communicators over the same ranks, entered in opposite orders. */
  prog_init(&g, 2);
  int a = comm(&g, (int[]){0, 1, -1}), b = comm(&g, (int[]){0, 1, -1});
  coll(&g, 0, a, "all-reduce", 64, "dp grads");
  coll(&g, 0, b, "all-reduce", 64, "tp partial");
  coll(&g, 1, b, "all-reduce", 64, "tp partial");
  coll(&g, 1, a, "all-reduce", 64, "dp grads");
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("deadlock: 2 ranks can never finish: rank 0 waits at event 0 in all-reduce of 64 "
             "bytes on communicator 0 (dp grads), for rank 1; rank 1 waits at event 0 in "
             "all-reduce of 64 bytes on communicator 1 (tp partial), for rank 0", err);
  prog_free(&g);

  /* Not a member. */
  prog_init(&g, 3);
  c = comm(&g, (int[]){0, 1, -1});
  coll(&g, 0, c, "all-reduce", 64, NULL);
  coll(&g, 1, c, "all-reduce", 64, NULL);
  coll(&g, 2, c, "all-reduce", 64, "%7 stray");
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("rank 2 issues all-reduce of 64 bytes on communicator 0 (ranks 0,1) but is not a "
             "member of it (%7 stray)", err);
  prog_free(&g);

  /* Malformed: unknown communicator, unsorted members, bad peer. */
  prog_init(&g, 2);
  coll(&g, 0, 3, "all-reduce", 64, NULL);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("names communicator 3, but there are 0", err);
  prog_free(&g);
  prog_init(&g, 2);
  comm(&g, (int[]){1, 0, -1});
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("must be sorted", err);
  prog_free(&g);
  prog_init(&g, 2);
  send(&g, 1, 2, 0, 8, NULL);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("peer rank 2 out of range", err);
  prog_free(&g);
}

static void p2p_mismatch(void) {
  Prog g;
  prog_init(&g, 2);
  send(&g, 0, 1, 5, 4096, "%12 send act mb 0");
  send(&g, 0, 1, 6, 4096, "%13 send act mb 1");
  recv(&g, 1, 0, 5, 4096, "%20 recv act mb 0");
  recv(&g, 1, 0, 6, 2048, "%21 recv act mb 1");
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("send/recv mismatch in the 2nd message from rank 0 to rank 1: rank 0 sends 4096 "
             "bytes with tag 6 (%13 send act mb 1) but rank 1 receives 2048 bytes with tag 6 "
             "(%21 recv act mb 1)", err);
  prog_free(&g);

  /* A send nobody receives. */
  prog_init(&g, 3);
  send(&g, 0, 1, 5, 4096, "%12 send");
  send(&g, 2, 1, 1, 16, "%30 send");
  recv(&g, 1, 0, 5, 4096, "%20 recv");
  send(&g, 0, 1, 9, 8, "%14 extra");
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("2 sends are never received: rank 0 event 1 sends 8 bytes with tag 9 to rank 1 "
             "(%14 extra); rank 2 event 0 sends 16 bytes with tag 1 to rank 1 (%30 send)", err);
  prog_free(&g);
}

/* A valid pipeline-ish program with collectives, used by the mutations. */
static void base(Prog *g) {
  prog_init(g, 2);
  int c = comm(g, (int[]){0, 1, -1});
  send(g, 0, 1, 1, 100, "s0");
  recv(g, 1, 0, 1, 100, "r0");
  send(g, 1, 0, 2, 200, "s1");
  recv(g, 0, 1, 2, 200, "r1");
  coll(g, 0, c, "all-reduce", 300, "c0");
  coll(g, 1, c, "all-reduce", 300, "c0");
  coll(g, 0, c, "all-gather", 400, "c1");
  coll(g, 1, c, "all-gather", 400, "c1");
}

static void mutations(void) {
  Prog g;
  base(&g);
  ASSERT(0, commcheck(&g.p, err, sizeof err));
  prog_free(&g);

  base(&g);   /* rank 1 never receives s0 */
  ASSERT(0, commcheck_mutate(&g.p, "drop:1:0", err, sizeof err));
  ASSERT(3, g.n[1]);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_STR("1 send is never received: rank 0 event 0 sends 100 bytes with tag 1 to rank 1 (s0)",
             err);
  prog_free(&g);

  base(&g);   /* rank 0 drops the all-reduce: all-gather meets all-reduce */
  ASSERT(0, commcheck_mutate(&g.p, "drop:0:2", err, sizeof err));
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("rank 0 issues all-gather of 400 bytes (c1) but rank 1 issues all-reduce of "
                  "300 bytes (c0)", err);
  prog_free(&g);

  base(&g);   /* rank 0 receives before it sends: both block */
  ASSERT(0, commcheck_mutate(&g.p, "swap:0:0", err, sizeof err));
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("deadlock: 2 ranks", err);
  ASSERT_CONTAINS("rank 0 waits at event 0 in recv of 200 bytes with tag 2 from rank 1 (r1)", err);
  ASSERT_CONTAINS("rank 1 waits at event 0 in recv of 100 bytes with tag 1 from rank 0 (r0)", err);
  prog_free(&g);

  base(&g);
  ASSERT(0, commcheck_mutate(&g.p, "bytes:1:3", err, sizeof err));
  ASSERT(800, g.ev[1][3].bytes);
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("but rank 1 issues all-gather of 800 bytes (c1)", err);
  prog_free(&g);

  base(&g);
  ASSERT(0, commcheck_mutate(&g.p, "tag:0:0", err, sizeof err));
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  ASSERT_CONTAINS("rank 0 sends 100 bytes with tag 2 (s0) but rank 1 receives 100 bytes with "
                  "tag 1 (r0)", err);
  prog_free(&g);

  base(&g);   /* a list; swapping twice restores the order */
  ASSERT(0, commcheck_mutate(&g.p, "swap:1:2,swap:1:2,bytes:0:0,bytes:1:0", err, sizeof err));
  ASSERT(0, commcheck(&g.p, err, sizeof err));

  static const struct { const char *spec, *msg; } bad[] = {
      {"", "empty commcheck mutation spec"},
      {"flip:0:0", "malformed commcheck mutation 'flip:0:0'"},
      {"drop:0", "malformed commcheck mutation 'drop:0'"},
      {"drop:-1:0", "malformed"},
      {"drop: 1:0", "malformed"},
      {"drop:0:1x", "malformed commcheck mutation 'drop:0:1x'"},
      {"drop:2:0", "commcheck mutation 'drop:2:0': rank 2 out of range (2 ranks)"},
      {"drop:0:4", "commcheck mutation 'drop:0:4': event 4 out of range (rank 0 has 4 events)"},
      {"swap:0:3", "event 4 out of range (rank 0 has 4 events)"},
      {"tag:0:2", "event 2 of rank 0 is a collective, it has no tag"},
      {"drop:0:99999999999", "malformed"},
      /* Applies the drop, then fails on the empty second edit: last. */
      {"drop:0:0,", "malformed commcheck mutation ''"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    ASSERT(-1, commcheck_mutate(&g.p, bad[i].spec, err, sizeof err));
    ASSERT_CONTAINS(bad[i].msg, err);
  }
  prog_free(&g);
}

static void truncation(void) {
  /* 64 ranks all blocked: the list is cut at a whole item and counted. */
  Prog g;
  prog_init(&g, 64);
  for (int r = 0; r < 64; r++) recv(&g, r, (r + 1) % 64, 0, 8, "a fairly long description");
  char small[300];
  ASSERT(-1, commcheck(&g.p, small, sizeof small));
  ASSERT(1, strlen(small) < sizeof small);
  ASSERT_CONTAINS("deadlock: 64 ranks can never finish: rank 0 waits", small);
  ASSERT_CONTAINS(" more)", small);
  /* A tiny buffer still ends in "...". */
  char tiny[16];
  ASSERT(-1, commcheck(&g.p, tiny, sizeof tiny));
  ASSERT_STR("deadlock: 64...", tiny);
  ASSERT(-1, commcheck(&g.p, NULL, 0));
  prog_free(&g);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

/* 64 ranks, about 10,000 events each: collectives over the world, tp groups
 * (8 consecutive ranks), dp groups (stride 8) and random point-to-point
 * messages, appended in one global order, so the program is valid. */
static void large(void) {
  static Prog g;
  prog_init(&g, 64);
  int ranks[MAXR + 1];
  for (int r = 0; r < 64; r++) ranks[r] = r;
  ranks[64] = -1;
  comm(&g, ranks);
  for (int k = 0; k < 8; k++) {
    for (int i = 0; i < 8; i++) ranks[i] = 8 * k + i;
    ranks[8] = -1;
    comm(&g, ranks);   /* 1 + k: tp */
  }
  for (int k = 0; k < 8; k++) {
    for (int i = 0; i < 8; i++) ranks[i] = k + 8 * i;
    ranks[8] = -1;
    comm(&g, ranks);   /* 9 + k: dp */
  }
  static const char *ops[] = {"all-reduce", "all-gather", "reduce-scatter"};
  long total = 0;
  int tag = 0;
  while (total < 64L * 10000) {
    uint32_t x = rnd(100);
    int c = x < 2 ? 0 : x < 40 ? 1 + (int)rnd(8) : x < 70 ? 9 + (int)rnd(8) : -1;
    if (c >= 0) {
      const char *op = ops[rnd(3)];
      uint64_t bytes = 64u << rnd(10);
      for (int i = 0; i < g.size[c]; i++) coll(&g, g.mem[c][i], c, op, bytes, "coll");
      total += g.size[c];
    } else {
      int s = (int)rnd(64), d = (int)rnd(64);
      uint64_t bytes = 8u << rnd(12);
      send(&g, s, d, tag, bytes, "send");
      recv(&g, d, s, tag++, bytes, "recv");
      total += 2;
    }
  }
  clock_t t0 = clock();
  int rc = commcheck(&g.p, err, sizeof err);
  double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
  ASSERT(0, rc);
  if (rc) fprintf(stderr, "%s\n", err);
  printf("large program: %ld events on 64 ranks checked in %.3f s\n", total, dt);
  ASSERT(1, dt < 1.0);

  /* The same program broken deep inside still fails fast. */
  char spec[64];
  snprintf(spec, sizeof spec, "bytes:17:%d", g.n[17] / 2);
  ASSERT(0, commcheck_mutate(&g.p, spec, err, sizeof err));
  t0 = clock();
  ASSERT(-1, commcheck(&g.p, err, sizeof err));
  dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
  ASSERT(1, dt < 1.0);
  ASSERT(1, strstr(err, "rank 17") != NULL);
  prog_free(&g);
}

int main(void) {
  rings();
  pipelines();
  collectives();
  p2p_mismatch();
  mutations();
  truncation();
  large();
  TEST_MAIN_END();
}
