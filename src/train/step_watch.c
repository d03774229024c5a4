#include "train/step_watch.h"

#include <math.h>

#include "util/log.h"

/* The running mean is a plain mean over the first SPIKE_WINDOW losses, then an exponential one
 * with the same horizon, so that it follows a falling loss instead of remembering step 1. */
#define SPIKE_WINDOW 20
#define SPIKE_FACTOR 3.0

void mt_step_watch_init(mt_step_watch *w, int max_skips, int bad_loss_steps, int vocab_size, int64_t start,
                        int64_t good_checkpoint) {
    *w = (mt_step_watch){.max_skips = max_skips, .bad_loss_steps = bad_loss_steps, .lowest_trend = INFINITY,
                         .worst_loss = MT_STEP_WATCH_CHANCE_FACTOR * log(vocab_size > 1 ? vocab_size : 2),
                         .start = start, .last_healthy = start, .good_checkpoint = good_checkpoint, .pending = -1};
}

/* Promotes the pending checkpoint once both verdicts are in. */
static void settle_pending(mt_step_watch *w) {
    if (w->pending < 0 || w->pending_finite < 0 || w->pending_healthy < 0) return;
    if (w->pending_finite && w->pending_healthy) w->good_checkpoint = w->pending;
    w->pending = -1;
}

void mt_step_watch_saving(mt_step_watch *w, int64_t step) {
    w->pending = step;
    w->pending_finite = w->pending_healthy = -1;
}

void mt_step_watch_saved(mt_step_watch *w, int64_t step, int finite) {
    if (w->pending != step) return;
    w->pending_finite = finite;
    settle_pending(w);
}

/* A spike: over SPIKE_FACTOR x the running mean, once it has SPIKE_WINDOW losses. Warned about. */
static int spike(mt_step_watch *w, int64_t step, double loss) {
    int is_spike = w->losses >= SPIKE_WINDOW && loss > SPIKE_FACTOR * w->mean;
    if (is_spike) {
        w->spikes++;
        mt_log_warn("step %lld: loss spike: %.4f is over %.0fx the running mean %.4f", (long long)step, loss,
                    SPIKE_FACTOR, w->mean);
    }
    w->losses++;
    double weight = w->losses < SPIKE_WINDOW ? 1.0 / (double)w->losses : 1.0 / SPIKE_WINDOW;
    w->mean += weight * (loss - w->mean);
    return is_spike;
}

/* Adds a finite loss to the trend; 1 when the mean of the last MT_STEP_WATCH_TREND losses (all of
 * them, before there are that many; at least two) is the lowest yet: the loss is falling. Call
 * after spike(), which counts the loss. */
static int falling(mt_step_watch *w, double loss) {
    w->recent[(w->losses - 1) % MT_STEP_WATCH_TREND] = loss;
    int n = w->losses < MT_STEP_WATCH_TREND ? (int)w->losses : MT_STEP_WATCH_TREND;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w->recent[i];
    double trend = sum / n;
    int lowest = trend < w->lowest_trend;
    if (lowest) w->lowest_trend = trend;
    return lowest && n > 1; /* one loss shows no trend */
}

mt_status mt_step_watch_after(mt_step_watch *w, int64_t step, double loss, int skipped) {
    int finite = isfinite(loss);
    int bad_loss = !finite;
    if (finite) {
        int spiked = spike(w, step, loss);
        int down = falling(w, loss);
        bad_loss = spiked || (loss > w->worst_loss && !down);
    }
    int healthy = !skipped && !bad_loss;
    if (w->pending == step - 1) {
        w->pending_healthy = healthy;
        settle_pending(w);
    }
    if (healthy) {
        w->last_healthy = step;
        w->unhealthy_since = 0;
        w->bad_loss_since = 0;
    } else {
        if (!w->unhealthy_since) w->unhealthy_since = step;
        w->bad_loss_since |= bad_loss;
    }
    w->troubled_in_a_row = skipped || !finite ? w->troubled_in_a_row + 1 : 0;
    w->bad_losses_in_a_row = bad_loss ? w->bad_losses_in_a_row + 1 : 0;
    if (w->troubled_in_a_row > w->max_skips)
        return mt_fail(MT_ERR_NUMERIC, "steps %lld to %lld were all skipped for a non-finite gradient or had a "
                       "non-finite loss (more than --max-skips %d in a row): stopping",
                       (long long)(step - w->troubled_in_a_row + 1), (long long)step, w->max_skips);
    if (w->bad_loss_steps > 0 && w->bad_losses_in_a_row > w->bad_loss_steps)
        return mt_fail(MT_ERR_NUMERIC, "the run diverged: steps %lld to %lld (more than --diverge-after %d in a row) "
                       "all had a loss over %.2f (%.0f x the %.2f of a uniform guess) that was not falling, a "
                       "spike or a non-finite one: stopping",
                       (long long)(step - w->bad_losses_in_a_row + 1), (long long)step, w->bad_loss_steps,
                       w->worst_loss, MT_STEP_WATCH_CHANCE_FACTOR, w->worst_loss / MT_STEP_WATCH_CHANCE_FACTOR);
    return MT_OK;
}

int64_t mt_step_watch_diverged_from(const mt_step_watch *w) {
    if (!w->unhealthy_since || !w->bad_loss_since) return -1;
    return w->unhealthy_since - 1 > w->start ? w->unhealthy_since - 1 : w->start + 1;
}
