/* The LM head fused with cross-entropy, chunk rows of logits at a time, and the sampling
 * logits of one row; either soft-capped (Gemma 2's final_logit_softcapping) where asked. */
#include <cblas.h>
#include <math.h>

#include "backend/cpu/cpu_ops.h"

/* workspace: logits [chunk, vocab] (turned in place into their gradients), then the chunk's
 * per-row losses [chunk]. */
size_t mt_cpu_lmhead_workspace(int chunk, int vocab) {
    return ((size_t)chunk * vocab + (size_t)chunk) * sizeof(float);
}

/* Soft-caps logits in place: softcap * tanh(z / softcap); softcap 0 leaves them as they are. */
static void soft_cap(float *z, int count, float softcap) {
    if (softcap > 0.0f)
        for (int j = 0; j < count; j++) z[j] = softcap * tanhf(z[j] / softcap);
}

/* The gradient g with respect to a soft-capped logit z taken back through the cap to the raw
 * logit: times d(softcap tanh(r / softcap))/dr = 1 - (z / softcap)^2. */
static float through_cap(float g, float z, float softcap) {
    if (softcap <= 0.0f) return g;
    float t = z / softcap;
    return g * (1.0f - t * t);
}

/* Turns one row of raw logits into scale * dloss/draw, through the soft-cap, the gradient of the
 * capped logits z being scale * (softmax(z) - onehot(target)), and returns the row's loss -log
 * softmax(z)[target], computed stably from the row's maximum; its log-sum-exp into *lse. An
 * ignored row (target < 0) gets a zero gradient and no loss. */
static float softmax_xent_row(float *z, int vocab, int32_t target, float scale, float softcap, float *lse) {
    if (target < 0) {
        for (int j = 0; j < vocab; j++) z[j] = 0.0f;
        *lse = 0.0f;
        return 0.0f;
    }
    soft_cap(z, vocab, softcap);
    float max = z[0];
    for (int j = 1; j < vocab; j++) max = z[j] > max ? z[j] : max;
    float target_logit = z[target];
    double sum = 0.0;
    for (int j = 0; j < vocab; j++) sum += expf(z[j] - max);
    *lse = (float)(max + log(sum));
    float loss = *lse - target_logit;
    float norm = scale / (float)sum;
    for (int j = 0; j < vocab; j++) {
        float g = expf(z[j] - max) * norm;
        if (j == target) g -= scale;
        z[j] = through_cap(g, z[j], softcap);
    }
    return loss;
}

void mt_cpu_lmhead_loss(float *loss_sum, float *lse, float *dx, float *dw, const float *x, const float *w,
                        const int32_t *targets, int n, int d, int vocab, float scale, float softcap,
                        int chunk, void *workspace) {
    float *logits = workspace;
    float *row_loss = logits + (size_t)chunk * vocab;
    double total = 0.0;
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int rows = n - r0 < chunk ? n - r0 : chunk;
        const float *xc = x + (size_t)r0 * d;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, vocab, d, 1.0f, xc, d, w, d,
                    0.0f, logits, vocab);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < rows; i++) {
            float row_lse;
            row_loss[i] = softmax_xent_row(logits + (size_t)i * vocab, vocab, targets[r0 + i], scale, softcap,
                                           &row_lse);
            if (lse) lse[r0 + i] = row_lse;
        }
        /* logits now hold scale * dloss/dlogits; NULL dx and dw ask for the loss only. */
        if (dx)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, vocab, 1.0f, logits, vocab,
                        w, d, 0.0f, dx + (size_t)r0 * d, d);
        if (dw)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, vocab, d, rows, 1.0f, logits, vocab,
                        xc, d, 1.0f, dw, d);
        for (int i = 0; i < rows; i++) total += row_loss[i];
    }
    *loss_sum = (float)(*loss_sum + total);
}

void mt_cpu_lmhead_dw(float *dw, const float *x, const float *w, const int32_t *targets, const float *lse, int n,
                      int d, int v0, int rows, float scale, float softcap, int chunk, void *workspace) {
    float *logits = workspace;
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int nr = n - r0 < chunk ? n - r0 : chunk;
        const float *xc = x + (size_t)r0 * d;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, rows, d, 1.0f, xc, d, w, d, 0.0f, logits, rows);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < nr; i++) { /* scale * (softmax - onehot) on this slice of the row, through the cap */
            float *z = logits + (size_t)i * rows;
            int32_t target = targets[r0 + i];
            float row_lse = target < 0 ? 0.0f : lse[r0 + i];
            soft_cap(z, rows, softcap);
            for (int j = 0; j < rows; j++) {
                float g = target < 0 ? 0.0f : scale * expf(z[j] - row_lse);
                if (v0 + j == target) g -= scale;
                z[j] = through_cap(g, z[j], softcap);
            }
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, d, nr, 1.0f, logits, rows, xc, d, 1.0f, dw, d);
    }
}

void mt_cpu_logits(float *logits, const float *x, const float *w, int d, int vocab, float softcap) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, vocab, d, 1.0f, w, d, x, 1, 0.0f, logits, 1);
    soft_cap(logits, vocab, softcap);
}
