/* GEMMs through cuBLASLt: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F).
 *
 * cuBLASLt is column-major; a row-major matrix M[r,c] is the column-major M^T with ld = c. So
 * the row-major y[n,out] = x[n,in] . w[out,in]^T is the column-major y^T = w^T' . x^T with
 * "w^T'" the transpose of w's column-major view, and so on for each op below. */
#include "backend/cuda/cuda_backend.h"

static mt_status layout(cublasLtMatrixLayoutOpaque_t *l, cudaDataType_t type, int rows, int cols, int ld) {
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, type, (uint64_t)rows, (uint64_t)cols, ld));
    return MT_OK;
}

mt_status mt_cuda_gemm_describe(const mt_cuda_gemm_desc *g, mt_cuda_gemm_plan *p) {
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    MT_CUBLAS_CHECK(cublasLtMatmulDescInit(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (g->bias) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                       sizeof epilogue));
        MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                       sizeof g->bias));
    }
    /* Stored shapes: op(A) is m x k, op(B) is k x n. */
    MT_TRY(layout(&p->a, CUDA_R_16BF, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda));
    MT_TRY(layout(&p->b, CUDA_R_16BF, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb));
    MT_TRY(layout(&p->d, g->d_is_f32 ? CUDA_R_32F : CUDA_R_16BF, g->m, g->n, g->ldd));
    return MT_OK;
}

mt_status mt_cuda_gemm_heuristic(mt_cuda_backend *cb, const mt_cuda_gemm_desc *g, mt_cuda_gemm_plan *p,
                                 size_t workspace_bytes, const uint32_t *align, cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreferenceOpaque_t pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof workspace_bytes));
    if (align) {
        const cublasLtMatmulPreferenceAttributes_t which[3] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 3; i++)
            MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, which[i], &align[i], sizeof align[i]));
        MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                             &align[2], sizeof align[2]));
    }
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    MT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(cb->lt, &p->op, &p->a, &p->b, &p->d, &p->d, &pref, 1, &heuristic,
                                                   &found));
    if (found == 0)
        return mt_fail(MT_ERR_DEVICE, "cuBLASLt has no algorithm for a %dx%dx%d GEMM", g->m, g->n, g->k);
    *algo = heuristic.algo;
    return MT_OK;
}

cublasStatus_t mt_cuda_gemm_run(mt_cuda_backend *cb, cudaStream_t s, const mt_cuda_gemm_desc *g,
                                mt_cuda_gemm_plan *p, const cublasLtMatmulAlgo_t *algo, void *workspace,
                                size_t workspace_bytes) {
    const float alpha = 1.0f;
    return cublasLtMatmul(cb->lt, &p->op, &alpha, g->a, &p->a, g->b, &p->b, &g->beta, g->d, &p->d, g->d, &p->d, algo,
                          workspace, workspace_bytes, s);
}

mt_status mt_cuda_gemm(mt_cuda_backend *cb, cudaStream_t s, const mt_cuda_gemm_desc *g) {
    if (g->m == 0 || g->n == 0) return MT_OK;
    mt_cuda_gemm_plan p;
    cublasLtMatmulAlgo_t algo;
    MT_TRY(mt_cuda_gemm_describe(g, &p));
    MT_TRY(mt_cuda_gemm_heuristic(cb, g, &p, cb->lt_workspace_bytes, NULL, &algo));
    MT_CUBLAS_CHECK(mt_cuda_gemm_run(cb, s, g, &p, &algo, cb->lt_workspace, cb->lt_workspace_bytes));
    return MT_OK;
}

void mt_cuda_op_matmul(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w,
                       const void *bias, int n, int in, int out) {
    /* y^T[out,n] = (w as [in,out])^T . x^T[in,n] */
    mt_cuda_gemm_desc g = {.m = out, .n = n, .k = in, .a = w, .lda = in, .trans_a = 1,
                           .b = x, .ldb = in, .d = y, .ldd = out, .bias = bias};
    mt_cuda_note((mt_cuda_backend *)be, mt_cuda_gemm((mt_cuda_backend *)be, mt_cuda_stream(s), &g));
}

void mt_cuda_op_matmul_dx(mt_backend *be, mt_stream *s, void *dx, const void *dy, const void *w,
                          int n, int in, int out, int accumulate) {
    /* dx^T[in,n] = (w as [in,out]) . dy^T[out,n] */
    mt_cuda_gemm_desc g = {.m = in, .n = n, .k = out, .a = w, .lda = in, .b = dy, .ldb = out,
                           .d = dx, .ldd = in, .beta = accumulate ? 1.0f : 0.0f};
    mt_cuda_note((mt_cuda_backend *)be, mt_cuda_gemm((mt_cuda_backend *)be, mt_cuda_stream(s), &g));
}

void mt_cuda_op_matmul_dw(mt_backend *be, mt_stream *s, float *dw, float *dbias, const void *dy,
                          const void *x, int n, int in, int out) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    /* dw^T[in,out] += x^T[in,n] . (dy^T[out,n])^T, accumulated in fp32 */
    mt_cuda_gemm_desc g = {.m = in, .n = out, .k = n, .a = x, .lda = in, .b = dy, .ldb = out,
                           .trans_b = 1, .d = dw, .ldd = in, .d_is_f32 = 1, .beta = 1.0f};
    mt_status status = mt_cuda_gemm(cb, mt_cuda_stream(s), &g);
    if (status == MT_OK && dbias) status = mt_cuda_bias_grad(mt_cuda_stream(s), dbias, dy, n, out);
    mt_cuda_note(cb, status);
}

void mt_cuda_op_logits(mt_backend *be, mt_stream *s, float *logits, const void *x, const void *w,
                       int d, int vocab, float softcap) {
    /* logits^T[vocab,1] = (w as [d,vocab])^T . x[d,1] */
    mt_cuda_gemm_desc g = {.m = vocab, .n = 1, .k = d, .a = w, .lda = d, .trans_a = 1, .b = x,
                           .ldb = d, .d = logits, .ldd = vocab, .d_is_f32 = 1};
    mt_status status = mt_cuda_gemm((mt_cuda_backend *)be, mt_cuda_stream(s), &g);
    if (status == MT_OK) status = mt_cuda_soft_cap(mt_cuda_stream(s), logits, vocab, softcap);
    mt_cuda_note((mt_cuda_backend *)be, status);
}
