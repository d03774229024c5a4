/* RMSNorm and its backward: one block per row, fp32 math, 8-element vectors when the width and
 * the buffers allow (VEC = 8), single elements otherwise (VEC = 1). */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256, DW_ROWS = 64 };

template <int VEC>
__device__ __forceinline__ void load(const bf16 *p, float out[VEC]) {
    if constexpr (VEC == 8) bf16x8_to_float(*reinterpret_cast<const uint4 *>(p), out);
    else out[0] = __bfloat162float(*p);
}

template <int VEC>
__device__ __forceinline__ void store(bf16 *p, const float in[VEC]) {
    if constexpr (VEC == 8) *reinterpret_cast<uint4 *>(p) = float_to_bf16x8(in);
    else *p = __float2bfloat16(in[0]);
}

template <int VEC>
__global__ void rmsnorm_rows(bf16 *y, float *rstd, const bf16 *x, const bf16 *w, int d, float eps) {
    const bf16 *xr = x + (size_t)blockIdx.x * d;
    bf16 *yr = y + (size_t)blockIdx.x * d;
    float sumsq = 0.0f;
    for (int j = threadIdx.x * VEC; j < d; j += THREADS * VEC) {
        float v[VEC];
        load<VEC>(xr + j, v);
#pragma unroll
        for (int i = 0; i < VEC; i++) sumsq += v[i] * v[i];
    }
    float s = rsqrtf(block_sum(sumsq) / d + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = s;
    for (int j = threadIdx.x * VEC; j < d; j += THREADS * VEC) {
        float v[VEC], g[VEC];
        load<VEC>(xr + j, v);
        load<VEC>(w + j, g);
#pragma unroll
        for (int i = 0; i < VEC; i++) v[i] *= s * g[i];
        store<VEC>(yr + j, v);
    }
}

/* dx_k = s * (dy_k w_k - x_k s^2 c), c = sum_j dy_j w_j x_j / d */
template <int VEC>
__global__ void rmsnorm_dx_rows(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w,
                                const float *rstd, int d, int accumulate) {
    size_t at = (size_t)blockIdx.x * d;
    float s = rstd[blockIdx.x], dot = 0.0f;
    for (int j = threadIdx.x * VEC; j < d; j += THREADS * VEC) {
        float g[VEC], v[VEC], gw[VEC];
        load<VEC>(dy + at + j, g);
        load<VEC>(x + at + j, v);
        load<VEC>(w + j, gw);
#pragma unroll
        for (int i = 0; i < VEC; i++) dot += g[i] * gw[i] * v[i];
    }
    float c = block_sum(dot) / d * s * s;
    for (int j = threadIdx.x * VEC; j < d; j += THREADS * VEC) {
        float g[VEC], v[VEC], gw[VEC], prev[VEC];
        load<VEC>(dy + at + j, g);
        load<VEC>(x + at + j, v);
        load<VEC>(w + j, gw);
        if (accumulate) load<VEC>(dx + at + j, prev);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            float grad = s * (g[i] * gw[i] - v[i] * c);
            v[i] = accumulate ? prev[i] + grad : grad;
        }
        store<VEC>(dx + at + j, v);
    }
}

/* dw_j += sum over rows of dy * x * rstd: each thread owns a column of a DW_ROWS-row band and
 * adds its band's sum atomically. */
__global__ void rmsnorm_dw_bands(float *dw, const bf16 *dy, const bf16 *x, const float *rstd, int n, int d) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int r0 = blockIdx.y * DW_ROWS, r1 = min(n, r0 + DW_ROWS);
    if (j >= d) return;
    float sum = 0.0f;
    for (int r = r0; r < r1; r++) {
        size_t at = (size_t)r * d + j;
        sum += __bfloat162float(dy[at]) * __bfloat162float(x[at]) * rstd[r];
    }
    atomicAdd(dw + j, sum);
}

extern "C" mt_status mt_cuda_rmsnorm(cudaStream_t s, void *y, float *rstd, const void *x,
                                     const void *w, int n, int d, float eps) {
    if (n == 0) return MT_OK;
    if (d % 8 == 0 && aligned16(y, x, w))
        rmsnorm_rows<8><<<n, THREADS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, d, eps);
    else
        rmsnorm_rows<1><<<n, THREADS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, d, eps);
    return launch_status("rmsnorm");
}

extern "C" mt_status mt_cuda_rmsnorm_dx(cudaStream_t s, void *dx, float *dw, const void *dy,
                                        const void *x, const void *w, const float *rstd, int n,
                                        int d, int accumulate) {
    if (n == 0) return MT_OK;
    if (d % 8 == 0 && aligned16(dx, dy, x) && aligned16(w))
        rmsnorm_dx_rows<8><<<n, THREADS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x,
                                                 (const bf16 *)w, rstd, d, accumulate);
    else
        rmsnorm_dx_rows<1><<<n, THREADS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x,
                                                 (const bf16 *)w, rstd, d, accumulate);
    dim3 bands((d + THREADS - 1) / THREADS, (n + DW_ROWS - 1) / DW_ROWS);
    rmsnorm_dw_bands<<<bands, THREADS, 0, s>>>(dw, (const bf16 *)dy, (const bf16 *)x, rstd, n, d);
    return launch_status("rmsnorm_dx");
}
