/* Examples packed whole into windows of seq tokens, for chat and instruction data: no example is
 * split between two windows and none runs into the next (the dataset masks attention at their
 * boundaries, io/dataset.h).
 *
 * An epoch takes the examples in an order (the seeded generator's permutation, or the file's with
 * sequential order) and packs them a buffer of MT_PACK_BUFFER examples at a time, first-fit
 * decreasing: longest first, each into the first window it fits. With random order each buffer's
 * windows are then drawn in the generator's order (else in the order they were opened). An
 * example longer than seq takes seq tokens (its beginning: the caller counts them).
 *
 * Its whole state is the dataset's sampler state (io/dataset.h): the generator as of the epoch's
 * start, the windows drawn in the epoch and the epochs completed. A packer set to a saved state
 * packs the epoch again up to it, so a resumed run draws the very windows the uninterrupted run
 * would have. */
#ifndef MT_IO_PACKER_H
#define MT_IO_PACKER_H

#include <stddef.h>
#include <stdint.h>

#include "util/rng.h"
#include "util/status.h"

#define MT_PACK_BUFFER 4096

typedef struct {
    uint64_t start; /* its first token in the token file */
    uint32_t len;   /* tokens it takes in a window: its own, or seq for a longer one */
} mt_example;

typedef struct mt_packer mt_packer;

/* A packer over examples ex[0..n) (borrowed: they outlive it), each len in [1, seq]. */
mt_status mt_packer_create(mt_packer **out, const mt_example *ex, size_t n, int seq, int random_order);
void mt_packer_free(mt_packer *p);

/* Starts over from epoch `epoch`'s beginning with generator state `rng`, then draws `cursor`
 * windows; fails (MT_ERR_INVALID) when the epoch has fewer than `cursor` windows. */
mt_status mt_packer_seek(mt_packer *p, uint64_t rng, uint64_t cursor, uint64_t epoch);
/* The state to seek to for the next window: the epoch's starting generator, the windows drawn
 * in it, the epochs completed. */
void mt_packer_state(const mt_packer *p, uint64_t *rng, uint64_t *cursor, uint64_t *epoch);

/* The next window's examples (indices into ex, in the order they fill it), *count of them; valid
 * until the next call. An epoch that ends starts the next. */
mt_status mt_packer_next(mt_packer *p, const uint32_t **examples, size_t *count);

/* The windows of one epoch from generator state `rng`, and the padding they leave: windows *
 * seq less the examples' tokens. The packer's position is kept. */
mt_status mt_packer_count(mt_packer *p, uint64_t rng, uint64_t *windows, uint64_t *padding);

#endif
