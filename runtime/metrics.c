/* metrics.c — the JSONL metrics log and the progress line. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

int rt_metrics_open(RtMetrics *m, const char *path, int append) {
  m->f = NULL;
  if (!path)
    return RT_OK;
  m->f = fopen(path, append ? "a" : "w");
  if (!m->f)
    return rt_errorf(RT_ERR_IO, "%s: cannot open metrics log: %s", path, strerror(errno));
  return RT_OK;
}

static void put_num(FILE *f, const char *fmt, double x) {
  if (isfinite(x))
    fprintf(f, fmt, x);
  else
    fputs("null", f); // JSON has no NaN/Infinity
}

int rt_metrics_log(RtMetrics *m, long step, double loss, double lr, double step_ms,
                   double tokens_per_s, double model_tflops, double mfu) {
  if (!m->f)
    return RT_OK;
  fprintf(m->f, "{\"step\":%ld,\"loss\":", step);
  put_num(m->f, "%.9g", loss);
  fputs(",\"lr\":", m->f);
  put_num(m->f, "%.6g", lr);
  fputs(",\"step_ms\":", m->f);
  put_num(m->f, "%.6g", step_ms);
  fputs(",\"tokens_per_s\":", m->f);
  put_num(m->f, "%.0f", tokens_per_s);
  fputs(",\"model_tflops_per_device\":", m->f);
  put_num(m->f, "%.4g", model_tflops);
  fputs(",\"mfu\":", m->f);
  put_num(m->f, "%.4g", mfu);
  fputs("}\n", m->f);
  if (fflush(m->f) != 0 || ferror(m->f))
    return rt_errorf(RT_ERR_IO, "metrics log: write failed: %s", strerror(errno));
  return RT_OK;
}

int rt_metrics_close(RtMetrics *m) {
  if (!m->f)
    return RT_OK;
  int rc = fclose(m->f);
  m->f = NULL;
  if (rc != 0)
    return rt_errorf(RT_ERR_IO, "metrics log: close failed: %s", strerror(errno));
  return RT_OK;
}

void rt_progress_init(RtProgress *p, long total_steps, long every, int quiet) {
  memset(p, 0, sizeof *p);
  p->out = stderr;
  p->total = total_steps;
  p->every = every > 0 ? every : 1;
  p->quiet = quiet;
  p->tty = isatty(fileno(stderr));
  p->first = -1;
}

static void fmt_duration(char *buf, size_t cap, double s) {
  if (!isfinite(s) || s < 0)
    snprintf(buf, cap, "?");
  else if (s < 60)
    snprintf(buf, cap, "%.0fs", s);
  else if (s < 3600)
    snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else
    snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void fmt_rate(char *buf, size_t cap, double r) {
  if (r >= 1e6)
    snprintf(buf, cap, "%.2fM", r / 1e6);
  else if (r >= 1e3)
    snprintf(buf, cap, "%.1fk", r / 1e3);
  else
    snprintf(buf, cap, "%.0f", r);
}

void rt_progress_step(RtProgress *p, long step, double loss, double tokens_per_s,
                      double model_tflops, double mfu) {
  if (p->quiet)
    return;
  double now = rt_now();
  if (p->first < 0) {
    p->first = step;
    p->t_first = now;
  }
  int last = step >= p->total;
  if (!p->tty && !last && step % p->every != 0)
    return;
  char eta[32], rate[32];
  long done = step - p->first; // steps timed since the first one we saw
  double remaining = (double)(p->total - step);
  fmt_duration(eta, sizeof eta, done > 0 ? (now - p->t_first) / done * remaining : NAN);
  fmt_rate(rate, sizeof rate, tokens_per_s);
  char fl[64] = "", mf[32] = "";
  if (isfinite(model_tflops))
    snprintf(fl, sizeof fl, model_tflops >= 1 ? " | %.1f TFLOP/s/dev" : " | %.1f GFLOP/s/dev",
             model_tflops >= 1 ? model_tflops : model_tflops * 1e3);
  if (isfinite(mfu))
    snprintf(mf, sizeof mf, " | MFU %.1f%%", 100 * mfu);
  fprintf(p->out, "%sstep %ld/%ld | loss %.4f | %s tok/s%s%s | ETA %s%s", p->tty ? "\r" : "",
          step, p->total, loss, rate, fl, mf, eta, p->tty ? "\033[K" : "\n");
  p->drawn = p->tty;
  if (p->tty && last) {
    fputc('\n', p->out);
    p->drawn = 0;
  }
  fflush(p->out);
}

void rt_progress_done(RtProgress *p) {
  if (p->drawn && !p->quiet) {
    fputc('\n', p->out);
    fflush(p->out);
  }
  p->drawn = 0;
}
