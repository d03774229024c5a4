/* Steps with a non-finite gradient are skipped: MT_TEST_NAN_STEP=N poisons step N's gradient
 * norm, and that step must leave the fp32 masters and both Adam moments as they were: bit for bit
 * where the update waited for the norm, within the rounding of their undoing where it was taken
 * before it (engine_optimizer.c), be logged as skipped, and the
 * next step must update again. Too many skips in a row stop the run; loss spikes are counted. */
#include <criterion/criterion.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "io/checkpoint.h"
#include "model/layout.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "train/step_watch.h"

/* Each run is a few tiny steps (well under a second); CI machines are slow and shared. */
#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(numerics, .init = make_fixtures, .fini = remove_fixtures);

/* The "skipped" field of each metrics line, in order: '1' or '0'. */
static void read_skipped(char *flags, int cap) {
    char path[PATH_MAX], line[4096];
    FILE *f = fopen(hf_test_path(path, run, "metrics.jsonl"), "r");
    cr_assert_not_null(f, "no metrics.jsonl in %s", run);
    int n = 0;
    while (n < cap - 1 && fgets(line, sizeof line, f))
        if (strstr(line, "\"skipped\":")) flags[n++] = strstr(line, "\"skipped\":true") ? '1' : '0';
    flags[n] = '\0';
    fclose(f);
}

/* The largest change of blob `name` from step 2 to step 3, as a share of its largest value; `past`:
 * of its elements past the embedding's matrix alone. */
static double undo_error(const char *run_dir, const char *name, int past) {
    char two[PATH_MAX], three[PATH_MAX];
    cr_assert_eq(mt_checkpoint_path(two, sizeof two, run_dir, 2), MT_OK);
    cr_assert_eq(mt_checkpoint_path(three, sizeof three, run_dir, 3), MT_OK);
    mt_config cfg; /* the run's: MT_TINY_STEP's preset */
    mt_layout lay;
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    size_t bytes = (size_t)lay.total_numel * 4, from = past ? (size_t)lay.units[1].offset : 0;
    mt_layout_free(&lay);
    float *a = malloc(bytes), *b = malloc(bytes);
    cr_assert_eq(mt_checkpoint_read(two, name, a, bytes), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read(three, name, b, bytes), MT_OK, "%s", mt_error());
    double largest = 0, moved = 0;
    for (size_t i = from; i < bytes / 4; i++) largest = fmax(largest, fabs(a[i])), moved = fmax(moved, fabs((double)a[i] - b[i]));
    free(a), free(b);
    return largest > 0 ? moved / largest : moved;
}

Test(numerics, nan_step_is_skipped_and_changes_nothing) {
    setenv("MT_TEST_NAN_STEP", "3", 1);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "4", "--ckpt-every", "1", "--keep", "0",
               "--data", corpus, "--out", run, NULL);
    cr_assert_eq(r.exit_code, 0, "the run failed:\n%s", r.err);
    cr_assert(strstr(r.err, "step 3 skipped"), "no skip notice:\n%s", r.err);
    static const char *const blobs[] = {"master", "adam_m", "adam_v"};
    for (int i = 0; i < 3; i++) {
        /* Step 2 updated; step 3 (skipped) must leave the masters bit for bit; step 4 updates again. */
        cr_assert_not(mt_test_files_equal(mt_test_blob(run, 1, blobs[i]), mt_test_blob(run, 2, blobs[i])), "step 2 left %s unchanged", blobs[i]);
        /* Bit for bit where the update waited for the norm. Within rounding where it did not: taken
         * ahead after an unclipped step, and the embedding's rows no input token touched (untied:
         * updated before the norm, engine_optimizer.c). tests/test_speculative.c bounds each element
         * from its gradient; here, which the files do not hold, the blob's largest value: measured
         * 1.8 (m) and 6.5 (v) FLT_EPSILON of it taken ahead; 0.016 (master), 0.076 (m) and 0.011
         * (v) for the untouched rows alone. */
        cr_assert_leq(undo_error(run, blobs[i], 0), 32 * FLT_EPSILON, "the skipped step 3 moved %s", blobs[i]);
        if (i == 0)
            cr_assert_eq(undo_error(run, blobs[i], 1), 0.0, "the skipped step 3 changed a master past the embedding");
        cr_assert_not(mt_test_files_equal(mt_test_blob(run, 3, blobs[i]), mt_test_blob(run, 4, blobs[i])), "step 4 left %s unchanged", blobs[i]);
    }
    char skipped[16];
    read_skipped(skipped, sizeof skipped);
    cr_assert_str_eq(skipped, "0010", "metrics.jsonl skipped flags by step");
    mt_cli_result_free(&r);
}

Test(numerics, too_many_skips_stop_the_run) {
    setenv("MT_TEST_NAN_STEP", "2", 1);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "4", "--max-skips", "0", "--data", corpus,
               "--out", run, NULL);
    cr_assert_neq(r.exit_code, 0, "a skip past --max-skips 0 must fail the run");
    cr_assert(strstr(r.err, "more than --max-skips 0 in a row"), "unclear error:\n%s", r.err);
    char skipped[16];
    read_skipped(skipped, sizeof skipped);
    cr_assert_str_eq(skipped, "01", "the run stops at the skipped step 2");
    mt_cli_result_free(&r);
}

Test(numerics, watch_counts_skips_in_a_row) {
    mt_step_watch w;
    mt_step_watch_init(&w, 2, MT_STEP_WATCH_DIVERGED_STEPS, 256, 0, -1);
    cr_assert_eq(mt_step_watch_after(&w, 1, 5.0, 1), MT_OK);
    cr_assert_eq(mt_step_watch_after(&w, 2, 5.0, 1), MT_OK);
    cr_assert_eq(mt_step_watch_after(&w, 3, 5.0, 0), MT_OK, "a good step resets the count");
    cr_assert_eq(mt_step_watch_after(&w, 4, 5.0, 1), MT_OK);
    cr_assert_eq(mt_step_watch_after(&w, 5, 5.0, 1), MT_OK);
    cr_assert_eq(mt_step_watch_after(&w, 6, 5.0, 1), MT_ERR_NUMERIC, "the third skip in a row is one too many");
}

Test(numerics, watch_warns_on_loss_spikes_after_twenty_steps) {
    mt_step_watch w;
    mt_step_watch_init(&w, 10, MT_STEP_WATCH_DIVERGED_STEPS, 256, 0, -1);
    cr_assert_eq(mt_step_watch_after(&w, 1, 2.0, 0), MT_OK);
    cr_assert_eq(mt_step_watch_after(&w, 2, 9.0, 0), MT_OK);
    cr_assert_eq(w.spikes, 0, "no warning before 20 steps of history");
    for (int step = 3; step <= 20; step++) mt_step_watch_after(&w, step, 2.0, 0);
    /* The running mean is now near 2.35 (one 9.0 among twenty): 3x is about 7. */
    mt_step_watch_after(&w, 21, 6.5, 0);
    cr_assert_eq(w.spikes, 0, "6.5 is under 3x the running mean");
    mt_step_watch_after(&w, 22, 50.0, 0);
    cr_assert_eq(w.spikes, 1, "50 is a spike");
    mt_step_watch_after(&w, 23, NAN, 0);
    cr_assert_eq(w.spikes, 1, "a NaN loss is not counted as a spike");
}

/* A checkpoint is known good once the step after it was healthy and its values were saved
 * finite: the step after measures its weights. */
Test(numerics, watch_knows_the_newest_good_checkpoint) {
    mt_step_watch w;
    mt_step_watch_init(&w, 10, MT_STEP_WATCH_DIVERGED_STEPS, 256, 0, -1);
    cr_assert_eq(w.good_checkpoint, -1);
    mt_step_watch_after(&w, 1, 5.0, 0);
    mt_step_watch_after(&w, 2, 4.0, 0);
    mt_step_watch_saving(&w, 2);
    mt_step_watch_saved(&w, 2, 1);
    cr_assert_eq(w.good_checkpoint, -1, "step 3 has not yet measured the weights of step 2");
    mt_step_watch_after(&w, 3, 3.9, 0);
    cr_assert_eq(w.good_checkpoint, 2);
    /* The step after a checkpoint far worse than guessing (2 ln 256 = 11.1): not good. */
    mt_step_watch_saving(&w, 3);
    mt_step_watch_after(&w, 4, 40.0, 0);
    mt_step_watch_saved(&w, 3, 1); /* a background save lands after the next step */
    cr_assert_eq(w.good_checkpoint, 2);
    /* Values saved non-finite: not good, however healthy the next step. */
    mt_step_watch_after(&w, 5, 3.8, 0);
    mt_step_watch_saving(&w, 5);
    mt_step_watch_saved(&w, 5, 0);
    mt_step_watch_after(&w, 6, 3.7, 0);
    cr_assert_eq(w.good_checkpoint, 2);
    /* A skipped next step does not confirm it either. */
    mt_step_watch_saving(&w, 6);
    mt_step_watch_saved(&w, 6, 1);
    mt_step_watch_after(&w, 7, 3.7, 1);
    cr_assert_eq(w.good_checkpoint, 2);
    mt_step_watch_saving(&w, 7);
    mt_step_watch_saved(&w, 7, 1);
    mt_step_watch_after(&w, 8, 3.6, 0);
    cr_assert_eq(w.good_checkpoint, 7);
}

/* Where the weights went bad: the step before the unhealthy ones in a row, when one of them had
 * a bad loss; skips with sound losses leave the weights as they were. */
Test(numerics, watch_dates_the_divergence) {
    mt_step_watch w;
    mt_step_watch_init(&w, 10, MT_STEP_WATCH_DIVERGED_STEPS, 256, 0, -1);
    for (int step = 1; step <= 5; step++) mt_step_watch_after(&w, step, 4.0, 0);
    mt_step_watch_after(&w, 6, 4.0, 1);
    cr_assert_eq(mt_step_watch_diverged_from(&w), -1, "a skip with a sound loss");
    mt_step_watch_after(&w, 7, 500.0, 0);
    mt_step_watch_after(&w, 8, NAN, 1);
    cr_assert_eq(mt_step_watch_diverged_from(&w), 5, "steps 6 to 8 are unhealthy: the weights of step 5 on");
    mt_step_watch_after(&w, 9, 4.0, 0);
    cr_assert_eq(mt_step_watch_diverged_from(&w), -1, "a healthy step ends it");
    /* Resumed from step 10: however soon the trouble starts, that checkpoint is not marked. */
    mt_step_watch_init(&w, 10, MT_STEP_WATCH_DIVERGED_STEPS, 256, 10, 10);
    mt_step_watch_after(&w, 11, 500.0, 0);
    cr_assert_eq(mt_step_watch_diverged_from(&w), 11);
}

/* A loss that stays far worse than guessing stops the run, though it stays finite. */
Test(numerics, watch_stops_a_loss_that_stays_bad) {
    mt_step_watch w;
    mt_step_watch_init(&w, 10, MT_STEP_WATCH_DIVERGED_STEPS, 256, 0, -1);
    mt_step_watch_after(&w, 1, 5.5, 0);
    int64_t step = 2;
    for (; step < 2 + MT_STEP_WATCH_DIVERGED_STEPS; step++)
        cr_assert_eq(mt_step_watch_after(&w, step, 1e6, 0), MT_OK, "step %lld", (long long)step);
    cr_assert_eq(mt_step_watch_after(&w, step, 1e6, 0), MT_ERR_NUMERIC);
    cr_assert(strstr(mt_error(), "diverged") && strstr(mt_error(), "steps 2 to 22"), "%s", mt_error());
    cr_assert_eq(mt_step_watch_diverged_from(&w), 1);
}
