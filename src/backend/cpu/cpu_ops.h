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

void mt_cpu_rmsnorm(float *y, float *rstd, const float *x, const float *w, int n, int d, float eps);
void mt_cpu_rmsnorm_dx(float *dx, float *dw, const float *dy, const float *x, const float *w,
                       const float *rstd, int n, int d, int accumulate);

void mt_cpu_rope(float *x, const float *inv_freq, int n, int seq, const int32_t *pos, int heads, int head_dim,
                 int inverse);

/* seg: NULL, or host pointers (the cpu backend's device memory is host memory). */
void mt_cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, mt_attn_dims dims,
                      const mt_segments *seg);
void mt_cpu_attention_dx(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         mt_attn_dims dims, const mt_segments *seg, void *workspace);
size_t mt_cpu_attention_workspace(mt_attn_dims dims);

void mt_cpu_swiglu(float *a, const float *g, const float *u, size_t count);
void mt_cpu_swiglu_dx(float *dg, float *du, const float *da, const float *g, const float *u, size_t count);

void mt_cpu_add(float *y, const float *a, const float *b, size_t count);

void mt_cpu_embedding(float *x, const int32_t *tokens, const float *wte, int n, int d);
void mt_cpu_embedding_dw(float *dwte, const int32_t *tokens, const float *dx, int n, int d, int v0, int rows);

void mt_cpu_lmhead_loss(float *loss_sum, float *lse, float *dx, float *dw, const float *x, const float *w,
                        const int32_t *targets, int n, int d, int vocab, float scale, int chunk,
                        void *workspace);
void mt_cpu_lmhead_dw(float *dw, const float *x, const float *w, const int32_t *targets, const float *lse, int n,
                      int d, int v0, int rows, float scale, int chunk, void *workspace);
size_t mt_cpu_lmhead_workspace(int chunk, int vocab);
void mt_cpu_logits(float *logits, const float *x, const float *w, int d, int vocab);

void mt_cpu_sumsq(float *out, const float *x, size_t count);

#endif
