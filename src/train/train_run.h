/* The pieces of one training run, shared by train.c (opening the run, the loop) and
 * train_saves.c (its checkpoints, and where a stopped run resumes from). */
#ifndef MT_TRAIN_TRAIN_RUN_H
#define MT_TRAIN_TRAIN_RUN_H

#include <jansson.h>

#include "engine/engine.h"
#include "io/dataset.h"
#include "io/metrics.h"
#include "optim/schedule.h"
#include "plan/placement.h"
#include "train/data_mix.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/run_state.h"
#include "train/saver.h"
#include "train/step_watch.h"
#include "train/train_devices.h"

enum { MT_MAX_VAL_FILES = 16 };

typedef struct {
    mt_train_options o;         /* the options, every run setting resolved */
    json_t *saved_settings;     /* the resumed checkpoint's settings (names in o may point into it) */
    json_t *settings;           /* this run's, stored in each of its checkpoints */
    mt_run_dir dir;             /* the run directory, locked */
    mt_config cfg;
    mt_layout layout;
    mt_devices dev;             /* the backend and engine (or with --gpus, the ranks') */
    mt_store store;
    mt_placement placement;     /* the run's memory plan; the engine runs placement.eo */
    mt_saver *saver;            /* background checkpoints; NULL with --sync-save */
    mt_moments_format moments;
    mt_tokens tokens;
    mt_dataset data;
    int n_val;                  /* --val-data files */
    struct {
        char name[1024];        /* as given */
        char key[1100];         /* its metric: "val_loss/" and its base name */
        mt_tokens tokens;
        mt_dataset data;
    } val[MT_MAX_VAL_FILES];
    mt_metrics *metrics;
    mt_lr_schedule schedule;
    mt_run_progress progress;
    int32_t *inputs, *targets;  /* [M * batch * seq] */
    int32_t *positions;         /* the same, for windows with segments (packed, --doc-mask); else NULL */
    int32_t eot;                /* --doc-mask's end-of-text id, or -1 */
    char resume_from[4096];
    char tokenizer[4096];       /* the run's tokenizer, resolved ("" for bytes): train/train_data.h */
    char data_path[MT_MAX_DATA * 1024];                   /* --data's datasets, absolute */
    char init_from[4096], config_path[4096], chat_template[4096]; /* those options, absolute */
    char val_data[MT_MAX_VAL_FILES * 1024];
    int data_changed;           /* resumed on other data than the checkpoint's (train/run_inputs.h) */
    mt_step_watch watch;
    int data_failed;            /* the loop stopped for its data: a read of the token file failed
                                 * (changed, cut short), or too many windows had no target */
    int empty_in_a_row;         /* steps in a row whose windows had no target that carries loss */
    int64_t nan_step;           /* test hook: MT_TEST_NAN_STEP, 0 when unset */
    int64_t fault_step;         /* test hook: MT_TEST_DEVICE_FAULT_STEP, 0 when unset */
    int64_t rank_fail_step;     /* test hook: MT_TEST_RANK_FAIL_STEP, the last rank dies; 0 when unset */
} mt_train_run;

/* ---- train_saves.c ---- */

/* A periodic checkpoint: written while training goes on, or with --sync-save before it does. */
mt_status mt_train_save_periodic(mt_train_run *r, mt_progress *pg);
/* Waits for the checkpoint being written in the background, if any, and reports it. */
mt_status mt_train_collect_save(mt_train_run *r, mt_progress *pg);
/* After the loop: the save in flight lands (or fails) before anything else is written. A loop
 * that failed keeps its own error; a failed save is then logged beside it. */
mt_status mt_train_settle_save(mt_train_run *r, mt_progress *pg, mt_status rc);
/* The last checkpoint, written before the run ends; refused as the run's result (MT_ERR_NUMERIC,
 * naming the checkpoint to resume from) when its values are not all finite. */
mt_status mt_train_save_final(mt_train_run *r);
/* The run stopped for numerical trouble (the step watch's error): the checkpoints of the steps it
 * diverged over are marked so, and the error names the newest good checkpoint to resume from. */
mt_status mt_train_stop_diverged(mt_train_run *r);

#endif
