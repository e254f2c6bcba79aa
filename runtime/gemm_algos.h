/* gemm_algos.h — the GEMM algorithms a CUDA program chose by timing, and
 * the file that keeps them (train --gemm-algos FILE), so that later runs
 * replay the same algorithms and compute bitwise the same.
 *
 * A choice is keyed by everything cuBLASLt's plan depends on (k_matmul.cu's
 * RtcGemmKey: shape, transposes, leading dimensions, modes and the
 * operands' alignments) and holds cublasLtMatmulAlgo_t's bytes.  The file
 * is text, one line a shape, under a header naming the device and the
 * cuBLASLt version it was timed with:
 *
 *   # shardc GEMM algorithms (train --gemm-algos): ...
 *   device "NVIDIA H200" cublaslt 130000
 *   gemm 0 1 131072 2304 768 768 768 2304 1 0 7 256 256 256 256 0 algo 1a2b... ms 0.412 first 0.455
 *
 * (16 key numbers, 8 algorithm words in hex, the chosen algorithm's and the
 * heuristic's first's milliseconds).  Plain C, no CUDA: the host tests
 * check the format and its errors.
 */
#ifndef RT_GEMM_ALGOS_H
#define RT_GEMM_ALGOS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RT_GEMM_KEY_INTS 16  /* k_matmul.cu's RtcGemmKey */
#define RT_GEMM_ALGO_WORDS 8 /* cublasLtMatmulAlgo_t */
#define RT_GEMM_WHY_BYTES 160 /* rt_gemm_table_read's reason */

enum { RT_GEMM_FIRST = 0, RT_GEMM_TIMED = 1, RT_GEMM_FILE = 2 };

typedef struct {
  int32_t key[RT_GEMM_KEY_INTS];
  uint64_t algo[RT_GEMM_ALGO_WORDS];
  float ms;       /* the chosen algorithm's time a call (0: not timed) */
  float ms_first; /* the heuristic's first's (0: not timed) */
  int32_t source; /* RT_GEMM_FIRST (the heuristic's first, not timed), _TIMED, _FILE */
  int32_t cands;  /* candidates timed */
} RtGemmChoice;

typedef struct {
  RtGemmChoice *c;
  int n, cap;
} RtGemmTable;

/* Reads path into t (emptied first).  A missing file is RT_OK with no
 * entries.  A file whose first line is not the header's comment is not
 * one of these: RT_ERR_FORMAT, and the caller must not overwrite it.  A
 * file for another device or cuBLASLt version, or with a malformed line
 * (*stale set, the reason in why, RT_GEMM_WHY_BYTES): RT_OK with no entries, to
 * be timed again and rewritten. */
int rt_gemm_table_read(RtGemmTable *t, const char *path, const char *device, long lib,
                       int *stale, char *why);
/* Writes t to path atomically (a temporary file beside it, then rename). */
int rt_gemm_table_write(const RtGemmTable *t, const char *path, const char *device, long lib);
/* The choice for key, or NULL. */
const RtGemmChoice *rt_gemm_table_find(const RtGemmTable *t, const int32_t *key);
/* Appends c unless its key is there (returns 0 then, 1 when added). */
int rt_gemm_table_add(RtGemmTable *t, const RtGemmChoice *c);
void rt_gemm_table_free(RtGemmTable *t);
/* n entries, uninitialized, in t (emptied first): room for a table that
 * arrives whole (a broadcast, a gather). */
void rt_gemm_table_room(RtGemmTable *t, int n);
/* The ranks' agreement: all holds every rank's choices in rank order; out
 * (emptied first) gets, for each shape, the first choice that came from
 * the file or from timing, else the first (the heuristic's first), so
 * that every rank runs the same algorithm for the same shape. */
void rt_gemm_table_agree(RtGemmTable *out, const RtGemmTable *all);

#ifdef __cplusplus
}
#endif

#endif
