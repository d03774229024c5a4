/* bench_moe_gemm's device helpers (bench_device.cu): inputs made on the GPU (a hash of the element
 * index: no gigabytes of host randoms to upload) and results compared there (no gigabytes to bring
 * home), so the benchmark's time goes to the GEMMs. */
#ifndef MT_BENCH_MOE_GEMM_DEVICE_H
#define MT_BENCH_MOE_GEMM_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* p[i] = bf16(scale * u) for count elements, u in [-1, 1) a hash of (seed, i). */
int bench_fill_bf16(void *p, size_t count, float scale, uint64_t seed);
/* *rel = ||a - b|| / ||b|| over count elements (bf16, or fp32 when f32), in double; 0 on success, else a
 * CUDA error code. */
int bench_rel_err(const void *a, const void *b, size_t count, int f32, double *rel);

#ifdef __cplusplus
}
#endif

#endif
