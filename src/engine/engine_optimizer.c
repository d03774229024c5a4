/* The CPU optimizer thread: AdamW on each unit once its gradients are home, writing the unit's
 * next working weights straight into the store that the h2d stream copies from, then raising
 * the unit's flag so that the next copy of it may start. */
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "util/log.h"
#include "util/clock.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static void update_unit(mt_engine *e, const mt_opt_job *job, int64_t adam_step, int u) {
    mt_store *s = e->store;
    const mt_unit *unit = &e->lay->units[u];
    size_t wsize = mt_dtype_size(s->weight_dtype);
    mt_adamw_params p = {.lr = job->lr, .beta1 = e->o.beta1, .beta2 = e->o.beta2, .eps = e->o.eps,
                         .weight_decay = e->o.weight_decay, .step = adam_step,
                         .grad_scale = job->grad_scale};
    for (int i = 0; i < unit->num_tensors; i++) {
        const mt_tensor *t = &e->lay->tensors[unit->first_tensor + i];
        int64_t at = unit->offset + t->offset;
        mt_adamw_update_parallel(&p, t->decay, s->master + at, s->m + at, s->v + at, e->grad_home[u] + t->offset,
                                 (char *)s->weights + at * (int64_t)wsize, s->weight_dtype,
                                 (size_t)t->rows * t->cols, e->o.opt_threads);
    }
}

static void run_job(mt_engine *e, const mt_opt_job *job) {
    /* Counted before any flag rises, so whoever has seen every flag also sees the count. */
    pthread_mutex_lock(&e->opt_lock);
    int64_t adam_step = e->adam_step + 1;
    if (!job->skip) e->adam_step = adam_step;
    pthread_mutex_unlock(&e->opt_lock);
    double busy = 0;
    for (int i = 0; i < e->U; i++) {
        /* Overlapped: the order gradients come home (head, blocks down, embedding). Deferred:
         * the order the next forward needs the units. */
        int u = job->overlapped ? e->U - 1 - i : i;
        if (job->overlapped) {
            mt_flag_wait(&e->grads_issued[u], job->generation + 1);
            e->op->event_sync(e->be, e->grads_home[u]);
        }
        if (!job->skip) {
            double t0 = mt_now();
            update_unit(e, job, adam_step, u);
            busy += mt_now() - t0;
        }
        mt_flag_set(&e->updated[u], job->generation + 1);
    }
    pthread_mutex_lock(&e->opt_lock);
    e->opt_seconds = busy;
    pthread_mutex_unlock(&e->opt_lock);
}

static void *optimizer_main(void *arg) {
    mt_engine *e = arg;
#ifdef _OPENMP
    if (e->o.opt_threads > 0) omp_set_num_threads(e->o.opt_threads);
#endif
    for (;;) {
        pthread_mutex_lock(&e->opt_lock);
        while (!e->job_pending && !e->opt_stop) pthread_cond_wait(&e->opt_cond, &e->opt_lock);
        if (!e->job_pending) {
            pthread_mutex_unlock(&e->opt_lock);
            return NULL;
        }
        mt_opt_job job = e->job;
        e->job_pending = 0;
        pthread_cond_broadcast(&e->opt_cond);
        pthread_mutex_unlock(&e->opt_lock);
        run_job(e, &job);
    }
}

mt_status mt_engine_optimizer_start(mt_engine *e) {
    pthread_mutex_init(&e->opt_lock, NULL);
    pthread_cond_init(&e->opt_cond, NULL);
    if (e->o.opt_threads <= 0) {
#ifdef _OPENMP
        e->o.opt_threads = omp_get_max_threads();
#else
        e->o.opt_threads = 1;
#endif
    }
    if (pthread_create(&e->opt_thread, NULL, optimizer_main, e) != 0)
        return mt_fail(MT_ERR_NOMEM, "cannot start the optimizer thread");
    e->opt_running = 1;
    return MT_OK;
}

void mt_engine_optimizer_stop(mt_engine *e) {
    if (!e->opt_running) return;
    pthread_mutex_lock(&e->opt_lock);
    e->opt_stop = 1;
    pthread_cond_broadcast(&e->opt_cond);
    pthread_mutex_unlock(&e->opt_lock);
    pthread_join(e->opt_thread, NULL);
    e->opt_running = 0;
    pthread_mutex_destroy(&e->opt_lock);
    pthread_cond_destroy(&e->opt_cond);
}

/* One job at a time: the schedule never issues step g + 1's backward before every unit of step
 * g is updated, so a second post finds the slot free; waiting keeps that an invariant. */
void mt_engine_optimizer_post(mt_engine *e, const mt_opt_job *job) {
    pthread_mutex_lock(&e->opt_lock);
    while (e->job_pending) pthread_cond_wait(&e->opt_cond, &e->opt_lock);
    e->job = *job;
    e->job_pending = 1;
    pthread_cond_broadcast(&e->opt_cond);
    pthread_mutex_unlock(&e->opt_lock);
}

int64_t mt_engine_finish(mt_engine *e) {
    for (int u = 0; u < e->U; u++) mt_flag_wait(&e->updated[u], e->generation);
    pthread_mutex_lock(&e->opt_lock);
    int64_t steps = e->adam_step;
    pthread_mutex_unlock(&e->opt_lock);
    return steps;
}
