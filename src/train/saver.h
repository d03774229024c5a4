/* Checkpoints written while training goes on.
 *
 * A save starts once every update of its step is applied (mt_engine_finish) and walks the
 * training state unit by unit in layout order, appending each unit's slice of every blob
 * (masters, moments, 8-bit scales) to the checkpoint through io/checkpoint.h's streaming writer:
 * the same files, checksums, fsyncs and rename as a synchronous save (run_state.h). Meanwhile the
 * optimizer goes on with the next steps, and before it updates unit u it calls mt_saver_guard
 * (installed with mt_engine_set_update_guard), which
 *   - returns at once when unit u is written already (or copied),
 *   - waits while the writer reads unit u from the store,
 *   - else copies unit u into a staging buffer, which the writer writes and frees in its turn;
 *     when the staging budget cannot take the copy it waits for the writer to write the unit or
 *     free enough.
 * So a checkpoint holds exactly its step's state, and the store is never locked for a whole save.
 *
 * 8-bit moments: a block of MT_MOMENTS_BLOCK values (one scale each for m and v) may straddle
 * two units (units start on multiples of MT_TENSOR_ALIGN), and updating either unit requantizes
 * the whole block. So the guard of a unit secures every unit that shares a block with it: a
 * neighbour is copied a little earlier than its own update would have copied it, and the layout
 * (shared with the CUDA engine, the checkpoints already written and the Hugging Face export)
 * stays as it is. */
#ifndef MT_TRAIN_SAVER_H
#define MT_TRAIN_SAVER_H

#include <stdint.h>

#include "engine/store.h"
#include "train/run_state.h"

typedef struct mt_saver mt_saver;

/* staging_bytes: the most host memory the copies of units may take at once; 0: none (the
 * optimizer waits for the writer); negative: half the host memory available when a save starts. */
mt_status mt_saver_create(mt_saver **out, const mt_store *store, int64_t staging_bytes);
/* Waits for a save in flight (its outcome unreported: collect it with mt_saver_wait first). The
 * engine whose guard this is must be gone, or its guard removed. */
void mt_saver_destroy(mt_saver *s);

/* The update guard (see above); ctx is the saver. */
void mt_saver_guard(void *ctx, int unit);
/* Unit u is not staged ahead of the writer: the optimizer does not update it while training
 * goes on (the engine updates it on the device and brings it home only in mt_engine_finish,
 * before a save starts). The guard still secures it if it is ever called for it. */
void mt_saver_skip_staging(mt_saver *s, int unit);

/* Starts writing run_dir/ckpt-<step> of `progress` in the background; after it lands, retention
 * runs as mt_run_save's does. The store must hold the state of that step (every update applied)
 * and no other save may be in flight. */
mt_status mt_saver_start(mt_saver *s, const char *run_dir, const mt_run_progress *progress,
                         const mt_run_save_options *options);
int mt_saver_in_flight(const mt_saver *s);
/* 1 when the save in flight is through, landed or failed: mt_saver_wait would not block. */
int mt_saver_landed(mt_saver *s);

/* Test hook: the writer pauses this long before it takes each unit, so that the next steps'
 * updates catch up with it and the guard's copying and waiting are exercised. */
void mt_saver_slow_down(mt_saver *s, double seconds_per_unit);

typedef struct {
    int64_t step;
    double write_seconds;  /* from the start to the checkpoint in place (and rotated) */
    double guard_seconds;  /* the optimizer's time in the guard: waiting and copying */
    int64_t staged_bytes;  /* copied into staging, in all */
    int finite;            /* every value saved was finite */
} mt_save_report;

/* Waits for the save in flight and returns its outcome: the writer's error, naming the
 * checkpoint, on failure (the previous checkpoint is untouched then). */
mt_status mt_saver_wait(mt_saver *s, mt_save_report *report);

#endif
