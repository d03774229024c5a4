/* Stateless layer templates. A template is its weights' pointers (bound to wherever the unit
 * sits: a device slot, or host memory on the cpu backend), a workspace, and forward/backward
 * functions that issue backend ops on one stream. Backward recomputes the forward from the
 * layer's input checkpoint. There is no autograd: every backward is written out here.
 *
 * Weight gradients accumulate one sequence at a time, in sequence order, so that how sequences
 * are grouped into micro-batches never changes the bits (backend/cpu/cpu_ops.h). */
#ifndef MT_ENGINE_BLOCK_H
#define MT_ENGINE_BLOCK_H

#include "backend/backend.h"
#include "model/layer_spec.h"
#include "model/layout.h"

/* Pointers to one unit's tensors of one class (weights: the backend's weight type; grads: fp32).
 * Absent tensors are NULL. */
typedef struct {
    const void *t[MT_T_COUNT];
} mt_unit_weights;
typedef struct {
    float *t[MT_T_COUNT];
} mt_unit_grads;

mt_unit_weights mt_bind_weights(const mt_layout *layout, int u, const void *base, mt_dtype dtype);
mt_unit_grads mt_bind_grads(const mt_layout *layout, int u, float *base);

/* Activation buffers for one micro-batch of n = batch * seq rows, in the backend's act type
 * unless marked float. Shapes: D hidden, Q = heads*head_dim, KV = kv_heads*head_dim, F the widest
 * dense SwiGLU MLP (mt_config_dense_mlp_width).
 *
 * A block works through the micro-batch in tiles of at most T rows (mt_block_tile_rows): whole
 * sequences, or windows of one sequence. What attention must hold whole spans the micro-batch (k
 * and v, which every later query of a sequence reads, and their gradients); the queries' side
 * (q, the attention output, their gradients, the residual x2) is a tile's; every op that works
 * token by token (the norms, the projections, the feed-forward) runs over pieces of at most C rows
 * of a tile (mt_block_piece_rows), so its buffers are a piece's: the workspace of a long sequence
 * grows with KV per token, not with Q, D or F. Each part kind walks its own buffers
 * (engine/block_parts.h); a model carries those of the kinds its blocks use. */
typedef struct {
    /* Every block's. */
    void *h1;        /* [C, D]  the mixer's pre-norm output of one piece (the head's final norm too) */
    void *x2;        /* [T, D]  residual after the mixer, of the tile's rows */
    void *h2;        /* [C, D]  the feed-forward's pre-norm output of one piece */
    void *tmp;       /* [C, max(D, F)] scratch: a projection's output, and the backward's da/dh */
    float *rstd1, *rstd2; /* [n] */
    /* With a norm of the mixer's or the feed-forward's output (Gemma's), else NULL: its gradient at
     * the input, a tile's rows, and a piece's statistics. */
    void *dpost;     /* [T, D] */
    float *rstd_post; /* [T] */
    /* The attention mixer's (engine/kinds/attention_run.c). */
    struct {
        void *q, *att;    /* [T, Q]  the tile's queries after RoPE, its attention output */
        void *k, *v;      /* [n, KV] after RoPE */
        void *dq, *datt;  /* backward: [T, Q] */
        void *dk, *dv;    /* backward: [n, KV] a tile's share (the rows its keys span), then each tile's
                           * rows once final */
        float *dk_sum, *dv_sum; /* [n, KV] fp32 sums of a sequence's windows' shares; NULL when every
                                 * tile holds whole sequences */
        float *lse;       /* [T * heads]: the tile's [sequences, heads, q rows], or with segments
                           * [q rows, heads] */
        /* With q/k norms (cfg->qk_norm) only, else NULL: the projections before their norm and its
         * statistics. */
        void *q_raw, *k_raw;    /* [T, Q], [n, KV] */
        float *rstd_q, *rstd_k; /* [T * heads], [n * kv_heads] */
        /* With an output gate (MT_ATTN_OUT_GATE) only, else NULL: q_proj's output, each head's query
         * and gate, and the gate; in the backward, the gradients at both. */
        void *qg, *gate;        /* [T, 2Q], [T, Q] */
        void *ws;         /* backend's attention workspace (forward and backward) */
        float *sinks;     /* [heads] the block's sink logits in fp32, what the op takes; NULL
                           * where no block has sinks */
    } attn;
    /* The Gated DeltaNet mixer's (engine/kinds/gdn_run.c), over the micro-batch: C = 2K + V the
     * convolution's channels (q, k, v), V the values', Hv value heads of dk and dv. */
    struct {
        void *mixed, *conv;   /* [n, C] the q/k/v projection, and the convolution of it; the
                               * backward's gradient at the projection takes conv's place */
        void *z, *a, *b;      /* [n, V], [n, Hv], [n, Hv] */
        float *g, *beta;      /* [n, Hv] the decay and the update's weight */
        void *qn, *kn;        /* [n, Hv dk] q and k normalised, a value head each */
        void *o, *y;          /* [n, V] the recurrence's output, its gated norm; the backward's
                               * gradient at the norm takes y's rows once out_proj's is made */
        void *dconv, *dout, *dz; /* backward: [n, C], [n, V], [n, V] */
        void *dqn, *dkn;      /* backward: [n, Hv dk], in o's and y's place (free by then) */
        float *dg, *dbeta;    /* backward: [n, Hv] */
        void *da, *db;        /* backward: [n, Hv] */
        void *ws;             /* the rule's workspace (its forward leaves what its backward reads) */
        /* With fused projections (MT_GDN_FUSED) only, else NULL: their outputs, grouped by q/k head;
         * in the backward, their gradients. */
        void *qkvz, *ba;      /* [n, 2K + 2V], [n, 2 Hv] */
    } gdn;
    /* The dense SwiGLU MLP's (engine/kinds/ffn_dense_run.c; a shared expert's too). */
    struct {
        void *g, *u, *a;  /* [C, F]  gate, up, silu(gate) * up */
        void *dg, *du;    /* backward: [C, F] */
    } mlp;
    /* The mixture of experts' (engine/kinds/ffn_moe_run.c): a piece's C tokens, k choices each, E experts of
     * width F, S segments at most. */
    struct {
        void *logits, *dlogits;     /* [C, E] the router's */
        float *weights, *dweights;  /* [C, k] fp32 routing weights and their gradient */
        int32_t *experts;           /* [C, k] */
        int32_t *order, *slot_row;  /* [C k] the permutation and its inverse */
        int32_t *offsets;           /* [E S + 1] each (expert, segment)'s rows */
        void *xs;                   /* [C k, D] the sorted rows' inputs */
        void *gu;                   /* [C k, 2F] their gate and up */
        void *a;                    /* [C k, F] silu(gate) * up; the backward's da */
        void *ys;                   /* [C k, D] the experts' outputs; the backward's dxs */
        void *dys, *dgu;            /* backward: [C k, D], [C k, 2F] */
        void *shared, *dshared;     /* [C, D] the shared expert's output and its gradient */
        void *gate, *dgate;         /* [C] the shared expert's gate logit and its gradient */
    } moe;
} mt_block_ws;

/* A feed-forward kind's state over a pass (block_parts.h's pass entries), in buffers the engine
 * allocates and hands every job: the kind's own device and host bytes (pass_bytes), and the pass's auxiliary loss,
 * a device float the head's job adds the kinds' losses into. */
typedef struct {
    mt_backend *be;
    const mt_config *cfg;
    int micro_batches;
    void *dev, *host;
    float *aux_loss;
} mt_pass_state;

/* What a pass reports of a kind's state: the largest and smallest share of a layer's routed tokens
 * one expert got. */
typedef struct {
    double load_max, load_min;
} mt_pass_report;

/* Rows [row, row + rows) of the micro-batch: one tile (mt_block_tile_rows). rows 0: all of them. */
typedef struct {
    int row, rows;
} mt_tile;

typedef struct {
    mt_backend *be;
    mt_stream *stream;
    const mt_config *cfg;
    int batch, seq;         /* this micro-batch: n = batch * seq rows */
    int chunk;              /* tokens per piece (mt_block_piece_rows); <= 0: the whole micro-batch */
    const void *constants;  /* device copy of the kinds' constants (mt_block_constants_fill) */
    mt_block_ws *ws;
    int layer;              /* the block's index: its spec (model/layer_spec.h) */
    const mt_segments *seg; /* this micro-batch's segments (packed examples), or NULL (backend.h) */
    /* Each sequence's rows before its padding (engine.h), or NULL: every row is a real token. The
     * load-balancing loss counts only those (transformers' attention mask). */
    const int *real_rows;
    /* The pass's states, one a feed-forward kind (NULL: none; block.c gives the kinds their own),
     * and the micro-batch's index in them: a mixture of experts' forward adds its routing
     * statistics there, its backward takes the load-balancing loss's gradient from there. */
    const mt_pass_state *pass;
    int micro;
    int tile;               /* queries a tile takes (mt_block_tile_rows); <= 0: the whole micro-batch */
    mt_tile at;             /* the tile being worked on (set by block.c; rows 0 between tiles) */
    const mt_layer_spec *spec; /* the block's spec, what its kinds read (set by block.c) */
    const char *phase;      /* the profile's phase of the work (MT_PHASE_*; set by block.c) */
} mt_block_ctx;

/* The profile's phases of a block's work (backend.h's prof group): its forward, its backward, and
 * the backward's recomputation of the forward. */
#define MT_PHASE_FORWARD "forward"
#define MT_PHASE_BACKWARD "backward"
#define MT_PHASE_RECOMPUTE "backward: recompute"

/* Rows of the largest piece the token-wise ops take at once for `chunk` tokens a piece: whole
 * sequences (as many as fit in chunk, at least one) when a sequence is no longer than chunk, else
 * chunk rows of one sequence. A piece never straddles two sequences unless it holds them whole,
 * so the weight gradients, which accumulate one sequence (or one piece of it) at a time, do not
 * depend on how sequences are grouped into micro-batches. chunk <= 0: the whole micro-batch. */
int mt_block_piece_rows(int batch, int seq, int chunk);

/* Rows of the largest tile a block works through at once for `tile` queries a tile: whole
 * sequences (as many as fit, at least one) when a sequence is no longer than tile, else tile rows
 * of one sequence (a window: its queries attend to every key before them). tile <= 0: the whole
 * micro-batch. A sequence's windows are cut from its end: all of tile rows but its first, which
 * holds the rest (engine/block.c). A micro-batch with segments (packed examples) whose sequences
 * fit the tile is one tile: its attention takes its segments at once. */
int mt_block_tile_rows(int batch, int seq, int tile);

/* The workspace's bytes by what they grow with: the micro-batch (n rows: k, v, their gradients and
 * sums, the norms' statistics), the tile (T rows: the queries' side, x2, attention's own
 * workspace) and the piece (C rows: h1, h2, the projections' outputs, the feed-forward's). */
typedef struct {
    size_t micro_batch, tile, piece, total;
} mt_block_ws_bytes_by;

/* Bytes of device memory mt_block_ws takes for a micro-batch of batch x seq in pieces of chunk and
 * tiles of `tile` queries, in all and by what they grow with; `segmented`: its attention may take
 * segments too. */
size_t mt_block_ws_bytes(mt_backend *be, const mt_config *cfg, int batch, int seq, int chunk, int tile, int segmented);
mt_block_ws_bytes_by mt_block_ws_split(mt_backend *be, const mt_config *cfg, int batch, int seq, int chunk, int tile,
                                       int segmented);
/* Carves the workspace out of one device buffer of mt_block_ws_bytes bytes. */
void mt_block_ws_carve(mt_block_ws *ws, void *base, mt_backend *be, const mt_config *cfg, int batch, int seq,
                       int chunk, int tile, int segmented);

/* The constants every block's kinds read (attention's RoPE tables): their bytes, and their values
 * into `host` (that many bytes), which the engine copies to the device once and gives each
 * block's context as `constants`. */
size_t mt_block_constants_bytes(const mt_config *cfg);
void mt_block_constants_fill(const mt_config *cfg, void *host);

/* The feed-forward kinds' state over a pass (block_parts.h's pass entries), states[MT_FFN_KINDS]
 * one a kind, `dev` NULL where the kind keeps none in this model: the bytes kind k keeps (0: none:
 * no block of the kind, or no state), and each entry over the kinds that keep some. */
size_t mt_block_pass_bytes(const mt_config *cfg, mt_ffn_kind k, int micro_batches, int on_host);
void mt_block_pass_begin(const mt_pass_state *states, mt_stream *s);
void mt_block_pass_loss(const mt_pass_state *states, mt_stream *s, int m, int rows, float mean);
void mt_block_pass_home(const mt_pass_state *states, mt_stream *s);
void mt_block_pass_report(const mt_pass_state *states, mt_pass_report *r);
/* Block l's experts that no GEMM of the pass reads (skip[num_experts], block_parts.h's unrouted),
 * from the state mt_block_pass_home brought home; returns how many (0: a block without experts). */
int mt_block_unrouted(const mt_pass_state *states, int l, uint8_t *skip);

/* y[n, D] = block(x[n, D]), tile by tile. */
void mt_block_forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x, void *y);
/* dxy[n, D] holds dL/dy on entry and dL/dx on return; weight gradients accumulate into g. Tile by
 * tile, each tile's forward recomputed from the checkpoint x; a sequence's windows from its last to
 * its first, so that each window's keys have every later query's share of their gradients when it
 * takes them (the sequences in order, so that the weight gradients' sums keep the sequences'
 * order). */
void mt_block_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                       const void *x, void *dxy);

#endif
