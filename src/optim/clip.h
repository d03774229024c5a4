/* Global-norm gradient clipping: the norm from per-unit sums of squares, and the coefficient
 * that scales the gradient. Inline for the host and for CUDA device code alike, so that the
 * engine's host side and a device that updates tensors of its own reach the same bits. */
#ifndef MT_OPTIM_CLIP_H
#define MT_OPTIM_CLIP_H

#include <math.h>

#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

/* sqrt of the sum of sums[count], added in double in index order. */
static inline MT_HOST_DEVICE double mt_global_norm(const float *sums, int count) {
    double total = 0;
    for (int i = 0; i < count; i++) total += sums[i];
    return sqrt(total);
}

/* The gradient's multiplier for a clip at max_norm (0: none): 1 at or below it,
 * max_norm / (norm + 1e-6) above it, NaN when the norm is not finite (the step is skipped). */
static inline MT_HOST_DEVICE float mt_clip_scale(double norm, float max_norm) {
    if (!isfinite(norm)) return NAN;
    return max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

#endif
