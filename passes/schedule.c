/* schedule.c — GPipe, 1F1B and interleaved 1F1B action orders per pipeline
 * rank, and the unit-time simulator that checks them (see schedule.h). */
#include "schedule.h"

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Appends to err[0..errcap); once full, the text ends in "...". */
static void err_add(char *err, int errcap, int *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void err_add(char *err, int errcap, int *len, const char *fmt, ...) {
  if (!err || errcap <= 0 || *len >= errcap - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(err + *len, (size_t)(errcap - *len), fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if (*len + k >= errcap - 1) {
    *len = errcap - 1;
    if (errcap >= 4) memcpy(err + errcap - 4, "...", 4);
  } else {
    *len += k;
  }
}

#define FAIL(...)                                  \
  do {                                             \
    int l_ = 0;                                    \
    err_add(err, errcap, &l_, __VA_ARGS__);        \
    return -1;                                     \
  } while (0)

void sched_act_str(const PipeSched *s, PipeAct a, char *buf, int cap) {
  if (s->v > 1)
    snprintf(buf, (size_t)cap, "%c%d.%d", a.fwd ? 'F' : 'B', a.mb, a.chunk);
  else
    snprintf(buf, (size_t)cap, "%c%d", a.fwd ? 'F' : 'B', a.mb);
}

void sched_free(PipeSched *s) {
  for (int r = 0; r < SCHED_MAXPP; r++) {
    free(s->act[r]);
    s->act[r] = NULL;
    s->n[r] = 0;
  }
}

static PipeAct act(int fwd, int mb, int chunk) {
  PipeAct a = {(uint8_t)fwd, (int16_t)mb, (int8_t)chunk};
  return a;
}

/* Megatron's interleaved order: the k-th forward (backward) of a rank works
 * on a group of pp microbatches of one chunk; chunks ascend for forwards and
 * descend for backwards. */
static PipeAct interleaved_act(int fwd, int k, int pp, int v) {
  int chunk = (k / pp) % v;
  if (!fwd) chunk = v - 1 - chunk;
  return act(fwd, (k / (pp * v)) * pp + k % pp, chunk);
}

/* Rank r's list for 1F1B (v == 1) or interleaved 1F1B: `warm` forwards,
 * then forward/backward pairs, then the remaining backwards. */
static void one_f_one_b(PipeAct *out, int total, int warm, int pp, int v) {
  int n = 0, f = 0, b = 0;
  for (; f < warm; f++) out[n++] = interleaved_act(1, f, pp, v);
  while (f < total) {
    out[n++] = interleaved_act(1, f++, pp, v);
    out[n++] = interleaved_act(0, b++, pp, v);
  }
  while (b < total) out[n++] = interleaved_act(0, b++, pp, v);
}

static void count_inflight(PipeSched *s) {
  for (int r = 0; r < s->pp; r++) {
    int cur[SCHED_MAXV] = {0}, all = 0;
    s->inflight_rank[r] = 0;
    for (int c = 0; c < SCHED_MAXV; c++) s->inflight[r][c] = 0;
    for (int i = 0; i < s->n[r]; i++) {
      PipeAct a = s->act[r][i];
      if (a.chunk < 0 || a.chunk >= s->v) continue;
      if (a.fwd) {
        cur[a.chunk]++, all++;
        if (cur[a.chunk] > s->inflight[r][a.chunk]) s->inflight[r][a.chunk] = cur[a.chunk];
        if (all > s->inflight_rank[r]) s->inflight_rank[r] = all;
      } else if (cur[a.chunk] > 0) {
        cur[a.chunk]--, all--;
      }
    }
  }
}

int sched_build(PipeSched *s, Schedule kind, int pp, int m, int v, char *err, int errcap) {
  memset(s, 0, sizeof *s);
  s->kind = kind;
  if (pp < 1) FAIL("pipeline size pp=%d must be at least 1", pp);
  if (pp > SCHED_MAXPP) FAIL("too many pipeline ranks pp=%d (limit is %d)", pp, SCHED_MAXPP);
  if (m < 1) FAIL("the number of microbatches (%d) must be at least 1", m);
  if (v < 1) FAIL("model chunks per rank v=%d must be at least 1", v);
  if (v > SCHED_MAXV) FAIL("too many model chunks per rank v=%d (limit is %d)", v, SCHED_MAXV);
  if (m > INT16_MAX) FAIL("too many microbatches m=%d (limit is %d)", m, INT16_MAX);
  switch (kind) {
  case SCHED_GPIPE:
  case SCHED_1F1B:
    if (v != 1)
      FAIL("the %s schedule has one model chunk per rank (v=%d given): use the interleaved "
           "schedule for v > 1", kind == SCHED_GPIPE ? "gpipe" : "1f1b", v);
    break;
  case SCHED_INTERLEAVED:
    if (v < 2)
      FAIL("the interleaved schedule needs at least 2 model chunks per rank (v=%d given): "
           "use 1f1b for one chunk", v);
    if (m % pp && m < pp)
      FAIL("the interleaved schedule needs the number of microbatches (%d) to be a multiple "
           "of pp=%d: use %d microbatches", m, pp, pp);
    if (m % pp)
      FAIL("the interleaved schedule needs the number of microbatches (%d) to be a multiple "
           "of pp=%d: use %d or %d microbatches", m, pp, m / pp * pp, (m / pp + 1) * pp);
    break;
  default:
    FAIL("unknown pipeline schedule %d", (int)kind);
  }
  s->pp = pp, s->m = m, s->v = v;
  int total = m * v;
  for (int r = 0; r < pp; r++) {
    s->n[r] = 2 * total;
    s->act[r] = malloc(sizeof(PipeAct) * (size_t)s->n[r]);
    if (!s->act[r]) {
      sched_free(s);
      FAIL("out of memory building the pipeline schedule");
    }
    if (kind == SCHED_GPIPE) {
      for (int i = 0; i < m; i++) s->act[r][i] = act(1, i, 0);
      for (int i = 0; i < m; i++) s->act[r][m + i] = act(0, i, 0);
    } else {
      int warm = kind == SCHED_1F1B ? pp - r - 1 : (pp - r - 1) * 2 + (v - 1) * pp;
      one_f_one_b(s->act[r], total, warm < total ? warm : total, pp, v);
    }
  }
  count_inflight(s);
  /* Self-check: a schedule we build must always run to completion. */
  if (sched_simulate(s, &s->makespan, err, errcap)) {
    sched_free(s);
    return -1;
  }
  return 0;
}

void sched_print(FILE *out, const PipeSched *s) {
  char buf[32];
  for (int r = 0; r < s->pp; r++) {
    for (int i = 0; i < s->n[r]; i++) {
      sched_act_str(s, s->act[r][i], buf, sizeof buf);
      fprintf(out, "%s%s", i ? " " : "", buf);
    }
    fputc('\n', out);
  }
}

/* ---- simulator ---- */

enum { NOT_DONE = INT_MAX };

typedef struct Sim {
  const PipeSched *s;
  int nvs;
  int *done;   /* [fwd][mb][vs]: completion time, NOT_DONE until then */
} Sim;

static int *done_at(Sim *sim, int fwd, int mb, int vs) {
  return &sim->done[((size_t)fwd * sim->s->m + (size_t)mb) * (size_t)sim->nvs + (size_t)vs];
}

/* The first unfinished dependency of action a on rank r at time t, or false. */
static bool blocked_on(Sim *sim, int r, PipeAct a, int t, PipeAct *dep, int *dep_rank) {
  const PipeSched *s = sim->s;
  int vs = a.chunk * s->pp + r;
  int need_vs[2], need_fwd[2], nd = 0;
  if (a.fwd) {
    if (vs > 0) need_fwd[nd] = 1, need_vs[nd++] = vs - 1;
  } else {
    need_fwd[nd] = 1, need_vs[nd++] = vs;
    if (vs < sim->nvs - 1) need_fwd[nd] = 0, need_vs[nd++] = vs + 1;
  }
  for (int i = 0; i < nd; i++) {
    if (*done_at(sim, need_fwd[i], a.mb, need_vs[i]) > t) {
      *dep = act(need_fwd[i], a.mb, need_vs[i] / s->pp);
      *dep_rank = need_vs[i] % s->pp;
      return true;
    }
  }
  return false;
}

int sched_simulate(const PipeSched *s, int *makespan, char *err, int errcap) {
  char an[32], dn[32];
  if (makespan) *makespan = 0;
  if (s->pp < 1 || s->pp > SCHED_MAXPP || s->m < 1 || s->v < 1 || s->v > SCHED_MAXV)
    FAIL("malformed schedule: pp=%d m=%d v=%d", s->pp, s->m, s->v);
  Sim sim = {s, s->pp * s->v, NULL};
  size_t ncell = 2 * (size_t)s->m * (size_t)sim.nvs;
  sim.done = malloc(ncell * sizeof(int));
  if (!sim.done) FAIL("out of memory simulating the pipeline schedule");
  int rc = -1, len = 0;

  /* Every (mb, vs) forward and backward exactly once, on the right rank.
   * done[] doubles as the occurrence count here. */
  memset(sim.done, 0, ncell * sizeof(int));
  for (int r = 0; r < s->pp; r++) {
    for (int i = 0; i < s->n[r]; i++) {
      PipeAct a = s->act[r][i];
      if (a.mb < 0 || a.mb >= s->m || a.chunk < 0 || a.chunk >= s->v) {
        err_add(err, errcap, &len,
                "rank %d action %d (%c mb %d chunk %d) is out of range (m=%d, v=%d)", r, i,
                a.fwd ? 'F' : 'B', a.mb, a.chunk, s->m, s->v);
        goto out;
      }
      int *c = done_at(&sim, a.fwd != 0, a.mb, a.chunk * s->pp + r);
      if (++*c > 1) {
        sched_act_str(s, a, an, sizeof an);
        err_add(err, errcap, &len, "rank %d runs %s twice (again at action %d)", r, an, i);
        goto out;
      }
    }
  }
  for (int r = 0; r < s->pp; r++)
    for (int c = 0; c < s->v; c++)
      for (int mb = 0; mb < s->m; mb++)
        for (int fwd = 1; fwd >= 0; fwd--)
          if (!*done_at(&sim, fwd, mb, c * s->pp + r)) {
            sched_act_str(s, act(fwd, mb, c), an, sizeof an);
            err_add(err, errcap, &len, "rank %d never runs %s", r, an);
            goto out;
          }

  for (size_t i = 0; i < ncell; i++) sim.done[i] = NOT_DONE;
  int pc[SCHED_MAXPP] = {0};
  long left = 0;
  for (int r = 0; r < s->pp; r++) left += s->n[r];
  int t = 0;
  while (left > 0) {
    /* Actions started at t finish at t+1 > t, so one pass is one time step. */
    int ran = 0;
    PipeAct dep;
    int dep_rank;
    for (int r = 0; r < s->pp; r++) {
      if (pc[r] == s->n[r]) continue;
      PipeAct a = s->act[r][pc[r]];
      if (blocked_on(&sim, r, a, t, &dep, &dep_rank)) continue;
      *done_at(&sim, a.fwd, a.mb, a.chunk * s->pp + r) = t + 1;
      pc[r]++, left--, ran++;
    }
    if (!ran) {
      err_add(err, errcap, &len, "pipeline schedule deadlocks at time %d:", t);
      const char *sep = " ";
      for (int r = 0; r < s->pp; r++) {
        if (pc[r] == s->n[r]) continue;
        PipeAct a = s->act[r][pc[r]];
        blocked_on(&sim, r, a, t, &dep, &dep_rank);
        sched_act_str(s, a, an, sizeof an);
        sched_act_str(s, dep, dn, sizeof dn);
        err_add(err, errcap, &len, "%srank %d waits at action %d (%s) for %s of rank %d", sep,
                r, pc[r], an, dn, dep_rank);
        sep = "; ";
      }
      goto out;
    }
    t++;
  }
  if (makespan) *makespan = t;
  rc = 0;
out:
  free(sim.done);
  return rc;
}

int sched_validate(const PipeSched *s, char *err, int errcap) {
  return sched_simulate(s, NULL, err, errcap);
}
