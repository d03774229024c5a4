/* Linear layers through BLAS: y = x . w^T (+ bias) and its two gradients. */
#include <cblas.h>

#include "backend/cpu/cpu_ops.h"

/* Columns per task when summing over rows: wide enough for a cache line of each row, narrow
 * enough to spread across threads. */
enum { BIAS_COLUMN_BLOCK = 64 };

void mt_cpu_matmul(float *y, const float *x, const float *w, const float *bias, int n, int in, int out) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *row = y + (size_t)r * out;
        for (int o = 0; o < out; o++) row[o] += bias[o];
    }
}

void mt_cpu_matmul_dx(float *dx, const float *dy, const float *w, int n, int in, int out, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                accumulate ? 1.0f : 0.0f, dx, in);
}

/* dw is one GEMM over all n rows: deterministic for a given n, not split-invariant (see
 * cpu_ops.h). dbias adds rows strictly in row order, so it is split-invariant. */
void mt_cpu_matmul_dw(float *dw, float *dbias, const float *dy, const float *x, int n, int in, int out) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
    if (!dbias) return;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < out; o0 += BIAS_COLUMN_BLOCK) {
        int o1 = o0 + BIAS_COLUMN_BLOCK < out ? o0 + BIAS_COLUMN_BLOCK : out;
        for (int r = 0; r < n; r++) {
            const float *row = dy + (size_t)r * out;
            for (int o = o0; o < o1; o++) dbias[o] += row[o];
        }
    }
}
