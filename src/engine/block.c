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

/* Walks the workspace's buffers in one fixed order, either summing sizes or carving pointers. */
static size_t layout_ws(mt_block_ws *ws, char *base, mt_backend *be, const mt_config *c, int batch, int seq) {
    size_t n = (size_t)batch * seq, act = mt_dtype_size(be->ops->act_dtype);
    size_t D = c->hidden_size, F = c->intermediate_size;
    size_t Q = (size_t)c->num_heads * c->head_dim, KV = (size_t)c->num_kv_heads * c->head_dim;
    mt_attn_dims dims = {batch, seq, c->num_heads, c->num_kv_heads, c->head_dim};
    size_t off = 0;
#define CARVE(field, bytes)                                  \
    do {                                                     \
        if (ws) ws->field = (void *)(base + off);            \
        off += align256(bytes);                              \
    } while (0)
    CARVE(h1, n * D * act);
    CARVE(q, n * Q * act);
    CARVE(k, n * KV * act);
    CARVE(v, n * KV * act);
    CARVE(att, n * Q * act);
    CARVE(x2, n * D * act);
    CARVE(h2, n * D * act);
    CARVE(g, n * F * act);
    CARVE(u, n * F * act);
    CARVE(a, n * F * act);
    CARVE(tmp, n * (F > D ? F : D) * act);
    CARVE(dq, n * Q * act);
    CARVE(dk, n * KV * act);
    CARVE(dv, n * KV * act);
    CARVE(datt, n * Q * act);
    CARVE(dg, n * F * act);
    CARVE(du, n * F * act);
    CARVE(rstd1, n * 4);
    CARVE(rstd2, n * 4);
    CARVE(lse, (size_t)batch * c->num_heads * seq * 4);
    CARVE(attn_ws, be->ops->op.attention_workspace(be, dims));
    if (c->qk_norm) {
        CARVE(q_raw, n * Q * act);
        CARVE(k_raw, n * KV * act);
        CARVE(rstd_q, n * c->num_heads * 4);
        CARVE(rstd_k, n * c->num_kv_heads * 4);
    }
#undef CARVE
    return off;
}

size_t mt_block_ws_bytes(mt_backend *be, const mt_config *c, int batch, int seq) {
    return layout_ws(NULL, NULL, be, c, batch, seq);
}

void mt_block_ws_carve(mt_block_ws *ws, void *base, mt_backend *be, const mt_config *c, int batch, int seq) {
    layout_ws(ws, base, be, c, batch, seq);
}

/* Row-wise GEMMs over the whole micro-batch, or one sequence at a time where the backend asks
 * (backend.h: gemm_by_sequence). */
static void matmul_rows(const mt_block_ctx *c, void *y, const void *x, const void *w, const void *bias,
                        int in, int out) {
    int per_call = c->be->ops->gemm_by_sequence ? c->seq : c->batch * c->seq;
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    for (int row = 0; row < c->batch * c->seq; row += per_call)
        c->be->ops->op.matmul(c->be, c->stream, (char *)y + (size_t)row * out * act,
                              (const char *)x + (size_t)row * in * act, w, bias, per_call, in, out);
}

static void matmul_dx_rows(const mt_block_ctx *c, void *dx, const void *dy, const void *w, int in,
                           int out, int accumulate) {
    int per_call = c->be->ops->gemm_by_sequence ? c->seq : c->batch * c->seq;
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    for (int row = 0; row < c->batch * c->seq; row += per_call)
        c->be->ops->op.matmul_dx(c->be, c->stream, (char *)dx + (size_t)row * in * act,
                                 (const char *)dy + (size_t)row * out * act, w, per_call, in, out, accumulate);
}

/* dw += dy^T x one sequence at a time (see block.h). */
static void matmul_dw_by_sequence(const mt_block_ctx *c, float *dw, float *dbias, const void *dy,
                                  const void *x, int in, int out) {
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    for (int b = 0; b < c->batch; b++) {
        size_t row = (size_t)b * c->seq;
        c->be->ops->op.matmul_dw(c->be, c->stream, dw, dbias, (const char *)dy + row * out * act,
                                 (const char *)x + row * in * act, c->seq, in, out);
    }
}

/* The norm's rows are `per_token` rows of width d per token: 1 for the hidden-size norms, the
 * heads for the q/k norms (a token's [heads * head_dim] row is heads rows of head_dim). dx is
 * added to (the residual path's gradient) or, with accumulate 0, written. */
static void rmsnorm_dx_by_sequence(const mt_block_ctx *c, void *dx, float *dw, const void *dy, const void *x,
                                   const void *w, const float *rstd, int per_token, int d, int accumulate) {
    size_t act = mt_dtype_size(c->be->ops->act_dtype);
    int rows = c->seq * per_token;
    for (int b = 0; b < c->batch; b++) {
        size_t row = (size_t)b * rows;
        c->be->ops->op.rmsnorm_dx(c->be, c->stream, (char *)dx + row * d * act, dw,
                                  (const char *)dy + row * d * act, (const char *)x + row * d * act,
                                  w, rstd + row, rows, d, accumulate);
    }
}

/* Everything the backward needs: h1, q, k, v (roped), att, lse, x2, h2, g, u, a (and q_raw, k_raw
 * and their statistics with q/k norms). */
static void forward_to_mlp(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int n = c->batch * c->seq, D = cfg->hidden_size, F = cfg->intermediate_size;
    int Q = cfg->num_heads * cfg->head_dim, KV = cfg->num_kv_heads * cfg->head_dim;
    mt_attn_dims dims = {c->batch, c->seq, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim};

    op->rmsnorm(be, s, ws->h1, ws->rstd1, x, w->t[MT_T_ATTN_NORM], n, D, cfg->rms_norm_eps);
    matmul_rows(c, cfg->qk_norm ? ws->q_raw : ws->q, ws->h1, w->t[MT_T_WQ], w->t[MT_T_BQ], D, Q);
    matmul_rows(c, cfg->qk_norm ? ws->k_raw : ws->k, ws->h1, w->t[MT_T_WK], w->t[MT_T_BK], D, KV);
    matmul_rows(c, ws->v, ws->h1, w->t[MT_T_WV], w->t[MT_T_BV], D, KV);
    if (cfg->qk_norm) { /* each head's head_dim values normalized on their own: rows of head_dim */
        op->rmsnorm(be, s, ws->q, ws->rstd_q, ws->q_raw, w->t[MT_T_Q_NORM], n * cfg->num_heads, cfg->head_dim,
                    cfg->rms_norm_eps);
        op->rmsnorm(be, s, ws->k, ws->rstd_k, ws->k_raw, w->t[MT_T_K_NORM], n * cfg->num_kv_heads,
                    cfg->head_dim, cfg->rms_norm_eps);
    }
    op->rope(be, s, ws->q, c->inv_freq, n, c->seq, cfg->num_heads, cfg->head_dim, 0);
    op->rope(be, s, ws->k, c->inv_freq, n, c->seq, cfg->num_kv_heads, cfg->head_dim, 0);
    op->attention(be, s, ws->att, ws->lse, ws->q, ws->k, ws->v, dims);
    matmul_rows(c, ws->tmp, ws->att, w->t[MT_T_WO], NULL, Q, D);
    op->add(be, s, ws->x2, x, ws->tmp, (size_t)n * D);
    op->rmsnorm(be, s, ws->h2, ws->rstd2, ws->x2, w->t[MT_T_MLP_NORM], n, D, cfg->rms_norm_eps);
    matmul_rows(c, ws->g, ws->h2, w->t[MT_T_WG], NULL, D, F);
    matmul_rows(c, ws->u, ws->h2, w->t[MT_T_WU], NULL, D, F);
    op->swiglu(be, s, ws->a, ws->g, ws->u, (size_t)n * F);
}

void mt_block_forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x, void *y) {
    const mt_config *cfg = c->cfg;
    int n = c->batch * c->seq, D = cfg->hidden_size, F = cfg->intermediate_size;
    forward_to_mlp(c, w, x);
    matmul_rows(c, c->ws->tmp, c->ws->a, w->t[MT_T_WD], NULL, F, D);
    c->be->ops->op.add(c->be, c->stream, y, c->ws->x2, c->ws->tmp, (size_t)n * D);
}

void mt_block_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                       const void *x, void *dxy) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int n = c->batch * c->seq, D = cfg->hidden_size, F = cfg->intermediate_size;
    int Q = cfg->num_heads * cfg->head_dim, KV = cfg->num_kv_heads * cfg->head_dim;
    mt_attn_dims dims = {c->batch, c->seq, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim};

    forward_to_mlp(c, w, x);

    /* MLP: y = x2 + down(a), a = silu(g) * u, g = gate(h2), u = up(h2), h2 = norm(x2) */
    matmul_dw_by_sequence(c, g->t[MT_T_WD], NULL, dxy, ws->a, F, D);
    matmul_dx_rows(c, ws->tmp, dxy, w->t[MT_T_WD], F, D, 0);           /* da */
    op->swiglu_dx(be, s, ws->dg, ws->du, ws->tmp, ws->g, ws->u, (size_t)n * F);
    matmul_dw_by_sequence(c, g->t[MT_T_WG], NULL, ws->dg, ws->h2, D, F);
    matmul_dw_by_sequence(c, g->t[MT_T_WU], NULL, ws->du, ws->h2, D, F);
    matmul_dx_rows(c, ws->tmp, ws->dg, w->t[MT_T_WG], D, F, 0);        /* dh2 */
    matmul_dx_rows(c, ws->tmp, ws->du, w->t[MT_T_WU], D, F, 1);
    /* dxy becomes dL/dx2: the residual path plus the norm's input gradient */
    rmsnorm_dx_by_sequence(c, dxy, g->t[MT_T_MLP_NORM], ws->tmp, ws->x2, w->t[MT_T_MLP_NORM], ws->rstd2, 1, D, 1);

    /* Attention: x2 = x + o(att), att = attention(rope(q(h1)), rope(k(h1)), v(h1)), h1 = norm(x);
     * with q/k norms, q(h1) and k(h1) are each head's RMSNorm of the projections. */
    matmul_dw_by_sequence(c, g->t[MT_T_WO], NULL, dxy, ws->att, Q, D);
    matmul_dx_rows(c, ws->datt, dxy, w->t[MT_T_WO], Q, D, 0);
    op->attention_dx(be, s, ws->dq, ws->dk, ws->dv, ws->datt, ws->att, ws->lse, ws->q, ws->k,
                     ws->v, dims, ws->attn_ws);
    op->rope(be, s, ws->dq, c->inv_freq, n, c->seq, cfg->num_heads, cfg->head_dim, 1);
    op->rope(be, s, ws->dk, c->inv_freq, n, c->seq, cfg->num_kv_heads, cfg->head_dim, 1);
    /* The gradients at the q/k projections' outputs: through the head norms when there are any,
     * into q and k, which nothing reads after attention_dx. */
    void *dq = ws->dq, *dk = ws->dk;
    if (cfg->qk_norm) {
        dq = ws->q;
        dk = ws->k;
        rmsnorm_dx_by_sequence(c, dq, g->t[MT_T_Q_NORM], ws->dq, ws->q_raw, w->t[MT_T_Q_NORM], ws->rstd_q,
                               cfg->num_heads, cfg->head_dim, 0);
        rmsnorm_dx_by_sequence(c, dk, g->t[MT_T_K_NORM], ws->dk, ws->k_raw, w->t[MT_T_K_NORM], ws->rstd_k,
                               cfg->num_kv_heads, cfg->head_dim, 0);
    }
    matmul_dw_by_sequence(c, g->t[MT_T_WQ], g->t[MT_T_BQ], dq, ws->h1, D, Q);
    matmul_dw_by_sequence(c, g->t[MT_T_WK], g->t[MT_T_BK], dk, ws->h1, D, KV);
    matmul_dw_by_sequence(c, g->t[MT_T_WV], g->t[MT_T_BV], ws->dv, ws->h1, D, KV);
    matmul_dx_rows(c, ws->tmp, dq, w->t[MT_T_WQ], D, Q, 0);        /* dh1 */
    matmul_dx_rows(c, ws->tmp, dk, w->t[MT_T_WK], D, KV, 1);
    matmul_dx_rows(c, ws->tmp, ws->dv, w->t[MT_T_WV], D, KV, 1);
    rmsnorm_dx_by_sequence(c, dxy, g->t[MT_T_ATTN_NORM], ws->tmp, x, w->t[MT_T_ATTN_NORM], ws->rstd1, 1, D, 1);
}
