/* test_schedule.c — pipeline schedules: every GPipe, 1F1B and interleaved
 * order for small pp, m, v runs to completion under the simulator, holds
 * the expected number of microbatches in flight, and takes the expected
 * time; broken orders and bad sizes are reported. */
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

static int imin(int a, int b) { return a < b ? a : b; }

static char err[1024];

static const char *printed(const PipeSched *s) {
  static char buf[4096];
  FILE *f = fmemopen(buf, sizeof buf, "w");
  sched_print(f, s);
  fclose(f);
  return buf;
}

/* Expect sched_build to fail with a message containing `needle`. */
static void build_fails(Schedule k, int pp, int m, int v, const char *needle) {
  PipeSched s;
  err[0] = 0;
  ASSERT(-1, sched_build(&s, k, pp, m, v, err, sizeof err));
  ASSERT_CONTAINS(needle, err);
  sched_free(&s);
}

static void sweep(void) {
  int built = 0, bad = 0;
  for (int pp = 1; pp <= 8; pp++)
    for (int m = 1; m <= 16; m++) {
      PipeSched g, f;
      int rg = sched_build(&g, SCHED_GPIPE, pp, m, 1, err, sizeof err);
      if (rg) fprintf(stderr, "gpipe pp=%d m=%d: %s\n", pp, m, err);
      int rf = sched_build(&f, SCHED_1F1B, pp, m, 1, err, sizeof err);
      if (rf) fprintf(stderr, "1f1b pp=%d m=%d: %s\n", pp, m, err);
      bad += rg != 0 || rf != 0;
      if (rg || rf) continue;
      built += 2;
      bad += sched_validate(&g, err, sizeof err) != 0;
      bad += sched_validate(&f, err, sizeof err) != 0;
      /* Both: a bubble of pp-1 forwards and pp-1 backwards. */
      bad += g.makespan != 2 * (m + pp - 1);
      bad += f.makespan != 2 * (m + pp - 1);
      for (int r = 0; r < pp; r++) {
        bad += g.n[r] != 2 * m || f.n[r] != 2 * m;
        bad += g.inflight[r][0] != m || g.inflight_rank[r] != m;
        bad += f.inflight[r][0] != imin(pp - r, m) || f.inflight_rank[r] != imin(pp - r, m);
      }
      if (m % pp == 0)
        for (int v = 2; v <= 4; v++) {
          PipeSched s;
          if (sched_build(&s, SCHED_INTERLEAVED, pp, m, v, err, sizeof err)) {
            fprintf(stderr, "interleaved pp=%d m=%d v=%d: %s\n", pp, m, v, err);
            bad++;
            continue;
          }
          built++;
          bad += sched_validate(&s, err, sizeof err) != 0;
          /* Megatron's bubble: pp-1 forward/backward pairs of one chunk,
           * (pp-1)/v of the 1F1B bubble in whole-stage units. */
          if (s.makespan != 2 * m * v + 2 * (pp - 1)) {
            fprintf(stderr, "interleaved pp=%d m=%d v=%d: makespan %d\n", pp, m, v, s.makespan);
            bad++;
          }
          for (int r = 0; r < pp; r++) {
            int warm = (pp - r - 1) * 2 + (v - 1) * pp;
            bad += s.n[r] != 2 * m * v;
            bad += s.inflight_rank[r] != imin(warm + 1, m * v);
            int sum = 0;
            for (int c = 0; c < v; c++) sum += s.inflight[r][c];
            bad += sum < s.inflight_rank[r];
          }
          sched_free(&s);
        }
      sched_free(&g);
      sched_free(&f);
    }
  ASSERT(0, bad);
  ASSERT(2 * 8 * 16 + 3 * (16 + 8 + 5 + 4 + 3 + 2 + 2 + 2), built);
}

static void orders(void) {
  PipeSched s;
  ASSERT(0, sched_build(&s, SCHED_1F1B, 2, 3, 1, err, sizeof err));
  ASSERT_STR("F0 F1 B0 F2 B1 B2\nF0 B0 F1 B1 F2 B2\n", printed(&s));
  sched_free(&s);

  ASSERT(0, sched_build(&s, SCHED_GPIPE, 2, 3, 1, err, sizeof err));
  ASSERT_STR("F0 F1 F2 B0 B1 B2\nF0 F1 F2 B0 B1 B2\n", printed(&s));
  sched_free(&s);

  /* 1F1B with fewer microbatches than stages: no steady phase at rank 0. */
  ASSERT(0, sched_build(&s, SCHED_1F1B, 4, 2, 1, err, sizeof err));
  ASSERT_STR("F0 F1 B0 B1\nF0 F1 B0 B1\nF0 F1 B0 B1\nF0 B0 F1 B1\n", printed(&s));
  ASSERT(2, s.inflight[0][0]);
  ASSERT(1, s.inflight[3][0]);
  sched_free(&s);

  /* Interleaved, pp=2 m=4 v=2: rank 0 warms up with (2-0-1)*2 + 1*2 = 4
   * forwards (mb 0,1 of chunk 0, then chunk 1), rank 1 with 2; backwards
   * start at the last chunk. */
  ASSERT(0, sched_build(&s, SCHED_INTERLEAVED, 2, 4, 2, err, sizeof err));
  ASSERT_STR("F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0\n"
             "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0\n",
             printed(&s));
  ASSERT(5, s.inflight_rank[0]);
  ASSERT(3, s.inflight_rank[1]);
  ASSERT(2 * 4 * 2 + 2, s.makespan);
  sched_free(&s);

  /* Interleaving shrinks the bubble: compare in whole-stage time units
   * (an interleaved action is 1/v of a stage). */
  static const int cases[][3] = {{2, 4, 2}, {4, 8, 2}, {4, 8, 4}, {8, 16, 2}, {8, 8, 4}};
  for (int i = 0; i < 5; i++) {
    int pp = cases[i][0], m = cases[i][1], v = cases[i][2];
    PipeSched a, b;
    ASSERT(0, sched_build(&a, SCHED_1F1B, pp, m, 1, err, sizeof err));
    ASSERT(0, sched_build(&b, SCHED_INTERLEAVED, pp, m, v, err, sizeof err));
    ASSERT(1, b.makespan < v * a.makespan);
    ASSERT(2 * (pp - 1) * v, v * a.makespan - 2 * m * v);   /* 1F1B bubble, scaled */
    ASSERT(2 * (pp - 1), b.makespan - 2 * m * v);          /* interleaved: v times less */
    sched_free(&a);
    sched_free(&b);
  }
}

static void errors(void) {
  build_fails(SCHED_1F1B, 0, 4, 1, "pp=0");
  build_fails(SCHED_1F1B, 65, 4, 1, "limit is 64");
  build_fails(SCHED_GPIPE, 2, 0, 1, "microbatches (0)");
  build_fails(SCHED_INTERLEAVED, 2, 4, 9, "limit is 8");
  build_fails(SCHED_GPIPE, 2, 4, 2, "use the interleaved schedule");
  build_fails(SCHED_1F1B, 2, 4, 2, "one model chunk per rank");
  build_fails(SCHED_INTERLEAVED, 2, 4, 1, "at least 2 model chunks");
  build_fails(SCHED_INTERLEAVED, 4, 6, 2, "multiple of pp=4: use 4 or 8 microbatches");
  build_fails(SCHED_INTERLEAVED, 4, 3, 2, "use 4 microbatches");
  build_fails((Schedule)7, 2, 4, 1, "unknown pipeline schedule");

  /* Broken orders. */
  PipeSched s;
  ASSERT(0, sched_build(&s, SCHED_1F1B, 2, 2, 1, err, sizeof err));
  PipeAct t = s.act[0][0];   /* rank 0: B0 F1 F0 B1: B0 needs its own F0 first */
  s.act[0][0] = s.act[0][2], s.act[0][2] = t;
  ASSERT(-1, sched_validate(&s, err, sizeof err));
  ASSERT_CONTAINS("deadlocks at time 0", err);
  ASSERT_CONTAINS("rank 0 waits at action 0 (B0) for F0 of rank 0", err);
  ASSERT_CONTAINS("rank 1 waits at action 0 (F0) for F0 of rank 0", err);
  s.act[0][2] = s.act[0][0], s.act[0][0] = t;
  ASSERT(0, sched_validate(&s, err, sizeof err));

  t = s.act[1][0];           /* rank 1: B0 before its own F0 */
  s.act[1][0] = s.act[1][1], s.act[1][1] = t;
  ASSERT(-1, sched_validate(&s, err, sizeof err));
  ASSERT_CONTAINS("rank 1 waits at action 0 (B0) for F0 of rank 1", err);
  s.act[1][1] = s.act[1][0], s.act[1][0] = t;

  t = s.act[0][1];
  s.act[0][1] = s.act[0][0];
  ASSERT(-1, sched_validate(&s, err, sizeof err));
  ASSERT_STR("rank 0 runs F0 twice (again at action 1)", err);
  s.act[0][1] = t;

  s.n[1]--;
  ASSERT(-1, sched_validate(&s, err, sizeof err));
  ASSERT_STR("rank 1 never runs B1", err);
  s.n[1]++;

  s.act[0][3].mb = 5;
  ASSERT(-1, sched_validate(&s, err, sizeof err));
  ASSERT_CONTAINS("rank 0 action 3", err);
  ASSERT_CONTAINS("out of range", err);
  s.act[0][3].mb = 1;
  int ms = 0;
  ASSERT(0, sched_simulate(&s, &ms, err, sizeof err));
  ASSERT(6, ms);

  /* A short buffer is cut with "...". */
  char small[24];
  t = s.act[0][0];
  s.act[0][0] = s.act[0][2], s.act[0][2] = t;
  ASSERT(-1, sched_validate(&s, small, sizeof small));
  ASSERT(23, (int)strlen(small));
  ASSERT_STR("...", small + 20);
  sched_free(&s);
  sched_free(&s);   /* twice is harmless */
}

int main(void) {
  sweep();
  orders();
  errors();
  TEST_MAIN_END();
}
