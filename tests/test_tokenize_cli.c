/* megatrain tokenize end to end ($MT_BIN): text, JSONL and directories in, llm.c shards out that
 * mt_tokens_open reads back into the documents' ids (each after the end-of-text token and BOS),
 * the same bytes whatever the thread count; and each bad input refused with a message naming the
 * file (and line) and no shard, finished or temporary, left behind. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "io/tokens.h"
#include "tokenizer_files.h"

#define TIMEOUT_S 60.0
/* A small tokenizer (about 1800 tokens, uint16 ids) that adds BOS: </s> <s> before each document. */
#define SMALL "tests/data/tokenizers/mistral-metaspace"

static char dir[PATH_MAX], out[PATH_MAX];

static void make_dirs(void) {
    hf_test_mkdtemp(dir);
    hf_test_path(out, dir, "out");
    cr_assert_eq(mkdir(out, 0755), 0);
}
static void remove_dirs(void) { hf_test_rmtree(dir); }
TestSuite(tokenize_cli, .init = make_dirs, .fini = remove_dirs);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static const char *out_prefix(const char *name) {
    static char paths[4][PATH_MAX];
    static int next;
    return hf_test_path(paths[next++ % 4], out, name);
}

static void write_bytes(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* The ids of shards PREFIX_000000.bin, ... read back with mt_tokens_open; *shards their count. */
static mt_ids read_shards(const char *prefix, int width, int *shards) {
    mt_ids ids = {0};
    for (*shards = 0;; (*shards)++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s_%06d.bin", prefix, *shards);
        struct stat st;
        if (stat(path, &st) != 0) break;
        mt_tokens t;
        cr_assert_eq(mt_tokens_open(path, &t), MT_OK, "%s", mt_error());
        cr_expect_eq(t.format, MT_TOKENS_LLMC);
        cr_expect_eq(t.width, width, "%s: %d-byte ids, expected %d", path, t.width, width);
        for (size_t i = 0; i < t.count; i++) mt_ids_push(&ids, (int32_t)mt_tokens_get(&t, i));
        mt_tokens_close(&t);
    }
    return ids;
}

/* The command failed with `needle` in its message and left nothing in out/. */
static void expect_clean_failure(mt_cli_result *r, const char *needle) {
    cr_expect(r->exit_code != 0 && r->signal == 0, "exit %d signal %d; stderr: %s", r->exit_code, r->signal, r->err);
    cr_expect_not_null(strstr(r->err, needle), "the message should hold '%s': %s", needle, r->err);
    cr_expect_eq(hf_test_count_entries(out), 0, "a failed run left files in %s", out);
    mt_cli_result_free(r);
}

/* The documents' ids: a directory with a text file (one document) and a JSONL file (two, a blank
 * line between), in path order, each as </s> <s> then exactly what mt_tokenizer_encode gives; the
 * shards hold 7 ids each but the last. */
Test(tokenize_cli, round_trip_through_shards) {
    const char *docs[] = {"First document.\nIt has two lines, \"quotes\" and 中文.\n", "Second one",
                          "Third: emoji \xf0\x9f\x98\x80 and </s> as text"};
    char input[PATH_MAX];
    hf_test_path(input, dir, "in");
    cr_assert_eq(mkdir(input, 0755), 0);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/a.txt", input);
    hf_test_write_text(path, docs[0]);
    snprintf(path, sizeof path, "%s/b.jsonl", input);
    hf_test_write_text(path, "{\"text\": \"Second one\", \"id\": 1}\n\n"
                             "{\"id\": 2, \"text\": \"Third: emoji \\ud83d\\ude00 and </s> as text\"}\n");
    snprintf(path, sizeof path, "%s/skipped.bin", input);
    hf_test_write_text(path, "not a text file by its name");

    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, input, "--out", out_prefix("p"), "--shard-size", "7",
               NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_expect_not_null(strstr(r.out, "3 documents from 2 files"), "%s", r.out);
    mt_cli_result_free(&r);

    int shards;
    mt_ids got = read_shards(out_prefix("p"), 2, &shards);
    mt_tokenizer *tok;
    cr_assert_eq(mt_tokenizer_load(SMALL, &tok), MT_OK, "%s", mt_error());
    mt_ids want = {0};
    for (int d = 0; d < 3; d++) {
        mt_ids_push(&want, mt_tokenizer_eot(tok));
        mt_ids_push(&want, mt_tokenizer_bos(tok));
        cr_assert_eq(mt_tokenizer_encode(tok, docs[d], strlen(docs[d]), 0, &want), MT_OK);
    }
    cr_expect_eq(shards, (int)((want.n + 6) / 7));
    cr_assert_eq(got.n, want.n, "%zu ids in the shards, expected %zu", got.n, want.n);
    cr_expect_eq(memcmp(got.ids, want.ids, want.n * sizeof *want.ids), 0, "the shards' ids differ");
    /* Each document decodes back to its text. */
    size_t start = 0;
    for (int d = 0; d < 3; d++) {
        size_t end = start + 2;
        while (end < got.n && got.ids[end] != mt_tokenizer_eot(tok)) end++;
        char *text = tok_test_decode(tok, got.ids + start + 2, end - start - 2, 0);
        cr_expect_str_eq(text, docs[d]);
        free(text);
        start = end;
    }
    mt_ids_free(&got);
    mt_ids_free(&want);
    mt_tokenizer_free(tok);
}

/* One thread or two: the same shard bytes. */
Test(tokenize_cli, same_shards_whatever_the_threads) {
    char jsonl[1 << 14] = "";
    for (int i = 0; i < 200; i++)
        snprintf(jsonl + strlen(jsonl), sizeof jsonl - strlen(jsonl), "{\"text\": \"document %d says %d things\"}\n",
                 i, i * 7);
    hf_test_write_text(in_dir("docs.jsonl"), jsonl);
    const char *threads[] = {"1", "2"};
    for (int t = 0; t < 2; t++) {
        mt_cli_result r;
        mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, in_dir("docs.jsonl"), "--out",
                   out_prefix(threads[t]), "--threads", threads[t], "--shard-size", "500", NULL);
        cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
        mt_cli_result_free(&r);
    }
    int s1, s2;
    mt_ids one = read_shards(out_prefix("1"), 2, &s1), two = read_shards(out_prefix("2"), 2, &s2);
    cr_expect_gt(s1, 1);
    cr_expect_eq(s1, s2);
    cr_assert_eq(one.n, two.n);
    cr_expect_eq(memcmp(one.ids, two.ids, one.n * sizeof *one.ids), 0);
    mt_ids_free(&one);
    mt_ids_free(&two);
}

/* Llama 3's 128256 tokens: uint32 by default, refused as uint16. */
Test(tokenize_cli, vocabulary_too_large_for_uint16) {
    hf_test_write_text(in_dir("a.txt"), "Hello world");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", tok_test_dir("llama3"), in_dir("a.txt"), "--out",
               out_prefix("p"), "--dtype", "uint16", NULL);
    expect_clean_failure(&r, "128256 tokens does not fit uint16");
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", tok_test_dir("llama3"), in_dir("a.txt"), "--out",
               out_prefix("p"), NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    mt_cli_result_free(&r);
    int shards;
    mt_ids ids = read_shards(out_prefix("p"), 4, &shards);
    int32_t want[] = {128001, 9906, 1917}; /* <|end_of_text|> Hello Ġworld; no BOS from this file */
    cr_assert_eq(ids.n, 3);
    cr_expect_eq(memcmp(ids.ids, want, sizeof want), 0);
    mt_ids_free(&ids);
}

static void run_small(mt_cli_result *r, const char *input, const char *extra) {
    if (extra)
        mt_cli_run(r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, input, "--out", out_prefix("p"), "--text-field",
                   extra, NULL);
    else
        mt_cli_run(r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, input, "--out", out_prefix("p"), NULL);
}

Test(tokenize_cli, jsonl_line_not_json) {
    hf_test_write_text(in_dir("bad.jsonl"), "{\"text\": \"fine\"}\n{\"text\": oops}\n");
    mt_cli_result r;
    run_small(&r, in_dir("bad.jsonl"), NULL);
    expect_clean_failure(&r, "bad.jsonl:2: not JSON");
}

Test(tokenize_cli, jsonl_field_missing_or_not_text) {
    hf_test_write_text(in_dir("a.jsonl"), "{\"body\": \"x\"}\n");
    mt_cli_result r;
    run_small(&r, in_dir("a.jsonl"), NULL);
    expect_clean_failure(&r, "a.jsonl:1: no \"text\" field");
    hf_test_write_text(in_dir("b.jsonl"), "{\"text\": \"x\"}\n{\"text\": \"y\"}\n{\"text\": 5}\n");
    run_small(&r, in_dir("b.jsonl"), NULL);
    expect_clean_failure(&r, "b.jsonl:3: field \"text\" is not a string");
    hf_test_write_text(in_dir("c.jsonl"), "[\"text\"]\n");
    run_small(&r, in_dir("c.jsonl"), NULL);
    expect_clean_failure(&r, "c.jsonl:1: not a JSON object");
    /* The field the flag names is read instead. */
    run_small(&r, in_dir("a.jsonl"), "body");
    cr_expect_eq(r.exit_code, 0, "stderr: %s", r.err);
    mt_cli_result_free(&r);
}

Test(tokenize_cli, invalid_utf8_named_by_file_and_offset) {
    write_bytes(in_dir("bad.txt"), "fine text \xff more", 16);
    mt_cli_result r;
    run_small(&r, in_dir("bad.txt"), NULL);
    expect_clean_failure(&r, "bad.txt: invalid UTF-8 at byte 10");
    write_bytes(in_dir("bad.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"\xc3(\"}\n", 30);
    run_small(&r, in_dir("bad.jsonl"), NULL);
    expect_clean_failure(&r, "bad.jsonl:2: not JSON");
}

/* A bad file after enough text for finished shards: they go too. */
Test(tokenize_cli, error_after_full_shards_leaves_nothing) {
    char text[8192] = "";
    for (int i = 0; i < 200; i++) strcat(text, "words and more words ");
    hf_test_write_text(in_dir("a.txt"), text);
    hf_test_write_text(in_dir("b.jsonl"), "{\"text\": \"fine\"}\nnot json\n");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, in_dir("a.txt"), in_dir("b.jsonl"), "--out",
               out_prefix("p"), "--shard-size", "10", NULL);
    expect_clean_failure(&r, "b.jsonl:2: not JSON");
}

Test(tokenize_cli, unsupported_tokenizer) {
    char tdir[PATH_MAX], tjson[PATH_MAX + 32];
    hf_test_path(tdir, dir, "tok");
    cr_assert_eq(mkdir(tdir, 0755), 0);
    snprintf(tjson, sizeof tjson, "%s/tokenizer.json", tdir);
    hf_test_write_text(tjson, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}");
    hf_test_write_text(in_dir("a.txt"), "a");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", tdir, in_dir("a.txt"), "--out", out_prefix("p"), NULL);
    expect_clean_failure(&r, "tok/tokenizer.json: model: tokenizer model 'WordPiece' is not supported");
}

Test(tokenize_cli, bad_paths_and_arguments) {
    mt_cli_result r;
    run_small(&r, in_dir("missing.txt"), NULL);
    expect_clean_failure(&r, "missing.txt: No such file");
    char empty[PATH_MAX];
    hf_test_path(empty, dir, "empty");
    cr_assert_eq(mkdir(empty, 0755), 0);
    run_small(&r, empty, NULL);
    expect_clean_failure(&r, "no .txt, .text, .md or .jsonl files");
    hf_test_write_text(in_dir("a.txt"), "a");
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, in_dir("a.txt"), NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect_not_null(strstr(r.err, "--out is required"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "tokenize", "--tokenizer", SMALL, in_dir("a.txt"), "--out", out_prefix("p"),
               "--dtype", "int8", NULL);
    cr_expect_eq(r.exit_code, 2);
    mt_cli_result_free(&r);
    /* A second run onto the same prefix is refused; the first run's shard stays. */
    run_small(&r, in_dir("a.txt"), NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    mt_cli_result_free(&r);
    run_small(&r, in_dir("a.txt"), NULL);
    cr_expect_neq(r.exit_code, 0);
    cr_expect_not_null(strstr(r.err, "p_000000.bin already exists"), "%s", r.err);
    cr_expect_eq(hf_test_count_entries(out), 1);
    mt_cli_result_free(&r);
}

/* Nothing passed over in silence: a link to nothing in an input directory is refused (a file the
 * user meant to give is missing), what a directory's walk passes over is said, and shards of an
 * earlier tokenize at the prefix are refused even when its first one was removed. */
Test(tokenize_cli, no_silent_skips) {
    char texts[PATH_MAX];
    hf_test_path(texts, dir, "texts");
    cr_assert_eq(mkdir(texts, 0755), 0);
    hf_test_write_text(in_dir("texts/a.txt"), "some words\n");
    hf_test_write_text(in_dir("texts/notes.rst"), "not taken\n");
    cr_assert_eq(symlink(in_dir("gone.txt"), in_dir("texts/b.txt")), 0);
    mt_cli_result r;
    run_small(&r, texts, NULL);
    expect_clean_failure(&r, "texts/b.txt: a link to");
    cr_assert_eq(unlink(in_dir("texts/b.txt")), 0);
    run_small(&r, texts, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "1 entry passed over"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "notes.rst"), "%s", r.err);
    mt_cli_result_free(&r);
    /* An earlier tokenize's later shard, its first removed. */
    char first[PATH_MAX + 16], later[PATH_MAX + 16];
    snprintf(first, sizeof first, "%s_000000.bin", out_prefix("p"));
    snprintf(later, sizeof later, "%s_000001.bin", out_prefix("p"));
    cr_assert_eq(rename(first, later), 0);
    run_small(&r, texts, NULL);
    cr_assert_neq(r.exit_code, 0);
    cr_assert_not_null(strstr(r.err, "p_000001.bin already exists"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(hf_test_count_entries(out), 1, "the refused run touched %s", out);
}
