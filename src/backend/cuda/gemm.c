/* GEMMs through cuBLASLt: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F).
 *
 * cuBLASLt is column-major; a row-major matrix M[r,c] is the column-major M^T with ld = c. So
 * the row-major y[n,out] = x[n,in] . w[out,in]^T is the column-major y^T = w^T' . x^T with
 * "w^T'" the transpose of w's column-major view, and so on for each op below. */
#include "backend/cuda/cuda_backend.h"

static mt_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, int rows, int cols, int ld) {
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, type, (uint64_t)rows, (uint64_t)cols, ld));
    return MT_OK;
}

/* Everything created for one call, destroyed together whatever happens. */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
} gemm_plan;

static void plan_destroy(gemm_plan *p) {
    if (p->pref) cublasLtMatmulPreferenceDestroy(p->pref);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
}

static mt_status plan_and_run(mt_cuda_backend *cb, cudaStream_t s, const mt_cuda_gemm_desc *g,
                              gemm_plan *p) {
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t d_type = g->d_is_f32 ? CUDA_R_32F : CUDA_R_16BF;

    MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (g->bias) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &epilogue, sizeof epilogue));
        MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &g->bias, sizeof g->bias));
    }
    /* Stored shapes: op(A) is m x k, op(B) is k x n. */
    MT_TRY(layout(&p->a, CUDA_R_16BF, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda));
    MT_TRY(layout(&p->b, CUDA_R_16BF, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb));
    MT_TRY(layout(&p->d, d_type, g->m, g->n, g->ldd));

    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p->pref));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cb->lt_workspace_bytes,
        sizeof cb->lt_workspace_bytes));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    MT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(cb->lt, p->op, p->a, p->b, p->d, p->d, p->pref,
                                                   1, &heuristic, &found));
    if (found == 0)
        return mt_fail(MT_ERR_DEVICE, "cuBLASLt has no algorithm for a %dx%dx%d GEMM", g->m, g->n, g->k);

    const float alpha = 1.0f;
    MT_CUBLAS_CHECK(cublasLtMatmul(cb->lt, p->op, &alpha, g->a, p->a, g->b, p->b, &g->beta, g->d,
                                   p->d, g->d, p->d, &heuristic.algo, cb->lt_workspace,
                                   cb->lt_workspace_bytes, s));
    return MT_OK;
}

mt_status mt_cuda_gemm(mt_cuda_backend *cb, cudaStream_t s, const mt_cuda_gemm_desc *g) {
    if (g->m == 0 || g->n == 0) return MT_OK;
    gemm_plan p = {0};
    mt_status status = plan_and_run(cb, s, g, &p);
    plan_destroy(&p);
    return status;
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
                       int d, int vocab) {
    /* logits^T[vocab,1] = (w as [d,vocab])^T . x[d,1] */
    mt_cuda_gemm_desc g = {.m = vocab, .n = 1, .k = d, .a = w, .lda = d, .trans_a = 1, .b = x,
                           .ldb = d, .d = logits, .ldd = vocab, .d_is_f32 = 1};
    mt_cuda_note((mt_cuda_backend *)be, mt_cuda_gemm((mt_cuda_backend *)be, mt_cuda_stream(s), &g));
}
