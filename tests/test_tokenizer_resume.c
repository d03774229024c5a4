/* The tokenizer is a fixed setting of a run (src/train/settings.c): `megatrain train --data TEXT
 * --tokenizer DIR ... --resume` ($MT_BIN) with another tokenizer than the run started with is
 * refused with a message naming both and leaves the run as it was; the same tokenizer resumes
 * (its cached tokens reused), and so does leaving --tokenizer out. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "tokenizer_files.h"
#include "test_limits.h"

#define TIMEOUT_S 60.0
#define SMALL_STEP "--seq", "32", "--batch", "2", "--backend", "cpu", "--eval-every", "0"

static char dir[PATH_MAX];

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

/* A model directory holding reference tokenizer `name`'s tokenizer.json and tokenizer_config.json. */
static void copy_tokenizer(const char *name, const char *to_dir) {
    cr_assert_eq(mkdir(to_dir, 0755), 0);
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char from[PATH_MAX + 32], to[PATH_MAX + 32];
        snprintf(from, sizeof from, "%s/%s", tok_test_dir(name), files[i]);
        size_t len;
        char *text = tok_test_read(from, &len);
        FILE *f = fopen(hf_test_path(to, to_dir, files[i]), "wb");
        cr_assert_not_null(f, "cannot create %s", to);
        cr_assert_eq(fwrite(text, 1, len, f), len);
        fclose(f);
        free(text);
    }
}

/* A small Llama whose vocabulary holds both tokenizers' ids. */
static void write_config(const char *path) {
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2, "num_attention_heads", 2,
                          "num_key_value_heads", 2, "vocab_size", 2400, "max_position_embeddings", 128);
    cr_assert_eq(json_dump_file(c, path, 0), 0);
    json_decref(c);
}

static void make_fixtures(void) {
    hf_test_mkdtemp(dir);
    copy_tokenizer("gpt2-bytelevel", in_dir("started-tok"));
    copy_tokenizer("mistral-metaspace", in_dir("other-tok"));
    write_config(in_dir("config.json"));
    mt_test_write_corpus(in_dir("corpus.txt"));
}

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(tokenizer_resume, .init = make_fixtures, .fini = remove_fixtures);

static void run_train(mt_cli_result *r, const char *tokenizer, const char *steps, int resume) {
    if (tokenizer)
        mt_cli_run(r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", tokenizer, "--data",
                   in_dir("corpus.txt"), SMALL_STEP, "--steps", steps, "--out", in_dir("run"),
                   resume ? "--resume" : NULL, NULL);
    else
        mt_cli_run(r, TIMEOUT_S, "train", "--data", in_dir("corpus.txt"), SMALL_STEP, "--steps", steps, "--out",
                   in_dir("run"), "--resume", NULL);
    cr_assert(!r->timed_out && r->signal == 0, "megatrain died or hung; stderr:\n%s", r->err);
}

/* Whether the run holds a checkpoint of `step`. */
static int has_checkpoint(int step) {
    char name[32];
    snprintf(name, sizeof name, "run/ckpt-%06d", step);
    return mt_test_exists(in_dir(name));
}

Test(tokenizer_resume, another_tokenizer_is_refused_naming_both, .timeout = MT_TEST_LIMIT(120)) {
    mt_cli_result r;
    char started[PATH_MAX], other[PATH_MAX];
    snprintf(started, sizeof started, "%s", in_dir("started-tok"));
    snprintf(other, sizeof other, "%s", in_dir("other-tok"));
    run_train(&r, started, "2", 0);
    cr_assert_eq(r.exit_code, 0, "stderr:\n%s", r.err);
    mt_cli_result_free(&r);

    /* Another tokenizer: refused, both named, the run left at step 2. */
    run_train(&r, other, "4", 1);
    cr_expect_neq(r.exit_code, 0, "a resumed run took another tokenizer; stderr:\n%s", r.err);
    cr_expect(strstr(r.err, "--tokenizer") && strstr(r.err, other) && strstr(r.err, started),
              "the message should name --tokenizer, %s and %s:\n%s", other, started, r.err);
    cr_expect(strstr(r.err, "cannot change"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect(has_checkpoint(2) && !has_checkpoint(4), "the refused run changed the run's checkpoints");

    /* The same tokenizer resumes from step 2, its tokens read from the cache. */
    run_train(&r, started, "3", 1);
    cr_expect_eq(r.exit_code, 0, "the same tokenizer was refused; stderr:\n%s", r.err);
    cr_expect(strstr(r.err, "cached") && !strstr(r.err, "tokenizing"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect(has_checkpoint(3), "the resumed run saved no step-3 checkpoint");

    /* Left out, the run's own tokenizer is used. */
    run_train(&r, NULL, "4", 1);
    cr_expect_eq(r.exit_code, 0, "stderr:\n%s", r.err);
    cr_expect(strstr(r.err, "cached"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect(has_checkpoint(4), "the resumed run saved no step-4 checkpoint");
}
