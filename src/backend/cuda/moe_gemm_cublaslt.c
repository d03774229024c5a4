/* The grouped expert GEMMs through cuBLASLt: the offsets copied home (the stream waits for permute),
 * then one cuBLASLt GEMM per expert with rows (per expert and segment for dw, which adds segment by
 * segment as backend.h asks), each gemm.c's mapping of the dense op. The alternative to moe_gemm.cu's
 * kernels, picked by MT_MOE_GEMM=cublaslt: cuBLASLt's Hopper kernels against a host sync and a
 * launch per expert (bench/moe_gemm measures both). */
#include <stdlib.h>

#include "backend/cuda/cuda_backend.h"

/* offsets[E * S + 1] on the host, after everything issued to s so far. */
static mt_status offsets_home(cudaStream_t s, const int32_t *offsets, int E, int S, int32_t **out) {
    size_t count = (size_t)E * S + 1;
    int32_t *host = mt_malloc(count * sizeof *host, "the moe offsets on the host");
    if (!host) return MT_ERR_NOMEM;
    cudaError_t err = cudaMemcpyAsync(host, offsets, count * sizeof *host, cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    if (err != cudaSuccess) {
        free(host);
        return mt_fail(MT_ERR_DEVICE, "copying the moe offsets home: %s", cudaGetErrorString(err));
    }
    *out = host;
    return MT_OK;
}

static const char *bf16_rows(const void *base, int32_t row, int width) {
    return (const char *)base + (size_t)row * width * 2;
}

mt_status mt_cuda_moe_gemm_cublaslt(mt_cuda_backend *cb, cudaStream_t s, void *y, const void *x, const void *w,
                                    const int32_t *offsets, int rows, int E, int S, int in, int out) {
    int32_t *off;
    MT_TRY(offsets_home(s, offsets, E, S, &off));
    mt_status status = MT_OK;
    for (int e = 0; e < E && status == MT_OK; e++) {
        int32_t r0 = off[e * S], r1 = off[(e + 1) * S];
        /* y^T[out, rows] = (w[e] as [in, out])^T . x^T[in, rows] */
        mt_cuda_gemm_desc g = {.m = out, .n = r1 - r0, .k = in, .a = bf16_rows(w, e * out, in), .lda = in,
                               .trans_a = 1, .b = bf16_rows(x, r0, in), .ldb = in,
                               .d = (void *)bf16_rows(y, r0, out), .ldd = out};
        if (r1 > r0) status = mt_cuda_gemm(cb, s, &g);
    }
    free(off);
    return status;
}

mt_status mt_cuda_moe_gemm_dx_cublaslt(mt_cuda_backend *cb, cudaStream_t s, void *dx, const void *dy, const void *w,
                                       const int32_t *offsets, int rows, int E, int S, int in, int out) {
    int32_t *off;
    MT_TRY(offsets_home(s, offsets, E, S, &off));
    mt_status status = MT_OK;
    for (int e = 0; e < E && status == MT_OK; e++) {
        int32_t r0 = off[e * S], r1 = off[(e + 1) * S];
        /* dx^T[in, rows] = (w[e] as [in, out]) . dy^T[out, rows] */
        mt_cuda_gemm_desc g = {.m = in, .n = r1 - r0, .k = out, .a = bf16_rows(w, e * out, in), .lda = in,
                               .b = bf16_rows(dy, r0, out), .ldb = out, .d = (void *)bf16_rows(dx, r0, in),
                               .ldd = in};
        if (r1 > r0) status = mt_cuda_gemm(cb, s, &g);
    }
    free(off);
    return status;
}

mt_status mt_cuda_moe_gemm_dw_cublaslt(mt_cuda_backend *cb, cudaStream_t s, float *dw, const void *dy, const void *x,
                                       const int32_t *offsets, int rows, int E, int S, int in, int out) {
    int32_t *off;
    MT_TRY(offsets_home(s, offsets, E, S, &off));
    mt_status status = MT_OK;
    for (int g = 0; g < E * S && status == MT_OK; g++) {
        int e = g / S;
        int32_t r0 = off[g], r1 = off[g + 1];
        /* dw[e]^T[in, out] += x^T[in, rows] . (dy^T[out, rows])^T, in fp32 */
        mt_cuda_gemm_desc d = {.m = in, .n = out, .k = r1 - r0, .a = bf16_rows(x, r0, in), .lda = in,
                               .b = bf16_rows(dy, r0, out), .ldb = out, .trans_b = 1,
                               .d = dw + (size_t)e * out * in, .ldd = in, .d_is_f32 = 1, .beta = 1.0f};
        if (r1 > r0) status = mt_cuda_gemm(cb, s, &d);
    }
    free(off);
    return status;
}
