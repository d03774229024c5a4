/* Watching a run's steps for numerical trouble, and knowing which checkpoint is good.
 *
 * A step is healthy when it was not skipped (a non-finite gradient) and its loss is sound: finite,
 * not a spike (over 3x the running mean of the losses before it, once there are 20 of them; a
 * spike is also warned about), and either no worse than guessing allows (at most CHANCE_FACTOR x
 * ln V, V the vocabulary, the loss of a uniform guess) or falling: the mean of the last
 * MT_STEP_WATCH_TREND losses (of all of them, at least two, before there are that many) is the
 * lowest such mean yet. A fine-tune that starts far worse than guessing (a model meeting data unlike its own) and
 * learns is thus sound, while a loss that stays high, or climbs, is not. The run stops, the model
 * not coming back by itself, after more than max_skips steps in a row skipped or with a
 * non-finite loss, or more than bad_loss_steps in a row whose loss was not sound (a learning rate
 * far too high can keep the loss finite and huge); bad_loss_steps 0 turns that rule off.
 *
 * Step k's loss measures the weights after step k - 1, so the checkpoint of step s is known good
 * once step s + 1 was healthy and its values were saved finite; the watch keeps the newest such
 * checkpoint (retention never deletes it). When the run stops, the steps it diverged over are the
 * unhealthy ones in a row before the stop, provided one of them had a bad loss (a run of skips
 * with sound losses leaves the weights as they were): the checkpoints from the step before the
 * first of them on hold the weights that went bad. */
#ifndef MT_TRAIN_STEP_WATCH_H
#define MT_TRAIN_STEP_WATCH_H

#include <stdint.h>

#include "util/status.h"

#define MT_STEP_WATCH_CHANCE_FACTOR 2.0
#define MT_STEP_WATCH_DIVERGED_STEPS 20 /* bad_loss_steps' default (train's --diverge-after) */
#define MT_STEP_WATCH_TREND 10

typedef struct {
    int max_skips;          /* steps in a row skipped or with a non-finite loss allowed */
    int bad_loss_steps;     /* steps in a row with an unsound loss allowed; 0: any number */
    double worst_loss;      /* CHANCE_FACTOR x ln V: a loss above it is far worse than guessing */
    int troubled_in_a_row;  /* steps in a row skipped or with a non-finite loss */
    int bad_losses_in_a_row; /* steps in a row whose loss was not sound */
    int64_t unhealthy_since; /* the first of the unhealthy steps in a row up to now, 0: none */
    int bad_loss_since;     /* one of those had a bad loss (non-finite or out of range) */
    int64_t start;          /* the step the run started after (the checkpoint resumed from) */
    int64_t last_healthy;   /* the newest healthy step (the starting step before any) */
    int64_t losses;         /* finite losses seen */
    double mean;            /* their running mean */
    double recent[MT_STEP_WATCH_TREND]; /* the last finite losses, a ring */
    double lowest_trend;    /* the lowest mean of the last MT_STEP_WATCH_TREND losses yet */
    int64_t spikes;         /* loss spikes warned about */
    /* Checkpoints: the newest known good (-1: none), and the latest saved, awaiting its verdict. */
    int64_t good_checkpoint;
    int64_t pending;        /* -1: none */
    int pending_finite;     /* -1 unknown, 0 or 1 */
    int pending_healthy;    /* -1 unknown, 0 or 1 (step pending + 1's health) */
} mt_step_watch;

/* A run starting after step `start` (0, or the step resumed from, whose checkpoint is the good
 * one then: pass it as good_checkpoint, else -1), over a vocabulary of vocab_size tokens. */
void mt_step_watch_init(mt_step_watch *w, int max_skips, int bad_loss_steps, int vocab_size, int64_t start,
                        int64_t good_checkpoint);

/* After step `step` (1-based): MT_ERR_NUMERIC once the run must stop (the message names the
 * steps and why). */
mt_status mt_step_watch_after(mt_step_watch *w, int64_t step, double loss, int skipped);

/* A checkpoint of `step` is being written; its values' finiteness comes with mt_step_watch_saved. */
void mt_step_watch_saving(mt_step_watch *w, int64_t step);
void mt_step_watch_saved(mt_step_watch *w, int64_t step, int finite);

/* The first step whose checkpoint is part of the divergence that stopped the run (the step
 * before the first unhealthy one in a row, but never the checkpoint the run started from, which
 * was good when it was chosen), or -1 when the weights did not go bad. */
int64_t mt_step_watch_diverged_from(const mt_step_watch *w);

#endif
