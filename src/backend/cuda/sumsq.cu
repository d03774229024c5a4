/* Sum of squares of an fp32 gradient, for the global norm: a block-reduced partial per block,
 * added atomically into *out. */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256, MAX_BLOCKS = 1024 };

__global__ void sumsq_blocks(float *out, const float *x, size_t count) {
    float sum = 0.0f;
    size_t stride = (size_t)gridDim.x * THREADS;
    size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x;
    if (((uintptr_t)x % 16) == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        for (size_t v = i; v < count / 4; v += stride) {
            float4 f = x4[v];
            sum += f.x * f.x + f.y * f.y + f.z * f.z + f.w * f.w;
        }
        if (blockIdx.x == 0) /* the tail, at most 3 elements */
            for (size_t t = count / 4 * 4 + threadIdx.x; t < count; t += THREADS) sum += x[t] * x[t];
    } else {
        for (; i < count; i += stride) sum += x[i] * x[i];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) atomicAdd(out, sum);
}

extern "C" mt_status mt_cuda_sumsq(cudaStream_t s, float *out, const float *x, size_t count) {
    if (count == 0) return MT_OK;
    size_t blocks = (count / 4 + THREADS - 1) / THREADS;
    blocks = blocks < 1 ? 1 : blocks > MAX_BLOCKS ? MAX_BLOCKS : blocks;
    sumsq_blocks<<<(unsigned)blocks, THREADS, 0, s>>>(out, x, count);
    return launch_status("sumsq");
}
