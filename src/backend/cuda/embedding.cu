/* Embedding lookup (a row copy per token, or its product with a scale rounded once) and its gradient
 * (atomic fp32 adds of scale * dx into dwte). */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256 };

__global__ void embedding_rows(bf16 *x, const int32_t *tokens, const bf16 *wte, int d, float scale) {
    const bf16 *src = wte + (size_t)tokens[blockIdx.x] * d;
    bf16 *dst = x + (size_t)blockIdx.x * d;
    if (scale != 1.0f) {
        for (int j = threadIdx.x; j < d; j += THREADS) dst[j] = __float2bfloat16(scale * __bfloat162float(src[j]));
    } else if (d % 8 == 0 && aligned16(src, dst)) {
        for (int j = threadIdx.x; j < d / 8; j += THREADS)
            reinterpret_cast<uint4 *>(dst)[j] = reinterpret_cast<const uint4 *>(src)[j];
    } else {
        for (int j = threadIdx.x; j < d; j += THREADS) dst[j] = src[j];
    }
}

/* Rows with the same token add into the same dwte row; the atomics make that safe (in an
 * unspecified order, so the low bits may differ between runs). */
__global__ void embedding_dw_rows(float *dwte, const int32_t *tokens, const bf16 *dx, int d, int v0, int rows,
                                  float scale) {
    int token = tokens[blockIdx.x];
    if (token < v0 || token >= v0 + rows) return;
    float *dst = dwte + (size_t)(token - v0) * d;
    const bf16 *src = dx + (size_t)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += THREADS) atomicAdd(dst + j, scale * __bfloat162float(src[j]));
}

extern "C" mt_status mt_cuda_embedding(cudaStream_t s, void *x, const int32_t *tokens,
                                       const void *wte, int n, int d, float scale) {
    if (n == 0) return MT_OK;
    embedding_rows<<<n, THREADS, 0, s>>>((bf16 *)x, tokens, (const bf16 *)wte, d, scale);
    return launch_status("embedding");
}

extern "C" mt_status mt_cuda_embedding_dw(cudaStream_t s, float *dwte, const int32_t *tokens,
                                          const void *dx, int n, int d, int v0, int rows, float scale) {
    if (n == 0) return MT_OK;
    embedding_dw_rows<<<n, THREADS, 0, s>>>(dwte, tokens, (const bf16 *)dx, d, v0, rows, scale);
    return launch_status("embedding_dw");
}
