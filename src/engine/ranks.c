/* Data parallelism (ranks.h): the ranks' threads, their engines, and the abort that ends them all.
 *
 * Why threads of one process and not a process per GPU: the host store (fp32 masters, moments,
 * working weights: 16 bytes a parameter, 128 GB at 8B) exists once and every rank's copies read it
 * and write into it directly: no second copy, no shared-memory segment, no IPC; one optimizer sees
 * every slice. Each rank still owns its device, its streams and its thread, as a process would. */
#include "engine/ranks.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/engine_internal.h"

/* What a rank's thread is asked to run. */
typedef mt_status (*rank_task)(mt_ranks *g, int rank, void *arg);

struct mt_ranks {
    int n;
    mt_backend **be;       /* [n] */
    mt_engine **engine;    /* [n]; [0] the leader */
    pthread_t *threads;    /* [n] */
    int started;           /* threads running */
    int joined;            /* the backends form a group of collectives */
    mt_rank_open_fn open;
    void *open_ctx;

    pthread_mutex_t lock;  /* guards what follows */
    pthread_cond_t changed;
    unsigned long task_generation;
    rank_task task;
    void *arg;
    int pending;           /* ranks still running the task */
    int stop;
    int failed_rank;       /* the first rank that failed, -1 while none */
    mt_status failed_status;
    char failed_message[1024];
    int fail_next;         /* test hook: this rank's next step fails (-1: none) */
    double timeout_s;      /* the watchdog: a task that runs longer aborts the group */
};

/* ---- the abort ---- */

/* Ends the group for every rank: the collectives give up, each rank's settle is released from
 * waiting on the others (pass_done), and the leader's optimizer halts (mt_engine_optimizer_halt:
 * it stops before it reads another gradient, then every flag a rank may wait on is released). The
 * flags' values no longer mean anything: every later call fails. */
static void abort_group(mt_ranks *g) {
    for (int r = 0; r < g->n; r++)
        if (g->be[r] && g->joined) g->be[r]->ops->coll.comm_abort(g->be[r]);
    for (int r = 0; r < g->n; r++) {
        mt_engine *e = g->engine[r];
        if (!e) continue;
        __atomic_store_n(&e->group_failed, 1, __ATOMIC_RELEASE);
        mt_flag_set(&e->pass_done, INT64_MAX / 2);
    }
    if (g->engine[0]) mt_engine_optimizer_halt(g->engine[0]);
}

mt_status mt_engine_ranks_settle(mt_engine *e, mt_status rc) {
    if (e->leader) {
        if (rc == MT_OK) mt_flag_set(&e->pass_done, e->generation + 1);
        return rc;
    }
    for (int r = 1; r < e->ranks; r++) mt_flag_wait(&e->peers[r]->pass_done, e->generation + 1);
    if (rc == MT_OK && __atomic_load_n(&e->group_failed, __ATOMIC_ACQUIRE))
        return mt_fail(MT_ERR_DEVICE, "another rank failed in step %lld", (long long)e->generation + 1);
    return rc;
}

/* ---- the ranks' threads ---- */

typedef struct {
    mt_ranks *g;
    int rank;
} thread_arg;

static void *rank_main(void *p) {
    thread_arg a = *(thread_arg *)p;
    free(p);
    mt_ranks *g = a.g;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->lock);
        while (g->task_generation == seen && !g->stop) pthread_cond_wait(&g->changed, &g->lock);
        if (g->task_generation == seen) {
            pthread_mutex_unlock(&g->lock);
            return NULL;
        }
        seen = g->task_generation;
        rank_task task = g->task;
        void *arg = g->arg;
        pthread_mutex_unlock(&g->lock);
        mt_status rc = task(g, a.rank, arg);
        pthread_mutex_lock(&g->lock);
        int first = rc != MT_OK && g->failed_rank < 0;
        if (first) {
            g->failed_rank = a.rank;
            g->failed_status = rc;
            snprintf(g->failed_message, sizeof g->failed_message, "%s", mt_error());
        }
        pthread_mutex_unlock(&g->lock);
        if (first) abort_group(g); /* at once: the other ranks may be waiting on this one */
        pthread_mutex_lock(&g->lock);
        if (--g->pending == 0) pthread_cond_broadcast(&g->changed);
        pthread_mutex_unlock(&g->lock);
    }
}

/* The group's failure as an error, with the lock held: the rank that failed first, or the watchdog. */
static mt_status failure(const mt_ranks *g, const char *prefix) {
    if (g->failed_rank == g->n) return mt_fail(g->failed_status, "%s%s", prefix, g->failed_message);
    return mt_fail(g->failed_status, "%srank %d of %d: %s", prefix, g->failed_rank, g->n, g->failed_message);
}

/* The watchdog, with the lock held: the task has run past the timeout; the ranks still in it are
 * named and the group aborted, which releases them from any collective. */
static void watchdog_fires(mt_ranks *g) {
    g->failed_rank = g->n; /* none of them: the group */
    g->failed_status = MT_ERR_DEVICE;
    snprintf(g->failed_message, sizeof g->failed_message, "%d of %d ranks were still in a step after %.0f s "
             "(MT_RANK_TIMEOUT_S): a rank hung; the group was aborted", g->pending, g->n, g->timeout_s);
    pthread_mutex_unlock(&g->lock);
    abort_group(g);
    pthread_mutex_lock(&g->lock);
}

/* Runs task on every rank's thread and waits for all of them; the first rank that failed names the
 * error (the others' failures follow from the abort). */
static mt_status run_all(mt_ranks *g, rank_task task, void *arg) {
    pthread_mutex_lock(&g->lock);
    if (g->failed_rank >= 0) {
        mt_status rc = failure(g, "the group was aborted: ");
        pthread_mutex_unlock(&g->lock);
        return rc;
    }
    g->task = task;
    g->arg = arg;
    g->pending = g->n;
    g->task_generation++;
    pthread_cond_broadcast(&g->changed);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)g->timeout_s;
    for (int fired = 0; g->pending > 0;) {
        if (fired) pthread_cond_wait(&g->changed, &g->lock);
        else if (pthread_cond_timedwait(&g->changed, &g->lock, &deadline) == ETIMEDOUT && g->pending > 0) {
            if (g->failed_rank < 0) watchdog_fires(g);
            fired = 1;
        }
    }
    mt_status rc = g->failed_rank >= 0 ? failure(g, "") : MT_OK;
    pthread_mutex_unlock(&g->lock);
    return rc;
}

/* ---- creation ---- */

static mt_status open_task(mt_ranks *g, int r, void *arg) {
    return g->open(g->open_ctx, r, &g->be[r]);
}

mt_status mt_ranks_create(mt_ranks **out, int n, mt_rank_open_fn open, void *ctx) {
    if (n < 1) return mt_fail(MT_ERR_INVALID, "a group needs at least one rank, got %d", n);
    mt_ranks *g = calloc(1, sizeof *g);
    if (!g) return mt_fail(MT_ERR_NOMEM, "cannot allocate a group of %d ranks", n);
    g->n = n;
    g->failed_rank = g->fail_next = -1;
    g->open = open;
    g->open_ctx = ctx;
    const char *t = getenv("MT_RANK_TIMEOUT_S");
    g->timeout_s = t && atof(t) > 0 ? atof(t) : 1800;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    g->be = calloc((size_t)n, sizeof *g->be);
    g->engine = calloc((size_t)n, sizeof *g->engine);
    g->threads = calloc((size_t)n, sizeof *g->threads);
    if (!g->be || !g->engine || !g->threads) {
        mt_ranks_destroy(g);
        return mt_fail(MT_ERR_NOMEM, "cannot allocate a group of %d ranks", n);
    }
    for (; g->started < n; g->started++) {
        thread_arg *a = malloc(sizeof *a);
        if (a) *a = (thread_arg){g, g->started};
        if (!a || pthread_create(&g->threads[g->started], NULL, rank_main, a) != 0) {
            free(a);
            mt_ranks_destroy(g);
            return mt_fail(MT_ERR_NOMEM, "cannot start the thread of rank %d", g->started);
        }
    }
    mt_status rc = run_all(g, open_task, NULL);
    if (rc == MT_OK && n > 1) {
        for (int r = 0; rc == MT_OK && r < n; r++)
            if (!mt_backend_has_collectives(g->be[r]) || g->be[r]->ops != g->be[0]->ops)
                rc = mt_fail(MT_ERR_INVALID, "rank %d's backend (%s) has no collectives with rank 0's (%s): it "
                             "cannot train on %d devices at once", r, g->be[r]->ops->name, g->be[0]->ops->name, n);
        if (rc == MT_OK) rc = g->be[0]->ops->coll.comm_init(g->be, n);
        g->joined = rc == MT_OK;
    }
    if (rc != MT_OK) {
        mt_ranks_destroy(g);
        return rc;
    }
    *out = g;
    return MT_OK;
}

typedef struct {
    mt_store *store;
    const mt_engine_options *o;
    int64_t adam_step;
    int followers; /* 0: make the leader; 1: the others, which point into the leader's buffers */
} start_arg;

static mt_status start_task(mt_ranks *g, int r, void *p) {
    start_arg *a = p;
    if ((r > 0) != a->followers) return MT_OK;
    return mt_engine_create_rank(&g->engine[r], g->be[r], a->store, a->o, a->adam_step, r ? g->engine[0] : NULL,
                                 r, g->n, g->n);
}

mt_status mt_ranks_start(mt_ranks *g, mt_store *store, const mt_engine_options *o, int64_t adam_step) {
    start_arg a = {store, o, adam_step, 0};
    MT_TRY(run_all(g, start_task, &a));
    a.followers = 1;
    MT_TRY(run_all(g, start_task, &a));
    mt_engine *leader = g->engine[0];
    leader->peers = calloc((size_t)g->n, sizeof *leader->peers);
    if (!leader->peers) return mt_fail(MT_ERR_NOMEM, "cannot allocate the leader's table of ranks");
    for (int r = 0; r < g->n; r++) leader->peers[r] = g->engine[r];
    return MT_OK;
}

/* Engines and backends end on their own threads (a CUDA device is current per thread). The leader's
 * optimizer ends first: without clipping it reads the followers' flags and events. */
typedef enum { STOP_OPTIMIZER, STOP_FOLLOWERS, STOP_LEADER, STOP_BACKENDS } stop_phase;

static mt_status stop_task(mt_ranks *g, int r, void *p) {
    stop_phase phase = *(stop_phase *)p;
    if (phase == STOP_OPTIMIZER) {
        if (r == 0 && g->engine[0]) mt_engine_optimizer_stop(g->engine[0]);
    } else if (phase == STOP_BACKENDS) {
        if (g->be[r] && g->joined) g->be[r]->ops->coll.comm_free(g->be[r]);
        mt_backend_destroy(g->be[r]);
        g->be[r] = NULL;
    } else if ((r == 0) == (phase == STOP_LEADER)) {
        mt_engine_destroy(g->engine[r]);
        g->engine[r] = NULL;
    }
    return MT_OK;
}

/* Runs the teardown's phases in order, whether or not the group failed. */
static void stop(mt_ranks *g, stop_phase from, stop_phase to) {
    if (g->started < g->n) return;
    pthread_mutex_lock(&g->lock);
    g->failed_rank = -1; /* run_all refuses tasks after a failure: the teardown runs regardless */
    pthread_mutex_unlock(&g->lock);
    for (stop_phase phase = from; phase <= to; phase++) run_all(g, stop_task, &phase);
}

/* The leader's optimizer, then the followers (they point into the leader's buffers), then the leader. */
void mt_ranks_stop(mt_ranks *g) {
    if (g) stop(g, STOP_OPTIMIZER, STOP_LEADER);
}

void mt_ranks_destroy(mt_ranks *g) {
    if (!g) return;
    stop(g, STOP_OPTIMIZER, STOP_BACKENDS);
    pthread_mutex_lock(&g->lock);
    g->stop = 1;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
    for (int r = 0; r < g->started; r++) pthread_join(g->threads[r], NULL);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->changed);
    free(g->be);
    free(g->engine);
    free(g->threads);
    free(g);
}

int mt_ranks_count(const mt_ranks *g) { return g->n; }
mt_backend *mt_ranks_backend(const mt_ranks *g, int rank) { return g->be[rank]; }
mt_engine *mt_ranks_leader(const mt_ranks *g) { return g->engine[0]; }

/* ---- steps ---- */

typedef struct {
    const int32_t *inputs, *targets, *positions; /* positions may be NULL */
    float lr;
    int train;
    mt_step_result *results; /* [n], training */
    double *losses;          /* [n], evaluation */
} pass_arg;

/* Rank r's block of a [n][M][batch][seq] array. */
static size_t rank_offset(const mt_ranks *g, int r) {
    const mt_engine_options *o = &g->engine[0]->o;
    return (size_t)r * o->micro_batches * o->batch * o->seq;
}

static mt_status pass_task(mt_ranks *g, int r, void *p) {
    pass_arg *a = p;
    pthread_mutex_lock(&g->lock);
    int fail = g->fail_next == r;
    if (fail) g->fail_next = -1;
    pthread_mutex_unlock(&g->lock);
    if (fail) return mt_fail(MT_ERR_DEVICE, "injected failure before the step's pass (test hook)");
    size_t at = rank_offset(g, r);
    const int32_t *positions = a->positions ? a->positions + at : NULL;
    if (a->train) return mt_engine_step(g->engine[r], a->inputs + at, a->targets + at, positions, a->lr, &a->results[r]);
    return mt_engine_eval(g->engine[r], a->inputs + at, a->targets + at, positions, &a->losses[r]);
}

/* The targets that count in a step of n ranks' blocks of M x batch x seq. */
static int64_t count_targets(const mt_engine_options *o, int n, const int32_t *targets) {
    size_t count = (size_t)n * o->micro_batches * o->batch * o->seq;
    int64_t total = 0;
    for (size_t i = 0; i < count; i++) total += targets[i] >= 0;
    return total;
}

/* Every rank's pass takes its mean over the targets of all ranks. */
static void share_targets(mt_ranks *g, const int32_t *targets) {
    int64_t total = count_targets(&g->engine[0]->o, g->n, targets);
    for (int r = 0; r < g->n; r++) g->engine[r]->step_targets = total;
}

mt_status mt_ranks_step(mt_ranks *g, const int32_t *inputs, const int32_t *targets, const int32_t *positions, float lr,
                        mt_step_result *res) {
    mt_step_result results[g->n];
    share_targets(g, targets);
    pass_arg a = {.inputs = inputs, .targets = targets, .positions = positions, .lr = lr, .train = 1,
                  .results = results};
    MT_TRY(run_all(g, pass_task, &a));
    *res = results[0]; /* the loss and norm (every rank's), the skip and the optimizer's times (the leader's) */
    for (int r = 1; r < g->n; r++)
        if (results[r].seconds > res->seconds) res->seconds = results[r].seconds;
    return MT_OK;
}

mt_status mt_ranks_eval(mt_ranks *g, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                        double *loss) {
    double losses[g->n];
    share_targets(g, targets);
    pass_arg a = {.inputs = inputs, .targets = targets, .positions = positions, .losses = losses};
    MT_TRY(run_all(g, pass_task, &a));
    *loss = losses[0]; /* every rank's */
    return MT_OK;
}

void mt_ranks_poison_next_step(mt_ranks *g) {
    for (int r = 0; r < g->n; r++) mt_engine_poison_next_step(g->engine[r]);
}

void mt_ranks_fail_next_step(mt_ranks *g, int rank) {
    pthread_mutex_lock(&g->lock);
    g->fail_next = rank;
    pthread_mutex_unlock(&g->lock);
}

/* ---- replicas: ranks that are processes ---- */

mt_status mt_engine_create_replica(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *o,
                                   int64_t adam_step, int world) {
    return mt_engine_create_rank(out, be, store, o, adam_step, NULL, 0, 1, world);
}

/* This rank's block of the world's micro-batches, its mean over every rank's targets. */
static size_t replica_offset(mt_engine *e, int rank, const int32_t *targets, int world) {
    e->step_targets = count_targets(&e->o, world, targets);
    e->group_rank = rank;
    return (size_t)rank * e->o.micro_batches * e->o.batch * e->o.seq;
}

mt_status mt_replica_step(mt_engine *e, int rank, int world, const int32_t *inputs, const int32_t *targets,
                          const int32_t *positions, float lr, mt_step_result *res) {
    size_t at = replica_offset(e, rank, targets, world);
    return mt_engine_step(e, inputs + at, targets + at, positions ? positions + at : NULL, lr, res);
}

mt_status mt_replica_eval(mt_engine *e, int rank, int world, const int32_t *inputs, const int32_t *targets,
                          const int32_t *positions, double *loss) {
    size_t at = replica_offset(e, rank, targets, world);
    return mt_engine_eval(e, inputs + at, targets + at, positions ? positions + at : NULL, loss);
}
