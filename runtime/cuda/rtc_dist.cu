/* rtc_dist.cu — collectives of the CUDA programs over the mesh axes
 * (rtc_train.h): NCCL communicators per axis, the dist.h semantics and
 * byte counts on device buffers, and the overlapped gradient buckets on the
 * communication stream.  In the host build NCCL is host/nccl_host.h (MPI).
 *
 * Staged mode (several ranks on one GPU, where NCCL refuses): each
 * collective copies its buffers to host memory and runs dist.h's MPI
 * version there, which counts the bytes itself.
 *
 * Also the vocab-parallel cross-entropy, whose reductions are collectives:
 * row kernels (one block per row, fixed-order block reductions in double,
 * no atomics: bitwise repeatable) around NCCL all-reduces of the rows' max
 * and sums, with the loss left on the device for CUDA graphs.
 */
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "rtc_internal.h"
#include "rtc_nccl.h"

static ncclComm_t comm_[RT_AX_COUNT], world_;
static int staged_;
static cudaEvent_t ready_, done_;  /* compute work before a bucket; the buckets' end */
static int pending_;               /* buckets started since the last wait */
static cudaEvent_t ahead_[RTC_AHEAD_SLOTS], rs_done_;  /* gathers ahead; a reduce-scatter's end */
static cudaEvent_t tp_ready_, tp_done_;  /* a dX all-reduce beside the dW GEMM: its start, its end */
static int tp_pending_;
static int ahead_pending_[RTC_AHEAD_SLOTS];
/* the trailing reduce-scatters in flight, oldest first */
typedef struct {
  cudaEvent_t done;
  float *dst, *scratch;  /* the shard it adds into, what it reduced into */
  size_t n;
} RtcTrail;
static RtcTrail trail_[RTC_TRAILS];
static int ntrail_;
static cudaEvent_t *early_;        /* the step's early gathers' ends (rtc_allgather_early) */
static int nearly_, early_issued_, early_waited_;  /* events; gathers issued, waited for (+1) */

/* Host buffers of the staged mode, grown as needed. */
static void *host_buf_[4];
static size_t host_cap_[4];
static float *host_(int k, size_t n) {
  if (n * sizeof(float) > host_cap_[k]) {
    free(host_buf_[k]);
    host_cap_[k] = n * sizeof(float);
    host_buf_[k] = malloc(host_cap_[k]);
    if (!host_buf_[k]) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  }
  return (float *)host_buf_[k];
}

static void count_(RtMesh *m, RtAxis ax, uint64_t bytes) {
  m->bytes[ax] += bytes;
  m->calls[ax] += 1;
}

/* The stream of the collectives: the compute stream, or between
 * rtc_tp_begin and rtc_tp_end the tensor-parallel one. */
static cudaStream_t on_;
static cudaStream_t stream_(void) { return on_ ? on_ : (cudaStream_t)rtc_stream; }

/* waiter's next work waits for the work issued so far on s, its end
 * recorded in e. */
static void follow_(cudaStream_t waiter, cudaStream_t s, cudaEvent_t e) {
  cudaCheck(cudaEventRecord(e, s));
  cudaCheck(cudaStreamWaitEvent(waiter, e, 0));
}

/* The communication stream's next collective starts once the kernels
 * issued so far on the compute stream are done (the writers of what it
 * sends, the last readers of what it overwrites). */
static void comm_after_compute_(void) { follow_(rtc_comm_stream, stream_(), ready_); }

/* The compute stream's next kernel waits for the communication stream's
 * work so far, its end recorded in e. */
static void compute_after_comm_(cudaEvent_t e) { follow_(stream_(), rtc_comm_stream, e); }

/* The tensor/sequence-parallel stream's next work waits for the compute
 * issued so far, or the compute stream's for that stream's (ring
 * attention's messages, rtc_ring.cu). */
void rtc_tp_after_compute(void) { follow_(rtc_tp_stream, (cudaStream_t)rtc_stream, tp_ready_); }
void rtc_compute_after_tp(void) { follow_((cudaStream_t)rtc_stream, rtc_tp_stream, tp_done_); }

int rtc_mesh_init(RtMesh *m, int staged) {
  staged_ = staged;
  if (!ready_) cudaCheck(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  if (!done_) cudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  if (!rs_done_) cudaCheck(cudaEventCreateWithFlags(&rs_done_, cudaEventDisableTiming));
  if (!tp_ready_) cudaCheck(cudaEventCreateWithFlags(&tp_ready_, cudaEventDisableTiming));
  if (!tp_done_) cudaCheck(cudaEventCreateWithFlags(&tp_done_, cudaEventDisableTiming));
  for (int k = 0; k < RTC_TRAILS; k++)
    if (!trail_[k].done) cudaCheck(cudaEventCreateWithFlags(&trail_[k].done, cudaEventDisableTiming));
  ntrail_ = 0;
  tp_pending_ = 0;
  for (int k = 0; k < RTC_AHEAD_SLOTS; k++) {
    if (!ahead_[k]) cudaCheck(cudaEventCreateWithFlags(&ahead_[k], cudaEventDisableTiming));
    ahead_pending_[k] = 0;
  }
  if (staged) return RT_OK;
  ncclUniqueId id;
  if (m->rank == 0) ncclCheck(ncclGetUniqueId(&id));
  if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    return rt_errorf(RT_ERR_IO, "MPI_Bcast of NCCL's unique id failed");
  ncclResult_t r = ncclCommInitRank(&world_, m->world, id, m->rank);
  if (r != ncclSuccess)  /* invalid usage here: NCCL's "Duplicate GPU detected" */
    rtc_fail("NCCL", "ncclCommInitRank", ncclGetErrorString(r), __FILE__, __LINE__,
             r == ncclInvalidUsage
                 ? "two ranks on one GPU? NCCL needs a GPU per rank: start at most as many ranks "
                   "a node as it has GPUs (mpirun --map-by ppr:G:node; srun --ntasks-per-node=G "
                   "--gpus-per-task=1), or run with --comm mpi (the collectives staged through "
                   "the host, which lets ranks share a GPU)"
                 : rtc_hint("NCCL", (int)r));
  /* Each axis group: colour = its lowest world rank, key = the coordinate
   * (so NCCL ranks are the MPI communicators' ranks). */
  for (int ax = 0; ax < RT_AX_COUNT; ax++) {
    int color = NCCL_SPLIT_NOCOLOR;
    if (m->comm[ax] != MPI_COMM_NULL) {
      color = m->rank;
      if (MPI_Allreduce(MPI_IN_PLACE, &color, 1, MPI_INT, MPI_MIN, m->comm[ax]) != MPI_SUCCESS)
        return rt_errorf(RT_ERR_IO, "MPI_Allreduce for the NCCL communicators failed");
    }
    ncclCheck(ncclCommSplit(world_, color, m->comm[ax] != MPI_COMM_NULL ? m->coord[ax] : 0,
                            &comm_[ax], NULL));
  }
  return RT_OK;
}

void rtc_mesh_free(void) {
  if (ready_) cudaCheck(cudaEventDestroy(ready_));
  if (done_) cudaCheck(cudaEventDestroy(done_));
  ready_ = done_ = NULL;
  if (rs_done_) cudaCheck(cudaEventDestroy(rs_done_));
  rs_done_ = NULL;
  if (tp_ready_) cudaCheck(cudaEventDestroy(tp_ready_));
  if (tp_done_) cudaCheck(cudaEventDestroy(tp_done_));
  tp_ready_ = tp_done_ = NULL;
  for (int k = 0; k < RTC_AHEAD_SLOTS; k++) {
    if (ahead_[k]) cudaCheck(cudaEventDestroy(ahead_[k]));
    ahead_[k] = NULL;
    ahead_pending_[k] = 0;
  }
  for (int k = 0; k < RTC_TRAILS; k++) {
    if (trail_[k].done) cudaCheck(cudaEventDestroy(trail_[k].done));
    trail_[k].done = NULL;
  }
  ntrail_ = 0;
  for (int k = 0; k < nearly_; k++) cudaCheck(cudaEventDestroy(early_[k]));
  free(early_);
  early_ = NULL;
  nearly_ = early_issued_ = early_waited_ = 0;
  for (int ax = 0; ax < RT_AX_COUNT; ax++) {
    if (comm_[ax]) ncclCheck(ncclCommDestroy(comm_[ax]));
    comm_[ax] = NULL;
  }
  if (world_) ncclCheck(ncclCommDestroy(world_));
  world_ = NULL;
  for (int k = 0; k < 4; k++) {
    free(host_buf_[k]);
    host_buf_[k] = NULL;
    host_cap_[k] = 0;
  }
}

static ncclComm_t comm_of_(RtMesh *m, RtAxis ax, const char *what) {
  if (!comm_[ax])
    rt_mesh_fail(m, "%s: this rank has no communicator on the %s axis", what, rt_axis_name(ax));
  return comm_[ax];
}

/* For the other collective launchers of runtime/cuda (rtc_internal.h). */
ncclComm_t rtc_comm_of(RtMesh *m, RtAxis ax, const char *what) { return comm_of_(m, ax, what); }
int rtc_staged(void) { return staged_; }
float *rtc_host_buf(int k, size_t n) { return host_(k, n); }

void rtc_pipe_group(RtMesh *m, const RtcPipeMsg *msg, int n) {
  if (!world_) rt_mesh_fail(m, "pipeline messages: no NCCL world communicator");
  ncclCheck(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    const RtcPipeMsg *g = &msg[i];
    ncclDataType_t type = g->esize == 8 ? ncclDouble : ncclFloat;
    if (g->send) {
      ncclCheck(ncclSend(g->buf, g->n, type, g->peer, world_, stream_()));
      count_(m, RT_AX_PP, (uint64_t)g->n * (uint64_t)g->esize);
    } else {
      ncclCheck(ncclRecv(g->buf, g->n, type, g->peer, world_, stream_()));
    }
  }
  ncclCheck(ncclGroupEnd());
}

void rtc_allreduce(RtMesh *m, RtAxis ax, float *buf, size_t n) {
  if (staged_) {
    float *h = host_(0, n);
    rtc_to_host(h, buf, n * 4);
    rt_allreduce(m, ax, h, n, 4);
    rtc_to_device(buf, h, n * 4);
    return;
  }
  int P = m->size[ax];
  count_(m, ax, rt_vol_allreduce((uint64_t)n * 4, P));
  if (P > 1)
    ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_of_(m, ax, "rtc_allreduce"),
                            stream_()));
}


/* ---- a linear backward's dX all-reduce beside its dW GEMM (rtc_train.h) ----
 * On a stream of its own (rtc_tp_stream), not the communication stream,
 * where it would queue behind the gradient buckets in flight. */
/* The tensor-parallel stream's next work waits for the compute issued so far. */
static void tp_fork_(void) {
  if (tp_pending_) rtc_fail("NCCL", "rtc_tp_begin", "a collective beside the GEMMs not joined",
                            __FILE__, __LINE__, "internal: every start is joined before the next");
  rtc_tp_after_compute();
  tp_pending_ = 1;
}

void rtc_tp_begin(void) {
  if (staged_) return;
  tp_fork_();
  on_ = rtc_tp_stream;
}

void rtc_tp_end(void) { on_ = NULL; }

template <class T>
static void allreduce_start_(RtMesh *m, RtAxis ax, T *y, const T *x, size_t n,
                             ncclDataType_t type) {
  if (staged_) { /* eagerly, in place */
    if (y != x) rtc_copy(y, x, n * sizeof(T));
    rtc_allreduce(m, ax, y, n);
    return;
  }
  int P = m->size[ax];
  count_(m, ax, rt_vol_allreduce((uint64_t)n * sizeof(T), P));
  tp_fork_();
  if (P > 1)
    ncclCheck(ncclAllReduce(x, y, n, type, ncclSum, comm_of_(m, ax, "rtc_allreduce_start"),
                            rtc_tp_stream));
  else if (y != x)
    cudaCheck(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDeviceToDevice, rtc_tp_stream));
}

void rtc_allreduce_start(RtMesh *m, RtAxis ax, float *y, const float *x, size_t n) {
  allreduce_start_(m, ax, y, x, n, ncclFloat);
}
void rtc_allreduce_start(RtMesh *m, RtAxis ax, rtc_bf16 *y, const rtc_bf16 *x, size_t n) {
  allreduce_start_(m, ax, y, x, n, ncclBfloat16);
}

void rtc_tp_join(void) {
  if (!tp_pending_) return;
  rtc_compute_after_tp();
  tp_pending_ = 0;
}

void rtc_allreduce_f64_nocount(RtMesh *m, RtAxis ax, double *buf, size_t n, const char *what) {
  if (m->size[ax] > 1 && n > 0)
    ncclCheck(ncclAllReduce(buf, buf, n, ncclDouble, ncclSum, comm_of_(m, ax, what), stream_()));
}

/* dst (outer, P·inner) <- block p of scratch (P, outer, inner) at columns p·inner, or back;
 * elements of es bytes. */
static void permute_(void *rows, const void *blocks, size_t outer, size_t inner, int P,
                     int to_rows, size_t es = 4) {
  for (int p = 0; p < P; p++) {
    char *r = (char *)rows + (size_t)p * inner * es;
    char *b = (char *)blocks + (size_t)p * outer * inner * es;
    if (to_rows)
      cudaCheck(cudaMemcpy2DAsync(r, (size_t)P * inner * es, b, inner * es, inner * es, outer,
                                  cudaMemcpyDeviceToDevice, stream_()));
    else
      cudaCheck(cudaMemcpy2DAsync(b, inner * es, r, (size_t)P * inner * es, inner * es, outer,
                                  cudaMemcpyDeviceToDevice, stream_()));
  }
}

void rtc_allgather_dim(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t outer,
                       size_t inner, float *scratch) {
  int P = m->size[ax];
  if (staged_) {
    size_t nb = outer * inner, nd = nb * (size_t)P;
    float *hs = host_(0, nb), *hd = host_(1, nd), *hx = outer > 1 ? host_(2, nd) : NULL;
    rtc_to_host(hs, src, nb * 4);
    rt_allgather_dim(m, ax, hd, hs, outer, inner, 4, hx);
    rtc_to_device(dst, hd, nd * 4);
    return;
  }
  count_(m, ax, rt_vol_allgather((uint64_t)outer * P * inner * 4, P));
  if (P == 1) {
    rtc_copy(dst, src, outer * inner * 4);
    return;
  }
  ncclComm_t c = comm_of_(m, ax, "rtc_allgather_dim");
  if (outer <= 1 || inner == 0) {
    ncclCheck(ncclAllGather(src, dst, outer * inner, ncclFloat, c, stream_()));
    return;
  }
  if (!scratch) rt_mesh_fail(m, "rtc_allgather_dim: outer %zu > 1 needs scratch", outer);
  ncclCheck(ncclAllGather(src, scratch, outer * inner, ncclFloat, c, stream_()));
  permute_(dst, scratch, outer, inner, P, 1);
}

void rtc_reduce_scatter_dim(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t outer,
                            size_t inner, float *scratch) {
  int P = m->size[ax];
  if (staged_) {
    size_t nb = outer * inner, ns = nb * (size_t)P;
    float *hs = host_(0, ns), *hd = host_(1, nb), *hx = outer > 1 ? host_(2, ns) : NULL;
    rtc_to_host(hs, src, ns * 4);
    rt_reduce_scatter_dim(m, ax, hd, hs, outer, inner, 4, hx);
    rtc_to_device(dst, hd, nb * 4);
    return;
  }
  count_(m, ax, rt_vol_reduce_scatter((uint64_t)outer * P * inner * 4, P));
  if (P == 1) {
    rtc_copy(dst, src, outer * inner * 4);
    return;
  }
  const float *send = src;
  if (outer > 1 && inner > 0) {
    if (!scratch) rt_mesh_fail(m, "rtc_reduce_scatter_dim: outer %zu > 1 needs scratch", outer);
    permute_((float *)src, scratch, outer, inner, P, 0);
    send = scratch;
  }
  ncclCheck(ncclReduceScatter(send, dst, outer * inner, ncclFloat, ncclSum,
                              comm_of_(m, ax, "rtc_reduce_scatter_dim"), stream_()));
}

void rtc_reduce_scatter_acc(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t inner,
                            float *scratch) {
  if (!scratch) rt_mesh_fail(m, "rtc_reduce_scatter_acc: needs scratch");
  int P = m->size[ax];
  if (staged_ || P == 1) {
    rtc_reduce_scatter_dim(m, ax, scratch, src, 1, inner, NULL);
  } else {
    /* on the communication stream, behind any gather ahead on the same
     * communicator (rtc_allgather_ahead), and waited for at once */
    count_(m, ax, rt_vol_reduce_scatter((uint64_t)P * inner * 4, P));
    comm_after_compute_();
    ncclCheck(ncclReduceScatter(src, scratch, inner, ncclFloat, ncclSum,
                                comm_of_(m, ax, "rtc_reduce_scatter_acc"), rtc_comm_stream));
    compute_after_comm_(rs_done_);
  }
  rt_acc_cu(dst, scratch, inner);
}

/* The oldest trailing reduce-scatter: the compute stream waits for it and
 * adds its scratch into its shard. */
static void trail_finish_oldest_(void) {
  RtcTrail t = trail_[0];
  cudaCheck(cudaStreamWaitEvent(stream_(), t.done, 0));
  rt_acc_cu(t.dst, t.scratch, t.n);
  for (int k = 1; k < ntrail_; k++) trail_[k - 1] = trail_[k];
  trail_[--ntrail_].done = t.done;   /* its event, for the next */
}

void rtc_reduce_scatter_finish(void) {
  while (ntrail_) trail_finish_oldest_();
}

void rtc_reduce_scatter_trail(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t inner,
                              float *scratch) {
  if (ntrail_ == RTC_TRAILS) trail_finish_oldest_();
  int P = m->size[ax];
  if (staged_ || P == 1) {
    rtc_reduce_scatter_finish();
    rtc_reduce_scatter_acc(m, ax, dst, src, inner, scratch);
    return;
  }
  if (!scratch) rt_mesh_fail(m, "rtc_reduce_scatter_trail: needs scratch");
  count_(m, ax, rt_vol_reduce_scatter((uint64_t)P * inner * 4, P));
  comm_after_compute_();
  ncclCheck(ncclReduceScatter(src, scratch, inner, ncclFloat, ncclSum,
                              comm_of_(m, ax, "rtc_reduce_scatter_trail"), rtc_comm_stream));
  RtcTrail *t = &trail_[ntrail_++];
  cudaCheck(cudaEventRecord(t->done, rtc_comm_stream));
  t->dst = dst;
  t->scratch = scratch;
  t->n = inner;
}

/* A gather of n elements a rank into dst on the communication stream, after
 * the kernels issued so far (the writers of src, the last readers of what
 * dst held), its end recorded in done. */
static void gather_beside_(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t n,
                           cudaEvent_t done, const char *what) {
  count_(m, ax, rt_vol_allgather((uint64_t)m->size[ax] * n * 4, m->size[ax]));
  comm_after_compute_();
  ncclCheck(ncclAllGather(src, dst, n, ncclFloat, comm_of_(m, ax, what), rtc_comm_stream));
  cudaCheck(cudaEventRecord(done, rtc_comm_stream));
}

void rtc_allgather_ahead(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t n,
                         int slot) {
  int P = m->size[ax];
  if (slot < 0 || slot >= RTC_AHEAD_SLOTS)
    rt_mesh_fail(m, "rtc_allgather_ahead: slot %d (there are %d)", slot, RTC_AHEAD_SLOTS);
  if (staged_ || P == 1) {
    rtc_allgather_dim(m, ax, dst, src, 1, n, NULL);
    return;
  }
  gather_beside_(m, ax, dst, src, n, ahead_[slot], "rtc_allgather_ahead");
  ahead_pending_[slot] = 1;
}

void rtc_gather_wait(int slot) {
  if (slot < 0 || slot >= RTC_AHEAD_SLOTS || !ahead_pending_[slot]) return;
  cudaCheck(cudaStreamWaitEvent(stream_(), ahead_[slot], 0));
  ahead_pending_[slot] = 0;
}

void rtc_allgather_early(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t n, int k) {
  int P = m->size[ax];
  if (k < 0) rt_mesh_fail(m, "rtc_allgather_early: number %d", k);
  if (k == 0) early_issued_ = early_waited_ = 0;   /* a new step */
  if (staged_ || P == 1) {
    rtc_allgather_dim(m, ax, dst, src, 1, n, NULL);
    return;
  }
  if (k >= nearly_) {
    /* events are created outside a capture: the eager first step makes them */
    if (rtc_capturing())
      rtc_fail("CUDA", "rtc_allgather_early", "a new early gather during a stream capture", __FILE__,
               __LINE__, "capture only steps whose gathers the eager steps issued");
    cudaEvent_t *grown = (cudaEvent_t *)realloc(early_, sizeof(cudaEvent_t) * (size_t)(k + 1));
    if (!grown) rtc_fail("host", "realloc", "out of memory", __FILE__, __LINE__, "");
    early_ = grown;
    for (; nearly_ <= k; nearly_++)
      cudaCheck(cudaEventCreateWithFlags(&early_[nearly_], cudaEventDisableTiming));
  }
  /* (after the shard's cast, the last readers of the copy in the step before) */
  gather_beside_(m, ax, dst, src, n, early_[k], "rtc_allgather_early");
  early_issued_ = k + 1;
}

void rtc_gather_early_wait(int k) {
  if (k >= early_issued_) k = early_issued_ - 1;   /* blocking (staged) or not issued: nothing */
  if (k < early_waited_) return;
  cudaCheck(cudaStreamWaitEvent(stream_(), early_[k], 0));
  early_waited_ = k + 1;
}

/* ---- bf16 activations (rtc_train.h's bf16 block): NCCL's ncclBfloat16,
 * counted at 2 bytes an element; staged, widened to fp32 for dist.h's
 * MPI functions (MPI has no bf16 type), rounded back, and the bytes they
 * counted for fp32 replaced by the bf16 count. ---- */

/* n bf16 of dev widened into host floats h (through host buffer 3), and back. */
static void bf16_to_host_(float *h, const rtc_bf16 *dev, size_t n) {
  rtc_bf16 *s = (rtc_bf16 *)host_(3, n / 2 + 1);
  rtc_to_host(s, dev, n * sizeof(rtc_bf16));
  for (size_t i = 0; i < n; i++) h[i] = rtc_bf2f(s[i]);
}
static void bf16_to_device_(rtc_bf16 *dev, const float *h, size_t n) {
  rtc_bf16 *s = (rtc_bf16 *)host_(3, n / 2 + 1);
  for (size_t i = 0; i < n; i++) s[i] = rtc_f2bf(h[i]);
  rtc_to_device(dev, s, n * sizeof(rtc_bf16));
}

void rtc_allreduce(RtMesh *m, RtAxis ax, rtc_bf16 *buf, size_t n) {
  int P = m->size[ax];
  uint64_t vol = rt_vol_allreduce((uint64_t)n * 2, P);
  if (staged_) {
    float *h = host_(0, n);
    bf16_to_host_(h, buf, n);
    uint64_t before = m->bytes[ax];
    rt_allreduce(m, ax, h, n, 4);
    m->bytes[ax] = before + vol;
    bf16_to_device_(buf, h, n);
    return;
  }
  count_(m, ax, vol);
  if (P > 1)
    ncclCheck(ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, comm_of_(m, ax, "rtc_allreduce"),
                            stream_()));
}

void rtc_allgather_dim(RtMesh *m, RtAxis ax, rtc_bf16 *dst, const rtc_bf16 *src, size_t outer,
                       size_t inner, void *scratch) {
  int P = m->size[ax];
  size_t nb = outer * inner, nd = nb * (size_t)P;
  uint64_t vol = rt_vol_allgather((uint64_t)outer * P * inner * 2, P);
  if (staged_) {
    float *hs = host_(0, nb), *hd = host_(1, nd), *hx = outer > 1 ? host_(2, nd) : NULL;
    bf16_to_host_(hs, src, nb);
    uint64_t before = m->bytes[ax];
    rt_allgather_dim(m, ax, hd, hs, outer, inner, 4, hx);
    m->bytes[ax] = before + vol;
    bf16_to_device_(dst, hd, nd);
    return;
  }
  count_(m, ax, vol);
  if (P == 1) {
    rtc_copy(dst, src, nb * 2);
    return;
  }
  ncclComm_t c = comm_of_(m, ax, "rtc_allgather_dim");
  if (outer <= 1 || inner == 0) {
    ncclCheck(ncclAllGather(src, dst, nb, ncclBfloat16, c, stream_()));
    return;
  }
  if (!scratch) rt_mesh_fail(m, "rtc_allgather_dim: outer %zu > 1 needs scratch", outer);
  ncclCheck(ncclAllGather(src, scratch, nb, ncclBfloat16, c, stream_()));
  permute_(dst, scratch, outer, inner, P, 1, 2);
}

void rtc_reduce_scatter_dim(RtMesh *m, RtAxis ax, rtc_bf16 *dst, const rtc_bf16 *src,
                            size_t outer, size_t inner, void *scratch) {
  int P = m->size[ax];
  size_t nb = outer * inner, ns = nb * (size_t)P;
  uint64_t vol = rt_vol_reduce_scatter((uint64_t)outer * P * inner * 2, P);
  if (staged_) {
    float *hs = host_(0, ns), *hd = host_(1, nb), *hx = outer > 1 ? host_(2, ns) : NULL;
    bf16_to_host_(hs, src, ns);
    uint64_t before = m->bytes[ax];
    rt_reduce_scatter_dim(m, ax, hd, hs, outer, inner, 4, hx);
    m->bytes[ax] = before + vol;
    bf16_to_device_(dst, hd, nb);
    return;
  }
  count_(m, ax, vol);
  if (P == 1) {
    rtc_copy(dst, src, nb * 2);
    return;
  }
  const void *send = src;
  if (outer > 1 && inner > 0) {
    if (!scratch) rt_mesh_fail(m, "rtc_reduce_scatter_dim: outer %zu > 1 needs scratch", outer);
    permute_((void *)src, scratch, outer, inner, P, 0, 2);
    send = scratch;
  }
  ncclCheck(ncclReduceScatter(send, dst, nb, ncclBfloat16, ncclSum,
                              comm_of_(m, ax, "rtc_reduce_scatter_dim"), stream_()));
}

/* ---- gradient buckets, overlapped with the backward ---- */

void rtc_bucket_allreduce(RtMesh *m, RtAxis ax, float *buf, size_t n) {
  if (staged_) {
    rtc_allreduce(m, ax, buf, n);
    return;
  }
  int P = m->size[ax];
  count_(m, ax, rt_vol_allreduce((uint64_t)n * 4, P));
  if (P == 1) return;
  /* after the kernels that wrote the bucket; the backward goes on meanwhile */
  comm_after_compute_();
  ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_of_(m, ax, "rtc_bucket_allreduce"),
                          rtc_comm_stream));
  pending_ = 1;
}

void rtc_bucket_reduce_scatter(RtMesh *m, RtAxis ax, float *dst, const float *src, size_t n) {
  if (staged_) {
    rtc_reduce_scatter_dim(m, ax, dst, src, 1, n, NULL);
    return;
  }
  int P = m->size[ax];
  count_(m, ax, rt_vol_reduce_scatter((uint64_t)P * n * 4, P));
  if (P == 1) {
    rtc_copy(dst, src, n * 4);
    return;
  }
  comm_after_compute_();
  ncclCheck(ncclReduceScatter(src, dst, n, ncclFloat, ncclSum,
                              comm_of_(m, ax, "rtc_bucket_reduce_scatter"), rtc_comm_stream));
  pending_ = 1;
}

void rtc_bucket_wait(void) {
  if (!pending_) return;
  compute_after_comm_(done_);
  pending_ = 0;
}
