/* y = a + b over bf16 elements, 8 at a time when the buffers are 16-byte aligned. */
#include "backend/cuda/bf16_vec.cuh"

__global__ void add_vec8(uint4 *y, const uint4 *a, const uint4 *b, size_t vectors) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vectors;
         i += (size_t)gridDim.x * blockDim.x) {
        float fa[8], fb[8];
        bf16x8_to_float(a[i], fa);
        bf16x8_to_float(b[i], fb);
#pragma unroll
        for (int j = 0; j < 8; j++) fa[j] += fb[j];
        y[i] = float_to_bf16x8(fa);
    }
}

__global__ void add_scalar(bf16 *y, const bf16 *a, const bf16 *b, size_t begin, size_t count) {
    for (size_t i = begin + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

extern "C" mt_status mt_cuda_add(cudaStream_t s, void *y, const void *a, const void *b, size_t count) {
    size_t vectors = aligned16(y, a, b) ? count / 8 : 0;
    if (vectors)
        add_vec8<<<grid_for(vectors, 256), 256, 0, s>>>((uint4 *)y, (const uint4 *)a, (const uint4 *)b, vectors);
    if (vectors * 8 < count)
        add_scalar<<<grid_for(count - vectors * 8, 256), 256, 0, s>>>((bf16 *)y, (const bf16 *)a,
                                                                     (const bf16 *)b, vectors * 8, count);
    return launch_status("add");
}
