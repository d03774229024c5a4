/* The engine side of the block's part kinds (model/block_kinds.h): what each kind runs, and the
 * helpers they share (pieces of rows, GEMMs issued piece by piece and sequence by sequence, the
 * workspace walk). block.c composes a block from its mixer and its feed-forward; each kind lives
 * in engine/kinds/<kind>_run.c. */
#ifndef MT_ENGINE_BLOCK_PARTS_H
#define MT_ENGINE_BLOCK_PARTS_H

#include "engine/block.h"
#include "model/block_kinds.h"
#include "model/families.h"

/* The workspace walk: buffers taken one after another in a fixed order, each on a 256-byte
 * boundary; with no base it only sums their sizes (llm.c's one table that sizes and carves). Each
 * take counts in the class the walk is in (what the buffer grows with: mt_block_ws_bytes_by). */
typedef enum { MT_WS_MICRO_BATCH, MT_WS_TILE, MT_WS_PIECE, MT_WS_CLASSES } mt_ws_class;

typedef struct {
    char *base; /* NULL: sizing */
    size_t off;
    mt_ws_class cls;
    size_t by[MT_WS_CLASSES];
} mt_ws_walk;

static inline void *mt_ws_take(mt_ws_walk *w, size_t bytes) {
    void *p = w->base ? w->base + w->off : NULL;
    size_t aligned = (bytes + 255) / 256 * 256;
    w->off += aligned;
    w->by[w->cls] += aligned;
    return p;
}

/* What a walk knows of the run: n = batch * seq rows, T of them a tile at most, C a piece at most,
 * act's size; tile as given (mt_block_tile_rows); whether attention may take segments (packed
 * examples). */
typedef struct {
    mt_backend *be;
    const mt_config *c;
    int batch, seq, tile;
    size_t n, T, C, act;
    int segmented;
} mt_ws_shape;

/* Rows [row, row + rows) of the micro-batch: one piece (mt_block_piece_rows) of the tile being
 * worked on, or of the micro-batch between tiles. */
typedef struct {
    int row, rows;
} mt_piece;

mt_piece mt_piece_at(const mt_block_ctx *c, int row);
/* The rows the pieces cover: the tile's, or between tiles the micro-batch's. */
static inline mt_tile mt_span(const mt_block_ctx *c) {
    return c->at.rows > 0 ? c->at : (mt_tile){0, c->batch * c->seq};
}
#define MT_FOR_EACH_PIECE(c, p)                                                                     \
    for (mt_piece p = mt_piece_at(c, mt_span(c).row); p.row < mt_span(c).row + mt_span(c).rows; \
         p = mt_piece_at(c, p.row + p.rows))
/* The tile as one piece (one per sequence where it holds whole ones). */
static inline mt_piece mt_piece_of_tile(const mt_block_ctx *c) { return (mt_piece){c->at.row, c->at.rows}; }

static inline size_t mt_act_size(const mt_block_ctx *c) { return mt_dtype_size(c->be->ops->act_dtype); }
static inline const void *mt_rows_at(const void *base, int row, int width, size_t act) {
    return (const char *)base + (size_t)row * width * act;
}
static inline void *mt_rows_at_mut(void *base, int row, int width, size_t act) {
    return (char *)base + (size_t)row * width * act;
}
/* x2's row `row` (of the micro-batch): x2 holds the tile's rows. */
static inline void *mt_x2_row(const mt_block_ctx *c, int row) {
    return mt_rows_at_mut(c->ws->x2, row - c->at.row, c->cfg->hidden_size, mt_act_size(c));
}

/* `call`, one op of a kind, inside the profile's span of the block's phase and `op` (backend.h's prof
 * group; while the profile is off, the test of a flag); flops: a GEMM's (mt_gemm_flops), else 0. */
#define MT_OP(c, op, flops, call)                                     \
    do {                                                              \
        mt_span_begin((c)->be, (c)->stream, (c)->phase, op, flops);   \
        call;                                                         \
        mt_span_end((c)->be, (c)->stream);                            \
    } while (0)
static inline double mt_gemm_flops(int rows, int in, int out) { return 2.0 * rows * in * out; }

/* The rows one call of a piece's GEMM takes: a sequence (or the piece's part of one) where the
 * backend asks (backend.h: gemm_by_sequence) or where a weight gradient accumulates, else the
 * whole piece. */
int mt_rows_per_call(const mt_block_ctx *c, mt_piece p, int by_sequence);

/* y[p] = x[p] . w^T (+ bias); x and y point at the piece's first row. */
void mt_matmul_piece(const mt_block_ctx *c, mt_piece p, void *y, const void *x, const void *w, const void *bias,
                     int in, int out);
void mt_matmul_dx_piece(const mt_block_ctx *c, mt_piece p, void *dx, const void *dy, const void *w, int in, int out,
                        int accumulate);
/* dw += dy^T x one sequence (or one piece of a sequence) at a time (see block.h). */
void mt_matmul_dw_piece(const mt_block_ctx *c, mt_piece p, float *dw, float *dbias, const void *dy, const void *x,
                        int in, int out);
/* The GLU of the block's feed-forward (its experts' too). */
static inline mt_glu_params mt_glu_of(const mt_layer_spec *s) {
    return (mt_glu_params){.act = s->ffn_spec.act, .limit = s->ffn_spec.clamp, .alpha = s->ffn_spec.alpha};
}

/* The RMSNorm parameters of a block's norms (its eps and whether they scale by 1 + w). */
static inline mt_rmsnorm_params mt_norm_params(const mt_layer_spec *s) {
    return (mt_rmsnorm_params){.eps = s->norm_eps, .unit_offset = s->norm_unit_offset};
}

/* The norm's backward over `per_token` rows of width d a token (1 for the hidden-size norms, the heads
 * for per-head q/k norms), a sequence at a time; dx is added to (the residual's gradient) or, with
 * accumulate 0, written. Pointers at the piece's first token; rstd too. */
void mt_rmsnorm_dx_piece(const mt_block_ctx *c, mt_piece p, void *dx, float *dw, const void *dy, const void *x,
                         const void *w, const float *rstd, int per_token, int d, int accumulate);

/* h1 = the mixer's pre-norm (input_layernorm) of x's piece p (x the micro-batch's rows), its
 * statistics into rstd1. */
void mt_mixer_norm_piece(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, const void *x);

/* A part's output z (piece p's rows, the piece buffer `z`) through its post-norm (Gemma's sandwich
 * norms): out = norm(z) with the statistics into rstd_post (at the piece's offset `at` in the
 * tile); and its backward: dz (ws->dpost's rows from `at`) = d(norm)/dz . dy, dw += the norm
 * weight's gradient. */
void mt_post_norm_piece(const mt_block_ctx *c, mt_piece p, int at, void *out, const void *z, const void *w);
void mt_post_norm_dx_piece(const mt_block_ctx *c, mt_piece p, int at, float *dw, const void *dy, const void *z,
                           const void *w);

/* A mixer's engine side: the block's first part, x -> x2 = x + mixer(norm(x)), tile by tile
 * (block.c: mt_block_forward, mt_block_backward). x is the micro-batch's rows. */
typedef struct {
    /* Takes its buffers (ws NULL when sizing). */
    void (*walk)(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s);
    /* Before the tiles (c->at empty), in the forward and again before the backward: what spans the
     * micro-batch. */
    void (*prepare)(const mt_block_ctx *c, const mt_unit_weights *w, const void *x);
    /* x2's rows of the tile c->at and what the tile's backward needs. */
    void (*forward)(const mt_block_ctx *c, const mt_unit_weights *w, const void *x);
    /* After the tile's forward: dxy's rows of the tile hold dL/dx2 and become dL/dx; its weight
     * gradients accumulate into g. */
    void (*backward)(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, const void *x,
                     void *dxy);
    /* Optional (NULL: none): what the kind reads in every block and no block changes (attention's
     * RoPE tables), made once on the host and kept on the device (mt_block_constants_fill):
     * its bytes, and their values; c->constants points at them. */
    size_t (*constants_bytes)(const mt_config *cfg);
    void (*constants)(const mt_config *cfg, void *host);
} mt_mixer_ops;

/* A feed-forward's engine side: the block's second part, y = x2 + ffn(norm(x2)), piece by piece of
 * the tile c->at (x2 holds the tile's rows: mt_x2_row). */
typedef struct {
    void (*walk)(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s); /* NULL: buffers of its own none */
    /* y's rows of piece p (y at the micro-batch's first row), from x2's. */
    void (*forward)(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p, void *y);
    /* dxy's rows of piece p hold dL/dy and become dL/dx2; weight gradients accumulate into g. */
    void (*backward)(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g, mt_piece p, void *dxy);
    /* Optional (pass_bytes NULL: none): what the kind keeps over a pass (a mixture of experts'
     * routing statistics). Its bytes on the device and on the host for `micro_batches`; zeroed on
     * stream s when a pass begins; micro-batch m's auxiliary loss (of `rows` tokens, weighted by
     * `mean`) added into p->aux_loss and its gradient made, by the head's job; copied home on s
     * once the forward is done; read there once that copy has landed. */
    size_t (*pass_bytes)(const mt_config *cfg, int micro_batches, int on_host);
    void (*pass_begin)(const mt_pass_state *p, mt_stream *s);
    void (*pass_loss)(const mt_pass_state *p, mt_stream *s, int m, int rows, float mean);
    void (*pass_home)(const mt_pass_state *p, mt_stream *s);
    void (*pass_report)(const mt_pass_state *p, mt_pass_report *r);
    /* Optional (NULL: every expert is read): from the state at home, skip[x] = 1 for each of block
     * `layer`'s experts that no GEMM of the pass reads; returns how many. */
    int (*unrouted)(const mt_pass_state *p, int layer, uint8_t *skip);
} mt_ffn_ops;

extern const mt_mixer_ops mt_mixer_attention_ops;
extern const mt_mixer_ops mt_mixer_gdn_ops;
extern const mt_ffn_ops mt_ffn_dense_ops;
extern const mt_ffn_ops mt_ffn_moe_ops;

/* The SwiGLU MLP's buffers: every model with one (mt_config_dense_mlp_width > 0) has them. */
void mt_swiglu_mlp_walk(mt_ws_walk *w, mt_block_ws *ws, const mt_ws_shape *s);
/* The dense SwiGLU MLP over piece p's rows of h2 (the dense feed-forward's, and a shared expert's):
 * out[p] (the piece's rows, width D) = down(silu(gate(h2)) * up(h2)) with the weights given. */
void mt_swiglu_mlp_forward(const mt_block_ctx *c, mt_piece p, void *out, const void *wg, const void *wu,
                           const void *wd, int F);
/* Its backward: from dout (the piece's rows), adds the weight gradients and writes (accumulate 0) or
 * adds dL/dh2 into dh2 ([C, D]). `recompute`: its forward's g, u, a first (0: the caller's forward of
 * this piece left them). */
void mt_swiglu_mlp_backward(const mt_block_ctx *c, mt_piece p, void *dh2, int accumulate, const void *dout,
                            const void *wg, const void *wu, const void *wd, float *dwg, float *dwu, float *dwd, int F,
                            int recompute);
/* h2 of piece p: the feed-forward's pre-norm of x2 (statistics into rstd2). */
void mt_ffn_norm_piece(const mt_block_ctx *c, const mt_unit_weights *w, mt_piece p);

#endif
