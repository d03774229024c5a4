/* Training windows from one token array, in one of three layouts:
 *
 *   windows of the stream (mt_dataset_init): a window is seq_len + 1 consecutive tokens, inputs
 *     its first seq_len, targets its last seq_len; with a masked shard, a target whose token
 *     carries no loss is -1 (the loss skips it). Windows run across documents and examples.
 *   documents masked (mt_dataset_doc_mask after init, --doc-mask): the same windows, cut into
 *     segments after each end-of-text token: a document's tokens attend only to its own, their
 *     positions restart at 0, and the end-of-text token (a document's last) predicts nothing.
 *   packed examples (mt_dataset_init_packed, chat data): the examples of a masked shard that
 *     records them go whole into windows of seq_len tokens (io/packer.h), each a segment of its
 *     own whose last token predicts nothing; what a window has left is padding, a segment of its
 *     own whose targets are all -1. An example longer than seq_len takes its first seq_len tokens
 *     or is refused.
 * Segments reach the engine as positions (engine.h): 0 on a segment's first token, else the
 * position before plus one.
 *
 * The last val_fraction of the tokens is held out for validation (packed: the examples that start
 * there); the rest is the training split. Training windows come either at random (the seeded
 * mt_rng stream) or in order. The sampler's whole state is a struct of integers, so a checkpoint
 * can store it and a resumed run draws exactly the windows the uninterrupted run would have
 * drawn. */
#ifndef MT_IO_DATASET_H
#define MT_IO_DATASET_H

#include <jansson.h>
#include <stdint.h>

#include "io/packer.h"
#include "io/tokens.h"
#include "util/rng.h"
#include "util/status.h"

#define MT_DATASET_DEFAULT_VAL_FRACTION 0.05

typedef enum { MT_SAMPLE_RANDOM, MT_SAMPLE_SEQUENTIAL } mt_sample_order;

/* What an example longer than a window becomes: its first seq_len tokens, or an error. */
typedef enum { MT_LONG_TRUNCATE, MT_LONG_REFUSE } mt_long_examples;

/* Stream windows: rng is random order's generator, cursor the training tokens consumed in the
 * current epoch (in sequential order, the start of the next window). Packed: rng is the generator
 * as of the epoch's start, cursor the windows drawn in it. epoch: completed passes over the
 * training split. */
typedef struct {
    mt_rng rng;
    uint64_t cursor;
    uint64_t epoch;
} mt_sampler_state;

/* A packed dataset's numbers, for the log and the metrics. */
typedef struct {
    size_t examples, windows;     /* the training split's examples; the windows of its first epoch */
    uint64_t tokens, padding;     /* those windows' example tokens and padding tokens */
    size_t val_examples, val_windows;
    uint64_t val_padding;
    size_t truncated;             /* examples of both splits longer than seq_len */
    size_t truncated_no_loss;     /* of them, those whose first seq_len tokens carry no loss */
    uint64_t longest;             /* the longest example's tokens */
} mt_pack_report;

typedef struct {
    const mt_tokens *tokens; /* borrowed; outlives the dataset */
    size_t train_tokens;     /* tokens [0, train_tokens) train ... */
    size_t val_tokens;       /* ... and the last val_tokens validate */
    int seq_len;
    mt_sample_order order;
    mt_sampler_state state;
    int32_t eot;             /* documents masked after this id; -1: not */
    /* Packed examples (examples NULL: stream windows): the splits' examples, the training packer
     * (NULL for a validation file), the validation windows (window w holds val_items[val_first[w]
     * .. val_first[w + 1]]). */
    mt_packer *packer;
    mt_example *examples;    /* the training examples, then the validation ones */
    size_t train_examples, val_examples;
    uint32_t *val_items, *val_first;
    size_t val_windows;
    mt_pack_report report;
} mt_dataset;

/* Stream windows. Splits `tokens`; fails when the training split is too short for one window or
 * the validation split holds no target (a val_fraction of 0 means no validation split). */
mt_status mt_dataset_init(mt_dataset *ds, const mt_tokens *tokens, double val_fraction,
                          int seq_len, mt_sample_order order, uint64_t seed);
/* Masks the stream windows' documents after end-of-text id `eot`. */
void mt_dataset_doc_mask(mt_dataset *ds, int32_t eot);
/* Packed examples of a masked shard that records them (mt_tokens_examples); `name` (the data)
 * is named in its refusals: no recorded examples, a split without a whole example, or with
 * MT_LONG_REFUSE an example longer than seq_len. */
mt_status mt_dataset_init_packed(mt_dataset *ds, const mt_tokens *tokens, double val_fraction, int seq_len,
                                 mt_sample_order order, uint64_t seed, mt_long_examples long_examples,
                                 const char *name);
void mt_dataset_free(mt_dataset *ds);

/* All of `tokens` as validation windows (a validation file of its own): windows of its stream
 * (mt_dataset_doc_mask may mask them), or with `packed` its examples packed in file order (a
 * masked shard that records them; `long_examples` and `name` as for mt_dataset_init_packed).
 * Fails when it holds no target (fewer than 2 tokens), or no example. */
mt_status mt_dataset_init_val_only(mt_dataset *ds, const mt_tokens *tokens, int seq_len, int packed,
                                   mt_long_examples long_examples, const char *name);

/* Whether the windows have segments (documents masked, or packed): their positions matter. */
static inline int mt_dataset_segmented(const mt_dataset *ds) { return ds->eot >= 0 || ds->examples != NULL; }

/* The training windows an epoch draws (stream windows at random: the split's tokens over seq_len,
 * a fraction; in order: the windows that fit; packed: those of the first epoch's packing), and the
 * epochs the sampler has drawn, a fraction within the current one. */
double mt_dataset_epoch_windows(const mt_dataset *ds);
double mt_dataset_epochs_done(const mt_dataset *ds);

/* Restores a saved state; fails when it cannot belong to this dataset (cursor past the split or,
 * packed, past the epoch's windows). */
mt_status mt_dataset_set_state(mt_dataset *ds, const mt_sampler_state *state);

/* Fills inputs, targets and positions [batch * seq_len] (positions may be NULL when the dataset
 * has no segments; otherwise 0..seq_len-1 a window for stream windows) with the next `batch`
 * training windows and advances the sampler. Returns the padding tokens among them. */
size_t mt_dataset_train_batch(mt_dataset *ds, int batch, int32_t *inputs, int32_t *targets, int32_t *positions);

/* Validation windows are fixed: stream, non-overlapping windows in order, the last one short where
 * the split ends inside it (its targets end there, padding after); packed, the validation examples
 * packed in file order. Batch `index` (< mt_dataset_val_batches) holds windows index*batch ..
 * index*batch + batch-1; the last batch may be partial, windows past the last all padding (no
 * targets), so that every validation window counts. */
size_t mt_dataset_val_windows(const mt_dataset *ds);
int64_t mt_dataset_val_batches(const mt_dataset *ds, int batch);
void mt_dataset_val_batch(const mt_dataset *ds, int64_t index, int batch, int32_t *inputs,
                          int32_t *targets, int32_t *positions);

/* The sampler state as a JSON object for checkpoint metadata (the 64-bit rng as a hex string,
 * since JSON integers are signed), and back; the reader names the missing or malformed field. */
json_t *mt_sampler_state_to_json(const mt_sampler_state *state);
mt_status mt_sampler_state_from_json(const json_t *json, mt_sampler_state *state);

#endif
