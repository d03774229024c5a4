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
 * What attention reads or writes spans the micro-batch (O(n) by nature); every op that works
 * token by token (the norms, the projections, the feed-forward) runs over pieces of at most C rows
 * (mt_block_piece_rows), so its buffers are a piece's: the workspace of a long sequence grows
 * with Q and D per token, not with F. Each part kind walks its own buffers (engine/block_parts.h);
 * a model carries those of the kinds its blocks use. */
typedef struct {
    /* Every block's. */
    void *h1;        /* [C, D]  the mixer's pre-norm output of one piece (the head's final norm too) */
    void *x2;        /* [n, D]  residual after the mixer */
    void *h2;        /* [C, D]  the feed-forward's pre-norm output of one piece */
    void *tmp;       /* [C, max(D, F)] scratch: a projection's output, and the backward's da/dh */
    float *rstd1, *rstd2; /* [n] */
    /* The attention mixer's (engine/mixer_attention.c). */
    struct {
        void *q, *k, *v;  /* [n, Q], [n, KV], [n, KV] after RoPE */
        void *att;        /* [n, Q]  attention output */
        void *dq, *dk, *dv, *datt; /* backward: [n, Q], [n, KV], [n, KV], [n, Q] */
        float *lse;       /* [batch, heads, seq], or with segments [n, heads] */
        /* With q/k norms (cfg->qk_norm) only, else NULL: the projections before their norm and its
         * statistics. */
        void *q_raw, *k_raw;    /* [n, Q], [n, KV] */
        float *rstd_q, *rstd_k; /* [n * heads], [n * kv_heads] */
        void *ws;         /* backend's attention workspace (forward and backward) */
    } attn;
    /* The dense SwiGLU MLP's (engine/ffn_dense.c; a shared expert's too). */
    struct {
        void *g, *u, *a;  /* [C, F]  gate, up, silu(gate) * up */
        void *dg, *du;    /* backward: [C, F] */
    } mlp;
    /* The mixture of experts' (engine/ffn_moe.c): a piece's C tokens, k choices each, E experts of
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

typedef struct {
    mt_backend *be;
    mt_stream *stream;
    const mt_config *cfg;
    int batch, seq;         /* this micro-batch: n = batch * seq rows */
    int chunk;              /* tokens per piece (mt_block_piece_rows); <= 0: the whole micro-batch */
    const float *inv_freq;  /* device copy of the RoPE frequencies */
    mt_block_ws *ws;
    int layer;              /* the block's index: its kinds (model/block_kinds.h) */
    const mt_segments *seg; /* this micro-batch's segments (packed examples), or NULL (backend.h) */
    /* A mixture-of-experts block's routing statistics, added to by its forward (NULL: none, as in a
     * backward's recomputed forward): moe_counts[E] the layer's tokens per expert in this
     * micro-batch, moe_prob_sum[E] the router probabilities summed over every MoE layer's tokens of
     * it. moe_aux_grad[E] (NULL: none): the load-balancing loss's gradient with respect to each
     * router probability, which its backward takes through the router. Device memory. */
    int32_t *moe_counts;
    float *moe_prob_sum;
    const float *moe_aux_grad;
} mt_block_ctx;

/* Rows of the largest piece the token-wise ops take at once for `chunk` tokens a piece: whole
 * sequences (as many as fit in chunk, at least one) when a sequence is no longer than chunk, else
 * chunk rows of one sequence. A piece never straddles two sequences unless it holds them whole,
 * so the weight gradients, which accumulate one sequence (or one piece of it) at a time, do not
 * depend on how sequences are grouped into micro-batches. chunk <= 0: the whole micro-batch. */
int mt_block_piece_rows(int batch, int seq, int chunk);

/* Bytes of device memory mt_block_ws takes for a micro-batch of batch x seq in pieces of chunk;
 * `segmented`: its attention may take segments too. */
size_t mt_block_ws_bytes(mt_backend *be, const mt_config *cfg, int batch, int seq, int chunk, int segmented);
/* Carves the workspace out of one device buffer of mt_block_ws_bytes bytes. */
void mt_block_ws_carve(mt_block_ws *ws, void *base, mt_backend *be, const mt_config *cfg, int batch, int seq,
                       int chunk, int segmented);

/* y[n, D] = block(x[n, D]). */
void mt_block_forward(const mt_block_ctx *c, const mt_unit_weights *w, const void *x, void *y);
/* dxy[n, D] holds dL/dy on entry and dL/dx on return; weight gradients accumulate into g. */
void mt_block_backward(const mt_block_ctx *c, const mt_unit_weights *w, const mt_unit_grads *g,
                       const void *x, void *dxy);

#endif
