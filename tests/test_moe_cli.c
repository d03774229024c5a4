/* A tiny mixture of experts of each family through the megatrain command: it trains from its
 * config.json, logs the load-balancing loss and the experts' load apart from the cross-entropy, and
 * 6 steps resumed from the step-3 checkpoint end with the bits of 6 straight steps (the router's
 * statistics and the aux loss carry nothing across steps that a checkpoint would have to hold).
 * Then the families' tokenizers and chat templates: chat JSONL tokenized into masked shards and a
 * model of the tokenizer's vocabulary trained on it ($MT_TOKENIZER_DATA's tokenizer.json files;
 * tests/data/tokenizers and tests/data/chat say where each comes from): Qwen3-30B-A3B's is the
 * Qwen3 tokenizer and template; Qwen1.5-MoE's is Qwen2's byte-level BPE (Qwen3's without its added
 * tokens) with a ChatML template of a default system prompt (Qwen2's here); Mixtral-8x7B's is
 * Mistral-7B-v0.1's SentencePiece BPE and Mixtral-Instruct's [INST] template (mistral-v0.2). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/hf_config.h"
#include "run_fixture.h"
#include "tiny_model.h"

#define TIMEOUT_S 60.0
#define STEP_ARGS "--seq", "16", "--batch", "2", "--micro-batches", "2", "--backend", "cpu", "--eval-every", "0"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(moe_cli, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

/* c over bytes (the corpus's tokens), its config.json in dir/<name>/. */
static const char *write_config_of(mt_config c, const char *name) {
    c.vocab_size = 256;
    const char *where = in_dir(name);
    cr_assert_eq(mkdir(where, 0755), 0, "cannot create %s", where);
    cr_assert_eq(mt_hf_config_write(&c, "float32", where), MT_OK, "%s", mt_error());
    static char config[4][PATH_MAX + 96];
    static int next;
    char *p = config[next++ % 4];
    snprintf(p, sizeof config[0], "%s/config.json", where);
    return p;
}

/* The family's tiny model. */
static const char *write_config(mt_arch arch, int aux, const char *name) {
    return write_config_of(mt_tiny_config_moe(arch, aux), name);
}

static void train(const char *config, const char *out, int resume) {
    mt_cli_result r;
    if (resume)
        mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "6",
                   "--ckpt-every", "3", "--out", out, "--resume", NULL);
    else
        mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "6",
                   "--ckpt-every", "3", "--out", out, NULL);
    cr_assert_eq(r.exit_code, 0, "train failed:\n%s", r.err);
    if (resume) cr_assert(strstr(r.err, "ckpt-000003"), "did not resume from step 3:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* Every step's line holds the cross-entropy, the aux loss and the load, each a number in range. */
static void expect_metrics(const char *out, int experts) {
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no %s", path);
    char line[4096];
    int steps = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *ev = json_loads(line, 0, NULL);
        cr_assert(ev, "%s: not JSON: %s", path, line);
        if (json_object_get(ev, "loss")) {
            double aux = json_number_value(json_object_get(ev, "aux_loss"));
            double most = json_number_value(json_object_get(ev, "expert_load_max"));
            double least = json_number_value(json_object_get(ev, "expert_load_min"));
            cr_expect(aux > 0 && most >= 1.0 / experts && least <= 1.0 / experts && least >= 0 && most <= 1,
                      "%s: aux %g, load %g..%g", path, aux, least, most);
            steps++;
        }
        json_decref(ev);
    }
    fclose(f);
    cr_expect_eq(steps, 6, "%s: %d steps logged", path, steps);
}

static void resumes_bitwise(mt_arch arch, int aux, const char *name) {
    const char *config = write_config(arch, aux, name);
    char straight[PATH_MAX + 64], resumed[PATH_MAX + 64], cut[PATH_MAX + 96];
    snprintf(straight, sizeof straight, "%s/%s-straight", dir, name);
    snprintf(resumed, sizeof resumed, "%s/%s-resumed", dir, name);
    train(config, straight, 0);
    train(config, resumed, 0);
    snprintf(cut, sizeof cut, "%s/ckpt-000006", resumed);
    hf_test_rmtree(cut);
    train(config, resumed, 1);
    cr_expect_null(mt_test_state_differs(straight, resumed, 6), "%s: the resumed run's state differs", name);
    cr_expect(!mt_test_files_equal(mt_test_blob(straight, 3, "master"), mt_test_blob(straight, 6, "master")),
              "%s: nothing changed from step 3 to 6: the comparison proves nothing", name);
    mt_config c = mt_tiny_config_moe(arch, aux);
    expect_metrics(straight, c.num_experts);
}

/* Each step's weight_bytes_in and experts_unrouted from the run's metrics.jsonl. */
static int step_bytes(const char *out, double *bytes, double *unrouted, int max) {
    char path[PATH_MAX + 128], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no %s", path);
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        json_t *ev = json_loads(line, 0, NULL);
        cr_assert(ev, "%s: not JSON: %s", path, line);
        if (json_object_get(ev, "loss")) {
            bytes[n] = json_number_value(json_object_get(ev, "weight_bytes_in"));
            unrouted[n++] = json_number_value(json_object_get(ev, "experts_unrouted"));
        }
        json_decref(ev);
    }
    fclose(f);
    return n;
}

/* Five blocks through two slots, so that the backward reloads three, and a step's tokens routed to
 * 2 of 64 experts: many experts get none, and their weights stay home in the reloads. The state
 * after 3 steps has the bits of --all-experts, which copies more bytes and leaves none home. */
Test(moe_cli, routed_reloads_train_as_every_expert) {
    mt_config c = mt_tiny_config_moe(MT_ARCH_MIXTRAL, 1);
    c.num_layers = 5;
    c.num_experts = 64;
    const char *config = write_config_of(c, "reload");
    char routed[PATH_MAX + 64], all[PATH_MAX + 64];
    snprintf(routed, sizeof routed, "%s/reload-routed", dir);
    snprintf(all, sizeof all, "%s/reload-all", dir);
    for (int every = 0; every < 2; every++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "3",
                   "--ckpt-every", "3", "--out", every ? all : routed, every ? "--all-experts" : NULL, NULL);
        cr_assert_eq(r.exit_code, 0, "train failed:\n%s", r.err);
        mt_cli_result_free(&r);
    }
    cr_expect_null(mt_test_state_differs(routed, all, 3), "the routed reloads' state differs from every expert's");
    double bytes[2][3], unrouted[2][3];
    cr_assert_eq(step_bytes(routed, bytes[0], unrouted[0], 3), 3);
    cr_assert_eq(step_bytes(all, bytes[1], unrouted[1], 3), 3);
    for (int s = 0; s < 3; s++) {
        cr_expect(unrouted[0][s] > 0 && unrouted[0][s] < 1, "step %d: %g of the experts left home", s + 1,
                  unrouted[0][s]);
        cr_expect_eq(unrouted[1][s], 0.0, "step %d with --all-experts: %g left home", s + 1, unrouted[1][s]);
        cr_expect(bytes[0][s] > 0 && bytes[0][s] < bytes[1][s], "step %d: %.0f bytes in routed, %.0f every expert",
                  s + 1, bytes[0][s], bytes[1][s]);
    }
}

Test(moe_cli, qwen3_moe_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_QWEN3_MOE, 1, "qwen3moe"); }
Test(moe_cli, qwen2_moe_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_QWEN2_MOE, 0, "qwen2moe"); }
Test(moe_cli, mixtral_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_MIXTRAL, 1, "mixtral"); }
Test(moe_cli, olmoe_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_OLMOE, 0, "olmoe"); }

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out, "cannot copy %s to %s", from, to);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* A model directory: the tokenizer's tokenizer.json and tokenizer_config.json, the chat template
 * (with its bos and eos) of tests/data/chat/<chat>, and a config.json of the family's tiny model
 * over the tokenizer's vocabulary. */
static const char *model_dir(const char *name, const char *tokenizer, const char *chat, mt_arch arch, int vocab) {
    const char *data = getenv("MT_TOKENIZER_DATA");
    cr_assert(data, "MT_TOKENIZER_DATA is not set (make tokenizer-data; the Makefile's test target sets it)");
    const char *where = in_dir(name);
    cr_assert_eq(mkdir(where, 0755), 0, "cannot create %s", where);
    char from[PATH_MAX + 128], to[PATH_MAX + 128];
    snprintf(from, sizeof from, "%s/%s/tokenizer.json", data, tokenizer);
    snprintf(to, sizeof to, "%s/tokenizer.json", where);
    copy_file(from, to);
    snprintf(from, sizeof from, "%s/%s/tokenizer_config.json", data, tokenizer);
    json_t *cfg = json_load_file(from, JSON_DECODE_INT_AS_REAL, NULL); /* model_max_length: 1e30 */
    snprintf(from, sizeof from, "tests/data/chat/%s/tokenizer_config.json", chat);
    json_t *tmpl = json_load_file(from, 0, NULL);
    cr_assert(cfg && tmpl, "cannot read the tokenizer configs of %s and %s", tokenizer, chat);
    json_object_update(cfg, tmpl);
    snprintf(to, sizeof to, "%s/tokenizer_config.json", where);
    cr_assert_eq(json_dump_file(cfg, to, 0), 0);
    json_decref(cfg);
    json_decref(tmpl);
    mt_config c = mt_tiny_config_moe(arch, 1);
    c.vocab_size = vocab;
    c.tie_embeddings = 1; /* half the bytes of a 152k-token vocabulary's ends: the test stays quick */
    c.bos_token_id = c.eos_token_id = -1;
    cr_assert_eq(mt_hf_config_write(&c, "float32", where), MT_OK, "%s", mt_error());
    return where;
}

static void write_chat(const char *path) {
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 1; i <= 24; i++)
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"What is %d plus %d?\"}, {\"role\": "
                   "\"assistant\", \"content\": \"It is %d.\"}]}\n", i, i, 2 * i);
    fclose(f);
}

/* `train`: a model of the family trains 2 steps on the chat JSONL with the tokenizer too. */
static void tokenizes_and_trains(const char *name, const char *tokenizer, const char *chat, mt_arch arch, int vocab,
                                 int train) {
    const char *model = model_dir(name, tokenizer, chat, arch, vocab);
    char jsonl[PATH_MAX + 64], shards[PATH_MAX + 64], out[PATH_MAX + 64], config[PATH_MAX + 128];
    snprintf(jsonl, sizeof jsonl, "%s/%s-chat.jsonl", dir, name);
    snprintf(shards, sizeof shards, "%s/%s-shards", dir, name);
    snprintf(out, sizeof out, "%s/%s-run", dir, name);
    snprintf(config, sizeof config, "%s/config.json", model);
    write_chat(jsonl);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", model, jsonl, "--out", shards, NULL);
    cr_assert_eq(r.exit_code, 0, "%s: tokenize failed:\n%s", name, r.err);
    cr_expect(strstr(r.out, "24 conversations") && strstr(r.out, "masked shards"), "%s: stdout:\n%s", name, r.out);
    mt_cli_result_free(&r);
    if (!train) return;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--tokenizer", model, "--data", jsonl, "--seq", "32",
               "--batch", "2", "--backend", "cpu", "--eval-every", "0", "--val-fraction", "0", "--steps", "2", "--out",
               out, NULL);
    cr_assert_eq(r.exit_code, 0, "%s: train failed:\n%s", name, r.err);
    mt_cli_result_free(&r);
}

Test(moe_cli, qwen_moe_tokenizers_and_chat_templates) {
    tokenizes_and_trains("qwen3moe-chat", "qwen3", "qwen3", MT_ARCH_QWEN3_MOE, 151936, 1);
    tokenizes_and_trains("qwen2moe-chat", "qwen3", "qwen2", MT_ARCH_QWEN2_MOE, 151936, 0);
}
Test(moe_cli, mixtral_tokenizer_and_instruct_template) {
    tokenizes_and_trains("mixtral-chat", "mistral", "mistral-v0.2", MT_ARCH_MIXTRAL, 32000, 1);
}

/* A config that changes the routing is refused by the field at fault: a negative num_experts (not
 * defaulted, then blamed on tensor shapes), and on resume a changed num_experts_per_tok. */
Test(moe_cli, routing_fields_are_named_when_refused) {
    mt_config c = mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 0);
    c.vocab_size = 256;
    const char *where = in_dir("negative");
    cr_assert_eq(mkdir(where, 0755), 0);
    cr_assert_eq(mt_hf_config_write(&c, "float32", where), MT_OK, "%s", mt_error());
    char config[PATH_MAX + 96], cmd[3 * PATH_MAX];
    snprintf(config, sizeof config, "%s/config.json", where);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"num_experts\": *[0-9]*/\"num_experts\": -4/' %s", config);
    cr_assert_eq(system(cmd), 0);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "1", "--out",
               in_dir("neg-run"), NULL);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "field 'num_experts' = -4: a count of experts cannot be negative"), "%s", r.err);
    mt_cli_result_free(&r);

    const char *two = write_config(MT_ARCH_QWEN3_MOE, 0, "topk");
    char run_dir[PATH_MAX + 32];
    snprintf(run_dir, sizeof run_dir, "%s/topk-run", dir);
    train(two, run_dir, 0);
    c = mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 0);
    c.vocab_size = 256;
    c.experts_per_token = c.experts_per_token == 1 ? 2 : 1;
    const char *other = in_dir("topk-other");
    cr_assert_eq(mkdir(other, 0755), 0);
    cr_assert_eq(mt_hf_config_write(&c, "float32", other), MT_OK, "%s", mt_error());
    snprintf(config, sizeof config, "%s/config.json", other);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "8", "--out",
               run_dir, "--resume", NULL);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "is a run of another model") && strstr(r.err, "num_experts_per_tok"), "%s", r.err);
    mt_cli_result_free(&r);
}
