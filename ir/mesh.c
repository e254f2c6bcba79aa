/* mesh.c — device catalog and parallel plans (the strategy SPEC). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#define GB 1e9
#define TF 1e12

#define US 1e-6

/* Datasheet numbers (REFERENCES.md, vendor datasheets): dense peaks (bf16
 * tensor core, plain fp32, tf32 tensor core), memory and its bandwidth, the
 * launch cost of a kernel, then the node: devices, the intra-node link (per
 * device per direction) and its latency, NIC ports (per direction) and the
 * network's latency.  DGX A100: 8 HDR 200 Gb/s ports; DGX H100/H200: 8 NDR
 * 400 Gb/s.  `cpu` is one core of this project's machine (AMD EPYC Zen 5,
 * 2.6 GHz, AVX-512 with two 512-bit FMA pipes: 64 fp32 FLOP/cycle), ranks on
 * one node exchanging messages through shared memory; `shardc calibrate`
 * measures the real figures. */
static const DeviceSpec devices[] = {
    /* name            bf16       fp32        tf32      mem       mem_bw     launch   per link     link_bw  link_lat  nic_bw   net_lat  nics */
    {"cpu",           0.33 * TF, 0.166 * TF, 0,        16 * GB,  20 * GB,   2 * US,  1, "shm",     10 * GB,  1 * US,  25 * GB, 20 * US, 1},
    {"V100_SXM",      125 * TF,  15.7 * TF,  0,        32 * GB,  900 * GB,  5 * US,  8, "nvlink",  150 * GB, 3 * US,  12.5 * GB, 6 * US, 4},
    {"A100_SXM",      312 * TF,  19.5 * TF,  156 * TF, 80 * GB,  2039 * GB, 4 * US,  8, "nvswitch", 300 * GB, 3 * US, 25 * GB, 6 * US, 8},
    {"A100_SXM_40GB", 312 * TF,  19.5 * TF,  156 * TF, 40 * GB,  1555 * GB, 4 * US,  8, "nvswitch", 300 * GB, 3 * US, 25 * GB, 6 * US, 8},
    {"A100_PCIE",     312 * TF,  19.5 * TF,  156 * TF, 80 * GB,  1935 * GB, 4 * US,  8, "pcie",    32 * GB,  5 * US,  25 * GB, 6 * US, 4},
    {"H100_SXM",      989 * TF,  67 * TF,    494 * TF, 80 * GB,  3350 * GB, 3 * US,  8, "nvswitch", 450 * GB, 3 * US, 50 * GB, 5 * US, 8},
    {"H100_PCIE",     756 * TF,  51 * TF,    378 * TF, 80 * GB,  2000 * GB, 3 * US,  8, "pcie",    64 * GB,  5 * US,  50 * GB, 5 * US, 4},
    {"H200_SXM",      989 * TF,  67 * TF,    494 * TF, 141 * GB, 4800 * GB, 3 * US,  8, "nvswitch", 450 * GB, 3 * US, 50 * GB, 5 * US, 8},
    {"RTX4090",       165 * TF,  82.6 * TF,  82.6 * TF, 24 * GB, 1008 * GB, 3 * US,  8, "pcie",    32 * GB,  5 * US,  12.5 * GB, 8 * US, 1},
};

const DeviceSpec *ir_device_lookup(const char *name) {
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
    if (!strcmp(devices[i].name, name)) return &devices[i];
  return NULL;
}

void ir_device_names(char *buf, int cap) {
  int n = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof devices / sizeof devices[0] && n < cap; i++)
    n += snprintf(buf + n, (size_t)(cap - n), "%s%s", i ? ", " : "", devices[i].name);
}

void ir_mesh_defaults(Mesh *me) {
  const DeviceSpec *d = me->device;
  me->mem_bytes = d->mem_bytes;
  me->peak_bf16 = d->flops_bf16;
  me->peak_fp32 = d->flops_fp32;
  me->peak_tf32 = d->flops_tf32;
  me->mem_bw = d->mem_bw;
  me->launch_s = d->launch_s;
  me->link = d->link;
  me->intra_bw = d->link_bw;
  me->intra_lat = d->link_lat;
  me->nics = d->nics;
  /* the catalog node's ports shared by its devices */
  me->inter_bw = d->nic_bw * d->nics / d->per_node;
  me->inter_lat = d->net_lat;
}

/* ---- plans ---- */

bool ir_mesh_pp_crosses_nodes(const Mesh *me, int pp) {
  if (!me || pp <= 1 || me->nodes <= 1 || me->per_node <= 0) return false;
  int stride = me->ndev / pp;
  for (int r = 0; r < me->ndev; r++) {
    int peer = (r + stride) % me->ndev;
    if (r / me->per_node != peer / me->per_node) return true;
  }
  return false;
}

void plan_default(Plan *p) {
  memset(p, 0, sizeof *p);
  p->dp = p->tp = p->tp2d = p->sp = p->pp = 1;
  p->schedule = SCHED_1F1B;
  p->vchunks = 1;
}

#define ERR(...)                                \
  do {                                          \
    snprintf(err, (size_t)errcap, __VA_ARGS__); \
    return -1;                                  \
  } while (0)

static int parse_pos(const char *key, const char *val, int *out, char *err, int errcap) {
  char *end;
  errno = 0;
  long v = strtol(val, &end, 10);
  if (!*val || *end || (errno && errno != ERANGE) || v < 1)
    ERR("%s must be a positive integer, got '%s'", key, val);
  if (errno == ERANGE || v > 1 << 20) ERR("%s must be at most %d, got '%s'", key, 1 << 20, val);
  *out = (int)v;
  return 0;
}

int plan_parse_spec(const char *spec, Plan *p, char *err, int errcap) {
  if (!strcmp(spec, "auto")) {
    p->is_auto = true;
    return 0;
  }
  if (!*spec) ERR("empty strategy (use 'auto' or keys such as dp=2,tp=2)");
  char buf[512];
  if (strlen(spec) >= sizeof buf) ERR("strategy string too long (limit is %zu)", sizeof buf - 1);
  strcpy(buf, spec);
  /* every item key=value (or auto), none empty, none twice */
  for (const char *c = spec;; c++) {
    const char *e = strchr(c, ',');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    while (len && c[len - 1] == ' ') len--;
    while (len && *c == ' ') c++, len--;
    if (!len) ERR("an empty item in '%s' (items are joined by single commas, e.g. dp=2,tp=2)", spec);
    if (!e) break;
    c = e;
  }
  static const char *const keys[] = {"dp", "tp", "tp2d", "sp", "pp", "schedule", "mb", "zero", "recompute"};
  unsigned seen = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    for (char *te = tok + strlen(tok); te > tok && te[-1] == ' ';) *--te = 0;
    if (!strcmp(tok, "auto")) { /* auto,tp=2: search the rest */
      if (seen & (1u << 9)) ERR("'auto' is given twice in '%s'", spec);
      seen |= 1u << 9;
      p->is_auto = true;
      continue;
    }
    char *eq = strchr(tok, '=');
    if (!eq) ERR("'%s' is not key=value", tok);
    *eq = 0;
    const char *k = tok, *v = eq + 1;
    char *kend = eq;
    while (kend > tok && kend[-1] == ' ') *--kend = 0;
    while (*v == ' ') v++;
    for (char *vend = (char *)v + strlen(v); vend > v && vend[-1] == ' ';) *--vend = 0;
    for (unsigned q = 0; q < sizeof keys / sizeof keys[0]; q++)
      if (!strcmp(k, keys[q])) {
        if (seen & (1u << q)) ERR("'%s' is given twice in '%s'", k, spec);
        seen |= 1u << q;
      }
    if (!strcmp(k, "dp")) {
      if (parse_pos(k, v, &p->dp, err, errcap)) return -1;
      p->given |= PLAN_DP;
    } else if (!strcmp(k, "tp")) {
      if (parse_pos(k, v, &p->tp, err, errcap)) return -1;
      p->given |= PLAN_TP;
    } else if (!strcmp(k, "tp2d")) {
      char *x, *end;
      errno = 0;
      long a = strtol(v, &x, 10), b = *x == 'x' ? strtol(x + 1, &end, 10) : 0;
      if (errno || *x != 'x' || *end || !isdigit((unsigned char)v[0]) ||
          !isdigit((unsigned char)x[1]) || a < 1 || b < 1 || a > 1024 || b > 1024)
        ERR("tp2d must be QxQ with 1 <= Q <= 1024 (e.g. 2x2), got '%s'", v);
      if (a != b) ERR("tp2d grid must be square (SUMMA on a q x q grid), got %ldx%ld", a, b);
      p->tp2d = (int)a;
      p->given |= PLAN_TP2D;
    } else if (!strcmp(k, "sp")) {
      if (!strcmp(v, "megatron")) {
        p->sp_kind = SP_MEGATRON;
      } else if (!strncmp(v, "ring", 4)) {
        p->sp_kind = SP_RING;
        if (v[4] == ':') {
          if (parse_pos("sp=ring:N", v + 5, &p->sp, err, errcap)) return -1;
        } else if (v[4]) {
          ERR("sp must be ring, ring:N or megatron, got '%s'", v);
        } else {
          p->sp = 0; /* take what the mesh leaves */
        }
      } else if (!strcmp(v, "none")) {
        p->sp_kind = SP_NONE;
        p->sp = 1;
      } else {
        ERR("sp must be ring, ring:N, megatron or none, got '%s'", v);
      }
      p->given |= PLAN_SP;
    } else if (!strcmp(k, "pp")) {
      /* pp=N, or pp=N:a+b+... with each stage's number of layers */
      char num[32];
      const char *colon = strchr(v, ':');
      size_t len = colon ? (size_t)(colon - v) : strlen(v);
      if (len >= sizeof num) ERR("pp must be N or N:L+L+... (layers per stage), got '%s'", v);
      memcpy(num, v, len);
      num[len] = 0;
      if (parse_pos(k, num, &p->pp, err, errcap)) return -1;
      p->nstage_layers = 0;
      memset(p->stage_frac, 0, sizeof p->stage_frac);
      p->balance_memory = colon && !strcmp(colon + 1, "memory");
      for (const char *c = colon && !p->balance_memory ? colon + 1 : NULL; c;) {
        char *end;
        errno = 0;
        long L = strtol(c, &end, 10);
        bool half = false;
        int frac = 0;
        if (!errno && end != c && *end == '.') {
          /* a.5: half a layer more, the cut inside the next layer; a.25
           * (one or two digits): a quarter, the cut nearest that share of
           * its FLOPs */
          int nd = 0;
          while (nd < 3 && isdigit((unsigned char)end[1 + nd])) nd++;
          if (nd == 1) frac = 10 * (end[1] - '0');
          if (nd == 2) frac = 10 * (end[1] - '0') + (end[2] - '0');
          half = frac > 0;
          if (!half || nd > 2 || (end[1 + nd] && end[1 + nd] != '+'))
            ERR("pp=%s: a stage size is a whole number of layers or has one or two decimals (a.5: "
                "a layers and half of the next, the cut inside it; a.25: a quarter), e.g. "
                "pp=2:1.5+1.5",
                v);
          end += 1 + nd;
        }
        if (errno || end == c || !isdigit((unsigned char)*c) || L < 0 || (L < 1 && !half) ||
            L > 100000 || (*end && *end != '+'))
          ERR("pp=%s: the layers per stage must be positive numbers joined by '+' (whole, or a.5 "
              "with the cut inside a layer), e.g. pp=2:3+1 or pp=2:1.5+1.5 (or pp=N:memory)",
              v);
        if (p->nstage_layers == PLAN_MAXSTAGES)
          ERR("pp=%s: at most %d stages", v, PLAN_MAXSTAGES);
        p->stage_frac[p->nstage_layers] = (unsigned char)frac;
        p->stage_layers[p->nstage_layers++] = (int)L;
        c = *end ? end + 1 : NULL;
      }
      /* pp sizes, or pp x V under schedule=interleaved:V (checked against
       * the schedule in plan_resolve_keys, which may come later) */
      if (colon && !p->balance_memory &&
          p->nstage_layers % p->pp)
        ERR("pp=%s gives %d stage size%s for %d stages (sizes are joined by '+', not ',': "
            "e.g. pp=2:3+1; under schedule=interleaved:V, one size for each of the %d x V "
            "chunks)", v, p->nstage_layers, p->nstage_layers == 1 ? "" : "s", p->pp, p->pp);
      p->given |= PLAN_PP;
    } else if (!strcmp(k, "schedule")) {
      if (!strcmp(v, "gpipe")) {
        p->schedule = SCHED_GPIPE;
      } else if (!strcmp(v, "1f1b")) {
        p->schedule = SCHED_1F1B;
      } else if (!strncmp(v, "interleaved", 11)) {
        p->schedule = SCHED_INTERLEAVED;
        p->vchunks = 2;
        if (v[11] == ':') {
          if (parse_pos("interleaved:V", v + 12, &p->vchunks, err, errcap)) return -1;
          if (p->vchunks < 2) ERR("interleaved needs at least 2 chunks per device");
        } else if (v[11]) {
          ERR("schedule must be gpipe, 1f1b or interleaved[:V], got '%s'", v);
        }
      } else {
        ERR("schedule must be gpipe, 1f1b or interleaved[:V], got '%s'", v);
      }
      p->given |= PLAN_SCHED;
    } else if (!strcmp(k, "mb")) {
      if (parse_pos(k, v, &p->mb, err, errcap)) return -1;
      p->given |= PLAN_MB;
    } else if (!strcmp(k, "zero")) {
      if (strlen(v) != 1 || v[0] < '0' || v[0] > '3') ERR("zero must be 0, 1, 2 or 3, got '%s'", v);
      p->zero = v[0] - '0';
      p->given |= PLAN_ZERO;
    } else if (!strcmp(k, "recompute")) {
      /* one policy, or one per pipeline stage joined by '+' */
      p->nstage_recompute = 0;
      p->recompute = RECOMPUTE_NONE;
      for (const char *c = v; c;) {
        const char *e = strchr(c, '+');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        int r = -1;
        for (int q = 0; q <= RECOMPUTE_AUTO; q++)
          if (len == strlen(plan_recompute_name((Recompute)q)) &&
              !strncmp(c, plan_recompute_name((Recompute)q), len))
            r = q;
        if (r < 0)
          ERR("recompute must be none, selective, full or auto, or one of them per pipeline stage "
              "joined by '+' (e.g. full+selective), got '%s'", v);
        if (p->nstage_recompute == PLAN_MAXSTAGES) ERR("recompute=%s: at most %d stages", v, PLAN_MAXSTAGES);
        p->stage_recompute[p->nstage_recompute++] = (Recompute)r;
        if (r > (int)p->recompute) p->recompute = (Recompute)r;
        c = e ? e + 1 : NULL;
      }
      if (p->nstage_recompute == 1) p->nstage_recompute = 0;
      p->given |= PLAN_RECOMPUTE;
    } else {
      ERR("unknown strategy key '%s' (keys: dp, tp, tp2d, sp, pp, schedule, mb, zero, recompute)", k);
    }
  }
  return 0;
}

#define ERRK(k, ...)                            \
  do {                                          \
    if (keys) *keys = (k);                      \
    snprintf(err, (size_t)errcap, __VA_ARGS__); \
    return -1;                                  \
  } while (0)

int plan_resolve_keys(Plan *p, int ndev, char *err, int errcap, unsigned *keys) {
  if (keys) *keys = 0;
  if (p->is_auto) return 0;
  if (p->tp > 1 && p->tp2d > 1)
    ERRK(PLAN_TP2D, "tp and tp2d cannot both be used (pick 1D or 2D tensor parallelism)");
  if (p->sp_kind == SP_MEGATRON && p->tp < 2)
    ERRK(PLAN_SP, "sp=megatron splits the sequence inside a tensor-parallel group: it needs tp >= 2");
  if (p->schedule == SCHED_INTERLEAVED && p->pp < 2)
    ERRK(PLAN_SCHED, "the interleaved schedule needs pp >= 2");
  /* Every size is at most 2^20 and must divide ndev, so checking each one
   * against ndev first keeps the products below in range. */
  static const struct { unsigned bit; const char *name; } axes[] = {
      {PLAN_DP, "dp"}, {PLAN_TP, "tp"}, {PLAN_TP2D, "tp2d"}, {PLAN_SP, "sp"}, {PLAN_PP, "pp"}};
  const long sizes[] = {(p->given & PLAN_DP) ? p->dp : 1, p->tp, (long)p->tp2d * p->tp2d,
                        p->sp_kind == SP_RING ? p->sp : 1, p->pp};
  for (int i = 0; i < 5; i++)
    if (sizes[i] > ndev)
      ERRK(axes[i].bit, "%s=%ld is more than the %d device%s of the mesh", axes[i].name, sizes[i],
           ndev, ndev == 1 ? "" : "s");
  long fixed = (long)p->tp * p->tp2d * p->tp2d;
  if (fixed > ndev) ERRK(0, "tp*tp2d^2 = %ld is more than the %d devices of the mesh", fixed, ndev);
  fixed *= p->pp;
  if (fixed > ndev) ERRK(0, "tp*tp2d^2*pp = %ld is more than the %d devices of the mesh", fixed, ndev);
  long dp = (p->given & PLAN_DP) ? p->dp : 1;
  if (p->sp_kind == SP_RING && p->sp == 0) {
    long used = fixed * dp;
    if (used > ndev || ndev % used || ndev / used < 2)
      ERRK(PLAN_SP,
           "sp=ring: the mesh has no devices left for a ring (%d devices, other axes use %ld); "
           "use sp=ring:N",
           ndev, used);
    p->sp = (int)(ndev / used);
  }
  if (p->sp_kind != SP_RING) p->sp = 1;
  fixed *= p->sp;
  if (fixed > ndev) ERRK(0, "tp*tp2d^2*sp*pp = %ld is more than the %d devices of the mesh", fixed, ndev);
  if (!(p->given & PLAN_DP)) {
    if (ndev % fixed)
      ERRK(0, "tp*tp2d^2*sp*pp = %ld does not divide the mesh size %d", fixed, ndev);
    p->dp = (int)(ndev / fixed);
  }
  long total = fixed * p->dp;
  if (total != ndev) {
    char s[256];
    plan_str(p, s, sizeof s);
    ERRK(0, "strategy %s uses %ld devices but the mesh has %d (dp*tp*tp2d^2*sp*pp must equal it)",
         s, total, ndev);
  }
  if (p->nstage_layers && !p->balance_memory) {
    int want = p->schedule == SCHED_INTERLEAVED ? p->pp * p->vchunks : p->pp;
    if (p->nstage_layers != want) {
      if (p->schedule == SCHED_INTERLEAVED)
        ERRK(PLAN_PP,
             "pp=%d with schedule=interleaved:%d has %d chunks, but %d stage size%s %s given: give "
             "one for each chunk, in the schedule's order (each rank's first chunk, rank 0 first, "
             "then each rank's second, ...), e.g. pp=2:1+1.5+1.5+1 with interleaved:2",
             p->pp, p->vchunks, want, p->nstage_layers, p->nstage_layers == 1 ? "" : "s",
             p->nstage_layers == 1 ? "is" : "are");
      ERRK(PLAN_PP,
           "pp=%d gives %d stage sizes for %d stages (%d x %d sizes are for "
           "schedule=interleaved:%d, one a chunk)",
           p->pp, p->nstage_layers, p->pp, p->pp, p->nstage_layers / p->pp,
           p->nstage_layers / p->pp);
    }
  }
  if (p->nstage_recompute && p->nstage_recompute != p->pp)
    ERRK(PLAN_RECOMPUTE, "recompute gives %d policies (one per pipeline stage) but the plan has "
         "%d stage%s", p->nstage_recompute, p->pp, p->pp == 1 ? "" : "s");
  /* ZeRO shards over the ranks that split the data: dp, and the ring's sp */
  if (p->zero > 0 && p->dp * (p->sp_kind == SP_RING ? p->sp : 1) < 2 && (p->given & PLAN_ZERO))
    ERRK(PLAN_ZERO, "zero=%d shards over the data-parallel axis, which has size 1", p->zero);
  return 0;
}
#undef ERRK

int plan_resolve(Plan *p, int ndev, char *err, int errcap) {
  return plan_resolve_keys(p, ndev, err, errcap, NULL);
}

/* p as a SPEC, in one spelling for both: with `given` the keys the user
 * wrote (p->given), else dp and every key off its default. */
static void plan_spec(const Plan *p, bool given, char *buf, int cap) {
  int n = 0;
  buf[0] = 0;
#define KEY(bit, off_default) (given ? (p->given & (bit)) != 0 : (off_default))
#define ADD(...)                                                 \
  do {                                                           \
    if (n < cap) n += snprintf(buf + n, (size_t)(cap - n), __VA_ARGS__); \
  } while (0)
#define SEP (n ? "," : "")
  if (KEY(PLAN_DP, true)) ADD("%sdp=%d", SEP, p->dp);
  if (KEY(PLAN_TP, p->tp > 1)) ADD("%stp=%d", SEP, p->tp);
  if (KEY(PLAN_TP2D, p->tp2d > 1)) ADD("%stp2d=%dx%d", SEP, p->tp2d, p->tp2d);
  if (KEY(PLAN_SP, p->sp_kind != SP_NONE)) {
    if (p->sp_kind == SP_RING) ADD("%ssp=ring:%d", SEP, p->sp);
    else ADD("%ssp=%s", SEP, p->sp_kind == SP_MEGATRON ? "megatron" : "none");
  }
  if (KEY(PLAN_PP, p->pp > 1)) {
    ADD("%spp=%d", SEP, p->pp);
    for (int i = 0; i < p->nstage_layers; i++)
      ADD("%c%d%s", i ? '+' : ':', p->stage_layers[i],
          !p->stage_frac[i]           ? ""
          : p->stage_frac[i] % 10 == 0 ? arena_printf(".%d", p->stage_frac[i] / 10)
                                       : arena_printf(".%02d", p->stage_frac[i]));
    if (p->balance_memory) ADD(":memory");
  }
  if (KEY(PLAN_SCHED, p->pp > 1)) {
    if (p->schedule == SCHED_GPIPE) ADD("%sschedule=gpipe", SEP);
    if (p->schedule == SCHED_1F1B) ADD("%sschedule=1f1b", SEP);
    if (p->schedule == SCHED_INTERLEAVED) ADD("%sschedule=interleaved:%d", SEP, p->vchunks);
  }
  if (KEY(PLAN_MB, p->mb > 1)) ADD("%smb=%d", SEP, p->mb);
  if (KEY(PLAN_ZERO, p->zero != 0)) ADD("%szero=%d", SEP, p->zero);
  if (KEY(PLAN_RECOMPUTE, p->nstage_recompute || p->recompute != RECOMPUTE_NONE)) {
    if (p->nstage_recompute)
      for (int i = 0; i < p->nstage_recompute; i++)
        ADD("%s%s", i ? "+" : n ? ",recompute=" : "recompute=",
            plan_recompute_name(p->stage_recompute[i]));
    else
      ADD("%srecompute=%s", SEP, plan_recompute_name(p->recompute));
  }
#undef SEP
#undef ADD
#undef KEY
}

void plan_str(const Plan *p, char *buf, int cap) {
  if (p->is_auto) {
    snprintf(buf, (size_t)cap, "auto");
    return;
  }
  plan_spec(p, false, buf, cap);
}

int plan_stage_hundredths(const Plan *p) {
  int h = 0;
  for (int k = 0; k < p->nstage_layers; k++) h += 100 * p->stage_layers[k] + p->stage_frac[k];
  return h;
}

void plan_str_given(const Plan *p, char *buf, int cap) { plan_spec(p, true, buf, cap); }

Recompute plan_recompute_at(const Plan *p, int stage) {
  if (!p->nstage_recompute) return p->recompute;
  return p->stage_recompute[(p->pp > 0 ? stage % p->pp : 0) % p->nstage_recompute];
}

const char *plan_recompute_name(Recompute r) {
  static const char *const names[] = {"none", "selective", "full", "auto"};
  return r >= RECOMPUTE_NONE && r <= RECOMPUTE_AUTO ? names[r] : "?";
}
