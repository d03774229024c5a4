/* A communicator for ranks that are threads of one process sharing host memory: the cpu backend's
 * collectives (backend.h's coll group). A rank's all_reduce blocks until every rank has come, sums
 * its own slice of the elements over every rank's buffer in rank order, writes the sum back into
 * every buffer, and waits until every rank has done its slice. A rank that never comes makes the
 * others give up after MT_COLL_TIMEOUT_S seconds (default 300); an abort makes them give up now. */
#ifndef MT_BACKEND_CPU_HOST_COMM_H
#define MT_BACKEND_CPU_HOST_COMM_H

#include <stddef.h>

#include "util/status.h"

typedef struct mt_host_comm mt_host_comm;

/* A communicator of n ranks, held by n members: each releases it once. */
mt_status mt_host_comm_create(mt_host_comm **out, int n);
void mt_host_comm_release(mt_host_comm *c);
/* buf[count] = the sum over the ranks of their buf[count]; every rank gives the same count. */
mt_status mt_host_comm_all_reduce(mt_host_comm *c, int rank, float *buf, size_t count);
void mt_host_comm_abort(mt_host_comm *c);

#endif
