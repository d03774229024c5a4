/* How checkpoints on the hub name what the layout holds under transformers 5's names (layout.h):
 * the experts one at a time, under the family's names where it has its own (model/families.h:
 * Mixtral's from before transformers 5 renamed them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/families.h"
#include "model/layout.h"

/* transformers' own: mlp.experts.N.gate_proj, up_proj, down_proj, the router under its name. */
static const mt_family_names transformers_names = {
    .prefix = "mlp", .gate = "gate_proj", .up = "up_proj", .down = "down_proj"};

mt_hub_form mt_tensor_hub_form(const mt_layout *lay, const mt_tensor *t) {
    const mt_family_names *n = mt_family_of(lay->cfg.arch)->names;
    return n ? n->form[t->kind] : (mt_hub_form){0};
}

static int has_form(mt_hub_form f) { return f.interleaved || f.transposed || f.mxfp4; }

int mt_tensor_hub_parts(const mt_layout *lay, const mt_tensor *t) {
    if (has_form(mt_tensor_hub_form(lay, t))) return 1;
    if (t->kind == MT_T_EXPERTS_GATE_UP) return 2 * t->experts;
    if (t->kind == MT_T_EXPERTS_DOWN) return t->experts;
    return 1;
}

void mt_tensor_hub_part(const mt_layout *lay, const mt_tensor *t, int part, char *name, size_t cap, int64_t *row0,
                        int *rows) {
    const mt_family_names *n = mt_family_of(lay->cfg.arch)->names;
    if (!n || !n->prefix) n = &transformers_names;
    int l = t->block, parts = mt_tensor_hub_parts(lay, t);
    if (t->kind == MT_T_EXPERTS_GATE_UP && parts > 1) {
        int e = part / 2, up = part % 2, F = t->rows / t->experts / 2;
        snprintf(name, cap, "model.layers.%d.%s.experts.%d.%s.weight", l, n->prefix, e, up ? n->up : n->gate);
        *row0 = (int64_t)e * 2 * F + (int64_t)up * F;
        *rows = F;
    } else if (t->kind == MT_T_EXPERTS_DOWN && parts > 1) {
        int D = t->rows / t->experts;
        snprintf(name, cap, "model.layers.%d.%s.experts.%d.%s.weight", l, n->prefix, part, n->down);
        *row0 = (int64_t)part * D;
        *rows = D;
    } else {
        if (n->router && t->kind == MT_T_ROUTER) snprintf(name, cap, "model.layers.%d.%s", l, n->router);
        else snprintf(name, cap, "%s", t->name);
        *row0 = 0;
        *rows = t->rows;
    }
}

const mt_tensor *mt_layout_find_hub(const mt_layout *lay, const char *name, int *part) {
    *part = -1;
    const mt_tensor *t = mt_layout_find(lay, name, NULL);
    if (t) return t;
    int l, at;
    if (sscanf(name, "model.layers.%d.%n", &l, &at) != 1 || l < 0 || l >= lay->cfg.num_layers) return NULL;
    /* An expert's part names its expert: only its own parts can match. */
    const char *experts = strstr(name + at, ".experts.");
    long e = experts ? strtol(experts + 9, NULL, 10) : 0;
    const mt_unit *u = &lay->units[mt_unit_block(l)];
    for (int i = 0; i < u->num_tensors; i++) {
        const mt_tensor *c = &lay->tensors[u->first_tensor + i];
        int parts = mt_tensor_hub_parts(lay, c), first = 0, last = parts;
        if (parts > 1) {
            if (!experts || e < 0 || e >= c->experts) continue;
            first = (int)e * (parts / c->experts);
            last = first + parts / c->experts;
        }
        for (int p = first; p < last; p++) {
            char candidate[sizeof c->name];
            int64_t row0;
            int rows;
            mt_tensor_hub_part(lay, c, p, candidate, sizeof candidate, &row0, &rows);
            if (!strcmp(candidate, name)) {
                *part = p;
                return c;
            }
        }
    }
    return NULL;
}
