/* mt_train: the training job. Takes the run directory's lock, resolves the run's settings (on
 * resume, from its checkpoint), the model and the data, builds the store and the engine, and runs
 * the loop: steps, validation, metrics, the loss picture, checkpoints (train_saves.c), a stop for
 * divergence that names the checkpoint to resume from, and a clean stop on SIGINT, SIGTERM or
 * SIGHUP. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/masked_tokens.h"
#include "io/plot.h"
#include "train/option_table.h"
#include "train/options.h"
#include "train/run_dir.h"
#include "train/run_file.h"
#include "train/run_inputs.h"
#include "train/settings.h"
#include "train/train_data.h"
#include "train/train_run.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/host_memory.h"
#include "util/log.h"
#include "util/stop_signal.h"

/* ---- where the run starts from ---- */

/* --resume: the newest good checkpoint. A new or empty run directory starts the run from scratch,
 * so that one command line both starts a run and continues it after a crash; one that holds a
 * run's files but no checkpoint (a mistyped --out, checkpoints deleted), or whose checkpoints are
 * all damaged or bad, is refused rather than silently started over. */
static mt_status find_resume_point(mt_train_run *r, const mt_train_options *given) {
    const char *out_dir = given->out_dir;
    mt_ckpt_entry *entries;
    int count;
    MT_TRY(mt_checkpoint_list(out_dir, &entries, &count));
    mt_checkpoint_list_free(entries, count);
    if (count > 0) return mt_run_latest_of(out_dir, given->resume_diverged, r->resume_from, sizeof r->resume_from);
    if (!mt_run_dir_is_empty(&r->dir))
        return mt_fail(MT_ERR_INVALID, "--resume: %s holds no checkpoint to resume, but files of a run: give the --out "
                       "of the run to continue, or leave out --resume to start the run afresh there", out_dir);
    mt_log_info("%s holds no checkpoint yet: --resume starts the run from scratch", out_dir);
    return MT_OK;
}

/* A fresh run never trains over another run's checkpoints, nor into a directory of other files. */
static mt_status refuse_existing_run(mt_train_run *r, const char *out_dir) {
    mt_ckpt_entry *entries;
    int count;
    MT_TRY(mt_checkpoint_list(out_dir, &entries, &count));
    int64_t newest = count > 0 ? entries[0].step : 0;
    mt_checkpoint_list_free(entries, count);
    if (count > 0)
        return mt_fail(MT_ERR_INVALID, "%s already holds a run (newest checkpoint: step %lld): pass --resume to "
                       "continue it, or choose another --out", out_dir, (long long)newest);
    return mt_run_dir_check_fresh(&r->dir);
}

/* A path option made absolute (into buf) where it is set: a run stores its inputs' absolute paths,
 * so that a resume from another working directory reads the same files. */
static mt_status absolute(const char **path, char *buf, size_t cap) {
    if (!*path || (*path)[0] == '/') return MT_OK;
    MT_TRY(mt_path_absolute(*path, buf, cap));
    *path = buf;
    return MT_OK;
}

/* The same for a comma-separated list of files (--val-data; --data's datasets, whose :WEIGHT stays
 * on its path), `option` named in its refusal. */
static mt_status absolute_list(const char *option, const char **list, char *buf, size_t cap) {
    if (!*list) return MT_OK;
    size_t at = 0;
    buf[0] = '\0';
    for (const char *p = *list; *p;) {
        size_t n = strcspn(p, ",");
        char one[4096], abs[4096];
        snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one - 1 ? n : sizeof one - 1), p);
        MT_TRY(mt_path_absolute(one, abs, sizeof abs));
        int w = snprintf(buf + at, cap - at, "%s%s", at ? "," : "", abs);
        if (w < 0 || (size_t)w >= cap - at)
            return mt_fail(MT_ERR_INVALID, "--%s %s: the paths are too long", option, *list);
        at += (size_t)w;
        p += n + (p[n] == ',');
    }
    *list = buf;
    return MT_OK;
}

/* The options with every run setting resolved: the checkpoint's settings on resume (changes
 * applied or refused), the defaults otherwise. */
static mt_status resolve_settings(mt_train_run *r, const mt_train_options *given) {
    int64_t step = 0;
    if (r->resume_from[0]) MT_TRY(mt_run_read_info(r->resume_from, &step, &r->saved_settings));
    /* The tokenizer is stored, and compared on resume, as an absolute path. */
    mt_train_options named = *given;
    if (named.tokenizer) {
        MT_TRY(mt_train_tokenizer_resolve(&named, r->tokenizer, sizeof r->tokenizer));
        named.tokenizer = r->tokenizer;
    }
    MT_TRY(absolute_list("data", &named.data_path, r->data_path, sizeof r->data_path));
    MT_TRY(absolute(&named.init_from, r->init_from, sizeof r->init_from));
    MT_TRY(absolute(&named.config_path, r->config_path, sizeof r->config_path));
    MT_TRY(absolute(&named.chat_template, r->chat_template, sizeof r->chat_template));
    MT_TRY(absolute_list("val-data", &named.val_data, r->val_data, sizeof r->val_data));
    /* Validation files of its own: a new run holds none of its training data out unless asked. */
    if (named.val_data && isnan(named.val_fraction) && !r->resume_from[0]) named.val_fraction = 0;
    MT_TRY(mt_settings_resolve(&named, r->saved_settings, r->resume_from, &r->o));
    if (!r->resume_from[0]) mt_settings_log_defaults(&named, &r->o);
    /* The default data, or a relative path a checkpoint stored before paths were made absolute. */
    if (r->o.data_path != r->data_path)
        MT_TRY(absolute_list("data", &r->o.data_path, r->data_path, sizeof r->data_path));
    if (r->o.val_data != r->val_data)
        MT_TRY(absolute_list("val-data", &r->o.val_data, r->val_data, sizeof r->val_data));
    /* None named or stored: the --init-from directory's, when it has one. A run that stored
     * none (bytes) keeps none. */
    if (!r->o.tokenizer && !(r->saved_settings && json_object_get(r->saved_settings, "tokenizer"))) {
        MT_TRY(mt_train_tokenizer_resolve(&r->o, r->tokenizer, sizeof r->tokenizer));
        if (r->tokenizer[0]) r->o.tokenizer = r->tokenizer;
    }
    MT_TRY(mt_train_options_check(&r->o));
    if (given->steps != MT_UNSET && !isnan(given->epochs))
        return mt_fail(MT_ERR_INVALID, "--steps %lld and --epochs %g: give one of them", (long long)given->steps,
                       given->epochs);
    if (given->steps != MT_UNSET) r->o.epochs = MT_UNSET_NUMBER; /* a resumed --epochs run given --steps */
    if (isnan(r->o.epochs) && r->o.steps < step)
        return mt_fail(MT_ERR_INVALID, "--steps %lld: %s is at step %lld already; give --steps %lld or more to "
                       "continue the run", (long long)r->o.steps, r->resume_from, (long long)step, (long long)step);
    r->settings = mt_settings_to_json(&r->o);
    return r->settings ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot build the run's settings");
}

/* What identifies each input is kept in the run's settings; a resumed run's inputs must be the
 * ones its checkpoint kept (train/run_inputs.h). Before the data is tokenized or read. */
static mt_status identify_inputs(mt_train_run *r, const mt_train_options *given) {
    json_t *inputs;
    MT_TRY(mt_run_inputs_identify(&r->o, &inputs));
    mt_status st = r->resume_from[0] ? mt_run_inputs_check(r->saved_settings, inputs, given, r->resume_from,
                                                           &r->data_changed)
                                     : MT_OK;
    if (st == MT_OK && json_object_set_new(r->settings, "inputs", inputs) != 0)
        return mt_fail(MT_ERR_NOMEM, "cannot build the run's settings");
    if (st != MT_OK) json_decref(inputs);
    return st;
}

/* 1 when both configs describe the same model. */
/* The config.json fields in which the model asked for differs from the run's, "num_experts_per_tok
 * 4 (the run's: 2), ..." into buf[cap] (some of them, when many); 0 when they are the same model. */
static int model_differences(const mt_config *asked, const mt_config *run, char *buf, size_t cap) {
    json_t *x = mt_hf_config_to_json(asked, "float32"), *y = mt_hf_config_to_json(run, "float32");
    int n = !x || !y;
    size_t at = 0;
    buf[0] = '\0';
    const char *key;
    json_t *v;
    json_t *keys = json_object();
    if (x) json_object_update(keys, x);
    if (y) json_object_update(keys, y);
    json_object_foreach(keys, key, v) {
        const json_t *a = x ? json_object_get(x, key) : NULL, *b = y ? json_object_get(y, key) : NULL;
        if (a && b && json_equal(a, b)) continue;
        char *ta = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *tb = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        if (n < 6 && at < cap)
            at += (size_t)snprintf(buf + at, cap - at, "%s%s %s (the run's: %s)", n ? ", " : "", key, ta ? ta : "none",
                                   tb ? tb : "none");
        n++;
        free(ta);
        free(tb);
    }
    json_decref(keys);
    json_decref(x);
    json_decref(y);
    return n;
}

/* The model: the checkpoint's on resume, where a model given as well must be the same one. */
static mt_status resolve_model(mt_train_run *r, const mt_train_options *given) {
    if (!r->resume_from[0]) return mt_train_model_config(&r->o, &r->cfg);
    MT_TRY(mt_run_load_config(r->resume_from, &r->cfg));
    mt_config asked = r->cfg;
    if (given->preset || given->config_path || given->init_from) MT_TRY(mt_train_model_config(given, &asked));
    else if (mt_train_model_changed(given)) mt_train_model_change(given, &asked); /* on the run's own model */
    else return MT_OK;
    char differences[2048];
    if (!model_differences(&asked, &r->cfg, differences, sizeof differences)) return MT_OK;
    mt_config context_only = r->cfg;
    context_only.max_position = asked.max_position, context_only.rope_theta = asked.rope_theta;
    char ignored[64];
    if (!model_differences(&asked, &context_only, ignored, sizeof ignored))
        return mt_fail(MT_ERR_INVALID, "%s is a run with max_position_embeddings %d and rope_theta %g, which a "
                       "resumed run cannot change (asked: %d, %g); to train on at a longer context, export it "
                       "and start a new run with --init-from", r->resume_from, r->cfg.max_position,
                       (double)r->cfg.rope_theta, asked.max_position, (double)asked.rope_theta);
    mt_train_options none = mt_train_defaults(), stored;
    mt_status st = mt_settings_resolve(&none, r->saved_settings, r->resume_from, &stored);
    char wanted[4200], had[4200];
    mt_settings_model_source(given, wanted, sizeof wanted);
    if (st == MT_OK) mt_settings_model_source(&stored, had, sizeof had);
    else snprintf(had, sizeof had, "its own");
    return mt_fail(MT_ERR_INVALID, "%s: %s is a run of another model (%s: %d layers, hidden size %d, vocabulary %d; "
                   "asked: %s), which a resumed run cannot change; leave the model options out to keep it, or start "
                   "a new run in another --out", wanted, r->resume_from, had, r->cfg.num_layers, r->cfg.hidden_size,
                   r->cfg.vocab_size, differences);
}

/* ---- opening a run ---- */

/* Loading progress: redrawn in place on a terminal, one line at the end otherwise. */
static void print_loading(int64_t done, int64_t total, void *user) {
    const mt_train_run *r = user;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    if (r->o.progress)
        fprintf(stderr, "\rloading %s: %.0f%% of %.2f GB%s", r->o.init_from, pct, (double)total / 1e9,
                done == total ? "\n" : "");
    else if (done == total)
        mt_log_info("loaded %s: %.2f GB (the process's peak resident memory so far: %.2f GB)", r->o.init_from,
                    (double)total / 1e9, (double)mt_host_memory_peak() / 1e9);
}

static void into_store(void *store, int64_t at, const float *values, int64_t n) {
    mt_store_write_masters(store, at, (size_t)n, values);
}

static mt_status init_weights(mt_train_run *r) {
    if (r->resume_from[0]) {
        MT_TRY(mt_run_load(r->resume_from, &r->store, &r->progress));
        mt_log_info("resumed from %s at step %lld", r->resume_from, (long long)r->progress.step);
        return MT_OK;
    }
    if (r->o.init_from)
        return mt_hf_load_weights_into(r->o.init_from, &r->layout, into_store, &r->store, print_loading, r);
    mt_store_init_random(&r->store, (uint64_t)r->o.seed);
    return MT_OK;
}

/* A run must have something to learn: data whose every window (packed: every example within
 * --seq) holds no target that carries loss would skip every step and end "saved" with nothing
 * trained, so it is refused up front; some such windows are counted in a warning. */
static mt_status check_targets(mt_train_run *r) {
    const mt_dataset *d = &r->data;
    const char *name = r->o.data_path, *what = d->examples ? "examples" : "windows";
    int seq = r->o.seq_len;
    uint64_t empty, total;
    mt_dataset_count_without_loss(d, &empty, &total);
    int val = d->val_tokens > 1 && mt_tokens_any_loss(&r->tokens, d->train_tokens + 1, d->val_tokens - 1);
    MT_TRY(mt_tokens_status(&r->tokens));
    if (empty == total)
        return mt_fail(MT_ERR_INVALID, "%s: none of the training split's %llu %s carries loss within --seq %d: every "
                       "target is masked, so there is nothing to train on (%s); %s", name,
                       (unsigned long long)total, what, seq,
                       d->examples ? "one-token examples, examples without an answer, or answers that start past "
                       "their first --seq tokens" : "chat data whose answers are all empty, or that has no "
                       "assistant turn",
                       d->examples ? "raise --seq, or give examples whose answers fall within it" :
                       "give data with answers to learn");
    if (empty > 0)
        mt_log_warn("%s: %llu of the training split's %llu %s carry no loss within --seq %d (%s): a step drawing "
                    "only such %s is skipped; raise --seq or drop them", name, (unsigned long long)empty,
                    (unsigned long long)total, what, seq, d->examples ? "their first --seq tokens hold no answer "
                    "token" : "no target in them carries loss", what);
    if (d->val_tokens > 0 && !val && r->o.eval_every > 0)
        mt_log_warn("%s: no token of its validation split carries loss: there will be no validation loss", name);
    return MT_OK;
}

/* The run's settings made again from its options, the identities of its inputs kept. */
static mt_status refresh_settings(mt_train_run *r) {
    json_t *inputs = json_incref(json_object_get(r->settings, "inputs")); /* identify_inputs' */
    json_decref(r->settings);
    r->settings = mt_settings_to_json(&r->o);
    if (r->settings && (!inputs || json_object_set_new(r->settings, "inputs", inputs) == 0)) return MT_OK;
    if (!r->settings) json_decref(inputs);
    return mt_fail(MT_ERR_NOMEM, "cannot build the run's settings");
}

/* The token file, opened and checked (ids, splits, targets) before the model's memory is
 * allocated. */
static mt_status open_tokens(mt_train_run *r, const mt_train_options *given) {
    const char *path = r->o.data_path, *demo = mt_option_find("data")->default_name;
    char demo_path[4096];
    MT_TRY(mt_path_absolute(demo, demo_path, sizeof demo_path));
    /* The demo corpus by default only: data the user named is named as theirs. */
    if (!given->data_path && !strcmp(path, demo_path) && access(path, R_OK) != 0)
        return mt_fail(MT_ERR_INVALID, "%s: the demo corpus is missing; make it with "
                       "'scripts/make-demo-corpus.sh %s' (needs the bible-kjv packages) or pass --data",
                       demo, demo);
    MT_TRY(identify_inputs(r, given));
    char tokens[8192];
    MT_TRY(mt_train_data_resolve(&r->o, (uint32_t)r->cfg.vocab_size, tokens, sizeof tokens));
    MT_TRY(mt_tokens_open(tokens, &r->tokens));
    MT_TRY(mt_tokens_validate(&r->tokens, (uint32_t)r->cfg.vocab_size, tokens));
    /* The windows' layout, now that the data says what it is, is a run setting: stored resolved. */
    MT_TRY(mt_train_data_layout(&r->o, &r->tokens, path, &r->eot));
    return refresh_settings(r);
}

/* The packing's numbers: one line, and a warning for the examples it cut. */
static void report_packing(const mt_train_run *r) {
    const mt_pack_report *p = &r->data.report;
    int seq = r->o.seq_len;
    mt_log_info("%s: %zu examples packed whole into %zu windows of %d tokens an epoch, attention masked between "
                "them: %.1f%% of the windows' tokens are padding", r->o.data_path, p->examples, p->windows, seq,
                p->windows ? 100.0 * (double)p->padding / ((double)p->windows * seq) : 0.0);
    if (p->val_windows)
        mt_log_info("validation: %zu examples in %zu windows (%.1f%% padding)", p->val_examples, p->val_windows,
                    100.0 * (double)p->val_padding / ((double)p->val_windows * seq));
    if (p->truncated)
        mt_log_warn("%zu examples are longer than --seq %d (the longest has %llu tokens): each trains on its first %d "
                    "tokens, %zu of them on none that carries loss (--long-examples refuse stops instead)",
                    p->truncated, seq, (unsigned long long)p->longest, seq, p->truncated_no_loss);
}

/* The windows, before the model's memory is allocated (their refusals come first); a resumed run's
 * sampler state is restored once its checkpoint is read. */
static mt_status open_dataset(mt_train_run *r) {
    const mt_train_options *o = &r->o;
    mt_sample_order order = o->sequential ? MT_SAMPLE_SEQUENTIAL : MT_SAMPLE_RANDOM;
    if (!strcmp(o->packing, "on")) {
        mt_long_examples long_examples = !strcmp(o->long_examples, "refuse") ? MT_LONG_REFUSE : MT_LONG_TRUNCATE;
        MT_TRY(mt_dataset_init_packed(&r->data, &r->tokens, o->val_fraction, o->seq_len, order, (uint64_t)o->seed,
                                      long_examples, o->data_path));
        report_packing(r);
    } else {
        MT_TRY(mt_dataset_init(&r->data, &r->tokens, o->val_fraction, o->seq_len, order, (uint64_t)o->seed));
        if (r->eot >= 0) {
            mt_dataset_doc_mask(&r->data, r->eot);
            mt_log_info("documents masked: attention and positions restart after each end-of-text token (id %d)",
                        r->eot);
        }
    }
    return check_targets(r);
}

/* The sampler where the resumed checkpoint left it; on other data (a changed file taken with
 * --accept-changed-data) a place the new data does not have starts a new epoch. */
static mt_status restore_sampler(mt_train_run *r) {
    if (!r->resume_from[0]) return MT_OK;
    mt_sampler_state *s = &r->progress.sampler;
    mt_status rc = mt_dataset_set_state(&r->data, s);
    if (rc == MT_OK || !r->data_changed) return rc;
    mt_log_info("the run's place in its data is not in the changed data (%s): a new epoch starts", mt_error());
    s->cursor = 0;
    s->epoch++;
    return mt_dataset_set_state(&r->data, s);
}

/* The validation windows of `data` an evaluation covers: those of its first eval_batches batches
 * (the last of them may be partial). */
static size_t val_windows(const mt_train_run *r, const mt_dataset *data) {
    size_t sequences = (size_t)mt_devices_ranks(&r->dev, &r->o) * r->o.micro_batches * r->o.batch;
    size_t windows = mt_dataset_val_windows(data), most = sequences * (size_t)r->o.eval_batches;
    return windows < most ? windows : most;
}

/* Which validation each evaluation runs, or why there is none. */
static void report_validation(const mt_train_run *r) {
    const mt_train_options *o = &r->o;
    if (o->eval_every == 0) return;
    size_t held = mt_dataset_val_windows(&r->data);
    if (held)
        mt_log_info("validation every %lld steps: %zu of the %zu windows held out of the training data "
                    "(--val-fraction %g, --eval-batches %lld)", (long long)o->eval_every, val_windows(r, &r->data),
                    held, o->val_fraction, (long long)o->eval_batches);
    for (int i = 0; i < r->n_val; i++)
        mt_log_info("validation every %lld steps: %zu of the %zu windows of %s (%s)", (long long)o->eval_every,
                    val_windows(r, &r->val[i].data), mt_dataset_val_windows(&r->val[i].data), r->val[i].name,
                    r->val[i].key);
    if (!held && r->n_val)
        mt_log_info("none of the training data is held out for validation (--val-data is given: --val-fraction "
                    "holds a part out too)");
    if (!held && !r->n_val)
        mt_log_warn("no validation: --val-fraction 0 holds none of the training data out and no --val-data is "
                    "given");
}

/* A --val-data file's metric names it by its base name ("val_loss/chat_val.jsonl"); two files of
 * one base name would share it, so they are refused. */
static mt_status name_val_metric(mt_train_run *r, int i) {
    const char *slash = strrchr(r->val[i].name, '/');
    snprintf(r->val[i].key, sizeof r->val[i].key, "val_loss/%s", slash ? slash + 1 : r->val[i].name);
    for (int k = 0; k < i; k++)
        if (!strcmp(r->val[k].key, r->val[i].key))
            return mt_fail(MT_ERR_INVALID, "--val-data: %s and %s have one base name, which names their validation "
                           "loss (%s): give files of different names", r->val[k].name, r->val[i].name, r->val[i].key);
    return MT_OK;
}

/* The run's steps, now that its data and its place in it are known: --epochs' (that many passes
 * over the training windows, rounded up to whole steps), and a fresh fine-tuning run's warmup set
 * from them; the schedule follows. */
static mt_status settle_steps(mt_train_run *r) {
    mt_train_options *o = &r->o;
    if (!isnan(o->epochs)) {
        double per_epoch = mt_dataset_epoch_windows(&r->data);
        int sequences = mt_devices_ranks(&r->dev, o) * o->micro_batches * o->batch;
        o->steps = (int64_t)ceil(o->epochs * per_epoch / sequences - 1e-9);
        mt_log_info("--epochs %g: %.6g training windows an epoch, %d a step: %lld steps", o->epochs, per_epoch,
                    sequences, (long long)o->steps);
        if (o->steps < r->progress.step)
            return mt_fail(MT_ERR_INVALID, "--epochs %g: %lld steps, but %s is at step %lld already", o->epochs,
                           (long long)o->steps, r->resume_from, (long long)r->progress.step);
    }
    if (!r->resume_from[0]) mt_settings_finetune_warmup(o);
    r->schedule.total_steps = o->steps;
    r->schedule.warmup_steps = mt_settings_warmup(o);
    MT_TRY(mt_lr_schedule_validate(&r->schedule));
    return refresh_settings(r);
}

/* The --val-data files, each tokenized as --data is (cached in the run directory) and read whole
 * as validation windows in the run's layout: packed examples where the run packs and the file
 * records them, else windows of its stream, documents masked with --doc-mask; an error names the
 * file. */
static mt_status open_val_files(mt_train_run *r) {
    for (const char *p = r->o.val_data; p && *p;) {
        size_t n = strcspn(p, ",");
        if (r->n_val == MT_MAX_VAL_FILES)
            return mt_fail(MT_ERR_INVALID, "--val-data: more than %d files", MT_MAX_VAL_FILES);
        char *name = r->val[r->n_val].name, tokens[8192];
        snprintf(name, sizeof r->val[0].name, "%.*s", (int)n, p);
        p += n + (p[n] == ',');
        MT_TRY(name_val_metric(r, r->n_val));
        mt_train_options as_data = r->o;
        as_data.data_path = name;
        mt_status st = mt_train_data_resolve(&as_data, (uint32_t)r->cfg.vocab_size, tokens, sizeof tokens);
        if (st == MT_OK) st = mt_tokens_open(tokens, &r->val[r->n_val].tokens);
        if (st != MT_OK) return mt_fail_context(st, "--val-data %s", name);
        r->n_val++;
        st = mt_tokens_validate(&r->val[r->n_val - 1].tokens, (uint32_t)r->cfg.vocab_size, tokens);
        mt_dataset *data = &r->val[r->n_val - 1].data;
        const mt_tokens *val = &r->val[r->n_val - 1].tokens;
        const uint64_t *starts;
        int packed = !strcmp(r->o.packing, "on") && mt_tokens_examples(val, &starts) > 0;
        mt_long_examples long_examples = !strcmp(r->o.long_examples, "refuse") ? MT_LONG_REFUSE : MT_LONG_TRUNCATE;
        if (st == MT_OK) st = mt_dataset_init_val_only(data, val, r->o.seq_len, packed, long_examples, name);
        if (st != MT_OK) return mt_fail_context(st, "--val-data %s", name);
        if (r->eot >= 0) mt_dataset_doc_mask(data, r->eot);
    }
    return MT_OK;
}

static mt_status open_engine(mt_train_run *r) {
    MT_TRY(mt_devices_start(&r->dev, &r->store, &r->placement.eo, r->progress.adam_step));
    mt_engine_set_update_ahead(r->dev.engine, r->progress.update_ahead);
    if (r->o.sync_save || !mt_devices_writes(&r->dev)) return MT_OK;
    MT_TRY(mt_saver_create(&r->saver, &r->store, r->o.save_staging));
    mt_engine_set_update_guard(r->dev.engine, mt_saver_guard, r->saver);
    for (int u = 0; u < r->layout.num_units; u++)
        if (!mt_engine_updates_on_host(r->dev.engine, u)) mt_saver_skip_staging(r->saver, u);
    /* Test hook MT_TEST_SAVE_UNIT_MS=N: background saves pause N ms before each unit. */
    const char *slow = getenv("MT_TEST_SAVE_UNIT_MS");
    if (slow) mt_saver_slow_down(r->saver, strtod(slow, NULL) / 1e3);
    return MT_OK;
}

/* The step's shape against the model, and the learning-rate schedule. */
static mt_status plan_steps(mt_train_run *r) {
    const mt_train_options *o = &r->o;
    if (o->seq_len > r->cfg.max_position)
        return mt_fail(MT_ERR_INVALID, "--seq %d is past the model's max_position_embeddings (%d)",
                       o->seq_len, r->cfg.max_position);
    r->schedule = (mt_lr_schedule){.max_lr = o->lr, .warmup_steps = mt_settings_warmup(o),
                                   .total_steps = o->steps, .min_lr_ratio = o->min_lr_ratio};
    MT_TRY(mt_lr_kind_parse(o->schedule, &r->schedule.kind));
    MT_TRY(mt_lr_schedule_validate(&r->schedule));
    return mt_moments_format_parse(o->moments, &r->moments);
}

/* The run's memory plan for its options, refused before anything is allocated where it cannot fit. */
static mt_status plan_memory(mt_train_run *r) {
    MT_TRY(mt_train_placement(&r->o, r->dev.be, &r->cfg, &r->placement, NULL));
    return mt_devices_check_memory(&r->dev, &r->layout, &r->placement.eo, r->moments);
}

static mt_status open_run(mt_train_run *r, const mt_train_options *given) {
    MT_TRY(mt_train_options_check(given));
    mt_host_memory_give(given->host_mem);
    MT_TRY(mt_devices_world(&r->dev));
    MT_TRY(mt_run_dir_take(&r->dir, given->out_dir, mt_devices_writes(&r->dev)));
    if (given->resume) MT_TRY(find_resume_point(r, given));
    else MT_TRY(refuse_existing_run(r, given->out_dir));
    MT_TRY(resolve_settings(r, given));
    MT_TRY(resolve_model(r, given));
    MT_TRY(mt_layout_init(&r->layout, &r->cfg));
    MT_TRY(plan_steps(r));
    const mt_train_options *o = &r->o;
    MT_TRY(mt_devices_open(&r->dev, o));
    MT_TRY(plan_memory(r));
    MT_TRY(open_tokens(r, given));
    MT_TRY(open_dataset(r));
    /* The data resolved --packing: an engine that takes positions needs a little more memory. */
    if (r->placement.eo.packed != mt_train_segmented(o)) MT_TRY(plan_memory(r));
    MT_TRY(mt_engine_store_create(&r->store, &r->layout, r->dev.be, r->moments, &r->placement.eo));
    MT_TRY(init_weights(r));
    MT_TRY(restore_sampler(r));
    MT_TRY(settle_steps(r));
    MT_TRY(open_val_files(r));
    report_validation(r);
    MT_TRY(open_engine(r));
    if (mt_devices_writes(&r->dev)) {
        MT_TRY(mt_metrics_open(o->out_dir, r->progress.step, &r->metrics));
        char run_file[4200];
        snprintf(run_file, sizeof run_file, "%s/run.yaml", o->out_dir);
        MT_TRY(mt_run_file_write(run_file, o));
    }
    mt_step_watch_init(&r->watch, o->max_skips, o->diverge_after, r->cfg.vocab_size, r->progress.step,
                       r->resume_from[0] ? r->progress.step : -1);
    const char *nan_step = getenv("MT_TEST_NAN_STEP");
    r->nan_step = nan_step ? strtoll(nan_step, NULL, 10) : 0;
    const char *fault_step = getenv("MT_TEST_DEVICE_FAULT_STEP");
    r->fault_step = fault_step ? strtoll(fault_step, NULL, 10) : 0;
    const char *rank_fail_step = getenv("MT_TEST_RANK_FAIL_STEP");
    r->rank_fail_step = rank_fail_step && r->dev.ranks ? strtoll(rank_fail_step, NULL, 10) : 0;
    size_t n = (size_t)mt_devices_ranks(&r->dev, o) * o->micro_batches * o->batch * o->seq_len;
    r->inputs = mt_malloc(n * sizeof *r->inputs, "a step's inputs");
    r->targets = mt_malloc(n * sizeof *r->targets, "a step's targets");
    if (!r->inputs || !r->targets) return MT_ERR_NOMEM;
    if (mt_dataset_segmented(&r->data) && !(r->positions = mt_malloc(n * sizeof *r->positions, "a step's positions")))
        return MT_ERR_NOMEM;
    const mt_engine_options *eo = &r->placement.eo;
    mt_log_info("%s backend, %.1fM parameters, %d x %d x %d tokens a step%s, run directory %s",
                r->dev.be->ops->name, (double)mt_config_total_params(&r->cfg) / 1e6, eo->micro_batches, eo->batch,
                eo->seq, r->dev.ranks ? " on each rank" : "", o->out_dir);
    char where[768];
    mt_placement_describe(&r->placement, where, sizeof where);
    mt_log_info("plan: %s (megatrain plan prints it in full)", where);
    if (r->dev.world.size > 1)
        mt_log_info("rank %d of %d processes (LOCAL_RANK %d), each with its own store; %s", r->dev.world.rank,
                    r->dev.world.size, r->dev.world.local_rank, mt_devices_writes(&r->dev) ? "this one writes the "
                    "run directory" : "rank 0 writes the run directory");
    if (r->dev.ranks) mt_log_info("%d ranks on one host store (%s)", o->gpus, strcmp(r->dev.be->ops->name, "cpu") ?
                              "one GPU each" : "threads of the cpu backend");
    if (r->moments != MT_MOMENTS_F32)
        mt_log_info("Adam moments in %s (an option, not the default)", mt_moments_format_name(r->moments));
    return MT_OK;
}

static void close_run(mt_train_run *r) {
    free(r->inputs);
    free(r->targets);
    free(r->positions);
    mt_dataset_free(&r->data);
    if (r->metrics) mt_metrics_close(r->metrics);
    mt_devices_stop(&r->dev);
    mt_saver_destroy(r->saver); /* after the engine: its optimizer calls the saver's guard */
    if (r->store.layout) mt_store_free(&r->store);
    mt_devices_close(&r->dev);
    mt_tokens_close(&r->tokens);
    for (int i = 0; i < r->n_val; i++) {
        mt_dataset_free(&r->val[i].data);
        mt_tokens_close(&r->val[i].tokens);
    }
    if (r->layout.units) mt_layout_free(&r->layout);
    json_decref(r->settings);
    json_decref(r->saved_settings);
    mt_run_dir_release(&r->dir); /* last: the run directory is no longer written */
}

/* ---- the loop's parts ---- */

/* Targets that carry loss (>= 0; a masked shard's context targets are -1). */
static int64_t loss_targets(const mt_train_run *r) {
    size_t n = (size_t)mt_devices_ranks(&r->dev, &r->o) * r->o.micro_batches * r->o.batch * r->o.seq_len;
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) count += r->targets[i] >= 0;
    return count;
}

/* The mean loss over every target that carries loss in the first eval_batches validation
 * batches of `data` (each batch's mean weighted by its targets); NaN when none does. */
static mt_status validate(mt_train_run *r, const mt_dataset *data, const mt_tokens *tokens, double *loss) {
    int sequences = mt_devices_ranks(&r->dev, &r->o) * r->o.micro_batches * r->o.batch;
    int64_t batches = mt_dataset_val_batches(data, sequences);
    if (batches > r->o.eval_batches) batches = r->o.eval_batches;
    *loss = NAN;
    double sum = 0;
    int64_t counted = 0;
    for (int64_t i = 0; i < batches; i++) {
        double l;
        mt_dataset_val_batch(data, i, sequences, r->inputs, r->targets, r->positions);
        r->data_failed = mt_tokens_status(tokens) != MT_OK;
        if (r->data_failed) return mt_tokens_status(tokens);
        int64_t targets = loss_targets(r);
        if (targets == 0) continue;
        MT_TRY(mt_devices_eval(&r->dev, r->inputs, r->targets, r->positions, &l));
        sum += l * (double)targets;
        counted += targets;
    }
    if (counted) *loss = sum / (double)counted;
    return MT_OK;
}

/* Redraws loss.svg; a failure is a warning, never the run's error (the message is kept). */
static void draw_curve(const mt_train_run *r) {
    if (!r->metrics) return; /* a rank of a world that does not write the run directory */
    mt_error_kept kept;
    mt_error_keep(&kept);
    char metrics[4096], svg[4096];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", r->o.out_dir);
    snprintf(svg, sizeof svg, "%s/loss.svg", r->o.out_dir);
    mt_curve train = {0}, val = {0}, files[MT_MAX_VAL_FILES] = {{0}};
    if (mt_metrics_load_curves(metrics, &train, &val) == MT_OK) {
        mt_plot_series series[2 + MT_MAX_VAL_FILES] = {{"train", train.step, train.value, train.n, 0}};
        int n = 1;
        if (val.n) series[n++] = (mt_plot_series){"validation", val.step, val.value, val.n, 1};
        for (int i = 0; i < r->n_val; i++) {
            if (mt_metrics_load_curve(metrics, r->val[i].key, &files[i]) == MT_OK && files[i].n)
                series[n++] = (mt_plot_series){r->val[i].name, files[i].step, files[i].value, files[i].n, 1};
        }
        mt_plot_labels labels = {"megatrain: loss", "step", "cross-entropy (nats per token)"};
        if (mt_plot_svg(svg, &labels, series, n) != MT_OK)
            mt_log_warn("loss picture not updated: %s", mt_error());
    }
    mt_curve_free(&train);
    mt_curve_free(&val);
    for (int i = 0; i < r->n_val; i++) mt_curve_free(&files[i]);
    mt_error_restore(&kept);
}

/* JSON has no NaN or Inf (jansson refuses them): a non-finite number is logged as null. */
static json_t *number_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* padding: the share of the step's window tokens that are padding (packed examples), or NaN. */
static mt_status log_step(mt_train_run *r, const mt_step_result *s, float lr, double tok_s, double elapsed,
                          double padding) {
    json_t *ev = json_pack("{s:I, s:o, s:f, s:o, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "step",
                           (json_int_t)r->progress.step, "loss", number_or_null(s->loss), "lr", (double)lr,
                           "grad_norm", number_or_null(s->grad_norm), "skipped", s->skipped, "step_seconds",
                           s->seconds, "tokens_per_s", tok_s, "elapsed_s", elapsed, "opt_seconds", s->opt_seconds,
                           "opt_seconds_per_block", s->opt_seconds_per_block, "wait_opt_seconds",
                           s->wait_opt_seconds, "stall_seconds", s->stall_seconds, "compute_seconds",
                           s->compute_seconds);
    if (ev && json_object_set_new(ev, "epoch", json_real(mt_dataset_epochs_done(&r->data))) != 0) {
        json_decref(ev);
        ev = NULL;
    }
    if (ev && !isnan(padding) && json_object_set_new(ev, "padding", json_real(padding)) != 0) {
        json_decref(ev);
        ev = NULL;
    }
    if (!ev) return mt_fail(MT_ERR_NOMEM, "cannot build a metrics line");
    if (s->moe) { /* the router's load-balancing loss apart from the cross-entropy, and the experts' load */
        json_object_set_new(ev, "aux_loss", number_or_null(s->aux_loss));
        json_object_set_new(ev, "expert_load_max", number_or_null(s->expert_load_max));
        json_object_set_new(ev, "expert_load_min", number_or_null(s->expert_load_min));
        json_object_set_new(ev, "experts_unrouted", number_or_null(s->experts_unrouted));
    }
    json_object_set_new(ev, "weight_bytes_in", json_real(s->weight_bytes_in));
    mt_status rc = r->metrics ? mt_metrics_log(r->metrics, ev) : MT_OK;
    json_decref(ev);
    return rc;
}

/* A validation loss: the held-out part's ("val_loss") or a --val-data file's ("val_loss/BASENAME"). */
static mt_status log_val(mt_train_run *r, const char *key, double loss) {
    json_t *ev = json_pack("{s:I, s:f}", "step", (json_int_t)r->progress.step, key, loss);
    if (!ev) return mt_fail(MT_ERR_NOMEM, "cannot build a metrics line");
    mt_status rc = r->metrics ? mt_metrics_log(r->metrics, ev) : MT_OK;
    json_decref(ev);
    return rc;
}

/* Steps whose windows have no target that carries loss train nothing; a run of them longer than
 * --max-skips means the data has too few such targets to train on. The steps taken are saved,
 * as for any stop by the data. */
static mt_status stop_for_empty_windows(mt_train_run *r) {
    r->data_failed = 1;
    size_t trained = mt_tokens_loss_count(&r->tokens);
    MT_TRY(mt_tokens_status(&r->tokens));
    return mt_fail(MT_ERR_INVALID, "steps %lld to %lld drew windows in which every target is masked (more than "
                   "--max-skips %d in a row): %s has too few tokens that carry loss (%zu of %zu) for windows of "
                   "--seq %d", (long long)(r->progress.step - r->empty_in_a_row + 1), (long long)r->progress.step,
                   r->o.max_skips, r->o.data_path, trained, r->tokens.count, r->o.seq_len);
}

static mt_status loop(mt_train_run *r, mt_progress *pg) {
    const mt_train_options *o = &r->o;
    int sequences = mt_devices_ranks(&r->dev, o) * o->micro_batches * o->batch;
    double tokens_per_step = (double)sequences * o->seq_len;
    while (r->progress.step < o->steps && !mt_stop_requested()) {
        float lr = mt_lr_at(&r->schedule, r->progress.step + 1);
        size_t padding = mt_dataset_train_batch(&r->data, sequences, r->inputs, r->targets, r->positions);
        r->data_failed = mt_tokens_status(&r->tokens) != MT_OK;
        if (r->data_failed) return mt_tokens_status(&r->tokens);
        /* A step whose every target is masked has no loss to take the mean of: it is skipped
         * (no update, the Adam step count unchanged), not counted as a non-finite skip. */
        int no_targets = loss_targets(r) == 0;
        mt_step_result s = {.loss = NAN, .grad_norm = NAN, .skipped = 1};
        if (!no_targets) {
            /* Test hook MT_TEST_NAN_STEP=N: step N (1-based) gets a NaN gradient, to test skipping. */
            if (r->progress.step + 1 == r->nan_step) mt_devices_poison_next_step(&r->dev);
            /* Test hook MT_TEST_DEVICE_FAULT_STEP=N: step N fails as on a device error. */
            if (r->progress.step + 1 == r->fault_step) mt_engine_fault_next_step(r->dev.engine);
            /* Test hook MT_TEST_RANK_FAIL_STEP=N: with --gpus, the last rank dies before step N's pass. */
            if (r->progress.step + 1 == r->rank_fail_step) mt_ranks_fail_next_step(r->dev.ranks, r->o.gpus - 1);
            MT_TRY(mt_devices_step(&r->dev, r->inputs, r->targets, r->positions, lr, &s));
        }
        r->progress.step++;
        r->empty_in_a_row = no_targets ? r->empty_in_a_row + 1 : 0;
        if (r->empty_in_a_row > o->max_skips) return stop_for_empty_windows(r);
        if (no_targets)
            mt_progress_note(pg, "step %lld skipped: every target of its windows is masked (no loss)",
                             (long long)r->progress.step);
        else if (s.skipped)
            mt_progress_note(pg, "step %lld skipped: gradient norm %g", (long long)r->progress.step, s.grad_norm);
        mt_progress_step(pg, r->progress.step, mt_dataset_epochs_done(&r->data), s.loss, tokens_per_step, lr);
        MT_TRY(log_step(r, &s, lr, mt_progress_tokens_per_second(pg), mt_now() - pg->started,
                        r->data.packer ? (double)padding / tokens_per_step : NAN));
        if (!no_targets) MT_TRY(mt_step_watch_after(&r->watch, r->progress.step, s.loss, s.skipped));
        /* A background save is reported (and its failure acted on) as soon as it is through. */
        if (r->saver && mt_saver_landed(r->saver)) MT_TRY(mt_train_collect_save(r, pg));
        int last = r->progress.step == o->steps;
        if (o->eval_every > 0 && (r->progress.step % o->eval_every == 0 || last)) {
            double val;
            MT_TRY(validate(r, &r->data, &r->tokens, &val));
            if (!isnan(val)) {
                MT_TRY(log_val(r, "val_loss", val));
                mt_progress_note(pg, "step %lld: validation loss %.4f over %zu windows", (long long)r->progress.step,
                                 val, val_windows(r, &r->data));
            }
            for (int i = 0; i < r->n_val; i++) {
                MT_TRY(validate(r, &r->val[i].data, &r->val[i].tokens, &val));
                if (isnan(val)) continue; /* every target masked */
                MT_TRY(log_val(r, r->val[i].key, val));
                mt_progress_note(pg, "step %lld: validation loss %.4f over %zu windows of %s",
                                 (long long)r->progress.step, val, val_windows(r, &r->val[i].data), r->val[i].name);
            }
            draw_curve(r);
        }
        if (o->ckpt_every > 0 && r->progress.step % o->ckpt_every == 0 && !last) {
            MT_TRY(mt_train_collect_save(r, pg));
            MT_TRY(mt_train_save_periodic(r, pg));
        }
    }
    return MT_OK;
}

/* A run stopped by its data (the file changed or was cut short): the steps taken are sound, so
 * they are saved before the error is returned. */
static mt_status save_before_data_error(mt_train_run *r) {
    char why[MT_ERROR_MAX];
    snprintf(why, sizeof why, "%s", mt_error());
    if (mt_train_save_final(r) != MT_OK) {
        mt_log_error("%s", mt_error());
        return mt_fail(MT_ERR_IO, "%s", why);
    }
    return mt_fail(MT_ERR_IO, "%s; the steps up to %lld are saved: --resume continues once the data is right",
                   why, (long long)r->progress.step);
}

/* After the loop: the last checkpoint, or for a run stopped for divergence, the checkpoint to
 * resume from named; a stop on request becomes MT_ERR_INTERRUPTED once the checkpoint is down. */
static mt_status finish_run(mt_train_run *r, mt_status rc) {
    if (rc == MT_ERR_NUMERIC) return mt_train_stop_diverged(r);
    if (rc != MT_OK && r->data_failed) return save_before_data_error(r);
    if (rc != MT_OK) return rc;
    MT_TRY(mt_train_save_final(r));
    int sig = mt_stop_requested();
    if (!sig || r->progress.step >= r->o.steps) return MT_OK;
    return mt_fail(MT_ERR_INTERRUPTED, "stopped on request at step %lld of %lld (signal %d, %s); the checkpoint "
                   "of that step is written: 'megatrain train --out %s --resume' continues the run",
                   (long long)r->progress.step, (long long)r->o.steps, sig, strsignal(sig), r->o.out_dir);
}

mt_status mt_train(const mt_train_options *given) {
    mt_train_run r = {.dir = {.lock = {.fd = -1}}, .eot = -1};
    mt_stop_signals signals;
    mt_stop_signals_install(&signals);
    mt_status rc = open_run(&r, given);
    if (rc != MT_OK && !r.metrics) mt_run_dir_undo(&r.dir); /* refused: the directory as it was found */
    if (rc == MT_OK) {
        mt_progress pg;
        mt_progress_start(&pg, r.o.progress, r.progress.step, r.o.steps);
        rc = loop(&r, &pg);
        rc = mt_train_settle_save(&r, &pg, rc);
        mt_progress_finish(&pg);
        rc = finish_run(&r, rc);
        draw_curve(&r);
    }
    mt_error_kept kept; /* closing must not report itself in place of the run's error */
    mt_error_keep(&kept);
    close_run(&r);
    mt_error_restore(&kept);
    mt_stop_signals_restore(&signals);
    return rc;
}
