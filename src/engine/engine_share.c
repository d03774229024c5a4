/* A sharded replica (engine_internal.h's shard): ranks that are processes, each with a store of its
 * own, split every host-updated unit as the threads of one store do: each reduce-scatters a unit's
 * gradient, takes home its slice alone and updates that slice alone. Its store is then current in
 * its own slices only. The rest comes from the owners over the devices:
 *   - the weights, at every use: a load copies the rank's own slice from the store, and the job
 *     that first reads it has every rank broadcast its slice into it first (on the compute stream,
 *     where every rank issues its collectives in the same order);
 *   - the whole state (working weights, low halves, moments), for a checkpoint: mt_engine_share_state
 *     passes every rank's slices through a device buffer into every store. */
#include <stdint.h>
#include <stdlib.h>

#include "engine/engine_internal.h"

void mt_engine_owned(const mt_engine *e, int u, int64_t *lo, int64_t *hi) {
    const mt_unit *unit = &e->lay->units[u];
    size_t slo = 0, shi = (size_t)unit->numel;
    if (e->shard) mt_engine_slice(e, u, &slo, &shi);
    *lo = unit->offset + (int64_t)slo;
    *hi = unit->offset + (int64_t)shi;
}

void mt_engine_loaded(mt_engine *e, int u, void *dst, int where) {
    if (e->shard) e->gather_due[where] = (mt_gather_due){.unit = u, .dst = dst};
}

void mt_engine_take_gather(mt_engine *e, mt_compute_job *j, int where) {
    if (!e->shard) return;
    j->gather = e->gather_due[where];
    e->gather_due[where] = (mt_gather_due){0};
}

/* Inside a compute job: every rank's slice of the unit's weights at g->dst from its owner. */
void mt_engine_gather_weights(mt_engine *e, const mt_gather_due *g) {
    size_t wsize = mt_dtype_size(e->be->ops->weight_dtype);
    for (int r = 0; r < e->group_size; r++) {
        size_t lo, hi;
        mt_engine_slice_of(e, g->unit, r, &lo, &hi);
        if (hi > lo) e->be->ops->coll.broadcast(e->be, e->compute, (char *)g->dst + lo * wsize, (hi - lo) * wsize, r);
    }
}

/* ---- the whole state, for a checkpoint ---- */

/* One class of the store: n elements of `size` bytes from `base` in layout order. */
typedef struct {
    char *base;
    size_t size;
} state_class;

/* A share job: elements [at, at + count) of a class, every rank's part of them through the device
 * buffer: the owner's part up from its store, broadcast, and all of it down into every store. */
typedef struct {
    mt_engine *e;
    state_class cls;
    int unit;
    size_t at, count; /* element indices of the unit */
} share_piece;

static void run_share_piece(void *arg) {
    share_piece *p = arg;
    mt_engine *e = p->e;
    char *dev = (char *)e->embed_grad, *home = p->cls.base + (size_t)(e->lay->units[p->unit].offset + p->at) * p->cls.size;
    for (int r = 0; r < e->group_size; r++) {
        size_t lo, hi;
        mt_engine_slice_of(e, p->unit, r, &lo, &hi);
        if (lo < p->at) lo = p->at;
        if (hi > p->at + p->count) hi = p->at + p->count;
        if (hi <= lo) continue;
        size_t off = (lo - p->at) * p->cls.size, bytes = (hi - lo) * p->cls.size;
        if (r == e->group_rank) mt_copy_in_launch(e->be, dev + off, home + off, bytes, e->compute);
        e->be->ops->coll.broadcast(e->be, e->compute, dev + off, bytes, r);
    }
    mt_copy_in_launch(e->be, home, dev, p->count * p->cls.size, e->compute);
    free(p);
}

/* Issues unit u's pieces of one class, each at most the device buffer. */
static mt_status share_class(mt_engine *e, int u, state_class cls) {
    size_t numel = (size_t)mt_engine_numel(e, u), most = mt_engine_embed_grad_numel(e) * 4 / cls.size;
    for (size_t at = 0; at < numel; at += most) {
        share_piece *p = malloc(sizeof *p);
        if (!p) return mt_fail(MT_ERR_NOMEM, "cannot allocate a share job");
        *p = (share_piece){.e = e, .cls = cls, .unit = u, .at = at, .count = numel - at < most ? numel - at : most};
        mt_launch(e->be, e->compute, run_share_piece, p);
    }
    return MT_OK;
}

mt_status mt_engine_share_state(mt_engine *e) {
    if (!e->shard) return MT_OK;
    mt_engine_finish(e);
    mt_store *s = e->store;
    size_t moment = mt_moments_value_size(s->moments.format);
    state_class classes[4] = {{s->weights, mt_dtype_size(s->weight_dtype)},
                              {(char *)s->low, 2},
                              {s->moments.m, moment},
                              {s->moments.v, moment}};
    for (int u = 0; u < e->U; u++) {
        if (mt_engine_unit_on_device(e, u)) continue; /* every rank updated it whole */
        mt_engine_guard_unit(e, u); /* a checkpoint being written takes the unit first */
        for (int c = 0; c < 4; c++)
            if (classes[c].base) MT_TRY(share_class(e, u, classes[c]));
    }
    mt_engine_record(e, MT_EV_UNIT_READY, 0, e->compute); /* as a pass ends: compute, then d2h, done */
    mt_engine_wait(e, e->d2h, MT_EV_UNIT_READY, 0);
    mt_engine_record(e, MT_EV_DONE, 0, e->d2h);
    mt_engine_sync(e, MT_EV_DONE, 0);
    return mt_backend_check(e->be);
}
