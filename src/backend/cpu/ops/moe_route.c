/* Mixture of experts: the router's softmax and top-k, and its backward (backend.h's moe group). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* p = softmax(l[E]) in fp32: exponentials of l - max, summed in index order. route and route_dx
 * both call it, so the backward's recomputed probabilities are the forward's bits. */
static void softmax_row(float *p, const float *l, int E) {
    float max = l[0], sum = 0;
    for (int e = 1; e < E; e++)
        if (l[e] > max) max = l[e];
    for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - max);
    for (int e = 0; e < E; e++) p[e] /= sum;
}

/* The k largest of p in decreasing order, of equal ones the lower index first. */
static void top_k(int32_t *chosen, const float *p, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = chosen[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        chosen[j] = best;
    }
}

void mt_cpu_moe_route(float *weights, int32_t *experts, int32_t *counts, float *prob_sum, const float *logits, int n,
                      int E, int k, int renorm) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float p[E];
        softmax_row(p, logits + (size_t)t * E, E);
        int32_t *chosen = experts + (size_t)t * k;
        float *w = weights + (size_t)t * k, sum = 0;
        top_k(chosen, p, E, k);
        for (int j = 0; j < k; j++) sum += w[j] = p[chosen[j]];
        if (renorm)
            for (int j = 0; j < k; j++) w[j] /= sum;
    }
    /* The statistics add tokens in token order. */
    for (int t = 0; t < n && (counts || prob_sum); t++) {
        if (counts)
            for (int j = 0; j < k; j++) counts[experts[(size_t)t * k + j]]++;
        if (prob_sum) {
            float p[E];
            softmax_row(p, logits + (size_t)t * E, E);
            for (int e = 0; e < E; e++) prob_sum[e] += p[e];
        }
    }
}

/* With S = the chosen probabilities' sum, w[j] = p[chosen j] / S when renormalised: dL/dp[chosen j] =
 * (dw[j] - sum_i dw[i] w[i]) / S; else dw[j]. The auxiliary loss adds aux_grad[e] to every dL/dp[e].
 * Then the softmax: dlogit[e] = p[e] (dL/dp[e] - sum_f p[f] dL/dp[f]). */
void mt_cpu_moe_route_dx(float *dlogits, const float *dweights, const float *logits, const int32_t *experts,
                         const float *aux_grad, int n, int E, int k, int renorm) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float p[E], dp[E];
        softmax_row(p, logits + (size_t)t * E, E);
        const int32_t *chosen = experts + (size_t)t * k;
        const float *dw = dweights + (size_t)t * k;
        for (int e = 0; e < E; e++) dp[e] = aux_grad ? aux_grad[e] : 0.0f;
        if (renorm) {
            float sum = 0, dot = 0;
            for (int j = 0; j < k; j++) sum += p[chosen[j]];
            for (int j = 0; j < k; j++) dot += dw[j] * (p[chosen[j]] / sum);
            for (int j = 0; j < k; j++) dp[chosen[j]] += (dw[j] - dot) / sum;
        } else {
            for (int j = 0; j < k; j++) dp[chosen[j]] += dw[j];
        }
        float dot = 0;
        for (int e = 0; e < E; e++) dot += p[e] * dp[e];
        float *dl = dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) dl[e] = p[e] * (dp[e] - dot);
    }
}

void mt_cpu_moe_aux_loss(float *loss_sum, float *grad, const int32_t *counts, const float *prob_sum, int layers, int n,
                         int E, float loss_scale, float grad_scale) {
    double T = (double)layers * n, loss = 0;
    for (int e = 0; e < E; e++) {
        double c = 0;
        for (int l = 0; l < layers; l++) c += counts[(size_t)l * E + e];
        loss += c / T * ((double)prob_sum[e] / T);
        grad[e] = (float)(grad_scale * (double)E * c / (T * T));
    }
    *loss_sum += (float)(loss_scale * (double)E * loss);
}
