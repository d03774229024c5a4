/* The mixture-of-experts feed-forward, engine side (model/kinds/ffn_moe.c declares its tensors), a piece
 * at a time:
 *
 *   h2 = norm(x2);  logits = h2 . router^T (+ b);  route: each token's k experts and weights;
 *   permute, gather: the piece's n*k rows sorted by expert, segment by segment (a segment is a
 *   sequence, or the piece's part of one: backend.h);  gu = xs . gate_up[e]^T (+ b[e]);
 *   a = glu(gu);  ys = a . down[e]^T (+ b[e]);  y = x2 + combine(ys, weights)
 *   (+ sigmoid(h2 . g) * shared(h2), Qwen2-MoE)
 *
 * as transformers computes Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock,
 * OlmoeSparseMoeBlock and GptOssMLP (the biases where the spec has them: a NULL tensor is none; the
 * GLU as the spec names it, gpt-oss's clamped one); every step on the device (backend.h's moe
 * group). The backward recomputes the piece's forward (its routing too) and runs each op's
 * backward; the load-balancing loss's gradient enters through the router's softmax.
 *
 * Over a pass it keeps (its pass entries, block_parts.h) each micro-batch's routing statistics,
 * which the forwards add to, and the load-balancing loss's gradient per router probability, which
 * the head's job makes and the backwards take: counts [M][MoE blocks][E] (each sparse block's
 * real tokens per expert), padding [M][MoE blocks][E] (its padding tokens per expert: they run
 * through the experts too, outside the statistics), prob_sum [M][E] (the router probabilities
 * summed over every sparse block's tokens), aux_grad [M][E], one after another on the device; the
 * counts and padding on the host, where the engine reads which experts the backward needs
 * (unrouted). */
#include "engine/block_parts.h"

/* The segments of piece p: the engine's dw unit (block.h: a weight gradient adds one sequence, or one
 * piece of a sequence, at a time). */
static int segment_rows(const mt_block_ctx *c, mt_piece p) { return p.rows > c->seq ? c->seq : p.rows; }
static int segments(const mt_block_ctx *c, mt_piece p) {
    int seg = segment_rows(c, p);
    return (p.rows + seg - 1) / seg;
}

/* ---- the pass's state ---- */

static int sparse_blocks(const mt_config *c) { return mt_config_moe_layers(c); }
static size_t counts_size(const mt_pass_state *p) {
    return (size_t)p->micro_batches * (size_t)sparse_blocks(p->cfg) * (size_t)p->cfg->num_experts;
}
static int32_t *counts(const mt_pass_state *p) { return p->dev; }
static int32_t *padding(const mt_pass_state *p) { return counts(p) + counts_size(p); }
static float *prob_sum(const mt_pass_state *p) { return (float *)(padding(p) + counts_size(p)); }
static float *aux_grad(const mt_pass_state *p) {
    return prob_sum(p) + (size_t)p->micro_batches * (size_t)p->cfg->num_experts;
}

/* Block l's index among the sparse blocks (its rows of the counts). */
static int sparse_index(const mt_config *c, int l) {
    int i = 0;
    for (int b = 0; b < l; b++) i += mt_config_layer_is_moe(c, b);
    return i;
}

static size_t pass_bytes(const mt_config *c, int micro_batches, int on_host) {
    size_t M = (size_t)micro_batches, E = (size_t)c->num_experts, counts = 2 * M * (size_t)sparse_blocks(c) * E * 4;
    return on_host ? counts : counts + 2 * M * E * 4;
}

static void pass_begin(const mt_pass_state *p, mt_stream *s) {
    mt_zero_async(p->be, counts(p), 2 * counts_size(p) * 4, s);
    mt_zero_async(p->be, prob_sum(p), (size_t)p->micro_batches * (size_t)p->cfg->num_experts * 4, s);
}

/* transformers' load_balancing_loss_func over micro-batch m's forward, every sparse block's; its
 * gradient per router probability weighted by router_aux_loss_coef. */
static void pass_loss(const mt_pass_state *p, mt_stream *s, int m, int rows, float mean) {
    size_t E = (size_t)p->cfg->num_experts;
    int layers = sparse_blocks(p->cfg);
    p->be->ops->moe.aux_loss(p->be, s, p->aux_loss, aux_grad(p) + m * E, counts(p) + (size_t)m * layers * E,
                             prob_sum(p) + m * E, layers, rows, (int)E, mean, mean * p->cfg->router_aux_loss_coef);
}

static void pass_home(const mt_pass_state *p, mt_stream *s) {
    mt_copy_async(p->be, p->host, counts(p), 2 * counts_size(p) * 4, s);
}

/* Once pass_home's copy has landed: skip[x] = 1 for each expert of block `layer` that no token of
 * the pass's micro-batches chose, real or padding (its weights are read by no GEMM of the pass).
 * Returns how many; 0 for a block without experts. */
static int unrouted(const mt_pass_state *p, int layer, uint8_t *skip) {
    const mt_config *c = p->cfg;
    if (!mt_config_layer_is_moe(c, layer)) return 0;
    int M = p->micro_batches, E = c->num_experts, layers = sparse_blocks(c), l = sparse_index(c, layer), none = 0;
    const int32_t *real = p->host, *pad = real + counts_size(p);
    for (int x = 0; x < E; x++) {
        int64_t n = 0;
        for (int m = 0; m < M; m++) {
            size_t at = ((size_t)m * layers + l) * E + x;
            n += real[at] + pad[at];
        }
        skip[x] = n == 0;
        none += skip[x];
    }
    return none;
}

/* The largest and smallest share of a sparse block's routed tokens an expert got over the pass's
 * micro-batches (this rank's tokens). */
static void pass_report(const mt_pass_state *p, mt_pass_report *r) {
    int M = p->micro_batches, E = p->cfg->num_experts, layers = sparse_blocks(p->cfg);
    const int32_t *host = p->host;
    for (int l = 0; l < layers; l++) {
        double routed = 0, most = 0, least = -1;
        for (int x = 0; x < E; x++) {
            double n = 0;
            for (int m = 0; m < M; m++) n += host[((size_t)m * layers + l) * E + x];
            routed += n;
            if (n > most) most = n;
            if (least < 0 || n < least) least = n;
        }
        if (routed <= 0) continue;
        if (most / routed > r->load_max) r->load_max = most / routed;
        if (least / routed < r->load_min) r->load_min = least / routed;
    }
}

/* The block's statistics of its micro-batch (forward), and the loss's gradient (backward, where the
 * config puts the loss in the objective); NULL without a pass state. */
static int32_t *block_counts(const mt_block_ctx *c) {
    if (!c->pass) return NULL;
    size_t E = (size_t)c->cfg->num_experts;
    return counts(c->pass) + ((size_t)c->micro * sparse_blocks(c->cfg) + sparse_index(c->cfg, c->layer)) * E;
}
static float *block_prob_sum(const mt_block_ctx *c) {
    return c->pass ? prob_sum(c->pass) + (size_t)c->micro * c->cfg->num_experts : NULL;
}
static int32_t *block_padding(const mt_block_ctx *c) {
    if (!c->pass) return NULL;
    size_t E = (size_t)c->cfg->num_experts;
    return padding(c->pass) + ((size_t)c->micro * sparse_blocks(c->cfg) + sparse_index(c->cfg, c->layer)) * E;
}
static const float *block_aux_grad(const mt_block_ctx *c) {
    if (!c->pass || !c->cfg->output_router_logits) return NULL;
    return aux_grad(c->pass) + (size_t)c->micro * c->cfg->num_experts;
}

/* The block's variants, as its spec has them. */
static int renorm(const mt_block_ctx *c) { return (c->spec->ffn_spec.flags & MT_FFN_RENORM) != 0; }
static int shared(const mt_block_ctx *c) { return (c->spec->ffn_spec.flags & MT_FFN_SHARED_EXPERT) != 0; }

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

/* Rows [row, row + rows) of a piece, all real tokens or all padding (mt_block_ctx.real_rows). */
typedef struct {
    int row, rows, real;
} token_run;

/* The next run of piece p's rows from row `from`: the longest stretch of real rows, or of padding,
 * across the sequences it spans. Without padding information the piece is one real run. */
static token_run next_run(const mt_block_ctx *c, mt_piece p, int from) {
    int end = p.row + p.rows;
    if (!c->real_rows) return (token_run){from, end - from, 1};
    token_run r = {from, 0, -1};
    for (int at = from; at < end;) {
        int b = at / c->seq, seq_end = (b + 1) * c->seq < end ? (b + 1) * c->seq : end;
        int real_end = b * c->seq + c->real_rows[b], real = at < real_end;
        int stop = real ? (real_end < seq_end ? real_end : seq_end) : seq_end;
        if (r.real >= 0 && real != r.real) break;
        r.real = real;
        r.rows += stop - at;
        at = stop;
    }
    return r;
}

/* The router's softmax, top k and weights of piece p, its statistics (the forward's, `stats`) over
 * the real tokens only; the padding's choices counted apart. */
static void route(const mt_block_ctx *c, mt_piece p, int stats) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int E = cfg->num_experts, k = cfg->experts_per_token;
    for (token_run r = next_run(c, p, p.row); r.rows > 0; r = next_run(c, p, r.row + r.rows)) {
        int i = r.row - p.row, counted = stats && r.real;
        int32_t *tally = !stats ? NULL : r.real ? block_counts(c) : block_padding(c);
        MT_OP(c, "route: softmax, top k", 0,
              c->be->ops->moe.route(c->be, c->stream, ws->moe.weights + (size_t)i * k, ws->moe.experts + (size_t)i * k,
                                    tally, counted ? block_prob_sum(c) : NULL,
                                    mt_rows_at(ws->moe.logits, i, E, mt_act_size(c)), r.rows, E, k, renorm(c)));
    }
}

/* Its backward into dlogits, the load-balancing loss's gradient through the real tokens only. */
static void route_dx(const mt_block_ctx *c, mt_piece p) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int E = cfg->num_experts, k = cfg->experts_per_token;
    size_t act = mt_act_size(c);
    for (token_run r = next_run(c, p, p.row); r.rows > 0; r = next_run(c, p, r.row + r.rows)) {
        int i = r.row - p.row;
        MT_OP(c, "route_dx", 0,
              c->be->ops->moe.route_dx(c->be, c->stream, mt_rows_at_mut(ws->moe.dlogits, i, E, act),
                                       ws->moe.dweights + (size_t)i * k, mt_rows_at(ws->moe.logits, i, E, act),
                                       ws->moe.experts + (size_t)i * k, r.real ? block_aux_grad(c) : NULL, r.rows, E,
                                       k, renorm(c)));
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
    MT_OP(c, "norm", 0, mt_ffn_norm_piece(c, w, p));
    MT_OP(c, "router GEMM", mt_gemm_flops(p.rows, D, E),
          mt_matmul_piece(c, p, ws->moe.logits, ws->h2, w->t[MT_T_ROUTER], w->t[MT_T_ROUTER_BIAS], D, E));
    route(c, p, stats);
    MT_OP(c, "permute", 0,
          moe->permute(c->be, c->stream, ws->moe.order, ws->moe.slot_row, ws->moe.offsets, ws->moe.experts, p.rows, E,
                       k, segment_rows(c, p)));
    MT_OP(c, "gather", 0, moe->gather(c->be, c->stream, ws->moe.xs, ws->h2, ws->moe.order, p.rows, k, D));
    MT_OP(c, "gate/up GEMM", mt_gemm_flops(rows, D, 2 * F),
          moe->grouped_matmul(c->be, c->stream, ws->moe.gu, ws->moe.xs, w->t[MT_T_EXPERTS_GATE_UP],
                              w->t[MT_T_EXPERTS_GATE_UP_BIAS], ws->moe.offsets, rows, E, S, D, 2 * F));
    MT_OP(c, "SwiGLU", 0, moe->swiglu(c->be, c->stream, ws->moe.a, ws->moe.gu, rows, F, mt_glu_of(c->spec)));
    MT_OP(c, "down GEMM", mt_gemm_flops(rows, F, D),
          moe->grouped_matmul(c->be, c->stream, ws->moe.ys, ws->moe.a, w->t[MT_T_EXPERTS_DOWN],
                              w->t[MT_T_EXPERTS_DOWN_BIAS], ws->moe.offsets, rows, E, S, F, D));
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
    MT_OP(c, "combine", 0,
          c->be->ops->moe.combine(c->be, c->stream, ws->tmp, ws->moe.ys, ws->moe.weights, ws->moe.slot_row, p.rows,
                                  c->cfg->experts_per_token, D));
    MT_OP(c, "residual add", 0,
          c->be->ops->op.add(c->be, c->stream, yp, mt_x2_row(c, p.row), ws->tmp, (size_t)p.rows * D));
    if (shared(c)) {
        MT_OP(c, "shared expert", 0, shared_forward(c, w, p));
        MT_OP(c, "shared expert's gate", 0,
              c->be->ops->moe.gate_add(c->be, c->stream, yp, yp, ws->moe.shared, ws->moe.gate, p.rows, D));
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
    mt_block_ctx again = *c; /* the forward again, in the profile's phase of the recomputation */
    again.phase = MT_PHASE_RECOMPUTE;
    experts_forward(&again, w, p, 0);
    MT_OP(c, "combine_dx", 0,
          moe->combine_dx(c->be, c->stream, ws->moe.dys, ws->moe.dweights, dy, ws->moe.ys, ws->moe.weights,
                          ws->moe.slot_row, p.rows, k, D));
    MT_OP(c, "down dW GEMM", mt_gemm_flops(rows, F, D),
          moe->grouped_matmul_dw(c->be, c->stream, g->t[MT_T_EXPERTS_DOWN], g->t[MT_T_EXPERTS_DOWN_BIAS], ws->moe.dys,
                                 ws->moe.a, ws->moe.offsets, rows, E, S, F, D));
    MT_OP(c, "down dX GEMM", mt_gemm_flops(rows, F, D),
          moe->grouped_matmul_dx(c->be, c->stream, ws->moe.a, ws->moe.dys, w->t[MT_T_EXPERTS_DOWN], ws->moe.offsets,
                                 rows, E, S, F, D)); /* da */
    MT_OP(c, "SwiGLU_dx", 0,
          moe->swiglu_dx(c->be, c->stream, ws->moe.dgu, ws->moe.a, ws->moe.gu, rows, F, mt_glu_of(c->spec)));
    MT_OP(c, "gate/up dW GEMM", mt_gemm_flops(rows, D, 2 * F),
          moe->grouped_matmul_dw(c->be, c->stream, g->t[MT_T_EXPERTS_GATE_UP], g->t[MT_T_EXPERTS_GATE_UP_BIAS],
                                 ws->moe.dgu, ws->moe.xs, ws->moe.offsets, rows, E, S, D, 2 * F));
    MT_OP(c, "gate/up dX GEMM", mt_gemm_flops(rows, D, 2 * F),
          moe->grouped_matmul_dx(c->be, c->stream, ws->moe.ys, ws->moe.dgu, w->t[MT_T_EXPERTS_GATE_UP],
                                 ws->moe.offsets, rows, E, S, D, 2 * F)); /* dxs */
    MT_OP(c, "gather_dx", 0, moe->gather_dx(c->be, c->stream, ws->tmp, ws->moe.ys, ws->moe.slot_row, p.rows, k, D, 0));
    route_dx(c, p);
    MT_OP(c, "router dW GEMM", mt_gemm_flops(p.rows, D, E),
          mt_matmul_dw_piece(c, p, g->t[MT_T_ROUTER], g->t[MT_T_ROUTER_BIAS], ws->moe.dlogits, ws->h2, D, E));
    MT_OP(c, "router dX GEMM", mt_gemm_flops(p.rows, D, E),
          mt_matmul_dx_piece(c, p, ws->tmp, ws->moe.dlogits, w->t[MT_T_ROUTER], D, E, 1));
    if (shared(c)) MT_OP(c, "shared expert", 0, shared_backward(c, w, g, p, dy));
    MT_OP(c, "norm_dx", 0,
          mt_rmsnorm_dx_piece(c, p, dy, g->t[MT_T_MLP_NORM], ws->tmp, mt_x2_row(c, p.row), w->t[MT_T_MLP_NORM],
                              ws->rstd2 + p.row, 1, D, 1));
}

const mt_ffn_ops mt_ffn_moe_ops = {.walk = walk, .forward = forward, .backward = backward, .pass_bytes = pass_bytes,
                                   .pass_begin = pass_begin, .pass_loss = pass_loss, .pass_home = pass_home,
                                   .pass_report = pass_report, .unrouted = unrouted};
