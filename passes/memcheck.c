/* memcheck.c — the plan against the device: a rank whose planned peak
 * (memplan's arena, Module.rank_mem) exceeds the mesh device's memory is a
 * compile error with the numbers, what dominates and what would help, so
 * that a plan that cannot run never reaches `arena: cannot allocate`.  The
 * device's memory is the mesh's `memory =` or the device catalog's
 * (ir/mesh.c); `--no-memory-check` (Module.no_memory_check) skips it. */
#include <string.h>

#include "passes.h"

typedef struct MemPart {
  const char *what;
  int64_t bytes;
} MemPart;

static const char *size_str(double b) {
  char c[32];
  report_commas(c, sizeof c, (int64_t)b);
  return arena_printf("%s bytes (%s)", c, report_size(b));
}

static bool same_loc(SrcLoc a, SrcLoc b) {
  return a.file == b.file && a.line == b.line && a.col == b.col;
}

/* "pipeline rank 1 (blocks.2 .. blocks.3, model ops)"; "every rank" without
 * a pipeline. */
static const char *who(const Module *m, int r) {
  int pp = m->train.plan.pp;
  if (m->nstages <= 1) return "every rank";
  if (m->nstages > pp)
    return arena_printf("pipeline rank %d (its %d interleaved chunks)", r, m->nstages / pp);
  const char *d = m->stage_desc[r] ? m->stage_desc[r] : "";
  const char *semi = strchr(d, ';');
  return arena_printf("pipeline rank %d (%s)", r, semi ? arena_strndup(d, (size_t)(semi - d)) : d);
}

/* What would bring the largest part down, for this plan (only what runs:
 * no ring attention with pp or tp2d). */
static const char *hints(const Module *m, const char *top) {
  const TrainCfg *t = &m->train;
  const Plan *p = &t->plan;
  int group = p->dp * (p->sp_kind == SP_RING ? p->sp : 1);   /* ranks sharing ZeRO shards */
  char *h = arena_strdup("");
#define HINT(...) h = arena_printf("%s%s%s", h, *h ? "; " : "", arena_printf(__VA_ARGS__))
  bool stash = !strcmp(top, "pipeline stash");
  if (strcmp(top, "activations") && !stash) {
    const char *zw = !strcmp(top, "params") ? "parameters, gradients and optimizer state"
                   : !strcmp(top, "grads") ? "gradients and optimizer state" : "optimizer state";
    int zneed = !strcmp(top, "params") ? 3 : !strcmp(top, "grads") ? 2 : 1;
    if (group > 1 && p->zero < zneed)
      HINT("zero=%d shards the %s over the %d data-parallel ranks", zneed, zw, group);
    else if (group > 1 && p->zero < 3)
      HINT("zero=%d shards more of the model state over the %d data-parallel ranks", p->zero + 1,
           group);
    HINT("tp=N or pp=N split the parameters and their state across devices");
  } else {
    if (t->microbatch > 1)
      HINT("a smaller microbatch (now %lld rows; batch = dp x microbatch x mb)",
           (long long)t->microbatch);
    if (stash && p->schedule == SCHED_GPIPE)
      HINT("schedule=1f1b keeps at most pp microbatches in flight (GPipe keeps all %d)", p->mb);
    HINT("tp=N (with sp=megatron)%s%s split the activations across devices",
         p->pp == 1 && p->tp2d == 1 ? ", sp=ring:N" : "", stash ? "" : " or pp=N");
    if (p->recompute == RECOMPUTE_AUTO)
      HINT("(recompute=auto recomputes all it can already)");
    else if (p->recompute != RECOMPUTE_FULL || p->nstage_recompute)
      HINT("%s reruns forward ops in the backward instead of holding their outputs",
           p->recompute == RECOMPUTE_NONE ? "recompute=selective (norms, activations) or full (whole layers)"
                                          : "recompute=full (whole layers)");
  }
#undef HINT
  return h;
}

int plan_memory_check(Module *m, int scale) {
  const TrainCfg *t = &m->train;
  const Mesh *me = t->mesh;
  /* (strategy auto has no plan to hold to the device yet) */
  if (m->no_memory_check || !me || !m->planned || me->mem_bytes <= 0 || t->plan.is_auto) return 0;
  int pp = m->nstages > 1 ? t->plan.pp : 1, worst = 0, over = 0;
  for (int r = 0; r < pp; r++) {
    if ((double)m->rank_mem[r].arena_bytes * scale > me->mem_bytes) over++;
    if (m->rank_mem[r].arena_bytes > m->rank_mem[worst].arena_bytes) worst = r;
  }
  if (!over) return 0;

  const MemPlan *mp = &m->rank_mem[worst];
  int64_t stash = mp->arena_bytes - mp->persistent_bytes - mp->transient_peak;
  MemPart part[6] = {{"activations", mp->transient_peak},
                     {"optimizer state", mp->optstate_bytes},
                     {"params", mp->param_bytes},
                     {"grads", mp->grad_bytes},
                     {"pipeline stash", stash},
                     {memplan_wcopy_label(mp), mp->wcopy_bytes}};
  /* largest first (a stable insertion sort of six) */
  for (int i = 1; i < 6; i++)
    for (int j = i; j > 0 && part[j].bytes > part[j - 1].bytes; j--) {
      MemPart x = part[j];
      part[j] = part[j - 1];
      part[j - 1] = x;
    }
  char *parts = arena_strdup("");
  for (int i = 0; i < 6; i++)
    if (part[i].bytes > 0)
      parts = arena_printf("%s%s%s %s (%.0f%%)", parts, *parts ? ", " : "", part[i].what,
                           report_size((double)part[i].bytes * scale),
                           100.0 * (double)part[i].bytes / (double)mp->arena_bytes);

  const char *msg = arena_printf(
      "the plan does not fit in device memory: %s needs %s, but a device of mesh '%s' (%s) has %s%s",
      who(m, worst), size_str((double)mp->arena_bytes * scale), me->name, me->device->name,
      size_str(me->mem_bytes),
      over > 1 ? arena_printf("; %d of the %d pipeline ranks are over", over, pp) : "");
  /* At the strategy, else at the mesh (its memory item), else at the train
   * block; none when all come from the command line. */
  SrcLoc at = t->plan_loc.file ? t->plan_loc : me->mem_loc.file ? me->mem_loc
            : me->loc.file ? me->loc : t->loc;
  if (at.file)
    diag_error(at, "%s", msg);
  else
    diag_fatal_noloc("%s", msg);
  diag_note((SrcLoc){0}, "it holds %s", parts);
  if (me->mem_from_flag) {
    diag_note((SrcLoc){0}, "--memory gives each device %s", report_size(me->mem_bytes));
  } else if (me->mem_loc.file) {
    if (!same_loc(at, me->mem_loc))
      diag_note(me->mem_loc, "mesh '%s' gives each device %s here", me->name,
                report_size(me->mem_bytes));
  } else {
    diag_note(me->loc.file && !same_loc(at, me->loc) ? me->loc : (SrcLoc){0},
              "%s: %s in the device catalog (ir/mesh.c); `memory = SIZE` in a mesh "
              "declaration sets another", me->device->name, report_size(me->mem_bytes));
  }
  diag_note((SrcLoc){0}, "to fit, try: %s; or --no-memory-check to compile it anyway",
            hints(m, part[0].what));
  return -1;
}
