/* Causal grouped-query attention with backend.h's variants (mt_attn_params: window, scale, soft
 * cap, sinks). Query head h reads kv head h / (heads / kv_heads); query position i sees keys 0..i
 * of its own sequence (with a window, those after i - window), or with segments
 * (backend.h: packed examples) the keys of its own segment up to itself: each segment is then
 * computed exactly as a sequence of its own, the same calls on the same rows, so a packed window
 * gives the bits of its examples run alone. A window of queries (backend.h: positions [q0, q0 +
 * q_len)) sees the keys up to its last position, each query up to its own: the same computation
 * on the rows it has, tile by tile, as the whole sequence's; with segments, each segment's part
 * of the window, from the segment's first key.
 *
 * Tiling: one (sequence, head) is cut into TILE x TILE blocks of (queries, keys), key blocks at
 * multiples of TILE from the sequence's first position and query blocks from the first query.
 * Causality leaves only the blocks a query sees, about half of them (a window: about window / TILE
 * + 1 a query block), and masks within the blocks the diagonal or the window's edge crosses. A
 * block's scores are one sgemm into a TILE x TILE buffer on the stack; its products with V
 * (forward) or with dO, K and Q (backward) are sgemms too, so only the softmax is a row loop. The
 * forward folds key blocks into an online (running-max) softmax; the backward recomputes the
 * probabilities from the saved lse. A sink is one more column of the softmax, folded in last; its
 * gradient is summed after the tasks, head by head, in a fixed order.
 *
 * OpenMP runs over (sequence, head) tasks and BLAS runs single-threaded inside them (OpenBLAS
 * does so inside an active parallel region). A task's work never depends on the batch, so one
 * call over 4 sequences equals 4 calls over 1, bitwise. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

enum { TILE = 64 };

/* One (segment, head) as the tasks see it (a sequence without segments): its queries, q_rows of
 * them from position q0 of the segment; row strides in floats between positions (lse_stride: 1
 * in the [batch, heads, q rows] layout, heads in the [q rows, heads] one of segments). */
typedef struct {
    int q0, q_rows, head_dim;
    size_t q_stride, kv_stride, lse_stride;
    int window;          /* keys a query sees, itself included; 0: all before it */
    float scale, softcap; /* softcap 0: none */
} geometry;

static geometry geometry_of(mt_attn_dims dims, const mt_attn_params *params, const mt_segments *seg) {
    return (geometry){.q0 = dims.q_len > 0 ? dims.q0 : 0,
                      .q_rows = mt_attn_q_rows(dims),
                      .head_dim = dims.head_dim,
                      .q_stride = (size_t)dims.heads * dims.head_dim,
                      .kv_stride = (size_t)dims.kv_heads * dims.head_dim,
                      .lse_stride = seg ? (size_t)dims.heads : 1,
                      .window = params ? params->window : 0,
                      .scale = mt_attn_scale(params, dims.head_dim),
                      .softcap = params ? params->softcap : 0.0f};
}

/* A head's sink logit, or -inf without sinks. */
static float sink_of(const mt_attn_params *params, int h) {
    return params && params->sinks ? params->sinks[h] : -INFINITY;
}

/* The part of one segment a call's sequence b computes: the segment's first key row in the
 * sequence (k0), its queries' first row in the call's q rows (q_row: the window's rows), and in g
 * the queries' first position in the segment and their count (0: the segment has no query of the
 * window). Without segments, the sequence is the one segment. */
typedef struct {
    int k0, q_row;
    geometry g;
} part;

/* The segments of sequence b: segments first..last-1 of seg start in its rows (each sequence's
 * first row starts one); seg's rows are the micro-batch's, the call's from seg->row0. */
static void segments_of(const mt_segments *seg, int b, int seq, int *first, int *last) {
    if (!seg) {
        *first = 0, *last = 1;
        return;
    }
    int lo = 0, hi = seg->count, row = seg->row0 + b * seq;
    while (lo < hi) { /* the first segment starting at or after the sequence's first row */
        int mid = (lo + hi) / 2;
        if (seg->starts[mid] < row) lo = mid + 1;
        else hi = mid;
    }
    *first = lo;
    for (*last = lo; *last < seg->count && seg->starts[*last] < row + seq; (*last)++) {}
}

static part part_of(const mt_segments *seg, int k, int b, mt_attn_dims d, geometry whole) {
    int w0 = whole.q0, w1 = whole.q0 + whole.q_rows; /* the window's rows in the sequence */
    int s0 = seg ? seg->starts[k] - seg->row0 - b * d.seq : 0, s1 = seg ? seg->starts[k + 1] - seg->row0 - b * d.seq : d.seq;
    int from = s0 > w0 ? s0 : w0, to = s1 < w1 ? s1 : w1;
    part p = {s0, from - w0, whole};
    p.g.q0 = from - s0;
    p.g.q_rows = to > from ? to - from : 0;
    return p;
}

static int tile_len(int start, int end) { return end - start < TILE ? end - start : TILE; }

/* Row-major c[m, n] = alpha op(a) op(b) + beta c, with op(a) [m, k] and op(b) [k, n]. */
static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* s[rows, cols] = scale q k^T for query rows qi and key rows kj, capped where g has a soft cap. */
static void block_scores(float *s, const float *qi, const float *kj, int rows, int cols, const geometry *g) {
    gemm(CblasNoTrans, CblasTrans, rows, cols, g->head_dim, g->scale, qi, g->q_stride, kj, g->kv_stride,
         0.0f, s, TILE);
    if (g->softcap > 0.0f)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) s[r * TILE + c] = g->softcap * tanhf(s[r * TILE + c] / g->softcap);
}

static int clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The columns [*c0, *c1) of a block's keys (cols of them from key position j0) the query at
 * position i may see: those up to i (none where the block starts past i: a query block that does
 * not start at a multiple of TILE crosses two key blocks' diagonals) and, with a window, after
 * i - window. */
static void visible_keys(int i, int j0, int cols, int window, int *c0, int *c1) {
    *c1 = clamp(i - j0 + 1, 0, cols);
    *c0 = window > 0 ? clamp(i - window + 1 - j0, 0, *c1) : 0;
}

/* The first key block (a multiple of TILE) a query block from position `first` sees. */
static int first_key_block(int first, const geometry *g) {
    int lowest = g->window > 0 ? first - g->window + 1 : 0;
    return lowest > 0 ? lowest / TILE * TILE : 0;
}

/* Folds one key block (from key position j0) into the running softmax of the query rows (from
 * position i0): s becomes
 * p = exp(s - new max) (0 for keys a row may not see), and each row's sum and output, kept
 * relative to its old max, are rescaled to the new one. The first block a row sees keys of meets
 * max = -inf and rescales by 0; blocks before it (a window's) leave the row as it was. */
static void softmax_fold(float *s, float *max, float *sum, float *o, int rows, int cols, int i0, int j0,
                         const geometry *g) {
    for (int r = 0; r < rows; r++) {
        float *sr = s + r * TILE, *orow = o + r * g->q_stride;
        int c0, c1;
        visible_keys(i0 + r, j0, cols, g->window, &c0, &c1);
        float new_max = max[r], added = 0.0f;
#pragma omp simd reduction(max : new_max)
        for (int c = c0; c < c1; c++) new_max = sr[c] > new_max ? sr[c] : new_max;
        if (new_max == -INFINITY) { /* nothing seen yet */
            memset(sr, 0, (size_t)cols * sizeof *sr);
            continue;
        }
        float shrink = expf(max[r] - new_max);
        for (int c = c0; c < c1; c++) {
            sr[c] = expf(sr[c] - new_max);
            added += sr[c];
        }
        memset(sr, 0, (size_t)c0 * sizeof *sr);
        memset(sr + c1, 0, (size_t)(cols - c1) * sizeof *sr);
        sum[r] = sum[r] * shrink + added;
        max[r] = new_max;
        for (int j = 0; j < g->head_dim; j++) orow[j] *= shrink;
    }
}

/* Folds the sink logit (no value) into a row's softmax as its last column. */
static void fold_sink(float sink, float *max, float *sum, float *orow, int head_dim) {
    float new_max = sink > *max ? sink : *max, shrink = expf(*max - new_max);
    *sum = *sum * shrink + expf(sink - new_max);
    *max = new_max;
    for (int j = 0; j < head_dim; j++) orow[j] *= shrink;
}

/* One (sequence, head): out, q at its first query row's head slice, k and v at its kv head's
 * first position; sink: the head's, or -inf. Query block i0 (from the first query) sees the key
 * blocks from its first query's window up to the position of its last query. */
static void attend_head(float *out, float *lse, const float *q, const float *k, const float *v, float sink,
                        const geometry *g) {
    float s[TILE * TILE], max[TILE], sum[TILE];
    for (int i0 = 0; i0 < g->q_rows; i0 += TILE) {
        int rows = tile_len(i0, g->q_rows), first = g->q0 + i0, last = first + rows - 1;
        const float *qi = q + i0 * g->q_stride;
        float *o = out + i0 * g->q_stride;
        for (int r = 0; r < rows; r++) {
            max[r] = -INFINITY;
            sum[r] = 0.0f;
            memset(o + r * g->q_stride, 0, (size_t)g->head_dim * sizeof *o);
        }
        for (int j0 = first_key_block(first, g); j0 <= last; j0 += TILE) {
            int cols = tile_len(j0, last + 1);
            block_scores(s, qi, k + j0 * g->kv_stride, rows, cols, g);
            softmax_fold(s, max, sum, o, rows, cols, first, j0, g);
            gemm(CblasNoTrans, CblasNoTrans, rows, g->head_dim, cols, 1.0f, s, TILE, v + j0 * g->kv_stride,
                 g->kv_stride, 1.0f, o, g->q_stride);
        }
        for (int r = 0; r < rows; r++) {
            float *orow = o + r * g->q_stride;
            if (sink > -INFINITY) fold_sink(sink, &max[r], &sum[r], orow, g->head_dim);
            for (int j = 0; j < g->head_dim; j++) orow[j] /= sum[r];
            lse[(size_t)(i0 + r) * g->lse_stride] = max[r] + logf(sum[r]);
        }
    }
}

/* Where sequence b's rows start: its queries' (q_rows a sequence) and its keys' (seq a sequence). */
static size_t q_row0(mt_attn_dims d, int b) { return (size_t)b * mt_attn_q_rows(d); }
static size_t kv_row0(mt_attn_dims d, int b) { return (size_t)b * d.seq; }

/* Where (sequence b, head h)'s lse starts in either layout, at its query row r. */
static size_t lse_at(mt_attn_dims d, const mt_segments *seg, int b, int h, int r) {
    size_t rows = (size_t)mt_attn_q_rows(d);
    return seg ? ((size_t)b * rows + r) * d.heads + h : ((size_t)b * d.heads + h) * rows + r;
}

void mt_cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, mt_attn_dims dims,
                      const mt_attn_params *params, const mt_segments *seg) {
    const geometry whole = geometry_of(dims, params, seg);
    const int heads = dims.heads, group = heads / dims.kv_heads;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < dims.batch; b++) {
        for (int h = 0; h < heads; h++) {
            int first, last;
            segments_of(seg, b, dims.seq, &first, &last);
            for (int s = first; s < last; s++) {
                part p = part_of(seg, s, b, dims, whole);
                if (!p.g.q_rows) continue;
                size_t q_at = (q_row0(dims, b) + p.q_row) * whole.q_stride + (size_t)h * whole.head_dim;
                size_t kv_at = (kv_row0(dims, b) + p.k0) * whole.kv_stride + (size_t)(h / group) * whole.head_dim;
                attend_head(out + q_at, lse + lse_at(dims, seg, b, h, p.q_row), q + q_at, k + kv_at, v + kv_at,
                            sink_of(params, h), &p.g);
            }
        }
    }
}

/* workspace: delta[batch, heads, q rows] = dout . out per query row (the softmax backward's
 * row constant). */
size_t mt_cpu_attention_workspace(mt_attn_dims dims) {
    return (size_t)dims.batch * dims.heads * mt_attn_q_rows(dims) * sizeof(float);
}

/* The pointers of one (sequence, query head) in the backward, each at its first row's head
 * slice; dk and dv are its kv head's, shared with the other heads of its group. */
typedef struct {
    float *dq, *dk, *dv, *delta;
    const float *dout, *out, *lse, *q, *k, *v;
} head_grads;

/* delta[i] = dout_i . out_i over one head's query rows. */
static void row_dots(float *delta, const float *dout, const float *out, const geometry *g) {
    for (int i = 0; i < g->q_rows; i++) {
        const float *a = dout + i * g->q_stride, *b = out + i * g->q_stride;
        float s = 0.0f;
        for (int j = 0; j < g->head_dim; j++) s += a[j] * b[j];
        delta[i] = s;
    }
}

/* Turns a block's scores s into p = exp(s - lse) and its dp = dout v^T into
 * ds = p * (dp - delta), row by row, times the cap's derivative 1 - (s / softcap)^2 where g has
 * one; keys a row may not see get p = ds = 0. Query rows from position i0, keys from j0; row r's
 * lse is lse[r * lse_stride]. */
static void softmax_backward(float *s, float *dp, const float *lse, const float *delta, int rows, int cols, int i0,
                             int j0, const geometry *g) {
    for (int r = 0; r < rows; r++) {
        float *pr = s + r * TILE, *dsr = dp + r * TILE;
        int c0, c1;
        visible_keys(i0 + r, j0, cols, g->window, &c0, &c1);
        float lse_r = lse[(size_t)r * g->lse_stride];
        for (int c = c0; c < c1; c++) {
            float capped = pr[c];
            pr[c] = expf(capped - lse_r);
            dsr[c] = pr[c] * (dsr[c] - delta[r]);
            if (g->softcap > 0.0f) dsr[c] *= 1.0f - (capped / g->softcap) * (capped / g->softcap);
        }
        memset(pr, 0, (size_t)c0 * sizeof *pr);
        memset(dsr, 0, (size_t)c0 * sizeof *dsr);
        memset(pr + c1, 0, (size_t)(cols - c1) * sizeof *pr);
        memset(dsr + c1, 0, (size_t)(cols - c1) * sizeof *dsr);
    }
}

/* With p = exp(s - lse) and ds = p * (dout_i . v_j - delta_i) (times the cap's derivative), per block:
 * dv_j += p^T dout_i, dq_i += scale ds k_j, dk_j += scale ds^T q_i. p and ds are block
 * buffers. */
static void head_backward(const head_grads *t, const geometry *g) {
    float p[TILE * TILE], ds[TILE * TILE];
    const int hd = g->head_dim;
    const size_t qs = g->q_stride, kvs = g->kv_stride;
    row_dots(t->delta, t->dout, t->out, g);
    for (int i0 = 0; i0 < g->q_rows; i0 += TILE) {
        int rows = tile_len(i0, g->q_rows), first = g->q0 + i0, last = first + rows - 1;
        const float *qi = t->q + i0 * qs, *doi = t->dout + i0 * qs;
        for (int j0 = first_key_block(first, g); j0 <= last; j0 += TILE) {
            int cols = tile_len(j0, last + 1);
            const float *kj = t->k + j0 * kvs, *vj = t->v + j0 * kvs;
            block_scores(p, qi, kj, rows, cols, g);
            gemm(CblasNoTrans, CblasTrans, rows, cols, hd, 1.0f, doi, qs, vj, kvs, 0.0f, ds, TILE);
            softmax_backward(p, ds, t->lse + (size_t)i0 * g->lse_stride, t->delta + i0, rows, cols, first, j0, g);
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

/* dsinks[h] += -sum over the call's query rows of p_sink delta, p_sink = exp(sink - lse): the sink
 * column's ds (its dp is 0, having no value). A task a head, rows in order, each sequence's sum
 * added on its own: one call over 4 sequences gives the bits of 4 calls over 1. */
static void sinks_backward(float *dsinks, const float *sinks, const float *delta, const float *lse,
                           mt_attn_dims dims, const mt_segments *seg) {
    const int q_rows = mt_attn_q_rows(dims);
#pragma omp parallel for schedule(static)
    for (int h = 0; h < dims.heads; h++) {
        for (int b = 0; b < dims.batch; b++) {
            float sum = 0.0f;
            for (int r = 0; r < q_rows; r++)
                sum += expf(sinks[h] - lse[lse_at(dims, seg, b, h, r)]) * delta[((size_t)b * dims.heads + h) * q_rows + r];
            dsinks[h] -= sum;
        }
    }
}

/* Each task owns one (sequence, kv head): its dk and dv and the dq rows of its group's query
 * heads. It walks its segments, and in each the query heads in order, so the sums into dk and dv
 * have a fixed order. */
void mt_cpu_attention_dx(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         mt_attn_dims dims, const mt_attn_params *params, const mt_segments *seg, void *workspace) {
    const geometry whole = geometry_of(dims, params, seg);
    const int heads = dims.heads, group = heads / dims.kv_heads, kv_rows = mt_attn_kv_rows(dims);
    float *delta = workspace;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < dims.batch; b++) {
        for (int kvh = 0; kvh < dims.kv_heads; kvh++) {
            size_t kv_seq = kv_row0(dims, b) * whole.kv_stride + (size_t)kvh * whole.head_dim;
            size_t q_group_at = q_row0(dims, b) * whole.q_stride + (size_t)kvh * group * whole.head_dim;
            zero_rows(dk + kv_seq, whole.kv_stride, kv_rows, whole.head_dim);
            zero_rows(dv + kv_seq, whole.kv_stride, kv_rows, whole.head_dim);
            zero_rows(dq + q_group_at, whole.q_stride, whole.q_rows, group * whole.head_dim);
            int first, last;
            segments_of(seg, b, dims.seq, &first, &last);
            for (int s = first; s < last; s++) {
                part p = part_of(seg, s, b, dims, whole);
                if (!p.g.q_rows) continue;
                size_t kv_at = kv_seq + (size_t)p.k0 * whole.kv_stride;
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    size_t q_at = (q_row0(dims, b) + p.q_row) * whole.q_stride + (size_t)h * whole.head_dim;
                    size_t delta_at = ((size_t)b * heads + h) * whole.q_rows + p.q_row;
                    head_grads t = {dq + q_at, dk + kv_at, dv + kv_at, delta + delta_at, dout + q_at, out + q_at,
                                    lse + lse_at(dims, seg, b, h, p.q_row), q + q_at, k + kv_at, v + kv_at};
                    head_backward(&t, &p.g);
                }
            }
        }
    }
    if (params && params->sinks && params->dsinks) sinks_backward(params->dsinks, params->sinks, delta, lse, dims, seg);
}
