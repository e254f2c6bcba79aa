/* explore_html.c — `shardc explore --report FILE.html`: one self-contained
 * XHTML file with inline SVG: the time-memory plane of every plan the
 * search evaluated (its Pareto front drawn), the best plan's pipeline
 * timeline per rank (forward, backward, bubbles, the step's reduction and
 * optimizer), its memory per stage stacked by kind, its time breakdown, and
 * the ranked table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "explore.h"
#include "schedule.h"

static void esc(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '<')
      fputs("&lt;", out);
    else if (*s == '>')
      fputs("&gt;", out);
    else if (*s == '&')
      fputs("&amp;", out);
    else
      fputc(*s, out);
  }
}

static int cmp_pt(const void *a, const void *b) {
  const ExplorePoint *x = a, *y = b;
  return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

static void scatter(FILE *out, const ExplorePoint *pts, int n, const Mesh *me) {
  const double W = 640, H = 360, L = 70, B = 40;
  double tmin = 1e300, tmax = 0, mmax = 0;
  for (int i = 0; i < n; i++) {
    if (pts[i].step_s <= 0) continue;
    if (pts[i].step_s < tmin) tmin = pts[i].step_s;
    if (pts[i].step_s > tmax) tmax = pts[i].step_s;
    if (pts[i].peak_mem > mmax) mmax = pts[i].peak_mem;
  }
  if (mmax < me->mem_bytes) mmax = me->mem_bytes;
  if (tmax <= tmin) tmax = tmin * 2 + 1e-9;
  double lt0 = log10(tmin), lt1 = log10(tmax);
#define X(t) (L + (W - L - 10) * (log10(t) - lt0) / (lt1 - lt0))
#define Y(mm) (H - B - (H - B - 10) * (mm) / mmax)
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"pareto\" width=\"%.0f\" height=\"%.0f\">\n", W, H);
  fprintf(out, "<rect x=\"%.0f\" y=\"10\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", L,
          W - L - 10, H - B - 10);
  fprintf(out, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n",
          L, W - 10, Y(me->mem_bytes), Y(me->mem_bytes));
  fprintf(out, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" fill=\"#c00\">device memory %.0f GB</text>\n", L + 4,
          Y(me->mem_bytes) - 3, me->mem_bytes / 1e9);
  for (int i = 0; i < n; i++) {
    if (pts[i].step_s <= 0) continue;
    fprintf(out, "<circle class=\"plan\" cx=\"%.1f\" cy=\"%.1f\" r=\"1.6\" fill=\"%s\" opacity=\"0.5\"/>\n",
            X(pts[i].step_s), Y(fmin(pts[i].peak_mem, mmax)), pts[i].feasible ? "#36c" : "#bbb");
  }
  /* the Pareto front: no other feasible plan is both faster and smaller */
  if (n < 1) n = 0;
  ExplorePoint *s = malloc(sizeof *s * ((size_t)n + 1));
  int k = 0;
  for (int i = 0; i < n; i++)
    if (pts[i].feasible && pts[i].step_s > 0) s[k++] = pts[i];
  qsort(s, (size_t)k, sizeof *s, cmp_pt);
  fprintf(out, "<polyline id=\"front\" fill=\"none\" stroke=\"#e80\" stroke-width=\"2\" points=\"");
  double best = 1e300;
  for (int i = 0; i < k; i++)
    if (s[i].peak_mem < best) {
      best = s[i].peak_mem;
      fprintf(out, "%.1f,%.1f ", X(s[i].step_s), Y(s[i].peak_mem));
    }
  fprintf(out, "\"/>\n");
  free(s);
  fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">step time (log, %.3g s .. %.3g s)</text>\n", L,
          H - 12, tmin, tmax);
  fprintf(out, "<text x=\"4\" y=\"20\" font-size=\"11\">peak memory</text>\n");
  fprintf(out, "<text x=\"4\" y=\"34\" font-size=\"11\">(0 .. %.3g GB)</text>\n", mmax / 1e9);
  fprintf(out, "</svg>\n");
#undef X
#undef Y
}

static void timeline(FILE *out, const PlanEval *e) {
  const Plan *p = &e->plan;
  int pp = p->pp, m = p->mb > 0 ? p->mb : 1, v = p->schedule == SCHED_INTERLEAVED ? p->vchunks : 1;
  const double W = 900, rowh = 22, L = 80;
  int rows = pp;
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"timeline\" width=\"%.0f\" height=\"%.0f\">\n", W,
          rows * rowh + 40);
  PipeSched s;
  char err[128];
  bool have = pp > 1 && m <= 4096 && !sched_build(&s, p->schedule, pp, m, v, err, sizeof err);
  double *fend = NULL, *bend = NULL, clock[PLAN_MAXSTAGES] = {0};
  double span = e->step_s > 0 ? e->step_s : 1;
  double sx = (W - L - 10) / span;
  if (have) {
    int S = pp * v;
    fend = calloc((size_t)(S * m), sizeof(double));
    bend = calloc((size_t)(S * m), sizeof(double));
    char *fset = calloc((size_t)(S * m), 1), *bset = calloc((size_t)(S * m), 1);
    int pos[SCHED_MAXPP] = {0}, left = 0;
    for (int r = 0; r < pp; r++) left += s.n[r];
    while (left > 0) {
      bool prog = false;
      for (int r = 0; r < pp; r++)
        while (pos[r] < s.n[r]) {
          PipeAct a = s.act[r][pos[r]];
          int vs = a.chunk * pp + r;
          double ready = 0;
          if (a.fwd && vs > 0) {
            if (!fset[(vs - 1) * m + a.mb]) break;
            ready = fend[(vs - 1) * m + a.mb];
          } else if (!a.fwd && vs < S - 1) {
            if (!bset[(vs + 1) * m + a.mb]) break;
            ready = bend[(vs + 1) * m + a.mb];
          }
          double d = (a.fwd ? e->tf[r] : e->tb[r]) / v, t0 = clock[r] > ready ? clock[r] : ready;
          clock[r] = t0 + d;
          if (a.fwd) {
            fend[vs * m + a.mb] = clock[r];
            fset[vs * m + a.mb] = 1;
          } else {
            bend[vs * m + a.mb] = clock[r];
            bset[vs * m + a.mb] = 1;
          }
          fprintf(out, "<rect class=\"%s\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" "
                       "stroke=\"#fff\" stroke-width=\"0.3\"/>\n",
                  a.fwd ? "fwd" : "bwd", L + t0 * sx, 10 + r * rowh, d * sx, rowh - 4, a.fwd ? "#4a8" : "#38c");
          pos[r]++;
          left--;
          prog = true;
        }
      if (!prog) break;
    }
    free(fset);
    free(bset);
    sched_free(&s);
  } else {
    clock[0] = m * (e->tf[0] + e->tb[0]);
    fprintf(out, "<rect class=\"fwd\" x=\"%.1f\" y=\"10\" width=\"%.2f\" height=\"%.0f\" fill=\"#4a8\"/>\n", L,
            m * e->tf[0] * sx, rowh - 4);
    fprintf(out, "<rect class=\"bwd\" x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"%.0f\" fill=\"#38c\"/>\n",
            L + m * e->tf[0] * sx, m * e->tb[0] * sx, rowh - 4);
  }
  for (int r = 0; r < rows; r++) {
    double end = clock[r];
    fprintf(out, "<text x=\"4\" y=\"%.0f\" font-size=\"11\">rank %d</text>\n", 24 + r * rowh, r);
    fprintf(out, "<rect class=\"step\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" fill=\"#d84\"/>\n",
            L + end * sx, 10 + r * rowh, (e->t_reduce + e->t_opt) * sx, rowh - 4);
  }
  free(fend);
  free(bend);
  fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">green: forward, blue: backward, orange: gradient "
               "reduction and optimizer; gaps: bubbles (%.3g s step)</text>\n",
          L, rows * rowh + 30, e->step_s);
  fprintf(out, "</svg>\n");
}

static void memory(FILE *out, const PlanEval *e, const Mesh *me) {
  const char *kind[4] = {"parameters", "gradients", "optimizer state", "activations"};
  const char *col[4] = {"#69c", "#9c6", "#c96", "#c69"};
  int S = e->nstages > 0 ? e->nstages : 1;
  const double H = 260, B = 30, bw = S > 32 ? 8 : 20;
  double top = me->mem_bytes > e->peak_mem ? me->mem_bytes : e->peak_mem;
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"memory\" width=\"%.0f\" height=\"%.0f\">\n",
          60 + S * (bw + 4) + 160, H + 10);
  for (int k = 0; k < S; k++) {
    double y = H - B;
    for (int j = 0; j < 4; j++) {
      double h = (H - B - 10) * e->mem_kind[k][j] / top;
      y -= h;
      fprintf(out, "<rect class=\"mem-%d\" x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" fill=\"%s\"/>\n", j,
              50 + k * (bw + 4), y, bw, h, col[j]);
    }
  }
  double ym = H - B - (H - B - 10) * me->mem_bytes / top;
  fprintf(out, "<line x1=\"45\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n",
          55 + S * (bw + 4), ym, ym);
  for (int j = 0; j < 4; j++)
    fprintf(out, "<rect x=\"%.0f\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"%d\" "
                 "font-size=\"11\">%s</text>\n",
            65 + S * (bw + 4), 14 + 16 * j, col[j], 80 + S * (bw + 4), 23 + 16 * j, kind[j]);
  fprintf(out, "<text x=\"45\" y=\"%.0f\" font-size=\"11\">stages 0..%d; device memory %.0f GB (dashed)</text>\n",
          H - 8, S - 1, me->mem_bytes / 1e9);
  fprintf(out, "</svg>\n");
}

static void breakdown(FILE *out, const PlanEval *e) {
  const char *name[] = {"GEMMs", "attention", "elementwise", "tensor/sequence comm", "pipeline bubble",
                        "gradient reduction", "optimizer"};
  double v[] = {e->t_gemm, e->t_attn, e->t_elem, e->t_comm, e->t_bubble > 0 ? e->t_bubble : 0, e->t_reduce,
                e->t_opt};
  double tot = 0;
  for (int i = 0; i < 7; i++) tot += v[i];
  if (tot <= 0) tot = 1;
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"breakdown\" width=\"640\" height=\"%d\">\n", 7 * 20 + 10);
  for (int i = 0; i < 7; i++) {
    fprintf(out, "<text x=\"4\" y=\"%d\" font-size=\"11\">%s</text>\n", 18 + 20 * i, name[i]);
    fprintf(out, "<rect class=\"op\" x=\"160\" y=\"%d\" width=\"%.1f\" height=\"14\" fill=\"#58a\"/>\n", 6 + 20 * i,
            400 * v[i] / tot);
    fprintf(out, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\">%.3g s (%.1f%%)</text>\n", 166 + 400 * v[i] / tot,
            18 + 20 * i, v[i], 100 * v[i] / tot);
  }
  fprintf(out, "</svg>\n");
}

void explore_report_html(FILE *out, const ModelShape *ms, const HwModel *hw, const Mesh *me,
                         const PlanEval *best, int nbest, const ExplorePoint *pts, int npts,
                         const PlanEval *ref) {
  fprintf(out, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\">\n<head>\n<meta charset=\"utf-8\"/>\n"
               "<title>shardc explore: %s</title>\n<style>body{font-family:sans-serif;margin:20px}"
               "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}"
               "</style>\n</head>\n<body>\n",
          ms->name);
  fprintf(out, "<h1>%s on ", ms->name);
  esc(out, me->name);
  fprintf(out, " (%d x %s, %d node%s x %d)</h1>\n<p>", me->ndev, me->device->name, me->nodes,
          me->nodes == 1 ? "" : "s", me->per_node);
  esc(out, hw->source);
  fprintf(out, "; %d plans evaluated.</p>\n", npts);
  fprintf(out, "<h2>Time and memory of every plan (Pareto front in orange, infeasible in grey)</h2>\n");
  scatter(out, pts, npts, me);
  if (nbest > 0) {
    const PlanEval *e = &best[0];
    fprintf(out, "<h2>Best plan: ");
    esc(out, e->spec);
    fprintf(out, " (microbatch %d), %.4g s/step, MFU %.1f%%</h2>\n", e->b, e->step_s, 100 * e->mfu);
    fprintf(out, "<h3>Pipeline timeline per rank</h3>\n");
    timeline(out, e);
    fprintf(out, "<h3>Memory per stage by kind</h3>\n");
    memory(out, e, me);
    fprintf(out, "<h3>Predicted time per step by kind (pipeline rank 0)</h3>\n");
    breakdown(out, e);
  }
  fprintf(out, "<h2>Ranked plans</h2>\n<table id=\"plans\">\n<tr><th>rank</th><th>strategy</th><th>microbatch</th>"
               "<th>step (s)</th><th>tokens/s</th><th>MFU</th><th>peak memory (GB)</th><th>feasible</th></tr>\n");
  for (int i = 0; i < nbest + (ref != NULL); i++) {
    const PlanEval *e = i < nbest ? &best[i] : ref;
    if (i < nbest)
      fprintf(out, "<tr><td>%d</td><td>", i + 1);
    else
      fprintf(out, "<tr id=\"trainplan\"><td>the train block's plan</td><td>");
    esc(out, e->spec);
    fprintf(out, "</td><td>%d</td><td>%.4g</td><td>%.4g</td><td>%.1f%%</td><td>%.2f</td><td>", e->b, e->step_s,
            e->tokens_per_s, 100 * e->mfu, e->peak_mem / 1e9);
    esc(out, e->feasible ? "yes" : e->reason);
    fprintf(out, "</td></tr>\n");
  }
  fprintf(out, "</table>\n</body>\n</html>\n");
}
