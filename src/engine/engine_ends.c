/* The embedding and the head updated on the device (ends_on_device).
 *
 * They are the largest units (a 128k vocabulary makes the tied embedding 12% of a 3B model), and
 * the host optimizer is the slowest part of a step up to a few billion parameters: it moves about
 * 30 bytes a parameter through host memory. The device does the same update in milliseconds,
 * and their gradients (4 bytes a parameter) never cross PCIe. The price is 12 bytes a parameter of
 * device memory for their fp32 masters and moments. The host store's copy of them goes stale
 * while steps run and is brought home by mt_engine_finish. */
#include "engine/engine_internal.h"

#include <stdint.h>

/* Element offset of unit u's state in the ends arrays: the embedding, then the head. */
static size_t ends_offset(const mt_engine *e, int u) {
    return u == 0 ? 0 : (size_t)e->lay->units[0].numel;
}

static void *unit_device_weights(const mt_engine *e, int u) { return u == 0 ? e->embed_w : e->head_w; }
static float *unit_device_grads(const mt_engine *e, int u) { return u == 0 ? e->embed_grad : e->head_grad; }

/* The i-th of the two: the embedding, then the head. */
static int end_unit(const mt_engine *e, int i) { return i == 0 ? 0 : e->U - 1; }

/* dst = src for one unit's masters, moments and working weights, either way; `to_device` picks. */
static void copy_unit_state(mt_engine *e, int u, int to_device, mt_stream *s) {
    mt_store *st = e->store;
    size_t n = (size_t)e->lay->units[u].numel, at = ends_offset(e, u);
    size_t wbytes = n * mt_dtype_size(st->weight_dtype);
    float *host[3] = {mt_store_unit_f32(st, st->master, u), mt_store_unit_f32(st, st->moments.m, u),
                      mt_store_unit_f32(st, st->moments.v, u)};
    float *dev[3] = {e->ends_master + at, e->ends_m + at, e->ends_v + at};
    for (int i = 0; i < 3; i++)
        mt_copy_async(e->be, to_device ? (void *)dev[i] : host[i], to_device ? host[i] : dev[i], n * 4, s);
    void *hw = mt_store_unit_weights(st, u), *dw = unit_device_weights(e, u);
    mt_copy_async(e->be, to_device ? dw : hw, to_device ? hw : dw, wbytes, s);
}

mt_status mt_engine_ends_upload(mt_engine *e) {
    for (int i = 0; i < 2; i++) copy_unit_state(e, end_unit(e, i), 1, e->h2d);
    mt_engine_record(e, MT_EV_EMBED_LOADED, 0, e->h2d);
    mt_engine_record(e, MT_EV_HEAD_LOADED, 0, e->h2d);
    mt_engine_sync(e, MT_EV_HEAD_LOADED, 0);
    e->ends_home_generation = e->generation;
    return mt_backend_check(e->be);
}

void mt_engine_ends_update(mt_engine *e, const mt_adamw_params *p, int clip) {
    const mt_op_iface *op = e->op;
    if (clip) op->clip_scale(e->be, e->compute, e->dev_clip_scale, e->dev_norms, e->U, e->o.max_grad_norm);
    size_t wsize = mt_dtype_size(e->be->ops->weight_dtype);
    for (int i = 0; i < 2; i++) {
        int u = end_unit(e, i);
        const mt_unit *unit = &e->lay->units[u];
        for (int k = 0; k < unit->num_tensors; k++) {
            const mt_tensor *t = &e->lay->tensors[unit->first_tensor + k];
            size_t at = ends_offset(e, u) + (size_t)t->offset, n = (size_t)t->rows * t->cols;
            op->adamw(e->be, e->compute, p, t->decay, clip ? e->dev_clip_scale : NULL, e->ends_master + at,
                      e->ends_m + at, e->ends_v + at, unit_device_grads(e, u) + t->offset,
                      (char *)unit_device_weights(e, u) + (size_t)t->offset * wsize, n);
        }
    }
}

void mt_engine_ends_home(mt_engine *e) {
    /* Every rank's device holds the same state (the same summed gradients): the leader's goes home. */
    if (!e->o.ends_on_device || e->leader || e->ends_home_generation == e->generation) return;
    for (int i = 0; i < 2; i++) mt_engine_guard_unit(e, end_unit(e, i));
    mt_engine_wait(e, e->d2h, MT_EV_ENDS_UPDATED, 0);
    for (int i = 0; i < 2; i++) copy_unit_state(e, end_unit(e, i), 0, e->d2h);
    mt_engine_record(e, MT_EV_DONE, 0, e->d2h);
    mt_engine_sync(e, MT_EV_DONE, 0);
    e->ends_home_generation = e->generation;
}
