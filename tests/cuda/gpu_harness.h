/* Helpers of the CUDA tests: a backend and a stream, host <-> device copies that round inputs to
 * bf16 first (so the CPU reference sees exactly the values the GPU sees), and error norms. */
#ifndef MT_TESTS_CUDA_GPU_HARNESS_H
#define MT_TESTS_CUDA_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "../ops_check.h" /* ops_rel_err */
#include "backend/backend.h"

typedef struct {
    mt_backend *be;
    mt_stream *s;
    mt_event *done;
    void *allocations[64]; /* freed by gpu_close */
    int allocation_count;
} gpu;

void gpu_open(gpu *g);
void gpu_close(gpu *g);
/* Waits for the stream and asserts that the backend saw no error. */
void gpu_sync(gpu *g);

void *gpu_alloc(gpu *g, size_t bytes);
/* Rounds host[count] to bf16 in place and returns a device copy in bf16. */
void *gpu_put_bf16(gpu *g, float *host, size_t count);
void gpu_get_bf16(gpu *g, float *host, const void *dev, size_t count);
void gpu_get_f32(gpu *g, float *host, const void *dev, size_t count);

/* Uniform in [-scale, scale), from a fixed per-test seed. */
void fill_random(float *x, size_t count, float scale, unsigned *seed);

#endif
