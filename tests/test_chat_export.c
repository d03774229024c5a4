/* A fine-tuned model leaves megatrain whole: `export` writes the run's tokenizer files and chat
 * template beside the weights, in a directory others can read, which `tokenize --tokenizer` and
 * `train --init-from` take back; `sample --chat` answers a user message rendered with the run's
 * template and stops at the end of the turn. The generation prompt of every known template is
 * the text Jinja2 renders with add_generation_prompt (tests/data/chat/render_file_jinja.py). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "chat_test_files.h"
#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "tokenizer/chat_template.h"
#include "tokenizer_files.h"

#define TIMEOUT_S 120.0
#define TOKENIZER_JSON "tests/data/tokenizers/gpt2-bytelevel/tokenizer.json"
#define QWEN2_CONFIG "tests/data/chat/qwen2/tokenizer_config.json"
#define RENDER "/usr/bin/python3 tests/data/chat/render_file_jinja.py"
#define SMALL_STEP "--seq", "128", "--batch", "4", "--backend", "cpu", "--eval-every", "0"

static char dir[PATH_MAX];

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static char *template_of(const char *config) {
    json_t *cfg = chat_test_json(config);
    char *t = strdup(json_string_value(json_object_get(cfg, "chat_template")));
    json_decref(cfg);
    return t;
}

static char *read_text(const char *path) {
    size_t n;
    return tok_test_read(path, &n);
}

static void make_fixtures(void) {
    umask(022);
    hf_test_mkdtemp(dir);
    /* A base model's tokenizer with ChatML's special tokens (2324, 2325) but no chat template;
     * Qwen2's in a file of its own. */
    char path[PATH_MAX];
    mkdir(in_dir("base"), 0755);
    json_error_t err;
    json_t *tok = json_load_file(TOKENIZER_JSON, 0, &err);
    cr_assert_not_null(tok, "%s", err.text);
    for (int id = 2324; id <= 2325; id++)
        json_array_append_new(json_object_get(tok, "added_tokens"),
                              json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content",
                                        id == 2324 ? "<|im_start|>" : "<|im_end|>", "single_word", 0, "lstrip", 0,
                                        "rstrip", 0, "normalized", 0, "special", 1));
    cr_assert_eq(json_dump_file(tok, hf_test_path(path, in_dir("base"), "tokenizer.json"), 0), 0);
    json_decref(tok);
    hf_test_write_text(hf_test_path(path, in_dir("base"), "tokenizer_config.json"),
                       "{\"eos_token\": \"<|endoftext|>\", \"model_max_length\": 1000000000000000019884624838656}");
    char *qwen2 = template_of(QWEN2_CONFIG);
    hf_test_write_text(in_dir("qwen2.jinja"), qwen2);
    free(qwen2);
    /* Every answer the same, so that a few steps teach the model to give it and end its turn. */
    FILE *f = fopen(in_dir("chat.jsonl"), "w");
    cr_assert_not_null(f);
    for (int i = 1; i <= 40; i++)
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"What is %d plus %d?\"}, {\"role\": \"assistant\", "
                   "\"content\": \"Yes.\"}]}\n", i, i);
    fclose(f);
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2, "num_attention_heads", 2,
                          "num_key_value_heads", 2, "vocab_size", 2326, "max_position_embeddings", 128, "eos_token_id",
                          2323);
    cr_assert_eq(json_dump_file(c, in_dir("config.json"), 0), 0);
    json_decref(c);
}

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(chat_export, .init = make_fixtures, .fini = remove_fixtures);

static void assert_succeeded(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "megatrain died or hung; stderr:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d; stderr:\n%s", r->exit_code, r->err);
}

#define RUN_OK(...)                                  \
    do {                                             \
        mt_cli_result r_;                            \
        mt_cli_run(&r_, TIMEOUT_S, __VA_ARGS__, NULL); \
        assert_succeeded(&r_);                       \
        mt_cli_result_free(&r_);                     \
    } while (0)

static void expect_mode(const char *path, mode_t mode) {
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s is missing", path);
    cr_expect_eq(st.st_mode & 07777, mode, "%s: mode %o, not %o", path, st.st_mode & 07777, mode);
}

/* chat_test_json reads numbers as reals. */
static int holds_id(const json_t *eos, int id) {
    for (size_t i = 0; i < json_array_size(eos); i++)
        if (json_number_value(json_array_get(eos, i)) == id) return 1;
    return 0;
}

Test(chat_export, export_is_a_whole_model_that_tokenize_and_init_from_read_back) {
    RUN_OK("train", "--config", in_dir("config.json"), "--tokenizer", in_dir("base"), "--chat-template",
           in_dir("qwen2.jinja"), "--data", in_dir("chat.jsonl"), SMALL_STEP, "--steps", "1", "--out", in_dir("run"));
    RUN_OK("export", in_dir("run"), in_dir("model"));

    expect_mode(in_dir("model"), 0755);
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) expect_mode(hf_test_path(path, in_dir("model"), files[i]), 0644);
    char *want = read_text(in_dir("base/tokenizer.json")), *got = read_text(in_dir("model/tokenizer.json"));
    cr_expect(!strcmp(want, got), "tokenizer.json is not the run's");
    free(want);
    free(got);
    want = read_text(in_dir("qwen2.jinja"));
    got = read_text(in_dir("model/chat_template.jinja"));
    cr_expect_str_eq(got, want);
    free(got);
    json_t *cfg = chat_test_json(in_dir("model/tokenizer_config.json"));
    cr_expect_str_eq(json_string_value(json_object_get(cfg, "chat_template")), want);
    cr_expect_str_eq(json_string_value(json_object_get(cfg, "eos_token")), "<|endoftext|>");
    cr_expect(json_real_value(json_object_get(cfg, "model_max_length")) > 1e29, "model_max_length lost");
    json_decref(cfg);
    free(want);
    json_t *map = chat_test_json(in_dir("model/special_tokens_map.json"));
    cr_expect_str_eq(json_string_value(json_object_get(map, "eos_token")), "<|endoftext|>");
    json_decref(map);
    /* generation ends at the model's eos, the tokenizer's and the template's end of turn */
    mt_tokenizer *tok;
    cr_assert_eq(mt_tokenizer_load(in_dir("base"), &tok), MT_OK, "%s", mt_error());
    json_t *gen = chat_test_json(in_dir("model/generation_config.json"));
    const json_t *eos = json_object_get(gen, "eos_token_id");
    cr_expect(json_array_size(eos) == 2 && holds_id(eos, 2323) && mt_tokenizer_token_id(tok, "<|endoftext|>") == 2323 &&
              holds_id(eos, 2325) && mt_tokenizer_token_id(tok, "<|im_end|>") == 2325, "eos_token_id %s",
              json_dumps(eos, 0));
    json_decref(gen);
    mt_tokenizer_free(tok);

    /* The export as a tokenizer: the same shards as the run's tokenizer and template. */
    RUN_OK("tokenize", "--tokenizer", in_dir("model"), in_dir("chat.jsonl"), "--out", in_dir("shards/export"));
    RUN_OK("tokenize", "--tokenizer", in_dir("base"), "--chat-template", in_dir("qwen2.jinja"), in_dir("chat.jsonl"),
           "--out", in_dir("shards/base"));
    size_t na, nb;
    char *a = tok_test_read(in_dir("shards/export_000000.bin"), &na), *b = tok_test_read(in_dir("shards/base_000000.bin"), &nb);
    cr_expect(na == nb && !memcmp(a, b, na), "the export tokenizes the chat data otherwise than the run did");
    free(a);
    free(b);

    /* And as a model to fine-tune, whose own template renders the chat data. */
    RUN_OK("train", "--init-from", in_dir("model"), "--data", in_dir("chat.jsonl"), SMALL_STEP, "--steps", "1", "--out",
           in_dir("again"));
}

Test(chat_export, sample_chat_answers_and_stops_at_the_end_of_the_turn) {
    RUN_OK("train", "--config", in_dir("config.json"), "--tokenizer", in_dir("base"), "--chat-template",
           in_dir("qwen2.jinja"), "--data", in_dir("chat.jsonl"), SMALL_STEP, "--steps", "60", "--lr", "1e-2", "--out",
           in_dir("run"));
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "sample", in_dir("run"), "--chat", "What is 7 plus 7?", "--tokens", "30", "--temperature",
               "0", "--backend", "cpu", NULL);
    assert_succeeded(&r);
    cr_expect_str_eq(r.out, "Yes.\n", "not the learned answer, ended with its turn");
    mt_cli_result_free(&r);

    mt_cli_run(&r, TIMEOUT_S, "sample", in_dir("run"), "--chat", "Hi", "--prompt", "Hi", "--backend", "cpu", NULL);
    cr_expect_eq(r.exit_code, 2, "--chat with --prompt: exit %d\n%s", r.exit_code, r.err);
    mt_cli_result_free(&r);
}

/* The generation prompt of each known template: the text Jinja2 renders for one user message with
 * add_generation_prompt=True, as transformers does. */
Test(chat_export, generation_prompt_of_every_template_is_jinja2s) {
    static const char *const names[] = {"llama3", "llama3-gen", "llama3.1", "llama3.2", "qwen2", "qwen2.5", "qwen3",
                                        "qwen3-thinking-2507", "llama2", "mistral-v0.1", "mistral-v0.2", "mistral-v0.3"};
    static const char message[] = "What is 2 plus 2?";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char config[PATH_MAX], cmd[PATH_MAX * 3];
        snprintf(config, sizeof config, CHAT_DATA "/%s/tokenizer_config.json", names[i]);
        char *text = template_of(config);
        hf_test_write_text(in_dir("t.jinja"), text);
        free(text);
        mt_chat_template t;
        chat_test_template(names[i], &t);
        snprintf(cmd, sizeof cmd, RENDER " %s '%s' '%s' --prompt '%s' > %s", in_dir("t.jinja"), t.bos, t.eos, message,
                 in_dir("want.txt"));
        int rc = system(cmd);
        cr_assert_neq(WEXITSTATUS(rc), 2, "/usr/bin/python3 cannot import jinja2: install python3-jinja2");
        cr_assert_eq(rc, 0, "%s failed", cmd);
        mt_chat_message user = {.role = MT_ROLE_USER, .content = message, .len = strlen(message)};
        mt_chat_rendered r;
        cr_assert_eq(mt_chat_render_prompt(&t, &user, 1, &r), MT_OK, "%s: %s", names[i], mt_error());
        size_t len = 0;
        for (size_t k = 0; k < r.n; k++) {
            cr_assert(!r.seg[k].trainable, "%s: the prompt carries loss", names[i]);
            len += r.seg[k].len;
        }
        char *got = malloc(len + 1), *want = read_text(in_dir("want.txt"));
        for (size_t k = 0, at = 0; k < r.n; at += r.seg[k].len, k++) memcpy(got + at, r.seg[k].text, r.seg[k].len);
        got[len] = '\0';
        cr_expect_str_eq(got, want, "%s", names[i]);
        free(got);
        free(want);
        mt_chat_rendered_free(&r);
        mt_chat_template_free(&t);
    }
}
