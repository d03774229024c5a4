/* Causal grouped-query attention, scale 1/sqrt(head_dim). Query head h reads kv head
 * h / (heads / kv_heads); query position i sees keys 0..i of its own sequence, or with segments
 * (backend.h: packed examples) the keys of its own segment up to itself: each segment is then
 * computed exactly as a sequence of its own, the same calls on the same rows, so a packed window
 * gives the bits of its examples run alone.
 *
 * Tiling: one (sequence, head) is cut into TILE x TILE blocks of (queries, keys). Causality
 * leaves only the blocks on and below the diagonal, about half of them, and masks the upper
 * triangle of the diagonal block. A block's scores are one sgemm into a TILE x TILE buffer on
 * the stack; its products with V (forward) or with dO, K and Q (backward) are sgemms too, so
 * only the softmax is a row loop. The forward folds key blocks into an online (running-max)
 * softmax; the backward recomputes the probabilities from the saved lse.
 *
 * OpenMP runs over (sequence, head) tasks and BLAS runs single-threaded inside them (OpenBLAS
 * does so inside an active parallel region). A task's work never depends on the batch, so one
 * call over 4 sequences equals 4 calls over 1, bitwise. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

enum { TILE = 64 };

/* One (segment, head) as the tasks see it: its length, row strides in floats between positions
 * (lse_stride: 1 in the [batch, heads, seq] layout, heads in the [n, heads] one of segments). */
typedef struct {
    int seq, head_dim;
    size_t q_stride, kv_stride, lse_stride;
    float scale;
} geometry;

static geometry geometry_of(mt_attn_dims dims, const mt_segments *seg) {
    return (geometry){.seq = dims.seq,
                      .head_dim = dims.head_dim,
                      .q_stride = (size_t)dims.heads * dims.head_dim,
                      .kv_stride = (size_t)dims.kv_heads * dims.head_dim,
                      .lse_stride = seg ? (size_t)dims.heads : 1,
                      .scale = 1.0f / sqrtf((float)dims.head_dim)};
}

/* The segments of sequence b: rows [*first, ...) of the sequence start segments first..last-1 of
 * seg (each sequence's first row starts one); without segments, the sequence alone. */
static void segments_of(const mt_segments *seg, int b, int seq, int *first, int *last) {
    if (!seg) {
        *first = 0, *last = 1;
        return;
    }
    int lo = 0, hi = seg->count, row = b * seq;
    while (lo < hi) { /* the first segment starting at or after the sequence's first row */
        int mid = (lo + hi) / 2;
        if (seg->starts[mid] < row) lo = mid + 1;
        else hi = mid;
    }
    *first = lo;
    for (*last = lo; *last < seg->count && seg->starts[*last] < row + seq; (*last)++) {}
}

/* Segment k of sequence b: its first row within the sequence and its length. */
static void segment_rows(const mt_segments *seg, int k, int b, int seq, int *r0, int *len) {
    *r0 = seg ? seg->starts[k] - b * seq : 0;
    *len = seg ? seg->starts[k + 1] - seg->starts[k] : seq;
}

/* Where (sequence b, head h)'s lse starts in either layout. */
static size_t lse_at(mt_attn_dims d, const mt_segments *seg, int b, int h) {
    return seg ? (size_t)b * d.seq * d.heads + h : ((size_t)b * d.heads + h) * d.seq;
}

static int tile_len(int start, int seq) { return seq - start < TILE ? seq - start : TILE; }

/* Row-major c[m, n] = alpha op(a) op(b) + beta c, with op(a) [m, k] and op(b) [k, n]. */
static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* s[rows, cols] = scale q k^T for query rows qi and key rows kj. */
static void block_scores(float *s, const float *qi, const float *kj, int rows, int cols, const geometry *g) {
    gemm(CblasNoTrans, CblasTrans, rows, cols, g->head_dim, g->scale, qi, g->q_stride, kj, g->kv_stride,
         0.0f, s, TILE);
}

/* How many of a block's keys row r may see: all of them, except in the diagonal block (same
 * first position), where it sees keys up to itself. */
static int visible_keys(int r, int cols, int diagonal) { return diagonal && r + 1 < cols ? r + 1 : cols; }

/* Folds one key block into the running softmax of the query rows: s becomes
 * p = exp(s - new max) (0 for keys a row may not see), and each row's sum and output, kept
 * relative to its old max, are rescaled to the new one. The first block sees max = -inf and
 * rescales by 0. */
static void softmax_fold(float *s, float *max, float *sum, float *o, int rows, int cols, int diagonal,
                         const geometry *g) {
    for (int r = 0; r < rows; r++) {
        float *sr = s + r * TILE, *orow = o + r * g->q_stride;
        int visible = visible_keys(r, cols, diagonal);
        float new_max = max[r], added = 0.0f;
#pragma omp simd reduction(max : new_max)
        for (int c = 0; c < visible; c++) new_max = sr[c] > new_max ? sr[c] : new_max;
        float shrink = expf(max[r] - new_max);
        for (int c = 0; c < visible; c++) {
            sr[c] = expf(sr[c] - new_max);
            added += sr[c];
        }
        memset(sr + visible, 0, (size_t)(cols - visible) * sizeof *sr);
        sum[r] = sum[r] * shrink + added;
        max[r] = new_max;
        for (int j = 0; j < g->head_dim; j++) orow[j] *= shrink;
    }
}

/* One (sequence, head): out, q at its first row's head slice, k and v at its kv head's. */
static void attend_head(float *out, float *lse, const float *q, const float *k, const float *v,
                        const geometry *g) {
    float s[TILE * TILE], max[TILE], sum[TILE];
    for (int i0 = 0; i0 < g->seq; i0 += TILE) {
        int rows = tile_len(i0, g->seq);
        const float *qi = q + i0 * g->q_stride;
        float *o = out + i0 * g->q_stride;
        for (int r = 0; r < rows; r++) {
            max[r] = -INFINITY;
            sum[r] = 0.0f;
            memset(o + r * g->q_stride, 0, (size_t)g->head_dim * sizeof *o);
        }
        for (int j0 = 0; j0 <= i0; j0 += TILE) {
            int cols = tile_len(j0, g->seq);
            block_scores(s, qi, k + j0 * g->kv_stride, rows, cols, g);
            softmax_fold(s, max, sum, o, rows, cols, j0 == i0, g);
            gemm(CblasNoTrans, CblasNoTrans, rows, g->head_dim, cols, 1.0f, s, TILE, v + j0 * g->kv_stride,
                 g->kv_stride, 1.0f, o, g->q_stride);
        }
        for (int r = 0; r < rows; r++) {
            float *orow = o + r * g->q_stride;
            for (int j = 0; j < g->head_dim; j++) orow[j] /= sum[r];
            lse[(size_t)(i0 + r) * g->lse_stride] = max[r] + logf(sum[r]);
        }
    }
}

void mt_cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, mt_attn_dims dims,
                      const mt_segments *seg) {
    const geometry whole = geometry_of(dims, seg);
    const int heads = dims.heads, group = heads / dims.kv_heads;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < dims.batch; b++) {
        for (int h = 0; h < heads; h++) {
            int first, last;
            segments_of(seg, b, dims.seq, &first, &last);
            for (int s = first; s < last; s++) {
                geometry g = whole;
                int r0;
                segment_rows(seg, s, b, dims.seq, &r0, &g.seq);
                size_t row = (size_t)b * dims.seq + (size_t)r0;
                size_t q_at = row * g.q_stride + (size_t)h * g.head_dim;
                size_t kv_at = row * g.kv_stride + (size_t)(h / group) * g.head_dim;
                float *lse_bh = lse + lse_at(dims, seg, b, h) + (size_t)r0 * g.lse_stride;
                attend_head(out + q_at, lse_bh, q + q_at, k + kv_at, v + kv_at, &g);
            }
        }
    }
}

/* workspace: delta[batch, heads, seq] = dout . out per query row (the softmax backward's
 * row constant). */
size_t mt_cpu_attention_workspace(mt_attn_dims dims) {
    return (size_t)dims.batch * dims.heads * dims.seq * sizeof(float);
}

/* The pointers of one (sequence, query head) in the backward, each at its first row's head
 * slice; dk and dv are its kv head's, shared with the other heads of its group. */
typedef struct {
    float *dq, *dk, *dv, *delta;
    const float *dout, *out, *lse, *q, *k, *v;
} head_grads;

/* delta[i] = dout_i . out_i over one head's rows. */
static void row_dots(float *delta, const float *dout, const float *out, const geometry *g) {
    for (int i = 0; i < g->seq; i++) {
        const float *a = dout + i * g->q_stride, *b = out + i * g->q_stride;
        float s = 0.0f;
        for (int j = 0; j < g->head_dim; j++) s += a[j] * b[j];
        delta[i] = s;
    }
}

/* Turns a block's scores s into p = exp(s - lse) and its dp = dout v^T into
 * ds = p * (dp - delta), row by row; keys a row may not see get p = ds = 0. Row r's lse is
 * lse[r * lse_stride]. */
static void softmax_backward(float *s, float *dp, const float *lse, size_t lse_stride, const float *delta, int rows,
                             int cols, int diagonal) {
    for (int r = 0; r < rows; r++) {
        float *pr = s + r * TILE, *dsr = dp + r * TILE;
        int visible = visible_keys(r, cols, diagonal);
        float lse_r = lse[(size_t)r * lse_stride];
        for (int c = 0; c < visible; c++) {
            pr[c] = expf(pr[c] - lse_r);
            dsr[c] = pr[c] * (dsr[c] - delta[r]);
        }
        memset(pr + visible, 0, (size_t)(cols - visible) * sizeof *pr);
        memset(dsr + visible, 0, (size_t)(cols - visible) * sizeof *dsr);
    }
}

/* With p = exp(s - lse) and ds = p * (dout_i . v_j - delta_i), per block:
 * dv_j += p^T dout_i, dq_i += scale ds k_j, dk_j += scale ds^T q_i. p and ds are block
 * buffers. */
static void head_backward(const head_grads *t, const geometry *g) {
    float p[TILE * TILE], ds[TILE * TILE];
    const int hd = g->head_dim;
    const size_t qs = g->q_stride, kvs = g->kv_stride;
    row_dots(t->delta, t->dout, t->out, g);
    for (int i0 = 0; i0 < g->seq; i0 += TILE) {
        int rows = tile_len(i0, g->seq);
        const float *qi = t->q + i0 * qs, *doi = t->dout + i0 * qs;
        for (int j0 = 0; j0 <= i0; j0 += TILE) {
            int cols = tile_len(j0, g->seq);
            const float *kj = t->k + j0 * kvs, *vj = t->v + j0 * kvs;
            block_scores(p, qi, kj, rows, cols, g);
            gemm(CblasNoTrans, CblasTrans, rows, cols, hd, 1.0f, doi, qs, vj, kvs, 0.0f, ds, TILE);
            softmax_backward(p, ds, t->lse + (size_t)i0 * g->lse_stride, g->lse_stride, t->delta + i0, rows, cols,
                             j0 == i0);
            float *dqi = t->dq + i0 * qs, *dkj = t->dk + j0 * kvs, *dvj = t->dv + j0 * kvs;
            gemm(CblasTrans, CblasNoTrans, cols, hd, rows, 1.0f, p, TILE, doi, qs, 1.0f, dvj, kvs);
            gemm(CblasNoTrans, CblasNoTrans, rows, hd, cols, g->scale, ds, TILE, kj, kvs, 1.0f, dqi, qs);
            gemm(CblasTrans, CblasNoTrans, cols, hd, rows, g->scale, ds, TILE, qi, qs, 1.0f, dkj, kvs);
        }
    }
}

static void zero_rows(float *x, size_t stride, int rows, int len) {
    for (int r = 0; r < rows; r++) memset(x + r * stride, 0, (size_t)len * sizeof *x);
}

/* Each task owns one (sequence, kv head): its dk and dv and the dq rows of its group's query
 * heads. It walks its segments, and in each the query heads in order, so the sums into dk and dv
 * have a fixed order. */
void mt_cpu_attention_dx(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         mt_attn_dims dims, const mt_segments *seg, void *workspace) {
    const geometry whole = geometry_of(dims, seg);
    const int heads = dims.heads, group = heads / dims.kv_heads;
    float *delta = workspace;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < dims.batch; b++) {
        for (int kvh = 0; kvh < dims.kv_heads; kvh++) {
            size_t kv_seq = (size_t)b * dims.seq * whole.kv_stride + (size_t)kvh * whole.head_dim;
            size_t q_seq = (size_t)b * dims.seq * whole.q_stride + (size_t)kvh * group * whole.head_dim;
            zero_rows(dk + kv_seq, whole.kv_stride, dims.seq, whole.head_dim);
            zero_rows(dv + kv_seq, whole.kv_stride, dims.seq, whole.head_dim);
            zero_rows(dq + q_seq, whole.q_stride, dims.seq, group * whole.head_dim);
            int first, last;
            segments_of(seg, b, dims.seq, &first, &last);
            for (int s = first; s < last; s++) {
                geometry g = whole;
                int r0;
                segment_rows(seg, s, b, dims.seq, &r0, &g.seq);
                size_t row = (size_t)b * dims.seq + (size_t)r0;
                size_t kv_at = row * g.kv_stride + (size_t)kvh * g.head_dim;
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    size_t q_at = row * g.q_stride + (size_t)h * g.head_dim;
                    size_t delta_at = ((size_t)b * heads + h) * dims.seq + (size_t)r0;
                    const float *lse_at_row = lse + lse_at(dims, seg, b, h) + (size_t)r0 * g.lse_stride;
                    head_grads t = {dq + q_at, dk + kv_at, dv + kv_at, delta + delta_at, dout + q_at, out + q_at,
                                    lse_at_row, q + q_at, k + kv_at, v + kv_at};
                    head_backward(&t, &g);
                }
            }
        }
    }
}
