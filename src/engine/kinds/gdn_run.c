/* The Gated DeltaNet mixer, engine side (model/kinds/gdn.c declares its tensors): x2 = x +
 * out_proj(norm(rule(conv(qkv(h1))), z(h1))), h1 = norm(x), the rule's decay and update weight
 * from a(h1) and b(h1) (backend.h's gdn group has each op).
 *
 * The recurrence runs along each sequence (each segment, with packed examples: the convolution and
 * the state restart there), so everything up to the gated norm is the micro-batch's: prepare makes
 * it, in the forward and again before the backward, whatever the tiles. A tile's forward is
 * out_proj and the residual over its rows; its backward takes the gradient back to the norm's
 * inputs over its rows, and the tile the backward takes last (the micro-batch's first rows of its
 * last sequence) takes the recurrence, the convolution and the projections back over the whole
 * micro-batch, adding dL/dx into every row of dxy, which until then holds dL/dx2. Qwen3-Next's fused
 * projections (MT_GDN_FUSED) run as two GEMMs whose outputs gather_cols takes apart into the same
 * buffers, by maps the kind keeps as constants; their gradients go back by scatter_cols. */
#include "engine/block_parts.h"

_Static_assert((int)MT_GDN_CONV == (int)MT_GDN_CONV_KERNEL, "the model's and the backend's kernel of the convolution");

static int key_width(const mt_config *c) { return c->linear_k_heads * c->linear_k_dim; }
static int value_width(const mt_config *c) { return c->linear_v_heads * c->linear_v_dim; }
static int channels(const mt_config *c) { return 2 * key_width(c) + value_width(c); }
static int qk_width(const mt_config *c) { return c->linear_v_heads * c->linear_k_dim; }
static int fused(const mt_layer_spec *s) { return (s->gdn.flags & MT_GDN_FUSED) != 0; }
static int qkvz_width(const mt_config *c) { return channels(c) + value_width(c); }

/* ---- Qwen3-Next's fused projections: where each column of q/k/v, z, b and a lies in them ---- */

static int any_fused(const mt_config *c) {
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        if (s.mixer == MT_MIXER_GDN && fused(&s)) return 1;
    }
    return 0;
}

/* The maps, int32 one after another: q/k/v's C columns and z's V in in_proj_qkvz's output, b's and
 * a's Hv in in_proj_ba's. A q/k head's group there holds its q, its k, then its value heads' v and
 * z (transformers' fix_query_key_value_ordering); in_proj_ba's, its value heads' b then a. */
static size_t constants_bytes(const mt_config *c) {
    return any_fused(c) ? (size_t)(qkvz_width(c) + 2 * c->linear_v_heads) * sizeof(int32_t) : 0;
}
static void constants(const mt_config *c, void *host) {
    if (!any_fused(c)) return;
    int dk = c->linear_k_dim, K = key_width(c), r = c->linear_v_heads / c->linear_k_heads;
    int rv = r * c->linear_v_dim, group = 2 * dk + 2 * rv, H = c->linear_v_heads;
    int32_t *map = host;
    for (int j = 0; j < K; j++) {
        map[j] = j / dk * group + j % dk;          /* q */
        map[K + j] = j / dk * group + dk + j % dk; /* k */
    }
    for (int j = 0; j < value_width(c); j++) {
        map[2 * K + j] = j / rv * group + 2 * dk + j % rv;            /* v */
        map[channels(c) + j] = j / rv * group + 2 * dk + rv + j % rv; /* z */
    }
    for (int h = 0; h < H; h++) {
        map[qkvz_width(c) + h] = h / r * 2 * r + h % r;         /* b */
        map[qkvz_width(c) + H + h] = h / r * 2 * r + r + h % r; /* a */
    }
}
static const int32_t *qkv_map(const mt_block_ctx *c) { return c->constants; }
static const int32_t *z_map(const mt_block_ctx *c) { return qkv_map(c) + channels(c->cfg); }
static const int32_t *b_map(const mt_block_ctx *c) { return qkv_map(c) + qkvz_width(c->cfg); }
static const int32_t *a_map(const mt_block_ctx *c) { return b_map(c) + c->cfg->linear_v_heads; }

/* The ops' dims over n rows of sequences of seq; the q, k and v columns are the convolution's. */
static mt_gdn_dims dims(const mt_config *c, int n, int seq, const mt_segments *seg) {
    return (mt_gdn_dims){.n = n, .seq = seq, .k_heads = c->linear_k_heads, .v_heads = c->linear_v_heads,
                         .d_k = c->linear_k_dim, .d_v = c->linear_v_dim, .qk_ld = channels(c),
                         .v_ld = channels(c), .seg = seg};
}

/* The micro-batch's dims, its segments (if any) from its first row. */
static mt_gdn_dims micro_batch_dims(const mt_block_ctx *c, mt_segments *seg) {
    if (c->seg) *seg = *c->seg, seg->row0 = 0;
    return dims(c->cfg, c->batch * c->seq, c->seq, c->seg ? seg : NULL);
}

static void walk(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s) {
    const mt_config *c = s->c;
    size_t n = s->n, act = s->act, C = channels(c), V = value_width(c), H = c->linear_v_heads, QK = qk_width(c);
    w->cls = MT_WS_MICRO_BATCH;
    ws->gdn.mixed = mt_ws_take(w, n * C * act);
    ws->gdn.conv = mt_ws_take(w, n * C * act);
    ws->gdn.z = mt_ws_take(w, n * V * act);
    ws->gdn.a = mt_ws_take(w, n * H * act);
    ws->gdn.b = mt_ws_take(w, n * H * act);
    ws->gdn.g = mt_ws_take(w, n * H * 4);
    ws->gdn.beta = mt_ws_take(w, n * H * 4);
    ws->gdn.qn = mt_ws_take(w, n * QK * act);
    ws->gdn.kn = mt_ws_take(w, n * QK * act);
    /* o and y, which no one reads after the tiles' backward, then hold dqn and dkn */
    size_t OQ = V > QK ? V : QK;
    ws->gdn.o = ws->gdn.dqn = mt_ws_take(w, n * OQ * act);
    ws->gdn.y = ws->gdn.dkn = mt_ws_take(w, n * OQ * act);
    ws->gdn.dconv = mt_ws_take(w, n * C * act);
    ws->gdn.dout = mt_ws_take(w, n * V * act);
    ws->gdn.dz = mt_ws_take(w, n * V * act);
    ws->gdn.dg = mt_ws_take(w, n * H * 4);
    ws->gdn.dbeta = mt_ws_take(w, n * H * 4);
    ws->gdn.da = mt_ws_take(w, n * H * act);
    ws->gdn.db = mt_ws_take(w, n * H * act);
    ws->gdn.ws = mt_ws_take(w, s->be->ops->gdn.rule_workspace(s->be, dims(c, (int)n, s->seq, NULL)));
    if (any_fused(c)) {
        ws->gdn.qkvz = mt_ws_take(w, n * (size_t)qkvz_width(c) * act);
        ws->gdn.ba = mt_ws_take(w, n * 2 * H * act);
    }
}

static void *col(void *base, int col, size_t act) { return (char *)base + (size_t)col * act; }

/* The block's projections of h1, their weights, the buffers of their outputs over the micro-batch
 * (backward: of their gradients, q/k/v's in conv's place) and their widths: Qwen3-Next's two fused
 * ones, or four. */
typedef struct {
    mt_tensor_kind weight;
    void *rows;
    int width;
} projection;

static int projections(const mt_block_ctx *c, int backward, projection p[4]) {
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    int H = cfg->linear_v_heads;
    if (fused(c->spec)) {
        p[0] = (projection){MT_T_GDN_QKVZ, ws->gdn.qkvz, qkvz_width(cfg)};
        p[1] = (projection){MT_T_GDN_BA, ws->gdn.ba, 2 * H};
        return 2;
    }
    p[0] = (projection){MT_T_GDN_QKV, backward ? ws->gdn.conv : ws->gdn.mixed, channels(cfg)};
    p[1] = (projection){MT_T_GDN_Z, backward ? ws->gdn.dz : ws->gdn.z, value_width(cfg)};
    p[2] = (projection){MT_T_GDN_B, backward ? ws->gdn.db : ws->gdn.b, H};
    p[3] = (projection){MT_T_GDN_A, backward ? ws->gdn.da : ws->gdn.a, H};
    return 4;
}

/* The fused projections' outputs apart: q/k/v (the convolution's input), z, b and a. */
static void unfuse(const mt_block_ctx *c) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_block_ws *ws = c->ws;
    int n = c->batch * c->seq, QKVZ = qkvz_width(c->cfg), H = c->cfg->linear_v_heads;
    op->gather_cols(c->be, c->stream, ws->gdn.mixed, ws->gdn.qkvz, qkv_map(c), n, QKVZ, channels(c->cfg));
    op->gather_cols(c->be, c->stream, ws->gdn.z, ws->gdn.qkvz, z_map(c), n, QKVZ, value_width(c->cfg));
    op->gather_cols(c->be, c->stream, ws->gdn.b, ws->gdn.ba, b_map(c), n, 2 * H, H);
    op->gather_cols(c->be, c->stream, ws->gdn.a, ws->gdn.ba, a_map(c), n, 2 * H, H);
}

/* Its backward: the gradients of q/k/v (in conv's place), z, b and a into the fused outputs'. */
static void fuse_dx(const mt_block_ctx *c) {
    const mt_op_iface *op = &c->be->ops->op;
    mt_block_ws *ws = c->ws;
    int n = c->batch * c->seq, QKVZ = qkvz_width(c->cfg), H = c->cfg->linear_v_heads;
    op->scatter_cols(c->be, c->stream, ws->gdn.qkvz, ws->gdn.conv, qkv_map(c), n, QKVZ, channels(c->cfg));
    op->scatter_cols(c->be, c->stream, ws->gdn.qkvz, ws->gdn.dz, z_map(c), n, QKVZ, value_width(c->cfg));
    op->scatter_cols(c->be, c->stream, ws->gdn.ba, ws->gdn.db, b_map(c), n, 2 * H, H);
    op->scatter_cols(c->be, c->stream, ws->gdn.ba, ws->gdn.da, a_map(c), n, 2 * H, H);
}

/* The projections of h1 over the micro-batch, then the convolution, the q/k norms, the decay, the
 * rule and the gated norm: y. */
static void prepare(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    const mt_gdn_iface *op = &c->be->ops->gdn;
    const mt_config *cfg = c->cfg;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = cfg->hidden_size, K = key_width(cfg), C = channels(cfg);
    projection pr[4];
    int count = projections(c, 0, pr);
    MT_FOR_EACH_PIECE(c, p) {
        mt_mixer_norm_piece(c, w, p, x);
        for (int i = 0; i < count; i++)
            mt_matmul_piece(c, p, mt_rows_at_mut(pr[i].rows, p.row, pr[i].width, act), ws->h1, w->t[pr[i].weight],
                            NULL, D, pr[i].width);
    }
    if (fused(c->spec)) unfuse(c);
    mt_segments seg;
    mt_gdn_dims d = micro_batch_dims(c, &seg);
    op->conv(c->be, c->stream, ws->gdn.conv, ws->gdn.mixed, w->t[MT_T_GDN_CONV], C, d);
    op->qk_norm(c->be, c->stream, ws->gdn.qn, ws->gdn.kn, ws->gdn.conv, col(ws->gdn.conv, K, act), d);
    op->decay(c->be, c->stream, ws->gdn.g, ws->gdn.beta, ws->gdn.a, ws->gdn.b, w->t[MT_T_GDN_A_LOG],
              w->t[MT_T_GDN_DT_BIAS], d);
    op->rule(c->be, c->stream, ws->gdn.o, ws->gdn.qn, ws->gdn.kn, col(ws->gdn.conv, 2 * K, act), ws->gdn.g,
             ws->gdn.beta, d, ws->gdn.ws);
    op->norm(c->be, c->stream, ws->gdn.y, ws->gdn.o, ws->gdn.z, w->t[MT_T_GDN_NORM], c->spec->norm_eps, d);
}

/* x2 = x + out_proj(y) over the tile's rows. */
static void forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x) {
    size_t act = mt_act_size(c);
    int D = c->cfg->hidden_size, V = value_width(c->cfg);
    MT_FOR_EACH_PIECE(c, p) {
        mt_matmul_piece(c, p, c->ws->tmp, mt_rows_at(c->ws->gdn.y, p.row, V, act), w->t[MT_T_GDN_OUT], NULL, V, D);
        c->be->ops->op.add(c->be, c->stream, mt_x2_row(c, p.row), mt_rows_at(x, p.row, D, act), c->ws->tmp,
                           (size_t)p.rows * D);
    }
}

/* Piece p's projections back from their gradients to h1 and through the pre-norm: dxy's rows gain
 * dL/dx. */
static void projections_backward_piece(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                                       mt_piece p, const void *x, void *dxy) {
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int D = c->cfg->hidden_size;
    projection pr[4];
    int count = projections(c, 1, pr);
    mt_mixer_norm_piece(c, w, p, x);
    for (int i = 0; i < count; i++)
        mt_matmul_dw_piece(c, p, g->t[pr[i].weight], NULL, mt_rows_at(pr[i].rows, p.row, pr[i].width, act), ws->h1, D,
                           pr[i].width);
    for (int i = 0; i < count; i++) /* dh1 */
        mt_matmul_dx_piece(c, p, ws->tmp, mt_rows_at(pr[i].rows, p.row, pr[i].width, act), w->t[pr[i].weight], D,
                           pr[i].width, i > 0);
    mt_rmsnorm_dx_piece(c, p, mt_rows_at_mut(dxy, p.row, D, act), g->t[MT_T_ATTN_NORM], ws->tmp,
                        mt_rows_at(x, p.row, D, act), w->t[MT_T_ATTN_NORM], ws->rstd1 + p.row, 1, D, 1);
}

/* From dout and dz (every row's) back through the rule, the q/k norms, the decay and the
 * convolution (its input's gradient into conv, free by then), then the projections piece by
 * piece. */
static void micro_batch_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                                 const void *x, void *dxy) {
    const mt_gdn_iface *op = &c->be->ops->gdn;
    mt_block_ws *ws = c->ws;
    size_t act = mt_act_size(c);
    int K = key_width(c->cfg), C = channels(c->cfg);
    mt_segments seg;
    mt_gdn_dims d = micro_batch_dims(c, &seg);
    op->rule_dx(c->be, c->stream, ws->gdn.dqn, ws->gdn.dkn, col(ws->gdn.dconv, 2 * K, act), ws->gdn.dg,
                ws->gdn.dbeta, ws->gdn.dout, ws->gdn.qn, ws->gdn.kn, col(ws->gdn.conv, 2 * K, act), ws->gdn.g,
                ws->gdn.beta, d, ws->gdn.ws);
    op->qk_norm_dx(c->be, c->stream, ws->gdn.dconv, col(ws->gdn.dconv, K, act), ws->gdn.dqn, ws->gdn.dkn,
                   ws->gdn.conv, col(ws->gdn.conv, K, act), d);
    op->decay_dx(c->be, c->stream, ws->gdn.da, ws->gdn.db, g->t[MT_T_GDN_A_LOG], g->t[MT_T_GDN_DT_BIAS], ws->gdn.dg,
                 ws->gdn.dbeta, ws->gdn.a, ws->gdn.b, w->t[MT_T_GDN_A_LOG], w->t[MT_T_GDN_DT_BIAS], d);
    op->conv_dx(c->be, c->stream, ws->gdn.conv, g->t[MT_T_GDN_CONV], ws->gdn.dconv, ws->gdn.mixed,
                w->t[MT_T_GDN_CONV], C, d);
    if (fused(c->spec)) fuse_dx(c);
    mt_block_ctx all = *c;
    all.at = (mt_tile){0, 0};
    MT_FOR_EACH_PIECE(&all, p) projections_backward_piece(&all, w, g, p, x, dxy);
}

/* Whether tile t is the backward's last: the first rows of the micro-batch's last sequence (its
 * first window, or the last tile of whole sequences). */
static int last_of_backward(const mt_block_ctx *c, mt_tile t) {
    int n = c->batch * c->seq;
    return t.row % c->seq == 0 && t.row + (t.rows > c->seq ? t.rows : c->seq) >= n;
}

/* out_proj's gradients over the tile's rows (y's rows become dL/dy), the gated norm's (into dout
 * and dz); after the backward's last tile, the rest over the micro-batch. */
static void backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, const void *x,
                     void *dxy) {
    mt_block_ws *ws = c->ws;
    mt_tile t = c->at;
    size_t act = mt_act_size(c);
    int D = c->cfg->hidden_size, V = value_width(c->cfg);
    const void *dy = mt_rows_at(dxy, t.row, D, act);
    void *y = mt_rows_at_mut(ws->gdn.y, t.row, V, act);
    mt_matmul_dw_piece(c, mt_piece_of_tile(c), g->t[MT_T_GDN_OUT], NULL, dy, y, V, D);
    mt_matmul_dx_piece(c, mt_piece_of_tile(c), y, dy, w->t[MT_T_GDN_OUT], V, D, 0);
    c->be->ops->gdn.norm_dx(c->be, c->stream, mt_rows_at_mut(ws->gdn.dout, t.row, V, act),
                            mt_rows_at_mut(ws->gdn.dz, t.row, V, act), g->t[MT_T_GDN_NORM], y,
                            mt_rows_at(ws->gdn.o, t.row, V, act), mt_rows_at(ws->gdn.z, t.row, V, act),
                            w->t[MT_T_GDN_NORM], c->spec->norm_eps, dims(c->cfg, t.rows, t.rows, NULL));
    if (last_of_backward(c, t)) micro_batch_backward(c, w, g, x, dxy);
}

const mt_mixer_ops mt_mixer_gdn_ops = {.walk = walk, .prepare = prepare, .forward = forward, .backward = backward,
                                       .constants_bytes = constants_bytes, .constants = constants};
