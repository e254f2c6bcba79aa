/* nccl_host.h — the NCCL calls of runtime/cuda as MPI calls, for the host
 * build (RTC_HOST): a communicator is an MPI communicator, every call is
 * synchronous (streams are ignored: the host build runs in order); sums,
 * and maxima for all-reduces.  While a stream capture is open (cuda_host.h) a collective is
 * recorded, and its MPI call made when the graph is replayed (a failure
 * then aborts).  What the CUDA runtime and its calibrator (rtc_calib.cu)
 * use, nothing more.
 *
 * ncclBfloat16 (rtc_bf16, 2 bytes an element): moved as MPI_UINT16_T; a
 * reduction widens every rank's values to fp32, reduces them with MPI's
 * float sum (or max) and rounds the result once to bf16 (NCCL rounds after
 * each step of its ring or tree: the same up to those roundings). */
#ifndef RTC_NCCL_HOST_H
#define RTC_NCCL_HOST_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../rtc_bf16.h"

typedef enum {
  ncclSuccess = 0,
  ncclSystemError = 2,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5
} ncclResult_t;
typedef enum { ncclFloat = 0, ncclDouble = 1, ncclInt = 2, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct ncclComm {
  MPI_Comm comm;
};
typedef struct ncclComm *ncclComm_t;
#define NCCL_SPLIT_NOCOLOR -1

static inline const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess       ? "no error"
         : r == ncclSystemError ? "MPI call failed"
         : r == ncclInvalidUsage
             ? "invalid usage (run with NCCL_DEBUG=WARN for details)"
             : "invalid argument";
}
static inline MPI_Datatype rtc_nccl_mpi_type_(ncclDataType_t t) {
  return t == ncclFloat      ? MPI_FLOAT
         : t == ncclDouble   ? MPI_DOUBLE
         : t == ncclBfloat16 ? MPI_UINT16_T
                             : MPI_INT;
}
/* n bf16 widened into a new float buffer (free it); n floats rounded into bf16. */
static inline float *rtc_nccl_widen_(const void *x, size_t n) {
  float *y = (float *)malloc((n ? n : 1) * sizeof(float));
  if (!y) return NULL;
  for (size_t i = 0; i < n; i++) y[i] = rtc_bf2f(((const rtc_bf16 *)x)[i]);
  return y;
}
static inline void rtc_nccl_round_(void *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) ((rtc_bf16 *)y)[i] = rtc_f2bf(x[i]);
}
static inline ncclResult_t rtc_nccl_ok_(int mpi_rc) {
  return mpi_rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
/* Runs the collective f (returning an MPI code) now, queues it on a
 * deferred stream s (cuda_host.h: rtch_stream_defer), or records it. */
template <class F>
static inline ncclResult_t rtc_nccl_run_(F f, cudaStream_t s = NULL, bool defer = true) {
  bool deferred = defer && s && !rtch_capturing();
  auto later = [f, deferred]() {   /* no caller left to return the error to */
    if (f() != MPI_SUCCESS) {
      fprintf(stderr, "nccl_host: an MPI collective of a %s failed\n",
              deferred ? "deferred stream" : "replayed graph");
      abort();
    }
  };
  if (defer && rtch_defer_on(s, later)) return ncclSuccess;
  if (!rtch_capturing()) return rtc_nccl_ok_(f());
  rtch_record_on(s, later);
  return ncclSuccess;
}
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  return ncclSuccess;
}
/* The world: the MPI world (nranks must be its size).  RTCH_SHARED_GPU=1
 * plays ranks that share one GPU, which NCCL refuses at this call
 * (ncclInvalidUsage, "Duplicate GPU detected"). */
static inline ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank) {
  (void)id;
  (void)rank;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != nranks) return ncclInvalidArgument;
  if (nranks > 1 && rtch_env_on("RTCH_SHARED_GPU")) return ncclInvalidUsage;
  *c = new ncclComm;
  return rtc_nccl_ok_(MPI_Comm_dup(MPI_COMM_WORLD, &(*c)->comm));
}
static inline ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out,
                                         void *config) {
  (void)config;
  MPI_Comm m = MPI_COMM_NULL;
  int rc = MPI_Comm_split(c->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &m);
  if (rc != MPI_SUCCESS) return ncclSystemError;
  *out = NULL;
  if (m != MPI_COMM_NULL) {
    *out = new ncclComm;
    (*out)->comm = m;
  }
  return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclSuccess;
  int rc = MPI_Comm_free(&c->comm);
  delete c;
  return rtc_nccl_ok_(rc);
}
static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                         cudaStream_t s) {
  MPI_Comm comm = c->comm;
  MPI_Op mop = op == ncclMax ? MPI_MAX : MPI_SUM;
  if (t == ncclBfloat16)
    return rtc_nccl_run_([=]() {
      float *w = rtc_nccl_widen_(send, count);
      if (!w) return MPI_ERR_NO_MEM;
      int rc = MPI_Allreduce(MPI_IN_PLACE, w, (int)count, MPI_FLOAT, mop, comm);
      rtc_nccl_round_(recv, w, count);
      free(w);
      return rc;
    }, s);
  return rtc_nccl_run_([=]() {
    return MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                         rtc_nccl_mpi_type_(t), mop, comm);
  }, s);
}
static inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  int r = 0, sz = 0;
  MPI_Comm_rank(c->comm, &r);
  MPI_Type_size(rtc_nccl_mpi_type_(t), &sz);
  const void *in = send == (const char *)recv + (size_t)r * count * (size_t)sz ? MPI_IN_PLACE : send;
  MPI_Comm comm = c->comm;
  return rtc_nccl_run_([=]() {
    return MPI_Allgather(in, (int)count, rtc_nccl_mpi_type_(t), recv, (int)count,
                         rtc_nccl_mpi_type_(t), comm);
  }, s);
}
static inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                                             ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                             cudaStream_t s) {
  (void)op;
  MPI_Comm comm = c->comm;
  if (t == ncclBfloat16) {
    int P = 1;
    MPI_Comm_size(comm, &P);
    return rtc_nccl_run_([=]() {
      float *w = rtc_nccl_widen_(send, count * (size_t)P);
      float *r = (float *)malloc((count ? count : 1) * sizeof(float));
      if (!w || !r) {
        free(w);
        free(r);
        return MPI_ERR_NO_MEM;
      }
      int rc = MPI_Reduce_scatter_block(w, r, (int)count, MPI_FLOAT, MPI_SUM, comm);
      rtc_nccl_round_(recv, r, count);
      free(w);
      free(r);
      return rc;
    }, s);
  }
  return rtc_nccl_run_([=]() {
    return MPI_Reduce_scatter_block(send, recv, (int)count, rtc_nccl_mpi_type_(t), MPI_SUM, comm);
  }, s);
}
/* The root's send (copied into its recv when they differ) to every recv. */
static inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, int root, ncclComm_t c,
                                         cudaStream_t s) {
  int r = 0, sz = 0;
  MPI_Comm_rank(c->comm, &r);
  MPI_Type_size(rtc_nccl_mpi_type_(t), &sz);
  MPI_Comm comm = c->comm;
  return rtc_nccl_run_([=]() {
    if (r == root && send != recv) memcpy(recv, send, count * (size_t)sz);
    return MPI_Bcast(recv, (int)count, rtc_nccl_mpi_type_(t), root, comm);
  }, s);
}
/* The sum (or maximum) over the communicator into the root's recv. */
static inline ncclResult_t ncclReduce(const void *send, void *recv, size_t count,
                                      ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                                      cudaStream_t s) {
  int r = 0;
  MPI_Comm_rank(c->comm, &r);
  MPI_Comm comm = c->comm;
  MPI_Op mop = op == ncclMax ? MPI_MAX : MPI_SUM;
  if (t == ncclBfloat16)
    return rtc_nccl_run_([=]() {
      float *w = rtc_nccl_widen_(send, count);
      if (!w) return MPI_ERR_NO_MEM;
      int rc = r != root ? MPI_Reduce(w, NULL, (int)count, MPI_FLOAT, mop, root, comm)
                         : MPI_Reduce(MPI_IN_PLACE, w, (int)count, MPI_FLOAT, mop, root, comm);
      if (r == root) rtc_nccl_round_(recv, w, count);
      free(w);
      return rc;
    }, s);
  return rtc_nccl_run_([=]() {
    if (r != root) return MPI_Reduce(send, NULL, (int)count, rtc_nccl_mpi_type_(t), mop, root, comm);
    return MPI_Reduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                      rtc_nccl_mpi_type_(t), mop, root, comm);
  }, s);
}
/* Point-to-point (the calibrator's send/recv, ring attention's blocks):
 * nonblocking MPI calls, completed at the end of the group they are in (at
 * once outside one), so that two ranks' sends and receives of one group
 * pair up as NCCL's do.  While a capture is open each post, and each
 * group's completion, is recorded as work of its stream (the group's: its
 * last post's), and made when the graph is replayed.  Never deferred
 * (RTCH_DEFER_STREAMS): a rank blocked in a deferred group's wait could
 * hold up its peer, which a GPU's concurrent streams would not. */
struct rtc_nccl_p2p_state_ {
  int depth, n;
  MPI_Request req[64];
  cudaStream_t stream;
};
static inline rtc_nccl_p2p_state_ &rtc_nccl_p2p_(void) {
  static rtc_nccl_p2p_state_ st;
  return st;
}
static inline int rtc_nccl_p2p_wait_(void) {
  rtc_nccl_p2p_state_ &st = rtc_nccl_p2p_();
  int rc = st.n ? MPI_Waitall(st.n, st.req, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
  st.n = 0;
  return rc;
}
static inline ncclResult_t rtc_nccl_p2p_flush_(void) {
  return rtc_nccl_run_([]() { return rtc_nccl_p2p_wait_(); }, rtc_nccl_p2p_().stream, false);
}
static inline ncclResult_t rtc_nccl_p2p_post_(void *buf, size_t count, ncclDataType_t t,
                                             int peer, ncclComm_t c, int send, cudaStream_t on) {
  rtc_nccl_p2p_state_ &st = rtc_nccl_p2p_();
  MPI_Comm comm = c->comm;
  st.stream = on;
  ncclResult_t r = rtc_nccl_run_([=]() {
    rtc_nccl_p2p_state_ &s = rtc_nccl_p2p_();
    if (s.n == 64) return (int)MPI_ERR_COUNT;
    int rc = send ? MPI_Isend(buf, (int)count, rtc_nccl_mpi_type_(t), peer, 0, comm, &s.req[s.n])
                  : MPI_Irecv(buf, (int)count, rtc_nccl_mpi_type_(t), peer, 0, comm, &s.req[s.n]);
    if (rc == MPI_SUCCESS) s.n++;
    return rc;
  }, on, false);
  if (r != ncclSuccess) return r;
  return st.depth ? ncclSuccess : rtc_nccl_p2p_flush_();
}
static inline ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer,
                                    ncclComm_t c, cudaStream_t s) {
  return rtc_nccl_p2p_post_(const_cast<void *>(send), count, t, peer, c, 1, s);
}
static inline ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer,
                                    ncclComm_t c, cudaStream_t s) {
  return rtc_nccl_p2p_post_(recv, count, t, peer, c, 0, s);
}
static inline ncclResult_t ncclGroupStart(void) {
  rtc_nccl_p2p_().depth++;
  return ncclSuccess;
}
static inline ncclResult_t ncclGroupEnd(void) {
  rtc_nccl_p2p_state_ &st = rtc_nccl_p2p_();
  if (st.depth > 0 && --st.depth == 0) return rtc_nccl_p2p_flush_();
  return ncclSuccess;
}

#endif
