/* The Gated DeltaNet mixer, model side (Qwen3-Next, Qwen3.5): the pre-norm; the q, k, v projection
 * into a depthwise causal conv1d, the z, b and a projections (Qwen3-Next: q, k, v and z fused, b and
 * a fused, grouped by q/k head); the decay's A_log and dt_bias; the
 * gated RMSNorm of the recurrence's output; out_proj. Sizes: K = linear_k_heads x linear_k_dim,
 * V = linear_v_heads x linear_v_dim.
 * engine/kinds/gdn_run.c runs it. */
#include "model/block_kinds.h"

static int64_t key_width(const mt_config *c) { return (int64_t)c->linear_k_heads * c->linear_k_dim; }
static int64_t value_width(const mt_config *c) { return (int64_t)c->linear_v_heads * c->linear_v_dim; }

static void declare(mt_layout *lay, mt_unit *u, const mt_config *c, const mt_layer_spec *s, int l) {
    int D = c->hidden_size, K = (int)key_width(c), V = (int)value_width(c), H = c->linear_v_heads;
    mt_layout_add_block_tensor(lay, u, MT_T_ATTN_NORM, l, D, 1, 0);
    if (s->gdn.flags & MT_GDN_FUSED) {
        mt_layout_add_block_tensor(lay, u, MT_T_GDN_QKVZ, l, 2 * K + 2 * V, D, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_GDN_BA, l, 2 * H, D, 0);
    } else {
        mt_layout_add_block_tensor(lay, u, MT_T_GDN_QKV, l, 2 * K + V, D, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_GDN_Z, l, V, D, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_GDN_B, l, H, D, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_GDN_A, l, H, D, 0);
    }
    /* [2K + V, 1, 4] to Hugging Face: a [1, 4] kernel a channel, stacked as experts' matrices are */
    mt_layout_add_block_tensor(lay, u, MT_T_GDN_CONV, l, 2 * K + V, MT_GDN_CONV_KERNEL, 2 * K + V);
    mt_layout_add_block_tensor(lay, u, MT_T_GDN_A_LOG, l, H, 1, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_GDN_DT_BIAS, l, H, 1, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_GDN_NORM, l, c->linear_v_dim, 1, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_GDN_OUT, l, D, V, 0);
}

static int64_t params(const mt_config *c, const mt_layer_spec *s) {
    int64_t d = c->hidden_size, k = key_width(c), v = value_width(c), h = c->linear_v_heads;
    return d + (2 * k + v) * d + v * d + 2 * h * d + (2 * k + v) * MT_GDN_CONV_KERNEL + 2 * h + c->linear_v_dim + d * v;
}

/* The convolution's taps are counted with the linear layers (2 FLOPs a weight and token). */
static int64_t active_params(const mt_config *c, const mt_layer_spec *s) { return params(c, s); }

/* The recurrence a token and value head: the state's decay (dk dv), S^T k, the rank-one update and
 * S^T q (2 dk dv each), whatever the sequence's length. */
static double extra_flops(const mt_config *c, const mt_layer_spec *s, int seq) {
    return 7.0 * c->linear_v_heads * c->linear_k_dim * c->linear_v_dim;
}

const mt_part_kind mt_mixer_gdn = {.name = "Gated DeltaNet", .declare = declare, .params = params,
                                   .active_params = active_params, .extra_flops = extra_flops};
