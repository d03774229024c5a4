/* The dense gated linear unit: a = act(g) * u (glu_math.h), and its backward. */
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops/glu_math.h"

void mt_cpu_swiglu(float *a, const float *g, const float *u, size_t count, mt_glu_params p) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) a[i] = glu_one(p, g[i], u[i]);
}

void mt_cpu_swiglu_dx(float *dg, float *du, const float *da, const float *g, const float *u, size_t count,
                      mt_glu_params p) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) glu_grad_one(p, da[i], g[i], u[i], &dg[i], &du[i]);
}
