/* End-to-end tests of the megatrain command ($MT_BIN): bad inputs are refused with a message that
 * names the file or field and the problem (never a crash, never a checkpoint left behind),
 * resume continues bit for bit, the other commands work on a trained run, and SIGTERM stops a
 * run cleanly at a checkpoint. Fixtures are written into a fresh temp dir for each test. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

/* Generous: each command here takes well under a second, but CI machines are slow and shared. */
#define TIMEOUT_S 30.0

/* A step small enough that a tiny-model run of a few steps takes a fraction of a second. */
#define SMALL_STEP "--seq", "16", "--batch", "2", "--backend", "cpu", "--eval-every", "0"

static char dir[PATH_MAX], corpus[PATH_MAX];

static void make_fixtures(void) {
    hf_test_mkdtemp(dir);
    mt_test_write_corpus(hf_test_path(corpus, dir, "corpus.txt"));
}

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(cli, .init = make_fixtures, .fini = remove_fixtures);

/* ---- helpers ---- */

/* A path inside the test's temp dir (one of a few rotating static buffers). */
static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* What a run leaves once it gets going: checkpoint directories (complete or temporary) and
 * metrics.jsonl. 0 for a missing run directory. */
static int run_artifacts(const char *run) {
    DIR *d = opendir(run);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, "ckpt-", 5) || !strcmp(e->d_name, "metrics.jsonl");
    closedir(d);
    return n;
}

static void assert_clean_exit(const mt_cli_result *r) {
    cr_assert(!r->timed_out, "megatrain ran past %g s; stderr:\n%s", TIMEOUT_S, r->err);
    cr_assert_eq(r->signal, 0, "megatrain died of signal %d; stderr:\n%s", r->signal, r->err);
}

static void assert_succeeded(const mt_cli_result *r) {
    assert_clean_exit(r);
    cr_assert_eq(r->exit_code, 0, "exit %d; stderr:\n%s", r->exit_code, r->err);
}

/* Refused: a non-zero exit, no crash, stderr names `what` and `problem`, and `run` holds no
 * checkpoint or metrics. */
static void assert_refused(const mt_cli_result *r, const char *run, const char *what, const char *problem) {
    assert_clean_exit(r);
    cr_assert_neq(r->exit_code, 0, "exit 0 for a bad input; stderr:\n%s", r->err);
    cr_assert_not_null(strstr(r->err, what), "stderr does not name '%s':\n%s", what, r->err);
    cr_assert_not_null(strstr(r->err, problem), "stderr does not say '%s':\n%s", problem, r->err);
    cr_assert_eq(run_artifacts(run), 0, "a refused run left a checkpoint or metrics in %s", run);
}

/* An llm.c shard: a 256-int32 header (magic, version, promised count), then `count` ids of 2
 * (version 1) or 4 (version 2) bytes. `promised` may disagree with `count` on purpose. */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t promised, const uint32_t *ids,
                        int count) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    int32_t header[256] = {magic, version, promised};
    fwrite(header, sizeof header, 1, f);
    for (int i = 0; i < count; i++) {
        uint16_t narrow = (uint16_t)ids[i];
        fwrite(version == 1 ? (const void *)&narrow : (const void *)&ids[i], version == 1 ? 2 : 4, 1, f);
    }
    fclose(f);
}

/* Byte-vocabulary ids 0..255 over and over. */
static uint32_t *byte_ids(int count) {
    uint32_t *ids = malloc((size_t)count * sizeof *ids);
    cr_assert_not_null(ids);
    for (int i = 0; i < count; i++) ids[i] = (uint32_t)(i % 256);
    return ids;
}

/* The tiny preset's shape as a config.json for `architecture`, with the field `drop` (may be
 * NULL) left out. */
static void write_config(const char *path, const char *architecture, const char *drop) {
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "architectures", architecture,
                          "hidden_size", 64, "intermediate_size", 176, "num_hidden_layers", 2,
                          "num_attention_heads", 4, "num_key_value_heads", 2, "vocab_size", 256,
                          "max_position_embeddings", 256);
    cr_assert_not_null(c);
    if (drop) json_object_del(c, drop);
    cr_assert_eq(json_dump_file(c, path, 0), 0, "cannot write %s", path);
    json_decref(c);
}

static void train_tiny(const char *run, const char *steps) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", steps, "--out",
               run, NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
}

/* ---- bad inputs ---- */

Test(cli, missing_data_file) {
    mt_cli_result r;
    const char *run = in_dir("run");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", in_dir("absent.txt"), SMALL_STEP, "--steps",
               "2", "--out", run, NULL);
    assert_refused(&r, run, "absent.txt", "No such file or directory");
    cr_assert_eq(r.exit_code, 2, "a missing --data file is a bad input (exit 2), got %d", r.exit_code);
    mt_cli_result_free(&r);
    /* a path of 3000 bytes: the message keeps its reason after it */
    char deep[PATH_MAX], *at = deep + snprintf(deep, sizeof deep, "%s", dir);
    for (int i = 0; i < 20; i++) at += snprintf(at, (size_t)(deep + sizeof deep - at), "/%0150d", i);
    snprintf(at, (size_t)(deep + sizeof deep - at), "/absent.txt");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", deep, SMALL_STEP, "--steps", "2", "--out", run,
               NULL);
    assert_refused(&r, run, deep, "No such file or directory");
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    mt_cli_result_free(&r);
}

Test(cli, missing_config_file) {
    mt_cli_result r;
    const char *run = in_dir("run");
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", in_dir("absent.json"), "--data", corpus, SMALL_STEP, "--steps",
               "2", "--out", run, NULL);
    assert_refused(&r, run, "absent.json", "No such file or directory");
    cr_assert_eq(r.exit_code, 1, "a file that cannot be opened is an I/O error (exit 1), got %d", r.exit_code);
    mt_cli_result_free(&r);
}

Test(cli, malformed_config) {
    mt_cli_result r;
    const char *config = in_dir("config.json"), *run = in_dir("run");
    hf_test_write_text(config, "hidden_size = 64\n");
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, SMALL_STEP, "--steps", "2", "--out",
               run, NULL);
    assert_refused(&r, run, config, "JSON");
    mt_cli_result_free(&r);
}

/* A config field megatrain does not know is named, not passed over in silence; one that would change
 * the math (dropout) is refused. */
Test(cli, config_fields_are_read_refused_or_named) {
    const char *config = in_dir("config.json"), *run = in_dir("run");
    json_t *c = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b}", "architectures", "LlamaForCausalLM",
                          "hidden_size", 64, "intermediate_size", 176, "num_hidden_layers", 2, "num_attention_heads",
                          4, "num_key_value_heads", 2, "vocab_size", 256, "max_position_embeddings", 256,
                          "attention_dropout", 0.1, "layernorm_everywhere", 1);
    cr_assert_eq(json_dump_file(c, config, 0), 0);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, SMALL_STEP, "--steps", "1", "--out", run,
               NULL);
    assert_refused(&r, run, "attention_dropout", "is not supported");
    mt_cli_result_free(&r);
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    cr_assert_eq(json_dump_file(c, config, 0), 0);
    json_decref(c);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, SMALL_STEP, "--steps", "1", "--out", run,
               NULL);
    assert_succeeded(&r);
    cr_assert_not_null(strstr(r.err, "does not know, taken as if absent: layernorm_everywhere"), "%s", r.err);
    mt_cli_result_free(&r);
}

Test(cli, unsupported_architecture) {
    mt_cli_result r;
    const char *config = in_dir("config.json"), *run = in_dir("run");
    write_config(config, "GPT2LMHeadModel", NULL);
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, SMALL_STEP, "--steps", "2", "--out",
               run, NULL);
    assert_refused(&r, run, config, "GPT2LMHeadModel");
    cr_assert_not_null(strstr(r.err, "not supported"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(cli, config_missing_required_field) {
    mt_cli_result r;
    const char *config = in_dir("config.json"), *run = in_dir("run");
    write_config(config, "LlamaForCausalLM", "hidden_size");
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, SMALL_STEP, "--steps", "2", "--out",
               run, NULL);
    assert_refused(&r, run, config, "'hidden_size' is missing");
    mt_cli_result_free(&r);
}

/* Writes the shard, trains the tiny preset on it, and expects a refusal naming the shard and
 * `problem`; `ids` is freed. */
static void expect_shard_refused(const char *name, int32_t magic, int32_t version, int32_t promised,
                                 uint32_t *ids, int count, const char *problem) {
    mt_cli_result r;
    const char *shard = in_dir(name), *run = in_dir("run");
    write_shard(shard, magic, version, promised, ids, count);
    free(ids);
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", shard, SMALL_STEP, "--steps", "2", "--out", run,
               NULL);
    assert_refused(&r, run, shard, problem);
    mt_cli_result_free(&r);
}

Test(cli, shard_with_wrong_magic) {
    expect_shard_refused("wrong-magic.bin", 20240521, 1, 1000, byte_ids(1000), 1000, "magic");
}

Test(cli, truncated_shard) {
    /* The header promises 4000 more tokens than the file holds. */
    expect_shard_refused("truncated.bin", 20240520, 1, 5000, byte_ids(1000), 1000, "promises");
}

Test(cli, token_outside_vocabulary) {
    uint32_t *ids = byte_ids(2000);
    ids[777] = 300; /* the tiny preset's vocabulary is the 256 byte values */
    expect_shard_refused("wide.bin", 20240520, 2, 2000, ids, 2000, "token 300 at position 777");
}

Test(cli, seq_past_max_position) {
    mt_cli_result r;
    const char *run = in_dir("run");
    /* The later --seq wins: 257 is one past the tiny preset's 256 positions. */
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--seq", "257", "--steps",
               "2", "--out", run, NULL);
    assert_refused(&r, run, "--seq 257", "max_position_embeddings");
    mt_cli_result_free(&r);
}

/* Context extension: --max-positions raises the limit --seq is checked against and --rope-theta
 * the RoPE base; both are the run's model (its exported config), which a resume keeps and may not
 * change; bad values are refused naming the option. */
Test(cli, max_positions_and_rope_theta_extend_the_context) {
    mt_cli_result r;
    const char *run = in_dir("run"), *out = in_dir("exported");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--seq", "300",
               "--max-positions", "512", "--rope-theta", "20000", "--steps", "2", "--out", run, NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "export", run, out, NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    json_t *config = json_load_file(in_dir("exported/config.json"), 0, NULL);
    cr_assert_not_null(config, "no readable exported config.json");
    cr_expect_eq(json_integer_value(json_object_get(config, "max_position_embeddings")), 512);
    cr_expect_eq(json_number_value(json_object_get(config, "rope_theta")), 20000.0);
    json_decref(config);
    /* resumed: the run's own limits stand (--seq 300 still fits); another limit is refused */
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "3", "--backend", "cpu", NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", "4", "--backend", "cpu",
               "--max-positions", "1024", NULL);
    cr_expect_neq(r.exit_code, 0, "a resume took another --max-positions:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "max_position_embeddings 512"), "%s", r.err);
    mt_cli_result_free(&r);
    const char *bad[][2] = {{"--max-positions", "0"}, {"--rope-theta", "0"}, {"--rope-theta", "-5"},
                            {"--attn-tile", "-1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "tiny", "--backend", "cpu", bad[i][0], bad[i][1], NULL);
        cr_expect_eq(r.exit_code, 2, "plan took %s %s (exit %d)", bad[i][0], bad[i][1], r.exit_code);
        cr_expect_not_null(strstr(r.err, bad[i][0]), "%s", r.err);
        mt_cli_result_free(&r);
    }
    /* a 3B at 512k tokens: planned, in pieces, once the positions allow it */
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.2-3b", "--backend", "cpu", "--seq", "524288", "--batch",
               "1", "--max-positions", "524288", NULL);
    cr_expect_not_null(strstr(r.out, "8192 tokens at a time (64 per micro-batch)"), "%s%s", r.out, r.err);
    mt_cli_result_free(&r);
}

Test(cli, unwritable_run_directory) {
    mt_cli_result r;
    /* A regular file as the parent: chmod would not stop a test running as root. */
    const char *file = in_dir("plain-file");
    hf_test_write_text(file, "not a directory\n");
    char run[PATH_MAX];
    snprintf(run, sizeof run, "%s/run", file);
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out", run,
               NULL);
    assert_refused(&r, run, run, "Not a directory");
    mt_cli_result_free(&r);
}

Test(cli, ends_on_device_refuses_a_bad_mode_and_quantized_moments) {
    mt_cli_result r;
    const char *run = in_dir("run");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out", run,
               "--ends-on-device", "maybe", NULL);
    assert_refused(&r, run, "--ends-on-device 'maybe'", "expected auto, on or off");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out", run,
               "--ends-on-device", "on", "--moments", "8bit", NULL);
    assert_refused(&r, run, "--moments 8bit", "fp32 Adam moments");
    mt_cli_result_free(&r);
}

Test(cli, unknown_preset) {
    mt_cli_result r;
    const char *run = in_dir("run");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "gpt-5", "--data", corpus, SMALL_STEP, "--steps", "2", "--out",
               run, NULL);
    assert_refused(&r, run, "gpt-5", "preset");
    cr_assert_not_null(strstr(r.err, "tiny"), "the message should list the known presets:\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(cli, non_numeric_steps) {
    mt_cli_result r;
    const char *run = in_dir("run");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "six", "--out",
               run, NULL);
    assert_refused(&r, run, "--steps", "'six'");
    cr_assert_eq(r.exit_code, 2, "a usage error exits 2, got %d", r.exit_code);
    mt_cli_result_free(&r);
}

Test(cli, unknown_command) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "fly", NULL);
    assert_clean_exit(&r);
    cr_assert_eq(r.exit_code, 2, "a usage error exits 2, got %d", r.exit_code);
    cr_assert_not_null(strstr(r.err, "unknown command 'fly'"), "stderr:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* ---- resume ---- */

static void *read_whole(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *bytes = (size_t)ftell(f);
    rewind(f);
    void *data = malloc(*bytes ? *bytes : 1);
    cr_assert_not_null(data);
    cr_assert_eq(fread(data, 1, *bytes, f), *bytes, "short read of %s", path);
    fclose(f);
    return data;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    void *da = read_whole(a, &na), *db = read_whole(b, &nb);
    int same = na == nb && !memcmp(da, db, na);
    free(da);
    free(db);
    return same;
}

/* Trains the tiny model 6 steps into `run`, checkpointing at 3 and 6. `order` is "--sequential"
 * or NULL for the random sampler: as the last argument, NULL simply ends the list. */
static void train_six_steps(const char *run, int resume, const char *order) {
#define SIX_STEPS "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "6", "--ckpt-every", "3"
    mt_cli_result r;
    if (resume)
        mt_cli_run(&r, TIMEOUT_S, SIX_STEPS, "--out", run, "--resume", order, NULL);
    else
        mt_cli_run(&r, TIMEOUT_S, SIX_STEPS, "--out", run, order, NULL);
#undef SIX_STEPS
    assert_succeeded(&r);
    if (resume) cr_assert_not_null(strstr(r.err, "ckpt-000003"), "did not resume from step 3:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* 6 steps straight through (`straight_arg`) against 6 steps resumed from the step-3 checkpoint
 * (`resumed_arg`; the same --steps, since the learning-rate schedule depends on it): the final
 * master weights and Adam moments must agree bit for bit. */
static void assert_resumed_equals(const char *straight_arg, const char *resumed_arg) {
    const char *straight = in_dir("straight"), *resumed = in_dir("resumed");
    train_six_steps(straight, 0, straight_arg);
    train_six_steps(resumed, 0, resumed_arg);
    hf_test_rmtree(in_dir("resumed/ckpt-000006"));
    train_six_steps(resumed, 1, resumed_arg);
    static const char *const blobs[] = {"master.bin", "adam_m.bin", "adam_v.bin"};
    for (int b = 0; b < 3; b++) {
        char end[PATH_MAX], end_resumed[PATH_MAX], middle[PATH_MAX];
        snprintf(end, sizeof end, "%s/ckpt-000006/%s", straight, blobs[b]);
        snprintf(end_resumed, sizeof end_resumed, "%s/ckpt-000006/%s", resumed, blobs[b]);
        snprintf(middle, sizeof middle, "%s/ckpt-000003/%s", straight, blobs[b]);
        cr_assert(same_file(end, end_resumed), "%s differs between the straight and the resumed run", blobs[b]);
        cr_assert(!same_file(end, middle), "%s did not change from step 3 to 6: the comparison proves nothing",
                  blobs[b]);
    }
}

static void assert_resume_exact(const char *order) { assert_resumed_equals(order, order); }

Test(cli, resume_is_exact_random_order) { assert_resume_exact(NULL); }

Test(cli, resume_is_exact_sequential_order) { assert_resume_exact("--sequential"); }

/* The embedding and head updated by the backend: their state is brought home for each checkpoint
 * and uploaded again on resume. */
Test(cli, resume_is_exact_with_ends_on_device) { assert_resume_exact("--ends-on-device=on"); }

/* Blocks updated by the backend (--device-blocks): a run with one, and one with every block there,
 * resumed from the step-3 checkpoint, end with the bits of the run whose state is all on the host
 * (the cpu backend's default). */
Test(cli, resume_with_device_blocks_equals_the_host_run) { assert_resumed_equals(NULL, "--device-blocks=1"); }
Test(cli, resume_with_every_block_on_the_device_equals_the_host_run) {
    assert_resumed_equals(NULL, "--device-blocks=all");
}

Test(cli, device_blocks_refuses_a_bad_count) {
    mt_cli_result r;
    const char *run = in_dir("run");
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out", run,
               "--device-blocks", "some", NULL);
    assert_refused(&r, run, "--device-blocks 'some'", "expected auto, all or a count");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out", run,
               "--device-blocks", "99", NULL);
    assert_refused(&r, run, "--device-blocks '99'", "from 0 to");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out", run,
               "--device-blocks", "1", "--moments", "bf16", NULL);
    assert_refused(&r, run, "--moments bf16", "fp32 Adam moments");
    mt_cli_result_free(&r);
}

/* A fresh run into a directory that holds another run's checkpoints is refused, untouched. */
Test(cli, refuses_to_train_over_an_existing_run) {
    const char *run = in_dir("taken");
    train_tiny(run, "2");
    char master[PATH_MAX], copy[PATH_MAX + 32];
    snprintf(master, sizeof master, "%s/ckpt-000002/master.bin", run);
    snprintf(copy, sizeof copy, "%s/master-before.bin", dir);
    size_t bytes;
    void *before = read_whole(master, &bytes);
    FILE *f = fopen(copy, "wb");
    cr_assert(f && fwrite(before, 1, bytes, f) == bytes, "cannot write %s", copy);
    fclose(f);
    free(before);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "2", "--out",
               run, NULL);
    assert_clean_exit(&r);
    cr_expect_eq(r.exit_code, 2, "exit %d", r.exit_code);
    cr_expect(strstr(r.err, "already holds a run") && strstr(r.err, "--resume"), "stderr:\n%s", r.err);
    cr_expect(same_file(master, copy), "the existing checkpoint changed");
    mt_cli_result_free(&r);
}

/* ---- the other commands ---- */

static int has_line_starting(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *line = text; line; line = strchr(line, '\n')) {
        if (*line == '\n') line++;
        if (!strncmp(line, prefix, n)) return 1;
    }
    return 0;
}

Test(cli, sample_from_a_trained_run) {
    const char *run = in_dir("run");
    train_tiny(run, "2");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "--tokens", "20", "--backend", "cpu", NULL);
    assert_succeeded(&r);
    cr_assert_geq(strlen(r.out), 20, "20 tokens of a byte vocabulary are at least 20 bytes, got %zu", strlen(r.out));
    mt_cli_result_free(&r);
}

Test(cli, export_writes_a_hugging_face_directory) {
    const char *run = in_dir("run"), *out = in_dir("exported");
    train_tiny(run, "2");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "export", run, out, NULL);
    assert_succeeded(&r);
    cr_assert(exists(in_dir("exported/config.json")), "no config.json in %s", out);
    cr_assert(exists(in_dir("exported/model.safetensors")), "no model.safetensors in %s", out);
    mt_cli_result_free(&r);
}

/* A killed export's temporary directory beside the target is removed by the next export to it,
 * which says so; one that another export holds is not. */
Test(cli, export_removes_a_killed_exports_temporary_directory) {
    const char *run = in_dir("run"), *out = in_dir("exported"), *stale = in_dir("exported.tmp-AbC123");
    train_tiny(run, "2");
    cr_assert_eq(mkdir(stale, 0700), 0);
    char part[PATH_MAX + 32];
    snprintf(part, sizeof part, "%s/model.safetensors", stale);
    FILE *f = fopen(part, "w");
    cr_assert_not_null(f);
    fputs("half", f);
    fclose(f);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "export", run, out, NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.err, "exported.tmp-AbC123, the temporary directory of an export") != NULL, "%s", r.err);
    cr_assert(!exists(stale), "%s is left", stale);
    cr_assert(exists(in_dir("exported/config.json")));
    mt_cli_result_free(&r);
}

/* A Hugging Face Qwen3 (q/k norms, head_dim 6 where hidden / heads is 4) through a run: imported
 * into a checkpoint (whose manifest keeps the config) and exported from it unchanged. */
Test(cli, qwen3_imports_and_exports_through_a_run) {
    const char *run = in_dir("run"), *out = in_dir("exported"), *data = in_dir("tokens.bin");
    uint32_t ids[1000];
    for (int i = 0; i < 1000; i++) ids[i] = (uint32_t)(i * 7 % 10); /* its vocabulary is 10 */
    write_shard(data, 20240520, 1, 1000, ids, 1000);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--init-from", "tests/data/safetensors/tiny_qwen3", "--data", data, SMALL_STEP,
               "--steps", "0", "--out", run, NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "export", run, out, "--dtype", "bf16", NULL);
    assert_succeeded(&r);
    mt_cli_result_free(&r);
    hf_test_expect_same_tensors("tests/data/safetensors/tiny_qwen3", out);
}

Test(cli, plan_prints_host_and_device_memory) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3-8b", "--backend", "cpu", NULL);
    assert_succeeded(&r);
    cr_assert(has_line_starting(r.out, "host"), "no line starting with 'host':\n%s", r.out);
    cr_assert(has_line_starting(r.out, "device"), "no line starting with 'device':\n%s", r.out);
    mt_cli_result_free(&r);
}

/* The chunks plan chose: a 131072-token Llama-3.1-8B sequence in pieces of --chunk, the head's
 * gradient in vocabulary chunks, and the checkpoint split. */
Test(cli, plan_prints_chunks_and_checkpoint_split) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.1-8b", "--backend", "cpu", "--seq", "131072", "--batch",
               "1", "--chunk", "4096", NULL);
    assert_succeeded(&r);
    cr_expect_not_null(strstr(r.out, "MLP 4096 tokens at a time (32 per micro-batch)"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "8192 vocabulary rows at a time (16 chunks)"), "%s", r.out);
    cr_expect(has_line_starting(r.out, "ckpts"), "no checkpoint line:\n%s", r.out);
    mt_cli_result_free(&r);
    /* past what the model's RoPE allows: refused, naming the limit */
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.1-8b", "--backend", "cpu", "--seq", "131073", "--batch",
               "1", NULL);
    cr_expect_eq(r.exit_code, 2, "plan took --seq 131073 (exit %d):\n%s", r.exit_code, r.out);
    cr_expect_not_null(strstr(r.err, "131072"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* Llama-3.1-8B at 512k and 1M tokens (issue 29), planned for a GPU that is not here (the CUDA
 * backend's model: attention's workspace its kernels' or cuDNN's dQ accumulator, the larger): the
 * attention windows and the block workspace by what it grows with; on one H100 of the lent
 * 2-GPU machine (78 GiB, 251 GiB of host) and on 80 GiB beside 256 GiB 512k fits; at 1M there the
 * device fits and the host does not (the checkpoints, named as the largest class, with what would
 * shrink the host's part); 768k fits there without the clip's gradients and with bf16 moments; on
 * 24 GiB beside 128 GiB 512k and 1M are refused with the bytes of each class, at the smallest
 * settings. */
static void plan_8b_with(mt_cli_result *r, const char *seq, const char *gpu, const char *host, const char *tile,
                         const char *clip, const char *moments) {
    mt_cli_run(r, TIMEOUT_S, "plan", "--preset", "llama-3.1-8b", "--backend", "cuda", "--batch", "1", "--seq", seq,
               "--max-positions", seq, "--gpu-mem", gpu, "--host-mem", host, "--attn-tile", tile, "--rate-gemm",
               "700", "--rate-pcie", "51", "--rate-adamw", "3.7", "--clip", clip, "--moments", moments, NULL);
    assert_succeeded(r);
}

static void plan_8b(mt_cli_result *r, const char *seq, const char *gpu, const char *host, const char *tile) {
    plan_8b_with(r, seq, gpu, host, tile, "1.0", "fp32");
}

static const char *fit_line(const char *out, const char *what) {
    const char *at = strstr(out, what);
    cr_assert(at, "no '%s' in the plan:\n%s", what, out);
    return at;
}

static int line_fits(const char *line) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    return len >= 6 && !strncmp(line + len - 6, ": fits", 6);
}

static void expect_fits(const mt_cli_result *r, int host, int device, const char *what) {
    cr_expect_eq(line_fits(fit_line(r->out, "host needs")), host, "%s: the host %s:\n%s", what,
                 host ? "does not fit" : "fits", r->out);
    cr_expect_eq(line_fits(fit_line(r->out, "device needs")), device, "%s: the device %s:\n%s", what,
                 device ? "does not fit" : "fits", r->out);
}

Test(cli, plan_8b_long_contexts_say_what_fits) {
    mt_cli_result r;
    plan_8b(&r, "524288", "78GiB", "251GiB", "65536");
    cr_expect(strstr(r.out, "attention windows of 65536 queries, 8 a sequence"), "%s", r.out);
    cr_expect(strstr(r.out, "a micro-batch's (k, v, their gradients and their fp32 sums over the windows"), "%s", r.out);
    cr_expect(strstr(r.out, "attention tile 65536 queries"), "the placement line has no tile:\n%s", r.out);
    expect_fits(&r, 1, 1, "512k on the H100");
    cr_expect(!strstr(r.out, "short"), "%s", r.out);
    mt_cli_result_free(&r);
    plan_8b(&r, "524288", "80GiB", "256GiB", "65536");
    expect_fits(&r, 1, 1, "512k on 80 GiB beside 256 GiB");
    mt_cli_result_free(&r);
    plan_8b(&r, "1048576", "80GiB", "256GiB", "65536");
    cr_expect(strstr(r.out, "16 a sequence"), "%s", r.out);
    expect_fits(&r, 0, 1, "1M on 80 GiB beside 256 GiB");
    cr_expect(strstr(r.out, "its largest class activation checkpoints") && strstr(r.out, "less host: --clip 0"),
              "%s", r.out);
    mt_cli_result_free(&r);
    plan_8b_with(&r, "786432", "80GiB", "256GiB", "65536", "0", "bf16");
    expect_fits(&r, 1, 1, "768k on 80 GiB beside 256 GiB, --clip 0 --moments bf16");
    mt_cli_result_free(&r);
    const char *on_24[] = {"524288", "1048576"};
    for (size_t i = 0; i < sizeof on_24 / sizeof on_24[0]; i++) {
        plan_8b(&r, on_24[i], "24GiB", "128GiB", "65536");
        cr_expect(strstr(r.out, "plan      does NOT fit: the device budget of 24.00 GiB"), "%s", r.out);
        cr_expect(strstr(r.out, "an attention tile of 8192 queries, a block chunk of 1024 tokens"), "%s", r.out);
        cr_expect(strstr(r.out, "activation checkpoints") && strstr(r.out, "workspace"), "%s", r.out);
        mt_cli_result_free(&r);
    }
    /* untiled, the same 512k leaves the H100 far less for checkpoints: the queries' side is whole */
    plan_8b(&r, "524288", "78GiB", "251GiB", "0");
    cr_expect(strstr(r.out, "attention 524288 tokens at a time (1 whole sequences, 1 tiles per micro-batch)"), "%s",
              r.out);
    mt_cli_result_free(&r);
}

/* A million tokens a step of the tiny model on the cpu backend, where the engine's buffers (its
 * checkpoints and the attention's k/v side, in windows) are host memory: against a 1 GiB host the
 * bench is refused at once naming them (the step itself would take hours), and plan says the
 * host is short with them its largest class. */
Test(cli, long_context_refused_before_it_allocates) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "bench", "--preset", "tiny", "--backend", "cpu", "--steps", "1", "--batch", "1",
               "--seq", "1048576", "--max-positions", "1048576", "--host-mem", "1GiB", NULL);
    cr_assert(!r.timed_out, "the bench ran instead of being refused:\n%s", r.err);
    cr_expect_eq(r.exit_code, 1, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "of host memory") && strstr(r.err, "engine buffers"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "tiny", "--backend", "cpu", "--batch", "1", "--seq", "1048576",
               "--max-positions", "1048576", "--host-mem", "1GiB", NULL);
    assert_succeeded(&r);
    cr_expect(strstr(r.out, "attention windows of 65536 queries, 16 a sequence"), "%s", r.out);
    cr_expect(strstr(r.out, "its largest class engine buffers"), "%s", r.out);
    mt_cli_result_free(&r);
}

/* A budget that splits the batch: plan prints the split that runs and train logs that one (not the
 * --batch given), with the placement. */
Test(cli, plan_and_train_report_the_split_that_runs) {
    mt_cli_result r;
    const char *run = in_dir("run");
#define SHAPE "--preset", "tiny", "--backend", "cpu", "--batch", "8", "--seq", "64", "--gpu-mem", "4MiB"
    mt_cli_run(&r, TIMEOUT_S, "plan", SHAPE, NULL);
    assert_succeeded(&r);
    int micro = 0, batch = 0;
    const char *step = strstr(r.out, "step ");
    cr_assert(step && sscanf(step, "step %d micro-batches x %d sequences", &micro, &batch) == 2, "%s", r.out);
    cr_expect_gt(micro, 1, "4 MiB left the batch whole:\n%s", r.out);
    cr_expect_eq(micro * batch, 8, "%s", r.out);
    cr_expect(has_line_starting(r.out, "placement"), "no placement line:\n%s", r.out);
    char split[96];
    snprintf(split, sizeof split, "%d micro-batches x %d sequences x 64 tokens", micro, batch);
    cr_expect(strstr(strstr(r.out, "placement"), split), "the placement says another split than '%s':\n%s", split,
              r.out);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", SHAPE, "--data", corpus, "--steps", "1", "--eval-every", "0", "--out", run,
               NULL);
#undef SHAPE
    assert_succeeded(&r);
    snprintf(split, sizeof split, "%d x %d x 64 tokens a step", micro, batch);
    cr_expect(strstr(r.err, split), "train does not log '%s':\n%s", split, r.err);
    cr_expect(strstr(r.err, "plan: optimizer state:"), "train does not log its plan:\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(cli, help_for_every_command) {
    static const char *const commands[] = {"train", "sample", "plan", "export"};
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "--help", NULL);
    assert_succeeded(&r);
    cr_assert_not_null(strstr(r.out, "usage: megatrain"), "stdout:\n%s", r.out);
    mt_cli_result_free(&r);
    for (int i = 0; i < 4; i++) {
        mt_cli_run(&r, TIMEOUT_S, commands[i], "--help", NULL);
        assert_succeeded(&r);
        cr_assert_not_null(strstr(r.out, "usage: megatrain"), "%s --help printed:\n%s", commands[i], r.out);
        mt_cli_result_free(&r);
    }
    /* the commands that read chat data name its four layouts, and train its run-file rule */
    static const char *const readers[] = {"train", "tokenize"};
    for (int i = 0; i < 2; i++) {
        mt_cli_run(&r, TIMEOUT_S, readers[i], "--help", NULL);
        assert_succeeded(&r);
        cr_expect(strstr(r.out, "\"messages\"") && strstr(r.out, "\"prompt\", \"completion\"") &&
                      strstr(r.out, "(alpaca)") && strstr(r.out, "(ShareGPT)"),
                  "%s --help does not name the chat layouts:\n%s", readers[i], r.out);
        if (i == 0)
            cr_expect(strstr(r.out, "option given here wins over the file's key") &&
                          strstr(r.out, "relative to the file's own directory"), "%s", r.out);
        mt_cli_result_free(&r);
    }
}

/* ---- a clean stop on SIGTERM ---- */

/* The lines of metrics.jsonl so far, and the step of the last one (-1 when there is none). */
static int metrics_lines(const char *run, long long *last_step) {
    char path[PATH_MAX], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    int n = 0;
    *last_step = -1;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        json_t *event = json_loads(line, 0, NULL);
        if (!event) break; /* a line still being written */
        *last_step = json_integer_value(json_object_get(event, "step"));
        json_decref(event);
        n++;
    }
    fclose(f);
    return n;
}

/* A stop on request: the step finishes, its checkpoint is written, and the exit status is 128 + the
 * signal (so that `make demo` and scripts do not carry on as if training were done); the same
 * command line with --resume continues. */
static void assert_signal_stops_at_a_checkpoint(int sig) {
    const char *run = in_dir("run");
    mt_cli_process p;
    /* Far more steps than it can take before the signal, and no periodic checkpoints: the only
     * checkpoint is the one the stop writes. The run starts with the signal's default action, as
     * from a terminal, even where the tests themselves run under nohup (which megatrain honours:
     * a_sighup_ignored_at_start_stays_ignored). */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old;
    sigaction(sig, &dfl, &old);
    mt_cli_start(&p, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "1000000", "--ckpt-every",
                 "0", "--out", run, NULL);
    sigaction(sig, &old, NULL);
    long long step;
    mt_cli_result r;
    for (int polls = 0; metrics_lines(run, &step) < 2; polls++) {
        if (polls * 0.01 > TIMEOUT_S) {
            kill(p.pid, SIGKILL);
            mt_cli_wait(&p, TIMEOUT_S, &r);
            cr_assert_fail("no 2 metrics lines after %g s; stderr:\n%s", TIMEOUT_S, r.err);
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    cr_assert_eq(kill(p.pid, sig), 0);
    mt_cli_wait(&p, 10.0, &r); /* a clean stop is one step and one checkpoint away */
    assert_clean_exit(&r);
    cr_assert_eq(r.exit_code, 128 + sig, "a run stopped by signal %d must exit %d, not %d; stderr:\n%s", sig,
                 128 + sig, r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, "stopped on request"), "stderr:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "--resume"), "the message does not say how to continue:\n%s", r.err);
    mt_cli_result_free(&r);

    metrics_lines(run, &step);
    char checkpoint[PATH_MAX];
    snprintf(checkpoint, sizeof checkpoint, "%s/ckpt-%06lld", run, step);
    cr_assert(exists(checkpoint), "no checkpoint %s for the last step logged", checkpoint);
    mt_cli_run(&r, TIMEOUT_S, "sample", checkpoint, "--tokens", "20", "--backend", "cpu", NULL);
    assert_succeeded(&r);
    cr_assert_geq(strlen(r.out), 20, "sample printed %zu bytes", strlen(r.out));
    mt_cli_result_free(&r);

    /* The rerun continues from that checkpoint, to a few more steps. */
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", step + 2);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--steps", steps, "--backend", "cpu", NULL);
    assert_succeeded(&r);
    cr_assert_not_null(strstr(r.err, checkpoint), "did not resume from %s:\n%s", checkpoint, r.err);
    mt_cli_result_free(&r);
}

Test(cli, sigterm_stops_at_a_checkpoint) { assert_signal_stops_at_a_checkpoint(SIGTERM); }

Test(cli, sigint_stops_at_a_checkpoint) { assert_signal_stops_at_a_checkpoint(SIGINT); }

/* A terminal closing (SIGHUP) must not lose the progress since the last checkpoint. */
Test(cli, sighup_stops_at_a_checkpoint) { assert_signal_stops_at_a_checkpoint(SIGHUP); }

/* Started under nohup (SIGHUP ignored), a run stays ignoring it: the terminal closing must not stop
 * what nohup was asked to keep going. */
Test(cli, a_sighup_ignored_at_start_stays_ignored) {
    const char *run = in_dir("run");
    struct sigaction ignore = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGHUP, &ignore, &old);
    mt_cli_process p;
    mt_cli_start(&p, "train", "--preset", "tiny", "--data", corpus, SMALL_STEP, "--steps", "1000000", "--ckpt-every",
                 "0", "--out", run, NULL);
    sigaction(SIGHUP, &old, NULL);
    long long step;
    for (int polls = 0; metrics_lines(run, &step) < 2; polls++) {
        cr_assert_lt(polls * 0.01, TIMEOUT_S, "the run did not start");
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    cr_assert_eq(kill(p.pid, SIGHUP), 0);
    nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
    long long before = step;
    metrics_lines(run, &step);
    cr_assert_gt(step, before, "the run stopped on the SIGHUP it was started ignoring");
    cr_assert_eq(kill(p.pid, SIGTERM), 0);
    mt_cli_result r;
    mt_cli_wait(&p, 10.0, &r);
    cr_assert_eq(r.exit_code, 128 + SIGTERM, "%s", r.err);
    mt_cli_result_free(&r);
}
