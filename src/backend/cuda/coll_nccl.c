/* The cuda backend's collectives (backend.h's coll group) through NCCL: one communicator per GPU
 * of this process, all made at once by ncclCommInitAll, each then used by its rank's thread alone.
 * The all-reduce, the reduce-scatter and the broadcast run in place on the stream they are issued on
 * (the compute stream: the engine issues them inside its compute jobs), so no host thread waits for
 * them. An abort
 * (another rank failed, or a rank hung past the ranks' watchdog: engine/ranks.c) ends the
 * communicator with ncclCommAbort, which stops its kernels: a stream waiting on a peer that will
 * never come is released, and every later all-reduce fails at once. */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "util/world.h"

#define MT_NCCL_FAIL(res, what) \
    mt_fail(MT_ERR_DEVICE, "NCCL: %s: %s (%s:%d)", (what), ncclGetErrorString(res), __FILE__, __LINE__)

mt_status mt_cuda_comm_init(mt_backend **ranks, int n) {
    ncclComm_t *comms = mt_calloc((size_t)n, sizeof *comms, "the NCCL communicators");
    int *devices = mt_calloc((size_t)n, sizeof *devices, "the ranks' devices");
    if (!comms || !devices) {
        free(comms);
        free(devices);
        return MT_ERR_NOMEM;
    }
    for (int r = 0; r < n; r++) devices[r] = ((mt_cuda_backend *)ranks[r])->device;
    ncclResult_t res = ncclCommInitAll(comms, n, devices);
    for (int r = 0; res == ncclSuccess && r < n; r++) ((mt_cuda_backend *)ranks[r])->comm = comms[r];
    free(comms);
    free(devices);
    return res == ncclSuccess ? MT_OK : MT_NCCL_FAIL(res, "ncclCommInitAll over the GPUs of the ranks");
}

/* Processes (one GPU each): rank 0 makes NCCL's unique id and hands it to the others over the
 * world's star of TCP connections (bounded waits, errors naming the rank); then NCCL's own
 * bootstrap takes over. */
mt_status mt_cuda_comm_init_world(mt_backend *be, const mt_world *w) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t res = w->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (res != ncclSuccess) return MT_NCCL_FAIL(res, "ncclGetUniqueId");
    mt_star *star;
    MT_TRY(mt_star_open(&star, w));
    mt_status rc = mt_star_broadcast(star, &id, sizeof id);
    mt_star_close(star);
    MT_TRY(rc);
    ncclComm_t comm;
    res = ncclCommInitRank(&comm, w->size, id, w->rank);
    if (res != ncclSuccess) return MT_NCCL_FAIL(res, "ncclCommInitRank");
    cb->comm = comm;
    return MT_OK;
}

/* The communicator is read and ended under the backend's lock: the abort comes from another thread.
 * Issues call(comm) on the stream; what: the failure's words. */
typedef ncclResult_t (*nccl_call)(ncclComm_t comm, cudaStream_t stream, float *buf, size_t count);

static void issue(mt_backend *be, mt_stream *s, nccl_call call, float *buf, size_t count, const char *what) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    pthread_mutex_lock(&cb->lock);
    ncclResult_t res = cb->comm ? call((ncclComm_t)cb->comm, mt_cuda_stream(s), buf, count) : ncclInvalidUsage;
    pthread_mutex_unlock(&cb->lock);
    if (res != ncclSuccess)
        mt_cuda_note(cb, cb->comm ? MT_NCCL_FAIL(res, what)
                                  : mt_fail(MT_ERR_DEVICE, "NCCL: the group was aborted (another rank failed)"));
}

static ncclResult_t all_reduce(ncclComm_t comm, cudaStream_t stream, float *buf, size_t count) {
    return ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream);
}

/* NCCL's reduce-scatter takes equal parts (mt_coll_slice's), in place (rank r's part lands at
 * buf + r * part, where it already lies); the tail past the n parts, the last rank's too, is summed
 * whole. */
static ncclResult_t reduce_scatter(ncclComm_t comm, cudaStream_t stream, float *buf, size_t count) {
    int rank, n;
    ncclResult_t res = ncclCommUserRank(comm, &rank);
    if (res == ncclSuccess) res = ncclCommCount(comm, &n);
    if (res != ncclSuccess) return res;
    size_t lo, hi;
    mt_coll_slice(count, 0, n, &lo, &hi);
    size_t part = hi - lo, tail = count - part * (size_t)n; /* one rank: all, no tail */
    if (part > 0) res = ncclReduceScatter(buf, buf + part * (size_t)rank, part, ncclFloat, ncclSum, comm, stream);
    if (res == ncclSuccess && tail > 0) res = all_reduce(comm, stream, buf + part * (size_t)n, tail);
    return res;
}

void mt_cuda_all_reduce(mt_backend *be, mt_stream *s, float *buf, size_t count) {
    issue(be, s, all_reduce, buf, count, "the all-reduce of a gradient");
}

void mt_cuda_reduce_scatter(mt_backend *be, mt_stream *s, float *buf, size_t count) {
    issue(be, s, reduce_scatter, buf, count, "the reduce-scatter of a gradient");
}

void mt_cuda_broadcast(mt_backend *be, mt_stream *s, void *buf, size_t bytes, int root) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    pthread_mutex_lock(&cb->lock);
    ncclResult_t res = cb->comm ? ncclBroadcast(buf, buf, bytes, ncclUint8, root, (ncclComm_t)cb->comm,
                                                mt_cuda_stream(s))
                                : ncclInvalidUsage;
    pthread_mutex_unlock(&cb->lock);
    if (res != ncclSuccess)
        mt_cuda_note(cb, cb->comm ? MT_NCCL_FAIL(res, "the broadcast of a rank's slice")
                                  : mt_fail(MT_ERR_DEVICE, "NCCL: the group was aborted (another rank failed)"));
}

void mt_cuda_comm_abort(mt_backend *be) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    pthread_mutex_lock(&cb->lock);
    if (cb->comm) ncclCommAbort((ncclComm_t)cb->comm);
    cb->comm = NULL;
    pthread_mutex_unlock(&cb->lock);
}

void mt_cuda_comm_free(mt_backend *be) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    pthread_mutex_lock(&cb->lock);
    if (cb->comm) ncclCommDestroy((ncclComm_t)cb->comm);
    cb->comm = NULL;
    pthread_mutex_unlock(&cb->lock);
}
