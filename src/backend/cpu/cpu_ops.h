/* The reference kernels: plain fp32 C, OpenMP across rows or columns, BLAS for GEMMs.
 * Each has the meaning of the op of the same name in backend/backend.h, minus the backend and
 * stream. They are the cpu backend's ops and the reference every CUDA kernel is tested against.
 *
 * Determinism: every kernel gives bitwise-identical results for the same inputs and thread
 * count. rmsnorm_dx's dw, embedding_dw and matmul_dw's dbias add rows strictly in row order, so
 * one call over n rows equals two calls over its halves, bitwise. matmul_dw's dw and
 * lmhead_loss's dw are BLAS GEMMs over a call's rows (lmhead_loss: per chunk), whose summation
 * order depends on n; so the engine calls every dw-accumulating op once per sequence, in
 * sequence order, which gives the same bits however sequences are grouped into micro-batches. */
#ifndef MT_BACKEND_CPU_OPS_H
#define MT_BACKEND_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

void mt_cpu_matmul(float *y, const float *x, const float *w, const float *bias, int n, int in, int out);
void mt_cpu_matmul_dx(float *dx, const float *dy, const float *w, int n, int in, int out, int accumulate);
void mt_cpu_matmul_dw(float *dw, float *dbias, const float *dy, const float *x, int n, int in, int out);

void mt_cpu_rmsnorm(float *y, float *rstd, const float *x, const float *w, int n, int d, mt_rmsnorm_params p);
void mt_cpu_rmsnorm_dx(float *dx, float *dw, const float *dy, const float *x, const float *w,
                       const float *rstd, int n, int d, mt_rmsnorm_params p, int accumulate);

/* Attention's output gate (backend.h: op.gate_split, gate_join, out_gate, out_gate_dx). */
void mt_cpu_gate_split(float *q, float *gate, const float *qg, int n, int heads, int head_dim);
void mt_cpu_gate_join(float *dqg, const float *dq, const float *dgate, int n, int heads, int head_dim);
void mt_cpu_out_gate(float *y, const float *x, const float *gate, size_t count);
void mt_cpu_out_gate_dx(float *dx, float *dgate, const float *dy, const float *x, const float *gate, size_t count);

/* Columns by a map (backend.h: op.gather_cols, scatter_cols). */
void mt_cpu_gather_cols(float *y, const float *x, const int32_t *cols, int n, int in, int out);
void mt_cpu_scatter_cols(float *dx, const float *dy, const int32_t *cols, int n, int in, int out);

void mt_cpu_rope(float *x, const float *inv_freq, int n, int seq, int pos0, const int32_t *pos, int heads,
                 int head_dim, int rotary_dim, int inverse);

/* params (its sinks, dsinks) and seg: NULL, or host pointers (the cpu backend's device memory is host
 * memory). */
void mt_cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, mt_attn_dims dims,
                      const mt_attn_params *params, const mt_segments *seg);
void mt_cpu_attention_dx(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         mt_attn_dims dims, const mt_attn_params *params, const mt_segments *seg, void *workspace);
size_t mt_cpu_attention_workspace(mt_attn_dims dims);

void mt_cpu_swiglu(float *a, const float *g, const float *u, size_t count, mt_glu_params p);
void mt_cpu_swiglu_dx(float *dg, float *du, const float *da, const float *g, const float *u, size_t count,
                      mt_glu_params p);

void mt_cpu_add(float *y, const float *a, const float *b, size_t count);
void mt_cpu_accumulate_f32(float *acc, const float *x, size_t count, int accumulate);

void mt_cpu_embedding(float *x, const int32_t *tokens, const float *wte, int n, int d, float scale);
void mt_cpu_embedding_dw(float *dwte, const int32_t *tokens, const float *dx, int n, int d, int v0, int rows,
                         float scale);

void mt_cpu_lmhead_loss(float *loss_sum, float *lse, float *dx, float *dw, const float *x, const float *w,
                        const int32_t *targets, int n, int d, int vocab, float scale, float softcap,
                        int chunk, void *workspace);
void mt_cpu_lmhead_dw(float *dw, const float *x, const float *w, const int32_t *targets, const float *lse, int n,
                      int d, int v0, int rows, float scale, float softcap, int chunk, void *workspace);
size_t mt_cpu_lmhead_workspace(int chunk, int vocab);
void mt_cpu_logits(float *logits, const float *x, const float *w, int d, int vocab, float softcap);

void mt_cpu_sumsq(float *out, const float *x, size_t count);

/* Mixture of experts (backend.h's moe group). Every sum runs in a fixed order: prob_sum and counts
 * over tokens in token order, combine and gather_dx over a token's choices in choice order, the
 * grouped GEMMs one (expert, segment) at a time, so results are the same bits for any thread count
 * and grouped_matmul_dw is split-invariant by segment. */
void mt_cpu_moe_route(float *weights, int32_t *experts, int32_t *counts, float *prob_sum, const float *logits, int n,
                      int E, int k, int renorm);
void mt_cpu_moe_route_dx(float *dlogits, const float *dweights, const float *logits, const int32_t *experts,
                         const float *aux_grad, int n, int E, int k, int renorm);
void mt_cpu_moe_permute(int32_t *order, int32_t *slot_row, int32_t *offsets, const int32_t *experts, int n, int E,
                        int k, int seg);
void mt_cpu_moe_gather(float *xs, const float *x, const int32_t *order, int n, int k, int d);
void mt_cpu_moe_gather_dx(float *dx, const float *dxs, const int32_t *slot_row, int n, int k, int d, int accumulate);
void mt_cpu_moe_matmul(float *y, const float *x, const float *w, const float *bias, const int32_t *offsets, int rows,
                       int E, int S, int in, int out);
void mt_cpu_moe_matmul_dx(float *dx, const float *dy, const float *w, const int32_t *offsets, int rows, int E, int S,
                          int in, int out);
void mt_cpu_moe_matmul_dw(float *dw, float *dbias, const float *dy, const float *x, const int32_t *offsets, int rows,
                          int E, int S, int in, int out);
void mt_cpu_moe_swiglu(float *a, const float *gu, int rows, int F, mt_glu_params p);
void mt_cpu_moe_swiglu_dx(float *dgu, const float *da, const float *gu, int rows, int F, mt_glu_params p);
void mt_cpu_moe_combine(float *y, const float *ys, const float *weights, const int32_t *slot_row, int n, int k, int d);
void mt_cpu_moe_combine_dx(float *dys, float *dweights, const float *dy, const float *ys, const float *weights,
                           const int32_t *slot_row, int n, int k, int d);
void mt_cpu_moe_gate_add(float *y, const float *a, const float *x, const float *g, int n, int d);
void mt_cpu_moe_gate_add_dx(float *dx, float *dg, const float *dy, const float *x, const float *g, int n, int d);
void mt_cpu_moe_aux_loss(float *loss_sum, float *grad, const int32_t *counts, const float *prob_sum, int layers, int n,
                         int E, float loss_scale, float grad_scale);

/* Gated DeltaNet (backend.h's gdn group); seg pointers are host pointers. The rule is the recurrence
 * itself, token by token with an fp32 state; its backward runs the tokens in reverse, recomputing
 * the states a chunk of MT_CPU_GDN_CHUNK at a time from checkpoints in the workspace. Weight
 * gradients add rows in row order; every kernel's result is the same bits for any thread count. */
enum { MT_CPU_GDN_CHUNK = 64 };
/* Row r's position in its segment. */
static inline int mt_gdn_pos(const mt_gdn_dims *d, int r) { return d->seg ? d->seg->pos[r] : r % d->seq; }
void mt_cpu_gdn_conv(float *y, const float *x, const float *w, int C, mt_gdn_dims d);
void mt_cpu_gdn_conv_dx(float *dx, float *dw, const float *dy, const float *x, const float *w, int C, mt_gdn_dims d);
void mt_cpu_gdn_qk_norm(float *qn, float *kn, const float *q, const float *k, mt_gdn_dims d);
void mt_cpu_gdn_qk_norm_dx(float *dq, float *dk, const float *dqn, const float *dkn, const float *q, const float *k,
                           mt_gdn_dims d);
void mt_cpu_gdn_decay(float *g, float *beta, const float *a, const float *b, const float *A_log, const float *dt_bias,
                      mt_gdn_dims d);
void mt_cpu_gdn_decay_dx(float *da, float *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                         const float *a, const float *b, const float *A_log, const float *dt_bias, mt_gdn_dims d);
void mt_cpu_gdn_rule(float *o, const float *q, const float *k, const float *v, const float *g, const float *beta,
                     mt_gdn_dims d, void *workspace);
void mt_cpu_gdn_rule_dx(float *dq, float *dk, float *dv, float *dg, float *dbeta, const float *dout, const float *q,
                        const float *k, const float *v, const float *g, const float *beta, mt_gdn_dims d,
                        void *workspace);
size_t mt_cpu_gdn_rule_workspace(mt_gdn_dims d);
void mt_cpu_gdn_norm(float *y, const float *x, const float *z, const float *w, float eps, mt_gdn_dims d);
void mt_cpu_gdn_norm_dx(float *dx, float *dz, float *dw, const float *dy, const float *x, const float *z,
                        const float *w, float eps, mt_gdn_dims d);

#endif
