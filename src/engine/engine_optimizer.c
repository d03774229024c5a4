/* The CPU optimizer thread: AdamW on each unit once its gradients are home, writing the unit's
 * masters, whose high halves (or fp32 values) are what the h2d stream copies, then raising the
 * unit's flag so that the next copy of it may start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/clock.h"
#include "util/cpu_list.h"
#include "util/log.h"

#ifdef _OPENMP
#include <omp.h>
#endif

mt_adamw_params mt_engine_adamw_params(const mt_engine *e, float lr, int64_t step, float grad_scale) {
    return (mt_adamw_params){.lr = lr, .beta1 = e->o.beta1, .beta2 = e->o.beta2, .eps = e->o.eps,
                             .weight_decay = e->o.weight_decay, .step = step, .grad_scale = grad_scale};
}

static mt_adamw_params adamw_params(const mt_engine *e, const mt_opt_job *job, int64_t adam_step) {
    return mt_engine_adamw_params(e, job->lr, adam_step, job->grad_scale);
}

/* Part `part` of unit u's update (optim/adamw.h) over its elements [lo, hi) (the unit's own
 * indices), their gradients from `grad` on (element lo's): each tensor's share of the range, and of
 * a sharded replica's slice of the unit. */
void mt_engine_update_range(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part, int u,
                            int64_t lo, int64_t hi, const float *grad) {
    mt_engine_guard_unit(e, u);
    mt_store *s = e->store;
    const mt_unit *unit = &e->lay->units[u];
    mt_adamw_params p = adamw_params(e, job, adam_step);
    int64_t own_lo, own_hi; /* a sharded replica's slice (fp32 or bf16 moments: no block is cut) */
    mt_engine_owned(e, u, &own_lo, &own_hi);
    own_lo -= unit->offset, own_hi -= unit->offset;
    double t0 = mt_now();
    for (int i = 0; i < unit->num_tensors; i++) {
        const mt_tensor *t = &e->lay->tensors[unit->first_tensor + i];
        int64_t from = t->offset, to = from + (int64_t)t->rows * t->cols;
        if (from < lo) from = lo;
        if (from < own_lo) from = own_lo;
        if (to > hi) to = hi;
        if (to > own_hi) to = own_hi;
        if (from >= to) continue;
        int64_t at = unit->offset + from;
        mt_adamw_update_moments(part, &p, t->decay, mt_store_masters(s, at), &s->moments, (size_t)at,
                                grad + (from - lo), (size_t)(to - from), e->o.opt_threads);
    }
    if (unit->kind == MT_UNIT_BLOCK) e->job_block_seconds += mt_now() - t0;
}

/* Piece `piece` of `pieces` of unit u from its host gradient: element ranges cut on moment-block
 * boundaries, so that no 8-bit block is requantized by two pieces (updating piece by piece gives
 * the same bits as the whole unit at once). */
void mt_engine_update_piece(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part, int u,
                            int piece, int pieces) {
    const mt_unit *unit = &e->lay->units[u];
    int64_t end = unit->offset + unit->numel, block = MT_MOMENTS_BLOCK;
    int64_t lo = (unit->offset + unit->numel * piece / pieces + block - 1) / block * block;
    int64_t hi = piece + 1 == pieces ? end : (unit->offset + unit->numel * (piece + 1) / pieces + block - 1) / block * block;
    if (piece == 0) lo = unit->offset;
    if (hi > end) hi = end;
    lo -= unit->offset, hi -= unit->offset;
    mt_engine_update_range(e, job, adam_step, part, u, lo, hi, e->grad_home[u] + lo);
}

static void update_unit(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part, int u) {
    mt_engine_update_piece(e, job, adam_step, part, u, 0, 1);
}

void mt_engine_update_embedding_rows(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part,
                                     int v0, int rows, const float *grad, size_t grad_stride, const uint8_t *mask,
                                     uint8_t which) {
    mt_engine_guard_unit(e, 0);
    mt_store *s = e->store;
    const mt_tensor *t = mt_layout_tensor(e->lay, 0, MT_T_WTE);
    mt_adamw_params p = adamw_params(e, job, adam_step);
    int64_t at = e->lay->units[0].offset + t->offset + (int64_t)v0 * t->cols;
    mt_adamw_update_rows(part, &p, t->decay, mt_store_masters(s, at), &s->moments, (size_t)at, grad,
                         grad_stride, (size_t)rows, (size_t)t->cols, mask, which, e->o.opt_threads);
}

void mt_engine_update_masked_rows(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part,
                                  uint8_t which, int zeros) {
    const float *grad = zeros ? e->zero_row : e->grad_home[0] + mt_layout_tensor(e->lay, 0, MT_T_WTE)->offset;
    mt_engine_update_embedding_rows(e, job, adam_step, part, 0, e->cfg->vocab_size, grad,
                                    zeros ? 0 : (size_t)e->cfg->hidden_size, e->input_rows[job->generation % 2], which);
}

int64_t mt_engine_count_update(mt_engine *e, int skip) {
    pthread_mutex_lock(&e->opt_lock);
    int64_t adam_step = e->adam_step + 1;
    if (!skip) e->adam_step = adam_step;
    pthread_mutex_unlock(&e->opt_lock);
    return adam_step;
}

int mt_engine_grads_home(mt_engine *e, const mt_opt_job *job, mt_fl issued, mt_ev home, int i, int wait) {
    for (int r = 0; r < e->ranks; r++) {
        mt_engine *rank = e->peers ? e->peers[r] : e;
        if (!wait) {
            if (!mt_engine_reached(rank, issued, i, job->generation, MT_GEN_NEXT) || !mt_engine_done(rank, home, i))
                return 0;
            continue;
        }
        mt_engine_await(rank, issued, i, job->generation, MT_GEN_NEXT);
        mt_engine_sync(rank, home, i);
    }
    return 1;
}

/* Whether unit u's gradients are home, every rank's slice of them; `wait`: wait until they are. */
static int unit_home(mt_engine *e, const mt_opt_job *job, int u, int wait) {
    return mt_engine_grads_home(e, job, MT_FL_GRADS_ISSUED, MT_EV_GRADS_HOME, u, wait);
}

/* Deferred (exact clipping): every gradient is home; update in the order the next forward needs
 * the units. */
static void run_deferred(mt_engine *e, const mt_opt_job *job) {
    e->job_norm_time = mt_now(); /* the job is posted once the norm is known */
    int64_t adam_step = mt_engine_count_update(e, job->skip);
    for (int u = 0; u < e->U; u++) {
        double t0 = mt_now();
        if (!job->skip && !mt_engine_unit_on_device(e, u)) update_unit(e, job, adam_step, MT_ADAMW_FULL, u);
        e->job_update_seconds += mt_now() - t0;
        mt_engine_raise(e, MT_FL_UPDATED, u, job->generation);
    }
    e->job_after_norm_seconds = mt_now() - e->job_norm_time;
}

/* Exact clipping with fp32 moments. The whole update waits for the norm, unless the step before
 * was applied unclipped (e->update_ahead):
 *   after the norm    the masters first, in the order the next forward needs the units (MASTERS:
 *                     20 bytes a parameter, what the next forward waits for), then, once every
 *                     unit's are out, the moments (MOMENTS), in the order the next backward's
 *                     gradients come home, each unit's before its next gradients land on the ones
 *                     these read (grads_taken): FULL's bits, clipped or not, in 40 bytes a
 *                     parameter. A skipped step leaves masters and moments as they were.
 *   ahead             each unit's whole update as its gradients come home during the backward, in
 *                     the order they arrive: the head, blocks L-1..D, the embedding (AHEAD, as if
 *                     this step were not clipped either), so that a step that is not clipped has
 *                     every master out when the norm comes; a clipped one takes
 *                     AHEAD_CORRECT_MASTERS (AHEAD's step out of the masters, within fp32
 *                     rounding, the clipped one in) then CORRECT_MOMENTS, a skipped one AHEAD_UNDO;
 *                     a unit whose gradients came home after the norm takes the plain update
 *                     (FULL) if the step is not clipped, else AHEAD first, so that the bits never
 *                     depend on timing.
 * Speculating the moments alone during the backward would spare the masters' pass after an
 * unclipped norm a little, but a clipped step would then take them back out and in again: 60 bytes
 * a parameter, more host traffic than some steps' GPU work; a run that clips keeps clipping, and
 * one that stopped takes its update ahead from the next step on. */
/* The step's norm as the issuing thread told it: its clip coefficient and whether it is skipped. */
static void read_norm(mt_engine *e, float *scale, int *skip) {
    pthread_mutex_lock(&e->opt_lock);
    *scale = e->norm_scale;
    *skip = e->norm_skip;
    pthread_mutex_unlock(&e->opt_lock);
}

/* For the step's report: when the norm became known here, and how many of the host-updated units
 * among `left` (those not yet reached) still had their gradients' work to take. */
static void norm_noticed(mt_engine *e, const int *left, int n, const uint8_t *taken) {
    e->job_norm_time = mt_now();
    e->job_backlog_units = 0;
    for (int k = 0; k < n; k++) e->job_backlog_units += !taken[left[k]] && !mt_engine_unit_on_device(e, left[k]);
}

/* Whether this job takes the update ahead of the norm; and the next one's, from this one's outcome. */
static int ahead_now(mt_engine *e) {
    if (e->o.update_ahead != MT_UPDATE_AHEAD_AUTO) return e->o.update_ahead == MT_UPDATE_AHEAD_ALWAYS;
    return mt_engine_update_ahead(e);
}

static void ahead_next(mt_engine *e, int applied_unclipped) {
    pthread_mutex_lock(&e->opt_lock);
    e->update_ahead = applied_unclipped;
    pthread_mutex_unlock(&e->opt_lock);
}

/* The parts a host-updated unit takes once the norm is known: its masters' (-1: none) and then its
 * moments' (-1: none), AHEAD taken or not (`taken`). */
static int masters_part(int ahead, int skip, int clipped, int taken) {
    if (skip) return ahead ? MT_ADAMW_AHEAD_UNDO : -1;
    if (!ahead) return MT_ADAMW_MASTERS;
    if (clipped) return MT_ADAMW_AHEAD_CORRECT_MASTERS;
    return taken ? -1 : MT_ADAMW_FULL;
}

static int moments_part(int ahead, int skip, int clipped) {
    if (skip) return -1;
    if (!ahead) return MT_ADAMW_MOMENTS;
    return clipped ? MT_ADAMW_CORRECT_MOMENTS : -1;
}

/* The embedding's rows no input token of the step touches have a zero gradient where its matrix is
 * its own (untied) and the gradient the step's alone (no group sums it): their update is the same
 * whatever the norm, so it need not wait for it. The step takes it whole (FULL, from a row of
 * zeros) before the norm, once its own load of the embedding is done reading the rows (the head's
 * gradients home say so: the head's backward ran after the embedding's forward); every other part
 * of the step takes the embedding's input rows alone; a skipped step takes the other rows' update
 * back out (AHEAD_UNDO, within fp32 rounding, as for a step taken ahead). 32,768 random tokens
 * touch 23% of Llama-3's 128,256 rows, text fewer: the rest of the embedding's share of what the
 * next forward waits for after the norm is gone. */
static int rows_apart(const mt_engine *e) {
    return e->zero_row && !e->reduce && !e->cfg->tie_embeddings && !mt_engine_unit_on_device(e, 0);
}

/* Part `part` of host-updated unit u's update: the embedding's input rows alone where its other
 * rows go apart. */
static void update_host_unit(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part, int u,
                             int apart) {
    if (u == 0 && apart) mt_engine_update_masked_rows(e, job, adam_step, part, 1, 0);
    else update_unit(e, job, adam_step, part, u);
}

/* The embedding's other rows, before the norm (their gradient is zeros): once the step's load of
 * the embedding is done. */
static void take_other_rows(mt_engine *e, const mt_opt_job *job, int64_t early_step) {
    unit_home(e, job, e->U - 1, 1);
    if (mt_engine_optimizer_halted(e)) return;
    double t0 = mt_now();
    mt_engine_update_masked_rows(e, job, early_step, MT_ADAMW_FULL, 0, 1);
    e->job_update_seconds += mt_now() - t0;
}

/* Ahead: each host-updated unit's AHEAD as its gradients come home, until every unit is taken or
 * the norm came and the step is plain (not clipped, not skipped): the rest take FULL then. */
static void take_ahead(mt_engine *e, const mt_opt_job *job, int64_t early_step, const int *arrival, int n,
                       int apart, uint8_t *taken, int *norm_known, float *scale, int *skip) {
    for (int k = 0; k < n; k++) {
        int u = arrival[k];
        if (mt_engine_unit_on_device(e, u)) continue;
        if (!*norm_known && mt_engine_reached(e, MT_FL_NORM_KNOWN, 0, job->generation, MT_GEN_NEXT)) {
            *norm_known = 1;
            norm_noticed(e, arrival + k, n - k, taken);
            read_norm(e, scale, skip);
            if (!*skip && *scale == 1.0f) return;
        }
        unit_home(e, job, u, 1);
        if (mt_engine_optimizer_halted(e)) return;
        double t0 = mt_now();
        update_host_unit(e, job, early_step, MT_ADAMW_AHEAD, u, apart);
        e->job_update_seconds += mt_now() - t0;
        taken[u] = 1;
    }
}

static void run_speculative(mt_engine *e, const mt_opt_job *job) {
    int arrival[e->U], n = 0;
    uint8_t taken[e->U];
    memset(taken, 0, sizeof taken);
    arrival[n++] = e->U - 1;
    for (int l = e->L - 1; l >= 0; l--) arrival[n++] = mt_unit_block(l);
    arrival[n++] = 0;
    int ahead = ahead_now(e), apart = rows_apart(e);
    /* The bias corrections of the work before the norm are those of this step's update, should it
     * not be skipped. */
    int64_t early_step = ahead || apart ? mt_engine_count_update(e, 1) : 1;
    int norm_known = 0, skip = 0;
    float scale = 1.0f;
    if (apart) take_other_rows(e, job, early_step);
    if (ahead) take_ahead(e, job, early_step, arrival, n, apart, taken, &norm_known, &scale, &skip);
    if (mt_engine_optimizer_halted(e)) return;
    if (!norm_known) {
        mt_engine_await(e, MT_FL_NORM_KNOWN, 0, job->generation, MT_GEN_NEXT);
        norm_noticed(e, arrival, ahead ? n : 0, taken); /* not ahead, the backward left no work */
        read_norm(e, &scale, &skip);
    }
    if (mt_engine_optimizer_halted(e)) return;
    int clipped = !skip && scale != 1.0f, later = moments_part(ahead, skip, clipped);
    mt_opt_job step = *job;
    step.grad_scale = skip ? 1.0f : scale;
    int64_t adam_step = mt_engine_count_update(e, skip);
    for (int u = 0; u < e->U; u++) {
        int host = !mt_engine_unit_on_device(e, u);
        if (host) {
            double t0 = mt_now();
            if (!taken[u]) {
                unit_home(e, job, u, 1);
                if (mt_engine_optimizer_halted(e)) return;
                if (ahead && (skip || clipped)) update_host_unit(e, job, early_step, MT_ADAMW_AHEAD, u, apart);
            }
            int part = masters_part(ahead, skip, clipped, taken[u]);
            if (part >= 0) update_host_unit(e, &step, adam_step, (mt_adamw_part)part, u, apart);
            if (u == 0 && apart && skip) mt_engine_update_masked_rows(e, job, early_step, MT_ADAMW_AHEAD_UNDO, 0, 1);
            e->job_update_seconds += mt_now() - t0;
        }
        mt_engine_raise(e, MT_FL_UPDATED, u, job->generation);
        if (!host || later < 0) mt_engine_raise(e, MT_FL_GRADS_TAKEN, u, job->generation);
    }
    e->job_after_norm_seconds = mt_now() - e->job_norm_time;
    ahead_next(e, !skip && !clipped);
    /* The moments, after every master is out, in the order the next backward's gradients come
     * home, each unit's before its next gradients land on the ones these read. */
    for (int k = 0; later >= 0 && k < n; k++) {
        int u = arrival[k];
        if (mt_engine_unit_on_device(e, u)) continue;
        double t0 = mt_now();
        update_host_unit(e, &step, adam_step, (mt_adamw_part)later, u, apart);
        e->job_update_seconds += mt_now() - t0;
        mt_engine_raise(e, MT_FL_GRADS_TAKEN, u, job->generation);
    }
}

static void run_job(mt_engine *e, const mt_opt_job *job) {
    e->job_block_seconds = 0;
    e->job_update_seconds = 0;
    e->job_after_norm_seconds = 0;
    e->job_backlog_units = 0;
    if (mt_engine_optimizer_halted(e)) return;
    switch (job->mode) {
    case MT_OPT_OVERLAPPED: mt_engine_run_overlapped(e, job); break;
    case MT_OPT_SPECULATIVE: run_speculative(e, job); break;
    case MT_OPT_DEFERRED: run_deferred(e, job); break;
    }
    pthread_mutex_lock(&e->opt_lock);
    e->opt_seconds = e->job_update_seconds;
    e->opt_seconds_per_block = e->device_blocks == e->L ? 0 : e->job_block_seconds / (e->L - e->device_blocks);
    e->opt_after_norm_seconds = e->job_after_norm_seconds;
    e->opt_backlog_units = e->job_backlog_units;
    pthread_mutex_unlock(&e->opt_lock);
}

/* The calling thread's name as top -H and /proc show it (at most 15 characters). */
static void name_self(const char *format, int t) {
    char name[16];
    snprintf(name, sizeof name, format, t);
    pthread_setname_np(pthread_self(), name);
}

/* Each thread of the optimizer's OpenMP team to its core, once: the team's threads persist
 * across the parallel regions that follow (libgomp keeps them in the thread's pool). */
static void pin_team(mt_engine *e) {
#ifdef _OPENMP
#pragma omp parallel num_threads(e->num_opt_cores)
    {
        int t = omp_get_thread_num();
        if (mt_cpu_pin_self(e->opt_cores[t]) != MT_OK) mt_log_warn("optimizer thread %d unpinned: %s", t, mt_error());
        if (t) name_self("mt-opt-%d", t);
    }
#else
    if (mt_cpu_pin_self(e->opt_cores[0]) != MT_OK) mt_log_warn("optimizer thread unpinned: %s", mt_error());
#endif
}

static void *optimizer_main(void *arg) {
    mt_engine *e = arg;
    name_self("mt-optimizer", 0);
    mt_engine_on_optimizer_thread();
#ifdef _OPENMP
    if (e->o.opt_threads > 0) omp_set_num_threads(e->o.opt_threads);
#endif
    if (e->num_opt_cores) pin_team(e);
    for (;;) {
        pthread_mutex_lock(&e->opt_lock);
        while (!e->job_pending && !e->opt_stop) pthread_cond_wait(&e->opt_cond, &e->opt_lock);
        if (!e->job_pending) {
            pthread_mutex_unlock(&e->opt_lock);
            return NULL;
        }
        mt_opt_job job = e->job;
        e->job_pending = 0;
        e->opt_busy = 1;
        pthread_cond_broadcast(&e->opt_cond);
        pthread_mutex_unlock(&e->opt_lock);
        run_job(e, &job);
        pthread_mutex_lock(&e->opt_lock);
        e->opt_busy = 0;
        pthread_cond_broadcast(&e->opt_cond);
        pthread_mutex_unlock(&e->opt_lock);
    }
}

mt_status mt_engine_optimizer_team(const mt_engine_options *o, mt_cpu_team *team) {
    *team = (mt_cpu_team){.threads = o->opt_threads};
    if (o->opt_cores && !strcmp(o->opt_cores, MT_OPT_CORES_AUTO)) {
        MT_TRY(mt_cpu_list_all_but_first(&team->cores, &team->count));
        if (team->count && team->threads <= 0) team->threads = team->count;
        if (team->threads != team->count) { /* a thread count of its own: unpinned */
            free(team->cores);
            team->cores = NULL;
            team->count = 0;
        }
    } else if (o->opt_cores) {
        MT_TRY(mt_cpu_list_parse(o->opt_cores, "--opt-cores", &team->cores, &team->count));
        if (team->threads > 0 && team->threads != team->count) {
            mt_status rc = mt_fail(MT_ERR_INVALID, "--opt-threads %d but --opt-cores '%s' lists %d cores: give "
                                   "one, or the same number", team->threads, o->opt_cores, team->count);
            free(team->cores);
            *team = (mt_cpu_team){0};
            return rc;
        }
        team->threads = team->count;
    }
    if (team->threads <= 0) { /* every core this process may run on (OpenMP counts its CPU set) but one */
#ifdef _OPENMP
        team->threads = omp_get_max_threads() > 1 ? omp_get_max_threads() - 1 : 1;
#else
        team->threads = 1;
#endif
    }
    return MT_OK;
}

mt_status mt_engine_store_create(mt_store *store, const mt_layout *layout, mt_backend *be,
                                 mt_moments_format moments, const mt_engine_options *o) {
    mt_cpu_team team;
    MT_TRY(mt_engine_optimizer_team(o, &team));
    mt_status rc = mt_store_create_touched(store, layout, be, moments, &team);
    free(team.cores);
    return rc;
}

mt_status mt_engine_optimizer_start(mt_engine *e) {
    mt_cpu_team team;
    MT_TRY(mt_engine_optimizer_team(&e->o, &team));
    e->opt_cores = team.cores;
    e->num_opt_cores = team.count;
    e->o.opt_threads = team.threads;
    pthread_mutex_init(&e->opt_lock, NULL);
    pthread_cond_init(&e->opt_cond, NULL);
    if (pthread_create(&e->opt_thread, NULL, optimizer_main, e) != 0)
        return mt_fail(MT_ERR_NOMEM, "cannot start the optimizer thread");
    e->opt_running = 1;
    return MT_OK;
}

void mt_engine_optimizer_stop(mt_engine *e) {
    if (e->opt_running) {
        pthread_mutex_lock(&e->opt_lock);
        e->opt_stop = 1;
        pthread_cond_broadcast(&e->opt_cond);
        pthread_mutex_unlock(&e->opt_lock);
        pthread_join(e->opt_thread, NULL);
        e->opt_running = 0;
        pthread_mutex_destroy(&e->opt_lock);
        pthread_cond_destroy(&e->opt_cond);
    }
    free(e->opt_cores);
    e->opt_cores = NULL;
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

void mt_engine_optimizer_norm(mt_engine *e, float scale, int skip) {
    pthread_mutex_lock(&e->opt_lock);
    e->norm_scale = scale;
    e->norm_skip = skip;
    pthread_mutex_unlock(&e->opt_lock);
    mt_engine_raise(e, MT_FL_NORM_KNOWN, 0, e->generation);
}

int mt_engine_optimizer_halted(const mt_engine *opt) { return __atomic_load_n(&opt->opt_halted, __ATOMIC_ACQUIRE); }

static void raise_for_good(mt_engine *e, mt_fl id) {
    for (int i = 0; i < e->n_fl[id]; i++) mt_flag_set(&e->fl[id][i], INT64_MAX / 2);
}

void mt_engine_optimizer_halt(mt_engine *opt) {
    __atomic_store_n(&opt->opt_halted, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&opt->opt_lock);
    opt->norm_scale = 1.0f;
    opt->norm_skip = 1;
    pthread_mutex_unlock(&opt->opt_lock);
    int n = opt->peers ? opt->ranks : 1;
    static const mt_fl optimizer_waits[] = {MT_FL_GRADS_ISSUED, MT_FL_EMBED_EARLY_ISSUED, MT_FL_NORM_KNOWN,
                                           MT_FL_CHUNK_ISSUED};
    static const mt_fl issuer_waits[] = {MT_FL_UPDATED, MT_FL_EMBED_EARLY_DONE, MT_FL_GRADS_TAKEN, MT_FL_CHUNK_DONE};
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < sizeof optimizer_waits / sizeof *optimizer_waits; k++)
            raise_for_good(opt->peers ? opt->peers[r] : opt, optimizer_waits[k]);
    pthread_mutex_lock(&opt->opt_lock);
    while (opt->opt_busy || opt->job_pending) pthread_cond_wait(&opt->opt_cond, &opt->opt_lock);
    pthread_mutex_unlock(&opt->opt_lock);
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < sizeof issuer_waits / sizeof *issuer_waits; k++)
            raise_for_good(opt->peers ? opt->peers[r] : opt, issuer_waits[k]);
}

static int speculative(const mt_engine *e) { return (mt_engine_modes(e) & MT_MODE_SPECULATIVE) != 0; }

double mt_engine_await_grads_taken(mt_engine *e, int u) {
    return speculative(e) ? mt_engine_await(e, MT_FL_GRADS_TAKEN, u, e->generation, MT_GEN_G) : 0;
}

int mt_engine_update_ahead(mt_engine *e) {
    mt_engine *opt = e->leader ? e->leader : e;
    pthread_mutex_lock(&opt->opt_lock);
    int ahead = opt->update_ahead;
    pthread_mutex_unlock(&opt->opt_lock);
    return ahead;
}

void mt_engine_set_update_ahead(mt_engine *e, int ahead) { ahead_next(e->leader ? e->leader : e, ahead != 0); }

int64_t mt_engine_finish(mt_engine *e) {
    for (int u = 0; u < e->U; u++) mt_engine_await(e, MT_FL_UPDATED, u, e->generation, MT_GEN_G);
    for (int u = 0; u < e->U; u++) mt_engine_await_grads_taken(e, u); /* the moments are final */
    mt_engine_device_home(e);
    mt_engine *opt = e->leader ? e->leader : e;
    pthread_mutex_lock(&opt->opt_lock);
    int64_t steps = opt->adam_step;
    pthread_mutex_unlock(&opt->opt_lock);
    return steps;
}
