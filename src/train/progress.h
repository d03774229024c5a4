/* What a person watching a run sees: a live one-line display on a terminal (step, loss,
 * epoch, tokens/s, ETA), or a plain log line every so often when the output is not a terminal. */
#ifndef MT_TRAIN_PROGRESS_H
#define MT_TRAIN_PROGRESS_H

#include <stdint.h>

typedef struct {
    int live;             /* redraw one line in place */
    int64_t total_steps;
    double started;       /* seconds, monotonic clock */
    double last_print;
    int64_t first_step;   /* step the run (or resume) began at, for the rate */
    double tokens;        /* tokens trained since first_step */
} mt_progress;

void mt_progress_start(mt_progress *p, int live, int64_t first_step, int64_t total_steps);
/* After each step: step is 1-based (steps done); epoch the passes over the training data so far. */
void mt_progress_step(mt_progress *p, int64_t step, double epoch, double loss, double tokens_in_step, float lr);
/* A line that must not be overwritten (validation loss, checkpoint saved). */
void mt_progress_note(mt_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mt_progress_finish(mt_progress *p);
double mt_progress_tokens_per_second(const mt_progress *p);

#endif
