/* The run's devices: one backend and engine, or with --gpus N above 1 a group of ranks on the one
 * host store (engine/ranks.h), whose leader's engine then stands for the run's engine (the
 * optimizer, finish, the saver's guard) and whose rank 0 backend for its backend. */
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

mt_status mt_train_open_devices(mt_train_run *r) {
    const mt_train_options *o = &r->o;
    if (o->gpus <= 1) return mt_backend_open(o->backend, o->threads, &r->be);
    MT_TRY(mt_ranks_create(&r->ranks, o->gpus, open_rank, &r->o));
    r->be = mt_ranks_backend(r->ranks, 0);
    return MT_OK;
}

mt_status mt_train_check_memory(mt_train_run *r) {
    mt_memory_fit fit = mt_memory_fit_ranks(&r->layout, r->be, &r->engine_options, r->moments,
                                            r->o.gpus > 1 ? r->o.gpus : 1);
    return mt_memory_check_fit(&fit, "the run");
}

mt_status mt_train_start_engine(mt_train_run *r) {
    if (!r->ranks) return mt_engine_create(&r->engine, r->be, &r->store, &r->engine_options, r->progress.adam_step);
    MT_TRY(mt_ranks_start(r->ranks, &r->store, &r->engine_options, r->progress.adam_step));
    r->engine = mt_ranks_leader(r->ranks);
    return MT_OK;
}

mt_status mt_train_step(mt_train_run *r, float lr, mt_step_result *s) {
    if (!r->ranks) return mt_engine_step(r->engine, r->inputs, r->targets, lr, s);
    return mt_ranks_step(r->ranks, r->inputs, r->targets, lr, s);
}

mt_status mt_train_eval(mt_train_run *r, double *loss) {
    if (!r->ranks) return mt_engine_eval(r->engine, r->inputs, r->targets, loss);
    return mt_ranks_eval(r->ranks, r->inputs, r->targets, loss);
}

void mt_train_poison_next_step(mt_train_run *r) {
    if (r->ranks) mt_ranks_poison_next_step(r->ranks);
    else mt_engine_poison_next_step(r->engine);
}

void mt_train_stop_engine(mt_train_run *r) {
    if (r->ranks) mt_ranks_stop(r->ranks);
    else mt_engine_destroy(r->engine);
    r->engine = NULL;
}

void mt_train_close_devices(mt_train_run *r) {
    if (r->ranks) mt_ranks_destroy(r->ranks);
    else if (r->be) mt_backend_destroy(r->be);
    r->ranks = NULL;
    r->be = NULL;
}
