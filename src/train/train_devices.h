/* The devices of a run or a bench (train_devices.c): one backend and its engine, or with --gpus N
 * above 1 a group of N ranks on one host store (engine/ranks.h), whose leader's engine then stands
 * for the engine (the optimizer, mt_engine_finish, the saver's guard) and whose rank 0 backend for
 * the backend (the store's pinned memory); or, started by torchrun (WORLD_SIZE above 1), one rank
 * of a world of processes, one GPU each (LOCAL_RANK), each with its own store and optimizer, their
 * gradients summed across the processes (an engine replica); rank 0 alone writes the run directory. */
#ifndef MT_TRAIN_TRAIN_DEVICES_H
#define MT_TRAIN_TRAIN_DEVICES_H

#include "engine/ranks.h"
#include "megatrain.h"
#include "optim/moments.h"
#include "util/world.h"

typedef struct {
    mt_backend *be;     /* the backend, or rank 0's (the ranks own it) */
    mt_ranks *ranks;    /* --gpus above 1, else NULL */
    mt_engine *engine;  /* the engine, or the ranks' leader */
    mt_world world;     /* torchrun's (a world of one without it) */
    int joined;         /* be is joined to the world's other processes */
    struct mt_watchdog *watchdog; /* in a world: aborts a step that outlives MT_RANK_TIMEOUT_S */
} mt_devices;

/* d->world, from torchrun's variables (mt_world_from_env). */
mt_status mt_devices_world(mt_devices *d);
/* The blocks of M x batch sequences a step takes: --gpus, or the world's processes. */
int mt_devices_ranks(const mt_devices *d, const mt_train_options *o);
/* Whether this process writes the run directory (checkpoints, metrics): all but ranks 1.. of a world. */
static inline int mt_devices_writes(const mt_devices *d) { return d->world.rank == 0; }
/* d->be (and with --gpus above 1, d->ranks; in a world, joined to the other processes); --gpus past
 * the GPUs present is refused here. Call mt_devices_world first. */
mt_status mt_devices_open(mt_devices *d, const mt_train_options *o);
/* The host and device memory needed, every rank's buffers counted, against what is there. */
mt_status mt_devices_check_memory(const mt_devices *d, const mt_layout *layout, const mt_engine_options *eo,
                                  mt_moments_format moments);
/* d->engine on the store: the engine, or the ranks' engines and their leader's. */
mt_status mt_devices_start(mt_devices *d, mt_store *store, const mt_engine_options *eo, int64_t adam_step);
/* A step or an evaluation over every rank's micro-batches ([ranks][M][batch][seq]); positions
 * alike, or NULL (engine.h). */
mt_status mt_devices_step(mt_devices *d, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                          float lr, mt_step_result *s);
mt_status mt_devices_eval(mt_devices *d, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                          double *loss);
/* Test hook MT_TEST_NAN_STEP: the next step's gradient norm reads NaN (on every rank). */
void mt_devices_poison_next_step(mt_devices *d);
/* The engines end (before the store); then the backends. */
void mt_devices_stop(mt_devices *d);
void mt_devices_close(mt_devices *d);

#endif
