/* cuDNN fused attention: the SDPA graphs in the form cuDNN's flash-attention engines recognise
 * (the decomposition cudnn-frontend emits), their plans cached per dims, and their execution.
 *
 * Layout: the [n, heads, head_dim] rows are BSHD, seen by cuDNN as [b, h, s, d] with strides
 * [s*h*d, d, h*d, 1]; k and v enter the matmuls transposed ([b, h, d, s], the same memory).
 * A window of queries (backend.h) has s_q = q_len query rows a sequence and s_kv = q0 + q_len keys
 * (each sequence's keys still seq rows apart), and its mask is the causal one aligned to the
 * bottom right, as cudnn-frontend's causal_mask_bottom_right emits it for cuDNN below 9.21: row +
 * s_kv - s_q >= col, the row index shifted by two int32 scalars. Each window is a plan of its own;
 * the windows of a sequence build within the workspace of its last. Windows take no segments here
 * (the dispatch gives those to the CUDA-core kernels). A window's backward runs as two graphs, so
 * that neither computes a masked score: its queries against the keys before it (no mask) and
 * against its own keys (the plain causal square); given the window's softmax statistics and its
 * whole output the backward is separable over keys. The window's dQ is the sum of the two
 * graphs' bf16 dQ: the accumulator is the engine's own (cleared by each graph, in a layout of its
 * tiles; neither one accumulator for both nor a sum of two accumulators gave dQ on an H100).
 * (One graph under the shifted mask ran every score of its last square on an H100: 0.80x PyTorch's
 * backward at two windows, bench/results/2026-11-26-h100x1-attention-8b-heads.md.)
 * Forward:  S = scale * Q K^T, causal mask (row >= col kept), softmax with
 *           Stats = max + log(sum exp) (natural log: backend.h's lse), O = P V.
 * Backward: the frontend's graph: P = exp(S - Stats), dV = P^T dO, dP = dO V^T,
 *           dS = P * (dP - rowsum(dO * O)), dQ = scale * dS K, dK = scale * dS^T Q; for GQA
 *           dK and dV are summed over the group by a reduction. dQ accumulates in fp32 in a
 *           zeroed part of the workspace (cuDNN's F16x16 layout) before its final cast.
 * Ragged (segments), as cudnn-frontend's composite SDPA lays out its THD graphs: every tensor in
 * memory carries its int64 per-entry element offsets (q, o, dout, dq: row * heads * head_dim; k,
 * v, dk, dv: row * kv_heads * head_dim; lse and the softmax sum: row * heads); the scores are
 * masked to each entry's length (seq_len_q, seq_len_kv) before the causal mask, and every matmul
 * over the sequence takes those lengths as its M, N or K; the backward's row sums, dQ's fp32
 * accumulator and, for GQA, dK's and dV's per-query-head terms live in the workspace, sized by the
 * micro-batch's rows. A small kernel (ragged.cu) writes the lengths and offsets from the segments'
 * starts at the workspace's end before each graph runs: no host sync. */
#include "backend/cuda/attention_cudnn.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cudnn_graph.h"
#include "util/log.h"

enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_MASKED, UID_ONE, UID_DQ_ACCUM,
    UID_SEQ_Q, UID_SEQ_KV, UID_OFF_Q, UID_OFF_KV, UID_OFF_STATS, UID_SOFTMAX_SUM, UID_DK_FULL, UID_DV_FULL,
    UID_WINDOW_Q, UID_WINDOW_KV, UID_BAND,
    FIRST_VIRTUAL_UID = 100,
};

/* The windows of a long sequence take a plan pair each (a 1M-token sequence: 16 in the default
 * tiles, 128 in the budget's smallest, engine/budget.h), and the planner sizes a few shapes before
 * the run: past this many the least recently used pair goes. */
enum { MAX_CACHED = 160, MAX_LIMITS = 16, WORKSPACE_ALIGN = 256, MIN_BUCKET = 8 };

/* Either plan may ask for workspace: cuDNN's flash forward engine does (a forward held to none gets
 * a general fused engine at half the speed). Both use the one buffer, never at once. */
static const int64_t MAX_WORKSPACE = (int64_t)1 << 34;

/* One entry of the cache: dims, and for the ragged layout the entries (a power of two of segments;
 * 0: the plain layout). Its workspace: the plans' own, then the fp32 dQ accumulator, then (a window)
 * the bf16 dQ of its own keys' graph or (ragged) the softmax sums and GQA's per-query-head dK and
 * dV, then (ragged) the lengths and offsets. */
typedef struct {
    mt_attn_dims dims;
    int entries;
    int band; /* a sliding window's keys (0: none) */
    int usable; /* both plans built */
    mt_cudnn_graph forward, backward;
    mt_cudnn_graph square; /* a window's: its backward against its own keys (backward: the keys before) */
    size_t accum_offset, own_dq_offset, sum_offset, dk_full_offset, dv_full_offset, ragged_offset,
        workspace_bytes;
    uint64_t used; /* when last looked up (the cache's clock), for eviction */
} plans;

/* The workspace a dims' segmented calls were given (mt_cudnn_attention_ragged_workspace). */
typedef struct {
    mt_attn_dims dims;
    size_t bytes;
} limit;

struct mt_cudnn_attention {
    pthread_mutex_t lock; /* guards everything below and the handle's stream */
    cudnnHandle_t handle;
    int disabled; /* cudnnCreate failed: every dims falls back */
    plans cache[MAX_CACHED];
    int cached;
    uint64_t clock;
    limit limits[MAX_LIMITS];
    int limit_count;
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
        mt_cudnn_graph_destroy(&ca->cache[i].square);
    }
    if (ca->handle) cudnnDestroy(ca->handle);
    pthread_mutex_destroy(&ca->lock);
    free(ca);
}

/* ---- shapes ---- */

/* What a graph is built for: the dims, its batch entries (dims.batch, or the ragged layout's), the
 * query rows and key rows of an entry (a window's s_q and s_kv; seq both without one), and in the
 * ragged layout the lengths and offsets tensors. */
typedef enum {
    MASK_CAUSAL,       /* row >= col */
    MASK_BOTTOM_RIGHT, /* a window's: row + s_kv - s_q >= col */
    MASK_NONE,         /* a window's queries against the keys before it */
} mask_kind;

typedef struct {
    mt_attn_dims d;
    int64_t b, sq, skv;
    int ragged;
    mask_kind mask;
    int band; /* MASK_CAUSAL's sliding window: a query sees this many keys, itself included (0: all) */
    mt_cudnn_tensor seq_q, seq_kv, off_q, off_kv, off_stats;
} shape;

/* [b, h, s, d] over the [n, h, d] rows of the query side (q, o, their gradients: s_q rows an
 * entry) or the key side (k, v, theirs: s_kv rows, seq apart); transposed: [b, h, d, s]. */
static void bshd(const shape *sh, int kv_side, int transposed, int64_t dim[4], int64_t stride[4]) {
    int heads = kv_side ? sh->d.kv_heads : sh->d.heads;
    int64_t b = sh->b, s = kv_side ? sh->skv : sh->sq, apart = kv_side ? sh->d.seq : sh->sq, hd = sh->d.head_dim;
    int64_t row = (int64_t)heads * hd;
    dim[0] = b, dim[1] = heads, stride[0] = apart * row, stride[1] = hd;
    dim[2] = transposed ? hd : s, stride[2] = transposed ? 1 : row;
    dim[3] = transposed ? s : hd, stride[3] = transposed ? row : 1;
}

static int kv_uid(int64_t uid) { return uid == UID_K || uid == UID_V || uid == UID_DK || uid == UID_DV; }

/* An input or output in memory; ragged, at the offsets of q's rows or of k's. */
static mt_status io_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, const shape *sh, int transposed) {
    int64_t dim[4], stride[4];
    bshd(sh, kv_uid(uid), transposed, dim, stride);
    if (!sh->ragged) return mt_cudnn_tensor_make(g, t, uid, CUDNN_DATA_BFLOAT16, dim, stride, MT_CUDNN_IN_MEMORY, 0);
    const mt_cudnn_tensor *off = kv_uid(uid) ? &sh->off_kv : &sh->off_q;
    return mt_cudnn_tensor_ragged(g, t, uid, CUDNN_DATA_BFLOAT16, dim, stride, off);
}

/* fp32 [b, heads, s_q, 1] per query row: [batch, heads, q rows], or ragged [n, heads]. */
static mt_status row_stats_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, const shape *sh) {
    int64_t h = sh->d.heads, s = sh->sq;
    const int64_t dim[4] = {sh->b, h, s, 1};
    if (sh->ragged) {
        const int64_t stride[4] = {h * s, 1, h, 1};
        return mt_cudnn_tensor_ragged(g, t, uid, CUDNN_DATA_FLOAT, dim, stride, &sh->off_stats);
    }
    const int64_t stride[4] = {h * s, s, 1, 1};
    return mt_cudnn_tensor_make(g, t, uid, CUDNN_DATA_FLOAT, dim, stride, MT_CUDNN_IN_MEMORY, 0);
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

/* row (int32) shifted by s_kv - s_q, as the frontend's diagonal band mask does it (axis 3 on both):
 * + s_kv, then - s_q. */
static mt_status shift_to_bottom_right(mt_cudnn_graph *g, const mt_cudnn_tensor *row, const int64_t dim[4],
                                       mt_cudnn_tensor *out) {
    mt_cudnn_tensor seq_q, seq_kv, plus_kv;
    MT_TRY(typed_scalar(g, &seq_kv, UID_WINDOW_KV, CUDNN_DATA_INT32));
    MT_TRY(typed_scalar(g, &seq_q, UID_WINDOW_Q, CUDNN_DATA_INT32));
    MT_TRY(mt_cudnn_virtual(g, &plus_kv, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_pointwise_on_axis(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 3, row, &seq_kv, &plus_kv));
    MT_TRY(mt_cudnn_virtual(g, out, CUDNN_DATA_INT32, dim));
    return mt_cudnn_pointwise_on_axis(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, 3, &plus_kv, &seq_q, out);
}

/* The ragged layout's per-entry tensors: int32 lengths [b, 1, 1, 1] and int64 offsets [b + 1]. */
static mt_status ragged_tensors(mt_cudnn_graph *g, shape *sh) {
    const int64_t lens[4] = {sh->b, 1, 1, 1}, offs[4] = {sh->b + 1, 1, 1, 1}, unit[4] = {1, 1, 1, 1};
    MT_TRY(mt_cudnn_tensor_make(g, &sh->seq_q, UID_SEQ_Q, CUDNN_DATA_INT32, lens, unit, MT_CUDNN_IN_MEMORY, 0));
    MT_TRY(mt_cudnn_tensor_make(g, &sh->seq_kv, UID_SEQ_KV, CUDNN_DATA_INT32, lens, unit, MT_CUDNN_IN_MEMORY, 0));
    MT_TRY(mt_cudnn_tensor_make(g, &sh->off_q, UID_OFF_Q, CUDNN_DATA_INT64, offs, unit, MT_CUDNN_IN_MEMORY, 0));
    MT_TRY(mt_cudnn_tensor_make(g, &sh->off_kv, UID_OFF_KV, CUDNN_DATA_INT64, offs, unit, MT_CUDNN_IN_MEMORY, 0));
    return mt_cudnn_tensor_make(g, &sh->off_stats, UID_OFF_STATS, CUDNN_DATA_INT64, offs, unit, MT_CUDNN_IN_MEMORY, 0);
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

/* y (boolean, x's shape) = mode(x, b) */
static mt_status compare(mt_cudnn_graph *g, cudnnPointwiseMode_t mode, const mt_cudnn_tensor *x,
                         const mt_cudnn_tensor *b, const int64_t dim[4], mt_cudnn_tensor *y) {
    MT_TRY(mt_cudnn_virtual(g, y, CUDNN_DATA_BOOLEAN, dim));
    return mt_cudnn_pointwise(g, mode, CUDNN_DATA_BOOLEAN, x, b, NULL, y);
}

/* y [.., rows, 1] (fp32) = x reduced over its last dim */
static mt_status row_reduce(mt_cudnn_graph *g, cudnnReduceTensorOp_t op, const mt_cudnn_tensor *x,
                            mt_cudnn_tensor *y) {
    const int64_t dim[4] = {x->dim[0], x->dim[1], x->dim[2], 1};
    MT_TRY(mt_cudnn_virtual(g, y, CUDNN_DATA_FLOAT, dim));
    return mt_cudnn_reduction(g, op, x, y);
}

/* out = masked where keep is false, else x */
static mt_status select_kept(mt_cudnn_graph *g, const mt_cudnn_tensor *x, const mt_cudnn_tensor *masked,
                             const mt_cudnn_tensor *keep, mt_cudnn_tensor *out) {
    MT_TRY(mt_cudnn_virtual(g, out, CUDNN_DATA_FLOAT, x->dim));
    return mt_cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, masked, keep, out);
}

/* The scaled scores with the masks: ragged, entries past an entry's length (the padding mask,
 * rows and columns); then entries above the diagonal (causal; a window's: the diagonal through the
 * bottom right corner). Masked ones become `masked`. */
static mt_status masked_scores(mt_cudnn_graph *g, const mt_cudnn_tensor *q, const mt_cudnn_tensor *kt,
                               const mt_cudnn_tensor *scale, const shape *sh, mt_cudnn_tensor *out) {
    const int64_t dim[4] = {sh->b, sh->d.heads, sh->sq, sh->skv};
    mt_cudnn_tensor s, scaled, row, col, keep, masked, shifted;
    MT_TRY(mt_cudnn_virtual(g, &s, CUDNN_DATA_FLOAT, dim));
    if (sh->ragged) MT_TRY(mt_cudnn_matmul_sized(g, q, kt, &s, &sh->seq_q, &sh->seq_kv, NULL));
    else MT_TRY(mt_cudnn_matmul(g, q, kt, &s));
    if (sh->mask == MASK_NONE) return binary(g, CUDNN_POINTWISE_MUL, &s, scale, out);
    MT_TRY(scalar(g, &masked, UID_MASKED));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &s, scale, &scaled));
    if (sh->ragged) {
        mt_cudnn_tensor prow, pcol, in_row, in_col, inside, padded;
        MT_TRY(mt_cudnn_virtual(g, &prow, CUDNN_DATA_INT32, dim));
        MT_TRY(mt_cudnn_gen_index(g, &scaled, 2, &prow));
        MT_TRY(mt_cudnn_virtual(g, &pcol, CUDNN_DATA_INT32, dim));
        MT_TRY(mt_cudnn_gen_index(g, &scaled, 3, &pcol));
        MT_TRY(compare(g, CUDNN_POINTWISE_CMP_LT, &prow, &sh->seq_q, dim, &in_row));
        MT_TRY(compare(g, CUDNN_POINTWISE_CMP_LT, &pcol, &sh->seq_kv, dim, &in_col));
        MT_TRY(compare(g, CUDNN_POINTWISE_LOGICAL_AND, &in_row, &in_col, dim, &inside));
        MT_TRY(select_kept(g, &scaled, &masked, &inside, &padded));
        scaled = padded;
    }
    MT_TRY(mt_cudnn_virtual(g, &row, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &scaled, 2, &row));
    MT_TRY(mt_cudnn_virtual(g, &col, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &scaled, 3, &col));
    const mt_cudnn_tensor *kept_row = &row;
    if (sh->mask == MASK_BOTTOM_RIGHT) {
        MT_TRY(shift_to_bottom_right(g, &row, dim, &shifted));
        kept_row = &shifted;
    }
    MT_TRY(compare(g, CUDNN_POINTWISE_CMP_GE, kept_row, &col, dim, &keep));
    if (!sh->band) return select_kept(g, &scaled, &masked, &keep, out);
    /* A sliding window, after the causal mask as the frontend's diagonal band's left bound follows it:
     * col + band > row (backend.h: the keys at (p - window, p]), on indices of its own. */
    mt_cudnn_tensor causal, band_row, band_col, band, col_plus, inside;
    MT_TRY(select_kept(g, &scaled, &masked, &keep, &causal));
    MT_TRY(mt_cudnn_virtual(g, &band_row, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &causal, 2, &band_row));
    MT_TRY(mt_cudnn_virtual(g, &band_col, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_gen_index(g, &causal, 3, &band_col));
    MT_TRY(typed_scalar(g, &band, UID_BAND, CUDNN_DATA_INT32));
    MT_TRY(mt_cudnn_virtual(g, &col_plus, CUDNN_DATA_INT32, dim));
    MT_TRY(mt_cudnn_pointwise_on_axis(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 3, &band_col, &band, &col_plus));
    MT_TRY(compare(g, CUDNN_POINTWISE_CMP_GT, &col_plus, &band_row, dim, &inside));
    return select_kept(g, &causal, &masked, &inside, out);
}

/* c = a . b, over each ragged entry's lengths (m, k as given) */
static mt_status seq_matmul(mt_cudnn_graph *g, const shape *sh, const mt_cudnn_tensor *a, const mt_cudnn_tensor *b,
                            const mt_cudnn_tensor *c, const mt_cudnn_tensor *m, const mt_cudnn_tensor *k) {
    if (!sh->ragged) return mt_cudnn_matmul(g, a, b, c);
    return mt_cudnn_matmul_sized(g, a, b, c, m, NULL, k);
}

/* ---- the graphs ---- */

static mt_status build_forward(mt_cudnn_graph *g, shape *sh) {
    mt_cudnn_tensor q, kt, v, o, stats, scale, s, max, shifted, e, sum, log_sum, p;
    if (sh->ragged) MT_TRY(ragged_tensors(g, sh));
    MT_TRY(io_tensor(g, &q, UID_Q, sh, 0));
    MT_TRY(io_tensor(g, &kt, UID_K, sh, 1));
    MT_TRY(io_tensor(g, &v, UID_V, sh, 0));
    MT_TRY(io_tensor(g, &o, UID_O, sh, 0));
    MT_TRY(row_stats_tensor(g, &stats, UID_STATS, sh));
    MT_TRY(scalar(g, &scale, UID_SCALE));

    MT_TRY(masked_scores(g, &q, &kt, &scale, sh, &s));
    MT_TRY(row_reduce(g, CUDNN_REDUCE_TENSOR_MAX, &s, &max));
    MT_TRY(binary(g, CUDNN_POINTWISE_SUB, &s, &max, &shifted));
    MT_TRY(unary(g, CUDNN_POINTWISE_EXP, &shifted, &e));
    MT_TRY(row_reduce(g, CUDNN_REDUCE_TENSOR_ADD, &e, &sum));
    MT_TRY(unary(g, CUDNN_POINTWISE_LOG, &sum, &log_sum));
    MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, &max, &log_sum, NULL, &stats));
    MT_TRY(mt_cudnn_virtual(g, &p, CUDNN_DATA_BFLOAT16, e.dim)); /* P V runs on bf16 P */
    MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, &e, &sum, NULL, &p));
    return seq_matmul(g, sh, &p, &v, &o, &sh->seq_q, &sh->seq_kv);
}

/* dst = a^T b for a [b, h, s_q, s_kv] fp32 score-shaped tensor (over each ragged entry's lengths):
 * written to `out` directly for MHA, summed over each kv head's group for GQA, through `full`'s uid
 * (ragged: the per-query-head terms in memory, at out's offsets scaled by the group, as
 * cudnn-frontend lays them out; else virtual). */
static mt_status transposed_product(mt_cudnn_graph *g, const mt_cudnn_tensor *a, const mt_cudnn_tensor *b,
                                    const mt_cudnn_tensor *out, int64_t full_uid, const shape *sh) {
    const mt_attn_dims d = sh->d;
    int64_t sq = sh->sq, skv = sh->skv, h = d.heads;
    const int64_t dim[4] = {sh->b, h, skv, sq}, stride[4] = {h * sq * skv, sq * skv, 1, skv};
    mt_cudnn_tensor at, full;
    MT_TRY(mt_cudnn_reshape(g, a, &at, CUDNN_DATA_BFLOAT16, dim, stride));
    if (d.heads == d.kv_heads) return seq_matmul(g, sh, &at, b, out, &sh->seq_kv, &sh->seq_q);
    const int64_t full_dim[4] = {sh->b, h, skv, d.head_dim};
    if (sh->ragged) {
        int64_t same_dim[4], full_stride[4]; /* BSHD over the query heads (ragged: s_q = s_kv) */
        bshd(sh, 0, 0, same_dim, full_stride);
        MT_TRY(mt_cudnn_tensor_ragged(g, &full, full_uid, CUDNN_DATA_BFLOAT16, full_dim, full_stride, &sh->off_kv));
    } else {
        MT_TRY(mt_cudnn_virtual(g, &full, CUDNN_DATA_BFLOAT16, full_dim));
    }
    MT_TRY(seq_matmul(g, sh, &at, b, &full, &sh->seq_kv, &sh->seq_q));
    return mt_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, &full, out);
}

static mt_status build_backward(mt_cudnn_graph *g, shape *sh) {
    mt_cudnn_tensor q, kt, vt, o, dout, stats, scale, one, dq, dk, dv, accum;
    const mt_attn_dims d = sh->d;
    if (sh->ragged) MT_TRY(ragged_tensors(g, sh));
    MT_TRY(io_tensor(g, &q, UID_Q, sh, 0));
    MT_TRY(io_tensor(g, &kt, UID_K, sh, 1));
    MT_TRY(io_tensor(g, &vt, UID_V, sh, 1));
    MT_TRY(io_tensor(g, &o, UID_O, sh, 0));
    MT_TRY(io_tensor(g, &dout, UID_DO, sh, 0));
    MT_TRY(io_tensor(g, &dq, UID_DQ, sh, 0));
    MT_TRY(io_tensor(g, &dk, UID_DK, sh, 0));
    MT_TRY(io_tensor(g, &dv, UID_DV, sh, 0));
    MT_TRY(row_stats_tensor(g, &stats, UID_STATS, sh));
    MT_TRY(scalar(g, &scale, UID_SCALE));
    MT_TRY(scalar(g, &one, UID_ONE));
    if (sh->ragged) {
        int64_t accum_dim[4], accum_stride[4];
        bshd(sh, 0, 0, accum_dim, accum_stride);
        MT_TRY(mt_cudnn_tensor_ragged(g, &accum, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, accum_dim, accum_stride, &sh->off_q));
    } else {
        const int64_t accum_dim[4] = {d.batch, d.heads, sh->sq, d.head_dim};
        const int64_t accum_stride[4] = {(int64_t)d.heads * sh->sq * d.head_dim, sh->sq * d.head_dim, d.head_dim, 1};
        MT_TRY(mt_cudnn_tensor_make(g, &accum, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, accum_dim, accum_stride,
                                    MT_CUDNN_IN_MEMORY, 1));
    }

    /* delta = rowsum(dO * O): ragged, in memory with lse's offsets (cudnn-frontend's softmax sum) */
    mt_cudnn_tensor prod, rowsum, delta;
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &dout, &o, &prod));
    MT_TRY(row_reduce(g, CUDNN_REDUCE_TENSOR_ADD, &prod, &rowsum));
    if (sh->ragged) {
        MT_TRY(row_stats_tensor(g, &delta, UID_SOFTMAX_SUM, sh));
        MT_TRY(mt_cudnn_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, &rowsum, &one, NULL, &delta));
    } else {
        MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &rowsum, &one, &delta));
    }

    /* P = exp(S - Stats); dV = P^T dO */
    mt_cudnn_tensor s, shifted, p;
    MT_TRY(masked_scores(g, &q, &kt, &scale, sh, &s));
    MT_TRY(binary(g, CUDNN_POINTWISE_SUB, &s, &stats, &shifted));
    MT_TRY(unary(g, CUDNN_POINTWISE_EXP, &shifted, &p));
    MT_TRY(transposed_product(g, &p, &dout, &dv, UID_DV_FULL, sh));

    /* dS = scale * P * (dO V^T - delta); dK = dS^T Q */
    const int64_t score_dim[4] = {sh->b, d.heads, sh->sq, sh->skv};
    mt_cudnn_tensor dp, dp_kept, centred, ds_unscaled, ds;
    MT_TRY(mt_cudnn_virtual(g, &dp, CUDNN_DATA_FLOAT, score_dim));
    if (sh->ragged) MT_TRY(mt_cudnn_matmul_sized(g, &dout, &vt, &dp, &sh->seq_q, &sh->seq_kv, NULL));
    else MT_TRY(mt_cudnn_matmul(g, &dout, &vt, &dp));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &dp, &one, &dp_kept));
    MT_TRY(binary(g, CUDNN_POINTWISE_SUB, &dp_kept, &delta, &centred));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &centred, &p, &ds_unscaled));
    MT_TRY(binary(g, CUDNN_POINTWISE_MUL, &ds_unscaled, &scale, &ds));
    MT_TRY(transposed_product(g, &ds, &q, &dk, UID_DK_FULL, sh));

    /* dQ = dS K, through the fp32 accumulator */
    int64_t k_dim[4], k_stride[4];
    mt_cudnn_tensor k;
    bshd(sh, 1, 0, k_dim, k_stride);
    MT_TRY(mt_cudnn_reshape_ragged(g, &kt, &k, CUDNN_DATA_FLOAT, k_dim, k_stride, sh->ragged ? &sh->off_kv : NULL));
    MT_TRY(seq_matmul(g, sh, &ds, &k, &accum, &sh->seq_q, &sh->seq_kv));
    return mt_cudnn_pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, &accum, NULL, NULL, &dq);
}

/* ---- the cache ---- */

static int same_dims(mt_attn_dims a, mt_attn_dims b) {
    return a.batch == b.batch && a.seq == b.seq && a.heads == b.heads && a.kv_heads == b.kv_heads &&
           a.head_dim == b.head_dim && mt_attn_q_rows(a) == mt_attn_q_rows(b) &&
           mt_attn_kv_rows(a) == mt_attn_kv_rows(b);
}

static size_t align_up(size_t bytes) { return (bytes + WORKSPACE_ALIGN - 1) / WORKSPACE_ALIGN * WORKSPACE_ALIGN; }

/* The ragged layout's entries for `segments` segments: a power of two, at least MIN_BUCKET. */
static int entries_for(int segments) {
    int e = MIN_BUCKET;
    while (e < segments) e *= 2;
    return e;
}

/* The lengths (int32) and the three offsets arrays (int64) of `entries` entries. */
static size_t ragged_bytes(int entries) { return align_up((size_t)entries * 4) + 3 * align_up((size_t)(entries + 1) * 8); }

/* Builds both plans, each within its workspace limit (the backward's leaves room for what follows
 * it in the workspace). */
static mt_status build_plans(mt_cudnn_attention *ca, plans *p, int64_t forward_limit, int64_t backward_limit) {
    mt_attn_dims d = p->dims;
    int window = bottom_right(d);
    shape sh = {.d = d, .b = p->entries ? p->entries : d.batch, .sq = mt_attn_q_rows(d), .skv = mt_attn_kv_rows(d),
                .ragged = p->entries > 0, .mask = window ? MASK_BOTTOM_RIGHT : MASK_CAUSAL, .band = p->band};
    mt_cudnn_graph_init(&p->forward, ca->handle, FIRST_VIRTUAL_UID);
    mt_cudnn_graph_init(&p->backward, ca->handle, FIRST_VIRTUAL_UID);
    mt_cudnn_graph_init(&p->square, ca->handle, FIRST_VIRTUAL_UID);
    MT_TRY(build_forward(&p->forward, &sh));
    MT_TRY(mt_cudnn_graph_plan(&p->forward, forward_limit));
    int64_t backward_bytes;
    if (window) {
        shape before = sh, own = sh;
        before.skv = d.q0, before.mask = MASK_NONE;
        own.skv = d.q_len, own.mask = MASK_CAUSAL;
        MT_TRY(build_backward(&p->backward, &before));
        MT_TRY(mt_cudnn_graph_plan(&p->backward, backward_limit));
        MT_TRY(build_backward(&p->square, &own));
        MT_TRY(mt_cudnn_graph_plan(&p->square, backward_limit));
        backward_bytes = p->backward.workspace_bytes > p->square.workspace_bytes ? p->backward.workspace_bytes
                                                                                 : p->square.workspace_bytes;
    } else {
        MT_TRY(build_backward(&p->backward, &sh));
        MT_TRY(mt_cudnn_graph_plan(&p->backward, backward_limit));
        backward_bytes = p->backward.workspace_bytes;
    }
    size_t rows = (size_t)d.batch * mt_attn_q_rows(d), q_elems = rows * d.heads * d.head_dim;
    size_t at = align_up((size_t)backward_bytes);
    p->accum_offset = at;
    at += align_up(q_elems * sizeof(float));
    if (window) {
        p->own_dq_offset = at;
        at += align_up(q_elems * 2); /* bf16 */
    }
    if (sh.ragged) {
        p->sum_offset = at;
        at += align_up(rows * d.heads * sizeof(float));
        if (d.heads != d.kv_heads) { /* sized as cudnn-frontend sizes them: fp32 elements */
            p->dk_full_offset = at;
            at += align_up(q_elems * sizeof(float));
            p->dv_full_offset = at;
            at += align_up(q_elems * sizeof(float));
        }
    }
    size_t forward_bytes = align_up((size_t)p->forward.workspace_bytes);
    p->workspace_bytes = at > forward_bytes ? at : forward_bytes;
    if (sh.ragged) {
        p->ragged_offset = p->workspace_bytes;
        p->workspace_bytes += ragged_bytes(p->entries);
    }
    return MT_OK;
}

static mt_status make_handle(mt_cudnn_attention *ca) {
    MT_CUDNN_CHECK(cudnnCreate(&ca->handle));
    return MT_OK;
}

/* A free entry: the next unused, or the least recently used one's, its plans destroyed once the
 * device has finished whatever of theirs it was running. */
static plans *free_entry(mt_cudnn_attention *ca) {
    if (ca->cached < MAX_CACHED) return &ca->cache[ca->cached++];
    plans *oldest = &ca->cache[0];
    for (int i = 1; i < ca->cached; i++)
        if (ca->cache[i].used < oldest->used) oldest = &ca->cache[i];
    cudaDeviceSynchronize();
    mt_cudnn_graph_destroy(&oldest->forward);
    mt_cudnn_graph_destroy(&oldest->backward);
    mt_cudnn_graph_destroy(&oldest->square);
    return oldest;
}

static plans *plans_for(mt_cudnn_attention *ca, mt_attn_dims dims, int entries, int band);

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
    plans *p = plans_for(ca, last, 0, 0);
    if (!p) {
        *usable = 0;
        return;
    }
    *forward_limit = (int64_t)p->workspace_bytes;
    *backward_limit = (int64_t)p->accum_offset;
}

/* The cached entry for dims (and `entries` ragged entries; 0: plain; a sliding window of `band`
 * keys, whole sequences only), building it on first sight; NULL when cuDNN cannot run them. Called
 * with the lock held. */
static plans *plans_for(mt_cudnn_attention *ca, mt_attn_dims dims, int entries, int band) {
    for (int i = 0; i < ca->cached; i++)
        if (same_dims(ca->cache[i].dims, dims) && ca->cache[i].entries == entries && ca->cache[i].band == band) {
            ca->cache[i].used = ++ca->clock;
            return ca->cache[i].usable ? &ca->cache[i] : NULL;
        }
    if (ca->disabled || dims.batch == 0 || dims.seq == 0 || (entries && dims.q_len > 0)) return NULL;
    if (band && (entries || dims.q_len > 0)) return NULL;
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
    p->entries = entries;
    p->band = band;
    p->used = ++ca->clock;
    int sq = mt_attn_q_rows(dims), skv = mt_attn_kv_rows(dims);
    if (!usable) {
        mt_log_info("attention (batch %d, %d queries x %d keys, heads %d/%d, head_dim %d): cuDNN refused its "
                    "sequence's last window; the CUDA-core kernels run it",
                    dims.batch, sq, skv, dims.heads, dims.kv_heads, dims.head_dim);
        return NULL;
    }
    if (build_plans(ca, p, forward_limit, backward_limit) != MT_OK) {
        mt_log_info("attention (batch %d, %d queries x %d keys, heads %d/%d, head_dim %d%s, sliding window %d): "
                    "cuDNN refused (%s); the CUDA-core kernels run it", dims.batch, sq, skv, dims.heads,
                    dims.kv_heads, dims.head_dim, entries ? ", packed segments" : "", band, mt_error());
        mt_cudnn_graph_destroy(&p->forward);
        mt_cudnn_graph_destroy(&p->backward);
        mt_cudnn_graph_destroy(&p->square);
        return NULL;
    }
    mt_log_debug("attention (batch %d, %d queries x %d keys, heads %d/%d, head_dim %d): cuDNN's plans for %d "
                 "ragged entries (0: the plain layout), engines %lld (forward) and %lld (backward%s), %lld (its own "
                 "keys' backward; -1: not a window), %zu bytes of workspace", dims.batch, sq, skv, dims.heads,
                 dims.kv_heads, dims.head_dim, entries, (long long)p->forward.engine, (long long)p->backward.engine,
                 bottom_right(dims) ? ": the keys before the window" : "", (long long)p->square.engine,
                 p->workspace_bytes);
    p->usable = 1;
    return p;
}

/* The workspace segmented calls of dims were given; 0 when none was sized. Lock held. */
static limit *limit_of(mt_cudnn_attention *ca, mt_attn_dims dims) {
    for (int i = 0; i < ca->limit_count; i++)
        if (same_dims(ca->limits[i].dims, dims)) return &ca->limits[i];
    if (ca->limit_count == MAX_LIMITS) return NULL;
    ca->limits[ca->limit_count] = (limit){dims, 0};
    return &ca->limits[ca->limit_count++];
}

/* Head dims whose segments cuDNN runs: 64 and 128, where its ragged plans match the reference in
 * every layout the device tests try. At head_dim 40 cuDNN 9.19's ragged backward returned a wrong
 * dQ on an H100 (the forward, dK and dV right; issue 27), and cuDNN runs head dims other than 64,
 * 128 and 256 on separate kernels; test_cuda_attention_layouts.c runs cuDNN at each head dim to show
 * which it gets right. Segments at other head dims run on the CUDA-core kernels. */
static int ragged_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

int mt_cudnn_attention_plan_workspace(mt_cudnn_attention *ca, mt_attn_dims dims, int segments, int band,
                                      size_t *workspace_bytes) {
    pthread_mutex_lock(&ca->lock);
    plans *p = plans_for(ca, dims, segments ? entries_for(segments) : 0, band);
    if (p && workspace_bytes) *workspace_bytes = p->workspace_bytes;
    pthread_mutex_unlock(&ca->lock);
    return p != NULL;
}

int mt_cudnn_attention_supports(mt_cudnn_attention *ca, mt_attn_dims dims, int segments, int band,
                                size_t *workspace_bytes) {
    if (segments && (!ragged_head_dim(dims.head_dim) || dims.q_len > 0)) return 0;
    pthread_mutex_lock(&ca->lock);
    plans *p = plans_for(ca, dims, segments ? entries_for(segments) : 0, band);
    if (p && segments) {
        limit *l = limit_of(ca, dims);
        if (!l || p->workspace_bytes > l->bytes) p = NULL;
    }
    if (p && workspace_bytes) *workspace_bytes = p->workspace_bytes;
    pthread_mutex_unlock(&ca->lock);
    return p != NULL;
}

size_t mt_cudnn_attention_ragged_workspace(mt_cudnn_attention *ca, mt_attn_dims dims, size_t bytes) {
    if (!ragged_head_dim(dims.head_dim) || dims.q_len > 0) return bytes; /* the kernels run these */
    /* Sized for segments of 64 tokens on average, at least MIN_BUCKET; more are rare (and, where
     * their plan needs more workspace, run on the kernels). */
    int typical = dims.batch * dims.seq / 64;
    pthread_mutex_lock(&ca->lock);
    plans *p = plans_for(ca, dims, entries_for(typical > MIN_BUCKET ? typical : MIN_BUCKET), 0);
    if (p && p->workspace_bytes > bytes) bytes = p->workspace_bytes;
    limit *l = limit_of(ca, dims);
    if (l && bytes > l->bytes) l->bytes = bytes;
    pthread_mutex_unlock(&ca->lock);
    return bytes;
}

/* ---- execution ---- */

/* The ragged layout's lengths and offsets, at the workspace's end, from the segments' starts. */
typedef struct {
    void *lens, *off_q, *off_kv, *off_stats;
} ragged_arrays;

static mt_status write_ragged(const plans *p, cudaStream_t s, const mt_segments *seg, void *workspace,
                              ragged_arrays *r) {
    char *at = (char *)workspace + p->ragged_offset;
    size_t offs = align_up((size_t)(p->entries + 1) * 8);
    r->lens = at;
    r->off_q = at + align_up((size_t)p->entries * 4);
    r->off_kv = (char *)r->off_q + offs;
    r->off_stats = (char *)r->off_kv + offs;
    mt_attn_dims d = p->dims;
    return mt_cuda_ragged_offsets(s, seg->starts, seg->count, p->entries, (int64_t)d.heads * d.head_dim,
                                  (int64_t)d.kv_heads * d.head_dim, d.heads, r->lens, r->off_q, r->off_kv,
                                  r->off_stats);
}

/* The uids and pointers of a graph's variant pack. */
typedef struct {
    int64_t uids[24];
    void *pointers[24];
    int count;
} pack;

static void bind(pack *k, int64_t uid, const void *pointer) {
    k->uids[k->count] = uid;
    k->pointers[k->count++] = (void *)pointer;
}

static void bind_ragged(pack *k, const ragged_arrays *r) {
    bind(k, UID_SEQ_Q, r->lens);
    bind(k, UID_SEQ_KV, r->lens);
    bind(k, UID_OFF_Q, r->off_q);
    bind(k, UID_OFF_KV, r->off_kv);
    bind(k, UID_OFF_STATS, r->off_stats);
}

static plans *plans_of_call(mt_cudnn_attention *ca, mt_attn_dims dims, const mt_segments *seg, int band) {
    return plans_for(ca, dims, seg ? entries_for(seg->count) : 0, band);
}

static mt_status forward_locked(mt_cudnn_attention *ca, cudaStream_t s, void *out, float *lse, const void *q,
                                const void *k, const void *v, mt_attn_dims dims, float scale,
                                const mt_segments *seg, int band, void *workspace) {
    plans *p = plans_of_call(ca, dims, seg, band);
    if (!p) return mt_fail(MT_ERR_INVALID, "cuDNN attention: no plan for these dims");
    pack vp = {.count = 0};
    bind(&vp, UID_Q, q), bind(&vp, UID_K, k), bind(&vp, UID_V, v), bind(&vp, UID_O, out);
    bind(&vp, UID_STATS, lse), bind(&vp, UID_SCALE, &scale), bind(&vp, UID_MASKED, &ca->masked);
    int32_t window_q = mt_attn_q_rows(dims), window_kv = mt_attn_kv_rows(dims); /* by value: read by the call */
    if (bottom_right(dims)) bind(&vp, UID_WINDOW_Q, &window_q), bind(&vp, UID_WINDOW_KV, &window_kv);
    int32_t band_keys = band;
    if (band) bind(&vp, UID_BAND, &band_keys);
    if (seg) {
        ragged_arrays r;
        MT_TRY(write_ragged(p, s, seg, workspace, &r));
        bind_ragged(&vp, &r);
    }
    MT_CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    return mt_cudnn_graph_execute(&p->forward, vp.count, vp.uids, vp.pointers, workspace);
}

mt_status mt_cudnn_attention_forward(mt_cudnn_attention *ca, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims, float scale,
                                     const mt_segments *seg, int band, void *workspace) {
    pthread_mutex_lock(&ca->lock);
    mt_status status = forward_locked(ca, s, out, lse, q, k, v, dims, scale, seg, band, workspace);
    pthread_mutex_unlock(&ca->lock);
    return status;
}

/* What a backward graph reads and writes, and where. */
typedef struct {
    void *dq, *dk, *dv;
    const void *dout, *out, *q, *k, *v;
    const float *lse;
    float scale;
} backward_io;

/* A window's backward against its own keys: the causal square of its q_len keys from row q0. */
static backward_io own_keys(backward_io io, mt_attn_dims dims) {
    size_t skip = (size_t)dims.q0 * dims.kv_heads * dims.head_dim * 2; /* bf16 rows */
    io.k = (const char *)io.k + skip, io.v = (const char *)io.v + skip;
    io.dk = (char *)io.dk + skip, io.dv = (char *)io.dv + skip;
    return io;
}

static mt_status run_backward(mt_cudnn_attention *ca, const plans *p, mt_cudnn_graph *g, const backward_io *io,
                              float *accum, mask_kind mask, const mt_segments *seg, cudaStream_t s, void *workspace) {
    mt_attn_dims dims = p->dims;
    float scale = io->scale; /* by value: read by the call */
    char *ws = workspace;
    pack vp = {.count = 0};
    bind(&vp, UID_Q, io->q), bind(&vp, UID_K, io->k), bind(&vp, UID_V, io->v), bind(&vp, UID_O, io->out);
    bind(&vp, UID_DO, io->dout), bind(&vp, UID_STATS, io->lse), bind(&vp, UID_DQ, io->dq), bind(&vp, UID_DK, io->dk);
    bind(&vp, UID_DV, io->dv), bind(&vp, UID_DQ_ACCUM, accum), bind(&vp, UID_SCALE, &scale);
    bind(&vp, UID_ONE, &ca->one);
    if (mask != MASK_NONE) bind(&vp, UID_MASKED, &ca->masked);
    int32_t window_q = mt_attn_q_rows(dims), window_kv = mt_attn_kv_rows(dims); /* by value: read by the call */
    if (mask == MASK_BOTTOM_RIGHT) bind(&vp, UID_WINDOW_Q, &window_q), bind(&vp, UID_WINDOW_KV, &window_kv);
    int32_t band_keys = p->band;
    if (p->band) bind(&vp, UID_BAND, &band_keys);
    if (seg) {
        ragged_arrays r;
        MT_TRY(write_ragged(p, s, seg, workspace, &r));
        bind_ragged(&vp, &r);
        bind(&vp, UID_SOFTMAX_SUM, ws + p->sum_offset);
        if (dims.heads != dims.kv_heads) {
            bind(&vp, UID_DK_FULL, ws + p->dk_full_offset);
            bind(&vp, UID_DV_FULL, ws + p->dv_full_offset);
        }
    }
    return mt_cudnn_graph_execute(g, vp.count, vp.uids, vp.pointers, workspace);
}

static mt_status backward_locked(mt_cudnn_attention *ca, cudaStream_t s, const backward_io *io, mt_attn_dims dims,
                                 const mt_segments *seg, int band, void *workspace) {
    plans *p = plans_of_call(ca, dims, seg, band);
    if (!p) return mt_fail(MT_ERR_INVALID, "cuDNN attention: no plan for these dims");
    size_t accum_bytes = (size_t)dims.batch * mt_attn_q_rows(dims) * dims.heads * dims.head_dim * sizeof(float);
    float *accum = (float *)((char *)workspace + p->accum_offset);
    MT_CUDA_CHECK(cudaMemsetAsync(accum, 0, accum_bytes, s));
    MT_CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    if (!bottom_right(dims)) return run_backward(ca, p, &p->backward, io, accum, MASK_CAUSAL, seg, s, workspace);
    /* a window: the keys before it, then its own (dQ beside), then dQ as the two's sum */
    MT_TRY(run_backward(ca, p, &p->backward, io, accum, MASK_NONE, NULL, s, workspace));
    backward_io own = own_keys(*io, dims);
    own.dq = (char *)workspace + p->own_dq_offset;
    MT_CUDA_CHECK(cudaMemsetAsync(accum, 0, accum_bytes, s)); /* zeroed before each graph, as cuDNN asks */
    MT_TRY(run_backward(ca, p, &p->square, &own, accum, MASK_CAUSAL, NULL, s, workspace));
    return mt_cuda_add(s, io->dq, io->dq, own.dq, accum_bytes / sizeof(float));
}

mt_status mt_cudnn_attention_backward(mt_cudnn_attention *ca, cudaStream_t s, void *dq, void *dk,
                                      void *dv, const void *dout, const void *out, const float *lse,
                                      const void *q, const void *k, const void *v,
                                      mt_attn_dims dims, float scale, const mt_segments *seg, int band,
                                      void *workspace) {
    backward_io io = {.dq = dq, .dk = dk, .dv = dv, .dout = dout, .out = out, .q = q, .k = k, .v = v, .lse = lse,
                      .scale = scale};
    pthread_mutex_lock(&ca->lock);
    mt_status status = backward_locked(ca, s, &io, dims, seg, band, workspace);
    pthread_mutex_unlock(&ca->lock);
    return status;
}
