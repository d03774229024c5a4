/* One document cut into parts gives exactly the ids of encoding it whole: with
 * mt_tokenizer_next_cut and mt_tokenizer_encode_part in order (parts as small as one byte, a cut
 * that does not verify merged with the next candidate), and through mt_tokenize_files with tiny
 * parts on several threads (the same shards whatever the thread count and part size). For the five
 * reference tokenizers on every corpus file and on a text built to put candidate cuts where they
 * are hard (contractions and CRLF after newlines, whitespace runs, added tokens next to newlines,
 * combining marks after a newline, "▁" in the text), and for pipelines built to break cuts: Split
 * patterns that match across newlines, every Split behaviour with and without invert, patterns
 * that look behind, added tokens that hold a newline, strip whitespace or are single words. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_test_files.h"
#include "io/tokens.h"
#include "tokenizer/tokenize_files.h"
#include "tokenizer_files.h"
#include "test_limits.h"

static const char *const names[] = {"llama3", "qwen3", "mistral", "mistral-metaspace", "gpt2-bytelevel"};
#define N_NAMES (sizeof names / sizeof *names)

static const char *const corpus[] = {"prose.txt",      "code.py",    "code_crlf.c",     "chinese.txt", "japanese.txt",
                                     "arabic.txt",     "hindi.txt",  "emoji.txt",       "whitespace.txt",
                                     "digits.txt",     "punctuation.txt", "special.txt", "unicode.txt",
                                     "regex_edge.txt"};
#define N_CORPUS (sizeof corpus / sizeof *corpus)

/* Candidate cuts where they are hard to get right. */
static const char adversarial[] =
    "\nlet's go\nLET'S GO\n've\n's\n'll\nX\r\nCRLF line\r\n\r\nnext\r\n  \n\t\nindented\n    code();\n\n\n\nword\n"
    "<|endoftext|>\n<|endoftext|>after\nbefore<|endoftext|>\n<|end_of_text|>\n</s>\n</s>x\n<s>\nword </s> word  "
    "</s>  w\n<|im_start|>user\nhi<|im_end|>\n\xe2\x96\x81lead \xe2\x96\x81\xe2\x96\x81 meta  \xe2\x96\x81\nx e\xcc\x81\n"
    "cafe\xcc\x81\n\xcc\x81" "combining after a newline\n\xe4\xb8\xad\xe6\x96\x87\n 123456789\nx\nY\nZ\n Q\nQ\nW\nW \nend";

/* Every corpus file, then the adversarial text, three times (malloc'd). */
static char *mixed_text(size_t *len) {
    char *all = NULL;
    size_t n = 0;
    for (int round = 0; round < 3; round++) {
        for (size_t f = 0; f <= N_CORPUS; f++) {
            size_t flen = sizeof adversarial - 1;
            char *text = f < N_CORPUS ? tok_test_read(tok_test_corpus(corpus[f]), &flen) : NULL;
            all = realloc(all, n + flen + 1);
            memcpy(all + n, text ? text : adversarial, flen);
            n += flen;
            free(text);
        }
    }
    all[n] = 0;
    *len = n;
    return all;
}

/* text encoded in parts of about `part` bytes in order, a part whose end does not verify encoded
 * again up to the next candidate; *parts and *merges count them. */
static mt_ids encode_in_parts(const mt_tokenizer *tok, const char *text, size_t len, int allow, size_t part,
                              size_t *parts, size_t *merges) {
    mt_ids ids = {0};
    for (size_t start = 0; start < len;) {
        size_t end = part < len - start ? mt_tokenizer_next_cut(tok, text, len, start + part) : len;
        cr_assert(end > start && end <= len, "cut %zu after %zu in %zu bytes", end, start, len);
        for (;;) {
            size_t n0 = ids.n;
            int ok;
            cr_assert_eq(mt_tokenizer_encode_part(tok, text, len, start, end, allow, &ids, &ok), MT_OK, "%s",
                         mt_error());
            if (ok) break;
            cr_assert_lt(end, len, "the document's end must verify");
            ids.n = n0;
            (*merges)++;
            end = mt_tokenizer_next_cut(tok, text, len, end + 1);
        }
        (*parts)++;
        start = end;
    }
    return ids;
}

static void expect_same_ids(const mt_ids *got, const mt_ids *want, const char *what) {
    size_t i = 0;
    while (i < got->n && i < want->n && got->ids[i] == want->ids[i]) i++;
    cr_expect(i == got->n && i == want->n, "%s: %zu ids, whole %zu; first difference at %zu: %d, whole %d", what,
              got->n, want->n, i, i < got->n ? got->ids[i] : -1, i < want->n ? want->ids[i] : -1);
}

/* text in parts of each size of `sizes` (with and without special tokens) equals text whole. */
static void expect_parts_exact(const mt_tokenizer *tok, const char *label, const char *text, size_t len,
                               const size_t *sizes, size_t n_sizes, size_t *parts, size_t *merges) {
    for (int allow = 0; allow < 2; allow++) {
        mt_ids whole = {0};
        cr_assert_eq(mt_tokenizer_encode(tok, text, len, allow, &whole), MT_OK, "%s: %s", label, mt_error());
        for (size_t k = 0; k < n_sizes; k++) {
            mt_ids got = encode_in_parts(tok, text, len, allow, sizes[k], parts, merges);
            char what[300];
            snprintf(what, sizeof what, "%s, parts of %zu bytes, allow_special %d", label, sizes[k], allow);
            expect_same_ids(&got, &whole, what);
            mt_ids_free(&got);
        }
        mt_ids_free(&whole);
    }
}

Test(tokenize_parts, corpus_files_in_parts_encode_as_whole) {
    static const size_t sizes[] = {1, 5, 17, 64};
    for (size_t t = 0; t < N_NAMES; t++) {
        mt_tokenizer *tok = tok_test_load(names[t]);
        size_t parts = 0, merges = 0;
        for (size_t f = 0; f < N_CORPUS; f++) {
            size_t len;
            char *text = tok_test_read(tok_test_corpus(corpus[f]), &len);
            char label[128];
            snprintf(label, sizeof label, "%s %s", names[t], corpus[f]);
            expect_parts_exact(tok, label, text, len, sizes, 4, &parts, &merges);
            free(text);
        }
        /* Every one of them is cut somewhere: the test compares real parts. */
        cr_expect_gt(parts, 2 * 4 * N_CORPUS * 3, "%s: %zu parts, %zu merges", names[t], parts, merges);
        mt_tokenizer_free(tok);
    }
}

Test(tokenize_parts, mixed_text_in_parts_encodes_as_whole) {
    static const size_t sizes[] = {1, 3, 64, 1000};
    size_t len;
    char *text = mixed_text(&len);
    for (size_t t = 0; t < N_NAMES; t++) {
        mt_tokenizer *tok = tok_test_load(names[t]);
        size_t parts = 0, merges = 0;
        expect_parts_exact(tok, names[t], text, len, sizes, 4, &parts, &merges);
        cr_expect_gt(parts, 8 * len / 1000, "%s: %zu parts", names[t], parts);
        mt_tokenizer_free(tok);
    }
    free(text);
}

/* ---- pipelines built to break cuts, from the GPT-2 tokenizer ---- */

static json_t *gpt2_json(void) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tokenizer.json", tok_test_dir("gpt2-bytelevel"));
    json_error_t err;
    json_t *t = json_load_file(path, 0, &err);
    cr_assert_not_null(t, "%s: %s", path, err.text);
    return t;
}

/* GPT-2 with a Split(pattern, behavior, invert) before its ByteLevel (no regex of its own). */
static json_t *split_json(const char *pattern, const char *behavior, int invert) {
    json_t *t = gpt2_json();
    json_t *pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                            "pretokenizers", "type", "Split", "pattern", "Regex", pattern, "behavior", behavior,
                            "invert", invert, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0,
                            "trim_offsets", 1);
    json_object_set_new(t, "pre_tokenizer", pre);
    return t;
}

static mt_tokenizer *load_built(json_t *t, char *dir) {
    hf_test_mkdtemp(dir);
    char *text = json_dumps(t, JSON_COMPACT);
    mt_tokenizer *tok;
    cr_assert_eq(tok_test_load_json(dir, text, &tok), MT_OK, "%s", mt_error());
    free(text);
    json_decref(t);
    return tok;
}

/* The mixed text in parts of 1, 4 and 32 bytes through the built tokenizer; *merges counted. */
static void expect_built_exact(json_t *t, const char *label, size_t *parts, size_t *merges) {
    static const size_t sizes[] = {1, 4, 32};
    char dir[PATH_MAX];
    mt_tokenizer *tok = load_built(t, dir);
    size_t len;
    char *text = mixed_text(&len);
    expect_parts_exact(tok, label, text, len, sizes, 3, parts, merges);
    free(text);
    mt_tokenizer_free(tok);
    hf_test_rmtree(dir);
}

/* Matches across "\n" then a letter: every cut after a newline fails and is merged. */
Test(tokenize_parts, split_across_newlines_merges_every_such_cut) {
    size_t parts = 0, merges = 0;
    expect_built_exact(split_json("\\n[A-Za-z]+|[^\\n]", "Isolated", 0), "newline-letter", &parts, &merges);
    cr_expect_gt(merges, 100, "%zu merges", merges);
}

Test(tokenize_parts, every_split_behavior_and_invert_cuts_exactly) {
    static const char *const behaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
    static const char *const patterns[] = {"\\n", "[A-Z][a-z]*", "\\s+(?!\\S)|\\s+", "[^\\n]+\\n?"};
    size_t merges = 0, parts = 0;
    for (size_t b = 0; b < 5; b++)
        for (size_t p = 0; p < 4; p++)
            for (int invert = 0; invert < 2; invert++) {
                char label[128];
                snprintf(label, sizeof label, "/%s/ %s invert %d", patterns[p], behaviors[b], invert);
                expect_built_exact(split_json(patterns[p], behaviors[b], invert), label, &parts, &merges);
            }
    /* Some of these never have a boundary after a newline (MergedWithNext on "\n"): cuts fail. */
    cr_expect_gt(merges, 0);
}

/* A pattern that looks before its start or anchors there is not cut at all. */
Test(tokenize_parts, patterns_that_look_behind_are_not_cut) {
    static const char *const patterns[] = {"(?<=\\n)[a-z]+|\\w+|\\W", "\\b\\w+|\\W|\\w", "^\\w+|\\w+|\\W",
                                           "\\G\\w|\\w+|\\W", "\\A\\w+|\\w+|\\W"};
    for (size_t p = 0; p < 5; p++) {
        size_t parts = 0, merges = 0;
        expect_built_exact(split_json(patterns[p], "Isolated", 0), patterns[p], &parts, &merges);
        cr_expect_eq(parts, 2 * 3, "/%s/: %zu parts: one per run", patterns[p], parts);
    }
}

static void add_token(json_t *t, int32_t id, const char *content, int lstrip, int rstrip, int single_word,
                      int normalized) {
    json_array_append_new(json_object_get(t, "added_tokens"),
                          json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "lstrip",
                                    lstrip, "rstrip", rstrip, "single_word", single_word, "normalized", normalized,
                                    "special", 0));
}

/* Added tokens holding a newline before a letter, stripping whitespace, single words, matched in
 * the input or (NFC) in the normalized text. */
Test(tokenize_parts, added_tokens_against_cuts) {
    json_t *t = gpt2_json();
    int32_t id = 60000;
    add_token(t, id++, "x\nY", 0, 0, 0, 0);
    add_token(t, id++, "\nZ", 0, 0, 0, 0);
    add_token(t, id++, "Q", 1, 0, 0, 0);
    add_token(t, id++, "W", 0, 1, 1, 0);
    add_token(t, id++, "e\xcc\x81\nc", 0, 0, 0, 1);
    add_token(t, id++, "go\nL", 0, 0, 0, 1);
    json_object_set_new(t, "normalizer", json_pack("{s:s}", "type", "NFC"));
    size_t parts = 0, merges = 0;
    expect_built_exact(t, "added tokens", &parts, &merges);
    cr_expect_gt(parts, 100);
}

/* ---- through mt_tokenize_files ---- */

static mt_ids tokenize_file(const char *tokenizer, const char *input, const char *prefix, int threads, size_t part,
                            mt_tokenize_summary *s) {
    const char *inputs[] = {input};
    mt_tokenize_options o = {.tokenizer = tokenizer, .inputs = inputs, .n_inputs = 1, .out_prefix = prefix,
                             .threads = threads, .part_bytes = part, .bos = -1, .width = 4};
    cr_assert_eq(mt_tokenize_files(&o, s), MT_OK, "%s", mt_error());
    mt_ids ids = {0};
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s_000000.bin", prefix);
    mt_tokens tokens;
    cr_assert_eq(mt_tokens_open(path, &tokens), MT_OK, "%s", mt_error());
    for (size_t i = 0; i < tokens.count; i++) mt_ids_push(&ids, (int32_t)mt_tokens_get(&tokens, i));
    mt_tokens_close(&tokens);
    return ids;
}

/* The mixed text as one plain-text file: whole on one thread, then in parts of 64 and 7 bytes on
 * 1, 3 and 4 threads: the same ids, the document's after its separators. */
static void expect_files_exact(const char *tokenizer, const char *label, int expect_merges) {
    char dir[PATH_MAX], input[PATH_MAX], prefix[PATH_MAX];
    hf_test_mkdtemp(dir);
    size_t len;
    char *text = mixed_text(&len);
    FILE *f = fopen(hf_test_path(input, dir, "mixed.txt"), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    fclose(f);
    mt_tokenize_summary s;
    mt_ids whole = tokenize_file(tokenizer, input, hf_test_path(prefix, dir, "whole"), 1, SIZE_MAX, &s);
    cr_expect_eq(s.parts, 1);
    mt_tokenizer *tok;
    cr_assert_eq(mt_tokenizer_load(tokenizer, &tok), MT_OK, "%s", mt_error());
    mt_ids direct = {0};
    cr_assert_eq(mt_tokenizer_encode(tok, text, len, 0, &direct), MT_OK, "%s", mt_error());
    cr_assert_geq(whole.n, direct.n + 1);
    mt_ids tail = {whole.ids + whole.n - direct.n, direct.n, direct.n};
    expect_same_ids(&tail, &direct, label);
    mt_tokenizer_free(tok);
    mt_ids_free(&direct);
    static const struct {
        int threads;
        size_t part;
    } runs[] = {{1, 64}, {3, 64}, {4, 7}, {2, 0}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        char name[32];
        snprintf(name, sizeof name, "run%zu", r);
        mt_ids got = tokenize_file(tokenizer, input, hf_test_path(prefix, dir, name), runs[r].threads, runs[r].part,
                                   &s);
        char what[200];
        snprintf(what, sizeof what, "%s on %d threads, parts of %zu bytes", label, runs[r].threads, runs[r].part);
        expect_same_ids(&got, &whole, what);
        if (runs[r].part && !expect_merges) cr_expect_gt(s.parts, len / 64 / 2, "%s: %zu parts", what, s.parts);
        if (runs[r].part && expect_merges) cr_expect_gt(s.merges, 0, "%s: no cut was merged", what);
        cr_expect_eq(s.documents, 1, "%s", what);
        mt_ids_free(&got);
    }
    mt_ids_free(&whole);
    free(text);
    hf_test_rmtree(dir);
}

/* Loading Llama 3's and Qwen3's 9 MB tokenizers six times each dominates: about 40 s on two busy
 * cores, plain or under ASan; the limit keeps ten times that (test_limits.h). */
Test(tokenize_parts, tokenize_files_in_parts_on_any_thread_count, .timeout = MT_TEST_LIMIT(400)) {
    for (size_t t = 0; t < N_NAMES; t++) expect_files_exact(tok_test_dir(names[t]), names[t], 0);
}

/* Cuts that fail are merged by the writing thread, with the same result. */
Test(tokenize_parts, tokenize_files_merges_failed_cuts) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    json_t *t = split_json("\\n[A-Za-z]+|[^\\n]", "Isolated", 0);
    cr_assert_eq(json_dump_file(t, hf_test_path(path, dir, "tokenizer.json"), 0), 0);
    json_decref(t);
    expect_files_exact(path, "newline-letter", 1);
    hf_test_rmtree(dir);
}
