/* Sum of squares of a gradient buffer, for the global gradient norm. */
#include "backend/cpu/cpu_ops.h"

/* The buffer is cut into a fixed number of parts whatever the thread count, each summed in
 * order in double, and the parts are added in order: the result never depends on threads. */
enum { SUMSQ_PARTS = 64 };

void mt_cpu_sumsq(float *out, const float *x, size_t count) {
    double part[SUMSQ_PARTS];
    size_t per_part = (count + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < SUMSQ_PARTS; p++) {
        size_t begin = (size_t)p * per_part;
        size_t end = begin + per_part < count ? begin + per_part : count;
        double s = 0.0;
        for (size_t i = begin; i < end; i++) s += (double)x[i] * x[i];
        part[p] = s;
    }
    double total = *out;
    for (int p = 0; p < SUMSQ_PARTS; p++) total += part[p];
    *out = (float)total;
}
