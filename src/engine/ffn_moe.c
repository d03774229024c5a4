/* The mixture-of-experts feed-forward, engine side (model/ffn_moe.c declares its tensors), a piece
 * at a time:
 *
 *   h2 = norm(x2);  logits = h2 . router^T;  route: each token's k experts and weights;
 *   permute, gather: the piece's n*k rows sorted by expert, segment by segment (a segment is a
 *   sequence, or the piece's part of one: backend.h);  gu = xs . gate_up[e]^T;  a = swiglu(gu);
 *   ys = a . down[e]^T;  y = x2 + combine(ys, weights)  (+ sigmoid(h2 . g) * shared(h2), Qwen2-MoE)
 *
 * as transformers computes Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock
 * and OlmoeSparseMoeBlock; every step on the device (backend.h's moe group). The backward recomputes
 * the piece's forward (its routing too) and runs each op's backward; the load-balancing loss's
 * gradient (ctx's moe_aux_grad) enters through the router's softmax. */
#include "engine/block_parts.h"

/* The segments of piece p: the engine's dw unit (block.h: a weight gradient adds one sequence, or one
 * piece of a sequence, at a time). */
static int segment_rows(const mt_block_ctx *c, mt_piece p) { return p.rows > c->seq ? c->seq : p.rows; }
static int segments(const mt_block_ctx *c, mt_piece p) {
    int seg = segment_rows(c, p);
    return (p.rows + seg - 1) / seg;
}

static void walk(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s) {
    const mt_config *c = s->c;
    size_t C = s->C, act = s->act, E = (size_t)c->num_experts, k = (size_t)c->experts_per_token;
    size_t D = (size_t)c->hidden_size, F = (size_t)c->moe_intermediate_size, rows = C * k;
    size_t S = (C + (size_t)s->seq - 1) / (size_t)s->seq; /* a piece's whole sequences, or one part of one */
    ws->moe.logits = mt_ws_take(w, C * E * act);
    ws->moe.dlogits = mt_ws_take(w, C * E * act);
    ws->moe.weights = mt_ws_take(w, C * k * 4);
    ws->moe.dweights = mt_ws_take(w, C * k * 4);
    ws->moe.experts = mt_ws_take(w, C * k * 4);
    ws->moe.order = mt_ws_take(w, rows * 4);
    ws->moe.slot_row = mt_ws_take(w, rows * 4);
    ws->moe.offsets = mt_ws_take(w, (E * S + 1) * 4);
    ws->moe.xs = mt_ws_take(w, rows * D * act);
    ws->moe.gu = mt_ws_take(w, rows * 2 * F * act);
    ws->moe.a = mt_ws_take(w, rows * F * act);
    ws->moe.ys = mt_ws_take(w, rows * D * act);
    ws->moe.dys = mt_ws_take(w, rows * D * act);
    ws->moe.dgu = mt_ws_take(w, rows * 2 * F * act);
    if (c->shared_expert_intermediate_size) {
        ws->moe.shared = mt_ws_take(w, C * D * act);
        ws->moe.dshared = mt_ws_take(w, C * D * act);
        ws->moe.gate = mt_ws_take(w, C * act);
        ws->moe.dgate = mt_ws_take(w, C * act);
    }
}

/* h2 and the routed experts' forward of piece p, up to their outputs ys (the statistics added only
 * where the context asks: the forward, not the backward's recomputation). */
static void experts_forward(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, int stats) {
    const mt_moe_iface *moe = &c->be->ops->moe;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int D = cfg->hidden_size, E = cfg->num_experts, k = cfg->experts_per_token, F = cfg->moe_intermediate_size;
    int rows = p.rows * k, S = segments(c, p);
    mt_ffn_norm_piece(c, w, p);
    mt_matmul_piece(c, p, ws->moe.logits, ws->h2, w->t[MT_T_ROUTER], NULL, D, E);
    moe->route(c->be, c->stream, ws->moe.weights, ws->moe.experts, stats ? c->moe_counts : NULL,
               stats ? c->moe_prob_sum : NULL, ws->moe.logits, p.rows, E, k, cfg->norm_topk_prob);
    moe->permute(c->be, c->stream, ws->moe.order, ws->moe.slot_row, ws->moe.offsets, ws->moe.experts, p.rows, E, k,
                 segment_rows(c, p));
    moe->gather(c->be, c->stream, ws->moe.xs, ws->h2, ws->moe.order, p.rows, k, D);
    moe->grouped_matmul(c->be, c->stream, ws->moe.gu, ws->moe.xs, w->t[MT_T_EXPERTS_GATE_UP], NULL, ws->moe.offsets,
                        rows, E, S, D, 2 * F);
    moe->swiglu(c->be, c->stream, ws->moe.a, ws->moe.gu, rows, F, MT_GLU_SWIGLU);
    moe->grouped_matmul(c->be, c->stream, ws->moe.ys, ws->moe.a, w->t[MT_T_EXPERTS_DOWN], NULL, ws->moe.offsets, rows,
                        E, S, F, D);
}

/* The shared expert's output and its gate's logit, from h2 (Qwen2-MoE). */
static void shared_forward(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p) {
    mt_swiglu_mlp_forward(c, p, c->ws->moe.shared, w->t[MT_T_SHARED_GATE], w->t[MT_T_SHARED_UP],
                          w->t[MT_T_SHARED_DOWN], c->cfg->shared_expert_intermediate_size);
    mt_matmul_piece(c, p, c->ws->moe.gate, c->ws->h2, w->t[MT_T_SHARED_EXPERT_GATE], NULL, c->cfg->hidden_size, 1);
}

static void forward(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, void *y) {
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = c->cfg->hidden_size;
    void *yp = mt_rows_at_mut(y, p.row, D, act);
    experts_forward(c, w, p, 1);
    c->be->ops->moe.combine(c->be, c->stream, ws->tmp, ws->moe.ys, ws->moe.weights, ws->moe.slot_row, p.rows,
                            c->cfg->experts_per_token, D);
    c->be->ops->op.add(c->be, c->stream, yp, mt_x2_row(c, p.row), ws->tmp, (size_t)p.rows * D);
    if (c->cfg->shared_expert_intermediate_size) {
        shared_forward(c, w, p);
        c->be->ops->moe.gate_add(c->be, c->stream, yp, yp, ws->moe.shared, ws->moe.gate, p.rows, D);
    }
}

/* The shared expert's backward from dy: its gate's, then its MLP's, adding dL/dh2 into tmp. */
static void shared_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, mt_piece p,
                            const void *dy) {
    mt_block_ws *ws = c->ws;
    int D = c->cfg->hidden_size;
    shared_forward(c, w, p);
    c->be->ops->moe.gate_add_dx(c->be, c->stream, ws->moe.dshared, ws->moe.dgate, dy, ws->moe.shared, ws->moe.gate,
                                p.rows, D);
    mt_matmul_dw_piece(c, p, g->t[MT_T_SHARED_EXPERT_GATE], NULL, ws->moe.dgate, ws->h2, D, 1);
    mt_matmul_dx_piece(c, p, ws->tmp, ws->moe.dgate, w->t[MT_T_SHARED_EXPERT_GATE], D, 1, 1);
    mt_swiglu_mlp_backward(c, p, ws->tmp, 1, ws->moe.dshared, w->t[MT_T_SHARED_GATE], w->t[MT_T_SHARED_UP],
                           w->t[MT_T_SHARED_DOWN], g->t[MT_T_SHARED_GATE], g->t[MT_T_SHARED_UP], g->t[MT_T_SHARED_DOWN],
                           c->cfg->shared_expert_intermediate_size, 0);
}

/* dxy's rows of piece p hold dL/dy and become dL/dx2: the residual path plus the norm's input
 * gradient, dL/dh2 gathered in tmp from the experts, the router and the shared expert. */
static void backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, mt_piece p, void *dxy) {
    const mt_moe_iface *moe = &c->be->ops->moe;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = cfg->hidden_size, E = cfg->num_experts, k = cfg->experts_per_token, F = cfg->moe_intermediate_size;
    int rows = p.rows * k, S = segments(c, p);
    void *dy = mt_rows_at_mut(dxy, p.row, D, act);
    experts_forward(c, w, p, 0);
    moe->combine_dx(c->be, c->stream, ws->moe.dys, ws->moe.dweights, dy, ws->moe.ys, ws->moe.weights, ws->moe.slot_row,
                    p.rows, k, D);
    moe->grouped_matmul_dw(c->be, c->stream, g->t[MT_T_EXPERTS_DOWN], NULL, ws->moe.dys, ws->moe.a, ws->moe.offsets,
                           rows, E, S, F, D);
    moe->grouped_matmul_dx(c->be, c->stream, ws->moe.a, ws->moe.dys, w->t[MT_T_EXPERTS_DOWN], ws->moe.offsets, rows, E,
                           S, F, D); /* da */
    moe->swiglu_dx(c->be, c->stream, ws->moe.dgu, ws->moe.a, ws->moe.gu, rows, F, MT_GLU_SWIGLU);
    moe->grouped_matmul_dw(c->be, c->stream, g->t[MT_T_EXPERTS_GATE_UP], NULL, ws->moe.dgu, ws->moe.xs,
                           ws->moe.offsets, rows, E, S, D, 2 * F);
    moe->grouped_matmul_dx(c->be, c->stream, ws->moe.ys, ws->moe.dgu, w->t[MT_T_EXPERTS_GATE_UP], ws->moe.offsets, rows,
                           E, S, D, 2 * F); /* dxs */
    moe->gather_dx(c->be, c->stream, ws->tmp, ws->moe.ys, ws->moe.slot_row, p.rows, k, D, 0);
    moe->route_dx(c->be, c->stream, ws->moe.dlogits, ws->moe.dweights, ws->moe.logits, ws->moe.experts,
                  c->moe_aux_grad, p.rows, E, k, cfg->norm_topk_prob);
    mt_matmul_dw_piece(c, p, g->t[MT_T_ROUTER], NULL, ws->moe.dlogits, ws->h2, D, E);
    mt_matmul_dx_piece(c, p, ws->tmp, ws->moe.dlogits, w->t[MT_T_ROUTER], D, E, 1);
    if (cfg->shared_expert_intermediate_size) shared_backward(c, w, g, p, dy);
    mt_rmsnorm_dx_piece(c, p, dy, g->t[MT_T_MLP_NORM], ws->tmp, mt_x2_row(c, p.row), w->t[MT_T_MLP_NORM],
                        ws->rstd2 + p.row, 1, D, 1);
}

const mt_ffn_ops mt_ffn_moe_ops = {.walk = walk, .forward = forward, .backward = backward};
