/* The attention mixer, model side: the pre-norm, q/k/v and o projections, with its variants: q/k/v
 * biases, an o_proj bias, a learned sink logit a head (gpt-oss), RMSNorm of q and k over each head
 * or over the whole projection, a norm of its output (Gemma), an output gate from q_proj
 * (Qwen3-Next, Qwen3.5), as its spec's flags say.
 * engine/kinds/attention_run.c runs it. */
#include "model/block_kinds.h"

/* q_proj's outputs: each head's query, and with an output gate its gate after it. */
static int q_out(const mt_config *c, const mt_layer_spec *s) {
    return (s->attn.flags & MT_ATTN_OUT_GATE ? 2 : 1) * c->num_heads * c->head_dim;
}

static void declare(mt_layout *lay, mt_unit *u, const mt_config *c, const mt_layer_spec *s, int l) {
    int D = c->hidden_size, Q = c->num_heads * c->head_dim, KV = c->num_kv_heads * c->head_dim;
    mt_layout_add_block_tensor(lay, u, MT_T_ATTN_NORM, l, D, 1, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_WQ, l, q_out(c, s), D, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_WK, l, KV, D, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_WV, l, KV, D, 0);
    if (s->attn.flags & MT_ATTN_BIAS_QKV) {
        mt_layout_add_block_tensor(lay, u, MT_T_BQ, l, q_out(c, s), 1, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_BK, l, KV, 1, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_BV, l, KV, 1, 0);
    }
    if (s->attn.flags & (MT_ATTN_QK_NORM_HEAD | MT_ATTN_QK_NORM_FULL)) {
        int full = (s->attn.flags & MT_ATTN_QK_NORM_FULL) != 0;
        mt_layout_add_block_tensor(lay, u, MT_T_Q_NORM, l, full ? Q : c->head_dim, 1, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_K_NORM, l, full ? KV : c->head_dim, 1, 0);
    }
    mt_layout_add_block_tensor(lay, u, MT_T_WO, l, D, Q, 0);
    if (s->attn.flags & MT_ATTN_BIAS_O) mt_layout_add_block_tensor(lay, u, MT_T_BO, l, D, 1, 0);
    if (s->attn.flags & MT_ATTN_SINKS) mt_layout_add_block_tensor(lay, u, MT_T_SINKS, l, c->num_heads, 1, 0);
    if (s->attn.flags & MT_ATTN_POST_NORM) mt_layout_add_block_tensor(lay, u, MT_T_ATTN_POST_NORM, l, D, 1, 0);
}

static int64_t params(const mt_config *c, const mt_layer_spec *s) {
    int64_t d = c->hidden_size, q = (int64_t)c->num_heads * c->head_dim, kv = (int64_t)c->num_kv_heads * c->head_dim;
    int64_t qo = q_out(c, s), n = d + qo * d + 2 * kv * d + d * q; /* the norm; q (and gate), k, v; o */
    if (s->attn.flags & MT_ATTN_BIAS_QKV) n += qo + 2 * kv;
    if (s->attn.flags & MT_ATTN_BIAS_O) n += d;
    if (s->attn.flags & MT_ATTN_SINKS) n += c->num_heads;
    if (s->attn.flags & MT_ATTN_QK_NORM_HEAD) n += 2 * c->head_dim;
    if (s->attn.flags & MT_ATTN_QK_NORM_FULL) n += q + kv;
    if (s->attn.flags & MT_ATTN_POST_NORM) n += d;
    return n;
}

/* Every parameter takes part for every token; the norms' and biases' few FLOPs are counted with the
 * rest, as the PyTorch peers count them. */
static int64_t active_params(const mt_config *c, const mt_layer_spec *s) { return params(c, s); }

/* Scores q.k^T and their product with v: 2 x 2 x Q each key a query sees, on average seq / 2 under
 * the causal mask; a local layer's query sees at most `window` keys, window - window^2 / (2 seq) on
 * average (the first window's queries see fewer). */
static double extra_flops(const mt_config *c, const mt_layer_spec *s, int seq) {
    int w = s->attn.window;
    double keys = w > 0 && w < seq ? w - (double)w * w / (2.0 * seq) : seq / 2.0;
    return 4.0 * keys * (double)c->num_heads * c->head_dim;
}

const mt_part_kind mt_mixer_attention = {.name = "attention", .declare = declare, .params = params,
                                         .active_params = active_params, .extra_flops = extra_flops};
