/* main.c — the shardc driver: subcommands, flags, and the pass list. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "cg.h"
#include "cost.h"
#include "explore.h"
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
    "  explore   rank parallel plans by the cost model (predicted step time, memory)\n"
    "  calibrate measure this machine (GEMM, memory bandwidth, collectives) into a profile\n"
    "\n"
    "Run 'shardc <command> --help' for a command's options.  'shardc --version' prints the version.\n";

static const char *usage_check =
    "usage: shardc check MODEL.shard [--target cpu|cuda] [--mesh NAME|SPEC] [--strategy SPEC|auto]\n"
    "                    [--model NAME] [--memory SIZE] [--no-memory-check]\n"
    "\n"
    "Parses MODEL.shard, checks names, shapes, meshes and the strategy, runs the passes\n"
    "and reports as file:line:col every error 'shardc build' would give for the same\n"
    "target and flags, short of the C compiler's own.  Exit 0 when clean, 1 on errors.\n"
    "\n"
    "  --mesh NAME|SPEC     a mesh declared in the file, or N, NODESxPER_NODE, optionally :DEVICE\n"
    "  --strategy SPEC      e.g. dp=2,tp=2,sp=ring,pp=2,schedule=1f1b,mb=4,zero=1,recompute=selective\n"
    "                       (pp=N:a+b+... gives each pipeline stage's number of layers)\n"
    "  --model NAME         the model to check when the file has several\n"
    "  --target cpu|cuda    code generator target (default cpu): cpu is C + BLAS + MPI; cuda\n"
    "                       is CUDA kernels + cuBLASLt + NCCL for NVIDIA GPUs (built with nvcc);\n"
    "                       cuda-host is the same CUDA program built for this CPU through an\n"
    "                       emulation of the CUDA built-ins (tests without a GPU)\n"
    "  --memory SIZE        each device's memory (80GB, 24GiB, 512MiB), instead of the mesh's:\n"
    "                       the memory check and recompute=auto hold the plan to it\n"
    "  --no-memory-check    accept a plan whose planned peak on a rank exceeds the device's\n"
    "                       memory (the mesh's memory = SIZE, or the device catalog's)\n"
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
    "  --emit=c             print the generated program (cpu: C; cuda: CUDA C++)\n"
    "  --dump-after=PASS    print the IR after PASS (see --list-passes)\n"
    "  --profile FILE       the hardware model measured by 'shardc calibrate' (default: the\n"
    "                       mesh's catalog figures), for the predicted times of --emit=plan\n"
    "  --list-passes        list the passes in pipeline order\n"
    "  -o DIR               output directory for generated code\n"
    "  --precision=fp64     with --emit=c: double arithmetic, for gradient checks\n"
    "  (and the options of 'shardc check')\n";

static const char *usage_build =
    "usage: shardc build MODEL.shard [-o DIR] [--target cpu|cuda|cuda-host] [--mesh NAME|SPEC]\n"
    "                    [--strategy SPEC] [--model NAME] [--precision=fp64] [--no-memory-check]\n"
    "\n"
    "Compiles MODEL.shard, writes the training program DIR/model.c and builds it\n"
    "with the system C compiler (mpicc when the plan has several ranks) against\n"
    "libshardrt and BLAS into DIR/train.  DIR defaults to out/MODEL_NAME.\n"
    "--target cuda writes DIR/model.cu and builds it with nvcc (-arch from the mesh's\n"
    "device: sm_80 for A100, sm_89 for RTX 4090, sm_90a for H100/H200; SHARDC_CUDA_ARCH\n"
    "overrides; compute capability 8.0 or newer) against\n"
    "cuBLASLt and NCCL: one rank per GPU.  --target cuda-host builds the same program\n"
    "for this CPU (the kernels through runtime/cuda/host/cuda_host.h, NCCL as MPI).\n"
    "Run DIR/train --help for its flags (--steps, --seed, --data, --load, --save,\n"
    "--save-every, --log, --quiet); launch it with mpirun -np MESH_SIZE.\n"
    "Plans with dp=N, mb=N, zero=1|2|3, tp=N, tp2d=QxQ (2D tensor\n"
    "parallelism), sp=megatron (with tp), sp=ring:N and pp=N with\n"
    "schedule=gpipe|1f1b|interleaved:V, in any mix, with recompute=none|selective|\n"
    "full|auto (or one per stage, full+none), run on both targets.\n"
    "\n"
    "  -o DIR               output directory (created if missing)\n"
    "  --precision=fp64     build in double precision (for gradient checks:\n"
    "                       DIR/train --gradcheck N)\n"
    "  SHARDC_CC, SHARDC_CFLAGS   override the C compiler, add flags\n"
    "  (and the options of 'shardc check')\n";

static const char *usage_explore =
    "usage: shardc explore MODEL.shard [--mesh NAME|SPEC] [--top K] [--strategy PARTIAL]\n"
    "                      [--profile P.json] [--json] [--report FILE.html] [--model NAME]\n"
    "\n"
    "Ranks parallel plans of MODEL.shard on the mesh by predicted step time (the cost\n"
    "model, passes/cost.c, from the mesh's figures or a profile of 'shardc calibrate'),\n"
    "with the memory of each pipeline stage; plans that do not fit are listed with the\n"
    "reason.  A partial SPEC (--strategy tp=8,pp=8,recompute=full) fixes those keys and\n"
    "searches the rest.\n"
    "\n"
    "  --top K              print the best K plans (default 10)\n"
    "  --json               print the plans as a JSON array (strategy, step_time_s,\n"
    "                       tokens_per_s, model_tflops_per_device, mfu, peak_mem_bytes,\n"
    "                       mem_by_stage, feasible, reason)\n"
    "  --generatable        (accepted for older scripts: every plan the search tries\n"
    "                       is one the code generators implement)\n"
    "  --report FILE.html   also write a report: the time-memory Pareto front, the best\n"
    "                       plan's pipeline timeline, memory per stage by kind, time breakdown\n";

static const char *usage_calibrate =
    "usage: shardc calibrate [--target cpu|cuda|cuda-host] [--np N] [--rounds R] -o PROFILE.json\n"
    "\n"
    "Measures this machine under mpirun with N ranks placed as training programs\n"
    "place them: GEMM throughput over shapes through the library the programs call,\n"
    "a memory-bound kernel's bandwidth, the cost of a kernel call, and all-reduce,\n"
    "all-gather, reduce-scatter, broadcast and send/recv over message sizes for\n"
    "groups of 2, 4, ... ranks.  Give the profile to explore, compile or build with\n"
    "--profile PROFILE.json; it describes N ranks on this machine.\n"
    "\n"
    "  --target cpu         (default) N CPU ranks (default 1): SGEMM through the BLAS\n"
    "                       the cpu target links, MPI collectives\n"
    "  --target cuda        one rank per GPU (default N: the GPUs nvidia-smi lists):\n"
    "                       cuBLASLt fp32 (gemm, gemm_thin) and bf16 tensor cores\n"
    "                       (gemm_bf16, gemm_thin_bf16: what precision = bf16 plans\n"
    "                       use), NCCL collectives\n"
    "  --target cuda-host   the cuda calibrator's host build (no GPU: kernels on the CPU,\n"
    "                       NCCL as MPI), for tests; its figures describe no GPU\n"
    "  --rounds R           (cpu target; default 3, 1 to 100) run the whole suite R times\n"
    "                       and keep each figure's fastest round: on a shared host a\n"
    "                       disturbance lasts seconds to minutes, longer than one trial\n";

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
  int no_memory_check;
  int top, json;
  const char *report;     /* explore --report FILE.html */
  int no_warn;
  int time_report;
} Opts;

#define EXPLORE_REFINE_UNITS 1200000.0 /* plans' nodes x ranks compiled to refine (run_explore) */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* "80GB", "24 GiB", "512MiB", "1e9": bytes (1000- or 1024-based units). */
static int parse_size(const char *v, double *out) {
  char *end;
  errno = 0;
  /* decimal only: strtod also reads hex ("0x10"), "inf" and "nan" */
  if (!strchr("0123456789.", *v) || strpbrk(v, "xXpP")) return -1;
  double x = strtod(v, &end);
  if (errno || end == v || !(x > 0) || x > 1e18) return -1;
  while (*end == ' ') end++;
  static const struct { const char *u; double f; } units[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
    if (!strcmp(end, units[k].u)) {
      *out = floor(x * units[k].f);   /* whole bytes; a device of under 1 MB holds no plan */
      return *out >= 1e6 ? 0 : -1;
    }
  return -1;
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

/* A flag's whole-number value within [lo, hi] into *out; -1 where it is
 * empty, not a number or out of range (the caller says which flag). */
static int int_value(const char *v, long lo, long hi, int *out) {
  char *end;
  long k = strtol(v, &end, 10);
  if (!*v || *end || k < lo || k > hi) return -1;
  *out = (int)k;
  return 0;
}

/* The GPUs nvidia-smi lists (0: none, or no nvidia-smi). */
static int count_gpus(void) {
  FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!p) return 0;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, p))
    if (!strncmp(line, "GPU ", 4)) n++;
  if (pclose(p) != 0) return 0;
  return n;
}

/* ---- output files ----
 * A file the driver writes (explore --report, build's plan.json): a regular
 * file, or a new one, is written beside itself as NAME.XXXXXX and renamed
 * over it once every byte is out, so a full disk leaves the old file or
 * none, never a truncated one that looks whole.  A device, a pipe or a
 * symbolic link (/dev/stdout, a process substitution) is written in place,
 * opened without blocking: a FIFO no process reads is refused, not waited
 * on. */
typedef struct OutFile {
  FILE *f;
  const char *path;
  char *tmp; /* the temporary name; NULL when written in place */
} OutFile;

/* A new file's mode: 0666 less the umask, as fopen would create it. */
static void chmod_as_created(int fd) {
  mode_t um = umask(0);
  umask(um);
  fchmod(fd, 0666 & ~um);
}

static int out_open(OutFile *of, const char *path) {
  memset(of, 0, sizeof *of);
  of->path = path;
  struct stat st;
  int fd;
  if (!lstat(path, &st) && !S_ISREG(st.st_mode)) {
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
      fprintf(stderr, "shardc: error: cannot write %s: %s\n", path,
              errno == ENXIO ? "a pipe that no process reads" : strerror(errno));
      return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  } else {
    of->tmp = arena_printf("%s.XXXXXX", path);
    fd = mkstemp(of->tmp);
    if (fd < 0) {
      fprintf(stderr, "shardc: error: cannot write %s: %s\n", path, strerror(errno));
      return -1;
    }
    chmod_as_created(fd);
  }
  of->f = fdopen(fd, "w");
  if (!of->f) {
    fprintf(stderr, "shardc: error: cannot write %s: %s\n", path, strerror(errno));
    close(fd);
    if (of->tmp) unlink(of->tmp);
    return -1;
  }
  return 0;
}

/* Flushes and closes; renames the temporary over the file, or removes it
 * and says why the file could not be written. */
static int out_close(OutFile *of) {
  bool bad = ferror(of->f);
  errno = 0;
  bad |= fflush(of->f) != 0;
  int e = errno;
  if (fclose(of->f) && !bad) bad = true, e = errno;
  if (!bad && of->tmp && rename(of->tmp, of->path)) bad = true, e = errno;
  if (bad) {
    if (of->tmp) unlink(of->tmp);
    fprintf(stderr, "shardc: error: cannot write %s: %s\n", of->path, strerror(e ? e : EIO));
    return -1;
  }
  return 0;
}

/* The results printed: a full disk or a closed standard output is an
 * error, not exit 0. */
static int finish_stdout(int rc) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
  fprintf(stderr, "shardc: error: cannot write the standard output: %s\n", strerror(errno ? errno : EIO));
  return 1;
}

static int run_calibrate(int argc, char **argv) {
  int np = 0, rounds = 0;
  const char *outp = NULL, *target = "cpu";
  for (int i = 2; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage_calibrate, stdout);
      return 0;
    } else if ((v = flag_value(argc, argv, &i, "--np"))) {
      if (int_value(v, 1, 4096, &np))
        return usage_error(usage_calibrate, "--np must be a number of ranks from 1 to 4096, got '%s'", v);
    } else if ((v = flag_value(argc, argv, &i, "--rounds"))) {
      if (int_value(v, 1, 100, &rounds))
        return usage_error(usage_calibrate, "--rounds must be a number from 1 to 100, got '%s'", v);
    } else if ((v = flag_value(argc, argv, &i, "--target"))) {
      if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "cuda-host"))
        return usage_error(usage_calibrate, "--target must be cpu, cuda or cuda-host, got '%s'", v);
      target = v;
    } else if ((v = flag_value(argc, argv, &i, "-o"))) {
      if (!*v) return usage_error(usage_calibrate, "%s needs a file", "-o");
      outp = v;
    } else {
      return usage_error(usage_calibrate, "unknown option '%s'", argv[i]);
    }
  }
  if (!outp) return usage_error(usage_calibrate, "%s", "no output file (-o PROFILE.json)");
  if (rounds && strcmp(target, "cpu"))
    return usage_error(usage_calibrate, "%s", "--rounds is for --target cpu (a GPU's figures are steady: one round)");
  bool cuda = !strcmp(target, "cuda"), cuda_host = !strcmp(target, "cuda-host");
  const char *bin = cuda ? SHARDC_CALIB_CUDA_BIN : cuda_host ? SHARDC_CALIB_CUDA_HOST_BIN : SHARDC_CALIB_BIN;
  if (!SHARDC_CALIB_BIN[0]) {
    fprintf(stderr, "shardc: error: calibrate needs MPI; this shardc was built without it\n");
    return 1;
  }
  if (cuda && !bin[0]) {
    fprintf(stderr, "shardc: error: this shardc was built without nvcc/NCCL: calibrate --target "
            "cuda needs them (--target cuda-host runs its host build, without a GPU)\n");
    return 1;
  }
  if (cuda_host && !bin[0]) {
    fprintf(stderr, "shardc: error: this shardc was built without the cuda host build's calibrator\n");
    return 1;
  }
  if (cuda) {
    int gpus = count_gpus();
    if (gpus == 0) {
      fprintf(stderr, "shardc: error: calibrate --target cuda: no GPU visible (nvidia-smi -L lists "
              "none); --target cpu measures this machine's CPUs\n");
      return 1;
    }
    if (!np) np = gpus;
  }
  if (!np) np = 1;
  /* The calibrator writes a temporary file beside OUT, renamed over it once
   * the measurements succeed: an existing profile stays whole until then,
   * and a path that cannot be written is refused before mpirun starts. */
  struct stat os;
  if (!stat(outp, &os) && !S_ISREG(os.st_mode)) {
    fprintf(stderr, "shardc: error: cannot write %s: %s\n", outp,
            S_ISDIR(os.st_mode) ? strerror(EISDIR) : "not a regular file (the profile is read back from it)");
    return 1;
  }
  char *tmp = arena_printf("%s.XXXXXX", outp);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "shardc: error: cannot write %s: %s\n", outp, strerror(errno));
    return 1;
  }
  chmod_as_created(fd);
  close(fd);
  char nps[16], rds[16];
  snprintf(nps, sizeof nps, "%d", np);
  snprintf(rds, sizeof rds, "%d", rounds ? rounds : 3);
  const char *args[16];
  int k = 0;
  args[k++] = "mpirun";
  if (geteuid() == 0) args[k++] = "--allow-run-as-root";
  args[k++] = "--oversubscribe";
  args[k++] = "-np";
  args[k++] = nps;
  args[k++] = bin;
  args[k++] = tmp;
  if (!cuda && !cuda_host) args[k++] = rds;
  args[k] = NULL;
  fprintf(stderr, "shardc calibrate: mpirun -np %d %s %s\n", np, bin, tmp);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    execvp("mpirun", (char *const *)args);
    fprintf(stderr, "shardc: error: cannot run mpirun: %s\n", strerror(errno));
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
    fprintf(stderr, "shardc: error: the microbenchmarks failed (mpirun exit %d)%s\n",
            pid < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
            stat(outp, &os) ? "" : arena_printf("; %s is as it was", outp));
    unlink(tmp);
    return 1;
  }
  HwModel hw;
  memset(&hw, 0, sizeof hw);
  char err[512];
  if (cost_load_profile(&hw, tmp, err, sizeof err)) {
    fprintf(stderr, "shardc: error: the profile measured does not load (kept in %s): %s\n", tmp, err);
    return 1;
  }
  if (rename(tmp, outp)) {
    fprintf(stderr, "shardc: error: cannot write %s: %s\n", outp, strerror(errno));
    unlink(tmp);
    return 1;
  }
  printf("wrote %s: %d rank%s; %s up to %.3g GFLOP/s per rank, ", outp, np, np == 1 ? "" : "s",
         cuda || cuda_host ? "fp32 GEMM" : "SGEMM", hw.gemm.n ? hw.gemm.y[hw.gemm.n - 1] / 1e9 : 0);
  if (cuda || cuda_host) {
    HwModel h16;
    memset(&h16, 0, sizeof h16);
    h16.elt = 2;
    if (!cost_load_profile(&h16, outp, err, sizeof err) && h16.gemm.n)
      printf("bf16 GEMM up to %.3g GFLOP/s, ", h16.gemm.y[h16.gemm.n - 1] / 1e9);
  }
  printf("memory-bound %.3g GB/s per rank, call %.2g us", hw.bw.n ? hw.bw.y[hw.bw.n - 1] / 1e9 : 0,
         hw.launch_s * 1e6);
  for (int i = 0; i < hw.ncoll; i++)
    if (!strcmp(hw.coll[i].op, "all_reduce") && hw.coll[i].nranks == np) {
      const CostCurve *c = &hw.coll[i].t;
      double S = c->x[c->n - 1];
      printf(", all-reduce of %.3g MiB over %d ranks %.3g ms (bus %.3g GB/s)", S / 1048576, np,
             c->y[c->n - 1] * 1e3, S / c->y[c->n - 1] * 2 * (np - 1) / np / 1e9);
    }
  printf("\n");
  return 0;
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
    } else if (!strcmp(a, "--no-memory-check")) {
      o->no_memory_check = 1;
    } else if ((v = flag_value(argc, argv, &i, "--memory"))) {
      if (parse_size(v, &o->sema.memory))
        return usage_error(usage, "--memory needs a size of at least 1MB such as 80GB, 24GiB or 512MiB, got '%s'", v);
    } else if (!strcmp(o->cmd, "explore") && (v = flag_value(argc, argv, &i, "--top"))) {
      if (int_value(v, 1, 10000, &o->top))
        return usage_error(usage, "--top must be a number from 1 to 10000, got '%s'", v);
    } else if (!strcmp(o->cmd, "explore") && (v = flag_value(argc, argv, &i, "--report"))) {
      if (!*v) return usage_error(usage, "%s needs a file", "--report");
      o->report = v;
    } else if (!strcmp(o->cmd, "explore") && !strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(o->cmd, "explore") && !strcmp(a, "--generatable")) {
      /* (accepted: every plan the search tries is generated) */
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
      if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "cuda-host"))
        return usage_error(usage, "--target must be cpu, cuda or cuda-host, got '%s'", v);
      o->target = v;
      o->sema.cuda = strcmp(v, "cpu") != 0;
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

/* --profile into hw; -1 after the error, which says where in the file. */
static int load_profile(const Opts *o, HwModel *hw) {
  char err[512];
  if (cost_load_profile(hw, o->profile, err, sizeof err)) {
    fprintf(stderr, "shardc: error: --profile %s: %s\n", o->profile, err);
    return -1;
  }
  return 0;
}

/* Every command given --profile reads it before any work, whether or not
 * it prices a plan (build, --emit and --dump-after print none): a profile
 * that does not load is an error, never ignored. */
static int check_profile(const Opts *o) {
  if (!o->profile) return 0;
  HwModel hw;
  memset(&hw, 0, sizeof hw);
  return load_profile(o, &hw);
}

/* The kind of machine a profile's "device" names: a calibrator writes
 * "cpu" or the GPU's name (the cuda host build's describes no GPU). */
static bool profile_is_gpu(const char *device) {
  return strcmp(device, "cpu") && strncmp(device, "host build", 10);
}

/* The hardware model of the plan's mesh and precision, from --profile when
 * given.  A profile of another kind of machine than the mesh's (a CPU's on
 * a GPU mesh, or the reverse) still prices the plans, as asked, with a
 * warning, once. */
static int hw_model(const Opts *o, const Module *m, HwModel *hw) {
  static bool warned;
  const Mesh *me = m->train.mesh;
  cost_hw_from_mesh(hw, me, m->train.precision);
  if (!o->profile) return 0;
  if (load_profile(o, hw)) return -1;
  bool mesh_gpu = strcmp(me->device->name, "cpu") != 0;
  if (!warned && hw->profile_device[0] && profile_is_gpu(hw->profile_device) != mesh_gpu) {
    warned = true;
    diag_warning((SrcLoc){0}, "--profile %s was measured on \"%s\" (%s), but mesh '%s' has %s devices (%s); "
                 "its figures price the plans all the same", o->profile, hw->profile_device,
                 mesh_gpu ? "a CPU" : "a GPU", me->name, me->device->name, mesh_gpu ? "GPUs" : "CPUs");
  }
  return 0;
}

static Module *load_module(const char *file, const SemaOptions *so) {
  SrcFile *f = src_load(file);
  if (!f) {
    fprintf(stderr, "shardc: error: cannot open '%s': %s\n", file, strerror(errno));
    return NULL;
  }
  if (memchr(f->text, 0, f->len)) {
    fprintf(stderr, "shardc: error: '%s' contains a NUL byte; is it a text file?\n", file);
    return NULL;
  }
  Program *prog = ast_parse(f);
  if (!prog || diag_error_count()) return NULL;
  Module *m = frontend_run(prog, so);
  if (!m || diag_error_count()) return NULL;
  if (!m->graph) {
    fprintf(stderr, "shardc: error: '%s' declares no model to explore\n", file);
    return NULL;
  }
  return m;
}

/* The model's single-device graph through autodiff: what the search reads. */
static int model_shape(Module *m, ModelShape *ms) {
  for (int i = 0; i < pass_count; i++) {
    if (pass_list[i].run(m) || diag_error_count()) return -1;
    if (!strcmp(pass_list[i].name, "autodiff")) break;
  }
  explore_model_shape(m, ms);
  return 0;
}

static void json_plan(FILE *out, const PlanEval *e) {
  fprintf(out, "{\"strategy\": \"%s\", \"microbatch\": %d, \"step_time_s\": %.6g, "
               "\"tokens_per_s\": %.6g, \"model_tflops_per_device\": %.6g, \"mfu\": %.4g, "
               "\"peak_mem_bytes\": %.0f, \"mem_by_stage\": [",
          e->spec, e->b, e->step_s, e->tokens_per_s, e->tflops_per_device, e->mfu, e->peak_mem);
  for (int k = 0; k < e->nstages; k++) fprintf(out, "%s%.0f", k ? ", " : "", e->mem_stage[k]);
  fprintf(out, "], \"bytes_sent_per_rank\": %.0f, \"feasible\": %s", e->bytes_per_rank,
          e->feasible ? "true" : "false");
  if (!e->feasible) fprintf(out, ", \"reason\": \"%s\"", e->reason);
  fputc('}', out);
}

/* Searches plans for m (a module compiled with strategy auto); *best gets the first. */
static ModelShape *last_shape;
static ExplorePoint *points;
static int npoints;

static int search_plans(const Opts *o, Module *m, const Plan *fixed, PlanEval *out, int cap, int *n,
                        long *evaluated, double *secs, HwModel *hw) {
  ModelShape *ms = arena_alloc(sizeof *ms);
  last_shape = ms;
  double t0 = now_ms();
  if (model_shape(m, ms)) return -1;
  if (hw_model(o, m, hw)) return -1;
  ExploreOpts eo = {.fixed = fixed, .top = cap};
  if (o->report) {
    eo.cap_points = 1 << 18;
    eo.points = points = arena_alloc(sizeof *points * (size_t)eo.cap_points);
  }
  *n = explore_search(ms, hw, m->train.mesh, &eo, out, cap, evaluated);
  npoints = eo.npoints;
  *secs = (now_ms() - t0) / 1e3;
  return 0;
}

static int cmp_plan(const void *a, const void *b) {
  const PlanEval *x = a, *y = b;
  if (x->feasible != y->feasible) return x->feasible ? -1 : 1;
  return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

/* Compiles plan e (recompute none, selective or full: the recompute pass
 * and the memory plan run them) and replaces its figures by the compiled
 * plan's; 1 when it did. */
static int refine_plan(const Opts *o, PlanEval *e, const HwModel *hw) {
  const Plan *pl = &e->plan;
  /* recompute=auto is a search of its own (the pass's trials) */
  if (pl->recompute == RECOMPUTE_AUTO ||
      (pl->recompute == RECOMPUTE_FULL && explore_recompute_as_megatron()))
    return 0;
  SemaOptions so = o->sema;
  so.strategy = e->spec;
  int errs = diag_error_count();
  /* a plan the compiler refuses (memory, the mesh, a rule of a pass) is
   * shown refused with the compiler's reason, printing nothing else */
  char why[sizeof e->reason];
  diag_capture(why, sizeof why);
  Module *m = load_module(o->file, &so);
  for (int i = 0; m && i < pass_count; i++)
    if (pass_list[i].run(m) || diag_error_count() > errs) m = NULL;
  diag_capture(NULL, 0);
  if (!m) {
    diag_reset();
    if (why[0] && e->feasible) { /* (an infeasible estimate keeps its own reason) */
      e->feasible = false;
      snprintf(e->reason, sizeof e->reason, "%s", why);
    }
    return 0;
  }
  CostResult r;
  if (cost_module(m, hw, &r)) return 0;
  const Mesh *me = m->train.mesh;
  int R = m->nrprog;
  double peak = 0;
  e->nstages = R;
  for (int k = 0; k < R; k++) {
    double b = (double)(m->nstages > 1 ? m->rank_mem[k].arena_bytes : m->mem.arena_bytes);
    if (m->nstages > 1 && m->nstages == R) b = (double)m->stage_mem[k].arena_bytes;
    e->mem_stage[k] = b;
    const MemPlan *mp = m->nstages > 1 ? &m->stage_mem[k] : &m->mem;
    e->mem_kind[k][0] = (double)mp->param_bytes;
    e->mem_kind[k][1] = (double)mp->grad_bytes;
    e->mem_kind[k][2] = (double)mp->optstate_bytes;
    e->mem_kind[k][3] = b - (double)(mp->param_bytes + mp->grad_bytes + mp->optstate_bytes);
    if (b > peak) peak = b;
  }
  e->peak_mem = peak;
  e->step_s = r.step_s;
  e->tokens_per_s = r.tokens / r.step_s;
  e->tflops_per_device = r.model_flops / r.step_s / me->ndev / 1e12;
  e->mfu = r.model_flops / r.step_s / me->ndev / hw->peak;
  double sent = 0;
  for (int k = 0; k < R; k++)
    if (r.stage[k].bytes > sent) sent = r.stage[k].bytes;
  e->bytes_per_rank = sent;
  e->feasible = peak <= me->mem_bytes;
  if (!e->feasible) {
    int w = 0;
    for (int k = 0; k < R; k++)
      if (e->mem_stage[k] > e->mem_stage[w]) w = k;
    snprintf(e->reason, sizeof e->reason, "%s", explore_mem_reason(w, e->mem_stage[w], (double)me->mem_bytes));
  } else {
    e->reason[0] = 0;
  }
  return 1;
}

/* The search's best plans, the first ones compiled where the model is
 * small (their memory from the memory plan, their time from the per-rank
 * programs) and re-ranked: what explore lists and what strategy = auto
 * takes the first feasible of.  *exact: how many were compiled. */
static int rank_plans(const Opts *o, Module *m, const Plan *fixed, int top, PlanEval **out, int *n,
                      long *evaluated, double *secs, HwModel *hw, int *exact, bool *small_out) {
  /* small models: more candidates, each compiled, then the best `top` */
  /* compiling a plan costs about nodes x ranks: small is a model of at most
   * 4,000 nodes on at most 64 devices (a few milliseconds a plan) */
  bool small = m->graph->nodes.len <= 4000 && m->train.mesh->ndev <= 64;
  int cap = small ? (top * 3 > 30 ? top * 3 : 30) : top;
  PlanEval *pe = arena_alloc(sizeof *pe * (size_t)cap);
  double t0 = now_ms();
  if (search_plans(o, m, fixed, pe, cap, n, evaluated, secs, hw)) return -1;
  *out = pe;
  *small_out = small;
  *exact = 0;
  /* (about three seconds of compiling on this 2-core machine: compiling a
   * plan costs about its nodes x ranks, some 3 us a unit; a large model's
   * other plans stay the search's.  A count, not a clock: the same plans
   * come out however loaded the machine is) */
  double units = (double)m->graph->nodes.len * m->train.mesh->ndev;
  int nref = units > 0 ? (int)(EXPLORE_REFINE_UNITS / units) : *n;
  if (nref < 1) nref = 1;
  if (small)
    for (int i = 0; i < *n && i < nref; i++) *exact += refine_plan(o, &pe[i], hw);
  qsort(pe, (size_t)*n, sizeof *pe, cmp_plan);
  *secs = (now_ms() - t0) / 1e3; /* the search and the compiles (it had counted the search alone) */
  return 0;
}

static int run_explore(Opts *o) {
  if (check_profile(o)) return 1;
  Plan fixed;
  plan_default(&fixed);
  if (o->sema.strategy && strcmp(o->sema.strategy, "auto")) {
    char err[256];
    if (plan_parse_spec(o->sema.strategy, &fixed, err, sizeof err)) {
      fprintf(stderr, "shardc: error: --strategy %s: %s\n", o->sema.strategy, err);
      return 1;
    }
  }
  SemaOptions so = o->sema;
  so.strategy = "auto";
  Module *m = load_module(o->file, &so);
  if (!m) return 1;
  int top = o->top ? o->top : 10;
  PlanEval *pe;
  int n, exact;
  long evaluated;
  double secs;
  HwModel hw;
  bool small;
  if (rank_plans(o, m, &fixed, top, &pe, &n, &evaluated, &secs, &hw, &exact, &small))
    return 1;
  if (!n) {
    fprintf(stderr, "shardc: error: explore: no plan for mesh '%s' (%d devices)%s: %s\n",
            m->train.mesh->name, m->train.mesh->ndev,
            o->sema.strategy && strcmp(o->sema.strategy, "auto")
                ? arena_printf(" matches --strategy %s", o->sema.strategy)
                : "",
            explore_no_plan_reason(last_shape, m->train.mesh, &fixed));
    return 1;
  }
  if (n > top) n = top;
  /* the train block's own plan (hand-tuned, e.g. a published one), for comparison */
  PlanEval *ref = NULL;
  char ref_why[256] = "";   /* why the train block's plan is not on this mesh */
  if (!o->sema.strategy) {
    SrcFile *f = src_load(o->file);
    Program *prog = f ? ast_parse(f) : NULL;
    diag_capture(ref_why, sizeof ref_why);
    Module *mr = prog ? sema_run(prog, &o->sema) : NULL;
    diag_capture(NULL, 0);
    if (mr && !diag_error_count() && !mr->train.plan.is_auto && mr->train.plan.given) {
      ref = arena_alloc(sizeof *ref);
      int b = (int)(mr->train.microbatch > 0 ? mr->train.microbatch : 1);
      explore_eval(last_shape, &hw, m->train.mesh, &mr->train.plan, b, true, ref);
      if (small) refine_plan(o, ref, &hw);
    }
    diag_reset();
  }
  if (o->report) {
    OutFile rf;
    if (out_open(&rf, o->report)) return 1;
    explore_report_html(rf.f, last_shape, &hw, m->train.mesh, pe, n, points, npoints, ref);
    if (out_close(&rf)) return 1;
  }
  if (o->json) {
    printf("[");
    for (int i = 0; i < n; i++) {
      printf(i ? ",\n " : "");
      json_plan(stdout, &pe[i]);
    }
    printf("]\n");
    return 0;
  }
  const Mesh *me = m->train.mesh;
  printf("model %s on mesh %s: %d x %s (%d node%s x %d); %s\n", m->graph->model, me->name, me->ndev,
         me->device->name, me->nodes, me->nodes == 1 ? "" : "s", me->per_node, hw.source);
  printf("%ld plans evaluated in %.3f s; best %d%s:\n\n", evaluated, secs, n,
         exact ? arena_printf(" (%d compiled: memory from the memory plan, time from the per-rank programs)", exact) : "");
  printf("%-4s %-58s %4s %11s %12s %7s %6s %10s %12s  %s\n", "rank", "strategy", "mbs", "step", "tokens/s",
         "TF/dev", "MFU", "peak mem", "sent/rank", "memory per stage (GB)");
  for (int i = 0; i < n + (ref != NULL); i++) {
    const PlanEval *e = i < n ? &pe[i] : ref;
    if (i == n) printf("\nthe train block's plan:\n");
    char stages[256] = "";
    int len = 0;
    for (int k = 0; k < e->nstages && len < 200; k++)
      len += snprintf(stages + len, sizeof stages - (size_t)len, "%s%.1f", k ? " " : "", e->mem_stage[k] / 1e9);
    if (e->nstages > 12) snprintf(stages + len, sizeof stages - (size_t)len, " ...");
    printf(i < n ? "%-4d " : "-    ", i + 1);
    printf("%-58s %4d %9.4g s %12.4g %7.1f %5.1f%% %7.2f GB %9.3g B  %s%s%s\n", e->spec, e->b,
           e->step_s, e->tokens_per_s, e->tflops_per_device, 100 * e->mfu, e->peak_mem / 1e9,
           e->bytes_per_rank, stages, e->feasible ? "" : "  INFEASIBLE: ", e->feasible ? "" : e->reason);
    (void)0;
  }
  if (!ref && ref_why[0]) printf("\nthe train block's plan: not on this mesh: %s\n", ref_why);
  return 0;
}

/* strategy = auto: the best feasible plan the code generator implements,
 * by the search's predicted step time; the module is then lowered again
 * under that plan.  A plan the later checks refuse gives way to the next. */
static Module *choose_auto(Opts *o, Module *m, PlanEval **chosen) {
  PlanEval *pe;
  int n, exact;
  long evaluated;
  double secs;
  HwModel hw;
  bool small;
  /* the strategy keys written beside auto (strategy = auto, tp = 2, or
   * --strategy auto,tp=2) are fixed, as explore's partial SPEC */
  Plan fixed = m->train.plan;
  fixed.is_auto = false;
  char fixed_spec[256] = "";
  if (fixed.given) plan_str_given(&fixed, fixed_spec, sizeof fixed_spec);
  if (rank_plans(o, m, &fixed, 8, &pe, &n, &evaluated, &secs, &hw, &exact, &small))
    return NULL;
  char first_why[256] = "";
  for (int i = 0; i < n; i++) {
    if (!pe[i].feasible) break;
    SemaOptions so = o->sema;
    so.strategy = pe[i].spec;
    char why[256];
    diag_capture(why, sizeof why);   /* a refused candidate gives way quietly */
    Module *m2 = load_module(o->file, &so);
    diag_capture(NULL, 0);
    if (!m2) {
      diag_reset();
      if (!first_why[0]) snprintf(first_why, sizeof first_why, "%.120s: %.130s", pe[i].spec, why);
      continue;
    }
    m2->train.plan_origin = arena_printf("auto: the best of %ld plans%s, predicted %.4g s/step, "
                                         "%.4g tokens/s, %s", evaluated,
                                         fixed_spec[0] ? arena_printf(" with %s", fixed_spec) : "",
                                         pe[i].step_s, pe[i].tokens_per_s, hw.source);
    *chosen = &pe[i];
    return m2;
  }
  const char *why = !n            ? explore_no_plan_reason(last_shape, m->train.mesh, &fixed)
                    : first_why[0] ? first_why
                                   : arena_printf("%s: %s", pe[0].spec, pe[0].reason);
  fprintf(stderr, "shardc: error: strategy auto%s: no plan of the %ld evaluated fits and can be "
          "generated%s%s\n", fixed_spec[0] ? arena_printf(" with %s", fixed_spec) : "", evaluated,
          n ? "; the closest: " : ": ", why);
  return NULL;
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
  if (check_profile(o)) return 1;
  diag_set_quiet_warnings(o->no_warn);
  double t0 = now_ms();
  SrcFile *f = src_load(o->file);
  if (!f) {
    fprintf(stderr, "shardc: error: cannot open '%s': %s\n", o->file, src_error());
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
  m->no_memory_check = o->no_memory_check;
  /* check reports what build would, for the same target and flags, short
   * of the C compiler's own errors: no model, then the passes, then what
   * the code generator refuses (cg_check). */
  if (!m->graph) {
    fprintf(stderr, "shardc: error: '%s' declares no model to %s\n", o->file,
            strcmp(o->cmd, "check") ? "compile" : "check");
    return 1;
  }
  PlanEval *chosen = NULL;
  if (m->train.plan.is_auto && m->train.mesh) {
    m = choose_auto(o, m, &chosen);
    if (!m) return 1;
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
  CgOptions cgo = {.f64 = o->precision && !strcmp(o->precision, "fp64")};
  const char *target = o->target ? o->target : "cpu";
  if (!strcmp(target, "cuda") && !o->dump_after &&
      (!o->emit || !strcmp(o->emit, "plan"))) {
    /* Shampoo's eigh roots run on a GPU rank's host: say what they cost */
    HwModel hw;
    double step, roots, newton;
    if (hw_model(o, m, &hw)) return 1;
    if (cost_eigh_on_gpu(m, &hw, NULL, &step, &roots, &newton))
      diag_warning(m->train.opt.root_loc,
                   "shampoo root = eigh on the cuda target runs each root inverse on the host "
                   "CPU (LAPACK, fp64): predicted %s of each %s step beyond what host threads "
                   "hide beside the GPU's forward and backward; root = newton runs them on the "
                   "GPU (fp64 GEMMs): predicted step %s",
                   cost_time_str(roots), cost_time_str(step), cost_time_str(newton));
  }
  if (!strcmp(o->cmd, "check")) return cg_check(m, target, &cgo) ? 1 : 0;
  if (o->dump_after) return 0;
  if (!strcmp(o->cmd, "build")) {
    const char *dir = o->outdir ? o->outdir : arena_printf("out/%s", m->graph->model);
    if (cg_build(m, dir, target, &cgo)) return 1;
    if (chosen) {
      /* strategy = auto: the choice and its predictions beside the program */
      OutFile pj;
      if (out_open(&pj, arena_printf("%s/plan.json", dir))) return 1;
      json_plan(pj.f, chosen);
      fputc('\n', pj.f);
      if (out_close(&pj)) return 1;
    }
    return 0;
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
  } else if (!strcmp(cmd, "calibrate")) {
    return finish_stdout(run_calibrate(argc, argv));
  } else if (!strcmp(cmd, "explore")) {
    if (parse_opts(argc, argv, &o, usage_explore)) return 1;
    int rc = finish_stdout(run_explore(&o));
    arena_free_all();
    return rc;
  } else {
    fprintf(stderr, "shardc: error: unknown command '%s'\n%s", cmd, usage_main);
    return 1;
  }
  int rc = finish_stdout(run(&o));
  arena_free_all();
  return rc;
}
