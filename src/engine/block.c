#include "engine/block.h"

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

mt_unit_weights mt_bind_weights(const mt_layout *lay, int u, const void *base, mt_dtype dtype) {
    mt_unit_weights w = {{0}};
    for (int k = 0; k < MT_T_COUNT; k++) {
        const mt_tensor *t = mt_layout_tensor(lay, u, k);
        if (t) w.t[k] = (const char *)base + t->offset * (int64_t)mt_dtype_size(dtype);
    }
    return w;
}

mt_unit_grads mt_bind_grads(const mt_layout *lay, int u, float *base) {
    mt_unit_grads g = {{0}};
    for (int k = 0; k < MT_T_COUNT; k++) {
        const mt_tensor *t = mt_layout_tensor(lay, u, k);
        if (t) g.t[k] = base + t->offset;
    }
    return g;
}

int mt_block_piece_rows(int batch, int seq, int chunk) {
    int n = batch * seq;
    if (chunk <= 0 || chunk >= n) return n;
    if (chunk >= seq) return chunk / seq * seq;
    return chunk;
}

/* Walks the workspace's buffers in one fixed order, either summing sizes or carving pointers. */
static size_t layout_ws(mt_block_ws *ws, char *base, mt_backend *be, const mt_config *c, int batch, int seq,
                        int chunk, int segmented) {
    size_t n = (size_t)batch * seq, act = mt_dtype_size(be->ops->act_dtype);
    /* Any job's pieces (a sample's shorter sequence too) are at most chunk rows, and at most n. */
    size_t C = chunk > 0 && (size_t)chunk < n ? (size_t)chunk : n;
    size_t D = c->hidden_size, F = c->intermediate_size;
    size_t Q = (size_t)c->num_heads * c->head_dim, KV = (size_t)c->num_kv_heads * c->head_dim;
    mt_attn_dims dims = {batch, seq, c->num_heads, c->num_kv_heads, c->head_dim};
    size_t off = 0;
#define CARVE(field, bytes)                                  \
    do {                                                     \
        if (ws) ws->field = (void *)(base + off);            \
        off += align256(bytes);                              \
    } while (0)
    CARVE(h1, C * D * act);
    CARVE(q, n * Q * act);
    CARVE(k, n * KV * act);
    CARVE(v, n * KV * act);
    CARVE(att, n * Q * act);
    CARVE(x2, n * D * act);
    CARVE(h2, C * D * act);
    CARVE(g, C * F * act);
    CARVE(u, C * F * act);
    CARVE(a, C * F * act);
    CARVE(tmp, C * (F > D ? F : D) * act);
    CARVE(dq, n * Q * act);
    CARVE(dk, n * KV * act);
    CARVE(dv, n * KV * act);
    CARVE(datt, n * Q * act);
    CARVE(dg, C * F * act);
    CARVE(du, C * F * act);
    CARVE(rstd1, n * 4);
    CARVE(rstd2, n * 4);
    CARVE(lse, (size_t)batch * c->num_heads * seq * 4);
    CARVE(attn_ws, be->ops->op.attention_workspace(be, dims, segmented));
    if (c->qk_norm) {
        CARVE(q_raw, n * Q * act);
        CARVE(k_raw, n * KV * act);
        CARVE(rstd_q, n * c->num_heads * 4);
        CARVE(rstd_k, n * c->num_kv_heads * 4);
    }
#undef CARVE
    return off;
}

size_t mt_block_ws_bytes(mt_backend *be, const mt_config *c, int batch, int seq, int chunk, int segmented) {
    return layout_ws(NULL, NULL, be, c, batch, seq, chunk, segmented);
}

void mt_block_ws_carve(mt_block_ws *ws, void *base, mt_backend *be, const mt_config *c, int batch, int seq,
                       int chunk, int segmented) {
    layout_ws(ws, base, be, c, batch, seq, chunk, segmented);
}

/* Rows [row, row + rows) of the micro-batch: one piece (mt_block_piece_rows). */
typedef struct {
    int row, rows;
} piece;

/* The piece that starts at `row`: whole sequences, or the rest of one sequence up to chunk. */
static piece piece_at(const mt_block_ctx *c, int row) {
    int n = c->batch * c->seq, most = mt_block_piece_rows(c->batch, c->seq, c->chunk);
    int rows = most >= c->seq ? most : c->seq - row % c->seq;
    if (rows > most) rows = most;
    if (rows > n - row) rows = n - row;
    return (piece){row, rows};
}

#define FOR_EACH_PIECE(c, p) for (piece p = piece_at(c, 0); p.row < (c)->batch * (c)->seq; p = piece_at(c, p.row + p.rows))

static const void *rows_at(const void *base, int row, int width, size_t act) {
    return (const char *)base + (size_t)row * width * act;
}
static void *rows_at_mut(void *base, int row, int width, size_t act) {
    return (char *)base + (size_t)row * width * act;
}

/* The calls one piece's GEMM is issued in: one sequence (or part of one) at a time where the
 * backend asks (backend.h: gemm_by_sequence) or where a weight gradient accumulates, else the
 * whole piece. */
static int rows_per_call(const mt_block_ctx *c, piece p, int by_sequence) {
    return by_sequence && p.rows > c->seq ? c->seq : p.rows;
}

/* y[p] = x[p] . w^T (+ bias); x and y point at the piece's first row. */
static void matmul_piece(const mt_block_ctx *c, piece p, void *y, const void *x, const void *w, const void *bias,
                         int in, int out) {
    int per_call = rows_per_call(c, p, c->be->ops->gemm_by_sequence);
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    for (int r = 0; r < p.rows; r += per_call)
        c->be->ops->op.matmul(c->be, c->stream, rows_at_mut(y, r, out, act), rows_at(x, r, in, act), w, bias,
                              per_call, in, out);
}

static void matmul_dx_piece(const mt_block_ctx *c, piece p, void *dx, const void *dy, const void *w, int in,
                            int out, int accumulate) {
    int per_call = rows_per_call(c, p, c->be->ops->gemm_by_sequence);
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    for (int r = 0; r < p.rows; r += per_call)
        c->be->ops->op.matmul_dx(c->be, c->stream, rows_at_mut(dx, r, in, act), rows_at(dy, r, out, act), w,
                                 per_call, in, out, accumulate);
}

/* dw += dy^T x one sequence (or one piece of a sequence) at a time (see block.h). */
static void matmul_dw_piece(const mt_block_ctx *c, piece p, float *dw, float *dbias, const void *dy, const void *x,
                            int in, int out) {
    int per_call = rows_per_call(c, p, 1);
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    for (int r = 0; r < p.rows; r += per_call)
        c->be->ops->op.matmul_dw(c->be, c->stream, dw, dbias, rows_at(dy, r, out, act), rows_at(x, r, in, act),
                                 per_call, in, out);
}

/* The whole micro-batch as one piece per sequence: for the ops on attention's O(n) buffers. */
static piece whole(const mt_block_ctx *c) { return (piece){0, c->batch * c->seq}; }

/* The norm's rows are `per_token` rows of width d per token: 1 for the hidden-size norms, the
 * heads for the q/k norms (a token's [heads * head_dim] row is heads rows of head_dim). dx is
 * added to (the residual path's gradient) or, with accumulate 0, written. The pointers are at the
 * piece's first token; rstd too. */
static void rmsnorm_dx_piece(const mt_block_ctx *c, piece p, void *dx, float *dw, const void *dy, const void *x,
                             const void *w, const float *rstd, int per_token, int d, int accumulate) {
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int per_call = rows_per_call(c, p, 1);
    for (int r = 0; r < p.rows; r += per_call) {
        int row = r * per_token, rows = per_call * per_token;
        c->be->ops->op.rmsnorm_dx(c->be, c->stream, rows_at_mut(dx, row, d, act), dw, rows_at(dy, row, d, act),
                                  rows_at(x, row, d, act), w, rstd + row, rows, d, accumulate);
    }
}

/* h1 = the attention norm of x's piece p (and its statistics into rstd1). */
static void attn_norm_piece(const mt_block_ctx *c, const mt_unit_weights *w, piece p, const void *x) {
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int D = c->cfg->hidden_size;
    c->be->ops->op.rmsnorm(c->be, c->stream, c->ws->h1, c->ws->rstd1 + p.row, rows_at(x, p.row, D, act),
                           w->t[MT_T_ATTN_NORM], p.rows, D, c->cfg->rms_norm_eps);
}

/* Everything the attention's backward needs: q, k, v (roped), att, lse and x2 over the whole
 * micro-batch (and q_raw, k_raw and their statistics with q/k norms); the norm and projections
 * one piece at a time. */
static void forward_attention(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_dtype_size(be->ops->act_dtype);
    int n = c->batch * c->seq, D = cfg->hidden_size;
    int Q = cfg->num_heads * cfg->head_dim, KV = cfg->num_kv_heads * cfg->head_dim;
    mt_attn_dims dims = {c->batch, c->seq, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim};
    void *q = cfg->qk_norm ? ws->q_raw : ws->q, *k = cfg->qk_norm ? ws->k_raw : ws->k;

    FOR_EACH_PIECE(c, p) {
        attn_norm_piece(c, w, p, x);
        matmul_piece(c, p, rows_at_mut(q, p.row, Q, act), ws->h1, w->t[MT_T_WQ], w->t[MT_T_BQ], D, Q);
        matmul_piece(c, p, rows_at_mut(k, p.row, KV, act), ws->h1, w->t[MT_T_WK], w->t[MT_T_BK], D, KV);
        matmul_piece(c, p, rows_at_mut(ws->v, p.row, KV, act), ws->h1, w->t[MT_T_WV], w->t[MT_T_BV], D, KV);
    }
    if (cfg->qk_norm) { /* each head's head_dim values normalized on their own: rows of head_dim */
        op->rmsnorm(be, s, ws->q, ws->rstd_q, ws->q_raw, w->t[MT_T_Q_NORM], n * cfg->num_heads, cfg->head_dim,
                    cfg->rms_norm_eps);
        op->rmsnorm(be, s, ws->k, ws->rstd_k, ws->k_raw, w->t[MT_T_K_NORM], n * cfg->num_kv_heads,
                    cfg->head_dim, cfg->rms_norm_eps);
    }
    const int32_t *pos = c->seg ? c->seg->pos : NULL;
    op->rope(be, s, ws->q, c->inv_freq, n, c->seq, pos, cfg->num_heads, cfg->head_dim, 0);
    op->rope(be, s, ws->k, c->inv_freq, n, c->seq, pos, cfg->num_kv_heads, cfg->head_dim, 0);
    op->attention(be, s, ws->att, ws->lse, ws->q, ws->k, ws->v, dims, c->seg, ws->attn_ws);
    FOR_EACH_PIECE(c, p) {
        matmul_piece(c, p, ws->tmp, rows_at(ws->att, p.row, Q, act), w->t[MT_T_WO], NULL, Q, D);
        op->add(be, s, rows_at_mut(ws->x2, p.row, D, act), rows_at(x, p.row, D, act), ws->tmp, (size_t)p.rows * D);
    }
}

/* h2, g, u, a of piece p: the MLP's input side, from x2. */
static void forward_mlp_piece(const mt_block_ctx *c, const mt_unit_weights *w, piece p) {
    const mt_op_iface *op = &c->be->ops->op;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int D = cfg->hidden_size, F = cfg->intermediate_size;
    op->rmsnorm(c->be, c->stream, ws->h2, ws->rstd2 + p.row, rows_at(ws->x2, p.row, D, act), w->t[MT_T_MLP_NORM],
                p.rows, D, cfg->rms_norm_eps);
    matmul_piece(c, p, ws->g, ws->h2, w->t[MT_T_WG], NULL, D, F);
    matmul_piece(c, p, ws->u, ws->h2, w->t[MT_T_WU], NULL, D, F);
    op->swiglu(c->be, c->stream, ws->a, ws->g, ws->u, (size_t)p.rows * F);
}

void mt_block_forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x, void *y) {
    const mt_config *cfg = c->cfg;
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int D = cfg->hidden_size, F = cfg->intermediate_size;
    forward_attention(c, w, x);
    FOR_EACH_PIECE(c, p) {
        forward_mlp_piece(c, w, p);
        matmul_piece(c, p, c->ws->tmp, c->ws->a, w->t[MT_T_WD], NULL, F, D);
        c->be->ops->op.add(c->be, c->stream, rows_at_mut(y, p.row, D, act), rows_at(c->ws->x2, p.row, D, act),
                           c->ws->tmp, (size_t)p.rows * D);
    }
}

/* MLP backward of piece p: y = x2 + down(a), a = silu(g) * u, g = gate(h2), u = up(h2),
 * h2 = norm(x2). dxy (the piece's rows) holds dL/dy and becomes dL/dx2: the residual path plus
 * the norm's input gradient. */
static void mlp_backward_piece(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, piece p,
                               void *dxy) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int D = cfg->hidden_size, F = cfg->intermediate_size;
    void *dy = rows_at_mut(dxy, p.row, D, act);
    forward_mlp_piece(c, w, p);
    matmul_dw_piece(c, p, g->t[MT_T_WD], NULL, dy, ws->a, F, D);
    matmul_dx_piece(c, p, ws->tmp, dy, w->t[MT_T_WD], F, D, 0);           /* da */
    c->be->ops->op.swiglu_dx(c->be, c->stream, ws->dg, ws->du, ws->tmp, ws->g, ws->u, (size_t)p.rows * F);
    matmul_dw_piece(c, p, g->t[MT_T_WG], NULL, ws->dg, ws->h2, D, F);
    matmul_dw_piece(c, p, g->t[MT_T_WU], NULL, ws->du, ws->h2, D, F);
    matmul_dx_piece(c, p, ws->tmp, ws->dg, w->t[MT_T_WG], D, F, 0);        /* dh2 */
    matmul_dx_piece(c, p, ws->tmp, ws->du, w->t[MT_T_WU], D, F, 1);
    rmsnorm_dx_piece(c, p, dy, g->t[MT_T_MLP_NORM], ws->tmp, rows_at(ws->x2, p.row, D, act), w->t[MT_T_MLP_NORM],
                     ws->rstd2 + p.row, 1, D, 1);
}

/* The q, k, v projections' and the attention norm's backward of piece p, from the gradients at
 * the projections' outputs (dq, dk, dv over the micro-batch): dxy's rows gain dL/dx. */
static void qkv_backward_piece(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, piece p,
                               const void *x, void *dxy, const void *dq, const void *dk) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int D = cfg->hidden_size, Q = cfg->num_heads * cfg->head_dim, KV = cfg->num_kv_heads * cfg->head_dim;
    const void *dqp = rows_at(dq, p.row, Q, act), *dkp = rows_at(dk, p.row, KV, act);
    const void *dvp = rows_at(ws->dv, p.row, KV, act);
    attn_norm_piece(c, w, p, x); /* h1 again: the piece buffer held another piece's */
    matmul_dw_piece(c, p, g->t[MT_T_WQ], g->t[MT_T_BQ], dqp, ws->h1, D, Q);
    matmul_dw_piece(c, p, g->t[MT_T_WK], g->t[MT_T_BK], dkp, ws->h1, D, KV);
    matmul_dw_piece(c, p, g->t[MT_T_WV], g->t[MT_T_BV], dvp, ws->h1, D, KV);
    matmul_dx_piece(c, p, ws->tmp, dqp, w->t[MT_T_WQ], D, Q, 0);        /* dh1 */
    matmul_dx_piece(c, p, ws->tmp, dkp, w->t[MT_T_WK], D, KV, 1);
    matmul_dx_piece(c, p, ws->tmp, dvp, w->t[MT_T_WV], D, KV, 1);
    rmsnorm_dx_piece(c, p, rows_at_mut(dxy, p.row, D, act), g->t[MT_T_ATTN_NORM], ws->tmp,
                     rows_at(x, p.row, D, act), w->t[MT_T_ATTN_NORM], ws->rstd1 + p.row, 1, D, 1);
}

void mt_block_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                       const void *x, void *dxy) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int n = c->batch * c->seq, D = cfg->hidden_size;
    int Q = cfg->num_heads * cfg->head_dim;
    mt_attn_dims dims = {c->batch, c->seq, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim};

    forward_attention(c, w, x);
    FOR_EACH_PIECE(c, p) mlp_backward_piece(c, w, g, p, dxy);

    /* Attention: x2 = x + o(att), att = attention(rope(q(h1)), rope(k(h1)), v(h1)), h1 = norm(x);
     * with q/k norms, q(h1) and k(h1) are each head's RMSNorm of the projections. */
    matmul_dw_piece(c, whole(c), g->t[MT_T_WO], NULL, dxy, ws->att, Q, D);
    matmul_dx_piece(c, whole(c), ws->datt, dxy, w->t[MT_T_WO], Q, D, 0);
    op->attention_dx(be, s, ws->dq, ws->dk, ws->dv, ws->datt, ws->att, ws->lse, ws->q, ws->k,
                     ws->v, dims, c->seg, ws->attn_ws);
    const int32_t *pos = c->seg ? c->seg->pos : NULL;
    op->rope(be, s, ws->dq, c->inv_freq, n, c->seq, pos, cfg->num_heads, cfg->head_dim, 1);
    op->rope(be, s, ws->dk, c->inv_freq, n, c->seq, pos, cfg->num_kv_heads, cfg->head_dim, 1);
    /* The gradients at the q/k projections' outputs: through the head norms when there are any,
     * into q and k, which nothing reads after attention_dx. */
    void *dq = ws->dq, *dk = ws->dk;
    if (cfg->qk_norm) {
        dq = ws->q;
        dk = ws->k;
        rmsnorm_dx_piece(c, whole(c), dq, g->t[MT_T_Q_NORM], ws->dq, ws->q_raw, w->t[MT_T_Q_NORM], ws->rstd_q,
                         cfg->num_heads, cfg->head_dim, 0);
        rmsnorm_dx_piece(c, whole(c), dk, g->t[MT_T_K_NORM], ws->dk, ws->k_raw, w->t[MT_T_K_NORM], ws->rstd_k,
                         cfg->num_kv_heads, cfg->head_dim, 0);
    }
    FOR_EACH_PIECE(c, p) qkv_backward_piece(c, w, g, p, x, dxy, dq, dk);
}
