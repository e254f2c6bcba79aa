/* shardrt_kernels.h — kernel prototypes, written once over RT_REAL and
 * included twice by shardrt.h: RT_FN(rt_gelu_forward) is rt_gelu_forward_f32
 * with float and rt_gelu_forward_f64 with double. No include guard on purpose.
 *
 * N = B*T rows; sizes are ints, element counts size_t. Backward functions
 * accumulate (+=) into every gradient they are given; a NULL gradient pointer
 * skips that gradient. Unless stated, outputs must not alias inputs.
 *
 * Kernels run on the OpenMP threads (see threads.c in shardrt.h). Every
 * result is bitwise the same run to run, and for any thread count except
 * those of the GEMMs (matmul, rt_gemm), whose blocks follow the threads.
 */

/* ---- matmul (k_matmul.inc) ---- */

/* out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) or NULL.
 * out = inp · weightᵀ + bias (written). */
void RT_FN(rt_matmul_forward)(RT_REAL *out, const RT_REAL *inp, const RT_REAL *weight,
                              const RT_REAL *bias, int N, int C, int OC);
/* dinp is (N,C), dweight is (OC,C), dbias is (OC), dout is (N,OC).
 * dinp += dout·weight, dweight += doutᵀ·inp, dbias += Σ_n dout. */
void RT_FN(rt_matmul_backward)(RT_REAL *dinp, RT_REAL *dweight, RT_REAL *dbias,
                               const RT_REAL *dout, const RT_REAL *inp,
                               const RT_REAL *weight, int N, int C, int OC);
/* c is (M,N) with leading dim ldc: c = alpha·op(a)·op(b) + beta·c, op(a) is
 * (M,K), op(b) is (K,N); trans_a/trans_b != 0 transposes. Row-major cblas. */
void RT_FN(rt_gemm)(int trans_a, int trans_b, int M, int N, int K, double alpha,
                    const RT_REAL *a, int lda, const RT_REAL *b, int ldb, double beta,
                    RT_REAL *c, int ldc);
/* batch independent rt_gemm calls; matrix i starts at a + i*stride_a, etc. */
void RT_FN(rt_gemm_batched)(int batch, int trans_a, int trans_b, int M, int N, int K,
                            double alpha, const RT_REAL *a, int lda, size_t stride_a,
                            const RT_REAL *b, int ldb, size_t stride_b, double beta,
                            RT_REAL *c, int ldc, size_t stride_c);

/* ---- normalization (k_norm.inc) ---- */

/* out is (N,C), mean and rstd are (N) or NULL (saved for backward),
 * inp is (N,C), weight is (C), bias is (C) or NULL. eps = RT_LN_EPS. */
void RT_FN(rt_layernorm_forward)(RT_REAL *out, RT_REAL *mean, RT_REAL *rstd,
                                 const RT_REAL *inp, const RT_REAL *weight,
                                 const RT_REAL *bias, int N, int C);
/* The same with an explicit epsilon. */
void RT_FN(rt_layernorm_forward_eps)(RT_REAL *out, RT_REAL *mean, RT_REAL *rstd,
                                     const RT_REAL *inp, const RT_REAL *weight,
                                     const RT_REAL *bias, int N, int C, double eps);
/* dinp is (N,C), dweight is (C), dbias is (C), dout is (N,C),
 * mean and rstd are (N) from the forward. All accumulate. */
void RT_FN(rt_layernorm_backward)(RT_REAL *dinp, RT_REAL *dweight, RT_REAL *dbias,
                                  const RT_REAL *dout, const RT_REAL *inp,
                                  const RT_REAL *weight, const RT_REAL *mean,
                                  const RT_REAL *rstd, int N, int C);
/* out is (N,C), rstd is (N) or NULL, inp is (N,C), weight is (C).
 * out = inp / sqrt(mean(inp²) + eps) * weight. */
void RT_FN(rt_rmsnorm_forward)(RT_REAL *out, RT_REAL *rstd, const RT_REAL *inp,
                               const RT_REAL *weight, int N, int C, double eps);
/* dinp is (N,C), dweight is (C), dout is (N,C), rstd is (N) from the forward. */
void RT_FN(rt_rmsnorm_backward)(RT_REAL *dinp, RT_REAL *dweight, const RT_REAL *dout,
                                const RT_REAL *inp, const RT_REAL *weight,
                                const RT_REAL *rstd, int N, int C);

/* ---- activations, softmax, dropout, elementwise (k_act.inc) ---- */

/* out is (n), inp is (n); out may alias inp. GPT-2's tanh approximation:
 * 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))). */
void RT_FN(rt_gelu_forward)(RT_REAL *out, const RT_REAL *inp, size_t n);
/* dinp is (n), inp is (n), dout is (n): dinp += gelu'(inp)·dout. */
void RT_FN(rt_gelu_backward)(RT_REAL *dinp, const RT_REAL *inp, const RT_REAL *dout,
                             size_t n);
/* out is (n), inp is (n); out may alias inp. */
void RT_FN(rt_relu_forward)(RT_REAL *out, const RT_REAL *inp, size_t n);
/* dinp is (n): dinp += (inp > 0)·dout. */
void RT_FN(rt_relu_backward)(RT_REAL *dinp, const RT_REAL *inp, const RT_REAL *dout,
                             size_t n);
/* out is (n), inp is (n); out may alias inp. silu(x) = x·sigmoid(x). */
void RT_FN(rt_silu_forward)(RT_REAL *out, const RT_REAL *inp, size_t n);
/* dinp is (n): dinp += silu'(inp)·dout. */
void RT_FN(rt_silu_backward)(RT_REAL *dinp, const RT_REAL *inp, const RT_REAL *dout,
                             size_t n);
/* out is (N,C); a and b are (N,C) views with row stride ld (elements):
 * out = silu(a)·b. One fused (N,2C) input [gate | up] (the usual fused
 * gate_up projection, silu on the first half): a = inp, b = inp + C, ld = 2C.
 * Two separate (N,C) inputs: ld = C. */
void RT_FN(rt_swiglu_forward)(RT_REAL *out, const RT_REAL *a, const RT_REAL *b, int N,
                              int C, int ld);
/* da, db are views like a, b (same ld; for the fused layout da = dinp,
 * db = dinp + C): da += silu'(a)·b·dout, db += silu(a)·dout. */
void RT_FN(rt_swiglu_backward)(RT_REAL *da, RT_REAL *db, const RT_REAL *dout,
                               const RT_REAL *a, const RT_REAL *b, int N, int C, int ld);
/* out is (N,C), inp is (N,C): softmax over the last dim; out may alias inp. */
void RT_FN(rt_softmax_forward)(RT_REAL *out, const RT_REAL *inp, int N, int C);
/* dinp is (N,C), dout is (N,C), out is (N,C) from the forward:
 * dinp += out·(dout - Σ_c dout·out). */
void RT_FN(rt_softmax_backward)(RT_REAL *dinp, const RT_REAL *dout, const RT_REAL *out,
                                int N, int C);
/* out is (n), inp is (n); out may alias inp. Element i is kept with
 * probability 1-p, decided by rt_rng_uniform(seed ^ salt, step, offset+i) >= p,
 * and scaled by 1/(1-p); nothing is stored, the backward recomputes the mask.
 * Give every dropout site its own offset range (or seed). p == 0 is a copy. */
void RT_FN(rt_dropout_forward)(RT_REAL *out, const RT_REAL *inp, size_t n, double p,
                               uint64_t seed, uint64_t step, uint64_t offset);
/* dinp is (n), dout is (n): dinp += mask·dout/(1-p), same (seed, step, offset). */
void RT_FN(rt_dropout_backward)(RT_REAL *dinp, const RT_REAL *dout, size_t n, double p,
                                uint64_t seed, uint64_t step, uint64_t offset);
/* out, a, b are (n): out = a + b; out may alias a or b (residual add). Its
 * backward is rt_axpy(da, dout, 1, n) and rt_axpy(db, dout, 1, n). */
void RT_FN(rt_add_forward)(RT_REAL *out, const RT_REAL *a, const RT_REAL *b, size_t n);
/* dst, src are (n): dst += alpha·src. */
void RT_FN(rt_axpy)(RT_REAL *dst, const RT_REAL *src, double alpha, size_t n);
/* x is (n): x *= s. */
void RT_FN(rt_scale)(RT_REAL *x, size_t n, double s);
/* out is (N,W), inp is (N,C): out = inp[:, c0:c0+W] (qkv split, TP shards). */
void RT_FN(rt_slice_cols_forward)(RT_REAL *out, const RT_REAL *inp, int N, int C, int c0,
                                  int W);
/* dinp is (N,C), dout is (N,W): dinp[:, c0:c0+W] += dout. */
void RT_FN(rt_slice_cols_backward)(RT_REAL *dinp, const RT_REAL *dout, int N, int C,
                                   int c0, int W);

/* ---- embeddings (k_embed.inc) ---- */

/* out is (N,C), tokens is (N), wte is (V,C): out[n] = wte[tokens[n]].
 * RT_ERR_ARG if a token is outside [0,V). */
int RT_FN(rt_embedding_forward)(RT_REAL *out, const int32_t *tokens, const RT_REAL *wte,
                                int N, int V, int C);
/* dwte is (V,C), dout is (N,C): dwte[tokens[n]] += dout[n] (in parallel over
 * column chunks, rows in order, so repeated tokens sum deterministically).
 * Tokens were checked by the forward. */
void RT_FN(rt_embedding_backward)(RT_REAL *dwte, const RT_REAL *dout,
                                  const int32_t *tokens, int N, int C);
/* out, inp are (B,T,C), wpe is (maxT,C): out[b,t] = inp[b,t] + wpe[t0+t];
 * out may alias inp. t0 is the position of the first row (sequence shards). */
void RT_FN(rt_positional_forward)(RT_REAL *out, const RT_REAL *inp, const RT_REAL *wpe,
                                  int B, int T, int C, int t0);
/* dinp is (B,T,C) or NULL, dwpe is (maxT,C), dout is (B,T,C):
 * dinp += dout, dwpe[t0+t] += Σ_b dout[b,t]. */
void RT_FN(rt_positional_backward)(RT_REAL *dinp, RT_REAL *dwpe, const RT_REAL *dout,
                                   int B, int T, int C, int t0);
/* out, inp are (B,T,H,D), D even; out may alias inp. Rotary embedding in the
 * GPT-NeoX / HF LlamaRotaryEmbedding convention (rotate_half, halves split):
 * for i < D/2, f_i = theta^(-2i/D), a = (t0+t)·f_i,
 *   out[i]     = x[i]·cos a - x[i+D/2]·sin a
 *   out[i+D/2] = x[i+D/2]·cos a + x[i]·sin a.
 * Angles are formed in RT_REAL as PyTorch does in its dtype. */
void RT_FN(rt_rope_forward)(RT_REAL *out, const RT_REAL *inp, int B, int T, int H, int D,
                            double theta, int t0);
/* dinp, dout are (B,T,H,D): dinp += Rᵀ·dout (the inverse rotation). */
void RT_FN(rt_rope_backward)(RT_REAL *dinp, const RT_REAL *dout, int B, int T, int H,
                             int D, double theta, int t0);

/* ---- attention (k_attention.inc) ---- */

/* out is (B,T,H,D), lse is (B,H,T), q is (B,T,H,D), k and v are (B,T,Hkv,D);
 * Hkv divides H and query head h reads kv head h / (H/Hkv) (grouped-query
 * attention, HF repeat_kv order). Scale 1/sqrt(D); causal masks key j > t.
 * FlashAttention-2 on BLAS: blocks of RT_ATTN_QBLOCK queries against blocks
 * of RT_ATTN_BLOCK keys, each score block one GEMM, an online softmax, no
 * T×T buffer (scratch: one score block on the stack per thread, 32 KB f32,
 * 64 KB f64); lse[b,h,t] = logsumexp of the scaled scores, for the backward.
 * Results do not depend on the thread count. */
void RT_FN(rt_attention_forward)(RT_REAL *out, RT_REAL *lse, const RT_REAL *q,
                                 const RT_REAL *k, const RT_REAL *v, int B, int T, int H,
                                 int Hkv, int D, int causal);
/* dq is (B,T,H,D), dk and dv are (B,T,Hkv,D), all accumulate; dout, out are
 * (B,T,H,D), lse is (B,H,T) from the forward. Probabilities are recomputed
 * block-wise from lse (FlashAttention-2): P = exp(S - lse),
 * dS = P·(dout·vᵀ - rowsum(dout·out)), five GEMMs per pair of blocks.
 * One task per (batch, kv head) owns that head's dk, dv and its query
 * heads' dq, so the sums run in a fixed order for any thread count (and
 * there are only B·Hkv tasks to share out). Scratch: two score blocks on
 * the stack per thread, 64 KB f32, 128 KB f64. */
void RT_FN(rt_attention_backward)(RT_REAL *dq, RT_REAL *dk, RT_REAL *dv,
                                  const RT_REAL *dout, const RT_REAL *q, const RT_REAL *k,
                                  const RT_REAL *v, const RT_REAL *out,
                                  const RT_REAL *lse, int B, int T, int H, int Hkv, int D,
                                  int causal);

/* ---- loss (k_loss.inc) ---- */

/* logits is (N,V), targets is (N), losses is (N) or NULL, lse is (N) or NULL.
 * Softmax cross-entropy; rows with target RT_IGNORE_INDEX count for nothing
 * (losses 0). *loss = mean over the *n_valid counted rows (0 when none), summed
 * in double. lse saves each row's logsumexp for the backward.
 * RT_ERR_ARG for a target outside [0,V) other than RT_IGNORE_INDEX. */
int RT_FN(rt_crossentropy_forward)(double *loss, int *n_valid, RT_REAL *losses,
                                   RT_REAL *lse, const RT_REAL *logits,
                                   const int32_t *targets, int N, int V);
/* dlogits is (N,V), WRITTEN (not accumulated) and it may alias logits (the
 * logits buffer becomes its gradient in place, no probabilities stored):
 * dlogits = (softmax(logits) - onehot(target))·dloss/norm, 0 on ignored rows.
 * norm is the count the loss was averaged over (n_valid, or a global count
 * when rows are sharded). lse is (N) from the forward or NULL (recomputed). */
void RT_FN(rt_crossentropy_backward)(RT_REAL *dlogits, const RT_REAL *logits,
                                     const RT_REAL *lse, const int32_t *targets, int N,
                                     int V, double dloss, double norm);
/* The same, but dlogits is ACCUMULATED (+=) and must not alias logits: for a
 * logits gradient that already holds other contributions. */
void RT_FN(rt_crossentropy_backward_acc)(RT_REAL *dlogits, const RT_REAL *logits,
                                         const RT_REAL *lse, const int32_t *targets, int N,
                                         int V, double dloss, double norm);
/* The three on rows ld apart (ld >= V): the first V columns are the
 * classes, the rest unused (a vocabulary padded so that rows are aligned,
 * `cross_entropy(..., classes = V)`); the backward writes 0 there (the
 * _acc one leaves them). */
int RT_FN(rt_crossentropy_forward_ld)(double *loss, int *n_valid, RT_REAL *losses,
                                      RT_REAL *lse, const RT_REAL *logits,
                                      const int32_t *targets, int N, int V, int ld);
void RT_FN(rt_crossentropy_backward_ld)(RT_REAL *dlogits, const RT_REAL *logits,
                                        const RT_REAL *lse, const int32_t *targets, int N,
                                        int V, int ld, double dloss, double norm);
void RT_FN(rt_crossentropy_backward_acc_ld)(RT_REAL *dlogits, const RT_REAL *logits,
                                            const RT_REAL *lse, const int32_t *targets, int N,
                                            int V, int ld, double dloss, double norm);

/* ---- optimizers, norms, init (k_optim.inc) ---- */

/* param, grad, m, v are (n). AdamW exactly as torch.optim.AdamW: param *=
 * 1 - lr·wd (decoupled, pass wd = 0 for norms/biases), m, v moments, bias
 * correction with t = 1-based step count. grad is multiplied by grad_scale
 * (the clip factor, or 1). */
void RT_FN(rt_adamw_step)(RT_REAL *param, const RT_REAL *grad, RT_REAL *m, RT_REAL *v,
                          size_t n, double lr, double beta1, double beta2, double eps,
                          double weight_decay, long t, double grad_scale);
/* param, grad, mom are (n); mom may be NULL when momentum == 0. torch.optim.SGD
 * with dampening 0, nesterov off, mom starting at zero: g = grad·grad_scale +
 * wd·param; mom = momentum·mom + g; param -= lr·mom. */
void RT_FN(rt_sgd_step)(RT_REAL *param, const RT_REAL *grad, RT_REAL *mom, size_t n,
                        double lr, double momentum, double weight_decay,
                        double grad_scale);
/* Shampoo and Adafactor (k_optim2.inc; docs/language.md gives the update,
 * rt_optim.h the state layout).  param and grad are the tensor (ndim,
 * shape); grad is multiplied by grad_scale in place first; state is its
 * optimizer state, work the step's workspace (rt_shampoo_work for the
 * largest block of the program).  precondition: use the roots this step;
 * recompute (rt_shampoo_step only): compute them first, from the factors
 * before this step's update.
 * Returns RT_OK, or RT_ERR_ARG when an eigendecomposition fails (the
 * message names the factor, L or R, and its size; the caller the tensor,
 * the block and the step). */
int RT_FN(rt_shampoo_step)(RT_REAL *param, RT_REAL *grad, RT_REAL *state, unsigned char *work,
                           int ndim, const int64_t *shape, const RtShampooArgs *a);
/* One unit (block (bi, bj), or a whole unblocked tensor at 0, 0) of a
 * Shampoo step on an already scaled gradient: updates the unit's state and
 * writes its update direction (r x c) to out. */
int RT_FN(rt_shampoo_unit)(const RT_REAL *grad, RT_REAL *state, unsigned char *work, int ndim,
                           const int64_t *shape, int64_t bi, int64_t bj, RT_REAL *out,
                           const RtShampooArgs *a);
/* The roots of block (bi, bj) from the factors as they are (nothing for an
 * unblocked tensor). */
int RT_FN(rt_shampoo_unit_roots)(RT_REAL *state, unsigned char *work, int ndim,
                                 const int64_t *shape, int64_t bi, int64_t bj,
                                 const RtShampooArgs *a);
/* The roots of a block from copies of its factors L (r x r) and R (c x c):
 * Lr = (L + eps I)^-1/4, Rr = (R + eps I)^-1/4, the numbers of
 * rt_shampoo_unit_roots; work holds rt_shampoo_work(0, k)'s bytes, with
 * a->work_elems 0 and a->work_k = k >= r, c (a root worker's scratch). */
int RT_FN(rt_shampoo_roots)(const RT_REAL *L, const RT_REAL *R, RT_REAL *Lr, RT_REAL *Rr,
                            int64_t r, int64_t c, unsigned char *work, const RtShampooArgs *a);
/* A tensor's Shampoo state with every block's factors made whole (the
 * lower triangles from the upper: the steps keep only the upper). */
void RT_FN(rt_shampoo_symmetrize)(RT_REAL *state, int ndim, const int64_t *shape, int64_t block,
                                  int momentum, int graft);
/* param's unit (bi, bj) = param·(1 - lr·wd) - lr·u. */
void RT_FN(rt_shampoo_apply)(RT_REAL *param, const RT_REAL *u, int ndim, const int64_t *shape,
                             int64_t bi, int64_t bj, const RtShampooArgs *a);
/* grad (n) *= grad_scale (nothing when 1). */
void RT_FN(rt_opt_scale_grad)(RT_REAL *grad, size_t n, double grad_scale);
void RT_FN(rt_adafactor_step)(RT_REAL *param, RT_REAL *grad, RT_REAL *state, int ndim,
                              const int64_t *shape, const RtShampooArgs *a);
/* Adafactor of a tensor split over tp (k_optim2.inc), three phases with the
 * partial sums reduced over the tp axes between them: sums (S, T, X), then
 * squares (the accumulators, Σ u² into q), then finish (the update). */
void RT_FN(rt_adafactor_sums)(const RT_REAL *grad, const RT_REAL *state, int ndim,
                              const int64_t *shape, RT_REAL *S, RT_REAL *T, RT_REAL *X,
                              double rep, int64_t Cfull, const RtShampooArgs *a);
void RT_FN(rt_adafactor_squares)(const RT_REAL *grad, RT_REAL *state, int ndim,
                                 const int64_t *shape, const RT_REAL *S, const RT_REAL *T,
                                 const RT_REAL *X, int64_t Rfull, int64_t Cfull, RT_REAL *q,
                                 const RtShampooArgs *a);
void RT_FN(rt_adafactor_finish)(RT_REAL *param, const RT_REAL *grad, RT_REAL *state, int ndim,
                                const int64_t *shape, const RT_REAL *X, int64_t Rfull, double q,
                                int64_t nfull, const RtShampooArgs *a);
/* x is (n): Σ x² in double (one rank's share of a global grad norm). */
double RT_FN(rt_sumsq)(const RT_REAL *x, size_t n);
/* Σ over count buffers bufs[i] of ns[i] elements each. */
double RT_FN(rt_sumsq_list)(const RT_REAL *const *bufs, const size_t *ns, int count);
/* buf is (n): buf[i] = std·rt_rng_normal(seed, tensor_id, offset + i), offset
 * being the index of buf[0] in the whole tensor (so shards match). Computed
 * in double, so the f32 init equals the rounded f64 init. */
void RT_FN(rt_init_normal)(RT_REAL *buf, size_t n, double std, uint64_t seed,
                           uint64_t tensor_id, uint64_t offset);
/* buf is (n): uniform in [lo,hi) from rt_rng_uniform(seed, tensor_id, offset+i). */
void RT_FN(rt_init_uniform)(RT_REAL *buf, size_t n, double lo, double hi, uint64_t seed,
                            uint64_t tensor_id, uint64_t offset);
/* buf is (n): buf[i] = value. */
void RT_FN(rt_init_const)(RT_REAL *buf, size_t n, double value);
