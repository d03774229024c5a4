/* The weights' loads (h2d), for engine_schedule.c: a unit whole, a sharded replica's slice, and a
 * mixture of experts' reload of the experts the pass routed some token to. The pass's bytes in and
 * the reloads' experts seen and left home are counted here (engine_internal.h). */
#include <stdlib.h>

#include "engine/engine_internal.h"

/* h2d: unit u's working weights [lo, hi) (elements) to the same place in dst. */
static void copy_weights(mt_engine *e, int u, void *dst, size_t lo, size_t hi) {
    size_t wsize = mt_dtype_size(e->be->ops->weight_dtype);
    if (hi <= lo) return;
    mt_copy_async(e->be, (char *)dst + lo * wsize, (const char *)mt_store_unit_weights(e->store, u) + lo * wsize,
                  (hi - lo) * wsize, e->h2d);
    e->bytes_in += (double)((hi - lo) * wsize);
}

/* The experts' stacked matrices (one expert after another): a block's weights that routing selects.
 * Their biases (gpt-oss's) travel whole: a gap there would save next to nothing and cost a copy. */
static const mt_tensor_kind EXPERT_MATRICES[] = {MT_T_EXPERTS_GATE_UP, MT_T_EXPERTS_DOWN};
enum { EXPERT_KINDS = sizeof EXPERT_MATRICES / sizeof EXPERT_MATRICES[0] };

static int by_offset(const void *a, const void *b) {
    int64_t x = (*(const mt_tensor *const *)a)->offset, y = (*(const mt_tensor *const *)b)->offset;
    return (x > y) - (x < y);
}

/* Unit u's weights but the experts skip marks: the experts' matrices without those experts' rows, in
 * as few copies as the runs between them allow. */
static void copy_routed_weights(mt_engine *e, int u, void *dst, const uint8_t *skip) {
    const mt_tensor *stacked[EXPERT_KINDS];
    int n = 0, E = e->cfg->num_experts;
    for (int i = 0; i < EXPERT_KINDS; i++)
        if ((stacked[n] = mt_layout_tensor(e->lay, u, EXPERT_MATRICES[i]))) n++;
    qsort(stacked, (size_t)n, sizeof *stacked, by_offset);
    size_t from = 0;
    for (int i = 0; i < n; i++) {
        size_t each = (size_t)stacked[i]->rows * (size_t)stacked[i]->cols / (size_t)E;
        for (int j = 0; j < E; j++) {
            if (!skip[j]) continue;
            size_t at = (size_t)stacked[i]->offset + (size_t)j * each;
            copy_weights(e, u, dst, from, at);
            from = at + each;
        }
    }
    copy_weights(e, u, dst, from, (size_t)mt_engine_numel(e, u));
}

/* h2d: waits until compute is done with dst (event free_id), copies unit u's working weights
 * there (a sharded replica: its own slice, the one its store holds current; the job that reads
 * them brings the rest from their owners; skip non-NULL: but those experts, mt_block_unrouted),
 * records loaded_id; `where`: dst as gather_due indexes it. */
void mt_engine_load_unit(mt_engine *e, int u, void *dst, mt_ev free_id, mt_ev loaded_id, int i, int where,
                         const uint8_t *skip) {
    size_t lo = 0, hi = (size_t)mt_engine_numel(e, u);
    if (e->shard) mt_engine_slice(e, u, &lo, &hi);
    mt_engine_wait(e, e->h2d, free_id, i);
    if (skip) copy_routed_weights(e, u, dst, skip);
    else copy_weights(e, u, dst, lo, hi);
    mt_engine_record(e, loaded_id, i, e->h2d);
    mt_engine_loaded(e, u, dst, where);
}

void mt_engine_load_slot(mt_engine *e, int l, int k) {
    mt_engine_load_unit(e, mt_unit_block(l), e->slot[k], MT_EV_SLOT_FREE, MT_EV_SLOT_LOADED, k,
                        mt_engine_where_slot(k), NULL);
}

/* The backward's reload of block l into slot k. With routed_reload, a mixture-of-experts block's
 * experts that no token of the pass chose stay home: no GEMM of the backward reads their rows of
 * the slot (whatever the slot held before), and their gradients are zero. The first reload waits
 * for the forward's routing to be at home, which the compute stream, busy with the head and the
 * backward's first blocks, sent long before. */
void mt_engine_reload_slot(mt_engine *e, int l, int k) {
    int skipped = 0;
    if (e->routed_reload) {
        if (!e->routing_known) mt_engine_sync(e, MT_EV_ROUTED_HOME, 0);
        e->routing_known = 1;
        skipped = mt_block_unrouted(e->pass, l, e->unrouted);
        if (mt_config_layer_is_moe(e->cfg, l)) {
            e->experts_seen += e->cfg->num_experts;
            e->experts_skipped += skipped;
        }
    }
    mt_engine_load_unit(e, mt_unit_block(l), e->slot[k], MT_EV_SLOT_FREE, MT_EV_SLOT_LOADED, k,
                        mt_engine_where_slot(k), skipped ? e->unrouted : NULL);
}
