/* The host communicator (host_comm.h): a barrier with a generation count, the ranks' buffers,
 * the accumulators' turns, and an abort that wakes every waiter. */
#include "backend/cpu/host_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"

/* One accumulator's turns (host_comm.h). */
typedef struct {
    unsigned long closed;    /* turns ended, every rank's */
    float *last;             /* the buffer of the latest turn ended */
    size_t last_count;
    unsigned long *opens;    /* [n] turns begun by each rank */
} acc_turns;

struct mt_host_comm {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int n, members;          /* ranks; members still holding it */
    int arrived;             /* ranks at the barrier of generation `generation` */
    unsigned long generation;
    int aborted;
    double timeout_s;
    void **bufs;             /* [n] the buffers of the all_reduce (broadcast) under way */
    size_t *counts;          /* [n] their lengths */
    acc_turns *acc;          /* [num_acc], by tag */
    int num_acc;
};

mt_status mt_host_comm_create(mt_host_comm **out, int n) {
    if (n < 1) return mt_fail(MT_ERR_INVALID, "a communicator needs at least one rank, got %d", n);
    mt_host_comm *c = calloc(1, sizeof *c);
    if (c) c->bufs = calloc((size_t)n, sizeof *c->bufs);
    if (c && c->bufs) c->counts = calloc((size_t)n, sizeof *c->counts);
    if (!c || !c->bufs || !c->counts) {
        if (c) free(c->bufs);
        free(c);
        return mt_fail(MT_ERR_NOMEM, "cannot allocate a communicator of %d ranks", n);
    }
    const char *t = getenv("MT_COLL_TIMEOUT_S");
    c->timeout_s = t && atof(t) > 0 ? atof(t) : 300;
    c->n = c->members = n;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->changed, NULL);
    *out = c;
    return MT_OK;
}

void mt_host_comm_release(mt_host_comm *c) {
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    int last = --c->members == 0;
    pthread_mutex_unlock(&c->lock);
    if (!last) return;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->changed);
    for (int t = 0; t < c->num_acc; t++) free(c->acc[t].opens);
    free(c->acc);
    free(c->bufs);
    free(c->counts);
    free(c);
}

void mt_host_comm_abort(mt_host_comm *c) {
    pthread_mutex_lock(&c->lock);
    c->aborted = 1;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->lock);
}

/* ---- waiting ---- */

typedef enum { WAIT_DONE, WAIT_ABORTED, WAIT_TIMED_OUT } wait_end;

/* Waits, the lock held, until done(c, arg), an abort, or MT_COLL_TIMEOUT_S (which aborts the
 * group: the peer that never came leaves every rank waiting). */
static wait_end wait_until(mt_host_comm *c, int (*done)(const mt_host_comm *c, const void *arg), const void *arg) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)c->timeout_s;
    while (!done(c, arg) && !c->aborted)
        if (pthread_cond_timedwait(&c->changed, &c->lock, &deadline) == ETIMEDOUT && !done(c, arg)) {
            c->aborted = 1;
            pthread_cond_broadcast(&c->changed);
            return WAIT_TIMED_OUT;
        }
    return done(c, arg) ? WAIT_DONE : WAIT_ABORTED;
}

static mt_status aborted(int rank) {
    return mt_fail(MT_ERR_DEVICE, "rank %d: the group was aborted (another rank failed)", rank);
}

static int generation_passed(const mt_host_comm *c, const void *arg) {
    return c->generation != *(const unsigned long *)arg;
}

/* Every rank reaches it, or the wait ends in an error (abort, timeout). Called with the lock held. */
static mt_status barrier(mt_host_comm *c, int rank) {
    if (c->aborted) return aborted(rank);
    unsigned long g = c->generation;
    if (++c->arrived == c->n) {
        c->arrived = 0;
        c->generation++;
        pthread_cond_broadcast(&c->changed);
        return MT_OK;
    }
    int came = c->arrived;
    switch (wait_until(c, generation_passed, &g)) {
    case WAIT_DONE: return MT_OK;
    case WAIT_TIMED_OUT:
        return mt_fail(MT_ERR_DEVICE, "rank %d waited %.0f s (MT_COLL_TIMEOUT_S) for the other ranks at an "
                       "all-reduce: %d of %d came", rank, c->timeout_s, came, c->n);
    default: return aborted(rank);
    }
}

/* ---- sums ---- */

/* Meets every rank's buffer of `count` units (what: the collective, for the error): every rank's
 * count must be the same. A failure aborts the group. */
static mt_status meet(mt_host_comm *c, int rank, void *buf, size_t count, const char *what) {
    pthread_mutex_lock(&c->lock);
    c->bufs[rank] = buf;
    c->counts[rank] = count;
    mt_status rc = barrier(c, rank);
    for (int r = 0; rc == MT_OK && r < c->n; r++)
        if (c->counts[r] != count)
            rc = mt_fail(MT_ERR_INVALID, "%s of %zu on rank %d but %zu on rank %d", what, count, rank, c->counts[r], r);
    pthread_mutex_unlock(&c->lock);
    if (rc != MT_OK) mt_host_comm_abort(c);
    return rc;
}

/* Waits until every rank is done with the buffers met. */
static mt_status part(mt_host_comm *c, int rank) {
    pthread_mutex_lock(&c->lock);
    mt_status rc = barrier(c, rank);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Meets every rank's buffer, then rank `rank` writes elements [lo, hi) of the sum: into every
 * buffer (all) or its own (not all); then waits until every rank has written its part. */
static mt_status reduce(mt_host_comm *c, int rank, float *buf, size_t count, int ordered, int all) {
    MT_TRY(meet(c, rank, buf, count, "an all-reduce (floats)"));
    /* Elements [lo, hi) of the buffers written are this rank's alone between the two barriers. */
    int n = c->n;
    size_t lo, hi;
    if (all) lo = count * (size_t)rank / (size_t)n, hi = count * (size_t)(rank + 1) / (size_t)n;
    else mt_coll_slice(count, rank, n, &lo, &hi);
    float *const *bufs = (float *const *)c->bufs;
    int first = all ? 0 : rank, last = all ? n - 1 : rank;
#pragma omp parallel for schedule(static)
    for (size_t i = lo; i < hi; i++) {
        float sum = bufs[n - 1][i];
        if (!ordered) {
            sum = bufs[0][i];
            for (int r = 1; r < n; r++) sum += bufs[r][i];
        }
        for (int r = first; r <= last; r++) bufs[r][i] = sum;
    }
    return part(c, rank);
}

mt_status mt_host_comm_all_reduce(mt_host_comm *c, int rank, float *buf, size_t count, int ordered) {
    return reduce(c, rank, buf, count, ordered, 1);
}

mt_status mt_host_comm_reduce_scatter(mt_host_comm *c, int rank, float *buf, size_t count, int ordered) {
    return reduce(c, rank, buf, count, ordered, 0);
}

/* Meets every rank's buffer; every rank but the root copies the root's; then waits until all have. */
mt_status mt_host_comm_broadcast(mt_host_comm *c, int rank, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= c->n) {
        mt_host_comm_abort(c);
        return mt_fail(MT_ERR_INVALID, "a broadcast from rank %d in a group of %d", root, c->n);
    }
    MT_TRY(meet(c, rank, buf, bytes, "a broadcast (bytes)"));
    if (rank != root) memcpy(buf, c->bufs[root], bytes);
    return part(c, rank);
}

/* ---- ordered accumulation ---- */

/* Accumulator `tag`'s turns, made on first use; the lock held. */
static acc_turns *turns_of(mt_host_comm *c, int tag) {
    if (tag < 0) return NULL;
    if (tag >= c->num_acc) {
        acc_turns *grown = realloc(c->acc, (size_t)(tag + 1) * sizeof *grown);
        if (!grown) return NULL;
        c->acc = grown;
        for (; c->num_acc <= tag; c->num_acc++) {
            c->acc[c->num_acc] = (acc_turns){0};
            c->acc[c->num_acc].opens = calloc((size_t)c->n, sizeof *c->acc[c->num_acc].opens);
            if (!c->acc[c->num_acc].opens) return NULL;
        }
    }
    return &c->acc[tag];
}

/* By tag, not by pointer: another rank's first use of a tag may move the table while this one waits. */
typedef struct {
    int tag;
    unsigned long turn;
} turn_wait;

static int turn_reached(const mt_host_comm *c, const void *arg) {
    const turn_wait *w = arg;
    return c->acc[w->tag].closed >= w->turn;
}

mt_status mt_host_comm_acc_open(mt_host_comm *c, int rank, int tag, float *buf, size_t count, int fresh) {
    pthread_mutex_lock(&c->lock);
    acc_turns *t = c->aborted ? NULL : turns_of(c, tag);
    mt_status rc = MT_OK;
    const float *from = NULL;
    if (c->aborted) {
        rc = aborted(rank);
    } else if (!t) {
        rc = mt_fail(MT_ERR_NOMEM, "rank %d: cannot allocate the turns of accumulator %d", rank, tag);
    } else {
        turn_wait w = {tag, t->opens[rank]++ * (unsigned long)c->n + (unsigned long)rank};
        switch (wait_until(c, turn_reached, &w)) {
        case WAIT_DONE:
            t = &c->acc[tag];
            if (rank > 0 || !fresh) from = t->last;
            if (from && t->last_count != count)
                rc = mt_fail(MT_ERR_INVALID, "rank %d takes an accumulator of %zu floats from one of %zu", rank,
                             count, t->last_count);
            break;
        case WAIT_TIMED_OUT:
            rc = mt_fail(MT_ERR_DEVICE, "rank %d waited %.0f s (MT_COLL_TIMEOUT_S) for its turn with a gradient",
                         rank, c->timeout_s);
            break;
        default: rc = aborted(rank);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != MT_OK) {
        mt_host_comm_abort(c);
        return rc;
    }
    /* The rank before does not change its buffer until this rank has ended its own turn. */
    if (from) memcpy(buf, from, count * sizeof *buf);
    return MT_OK;
}

mt_status mt_host_comm_acc_close(mt_host_comm *c, int rank, int tag, float *buf, size_t count) {
    pthread_mutex_lock(&c->lock);
    acc_turns *t = c->aborted ? NULL : turns_of(c, tag);
    if (t) {
        t->closed++;
        t->last = buf;
        t->last_count = count;
        pthread_cond_broadcast(&c->changed);
    }
    pthread_mutex_unlock(&c->lock);
    return t ? MT_OK : aborted(rank);
}
