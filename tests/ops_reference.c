#include "ops_reference.h"

#include <math.h>

void ops_ref_matmul(double *y, const float *x, const float *w, const float *bias, int n, int in, int out) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < in; i++) s += (double)x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
}

void ops_ref_rmsnorm(double *y, double *rstd, const float *x, const float *w, int n, int d, float eps) {
    for (int r = 0; r < n; r++) {
        double ms = 0.0;
        for (int j = 0; j < d; j++) ms += (double)x[r * d + j] * x[r * d + j];
        rstd[r] = 1.0 / sqrt(ms / d + eps);
        for (int j = 0; j < d; j++) y[r * d + j] = x[r * d + j] * rstd[r] * w[j];
    }
}

void ops_ref_rope(double *y, const float *x, const float *inv_freq, int n, int seq, int heads, int head_dim) {
    int half = head_dim / 2;
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++) {
            const float *xh = x + (r * heads + h) * head_dim;
            double *yh = y + (r * heads + h) * head_dim;
            for (int i = 0; i < head_dim; i++) {
                /* rotate_half(x)[i] = -x[i + half] for i < half, x[i - half] otherwise */
                double rotated = i < half ? -xh[i + half] : xh[i - half];
                double angle = (double)(r % seq) * inv_freq[i % half];
                yh[i] = xh[i] * cos(angle) + rotated * sin(angle);
            }
        }
}

void ops_ref_attention(double *out, double *lse, const float *q, const float *k, const float *v,
                       mt_attn_dims dims) {
    int seq = dims.seq, heads = dims.heads, kvh = dims.kv_heads, hd = dims.head_dim;
    double scale = 1.0 / sqrt(hd);
    for (int b = 0; b < dims.batch; b++)
        for (int h = 0; h < heads; h++) {
            int g = h / (heads / kvh);
            for (int i = 0; i < seq; i++) {
                const float *qi = q + ((b * seq + i) * heads + h) * hd;
                double scores[i + 1], max = -INFINITY, sum = 0.0;
                for (int t = 0; t <= i; t++) {
                    const float *kt = k + ((b * seq + t) * kvh + g) * hd;
                    scores[t] = 0.0;
                    for (int j = 0; j < hd; j++) scores[t] += (double)qi[j] * kt[j];
                    scores[t] *= scale;
                    max = fmax(max, scores[t]);
                }
                for (int t = 0; t <= i; t++) sum += exp(scores[t] - max);
                double *oi = out + ((b * seq + i) * heads + h) * hd;
                for (int j = 0; j < hd; j++) {
                    oi[j] = 0.0;
                    for (int t = 0; t <= i; t++)
                        oi[j] += exp(scores[t] - max) / sum * v[((b * seq + t) * kvh + g) * hd + j];
                }
                lse[(b * heads + h) * seq + i] = max + log(sum);
            }
        }
}

void ops_ref_swiglu(double *a, const float *g, const float *u, size_t count) {
    for (size_t i = 0; i < count; i++) a[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
}

double ops_ref_lmhead_loss(const float *x, const float *w, const int32_t *targets, int n, int d, int vocab) {
    double total = 0.0, logits[vocab];
    for (int r = 0; r < n; r++) {
        if (targets[r] < 0) continue;
        ops_ref_matmul(logits, x + r * d, w, NULL, 1, d, vocab);
        double max = -INFINITY, sum = 0.0;
        for (int j = 0; j < vocab; j++) max = fmax(max, logits[j]);
        for (int j = 0; j < vocab; j++) sum += exp(logits[j] - max);
        total += max + log(sum) - logits[targets[r]];
    }
    return total;
}
