/* Where every parameter lives: the model as a list of streamed units ("layers" to the engine),
 * each a contiguous run of tensors so that one copy moves a whole unit.
 *
 *   unit 0         embedding       wte [V, D]
 *   units 1..L     blocks          the mixer's and the feed-forward's tensors, as their kinds
 *                                  declare them (model/block_kinds.h): attn_norm, wq, wk, wv,
 *                                  (bq, bk, bv), (q_norm, k_norm), wo; mlp_norm, then wg, wu, wd
 *                                  (dense) or the router, the experts' stacked gate_up and down
 *                                  and (Qwen2-MoE) a shared expert with its gate
 *   unit L+1       head            final_norm [D], lm_head [V, D] (absent when tied: the head
 *                                  then reads unit 0's wte)
 *
 * Offsets are in elements from the start of the unit and from the start of the whole model; each
 * tensor starts on a multiple of MT_TENSOR_ALIGN elements (SIMD and GEMM alignment). */
#ifndef MT_MODEL_LAYOUT_H
#define MT_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/tensor_roles.h"

#define MT_TENSOR_ALIGN 64

typedef enum { MT_UNIT_EMBED, MT_UNIT_BLOCK, MT_UNIT_HEAD } mt_unit_kind;

typedef struct {
    mt_tensor_kind kind;
    int unit;             /* the unit that holds it */
    int block;            /* block index for block tensors, -1 otherwise */
    int rows, cols;       /* cols == 1 for vectors; shape [rows, cols] row-major */
    int64_t offset;       /* elements from the start of its unit */
    int decay;            /* AdamW weight decay applies (matrices, not norms or biases) */
    int experts;          /* > 0: the tensor is this many experts' matrices stacked, [experts, rows /
                           * experts, cols] to Hugging Face (transformers 5's fused layout) */
    char name[64];        /* Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight */
} mt_tensor;

typedef struct {
    mt_unit_kind kind;
    int block;            /* block index for MT_UNIT_BLOCK, -1 otherwise */
    int64_t offset;       /* elements from the start of the model */
    int64_t numel;        /* elements including alignment padding */
    int first_tensor, num_tensors;
    /* Position of each tensor kind within this unit's tensors, -1 when absent. */
    int index[MT_T_COUNT];
} mt_unit;

typedef struct {
    mt_config cfg;
    int num_units;        /* L + 2 */
    mt_unit *units;
    int num_tensors;
    mt_tensor *tensors;
    int64_t total_numel;  /* with padding: the size of one store class, in elements */
    int64_t max_block_numel;
    int overflow;         /* mt_layout_init's checked arithmetic overflowed (it then fails) */
} mt_layout;

/* Validates cfg (mt_config_validate) and lays it out, every count in checked 64-bit arithmetic. */
mt_status mt_layout_init(mt_layout *layout, const mt_config *cfg);
void mt_layout_free(mt_layout *layout);

/* The tensor of `kind` in unit `u`, or NULL when that unit has none. */
const mt_tensor *mt_layout_tensor(const mt_layout *layout, int u, mt_tensor_kind kind);
/* Finds a tensor by its Hugging Face name; NULL when absent. */
const mt_tensor *mt_layout_find(const mt_layout *layout, const char *name, int *unit);

/* For the block kinds' declarations (model/block_kinds.h): appends to unit u, which is block l's,
 * a tensor of role `kind` of rows x cols (cols 1: a vector), `experts` matrices stacked (0: one),
 * named "model.layers.<l>.<suffix>" with the role's suffix (model/tensor_roles.def) or the
 * family's for it (model/families.h), decaying as its role does. */
void mt_layout_add_block_tensor(mt_layout *layout, mt_unit *u, mt_tensor_kind kind, int l, int rows, int cols,
                                int experts);

/* How checkpoints on the hub hold tensor t when not as t->name: the experts' stacked matrices one
 * expert (and gate and up each) at a time, under the family's names (Mixtral's from before
 * transformers 5: block_sparse_moe.experts.N.w1); Mixtral's router as block_sparse_moe.gate.
 * mt_tensor_hub_parts gives how many parts t has there (1: t whole, perhaps under another name);
 * mt_tensor_hub_part part i's name and its rows [row0, row0 + rows) of t. export writes these names
 * (every hub checkpoint and every transformers reads them); the reader takes them or t->name. */
int mt_tensor_hub_parts(const mt_layout *layout, const mt_tensor *t);
void mt_tensor_hub_part(const mt_layout *layout, const mt_tensor *t, int part, char *name, size_t cap, int64_t *row0,
                        int *rows);
/* How the hub holds t's role (model/tensor_roles.h: interleaved, transposed, MXFP4), as t's family
 * says; zero: as the layout. */
mt_hub_form mt_tensor_hub_form(const mt_layout *layout, const mt_tensor *t);
/* The tensor and part a hub name is, or NULL. */
const mt_tensor *mt_layout_find_hub(const mt_layout *layout, const char *name, int *part);

/* Unit indices. */
static inline int mt_unit_embed(void) { return 0; }
static inline int mt_unit_block(int l) { return 1 + l; }
static inline int mt_unit_head(const mt_layout *layout) { return layout->num_units - 1; }

#endif
