/* cuDNN fused attention: the SDPA graphs in the form cuDNN's flash-attention engines recognise
 * (the decomposition cudnn-frontend emits), their plans cached per dims, and their execution.
 *
 * Layout: the [n, heads, head_dim] rows are BSHD, seen by cuDNN as [b, h, s, d] with strides
 * [s*h*d, d, h*d, 1]; k and v enter the matmuls transposed ([b, h, d, s], the same memory).
 * Forward:  S = scale * Q K^T, causal mask (row >= col kept), softmax with
 *           Stats = max + log(sum exp) (natural log: backend.h's lse), O = P V.
 * Backward: the frontend's graph: P = exp(S - Stats), dV = P^T dO, dP = dO V^T,
 *           dS = P * (dP - rowsum(dO * O)), dQ = scale * dS K, dK = scale * dS^T Q; for GQA
 *           dK and dV are summed over the group by a reduction. dQ accumulates in fp32 in a
 *           zeroed part of the workspace (cuDNN's F16x16 layout) before its final cast. */
#include "backend/cuda/attention_cudnn.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_graph.h"
#include "util/log.h"

enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_MASKED, UID_ONE, UID_DQ_ACCUM,
    FIRST_VIRTUAL_UID = 100,
};

enum { MAX_CACHED_DIMS = 16, WORKSPACE_ALIGN = 256 };

/* Either plan may ask for workspace: cuDNN's flash forward engine does (a forward held to none gets
 * a general fused engine at half the speed). Both use the one buffer, never at once. */
static const int64_t MAX_WORKSPACE = (int64_t)1 << 34;

typedef struct {
    mt_attn_dims dims;
    int usable; /* both plans built */
    mt_cudnn_graph forward, backward;
    size_t accum_offset, workspace_bytes; /* dQ's fp32 accumulator sits at accum_offset */
} plans;

struct mt_cudnn_attention {
    pthread_mutex_t lock; /* guards everything below and the handle's stream */
    cudnnHandle_t handle;
    int disabled; /* cudnnCreate failed: every dims falls back */
    plans cache[MAX_CACHED_DIMS];
    int cached;
    /* by-value scalars bound at execution */
    float one, masked;
};

mt_status mt_cudnn_attention_create(mt_cudnn_attention **out) {
    mt_cudnn_attention *ca = mt_calloc(1, sizeof *ca, "the cuDNN attention context");
    if (!ca) return MT_ERR_NOMEM;
    pthread_mutex_init(&ca->lock, NULL);
    ca->one = 1.0f;
    ca->masked = -FLT_MAX; /* what the frontend uses: exp() of it is 0, never NaN */
    *out = ca;
    return MT_OK;
}

void mt_cudnn_attention_destroy(mt_cudnn_attention *ca) {
    if (!ca) return;
    for (int i = 0; i < ca->cached; i++) {
        mt_cudnn_graph_destroy(&ca->cache[i].forward);
        mt_cudnn_graph_destroy(&ca->cache[i].backward);
    }
    if (ca->handle) cudnnDestroy(ca->handle);
    pthread_mutex_destroy(&ca->lock);
    free(ca);
}

/* ---- shapes ---- */

/* [b, h, s, d] over the [n, h, d] rows; transposed: [b, h, d, s]. */
static void bshd(mt_attn_dims d, int heads, int transposed, int64_t dim[4], int64_t stride[4]) {
    int64_t b = d.batch, s = d.seq, hd = d.head_dim, row = (int64_t)heads * hd;
    dim[0] = b, dim[1] = heads, stride[0] = s * row, stride[1] = hd;
    dim[2] = transposed ? hd : s, stride[2] = transposed ? 1 : row;
    dim[3] = transposed ? s : hd, stride[3] = transposed ? row : 1;
}

static mt_status io_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, mt_attn_dims d,
                           int heads, int transposed) {
    int64_t dim[4], stride[4];
    bshd(d, heads, transposed, dim, stride);
    return mt_cudnn_tensor_make(g, t, uid, CUDNN_DATA_BFLOAT16, dim, stride, MT_CUDNN_IN_MEMORY, 0);
}

static mt_status stats_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, mt_attn_dims d) {
    const int64_t dim[4] = {d.batch, d.heads, d.seq, 1};
    const int64_t stride[4] = {(int64_t)d.heads * d.seq, d.seq, 1, 1};
    return mt_cudnn_tensor_make(g, t, UID_STATS, CUDNN_DATA_FLOAT, dim, stride, MT_CUDNN_IN_MEMORY, 0);
}

static mt_status scalar(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return mt_cudnn_tensor_make(g, t, uid, CUDNN_DATA_FLOAT, one, one, MT_CUDNN_BY_VALUE, 0);
}

/* y (fp32, x's shape) = mode(x, b) */
static mt_status binary(mt_cudnn_graph *g, cudnnPointwiseMode_t mode, const mt_cudnn_tensor *x,
                        const mt_cudnn_tensor *b, mt_cudnn_tensor *y) {
    MT_TRY(mt_cudnn_virtual(g, y, CUDNN_DATA_FLOAT, x->dim));
    return mt_cudnn_pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y);
}

static mt_status unary(mt_cudnn_graph *g, cudnnPointwiseMode_t mode, const mt_cudnn_tensor *x,
                       mt_cudnn_tensor *y) {
    return binary(g, mode, x, NULL, y);
}

/* y [.., rows, 1] (fp32) = x reduced over its last dim */
static mt_status row_reduce(mt_cudnn_graph *g, cudnnReduceTensorOp_t op, const mt_cudnn_tensor *x,
                            mt_cudnn_tensor *y) {
    const int64_t dim[4] = {x->dim[0], x->dim[1], x->dim[2], 1};
    MT_TRY(mt_cudnn_virtual(g, y, CUDNN_DATA_FLOAT, dim));
    return mt_cudnn_reduction(g, op, x, y);
}

/* The scaled scores with the causal mask: entries above the diagonal become `masked`. */
static mt_status masked_scores(mt_cudnn_graph *g, const mt_cudnn_tensor *q, const mt_cudnn_tensor *kt,
                               const mt_cudnn_tensor *scale, mt_attn_dims d, mt_cudnn_tensor *out) {
    const int64_t dim[4] = {d.batch, d.heads, d.seq, d.seq};
    mt_cudnn_tensor s, scaled, row, col, keep, masked;
    MT_TRY(mt_cudnn_virtual(g, &s, CUDNN_DATA_FLOAT, dim));
    MT_TRY(mt_cudnn_matmul(g, q, kt, &s));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &s, scale, &scaled));
    MT_TRY(mt_cudnn_virtual(g, &row, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &scaled, 2, &row));
    MT_TRY(mt_cudnn_virtual(g, &col, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &scaled, 3, &col));
    MT_TRY(mt_cudnn_virtual(g, &keep, CUDNN_DATA_BOOLEAN, dim));
    MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, &row, &col, NULL, &keep));
    MT_TRY(scalar(g, &masked, UID_MASKED));
    MT_TRY(mt_cudnn_virtual(g, out, CUDNN_DATA_FLOAT, dim));
    return mt_cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, &scaled, &masked,
                              &keep, out);
}

/* ---- the graphs ---- */

static mt_status build_forward(mt_cudnn_graph *g, mt_attn_dims d) {
    mt_cudnn_tensor q, kt, v, o, stats, scale, s, max, shifted, e, sum, log_sum, p;
    MT_TRY(io_tensor(g, &q, UID_Q, d, d.heads, 0));
    MT_TRY(io_tensor(g, &kt, UID_K, d, d.kv_heads, 1));
    MT_TRY(io_tensor(g, &v, UID_V, d, d.kv_heads, 0));
    MT_TRY(io_tensor(g, &o, UID_O, d, d.heads, 0));
    MT_TRY(stats_tensor(g, &stats, d));
    MT_TRY(scalar(g, &scale, UID_SCALE));

    MT_TRY(masked_scores(g, &q, &kt, &scale, d, &s));
    MT_TRY(row_reduce(g, CUDNN_REDUCE_TENSOR_MAX, &s, &max));
    MT_TRY(binary(g, CUDNN_POINTWISE_SUB, &s, &max, &shifted));
    MT_TRY(unary(g, CUDNN_POINTWISE_EXP, &shifted, &e));
    MT_TRY(row_reduce(g, CUDNN_REDUCE_TENSOR_ADD, &e, &sum));
    MT_TRY(unary(g, CUDNN_POINTWISE_LOG, &sum, &log_sum));
    MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, &max, &log_sum, NULL, &stats));
    MT_TRY(mt_cudnn_virtual(g, &p, CUDNN_DATA_BFLOAT16, e.dim)); /* P V runs on bf16 P */
    MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, &e, &sum, NULL, &p));
    return mt_cudnn_matmul(g, &p, &v, &o);
}

/* dst = a^T b for a [b, h, s, s] fp32 score-shaped tensor: written to `out` directly for MHA,
 * summed over each kv head's group for GQA. */
static mt_status transposed_product(mt_cudnn_graph *g, const mt_cudnn_tensor *a,
                                    const mt_cudnn_tensor *b, const mt_cudnn_tensor *out,
                                    mt_attn_dims d) {
    int64_t s = d.seq, h = d.heads;
    const int64_t dim[4] = {d.batch, h, s, s}, stride[4] = {h * s * s, s * s, 1, s};
    mt_cudnn_tensor at, full;
    MT_TRY(mt_cudnn_reshape(g, a, &at, CUDNN_DATA_BFLOAT16, dim, stride));
    if (d.heads == d.kv_heads) return mt_cudnn_matmul(g, &at, b, out);
    const int64_t full_dim[4] = {d.batch, h, s, d.head_dim};
    MT_TRY(mt_cudnn_virtual(g, &full, CUDNN_DATA_BFLOAT16, full_dim));
    MT_TRY(mt_cudnn_matmul(g, &at, b, &full));
    return mt_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, &full, out);
}

static mt_status build_backward(mt_cudnn_graph *g, mt_attn_dims d) {
    mt_cudnn_tensor q, kt, vt, o, dout, stats, scale, one, dq, dk, dv, accum;
    MT_TRY(io_tensor(g, &q, UID_Q, d, d.heads, 0));
    MT_TRY(io_tensor(g, &kt, UID_K, d, d.kv_heads, 1));
    MT_TRY(io_tensor(g, &vt, UID_V, d, d.kv_heads, 1));
    MT_TRY(io_tensor(g, &o, UID_O, d, d.heads, 0));
    MT_TRY(io_tensor(g, &dout, UID_DO, d, d.heads, 0));
    MT_TRY(io_tensor(g, &dq, UID_DQ, d, d.heads, 0));
    MT_TRY(io_tensor(g, &dk, UID_DK, d, d.kv_heads, 0));
    MT_TRY(io_tensor(g, &dv, UID_DV, d, d.kv_heads, 0));
    MT_TRY(stats_tensor(g, &stats, d));
    MT_TRY(scalar(g, &scale, UID_SCALE));
    MT_TRY(scalar(g, &one, UID_ONE));
    const int64_t accum_dim[4] = {d.batch, d.heads, d.seq, d.head_dim};
    const int64_t accum_stride[4] = {(int64_t)d.heads * d.seq * d.head_dim,
                                     (int64_t)d.seq * d.head_dim, d.head_dim, 1};
    MT_TRY(mt_cudnn_tensor_make(g, &accum, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, accum_dim, accum_stride,
                                MT_CUDNN_IN_MEMORY, 1));

    /* delta = rowsum(dO * O) */
    mt_cudnn_tensor prod, rowsum, delta;
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &dout, &o, &prod));
    MT_TRY(row_reduce(g, CUDNN_REDUCE_TENSOR_ADD, &prod, &rowsum));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &rowsum, &one, &delta));

    /* P = exp(S - Stats); dV = P^T dO */
    mt_cudnn_tensor s, shifted, p;
    MT_TRY(masked_scores(g, &q, &kt, &scale, d, &s));
    MT_TRY(binary(g, CUDNN_POINTWISE_SUB, &s, &stats, &shifted));
    MT_TRY(unary(g, CUDNN_POINTWISE_EXP, &shifted, &p));
    MT_TRY(transposed_product(g, &p, &dout, &dv, d));

    /* dS = scale * P * (dO V^T - delta); dK = dS^T Q */
    const int64_t score_dim[4] = {d.batch, d.heads, d.seq, d.seq};
    mt_cudnn_tensor dp, dp_kept, centred, ds_unscaled, ds;
    MT_TRY(mt_cudnn_virtual(g, &dp, CUDNN_DATA_FLOAT, score_dim));
    MT_TRY(mt_cudnn_matmul(g, &dout, &vt, &dp));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &dp, &one, &dp_kept));
    MT_TRY(binary(g, CUDNN_POINTWISE_SUB, &dp_kept, &delta, &centred));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &centred, &p, &ds_unscaled));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &ds_unscaled, &scale, &ds));
    MT_TRY(transposed_product(g, &ds, &q, &dk, d));

    /* dQ = dS K, through the fp32 accumulator */
    int64_t k_dim[4], k_stride[4];
    mt_cudnn_tensor k;
    bshd(d, d.kv_heads, 0, k_dim, k_stride);
    MT_TRY(mt_cudnn_reshape(g, &kt, &k, CUDNN_DATA_FLOAT, k_dim, k_stride));
    MT_TRY(mt_cudnn_matmul(g, &ds, &k, &accum));
    return mt_cudnn_pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, &accum, NULL, NULL, &dq);
}

/* ---- the cache ---- */

static int same_dims(mt_attn_dims a, mt_attn_dims b) {
    return a.batch == b.batch && a.seq == b.seq && a.heads == b.heads && a.kv_heads == b.kv_heads &&
           a.head_dim == b.head_dim;
}

static size_t align_up(size_t bytes) { return (bytes + WORKSPACE_ALIGN - 1) / WORKSPACE_ALIGN * WORKSPACE_ALIGN; }

static mt_status build_plans(mt_cudnn_attention *ca, plans *p) {
    mt_cudnn_graph_init(&p->forward, ca->handle, FIRST_VIRTUAL_UID);
    mt_cudnn_graph_init(&p->backward, ca->handle, FIRST_VIRTUAL_UID);
    MT_TRY(build_forward(&p->forward, p->dims));
    MT_TRY(mt_cudnn_graph_plan(&p->forward, MAX_WORKSPACE));
    MT_TRY(build_backward(&p->backward, p->dims));
    MT_TRY(mt_cudnn_graph_plan(&p->backward, MAX_WORKSPACE));
    mt_attn_dims d = p->dims;
    p->accum_offset = align_up((size_t)p->backward.workspace_bytes);
    p->workspace_bytes = p->accum_offset + (size_t)d.batch * d.heads * d.seq * d.head_dim * sizeof(float);
    if ((size_t)p->forward.workspace_bytes > p->workspace_bytes) p->workspace_bytes = (size_t)p->forward.workspace_bytes;
    return MT_OK;
}

static mt_status make_handle(mt_cudnn_attention *ca) {
    MT_CUDNN_CHECK(cudnnCreate(&ca->handle));
    return MT_OK;
}

/* The cached entry for dims, building it on first sight; NULL when cuDNN cannot run them.
 * Called with the lock held. */
static plans *plans_for(mt_cudnn_attention *ca, mt_attn_dims dims) {
    for (int i = 0; i < ca->cached; i++)
        if (same_dims(ca->cache[i].dims, dims)) return ca->cache[i].usable ? &ca->cache[i] : NULL;
    if (ca->disabled || ca->cached == MAX_CACHED_DIMS || dims.batch == 0 || dims.seq == 0) return NULL;
    if (!ca->handle && make_handle(ca) != MT_OK) {
        mt_log_warn("cuDNN attention disabled, the CUDA-core kernels run instead: %s", mt_error());
        ca->disabled = 1;
        return NULL;
    }
    plans *p = &ca->cache[ca->cached++];
    memset(p, 0, sizeof *p);
    p->dims = dims;
    if (build_plans(ca, p) != MT_OK) {
        mt_log_info("attention (batch %d, seq %d, heads %d/%d, head_dim %d): cuDNN refused (%s); "
                    "the CUDA-core kernels run it",
                    dims.batch, dims.seq, dims.heads, dims.kv_heads, dims.head_dim, mt_error());
        mt_cudnn_graph_destroy(&p->forward);
        mt_cudnn_graph_destroy(&p->backward);
        return NULL;
    }
    p->usable = 1;
    return p;
}

int mt_cudnn_attention_supports(mt_cudnn_attention *ca, mt_attn_dims dims, size_t *workspace_bytes) {
    pthread_mutex_lock(&ca->lock);
    plans *p = plans_for(ca, dims);
    if (p && workspace_bytes) *workspace_bytes = p->workspace_bytes;
    pthread_mutex_unlock(&ca->lock);
    return p != NULL;
}

/* ---- execution ---- */

static mt_status forward_locked(mt_cudnn_attention *ca, cudaStream_t s, void *out, float *lse,
                                const void *q, const void *k, const void *v, mt_attn_dims dims, void *workspace) {
    plans *p = plans_for(ca, dims);
    if (!p) return mt_fail(MT_ERR_INVALID, "cuDNN attention: no plan for these dims");
    float scale = 1.0f / sqrtf((float)dims.head_dim);
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_MASKED};
    void *const pointers[] = {(void *)q, (void *)k, (void *)v, out, lse, &scale, &ca->masked};
    MT_CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    return mt_cudnn_graph_execute(&p->forward, 7, uids, pointers, workspace);
}

mt_status mt_cudnn_attention_forward(mt_cudnn_attention *ca, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims,
                                     void *workspace) {
    pthread_mutex_lock(&ca->lock);
    mt_status status = forward_locked(ca, s, out, lse, q, k, v, dims, workspace);
    pthread_mutex_unlock(&ca->lock);
    return status;
}

static mt_status backward_locked(mt_cudnn_attention *ca, cudaStream_t s, void *dq, void *dk, void *dv,
                                 const void *dout, const void *out, const float *lse, const void *q,
                                 const void *k, const void *v, mt_attn_dims dims, void *workspace) {
    plans *p = plans_for(ca, dims);
    if (!p) return mt_fail(MT_ERR_INVALID, "cuDNN attention: no plan for these dims");
    float scale = 1.0f / sqrtf((float)dims.head_dim);
    char *accum = (char *)workspace + p->accum_offset;
    MT_CUDA_CHECK(cudaMemsetAsync(accum, 0, p->workspace_bytes - p->accum_offset, s));
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DQ, UID_DK, UID_DV,
                            UID_DQ_ACCUM, UID_SCALE, UID_MASKED, UID_ONE};
    void *const pointers[] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)dout,
                              (void *)lse, dq, dk, dv, accum, &scale, &ca->masked, &ca->one};
    MT_CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    return mt_cudnn_graph_execute(&p->backward, 13, uids, pointers, workspace);
}

mt_status mt_cudnn_attention_backward(mt_cudnn_attention *ca, cudaStream_t s, void *dq, void *dk,
                                      void *dv, const void *dout, const void *out, const float *lse,
                                      const void *q, const void *k, const void *v,
                                      mt_attn_dims dims, void *workspace) {
    pthread_mutex_lock(&ca->lock);
    mt_status status = backward_locked(ca, s, dq, dk, dv, dout, out, lse, q, k, v, dims, workspace);
    pthread_mutex_unlock(&ca->lock);
    return status;
}
