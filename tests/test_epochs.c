/* --epochs N beside --steps: the run takes the steps of N passes over its training windows
 * (rounded up to whole steps), stops at that step with the epoch in metrics.jsonl and the log,
 * and a resumed run given more epochs goes on to theirs; --steps with --epochs is refused. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

/* 1000 bytes: in order, (1000 - 17) / 16 + 1 = 62 windows of 16 tokens an epoch, 4 a step. */
static void make_fixtures(void) {
    mt_test_make_run_dirs(dir, corpus, run);
    char text[1001];
    for (int i = 0; i < 1000; i++) text[i] = "in the beginning was the word "[i % 30];
    text[1000] = '\0';
    hf_test_write_text(mt_test_in(dir, "small.txt"), text);
}
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(epochs, .init = make_fixtures, .fini = remove_fixtures);

#define RUN "train", "--preset", "tiny", "--seq", "16", "--batch", "4", "--backend", "cpu", "--eval-every", "0", \
    "--sequential", "--val-fraction", "0", "--threads", "1", "--data", mt_test_in(dir, "small.txt"), "--out", run

static void ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

/* The epoch metrics.jsonl gives step `step`; -1 when it has no such line. */
static double epoch_at(int step) {
    FILE *f = fopen(mt_test_in(run, "metrics.jsonl"), "r");
    cr_assert_not_null(f);
    char line[4096];
    double epoch = -1;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *e = json_object_get(j, "epoch");
        if (e && json_integer_value(json_object_get(j, "step")) == step) epoch = json_number_value(e);
        json_decref(j);
    }
    fclose(f);
    return epoch;
}

Test(epochs, stop_at_the_right_step) {
    mt_cli_result r;
    mt_cli_run(&r, 120, RUN, "--epochs", "2", NULL);
    ran(&r);
    cr_expect(strstr(r.err, "--epochs 2: 62 training windows an epoch, 4 a step: 31 steps"), "%s", r.err);
    cr_expect(strstr(r.err, "step 31/31  epoch 2.00"), "the log does not give the epoch:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect(mt_test_exists(mt_test_in(run, "ckpt-000031")), "no checkpoint of step 31");
    cr_expect_float_eq(epoch_at(31), 2.0, 1e-6);
    cr_expect_float_eq(epoch_at(16), 1.0 + 2.0 / 62, 1e-6);
    cr_expect_lt(epoch_at(30), 2.0);
    cr_expect_eq(epoch_at(32), -1, "a step past the epochs");
    /* one epoch more: 186 windows, 47 steps */
    mt_cli_run(&r, 120, "train", "--out", run, "--resume", "--epochs", "3", "--backend", "cpu", "--threads", "1",
               NULL);
    ran(&r);
    cr_expect(strstr(r.err, "47 steps"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_expect(mt_test_exists(mt_test_in(run, "ckpt-000047")), "no checkpoint of step 47");
    cr_expect_float_eq(epoch_at(47), 3.0 + 2.0 / 62, 1e-6);
}

Test(epochs, steps_and_epochs_together_refused) {
    mt_cli_result r;
    mt_cli_run(&r, 60, RUN, "--epochs", "2", "--steps", "10", NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "--steps 10 and --epochs 2: give one of them"), "%s", r.err);
    mt_cli_result_free(&r);
}
