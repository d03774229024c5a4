/* The attention mixer, engine side (model/mixer_attention.c declares its tensors): x2 = x +
 * o(attention(rope(q(h1)), rope(k(h1)), v(h1))), h1 = norm(x), with q/k/v biases and q/k norms
 * (over each head, or over the whole projection) where the config has them. Everything attention's
 * backward needs spans the micro-batch; the norm and projections run a piece at a time. */
#include "engine/block_parts.h"

/* The q/k norm's rows: a token's q is `heads` rows of head_dim (per-head norms) or one row of
 * heads x head_dim (OLMoE's over the projection); k likewise with kv_heads. */
static int norm_rows(const mt_config *c, int heads) { return c->qk_norm == MT_QK_NORM_FULL ? 1 : heads; }
static int norm_width(const mt_config *c, int heads) {
    return c->qk_norm == MT_QK_NORM_FULL ? heads * c->head_dim : c->head_dim;
}

static void walk(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s) {
    const mt_config *c = s->c;
    size_t n = s->n, act = s->act;
    size_t Q = (size_t)c->num_heads * c->head_dim, KV = (size_t)c->num_kv_heads * c->head_dim;
    mt_attn_dims dims = {s->batch, s->seq, c->num_heads, c->num_kv_heads, c->head_dim};
    ws->attn.q = mt_ws_take(w, n * Q * act);
    ws->attn.k = mt_ws_take(w, n * KV * act);
    ws->attn.v = mt_ws_take(w, n * KV * act);
    ws->attn.att = mt_ws_take(w, n * Q * act);
    ws->attn.dq = mt_ws_take(w, n * Q * act);
    ws->attn.dk = mt_ws_take(w, n * KV * act);
    ws->attn.dv = mt_ws_take(w, n * KV * act);
    ws->attn.datt = mt_ws_take(w, n * Q * act);
    ws->attn.lse = mt_ws_take(w, (size_t)s->batch * c->num_heads * s->seq * 4);
    ws->attn.ws = mt_ws_take(w, s->be->ops->op.attention_workspace(s->be, dims, s->segmented));
    if (c->qk_norm) {
        ws->attn.q_raw = mt_ws_take(w, n * Q * act);
        ws->attn.k_raw = mt_ws_take(w, n * KV * act);
        ws->attn.rstd_q = mt_ws_take(w, n * norm_rows(c, c->num_heads) * 4);
        ws->attn.rstd_k = mt_ws_take(w, n * norm_rows(c, c->num_kv_heads) * 4);
    }
}

/* h1 = the attention norm of x's piece p (and its statistics into rstd1). */
static void attn_norm_piece(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, const void *x) {
    int D = c->cfg->hidden_size;
    c->be->ops->op.rmsnorm(c->be, c->stream, c->ws->h1, c->ws->rstd1 + p.row, mt_rows_at(x, p.row, D, mt_act_size(c)),
                           w->t[MT_T_ATTN_NORM], p.rows, D, c->cfg->rms_norm_eps);
}

/* Everything the attention's backward needs: q, k, v (roped), att, lse and x2 over the whole
 * micro-batch (and q_raw, k_raw and their statistics with q/k norms); the norm and projections
 * one piece at a time. */
static void forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int n = c->batch * c->seq, D = cfg->hidden_size;
    int Q = cfg->num_heads * cfg->head_dim, KV = cfg->num_kv_heads * cfg->head_dim;
    mt_attn_dims dims = {c->batch, c->seq, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim};
    void *q = cfg->qk_norm ? ws->attn.q_raw : ws->attn.q, *k = cfg->qk_norm ? ws->attn.k_raw : ws->attn.k;

    MT_FOR_EACH_PIECE(c, p) {
        attn_norm_piece(c, w, p, x);
        mt_matmul_piece(c, p, mt_rows_at_mut(q, p.row, Q, act), ws->h1, w->t[MT_T_WQ], w->t[MT_T_BQ], D, Q);
        mt_matmul_piece(c, p, mt_rows_at_mut(k, p.row, KV, act), ws->h1, w->t[MT_T_WK], w->t[MT_T_BK], D, KV);
        mt_matmul_piece(c, p, mt_rows_at_mut(ws->attn.v, p.row, KV, act), ws->h1, w->t[MT_T_WV], w->t[MT_T_BV], D, KV);
    }
    if (cfg->qk_norm) { /* per head: each head's head_dim values normalized on their own, rows of head_dim */
        int H = cfg->num_heads, KVH = cfg->num_kv_heads;
        op->rmsnorm(be, s, ws->attn.q, ws->attn.rstd_q, ws->attn.q_raw, w->t[MT_T_Q_NORM], n * norm_rows(cfg, H),
                    norm_width(cfg, H), cfg->rms_norm_eps);
        op->rmsnorm(be, s, ws->attn.k, ws->attn.rstd_k, ws->attn.k_raw, w->t[MT_T_K_NORM], n * norm_rows(cfg, KVH),
                    norm_width(cfg, KVH), cfg->rms_norm_eps);
    }
    const int32_t *pos = c->seg ? c->seg->pos : NULL; /* packed examples: positions restart */
    op->rope(be, s, ws->attn.q, c->inv_freq, n, c->seq, pos, cfg->num_heads, cfg->head_dim, 0);
    op->rope(be, s, ws->attn.k, c->inv_freq, n, c->seq, pos, cfg->num_kv_heads, cfg->head_dim, 0);
    op->attention(be, s, ws->attn.att, ws->attn.lse, ws->attn.q, ws->attn.k, ws->attn.v, dims, c->seg, ws->attn.ws);
    MT_FOR_EACH_PIECE(c, p) {
        mt_matmul_piece(c, p, ws->tmp, mt_rows_at(ws->attn.att, p.row, Q, act), w->t[MT_T_WO], NULL, Q, D);
        op->add(be, s, mt_rows_at_mut(ws->x2, p.row, D, act), mt_rows_at(x, p.row, D, act), ws->tmp,
                (size_t)p.rows * D);
    }
}

/* The q, k, v projections' and the attention norm's backward of piece p, from the gradients at
 * the projections' outputs (dq, dk, dv over the micro-batch): dxy's rows gain dL/dx. */
static void qkv_backward_piece(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, mt_piece p,
                               const void *x, void *dxy, const void *dq, const void *dk) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = cfg->hidden_size, Q = cfg->num_heads * cfg->head_dim, KV = cfg->num_kv_heads * cfg->head_dim;
    const void *dqp = mt_rows_at(dq, p.row, Q, act), *dkp = mt_rows_at(dk, p.row, KV, act);
    const void *dvp = mt_rows_at(ws->attn.dv, p.row, KV, act);
    attn_norm_piece(c, w, p, x); /* h1 again: the piece buffer held another piece's */
    mt_matmul_dw_piece(c, p, g->t[MT_T_WQ], g->t[MT_T_BQ], dqp, ws->h1, D, Q);
    mt_matmul_dw_piece(c, p, g->t[MT_T_WK], g->t[MT_T_BK], dkp, ws->h1, D, KV);
    mt_matmul_dw_piece(c, p, g->t[MT_T_WV], g->t[MT_T_BV], dvp, ws->h1, D, KV);
    mt_matmul_dx_piece(c, p, ws->tmp, dqp, w->t[MT_T_WQ], D, Q, 0); /* dh1 */
    mt_matmul_dx_piece(c, p, ws->tmp, dkp, w->t[MT_T_WK], D, KV, 1);
    mt_matmul_dx_piece(c, p, ws->tmp, dvp, w->t[MT_T_WV], D, KV, 1);
    mt_rmsnorm_dx_piece(c, p, mt_rows_at_mut(dxy, p.row, D, act), g->t[MT_T_ATTN_NORM], ws->tmp,
                        mt_rows_at(x, p.row, D, act), w->t[MT_T_ATTN_NORM], ws->rstd1 + p.row, 1, D, 1);
}

/* x2 = x + o(att), att = attention(rope(q(h1)), rope(k(h1)), v(h1)), h1 = norm(x); with q/k norms,
 * q(h1) and k(h1) are each head's RMSNorm of the projections. */
static void backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, const void *x,
                     void *dxy) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int n = c->batch * c->seq, D = cfg->hidden_size;
    int Q = cfg->num_heads * cfg->head_dim;
    mt_attn_dims dims = {c->batch, c->seq, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim};

    mt_matmul_dw_piece(c, mt_piece_whole(c), g->t[MT_T_WO], NULL, dxy, ws->attn.att, Q, D);
    mt_matmul_dx_piece(c, mt_piece_whole(c), ws->attn.datt, dxy, w->t[MT_T_WO], Q, D, 0);
    op->attention_dx(be, s, ws->attn.dq, ws->attn.dk, ws->attn.dv, ws->attn.datt, ws->attn.att, ws->attn.lse,
                     ws->attn.q, ws->attn.k, ws->attn.v, dims, c->seg, ws->attn.ws);
    const int32_t *pos = c->seg ? c->seg->pos : NULL;
    op->rope(be, s, ws->attn.dq, c->inv_freq, n, c->seq, pos, cfg->num_heads, cfg->head_dim, 1);
    op->rope(be, s, ws->attn.dk, c->inv_freq, n, c->seq, pos, cfg->num_kv_heads, cfg->head_dim, 1);
    /* The gradients at the q/k projections' outputs: through the head norms when there are any,
     * into q and k, which nothing reads after attention_dx. */
    void *dq = ws->attn.dq, *dk = ws->attn.dk;
    if (cfg->qk_norm) {
        int H = cfg->num_heads, KVH = cfg->num_kv_heads;
        dq = ws->attn.q;
        dk = ws->attn.k;
        mt_rmsnorm_dx_piece(c, mt_piece_whole(c), dq, g->t[MT_T_Q_NORM], ws->attn.dq, ws->attn.q_raw,
                            w->t[MT_T_Q_NORM], ws->attn.rstd_q, norm_rows(cfg, H), norm_width(cfg, H), 0);
        mt_rmsnorm_dx_piece(c, mt_piece_whole(c), dk, g->t[MT_T_K_NORM], ws->attn.dk, ws->attn.k_raw,
                            w->t[MT_T_K_NORM], ws->attn.rstd_k, norm_rows(cfg, KVH), norm_width(cfg, KVH), 0);
    }
    MT_FOR_EACH_PIECE(c, p) qkv_backward_piece(c, w, g, p, x, dxy, dq, dk);
}

const mt_mixer_ops mt_mixer_attention_ops = {.walk = walk, .forward = forward, .backward = backward};
