/* The tensor roles (model/tensor_roles.def, a row each) and what each row says of its role. */
#ifndef MT_MODEL_TENSOR_ROLES_H
#define MT_MODEL_TENSOR_ROLES_H

typedef enum {
#define ROLE(name, hf_name, class) MT_T_##name,
#include "model/tensor_roles.def"
#undef ROLE
    MT_T_COUNT
} mt_tensor_kind;

typedef enum { MT_ROLE_MATRIX, MT_ROLE_NORM, MT_ROLE_GAIN, MT_ROLE_BIAS } mt_role_class;

/* How a family's checkpoints on the hub hold a role's tensor otherwise than the layout does (an
 * expert's [rows, cols], row-major), a flag a fact (gpt-oss's experts):
 *   interleaved  the layout's rows are two halves [a; b] (gate; up), held a0, b0, a1, b1, ...
 *   transposed   each expert's matrix is held [cols, rows] (transformers' [E, H, 2I] for [2I, H])
 *   mxfp4        it may come as an MXFP4 pair NAME_blocks [E, rows, cols / 32, 16] + NAME_scales
 *                (io/mxfp4.h): the rows as held (interleaved), never transposed
 * A tensor of a role with a form is held whole, never an expert at a time. */
typedef struct {
    unsigned char interleaved, transposed, mxfp4;
} mt_hub_form;

static inline mt_role_class mt_tensor_role_class(mt_tensor_kind kind) {
    static const mt_role_class classes[MT_T_COUNT] = {
#define ROLE(name, hf_name, class) [MT_T_##name] = MT_ROLE_##class,
#include "model/tensor_roles.def"
#undef ROLE
    };
    return classes[kind];
}

/* RMSNorm weights: initialized to 1 (0 where the norms scale by 1 + w). */
static inline int mt_tensor_is_norm(mt_tensor_kind kind) { return mt_tensor_role_class(kind) == MT_ROLE_NORM; }
/* AdamW's weight decay applies (matrices, not norms or biases). */
static inline int mt_tensor_decays(mt_tensor_kind kind) { return mt_tensor_role_class(kind) == MT_ROLE_MATRIX; }

/* The role's Hugging Face name: a block's after "model.layers.<l>.", the ends' whole. */
static inline const char *mt_tensor_role_name(mt_tensor_kind kind) {
    static const char *const names[MT_T_COUNT] = {
#define ROLE(name, hf_name, class) [MT_T_##name] = hf_name,
#include "model/tensor_roles.def"
#undef ROLE
    };
    return names[kind];
}

#endif
