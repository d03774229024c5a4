/* Attention's output gate (Qwen3-Next, Qwen3.5): q_proj's rows hold each head's query and then its
 * gate; the gate scales the attention's output by its sigmoid. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

void mt_cpu_gate_split(float *q, float *gate, const float *qg, int n, int heads, int head_dim) {
    size_t hd = (size_t)head_dim;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++) {
            const float *src = qg + ((size_t)r * heads + h) * 2 * hd;
            memcpy(q + ((size_t)r * heads + h) * hd, src, hd * sizeof *q);
            memcpy(gate + ((size_t)r * heads + h) * hd, src + hd, hd * sizeof *gate);
        }
}

void mt_cpu_gate_join(float *dqg, const float *dq, const float *dgate, int n, int heads, int head_dim) {
    size_t hd = (size_t)head_dim;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++) {
            float *dst = dqg + ((size_t)r * heads + h) * 2 * hd;
            memcpy(dst, dq + ((size_t)r * heads + h) * hd, hd * sizeof *dst);
            memcpy(dst + hd, dgate + ((size_t)r * heads + h) * hd, hd * sizeof *dst);
        }
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void mt_cpu_out_gate(float *y, const float *x, const float *gate, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) y[i] = x[i] * sigmoid(gate[i]);
}

void mt_cpu_out_gate_dx(float *dx, float *dgate, const float *dy, const float *x, const float *gate, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) {
        float s = sigmoid(gate[i]), d = dy[i];
        dgate[i] = d * x[i] * s * (1.0f - s);
        dx[i] = d * s;
    }
}
