/* The devices of a run or a bench (train_devices.h). */
#include "train/train_devices.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- the watchdog of a world's steps ----
 * A peer process that dies or hangs leaves this one inside a collective that never completes (an
 * NCCL kernel waits forever). The watchdog's thread aborts the backend's group (ncclCommAbort,
 * which stops those kernels) when a step outlives MT_RANK_TIMEOUT_S (1800 s), and the step then
 * fails, saying so. */
typedef struct mt_watchdog {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    mt_backend *be;
    double timeout_s;
    int armed, fired, stop;
    unsigned long generation; /* steps armed so far: each has its own deadline */
} mt_watchdog;

static void *watchdog_main(void *p) {
    mt_watchdog *w = p;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        if (!w->armed) {
            pthread_cond_wait(&w->changed, &w->lock);
            continue;
        }
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += (time_t)w->timeout_s;
        unsigned long g = w->generation;
        int waited = 0;
        while (w->armed && w->generation == g && !w->stop && !waited)
            waited = pthread_cond_timedwait(&w->changed, &w->lock, &deadline) != 0;
        if (waited && w->armed && w->generation == g && !w->fired) {
            w->fired = 1;
            w->be->ops->coll.comm_abort(w->be);
        }
        while (w->fired && w->armed && !w->stop) pthread_cond_wait(&w->changed, &w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static mt_status watchdog_start(mt_devices *d) {
    mt_watchdog *w = calloc(1, sizeof *w);
    if (!w) return mt_fail(MT_ERR_NOMEM, "cannot allocate the watchdog");
    const char *t = getenv("MT_RANK_TIMEOUT_S");
    w->timeout_s = t && atof(t) > 0 ? atof(t) : 1800;
    w->be = d->be;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->changed, NULL);
    if (pthread_create(&w->thread, NULL, watchdog_main, w) != 0) {
        free(w);
        return mt_fail(MT_ERR_NOMEM, "cannot start the watchdog's thread");
    }
    d->watchdog = w;
    return MT_OK;
}

static void watchdog_set(mt_watchdog *w, int armed) {
    pthread_mutex_lock(&w->lock);
    w->armed = armed;
    w->generation += armed;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

/* A world's step or evaluation under the watchdog: one it cut fails, whatever the step said. */
static mt_status watched(mt_devices *d, mt_status rc) {
    mt_watchdog *w = d->watchdog;
    watchdog_set(w, 0);
    pthread_mutex_lock(&w->lock);
    int fired = w->fired;
    pthread_mutex_unlock(&w->lock);
    if (!fired) return rc;
    return mt_fail(MT_ERR_DEVICE, "rank %d of %d: a step ran past %.0f s (MT_RANK_TIMEOUT_S): another rank died "
                   "or hung; the group was aborted", d->world.rank, d->world.size, w->timeout_s);
}

static void watchdog_stop(mt_devices *d) {
    mt_watchdog *w = d->watchdog;
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->changed);
    free(w);
    d->watchdog = NULL;
}

/* ---- the devices ---- */

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
    return watchdog_start(d);
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
    if (d->world.size > 1) mt_memory_fit_processes(&fit, d->world.local_size);
    return mt_memory_check_fit(&fit, "the run");
}

mt_status mt_devices_start(mt_devices *d, mt_store *store, const mt_engine_options *eo, int64_t adam_step) {
    if (d->world.size > 1) return mt_engine_create_replica(&d->engine, d->be, store, eo, adam_step, d->world.size);
    if (!d->ranks) return mt_engine_create(&d->engine, d->be, store, eo, adam_step);
    MT_TRY(mt_ranks_start(d->ranks, store, eo, adam_step));
    d->engine = mt_ranks_leader(d->ranks);
    return MT_OK;
}

mt_status mt_devices_step(mt_devices *d, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                          float lr, mt_step_result *s) {
    if (d->world.size > 1) {
        watchdog_set(d->watchdog, 1);
        return watched(d, mt_replica_step(d->engine, d->world.rank, d->world.size, inputs, targets, positions, lr, s));
    }
    if (!d->ranks) return mt_engine_step(d->engine, inputs, targets, positions, lr, s);
    return mt_ranks_step(d->ranks, inputs, targets, positions, lr, s);
}

mt_status mt_devices_eval(mt_devices *d, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                          double *loss) {
    if (d->world.size > 1) {
        watchdog_set(d->watchdog, 1);
        return watched(d, mt_replica_eval(d->engine, d->world.rank, d->world.size, inputs, targets, positions, loss));
    }
    if (!d->ranks) return mt_engine_eval(d->engine, inputs, targets, positions, loss);
    return mt_ranks_eval(d->ranks, inputs, targets, positions, loss);
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
    watchdog_stop(d);
    if (d->joined) d->be->ops->coll.comm_free(d->be);
    d->joined = 0;
    if (d->ranks) mt_ranks_destroy(d->ranks);
    else if (d->be) mt_backend_destroy(d->be);
    d->ranks = NULL;
    d->be = NULL;
}
