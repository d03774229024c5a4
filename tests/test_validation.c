/* Validation that always runs or says why not: a validation file of fewer windows than one batch
 * is evaluated on what it has (a partial batch, its last window short), --val-data takes no split
 * of the training data unless --val-fraction asks, the log says how many windows each evaluation
 * covers, and a file's metric is val_loss/<its base name>. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) {
    mt_test_make_run_dirs(dir, corpus, run);
    /* 29 bytes: 28 targets, one window of 16 and a short one of 12, for a step of 2 x 2 windows */
    hf_test_write_text(mt_test_in(dir, "small.txt"), "light water stone river bread");
}
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(validation, .init = make_fixtures, .fini = remove_fixtures);

#define STEPS "--micro-batches", "2", "--steps", "2", "--eval-every", "2", "--threads", "1"

static void ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

static char *metrics_of(const char *run_dir) {
    FILE *f = fopen(mt_test_in(run_dir, "metrics.jsonl"), "rb");
    cr_assert_not_null(f, "no metrics.jsonl in %s", run_dir);
    char *text = calloc(1, 1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

Test(validation, a_file_smaller_than_one_batch_logs_a_val_loss) {
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", MT_TINY_STEP, STEPS, "--data", corpus, "--out", run, "--val-data",
               mt_test_in(dir, "small.txt"), NULL);
    ran(&r);
    cr_expect(strstr(r.err, "validation loss") && strstr(r.err, "over 2 windows of"), "%s", r.err);
    cr_expect(strstr(r.err, "none of the training data is held out"), "%s", r.err);
    mt_cli_result_free(&r);
    char *m = metrics_of(run);
    cr_expect(strstr(m, "{\"step\":2,\"val_loss/small.txt\":"), "no val_loss/small.txt at step 2:\n%s", m);
    cr_expect(!strstr(m, "\"val_loss\":"), "a split of the training data was validated without --val-fraction:\n%s", m);
    free(m);
}

Test(validation, val_fraction_with_val_data_holds_a_part_out_too) {
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", MT_TINY_STEP, STEPS, "--data", corpus, "--out", run, "--val-data",
               mt_test_in(dir, "small.txt"), "--val-fraction", "0.1", "--eval-batches", "3", NULL);
    ran(&r);
    /* 10% of the corpus's bytes, in windows of 16: more than the 3 batches of 4 windows cover */
    cr_expect(strstr(r.err, "12 of the") && strstr(r.err, "windows held out of the training data"), "%s", r.err);
    mt_cli_result_free(&r);
    char *m = metrics_of(run);
    cr_expect(strstr(m, "\"val_loss\":") && strstr(m, "\"val_loss/small.txt\":"), "%s", m);
    free(m);
}

Test(validation, none_is_said_and_one_base_name_twice_refused) {
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", MT_TINY_STEP, STEPS, "--data", corpus, "--out", run, "--val-fraction", "0", NULL);
    ran(&r);
    cr_expect(strstr(r.err, "no validation: --val-fraction 0"), "%s", r.err);
    mt_cli_result_free(&r);
    char list[3 * PATH_MAX];
    mkdir(mt_test_in(dir, "sub"), 0755);
    hf_test_write_text(mt_test_in(dir, "sub/small.txt"), "stone river bread light");
    snprintf(list, sizeof list, "%s,%s", mt_test_in(dir, "small.txt"), mt_test_in(dir, "sub/small.txt"));
    mt_cli_run(&r, 120, "train", MT_TINY_STEP, STEPS, "--data", corpus, "--out", mt_test_in(dir, "two"), "--val-data",
               list, NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "have one base name"), "%s", r.err);
    mt_cli_result_free(&r);
}
