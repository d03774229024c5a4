/* Shared device helpers of the CUDA kernels: 16-byte vectors of 8 bf16, launch-error checks,
 * and warp reductions. */
#ifndef MT_BACKEND_CUDA_BF16_VEC_CUH
#define MT_BACKEND_CUDA_BF16_VEC_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"

typedef __nv_bfloat16 bf16;

/* 8 bf16 loaded or stored as one uint4 (16 bytes), converted to and from fp32. */
__device__ __forceinline__ void bf16x8_to_float(uint4 raw, float out[8]) {
    const __nv_bfloat162 *pairs = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(pairs[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ uint4 float_to_bf16x8(const float in[8]) {
    uint4 raw;
    __nv_bfloat162 *pairs = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
    return raw;
}

/* Whether every pointer is 16-byte aligned, so that uint4 accesses are legal. */
__host__ __device__ __forceinline__ bool aligned16(const void *a, const void *b = nullptr, const void *c = nullptr) {
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it. */
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    __syncthreads(); /* partial may still be read by a previous call */
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f;
    return warp_sum(v);
}

/* The enqueue error of the kernels just launched, as an mt_status naming the kernel. */
static inline mt_status launch_status(const char *kernel) {
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return mt_fail(MT_ERR_DEVICE, "launch of %s failed: %s", kernel, cudaGetErrorString(err));
    return MT_OK;
}

static inline unsigned grid_for(size_t items, unsigned block) {
    size_t blocks = (items + block - 1) / block;
    /* grid-stride loops cover the rest */
    return (unsigned)(blocks < 65535u * 16u ? (blocks ? blocks : 1) : 65535u * 16u);
}

#endif
