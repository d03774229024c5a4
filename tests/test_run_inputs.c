/* A run never goes on silently on changed inputs: its checkpoints keep what identifies each input
 * (absolute path, size, modification time, a hash of the contents), and a resume refuses a data
 * file changed in place (unless --accept-changed-data), a tokenizer edited in place (sample too),
 * and an --init-from other than the run's own; a relative --data resumes from another working
 * directory on the same file; a checkpoint written before identities were kept still resumes. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(inputs, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static void run_ok(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

static void refused(const mt_cli_result *r, const char *what, const char *why) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 2, "exit %d:\n%s", r->exit_code, r->err);
    cr_assert_not_null(strstr(r->err, what), "stderr does not name '%s':\n%s", what, r->err);
    cr_assert_not_null(strstr(r->err, why), "stderr does not say '%s':\n%s", why, r->err);
}

static void train(const char *steps, mt_cli_result *r, const char *extra) {
    mt_cli_run(r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", steps, "--data", corpus, "--out", run, "--resume", extra,
               NULL);
}

/* Overwrites `n` bytes at `at` of a file in place (its size unchanged). */
static void overwrite(const char *path, long at, const char *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, at, SEEK_SET);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

Test(inputs, data_changed_in_place_is_refused_unless_accepted) {
    mt_cli_result r;
    train("2", &r, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    overwrite(corpus, 5000, "CHANGED", 7);
    train("3", &r, NULL);
    refused(&r, corpus, "its contents differ");
    cr_assert_not_null(strstr(r.err, "--accept-changed-data"), "%s", r.err);
    mt_cli_result_free(&r);
    train("3", &r, "--accept-changed-data");
    run_ok(&r);
    cr_assert_not_null(strstr(r.err, "taken as it is now"), "%s", r.err);
    mt_cli_result_free(&r);
    /* Its new identity is the run's now: the next resume takes it without a word. */
    train("4", &r, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    /* Grown: the size is named. */
    FILE *f = fopen(corpus, "a");
    fputs("more words.\n", f);
    fclose(f);
    train("5", &r, NULL);
    refused(&r, corpus, "its size was");
    mt_cli_result_free(&r);
}

/* Started with a relative --data in one directory, resumed (no --data) from another: the same
 * file, which the checkpoint keeps by its absolute path. */
Test(inputs, a_relative_data_path_resumes_from_another_directory) {
    char here[PATH_MAX];
    cr_assert_not_null(getcwd(here, sizeof here));
    cr_assert_eq(chdir(dir), 0);
    mt_cli_result r;
    char bin[2 * PATH_MAX + 2];
    snprintf(bin, sizeof bin, "%s/%s", here, getenv("MT_BIN"));
    if (getenv("MT_BIN")[0] != '/') setenv("MT_BIN", bin, 1);
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "2", "--data", "corpus.txt", "--out", "run", NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    cr_assert_eq(mkdir(in_dir("elsewhere"), 0755), 0);
    cr_assert_eq(chdir(in_dir("elsewhere")), 0);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "3", "--backend", "cpu", NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    json_t *meta;
    char ckpt[PATH_MAX + 16];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000003", run);
    cr_assert_eq(mt_checkpoint_read_meta(ckpt, &meta), MT_OK, "%s", mt_error());
    const char *data = json_string_value(json_object_get(json_object_get(meta, "settings"), "data"));
    cr_assert(data && !strcmp(data, corpus), "the run keeps --data as %s, not %s", data, corpus);
    json_decref(meta);
    cr_assert_eq(chdir(here), 0);
}

/* A run on text with a tokenizer, whose tokenizer.json is then edited in place. */
Test(inputs, a_tokenizer_edited_in_place_is_refused_by_resume_and_sample) {
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "mkdir %s && cp tests/data/tokenizers/gpt2-bytelevel/tokenizer.json %s/",
             in_dir("tok"), in_dir("tok"));
    cr_assert_eq(system(cmd), 0);
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2, "num_attention_heads", 2,
                          "num_key_value_heads", 2, "vocab_size", 2324, "max_position_embeddings", 128);
    cr_assert_eq(json_dump_file(c, in_dir("config.json"), 0), 0);
    json_decref(c);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               corpus, "--seq", "16", "--batch", "2", "--backend", "cpu", "--eval-every", "0", "--steps", "2", "--out",
               run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    /* "ing" becomes "ign": another token's text, the file's size unchanged. */
    const char *json = in_dir("tok/tokenizer.json");
    FILE *f = fopen(json, "rb");
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, "\"ing\"");
    cr_assert_not_null(at);
    overwrite(json, at - text, "\"ign\"", 5);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "3", "--backend", "cpu", NULL);
    refused(&r, "tokenizer.json", "its contents differ");
    cr_assert_not_null(strstr(r.err, "tokenizer"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "--prompt", "the", "--tokens", "2", "--backend", "cpu", NULL);
    refused(&r, "tokenizer.json", "changed since the run stored it");
    mt_cli_result_free(&r);
}

/* The tiny Qwen3 model directory copied to `to`, with the byte at `poke` of its weights changed
 * when poke >= 0 (the same shapes, other weights). */
static void copy_model(const char *to, long poke) {
    char cmd[4 * PATH_MAX], weights[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "cp -r tests/data/safetensors/tiny_qwen3 %s", to);
    cr_assert_eq(system(cmd), 0);
    snprintf(weights, sizeof weights, "%s/model.safetensors", to);
    struct stat st;
    cr_assert_eq(stat(weights, &st), 0);
    if (poke >= 0) overwrite(weights, st.st_size - 1 - poke, "\x3f", 1);
}

Test(inputs, resume_refuses_an_init_from_other_than_the_runs_own) {
    const char *a = in_dir("model_a"), *b = in_dir("model_b"), *data = in_dir("ids.bin");
    copy_model(a, -1);
    copy_model(b, 3);
    int32_t header[256] = {20240520, 1, 1000};
    FILE *f = fopen(data, "wb");
    fwrite(header, sizeof header, 1, f);
    for (int i = 0; i < 1000; i++) {
        uint16_t id = (uint16_t)(i * 7 % 10);
        fwrite(&id, 2, 1, f);
    }
    fclose(f);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", a, "--data", data, "--seq", "16", "--batch", "2", "--backend",
               "cpu", "--eval-every", "0", "--steps", "1", "--out", run, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", b, "--out", run, "--resume", "--steps", "2", "--backend", "cpu",
               NULL);
    refused(&r, b, "a run initialized from");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", a, "--out", run, "--resume", "--steps", "2", "--backend", "cpu",
               NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    /* The run's own directory, its weights since replaced in place: refused too. */
    char weights[PATH_MAX + 32];
    snprintf(weights, sizeof weights, "%s/model.safetensors", a);
    struct stat st;
    cr_assert_eq(stat(weights, &st), 0);
    overwrite(weights, st.st_size - 2, "\x3f", 1);
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", a, "--out", run, "--resume", "--steps", "3", "--backend", "cpu",
               NULL);
    refused(&r, "model.safetensors", "changed since");
    mt_cli_result_free(&r);
    /* Left out, the run goes on from its checkpoint whatever the directory holds now. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "3", "--backend", "cpu", NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
}

/* A checkpoint written before identities were kept: its settings have no "inputs". */
Test(inputs, a_checkpoint_without_identities_still_resumes) {
    mt_cli_result r;
    train("2", &r, NULL);
    run_ok(&r);
    mt_cli_result_free(&r);
    char ckpt[PATH_MAX + 16];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000002", run);
    json_t *meta;
    cr_assert_eq(mt_checkpoint_read_meta(ckpt, &meta), MT_OK, "%s", mt_error());
    cr_assert_not_null(json_object_get(json_object_get(meta, "settings"), "inputs"), "no inputs kept");
    json_object_del(json_object_get(meta, "settings"), "inputs");
    cr_assert_eq(mt_checkpoint_update_meta(ckpt, meta), MT_OK, "%s", mt_error());
    json_decref(meta);
    overwrite(corpus, 100, "x", 1); /* unchecked then: nothing says what it was */
    train("3", &r, NULL);
    run_ok(&r);
    cr_assert_not_null(strstr(r.err, "written before checkpoints kept what identifies their inputs"), "%s", r.err);
    mt_cli_result_free(&r);
    /* From then on they are kept. */
    overwrite(corpus, 100, "y", 1);
    train("4", &r, NULL);
    refused(&r, corpus, "its contents differ");
    mt_cli_result_free(&r);
}
