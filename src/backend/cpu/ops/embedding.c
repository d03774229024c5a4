/* Token embedding lookup (times a scale) and its gradient scatter. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* Columns per task for the row-ordered scatter. */
enum { DW_COLUMN_BLOCK = 64 };

void mt_cpu_embedding(float *x, const int32_t *tokens, const float *wte, int n, int d, float scale) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *dst = x + (size_t)r * d;
        const float *src = wte + (size_t)tokens[r] * d;
        if (scale == 1.0f) memcpy(dst, src, (size_t)d * sizeof *x);
        else
            for (int j = 0; j < d; j++) dst[j] = scale * src[j];
    }
}

/* Repeated tokens add into the same row of dwte, so rows cannot be split across threads
 * without racing; each thread owns a block of columns and adds rows in order instead. */
void mt_cpu_embedding_dw(float *dwte, const int32_t *tokens, const float *dx, int n, int d, int v0, int rows,
                         float scale) {
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < d; j0 += DW_COLUMN_BLOCK) {
        int j1 = j0 + DW_COLUMN_BLOCK < d ? j0 + DW_COLUMN_BLOCK : d;
        for (int r = 0; r < n; r++) {
            if (tokens[r] < v0 || tokens[r] >= v0 + rows) continue;
            float *dst = dwte + (size_t)(tokens[r] - v0) * d;
            const float *src = dx + (size_t)r * d;
            for (int j = j0; j < j1; j++) dst[j] += scale * src[j];
        }
    }
}
