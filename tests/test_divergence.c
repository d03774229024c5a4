/* Nothing a run does loses its newest good checkpoint. A checkpoint is good when its values are
 * finite and its step was not part of a divergence: retention (--keep) never deletes the newest
 * one known good, a run stopped for divergence marks the checkpoints it diverged over and names
 * the good one to resume from (which exists), --resume, sample and export of a run directory pass
 * over the bad ones, and a run that ends with non-finite weights does not report success. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "model/layout.h"
#include "run_fixture.h"

#define TIMEOUT_S 120.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(divergence, .init = make_fixtures, .fini = remove_fixtures);

static void run_ok(mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

/* 1 when every float of the checkpoint's master weights is finite. */
static int master_finite(const char *checkpoint) {
    mt_config cfg;
    mt_layout lay;
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    size_t n = (size_t)lay.total_numel;
    float *w = malloc(n * sizeof *w);
    cr_assert_not_null(w);
    cr_assert_eq(mt_checkpoint_read(checkpoint, "master", w, n * sizeof *w), MT_OK, "%s", mt_error());
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(w[i]) != 0;
    free(w);
    mt_layout_free(&lay);
    return finite;
}

static const char *checkpoint_of(int step) {
    static char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/ckpt-%06d", run, step);
    return path;
}

/* Six good steps, then the same run resumed with a learning rate far too high, checkpointing every
 * step with --keep 1: it diverges and stops, and the good checkpoint of step 6 must still be there,
 * named as the one to resume from; resuming then continues from it. */
Test(divergence, a_diverging_run_keeps_and_names_the_newest_good_checkpoint) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "1", "--data",
               corpus, "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "200", "--lr", "1000", "--ckpt-every",
               "1", "--keep", "1", "--backend", "cpu", NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_assert_eq(r.exit_code, 1, "a diverging run must stop with an error, exit %d:\n%s", r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, "stopping"), "not stopped for divergence:\n%s", r.err);
    char named[PATH_MAX + 64];
    snprintf(named, sizeof named, "the newest good checkpoint is %s", checkpoint_of(6));
    cr_assert_not_null(strstr(r.err, named), "the stop does not name ckpt-000006 to resume from:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_assert(mt_test_exists(checkpoint_of(6)), "--keep 1 deleted the good checkpoint of step 6");
    cr_assert_eq(mt_checkpoint_verify(checkpoint_of(6)), MT_OK, "%s", mt_error());
    cr_assert(master_finite(checkpoint_of(6)), "the checkpoint named good holds non-finite weights");

    /* --resume (with a sane learning rate) takes it, passing over the diverged ones. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "8", "--lr", "1e-3", "--backend", "cpu",
               NULL);
    run_ok(&r);
    snprintf(named, sizeof named, "resumed from %s at step 6", checkpoint_of(6));
    cr_assert_not_null(strstr(r.err, named), "did not resume from the good checkpoint:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "part of a divergence"), "the diverged checkpoints were not passed over:\n%s",
                       r.err);
    mt_cli_result_free(&r);
    cr_assert(master_finite(checkpoint_of(8)));
}

/* A run that diverges before it has a good checkpoint says so, and a --resume afterwards does not
 * pick up its exploded weights. */
Test(divergence, a_run_without_a_good_checkpoint_says_so) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "200", "--lr", "1000", "--ckpt-every", "1",
               "--keep", "1", "--data", corpus, "--out", run, NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "no good checkpoint to resume from"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--lr", "1e-3", "--backend", "cpu", NULL);
    cr_assert_neq(r.exit_code, 0, "resumed from a diverged checkpoint:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "part of a divergence"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* Without clipping nothing is skipped: a few steps with a huge learning rate leave NaN in the fp32
 * masters. The run must not end with exit 0 as if it had trained. */
Test(divergence, a_run_ending_with_non_finite_weights_fails) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "3", "--lr", "1e30", "--clip", "0", "--data",
               corpus, "--out", run, NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_assert_neq(r.exit_code, 0, "exit 0 with NaN weights:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "non-finite"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_not(master_finite(checkpoint_of(3)), "the premise: step 3's masters are not finite");
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "--tokens", "5", "--backend", "cpu", NULL);
    cr_assert_neq(r.exit_code, 0, "sampled from NaN weights:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "not all finite"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* Writes ckpt-000003 as a copy of ckpt-000002 whose master holds a NaN in `tensor`, its metadata
 * saying `finite` (true: a checkpoint whose flag lies, for export's own check). */
static void write_nan_checkpoint(const char *tensor, int finite) {
    mt_config cfg;
    mt_layout lay;
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    int unit;
    const mt_tensor *t = mt_layout_find(&lay, tensor, &unit);
    cr_assert_not_null(t);
    size_t n = (size_t)lay.total_numel;
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    cr_assert(w && m && v);
    cr_assert_eq(mt_checkpoint_read(checkpoint_of(2), "master", w, n * 4), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read(checkpoint_of(2), "adam_m", m, n * 4), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read(checkpoint_of(2), "adam_v", v, n * 4), MT_OK, "%s", mt_error());
    w[lay.units[unit].offset + t->offset + 5] = NAN;
    json_t *meta;
    cr_assert_eq(mt_checkpoint_read_meta(checkpoint_of(2), &meta), MT_OK, "%s", mt_error());
    json_object_set_new(meta, "step", json_integer(3));
    json_object_set_new(meta, "finite", json_boolean(finite));
    mt_ckpt_blob blobs[] = {{"master", w, n * 4}, {"adam_m", m, n * 4}, {"adam_v", v, n * 4}};
    cr_assert_eq(mt_checkpoint_write(checkpoint_of(3), blobs, 3, meta), MT_OK, "%s", mt_error());
    json_decref(meta);
    free(w);
    free(m);
    free(v);
    mt_layout_free(&lay);
}

/* Two good steps, then ckpt-000003 with a NaN in `tensor` (see write_nan_checkpoint). */
static void train_then_spoil(const char *tensor, int finite) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "2", "--data", corpus, "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    write_nan_checkpoint(tensor, finite);
}

Test(divergence, export_refuses_non_finite_weights_naming_the_tensor) {
    train_then_spoil("model.layers.1.mlp.up_proj.weight", 1);
    mt_cli_result r;
    char out[PATH_MAX];
    hf_test_path(out, dir, "exported");
    mt_cli_run(&r, TIMEOUT_S, "export", checkpoint_of(3), out, NULL);
    cr_assert_neq(r.exit_code, 0, "exported NaN weights:\n%s", r.out);
    cr_assert_not_null(strstr(r.err, "model.layers.1.mlp.up_proj.weight"), "the tensor is not named:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "non-finite"), "%s", r.err);
    cr_assert_eq(hf_test_count_entries(out), -1, "a refused export left %s", out);
    mt_cli_result_free(&r);
}

/* A run directory means its newest good checkpoint: one saved with non-finite values is passed
 * over, by export and sample alike. */
Test(divergence, a_run_directory_means_its_newest_good_checkpoint) {
    train_then_spoil("model.embed_tokens.weight", 0);
    mt_cli_result r;
    char out[PATH_MAX];
    hf_test_path(out, dir, "exported");
    mt_cli_run(&r, TIMEOUT_S, "export", run, out, NULL);
    run_ok(&r);
    cr_assert_not_null(strstr(r.err, "skipping checkpoint"), "the bad checkpoint was not reported:\n%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "--tokens", "5", "--backend", "cpu", NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
}
