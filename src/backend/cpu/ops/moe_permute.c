/* Mixture of experts: the tokens' slots sorted by expert, the rows gathered there, and the
 * experts' outputs combined back by the routing weights (backend.h's moe group). */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* A counting sort by (expert, segment): slots in token order, so each (expert, segment)'s rows
 * keep token order. */
void mt_cpu_moe_permute(int32_t *order, int32_t *slot_row, int32_t *offsets, const int32_t *experts, int n, int E,
                        int k, int seg) {
    int S = (n + seg - 1) / seg, groups = E * S;
    memset(offsets, 0, (size_t)(groups + 1) * sizeof *offsets);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) offsets[experts[(size_t)t * k + j] * S + t / seg + 1]++;
    for (int g = 0; g < groups; g++) offsets[g + 1] += offsets[g];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int32_t slot = t * k + j, group = experts[slot] * S + t / seg;
            int32_t row = offsets[group]++;
            order[row] = slot;
            slot_row[slot] = row;
        }
    /* Each group's cursor ended at the next group's start: shift back. */
    for (int g = groups; g > 0; g--) offsets[g] = offsets[g - 1];
    offsets[0] = 0;
}

void mt_cpu_moe_gather(float *xs, const float *x, const int32_t *order, int n, int k, int d) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n * k; r++) memcpy(xs + (size_t)r * d, x + (size_t)(order[r] / k) * d, (size_t)d * sizeof *xs);
}

void mt_cpu_moe_gather_dx(float *dx, const float *dxs, const int32_t *slot_row, int n, int k, int d, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *out = dx + (size_t)t * d;
        for (int i = 0; i < d; i++) {
            float s = accumulate ? out[i] : 0.0f;
            for (int j = 0; j < k; j++) s += dxs[(size_t)slot_row[t * k + j] * d + i];
            out[i] = s;
        }
    }
}

void mt_cpu_moe_combine(float *y, const float *ys, const float *weights, const int32_t *slot_row, int n, int k, int d) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *out = y + (size_t)t * d;
        for (int i = 0; i < d; i++) {
            float s = 0;
            for (int j = 0; j < k; j++) s += weights[t * k + j] * ys[(size_t)slot_row[t * k + j] * d + i];
            out[i] = s;
        }
    }
}

void mt_cpu_moe_combine_dx(float *dys, float *dweights, const float *dy, const float *ys, const float *weights,
                           const int32_t *slot_row, int n, int k, int d) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *g = dy + (size_t)t * d;
        for (int j = 0; j < k; j++) {
            size_t row = (size_t)slot_row[t * k + j] * d;
            float w = weights[t * k + j], dot = 0;
            for (int i = 0; i < d; i++) {
                dot += g[i] * ys[row + i];
                dys[row + i] = w * g[i];
            }
            dweights[t * k + j] = dot;
        }
    }
}
