/* Elementwise sums: the residual connection, and a sum kept in fp32 across calls. */
#include "backend/cpu/cpu_ops.h"

void mt_cpu_add(float *y, const float *a, const float *b, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) y[i] = a[i] + b[i];
}

void mt_cpu_accumulate_f32(float *acc, const float *x, size_t count, int accumulate) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) acc[i] = accumulate ? acc[i] + x[i] : x[i];
}
