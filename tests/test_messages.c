/* Messages and exit codes that say what happened: each refusal names the input at fault (not the
 * one next to it), a failure is never exit 0, and a later failing step never reports itself in
 * place of the error that ended the command. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

#define TIMEOUT_S 60.0
#define TOKENIZER "tests/data/tokenizers/gpt2-bytelevel/tokenizer.json"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(messages, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

/* Failed with `code`, the message's error line holding each of the NULL-ended needles. */
static void expect_error(const mt_cli_result *r, int code, ...) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, code, "exit %d, not %d:\n%s", r->exit_code, code, r->err);
    const char *line = strstr(r->err, "megatrain: error: ");
    cr_assert_not_null(line, "no error line:\n%s", r->err);
    va_list ap;
    va_start(ap, code);
    for (const char *needle; (needle = va_arg(ap, const char *));) {
        const char *end = strchr(line, '\n');
        int n = end ? (int)(end - line) : (int)strlen(line);
        char text[4096];
        snprintf(text, sizeof text, "%.*s", n, line);
        cr_assert_not_null(strstr(text, needle), "the error line does not say '%s':\n%s", needle, r->err);
    }
    va_end(ap);
}

static void train_tiny(const char *steps) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", steps, "--data", corpus, "--out", run, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
}

Test(messages, bench_json_to_an_unwritable_path_fails_before_the_steps) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "bench", "--preset", "tiny", "--seq", "16", "--batch", "2", "--backend", "cpu", "--steps",
               "1", "--json", in_dir("absent/dir/bench.jsonl"), NULL);
    expect_error(&r, 1, "--json", "absent/dir/bench.jsonl", NULL);
    cr_assert_null(strstr(r.out, "step 0"), "the steps ran first:\n%s", r.out);
    mt_cli_result_free(&r);
}

Test(messages, plan_of_a_run_plans_that_run) {
    train_tiny("1");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--out", run, "--resume", "--backend", "cpu", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "ckpt-000001 at step 1"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "2 blocks of"), "not the run's tiny model (the demo has 4 blocks):\n%s", r.out);
    cr_assert_not_null(strstr(r.out, "8 sequences x 16 tokens") || strstr(r.out, "2 sequences x 16 tokens"),
                       "not the run's step:\n%s", r.out);
    mt_cli_result_free(&r);
}

Test(messages, tokenize_names_each_bad_value) {
    static const char *const cases[][3] = {{"--shard-size", "lots", "--shard-size 'lots'"},
                                           {"--threads", "0", "--threads '0'"},
                                           {"--dtype", "int8", "--dtype 'int8': expected uint16, uint32 or auto"},
                                           {"--bos", "maybe", "--bos 'maybe': expected auto, yes or no"},
                                           {"--chat", "perhaps", "--chat 'perhaps'"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", TOKENIZER, corpus, "--out", in_dir("p"), cases[i][0],
                   cases[i][1], NULL);
        expect_error(&r, 2, cases[i][2], NULL);
        cr_assert_null(strstr(r.err, "bad arguments"), "%s", r.err);
        mt_cli_result_free(&r);
    }
}

/* A run that fails (here: a NaN step past --max-skips 0) while its loss picture cannot be drawn
 * (loss.svg is a directory): the error is the run's, not the picture's. */
Test(messages, the_error_is_the_runs_not_what_failed_after_it) {
    cr_assert_eq(mkdir(run, 0755), 0);
    cr_assert_eq(mkdir(in_dir("run/loss.svg"), 0755), 0);
    setenv("MT_TEST_NAN_STEP", "2", 1);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "4", "--max-skips", "0", "--data", corpus, "--out", run,
               NULL);
    expect_error(&r, 1, "more than --max-skips 0 in a row", NULL);
    cr_assert_not_null(strstr(r.err, "loss picture not updated"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* The tiny Qwen3 directory with `poke` written over the last bytes of its weights. */
static const char *model_with(const char *name, const void *poke, size_t n) {
    const char *model = in_dir(name);
    char cmd[3 * PATH_MAX], weights[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "cp -r tests/data/safetensors/tiny_qwen3 %s", model);
    cr_assert_eq(system(cmd), 0);
    snprintf(weights, sizeof weights, "%s/model.safetensors", model);
    struct stat st;
    cr_assert_eq(stat(weights, &st), 0);
    FILE *f = fopen(weights, "r+b");
    fseek(f, st.st_size - (long)n, SEEK_SET);
    fwrite(poke, 1, n, f);
    fclose(f);
    return model;
}

static const char *qwen3_ids(void) {
    const char *data = in_dir("ids.bin");
    int32_t header[256] = {20240520, 1, 1000};
    FILE *f = fopen(data, "wb");
    fwrite(header, sizeof header, 1, f);
    for (int i = 0; i < 1000; i++) {
        uint16_t id = (uint16_t)(i * 7 % 10);
        fwrite(&id, 2, 1, f);
    }
    fclose(f);
    return data;
}

Test(messages, nan_weights_of_an_imported_model_are_refused_naming_the_tensor) {
    const uint16_t nan_bf16[2] = {0x7fc0, 0x7fc0};
    const char *model = model_with("nan_model", nan_bf16, sizeof nan_bf16);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", model, "--data", qwen3_ids(), "--seq", "16", "--batch", "2",
               "--backend", "cpu", "--steps", "1", "--out", run, NULL);
    expect_error(&r, 2, "model.safetensors", "tensor '", "non-finite", NULL);
    mt_cli_result_free(&r);
}

Test(messages, a_directory_named_model_safetensors_is_named_so) {
    const char *model = in_dir("model");
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/model.safetensors && cp tests/data/safetensors/tiny_qwen3/config.json %s/",
             model, model);
    cr_assert_eq(system(cmd), 0);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", model, "--data", qwen3_ids(), "--seq", "16", "--batch", "2",
               "--backend", "cpu", "--steps", "1", "--out", run, NULL);
    expect_error(&r, 2, "model.safetensors", "is a directory, not a safetensors file", NULL);
    cr_assert_null(strstr(r.err, "No such device"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* A tokenizer whose unk_token is missing from its vocabulary: the tokenizer is named, not only
 * the text that needed the unk. */
Test(messages, a_tokenizer_without_its_unk_token_is_blamed) {
    const char *tok = in_dir("tokenizer.json");
    hf_test_write_text(tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"</s>\": 2}, \"merges\": [],"
                            " \"unk_token\": \"<unk>\"}, \"added_tokens\": [{\"id\": 2, \"content\": \"</s>\", "
                            "\"special\": true}]}");
    const char *text = in_dir("text.txt");
    hf_test_write_text(text, "abc");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", tok, text, "--out", in_dir("p"), NULL);
    expect_error(&r, 2, tok, "unk_token \"<unk>\" is not in its vocabulary", NULL);
    mt_cli_result_free(&r);
}

Test(messages, an_invalid_prompt_is_blamed_not_the_checkpoint) {
    const char *config = in_dir("config.json");
    hf_test_write_text(config, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": "
                               "64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
                               "\"vocab_size\": 2324, \"max_position_embeddings\": 128}");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--tokenizer", TOKENIZER, "--data", corpus, "--seq", "16",
               "--batch", "2", "--backend", "cpu", "--steps", "0", "--out", run, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "--prompt", "caf\xe9", "--tokens", "1", "--backend", "cpu", NULL);
    expect_error(&r, 2, "megatrain: error: --prompt: ", NULL);
    cr_assert_null(strstr(r.err, "ckpt-"), "the checkpoint is blamed:\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(messages, a_jsonl_file_starting_with_a_byte_order_mark_is_read) {
    const char *jsonl = in_dir("docs.jsonl");
    hf_test_write_text(jsonl, "\xef\xbb\xbf{\"text\": \"first\"}\n{\"text\": \"second\"}\n");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", TOKENIZER, jsonl, "--out", in_dir("p"), NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "tokenized 2 documents"), "%s", r.out);
    mt_cli_result_free(&r);
}

Test(messages, a_small_models_memory_refusal_shows_its_sizes) {
    setenv("MT_TEST_HOST_AVAILABLE", "1MB", 1);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", run, NULL);
    expect_error(&r, 1, "MB of host memory", "1.0 MB available", NULL);
    cr_assert_null(strstr(r.err, "0.00 GB"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* A path that is not UTF-8 (which JSON, and so the run's settings, cannot hold) is refused naming
 * its option, exit 2, before anything is written. */
Test(messages, paths_not_utf8_are_refused_naming_the_option_leaving_nothing) {
    char bad_data[PATH_MAX + 16], bad_out[PATH_MAX + 16];
    snprintf(bad_data, sizeof bad_data, "%s/\xff\xfe.txt", dir);
    snprintf(bad_out, sizeof bad_out, "%s/\xffrun", dir);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", corpus, bad_data);
    cr_assert_eq(system(cmd), 0);
    const char *cases[][3] = {{"--data", bad_data, run}, {"--val-data", bad_data, run}, {"--data", corpus, bad_out}};
    for (int i = 0; i < 3; i++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, cases[i][0], cases[i][1],
                   "--out", cases[i][2], NULL);
        char option[32];
        snprintf(option, sizeof option, "%s: the value is not UTF-8", i == 2 ? "--out" : cases[i][0]);
        expect_error(&r, 2, option, NULL);
        mt_cli_result_free(&r);
        cr_assert(!mt_test_exists(run) && !mt_test_exists(bad_out), "a refused run left its directory");
    }
}

/* Numbers a plan shows: a rate outside physical range is refused (not a time of 300 digits), and
 * a budget below a hundredth of a GiB is shown in its own unit, not as 0.00 GiB. */
Test(messages, plan_refuses_unphysical_rates_and_shows_small_budgets_in_bytes) {
    const char *rates[] = {"--rate-gemm", "--rate-pcie", "--rate-adamw"};
    for (int i = 0; i < 3; i++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "tiny", "--backend", "cpu", rates[i], "1e-300", NULL);
        char says[64];
        snprintf(says, sizeof says, "%s '1e-300': must be a number in [0.001, ", rates[i]);
        expect_error(&r, 2, says, NULL);
        mt_cli_result_free(&r);
    }
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "tiny", "--backend", "cpu", "--gpu-mem", "1000", NULL);
    cr_assert(!r.timed_out && r.signal == 0, "%s", r.err);
    cr_assert(strstr(r.out, "the device budget of 1000 bytes (--gpu-mem)") && !strstr(r.out, "0.00 GiB (--gpu-mem)"),
              "%s", r.out);
    mt_cli_result_free(&r);
}

/* --data given, missing: named as the user's file, exit 2, never as the missing demo corpus. */
Test(messages, a_missing_data_file_the_user_named_is_theirs) {
    char bin[PATH_MAX];
    cr_assert_not_null(realpath(getenv("MT_BIN"), bin), "MT_BIN");
    setenv("MT_BIN", bin, 1);
    cr_assert_eq(chdir(dir), 0); /* no data/kjv.txt here */
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", "data/kjv.txt", "--out", run, NULL);
    expect_error(&r, 2, "--data ", "data/kjv.txt: No such file or directory", NULL);
    cr_assert_null(strstr(r.err, "demo corpus"), "%s", r.err);
    mt_cli_result_free(&r);
}
