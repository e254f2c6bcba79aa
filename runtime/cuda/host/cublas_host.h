/* cublas_host.h — the host build's cuBLAS (runtime/cuda/host/cuda_host.h's
 * companion for the few cuBLAS v2 calls of k_optim2.cu): a handle is a
 * token, the stream setting is recorded and ignored (there is one stream),
 * and each GEMM or SYRK is the same column-major call to CBLAS (OpenBLAS,
 * as the cpu target's kernels), run now or recorded while a capture is
 * open (rtch_enqueue), as cuda_host.h's launches are.  Pointer mode is
 * host: alpha and beta are read when the call is made, as cuBLAS reads
 * them.  Only the arguments k_optim2.cu passes are mapped; anything else
 * is CUBLAS_STATUS_NOT_SUPPORTED.
 */
#ifndef CUBLAS_HOST_H
#define CUBLAS_HOST_H

#include <cblas.h>

#include "cuda_host.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1 } cublasFillMode_t;
typedef struct cublasContext *cublasHandle_t;

static inline const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed";
  default: return "the functionality requested is not supported";
  }
}

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
  static int token;
  *h = (cublasHandle_t)(void *)&token;
  return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  (void)s;
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

static inline CBLAS_TRANSPOSE rtch_cblas_op(cublasOperation_t o) {
  return o == CUBLAS_OP_T ? CblasTrans : CblasNoTrans;
}

static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         const float *B, int ldb, const float *beta, float *C,
                                         int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const float al = *alpha, be = *beta;
  rtch_enqueue([=]() {
    cblas_sgemm(CblasColMajor, rtch_cblas_op(ta), rtch_cblas_op(tb), m, n, k, al, A, lda, B, ldb,
                be, C, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const double *alpha, const double *A, int lda,
                                         const double *B, int ldb, const double *beta, double *C,
                                         int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const double al = *alpha, be = *beta;
  rtch_enqueue([=]() {
    cblas_dgemm(CblasColMajor, rtch_cblas_op(ta), rtch_cblas_op(tb), m, n, k, al, A, lda, B, ldb,
                be, C, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasSsyrk(cublasHandle_t h, cublasFillMode_t uplo,
                                         cublasOperation_t trans, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         const float *beta, float *C, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const float al = *alpha, be = *beta;
  rtch_enqueue([=]() {
    cblas_ssyrk(CblasColMajor, uplo == CUBLAS_FILL_MODE_UPPER ? CblasUpper : CblasLower,
                rtch_cblas_op(trans), n, k, al, A, lda, be, C, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

#endif
