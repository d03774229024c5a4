/* The run's devices (train_devices.c): one backend and its engine, or --gpus N ranks on one store. */
#ifndef MT_TRAIN_TRAIN_DEVICES_H
#define MT_TRAIN_TRAIN_DEVICES_H

#include "train/train_run.h"

/* r->be (and with --gpus above 1, r->ranks); --gpus past the GPUs present is refused here. */
mt_status mt_train_open_devices(mt_train_run *r);
/* The host and device memory the run needs, every rank's buffers counted, against what is there. */
mt_status mt_train_check_memory(mt_train_run *r);
/* r->engine: the engine, or the ranks' engines and their leader's. */
mt_status mt_train_start_engine(mt_train_run *r);
/* A step or an evaluation over r->inputs and r->targets (every rank's micro-batches). */
mt_status mt_train_step(mt_train_run *r, float lr, mt_step_result *s);
mt_status mt_train_eval(mt_train_run *r, double *loss);
/* Test hook MT_TEST_NAN_STEP: the next step's gradient norm reads NaN (on every rank). */
void mt_train_poison_next_step(mt_train_run *r);
/* The engines end (before the store); then the backends. */
void mt_train_stop_engine(mt_train_run *r);
void mt_train_close_devices(mt_train_run *r);

#endif
