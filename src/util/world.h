/* Ranks that are processes (one or several hosts), named as torchrun names them: RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. They meet through a star of TCP connections to rank 0 at
 * MASTER_ADDR:MASTER_PORT (rank 0 listens, the others connect, retrying), every wait bounded by
 * the world's timeout (MT_WORLD_TIMEOUT_S, 300 s): a rank that never comes or dies ends its peers'
 * waits with an error naming it. Over the star: a broadcast from rank 0 (NCCL's unique id) and a
 * sum of floats in rank order and broadcasts from any rank (the cpu backend's collectives between
 * processes). */
#ifndef MT_UTIL_WORLD_H
#define MT_UTIL_WORLD_H

#include <stddef.h>

#include "util/status.h"

typedef struct mt_world {
    int rank, size, local_rank;
    int local_size; /* the processes on this host (LOCAL_WORLD_SIZE; 1 where it is unset) */
    char addr[256];
    int port;
    double timeout_s;
} mt_world;

/* The world torchrun describes; *present = 0 (and a world of one) when WORLD_SIZE is unset.
 * Values that are missing or out of range are refused, naming the variable. */
mt_status mt_world_from_env(mt_world *w, int *present);

typedef struct mt_star mt_star;

/* Every rank of w connected to rank 0. */
mt_status mt_star_open(mt_star **out, const mt_world *w);
void mt_star_close(mt_star *s);
/* buf[bytes] on every rank = rank 0's (root's). */
mt_status mt_star_broadcast(mt_star *s, void *buf, size_t bytes);
mt_status mt_star_broadcast_from(mt_star *s, void *buf, size_t bytes, int root);
/* buf[count] on every rank = the sum over the ranks, added in rank order on rank 0. */
mt_status mt_star_all_reduce(mt_star *s, float *buf, size_t count);
/* Ends every connection now (from any thread): a rank waiting on one gets an error. */
void mt_star_abort(mt_star *s);

#endif
