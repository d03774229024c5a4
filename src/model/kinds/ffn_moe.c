/* The mixture-of-experts feed-forward, model side: the pre-norm, the router (transformers'
 * mlp.gate), every expert's SwiGLU stacked as transformers 5 fuses them (mlp.experts.gate_up_proj
 * [E, 2F, D], gate's F rows then up's; mlp.experts.down_proj [E, D, F]), with its spec's variants:
 * the router's bias [E] and the experts' biases (gate_up's [E x 2F], gate's F then up's, and
 * down's [E x D]: gpt-oss), and Qwen2-MoE's shared expert with its sigmoid gate.
 * engine/kinds/ffn_moe_run.c runs it. */
#include "model/block_kinds.h"

static void declare(mt_layout *lay, mt_unit *u, const mt_config *c, const mt_layer_spec *s, int l) {
    int D = c->hidden_size, E = c->num_experts, F = c->moe_intermediate_size;
    int S = s->ffn_spec.flags & MT_FFN_SHARED_EXPERT ? c->shared_expert_intermediate_size : 0;
    mt_layout_add_block_tensor(lay, u, MT_T_MLP_NORM, l, D, 1, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_ROUTER, l, E, D, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_EXPERTS_GATE_UP, l, E * 2 * F, D, E);
    mt_layout_add_block_tensor(lay, u, MT_T_EXPERTS_DOWN, l, E * D, F, E);
    if (s->ffn_spec.flags & MT_FFN_ROUTER_BIAS) mt_layout_add_block_tensor(lay, u, MT_T_ROUTER_BIAS, l, E, 1, 0);
    if (s->ffn_spec.flags & MT_FFN_EXPERT_BIAS) {
        mt_layout_add_block_tensor(lay, u, MT_T_EXPERTS_GATE_UP_BIAS, l, E * 2 * F, 1, E);
        mt_layout_add_block_tensor(lay, u, MT_T_EXPERTS_DOWN_BIAS, l, E * D, 1, E);
    }
    if (S) {
        mt_layout_add_block_tensor(lay, u, MT_T_SHARED_GATE, l, S, D, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_SHARED_UP, l, S, D, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_SHARED_DOWN, l, D, S, 0);
        mt_layout_add_block_tensor(lay, u, MT_T_SHARED_EXPERT_GATE, l, 1, D, 0);
    }
}

/* The norm, the router (and its bias), and `experts` experts (and their biases); the shared expert
 * and its gate. */
static int64_t count(const mt_config *c, const mt_layer_spec *spec, int experts) {
    int64_t d = c->hidden_size, f = c->moe_intermediate_size, e = c->num_experts;
    int64_t s = spec->ffn_spec.flags & MT_FFN_SHARED_EXPERT ? c->shared_expert_intermediate_size : 0;
    int64_t n = d + e * d + 3 * (int64_t)experts * f * d + (s ? 3 * s * d + d : 0);
    if (spec->ffn_spec.flags & MT_FFN_ROUTER_BIAS) n += e;
    if (spec->ffn_spec.flags & MT_FFN_EXPERT_BIAS) n += (int64_t)experts * (2 * f + d);
    return n;
}

static int64_t params(const mt_config *c, const mt_layer_spec *s) { return count(c, s, c->num_experts); }

/* A token's forward multiplies with the router and its top_k experts (and the shared expert). */
static int64_t active_params(const mt_config *c, const mt_layer_spec *s) { return count(c, s, c->experts_per_token); }

static double extra_flops(const mt_config *c, const mt_layer_spec *s, int seq) { return 0; }

const mt_part_kind mt_ffn_moe = {.name = "mixture of experts", .declare = declare, .params = params,
                                 .active_params = active_params, .extra_flops = extra_flops};
