/* Chat data through the megatrain command ($MT_BIN): `tokenize` writes masked shards (and none on
 * a bad line or a template it does not render), `train --data` tokenizes text and chat JSONL with
 * the run's tokenizer into a cache that a resumed run reuses and a changed input replaces, and
 * `sample` decodes with the run's tokenizer. The tokenizer is the small GPT-2-style byte-level
 * BPE of tests/data/tokenizers/gpt2-bytelevel with Qwen2's chat template beside it. */
#include <criterion/criterion.h>
#include <glob.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/tokens.h"
#include "run_fixture.h"
#include "io/masked_tokens.h"
#include "tokenizer/chat_file.h"
#include "tokenizer/tokenize_chat.h"

#define TIMEOUT_S 60.0
#define SMALL_STEP "--seq", "32", "--batch", "2", "--backend", "cpu", "--eval-every", "0"
/* Chat examples whole: the answers of tests' conversations start past their 32nd token. */
#define CHAT_STEP "--seq", "96", "--batch", "2", "--backend", "cpu", "--eval-every", "0"
#define TOKENIZER_JSON "tests/data/tokenizers/gpt2-bytelevel/tokenizer.json"
#define QWEN2_CONFIG "tests/data/chat/qwen2/tokenizer_config.json"

static char dir[PATH_MAX];

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static void copy_file(const char *from, const char *to) {
    size_t n;
    FILE *f = fopen(from, "rb");
    cr_assert_not_null(f, "cannot open %s", from);
    char *buf = malloc(1 << 20);
    n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    f = fopen(to, "wb");
    cr_assert_not_null(f, "cannot create %s", to);
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
}

/* A model directory's tokenizer files: the byte-level BPE and a tokenizer_config.json holding
 * `chat_template` (Qwen2's when NULL). */
static void write_tokenizer(const char *to_dir, const char *chat_template) {
    char path[PATH_MAX];
    mkdir(to_dir, 0755);
    copy_file(TOKENIZER_JSON, hf_test_path(path, to_dir, "tokenizer.json"));
    json_error_t err;
    json_t *cfg = json_load_file(QWEN2_CONFIG, 0, &err);
    cr_assert_not_null(cfg, "%s", err.text);
    json_object_set_new(cfg, "eos_token", json_string("<|endoftext|>"));
    if (chat_template) json_object_set_new(cfg, "chat_template", json_string(chat_template));
    cr_assert_eq(json_dump_file(cfg, hf_test_path(path, to_dir, "tokenizer_config.json"), 0), 0);
    json_decref(cfg);
}

/* A config.json of a small Llama whose vocabulary holds the tokenizer's 2324 tokens. */
static void write_config(const char *path, int vocab) {
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2, "num_attention_heads", 2,
                          "num_key_value_heads", 2, "vocab_size", vocab, "max_position_embeddings", 128);
    cr_assert_eq(json_dump_file(c, path, 0), 0);
    json_decref(c);
}

/* `count` conversations, alternately chat and prompt/completion, and `bad` as line `bad_at`. */
static void write_chat(const char *path, int count, int bad_at, const char *bad) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 1; i <= count; i++) {
        if (i == bad_at) fprintf(f, "%s\n", bad);
        else if (i % 2)
            fprintf(f, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
                       "\"What is %d plus %d?\"}, {\"role\": \"assistant\", \"content\": \"It is %d.\"}]}\n", i, i, 2 * i);
        else fprintf(f, "{\"prompt\": \"Double %d.\", \"completion\": \"%d\"}\n", i, 2 * i);
    }
    fclose(f);
}

static void make_fixtures(void) {
    hf_test_mkdtemp(dir);
    write_tokenizer(in_dir("tok"), NULL);
    write_config(in_dir("config.json"), 2324);
    write_chat(in_dir("chat.jsonl"), 60, 0, NULL);
}

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(chat_cli, .init = make_fixtures, .fini = remove_fixtures);

static void assert_ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "megatrain died or hung; stderr:\n%s", r->err);
}

static void assert_succeeded(const mt_cli_result *r) {
    assert_ran(r);
    cr_assert_eq(r->exit_code, 0, "exit %d; stderr:\n%s", r->exit_code, r->err);
}

static void assert_failed(const mt_cli_result *r, const char *what, const char *problem) {
    assert_ran(r);
    cr_assert_neq(r->exit_code, 0, "exit 0 for a bad input; stderr:\n%s", r->err);
    cr_assert(strstr(r->err, what), "stderr does not name '%s':\n%s", what, r->err);
    cr_assert(strstr(r->err, problem), "stderr does not say '%s':\n%s", problem, r->err);
}

static size_t count_files(const char *pattern) {
    glob_t g;
    size_t n = glob(pattern, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    globfree(&g);
    return n;
}

/* ---- tokenize ---- */

typedef struct {
    int32_t *ids;
    uint8_t *mask, *starts; /* starts: 1 on each conversation's first token */
    size_t n, cap;
} collected;

static mt_status collect(const int32_t *ids, const uint8_t *mask, size_t n, void *user) {
    collected *c = user;
    if (c->n + n > c->cap) {
        c->cap = 2 * (c->n + n);
        c->ids = realloc(c->ids, c->cap * sizeof *c->ids);
        c->mask = realloc(c->mask, c->cap);
        c->starts = realloc(c->starts, c->cap);
    }
    memcpy(c->ids + c->n, ids, n * sizeof *ids);
    memcpy(c->mask + c->n, mask, n);
    memset(c->starts + c->n, 0, n);
    c->starts[c->n] = 1;
    c->n += n;
    return MT_OK;
}

/* The shards hold, in order, what the library makes of the file, with the loss mask and where
 * each conversation starts: whole conversations, as many as fit in --shard-size tokens (the
 * next one would not), the last shard the rest. */
Test(chat_cli, tokenize_writes_masked_shards) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("chat.jsonl"), "--out", in_dir("out/chat"),
               "--shard-size", "500", NULL);
    assert_succeeded(&r);
    cr_assert(strstr(r.out, "60 conversations") && strstr(r.out, "masked shards"), "stdout:\n%s", r.out);
    mt_cli_result_free(&r);

    mt_tokenizer *tok;
    cr_assert_eq(mt_tokenizer_load(in_dir("tok"), &tok), MT_OK, "%s", mt_error());
    mt_chat_template t;
    cr_assert_eq(mt_tokenizer_chat(tok, NULL, &t), MT_OK, "%s", mt_error());
    collected want = {0};
    mt_chat_file_stats stats = {0};
    cr_assert_eq(mt_chat_file_encode(tok, &t, MT_LOSS_ASSISTANT, 1, in_dir("chat.jsonl"), collect, &want, &stats), MT_OK, "%s", mt_error());
    cr_assert_gt(stats.trained_tokens, 60);

    size_t shards = count_files(in_dir("out/chat_*.bin")), at = 0;
    cr_assert_geq(shards, (want.n + 499) / 500, "%zu shards for %zu tokens", shards, want.n);
    for (size_t s = 0; s < shards; s++) {
        char name[64];
        snprintf(name, sizeof name, "out/chat_%06zu.bin", s);
        mt_tokens tokens;
        cr_assert_eq(mt_tokens_open(in_dir(name), &tokens), MT_OK, "%s", mt_error());
        cr_assert_eq(tokens.format, MT_TOKENS_MASKED);
        cr_assert_leq(tokens.count, 500, "shard %zu holds %zu tokens", s, tokens.count);
        size_t next = at + tokens.count, more = next + 1;
        while (more < want.n && !want.starts[more]) more++; /* the end of the next conversation */
        if (s + 1 < shards) cr_assert_gt(more - at, 500, "shard %zu ends before a conversation that fits", s);
        else cr_assert_eq(next, want.n, "the last shard does not end the data");
        const uint64_t *starts;
        size_t examples = mt_tokens_examples(&tokens, &starts), e = 0;
        for (size_t i = 0; i < tokens.count; i++, at++) {
            if (want.starts[at]) cr_assert(e < examples && starts[e++] == i, "conversation at token %zu", at);
            cr_assert_eq(mt_tokens_get(&tokens, i), (uint32_t)want.ids[at], "token %zu", at);
            uint8_t mask;
            mt_tokens_copy_mask(&tokens, i, 1, &mask);
            cr_assert_eq(mask, want.mask[at], "mask of token %zu", at);
        }
        cr_assert_eq(e, examples, "shard %zu records %zu conversations, %zu start there", s, examples, e);
        cr_assert_eq(mt_tokens_status(&tokens), MT_OK, "%s", mt_error());
        mt_tokens_close(&tokens);
    }
    cr_assert_eq(at, want.n);
    free(want.ids);
    free(want.mask);
    free(want.starts);
    mt_chat_template_free(&t);
    mt_tokenizer_free(tok);
}

/* A bad line after shards' worth of good ones: named by file and line, and no shard is left. */
static void expect_bad_line(const char *bad, const char *problem) {
    write_chat(in_dir("bad.jsonl"), 1200, 1101, bad);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("bad.jsonl"), "--out", in_dir("bad/chat"),
               "--shard-size", "1000", NULL);
    assert_failed(&r, "bad.jsonl:1101", problem);
    cr_expect_eq(count_files(in_dir("bad/*")), 0, "a failed tokenize left files in %s", in_dir("bad"));
    mt_cli_result_free(&r);
}

Test(chat_cli, tokenize_refuses_a_bad_line_and_leaves_no_shard) {
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}", "not JSON");
    expect_bad_line("{\"messages\": [{\"role\": \"user\"}]}", "message 1: no \"content\"");
    expect_bad_line("{\"prompt\": \"q\", \"answer\": \"a\"}", "has \"prompt\" but no \"completion\" field: the "
                    "prompt/completion layout needs both");
    expect_bad_line("{\"answer\": \"a\"}", "in none of the chat layouts");
    /* a line in two layouts: neither is dropped silently */
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                    "\"a\"}], \"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]}",
                    "holds the fields of two chat layouts, \"messages\" (OpenAI messages) and \"conversations\"");
    /* a tool call's arguments: an object, or the JSON text of one */
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                    "null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"{not json\"}}]}]}",
                    "tool call 1: the function's \"arguments\" is a string that is not the JSON text of an object");
    expect_bad_line("{\"prompt\": \"\xff\", \"completion\": \"a\"}", "not JSON");
}

/* A template megatrain does not know renders through the interpreter; one that does not compile
 * is refused at load, naming the file, line and column, exit 2, before any shard is written. */
Test(chat_cli, tokenize_renders_any_template_and_refuses_a_broken_one) {
    write_tokenizer(in_dir("gemma"), "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] "
                                     "+ '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
                                     "{% if add_generation_prompt %}{{ '<start_of_turn>assistant\\n' }}{% endif %}");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("gemma"), in_dir("chat.jsonl"), "--out", in_dir("out/g"),
               NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    cr_expect_eq(count_files(in_dir("out/g_*.bin")), 1);

    write_tokenizer(in_dir("broken"), "{% for message in messages %}{{ message['content'] }}");
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("broken"), in_dir("chat.jsonl"), "--out",
               in_dir("out/x"), NULL);
    assert_failed(&r, "broken/tokenizer_config.json: chat template line 1, column 54",
                  "the template ends where `{% endfor %}` was expected");
    cr_expect_eq(r.exit_code, 2);
    cr_expect_eq(count_files(in_dir("out/x*")), 0);
    mt_cli_result_free(&r);
}

/* chat_template as a list of named templates: "default" is the one used; a list without it, or
 * with an entry that is not {name, template}, is refused saying so (not "no chat_template"). */
Test(chat_cli, tokenize_names_what_a_chat_template_list_lacks) {
    const char *lists[][2] = {{"[{\"name\": \"tool_use\", \"template\": \"x\"}, {\"name\": \"rag\", \"template\": \"y\"}]",
                               "chat_template is a list of named templates (\"tool_use\", \"rag\"), none named \"default\""},
                              {"[{\"name\": \"default\"}]", "chat_template[0] is an object without a string \"name\" and "
                                                          "\"template\""}};
    for (int i = 0; i < 2; i++) {
        write_tokenizer(in_dir("listed"), NULL);
        char config[PATH_MAX];
        hf_test_path(config, in_dir("listed"), "tokenizer_config.json");
        json_t *cfg = json_load_file(config, 0, NULL), *list = json_loads(lists[i][0], 0, NULL);
        cr_assert(cfg && list);
        json_object_set_new(cfg, "chat_template", list);
        cr_assert_eq(json_dump_file(cfg, config, 0), 0);
        json_decref(cfg);
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("listed"), in_dir("chat.jsonl"), "--out",
                   in_dir("out/listed"), NULL);
        assert_failed(&r, "tokenizer_config.json", lists[i][1]);
        mt_cli_result_free(&r);
    }
}

Test(chat_cli, tokenize_refuses_chat_mixed_with_text) {
    hf_test_write_text(in_dir("text.jsonl"), "{\"text\": \"plain words\"}\n");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("chat.jsonl"), in_dir("text.jsonl"), "--out",
               in_dir("out/x"), NULL);
    assert_failed(&r, "text.jsonl", "tokenize chat and text data separately");
    mt_cli_result_free(&r);
    /* --chat yes on a plain text file. */
    hf_test_write_text(in_dir("notes.txt"), "plain words\n");
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), "--chat", "yes", in_dir("notes.txt"), "--out",
               in_dir("out/x"), NULL);
    assert_failed(&r, "notes.txt", "chat data must be JSONL");
    cr_expect_eq(count_files(in_dir("out/*")), 0);
    mt_cli_result_free(&r);
}

/* ---- LLaMA-Factory's .json files: a JSON array of records ---- */

/* One record of each layout: alpaca with a system prompt and earlier turns (history), alpaca with
 * an input, ShareGPT with a system prompt, OpenAI messages. */
static const char *const RECORDS[] = {
    "{\"instruction\": \"And now 3 plus 3?\", \"output\": \"6.\", \"system\": \"Be brief.\", "
    "\"history\": [[\"What is 1 plus 1?\", \"2.\"], [\"And 2 plus 2?\", \"4.\"]]}",
    "{\"instruction\": \"Translate to French\", \"input\": \"cat\", \"output\": \"chat\"}",
    "{\"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Hello!\"}], "
    "\"system\": \"You are terse.\"}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Double 7.\"}, {\"role\": \"assistant\", \"content\": \"14\"}]}",
};
#define N_RECORDS (sizeof RECORDS / sizeof *RECORDS)

/* The records as JSONL, and as a JSON array laid out over many lines (after a byte order mark). */
static void write_records(const char *jsonl, const char *json) {
    FILE *f = fopen(jsonl, "w");
    cr_assert_not_null(f);
    json_t *array = json_array();
    for (size_t i = 0; i < N_RECORDS; i++) {
        fprintf(f, "%s\n", RECORDS[i]);
        json_error_t err;
        json_t *record = json_loads(RECORDS[i], 0, &err);
        cr_assert_not_null(record, "%s", err.text);
        json_array_append_new(array, record);
    }
    fclose(f);
    char *text = json_dumps(array, JSON_INDENT(2));
    f = fopen(json, "w");
    cr_assert_not_null(f);
    fprintf(f, "\xef\xbb\xbf%s\n", text);
    fclose(f);
    free(text);
    json_decref(array);
}

static void tokenize_to(const char *input, const char *out) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), input, "--out", out, NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.out, "masked shards"), "%s is not read as chat data:\n%s", input, r.out);
    mt_cli_result_free(&r);
}

/* The array's records are read as the JSONL's lines: the same ids, masks and example starts. */
Test(chat_cli, json_array_reads_as_its_jsonl_records) {
    write_records(in_dir("records.jsonl"), in_dir("records.json"));
    tokenize_to(in_dir("records.jsonl"), in_dir("out/lines"));
    tokenize_to(in_dir("records.json"), in_dir("out/array"));
    cr_expect(mt_test_files_equal(in_dir("out/lines_000000.bin"), in_dir("out/array_000000.bin")),
              "the .json array tokenizes otherwise than the same records as JSONL");
    /* train --data takes the .json as chat data too */
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("records.json"), CHAT_STEP, "--val-fraction", "0", "--steps", "1", "--out", in_dir("run"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "loss on the answers only") && strstr(r.err, "4 conversations"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* alpaca's history: its [instruction, answer] pairs are the turns between the system prompt and
 * the instruction, every answer carrying loss, as the same conversation written as messages. */
Test(chat_cli, alpaca_history_is_the_earlier_turns) {
    hf_test_write_text(in_dir("history.jsonl"), RECORDS[0]);
    hf_test_write_text(in_dir("messages.jsonl"),
                       "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": \"What is 1 plus 1?\"}, {\"role\": \"assistant\", \"content\": \"2.\"}, "
                       "{\"role\": \"user\", \"content\": \"And 2 plus 2?\"}, {\"role\": \"assistant\", \"content\": \"4.\"}, "
                       "{\"role\": \"user\", \"content\": \"And now 3 plus 3?\"}, {\"role\": \"assistant\", \"content\": \"6.\"}]}");
    tokenize_to(in_dir("history.jsonl"), in_dir("out/history"));
    tokenize_to(in_dir("messages.jsonl"), in_dir("out/messages"));
    cr_expect(mt_test_files_equal(in_dir("out/history_000000.bin"), in_dir("out/messages_000000.bin")),
              "alpaca's history is not read as the earlier turns");
    hf_test_write_text(in_dir("bad.jsonl"), "{\"instruction\": \"q\", \"output\": \"a\", \"history\": [[\"q\"]]}");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("bad.jsonl"), "--out", in_dir("bad/x"), NULL);
    assert_failed(&r, "bad.jsonl:1", "\"history\" item 1 is not a pair of strings");
    mt_cli_result_free(&r);
}

/* Example e of a masked shard: its ids and loss flags, as one string (4 bytes an id, then a byte a
 * flag), *len its bytes. */
static unsigned char *example_bytes(const mt_tokens *t, size_t e, size_t *len) {
    const uint64_t *starts;
    size_t n = mt_tokens_examples(t, &starts), end = e + 1 < n ? starts[e + 1] : t->count, k = end - starts[e];
    unsigned char *b = malloc(5 * k);
    int32_t *ids = malloc(k * sizeof *ids);
    mt_tokens_copy(t, starts[e], k, ids);
    memcpy(b, ids, 4 * k);
    mt_tokens_copy_mask(t, starts[e], k, b + 4 * k);
    free(ids);
    *len = 5 * k;
    return b;
}

static int holds_example(const mt_tokens *t, const unsigned char *want, size_t len) {
    const uint64_t *starts;
    for (size_t e = 0; e < mt_tokens_examples(t, &starts); e++) {
        size_t n;
        unsigned char *b = example_bytes(t, e, &n);
        int same = n == len && !memcmp(b, want, len);
        free(b);
        if (same) return 1;
    }
    return 0;
}

static void open_one(const char *pattern, mt_tokens *t) {
    glob_t g;
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no %s", pattern);
    cr_assert_eq(mt_tokens_open(g.gl_pathv[0], t), MT_OK, "%s", mt_error());
    globfree(&g);
}

/* Chat datasets mixed (train/data_mix.h): the mix holds whole examples of each, their ids and loss
 * masks as tokenized alone, in the shares asked within an example. */
Test(chat_cli, chat_datasets_mix_as_whole_examples) {
    write_records(in_dir("records.jsonl"), in_dir("records.json"));
    char a[PATH_MAX + 8], b[PATH_MAX + 8];
    snprintf(a, sizeof a, "%s:0.6", in_dir("chat.jsonl"));
    snprintf(b, sizeof b, "%s:0.4", in_dir("records.json"));
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data", a,
               "--data", b, CHAT_STEP, "--val-fraction", "0", "--steps", "1", "--out", in_dir("run"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "mixed 2 datasets"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_tokens mix, chat, records;
    open_one(in_dir("run/data/mix-*_000000.bin"), &mix);
    open_one(in_dir("run/data/chat.jsonl-*_000000.bin"), &chat);
    open_one(in_dir("run/data/records.json-*_000000.bin"), &records);
    const uint64_t *starts;
    size_t examples = mt_tokens_examples(&mix, &starts), from_records = 0;
    cr_assert_gt(examples, 60);
    for (size_t e = 0; e < examples; e++) {
        size_t len;
        unsigned char *x = example_bytes(&mix, e, &len);
        int in_records = holds_example(&records, x, len);
        cr_expect(in_records || holds_example(&chat, x, len), "example %zu of the mix is in neither dataset", e);
        from_records += (size_t)in_records * len / 5;
        free(x);
    }
    double share = (double)from_records / (double)mix.count;
    cr_expect(share > 0.38 && share < 0.42, "records.json holds %.3f of the mix's tokens, asked 0.4", share);
    mt_tokens_close(&mix);
    mt_tokens_close(&chat);
    mt_tokens_close(&records);
}

/* Files megatrain does not read are refused as what they are, naming the formats it reads. */
static void expect_refused(const char *name, const char *content, size_t len, const char *problem) {
    FILE *f = fopen(in_dir(name), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(content, 1, len, f), len);
    fclose(f);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir(name), SMALL_STEP, "--steps", "1", "--out", in_dir("refused"), NULL);
    assert_failed(&r, in_dir(name), problem);
    cr_expect_eq(r.exit_code, 2);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir(name), "--out", in_dir("refused/x"), NULL);
    assert_failed(&r, in_dir(name), problem);
    cr_expect_eq(r.exit_code, 2);
    mt_cli_result_free(&r);
}

Test(chat_cli, formats_it_cannot_read_are_refused) {
    static const char parquet[] = "PAR1\x15\x04\x15\x10\x15\x14L\x15\x02\x15\x00PAR1";
    expect_refused("train.parquet", parquet, sizeof parquet - 1, "is a Parquet file, which megatrain does not read: "
                   "it reads token files");
    static const char arrow[] = "\xff\xff\xff\xff\x78\x00\x00\x00\x10\x00";
    expect_refused("data-00000-of-00001.arrow", arrow, sizeof arrow - 1, "is an Arrow file");
    static const char object[] = "{\n  \"data\": [{\"instruction\": \"q\", \"output\": \"a\"}]\n}\n";
    expect_refused("dict.json", object, sizeof object - 1, "one JSON value (an object), not records");
    static const char text[] = "[{\"text\": \"plain words\"}]";
    expect_refused("text.json", text, sizeof text - 1, "text documents are read from JSONL");
}

/* A file whose first line is in no whole layout is read as text JSONL; a line in half of a chat
 * layout is named so, not blamed for a missing "text". */
Test(chat_cli, tokenize_names_the_layout_a_line_half_holds) {
    const char *cases[][2] = {{"{\"instruction\": \"q\"}\n", "has \"instruction\" but no \"output\" field: the alpaca layout"},
                              {"{\"completion\": \"a\"}\n", "has \"completion\" but no \"prompt\" field"},
                              {"{\"body\": \"a\"}\n", "no \"text\" field, nor the fields of a chat layout"}};
    for (int i = 0; i < 3; i++) {
        hf_test_write_text(in_dir("half.jsonl"), cases[i][0]);
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", in_dir("tok"), in_dir("half.jsonl"), "--out",
                   in_dir("out/half"), NULL);
        assert_failed(&r, "half.jsonl:1", cases[i][1]);
        mt_cli_result_free(&r);
    }
}

/* ---- train --data ---- */


/* The cache: made once, read by a resumed run, made again (the stale one removed) when the input
 * changes. */
Test(chat_cli, train_on_chat_jsonl_caches_its_tokens) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("chat.jsonl"), CHAT_STEP, "--steps", "2", "--out", in_dir("run"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "tokenizing") && strstr(r.err, "loss on the answers only"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(count_files(in_dir("run/data/chat.jsonl-*_000000.bin")), 1);
    glob_t g;
    cr_assert_eq(glob(in_dir("run/data/chat.jsonl-*_000000.bin"), 0, NULL, &g), 0);
    mt_tokens tokens;
    cr_assert_eq(mt_tokens_open(g.gl_pathv[0], &tokens), MT_OK, "%s", mt_error());
    cr_expect_eq(tokens.format, MT_TOKENS_MASKED);
    cr_expect(mt_tokens_loss_count(&tokens) > 0 && mt_tokens_loss_count(&tokens) < tokens.count);
    mt_tokens_close(&tokens);
    char first[PATH_MAX];
    snprintf(first, sizeof first, "%s", g.gl_pathv[0]);
    globfree(&g);

    /* Resumed: the tokenizer comes from the checkpoint, the tokens from the cache. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--data", in_dir("chat.jsonl"), CHAT_STEP, "--steps", "3", "--out", in_dir("run"),
               "--resume", NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "cached") && !strstr(r.err, "tokenizing"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);

    /* A changed input is refused on resume (the run's place in it no longer holds), and taken when
     * the user says so: then it is tokenized again. */
    write_chat(in_dir("chat.jsonl"), 80, 0, NULL);
    mt_cli_run(&r, TIMEOUT_S, "train", "--data", in_dir("chat.jsonl"), CHAT_STEP, "--steps", "4", "--out", in_dir("run"),
               "--resume", NULL);
    assert_failed(&r, "chat.jsonl", "changed since");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--data", in_dir("chat.jsonl"), CHAT_STEP, "--steps", "4", "--out", in_dir("run"),
               "--resume", "--accept-changed-data", NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "tokenizing") && strstr(r.err, "stale"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_expect_eq(count_files(in_dir("run/data/chat.jsonl-*_000000.bin")), 1);
    cr_expect(!mt_test_exists(first), "the stale cache %s is still there", first);
}

/* Plain text with --init-from a model directory that holds its tokenizer: an llm.c shard of the
 * tokenizer's ids, and sample decodes text with it. */
Test(chat_cli, train_on_text_with_init_from_and_sample_decodes) {
    mt_cli_result r;
    mt_test_write_corpus(in_dir("corpus.txt"));
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("corpus.txt"), "--steps", "0", SMALL_STEP, "--out", in_dir("base"), NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "export", in_dir("base"), in_dir("model"), NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    write_tokenizer(in_dir("model"), NULL);
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", in_dir("model"), "--data", in_dir("corpus.txt"), SMALL_STEP, "--steps",
               "2", "--out", in_dir("ft"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "tokenizing") && strstr(r.err, "/model"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    glob_t g;
    cr_assert_eq(glob(in_dir("ft/data/corpus.txt-*_000000.bin"), 0, NULL, &g), 0);
    mt_tokens tokens;
    cr_assert_eq(mt_tokens_open(g.gl_pathv[0], &tokens), MT_OK, "%s", mt_error());
    cr_expect_eq(tokens.format, MT_TOKENS_LLMC);
    uint32_t top = 0;
    for (size_t i = 0; i < tokens.count; i++) top = mt_tokens_get(&tokens, i) > top ? mt_tokens_get(&tokens, i) : top;
    cr_expect(top > 255 && top < 2324, "largest id %u: not the tokenizer's ids", top);
    cr_expect_lt(tokens.count, 20000 / 2, "%zu tokens for 20 KB of words: bytes, not BPE", tokens.count);
    mt_tokens_close(&tokens);
    /* The same model trained on those ids as a token file: a run without a tokenizer. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--data", g.gl_pathv[0], "--steps", "0",
               SMALL_STEP, "--out", in_dir("bare"), NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    globfree(&g);

    /* Decoded text, not ids; the prompt comes back as given. */
    mt_cli_run(&r, TIMEOUT_S, "sample", in_dir("ft"), "--prompt", "The river", "--tokens", "12", "--temperature", "0",
               "--backend", "cpu", NULL);
    assert_succeeded(&r);
    cr_expect(!strncmp(r.out, "The river", 9), "stdout:\n%s", r.out);
    mt_cli_result_free(&r);
    /* Without a tokenizer the same model prints ids. */
    mt_cli_run(&r, TIMEOUT_S, "sample", in_dir("bare"), "--tokens", "3", "--temperature", "0", "--backend", "cpu", NULL);
    assert_succeeded(&r);
    int a, b, c;
    cr_expect_eq(sscanf(r.out, "%d %d %d", &a, &b, &c), 3, "stdout:\n%s", r.out);
    mt_cli_result_free(&r);
}

Test(chat_cli, train_refuses_a_bad_tokenizer_or_data) {
    write_config(in_dir("small.json"), 256);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("small.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("chat.jsonl"), CHAT_STEP, "--steps", "1", "--out", in_dir("run"), NULL);
    assert_failed(&r, "tok", "has 2324 tokens but the model's vocab_size is 256");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("absent"), "--data",
               in_dir("chat.jsonl"), CHAT_STEP, "--steps", "1", "--out", in_dir("run2"), NULL);
    assert_failed(&r, "absent", "No such file");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("tok"), SMALL_STEP, "--steps", "1", "--out", in_dir("run3"), NULL);
    assert_failed(&r, "tok", "is a directory");
    mt_cli_result_free(&r);
}

/* ---- packed examples ---- */

#define PACKED_RUN(out)                                                                                                \
    "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data", in_dir("chat.jsonl"), "--seq", \
        "128", "--batch", "2", "--micro-batches", "2", "--backend", "cpu", "--eval-every", "8", "--steps", "16",       \
        "--ckpt-every", "8", "--out", in_dir(out)

/* Chat data trains packed by default: the log says so, each step's metrics carry its padding, and
 * the run stores --packing on, which a resumed run may not change. Resumed from its step-8
 * checkpoint (its 57 windows an epoch are done by step 15), it ends with the bits of the run
 * straight through. */
Test(chat_cli, packed_chat_trains_and_resumes_bitwise) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, PACKED_RUN("straight"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "examples packed whole into") && strstr(r.err, "attention masked between them"),
              "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
    FILE *f = fopen(in_dir("straight/metrics.jsonl"), "r");
    cr_assert_not_null(f);
    char line[4096];
    int steps = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"loss\"")) {
            steps++;
            cr_expect(strstr(line, "\"padding\":"), "a step's metrics lack its padding: %s", line);
        }
    fclose(f);
    cr_expect_eq(steps, 16);

    mt_cli_run(&r, TIMEOUT_S, PACKED_RUN("resumed"), NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    hf_test_rmtree(in_dir("resumed/ckpt-000016"));
    mt_cli_run(&r, TIMEOUT_S, PACKED_RUN("resumed"), "--resume", NULL);
    assert_succeeded(&r);
    cr_assert(strstr(r.err, "ckpt-000008"), "did not resume from step 8:\n%s", r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(in_dir("straight"), in_dir("resumed"), 16);
    cr_assert_null(differs, "%s differs between the straight and the resumed run", differs);
    cr_assert(!mt_test_files_equal(mt_test_blob(in_dir("straight"), 8, "master"),
                                   mt_test_blob(in_dir("straight"), 16, "master")),
              "the weights did not change from step 8 to 16: the comparison proves nothing");

    mt_cli_run(&r, TIMEOUT_S, PACKED_RUN("resumed"), "--steps", "17", "--resume", "--packing", "off", NULL);
    assert_failed(&r, "--packing off", "--packing on, which a resumed run cannot change");
    mt_cli_result_free(&r);
}

/* --packing on is for chat data, --doc-mask for text with a tokenizer: each refused elsewhere,
 * naming the option and the data; --doc-mask on tokenized text trains with its documents masked. */
Test(chat_cli, packing_and_doc_mask_refused_where_they_do_not_apply) {
    mt_cli_result r;
    mt_test_write_corpus(in_dir("corpus.txt"));
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("corpus.txt"), SMALL_STEP, "--steps", "1", "--packing", "on", "--out", in_dir("a"), NULL);
    assert_failed(&r, "--packing on", "corpus.txt is not chat data");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("chat.jsonl"), CHAT_STEP, "--steps", "1", "--doc-mask", "--out", in_dir("b"), NULL);
    assert_failed(&r, "--doc-mask", "chat.jsonl is chat data");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", in_dir("corpus.txt"), SMALL_STEP, "--steps", "1",
               "--doc-mask", "--out", in_dir("c"), NULL);
    assert_failed(&r, "--doc-mask", "raw bytes (no tokenizer) have no end-of-text token");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("config.json"), "--tokenizer", in_dir("tok"), "--data",
               in_dir("corpus.txt"), SMALL_STEP, "--steps", "2", "--doc-mask", "--out", in_dir("d"), NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "documents masked"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
}
