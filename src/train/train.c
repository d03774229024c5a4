/* mt_train: the training job. Resolves the model and data, builds the store and the engine,
 * and runs the loop: steps, validation, metrics, the loss picture, checkpoints, and a clean stop
 * on SIGINT/SIGTERM. */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "io/checkpoint.h"
#include "io/dataset.h"
#include "io/hf_model.h"
#include "io/metrics.h"
#include "io/plot.h"
#include "megatrain.h"
#include "optim/schedule.h"
#include "train/backend_select.h"
#include "train/memory_check.h"
#include "train/options.h"
#include "train/progress.h"
#include "train/run_state.h"
#include "train/saver.h"
#include "train/train_data.h"
#include "train/step_watch.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/clock.h"

#define DEMO_CORPUS "data/kjv.txt"

mt_train_options mt_train_defaults(void) {
    return (mt_train_options){.val_fraction = MT_DATASET_DEFAULT_VAL_FRACTION, .seed = 1337,
                              .seq_len = 256, .batch = 8, .micro_batches = 1, .steps = 600,
                              .lr = 3e-3f, .min_lr_ratio = 0.1f, .warmup_steps = -1,
                              .schedule = "cosine", .weight_decay = 0.1f, .beta1 = 0.9f,
                              .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = 1.0f, .max_skips = 10,
                              .moments = "fp32",
                              .backend = "auto", .slots = 2, .lm_chunk = 512, .out_dir = "runs/demo",
                              .ckpt_every = 200, .eval_every = 100, .eval_batches = 8, .keep = 2,
                              .save_staging = -1};
}

/* ---- signals: the first asks for a clean stop, the second ends the process at once ---- */

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    if (stop_requested) _exit(128 + sig);
    stop_requested = 1;
}

static void install_signals(struct sigaction *old_int, struct sigaction *old_term) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    stop_requested = 0;
    sigaction(SIGINT, &sa, old_int);
    sigaction(SIGTERM, &sa, old_term);
}

/* ---- the pieces of a run ---- */

typedef struct {
    const mt_train_options *o;
    mt_config cfg;
    mt_layout layout;
    mt_backend *be;
    mt_store store;
    mt_engine *engine;
    mt_engine_options engine_options;
    mt_saver *saver;            /* background checkpoints; NULL with --sync-save */
    mt_moments_format moments;
    mt_tokens tokens;
    mt_dataset data;
    mt_metrics *metrics;
    mt_lr_schedule schedule;
    mt_run_progress progress;
    int32_t *inputs, *targets;  /* [M * batch * seq] */
    char resume_from[4096];
    char tokenizer[4096];       /* the run's tokenizer ("" for bytes): train/train_data.h */
    int tokens_open;
    mt_step_watch watch;
    int64_t nan_step;           /* test hook: MT_TEST_NAN_STEP, 0 when unset */
    int64_t fault_step;         /* test hook: MT_TEST_DEVICE_FAULT_STEP, 0 when unset */
} run;

static mt_status resolve_model(run *r) {
    if (r->resume_from[0]) return mt_run_load_config(r->resume_from, &r->cfg);
    return mt_train_model_config(r->o, &r->cfg);
}

/* Loading progress: redrawn in place on a terminal, one line at the end otherwise. */
static void print_loading(int64_t done, int64_t total, void *user) {
    const run *r = user;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    if (r->o->progress)
        fprintf(stderr, "\rloading %s: %.0f%% of %.2f GB%s", r->o->init_from, pct, (double)total / 1e9,
                done == total ? "\n" : "");
    else if (done == total)
        mt_log_info("loaded %s: %.2f GB", r->o->init_from, (double)total / 1e9);
}

static mt_status init_weights(run *r) {
    if (r->resume_from[0]) {
        MT_TRY(mt_run_load(r->resume_from, &r->store, &r->progress));
        mt_log_info("resumed from %s at step %lld", r->resume_from, (long long)r->progress.step);
        return MT_OK;
    }
    if (r->o->init_from) {
        MT_TRY(mt_hf_load_weights(r->o->init_from, &r->layout, r->store.master, print_loading, r));
        mt_store_sync_weights(&r->store);
        return MT_OK;
    }
    mt_store_init_random(&r->store, r->o->seed);
    return MT_OK;
}

static mt_status open_data(run *r) {
    const char *path = r->o->data_path ? r->o->data_path : DEMO_CORPUS;
    if (!r->o->data_path && access(path, R_OK) != 0)
        return mt_fail(MT_ERR_IO, "%s: the demo corpus is missing; make it with "
                       "'scripts/make-demo-corpus.sh %s' (needs the bible-kjv packages) or pass --data",
                       path, path);
    char tokens[8192];
    MT_TRY(mt_train_data_resolve(r->o, path, r->resume_from, (uint32_t)r->cfg.vocab_size, r->tokenizer,
                                 sizeof r->tokenizer, tokens, sizeof tokens));
    r->progress.tokenizer = r->tokenizer[0] ? r->tokenizer : NULL;
    MT_TRY(mt_tokens_open(tokens, &r->tokens));
    r->tokens_open = 1;
    MT_TRY(mt_tokens_validate(&r->tokens, (uint32_t)r->cfg.vocab_size, tokens));
    MT_TRY(mt_dataset_init(&r->data, &r->tokens, r->o->val_fraction, r->o->seq_len,
                           r->o->sequential ? MT_SAMPLE_SEQUENTIAL : MT_SAMPLE_RANDOM, r->o->seed));
    if (r->resume_from[0]) MT_TRY(mt_dataset_set_state(&r->data, &r->progress.sampler));
    return MT_OK;
}

static mt_status open_engine(run *r) {
    MT_TRY(mt_engine_create(&r->engine, r->be, &r->store, &r->engine_options, r->progress.adam_step));
    if (r->o->sync_save) return MT_OK;
    MT_TRY(mt_saver_create(&r->saver, &r->store, r->o->save_staging));
    mt_engine_set_update_guard(r->engine, mt_saver_guard, r->saver);
    for (int u = 0; u < r->layout.num_units; u++)
        if (!mt_engine_updates_on_host(r->engine, u)) mt_saver_skip_staging(r->saver, u);
    /* Test hook MT_TEST_SAVE_UNIT_MS=N: background saves pause N ms before each unit. */
    const char *slow = getenv("MT_TEST_SAVE_UNIT_MS");
    if (slow) mt_saver_slow_down(r->saver, strtod(slow, NULL) / 1e3);
    return MT_OK;
}

/* --resume: the newest good checkpoint. A run directory with no checkpoint at all starts from
 * scratch, so that one command line both starts a run and continues it after a crash; one whose
 * checkpoints are all damaged is refused rather than silently started over. */
static mt_status find_resume_point(run *r) {
    mt_ckpt_entry *entries;
    int count;
    MT_TRY(mt_checkpoint_list(r->o->out_dir, &entries, &count));
    mt_checkpoint_list_free(entries, count);
    if (count > 0) return mt_run_latest(r->o->out_dir, r->resume_from, sizeof r->resume_from);
    mt_log_info("%s holds no checkpoint yet: --resume starts the run from scratch", r->o->out_dir);
    return MT_OK;
}

/* A fresh run never trains over another run's checkpoints. */
static mt_status refuse_existing_run(const char *out_dir) {
    mt_ckpt_entry *entries;
    int count;
    MT_TRY(mt_checkpoint_list(out_dir, &entries, &count));
    int64_t newest = count > 0 ? entries[0].step : 0;
    mt_checkpoint_list_free(entries, count);
    if (count == 0) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "%s already holds a run (newest checkpoint: step %lld): pass --resume to "
                   "continue it, or choose another --out", out_dir, (long long)newest);
}

static mt_status open_run(run *r) {
    const mt_train_options *o = r->o;
    if (o->steps < 0) return mt_fail(MT_ERR_INVALID, "--steps must not be negative");
    if (mt_mkdir_p(o->out_dir) != MT_OK)
        return mt_fail_context(MT_ERR_IO, "%s: cannot create the run directory", o->out_dir);
    if (access(o->out_dir, W_OK) != 0)
        return mt_fail(MT_ERR_IO, "%s: the run directory is not writable: %s", o->out_dir, strerror(errno));
    MT_TRY(mt_checkpoint_tidy(o->out_dir));
    if (o->resume) MT_TRY(find_resume_point(r));
    else MT_TRY(refuse_existing_run(o->out_dir));
    MT_TRY(resolve_model(r));
    MT_TRY(mt_layout_init(&r->layout, &r->cfg));
    if (o->seq_len > r->cfg.max_position)
        return mt_fail(MT_ERR_INVALID, "--seq %d is past the model's max_position_embeddings (%d)",
                       o->seq_len, r->cfg.max_position);
    int64_t warmup = o->warmup_steps >= 0 ? o->warmup_steps : (o->steps / 10 < 100 ? o->steps / 10 : 100);
    r->schedule = (mt_lr_schedule){.max_lr = o->lr, .warmup_steps = warmup,
                                   .total_steps = o->steps, .min_lr_ratio = o->min_lr_ratio};
    MT_TRY(mt_lr_kind_parse(o->schedule, &r->schedule.kind));
    MT_TRY(mt_lr_schedule_validate(&r->schedule));
    MT_TRY(mt_moments_format_parse(o->moments, &r->moments));
    MT_TRY(mt_backend_open(o->backend, o->threads, &r->be));
    MT_TRY(mt_train_engine_options(o, r->be, &r->cfg, &r->engine_options));
    MT_TRY(mt_memory_check(&r->layout, r->be, &r->engine_options, r->moments));
    MT_TRY(mt_store_create_with_moments(&r->store, &r->layout, r->be, r->moments));
    MT_TRY(init_weights(r));
    MT_TRY(open_data(r));
    MT_TRY(open_engine(r));
    MT_TRY(mt_metrics_open(o->out_dir, &r->metrics));
    mt_step_watch_init(&r->watch, o->max_skips);
    const char *nan_step = getenv("MT_TEST_NAN_STEP");
    r->nan_step = nan_step ? strtoll(nan_step, NULL, 10) : 0;
    const char *fault_step = getenv("MT_TEST_DEVICE_FAULT_STEP");
    r->fault_step = fault_step ? strtoll(fault_step, NULL, 10) : 0;
    size_t n = (size_t)o->micro_batches * o->batch * o->seq_len;
    r->inputs = mt_malloc(n * sizeof *r->inputs, "a step's inputs");
    r->targets = mt_malloc(n * sizeof *r->targets, "a step's targets");
    if (!r->inputs || !r->targets) return MT_ERR_NOMEM;
    mt_log_info("%s backend, %.1fM parameters, %d x %d x %d tokens a step, run directory %s",
                r->be->ops->name, (double)mt_config_total_params(&r->cfg) / 1e6, o->micro_batches,
                o->batch, o->seq_len, o->out_dir);
    if (r->moments != MT_MOMENTS_F32)
        mt_log_info("Adam moments in %s (an option, not the default)", mt_moments_format_name(r->moments));
    if (r->engine_options.ends_on_device)
        mt_log_info("the %s backend updates the embedding and head itself (their fp32 masters and moments take "
                    "%.2f GB of its memory; --ends-on-device off leaves them to the host optimizer)", r->be->ops->name,
                    (double)mt_engine_size(r->be, &r->cfg, &r->engine_options).ends_state / 1e9);
    return MT_OK;
}

static void close_run(run *r) {
    free(r->inputs);
    free(r->targets);
    if (r->metrics) mt_metrics_close(r->metrics);
    mt_engine_destroy(r->engine);
    mt_saver_destroy(r->saver); /* after the engine: its optimizer calls the saver's guard */
    if (r->store.layout) mt_store_free(&r->store);
    if (r->be) mt_backend_destroy(r->be);
    if (r->tokens_open) mt_tokens_close(&r->tokens);
    if (r->layout.units) mt_layout_free(&r->layout);
}

/* ---- the loop's parts ---- */

/* Targets that carry loss (>= 0; a masked shard's context targets are -1). */
static int64_t loss_targets(const run *r) {
    size_t n = (size_t)r->o->micro_batches * r->o->batch * r->o->seq_len;
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) count += r->targets[i] >= 0;
    return count;
}

/* The mean loss over every target that carries loss in the first eval_batches validation
 * batches (each batch's mean weighted by its targets); NaN when none does. */
static mt_status validate(run *r, double *loss) {
    int sequences = r->o->micro_batches * r->o->batch;
    int64_t batches = mt_dataset_val_batches(&r->data, sequences);
    if (batches > r->o->eval_batches) batches = r->o->eval_batches;
    double sum = 0;
    int64_t counted = 0;
    for (int64_t i = 0; i < batches; i++) {
        double l;
        mt_dataset_val_batch(&r->data, i, sequences, r->inputs, r->targets);
        int64_t targets = loss_targets(r);
        if (targets == 0) continue;
        MT_TRY(mt_engine_eval(r->engine, r->inputs, r->targets, &l));
        sum += l * (double)targets;
        counted += targets;
    }
    *loss = counted ? sum / (double)counted : NAN;
    return MT_OK;
}

/* The state to save is the step's: every update applied, the sampler where it stands. */
static void capture_progress(run *r) {
    r->progress.adam_step = mt_engine_finish(r->engine);
    r->progress.sampler = r->data.state;
}

/* A periodic checkpoint's outcome: one that failed stops the run, unless
 * --continue-on-save-error, and the previous checkpoint stays valid either way. */
static mt_status report_save(run *r, mt_progress *pg, mt_status saved, int64_t step, const char *timing) {
    if (saved == MT_OK) {
        mt_progress_note(pg, "checkpoint at step %lld saved in %s: %s", (long long)step, r->o->out_dir, timing);
        return MT_OK;
    }
    if (!r->o->continue_on_save_error) return saved;
    mt_progress_note(pg, "step %lld: checkpoint NOT saved (%s); training goes on (--continue-on-save-error), "
                     "the previous checkpoint stays valid", (long long)step, mt_error());
    return MT_OK;
}

/* Waits for the checkpoint being written in the background, if any, and reports it. */
static mt_status collect_save(run *r, mt_progress *pg) {
    if (!r->saver || !mt_saver_in_flight(r->saver)) return MT_OK;
    mt_save_report rep;
    double t0 = mt_now();
    mt_status saved = mt_saver_wait(r->saver, &rep);
    double collect_seconds = mt_now() - t0;
    char timing[160];
    snprintf(timing, sizeof timing, "%.2f s writing, training waited %.2f s (the optimizer %.2f s, %.1f MB "
             "copied aside)", rep.write_seconds, rep.guard_seconds + collect_seconds, rep.guard_seconds,
             (double)rep.staged_bytes / 1e6);
    return report_save(r, pg, saved, rep.step, timing);
}

/* A periodic checkpoint: written while training goes on, or with --sync-save before it does. */
static mt_status save_periodic(run *r, mt_progress *pg) {
    capture_progress(r);
    if (r->saver) {
        mt_status started = mt_saver_start(r->saver, r->o->out_dir, &r->progress, r->o->keep);
        return started == MT_OK ? MT_OK : report_save(r, pg, started, r->progress.step, "");
    }
    double t0 = mt_now();
    mt_status saved = mt_run_save(r->o->out_dir, &r->store, &r->progress, r->o->keep);
    char timing[64];
    snprintf(timing, sizeof timing, "%.2f s writing, training waited all of it (--sync-save)", mt_now() - t0);
    return report_save(r, pg, saved, r->progress.step, timing);
}

/* After the loop, the background save in flight lands (or fails) before anything else is written.
 * A loop that failed keeps its own error; a failed save is then logged beside it. */
static mt_status settle_save(run *r, mt_progress *pg, mt_status rc) {
    char why[1024];
    snprintf(why, sizeof why, "%s", mt_error());
    mt_status collected = collect_save(r, pg);
    if (rc == MT_OK) return collected;
    if (collected != MT_OK) mt_log_error("%s", mt_error());
    return mt_fail(rc, "%s", why);
}

/* The last checkpoint, written before the run ends. */
static mt_status save_final(run *r) {
    capture_progress(r);
    double t0 = mt_now();
    MT_TRY(mt_run_save(r->o->out_dir, &r->store, &r->progress, r->o->keep));
    mt_log_info("checkpoint at step %lld saved in %s (%.2f s)", (long long)r->progress.step, r->o->out_dir,
                mt_now() - t0);
    return MT_OK;
}

static void draw_curve(const run *r) {
    char metrics[4096], svg[4096];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", r->o->out_dir);
    snprintf(svg, sizeof svg, "%s/loss.svg", r->o->out_dir);
    mt_curve train = {0}, val = {0};
    if (mt_metrics_load_curves(metrics, &train, &val) == MT_OK) {
        mt_plot_series series[] = {{"train", train.step, train.value, train.n, 0},
                                   {"validation", val.step, val.value, val.n, 1}};
        mt_plot_labels labels = {"megatrain: loss", "step", "cross-entropy (nats per token)"};
        if (mt_plot_svg(svg, &labels, series, val.n ? 2 : 1) != MT_OK)
            mt_log_warn("loss picture not updated: %s", mt_error());
    }
    mt_curve_free(&train);
    mt_curve_free(&val);
}

/* JSON has no NaN or Inf (jansson refuses them): a non-finite number is logged as null. */
static json_t *number_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static mt_status log_step(run *r, const mt_step_result *s, float lr, double tok_s, double elapsed) {
    json_t *ev = json_pack("{s:I, s:o, s:f, s:o, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "step",
                           (json_int_t)r->progress.step, "loss", number_or_null(s->loss), "lr", (double)lr,
                           "grad_norm", number_or_null(s->grad_norm), "skipped", s->skipped, "step_seconds",
                           s->seconds, "tokens_per_s", tok_s, "elapsed_s", elapsed, "opt_seconds", s->opt_seconds,
                           "opt_seconds_per_block", s->opt_seconds_per_block, "wait_opt_seconds",
                           s->wait_opt_seconds, "stall_seconds", s->stall_seconds, "compute_seconds",
                           s->compute_seconds);
    if (!ev) return mt_fail(MT_ERR_NOMEM, "cannot build a metrics line");
    mt_status rc = mt_metrics_log(r->metrics, ev);
    json_decref(ev);
    return rc;
}

static mt_status log_val(run *r, double loss) {
    json_t *ev = json_pack("{s:I, s:f}", "step", (json_int_t)r->progress.step, "val_loss", loss);
    if (!ev) return mt_fail(MT_ERR_NOMEM, "cannot build a metrics line");
    mt_status rc = mt_metrics_log(r->metrics, ev);
    json_decref(ev);
    return rc;
}

static mt_status loop(run *r, mt_progress *pg) {
    const mt_train_options *o = r->o;
    int sequences = o->micro_batches * o->batch;
    double tokens_per_step = (double)sequences * o->seq_len;
    while (r->progress.step < o->steps && !stop_requested) {
        float lr = mt_lr_at(&r->schedule, r->progress.step + 1);
        mt_dataset_train_batch(&r->data, sequences, r->inputs, r->targets);
        /* A step whose every target is masked has no loss to take the mean of: it is skipped
         * (no update, the Adam step count unchanged), not counted as a non-finite skip. */
        int no_targets = loss_targets(r) == 0;
        mt_step_result s = {.loss = NAN, .grad_norm = NAN, .skipped = 1};
        if (!no_targets) {
            /* Test hook MT_TEST_NAN_STEP=N: step N (1-based) gets a NaN gradient, to test skipping. */
            if (r->progress.step + 1 == r->nan_step) mt_engine_poison_next_step(r->engine);
            /* Test hook MT_TEST_DEVICE_FAULT_STEP=N: step N fails as on a device error. */
            if (r->progress.step + 1 == r->fault_step) mt_engine_fault_next_step(r->engine);
            MT_TRY(mt_engine_step(r->engine, r->inputs, r->targets, lr, &s));
        }
        r->progress.step++;
        if (no_targets)
            mt_progress_note(pg, "step %lld skipped: every target of its windows is masked (no loss)",
                             (long long)r->progress.step);
        else if (s.skipped)
            mt_progress_note(pg, "step %lld skipped: gradient norm %g", (long long)r->progress.step, s.grad_norm);
        mt_progress_step(pg, r->progress.step, s.loss, tokens_per_step, lr);
        MT_TRY(log_step(r, &s, lr, mt_progress_tokens_per_second(pg), mt_now() - pg->started));
        if (!no_targets) MT_TRY(mt_step_watch_after(&r->watch, r->progress.step, s.loss, s.skipped));
        /* A background save is reported (and its failure acted on) as soon as it is through. */
        if (r->saver && mt_saver_landed(r->saver)) MT_TRY(collect_save(r, pg));
        int last = r->progress.step == o->steps;
        if (o->eval_every > 0 && (r->progress.step % o->eval_every == 0 || last)) {
            double val;
            MT_TRY(validate(r, &val));
            if (!isnan(val)) {
                MT_TRY(log_val(r, val));
                mt_progress_note(pg, "step %lld: validation loss %.4f", (long long)r->progress.step, val);
            }
            draw_curve(r);
        }
        if (o->ckpt_every > 0 && r->progress.step % o->ckpt_every == 0 && !last) {
            MT_TRY(collect_save(r, pg));
            MT_TRY(save_periodic(r, pg));
        }
    }
    return MT_OK;
}

mt_status mt_train(const mt_train_options *o) {
    run r = {.o = o};
    struct sigaction old_int, old_term;
    install_signals(&old_int, &old_term);
    mt_status rc = open_run(&r);
    if (rc == MT_OK) {
        mt_progress pg;
        mt_progress_start(&pg, o->progress, r.progress.step, o->steps);
        rc = loop(&r, &pg);
        rc = settle_save(&r, &pg, rc);
        mt_progress_finish(&pg);
        if (rc == MT_OK || rc == MT_ERR_NUMERIC) {
            mt_status saved = save_final(&r);
            if (rc == MT_OK) rc = saved;
        }
        draw_curve(&r);
        if (rc == MT_OK && stop_requested) mt_log_info("stopped on request at step %lld", (long long)r.progress.step);
    }
    close_run(&r);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
