/* rtc_prof.cu — the kernel profile of a CUDA program (SHARDC_PROFILE): a
 * pair of events around every launch (RTC_LAUNCH), GEMM and collective on
 * its stream, resolved in batches and summed per family (the source file:
 * k_attention.cu -> "attention", the program's own fused loops -> "model")
 * and per kernel.  The driver turns it on, resets it after the warm-up
 * steps, and prints the table at the end (rtc_train.h).  The events add a
 * little time to each launch: profile runs are not timing runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtc_internal.h"

int rtc_prof_on;

#define PROF_PAIRS 4096 /* resolved in batches of this many */
#define PROF_NAMES 256

typedef struct {
  char family[32], kernel[64];
  long calls;
  double ms;
} ProfName;

static cudaEvent_t ev_[PROF_PAIRS][2];
static int name_of_[PROF_PAIRS];
static int npairs_, created_;
static ProfName names_[PROF_NAMES];
static int nnames_;

static void flush_(void) {
  if (!npairs_) return;
  cudaCheck(cudaEventSynchronize(ev_[npairs_ - 1][1]));
  for (int i = 0; i < npairs_; i++) {
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, ev_[i][0], ev_[i][1]));
    names_[name_of_[i]].ms += ms;
    names_[name_of_[i]].calls++;
  }
  npairs_ = 0;
}

void rtc_prof_begin(void) {
  if (npairs_ == PROF_PAIRS) flush_();
  if (npairs_ == created_) {
    cudaCheck(cudaEventCreate(&ev_[created_][0]));
    cudaCheck(cudaEventCreate(&ev_[created_][1]));
    created_++;
  }
  cudaCheck(cudaEventRecord(ev_[npairs_][0], (cudaStream_t)rtc_stream));
}

/* "runtime/cuda/k_attention.cu" -> "attention"; a generated model.cu -> "model" */
static void family_(const char *file, char *out, size_t cap) {
  const char *b = strrchr(file, '/');
  b = b ? b + 1 : file;
  if (!strncmp(b, "k_", 2)) b += 2;
  else if (!strncmp(b, "rtc_", 4)) b += 4;
  snprintf(out, cap, "%s", b);
  char *dot = strchr(out, '.');
  if (dot) *dot = 0;
}

void rtc_prof_end(const char *file, const char *what) {
  char fam[32];
  family_(file, fam, sizeof fam);
  int k = 0;
  while (k < nnames_ && (strcmp(names_[k].family, fam) || strncmp(names_[k].kernel, what, 63)))
    k++;
  if (k == nnames_) {
    if (nnames_ == PROF_NAMES) k = PROF_NAMES - 1; /* "other": the last slot */
    else {
      snprintf(names_[k].family, sizeof names_[k].family, "%s", fam);
      snprintf(names_[k].kernel, sizeof names_[k].kernel, "%s", what);
      nnames_++;
    }
  }
  cudaCheck(cudaEventRecord(ev_[npairs_][1], (cudaStream_t)rtc_stream));
  name_of_[npairs_++] = k;
}

void rtc_prof_reset(void) {
  flush_();
  for (int k = 0; k < nnames_; k++) {
    names_[k].calls = 0;
    names_[k].ms = 0;
  }
}

static int by_ms_(const void *a, const void *b) {
  double x = ((const ProfName *)a)->ms, y = ((const ProfName *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

void rtc_prof_report(FILE *f, long steps) {
  flush_();
  double total = 0;
  for (int k = 0; k < nnames_; k++) total += names_[k].ms;
  ProfName fam[PROF_NAMES];
  int nf = 0;
  for (int k = 0; k < nnames_; k++) {
    int j = 0;
    while (j < nf && strcmp(fam[j].family, names_[k].family)) j++;
    if (j == nf) {
      memset(&fam[nf], 0, sizeof fam[nf]);
      memcpy(fam[nf].family, names_[k].family, sizeof fam[nf].family); /* both 32, terminated */
      nf++;
    }
    fam[j].ms += names_[k].ms;
    fam[j].calls += names_[k].calls;
  }
  qsort(fam, (size_t)nf, sizeof *fam, by_ms_);
  qsort(names_, (size_t)nnames_, sizeof *names_, by_ms_);
  fprintf(f, "profile:  device time per step by kernel family over %ld step%s (%.2f ms per step "
             "in kernels, GEMMs and collectives)\n", steps, steps == 1 ? "" : "s",
          steps ? total / (double)steps : 0.0);
  for (int j = 0; j < nf; j++)
    fprintf(f, "  %-14s %10.3f ms %5.1f%%  %7ld calls\n", fam[j].family,
            steps ? fam[j].ms / (double)steps : 0.0, total > 0 ? 100 * fam[j].ms / total : 0.0,
            steps ? fam[j].calls / steps : 0L);
  fprintf(f, "  the heaviest kernels:\n");
  for (int k = 0; k < nnames_ && k < 12; k++)
    fprintf(f, "  %-14s %-36s %10.3f ms %5.1f%%\n", names_[k].family, names_[k].kernel,
            steps ? names_[k].ms / (double)steps : 0.0, total > 0 ? 100 * names_[k].ms / total : 0.0);
  fflush(f);
}
