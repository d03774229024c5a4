/* RMSNorm: y = x * rstd * w (or * (1 + w), Gemma's), rstd = 1/sqrt(mean(x^2) + eps), and its
 * backward. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

/* Columns per task for the row-ordered dw sum. */
enum { DW_COLUMN_BLOCK = 64 };

/* The weight the rows are multiplied by: w, or 1 + w. */
static inline float gain(mt_rmsnorm_params p, float w) { return p.unit_offset ? 1.0f + w : w; }

void mt_cpu_rmsnorm(float *y, float *rstd, const float *x, const float *w, int n, int d, mt_rmsnorm_params p) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        double sumsq = 0.0;
        for (int j = 0; j < d; j++) sumsq += (double)xr[j] * xr[j];
        float s = (float)(1.0 / sqrt(sumsq / d + p.eps));
        rstd[r] = s;
        for (int j = 0; j < d; j++) yr[j] = xr[j] * s * gain(p, w[j]);
    }
}

/* With s = rstd, g the gain and c = sum_j dy_j g_j x_j / d:  dx_k = s * (dy_k g_k - x_k s^2 c); dw is
 * the same for either gain. */
void mt_cpu_rmsnorm_dx(float *dx, float *dw, const float *dy, const float *x, const float *w,
                       const float *rstd, int n, int d, mt_rmsnorm_params p, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        const float *dyr = dy + (size_t)r * d, *xr = x + (size_t)r * d;
        float *dxr = dx + (size_t)r * d;
        float s = rstd[r];
        double dot = 0.0;
        for (int j = 0; j < d; j++) dot += (double)dyr[j] * gain(p, w[j]) * xr[j];
        float c = (float)(dot / d) * s * s;
        for (int j = 0; j < d; j++) {
            float g = s * (dyr[j] * gain(p, w[j]) - xr[j] * c);
            dxr[j] = accumulate ? dxr[j] + g : g;
        }
    }
    /* dw: each thread owns a block of columns and adds the rows in order (split-invariant). */
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < d; j0 += DW_COLUMN_BLOCK) {
        int j1 = j0 + DW_COLUMN_BLOCK < d ? j0 + DW_COLUMN_BLOCK : d;
        for (int r = 0; r < n; r++) {
            const float *dyr = dy + (size_t)r * d, *xr = x + (size_t)r * d;
            float s = rstd[r];
            for (int j = j0; j < j1; j++) dw[j] += dyr[j] * xr[j] * s;
        }
    }
}
