/* The CUDA backend's kernel launchers, callable from C. Each enqueues its kernels on stream `s`
 * and returns MT_OK or the launch error; the meaning of every op is that of backend.h, with
 * "act" and "w" buffers in bf16. */
#ifndef MT_BACKEND_CUDA_KERNELS_H
#define MT_BACKEND_CUDA_KERNELS_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"
#include "backend/cuda_workspace.h"
#include "optim/adamw_kernels.h"

typedef struct mt_cuda_backend mt_cuda_backend;

/* Column-major D[m,n] = op(A)[m,k] . op(B)[k,n] + beta * D (+ bias[m] on every column), bf16 A
 * and B, fp32 accumulation, D in fp32 or bf16. The row-major ops in gemm.c map onto this. */
typedef struct {
    int m, n, k;
    const void *a;
    int lda, trans_a;
    const void *b;
    int ldb, trans_b;
    void *d;
    int ldd, d_is_f32;
    float beta;
    const void *bias; /* bf16 [m] or NULL; only with a bf16 D */
} mt_cuda_gemm_desc;

mt_status mt_cuda_gemm(mt_cuda_backend *cb, cudaStream_t s, const mt_cuda_gemm_desc *g);

mt_status mt_cuda_bias_grad(cudaStream_t s, float *dbias, const void *dy, int n, int out);
mt_status mt_cuda_rmsnorm(cudaStream_t s, void *y, float *rstd, const void *x, const void *w,
                          int n, int d, mt_rmsnorm_params p);
mt_status mt_cuda_rmsnorm_dx(cudaStream_t s, void *dx, float *dw, const void *dy, const void *x,
                             const void *w, const float *rstd, int n, int d, mt_rmsnorm_params p,
                             int accumulate);
mt_status mt_cuda_gate_split(cudaStream_t s, void *q, void *gate, const void *qg, int n, int heads, int head_dim);
mt_status mt_cuda_gate_join(cudaStream_t s, void *dqg, const void *dq, const void *dgate, int n, int heads,
                            int head_dim);
mt_status mt_cuda_out_gate(cudaStream_t s, void *y, const void *x, const void *gate, size_t count);
mt_status mt_cuda_out_gate_dx(cudaStream_t s, void *dx, void *dgate, const void *dy, const void *x, const void *gate,
                              size_t count);
mt_status mt_cuda_gather_cols(cudaStream_t s, void *y, const void *x, const int32_t *cols, int n, int in, int out);
mt_status mt_cuda_scatter_cols(cudaStream_t s, void *dx, const void *dy, const int32_t *cols, int n, int in, int out);
mt_status mt_cuda_rope(cudaStream_t s, void *x, const float *inv_freq, int n, int seq, int pos0,
                       const int32_t *pos, int heads, int head_dim, int rotary_dim, int inverse);
mt_status mt_cuda_swiglu(cudaStream_t s, void *a, const void *g, const void *u, size_t count, mt_glu_params p);
mt_status mt_cuda_swiglu_dx(cudaStream_t s, void *dg, void *du, const void *da, const void *g,
                            const void *u, size_t count, mt_glu_params p);
mt_status mt_cuda_add(cudaStream_t s, void *y, const void *a, const void *b, size_t count);
mt_status mt_cuda_accumulate_f32(cudaStream_t s, float *acc, const void *x, size_t count, int accumulate);
mt_status mt_cuda_round_f32(cudaStream_t s, void *y, const float *x, size_t count);
mt_status mt_cuda_embedding(cudaStream_t s, void *x, const int32_t *tokens, const void *wte, int n,
                            int d, float scale);
mt_status mt_cuda_embedding_dw(cudaStream_t s, float *dwte, const int32_t *tokens, const void *dx,
                               int n, int d, int v0, int rows, float scale);
mt_status mt_cuda_sumsq(cudaStream_t s, float *out, const float *x, size_t count);
mt_status mt_cuda_clip_scale(cudaStream_t s, float *scale, const float *norms, int count, float max_norm);
/* AdamW with the constants of c (its grad_scale replaced by *scale when scale is non-NULL), bf16
 * weights out. */
mt_status mt_cuda_adamw(cudaStream_t s, const mt_adamw_coef *c, const float *scale, float *master, float *m,
                        float *v, const float *grad, void *w, size_t n);

/* params: backend.h's variants (device sinks, dsinks), or NULL; pos: the segments' positions
 * (backend.h's mt_segments), or NULL. */
mt_status mt_cuda_attention(cudaStream_t s, void *out, float *lse, const void *q, const void *k,
                            const void *v, mt_attn_dims dims, const mt_attn_params *params, const int32_t *pos);
mt_status mt_cuda_attention_dx(cudaStream_t s, void *dq, void *dk, void *dv, const void *dout,
                               const void *out, const float *lse, const void *q, const void *k,
                               const void *v, mt_attn_dims dims, const mt_attn_params *params,
                               const int32_t *pos, void *workspace);
size_t mt_cuda_attention_workspace(mt_attn_dims dims);
/* The sinks (params->sinks) of an attention computed without them, out and lse in place (cuDNN's:
 * attention_dispatch.c): lse' = logaddexp(lse, sink), out *= exp(lse - lse'). The backward given
 * those out and lse is the sinks' own for dq, dk and dv; _dx adds their gradient to params->dsinks
 * (mt_cuda_attention_workspace(dims) bytes of workspace). pos: as above (non-NULL: the segments'
 * lse layout). */
mt_status mt_cuda_attention_sinks_fold(cudaStream_t s, void *out, float *lse, mt_attn_dims dims,
                                       const mt_attn_params *params, const int32_t *pos);
mt_status mt_cuda_attention_sinks_dx(cudaStream_t s, const void *dout, const void *out, const float *lse,
                                     mt_attn_dims dims, const mt_attn_params *params, const int32_t *pos,
                                     void *workspace);
/* cuDNN's ragged layout of a micro-batch's segments (starts[count + 1], device) as `entries`
 * entries: int32 lens[entries] (0 past the segments) and int64 offsets[entries + 1] of each entry's
 * first element in tensors of q_row, kv_row and stats_row elements a row. */
mt_status mt_cuda_ragged_offsets(cudaStream_t s, const int32_t *starts, int count, int entries, int64_t q_row,
                                 int64_t kv_row, int64_t stats_row, void *lens, void *off_q, void *off_kv,
                                 void *off_stats);

mt_status mt_cuda_lmhead_loss(mt_cuda_backend *cb, cudaStream_t s, float *loss_sum, float *lse, void *dx,
                              float *dw, const void *x, const void *w, const int32_t *targets,
                              int n, int d, int vocab, float scale, float softcap, int chunk, void *workspace);
size_t mt_cuda_lmhead_workspace(int chunk, int vocab);
mt_status mt_cuda_lmhead_dw(mt_cuda_backend *cb, cudaStream_t s, float *dw, const void *x, const void *w,
                            const int32_t *targets, const float *lse, int n, int d, int v0, int rows, float scale,
                            float softcap, int chunk, void *workspace);
/* x[count] (device float) = softcap * tanh(x / softcap) in place; softcap 0: nothing. */
mt_status mt_cuda_soft_cap(cudaStream_t s, float *x, int count, float softcap);

/* Stream-ordered device scratch for the mixture-of-experts kernels (their small per-call buffers:
 * per-tile counts, per-block partial sums), from the backend's memory pool: cudaMallocAsync and
 * cudaFreeAsync on s, so the buffer lives exactly as long as the work between them on s. */
mt_status mt_cuda_scratch_alloc(mt_cuda_backend *cb, cudaStream_t s, size_t bytes, void **out);
void mt_cuda_scratch_free(mt_cuda_backend *cb, cudaStream_t s, void *p);

/* Mixture of experts (backend.h's moe group): routing (moe_route.cu), the permutation, gather and
 * combine (moe_permute.cu), the experts' SwiGLU and a shared expert's gate (moe_experts.cu), the
 * grouped GEMMs (moe_gemm.cu). */
mt_status mt_cuda_moe_route(mt_cuda_backend *cb, cudaStream_t s, float *weights, int32_t *experts, int32_t *counts,
                            float *prob_sum, const void *logits, int n, int E, int k, int renorm);
mt_status mt_cuda_moe_route_dx(cudaStream_t s, void *dlogits, const float *dweights, const void *logits,
                               const int32_t *experts, const float *aux_grad, int n, int E, int k, int renorm);
mt_status mt_cuda_moe_aux_loss(cudaStream_t s, float *loss_sum, float *grad, const int32_t *counts,
                               const float *prob_sum, int layers, int n, int E, float loss_scale, float grad_scale);
mt_status mt_cuda_moe_permute(mt_cuda_backend *cb, cudaStream_t s, int32_t *order, int32_t *slot_row,
                              int32_t *offsets, const int32_t *experts, int n, int E, int k, int seg);
mt_status mt_cuda_moe_gather(cudaStream_t s, void *xs, const void *x, const int32_t *order, int n, int k, int d);
mt_status mt_cuda_moe_gather_dx(cudaStream_t s, void *dx, const void *dxs, const int32_t *slot_row, int n, int k,
                                int d, int accumulate);
mt_status mt_cuda_moe_combine(cudaStream_t s, void *y, const void *ys, const float *weights, const int32_t *slot_row,
                              int n, int k, int d);
mt_status mt_cuda_moe_combine_dx(cudaStream_t s, void *dys, float *dweights, const void *dy, const void *ys,
                                 const float *weights, const int32_t *slot_row, int n, int k, int d);
mt_status mt_cuda_moe_swiglu(cudaStream_t s, void *a, const void *gu, int rows, int F, mt_glu_params p);
mt_status mt_cuda_moe_swiglu_dx(cudaStream_t s, void *dgu, const void *da, const void *gu, int rows, int F,
                                mt_glu_params p);
mt_status mt_cuda_moe_gate_add(cudaStream_t s, void *y, const void *a, const void *x, const void *g, int n, int d);
mt_status mt_cuda_moe_gate_add_dx(cudaStream_t s, void *dx, void *dg, const void *dy, const void *x, const void *g,
                                  int n, int d);
/* The experts' biases on the grouped GEMMs' rows (moe_bias.cu): y[r] += bias[e] (bias bf16 [E, out]) for
 * the rows of each expert e, and dbias[e] (float [E, out]) += the sum of those rows of dy. */
mt_status mt_cuda_moe_bias(cudaStream_t s, void *y, const void *bias, const int32_t *offsets, int rows, int E, int S,
                           int out);
mt_status mt_cuda_moe_bias_grad(cudaStream_t s, float *dbias, const void *dy, const int32_t *offsets, int E, int S,
                                int out);
/* The grouped GEMMs as one kernel each, reading the offsets on the device (no host sync):
 * MT_MOE_GEMM=kernel (moe_gemm.cu). */
mt_status mt_cuda_moe_gemm(cudaStream_t s, void *y, const void *x, const void *w, const int32_t *offsets, int rows,
                           int E, int S, int in, int out);
mt_status mt_cuda_moe_gemm_dx(cudaStream_t s, void *dx, const void *dy, const void *w, const int32_t *offsets,
                              int rows, int E, int S, int in, int out);
mt_status mt_cuda_moe_gemm_dw(cudaStream_t s, float *dw, const void *dy, const void *x, const int32_t *offsets,
                              int rows, int E, int S, int in, int out);
/* The same through cuBLASLt, the default: a GEMM per expert (per expert and segment for dw) after
 * copying the offsets home and waiting for them, fanned out over the backend's streams
 * (moe_gemm_cublaslt.c). */
mt_status mt_cuda_moe_gemm_cublaslt(mt_cuda_backend *cb, cudaStream_t s, void *y, const void *x, const void *w,
                                    const int32_t *offsets, int rows, int E, int S, int in, int out);
mt_status mt_cuda_moe_gemm_dx_cublaslt(mt_cuda_backend *cb, cudaStream_t s, void *dx, const void *dy, const void *w,
                                       const int32_t *offsets, int rows, int E, int S, int in, int out);
mt_status mt_cuda_moe_gemm_dw_cublaslt(mt_cuda_backend *cb, cudaStream_t s, float *dw, const void *dy, const void *x,
                                       const int32_t *offsets, int rows, int E, int S, int in, int out);

/* Gated DeltaNet (backend.h's gdn group): gdn_ops.cu and gdn_rule.cu. d_k and d_v at most
 * MT_CUDA_GDN_MAX_DIM and multiples of 4 (the rule's kernels hold a chunk's matrices in shared
 * memory); mt_cuda_gdn_check says so by name. */
enum { MT_CUDA_GDN_MAX_DIM = 128 }; /* the rule's chunk: MT_CUDA_GDN_CHUNK (cuda_workspace.h) */
mt_status mt_cuda_gdn_check(mt_gdn_dims d);
mt_status mt_cuda_gdn_conv(cudaStream_t s, void *y, const void *x, const void *w, int C, mt_gdn_dims d);
mt_status mt_cuda_gdn_conv_dx(cudaStream_t s, void *dx, float *dw, const void *dy, const void *x, const void *w, int C,
                              mt_gdn_dims d);
mt_status mt_cuda_gdn_qk_norm(cudaStream_t s, void *qn, void *kn, const void *q, const void *k, mt_gdn_dims d);
mt_status mt_cuda_gdn_qk_norm_dx(cudaStream_t s, void *dq, void *dk, const void *dqn, const void *dkn, const void *q,
                                 const void *k, mt_gdn_dims d);
mt_status mt_cuda_gdn_decay(cudaStream_t s, float *g, float *beta, const void *a, const void *b, const void *A_log,
                            const void *dt_bias, mt_gdn_dims d);
mt_status mt_cuda_gdn_decay_dx(cudaStream_t s, void *da, void *db, float *dA_log, float *ddt_bias, const float *dg,
                               const float *dbeta, const void *a, const void *b, const void *A_log,
                               const void *dt_bias, mt_gdn_dims d);
mt_status mt_cuda_gdn_norm(cudaStream_t s, void *y, const void *x, const void *z, const void *w, float eps,
                           mt_gdn_dims d);
mt_status mt_cuda_gdn_norm_dx(cudaStream_t s, void *dx, void *dz, float *dw, const void *dy, const void *x,
                              const void *z, const void *w, float eps, mt_gdn_dims d);
size_t mt_cuda_gdn_rule_workspace(mt_gdn_dims d);
mt_status mt_cuda_gdn_rule(cudaStream_t s, void *o, const void *q, const void *k, const void *v, const float *g,
                           const float *beta, mt_gdn_dims d, void *workspace);
mt_status mt_cuda_gdn_rule_dx(cudaStream_t s, void *dq, void *dk, void *dv, float *dg, float *dbeta, const void *dout,
                              const void *q, const void *k, const void *v, const float *g, const float *beta,
                              mt_gdn_dims d, void *workspace);

#ifdef __cplusplus
}
#endif

#endif
