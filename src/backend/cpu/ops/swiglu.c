/* SwiGLU gate: a = silu(g) * u with silu(g) = g * sigmoid(g). */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

void mt_cpu_swiglu(float *a, const float *g, const float *u, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) {
        float sig = 1.0f / (1.0f + expf(-g[i]));
        a[i] = g[i] * sig * u[i];
    }
}

/* d silu(g)/dg = sig * (1 + g * (1 - sig)). */
void mt_cpu_swiglu_dx(float *dg, float *du, const float *da, const float *g, const float *u, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) {
        float sig = 1.0f / (1.0f + expf(-g[i]));
        float silu = g[i] * sig;
        float dsilu = sig * (1.0f + g[i] * (1.0f - sig));
        float dai = da[i];
        dg[i] = dai * u[i] * dsilu;
        du[i] = dai * silu;
    }
}
