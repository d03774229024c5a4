/* Data parallelism over the devices of one host: n ranks, each a backend (a GPU) driven by a thread
 * of its own with an engine of its own, all on one host store with one optimizer (rank 0's).
 *
 * Each rank streams the same block schedule on its own micro-batches; each unit's gradient is
 * summed across the ranks on the devices inside the compute job that made it (NCCL's reduce-scatter
 * where only the rank's slice is needed, its all-reduce where every rank's device updates the unit;
 * the norms by slices, summed), and each rank sends home only its slice of it, over its own link,
 * into the leader's host gradients. The leader's optimizer updates the store once every slice is
 * home (with clipping: after the pass; without: unit by unit during it), and every rank's next
 * forward loads the weights it wrote. Results differ from one rank running all the micro-batches
 * only by the order of the sum; on the cpu the ranks take turns with every sum and give one rank's
 * bits (backend.h's ordered accumulation).
 *
 * A rank that fails ends the step of every rank: the group is aborted (the collectives give up,
 * the flags the others wait on are released) and every call afterwards fails. */
#ifndef MT_ENGINE_RANKS_H
#define MT_ENGINE_RANKS_H

#include "engine/engine.h"

typedef struct mt_ranks mt_ranks;

/* Opens rank r's backend; called on rank r's thread (a CUDA device is current per thread). */
typedef mt_status (*mt_rank_open_fn)(void *ctx, int rank, mt_backend **out);

/* n ranks, each with its backend from open(ctx, r), joined into one group of collectives. */
mt_status mt_ranks_create(mt_ranks **out, int n, mt_rank_open_fn open, void *ctx);
/* Ends the engines (mt_ranks_start's), which must end before the store; destroy ends the rest. */
void mt_ranks_stop(mt_ranks *g);
void mt_ranks_destroy(mt_ranks *g);
int mt_ranks_count(const mt_ranks *g);
mt_backend *mt_ranks_backend(const mt_ranks *g, int rank);

/* Every rank's engine on the store (made with rank 0's backend), with these options. */
mt_status mt_ranks_start(mt_ranks *g, mt_store *store, const mt_engine_options *o, int64_t adam_step);
/* Rank 0's engine: the one that owns the optimizer (mt_engine_finish, the update guard). */
mt_engine *mt_ranks_leader(const mt_ranks *g);

/* One optimizer step over inputs[n][M][batch][seq] (and targets, and positions or NULL, alike):
 * rank r takes the r-th block of M micro-batches. The loss is the mean over every rank's targets. */
mt_status mt_ranks_step(mt_ranks *g, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                        float lr, mt_step_result *result);
/* The mean loss over the same layout, no gradients. */
mt_status mt_ranks_eval(mt_ranks *g, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                        double *loss);

/* Test hooks: the next step's gradient norm reads NaN on every rank (mt_engine_poison_next_step);
 * rank `rank`'s next step fails before its pass, as a rank that dies would (the others then wait
 * in a collective until the group is aborted). */
void mt_ranks_poison_next_step(mt_ranks *g);
void mt_ranks_fail_next_step(mt_ranks *g, int rank);

/* Ranks that are processes (one host or several; util/world.h), each with its own store and
 * optimizer: a replica's backend is joined to the others' (coll.comm_init_world), every gradient and
 * loss is summed across the processes on the devices, and the processes split the host-updated units
 * as the threads of one store do: each takes home and updates its slice of each, and receives the
 * other slices of the weights from their owners as they load (engine_share.c). Before its store is
 * read whole (a checkpoint), every process calls mt_engine_share_state. */
mt_status mt_engine_create_replica(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *o,
                                   int64_t adam_step, int world);
/* A step (an evaluation) over the world's micro-batches inputs[world][M][batch][seq], every process
 * giving the same arrays: rank `rank` takes its block, the mean is over every rank's targets. */
mt_status mt_replica_step(mt_engine *e, int rank, int world, const int32_t *inputs, const int32_t *targets,
                          const int32_t *positions, float lr, mt_step_result *res);
mt_status mt_replica_eval(mt_engine *e, int rank, int world, const int32_t *inputs, const int32_t *targets,
                          const int32_t *positions, double *loss);

#endif
