#include "model/layout.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/block_kinds.h"
#include "model/families.h"

/* A unit holds at most one tensor of each kind. */
enum { BLOCK_TENSORS_MAX = MT_T_COUNT };

/* Element counts in checked 64-bit arithmetic: a sum or product past INT64_MAX sets *overflow
 * (mt_config_validate's limits keep every real model far below it). */
static int64_t checked_add(int64_t a, int64_t b, int *overflow) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) *overflow = 1;
    return r;
}

static int64_t align_up(int64_t n, int *overflow) {
    return checked_add(n, MT_TENSOR_ALIGN - 1, overflow) / MT_TENSOR_ALIGN * MT_TENSOR_ALIGN;
}

static void add_tensor(mt_layout *lay, mt_unit *unit, mt_tensor_kind kind, int block, int rows,
                       int cols, int experts, const char *name) {
    mt_tensor *t = &lay->tensors[lay->num_tensors];
    t->kind = kind;
    t->unit = (int)(unit - lay->units);
    t->block = block;
    t->rows = rows;
    t->cols = cols;
    t->offset = unit->numel;
    t->decay = mt_tensor_decays(kind);
    t->experts = experts;
    snprintf(t->name, sizeof t->name, "%s", name);
    unit->index[kind] = unit->num_tensors;
    unit->num_tensors++;
    int64_t numel;
    if (__builtin_mul_overflow((int64_t)rows, (int64_t)cols, &numel)) lay->overflow = 1;
    unit->numel = checked_add(unit->numel, align_up(numel, &lay->overflow), &lay->overflow);
    lay->num_tensors++;
}

static mt_unit *begin_unit(mt_layout *lay, int u, mt_unit_kind kind, int block, int64_t offset) {
    mt_unit *unit = &lay->units[u];
    memset(unit, 0, sizeof *unit);
    unit->kind = kind;
    unit->block = block;
    unit->offset = offset;
    unit->first_tensor = lay->num_tensors;
    for (int k = 0; k < MT_T_COUNT; k++) unit->index[k] = -1;
    return unit;
}

mt_status mt_layout_init(mt_layout *lay, const mt_config *cfg) {
    MT_TRY(mt_config_validate(cfg));
    memset(lay, 0, sizeof *lay);
    lay->cfg = *cfg;
    int D = cfg->hidden_size, V = cfg->vocab_size; /* validated: small */
    lay->num_units = cfg->num_layers + 2;
    lay->units = mt_calloc((size_t)lay->num_units, sizeof *lay->units, "the model layout");
    lay->tensors = mt_calloc((size_t)cfg->num_layers * BLOCK_TENSORS_MAX + 4, sizeof *lay->tensors, "the model layout");
    if (!lay->units || !lay->tensors) {
        mt_layout_free(lay);
        return MT_ERR_NOMEM;
    }
    int64_t offset = 0;
    mt_unit *u = begin_unit(lay, 0, MT_UNIT_EMBED, -1, offset);
    add_tensor(lay, u, MT_T_WTE, -1, V, D, 0, mt_tensor_role_name(MT_T_WTE));
    offset = checked_add(offset, u->numel, &lay->overflow);
    for (int l = 0; l < cfg->num_layers; l++) {
        u = begin_unit(lay, 1 + l, MT_UNIT_BLOCK, l, offset);
        mt_layer_spec s = mt_layer_spec_of(cfg, l);
        mt_mixer_kind_of(s.mixer)->declare(lay, u, cfg, &s, l);
        mt_ffn_kind_of(s.ffn)->declare(lay, u, cfg, &s, l);
        if (u->numel > lay->max_block_numel) lay->max_block_numel = u->numel;
        offset = checked_add(offset, u->numel, &lay->overflow);
    }
    u = begin_unit(lay, lay->num_units - 1, MT_UNIT_HEAD, -1, offset);
    add_tensor(lay, u, MT_T_FINAL_NORM, -1, D, 1, 0, mt_tensor_role_name(MT_T_FINAL_NORM));
    if (!cfg->tie_embeddings) add_tensor(lay, u, MT_T_LM_HEAD, -1, V, D, 0, mt_tensor_role_name(MT_T_LM_HEAD));
    offset = checked_add(offset, u->numel, &lay->overflow);
    lay->total_numel = offset;
    /* Bytes of a store class (4 a parameter) and their sums must stay in range too. */
    if (lay->overflow || offset > INT64_MAX / 64) {
        mt_layout_free(lay);
        return mt_fail(MT_ERR_INVALID, "the model is too large to lay out: its element count overflows 64-bit "
                       "arithmetic");
    }
    return MT_OK;
}

void mt_layout_add_block_tensor(mt_layout *lay, mt_unit *u, mt_tensor_kind kind, int l, int rows, int cols,
                                int experts) {
    const mt_family_names *family = mt_family_of(lay->cfg.arch)->names;
    const char *suffix = family && family->suffix[kind] ? family->suffix[kind] : mt_tensor_role_name(kind);
    char name[sizeof lay->tensors[0].name];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    add_tensor(lay, u, kind, l, rows, cols, experts, name);
}

void mt_layout_free(mt_layout *lay) {
    free(lay->units);
    free(lay->tensors);
    memset(lay, 0, sizeof *lay);
}

const mt_tensor *mt_layout_tensor(const mt_layout *lay, int u, mt_tensor_kind kind) {
    int i = lay->units[u].index[kind];
    return i < 0 ? NULL : &lay->tensors[lay->units[u].first_tensor + i];
}

const mt_tensor *mt_layout_find(const mt_layout *lay, const char *name, int *unit) {
    for (int u = 0; u < lay->num_units; u++) {
        const mt_unit *un = &lay->units[u];
        for (int i = 0; i < un->num_tensors; i++) {
            const mt_tensor *t = &lay->tensors[un->first_tensor + i];
            if (!strcmp(t->name, name)) {
                if (unit) *unit = u;
                return t;
            }
        }
    }
    return NULL;
}
