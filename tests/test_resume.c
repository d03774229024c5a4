/* --resume as crash recovery needs: the same command line starts a run in an empty directory
 * (and is refused in one that holds a run's files but no checkpoint: a mistyped --out), and a
 * checkpoint whose payload is corrupt (manifest intact, a blob's checksum wrong) is passed
 * over for the next older good one instead of failing the run. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

/* Each run is a few tiny steps (well under a second); CI machines are slow and shared. */
#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(resume, .init = make_fixtures, .fini = remove_fixtures);

static void train(const char *steps, mt_cli_result *r) {
    mt_cli_run(r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", steps, "--ckpt-every", "2", "--keep", "0",
               "--data", corpus, "--out", run, "--resume", NULL);
}

/* Flips one byte in the middle of a file, leaving its size (and header) alone. */
static void corrupt(const char *path) {
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long middle = ftell(f) / 2;
    fseek(f, middle, SEEK_SET);
    int c = fgetc(f);
    fseek(f, middle, SEEK_SET);
    fputc(c ^ 0x5a, f);
    cr_assert_eq(fclose(f), 0);
}

Test(resume, starts_from_scratch_in_an_empty_run_dir) {
    mt_cli_result r;
    train("2", &r);
    cr_assert_eq(r.exit_code, 0, "--resume with no checkpoint must start the run:\n%s", r.err);
    cr_assert(strstr(r.err, "from scratch"), "no notice that the run starts afresh:\n%s", r.err);
    cr_assert(mt_test_exists(mt_test_blob(run, 2, "master")));
    mt_cli_result_free(&r);
}

Test(resume, is_refused_where_a_run_left_files_but_no_checkpoint) {
    char metrics[PATH_MAX + 32];
    cr_assert_eq(mkdir(run, 0700), 0);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
    FILE *f = fopen(metrics, "w");
    cr_assert_not_null(f);
    fputs("{\"step\": 1, \"loss\": 5.5}\n", f);
    fclose(f);
    mt_cli_result r;
    train("2", &r);
    cr_assert(!r.timed_out && r.signal == 0, "%s", r.err);
    cr_assert_eq(r.exit_code, 2, "--resume over a run without checkpoints must be refused:\n%s", r.err);
    cr_assert(strstr(r.err, "holds no checkpoint to resume") && strstr(r.err, run), "%s", r.err);
    cr_assert(!mt_test_exists(mt_test_blob(run, 2, "master")), "it trained");
    mt_cli_result_free(&r);
}

Test(resume, passes_over_a_checkpoint_with_a_corrupt_blob) {
    mt_cli_result r;
    train("4", &r);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    corrupt(mt_test_blob(run, 4, "adam_v"));
    train("6", &r);
    cr_assert_eq(r.exit_code, 0, "resume must fall back to ckpt-000002:\n%s", r.err);
    cr_assert(strstr(r.err, "checksum mismatch"), "the corrupt checkpoint was not reported:\n%s", r.err);
    cr_assert(strstr(r.err, "resumed from") && strstr(r.err, "ckpt-000002 at step 2"),
              "did not resume from the older good checkpoint:\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(resume, refuses_a_run_dir_whose_checkpoints_are_all_damaged) {
    mt_cli_result r;
    train("2", &r);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    corrupt(mt_test_blob(run, 2, "master"));
    train("4", &r);
    cr_assert_neq(r.exit_code, 0, "damaged checkpoints must not be silently replaced by a fresh start");
    cr_assert(strstr(r.err, "no usable checkpoint"), "unclear error:\n%s", r.err);
    mt_cli_result_free(&r);
}
