/* The LM head fused with cross-entropy, chunk rows at a time: a GEMM writes the chunk's fp32
 * logits, one block per row soft-caps them where asked and turns them into the row's loss and bf16
 * scale * dloss/dlogits (through the cap), and two GEMMs take those to dx and dw. No more than
 * chunk rows of logits ever exist. */
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda_workspace.h"

enum { THREADS = 512 };

/* workspace: fp32 logits [chunk, vocab], then (256-byte aligned) bf16 dlogits [chunk, vocab] */
extern "C" size_t mt_cuda_lmhead_workspace(int chunk, int vocab) { return mt_cuda_lmhead_workspace_bytes(chunk, vocab); }

/* Gemma 2's final soft-cap: softcap * tanh(r / softcap) (softcap 0: r as it is). */
__device__ __forceinline__ float soft_cap(float r, float softcap) {
    return softcap > 0.0f ? softcap * tanhf(r / softcap) : r;
}

/* A gradient g with respect to a capped logit z taken back through the cap to the raw one: times
 * 1 - (z / softcap)^2. */
__device__ __forceinline__ float through_cap(float g, float z, float softcap) {
    if (softcap <= 0.0f) return g;
    float t = z / softcap;
    return g * (1.0f - t * t);
}

/* z the soft-capped logits (capped in place, each thread its own columns: the later loops take the
 * same ones): dlogits = scale * (softmax(z) - onehot(target)) through the cap; loss -log
 * softmax(z)[target] = lse - z[t]. */
__global__ void softmax_xent_rows(float *loss_sum, float *lse, bf16 *dlogits, float *logits,
                                  const int32_t *targets, int vocab, float scale, float softcap) {
    float *z = logits + (size_t)blockIdx.x * vocab;
    bf16 *dz = dlogits + (size_t)blockIdx.x * vocab;
    int target = targets[blockIdx.x];
    if (target < 0) {
        for (int j = threadIdx.x; j < vocab; j += THREADS) dz[j] = __float2bfloat16(0.0f);
        return;
    }
    __shared__ float partial[THREADS / 32];
    if (softcap > 0.0f)
        for (int j = threadIdx.x; j < vocab; j += THREADS) z[j] = soft_cap(z[j], softcap);
    float max = -INFINITY;
    for (int j = threadIdx.x; j < vocab; j += THREADS) max = fmaxf(max, z[j]);
    max = warp_max(max);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = max;
    __syncthreads();
    max = threadIdx.x % 32 < THREADS / 32 ? partial[threadIdx.x % 32] : -INFINITY; /* in every warp */
    max = warp_max(max);

    float sum = 0.0f;
    for (int j = threadIdx.x; j < vocab; j += THREADS) sum += __expf(z[j] - max);
    sum = block_sum(sum);
    float norm = scale / sum;
    for (int j = threadIdx.x; j < vocab; j += THREADS) {
        float g = __expf(z[j] - max) * norm;
        dz[j] = __float2bfloat16(through_cap(j == target ? g - scale : g, z[j], softcap));
    }
    if (threadIdx.x == 0) atomicAdd(loss_sum, max + logf(sum) - z[target]);
    if (threadIdx.x == 0 && lse) lse[blockIdx.x] = max + logf(sum);
}

extern "C" mt_status mt_cuda_lmhead_loss(mt_cuda_backend *cb, cudaStream_t s, float *loss_sum,
                                         float *lse, void *dx, float *dw, const void *x, const void *w,
                                         const int32_t *targets, int n, int d, int vocab,
                                         float scale, float softcap, int chunk, void *workspace) {
    if (chunk <= 0) return mt_fail(MT_ERR_INVALID, "lmhead_loss: chunk %d must be positive", chunk);
    float *logits = (float *)workspace;
    bf16 *dlogits = (bf16 *)((char *)workspace + mt_cuda_lmhead_dlogits_offset(chunk, vocab));
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int rows = n - r0 < chunk ? n - r0 : chunk;
        const bf16 *xc = (const bf16 *)x + (size_t)r0 * d;
        /* column-major logits^T[vocab, rows] = (w as [d, vocab])^T . xc^T[d, rows] */
        mt_cuda_gemm_desc to_logits = {.m = vocab, .n = rows, .k = d, .a = w, .lda = d, .trans_a = 1,
                                       .b = xc, .ldb = d, .d = logits, .ldd = vocab, .d_is_f32 = 1};
        MT_TRY(mt_cuda_gemm(cb, s, &to_logits));
        softmax_xent_rows<<<rows, THREADS, 0, s>>>(loss_sum, lse ? lse + r0 : NULL, dlogits, logits, targets + r0,
                                                   vocab, scale, softcap);
        MT_TRY(launch_status("lmhead softmax"));
        /* dx^T[d, rows] = (w as [d, vocab]) . dlogits^T[vocab, rows] */
        mt_cuda_gemm_desc to_dx = {.m = d, .n = rows, .k = vocab, .a = w, .lda = d, .b = dlogits,
                                   .ldb = vocab, .d = dx ? (bf16 *)dx + (size_t)r0 * d : NULL, .ldd = d};
        if (dx) MT_TRY(mt_cuda_gemm(cb, s, &to_dx)); /* NULL dx and dw: the loss only (evaluation) */
        /* dw^T[d, vocab] += xc^T[d, rows] . (dlogits^T[vocab, rows])^T */
        mt_cuda_gemm_desc to_dw = {.m = d, .n = vocab, .k = rows, .a = xc, .lda = d, .b = dlogits,
                                   .ldb = vocab, .trans_b = 1, .d = dw, .ldd = d, .d_is_f32 = 1,
                                   .beta = 1.0f};
        if (dw) MT_TRY(mt_cuda_gemm(cb, s, &to_dw));
    }
    return MT_OK;
}

/* dlogits = scale * (exp(z - lse) - onehot(target)) through the cap, z the soft-capped logits, on
 * vocabulary rows [v0, v0 + rows) of each row's logits; an ignored row's are zero. */
__global__ void dlogits_from_lse(bf16 *dlogits, const float *logits, const int32_t *targets, const float *lse,
                                 int v0, int rows, float scale, float softcap) {
    const float *z = logits + (size_t)blockIdx.x * rows;
    bf16 *dz = dlogits + (size_t)blockIdx.x * rows;
    int target = targets[blockIdx.x];
    float row_lse = target < 0 ? 0.0f : lse[blockIdx.x];
    for (int j = threadIdx.x; j < rows; j += THREADS) {
        float zj = soft_cap(z[j], softcap);
        float g = target < 0 ? 0.0f : scale * __expf(zj - row_lse);
        dz[j] = __float2bfloat16(through_cap(v0 + j == target ? g - scale : g, zj, softcap));
    }
}

extern "C" mt_status mt_cuda_lmhead_dw(mt_cuda_backend *cb, cudaStream_t s, float *dw, const void *x,
                                       const void *w, const int32_t *targets, const float *lse, int n, int d,
                                       int v0, int rows, float scale, float softcap, int chunk, void *workspace) {
    if (chunk <= 0) return mt_fail(MT_ERR_INVALID, "lmhead_dw: chunk %d must be positive", chunk);
    float *logits = (float *)workspace;
    /* the workspace was sized for [chunk, vocab] with vocab >= rows: the bf16 part fits after rows' */
    bf16 *dlogits = (bf16 *)((char *)workspace + mt_cuda_lmhead_dlogits_offset(chunk, rows));
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int nr = n - r0 < chunk ? n - r0 : chunk;
        const bf16 *xc = (const bf16 *)x + (size_t)r0 * d;
        mt_cuda_gemm_desc to_logits = {.m = rows, .n = nr, .k = d, .a = w, .lda = d, .trans_a = 1,
                                       .b = xc, .ldb = d, .d = logits, .ldd = rows, .d_is_f32 = 1};
        MT_TRY(mt_cuda_gemm(cb, s, &to_logits));
        dlogits_from_lse<<<nr, THREADS, 0, s>>>(dlogits, logits, targets + r0, lse + r0, v0, rows, scale, softcap);
        MT_TRY(launch_status("lmhead dlogits"));
        mt_cuda_gemm_desc to_dw = {.m = d, .n = rows, .k = nr, .a = xc, .lda = d, .b = dlogits,
                                   .ldb = rows, .trans_b = 1, .d = dw, .ldd = d, .d_is_f32 = 1,
                                   .beta = 1.0f};
        MT_TRY(mt_cuda_gemm(cb, s, &to_dw));
    }
    return MT_OK;
}

__global__ void soft_cap_kernel(float *x, int count, float softcap) {
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < count; i += gridDim.x * THREADS)
        x[i] = soft_cap(x[i], softcap);
}

extern "C" mt_status mt_cuda_soft_cap(cudaStream_t s, float *x, int count, float softcap) {
    if (count == 0 || softcap <= 0.0f) return MT_OK;
    soft_cap_kernel<<<grid_for((size_t)count, THREADS), THREADS, 0, s>>>(x, count, softcap);
    return launch_status("soft_cap");
}
