/* Gated DeltaNet's causal depthwise convolution (kernel MT_GDN_CONV, no bias) with SiLU, restarting
 * at each segment's first row: tap j of row t reads row t - 3 + j, which belongs to t's segment
 * when t's position is at least 3 - j. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

enum { K = MT_GDN_CONV };

/* The pre-activation of row t, channel c. */
static float conv_at(const float *x, const float *w, int C, int t, int pos, int c) {
    float u = 0.0f;
    for (int j = K - 1 - (pos < K - 1 ? pos : K - 1); j < K; j++)
        u += w[(size_t)c * K + j] * x[(size_t)(t - (K - 1) + j) * C + c];
    return u;
}

static float sigmoid(float u) { return 1.0f / (1.0f + expf(-u)); }

void mt_cpu_gdn_conv(float *y, const float *x, const float *w, int C, mt_gdn_dims d) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < d.n; t++) {
        int pos = mt_gdn_pos(&d, t);
        for (int c = 0; c < C; c++) {
            float u = conv_at(x, w, C, t, pos, c);
            y[(size_t)t * C + c] = u * sigmoid(u);
        }
    }
}

/* du = dy * silu'(u); dx[s] = sum over the taps j of rows t = s + 3 - j in s's segment of w[c, j]
 * du[t]; dw[c, j] += du[t] x[t - 3 + j] row by row. One thread a channel. */
void mt_cpu_gdn_conv_dx(float *dx, float *dw, const float *dy, const float *x, const float *w, int C, mt_gdn_dims d) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        for (int s = 0; s < d.n; s++) dx[(size_t)s * C + c] = 0.0f;
        for (int t = 0; t < d.n; t++) {
            int pos = mt_gdn_pos(&d, t);
            float u = conv_at(x, w, C, t, pos, c), sig = sigmoid(u);
            float du = dy[(size_t)t * C + c] * sig * (1.0f + u * (1.0f - sig));
            for (int j = K - 1 - (pos < K - 1 ? pos : K - 1); j < K; j++) {
                size_t src = (size_t)(t - (K - 1) + j) * C + c;
                dx[src] += w[(size_t)c * K + j] * du;
                dw[(size_t)c * K + j] += du * x[src];
            }
        }
    }
}
