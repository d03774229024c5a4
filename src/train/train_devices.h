/* The devices of a run or a bench (train_devices.c): one backend and its engine, or with --gpus N
 * above 1 a group of N ranks on one host store (engine/ranks.h), whose leader's engine then stands
 * for the engine (the optimizer, mt_engine_finish, the saver's guard) and whose rank 0 backend for
 * the backend (the store's pinned memory). */
#ifndef MT_TRAIN_TRAIN_DEVICES_H
#define MT_TRAIN_TRAIN_DEVICES_H

#include "engine/ranks.h"
#include "megatrain.h"
#include "optim/moments.h"

typedef struct {
    mt_backend *be;     /* the backend, or rank 0's (the ranks own it) */
    mt_ranks *ranks;    /* --gpus above 1, else NULL */
    mt_engine *engine;  /* the engine, or the ranks' leader */
} mt_devices;

/* d->be (and with --gpus above 1, d->ranks); --gpus past the GPUs present is refused here. */
mt_status mt_devices_open(mt_devices *d, const mt_train_options *o);
/* The host and device memory needed, every rank's buffers counted, against what is there. */
mt_status mt_devices_check_memory(const mt_devices *d, const mt_layout *layout, const mt_engine_options *eo,
                                  mt_moments_format moments);
/* d->engine on the store: the engine, or the ranks' engines and their leader's. */
mt_status mt_devices_start(mt_devices *d, mt_store *store, const mt_engine_options *eo, int64_t adam_step);
/* A step or an evaluation over every rank's micro-batches ([ranks][M][batch][seq]). */
mt_status mt_devices_step(mt_devices *d, const int32_t *inputs, const int32_t *targets, float lr,
                          mt_step_result *s);
mt_status mt_devices_eval(mt_devices *d, const int32_t *inputs, const int32_t *targets, double *loss);
/* Test hook MT_TEST_NAN_STEP: the next step's gradient norm reads NaN (on every rank). */
void mt_devices_poison_next_step(mt_devices *d);
/* The engines end (before the store); then the backends. */
void mt_devices_stop(mt_devices *d);
void mt_devices_close(mt_devices *d);

#endif
