/* A transformer block as two parts, each of some kind: a mixer (attention, with its variants) and
 * a feed-forward (the dense SwiGLU MLP, or a mixture of experts). The family's plan decides each
 * block's kinds and their variants (model/layer_spec.h); a kind reads its layer's spec, never the
 * family.
 *
 * A kind is declared in two files, one on each side of the line between the model (which io/ and
 * plan/ read) and the engine (which runs it): src/model/kinds/<kind>.c gives what the model is, its
 * tensors with their Hugging Face names and shapes, its parameters and those one token uses (the
 * FLOPs); src/engine/kinds/<kind>_run.c gives what runs, its forward and backward op sequences and its
 * workspace walk. docs/architecture.md has the table of kinds. */
#ifndef MT_MODEL_BLOCK_KINDS_H
#define MT_MODEL_BLOCK_KINDS_H

#include <stdint.h>

#include "model/layer_spec.h"
#include "model/layout.h"

/* One kind's model side. */
typedef struct {
    const char *name;
    /* Adds block l's tensors of this part, as its spec s has them, to unit u
     * (mt_layout_add_block_tensor). */
    void (*declare)(mt_layout *lay, mt_unit *u, const mt_config *c, const mt_layer_spec *s, int l);
    /* Its parameters in one block, and those one token's forward multiplies with (the linear
     * layers' FLOPs are 2 a token and active parameter forward). */
    int64_t (*params)(const mt_config *c, const mt_layer_spec *s);
    int64_t (*active_params)(const mt_config *c, const mt_layer_spec *s);
    /* Forward FLOPs a token besides its linear layers, at `seq` tokens a sequence (attention's
     * scores and their product with v, halved for the causal mask); 0 for the feed-forwards. */
    double (*extra_flops)(const mt_config *c, const mt_layer_spec *s, int seq);
} mt_part_kind;

typedef struct {
    mt_mixer_kind mixer;
    mt_ffn_kind ffn;
} mt_block_kinds;

/* Block l's kinds under config c (its spec's: mt_layer_spec_of). */
mt_block_kinds mt_block_kinds_of(const mt_config *c, int l);
const mt_part_kind *mt_mixer_kind_of(mt_mixer_kind k);
const mt_part_kind *mt_ffn_kind_of(mt_ffn_kind k);

/* The kinds' model sides (src/model/kinds/<kind>.c). */
extern const mt_part_kind mt_mixer_attention;
extern const mt_part_kind mt_mixer_gdn;
extern const mt_part_kind mt_ffn_dense;
extern const mt_part_kind mt_ffn_moe;

#endif
