/* A run directory as `train` takes it (docs/checkpoints.md):
 *
 *   - it is created where missing (and its missing parents), must be writable, and is locked for
 *     the run's life (train/run_lock.h); what a crash left is tidied (io/checkpoint.h);
 *   - a fresh run starts only in a directory that is empty or holds nothing but what megatrain
 *     writes there (.lock, metrics.jsonl, events.out.tfevents.*, loss.svg, run.yaml, the token
 *     cache data/, checkpoints ckpt-*) and the logs a shell may have opened there (*.log): never
 *     in a directory of other files, such as / or the inside of a checkpoint;
 *   - a run refused before it wrote anything leaves the directory as it found it: what it made
 *     (the directories, .lock, the token cache it tokenized into data/) is removed. */
#ifndef MT_TRAIN_RUN_DIR_H
#define MT_TRAIN_RUN_DIR_H

#include <limits.h>

#include "train/run_lock.h"
#include "util/status.h"

typedef struct {
    char path[PATH_MAX];
    char created_from[PATH_MAX]; /* the outermost directory this run created ("": none) */
    int made_lock, had_data;     /* .lock created by this run; data/ was there before it */
    mt_run_lock lock;
} mt_run_dir;

/* Creates (where missing) and checks the directory; with `writes` (the process that writes it),
 * locks it and tidies it. */
mt_status mt_run_dir_take(mt_run_dir *d, const char *path, int writes);

/* MT_ERR_INVALID, naming some of what the directory holds, when a fresh run may not start in it. */
mt_status mt_run_dir_check_fresh(const mt_run_dir *d);

/* 1 when the directory holds nothing but the lock: no run was ever in it. */
int mt_run_dir_is_empty(const mt_run_dir *d);

/* A run refused before it wrote a checkpoint or a metrics line: what it created goes (logged). */
void mt_run_dir_undo(mt_run_dir *d);

/* Releases the lock. */
void mt_run_dir_release(mt_run_dir *d);

#endif
