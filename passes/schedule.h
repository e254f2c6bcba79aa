/* schedule.h — pipeline-parallel schedules: the per-rank order of forward and
 * backward microbatch steps for GPipe, 1F1B and interleaved 1F1B, and a
 * simulator that proves an order can finish.
 *
 * Model (Megatron's interleaving): with pp ranks and v chunks per rank there
 * are pp*v virtual stages; chunk c of rank r is virtual stage vs = c*pp + r.
 * Activations flow vs -> vs+1, the loss sits at vs = pp*v-1, gradients flow
 * back.  Forward (mb, vs) needs forward (mb, vs-1); backward (mb, vs) needs
 * forward (mb, vs) and backward (mb, vs+1).
 */
#ifndef SHARDC_SCHEDULE_H
#define SHARDC_SCHEDULE_H

#include <stdint.h>
#include <stdio.h>

#include "ir.h"

enum { SCHED_MAXPP = 64, SCHED_MAXV = 8 };

typedef struct PipeAct {
  uint8_t fwd;   /* 1 forward, 0 backward */
  int16_t mb;
  int8_t chunk;
} PipeAct;

typedef struct PipeSched {
  Schedule kind;
  int pp, m, v;                /* ranks, microbatches per step, chunks per rank (1 unless interleaved) */
  int n[SCHED_MAXPP];          /* actions of rank r: n[r] == 2*m*v */
  PipeAct *act[SCHED_MAXPP];   /* in execution order */
  /* Per rank and chunk: most microbatches whose forward ran and whose
   * backward has not (activations held at once). */
  int inflight[SCHED_MAXPP][SCHED_MAXV];
  int inflight_rank[SCHED_MAXPP];   /* per rank, all chunks together */
  /* Time units for one step when every action takes one unit (from the
   * simulator; sched_build fills it).  1F1B: 2*(m + pp - 1); interleaved:
   * 2*m*v + 2*(pp - 1), i.e. a bubble of (pp-1)/v in 1F1B's units. */
  int makespan;
} PipeSched;

/* Builds the schedule; 0, or -1 with a message in err.  GPipe runs all
 * forwards in microbatch order, then all backwards in microbatch order (the
 * order 1F1B drains them, so both send the same per-link message order).
 * Interleaved needs v >= 2 and m % pp == 0; the others need v == 1. */
int sched_build(PipeSched *s, Schedule kind, int pp, int m, int v, char *err, int errcap);
void sched_free(PipeSched *s);
/* One line per rank: "F0 F1 B0 F2 B1 ..." ("F3.1": microbatch 3, chunk 1, when v > 1). */
void sched_print(FILE *out, const PipeSched *s);
/* "F3" or "B2.1" */
void sched_act_str(const PipeSched *s, PipeAct a, char *buf, int cap);

/* Runs every rank's list with the dependency rules, one time unit per
 * action, a rank blocking until its next action's dependencies are done.
 * -1 with a message naming the rank and action when a (mb, vs) forward or
 * backward is missing, duplicated or out of range, or when the ranks
 * deadlock.  *makespan (may be NULL) gets the time units taken. */
int sched_simulate(const PipeSched *s, int *makespan, char *err, int errcap);
int sched_validate(const PipeSched *s, char *err, int errcap);

#endif
