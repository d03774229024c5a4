/* Defaults by the model's origin: --init-from (fine-tuning a pretrained model) takes fine-tuning's
 * optimizer defaults (lr 1e-5, no weight decay, beta2 0.999, a cosine to 0, a tenth of the steps
 * warming up), which the first log line names; without --init-from pretraining's stay; a given
 * option wins; a resumed run keeps what its checkpoint stored. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static void ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

/* A pretrained model to fine-tune: the tiny preset's initial weights, exported. */
static void make_fixtures(void) {
    mt_test_make_run_dirs(dir, corpus, run);
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", MT_TINY_STEP, "--data", corpus, "--steps", "0", "--out", in_dir("base"), NULL);
    ran(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60, "export", in_dir("base"), in_dir("model"), NULL);
    ran(&r);
    mt_cli_result_free(&r);
}
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(finetune_defaults, .init = make_fixtures, .fini = remove_fixtures);

/* The settings stored in the checkpoint of `step` of the run in `out`. */
static double setting(const char *out, int step, const char *name) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/ckpt-%06d/manifest.json", out, step);
    json_error_t err;
    json_t *m = json_load_file(path, 0, &err);
    cr_assert_not_null(m, "%s: %s", path, err.text);
    json_t *v = json_object_get(json_object_get(json_object_get(m, "meta"), "settings"), name);
    cr_assert(json_is_number(v), "%s: no setting %s", path, name);
    double x = json_number_value(v);
    json_decref(m);
    return x;
}

#define FINETUNE "train", "--seq", "16", "--batch", "2", "--backend", "cpu", "--eval-every", "0", "--init-from", in_dir("model"), "--data", corpus, "--threads", "1"

Test(finetune_defaults, init_from_takes_them_and_resume_keeps_them) {
    mt_cli_result r;
    mt_cli_run(&r, 120, FINETUNE, "--steps", "20", "--out", run, NULL);
    ran(&r);
    cr_expect(strstr(r.err, "fine-tuning defaults (--init-from): --lr 1e-05, --warmup 2, --schedule cosine, "
                            "--min-lr-ratio 0, --weight-decay 0, --beta1 0.9, --beta2 0.999"), "%s", r.err);
    cr_expect(strstr(r.err, "megatrain: info: fine-tuning defaults") == strstr(r.err, "megatrain: "),
              "not the first log line:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect_float_eq(setting(run, 20, "lr"), 1e-5, 1e-12);
    cr_expect_eq(setting(run, 20, "weight-decay"), 0.0);
    cr_expect_float_eq(setting(run, 20, "beta2"), 0.999, 1e-9);
    cr_expect_eq(setting(run, 20, "min-lr-ratio"), 0.0);
    cr_expect_eq(setting(run, 20, "warmup"), 2.0);
    /* resumed with more steps: the run's own settings, the warmup included */
    mt_cli_run(&r, 120, "train", "--out", run, "--resume", "--steps", "30", "--backend", "cpu", "--threads", "1", NULL);
    ran(&r);
    cr_expect(!strstr(r.err, "defaults"), "a resumed run took defaults:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect_float_eq(setting(run, 30, "lr"), 1e-5, 1e-12);
    cr_expect_eq(setting(run, 30, "warmup"), 2.0);
    cr_expect_float_eq(setting(run, 30, "beta2"), 0.999, 1e-9);
}

Test(finetune_defaults, a_given_option_wins_and_pretraining_keeps_its_own) {
    mt_cli_result r;
    mt_cli_run(&r, 120, FINETUNE, "--steps", "2", "--lr", "2e-5", "--weight-decay", "0.01", "--out", run, NULL);
    ran(&r);
    cr_expect(strstr(r.err, "fine-tuning defaults (--init-from): --warmup 0, --schedule cosine, --min-lr-ratio 0, "
                            "--beta1 0.9, --beta2 0.999, as"), "the given --lr and --weight-decay are named:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect_float_eq(setting(run, 2, "lr"), 2e-5, 1e-12);
    cr_expect_float_eq(setting(run, 2, "weight-decay"), 0.01, 1e-9);

    mt_cli_run(&r, 120, "train", MT_TINY_STEP, "--data", corpus, "--steps", "2", "--threads", "1", "--out",
               in_dir("pretrain"), NULL);
    ran(&r);
    cr_expect(strstr(r.err, "pretraining defaults (no --init-from): --lr 0.003, --warmup 0"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_expect_float_eq(setting(in_dir("pretrain"), 2, "lr"), 3e-3, 1e-12);
    cr_expect_float_eq(setting(in_dir("pretrain"), 2, "weight-decay"), 0.1, 1e-9);
    cr_expect_float_eq(setting(in_dir("pretrain"), 2, "beta2"), 0.95, 1e-9);
}
