/* A communicator for ranks that are threads of one process sharing host memory: the cpu backend's
 * collectives (backend.h's coll group). A rank's all_reduce blocks until every rank has come, sums
 * its own slice of the elements over every rank's buffer in rank order, writes the sum back into
 * every buffer, and waits until every rank has done its slice. A rank that never comes makes the
 * others give up after MT_COLL_TIMEOUT_S seconds (default 300); an abort makes them give up now.
 *
 * Ordered accumulation (acc_open, acc_close, and an ordered all_reduce): the ranks take turns
 * adding into an accumulator, rank 0 first, each starting from the values the rank before it left,
 * so that the last rank's buffer holds every addition in the order one rank doing every rank's work
 * in turn would make them: the same bits as one rank running all the micro-batches. The ordered
 * all_reduce then gives every rank the last rank's buffer. Accumulators are told apart by a tag;
 * rank r's i-th turn with tag t comes after the i * n + r turns before it (rank 0's first turn of
 * a round needs no values: `fresh`; a second round of the same accumulator starts from the last
 * rank's). The turns serialize the ranks' accumulating work: the price of those bits. */
#ifndef MT_BACKEND_CPU_HOST_COMM_H
#define MT_BACKEND_CPU_HOST_COMM_H

#include <stddef.h>

#include "util/status.h"

typedef struct mt_host_comm mt_host_comm;

/* A communicator of n ranks, held by n members: each releases it once. */
mt_status mt_host_comm_create(mt_host_comm **out, int n);
void mt_host_comm_release(mt_host_comm *c);
/* buf[count] = the sum over the ranks of their buf[count]; every rank gives the same count.
 * `ordered`: the buffers were filled in turns (acc_open, acc_close): the sum is the last rank's. */
mt_status mt_host_comm_all_reduce(mt_host_comm *c, int rank, float *buf, size_t count, int ordered);
/* As all_reduce, but only this rank's slice (backend.h's mt_coll_slice) of buf is written. */
mt_status mt_host_comm_reduce_scatter(mt_host_comm *c, int rank, float *buf, size_t count, int ordered);
/* buf[bytes] on every rank = rank root's. */
mt_status mt_host_comm_broadcast(mt_host_comm *c, int rank, void *buf, size_t bytes, int root);
/* Rank `rank`'s turn with accumulator `tag` begins: it waits for the rank before it (rank 0 for the
 * last rank's previous turn) and takes its values into buf, unless `fresh` and rank 0. */
mt_status mt_host_comm_acc_open(mt_host_comm *c, int rank, int tag, float *buf, size_t count, int fresh);
/* The turn ends: buf (unchanged until the next collective) is what the next rank starts from. */
mt_status mt_host_comm_acc_close(mt_host_comm *c, int rank, int tag, float *buf, size_t count);
void mt_host_comm_abort(mt_host_comm *c);

#endif
