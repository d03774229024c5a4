/* The dense feed-forward, model side: the pre-norm, a gated MLP of intermediate_size and, with
 * MT_FFN_POST_NORM, a norm of its output (Gemma).
 * engine/kinds/ffn_dense_run.c runs it. */
#include "model/block_kinds.h"

static void declare(mt_layout *lay, mt_unit *u, const mt_config *c, const mt_layer_spec *s, int l) {
    int D = c->hidden_size, F = c->intermediate_size;
    mt_layout_add_block_tensor(lay, u, MT_T_MLP_NORM, l, D, 1, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_WG, l, F, D, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_WU, l, F, D, 0);
    mt_layout_add_block_tensor(lay, u, MT_T_WD, l, D, F, 0);
    if (s->ffn_spec.flags & MT_FFN_POST_NORM) mt_layout_add_block_tensor(lay, u, MT_T_FFN_POST_NORM, l, D, 1, 0);
}

/* The norm (and the post-norm); gate, up, down. */
static int64_t params(const mt_config *c, const mt_layer_spec *s) {
    int post = (s->ffn_spec.flags & MT_FFN_POST_NORM) != 0;
    return (1 + post) * (int64_t)c->hidden_size + 3 * (int64_t)c->hidden_size * c->intermediate_size;
}

static double extra_flops(const mt_config *c, const mt_layer_spec *s, int seq) { return 0; }

const mt_part_kind mt_ffn_dense = {.name = "dense MLP", .declare = declare, .params = params,
                                   .active_params = params, .extra_flops = extra_flops};
