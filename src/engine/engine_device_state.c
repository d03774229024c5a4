/* The units whose optimizer state the device keeps and updates: the embedding and the head
 * (ends_on_device) and the first device_blocks blocks.
 *
 * Up to a few billion parameters the host optimizer is the slowest part of a step: it moves 28 to
 * 36 bytes a parameter through host memory, and with exact clipping its masters can only move once
 * the backward is done. The device does the same update in milliseconds, and these units' gradients
 * (4 bytes a parameter) never cross PCIe: they wait for the clipping norm where they were made.
 * The price is device memory: 12 bytes a parameter for the fp32 masters and moments, and for a
 * block also its resident weights and its waiting gradients (the ends have buffers of their own
 * anyway). The planner (plan/placement.c) decides how many units pay it. The host store's copy
 * of these units goes stale while steps run and is brought home by mt_engine_finish. */
#include "engine/engine_internal.h"

#include <stdint.h>


int64_t mt_engine_device_numel(const mt_layout *lay, const mt_engine_options *o) {
    int64_t ends = lay->units[0].numel + lay->units[lay->num_units - 1].numel;
    return (o->ends_on_device ? ends : 0) + (int64_t)o->device_blocks * lay->max_block_numel;
}

int64_t mt_engine_device_params(const mt_layout *lay, const mt_engine_options *o) {
    int64_t n = o->ends_on_device ? lay->units[0].numel + lay->units[lay->num_units - 1].numel : 0;
    for (int l = 0; l < o->device_blocks; l++) n += lay->units[mt_unit_block(l)].numel;
    return n;
}

/* Element offset of unit u's state in the device's state arrays: the embedding, the head, then
 * blocks 0..D-1, each block at a stride of the largest block. */
static size_t state_offset(const mt_engine *e, int u) {
    size_t ends = e->o.ends_on_device ? (size_t)(e->lay->units[0].numel + e->lay->units[e->U - 1].numel) : 0;
    if (u == 0) return 0;
    if (u == e->U - 1) return (size_t)e->lay->units[0].numel;
    return ends + (size_t)(u - mt_unit_block(0)) * e->lay->max_block_numel;
}

static void *unit_device_weights(const mt_engine *e, int u) {
    if (u == 0) return e->embed_w;
    if (u == e->U - 1) return e->head_w;
    return mt_engine_block_weights(e, u - mt_unit_block(0));
}

static float *unit_device_grads(const mt_engine *e, int u) {
    if (u == 0) return e->embed_grad;
    if (u == e->U - 1) return e->head_grad;
    return mt_engine_block_grads(e, u - mt_unit_block(0), 0);
}

/* The issuing thread waits until stream s (h2d up, d2h home) is through what it was given: the
 * events that mark the end of the upload and of the homecoming. */
static void wait_copies(mt_engine *e, int to_device, mt_stream *s) {
    mt_ev id = to_device ? MT_EV_DEVICE_UPDATED : MT_EV_DONE;
    mt_engine_record(e, id, 0, s);
    mt_engine_sync(e, id, 0);
}

/* Unit u's masters to the device (`to_device`, on h2d) or home (on d2h), through `staging`,
 * waiting for each piece's copy. */
static void copy_unit_masters(mt_engine *e, int u, int to_device, mt_stream *s, float *staging) {
    mt_store *st = e->store;
    int64_t first = e->lay->units[u].offset, n = e->lay->units[u].numel, piece = MT_ENGINE_MASTER_STAGING / 4;
    float *dev = e->dev_master + state_offset(e, u);
    for (int64_t at = 0; at < n; at += piece) {
        size_t count = (size_t)(n - at < piece ? n - at : piece);
        if (to_device) mt_store_read_masters(st, first + at, count, staging);
        mt_copy_async(e->be, to_device ? (void *)(dev + at) : staging, to_device ? (void *)staging : dev + at,
                      count * 4, s);
        wait_copies(e, to_device, s);
        if (!to_device) mt_store_write_masters(st, first + at, count, staging);
    }
}

/* One unit's masters and moments either way, `to_device` picks; to the device also its working
 * weights (home, the masters' high halves are the store's weights already). */
static void copy_unit_state(mt_engine *e, int u, int to_device, mt_stream *s, float *staging) {
    mt_store *st = e->store;
    size_t n = (size_t)e->lay->units[u].numel, at = state_offset(e, u);
    copy_unit_masters(e, u, to_device, s, staging);
    float *host[2] = {mt_store_unit_f32(st, st->moments.m, u), mt_store_unit_f32(st, st->moments.v, u)};
    float *dev[2] = {e->dev_m + at, e->dev_v + at};
    for (int i = 0; i < 2; i++)
        mt_copy_async(e->be, to_device ? (void *)dev[i] : host[i], to_device ? host[i] : dev[i], n * 4, s);
    if (to_device)
        mt_copy_async(e->be, unit_device_weights(e, u), mt_store_unit_weights(st, u), n * mt_dtype_size(st->weight_dtype), s);
}

/* Every device-updated unit's state either way. */
static void copy_state(mt_engine *e, int to_device, mt_stream *s) {
    for (int u = 0; u < e->U; u++)
        if (mt_engine_unit_on_device(e, u)) copy_unit_state(e, u, to_device, s, e->master_staging);
}

mt_status mt_engine_device_upload(mt_engine *e) {
    copy_state(e, 1, e->h2d);
    if (e->o.ends_on_device) {
        mt_engine_record(e, MT_EV_EMBED_LOADED, 0, e->h2d);
        mt_engine_record(e, MT_EV_HEAD_LOADED, 0, e->h2d);
    }
    wait_copies(e, 1, e->h2d);
    e->dev_home_generation = e->generation;
    return mt_backend_check(e->be);
}

void mt_engine_device_update(mt_engine *e, const mt_adamw_params *p, int clip) {
    const mt_op_iface *op = e->op;
    if (clip) op->clip_scale(e->be, e->compute, e->dev_clip_scale, e->dev_norms, e->U, e->o.max_grad_norm);
    size_t wsize = mt_dtype_size(e->be->ops->weight_dtype);
    for (int u = 0; u < e->U; u++) {
        if (!mt_engine_unit_on_device(e, u)) continue;
        const mt_unit *unit = &e->lay->units[u];
        float *grads = unit_device_grads(e, u);
        char *weights = unit_device_weights(e, u);
        for (int k = 0; k < unit->num_tensors; k++) {
            const mt_tensor *t = &e->lay->tensors[unit->first_tensor + k];
            size_t at = state_offset(e, u) + (size_t)t->offset, n = (size_t)t->rows * t->cols;
            op->adamw(e->be, e->compute, p, t->decay, clip ? e->dev_clip_scale : NULL, e->dev_master + at,
                      e->dev_m + at, e->dev_v + at, grads + t->offset, weights + (size_t)t->offset * wsize, n);
        }
    }
}

void mt_engine_device_home(mt_engine *e) {
    /* Every rank's device holds the same state (the same summed gradients): the leader's goes home. */
    if (!mt_engine_any_on_device(e) || e->leader || e->dev_home_generation == e->generation) return;
    for (int u = 0; u < e->U; u++)
        if (mt_engine_unit_on_device(e, u)) mt_engine_guard_unit(e, u);
    mt_engine_wait(e, e->d2h, MT_EV_DEVICE_UPDATED, 0);
    copy_state(e, 0, e->d2h);
    wait_copies(e, 0, e->d2h);
    e->dev_home_generation = e->generation;
}
