/* The experts' biases (gpt-oss's gate_up and down biases, [E, out]) on the grouped GEMMs' sorted
 * rows: y[r] += bias[e] after the GEMM, in fp32 and rounded to bf16 once more (transformers adds
 * them in bf16 after the matmul alike), and dbias[e] += the rows of dy of expert e, each thread a
 * column summing the expert's rows in order: deterministic, and segment by segment as the rows lie
 * (backend.h). */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256 };

/* The expert whose rows hold sorted row r: the e with offsets[e*S] <= r < offsets[(e+1)*S]. */
__device__ __forceinline__ int expert_of(const int32_t *offsets, int E, int S, int r) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (offsets[mid * S] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__global__ void moe_bias_rows(bf16 *y, const bf16 *bias, const int32_t *offsets, int rows, int E, int S, int out) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const bf16 *b = bias + (size_t)expert_of(offsets, E, S, r) * out;
        bf16 *yr = y + (size_t)r * out;
        for (int j = threadIdx.x; j < out; j += THREADS)
            yr[j] = __float2bfloat16(__bfloat162float(yr[j]) + __bfloat162float(b[j]));
    }
}

__global__ void moe_bias_grad_columns(float *dbias, const bf16 *dy, const int32_t *offsets, int S, int out) {
    int e = blockIdx.y, j = blockIdx.x * THREADS + threadIdx.x;
    if (j >= out) return;
    float sum = dbias[(size_t)e * out + j];
    for (int r = offsets[e * S]; r < offsets[(e + 1) * S]; r++) sum += __bfloat162float(dy[(size_t)r * out + j]);
    dbias[(size_t)e * out + j] = sum;
}

extern "C" mt_status mt_cuda_moe_bias(cudaStream_t s, void *y, const void *bias, const int32_t *offsets, int rows,
                                      int E, int S, int out) {
    if (rows == 0 || out == 0) return MT_OK;
    moe_bias_rows<<<grid_for((size_t)rows, 1), THREADS, 0, s>>>((bf16 *)y, (const bf16 *)bias, offsets, rows, E, S,
                                                                 out);
    return launch_status("moe bias");
}

extern "C" mt_status mt_cuda_moe_bias_grad(cudaStream_t s, float *dbias, const void *dy, const int32_t *offsets,
                                           int E, int S, int out) {
    if (E == 0 || out == 0) return MT_OK;
    dim3 grid((out + THREADS - 1) / THREADS, E);
    moe_bias_grad_columns<<<grid, THREADS, 0, s>>>(dbias, (const bf16 *)dy, offsets, S, out);
    return launch_status("moe bias_grad");
}
