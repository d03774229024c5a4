/* Checkpoints written while training goes on (train/saver.h): every checkpoint of a run with
 * background saves holds, byte for byte, what the same run with --sync-save writes at that step,
 * for fp32 and 8-bit moments, whether the guard copies units aside (the default), may copy only
 * some (a small --save-staging) or none (0: the optimizer waits for the writer). The test hook
 * MT_TEST_SAVE_UNIT_MS slows the writer down so that the next steps' updates catch up with it.
 * A background save that fails is reported when it is collected and leaves the previous
 * checkpoint valid. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"
#include "test_limits.h"

/* Each run is 6 tiny steps and 3 slowed-down saves (about half a second); CI machines are slow. */
#define TIMEOUT_S 60.0
/* 4 units (embedding, 2 blocks, head) at 30 ms each: a save outlasts several tiny steps. */
#define SLOW_UNIT_MS "30"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(saver, .init = make_fixtures, .fini = remove_fixtures);

/* Trains 6 steps with a checkpoint every 2 into dir/<name>; extra is one more option or NULL. */
static void train(const char *name, const char *moments, const char *extra, const char *extra_value,
                  mt_cli_result *r) {
    char out[PATH_MAX];
    hf_test_path(out, dir, name);
    mt_cli_run(r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "0",
               "--moments", moments, "--data", corpus, "--out", out, extra, extra_value, NULL);
    cr_assert_eq(r->exit_code, 0, "%s run failed:\n%s", name, r->err);
}

/* The optimizer's seconds in the guard and the megabytes it copied aside, over every save the
 * run reports ("the optimizer X s, Y MB copied aside"). */
static void guard_totals(const char *log, double *seconds, double *megabytes) {
    *seconds = *megabytes = 0;
    for (const char *at = log; (at = strstr(at, "(the optimizer ")); at++) {
        double s, mb;
        cr_assert_eq(sscanf(at, "(the optimizer %lf s, %lf MB copied aside", &s, &mb), 2, "unreadable: %.80s", at);
        *seconds += s;
        *megabytes += mb;
    }
}

static void expect_same_checkpoints(const char *name, const char *reference, const char *moments) {
    char a[PATH_MAX], b[PATH_MAX];
    hf_test_path(a, dir, name);
    hf_test_path(b, dir, reference);
    const char *blobs[] = {"master", "adam_m", "adam_v", "adam_m_scale", "adam_v_scale"};
    int count = strcmp(moments, "8bit") ? 3 : 5;
    for (int step = 2; step <= 6; step += 2)
        for (int i = 0; i < count; i++) {
            char path_a[PATH_MAX];
            snprintf(path_a, sizeof path_a, "%s", mt_test_blob(a, step, blobs[i]));
            cr_expect(mt_test_files_equal(path_a, mt_test_blob(b, step, blobs[i])),
                      "%s: step %d's %s differs from the --sync-save run's", name, step, blobs[i]);
        }
}

static void background_equals_sync(const char *moments) {
    mt_cli_result r;
    train("sync", moments, "--sync-save", NULL, &r);
    mt_cli_result_free(&r);
    setenv("MT_TEST_SAVE_UNIT_MS", SLOW_UNIT_MS, 1);
    double seconds, megabytes;

    train("staged", moments, NULL, NULL, &r);
    guard_totals(r.err, &seconds, &megabytes);
    cr_expect_gt(megabytes, 0, "the default budget copied nothing aside: the guard was not exercised\n%s", r.err);
    mt_cli_result_free(&r);
    expect_same_checkpoints("staged", "sync", moments);

    /* 300 KB takes the embedding (256 x 64 x 12 bytes) but no block: some units copied, some waited for. */
    train("partly", moments, "--save-staging", "300KB", &r);
    mt_cli_result_free(&r);
    expect_same_checkpoints("partly", "sync", moments);

    train("unstaged", moments, "--save-staging", "0", &r);
    guard_totals(r.err, &seconds, &megabytes);
    cr_expect_eq(megabytes, 0, "--save-staging 0 copied units aside");
    cr_expect_gt(seconds, 0, "with no staging the optimizer never waited for the writer\n%s", r.err);
    mt_cli_result_free(&r);
    expect_same_checkpoints("unstaged", "sync", moments);
    unsetenv("MT_TEST_SAVE_UNIT_MS");
}

Test(saver, background_checkpoints_equal_sync_ones_fp32, .timeout = MT_TEST_LIMIT(120)) { background_equals_sync("fp32"); }

Test(saver, background_checkpoints_equal_sync_ones_8bit, .timeout = MT_TEST_LIMIT(120)) { background_equals_sync("8bit"); }

/* A regular file where ckpt-000004 is to go: that save fails when it installs its directory. */
static void block_step_4(void) {
    char path[PATH_MAX];
    hf_test_path(path, run, "ckpt-000004");
    cr_assert_eq(mkdir(run, 0755), 0, "cannot create %s", run);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s", path);
    fclose(f);
}

static void expect_step_2_intact(void) {
    char path[PATH_MAX];
    hf_test_path(path, run, "ckpt-000002");
    cr_expect_eq(mt_checkpoint_verify(path), MT_OK, "%s no longer verifies: %s", path, mt_error());
}

Test(saver, a_failed_background_save_stops_the_run_and_keeps_the_previous_checkpoint) {
    block_step_4();
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "1",
               "--data", corpus, "--out", run, NULL);
    cr_expect_neq(r.exit_code, 0, "the run ended well past a failed checkpoint:\n%s", r.err);
    cr_expect(strstr(r.err, "writing checkpoint") && strstr(r.err, "ckpt-000004"),
              "stderr does not name the failed checkpoint:\n%s", r.err);
    cr_expect(!mt_test_exists(mt_test_blob(run, 6, "master")), "the run went on to its last checkpoint");
    expect_step_2_intact();
    mt_cli_result_free(&r);
}

Test(saver, continue_on_save_error_trains_on_past_a_failed_background_save) {
    block_step_4();
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "0",
               "--continue-on-save-error", "--data", corpus, "--out", run, NULL);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "step 4: checkpoint NOT saved"), "no report of the failed checkpoint:\n%s", r.err);
    cr_expect(mt_test_exists(mt_test_blob(run, 6, "master")), "no last checkpoint");
    expect_step_2_intact();
    mt_cli_result_free(&r);
}
