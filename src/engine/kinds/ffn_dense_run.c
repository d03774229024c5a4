/* The dense feed-forward, engine side (model/kinds/ffn_dense.c declares its tensors): y = x2 +
 * down(silu(gate(h2)) * up(h2)), h2 = norm(x2), a piece at a time; and the SwiGLU MLP a shared
 * expert uses too. */
#include "engine/block_parts.h"

/* The SwiGLU MLP's buffers (g, u, a, dg, du: [C, F]), which a shared expert takes too: block.c
 * walks them for every model with a dense MLP of some width (mt_config_dense_mlp_width). */
void mt_swiglu_mlp_walk(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s) {
    size_t CF = s->C * (size_t)mt_config_dense_mlp_width(s->c) * s->act;
    ws->mlp.g = mt_ws_take(w, CF);
    ws->mlp.u = mt_ws_take(w, CF);
    ws->mlp.a = mt_ws_take(w, CF);
    ws->mlp.dg = mt_ws_take(w, CF);
    ws->mlp.du = mt_ws_take(w, CF);
}

/* g, u, a of piece p from h2. */
static void mlp_input_side(const mt_block_ctx *c, mt_piece p, const void *wg, const void *wu, int F) {
    mt_block_ws *ws = c->ws;
    int D = c->cfg->hidden_size;
    mt_matmul_piece(c, p, ws->mlp.g, ws->h2, wg, NULL, D, F);
    mt_matmul_piece(c, p, ws->mlp.u, ws->h2, wu, NULL, D, F);
    c->be->ops->op.swiglu(c->be, c->stream, ws->mlp.a, ws->mlp.g, ws->mlp.u, (size_t)p.rows * F, mt_glu_of(c->spec));
}

void mt_swiglu_mlp_forward(const mt_block_ctx *c, mt_piece p, void *out, const void *wg, const void *wu,
                           const void *wd, int F) {
    mlp_input_side(c, p, wg, wu, F);
    mt_matmul_piece(c, p, out, c->ws->mlp.a, wd, NULL, F, c->cfg->hidden_size);
}

/* out = down(a), a = silu(g) * u, g = gate(h2), u = up(h2). da takes a's buffer once down's weight
 * gradient has read a. */
void mt_swiglu_mlp_backward(const mt_block_ctx *c, mt_piece p, void *dh2, int accumulate, const void *dout,
                            const void *wg, const void *wu, const void *wd, float *dwg, float *dwu, float *dwd, int F,
                            int recompute) {
    mt_block_ws *ws = c->ws;
    int D = c->cfg->hidden_size;
    if (recompute) mlp_input_side(c, p, wg, wu, F);
    mt_matmul_dw_piece(c, p, dwd, NULL, dout, ws->mlp.a, F, D);
    mt_matmul_dx_piece(c, p, ws->mlp.a, dout, wd, F, D, 0); /* da */
    c->be->ops->op.swiglu_dx(c->be, c->stream, ws->mlp.dg, ws->mlp.du, ws->mlp.a, ws->mlp.g, ws->mlp.u,
                             (size_t)p.rows * F, mt_glu_of(c->spec));
    mt_matmul_dw_piece(c, p, dwg, NULL, ws->mlp.dg, ws->h2, D, F);
    mt_matmul_dw_piece(c, p, dwu, NULL, ws->mlp.du, ws->h2, D, F);
    mt_matmul_dx_piece(c, p, dh2, ws->mlp.dg, wg, D, F, accumulate);
    mt_matmul_dx_piece(c, p, dh2, ws->mlp.du, wu, D, F, 1);
}

void mt_ffn_norm_piece(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p) {
    int D = c->cfg->hidden_size;
    c->be->ops->op.rmsnorm(c->be, c->stream, c->ws->h2, c->ws->rstd2 + p.row, mt_x2_row(c, p.row),
                           w->t[MT_T_MLP_NORM], p.rows, D, mt_norm_params(c->spec));
}

static int post_norm(const mt_layer_spec *s) { return (s->ffn_spec.flags & MT_FFN_POST_NORM) != 0; }

/* y = x2 + mlp(h2), or with a post-norm x2 + norm(mlp(h2)). */
static void forward(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, void *y) {
    size_t act = mt_act_size(c);
    int D = c->cfg->hidden_size;
    mt_ffn_norm_piece(c, w, p);
    mt_swiglu_mlp_forward(c, p, c->ws->tmp, w->t[MT_T_WG], w->t[MT_T_WU], w->t[MT_T_WD], c->cfg->intermediate_size);
    const void *out = c->ws->tmp;
    if (post_norm(c->spec)) /* into h2, free once the MLP has read it */
        mt_post_norm_piece(c, p, 0, c->ws->h2, c->ws->tmp, w->t[MT_T_FFN_POST_NORM]), out = c->ws->h2;
    c->be->ops->op.add(c->be, c->stream, mt_rows_at_mut(y, p.row, D, act), mt_x2_row(c, p.row), out,
                       (size_t)p.rows * D);
}

/* dxy's rows hold dL/dy and become dL/dx2: the residual path plus the norm's input gradient. */
static void backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, mt_piece p, void *dxy) {
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = c->cfg->hidden_size;
    void *dy = mt_rows_at_mut(dxy, p.row, D, act);
    const void *dout = dy;
    int F = c->cfg->intermediate_size, recompute = 1;
    mt_ffn_norm_piece(c, w, p);
    if (post_norm(c->spec)) { /* the MLP's output again (h1 is free here), and the gradient at it */
        mt_swiglu_mlp_forward(c, p, ws->tmp, w->t[MT_T_WG], w->t[MT_T_WU], w->t[MT_T_WD], F);
        mt_post_norm_piece(c, p, 0, ws->h1, ws->tmp, w->t[MT_T_FFN_POST_NORM]);
        mt_post_norm_dx_piece(c, p, 0, g->t[MT_T_FFN_POST_NORM], dy, ws->tmp, w->t[MT_T_FFN_POST_NORM]);
        dout = ws->dpost, recompute = 0;
    }
    mt_swiglu_mlp_backward(c, p, ws->tmp, 0, dout, w->t[MT_T_WG], w->t[MT_T_WU], w->t[MT_T_WD], g->t[MT_T_WG],
                           g->t[MT_T_WU], g->t[MT_T_WD], F, recompute);
    mt_rmsnorm_dx_piece(c, p, dy, g->t[MT_T_MLP_NORM], ws->tmp, mt_x2_row(c, p.row), w->t[MT_T_MLP_NORM],
                        ws->rstd2 + p.row, 1, D, 1);
}

/* Its buffers are the SwiGLU MLP's (mt_swiglu_mlp_walk). */
const mt_ffn_ops mt_ffn_dense_ops = {.forward = forward, .backward = backward};
