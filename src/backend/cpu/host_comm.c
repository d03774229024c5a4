/* The host communicator (host_comm.h): a barrier with a generation count, the ranks' buffers,
 * and an abort that wakes every waiter. */
#include "backend/cpu/host_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct mt_host_comm {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int n, members;          /* ranks; members still holding it */
    int arrived;             /* ranks at the barrier of generation `generation` */
    unsigned long generation;
    int aborted;
    double timeout_s;
    float **bufs;            /* [n] the buffers of the all_reduce under way */
    size_t *counts;          /* [n] their lengths */
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

/* Every rank reaches it, or the wait ends in an error (abort, timeout). Called with the lock held. */
static mt_status barrier(mt_host_comm *c, int rank) {
    if (c->aborted) return mt_fail(MT_ERR_DEVICE, "rank %d: the group was aborted (another rank failed)", rank);
    unsigned long g = c->generation;
    if (++c->arrived == c->n) {
        c->arrived = 0;
        c->generation++;
        pthread_cond_broadcast(&c->changed);
        return MT_OK;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)c->timeout_s;
    while (c->generation == g && !c->aborted)
        if (pthread_cond_timedwait(&c->changed, &c->lock, &deadline) == ETIMEDOUT && c->generation == g) {
            c->aborted = 1;
            pthread_cond_broadcast(&c->changed);
            return mt_fail(MT_ERR_DEVICE, "rank %d waited %.0f s (MT_COLL_TIMEOUT_S) for the other ranks at an "
                           "all-reduce: %d of %d came", rank, c->timeout_s, c->arrived, c->n);
        }
    if (c->generation == g)
        return mt_fail(MT_ERR_DEVICE, "rank %d: the group was aborted (another rank failed)", rank);
    return MT_OK;
}

mt_status mt_host_comm_all_reduce(mt_host_comm *c, int rank, float *buf, size_t count) {
    pthread_mutex_lock(&c->lock);
    c->bufs[rank] = buf;
    c->counts[rank] = count;
    mt_status rc = barrier(c, rank);
    for (int r = 0; rc == MT_OK && r < c->n; r++)
        if (c->counts[r] != count)
            rc = mt_fail(MT_ERR_INVALID, "all-reduce of %zu floats on rank %d but %zu on rank %d", count, rank,
                         c->counts[r], r);
    pthread_mutex_unlock(&c->lock);
    if (rc != MT_OK) {
        mt_host_comm_abort(c);
        return rc;
    }
    /* This rank's slice: read and written by it alone between the two barriers. */
    size_t lo = count * (size_t)rank / (size_t)c->n, hi = count * (size_t)(rank + 1) / (size_t)c->n;
    float *const *bufs = c->bufs;
    int n = c->n;
#pragma omp parallel for schedule(static)
    for (size_t i = lo; i < hi; i++) {
        float sum = bufs[0][i];
        for (int r = 1; r < n; r++) sum += bufs[r][i];
        for (int r = 0; r < n; r++) bufs[r][i] = sum;
    }
    pthread_mutex_lock(&c->lock);
    rc = barrier(c, rank);
    pthread_mutex_unlock(&c->lock);
    return rc;
}
