/* Training windows from one token array.
 *
 * The last val_fraction of the tokens is held out for validation; the rest is the training split.
 * A window is seq_len + 1 consecutive tokens: inputs are its first seq_len, targets its last
 * seq_len; with a masked shard, a target whose token carries no loss is -1 (the loss skips it).
 * Training windows come either at random (the seeded mt_rng stream) or in order (a cursor that
 * wraps at the end of the split, counting epochs). The sampler's whole state is a
 * struct of integers, so a checkpoint can store it and a resumed run draws exactly the windows
 * the uninterrupted run would have drawn. */
#ifndef MT_IO_DATASET_H
#define MT_IO_DATASET_H

#include <jansson.h>
#include <stdint.h>

#include "io/tokens.h"
#include "util/rng.h"
#include "util/status.h"

#define MT_DATASET_DEFAULT_VAL_FRACTION 0.05

typedef enum { MT_SAMPLE_RANDOM, MT_SAMPLE_SEQUENTIAL } mt_sample_order;

typedef struct {
    mt_rng rng;      /* random order's generator */
    uint64_t cursor; /* training tokens consumed in the current epoch; in sequential order, the
                        start of the next window */
    uint64_t epoch;  /* completed passes over the training split */
} mt_sampler_state;

typedef struct {
    const mt_tokens *tokens; /* borrowed; outlives the dataset */
    size_t train_tokens;     /* tokens [0, train_tokens) train ... */
    size_t val_tokens;       /* ... and the last val_tokens validate */
    int seq_len;
    mt_sample_order order;
    mt_sampler_state state;
} mt_dataset;

/* Splits `tokens`; fails when either split is too short for one window (a val_fraction of 0
 * means no validation split). */
mt_status mt_dataset_init(mt_dataset *ds, const mt_tokens *tokens, double val_fraction,
                          int seq_len, mt_sample_order order, uint64_t seed);

/* All of `tokens` as validation windows (a validation file of its own); fails when it is shorter
 * than one window. */
mt_status mt_dataset_init_val_only(mt_dataset *ds, const mt_tokens *tokens, int seq_len);

/* Restores a saved state; fails when it cannot belong to this dataset (cursor past the split). */
mt_status mt_dataset_set_state(mt_dataset *ds, const mt_sampler_state *state);

/* Fills inputs[batch * seq_len] and targets[batch * seq_len] with the next `batch` training
 * windows and advances the sampler. */
void mt_dataset_train_batch(mt_dataset *ds, int batch, int32_t *inputs, int32_t *targets);

/* Validation batches are fixed: batch `index` (< mt_dataset_val_batches) holds the
 * non-overlapping validation windows index*batch .. index*batch + batch-1. */
int64_t mt_dataset_val_batches(const mt_dataset *ds, int batch);
void mt_dataset_val_batch(const mt_dataset *ds, int64_t index, int batch, int32_t *inputs,
                          int32_t *targets);

/* The sampler state as a JSON object for checkpoint metadata (the 64-bit rng as a hex string,
 * since JSON integers are signed), and back; the reader names the missing or malformed field. */
json_t *mt_sampler_state_to_json(const mt_sampler_state *state);
mt_status mt_sampler_state_from_json(const json_t *json, mt_sampler_state *state);

#endif
