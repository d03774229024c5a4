/* A training run's checkpoints: periodic ones (in the background or not), the final one, and
 * what a run stopped for divergence leaves to resume from. */
#include <stdio.h>
#include <string.h>

#include "train/train_run.h"
#include "util/clock.h"
#include "util/log.h"

static mt_run_save_options save_options(const mt_train_run *r) {
    return (mt_run_save_options){.settings = r->settings, .keep = r->o.keep,
                                 .good_step = r->watch.good_checkpoint};
}

/* Every rank: the step's updates applied, and a replica's slices shared into every store (a
 * collective: the ranks that do not write take part). */
static mt_status settle_state(mt_train_run *r) {
    mt_engine_finish(r->dev.engine);
    return mt_engine_share_state(r->dev.engine);
}

/* The state to save is the step's: every update applied, the sampler where it stands. */
static void capture_progress(mt_train_run *r) {
    r->progress.adam_step = mt_engine_finish(r->dev.engine);
    r->progress.update_ahead = mt_engine_update_ahead(r->dev.engine);
    r->progress.sampler = r->data.state;
    mt_step_watch_saving(&r->watch, r->progress.step);
}

/* A saved checkpoint's finiteness goes to the watch; one that is not finite is no good one. */
static void note_finite(mt_train_run *r, mt_progress *pg, int64_t step, int finite) {
    mt_step_watch_saved(&r->watch, step, finite);
    if (!finite)
        mt_progress_note(pg, "checkpoint at step %lld holds non-finite values (NaN or Inf): it is not a good "
                         "checkpoint, and no run resumes from it", (long long)step);
}

/* A periodic checkpoint's outcome: one that failed stops the run, unless
 * --continue-on-save-error, and the previous checkpoint stays valid either way. */
static mt_status report_save(mt_train_run *r, mt_progress *pg, mt_status saved, int64_t step, const char *timing) {
    if (saved == MT_OK) {
        mt_progress_note(pg, "checkpoint at step %lld saved in %s: %s", (long long)step, r->o.out_dir, timing);
        return MT_OK;
    }
    if (!r->o.continue_on_save_error) return saved;
    mt_progress_note(pg, "step %lld: checkpoint NOT saved (%s); training goes on (--continue-on-save-error), "
                     "the previous checkpoint stays valid", (long long)step, mt_error());
    return MT_OK;
}

mt_status mt_train_collect_save(mt_train_run *r, mt_progress *pg) {
    if (!r->saver || !mt_saver_in_flight(r->saver)) return MT_OK;
    mt_save_report rep;
    double t0 = mt_now();
    mt_status saved = mt_saver_wait(r->saver, &rep);
    double collect_seconds = mt_now() - t0;
    char timing[160];
    snprintf(timing, sizeof timing, "%.2f s writing, training waited %.2f s (the optimizer %.2f s, %.1f MB "
             "copied aside)", rep.write_seconds, rep.guard_seconds + collect_seconds, rep.guard_seconds,
             (double)rep.staged_bytes / 1e6);
    if (saved == MT_OK) note_finite(r, pg, rep.step, rep.finite);
    return report_save(r, pg, saved, rep.step, timing);
}

mt_status mt_train_save_periodic(mt_train_run *r, mt_progress *pg) {
    MT_TRY(settle_state(r));
    if (!mt_devices_writes(&r->dev)) return MT_OK; /* rank 0 of the world saves */
    capture_progress(r);
    mt_run_save_options so = save_options(r);
    if (r->saver) {
        mt_status started = mt_saver_start(r->saver, r->o.out_dir, &r->progress, &so);
        return started == MT_OK ? MT_OK : report_save(r, pg, started, r->progress.step, "");
    }
    double t0 = mt_now();
    int finite;
    mt_status saved = mt_run_save(r->o.out_dir, &r->store, &r->progress, &so, &finite);
    if (saved == MT_OK) note_finite(r, pg, r->progress.step, finite);
    char timing[64];
    snprintf(timing, sizeof timing, "%.2f s writing, training waited all of it (--sync-save)", mt_now() - t0);
    return report_save(r, pg, saved, r->progress.step, timing);
}

mt_status mt_train_settle_save(mt_train_run *r, mt_progress *pg, mt_status rc) {
    char why[MT_ERROR_MAX];
    snprintf(why, sizeof why, "%s", mt_error());
    mt_status collected = mt_train_collect_save(r, pg);
    if (rc == MT_OK) return collected;
    if (collected != MT_OK) mt_log_error("%s", mt_error());
    return mt_fail(rc, "%s", why);
}

/* ", resume from <checkpoint> (the newest good one)" or ", and no good checkpoint is left". */
static void resume_advice(const mt_train_run *r, char *buf, size_t cap) {
    char good[4096];
    if (mt_run_latest(r->o.out_dir, good, sizeof good) == MT_OK)
        snprintf(buf, cap, "the newest good checkpoint is %s: 'megatrain train --out %s --resume' continues from it",
                 good, r->o.out_dir);
    else
        snprintf(buf, cap, "there is no good checkpoint to resume from: start the run again");
}

mt_status mt_train_save_final(mt_train_run *r) {
    MT_TRY(settle_state(r));
    if (!mt_devices_writes(&r->dev)) return MT_OK; /* rank 0 of the world saves */
    capture_progress(r);
    double t0 = mt_now();
    mt_run_save_options so = save_options(r);
    int finite;
    MT_TRY(mt_run_save(r->o.out_dir, &r->store, &r->progress, &so, &finite));
    mt_step_watch_saved(&r->watch, r->progress.step, finite);
    mt_log_info("checkpoint at step %lld saved in %s (%.2f s)", (long long)r->progress.step, r->o.out_dir,
                mt_now() - t0);
    if (finite) return MT_OK;
    char advice[MT_ERROR_MAX];
    resume_advice(r, advice, sizeof advice);
    return mt_fail(MT_ERR_NUMERIC, "the run's state at step %lld holds non-finite values (NaN or Inf): it is not "
                   "a good checkpoint; lower --lr or turn on --clip; %s", (long long)r->progress.step, advice);
}

mt_status mt_train_stop_diverged(mt_train_run *r) {
    char why[MT_ERROR_MAX], marked_text[160] = "", advice[MT_ERROR_MAX];
    snprintf(why, sizeof why, "%s", mt_error());
    int64_t from = mt_step_watch_diverged_from(&r->watch);
    int marked = 0;
    if (from >= 0 && mt_devices_writes(&r->dev)) {
        if (mt_run_mark_diverged(r->o.out_dir, from, from + 1, r->progress.step, &marked) != MT_OK)
            mt_log_error("%s", mt_error());
        snprintf(marked_text, sizeof marked_text, "; its weights went bad after step %lld: %d checkpoint%s from "
                 "then on marked so, never resumed from", (long long)from, marked, marked == 1 ? "" : "s");
    }
    resume_advice(r, advice, sizeof advice);
    return mt_fail(MT_ERR_NUMERIC, "%s%s; %s, after lowering --lr (or fixing the data); a stop judged wrong: "
                   "--resume --resume-diverged takes the newest finite checkpoint, marked or not, and "
                   "--diverge-after 0 turns the loss rule off", why, marked_text, advice);
}
