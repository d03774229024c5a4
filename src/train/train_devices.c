/* The devices of a run or a bench (train_devices.h). */
#include "train/train_devices.h"

#include <string.h>

#include "train/backend_select.h"
#include "train/memory_check.h"

/* Rank r's backend: GPU r, or a cpu backend (ranks as threads, for tests and CI). */
static mt_status open_rank(void *ctx, int rank, mt_backend **out) {
    const mt_train_options *o = ctx;
    if (o->backend && !strcmp(o->backend, "cpu")) return mt_backend_cpu_create(out, o->threads);
    mt_status rc = mt_backend_cuda_create(out, rank);
    if (rc != MT_OK) return mt_fail_context(rc, "--gpus %d: the GPU of rank %d", o->gpus, rank);
    return MT_OK;
}

mt_status mt_devices_world(mt_devices *d) {
    int present;
    return mt_world_from_env(&d->world, &present);
}

int mt_devices_ranks(const mt_devices *d, const mt_train_options *o) {
    return d->world.size > 1 ? d->world.size : o->gpus > 1 ? o->gpus : 1;
}

/* This process's GPU (LOCAL_RANK) or cpu backend, joined to the world's other processes. */
static mt_status open_world_rank(mt_devices *d, const mt_train_options *o) {
    const mt_world *w = &d->world;
    if (o->gpus > 1)
        return mt_fail(MT_ERR_INVALID, "--gpus %d under torchrun (WORLD_SIZE=%d): a process takes one GPU there "
                       "(torchrun --nproc-per-node N); or leave torchrun out and give --gpus N", o->gpus, w->size);
    mt_status rc = o->backend && !strcmp(o->backend, "cpu") ? mt_backend_cpu_create(&d->be, o->threads)
                                                             : mt_backend_cuda_create(&d->be, w->local_rank);
    if (rc != MT_OK) return mt_fail_context(rc, "rank %d of %d: the GPU of LOCAL_RANK %d", w->rank, w->size,
                                            w->local_rank);
    if (!mt_backend_has_collectives(d->be))
        return mt_fail(MT_ERR_INVALID, "the %s backend has no collectives: it cannot be a rank of %d processes",
                       d->be->ops->name, w->size);
    MT_TRY(d->be->ops->coll.comm_init_world(d->be, w));
    d->joined = 1;
    return MT_OK;
}

mt_status mt_devices_open(mt_devices *d, const mt_train_options *o) {
    if (d->world.size > 1) return open_world_rank(d, o);
    if (o->gpus <= 1) return mt_backend_open(o->backend, o->threads, &d->be);
    MT_TRY(mt_ranks_create(&d->ranks, o->gpus, open_rank, (void *)o));
    d->be = mt_ranks_backend(d->ranks, 0);
    return MT_OK;
}

mt_status mt_devices_check_memory(const mt_devices *d, const mt_layout *layout, const mt_engine_options *eo,
                                  mt_moments_format moments) {
    mt_memory_fit fit = mt_memory_fit_ranks(layout, d->be, eo, moments, d->ranks ? mt_ranks_count(d->ranks) : 1);
    return mt_memory_check_fit(&fit, "the run");
}

mt_status mt_devices_start(mt_devices *d, mt_store *store, const mt_engine_options *eo, int64_t adam_step) {
    if (d->world.size > 1) return mt_engine_create_replica(&d->engine, d->be, store, eo, adam_step, d->world.size);
    if (!d->ranks) return mt_engine_create(&d->engine, d->be, store, eo, adam_step);
    MT_TRY(mt_ranks_start(d->ranks, store, eo, adam_step));
    d->engine = mt_ranks_leader(d->ranks);
    return MT_OK;
}

mt_status mt_devices_step(mt_devices *d, const int32_t *inputs, const int32_t *targets, float lr,
                          mt_step_result *s) {
    if (d->world.size > 1) return mt_replica_step(d->engine, d->world.rank, d->world.size, inputs, targets, lr, s);
    if (!d->ranks) return mt_engine_step(d->engine, inputs, targets, lr, s);
    return mt_ranks_step(d->ranks, inputs, targets, lr, s);
}

mt_status mt_devices_eval(mt_devices *d, const int32_t *inputs, const int32_t *targets, double *loss) {
    if (d->world.size > 1) return mt_replica_eval(d->engine, d->world.rank, d->world.size, inputs, targets, loss);
    if (!d->ranks) return mt_engine_eval(d->engine, inputs, targets, loss);
    return mt_ranks_eval(d->ranks, inputs, targets, loss);
}

void mt_devices_poison_next_step(mt_devices *d) {
    if (d->ranks) mt_ranks_poison_next_step(d->ranks);
    else mt_engine_poison_next_step(d->engine);
}

void mt_devices_stop(mt_devices *d) {
    if (d->ranks) mt_ranks_stop(d->ranks);
    else mt_engine_destroy(d->engine);
    d->engine = NULL;
}

void mt_devices_close(mt_devices *d) {
    if (d->joined) d->be->ops->coll.comm_free(d->be);
    d->joined = 0;
    if (d->ranks) mt_ranks_destroy(d->ranks);
    else if (d->be) mt_backend_destroy(d->be);
    d->ranks = NULL;
    d->be = NULL;
}
