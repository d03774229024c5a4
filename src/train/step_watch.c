#include "train/step_watch.h"

#include <math.h>

#include "util/log.h"

/* The running mean is a plain mean over the first SPIKE_WINDOW losses, then an exponential one
 * with the same horizon, so that it follows a falling loss instead of remembering step 1. */
#define SPIKE_WINDOW 20
#define SPIKE_FACTOR 3.0

void mt_step_watch_init(mt_step_watch *w, int max_skips) {
    *w = (mt_step_watch){.max_skips = max_skips};
}

mt_status mt_step_watch_after(mt_step_watch *w, int64_t step, double loss, int skipped) {
    if (skipped) {
        w->skips_in_a_row++;
        if (w->skips_in_a_row > w->max_skips)
            return mt_fail(MT_ERR_NUMERIC, "steps %lld to %lld were all skipped for a non-finite gradient "
                           "(more than --max-skips %d in a row): stopping; lower --lr, check the data, or "
                           "resume from an earlier checkpoint", (long long)(step - w->skips_in_a_row + 1),
                           (long long)step, w->max_skips);
    } else {
        w->skips_in_a_row = 0;
    }
    if (!isfinite(loss)) return MT_OK;
    if (w->losses >= SPIKE_WINDOW && loss > SPIKE_FACTOR * w->mean) {
        w->spikes++;
        mt_log_warn("step %lld: loss spike: %.4f is over %.0fx the running mean %.4f", (long long)step, loss,
                    SPIKE_FACTOR, w->mean);
    }
    w->losses++;
    double weight = w->losses < SPIKE_WINDOW ? 1.0 / (double)w->losses : 1.0 / SPIKE_WINDOW;
    w->mean += weight * (loss - w->mean);
    return MT_OK;
}
