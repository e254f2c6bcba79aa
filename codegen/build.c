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
  int rc = cg_emit(f, m, target, opt);
  if (fclose(f) && !rc) rc = -1;
  if (rc) {
    if (!diag_error_count()) diag_fatal_noloc("cannot write '%s': %s", src, strerror(errno));
    return -1;
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
  push_words(&argv, "-std=gnu11 -O2 -Wall");
  if (mpi) vec_push(&argv, "-DSHARDC_MPI=1");
  const char *data = cg_default_data(m);
  if (data) vec_push(&argv, arena_printf("-DDEFAULT_DATA=\"%s\"", data));
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
