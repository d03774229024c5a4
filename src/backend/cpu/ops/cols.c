/* Columns of each row picked by a map (Qwen3-Next's fused projections apart), and put back. */
#include "backend/cpu/cpu_ops.h"

void mt_cpu_gather_cols(float *y, const float *x, const int32_t *cols, int n, int in, int out) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        for (int j = 0; j < out; j++) y[(size_t)r * out + j] = x[(size_t)r * in + cols[j]];
}

void mt_cpu_scatter_cols(float *dx, const float *dy, const int32_t *cols, int n, int in, int out) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        for (int j = 0; j < out; j++) dx[(size_t)r * in + cols[j]] = dy[(size_t)r * out + j];
}
