/* main.c — the shardc driver: subcommands, flags, and the pass list. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cg.h"
#include "cost.h"
#include "rankprog.h"
#include "passes.h"
#include "sema.h"

static const char *usage_main =
    "usage: shardc <command> [options] MODEL.shard\n"
    "\n"
    "commands:\n"
    "  check     parse and check a model; diagnostics only\n"
    "  compile   check, lower and run the passes; print IR or the plan\n"
    "  build     compile, then build the training program DIR/train with the C compiler\n"
    "  explore   rank parallel plans by the cost model (not available yet)\n"
    "\n"
    "Run 'shardc <command> --help' for a command's options.  'shardc --version' prints the version.\n";

static const char *usage_check =
    "usage: shardc check MODEL.shard [--target cpu|cuda] [--mesh NAME|SPEC] [--strategy SPEC|auto]\n"
    "                    [--model NAME]\n"
    "\n"
    "Parses MODEL.shard, checks names, shapes, meshes and the strategy, and reports\n"
    "diagnostics as file:line:col.  Exit 0 when clean, 1 on errors.\n"
    "\n"
    "  --mesh NAME|SPEC     a mesh declared in the file, or N, NODESxPER_NODE, optionally :DEVICE\n"
    "  --strategy SPEC      e.g. dp=2,tp=2,sp=ring,pp=2,schedule=1f1b,mb=4,zero=1,recompute=selective\n"
    "                       (pp=N:a+b+... gives each pipeline stage's number of layers)\n"
    "  --model NAME         the model to check when the file has several\n"
    "  --target cpu|cuda    code generator target (default cpu; cuda is not generated yet)\n"
    "  -w                   do not print warnings\n"
    "  --time-report        print time per phase and peak memory to stderr\n";

static const char *usage_compile =
    "usage: shardc compile MODEL.shard [-o DIR] [--target cpu|cuda] [--mesh NAME|SPEC]\n"
    "                      [--strategy SPEC|auto] [--model NAME] [--emit=ir|program|plan|c]\n"
    "                      [--dump-after=PASS]\n"
    "\n"
    "  --emit=ir            print the IR after all passes\n"
    "  --emit=program       print each pipeline rank's per-rank program: instructions over\n"
    "                       arena offsets, its schedule and its step\n"
    "  --emit=plan          print the parallel plan summary (the default)\n"
    "  --emit=c             print the generated program (target cpu: C)\n"
    "  --dump-after=PASS    print the IR after PASS (see --list-passes)\n"
    "  --profile FILE       the hardware model measured by 'shardc calibrate' (default: the\n"
    "                       mesh's catalog figures), for the predicted times of --emit=plan\n"
    "  --list-passes        list the passes in pipeline order\n"
    "  -o DIR               output directory for generated code\n"
    "  --precision=fp64     with --emit=c: double arithmetic, for gradient checks\n"
    "  (and the options of 'shardc check')\n";

static const char *usage_build =
    "usage: shardc build MODEL.shard [-o DIR] [--target cpu] [--mesh NAME|SPEC]\n"
    "                    [--strategy SPEC] [--model NAME] [--precision=fp64]\n"
    "\n"
    "Compiles MODEL.shard, writes the training program DIR/model.c and builds it\n"
    "with the system C compiler (mpicc when the plan has several ranks) against\n"
    "libshardrt and BLAS into DIR/train.  DIR defaults to out/MODEL_NAME.\n"
    "Run DIR/train --help for its flags (--steps, --seed, --data, --load, --save,\n"
    "--save-every, --log, --quiet); launch it with mpirun -np MESH_SIZE.\n"
    "fp32 plans with dp=N, mb=N, zero=1|2|3, tp=N, tp2d=QxQ (2D tensor\n"
    "parallelism), sp=megatron, sp=ring:N and pp=N with schedule=gpipe|1f1b|\n"
    "interleaved:V, in any mix, are implemented so far (not yet: ZeRO with\n"
    "interleaved pipelines, tp2d with sp).\n"
    "\n"
    "  -o DIR               output directory (created if missing)\n"
    "  --precision=fp64     build in double precision (for gradient checks:\n"
    "                       DIR/train --gradcheck N)\n"
    "  SHARDC_CC, SHARDC_CFLAGS   override the C compiler, add flags\n"
    "  (and the options of 'shardc check')\n";

typedef struct Opts {
  const char *cmd;
  const char *file;
  const char *outdir;
  const char *target;
  const char *emit;
  const char *dump_after;
  const char *precision;
  const char *profile;    /* --profile FILE: calibrated hardware model */
  SemaOptions sema;
  int list_passes;
  int no_warn;
  int time_report;
} Opts;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int usage_error(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "shardc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 1;
}

/* Accepts --flag=value and --flag value. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag) {
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n)) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] == 0) {
    if (*i + 1 >= argc) return "";
    return argv[++*i];
  }
  return NULL;
}

static int parse_opts(int argc, char **argv, Opts *o, const char *usage) {
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!strcmp(a, "-w")) {
      o->no_warn = 1;
    } else if (!strcmp(a, "--time-report")) {
      o->time_report = 1;
    } else if (!strcmp(a, "--list-passes")) {
      o->list_passes = 1;
    } else if ((v = flag_value(argc, argv, &i, "--mesh"))) {
      if (!*v) return usage_error(usage, "%s needs a value", "--mesh");
      o->sema.mesh = v;
    } else if ((v = flag_value(argc, argv, &i, "--strategy"))) {
      if (!*v) return usage_error(usage, "%s needs a value", "--strategy");
      o->sema.strategy = v;
    } else if ((v = flag_value(argc, argv, &i, "--model"))) {
      if (!*v) return usage_error(usage, "%s needs a value", "--model");
      o->sema.model = v;
    } else if (strcmp(o->cmd, "check") && (v = flag_value(argc, argv, &i, "--emit"))) {
      if (strcmp(v, "ir") && strcmp(v, "program") && strcmp(v, "plan") && strcmp(v, "c"))
        return usage_error(usage, "--emit must be ir, program, plan or c, got '%s'", v);
      o->emit = v;
    } else if (strcmp(o->cmd, "check") && (v = flag_value(argc, argv, &i, "--dump-after"))) {
      o->dump_after = v;
    } else if (strcmp(o->cmd, "check") && (v = flag_value(argc, argv, &i, "--profile"))) {
      if (!*v) return usage_error(usage, "%s needs a file", "--profile");
      o->profile = v;
    } else if ((v = flag_value(argc, argv, &i, "--target"))) {
      if (strcmp(v, "cpu") && strcmp(v, "cuda"))
        return usage_error(usage, "--target must be cpu or cuda, got '%s'", v);
      o->target = v;
    } else if (strcmp(o->cmd, "check") && (v = flag_value(argc, argv, &i, "--precision"))) {
      if (strcmp(v, "fp32") && strcmp(v, "fp64"))
        return usage_error(usage, "--precision must be fp32 or fp64, got '%s'", v);
      o->precision = v;
    } else if (strcmp(o->cmd, "check") && (v = flag_value(argc, argv, &i, "-o"))) {
      if (!*v) return usage_error(usage, "%s needs a directory", "-o");
      o->outdir = v;
    } else if (a[0] == '-' && a[1]) {
      return usage_error(usage, "unknown option '%s'", a);
    } else if (o->file) {
      return usage_error(usage, "more than one input file ('%s')", a);
    } else {
      o->file = a;
    }
  }
  if (o->list_passes) return 0;
  if (!o->file) return usage_error(usage, "%s", "no input file");
  return 0;
}

/* The IR; with pipeline stages, each stage's graph after the other. */
static void print_ir(Module *m) {
  if (m->nstages <= 1) {
    ir_print(stdout, m->graph);
    return;
  }
  for (int s = 0; s < m->nstages; s++) {
    printf("# pipeline stage %d of %d: %s\n", s, m->nstages, m->stage_desc[s]);
    ir_print(stdout, m->stages[s]);
  }
}

/* The hardware model of the plan's mesh and precision, from --profile when given. */
static int hw_model(const Opts *o, const Module *m, HwModel *hw) {
  cost_hw_from_mesh(hw, m->train.mesh, m->train.precision);
  if (o->profile) {
    char err[256];
    if (cost_load_profile(hw, o->profile, err, sizeof err)) {
      fprintf(stderr, "shardc: error: --profile %s: %s\n", o->profile, err);
      return -1;
    }
  }
  return 0;
}

static int run(Opts *o) {
  if (o->list_passes) {
    for (int i = 0; i < pass_count; i++) printf("%-8s %s\n", pass_list[i].name, pass_list[i].summary);
    return 0;
  }
  int dump_idx = -1;
  if (o->dump_after) {
    for (int i = 0; i < pass_count; i++)
      if (!strcmp(pass_list[i].name, o->dump_after)) dump_idx = i;
    if (dump_idx < 0) {
      char names[256] = "";
      for (int i = 0; i < pass_count; i++) {
        strcat(names, i ? ", " : "");
        strcat(names, pass_list[i].name);
      }
      fprintf(stderr, "shardc: error: unknown pass '%s' for --dump-after (passes: %s)\n",
              o->dump_after, names);
      return 1;
    }
  }
  /* A target that generates nothing yet is refused before any work, by every
   * command, from the one table of targets (codegen/emit.c). */
  if (o->target && !cg_target(o->target)) return 1;
  diag_set_quiet_warnings(o->no_warn);
  double t0 = now_ms();
  SrcFile *f = src_load(o->file);
  if (!f) {
    fprintf(stderr, "shardc: error: cannot open '%s': %s\n", o->file, strerror(errno));
    return 1;
  }
  if (memchr(f->text, 0, f->len)) {
    fprintf(stderr, "shardc: error: '%s' contains a NUL byte; is it a text file?\n", o->file);
    return 1;
  }
  Program *prog = ast_parse(f);
  double t1 = now_ms();
  if (!prog || diag_error_count()) return 1;
  Module *m = frontend_run(prog, &o->sema);
  double t2 = now_ms();
  if (!m || diag_error_count()) return 1;
  if (!m->graph) {
    if (!strcmp(o->cmd, "check")) return 0;
    fprintf(stderr, "shardc: error: '%s' declares no model to compile\n", o->file);
    return 1;
  }
  for (int i = 0; i < pass_count; i++) {
    if (pass_list[i].run(m) || diag_error_count()) return 1;
#ifdef SHARDC_DEBUG
    /* Debug builds hold every pass to the verifier. */
    if (ir_verify(m->graph)) {
      fprintf(stderr, "shardc: internal error: the IR is invalid after pass '%s'\n",
              pass_list[i].name);
      return 2;
    }
#endif
    if (i == dump_idx) print_ir(m);
  }
  if (o->time_report) {
    double t3 = now_ms();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "time: parse %.2f ms, check+lower %.2f ms, passes %.2f ms, total %.2f ms; "
            "%d nodes; peak RSS %.1f MiB; arena %.1f MiB\n",
            t1 - t0, t2 - t1, t3 - t2, t3 - t0, m->graph->nodes.len, ru.ru_maxrss / 1024.0,
            arena_bytes() / 1048576.0);
  }
  if (!strcmp(o->cmd, "check")) return 0;
  if (o->dump_after) return 0;
  CgOptions cgo = {.f64 = o->precision && !strcmp(o->precision, "fp64")};
  const char *target = o->target ? o->target : "cpu";
  if (!strcmp(o->cmd, "build")) {
    const char *dir = o->outdir ? o->outdir : arena_printf("out/%s", m->graph->model);
    return cg_build(m, dir, target, &cgo) ? 1 : 0;
  }
  if (o->emit && !strcmp(o->emit, "c")) return cg_emit(stdout, m, target, &cgo) ? 1 : 0;
  if (o->emit && !strcmp(o->emit, "program"))
    prog_print(stdout, m);
  else if (o->emit && !strcmp(o->emit, "ir"))
    print_ir(m);
  else {
    report_plan(stdout, m, "");
    HwModel hw;
    if (hw_model(o, m, &hw)) return 1;
    cost_report(stdout, m, &hw, "");
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_main, stderr);
    return 1;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("shardc %s\n", SHARDC_VERSION);
    return 0;
  }
  Opts o = {0};
  o.cmd = cmd;
  if (!strcmp(cmd, "check")) {
    if (parse_opts(argc, argv, &o, usage_check)) return 1;
  } else if (!strcmp(cmd, "compile")) {
    if (parse_opts(argc, argv, &o, usage_compile)) return 1;
  } else if (!strcmp(cmd, "build")) {
    if (parse_opts(argc, argv, &o, usage_build)) return 1;
  } else if (!strcmp(cmd, "explore")) {
    if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      printf("shardc %s: not available yet in this version.\n", cmd);
      return 0;
    }
    fprintf(stderr, "shardc: error: '%s' is not available yet in this version (the code "
                    "generator and cost model come next); use 'shardc compile'\n", cmd);
    return 1;
  } else {
    fprintf(stderr, "shardc: error: unknown command '%s'\n%s", cmd, usage_main);
    return 1;
  }
  int rc = run(&o);
  fflush(stdout);
  arena_free_all();
  return rc;
}
