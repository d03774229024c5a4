/* A block: its mixer, then its feed-forward (model/block_kinds.h), each of the kind the config gives
 * it; the helpers the kinds share (engine/block_parts.h); the workspace every kind of the model
 * takes its buffers from. */
#include "engine/block_parts.h"

#include <string.h>

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

/* The same rule: whole sequences, or a part of one. */
int mt_block_tile_rows(int batch, int seq, int tile) { return mt_block_piece_rows(batch, seq, tile); }

/* ---- tiles ---- */

/* The tiles of the micro-batch: groups of whole sequences, or each sequence's windows, cut from its
 * end (a first window of the rest, then windows of T rows). */
typedef struct {
    int T, windows; /* rows a tile at most; windows a sequence (0: tiles of whole sequences) */
} tiling;

static tiling tiling_of(const mt_block_ctx *c) {
    tiling t = {mt_block_tile_rows(c->batch, c->seq, c->tile), 0};
    if (t.T < c->seq) t.windows = (c->seq + t.T - 1) / t.T;
    else if (c->seg) t.T = c->batch * c->seq; /* its segments at once (block.h) */
    return t;
}

static int tile_count(const mt_block_ctx *c, tiling t) {
    return t.windows ? c->batch * t.windows : (c->batch * c->seq + t.T - 1) / t.T;
}

/* Tile k in the forward's order; in the backward's, a sequence's windows run from its last. */
static mt_tile tile_at(const mt_block_ctx *c, tiling t, int k, int backward) {
    if (!t.windows) {
        int row = k * t.T, n = c->batch * c->seq;
        return (mt_tile){row, n - row < t.T ? n - row : t.T};
    }
    int b = k / t.windows, i = k % t.windows;
    if (backward) i = t.windows - 1 - i;
    int first = c->seq - (t.windows - 1) * t.T; /* the first window's rows, 1 to T */
    int start = i == 0 ? 0 : first + (i - 1) * t.T;
    return (mt_tile){b * c->seq + start, i == 0 ? first : t.T};
}

/* ---- the kinds' engine sides ---- */

static const mt_mixer_ops *const mixer_ops[MT_MIXER_KINDS] = {[MT_MIXER_ATTENTION] = &mt_mixer_attention_ops,
                                                              [MT_MIXER_GDN] = &mt_mixer_gdn_ops};
static const mt_ffn_ops *const ffn_ops[MT_FFN_KINDS] = {[MT_FFN_DENSE] = &mt_ffn_dense_ops,
                                                         [MT_FFN_MOE] = &mt_ffn_moe_ops};

/* ---- the kinds' constants ---- */

/* Whether some block's mixer is of kind k: only those kinds keep constants. */
static int mixer_used(const mt_config *c, int kind) {
    for (int l = 0; l < c->num_layers; l++)
        if ((int)mt_layer_spec_of(c, l).mixer == kind) return 1;
    return 0;
}

/* Kind k's constants' offset in the whole (each mixer kind some block uses, in order, on a 256-byte
 * boundary), and the end of them. */
static size_t constants_offset(const mt_config *c, int kind) {
    size_t at = 0;
    for (int k = 0; k < kind; k++)
        if (mixer_ops[k]->constants_bytes && mixer_used(c, k))
            at = (at + mixer_ops[k]->constants_bytes(c) + 255) / 256 * 256;
    return at;
}

size_t mt_block_constants_bytes(const mt_config *c) {
    size_t at = 0;
    for (int k = 0; k < MT_MIXER_KINDS; k++)
        if (mixer_ops[k]->constants_bytes && mixer_used(c, k))
            at = constants_offset(c, k) + mixer_ops[k]->constants_bytes(c);
    return at;
}

void mt_block_constants_fill(const mt_config *c, void *host) {
    for (int k = 0; k < MT_MIXER_KINDS; k++)
        if (mixer_ops[k]->constants && mixer_used(c, k))
            mixer_ops[k]->constants(c, (char *)host + constants_offset(c, k));
}

/* The block's context as its kinds see it: its spec, its mixer's constants, its feed-forward's
 * pass state. */
static mt_block_ctx kind_ctx(const mt_block_ctx *c, const mt_layer_spec *spec) {
    mt_block_ctx at = *c;
    at.at = (mt_tile){0, 0};
    at.spec = spec;
    at.constants = (const char *)c->constants + constants_offset(c->cfg, spec->mixer);
    at.pass = c->pass && c->pass[spec->ffn].dev ? &c->pass[spec->ffn] : NULL;
    return at;
}

/* ---- the feed-forward kinds' pass state ---- */

size_t mt_block_pass_bytes(const mt_config *c, mt_ffn_kind k, int micro_batches, int on_host) {
    if (!ffn_ops[k]->pass_bytes) return 0;
    for (int l = 0; l < c->num_layers; l++)
        if (mt_layer_spec_of(c, l).ffn == k) return ffn_ops[k]->pass_bytes(c, micro_batches, on_host);
    return 0;
}

void mt_block_pass_begin(const mt_pass_state *states, mt_stream *s) {
    for (int k = 0; k < MT_FFN_KINDS; k++)
        if (states[k].dev) ffn_ops[k]->pass_begin(&states[k], s);
}

void mt_block_pass_loss(const mt_pass_state *states, mt_stream *s, int m, int rows, float mean) {
    for (int k = 0; k < MT_FFN_KINDS; k++)
        if (states[k].dev) ffn_ops[k]->pass_loss(&states[k], s, m, rows, mean);
}

void mt_block_pass_home(const mt_pass_state *states, mt_stream *s) {
    for (int k = 0; k < MT_FFN_KINDS; k++)
        if (states[k].dev) ffn_ops[k]->pass_home(&states[k], s);
}

void mt_block_pass_report(const mt_pass_state *states, mt_pass_report *r) {
    for (int k = 0; k < MT_FFN_KINDS; k++)
        if (states[k].dev) ffn_ops[k]->pass_report(&states[k], r);
}

int mt_block_unrouted(const mt_pass_state *states, int l, uint8_t *skip) {
    if (!states) return 0;
    mt_ffn_kind k = mt_layer_spec_of(states[0].cfg, l).ffn;
    return states[k].dev && ffn_ops[k]->unrouted ? ffn_ops[k]->unrouted(&states[k], l, skip) : 0;
}

/* ---- the workspace ---- */

/* Every block's buffers, then those of each kind some block of the model uses, in one fixed order. */
static mt_block_ws_bytes_by layout_ws(mt_block_ws *ws, char *base, mt_backend *be, const mt_config *c, int batch,
                                      int seq, int chunk, int tile, int segmented) {
    mt_ws_shape s = {be, c, batch, seq, tile, (size_t)batch * seq, 0, 0, mt_dtype_size(be->ops->act_dtype), segmented};
    /* Any job's tiles and pieces (a sample's shorter sequence too) are at most these rows: a
     * shorter sequence's tiles are at most tile rows or the sequence. With segments, sequences the
     * tile holds make one tile of the micro-batch (block.h). */
    s.T = (size_t)mt_block_tile_rows(batch, seq, tile);
    if (segmented && s.T >= (size_t)seq) s.T = s.n;
    s.C = chunk > 0 && (size_t)chunk < s.n ? (size_t)chunk : s.n;
    size_t D = c->hidden_size, F = mt_config_dense_mlp_width(c);
    mt_ws_walk w = {base, 0, MT_WS_PIECE, {0}};
    mt_block_ws sized;
    if (!ws) ws = &sized;
    ws->h1 = mt_ws_take(&w, s.C * D * s.act);
    ws->h2 = mt_ws_take(&w, s.C * D * s.act);
    ws->tmp = mt_ws_take(&w, s.C * (F > D ? F : D) * s.act);
    w.cls = MT_WS_TILE;
    ws->x2 = mt_ws_take(&w, s.T * D * s.act);
    w.cls = MT_WS_MICRO_BATCH;
    ws->rstd1 = mt_ws_take(&w, s.n * 4);
    ws->rstd2 = mt_ws_take(&w, s.n * 4);
    int mixers[MT_MIXER_KINDS] = {0}, ffns[MT_FFN_KINDS] = {0}, post = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_block_kinds k = mt_block_kinds_of(c, l);
        mixers[k.mixer] = ffns[k.ffn] = 1;
        mt_layer_spec spec = mt_layer_spec_of(c, l);
        post |= (spec.attn.flags & MT_ATTN_POST_NORM) || (spec.ffn_spec.flags & MT_FFN_POST_NORM);
    }
    if (post) {
        w.cls = MT_WS_TILE;
        ws->dpost = mt_ws_take(&w, s.T * D * s.act);
        ws->rstd_post = mt_ws_take(&w, s.T * 4);
        w.cls = MT_WS_MICRO_BATCH;
    } else {
        ws->dpost = NULL, ws->rstd_post = NULL;
    }
    for (int k = 0; k < MT_MIXER_KINDS; k++)
        if (mixers[k]) mixer_ops[k]->walk(&w, ws, &s);
    w.cls = MT_WS_PIECE; /* a kind's walk sets the class of what it takes; the feed-forwards' are pieces' */
    if (F > 0) mt_swiglu_mlp_walk(&w, ws, &s);
    for (int k = 0; k < MT_FFN_KINDS; k++)
        if (ffns[k] && ffn_ops[k]->walk) ffn_ops[k]->walk(&w, ws, &s);
    return (mt_block_ws_bytes_by){w.by[MT_WS_MICRO_BATCH], w.by[MT_WS_TILE], w.by[MT_WS_PIECE], w.off};
}

size_t mt_block_ws_bytes(mt_backend *be, const mt_config *c, int batch, int seq, int chunk, int tile, int segmented) {
    return layout_ws(NULL, NULL, be, c, batch, seq, chunk, tile, segmented).total;
}

mt_block_ws_bytes_by mt_block_ws_split(mt_backend *be, const mt_config *c, int batch, int seq, int chunk, int tile,
                                       int segmented) {
    return layout_ws(NULL, NULL, be, c, batch, seq, chunk, tile, segmented);
}

void mt_block_ws_carve(mt_block_ws *ws, void *base, mt_backend *be, const mt_config *c, int batch, int seq,
                       int chunk, int tile, int segmented) {
    memset(ws, 0, sizeof *ws);
    layout_ws(ws, base, be, c, batch, seq, chunk, tile, segmented);
}

/* ---- pieces and the GEMMs issued over them ---- */

mt_piece mt_piece_at(const mt_block_ctx *c, int row) {
    mt_tile span = mt_span(c);
    int end = span.row + span.rows, most = mt_block_piece_rows(c->batch, c->seq, c->chunk);
    int rows = most >= c->seq ? most : c->seq - row % c->seq;
    if (rows > most) rows = most;
    if (rows > end - row) rows = end - row;
    return (mt_piece){row, rows};
}

int mt_rows_per_call(const mt_block_ctx *c, mt_piece p, int by_sequence) {
    return by_sequence && p.rows > c->seq ? c->seq : p.rows;
}

void mt_matmul_piece(const mt_block_ctx *c, mt_piece p, void *y, const void *x, const void *w, const void *bias,
                     int in, int out) {
    int per_call = mt_rows_per_call(c, p, c->be->ops->gemm_by_sequence);
    size_t act = mt_act_size(c);
    for (int r = 0; r < p.rows; r += per_call)
        c->be->ops->op.matmul(c->be, c->stream, mt_rows_at_mut(y, r, out, act), mt_rows_at(x, r, in, act), w, bias,
                              per_call, in, out);
}

void mt_matmul_dx_piece(const mt_block_ctx *c, mt_piece p, void *dx, const void *dy, const void *w, int in, int out,
                        int accumulate) {
    int per_call = mt_rows_per_call(c, p, c->be->ops->gemm_by_sequence);
    size_t act = mt_act_size(c);
    for (int r = 0; r < p.rows; r += per_call)
        c->be->ops->op.matmul_dx(c->be, c->stream, mt_rows_at_mut(dx, r, in, act), mt_rows_at(dy, r, out, act), w,
                                 per_call, in, out, accumulate);
}

void mt_matmul_dw_piece(const mt_block_ctx *c, mt_piece p, float *dw, float *dbias, const void *dy, const void *x,
                        int in, int out) {
    int per_call = mt_rows_per_call(c, p, 1);
    size_t act = mt_act_size(c);
    for (int r = 0; r < p.rows; r += per_call)
        c->be->ops->op.matmul_dw(c->be, c->stream, dw, dbias, mt_rows_at(dy, r, out, act), mt_rows_at(x, r, in, act),
                                 per_call, in, out);
}

void mt_rmsnorm_dx_piece(const mt_block_ctx *c, mt_piece p, void *dx, float *dw, const void *dy, const void *x,
                         const void *w, const float *rstd, int per_token, int d, int accumulate) {
    size_t act = mt_act_size(c);
    int per_call = mt_rows_per_call(c, p, 1);
    for (int r = 0; r < p.rows; r += per_call) {
        int row = r * per_token, rows = per_call * per_token;
        c->be->ops->op.rmsnorm_dx(c->be, c->stream, mt_rows_at_mut(dx, row, d, act), dw, mt_rows_at(dy, row, d, act),
                                  mt_rows_at(x, row, d, act), w, rstd + row, rows, d,
                                  mt_norm_params(c->spec), accumulate);
    }
}

void mt_mixer_norm_piece(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, const void *x) {
    int D = c->cfg->hidden_size;
    c->be->ops->op.rmsnorm(c->be, c->stream, c->ws->h1, c->ws->rstd1 + p.row, mt_rows_at(x, p.row, D, mt_act_size(c)),
                           w->t[MT_T_ATTN_NORM], p.rows, D, mt_norm_params(c->spec));
}

void mt_post_norm_piece(const mt_block_ctx *c, mt_piece p, int at, void *out, const void *z, const void *w) {
    c->be->ops->op.rmsnorm(c->be, c->stream, out, c->ws->rstd_post + at, z, w, p.rows, c->cfg->hidden_size,
                           mt_norm_params(c->spec));
}

void mt_post_norm_dx_piece(const mt_block_ctx *c, mt_piece p, int at, float *dw, const void *dy, const void *z,
                           const void *w) {
    int D = c->cfg->hidden_size;
    mt_rmsnorm_dx_piece(c, p, mt_rows_at_mut(c->ws->dpost, at, D, mt_act_size(c)), dw, dy, z, w,
                        c->ws->rstd_post + at, 1, D, 0);
}

/* ---- the block ---- */

/* The profile's spans of the parts, each named by its kind (a kind that names its own ops inside,
 * the mixture of experts, leaves in its part's row only the time between them). */
static const char *mixer_name(mt_block_kinds k) { return mt_mixer_kind_of(k.mixer)->name; }
static const char *ffn_name(mt_block_kinds k) { return mt_ffn_kind_of(k.ffn)->name; }

void mt_block_forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x, void *y) {
    mt_layer_spec spec = mt_layer_spec_of(c->cfg, c->layer);
    mt_block_kinds k = {spec.mixer, spec.ffn};
    mt_block_ctx at = kind_ctx(c, &spec);
    at.phase = MT_PHASE_FORWARD;
    MT_OP(&at, mixer_name(k), 0, mixer_ops[k.mixer]->prepare(&at, w, x));
    tiling t = tiling_of(c);
    for (int i = 0, count = tile_count(c, t); i < count; i++) {
        at.at = tile_at(c, t, i, 0);
        MT_OP(&at, mixer_name(k), 0, mixer_ops[k.mixer]->forward(&at, w, x));
        MT_FOR_EACH_PIECE(&at, p) MT_OP(&at, ffn_name(k), 0, ffn_ops[k.ffn]->forward(&at, w, p, y));
    }
}

void mt_block_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                       const void *x, void *dxy) {
    mt_layer_spec spec = mt_layer_spec_of(c->cfg, c->layer);
    mt_block_kinds k = {spec.mixer, spec.ffn};
    mt_block_ctx at = kind_ctx(c, &spec);
    at.phase = MT_PHASE_RECOMPUTE;
    /* recomputed from the block's input checkpoint, */
    MT_OP(&at, mixer_name(k), 0, mixer_ops[k.mixer]->prepare(&at, w, x));
    tiling t = tiling_of(c);
    for (int i = 0, count = tile_count(c, t); i < count; i++) {
        at.at = tile_at(c, t, i, 1);
        at.phase = MT_PHASE_RECOMPUTE;
        MT_OP(&at, mixer_name(k), 0, mixer_ops[k.mixer]->forward(&at, w, x)); /* and each tile's forward */
        at.phase = MT_PHASE_BACKWARD;
        MT_FOR_EACH_PIECE(&at, p) MT_OP(&at, ffn_name(k), 0, ffn_ops[k.ffn]->backward(&at, w, g, p, dxy));
        MT_OP(&at, mixer_name(k), 0, mixer_ops[k.mixer]->backward(&at, w, g, x, dxy));
    }
}
