/* One run at a time in a run directory: <run>/.lock, held with flock(2) for the run's life. A
 * second run on the same directory is refused at once, naming the directory and the holder's
 * pid (from /proc/locks: nothing is written into the file); the lock goes with the process that
 * holds it, however it ends, so a crashed run leaves nothing to clean up. */
#ifndef MT_TRAIN_RUN_LOCK_H
#define MT_TRAIN_RUN_LOCK_H

#include "util/status.h"

typedef struct {
    int fd; /* -1: not held */
} mt_run_lock;

/* Takes the lock of run_dir (which must exist) without waiting; MT_ERR_IO when another process
 * holds it. */
mt_status mt_run_lock_acquire(const char *run_dir, mt_run_lock *lock);
void mt_run_lock_release(mt_run_lock *lock);

#endif
