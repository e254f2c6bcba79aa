/* build.c — `shardc build`: write DIR/model.c and compile it with the system
 * C compiler (mpicc when the plan has several ranks) against libshardrt,
 * giving DIR/train.
 *
 * Where the runtime is comes from the build of shardc itself (CMake passes
 * the paths): SHARDC_RUNTIME_INCLUDE, SHARDC_RUNTIME_LIB, SHARDC_BLAS_LIB,
 * SHARDC_RUNTIME_LDFLAGS.  The environment can override the compiler
 * (SHARDC_CC) and add flags (SHARDC_CFLAGS, split on spaces).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg.h"

#ifndef SHARDC_RUNTIME_INCLUDE
#define SHARDC_RUNTIME_INCLUDE SHARDC_SOURCE_DIR "/runtime"
#endif
#ifndef SHARDC_RUNTIME_LIB
#define SHARDC_RUNTIME_LIB ""
#endif
#ifndef SHARDC_RUNTIME_MPI_LIB
#define SHARDC_RUNTIME_MPI_LIB ""
#endif
#ifndef SHARDC_BLAS_LIB
#define SHARDC_BLAS_LIB "-lopenblas"
#endif
#ifndef SHARDC_RUNTIME_TRAIN_LIB
#define SHARDC_RUNTIME_TRAIN_LIB ""
#endif
#ifndef SHARDC_RUNTIME_TRAIN_MPI_LIB
#define SHARDC_RUNTIME_TRAIN_MPI_LIB ""
#endif
#ifndef SHARDC_RUNTIME_LDFLAGS
#define SHARDC_RUNTIME_LDFLAGS ""
#endif

static int mkdir_p(const char *dir) {
  char *p = arena_strdup(dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0777) && errno != EEXIST) return -1;
    *s = '/';
  }
  if (mkdir(p, 0777) && errno != EEXIST) return -1;
  struct stat st;
  if (stat(p, &st) || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* The full path of an executable found on PATH, or NULL. */
static const char *on_path(const char *name) {
  if (strchr(name, '/')) return access(name, X_OK) ? NULL : name;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  char *dirs = arena_strdup(path);
  for (char *d = strtok(dirs, ":"); d; d = strtok(NULL, ":")) {
    char *f = arena_printf("%s/%s", *d ? d : ".", name);
    if (!access(f, X_OK)) return f;
  }
  return NULL;
}

static void push_words(PtrVec *argv, const char *s) {
  char *w = arena_strdup(s);
  for (char *t = strtok(w, " \t"); t; t = strtok(NULL, " \t")) vec_push(argv, t);
}

/* Runs argv, collecting its stdout and stderr; the exit status, or -1 when
 * it could not be started. */
static int run_cmd(PtrVec *argv, char **output) {
  int fds[2];
  if (pipe(fds)) return -1;
  vec_push(argv, NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execvp(argv->data[0], (char **)argv->data);
    fprintf(stderr, "cannot run %s: %s\n", (char *)argv->data[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  ssize_t r;
  while (buf && (r = read(fds[0], buf + len, cap - len - 1)) > 0) {
    len += (size_t)r;
    if (cap - len < 1024) buf = realloc(buf, cap *= 2);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (buf) buf[len] = 0;
  *output = arena_strdup(buf ? buf : "");
  free(buf);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int cg_build(Module *m, const char *dir, const char *target, const CgOptions *opt) {
  const Target *t = cg_target(target);
  if (!t || cg_check(m, target, opt)) return -1;
  if (mkdir_p(dir)) {
    diag_fatal_noloc("cannot create output directory '%s': %s", dir, strerror(errno));
    return -1;
  }
  const char *src = arena_printf("%s/%s", dir, t->file);
  FILE *f = fopen(src, "w");
  if (!f) {
    diag_fatal_noloc("cannot write '%s': %s", src, strerror(errno));
    return -1;
  }
  CgOptions o = opt ? *opt : (CgOptions){0};
  o.default_data = cg_default_data(m);
  int rc = cg_emit(f, m, target, &o);
  if (fclose(f) && !rc) rc = -1;
  if (rc) {
    if (!diag_error_count()) diag_fatal_noloc("cannot write '%s': %s", src, strerror(errno));
    return -1;
  }
  /* a deep model's file takes the compiler a while (512 layers: some 15 s
   * of cc, 25 of nvcc): say so before, not only after */
  struct stat st;
  if (!stat(src, &st) && st.st_size > (4 << 20)) {
    printf("compiling %s (%.1f MB of generated code)...\n", src, st.st_size / 1e6);
    fflush(stdout);
  }
  return t->build(m, dir, src);
}

/* C + libshardrt: model.c compiled and linked with cc, or mpicc for a mesh,
 * against the runtime's driver (one rank or MPI), the runtime and BLAS. */
int cg_build_cpu(Module *m, const char *dir, const char *src) {
  bool mpi = cg_needs_mpi(m);
  const char *train_lib = mpi ? SHARDC_RUNTIME_TRAIN_MPI_LIB : SHARDC_RUNTIME_TRAIN_LIB;
  const char *cc = getenv("SHARDC_CC");
  if (!cc || !*cc) {
    cc = mpi ? "mpicc" : "cc";
    if (!on_path(cc)) {
      if (mpi)
        diag_fatal_noloc("the plan runs on %d ranks and needs MPI, but mpicc is not on PATH "
                         "(Debian: apt-get install libopenmpi-dev openmpi-bin)",
                         m->train.mesh->ndev);
      else
        diag_fatal_noloc("no C compiler: 'cc' is not on PATH (set SHARDC_CC)");
      return -1;
    }
  }
  if (!*SHARDC_RUNTIME_LIB || access(SHARDC_RUNTIME_LIB, R_OK) || !*train_lib ||
      access(train_lib, R_OK)) {
    const char *miss = !*SHARDC_RUNTIME_LIB || access(SHARDC_RUNTIME_LIB, R_OK) ? SHARDC_RUNTIME_LIB : train_lib;
    diag_fatal_noloc("the runtime library is not built%s%s (build shardc's CMake project: cmake "
                     "--build BUILD_DIR)", *miss ? ": missing " : "", miss);
    return -1;
  }
  if (mpi && (!*SHARDC_RUNTIME_MPI_LIB || access(SHARDC_RUNTIME_MPI_LIB, R_OK))) {
    diag_fatal_noloc("the plan runs on %d ranks, but the runtime's MPI layer libshardrt_mpi is "
                     "not built%s%s (install libopenmpi-dev and rebuild shardc)",
                     m->train.mesh->ndev, *SHARDC_RUNTIME_MPI_LIB ? ": missing " : "",
                     SHARDC_RUNTIME_MPI_LIB);
    return -1;
  }
  const char *bin = arena_printf("%s/train", dir);
  PtrVec argv = {0};
  push_words(&argv, cc);
  push_words(&argv, "-std=gnu11 -Wall");
  push_words(&argv, SHARDC_PROGRAM_CFLAGS);
  if (mpi) vec_push(&argv, "-DSHARDC_MPI=1");
  vec_push(&argv, "-I" SHARDC_RUNTIME_INCLUDE);
  push_words(&argv, SHARDC_RUNTIME_LDFLAGS);
  const char *extra = getenv("SHARDC_CFLAGS");
  if (extra) push_words(&argv, extra);
  vec_push(&argv, "-o");
  vec_push(&argv, (char *)bin);
  vec_push(&argv, (char *)src);
  vec_push(&argv, (char *)train_lib);
  if (mpi) vec_push(&argv, SHARDC_RUNTIME_MPI_LIB);
  vec_push(&argv, SHARDC_RUNTIME_LIB);
  push_words(&argv, SHARDC_BLAS_LIB);
  vec_push(&argv, "-lm");
  char *out = NULL;
  int st = run_cmd(&argv, &out);
  if (st) {
    fprintf(stderr, "shardc: error: the C compiler failed (%s %d) on %s:\n",
            st < 0 ? "could not start," : "exit status", st, src);
    fprintf(stderr, "  ");
    for (int i = 0; i < argv.len && argv.data[i]; i++) fprintf(stderr, "%s ", (char *)argv.data[i]);
    fprintf(stderr, "\n%s", out ? out : "");
    return -1;
  }
  if (out && *out) fprintf(stderr, "shardc: warning: the C compiler said about %s:\n%s", src, out);
  int ndev = m->train.mesh ? m->train.mesh->ndev : 1;
  printf("built %s from %s\n", bin, src);
  if (ndev > 1)
    printf("run:  mpirun -np %d %s [--steps N] [--help]\n", ndev, bin);
  else
    printf("run:  %s [--steps N] [--help]\n", bin);
  return 0;
}

/* ---- the cuda target ---- */

#ifndef SHARDC_LIB_SHARDRT_TRAIN_CUDA
#define SHARDC_LIB_SHARDRT_TRAIN_CUDA ""
#define SHARDC_LIB_SHARDRT_TRAIN_CUDA_MPI ""
#define SHARDC_LIB_SHARDRT_CUDA_HOST ""
#define SHARDC_LIB_SHARDRT_CUDA_DIST_HOST ""
#define SHARDC_LIB_SHARDRT_CUDA ""
#define SHARDC_LIB_SHARDRT_CUDA_DIST ""
#define SHARDC_NVCC ""
#define SHARDC_CUDA_LINK ""
#define SHARDC_NCCL_LIB ""
#define SHARDC_NCCL_INCLUDE ""
#endif

/* nvcc's -arch for the mesh's device (SHARDC_CUDA_ARCH overrides): sm_80
 * for A100, sm_89 for the RTX 4090, sm_90a for H100/H200 and any other
 * device; NULL (with a message) where the device or the override is
 * older than compute capability 8.0, which the kernels need (bf16 tensor
 * cores, ldmatrix, cp.async), or is not an architecture name. */
static const char *cuda_arch(const Module *m) {
  const char *env = getenv("SHARDC_CUDA_ARCH");
  if (env && *env) {
    int cc = 0, n = 0;
    if (sscanf(env, "sm_%d%n", &cc, &n) != 1 || cc < 10 ||
        (env[n] && (env[n] != 'a' && env[n] != 'f')) || (env[n] && env[n + 1])) {
      diag_fatal_noloc("SHARDC_CUDA_ARCH='%s' is not a GPU architecture: give sm_XY[a] (sm_80 "
                       "for A100, sm_89 for RTX 4090, sm_90a for H100/H200)", env);
      return NULL;
    }
    if (cc < 80) {
      diag_fatal_noloc("SHARDC_CUDA_ARCH='%s': the cuda target needs compute capability 8.0 or "
                       "newer (bf16 tensor cores, cp.async): sm_80 and up", env);
      return NULL;
    }
    return env;
  }
  const char *dev = m->train.mesh && m->train.mesh->device ? m->train.mesh->device->name : "";
  if (!strncmp(dev, "V100", 4)) {
    diag_fatal_noloc("mesh device %s (compute capability 7.0): the cuda target needs 8.0 or "
                     "newer (bf16 tensor cores, cp.async: A100, RTX 4090, H100, H200); "
                     "--target cpu, or plan on it with `shardc explore`", dev);
    return NULL;
  }
  return !strncmp(dev, "A100", 4) ? "sm_80" : !strncmp(dev, "RTX4090", 7) ? "sm_89" : "sm_90a";
}

static bool lib_missing(const char *lib) { return !*lib || access(lib, R_OK); }

/* Host C++ (the kernels through runtime/cuda/host/cuda_host.h, NCCL as MPI)
 * or nvcc (the GPU, cuBLASLt, NCCL): DIR/model.cu against the cuda driver. */
static int build_cuda(Module *m, const char *dir, const char *src, bool gpu) {
  bool mpi = cg_needs_mpi(m);
  const char *need[4] = {mpi ? SHARDC_LIB_SHARDRT_TRAIN_CUDA_MPI : SHARDC_LIB_SHARDRT_TRAIN_CUDA,
                         gpu ? SHARDC_LIB_SHARDRT_CUDA : SHARDC_LIB_SHARDRT_CUDA_HOST,
                         mpi ? (gpu ? SHARDC_LIB_SHARDRT_CUDA_DIST : SHARDC_LIB_SHARDRT_CUDA_DIST_HOST) : "-",
                         mpi ? SHARDC_RUNTIME_MPI_LIB : "-"};
  if (gpu && !*SHARDC_NVCC) {
    diag_fatal_noloc("--target cuda needs nvcc, which this build of shardc did not find (install "
                     "the CUDA toolkit and rebuild shardc, or use --target cuda-host to run the "
                     "CUDA program on this CPU)");
    return -1;
  }
  for (int i = 0; i < 4; i++)
    if (strcmp(need[i], "-") && lib_missing(need[i])) {
      diag_fatal_noloc("the runtime library for --target %s is not built%s%s (build shardc's "
                       "CMake project%s)", gpu ? "cuda" : "cuda-host", *need[i] ? ": missing " : "",
                       need[i], mpi ? " with MPI, and NCCL for the GPU" : "");
      return -1;
    }
  const char *cc = getenv(gpu ? "SHARDC_NVCC" : "SHARDC_CXX");
  if (!cc || !*cc) cc = gpu ? SHARDC_NVCC : mpi ? "mpicxx" : "c++";
  if (!on_path(cc)) {
    diag_fatal_noloc("the compiler '%s' is not on PATH%s", cc,
                     mpi ? " (Debian: apt-get install libopenmpi-dev)" : "");
    return -1;
  }
  const char *bin = arena_printf("%s/train", dir);
  PtrVec argv = {0};
  push_words(&argv, cc);
  if (gpu) {
    push_words(&argv, "-std=c++17 -O2 -Werror all-warnings -Xcompiler -Wall");
    /* sm_90a in the -gencode form: CUDA 13.0's -arch=sm_90a shorthand also
     * runs a plain compute_90 pass and embeds its PTX, a second device
     * compile of every kernel for no GPU the program is built for */
    const char *arch = cuda_arch(m);
    if (!arch) return -1;
    vec_push(&argv, strcmp(arch, "sm_90a") ? arena_printf("-arch=%s", arch)
                                           : "-gencode=arch=compute_90a,code=sm_90a");
    if (mpi) push_words(&argv, "-ccbin mpicxx");
  } else {
    push_words(&argv, "-std=c++17 -O2 -Wall -ffp-contract=off -DRTC_HOST -x c++");
  }
  vec_push(&argv, "-I" SHARDC_RUNTIME_INCLUDE);
  vec_push(&argv, "-I" SHARDC_RUNTIME_INCLUDE "/cuda");
  const char *extra = getenv(gpu ? "SHARDC_NVCCFLAGS" : "SHARDC_CXXFLAGS");
  if (extra) push_words(&argv, extra);
  vec_push(&argv, "-o");
  vec_push(&argv, (char *)bin);
  vec_push(&argv, (char *)src);
  if (!gpu) push_words(&argv, "-x none");
  vec_push(&argv, (char *)need[0]);
  if (mpi) vec_push(&argv, (char *)need[2]);
  vec_push(&argv, (char *)need[1]);
  if (mpi) vec_push(&argv, SHARDC_RUNTIME_MPI_LIB);
  vec_push(&argv, SHARDC_RUNTIME_LIB);
  push_words(&argv, SHARDC_BLAS_LIB);
  if (gpu) {
    push_words(&argv, SHARDC_CUDA_LINK);
    if (mpi) vec_push(&argv, SHARDC_NCCL_LIB);
    /* the runtime's own link flags (OpenMP) through to the host compiler */
    char *w = arena_strdup(SHARDC_RUNTIME_LDFLAGS);
    for (char *t = strtok(w, " \t"); t; t = strtok(NULL, " \t"))
      vec_push(&argv, arena_printf("-Xcompiler=%s", t));
  } else {
    push_words(&argv, SHARDC_RUNTIME_LDFLAGS);
    vec_push(&argv, "-lpthread");
  }
  vec_push(&argv, "-lm");
  /* nvcc runs its host compiler through a shell, which would expand these
   * in a path (a directory named `$x` or with a backtick) */
  for (int i = 1; gpu && i < argv.len; i++)
    if (strpbrk((const char *)argv.data[i], "$`\"\\")) {
      diag_fatal_noloc("nvcc cannot take the path '%s': it hands its command line to a shell, "
                       "which would expand its '$', '`', '\"' or '\\'; build into a directory "
                       "whose path has none (shardc build ... -o DIR)", (const char *)argv.data[i]);
      return -1;
    }
  char *out = NULL;
  int st = run_cmd(&argv, &out);
  if (st) {
    fprintf(stderr, "shardc: error: %s failed (%s %d) on %s:\n  ", gpu ? "nvcc" : "the C++ compiler",
            st < 0 ? "could not start," : "exit status", st, src);
    for (int i = 0; i < argv.len && argv.data[i]; i++) fprintf(stderr, "%s ", (char *)argv.data[i]);
    fprintf(stderr, "\n%s", out ? out : "");
    return -1;
  }
  if (out && *out) fprintf(stderr, "shardc: warning: the compiler said about %s:\n%s", src, out);
  int ndev = m->train.mesh ? m->train.mesh->ndev : 1;
  printf("built %s from %s (%s)\n", bin, src,
         gpu ? arena_printf("CUDA, %s", cuda_arch(m)) : "the CUDA program on this CPU");
  if (ndev > 1)
    printf("run:  mpirun -np %d %s [--steps N] [--help]   (srun -n %d ... under Slurm; one rank "
           "per GPU)\n", ndev, bin, ndev);
  else
    printf("run:  %s [--steps N] [--help]\n", bin);
  return 0;
}

int cg_build_cuda(Module *m, const char *dir, const char *src) { return build_cuda(m, dir, src, true); }
int cg_build_cuda_host(Module *m, const char *dir, const char *src) {
  return build_cuda(m, dir, src, false);
}
