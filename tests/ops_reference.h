/* Naive double-precision forward passes, written straight from the definitions in
 * backend/backend.h, that the float kernels are checked against. Outputs are double. */
#ifndef MT_TESTS_OPS_REFERENCE_H
#define MT_TESTS_OPS_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

void ops_ref_matmul(double *y, const float *x, const float *w, const float *bias, int n, int in, int out);
void ops_ref_rmsnorm(double *y, double *rstd, const float *x, const float *w, int n, int d, float eps);
void ops_ref_rope(double *y, const float *x, const float *inv_freq, int n, int seq, int heads, int head_dim);
void ops_ref_attention(double *out, double *lse, const float *q, const float *k, const float *v,
                       mt_attn_dims dims);
void ops_ref_swiglu(double *a, const float *g, const float *u, size_t count);
/* Sum over rows with target >= 0 of -log softmax(x . w^T)[target]. */
double ops_ref_lmhead_loss(const float *x, const float *w, const int32_t *targets, int n, int d, int vocab);

#endif
