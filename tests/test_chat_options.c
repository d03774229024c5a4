/* How chat data is rendered and where its loss goes, through the megatrain command ($MT_BIN): a
 * model directory's chat_template.jinja (which wins over tokenizer_config.json's, as in
 * transformers), --chat-template FILE for a base model, each rendering the text Jinja2 renders from
 * the same file as transformers does (tests/data/chat/render_file_jinja.py, python3-jinja2); and
 * --loss-on assistant|last-turn|all, in tokenize and as a train setting that a resume keeps, as is
 * --analysis-loss on|off (gpt-oss's analysis channel, rendered with its template). The
 * tokenizer is the small byte-level BPE of tests/data/tokenizers/gpt2-bytelevel, which decodes
 * its ids back to the exact text. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/tokens.h"
#include "run_fixture.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_files.h"

#define TIMEOUT_S 60.0
#define TOKENIZER_JSON "tests/data/tokenizers/gpt2-bytelevel/tokenizer.json"
#define QWEN2_CONFIG "tests/data/chat/qwen2/tokenizer_config.json"
#define QWEN25_CONFIG "tests/data/chat/qwen2.5/tokenizer_config.json"
#define RENDER "/usr/bin/python3 tests/data/chat/render_file_jinja.py"

static char dir[PATH_MAX];

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static char *template_of(const char *config) {
    json_error_t err;
    json_t *cfg = json_load_file(config, JSON_DECODE_INT_AS_REAL, &err);
    cr_assert_not_null(cfg, "%s: %s", config, err.text);
    char *t = strdup(json_string_value(json_object_get(cfg, "chat_template")));
    json_decref(cfg);
    return t;
}

/* A model directory's tokenizer files: the byte-level BPE, a tokenizer_config.json whose
 * chat_template is `config_template` (none when NULL) and a chat_template.jinja holding `jinja`
 * (none when NULL). */
static void write_tokenizer(const char *to, const char *config_template, const char *jinja) {
    char path[PATH_MAX];
    mkdir(to, 0755);
    size_t n;
    char *json = tok_test_read(TOKENIZER_JSON, &n);
    hf_test_write_text(hf_test_path(path, to, "tokenizer.json"), json);
    free(json);
    json_t *cfg = json_pack("{s:s, s:o}", "eos_token", "<|endoftext|>", "chat_template",
                            config_template ? json_string(config_template) : json_null());
    cr_assert_eq(json_dump_file(cfg, hf_test_path(path, to, "tokenizer_config.json"), 0), 0);
    json_decref(cfg);
    if (jinja) hf_test_write_text(hf_test_path(path, to, "chat_template.jinja"), jinja);
}

/* Conversations of two exchanges each, then a single exchange. */
static void write_chat(const char *path) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 1; i <= 12; i++)
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"What is %d plus %d?\"}, {\"role\": \"assistant\", "
                   "\"content\": \"It is %d.\"}, {\"role\": \"user\", \"content\": \"And times two?\"}, {\"role\": "
                   "\"assistant\", \"content\": \"%d.\"}]}\n", i, i, 2 * i, 4 * i);
    fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}, {\"role\": \"assistant\", \"content\": "
               "\"Hi.\"}]}\n");
    fclose(f);
}

static void make_fixtures(void) {
    hf_test_mkdtemp(dir);
    char *qwen2 = template_of(QWEN2_CONFIG);
    write_tokenizer(in_dir("tok"), qwen2, NULL);
    write_tokenizer(in_dir("base"), NULL, NULL);
    hf_test_write_text(in_dir("qwen2.jinja"), qwen2);
    free(qwen2);
    write_chat(in_dir("chat.jsonl"));
}

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(chat_options, .init = make_fixtures, .fini = remove_fixtures);

static void assert_ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "megatrain died or hung; stderr:\n%s", r->err);
}

static void assert_succeeded(const mt_cli_result *r) {
    assert_ran(r);
    cr_assert_eq(r->exit_code, 0, "exit %d; stderr:\n%s", r->exit_code, r->err);
}

static void assert_refused(const mt_cli_result *r, const char *what, const char *problem) {
    assert_ran(r);
    cr_assert_eq(r->exit_code, 2, "exit %d for a bad input; stderr:\n%s", r->exit_code, r->err);
    cr_assert(strstr(r->err, what), "stderr does not name '%s':\n%s", what, r->err);
    cr_assert(strstr(r->err, problem), "stderr does not say '%s':\n%s", problem, r->err);
}

/* The one masked shard PREFIX_000000.bin: its ids and loss flags (malloc'd) and the example starts. */
typedef struct {
    int32_t *ids;
    uint8_t *mask;
    size_t n, examples;
    uint64_t starts[64];
} shard;

static shard read_shard(const char *prefix) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s_000000.bin", prefix);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path, &t), MT_OK, "%s", mt_error());
    cr_assert_eq(t.format, MT_TOKENS_MASKED);
    shard s = {.n = t.count, .ids = malloc(t.count * sizeof(int32_t)), .mask = malloc(t.count)};
    mt_tokens_copy(&t, 0, t.count, s.ids);
    mt_tokens_copy_mask(&t, 0, t.count, s.mask);
    const uint64_t *starts;
    s.examples = mt_tokens_examples(&t, &starts);
    cr_assert(s.examples > 0 && s.examples <= 64);
    memcpy(s.starts, starts, s.examples * sizeof *starts);
    mt_tokens_close(&t);
    return s;
}

static void free_shard(shard *s) {
    free(s->ids);
    free(s->mask);
}

static shard tokenize(const char *tokenizer, const char *prefix, const char *opt, const char *value) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", tokenizer, in_dir("chat.jsonl"), "--out", prefix, opt, value,
               NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    return read_shard(prefix);
}

/* Asserts that the shard holds, conversation by conversation, the ids of Jinja2's rendering of
 * chat.jsonl with template file `file` encoded whole with special tokens matched: what
 * transformers' apply_chat_template(tokenize=True) gives. Returns the first rendering (malloc'd). */
static char *expect_jinja_ids(const char *tokenizer, const shard *s, const char *file) {
    char cmd[PATH_MAX * 3];
    snprintf(cmd, sizeof cmd, RENDER " %s '' '<|endoftext|>' %s > %s", file, in_dir("chat.jsonl"), in_dir("want.json"));
    int rc = system(cmd);
    cr_assert_neq(WEXITSTATUS(rc), 2, "/usr/bin/python3 cannot import jinja2: install python3-jinja2 (Debian; "
                  "scripts/install-deps.sh does)");
    cr_assert_eq(rc, 0, "%s failed", cmd);
    json_error_t err;
    json_t *want = json_load_file(in_dir("want.json"), 0, &err);
    cr_assert(json_is_array(want) && json_array_size(want) == s->examples, "%s: %s", in_dir("want.json"), err.text);
    mt_tokenizer *tok;
    cr_assert_eq(mt_tokenizer_load(tokenizer, &tok), MT_OK, "%s", mt_error());
    for (size_t e = 0; e < s->examples; e++) {
        const json_t *text = json_array_get(want, e);
        mt_ids ids = tok_test_encode(tok, json_string_value(text));
        size_t from = s->starts[e], to = e + 1 < s->examples ? s->starts[e + 1] : s->n;
        cr_assert_eq(ids.n, to - from, "conversation %zu: %zu tokens, Jinja2's text encodes to %zu", e, to - from, ids.n);
        for (size_t i = 0; i < ids.n; i++)
            cr_assert_eq(s->ids[from + i], ids.ids[i], "conversation %zu, token %zu; Jinja2's text:\n%s", e, i,
                         json_string_value(text));
        mt_ids_free(&ids);
    }
    mt_tokenizer_free(tok);
    char *first = strdup(json_string_value(json_array_get(want, 0)));
    json_decref(want);
    return first;
}

Test(chat_options, chat_template_jinja_wins_and_renders_as_jinja2_does) {
    /* tokenizer_config.json has Qwen2's template, chat_template.jinja Qwen2.5's (another default
     * system prompt), written as transformers saves it, with a final newline that Jinja drops. */
    char *qwen2 = template_of(QWEN2_CONFIG), *qwen25 = template_of(QWEN25_CONFIG), *jinja = malloc(strlen(qwen25) + 2);
    sprintf(jinja, "%s\n", qwen25);
    write_tokenizer(in_dir("both"), qwen2, jinja);
    shard s = tokenize(in_dir("both"), in_dir("out/both"), "--loss-on", "assistant");
    char *first = expect_jinja_ids(in_dir("both"), &s, in_dir("both/chat_template.jinja"));
    cr_expect(strstr(first, "You are Qwen, created by Alibaba Cloud"), "not Qwen2.5's template:\n%s", first);
    free(first);
    free_shard(&s);
    free(qwen2);
    free(qwen25);
    free(jinja);
}

Test(chat_options, chat_template_option_renders_for_a_base_model) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("base"), in_dir("chat.jsonl"), "--out", in_dir("out/none"),
               NULL);
    assert_refused(&r, "base/tokenizer_config.json", "--chat-template FILE");
    mt_cli_result_free(&r);

    shard s = tokenize(in_dir("base"), in_dir("out/base"), "--chat-template", in_dir("qwen2.jinja"));
    free(expect_jinja_ids(in_dir("base"), &s, in_dir("qwen2.jinja")));
    free_shard(&s);

    /* A custom template, with a macro and a namespace: rendered by the interpreter as Jinja2 renders
     * it; the answers (the text each assistant message adds to the render before it with the
     * generation prompt) carry loss. */
    hf_test_write_text(in_dir("custom.jinja"),
                       "{% macro turn(role, text) %}<|im_start|>{{ role|upper }}: {{ text|trim }}<|im_end|>{% endmacro %}"
                       "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                       "{{ turn(m['role'], m['content']) }}\n{% endfor %}{% if add_generation_prompt %}"
                       "<|im_start|>ASSISTANT: {% endif %}");
    s = tokenize(in_dir("base"), in_dir("out/custom"), "--chat-template", in_dir("custom.jinja"));
    free(expect_jinja_ids(in_dir("base"), &s, in_dir("custom.jinja")));
    size_t trained = 0;
    for (size_t i = 0; i < s.n; i++) trained += s.mask[i];
    cr_expect(trained > 0 && trained < s.n, "%zu of %zu tokens carry loss", trained, s.n);
    free_shard(&s);

    /* A template that does not compile: refused naming the file, line and column; no shard is left. */
    hf_test_write_text(in_dir("broken.jinja"), "{% for m in messages %}\n{{ m['content'] | shout }}{% endfor %}");
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("base"), in_dir("chat.jsonl"), "--out",
               in_dir("out/broken"), "--chat-template", in_dir("broken.jinja"), NULL);
    assert_refused(&r, "broken.jinja: chat template line 2, column 19", "no filter named `shout`");
    cr_expect(!mt_test_exists(in_dir("out/broken_000000.bin")));
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("base"), in_dir("chat.jsonl"), "--out",
               in_dir("out/missing"), "--chat-template", in_dir("missing.jinja"), NULL);
    assert_refused(&r, "missing.jinja", "No such file");
    mt_cli_result_free(&r);
}

/* The runs of trained tokens in [from, to): how many. */
static int runs(const uint8_t *mask, size_t from, size_t to) {
    int n = 0;
    for (size_t i = from; i < to; i++) n += mask[i] && (i == from || !mask[i - 1]);
    return n;
}

Test(chat_options, loss_on_chooses_the_tokens_that_carry_loss) {
    shard answers = tokenize(in_dir("tok"), in_dir("out/assistant"), "--loss-on", "assistant");
    shard last = tokenize(in_dir("tok"), in_dir("out/last"), "--loss-on", "last-turn");
    shard all = tokenize(in_dir("tok"), in_dir("out/all"), "--loss-on", "all");
    cr_assert_eq(answers.examples, 13);
    cr_assert(answers.n == last.n && answers.n == all.n && !memcmp(answers.ids, last.ids, answers.n * sizeof(int32_t)) &&
              !memcmp(answers.ids, all.ids, answers.n * sizeof(int32_t)), "--loss-on changed the ids");
    for (size_t i = 0; i < all.n; i++) cr_assert_eq(all.mask[i], 1, "--loss-on all: token %zu carries no loss", i);
    shard prompt = tokenize(in_dir("tok"), in_dir("out/prompt"), "--train-on-prompt", NULL); /* LLaMA-Factory's */
    cr_assert(prompt.n == all.n && !memcmp(prompt.ids, all.ids, all.n * sizeof *all.ids) &&
                  !memcmp(prompt.mask, all.mask, all.n * sizeof *all.mask),
              "--train-on-prompt is not --loss-on all");
    free_shard(&prompt);
    for (size_t e = 0; e < answers.examples; e++) {
        size_t from = answers.starts[e], to = e + 1 < answers.examples ? answers.starts[e + 1] : answers.n;
        cr_assert_eq(runs(answers.mask, from, to), e < 12 ? 2 : 1, "conversation %zu: one run a answer", e);
        /* last-turn: the last answer's run as --loss-on assistant has it, nothing before it */
        size_t end = to, start;
        while (!answers.mask[end - 1]) end--;
        for (start = end; start > from && answers.mask[start - 1]; start--) continue;
        for (size_t i = from; i < to; i++)
            cr_assert_eq(last.mask[i], i >= start && i < end, "conversation %zu, token %zu", e, i - from);
    }
    free_shard(&answers);
    free_shard(&last);
    free_shard(&all);

    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("chat.jsonl"), "--out", in_dir("out/x"),
               "--loss-on", "prompt", NULL);
    assert_refused(&r, "--loss-on 'prompt'", "assistant, last-turn or all");
    mt_cli_result_free(&r);
    mt_test_write_corpus(in_dir("corpus.txt"));
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("corpus.txt"), "--out", in_dir("out/text"),
               "--loss-on", "all", NULL);
    assert_refused(&r, "corpus.txt", "apply to chat data");
    mt_cli_result_free(&r);
}

static char *run_yaml(const char *run) {
    char path[PATH_MAX];
    size_t n;
    snprintf(path, sizeof path, "%s/run.yaml", run);
    return tok_test_read(path, &n);
}

/* A config.json of a small Llama whose vocabulary holds the tokenizer's 2324 tokens. */
static void write_config(const char *path) {
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2, "num_attention_heads", 2,
                          "num_key_value_heads", 2, "vocab_size", 2324, "max_position_embeddings", 128);
    cr_assert_eq(json_dump_file(c, path, 0), 0);
    json_decref(c);
}

#define SMALL_STEP "--seq", "128", "--batch", "2", "--backend", "cpu", "--eval-every", "0"

Test(chat_options, train_stores_the_template_and_loss_and_a_resume_keeps_them) {
    write_config(in_dir("config.json"));
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("base"), "--data",
               in_dir("chat.jsonl"), "--chat-template", in_dir("qwen2.jinja"), "--loss-on", "last-turn", SMALL_STEP,
               "--steps", "1", "--out", in_dir("run"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "qwen2.jinja") && strstr(r.err, "loss on the last answer"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    char *yaml = run_yaml(in_dir("run")), want[PATH_MAX + 32];
    snprintf(want, sizeof want, "chat-template: %s", in_dir("qwen2.jinja"));
    cr_expect(strstr(yaml, "loss-on: last-turn") && strstr(yaml, want), "run.yaml:\n%s", yaml);
    free(yaml);

    /* A bare resume keeps both; another loss is refused. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", in_dir("run"), "--resume", "--steps", "2", SMALL_STEP, NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    yaml = run_yaml(in_dir("run"));
    cr_expect(strstr(yaml, "loss-on: last-turn") && strstr(yaml, want), "run.yaml after the resume:\n%s", yaml);
    free(yaml);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", in_dir("run"), "--resume", "--steps", "3", "--loss-on", "all",
               SMALL_STEP, NULL);
    assert_refused(&r, "--loss-on all", "cannot change");
    mt_cli_result_free(&r);
    /* The template file is an input of the run: changed, it is refused, as a changed tokenizer is. */
    char *qwen2 = template_of(QWEN2_CONFIG), *changed = malloc(strlen(qwen2) + 16);
    sprintf(changed, "{# mine #}%s", qwen2);
    hf_test_write_text(in_dir("qwen2.jinja"), changed);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", in_dir("run"), "--resume", "--steps", "3", SMALL_STEP, NULL);
    assert_refused(&r, "qwen2.jinja", "changed since");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "export", in_dir("run"), in_dir("model"), NULL);
    assert_refused(&r, "qwen2.jinja", "changed since");
    mt_cli_result_free(&r);
    hf_test_write_text(in_dir("qwen2.jinja"), qwen2);
    free(qwen2);
    free(changed);

    /* Text data has no turns to choose from. */
    mt_test_write_corpus(in_dir("corpus.txt"));
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("corpus.txt"), "--loss-on", "all", SMALL_STEP, "--steps", "1", "--out", in_dir("text"), NULL);
    assert_refused(&r, "--loss-on all", "is text");
    mt_cli_result_free(&r);
}

/* The loss of a train run's chat data, as its log says it: "N tokens carry loss". */
static unsigned long long tokens_with_loss(const char *err) {
    const char *p = strstr(err, " tokens carry loss");
    cr_assert_not_null(p, "no count of the tokens that carry loss in:\n%s", err);
    while (p > err && p[-1] >= '0' && p[-1] <= '9') p--;
    return strtoull(p, NULL, 10);
}

/* --analysis-loss, a train setting: off takes gpt-oss's analysis channel (the messages' thinking)
 * out of the loss, is stored in run.yaml, and a resume refuses another value; text data has no
 * channel to take out. */
Test(chat_options, analysis_loss_is_a_train_setting_that_a_resume_keeps) {
    write_config(in_dir("config.json"));
    FILE *f = fopen(in_dir("harmony.jsonl"), "w");
    cr_assert_not_null(f);
    for (int i = 1; i <= 8; i++)
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"What is %d plus %d?\"}, {\"role\": \"assistant\", "
                   "\"content\": \"%d.\", \"thinking\": \"Add %d to itself.\"}]}\n", i, i, 2 * i, i);
    fclose(f);
    unsigned long long trained[2];
    static const char *const runs[2] = {"harmony-on", "harmony-off"};
    for (int off = 0; off < 2; off++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--max-positions", "512", "--tokenizer",
                   in_dir("base"), "--data", in_dir("harmony.jsonl"), "--chat-template",
                   "tests/data/chat/gpt-oss/chat_template.jinja", "--analysis-loss", off ? "off" : "on", "--seq", "512",
                   "--batch", "1", "--backend", "cpu", "--eval-every", "0", "--val-fraction", "0", "--steps", "1",
                   "--out", in_dir(runs[off]), NULL);
        assert_succeeded(&r);
        trained[off] = tokens_with_loss(r.err);
        cr_expect(!off || strstr(r.err, "not on the analysis channel"), "stderr:\n%s", r.err);
        mt_cli_result_free(&r);
    }
    /* Each conversation's "<|channel|>analysis<|message|>Add i to itself.<|end|><|start|>assistant" */
    cr_expect_lt(trained[1] + 8 * 10, trained[0], "with loss: %llu with the analysis, %llu without", trained[0],
                 trained[1]);
    char *yaml = run_yaml(in_dir("harmony-off"));
    cr_expect(strstr(yaml, "analysis-loss: off"), "run.yaml:\n%s", yaml);
    free(yaml);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", in_dir("harmony-off"), "--resume", "--steps", "2", "--analysis-loss",
               "on", NULL);
    assert_refused(&r, "--analysis-loss on", "cannot change");
    mt_cli_result_free(&r);
    mt_test_write_corpus(in_dir("corpus.txt"));
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("corpus.txt"), "--analysis-loss", "off", SMALL_STEP, "--steps", "1", "--out", in_dir("text2"),
               NULL);
    assert_refused(&r, "--analysis-loss off", "is text");
    mt_cli_result_free(&r);
}
