/* y = a + b over bf16 elements, 8 at a time when the buffers are 16-byte aligned; and a sum kept in
 * fp32 across calls (acc = or += a bf16 x) with its rounding back to bf16. */
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

__global__ void accumulate_f32_kernel(float *acc, const bf16 *x, size_t count, int accumulate) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float v = __bfloat162float(x[i]);
        acc[i] = accumulate ? acc[i] + v : v;
    }
}

__global__ void round_f32_kernel(bf16 *y, const float *x, size_t count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

extern "C" mt_status mt_cuda_accumulate_f32(cudaStream_t s, float *acc, const void *x, size_t count, int accumulate) {
    if (count == 0) return MT_OK;
    accumulate_f32_kernel<<<grid_for(count, 256), 256, 0, s>>>(acc, (const bf16 *)x, count, accumulate);
    return launch_status("accumulate_f32");
}

extern "C" mt_status mt_cuda_round_f32(cudaStream_t s, void *y, const float *x, size_t count) {
    if (count == 0) return MT_OK;
    round_f32_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)y, x, count);
    return launch_status("round_f32");
}
