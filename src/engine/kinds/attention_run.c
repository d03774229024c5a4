/* The attention mixer, engine side (model/kinds/attention.c declares its tensors): x2 = x +
 * o(attention(rope(q(h1)), rope(k(h1)), v(h1))), h1 = norm(x), with q/k/v and o biases, sinks,
 * q/k norms (over each head, or over the whole projection) and an output gate (q_proj's second half
 * of each head: o's input times its sigmoid) where the block's spec has them.
 *
 * Keys and values span the micro-batch (every later query of a sequence reads them): prepare makes
 * them over the whole micro-batch. With segments (packed examples) positions restart on each
 * segment's first row and attention stays within each segment (backend.h), the tiles alike. Everything of the queries' side is a tile's (engine/block.h):
 * its q, attention output, their gradients, x2. A tile of whole sequences is plain causal attention
 * over them; a local layer's queries see the last `window` keys of their sequence (or segment), which
 * the op takes as mt_attn_params with the block's scale and soft-cap. A window of one sequence attends, as backend.h's window of queries, to the keys from
 * the sequence's first position to its own last; its backward gives the keys it saw their share of
 * the gradients, which sum over the sequence's windows in fp32 (dk_sum, dv_sum: bf16 sums of 16
 * windows' shares were measured at twice the error of one rounding of the whole, fp32 ones at 1.4x
 * for any number of windows: docs/memory.md). The backward takes a sequence's windows from its last, so that a
 * window's own rows of dk and dv are final once its share is added: they are rounded back, and the
 * projections' backward of its rows runs at once. The norm and projections run a piece at a time. */
#include "engine/block_parts.h"

static size_t q_width(const mt_config *c) { return (size_t)c->num_heads * c->head_dim; }
static size_t kv_width(const mt_config *c) { return (size_t)c->num_kv_heads * c->head_dim; }

/* Whether the block's q and k go through RMSNorms, and whether over the whole projection. */
static int qk_norm(const mt_layer_spec *s) {
    return (s->attn.flags & (MT_ATTN_QK_NORM_HEAD | MT_ATTN_QK_NORM_FULL)) != 0;
}
static int qk_norm_full(const mt_layer_spec *s) { return (s->attn.flags & MT_ATTN_QK_NORM_FULL) != 0; }
static int post_norm(const mt_layer_spec *s) { return (s->attn.flags & MT_ATTN_POST_NORM) != 0; }
static int out_gate(const mt_layer_spec *s) { return (s->attn.flags & MT_ATTN_OUT_GATE) != 0; }
static int sinks(const mt_layer_spec *s) { return (s->attn.flags & MT_ATTN_SINKS) != 0; }

/* q_proj's outputs a token: the query, and with an output gate each head's gate after its query. */
static int q_out_width(const mt_block_ctx *c) { return (out_gate(c->spec) ? 2 : 1) * (int)q_width(c->cfg); }

/* What o_proj takes: the attention's output, or with an output gate that times sigmoid(gate), which
 * the forward leaves in datt (free until the backward's gradient at the attention's output). */
static const void *o_input(const mt_block_ctx *c) { return out_gate(c->spec) ? c->ws->attn.datt : c->ws->attn.att; }

/* The backend's attention variants the block's spec asks for: its window, scale and soft cap, and
 * its sinks (their fp32 copy, prepare's) with, in the backward (g), their gradient. */
static mt_attn_params attn_params(const mt_block_ctx *c, const mt_unit_grads *g) {
    const mt_layer_spec *s = c->spec;
    return (mt_attn_params){.window = s->attn.window,
                            .scale = s->attn.q_scale,
                            .softcap = s->attn.logit_softcap,
                            .sinks = sinks(s) ? c->ws->attn.sinks : NULL,
                            .dsinks = sinks(s) && g ? g->t[MT_T_SINKS] : NULL};
}

/* The q/k norm's rows: a token's q is `heads` rows of head_dim (per-head norms) or one row of
 * heads x head_dim (over the projection); k likewise with kv_heads. */
static int norm_rows(const mt_block_ctx *c, int heads) { return qk_norm_full(c->spec) ? 1 : heads; }
static int norm_width(const mt_block_ctx *c, int heads) {
    return qk_norm_full(c->spec) ? heads * c->cfg->head_dim : c->cfg->head_dim;
}

/* Whether any block's spec has what `has` says (what the workspace sizes for), and how many rows
 * a token's q (or k, of `heads` heads) takes at most over the blocks' q/k norms. */
static int any_block(const mt_config *c, int (*has)(const mt_layer_spec *)) {
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        if (s.mixer == MT_MIXER_ATTENTION && has(&s)) return 1;
    }
    return 0;
}
static int most_norm_rows(const mt_config *c, int heads) {
    int most = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        int rows = !qk_norm(&s) ? 0 : qk_norm_full(&s) ? 1 : heads;
        if (rows > most) most = rows;
    }
    return most;
}

/* The attention dims of tile t: plain over whole sequences (a sequence's first window is plain
 * too, over its rows), else the window of its rows in their sequence. */
static mt_attn_dims tile_dims(const mt_config *c, int batch, int seq, mt_tile t) {
    mt_attn_dims d = {1, t.rows, c->num_heads, c->num_kv_heads, c->head_dim, 0, 0};
    if (t.rows >= seq) d.batch = t.rows / seq, d.seq = seq;
    else if (t.row % seq > 0) d.seq = seq, d.q0 = t.row % seq, d.q_len = t.rows;
    return d;
}

/* The block's variant of attention (its window, scale and soft-cap), as its spec has it. */
/* The first row of the keys tile t attends to: its first sequence's. */
static int kv_row0(int seq, mt_tile t) { return t.row - t.row % seq; }

/* The micro-batch's segments as tile t's attention takes them: from its keys' first row. */
static mt_segments tile_segments(const mt_block_ctx *c, mt_tile t) {
    mt_segments seg = *c->seg;
    seg.row0 = kv_row0(c->seq, t);
    return seg;
}

/* The RoPE tables, one a table of the model spec (its head_dim / 2 inverse frequencies each), and
 * the one the block's spec names. */
static size_t constants_bytes(const mt_config *c) {
    return (size_t)mt_model_spec_of(c).num_ropes * (size_t)(c->head_dim / 2) * sizeof(float);
}
static void constants(const mt_config *c, void *host) {
    mt_model_spec m = mt_model_spec_of(c);
    for (int r = 0; r < m.num_ropes; r++)
        mt_rope_inv_freq(&m.rope[r], c->head_dim, (float *)host + (size_t)r * (c->head_dim / 2));
}
static const float *rope_table(const mt_block_ctx *c) {
    return (const float *)c->constants + (size_t)c->spec->attn.rope * (c->cfg->head_dim / 2);
}
/* The values of each head the block's table turns (all, or partial_rotary_factor's). */
static int rotary_dim(const mt_block_ctx *c) {
    mt_model_spec m = mt_model_spec_of(c->cfg);
    return mt_rope_rotary_dim(&m.rope[c->spec->attn.rope], c->cfg->head_dim);
}

/* The positions of rows from `row` on (RoPE), with segments; NULL: (pos0 + r) % seq. */
static const int32_t *positions(const mt_block_ctx *c, int row) { return c->seg ? c->seg->pos + row : NULL; }

/* Attention's workspace for every tile of the run: the largest of a tile of whole sequences, a
 * sequence's last window (which the other full windows share, backend.h) and its first. */
static size_t attention_workspace(const mt_ws_shape *s) {
    const mt_config *c = s->c;
    mt_backend *be = s->be;
    int T = (int)s->T;
    if (T >= s->seq)
        return be->ops->op.attention_workspace(be, tile_dims(c, s->batch, s->seq, (mt_tile){0, T}), s->segmented);
    int first = s->seq - (s->seq - 1) / T * T; /* the first window's rows, 1 to T */
    size_t last = be->ops->op.attention_workspace(be, tile_dims(c, s->batch, s->seq, (mt_tile){s->seq - T, T}),
                                                  s->segmented);
    size_t start = be->ops->op.attention_workspace(be, tile_dims(c, s->batch, s->seq, (mt_tile){0, first}),
                                                   s->segmented);
    return last > start ? last : start;
}

static void walk(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s) {
    const mt_config *c = s->c;
    size_t n = s->n, T = s->T, act = s->act, Q = q_width(c), KV = kv_width(c);
    w->cls = MT_WS_TILE;
    ws->attn.q = mt_ws_take(w, T * Q * act);
    ws->attn.att = mt_ws_take(w, T * Q * act);
    ws->attn.dq = mt_ws_take(w, T * Q * act);
    ws->attn.datt = mt_ws_take(w, T * Q * act);
    ws->attn.lse = mt_ws_take(w, T * c->num_heads * 4);
    ws->attn.ws = mt_ws_take(w, attention_workspace(s));
    int norms = any_block(c, qk_norm);
    if (norms) {
        ws->attn.q_raw = mt_ws_take(w, T * Q * act);
        ws->attn.rstd_q = mt_ws_take(w, T * most_norm_rows(c, c->num_heads) * 4);
    }
    if (any_block(c, out_gate)) {
        ws->attn.qg = mt_ws_take(w, T * 2 * Q * act);
        ws->attn.gate = mt_ws_take(w, T * Q * act);
    }
    w->cls = MT_WS_MICRO_BATCH;
    ws->attn.k = mt_ws_take(w, n * KV * act);
    ws->attn.v = mt_ws_take(w, n * KV * act);
    ws->attn.dk = mt_ws_take(w, n * KV * act);
    ws->attn.dv = mt_ws_take(w, n * KV * act);
    if (T < (size_t)s->seq) { /* windows: their shares sum */
        ws->attn.dk_sum = mt_ws_take(w, n * KV * 4);
        ws->attn.dv_sum = mt_ws_take(w, n * KV * 4);
    }
    if (norms) {
        ws->attn.k_raw = mt_ws_take(w, n * KV * act);
        ws->attn.rstd_k = mt_ws_take(w, n * most_norm_rows(c, c->num_kv_heads) * 4);
    }
    if (any_block(c, sinks)) ws->attn.sinks = mt_ws_take(w, (size_t)c->num_heads * 4);
}

/* k and v (roped; with q/k norms, k_raw and its statistics too) over the micro-batch, and the
 * sinks in fp32 (the weights are of the act type on every backend). */
static void prepare(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int n = c->batch * c->seq, D = cfg->hidden_size, KV = (int)kv_width(cfg);
    void *k = qk_norm(c->spec) ? ws->attn.k_raw : ws->attn.k;
    MT_FOR_EACH_PIECE(c, p) {
        mt_mixer_norm_piece(c, w, p, x);
        mt_matmul_piece(c, p, mt_rows_at_mut(k, p.row, KV, act), ws->h1, w->t[MT_T_WK], w->t[MT_T_BK], D, KV);
        mt_matmul_piece(c, p, mt_rows_at_mut(ws->attn.v, p.row, KV, act), ws->h1, w->t[MT_T_WV], w->t[MT_T_BV], D, KV);
    }
    if (qk_norm(c->spec))
        c->be->ops->op.rmsnorm(c->be, c->stream, ws->attn.k, ws->attn.rstd_k, ws->attn.k_raw, w->t[MT_T_K_NORM],
                               n * norm_rows(c, cfg->num_kv_heads), norm_width(c, cfg->num_kv_heads),
                               mt_norm_params(c->spec));
    c->be->ops->op.rope(c->be, c->stream, ws->attn.k, rope_table(c), n, c->seq, 0, positions(c, 0), cfg->num_kv_heads,
                        cfg->head_dim, rotary_dim(c), 0);
    if (sinks(c->spec))
        c->be->ops->op.accumulate_f32(c->be, c->stream, ws->attn.sinks, w->t[MT_T_SINKS], (size_t)cfg->num_heads, 0);
}

/* The tile's q (roped), attention output, lse and x2 rows. */
static void forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    mt_tile t = c->at;
    size_t act = mt_act_size(c);
    int D = cfg->hidden_size, Q = (int)q_width(cfg), KV = (int)kv_width(cfg), kv0 = kv_row0(c->seq, t);
    void *q = qk_norm(c->spec) ? ws->attn.q_raw : ws->attn.q, *q_proj = out_gate(c->spec) ? ws->attn.qg : q;
    int QO = q_out_width(c);

    MT_FOR_EACH_PIECE(c, p) {
        mt_mixer_norm_piece(c, w, p, x);
        mt_matmul_piece(c, p, mt_rows_at_mut(q_proj, p.row - t.row, QO, act), ws->h1, w->t[MT_T_WQ], w->t[MT_T_BQ], D,
                        QO);
    }
    if (out_gate(c->spec)) op->gate_split(be, s, q, ws->attn.gate, ws->attn.qg, t.rows, cfg->num_heads, cfg->head_dim);
    if (qk_norm(c->spec))
        op->rmsnorm(be, s, ws->attn.q, ws->attn.rstd_q, ws->attn.q_raw, w->t[MT_T_Q_NORM],
                    t.rows * norm_rows(c, cfg->num_heads), norm_width(c, cfg->num_heads), mt_norm_params(c->spec));
    op->rope(be, s, ws->attn.q, rope_table(c), t.rows, c->seq, t.row % c->seq, positions(c, t.row), cfg->num_heads,
             cfg->head_dim, rotary_dim(c), 0);
    mt_segments seg = c->seg ? tile_segments(c, t) : (mt_segments){0};
    const mt_attn_params params = attn_params(c, NULL);
    op->attention(be, s, ws->attn.att, ws->attn.lse, ws->attn.q, mt_rows_at(ws->attn.k, kv0, KV, act),
                  mt_rows_at(ws->attn.v, kv0, KV, act), tile_dims(cfg, c->batch, c->seq, t), &params,
                  c->seg ? &seg : NULL, ws->attn.ws);
    if (out_gate(c->spec)) op->out_gate(be, s, ws->attn.datt, ws->attn.att, ws->attn.gate, (size_t)t.rows * Q);
    MT_FOR_EACH_PIECE(c, p) {
        mt_matmul_piece(c, p, ws->tmp, mt_rows_at(o_input(c), p.row - t.row, Q, act), w->t[MT_T_WO], w->t[MT_T_BO],
                        Q, D);
        const void *out = ws->tmp;
        if (post_norm(c->spec)) /* into h1, free once q is made */
            mt_post_norm_piece(c, p, p.row - t.row, ws->h1, ws->tmp, w->t[MT_T_ATTN_POST_NORM]), out = ws->h1;
        op->add(be, s, mt_x2_row(c, p.row), mt_rows_at(x, p.row, D, act), out, (size_t)p.rows * D);
    }
}

/* A window's share of dk and dv (rows [0, q0 + rows) of its sequence) joins the sequence's fp32
 * sums (the first window the backward takes, its last, starts them), and the window's own rows,
 * which no earlier window's keys reach, are final: rounded back into dk and dv. */
static void sum_window_shares(const mt_block_ctx *c, mt_tile t) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c), KV = kv_width(c->cfg);
    int kv0 = kv_row0(c->seq, t), kv_rows = t.row + t.rows - kv0, later = t.row + t.rows < kv0 + c->seq;
    op->accumulate_f32(c->be, c->stream, ws->attn.dk_sum + kv0 * KV, mt_rows_at(ws->attn.dk, kv0, (int)KV, act),
                       kv_rows * KV, later);
    op->accumulate_f32(c->be, c->stream, ws->attn.dv_sum + kv0 * KV, mt_rows_at(ws->attn.dv, kv0, (int)KV, act),
                       kv_rows * KV, later);
    op->round_f32(c->be, c->stream, mt_rows_at_mut(ws->attn.dk, t.row, (int)KV, act), ws->attn.dk_sum + t.row * KV,
                  t.rows * KV);
    op->round_f32(c->be, c->stream, mt_rows_at_mut(ws->attn.dv, t.row, (int)KV, act), ws->attn.dv_sum + t.row * KV,
                  t.rows * KV);
}

/* The q, k, v projections' and the attention norm's backward of piece p, from the gradients at
 * the projections' outputs (dq the tile's rows, dk and dv the micro-batch's): dxy's rows gain
 * dL/dx. */
static void qkv_backward_piece(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, mt_piece p,
                               const void *x, void *dxy, const void *dq, const void *dk) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = cfg->hidden_size, Q = q_out_width(c), KV = (int)kv_width(cfg);
    const void *dqp = mt_rows_at(dq, p.row - c->at.row, Q, act), *dkp = mt_rows_at(dk, p.row, KV, act);
    const void *dvp = mt_rows_at(ws->attn.dv, p.row, KV, act);
    mt_mixer_norm_piece(c, w, p, x); /* h1 again: the piece buffer held another piece's */
    mt_matmul_dw_piece(c, p, g->t[MT_T_WQ], g->t[MT_T_BQ], dqp, ws->h1, D, Q);
    mt_matmul_dw_piece(c, p, g->t[MT_T_WK], g->t[MT_T_BK], dkp, ws->h1, D, KV);
    mt_matmul_dw_piece(c, p, g->t[MT_T_WV], g->t[MT_T_BV], dvp, ws->h1, D, KV);
    mt_matmul_dx_piece(c, p, ws->tmp, dqp, w->t[MT_T_WQ], D, Q, 0); /* dh1 */
    mt_matmul_dx_piece(c, p, ws->tmp, dkp, w->t[MT_T_WK], D, KV, 1);
    mt_matmul_dx_piece(c, p, ws->tmp, dvp, w->t[MT_T_WV], D, KV, 1);
    mt_rmsnorm_dx_piece(c, p, mt_rows_at_mut(dxy, p.row, D, act), g->t[MT_T_ATTN_NORM], ws->tmp,
                        mt_rows_at(x, p.row, D, act), w->t[MT_T_ATTN_NORM], ws->rstd1 + p.row, 1, D, 1);
}

/* x2 = x + o(att) (with a post-norm: x + norm(o(att))), att = attention(rope(q(h1)), rope(k(h1)),
 * v(h1)), h1 = norm(x), over the tile's rows; with q/k norms, q(h1) and k(h1) are the RMSNorm of the projections (each head's, or the
 * whole projection's). */
static void backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, const void *x,
                     void *dxy) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_backend *be = c->be;
    mt_stream *s = c->stream;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    mt_tile t = c->at;
    size_t act = mt_act_size(c);
    int D = cfg->hidden_size, Q = (int)q_width(cfg), KV = (int)kv_width(cfg), kv0 = kv_row0(c->seq, t);
    int pos0 = t.row % c->seq;
    const void *dy = mt_rows_at(dxy, t.row, D, act);

    if (post_norm(c->spec)) { /* dy becomes the gradient at o's output, o(att) made again */
        MT_FOR_EACH_PIECE(c, p) {
            int at = p.row - t.row;
            mt_matmul_piece(c, p, ws->tmp, mt_rows_at(o_input(c), at, Q, act), w->t[MT_T_WO], w->t[MT_T_BO], Q, D);
            mt_post_norm_piece(c, p, at, ws->h1, ws->tmp, w->t[MT_T_ATTN_POST_NORM]);
            mt_post_norm_dx_piece(c, p, at, g->t[MT_T_ATTN_POST_NORM], mt_rows_at(dxy, p.row, D, act), ws->tmp,
                                  w->t[MT_T_ATTN_POST_NORM]);
        }
        dy = ws->dpost;
    }
    mt_matmul_dw_piece(c, mt_piece_of_tile(c), g->t[MT_T_WO], g->t[MT_T_BO], dy, o_input(c), Q, D);
    if (out_gate(c->spec)) { /* the gradient at the gated output into dq (free until attention_dx), then the
                              * gate's into the gate's place and the attention output's into datt */
        mt_matmul_dx_piece(c, mt_piece_of_tile(c), ws->attn.dq, dy, w->t[MT_T_WO], Q, D, 0);
        op->out_gate_dx(be, s, ws->attn.datt, ws->attn.gate, ws->attn.dq, ws->attn.att, ws->attn.gate,
                        (size_t)t.rows * Q);
    } else {
        mt_matmul_dx_piece(c, mt_piece_of_tile(c), ws->attn.datt, dy, w->t[MT_T_WO], Q, D, 0);
    }
    mt_segments seg = c->seg ? tile_segments(c, t) : (mt_segments){0};
    const mt_attn_params params = attn_params(c, g);
    op->attention_dx(be, s, ws->attn.dq, mt_rows_at_mut(ws->attn.dk, kv0, KV, act),
                     mt_rows_at_mut(ws->attn.dv, kv0, KV, act), ws->attn.datt, ws->attn.att, ws->attn.lse, ws->attn.q,
                     mt_rows_at(ws->attn.k, kv0, KV, act), mt_rows_at(ws->attn.v, kv0, KV, act),
                     tile_dims(cfg, c->batch, c->seq, t), &params, c->seg ? &seg : NULL, ws->attn.ws);
    if (t.rows < c->seq) sum_window_shares(c, t);
    void *dk_rows = mt_rows_at_mut(ws->attn.dk, t.row, KV, act);
    op->rope(be, s, ws->attn.dq, rope_table(c), t.rows, c->seq, pos0, positions(c, t.row), cfg->num_heads,
             cfg->head_dim, rotary_dim(c), 1);
    op->rope(be, s, dk_rows, rope_table(c), t.rows, c->seq, pos0, positions(c, t.row), cfg->num_kv_heads, cfg->head_dim,
             rotary_dim(c), 1);
    /* The gradients at the q/k projections' outputs: through the head norms when there are any,
     * into q and the tile's rows of k, which nothing reads any more (the windows the backward takes
     * later attend to earlier keys only). */
    void *dq = ws->attn.dq, *dk = ws->attn.dk;
    if (qk_norm(c->spec)) {
        int H = cfg->num_heads, KVH = cfg->num_kv_heads;
        dq = ws->attn.q;
        dk = ws->attn.k;
        mt_piece tile = {0, t.rows}; /* pointers at the tile's first row */
        mt_rmsnorm_dx_piece(c, tile, dq, g->t[MT_T_Q_NORM], ws->attn.dq, ws->attn.q_raw, w->t[MT_T_Q_NORM],
                            ws->attn.rstd_q, norm_rows(c, H), norm_width(c, H), 0);
        mt_rmsnorm_dx_piece(c, tile, mt_rows_at_mut(dk, t.row, KV, act), g->t[MT_T_K_NORM], dk_rows,
                            mt_rows_at(ws->attn.k_raw, t.row, KV, act), w->t[MT_T_K_NORM],
                            ws->attn.rstd_k + (size_t)t.row * norm_rows(c, KVH), norm_rows(c, KVH),
                            norm_width(c, KVH), 0);
    }
    if (out_gate(c->spec)) { /* q_proj's gradient: each head's query's and gate's */
        op->gate_join(be, s, ws->attn.qg, dq, ws->attn.gate, t.rows, cfg->num_heads, cfg->head_dim);
        dq = ws->attn.qg;
    }
    MT_FOR_EACH_PIECE(c, p) qkv_backward_piece(c, w, g, p, x, dxy, dq, dk);
}

const mt_mixer_ops mt_mixer_attention_ops = {.walk = walk, .prepare = prepare, .forward = forward, .backward = backward,
                                             .constants_bytes = constants_bytes, .constants = constants};
