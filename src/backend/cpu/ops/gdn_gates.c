/* Gated DeltaNet's per-token gates: the L2 norm of q and k (transformers' l2norm, eps 1e-6 inside
 * the root) with q's d_k^-0.5 and the heads repeated for the value heads, and the decay and beta. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

#define L2_EPS 1e-6f

static float inv_norm(const float *x, int n) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    return 1.0f / sqrtf(ss + L2_EPS);
}

void mt_cpu_gdn_qk_norm(float *qn, float *kn, const float *q, const float *k, mt_gdn_dims d) {
    int rep = d.v_heads / d.k_heads, dk = d.d_k;
    float scale = 1.0f / sqrtf((float)dk);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < d.n; t++)
        for (int h = 0; h < d.k_heads; h++) {
            const float *qh = q + (size_t)t * d.qk_ld + (size_t)h * dk, *kh = k + (size_t)t * d.qk_ld + (size_t)h * dk;
            float iq = inv_norm(qh, dk) * scale, ik = inv_norm(kh, dk);
            for (int r = 0; r < rep; r++) {
                size_t o = ((size_t)t * d.v_heads + (size_t)h * rep + r) * dk;
                for (int i = 0; i < dk; i++) {
                    qn[o + i] = qh[i] * iq;
                    kn[o + i] = kh[i] * ik;
                }
            }
        }
}

/* y = c x inv with inv = (|x|^2 + eps)^-1/2: dx = c inv (dy - inv^2 x (x . dy)), dy summed over the
 * repeats first. */
static void norm_dx(float *dx, const float *dy, size_t dy_step, int rep, const float *x, int n, float c) {
    float inv = inv_norm(x, n), dot = 0.0f;
    for (int i = 0; i < n; i++) {
        float g = 0.0f;
        for (int r = 0; r < rep; r++) g += dy[(size_t)r * dy_step + i];
        dx[i] = g;
        dot += x[i] * g;
    }
    for (int i = 0; i < n; i++) dx[i] = c * inv * (dx[i] - inv * inv * x[i] * dot);
}

void mt_cpu_gdn_qk_norm_dx(float *dq, float *dk, const float *dqn, const float *dkn, const float *q, const float *k,
                           mt_gdn_dims d) {
    int rep = d.v_heads / d.k_heads, n = d.d_k;
    float scale = 1.0f / sqrtf((float)n);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < d.n; t++)
        for (int h = 0; h < d.k_heads; h++) {
            size_t x = (size_t)t * d.qk_ld + (size_t)h * n, y = ((size_t)t * d.v_heads + (size_t)h * rep) * n;
            norm_dx(dq + x, dqn + y, (size_t)n, rep, q + x, n, scale);
            norm_dx(dk + x, dkn + y, (size_t)n, rep, k + x, n, 1.0f);
        }
}

/* torch's softplus (beta 1, threshold 20) and its derivative. */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static float softplus_grad(float x) { return x > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-x)); }
static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void mt_cpu_gdn_decay(float *g, float *beta, const float *a, const float *b, const float *A_log, const float *dt_bias,
                      mt_gdn_dims d) {
    int H = d.v_heads;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < d.n; t++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)t * H + h;
            g[i] = -expf(A_log[h]) * softplus(a[i] + dt_bias[h]);
            beta[i] = sigmoid(b[i]);
        }
}

/* dg/dA_log = g; dg/da = dg/ddt_bias = -exp(A_log) softplus'(a + dt_bias). One thread a head: the
 * weight gradients add rows in order. */
void mt_cpu_gdn_decay_dx(float *da, float *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                         const float *a, const float *b, const float *A_log, const float *dt_bias, mt_gdn_dims d) {
    int H = d.v_heads;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float A = expf(A_log[h]);
        for (int t = 0; t < d.n; t++) {
            size_t i = (size_t)t * H + h;
            float x = a[i] + dt_bias[h], g = -A * softplus(x), sb = sigmoid(b[i]);
            float dx = dg[i] * -A * softplus_grad(x);
            da[i] = dx;
            db[i] = dbeta[i] * sb * (1.0f - sb);
            dA_log[h] += dg[i] * g;
            ddt_bias[h] += dx;
        }
    }
}
