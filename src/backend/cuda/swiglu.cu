/* The dense gated linear unit: a = act(g) * u (glu_math.cuh), and its backward, in fp32 on bf16
 * data, 8 elements per thread when the buffers are 16-byte aligned. */
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/glu_math.cuh"

__global__ void swiglu_vec8(uint4 *a, const uint4 *g, const uint4 *u, size_t vectors, mt_glu_params p) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vectors;
         i += (size_t)gridDim.x * blockDim.x) {
        float fg[8], fu[8];
        bf16x8_to_float(g[i], fg);
        bf16x8_to_float(u[i], fu);
#pragma unroll
        for (int j = 0; j < 8; j++) fg[j] = glu_one(p, fg[j], fu[j]);
        a[i] = float_to_bf16x8(fg);
    }
}

__global__ void swiglu_scalar(bf16 *a, const bf16 *g, const bf16 *u, size_t begin, size_t count, mt_glu_params p) {
    for (size_t i = begin + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        a[i] = __float2bfloat16(glu_one(p, __bfloat162float(g[i]), __bfloat162float(u[i])));
}

__global__ void swiglu_dx_vec8(uint4 *dg, uint4 *du, const uint4 *da, const uint4 *g, const uint4 *u,
                               size_t vectors, mt_glu_params p) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vectors;
         i += (size_t)gridDim.x * blockDim.x) {
        float fda[8], fg[8], fu[8], fdg[8], fdu[8];
        bf16x8_to_float(da[i], fda);
        bf16x8_to_float(g[i], fg);
        bf16x8_to_float(u[i], fu);
#pragma unroll
        for (int j = 0; j < 8; j++) glu_grad_one(p, fda[j], fg[j], fu[j], &fdg[j], &fdu[j]);
        dg[i] = float_to_bf16x8(fdg);
        du[i] = float_to_bf16x8(fdu);
    }
}

__global__ void swiglu_dx_scalar(bf16 *dg, bf16 *du, const bf16 *da, const bf16 *g, const bf16 *u,
                                 size_t begin, size_t count, mt_glu_params p) {
    for (size_t i = begin + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float fdg, fdu;
        glu_grad_one(p, __bfloat162float(da[i]), __bfloat162float(g[i]), __bfloat162float(u[i]), &fdg, &fdu);
        dg[i] = __float2bfloat16(fdg);
        du[i] = __float2bfloat16(fdu);
    }
}

extern "C" mt_status mt_cuda_swiglu(cudaStream_t s, void *a, const void *g, const void *u, size_t count,
                                    mt_glu_params p) {
    size_t vectors = aligned16(a, g, u) ? count / 8 : 0;
    if (vectors)
        swiglu_vec8<<<grid_for(vectors, 256), 256, 0, s>>>((uint4 *)a, (const uint4 *)g, (const uint4 *)u, vectors, p);
    if (vectors * 8 < count)
        swiglu_scalar<<<grid_for(count - vectors * 8, 256), 256, 0, s>>>(
            (bf16 *)a, (const bf16 *)g, (const bf16 *)u, vectors * 8, count, p);
    return launch_status("swiglu");
}

extern "C" mt_status mt_cuda_swiglu_dx(cudaStream_t s, void *dg, void *du, const void *da,
                                       const void *g, const void *u, size_t count, mt_glu_params p) {
    size_t vectors = aligned16(dg, du, da) && aligned16(g, u) ? count / 8 : 0;
    if (vectors)
        swiglu_dx_vec8<<<grid_for(vectors, 256), 256, 0, s>>>(
            (uint4 *)dg, (uint4 *)du, (const uint4 *)da, (const uint4 *)g, (const uint4 *)u, vectors, p);
    if (vectors * 8 < count)
        swiglu_dx_scalar<<<grid_for(count - vectors * 8, 256), 256, 0, s>>>(
            (bf16 *)dg, (bf16 *)du, (const bf16 *)da, (const bf16 *)g, (const bf16 *)u, vectors * 8, count, p);
    return launch_status("swiglu_dx");
}
