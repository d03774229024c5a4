/* bench_moe_gemm's device helpers: bench_device.h says what and why. */
#include <cuda_bf16.h>
#include <math.h>

#include "bench_device.h"

namespace {

__device__ uint64_t mix(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill(__nv_bfloat16 *p, size_t count, float scale, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        double u = (double)(mix(seed * 0x9e3779b97f4a7c15ull + i) >> 11) / 9007199254740992.0;
        p[i] = __float2bfloat16((float)(scale * (2 * u - 1)));
    }
}

template <bool F32>
__device__ double at(const void *p, size_t i) {
    if (F32) return ((const float *)p)[i];
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* sums[0] += the squared differences, sums[1] += the squares of b */
template <bool F32>
__global__ void diff(const void *a, const void *b, size_t count, double *sums) {
    __shared__ double part[2][256];
    double d2 = 0, n2 = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        double x = at<F32>(a, i), y = at<F32>(b, i);
        d2 += (x - y) * (x - y), n2 += y * y;
    }
    part[0][threadIdx.x] = d2, part[1][threadIdx.x] = n2;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) part[0][threadIdx.x] += part[0][threadIdx.x + o], part[1][threadIdx.x] += part[1][threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&sums[0], part[0][0]), atomicAdd(&sums[1], part[1][0]);
}

} // namespace

extern "C" int bench_fill_bf16(void *p, size_t count, float scale, uint64_t seed) {
    fill<<<1024, 256>>>((__nv_bfloat16 *)p, count, scale, seed);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    return (int)err;
}

extern "C" int bench_rel_err(const void *a, const void *b, size_t count, int f32, double *rel) {
    double *sums, host[2];
    cudaError_t err = cudaMalloc(&sums, sizeof host);
    if (err != cudaSuccess) return (int)err;
    err = cudaMemset(sums, 0, sizeof host);
    if (err == cudaSuccess) {
        if (f32) diff<true><<<1024, 256>>>(a, b, count, sums);
        else diff<false><<<1024, 256>>>(a, b, count, sums);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaMemcpy(host, sums, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(sums);
    if (err == cudaSuccess) *rel = host[1] > 0 ? sqrt(host[0] / host[1]) : sqrt(host[0]);
    return (int)err;
}
