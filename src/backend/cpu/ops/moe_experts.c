/* Mixture of experts: the experts' GEMMs (with their biases) over each expert's sorted rows, their fused GLU, and a
 * shared expert's sigmoid gate (backend.h's moe group). */
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops/glu_math.h"

/* Every GEMM runs one (expert, segment) at a time, as BLAS's bits depend on the row count. */
void mt_cpu_moe_matmul(float *y, const float *x, const float *w, const float *bias, const int32_t *offsets, int rows,
                       int E, int S, int in, int out) {
    for (int e = 0; e < E; e++)
        for (int s = 0; s < S; s++) {
            int r0 = offsets[e * S + s], r1 = offsets[e * S + s + 1];
            if (r1 > r0)
                mt_cpu_matmul(y + (size_t)r0 * out, x + (size_t)r0 * in, w + (size_t)e * out * in,
                              bias ? bias + (size_t)e * out : NULL, r1 - r0, in, out);
        }
}

void mt_cpu_moe_matmul_dx(float *dx, const float *dy, const float *w, const int32_t *offsets, int rows, int E, int S,
                          int in, int out) {
    for (int e = 0; e < E; e++)
        for (int s = 0; s < S; s++) {
            int r0 = offsets[e * S + s], r1 = offsets[e * S + s + 1];
            if (r1 > r0)
                mt_cpu_matmul_dx(dx + (size_t)r0 * in, dy + (size_t)r0 * out, w + (size_t)e * out * in, r1 - r0, in,
                                 out, 0);
        }
}

void mt_cpu_moe_matmul_dw(float *dw, float *dbias, const float *dy, const float *x, const int32_t *offsets, int rows,
                          int E, int S, int in, int out) {
    for (int e = 0; e < E; e++)
        for (int s = 0; s < S; s++) {
            int r0 = offsets[e * S + s], r1 = offsets[e * S + s + 1];
            if (r1 > r0)
                mt_cpu_matmul_dw(dw + (size_t)e * out * in, dbias ? dbias + (size_t)e * out : NULL,
                                 dy + (size_t)r0 * out, x + (size_t)r0 * in, r1 - r0, in, out);
        }
}

/* The dense GLU's arithmetic (glu_math.h) on each row's halves. */
void mt_cpu_moe_swiglu(float *a, const float *gu, int rows, int F, mt_glu_params p) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * F, *u = g + F;
        float *out = a + (size_t)r * F;
        for (int i = 0; i < F; i++) out[i] = glu_one(p, g[i], u[i]);
    }
}

void mt_cpu_moe_swiglu_dx(float *dgu, const float *da, const float *gu, int rows, int F, mt_glu_params p) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * F, *u = g + F, *d = da + (size_t)r * F;
        float *dg = dgu + (size_t)r * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) glu_grad_one(p, d[i], g[i], u[i], &dg[i], &du[i]);
    }
}

void mt_cpu_moe_gate_add(float *y, const float *a, const float *x, const float *g, int n, int d) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float sig = 1.0f / (1.0f + expf(-g[t]));
        for (int i = 0; i < d; i++) y[(size_t)t * d + i] = a[(size_t)t * d + i] + sig * x[(size_t)t * d + i];
    }
}

void mt_cpu_moe_gate_add_dx(float *dx, float *dg, const float *dy, const float *x, const float *g, int n, int d) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float sig = 1.0f / (1.0f + expf(-g[t])), dot = 0;
        for (int i = 0; i < d; i++) {
            dot += dy[(size_t)t * d + i] * x[(size_t)t * d + i];
            dx[(size_t)t * d + i] = sig * dy[(size_t)t * d + i];
        }
        dg[t] = sig * (1.0f - sig) * dot;
    }
}
