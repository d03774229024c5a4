/* A run that cannot train, or would train on garbage, fails with a message instead of ending
 * "saved" with exit 0: data whose every training target is masked (refused before training), data
 * with too few targets that carry loss (stopped, the steps saved), text without a tokenizer for a
 * model whose vocabulary is not bytes', JSONL without a tokenizer. And the divergence rule does
 * not stop a loss that falls, a user can turn it off, and a stop judged wrong does not lock the
 * run: --resume-diverged takes the checkpoints it marked. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/masked_tokens.h"
#include "run_fixture.h"
#include "train/run_state.h"
#include "train/step_watch.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(trains, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

/* A masked shard of `count` byte ids, one example, whose mask is 1 only at the positions in [from, to);
 * the tests train on windows of its stream (--packing off). */
static void write_masked(const char *path, size_t count, size_t from, size_t to) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path, 2), MT_OK, "%s", mt_error());
    for (size_t i = 0; i < count; i++) {
        uint32_t id = (uint32_t)('a' + i % 26);
        uint8_t mask = i >= from && i < to;
        cr_assert_eq(mt_masked_writer_add(w, &id, &mask, 1, i == 0), MT_OK, "%s", mt_error());
    }
    cr_assert_eq(mt_masked_writer_finish(w), MT_OK, "%s", mt_error());
}

static void expect_failed(const mt_cli_result *r, const char *says) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_neq(r->exit_code, 0, "exit 0:\n%s", r->err);
    cr_assert_not_null(strstr(r->err, says), "stderr does not say '%s':\n%s", says, r->err);
}

Test(trains, data_whose_every_target_is_masked_is_refused_before_training) {
    const char *data = in_dir("masked.bin");
    write_masked(data, 4000, 0, 0);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "5", "--packing", "off", "--data", data, "--out", run,
               NULL);
    expect_failed(&r, "every target is masked");
    cr_assert_not_null(strstr(r.err, data), "the file is not named:\n%s", r.err);
    cr_assert_null(strstr(r.err, "saved"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert(!mt_test_exists(mt_test_blob(run, 5, "master")), "a checkpoint was written");
}

/* One target in 4000 carries loss: nearly every step's windows have none. */
Test(trains, data_with_too_few_targets_stops_and_saves) {
    const char *data = in_dir("sparse.bin");
    write_masked(data, 4000, 100, 101);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "500", "--max-skips", "3", "--val-fraction", "0",
               "--packing", "off", "--data", data, "--out", run, NULL);
    expect_failed(&r, "in which every target is masked (more than --max-skips 3 in a row)");
    cr_assert_not_null(strstr(r.err, "1 of 4000"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "are saved"), "%s", r.err);
    mt_cli_result_free(&r);
}

static void write_config(const char *path, int vocab) {
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 64, "intermediate_size", 176, "num_hidden_layers", 2,
                          "num_attention_heads", 4, "num_key_value_heads", 2, "vocab_size", vocab,
                          "max_position_embeddings", 256);
    cr_assert_eq(json_dump_file(c, path, 0), 0);
    json_decref(c);
}

Test(trains, text_without_a_tokenizer_is_refused_for_a_vocabulary_past_bytes) {
    const char *config = in_dir("config.json");
    write_config(config, 151936);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--seq", "16", "--batch", "2", "--backend", "cpu",
               "--steps", "1", "--data", corpus, "--out", run, NULL);
    expect_failed(&r, "no tokenizer");
    cr_assert_not_null(strstr(r.err, corpus), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "151936"), "%s", r.err);
    mt_cli_result_free(&r);
}

Test(trains, json_without_a_tokenizer_is_refused) {
    const char *chats = in_dir("chats.jsonl"), *plain = in_dir("chats.txt");
    FILE *f = fopen(chats, "w");
    for (int i = 0; i < 200; i++)
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi %d\"}, {\"role\": \"assistant\", "
                   "\"content\": \"hello\"}]}\n", i);
    fclose(f);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp %s %s", chats, plain); /* JSONL by its contents, whatever its name */
    cr_assert_eq(system(cmd), 0);
    const char *array = in_dir("chats.json"); /* LLaMA-Factory's: an array of records, by its name */
    f = fopen(array, "w");
    fputs("[{\"instruction\": \"hi\", \"output\": \"hello\"}]\n", f);
    fclose(f);
    const char *files[] = {chats, plain, array};
    for (int i = 0; i < 3; i++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", files[i], "--out", run, NULL);
        expect_failed(&r, "is JSON, and the run has no tokenizer");
        mt_cli_result_free(&r);
    }
}

/* A fine-tune whose loss starts far over 2 ln V and falls steadily is learning, not diverging
 * (the reported run: 33 down to 16.7 by step 21, with noise); a loss that stays high still stops. */
Test(trains, the_divergence_rule_lets_a_falling_loss_go_on) {
    mt_step_watch w;
    mt_step_watch_init(&w, 10, MT_STEP_WATCH_DIVERGED_STEPS, 256, 0, -1); /* 2 ln 256 = 11.1 */
    double loss = 33;
    for (int step = 1; step <= 60; step++) {
        loss *= 0.968;
        double noisy = loss * (step % 3 == 0 ? 1.04 : 0.99);
        cr_assert_eq(mt_step_watch_after(&w, step, noisy, 0), MT_OK, "stopped at step %d, loss %.2f: %s", step, noisy,
                     mt_error());
    }
    cr_assert_eq(mt_step_watch_diverged_from(&w), -1);
    /* Now flat at 30, far over the bound: no longer falling, it stops 21 steps on. */
    int step = 61, stopped = 0;
    for (; step < 61 + 40 && !stopped; step++) stopped = mt_step_watch_after(&w, step, 30.0, 0) != MT_OK;
    cr_assert(stopped, "a loss flat at 30 was never stopped");
    cr_assert_eq(step - 61, MT_STEP_WATCH_DIVERGED_STEPS + 1, "stopped after %d steps", step - 61);
}

Test(trains, the_divergence_rule_can_be_turned_off) {
    mt_step_watch w;
    mt_step_watch_init(&w, 10, 0, 256, 0, -1);
    for (int step = 1; step <= 200; step++)
        cr_assert_eq(mt_step_watch_after(&w, step, 1e6, 0), MT_OK, "--diverge-after 0 stopped at step %d", step);
    mt_step_watch_init(&w, 10, 5, 256, 0, -1);
    mt_status st = MT_OK;
    int step = 1;
    for (; step <= 20 && st == MT_OK; step++) st = mt_step_watch_after(&w, step, 1e6, 0);
    cr_assert_eq(st, MT_ERR_NUMERIC);
    cr_assert(strstr(mt_error(), "more than --diverge-after 5"), "%s", mt_error());
}

/* Checkpoints marked by a divergence stop the user judges wrong: --resume passes over them,
 * --resume --resume-diverged takes the newest (finite) one. */
Test(trains, resume_diverged_takes_checkpoints_a_stop_marked) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "4", "--ckpt-every", "2", "--data", corpus, "--out",
               run, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    int marked;
    cr_assert_eq(mt_run_mark_diverged(run, 0, 1, 4, &marked), MT_OK, "%s", mt_error());
    cr_assert_eq(marked, 2);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "5", "--backend", "cpu", NULL);
    expect_failed(&r, "part of a divergence");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--resume-diverged", "--steps", "5", "--backend",
               "cpu", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "ckpt-000004 at step 4"), "%s", r.err);
    mt_cli_result_free(&r);
}
