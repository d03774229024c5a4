/* A run's settings live in its checkpoints: --resume continues with the run's own sequence
 * length, batch, micro-batches, steps and learning-rate schedule (not the defaults), applies a
 * change to one that may change (more steps, a new schedule) with a line saying so, and refuses a
 * change to the model or the sequence layout, naming both values. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(settings, .init = make_fixtures, .fini = remove_fixtures);

/* Settings far from the defaults (seq 256, batch 8, 600 steps, lr 3e-3 cosine). */
#define OWN_SETTINGS "--preset", "tiny", "--seq", "24", "--batch", "3", "--micro-batches", "2", "--lr", "1e-3", \
                     "--schedule", "constant", "--warmup", "1", "--val-fraction", "0.1", "--sequential",     \
                     "--eval-every", "0", "--ckpt-every", "2", "--keep", "0", "--backend", "cpu"

static void run_ok(mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

/* The first 4 of 6 steps with the run's own settings, then a bare --resume: it must go on with
 * them and end where the same 6 steps straight through end, bit for bit. */
Test(settings, bare_resume_continues_with_the_runs_own_settings) {
    char straight[PATH_MAX];
    hf_test_path(straight, dir, "straight");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", OWN_SETTINGS, "--steps", "6", "--data", corpus, "--out", straight, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", OWN_SETTINGS, "--steps", "6", "--data", corpus, "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    char last[PATH_MAX + 16];
    snprintf(last, sizeof last, "%s/ckpt-000006", run);
    hf_test_rmtree(last);
    /* Nothing but the run directory: model, data, shape, steps and schedule come from ckpt-000004. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--backend", "cpu", NULL);
    run_ok(&r);
    cr_assert_not_null(strstr(r.err, "ckpt-000004 at step 4"), "did not resume from step 4:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "2 x 3 x 24 tokens a step"), "not the run's step shape:\n%s", r.err);
    cr_assert_null(strstr(r.err, "instead of the run's"), "nothing was changed, nothing to say:\n%s", r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(straight, run, 6);
    cr_assert_null(differs, "%s at step 6 differs from the straight run's: the resume did not use the run's settings",
                   differs);
}

Test(settings, resume_applies_more_steps_and_a_new_schedule_and_says_so) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", OWN_SETTINGS, "--steps", "4", "--data", corpus, "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "6", "--lr", "5e-4", "--schedule",
               "cosine", "--backend", "cpu", NULL);
    run_ok(&r);
    cr_assert_not_null(strstr(r.err, "--steps 6 instead of the run's 4"), "no line for the steps:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "--lr 0.0005 instead of the run's 0.001"), "no line for the lr:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "--schedule cosine instead of the run's constant"), "%s", r.err);
    cr_assert(mt_test_exists(mt_test_blob(run, 6, "master")), "the run did not go on to step 6");
    mt_cli_result_free(&r);
    /* The changed settings are the run's from then on. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--backend", "cpu", NULL);
    run_ok(&r);
    cr_assert_null(strstr(r.err, "instead of"), "the new settings were not stored:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* `option value` given on resume is refused: exit 2, both values named, the run untouched. */
static void expect_fixed(const char *option, const char *value, const char *both_values) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "8", "--backend", "cpu", option, value,
               NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_assert_eq(r.exit_code, 2, "%s %s on resume: exit %d:\n%s", option, value, r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, both_values), "%s %s: the message does not say '%s':\n%s", option, value,
                       both_values, r.err);
    cr_assert_not(mt_test_exists(mt_test_blob(run, 8, "master")), "the refused resume trained");
    mt_cli_result_free(&r);
}

Test(settings, resume_refuses_another_model_or_sequence_layout) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", OWN_SETTINGS, "--steps", "4", "--data", corpus, "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    expect_fixed("--seq", "32", "--seq 32: ");
    expect_fixed("--seq", "32", "a run with --seq 24");
    expect_fixed("--batch", "8", "a run with --batch 3");
    expect_fixed("--micro-batches", "1", "a run with --micro-batches 2");
    expect_fixed("--val-fraction", "0.05", "a run with --val-fraction 0.1");
    expect_fixed("--seed", "7", "a run with --seed 1337");
    expect_fixed("--moments", "bf16", "a run with --moments fp32");
    expect_fixed("--preset", "demo", "--preset demo: ");
    expect_fixed("--preset", "demo", "another model (--preset tiny");
    char config[PATH_MAX];
    hf_test_path(config, dir, "config.json");
    hf_test_write_text(config, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                               "\"intermediate_size\": 176, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
                               "\"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256}");
    expect_fixed("--config", config, "another model (--preset tiny: 2 layers");
    /* The same model by another name is the same model. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "5", "--backend", "cpu", "--preset",
               "tiny", NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
}

Test(settings, resume_refuses_fewer_steps_than_done) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", OWN_SETTINGS, "--steps", "4", "--data", corpus, "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "2", "--backend", "cpu", NULL);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "at step 4 already"), "%s", r.err);
    mt_cli_result_free(&r);
}
