/* cuDNN fused attention: the SDPA graphs in the form cuDNN's flash-attention engines recognise
 * (the decomposition cudnn-frontend emits), their plans cached per dims, and their execution.
 *
 * Layout: the [n, heads, head_dim] rows are BSHD, seen by cuDNN as [b, h, s, d] with strides
 * [s*h*d, d, h*d, 1]; k and v enter the matmuls transposed ([b, h, d, s], the same memory).
 * A window of queries (backend.h) has s_q = q_len query rows a sequence and s_kv = q0 + q_len keys
 * (each sequence's keys still seq rows apart), and its mask is the causal one aligned to the
 * bottom right, as cudnn-frontend's causal_mask_bottom_right emits it for cuDNN below 9.21: row +
 * s_kv - s_q >= col, the row index shifted by two int32 scalars. Each window is a plan of its own.
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
    UID_SCALE, UID_MASKED, UID_ONE, UID_DQ_ACCUM, UID_SEQ_Q, UID_SEQ_KV,
    FIRST_VIRTUAL_UID = 100,
};

/* The windows of a long sequence take a plan pair each (a 1M-token sequence: 16 in the default
 * tiles, 128 in the budget's smallest, engine/budget.h), and the planner sizes a few shapes before
 * the run: past this many the least recently used pair goes. */
enum { MAX_CACHED_DIMS = 160, WORKSPACE_ALIGN = 256 };

/* Either plan may ask for workspace: cuDNN's flash forward engine does (a forward held to none gets
 * a general fused engine at half the speed). Both use the one buffer, never at once. */
static const int64_t MAX_WORKSPACE = (int64_t)1 << 34;

typedef struct {
    mt_attn_dims dims;
    int usable; /* both plans built */
    mt_cudnn_graph forward, backward;
    size_t accum_offset, workspace_bytes; /* dQ's fp32 accumulator sits at accum_offset */
    uint64_t used;  /* when last looked up (the cache's clock), for eviction */
} plans;

struct mt_cudnn_attention {
    pthread_mutex_t lock; /* guards everything below and the handle's stream */
    cudnnHandle_t handle;
    int disabled; /* cudnnCreate failed: every dims falls back */
    plans cache[MAX_CACHED_DIMS];
    int cached;
    uint64_t clock;
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

/* The query side's rows (q, out, dq, dout: s_q a sequence) or the key side's (k, v, dk, dv: s_kv of
 * a sequence's seq rows). */
typedef enum { SIDE_Q, SIDE_KV } side;

static int64_t side_rows(mt_attn_dims d, side sd) { return sd == SIDE_Q ? mt_attn_q_rows(d) : mt_attn_kv_rows(d); }

/* [b, h, s, d] over the [n, h, d] rows; transposed: [b, h, d, s]. */
static void bshd(mt_attn_dims d, side sd, int transposed, int64_t dim[4], int64_t stride[4]) {
    int heads = sd == SIDE_Q ? d.heads : d.kv_heads;
    int64_t b = d.batch, s = side_rows(d, sd), apart = sd == SIDE_Q ? s : d.seq, hd = d.head_dim;
    int64_t row = (int64_t)heads * hd;
    dim[0] = b, dim[1] = heads, stride[0] = apart * row, stride[1] = hd;
    dim[2] = transposed ? hd : s, stride[2] = transposed ? 1 : row;
    dim[3] = transposed ? s : hd, stride[3] = transposed ? row : 1;
}

static mt_status io_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, mt_attn_dims d, side sd,
                           int transposed) {
    int64_t dim[4], stride[4];
    bshd(d, sd, transposed, dim, stride);
    return mt_cudnn_tensor_make(g, t, uid, CUDNN_DATA_BFLOAT16, dim, stride, MT_CUDNN_IN_MEMORY, 0);
}

static mt_status stats_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, mt_attn_dims d) {
    int64_t s = mt_attn_q_rows(d);
    const int64_t dim[4] = {d.batch, d.heads, s, 1};
    const int64_t stride[4] = {(int64_t)d.heads * s, s, 1, 1};
    return mt_cudnn_tensor_make(g, t, UID_STATS, CUDNN_DATA_FLOAT, dim, stride, MT_CUDNN_IN_MEMORY, 0);
}

static mt_status typed_scalar(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, cudnnDataType_t type) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return mt_cudnn_tensor_make(g, t, uid, type, one, one, MT_CUDNN_BY_VALUE, 0);
}

static mt_status scalar(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid) {
    return typed_scalar(g, t, uid, CUDNN_DATA_FLOAT);
}

/* A window's queries are fewer than its keys: its mask is aligned to the bottom right. */
static int bottom_right(mt_attn_dims d) { return mt_attn_q_rows(d) != mt_attn_kv_rows(d); }

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

/* The [b, h, s_q, s_kv] scores. */
static void score_dims(mt_attn_dims d, int64_t dim[4]) {
    dim[0] = d.batch, dim[1] = d.heads, dim[2] = mt_attn_q_rows(d), dim[3] = mt_attn_kv_rows(d);
}

/* row (int32) shifted by s_kv - s_q, as the frontend's diagonal band mask does it (axis 3 on both):
 * + s_kv, then - s_q. */
static mt_status shift_to_bottom_right(mt_cudnn_graph *g, const mt_cudnn_tensor *row, const int64_t dim[4],
                                       mt_cudnn_tensor *out) {
    mt_cudnn_tensor seq_q, seq_kv, plus_kv;
    MT_TRY(typed_scalar(g, &seq_kv, UID_SEQ_KV, CUDNN_DATA_INT32));
    MT_TRY(typed_scalar(g, &seq_q, UID_SEQ_Q, CUDNN_DATA_INT32));
    MT_TRY(mt_cudnn_virtual(g, &plus_kv, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_pointwise_on_axis(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 3, row, &seq_kv, &plus_kv));
    MT_TRY(mt_cudnn_virtual(g, out, CUDNN_DATA_INT32, dim));
    return mt_cudnn_pointwise_on_axis(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, 3, &plus_kv, &seq_q, out);
}

/* The scaled scores with the causal mask: entries above the diagonal (a window's: the diagonal
 * through the bottom right corner) become `masked`. */
static mt_status masked_scores(mt_cudnn_graph *g, const mt_cudnn_tensor *q, const mt_cudnn_tensor *kt,
                               const mt_cudnn_tensor *scale, mt_attn_dims d, mt_cudnn_tensor *out) {
    int64_t dim[4];
    score_dims(d, dim);
    mt_cudnn_tensor s, scaled, row, col, keep, masked, shifted;
    MT_TRY(mt_cudnn_virtual(g, &s, CUDNN_DATA_FLOAT, dim));
    MT_TRY(mt_cudnn_matmul(g, q, kt, &s));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &s, scale, &scaled));
    MT_TRY(mt_cudnn_virtual(g, &row, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &scaled, 2, &row));
    MT_TRY(mt_cudnn_virtual(g, &col, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &scaled, 3, &col));
    const mt_cudnn_tensor *kept_row = &row;
    if (bottom_right(d)) {
        MT_TRY(shift_to_bottom_right(g, &row, dim, &shifted));
        kept_row = &shifted;
    }
    MT_TRY(mt_cudnn_virtual(g, &keep, CUDNN_DATA_BOOLEAN, dim));
    MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, kept_row, &col, NULL, &keep));
    MT_TRY(scalar(g, &masked, UID_MASKED));
    MT_TRY(mt_cudnn_virtual(g, out, CUDNN_DATA_FLOAT, dim));
    return mt_cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, &scaled, &masked,
                              &keep, out);
}

/* ---- the graphs ---- */

static mt_status build_forward(mt_cudnn_graph *g, mt_attn_dims d) {
    mt_cudnn_tensor q, kt, v, o, stats, scale, s, max, shifted, e, sum, log_sum, p;
    MT_TRY(io_tensor(g, &q, UID_Q, d, SIDE_Q, 0));
    MT_TRY(io_tensor(g, &kt, UID_K, d, SIDE_KV, 1));
    MT_TRY(io_tensor(g, &v, UID_V, d, SIDE_KV, 0));
    MT_TRY(io_tensor(g, &o, UID_O, d, SIDE_Q, 0));
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

/* dst = a^T b for a [b, h, s_q, s_kv] fp32 score-shaped tensor: written to `out` directly for MHA,
 * summed over each kv head's group for GQA. */
static mt_status transposed_product(mt_cudnn_graph *g, const mt_cudnn_tensor *a,
                                    const mt_cudnn_tensor *b, const mt_cudnn_tensor *out,
                                    mt_attn_dims d) {
    int64_t sq = mt_attn_q_rows(d), skv = mt_attn_kv_rows(d), h = d.heads;
    const int64_t dim[4] = {d.batch, h, skv, sq}, stride[4] = {h * sq * skv, sq * skv, 1, skv};
    mt_cudnn_tensor at, full;
    MT_TRY(mt_cudnn_reshape(g, a, &at, CUDNN_DATA_BFLOAT16, dim, stride));
    if (d.heads == d.kv_heads) return mt_cudnn_matmul(g, &at, b, out);
    const int64_t full_dim[4] = {d.batch, h, skv, d.head_dim};
    MT_TRY(mt_cudnn_virtual(g, &full, CUDNN_DATA_BFLOAT16, full_dim));
    MT_TRY(mt_cudnn_matmul(g, &at, b, &full));
    return mt_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, &full, out);
}

static mt_status build_backward(mt_cudnn_graph *g, mt_attn_dims d) {
    mt_cudnn_tensor q, kt, vt, o, dout, stats, scale, one, dq, dk, dv, accum;
    MT_TRY(io_tensor(g, &q, UID_Q, d, SIDE_Q, 0));
    MT_TRY(io_tensor(g, &kt, UID_K, d, SIDE_KV, 1));
    MT_TRY(io_tensor(g, &vt, UID_V, d, SIDE_KV, 1));
    MT_TRY(io_tensor(g, &o, UID_O, d, SIDE_Q, 0));
    MT_TRY(io_tensor(g, &dout, UID_DO, d, SIDE_Q, 0));
    MT_TRY(io_tensor(g, &dq, UID_DQ, d, SIDE_Q, 0));
    MT_TRY(io_tensor(g, &dk, UID_DK, d, SIDE_KV, 0));
    MT_TRY(io_tensor(g, &dv, UID_DV, d, SIDE_KV, 0));
    MT_TRY(stats_tensor(g, &stats, d));
    MT_TRY(scalar(g, &scale, UID_SCALE));
    MT_TRY(scalar(g, &one, UID_ONE));
    int64_t sq = mt_attn_q_rows(d);
    const int64_t accum_dim[4] = {d.batch, d.heads, sq, d.head_dim};
    const int64_t accum_stride[4] = {(int64_t)d.heads * sq * d.head_dim, sq * d.head_dim, d.head_dim, 1};
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
    int64_t score_dim[4];
    score_dims(d, score_dim);
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
    bshd(d, SIDE_KV, 0, k_dim, k_stride);
    MT_TRY(mt_cudnn_reshape(g, &kt, &k, CUDNN_DATA_FLOAT, k_dim, k_stride));
    MT_TRY(mt_cudnn_matmul(g, &ds, &k, &accum));
    return mt_cudnn_pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, &accum, NULL, NULL, &dq);
}

/* ---- the cache ---- */

static int same_dims(mt_attn_dims a, mt_attn_dims b) {
    return a.batch == b.batch && a.seq == b.seq && a.heads == b.heads && a.kv_heads == b.kv_heads &&
           a.head_dim == b.head_dim && mt_attn_q_rows(a) == mt_attn_q_rows(b) &&
           mt_attn_kv_rows(a) == mt_attn_kv_rows(b);
}

static size_t align_up(size_t bytes) { return (bytes + WORKSPACE_ALIGN - 1) / WORKSPACE_ALIGN * WORKSPACE_ALIGN; }

/* Builds both plans, each within its workspace limit (the backward's leaves room for dQ's fp32
 * accumulator after it). */
static mt_status build_plans(mt_cudnn_attention *ca, plans *p, int64_t forward_limit, int64_t backward_limit) {
    mt_cudnn_graph_init(&p->forward, ca->handle, FIRST_VIRTUAL_UID);
    mt_cudnn_graph_init(&p->backward, ca->handle, FIRST_VIRTUAL_UID);
    MT_TRY(build_forward(&p->forward, p->dims));
    MT_TRY(mt_cudnn_graph_plan(&p->forward, forward_limit));
    MT_TRY(build_backward(&p->backward, p->dims));
    MT_TRY(mt_cudnn_graph_plan(&p->backward, backward_limit));
    mt_attn_dims d = p->dims;
    p->accum_offset = align_up((size_t)p->backward.workspace_bytes);
    p->workspace_bytes =
        p->accum_offset + (size_t)d.batch * d.heads * mt_attn_q_rows(d) * d.head_dim * sizeof(float);
    if ((size_t)p->forward.workspace_bytes > p->workspace_bytes) p->workspace_bytes = (size_t)p->forward.workspace_bytes;
    return MT_OK;
}

static mt_status make_handle(mt_cudnn_attention *ca) {
    MT_CUDNN_CHECK(cudnnCreate(&ca->handle));
    return MT_OK;
}

/* A free entry: the next unused, or the least recently used one's, its plans destroyed once the
 * device has finished whatever of theirs it was running. */
static plans *free_entry(mt_cudnn_attention *ca) {
    if (ca->cached < MAX_CACHED_DIMS) return &ca->cache[ca->cached++];
    plans *oldest = &ca->cache[0];
    for (int i = 1; i < ca->cached; i++)
        if (ca->cache[i].used < oldest->used) oldest = &ca->cache[i];
    cudaDeviceSynchronize();
    mt_cudnn_graph_destroy(&oldest->forward);
    mt_cudnn_graph_destroy(&oldest->backward);
    return oldest;
}

static plans *plans_for(mt_cudnn_attention *ca, mt_attn_dims dims);

/* A window that is not its sequence's last builds within the workspace of the last window of its
 * q_len (backend.h: the tiles of a sequence share the workspace sized for the last); *usable 0
 * when cuDNN cannot run that one. */
static void window_limits(mt_cudnn_attention *ca, mt_attn_dims dims, int *usable, int64_t *forward_limit,
                          int64_t *backward_limit) {
    *usable = 1;
    *forward_limit = *backward_limit = MAX_WORKSPACE;
    if (dims.q_len <= 0 || dims.q0 + dims.q_len == dims.seq) return;
    mt_attn_dims last = dims;
    last.q0 = dims.seq - dims.q_len;
    plans *p = plans_for(ca, last);
    if (!p) {
        *usable = 0;
        return;
    }
    *forward_limit = (int64_t)p->workspace_bytes;
    *backward_limit = (int64_t)p->accum_offset;
}

/* The cached entry for dims, building it on first sight; NULL when cuDNN cannot run them.
 * Called with the lock held. */
static plans *plans_for(mt_cudnn_attention *ca, mt_attn_dims dims) {
    for (int i = 0; i < ca->cached; i++)
        if (same_dims(ca->cache[i].dims, dims)) {
            ca->cache[i].used = ++ca->clock;
            return ca->cache[i].usable ? &ca->cache[i] : NULL;
        }
    if (ca->disabled || dims.batch == 0 || dims.seq == 0) return NULL;
    if (!ca->handle && make_handle(ca) != MT_OK) {
        mt_log_warn("cuDNN attention disabled, the CUDA-core kernels run instead: %s", mt_error());
        ca->disabled = 1;
        return NULL;
    }
    int usable;
    int64_t forward_limit, backward_limit;
    window_limits(ca, dims, &usable, &forward_limit, &backward_limit);
    plans *p = free_entry(ca);
    memset(p, 0, sizeof *p);
    p->dims = dims;
    p->used = ++ca->clock;
    int sq = mt_attn_q_rows(dims), skv = mt_attn_kv_rows(dims);
    if (!usable) {
        mt_log_info("attention (batch %d, %d queries x %d keys, heads %d/%d, head_dim %d): cuDNN refused its "
                    "sequence's last window; the CUDA-core kernels run it",
                    dims.batch, sq, skv, dims.heads, dims.kv_heads, dims.head_dim);
        return NULL;
    }
    if (build_plans(ca, p, forward_limit, backward_limit) != MT_OK) {
        mt_log_info("attention (batch %d, %d queries x %d keys, heads %d/%d, head_dim %d): cuDNN refused (%s); "
                    "the CUDA-core kernels run it",
                    dims.batch, sq, skv, dims.heads, dims.kv_heads, dims.head_dim, mt_error());
        mt_cudnn_graph_destroy(&p->forward);
        mt_cudnn_graph_destroy(&p->backward);
        return NULL;
    }
    mt_log_debug("attention (batch %d, %d queries x %d keys, heads %d/%d, head_dim %d): cuDNN engines %lld "
                 "(forward) and %lld (backward), %zu bytes of workspace",
                 dims.batch, sq, skv, dims.heads, dims.kv_heads, dims.head_dim, (long long)p->forward.engine,
                 (long long)p->backward.engine, p->workspace_bytes);
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
    int32_t seq_q = mt_attn_q_rows(dims), seq_kv = mt_attn_kv_rows(dims); /* by value: read by the call */
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_MASKED, UID_SEQ_Q, UID_SEQ_KV};
    void *const pointers[] = {(void *)q, (void *)k, (void *)v, out, lse, &scale, &ca->masked, &seq_q, &seq_kv};
    MT_CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    return mt_cudnn_graph_execute(&p->forward, bottom_right(dims) ? 9 : 7, uids, pointers, workspace);
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
    int32_t seq_q = mt_attn_q_rows(dims), seq_kv = mt_attn_kv_rows(dims);
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DQ, UID_DK, UID_DV,
                            UID_DQ_ACCUM, UID_SCALE, UID_MASKED, UID_ONE, UID_SEQ_Q, UID_SEQ_KV};
    void *const pointers[] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)dout,
                              (void *)lse, dq, dk, dv, accum, &scale, &ca->masked, &ca->one, &seq_q, &seq_kv};
    MT_CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    return mt_cudnn_graph_execute(&p->backward, bottom_right(dims) ? 15 : 13, uids, pointers, workspace);
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
