/* A run's training state on disk: one checkpoint directory per save (run/ckpt-NNNNNN) holding
 * the fp32 master weights, the Adam moments, and metadata: the model config, the step, the
 * number of updates applied, the data sampler's state, the run's settings (settings.h), whether
 * every saved value is finite, and, once the run has stopped for divergence, that the step was
 * part of it. Written through io/checkpoint (temp directory, fsync, sealed manifest, rename), so
 * a crash at any moment leaves the previous checkpoint intact.
 *
 * A checkpoint is good when its values are all finite and its step was not part of a divergence.
 * Resuming, sampling and exporting a run directory take its newest good checkpoint, and
 * retention never deletes the newest one known good. */
#ifndef MT_TRAIN_RUN_STATE_H
#define MT_TRAIN_RUN_STATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/store.h"
#include "io/dataset.h"

typedef struct {
    int64_t step;        /* optimizer steps taken (skipped ones included) */
    int64_t adam_step;   /* updates applied: AdamW's bias-correction count */
    int update_ahead;    /* the next step takes its update ahead of the norm (mt_engine_update_ahead);
                          * a checkpoint without it (written before it was kept) says no */
    mt_sampler_state sampler;
} mt_run_progress;

/* One class of the saved state as a checkpoint blob: `items` items of item_bytes each, item i
 * covering elements [i * granule, (i + 1) * granule) of the layout (granule 1 for masters and
 * moments, MT_MOMENTS_BLOCK for the 8-bit block scales). */
typedef enum { MT_RUN_F32, MT_RUN_BF16, MT_RUN_CODES /* 8-bit codes: always finite */ } mt_run_value;

typedef struct {
    const char *name;
    const void *data;  /* the items as the checkpoint holds them; NULL: the store's split masters */
    mt_master split;   /* data NULL: the masters, joined into fp32 items as they are written and
                        * split as they are read (engine/store.h) */
    size_t item_bytes, granule, items;
    mt_run_value value;
} mt_run_blob;

#define MT_RUN_MAX_BLOBS 5

/* The blobs of a store's state (master, the moments and their scales); returns the count. */
int mt_run_blobs(const mt_store *store, mt_run_blob blobs[MT_RUN_MAX_BLOBS]);
/* Items [first, first + count) of blob b as the checkpoint holds them: where they lie in memory,
 * or NULL for the split masters, which mt_run_blob_read copies out (joined) into dst. */
const void *mt_run_blob_at(const mt_run_blob *b, size_t first);
void mt_run_blob_read(const mt_run_blob *b, size_t first, size_t count, void *dst);
/* 1 when the `items` items of blob b's kind at `data` are all finite. */
int mt_run_items_finite(const mt_run_blob *b, const void *data, size_t items);

/* The checkpoint's metadata document (the caller owns it), or NULL when out of memory; the
 * finiteness of the values is added when they have been written (mt_run_meta_set_finite). */
json_t *mt_run_meta(const mt_store *store, const mt_run_progress *progress, const json_t *settings);
mt_status mt_run_meta_set_finite(json_t *meta, int finite);

typedef struct {
    const json_t *settings; /* the run's settings, stored in the metadata; NULL: none */
    int keep;               /* checkpoints kept besides the newest good one; 0: all */
    int64_t good_step;      /* the newest checkpoint known good, which is never deleted; -1: none */
} mt_run_save_options;

/* Writes run_dir/ckpt-<step> synchronously, then deletes all but the newest `keep` and the
 * good one. *finite (may be NULL) says whether every value saved was finite. train/saver.h
 * writes the same checkpoint while training goes on. */
mt_status mt_run_save(const char *run_dir, const mt_store *store, const mt_run_progress *progress,
                      const mt_run_save_options *options, int *finite);
/* Retention after the checkpoint of `step`: all but the newest `keep` (0: all kept) of the steps
 * up to `step`, and the one of step good_step, are deleted; checkpoints past `step` (left by a
 * stretch of the run that a resume abandoned, none of them good) are left alone. */
mt_status mt_run_rotate(const char *run_dir, const mt_run_save_options *options, int64_t step);

/* Marks every checkpoint of a step >= from_step as part of a divergence (steps first..last),
 * so that no run resumes from it; *marked counts them. */
mt_status mt_run_mark_diverged(const char *run_dir, int64_t from_step, int64_t first, int64_t last, int *marked);

/* The newest good checkpoint under run_dir whose manifest and blob checksums verify and whose
 * manifest holds the step its name says (the names order the checkpoints: a copy named
 * ckpt-000030 of step 10 is passed over); older ones are tried when the newest is not good, is
 * misnamed or damaged (each refusal is logged). MT_ERR_INVALID when there is none. */
mt_status mt_run_latest(const char *run_dir, char *path, size_t cap);
/* The same; with `diverged_too`, a checkpoint that a divergence stop marked is taken as well when
 * its values are finite (train's --resume-diverged: a stop the user judges wrong). */
mt_status mt_run_latest_of(const char *run_dir, int diverged_too, char *path, size_t cap);
/* `path` is a checkpoint directory, or a run directory whose newest good checkpoint is meant. */
mt_status mt_run_resolve(const char *path, char *checkpoint, size_t cap);

/* The checkpoint's step and its run's settings (a new reference, NULL when it stores none). */
mt_status mt_run_read_info(const char *checkpoint, int64_t *step, json_t **settings);
mt_status mt_run_load_config(const char *checkpoint, mt_config *cfg);
/* The run's tokenizer (settings.tokenizer) into path[cap]; "" when the run has none (bytes). */
mt_status mt_run_load_tokenizer(const char *checkpoint, char *path, size_t cap);
/* The format of the checkpoint's Adam moments (fp32 for checkpoints that do not say). */
mt_status mt_run_load_moments_format(const char *checkpoint, mt_moments_format *format);
/* Fills the working weights of a store of weights alone (engine/store.h, mt_store_create_weights)
 * from the checkpoint's fp32 masters, converted a piece at a time (no fp32 copy of the model is
 * held), and reads its step; the moments are not read. What sampling needs. */
mt_status mt_run_load_weights(const char *checkpoint, mt_store *store, int64_t *step);
/* Fills the store's masters and moments (and working weights) and the progress; refuses a
 * checkpoint whose moments format is not the store's. */
mt_status mt_run_load(const char *checkpoint, mt_store *store, mt_run_progress *progress);

#endif
