/* dbias[out] += sum over rows of dy[n, out]: each thread owns a column of a band of rows and
 * adds its band's sum atomically. */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256, BAND_ROWS = 64 };

__global__ void bias_grad_bands(float *dbias, const bf16 *dy, int n, int out) {
    int j = blockIdx.x * THREADS + threadIdx.x;
    int r0 = blockIdx.y * BAND_ROWS, r1 = min(n, r0 + BAND_ROWS);
    if (j >= out) return;
    float sum = 0.0f;
    for (int r = r0; r < r1; r++) sum += __bfloat162float(dy[(size_t)r * out + j]);
    atomicAdd(dbias + j, sum);
}

extern "C" mt_status mt_cuda_bias_grad(cudaStream_t s, float *dbias, const void *dy, int n, int out) {
    if (n == 0) return MT_OK;
    dim3 bands((out + THREADS - 1) / THREADS, (n + BAND_ROWS - 1) / BAND_ROWS);
    bias_grad_bands<<<bands, THREADS, 0, s>>>(dbias, (const bf16 *)dy, n, out);
    return launch_status("bias_grad");
}
