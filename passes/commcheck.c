/* commcheck.c — runs every rank's communication events against MPI/NCCL
 * matching rules and reports the first mismatch, deadlock or leftover send
 * (see commcheck.h).
 *
 * The run is event-driven: a worklist holds ranks that may progress; a rank
 * runs until it blocks in a RECV (no matching send posted yet) or a COLL (not
 * every member there yet).  A SEND wakes its receiver, the last member to
 * reach a COLL wakes the others.  Every event is visited once, a blocked rank
 * is requeued only when its event can complete, so the cost is O(events +
 * nranks^2).  Recv k from s on rank d is matched with send k from s to d
 * (FIFO per ordered pair), found through per-pair lists of send positions.
 * Under rendezvous (NCCL) a rank at a point-to-point event posts its whole
 * group, counting its sends and receives per pair, and waits until each is
 * matched by the other side's posts; a post wakes the peers waiting on
 * that pair, which re-test their group (O(group) per wake).
 */
#include "commcheck.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bounded error text ---- */

/* Room kept free by list items for the closing " ... (N more)". */
enum { MSG_RESERVE = 32 };

typedef struct Msg {
  char *buf;
  int cap, len;
  int omitted;   /* list items left out */
  bool full;     /* cut: ignore further text */
} Msg;

static char *vfmt(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (k < 0) k = 0;
  char *s = malloc((size_t)k + 1);
  if (!s) return NULL;
  vsnprintf(s, (size_t)k + 1, fmt, ap);
  return s;
}

static void msg_put(Msg *m, const char *s) {
  if (!m->buf || m->cap <= 0 || m->full) return;
  int k = (int)strlen(s);
  if (m->len + k <= m->cap - 1) {
    memcpy(m->buf + m->len, s, (size_t)k + 1);
    m->len += k;
    return;
  }
  /* Cut, ending in "...". */
  int room = m->cap - 1 - m->len;
  memcpy(m->buf + m->len, s, (size_t)(room > 0 ? room : 0));
  m->len = m->cap - 1;
  m->buf[m->len] = 0;
  if (m->cap >= 4) memcpy(m->buf + m->cap - 4, "...", 4);
  m->full = true;
}

/* Text that must appear (headers): cut with "..." if it does not fit. */
static void msg_add(Msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_add(Msg *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = vfmt(fmt, ap);
  va_end(ap);
  if (s) msg_put(m, s);
  free(s);
}

/* One item of a list: appended whole, or counted as omitted. */
static void msg_item(Msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_item(Msg *m, const char *fmt, ...) {
  if (m->full || m->omitted) {
    m->omitted++;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  char *s = vfmt(fmt, ap);
  va_end(ap);
  if (!s) return;
  int k = (int)strlen(s);
  if (m->len == 0 || m->len + k <= m->cap - 1 - MSG_RESERVE)
    msg_put(m, s);
  else
    m->omitted++;
  free(s);
}

static void msg_end(Msg *m) {
  if (m->omitted) msg_add(m, " ... (%d more)", m->omitted);
}

/* "0,1,4-7" into buf, cut with "..." when longer than cap. */
static void fmt_ranks(char *buf, int cap, const int *r, int n) {
  Msg m = {buf, cap, 0, 0, false};
  if (cap > 0) buf[0] = 0;
  for (int i = 0; i < n && !m.full;) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
    if (j - i >= 2)
      msg_add(&m, "%s%d-%d", i ? "," : "", r[i], r[j]);
    else
      for (int k = i; k <= j; k++) msg_add(&m, "%s%d", k ? "," : "", r[k]);
    i = j + 1;
  }
}

/* ---- the check ---- */

typedef struct Check {
  const CommProgram *p;
  int N;
  int *pc;
  bool *blocked, *queued;
  int *queue, qhead, qlen;   /* ring of ranks that may progress */
  int *arrived;              /* per communicator: members waiting in a COLL on it */
  int *posted, *consumed;    /* per (sender*N + receiver) */
  int *send_off;             /* per pair: start in send_pos; N*N+1 entries */
  int *send_pos;             /* event indices of sends, grouped by pair, in order */
  /* rendezvous */
  int *rposted;              /* per pair: receives posted by the receiver */
  int *ev_off;               /* per rank: its first event's index in seq */
  int *seq;                  /* per event: its position among its pair's sends (or receives) */
  int *gend;                 /* per rank: the end of its posted group (0: none posted) */
  Msg msg;
} Check;

static const char *what_of(const CommEvent *e, int i, char *buf, int cap) {
  if (e->what) return e->what;
  snprintf(buf, (size_t)cap, "event %d", i);
  return buf;
}

static const char *ordinal_suffix(int k) {
  if (k % 100 >= 11 && k % 100 <= 13) return "th";
  return k % 10 == 1 ? "st" : k % 10 == 2 ? "nd" : k % 10 == 3 ? "rd" : "th";
}

static void push(Check *c, int r) {
  if (c->queued[r]) return;
  c->queued[r] = true;
  c->queue[(c->qhead + c->qlen++) % c->N] = r;
}

static bool is_member(const CommProgram *p, int comm, int r) {
  const int *m = p->comm_members[comm];
  int lo = 0, hi = p->comm_size[comm] - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if (m[mid] == r) return true;
    if (m[mid] < r) lo = mid + 1;
    else hi = mid - 1;
  }
  return false;
}

/* Structure: ids in range, members sorted, every COLL from a member. */
static int check_shape(Check *c) {
  const CommProgram *p = c->p;
  char w[32];
  if (p->nranks < 0 || p->ncomms < 0) {
    msg_add(&c->msg, "malformed communication program: %d ranks, %d communicators", p->nranks,
            p->ncomms);
    return -1;
  }
  if ((p->nranks && (!p->n || !p->ev)) || (p->ncomms && (!p->comm_size || !p->comm_members))) {
    msg_add(&c->msg, "malformed communication program: missing arrays");
    return -1;
  }
  for (int k = 0; k < p->ncomms; k++) {
    int sz = p->comm_size[k];
    if (sz < 1 || sz > p->nranks || !p->comm_members[k]) {
      msg_add(&c->msg, "communicator %d has %d members (world has %d ranks)", k, sz, p->nranks);
      return -1;
    }
    for (int i = 0; i < sz; i++) {
      int r = p->comm_members[k][i];
      if (r < 0 || r >= p->nranks || (i && r <= p->comm_members[k][i - 1])) {
        msg_add(&c->msg,
                "communicator %d: member %d is rank %d (members must be sorted world ranks "
                "below %d, each once)", k, i, r, p->nranks);
        return -1;
      }
    }
  }
  for (int r = 0; r < p->nranks; r++) {
    if (p->n[r] < 0 || (p->n[r] && !p->ev[r])) {
      msg_add(&c->msg, "rank %d: malformed event list (%d events)", r, p->n[r]);
      return -1;
    }
    for (int i = 0; i < p->n[r]; i++) {
      const CommEvent *e = &p->ev[r][i];
      const char *wh = what_of(e, i, w, sizeof w);
      switch (e->kind) {
      case CEV_COLL:
        if (e->comm < 0 || e->comm >= p->ncomms) {
          msg_add(&c->msg, "rank %d event %d names communicator %d, but there are %d (%s)", r,
                  i, e->comm, p->ncomms, wh);
          return -1;
        }
        if (!e->op) {
          msg_add(&c->msg, "rank %d event %d: collective without an op (%s)", r, i, wh);
          return -1;
        }
        if (!is_member(p, e->comm, r)) {
          char ranks[160];
          fmt_ranks(ranks, sizeof ranks, p->comm_members[e->comm], p->comm_size[e->comm]);
          msg_add(&c->msg,
                  "rank %d issues %s of %llu bytes on communicator %d (ranks %s) but is not a "
                  "member of it (%s)", r, e->op, (unsigned long long)e->bytes, e->comm, ranks, wh);
          return -1;
        }
        break;
      case CEV_SEND:
      case CEV_RECV:
        if (e->peer < 0 || e->peer >= p->nranks) {
          msg_add(&c->msg, "rank %d event %d: %s peer rank %d out of range (%d ranks) (%s)", r,
                  i, e->kind == CEV_SEND ? "send" : "recv", e->peer, p->nranks, wh);
          return -1;
        }
        break;
      default:
        msg_add(&c->msg, "rank %d event %d: unknown event kind %d", r, i, (int)e->kind);
        return -1;
      }
    }
  }
  return 0;
}

/* Per-pair lists of send positions, in program order. */
static void index_sends(Check *c) {
  const CommProgram *p = c->p;
  int N = c->N;
  for (int r = 0; r < N; r++)
    for (int i = 0; i < p->n[r]; i++)
      if (p->ev[r][i].kind == CEV_SEND) c->send_off[r * N + p->ev[r][i].peer + 1]++;
  for (int k = 0; k < N * N; k++) c->send_off[k + 1] += c->send_off[k];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < p->n[r]; i++) {
      const CommEvent *e = &p->ev[r][i];
      if (e->kind == CEV_SEND) {
        int pair = r * N + e->peer;
        c->seq[c->ev_off[r] + i] = c->posted[pair];
        c->send_pos[c->send_off[pair] + c->posted[pair]++] = i;
      } else if (e->kind == CEV_RECV) {
        c->seq[c->ev_off[r] + i] = c->consumed[e->peer * N + r]++;
      }
    }
  memset(c->posted, 0, sizeof(int) * (size_t)N * (size_t)N);
  memset(c->consumed, 0, sizeof(int) * (size_t)N * (size_t)N);
}

/* Receive k (event i of rank r) meets its send: tag and bytes must agree. */
static int match_recv(Check *c, int r, int i, int k) {
  const CommProgram *p = c->p;
  const CommEvent *e = &p->ev[r][i];
  int pair = e->peer * c->N + r;
  int si = c->send_pos[c->send_off[pair] + k];
  const CommEvent *se = &p->ev[e->peer][si];
  char w1[32], w2[32];
  if (se->tag == e->tag && se->bytes == e->bytes) return 0;
  msg_add(&c->msg,
          "send/recv mismatch in the %d%s message from rank %d to rank %d: rank %d sends "
          "%llu bytes with tag %d (%s) but rank %d receives %llu bytes with tag %d (%s)",
          k + 1, ordinal_suffix(k + 1), e->peer, r, e->peer, (unsigned long long)se->bytes,
          se->tag, what_of(se, si, w1, sizeof w1), r, (unsigned long long)e->bytes, e->tag,
          what_of(e, i, w2, sizeof w2));
  return -1;
}

/* ---- rendezvous (NCCL) groups ---- */

/* The end of the group of point-to-point events that starts at event i of rank r. */
static int group_end(const CommProgram *p, int r, int i) {
  int g = p->ev[r][i].group, j = i + 1;
  if (g)
    while (j < p->n[r] && p->ev[r][j].kind != CEV_COLL && p->ev[r][j].group == g) j++;
  return j;
}

/* Whether event i of rank r (in a posted group) is matched: a send by its
 * receiver's posted receive, a receive by its sender's posted send. */
static bool matched(const Check *c, int r, int i) {
  const CommEvent *e = &c->p->ev[r][i];
  int k = c->seq[c->ev_off[r] + i];
  return e->kind == CEV_SEND ? c->rposted[r * c->N + e->peer] > k
                             : c->posted[e->peer * c->N + r] > k;
}

/* Whether rank d is blocked where a send from r or a receive of r's may
 * let it go on: in a posted group, or (MPI) in a receive from r. */
static bool waits_on(const Check *c, int d, int r) {
  if (!c->blocked[d]) return false;
  if (c->gend[d]) return true;
  const CommEvent *de = &c->p->ev[d][c->pc[d]];
  return de->kind == CEV_RECV && de->peer == r;
}

/* Rank r at a point-to-point event: posts its group (once) and completes
 * it when every event in it is matched; 1 when it completed. */
static int run_group(Check *c, int r) {
  const CommProgram *p = c->p;
  int N = c->N, i0 = c->pc[r];
  if (!c->gend[r]) {
    c->gend[r] = group_end(p, r, i0);
    for (int i = i0; i < c->gend[r]; i++) {
      const CommEvent *e = &p->ev[r][i];
      if (e->kind == CEV_SEND) c->posted[r * N + e->peer]++;
      else c->rposted[e->peer * N + r]++;
      if (waits_on(c, e->peer, r)) push(c, e->peer);
    }
  }
  for (int i = i0; i < c->gend[r]; i++)
    if (!matched(c, r, i)) return 0;
  for (int i = i0; i < c->gend[r]; i++) {
    const CommEvent *e = &p->ev[r][i];
    if (e->kind != CEV_RECV) continue;
    int k = c->seq[c->ev_off[r] + i];
    if (match_recv(c, r, i, k)) return -1;
    c->consumed[e->peer * N + r] = k + 1;
  }
  c->pc[r] = c->gend[r];
  c->gend[r] = 0;
  return 1;
}

/* The last member arrived at a COLL on comm: all must agree on op and bytes. */
static int fire_coll(Check *c, int comm) {
  const CommProgram *p = c->p;
  const int *mem = p->comm_members[comm];
  int sz = p->comm_size[comm];
  const CommEvent *e0 = &p->ev[mem[0]][c->pc[mem[0]]];
  bool ok = true;
  for (int i = 1; i < sz && ok; i++) {
    const CommEvent *e = &p->ev[mem[i]][c->pc[mem[i]]];
    ok = !strcmp(e->op, e0->op) && e->bytes == e0->bytes;
  }
  if (ok) return 0;
  char ranks[160], w[32];
  fmt_ranks(ranks, sizeof ranks, mem, sz);
  msg_add(&c->msg, "communicator %d (ranks %s): rank %d issues %s of %llu bytes (%s)", comm,
          ranks, mem[0], e0->op, (unsigned long long)e0->bytes,
          what_of(e0, c->pc[mem[0]], w, sizeof w));
  /* The members that disagree with the lowest one. */
  const char *sep = " but ";
  for (int i = 1; i < sz; i++) {
    const CommEvent *e = &p->ev[mem[i]][c->pc[mem[i]]];
    if (!strcmp(e->op, e0->op) && e->bytes == e0->bytes) continue;
    msg_item(&c->msg, "%srank %d issues %s of %llu bytes (%s)", sep, mem[i], e->op,
             (unsigned long long)e->bytes, what_of(e, c->pc[mem[i]], w, sizeof w));
    sep = ", ";
  }
  msg_end(&c->msg);
  return -1;
}

/* Runs rank r until it blocks or finishes. */
static int run_rank(Check *c, int r) {
  const CommProgram *p = c->p;
  int N = c->N;
  c->blocked[r] = false;
  while (c->pc[r] < p->n[r]) {
    const CommEvent *e = &p->ev[r][c->pc[r]];
    if (p->rendezvous && e->kind != CEV_COLL && e->group >= 0) {
      int done = run_group(c, r);
      if (done < 0) return -1;
      if (!done) {
        c->blocked[r] = true;
        return 0;
      }
    } else if (e->kind == CEV_SEND) {
      c->posted[r * N + e->peer]++;
      if (waits_on(c, e->peer, r)) push(c, e->peer);
      c->pc[r]++;
    } else if (e->kind == CEV_RECV) {
      int pair = e->peer * N + r;
      if (c->posted[pair] == c->consumed[pair]) {
        c->blocked[r] = true;
        return 0;
      }
      int k = c->consumed[pair]++;
      if (match_recv(c, r, c->pc[r], k)) return -1;
      c->pc[r]++;
    } else {
      if (++c->arrived[e->comm] < p->comm_size[e->comm]) {
        c->blocked[r] = true;
        return 0;
      }
      if (fire_coll(c, e->comm)) return -1;
      c->arrived[e->comm] = 0;
      const int *mem = p->comm_members[e->comm];
      for (int i = 0; i < p->comm_size[e->comm]; i++) {
        if (mem[i] == r) continue;
        c->pc[mem[i]]++;
        c->blocked[mem[i]] = false;
        push(c, mem[i]);
      }
      c->pc[r]++;
    }
  }
  return 0;
}

/* "rank S has finished" or "rank S is blocked at its event E" into buf. */
static void peer_state(const Check *c, int s, char *buf, int cap) {
  if (c->pc[s] >= c->p->n[s])
    snprintf(buf, (size_t)cap, "rank %d has finished", s);
  else
    snprintf(buf, (size_t)cap, "rank %d is blocked at its event %d", s, c->pc[s]);
}

static void report_deadlock(Check *c) {
  const CommProgram *p = c->p;
  char w[32], ranks[160];
  int nblocked = 0;
  for (int r = 0; r < c->N; r++) nblocked += c->pc[r] < p->n[r];
  msg_add(&c->msg, "deadlock: %d rank%s can never finish:", nblocked, nblocked == 1 ? "" : "s");
  const char *sep = " ";
  int *missing = malloc(sizeof(int) * (size_t)c->N);
  for (int r = 0; r < c->N; r++) {
    if (c->pc[r] >= p->n[r]) continue;
    int i = c->pc[r];
    const CommEvent *e = &p->ev[r][i];
    if (p->rendezvous && e->kind != CEV_COLL && e->group >= 0) {
      /* the group's first event not matched */
      int end = c->gend[r] ? c->gend[r] : group_end(p, r, i), j = i;
      while (j < end - 1 && matched(c, r, j)) j++;
      const CommEvent *u = &p->ev[r][j];
      int s = u->peer;
      char state[64];
      peer_state(c, s, state, sizeof state);
      msg_item(&c->msg,
               "%srank %d waits at event %d (in an NCCL group of events %d-%d) in %s of %llu "
               "bytes with tag %d %s rank %d (%s), %s", sep, r, j, i, end - 1,
               u->kind == CEV_SEND ? "send" : "recv", (unsigned long long)u->bytes, u->tag,
               u->kind == CEV_SEND ? "to" : "from", s, what_of(u, j, w, sizeof w), state);
    } else if (e->kind == CEV_RECV) {
      int s = e->peer;
      char state[64];
      peer_state(c, s, state, sizeof state);
      msg_item(&c->msg,
               "%srank %d waits at event %d in recv of %llu bytes with tag %d from rank %d (%s), "
               "%s", sep, r, i, (unsigned long long)e->bytes, e->tag, s, what_of(e, i, w, sizeof w),
               state);
    } else {
      /* Members not (yet) at a collective on this communicator. */
      const int *mem = p->comm_members[e->comm];
      int nm = 0;
      for (int k = 0; k < p->comm_size[e->comm]; k++) {
        int q = mem[k];
        bool there = c->pc[q] < p->n[q] && p->ev[q][c->pc[q]].kind == CEV_COLL &&
                     p->ev[q][c->pc[q]].comm == e->comm;
        if (!there && missing) missing[nm++] = q;
      }
      fmt_ranks(ranks, sizeof ranks, missing ? missing : mem, missing ? nm : 0);
      msg_item(&c->msg,
               "%srank %d waits at event %d in %s of %llu bytes on communicator %d (%s), for "
               "rank%s %s", sep, r, i, e->op, (unsigned long long)e->bytes, e->comm,
               what_of(e, i, w, sizeof w), nm == 1 ? "" : "s", ranks);
    }
    sep = "; ";
  }
  free(missing);
  msg_end(&c->msg);
}

static int report_unmatched(Check *c) {
  const CommProgram *p = c->p;
  int N = c->N, total = 0;
  char w[32];
  for (int k = 0; k < N * N; k++) total += c->posted[k] - c->consumed[k];
  if (!total) return 0;
  msg_add(&c->msg, "%d send%s never received:", total, total == 1 ? " is" : "s are");
  const char *sep = " ";
  for (int s = 0; s < N; s++)
    for (int d = 0; d < N; d++) {
      int pair = s * N + d;
      for (int k = c->consumed[pair]; k < c->posted[pair]; k++) {
        int i = c->send_pos[c->send_off[pair] + k];
        const CommEvent *e = &p->ev[s][i];
        msg_item(&c->msg, "%srank %d event %d sends %llu bytes with tag %d to rank %d (%s)", sep,
                 s, i, (unsigned long long)e->bytes, e->tag, d, what_of(e, i, w, sizeof w));
        sep = "; ";
      }
    }
  msg_end(&c->msg);
  return -1;
}

int commcheck(const CommProgram *p, char *err, int errcap) {
  Check c = {0};
  c.p = p;
  c.msg.buf = err, c.msg.cap = err ? errcap : 0;
  if (err && errcap > 0) err[0] = 0;
  if (check_shape(&c)) return -1;
  int N = c.N = p->nranks;
  if (!N) return 0;
  size_t nn = (size_t)N * (size_t)N;
  long nsend = 0;
  for (int r = 0; r < N; r++)
    for (int i = 0; i < p->n[r]; i++) nsend += p->ev[r][i].kind == CEV_SEND;
  c.pc = calloc((size_t)N, sizeof(int));
  c.blocked = calloc((size_t)N, sizeof(bool));
  c.queued = calloc((size_t)N, sizeof(bool));
  c.queue = calloc((size_t)N, sizeof(int));
  c.arrived = calloc((size_t)p->ncomms + 1, sizeof(int));
  c.posted = calloc(nn, sizeof(int));
  c.consumed = calloc(nn, sizeof(int));
  c.send_off = calloc(nn + 1, sizeof(int));
  c.send_pos = calloc((size_t)nsend + 1, sizeof(int));
  c.rposted = calloc(nn, sizeof(int));
  c.ev_off = calloc((size_t)N + 1, sizeof(int));
  c.gend = calloc((size_t)N, sizeof(int));
  for (int r = 0; c.ev_off && r < N; r++) c.ev_off[r + 1] = c.ev_off[r] + p->n[r];
  c.seq = c.ev_off ? calloc((size_t)c.ev_off[N] + 1, sizeof(int)) : NULL;
  int rc = -1;
  if (!c.pc || !c.blocked || !c.queued || !c.queue || !c.arrived || !c.posted || !c.consumed ||
      !c.send_off || !c.send_pos || !c.rposted || !c.ev_off || !c.gend || !c.seq) {
    msg_add(&c.msg, "out of memory checking communication (%d ranks)", N);
    goto out;
  }
  index_sends(&c);
  for (int r = 0; r < N; r++) push(&c, r);
  while (c.qlen) {
    int r = c.queue[c.qhead];
    c.qhead = (c.qhead + 1) % N, c.qlen--;
    c.queued[r] = false;
    if (run_rank(&c, r)) goto out;
  }
  for (int r = 0; r < N; r++)
    if (c.pc[r] < p->n[r]) {
      report_deadlock(&c);
      goto out;
    }
  rc = report_unmatched(&c);
out:
  free(c.pc), free(c.blocked), free(c.queued), free(c.queue), free(c.arrived);
  free(c.posted), free(c.consumed), free(c.send_off), free(c.send_pos);
  free(c.rposted), free(c.ev_off), free(c.gend), free(c.seq);
  return rc;
}

/* ---- mutation hook ---- */

static bool parse_int(const char **s, int *out) {
  if (**s < '0' || **s > '9') return false;
  char *end;
  errno = 0;
  long v = strtol(*s, &end, 10);
  if (errno || v > 0x7fffffff) return false;
  *out = (int)v;
  *s = end;
  return true;
}

int commcheck_mutate(CommProgram *p, const char *spec, char *err, int errcap) {
  Msg m = {err, err ? errcap : 0, 0, 0, false};
  if (err && errcap > 0) err[0] = 0;
  if (!spec || !*spec) {
    msg_add(&m, "empty commcheck mutation spec");
    return -1;
  }
  static const char *const names[] = {"drop", "swap", "bytes", "tag"};
  const char *s = spec;
  for (;;) {
    const char *item = s;
    int kind = -1, r, i;
    for (int k = 0; k < 4; k++) {
      size_t len = strlen(names[k]);
      if (!strncmp(s, names[k], len) && s[len] == ':') {
        kind = k, s += len + 1;
        break;
      }
    }
    size_t ilen = strcspn(item, ",");
    if (kind < 0 || !parse_int(&s, &r) || *s++ != ':' || !parse_int(&s, &i) ||
        (*s && *s != ',')) {
      msg_add(&m, "malformed commcheck mutation '%.*s': expected drop|swap|bytes|tag:RANK:INDEX",
              (int)ilen, item);
      return -1;
    }
    if (r >= p->nranks) {
      msg_add(&m, "commcheck mutation '%.*s': rank %d out of range (%d ranks)", (int)ilen, item,
              r, p->nranks);
      return -1;
    }
    int need = i + (kind == 1 ? 1 : 0);   /* swap touches I+1 too */
    if (i >= p->n[r] || need >= p->n[r]) {
      msg_add(&m, "commcheck mutation '%.*s': event %d out of range (rank %d has %d events)",
              (int)ilen, item, need, r, p->n[r]);
      return -1;
    }
    CommEvent *ev = p->ev[r];
    switch (kind) {
    case 0:
      memmove(ev + i, ev + i + 1, sizeof *ev * (size_t)(p->n[r] - i - 1));
      p->n[r]--;
      break;
    case 1: {
      CommEvent t = ev[i];
      ev[i] = ev[i + 1], ev[i + 1] = t;
      break;
    }
    case 2:
      ev[i].bytes = ev[i].bytes ? ev[i].bytes * 2 : 1;
      break;
    case 3:
      if (ev[i].kind == CEV_COLL) {
        msg_add(&m, "commcheck mutation '%.*s': event %d of rank %d is a collective, it has no tag",
                (int)ilen, item, i, r);
        return -1;
      }
      ev[i].tag++;
      break;
    }
    if (!*s) return 0;
    s++;   /* ',' */
  }
}
