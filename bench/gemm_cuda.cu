/* gemm_cuda.cu — the bf16 GEMMs of GPT-2 124M's step on one GPU, timed
 * three ways, to tell what the cuda target's GEMMs leave on the table
 * (bench/gpu_check.sh builds it when packing and runs it as step 7):
 *
 *   ours   cuBLASLt as runtime/cuda/k_matmul.cu calls it: bf16 A, B and D
 *          (fp32 D for a weight gradient), CUBLAS_COMPUTE_32F, a 32 MiB
 *          workspace, the heuristic's first algorithm, alignments given;
 *   best8  the same descriptor, the heuristic's first eight algorithms each
 *          timed, the fastest kept (what an autotuned launcher would get);
 *   gemmex cublasGemmEx, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT.
 *
 * Shapes (row-major, tokens M = 128 x 1024 = 131072, as the check's
 * microbatch): the forward's y = x Wᵀ for the four linears of a block and
 * the LM head at the vocabulary as given (50257, rows not 16-byte aligned)
 * and padded to 50304 (llm.c's padding); the backward's dx = dy W and
 * dW += dyᵀ x for the first linear and the head; and the head at 50257
 * with its rows 50304 apart (the logits and their gradient padded in
 * memory only, the GEMM's dims unchanged: does the aligned leading
 * dimension alone give back the rate?).  Then the epilogues the cuda
 * target asks for (runtime/cuda/k_matmul.cu): the MLP's fc forward with
 * GELU_AUX_BIAS (bf16 bias, the pre-activation as aux), the dx of the MLP's
 * proj with DGELU (aux read), the qkv dW with BGRADB (the fp32 bias
 * gradient): each against the plain GEMM of its shape above, to see that
 * the epilogue's algorithms run at the plain rate ("gemmex" has none: -).
 * Prints one line a shape: TFLOP/s of each way.
 *
 * Then the overlap the cost model assumes (passes/cost.c hw->overlap: the
 * share of the shorter of two concurrent works that is hidden): the qkv dW
 * GEMM (what the cuda target runs beside a tensor-parallel dX all-reduce,
 * program.c PJ_DX) alone, a copy kernel of 8, 16 and 32 blocks (the SMs
 * and memory traffic an NCCL collective's channels take) alone, and both
 * at once on two streams: hidden = (gemm + copy - both) / min(gemm, copy).
 * Usage: gemm_cuda [M] */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define BK(x)                                                                          \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)s_);      \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static cublasLtHandle_t lt;
static cublasHandle_t bl;
static void *ws;
static const size_t WS = (size_t)32 << 20;
static cudaEvent_t e0, e1;

// time fn over reps after 2 warm-up calls, seconds a call
template <class F>
static double timeit(F fn, int reps) {
  fn(), fn();
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; i++) fn();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return ms / 1e3 / reps;
}

/* row-major C[M,N] (ldc) = op(A) op(B) + beta C, op(A) (M,K), op(B) (K,N);
 * ta: A stored (K,M); tb: B stored (N,K).  Column-major: Cᵀ = op(B)ᵀ op(A)ᵀ. */
struct G {
  const char *name;
  int M, N, K, ta, tb, c32;
  float beta;
  int lda, ldc; /* leading dims, 0: dense (a padded row stride otherwise) */
  int epi;      /* 0 none, 1 GELU_AUX_BIAS, 2 DGELU, 3 BGRADB */
};

static void *bias_buf, *aux_buf;

static void run(const G &g, void *A, void *B, void *C) {
  int lda = g.lda ? g.lda : g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N, ldc = g.ldc ? g.ldc : g.N;
  cudaDataType_t tc = g.c32 ? CUDA_R_32F : CUDA_R_16BF;
  cublasLtMatmulDesc_t op;
  BK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof opb));
  BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof opa));
  if (g.epi) {
    cublasLtEpilogue_t epi = g.epi == 1   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : g.epi == 2 ? CUBLASLT_EPILOGUE_DGELU
                                          : CUBLASLT_EPILOGUE_BGRADB;
    BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g.epi != 2) { // the bias (bf16, of D's type) or its gradient (fp32, C's type)
      cudaDataType_t bt = g.epi == 1 ? CUDA_R_16BF : CUDA_R_32F;
      BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
      BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_buf,
                                        sizeof bias_buf));
    }
    if (g.epi != 3) { // the pre-activation: D's type and layout
      int64_t ld = g.ldc ? g.ldc : g.N;
      int32_t at = g.c32 ? CUDA_R_32F : CUDA_R_16BF;
      BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_buf,
                                        sizeof aux_buf));
      BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
      BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at,
                                        sizeof at));
    }
  }
  cublasLtMatrixLayout_t lb, la, lc;
  BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, g.tb ? g.K : g.N, g.tb ? g.N : g.K, ldb));
  BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g.ta ? g.M : g.K, g.ta ? g.K : g.M, lda));
  BK(cublasLtMatrixLayoutCreate(&lc, tc, g.N, g.M, ldc));
  cublasLtMatmulPreference_t pref;
  BK(cublasLtMatmulPreferenceCreate(&pref));
  BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS,
                                          sizeof WS));
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, lc, lc, pref, 8, res, &found);
  if (hs != CUBLAS_STATUS_SUCCESS) found = 0; // (an epilogue the shape lacks: NOT_SUPPORTED)
  float alpha = 1.0f, beta = g.beta;
  double flops = 2.0 * g.M * g.N * g.K, ours = 0, best = 0;
  int reps = flops > 1e12 ? 10 : 30;
  for (int i = 0; i < found; i++) {
    double t = timeit([&]() {
      BK(cublasLtMatmul(lt, op, &alpha, B, lb, A, la, &beta, C, lc, C, lc, &res[i].algo, ws, WS,
                        0));
    }, reps);
    double r = flops / t / 1e12;
    if (i == 0) ours = r;
    if (r > best) best = r;
  }
  if (g.epi) {
    printf("%-26s %7d %6d %5d  %7.1f  %7.1f  %7s   (%d algorithms%s)\n", g.name, g.M, g.N, g.K,
           ours, best, "-", found, found ? "" : ": the runtime falls back to its kernels");
  } else {
    double gx = flops / timeit([&]() {
      BK(cublasGemmEx(bl, opb, opa, g.N, g.M, g.K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF,
                      lda, &beta, C, tc, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }, reps) / 1e12;
    printf("%-26s %7d %6d %5d  %7.1f  %7.1f  %7.1f   (%d algorithms)\n", g.name, g.M, g.N, g.K,
           ours, best, gx, found);
  }
  fflush(stdout);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}

/* A copy by `blocks` blocks of 512 threads, grid-strided: the SMs and the
 * memory traffic of an NCCL collective's channels, without a peer. */
__global__ void side_copy(float *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// seconds of work(s1, s2) from a common start to both streams' end
template <class F>
static double both_streams(F work, cudaStream_t s1, cudaStream_t s2) {
  cudaEvent_t a, b1, b2;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b1));
  CK(cudaEventCreate(&b2));
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(a, s1));
    CK(cudaStreamWaitEvent(s2, a, 0));
    work(s1, s2);
    CK(cudaEventRecord(b2, s2));
    CK(cudaStreamWaitEvent(s1, b2, 0));
    CK(cudaEventRecord(b1, s1));
    CK(cudaEventSynchronize(b1));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b1));
    if (rep && ms / 1e3 < best) best = ms / 1e3; // the first: warm-up
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b1));
  CK(cudaEventDestroy(b2));
  return best;
}

// the qkv dW GEMM (row-major dW (2304, 768) = dyᵀ x over M tokens, bf16 in,
// fp32 out) beside a copy of n floats by 8, 16, 32 blocks
static void overlap_check(int M, void *A, void *B, void *C) {
  size_t n = (size_t)64 << 20;
  float *X, *Y;
  CK(cudaMalloc(&X, n * 4));
  CK(cudaMalloc(&Y, n * 4));
  CK(cudaMemset(X, 0, n * 4));
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  auto gemm = [&](cudaStream_t s) {
    BK(cublasSetStream(bl, s));
    float one = 1;
    BK(cublasGemmEx(bl, CUBLAS_OP_N, CUBLAS_OP_T, 768, 2304, M, &one, A, CUDA_R_16BF, 768, B,
                    CUDA_R_16BF, 2304, &one, C, CUDA_R_32F, 768, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
  };
  double g = both_streams([&](cudaStream_t a, cudaStream_t) { gemm(a); }, s1, s2);
  printf("\noverlap (passes/cost.c hw->overlap, 0.9 on GPUs): the qkv dW GEMM (%.3f ms) beside a "
         "copy of %zu MiB\n", g * 1e3, n * 8 >> 20);
  printf("%-12s %9s %9s %9s\n", "copy blocks", "copy ms", "both ms", "hidden");
  for (int blocks = 8; blocks <= 32; blocks *= 2) {
    auto copy = [&](cudaStream_t s) { side_copy<<<blocks, 512, 0, s>>>(Y, X, n); };
    double c = both_streams([&](cudaStream_t, cudaStream_t b) { copy(b); }, s1, s2);
    CK(cudaGetLastError());
    double t = both_streams([&](cudaStream_t a, cudaStream_t b) { gemm(a), copy(b); }, s1, s2);
    double lo = g < c ? g : c;
    printf("%-12d %9.3f %9.3f %8.0f%%\n", blocks, c * 1e3, t * 1e3, 100 * (g + c - t) / lo);
  }
  BK(cublasSetStream(bl, 0));
  CK(cudaFree(X));
  CK(cudaFree(Y));
}

int main(int argc, char **argv) {
  int M = argc > 1 ? atoi(argv[1]) : 131072;
  BK(cublasLtCreate(&lt));
  BK(cublasCreate(&bl));
  CK(cudaMalloc(&ws, WS));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const G gs[] = {
      {"fwd qkv  x Wt", M, 2304, 768, 0, 1, 0, 0.0f},
      {"fwd proj x Wt", M, 768, 768, 0, 1, 0, 0.0f},
      {"fwd fc   x Wt", M, 3072, 768, 0, 1, 0, 0.0f},
      {"fwd fcp  x Wt", M, 768, 3072, 0, 1, 0, 0.0f},
      {"fwd head V=50257", M, 50257, 768, 0, 1, 0, 0.0f},
      {"fwd head V=50304", M, 50304, 768, 0, 1, 0, 0.0f},
      {"bwd qkv  dx += dy W", M, 768, 2304, 0, 0, 0, 1.0f},
      {"bwd qkv  dW += dyt x", 2304, 768, M, 1, 0, 1, 1.0f},
      {"bwd head dx += dy W 50257", M, 768, 50257, 0, 0, 0, 1.0f},
      {"bwd head dx += dy W 50304", M, 768, 50304, 0, 0, 0, 1.0f},
      {"bwd head dW += dyt x 50257", 50257, 768, M, 1, 0, 1, 1.0f},
      {"bwd head dW += dyt x 50304", 50304, 768, M, 1, 0, 1, 1.0f},
      {"fwd head 50257 ldc 50304", M, 50257, 768, 0, 1, 0, 0.0f, 0, 50304},
      {"bwd head dx 50257 lda 50304", M, 768, 50257, 0, 0, 0, 1.0f, 50304, 0},
      {"bwd head dW 50257 lda 50304", 50257, 768, M, 1, 0, 1, 1.0f, 50304, 0},
      {"fwd fc   +GELU_AUX_BIAS", M, 3072, 768, 0, 1, 0, 0.0f, 0, 0, 1},
      {"bwd fcp  dx = dy W", M, 3072, 768, 0, 0, 0, 0.0f},
      {"bwd fcp  dx +DGELU", M, 3072, 768, 0, 0, 0, 0.0f, 0, 0, 2},
      {"bwd qkv  dW +BGRADB", 2304, 768, M, 1, 0, 1, 1.0f, 0, 0, 3},
  };
  size_t most = 0;
  for (const G &g : gs) {
    /* A stored (K, M) when transposed, else (M, K); rows lda apart */
    size_t a = (size_t)(g.ta ? g.K : g.M) * (g.lda ? g.lda : g.ta ? g.M : g.K),
           b = (size_t)g.K * g.N,
           c = (size_t)g.M * (g.ldc ? g.ldc : g.N) * (g.c32 ? 2 : 1);
    size_t t = a > b ? a : b;
    t = t > c ? t : c;
    most = t > most ? t : most;
  }
  void *A, *B, *C;
  CK(cudaMalloc(&A, most * 2));
  CK(cudaMalloc(&B, most * 2));
  CK(cudaMalloc(&C, most * 2));
  CK(cudaMemset(A, 0x3c, most * 2));
  CK(cudaMemset(B, 0x3c, most * 2));
  CK(cudaMemset(C, 0, most * 2));
  CK(cudaMalloc(&aux_buf, most * 2));
  CK(cudaMemset(aux_buf, 0x3c, most * 2));
  CK(cudaMalloc(&bias_buf, 65536 * 4));
  CK(cudaMemset(bias_buf, 0, 65536 * 4));
  printf("%-26s %7s %6s %5s  %7s  %7s  %7s   TFLOP/s\n", "GEMM (row-major M x N, K)", "M", "N",
         "K", "ours", "best8", "gemmex");
  for (const G &g : gs) run(g, A, B, C);
  overlap_check(M, A, B, C);
  return 0;
}
