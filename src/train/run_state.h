/* A run's training state on disk: one checkpoint directory per save (run/ckpt-NNNNNN) holding
 * the fp32 master weights, the Adam moments, and metadata: the model config, the step, the
 * number of updates applied and the data sampler's state. Written through io/checkpoint
 * (temp directory, fsync, manifest with checksums, rename), so a crash at any moment leaves
 * the previous checkpoint intact. */
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
    mt_sampler_state sampler;
    const char *tokenizer; /* the run's tokenizer (an absolute path), kept in the checkpoint's settings; NULL: none */
} mt_run_progress;

/* One class of the saved state as a checkpoint blob: `items` items of item_bytes each, item i
 * covering elements [i * granule, (i + 1) * granule) of the layout (granule 1 for masters and
 * moments, MT_MOMENTS_BLOCK for the 8-bit block scales). */
typedef struct {
    const char *name;
    const void *data;
    size_t item_bytes, granule, items;
} mt_run_blob;

#define MT_RUN_MAX_BLOBS 5

/* The blobs of a store's state (master, the moments and their scales); returns the count. */
int mt_run_blobs(const mt_store *store, mt_run_blob blobs[MT_RUN_MAX_BLOBS]);
/* The checkpoint's metadata document (the caller owns it), or NULL when out of memory. */
json_t *mt_run_meta(const mt_store *store, const mt_run_progress *progress);

/* Writes run_dir/ckpt-<step> synchronously, then deletes all but the newest `keep` (0: keeps
 * all). train/saver.h writes the same checkpoint while training goes on. */
mt_status mt_run_save(const char *run_dir, const mt_store *store, const mt_run_progress *progress, int keep);

/* The newest checkpoint under run_dir whose manifest and blob checksums verify; older ones are
 * tried when the newest is damaged (each refusal is logged). MT_ERR_INVALID when there is none. */
mt_status mt_run_latest(const char *run_dir, char *path, size_t cap);
/* `path` is a checkpoint directory, or a run directory whose newest good checkpoint is meant. */
mt_status mt_run_resolve(const char *path, char *checkpoint, size_t cap);

mt_status mt_run_load_config(const char *checkpoint, mt_config *cfg);
/* The run's tokenizer (settings.tokenizer) into path[cap]; "" when the run has none (bytes). */
mt_status mt_run_load_tokenizer(const char *checkpoint, char *path, size_t cap);
/* The format of the checkpoint's Adam moments (fp32 for checkpoints that do not say). */
mt_status mt_run_load_moments_format(const char *checkpoint, mt_moments_format *format);
/* Fills the store's masters and moments (and working weights) and the progress; refuses a
 * checkpoint whose moments format is not the store's. */
mt_status mt_run_load(const char *checkpoint, mt_store *store, mt_run_progress *progress);

#endif
