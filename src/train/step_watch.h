/* Watching a run's steps for numerical trouble: steps skipped for a non-finite gradient (too
 * many in a row stop the run: the model is not coming back by itself) and loss spikes (a
 * warning: a bad batch or a learning rate too high, worth knowing about early). */
#ifndef MT_TRAIN_STEP_WATCH_H
#define MT_TRAIN_STEP_WATCH_H

#include <stdint.h>

#include "util/status.h"

typedef struct {
    int max_skips;       /* skipped steps allowed in a row */
    int skips_in_a_row;
    int64_t losses;      /* finite losses seen */
    double mean;         /* their running mean */
    int64_t spikes;      /* loss spikes warned about */
} mt_step_watch;

void mt_step_watch_init(mt_step_watch *w, int max_skips);

/* After step `step` (1-based): MT_ERR_NUMERIC once more than max_skips steps in a row were
 * skipped; a warning when the loss is over 3x the running mean of the steps before it (once
 * there are 20 of them). */
mt_status mt_step_watch_after(mt_step_watch *w, int64_t step, double loss, int skipped);

#endif
