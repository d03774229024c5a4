/* Gated DeltaNet's output norm, Qwen3NextRMSNormGated: y = x * rsqrt(mean(x^2) + eps) * w * silu(z)
 * over each head's d_v values, with a plain weight w (ones at initialisation, not 1 + w). */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

static float rstd_of(const float *x, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void mt_cpu_gdn_norm(float *y, const float *x, const float *z, const float *w, float eps, mt_gdn_dims d) {
    int n = d.d_v;
    size_t rows = (size_t)d.n * d.v_heads;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *zr = z + r * n;
        float rs = rstd_of(xr, n, eps);
        for (int i = 0; i < n; i++) y[r * n + i] = xr[i] * rs * w[i] * zr[i] * sigmoid(zr[i]);
    }
}

/* With xh = x rstd and s = silu(z): dz = dy xh w silu'(z); dxh = dy w s; dx = rstd (dxh - xh
 * mean(dxh xh)); dw += dy xh s, head rows in order. */
void mt_cpu_gdn_norm_dx(float *dx, float *dz, float *dw, const float *dy, const float *x, const float *z,
                        const float *w, float eps, mt_gdn_dims d) {
    int n = d.d_v;
    size_t rows = (size_t)d.n * d.v_heads;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *zr = z + r * n, *dyr = dy + r * n;
        float rs = rstd_of(xr, n, eps), dot = 0.0f;
        for (int i = 0; i < n; i++) {
            float sg = sigmoid(zr[i]), xh = xr[i] * rs;
            dz[r * n + i] = dyr[i] * xh * w[i] * sg * (1.0f + zr[i] * (1.0f - sg));
            dot += dyr[i] * w[i] * zr[i] * sg * xh;
        }
        dot /= (float)n;
        for (int i = 0; i < n; i++) {
            float xh = xr[i] * rs;
            dx[r * n + i] = rs * (dyr[i] * w[i] * zr[i] * sigmoid(zr[i]) - xh * dot);
        }
    }
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *zr = z + r * n;
        float rs = rstd_of(xr, n, eps);
        for (int i = 0; i < n; i++) dw[i] += dy[r * n + i] * xr[i] * rs * zr[i] * sigmoid(zr[i]);
    }
}
