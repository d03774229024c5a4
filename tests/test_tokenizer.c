/* The tokenizer beyond the reference corpus: special and added tokens (lstrip, rstrip,
 * single_word, normalized, allow_special), the BOS/EOS/EOT settings, decoding (byte fallback,
 * invalid bytes, skipped ids), pre-tokenizer split behaviours, concurrent use, and the errors for
 * files and text it cannot take. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_test_files.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer_files.h"

static char dir[PATH_MAX];
static void make_dir(void) { hf_test_mkdtemp(dir); }
static void remove_dir(void) { hf_test_rmtree(dir); }
TestSuite(tokenizer, .init = make_dir, .fini = remove_dir);

static void expect_ids(const mt_ids *got, const int32_t *want, size_t n, const char *what) {
    cr_expect_eq(got->n, n, "%s: %zu ids, expected %zu", what, got->n, n);
    for (size_t i = 0; i < n && i < got->n; i++)
        cr_expect_eq(got->ids[i], want[i], "%s: id %zu is %d, expected %d", what, i, got->ids[i], want[i]);
}

/* ---- a hand-made character-level tokenizer ----
 * Its vocabulary is printable ASCII (id = byte - 32) plus `extra` tokens (ids from 95); no merges
 * unless given, so each character of plain text is one id and added tokens stand out. */
static json_t *char_tokenizer(const char *const *extra, size_t n_extra, json_t *merges) {
    json_t *vocab = json_object();
    for (int c = 32; c < 127; c++) {
        char s[2] = {(char)c, 0};
        json_object_set_new(vocab, s, json_integer(c - 32));
    }
    for (size_t i = 0; i < n_extra; i++) json_object_set_new(vocab, extra[i], json_integer(95 + (json_int_t)i));
    json_t *model = json_pack("{s:s, s:o, s:o}", "type", "BPE", "vocab", vocab, "merges", merges ? merges : json_array());
    return json_pack("{s:[], s:n, s:n, s:n, s:o}", "added_tokens", "normalizer", "pre_tokenizer", "decoder", "model", model);
}

static void add_token(json_t *t, int id, const char *content, int special, int lstrip, int rstrip, int single_word,
                      int normalized) {
    json_array_append_new(json_object_get(t, "added_tokens"),
                          json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "special",
                                    special, "lstrip", lstrip, "rstrip", rstrip, "single_word", single_word,
                                    "normalized", normalized));
}

static mt_tokenizer *load_json(json_t *t) {
    char *text = json_dumps(t, 0);
    json_decref(t);
    mt_tokenizer *tok;
    cr_assert_eq(tok_test_load_json(dir, text, &tok), MT_OK, "%s", mt_error());
    free(text);
    return tok;
}

/* got == want, then both and the tokenizer freed. */
static void expect_ids_and_free(mt_tokenizer *tok, mt_ids *got, mt_ids *want, const char *what) {
    expect_ids(got, want->ids, want->n, what);
    mt_ids_free(got);
    mt_ids_free(want);
    mt_tokenizer_free(tok);
}

/* The ids of plain ASCII text in the character tokenizer. */
static void push_chars(mt_ids *ids, const char *s) {
    for (; *s; s++) mt_ids_push(ids, *s - 32);
}

/* tokenizers' own example (added_vocabulary.rs, test_single_word_is_correct): a single_word token
 * matches only where no word character touches it. */
Test(tokenizer, added_token_single_word) {
    json_t *t = char_tokenizer(NULL, 0, NULL);
    add_token(t, 200, "<mask>", 0, 0, 0, 1, 0);
    mt_tokenizer *tok = load_json(t);
    mt_ids got = tok_test_encode(tok, "<mask> My name <mask> A<mask> <mask>ony <mask>"), want = {0};
    mt_ids_push(&want, 200);
    push_chars(&want, " My name ");
    mt_ids_push(&want, 200);
    push_chars(&want, " A<mask> <mask>ony ");
    mt_ids_push(&want, 200);
    expect_ids_and_free(tok, &got, &want, "single_word");
}

/* tokenizers' test_lstrip_unicode_space: lstrip and rstrip take the whitespace beside the token
 * (Unicode White_Space, U+2000 included), never what an earlier match took. */
Test(tokenizer, added_token_lstrip_rstrip) {
    json_t *t = char_tokenizer(NULL, 0, NULL);
    add_token(t, 200, "<mask>", 0, 1, 1, 1, 0);
    mt_tokenizer *tok = load_json(t);
    mt_ids got = tok_test_encode(tok, "Hi <mask> there\t<mask>\t<mask>\xe2\x80\x80"), want = {0};
    push_chars(&want, "Hi");
    mt_ids_push(&want, 200);
    push_chars(&want, "there");
    mt_ids_push(&want, 200);
    mt_ids_push(&want, 200);
    expect_ids_and_free(tok, &got, &want, "lstrip/rstrip");
}

/* Longest match first; a normalized token is matched in the normalized text (here after a
 * Replace normalizer turned "x" into "y"), a non-normalized one in the input. */
Test(tokenizer, added_token_longest_and_normalized) {
    json_t *t = char_tokenizer(NULL, 0, NULL);
    add_token(t, 200, "ab", 0, 0, 0, 0, 0);
    add_token(t, 201, "abc", 0, 0, 0, 0, 0);
    add_token(t, 202, "yy", 0, 0, 0, 0, 1);
    json_object_set_new(t, "normalizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", "x",
                                                   "content", "y"));
    mt_tokenizer *tok = load_json(t);
    mt_ids got = tok_test_encode(tok, "abcab xx yy");
    int32_t want[] = {201, 200, ' ' - 32, 202, ' ' - 32, 202};
    expect_ids(&got, want, 6, "longest/normalized");
    mt_ids_free(&got);
    mt_tokenizer_free(tok);
}

/* allow_special = 0 (tokenizers' split_special_tokens): special tokens are text, other added
 * tokens still match. */
Test(tokenizer, special_tokens_as_text) {
    json_t *t = char_tokenizer(NULL, 0, NULL);
    add_token(t, 200, "<s>", 1, 0, 0, 0, 0);
    add_token(t, 201, "[x]", 0, 0, 0, 0, 0);
    mt_tokenizer *tok = load_json(t);
    mt_ids got = {0}, want = {0};
    cr_assert_eq(mt_tokenizer_encode(tok, "<s>[x]", 6, 0, &got), MT_OK);
    push_chars(&want, "<s>");
    mt_ids_push(&want, 201);
    expect_ids(&got, want.ids, want.n, "allow_special=0");
    got.n = 0;
    cr_assert_eq(mt_tokenizer_encode(tok, "<s>[x]", 6, 1, &got), MT_OK);
    int32_t special[] = {200, 201};
    expect_ids(&got, special, 2, "allow_special=1");
    cr_expect(mt_tokenizer_is_special(tok, 200));
    cr_expect(!mt_tokenizer_is_special(tok, 201));
    cr_expect(!mt_tokenizer_is_special(tok, 5));
    mt_ids_free(&got);
    mt_ids_free(&want);
    mt_tokenizer_free(tok);
}

Test(tokenizer, llama3_settings_and_special_tokens) {
    mt_tokenizer *tok = tok_test_load("llama3");
    cr_expect_eq(mt_tokenizer_vocab_size(tok), 128256);
    cr_expect_eq(mt_tokenizer_bos(tok), 128000);
    cr_expect_eq(mt_tokenizer_eos(tok), 128001);
    cr_expect_eq(mt_tokenizer_eot(tok), 128001);
    /* This tokenizer.json's post-processor is ByteLevel, not a template adding BOS. */
    cr_expect_eq(mt_tokenizer_adds_bos(tok), 0);
    cr_expect_not_null(mt_tokenizer_chat_template(tok));
    cr_expect_eq(mt_tokenizer_token_id(tok, "<|eot_id|>"), 128009);
    cr_expect_eq(mt_tokenizer_token_id(tok, "Hello"), 9906);
    cr_expect_eq(mt_tokenizer_token_id(tok, "no such token"), -1);
    cr_expect_str_eq(mt_tokenizer_token(tok, 9906), "Hello");
    cr_expect_null(mt_tokenizer_token(tok, 128256));

    mt_ids ids = tok_test_encode(tok, "<|begin_of_text|>Hello<|eot_id|>");
    int32_t want[] = {128000, 9906, 128009};
    expect_ids(&ids, want, 3, "special tokens");
    char *text = tok_test_decode(tok, ids.ids, ids.n, 1);
    cr_expect_str_eq(text, "Hello");
    free(text);
    mt_ids_free(&ids);

    /* As text, no special id appears and the string comes back. */
    const char *s = "<|begin_of_text|>Hello<|eot_id|>";
    cr_assert_eq(mt_tokenizer_encode(tok, s, strlen(s), 0, &ids), MT_OK);
    for (size_t i = 0; i < ids.n; i++) cr_expect(!mt_tokenizer_is_special(tok, ids.ids[i]));
    text = tok_test_decode(tok, ids.ids, ids.n, 1);
    cr_expect_str_eq(text, s);
    free(text);
    mt_ids_free(&ids);
    mt_tokenizer_free(tok);
}

Test(tokenizer, qwen3_and_mistral_settings) {
    mt_tokenizer *qwen = tok_test_load("qwen3");
    cr_expect_eq(mt_tokenizer_vocab_size(qwen), 151669);
    cr_expect_eq(mt_tokenizer_bos(qwen), -1);
    cr_expect_eq(mt_tokenizer_eos(qwen), mt_tokenizer_token_id(qwen, "<|im_end|>"));
    cr_expect_eq(mt_tokenizer_eot(qwen), 151643);
    cr_expect_eq(mt_tokenizer_adds_bos(qwen), 0);
    cr_assert_not_null(mt_tokenizer_chat_template(qwen));
    cr_expect_not_null(strstr(mt_tokenizer_chat_template(qwen), "<|im_start|>"));
    /* <think> is an added token that is not special: it stays when special tokens are skipped. */
    mt_ids ids = tok_test_encode(qwen, "<|im_start|>user\n<think>hi</think><|im_end|>");
    cr_expect_eq(ids.ids[0], 151644);
    char *text = tok_test_decode(qwen, ids.ids, ids.n, 1);
    cr_expect_str_eq(text, "user\n<think>hi</think>");
    free(text);
    mt_ids_free(&ids);
    mt_tokenizer_free(qwen);

    mt_tokenizer *mistral = tok_test_load("mistral");
    cr_expect_eq(mt_tokenizer_vocab_size(mistral), 32000);
    cr_expect_eq(mt_tokenizer_bos(mistral), 1);
    cr_expect_eq(mt_tokenizer_eos(mistral), 2);
    cr_expect_eq(mt_tokenizer_eot(mistral), 2);
    cr_expect_eq(mt_tokenizer_adds_bos(mistral), 1);
    cr_expect_null(mt_tokenizer_chat_template(mistral));
    mt_tokenizer_free(mistral);
}

/* Byte fallback: bytes that do not make UTF-8 decode to one U+FFFD each, a complete character to
 * itself; an id no token has is passed over. */
Test(tokenizer, decode_byte_fallback_and_unknown_ids) {
    mt_tokenizer *tok = tok_test_load("mistral");
    int32_t e5 = mt_tokenizer_token_id(tok, "<0xE5>"), x8f = mt_tokenizer_token_id(tok, "<0x8F>"),
            xab = mt_tokenizer_token_id(tok, "<0xAB>"), a = mt_tokenizer_token_id(tok, "a");
    int32_t partial[] = {e5, x8f, a}, whole[] = {e5, x8f, xab, 99999, a};
    char *text = tok_test_decode(tok, partial, 3, 0);
    cr_expect_str_eq(text, "\xef\xbf\xbd\xef\xbf\xbd" "a");
    free(text);
    text = tok_test_decode(tok, whole, 5, 0);
    cr_expect_str_eq(text, "\xe5\x8f\xab" "a");
    free(text);
    mt_tokenizer_free(tok);
}

/* Byte-level decoding replaces each maximal invalid sequence with one U+FFFD (Rust's
 * from_utf8_lossy): a lone continuation byte, then a truncated 3-byte sequence. */
Test(tokenizer, decode_byte_level_invalid_bytes) {
    mt_tokenizer *tok = tok_test_load("llama3");
    /* Byte 0x80 is "Ģ" in the byte alphabet, 0xE5 "å", 0x8F "ı". */
    int32_t cont = mt_tokenizer_token_id(tok, "\xc4\xa2"), e5 = mt_tokenizer_token_id(tok, "\xc3\xa5"),
            x8f = mt_tokenizer_token_id(tok, "\xc4\xb1"), hi = mt_tokenizer_token_id(tok, "hi");
    cr_assert(cont >= 0 && e5 >= 0 && x8f >= 0 && hi >= 0);
    int32_t ids[] = {hi, cont, e5, x8f, hi};
    char *text = tok_test_decode(tok, ids, 5, 0);
    cr_expect_str_eq(text, "hi\xef\xbf\xbd\xef\xbf\xbdhi");
    free(text);
    mt_tokenizer_free(tok);
}

/* tokenizers' SplitDelimiterBehavior examples: "the-final--countdown" split on "-". */
Test(tokenizer, split_behaviors) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    static const char *const want[] = {"the|final|countdown", "the|-|final|-|-|countdown",
                                       "the-|final-|-|countdown", "the|-final|-|-countdown",
                                       "the|-|final|--|countdown"};
    const char *s = "the-final--countdown";
    for (int b = 0; b < 5; b++) {
        json_t *spec = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", "-", "behavior",
                                 names[b], "invert", 0);
        json_t *t = char_tokenizer(NULL, 0, NULL);
        json_object_set_new(t, "pre_tokenizer", spec);
        mt_tokenizer *tok = load_json(t);
        const mt_pre_step *step = &tok->pre[0];
        mt_regex_scratch rx = {0};
        mt_str buf = {0};
        mt_spans spans = {0};
        const char *text;
        size_t len;
        cr_assert_eq(mt_pre_apply(step, &rx, s, strlen(s), 1, 0, NULL, &buf, &text, &len, &spans), MT_OK);
        char got[64] = "";
        for (size_t i = 0; i < spans.n; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%.*s", i ? "|" : "",
                     (int)(spans.v[i].end - spans.v[i].start), text + spans.v[i].start);
        cr_expect_str_eq(got, want[b], "behavior %s", names[b]);
        mt_spans_free(&spans);
        mt_str_free(&buf);
        mt_regex_scratch_free(&rx);
        mt_tokenizer_free(tok);
    }
}

/* Metaspace with split: true cuts before each "▁", so the "▁ ▁" merge cannot join the spaces of
 * "Hey   friend!" (tokenizers' example: ▁Hey ▁ ▁ ▁friend!); with split: false it does. */
Test(tokenizer, metaspace_split) {
    static const char *const extra[] = {"\xe2\x96\x81", "\xe2\x96\x81\xe2\x96\x81"};
    for (int split = 0; split < 2; split++) {
        json_t *t = char_tokenizer(extra, 2, json_pack("[s]", "\xe2\x96\x81 \xe2\x96\x81"));
        json_object_set_new(t, "pre_tokenizer", json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement",
                                                          "\xe2\x96\x81", "prepend_scheme", "always", "split", split));
        mt_tokenizer *tok = load_json(t);
        mt_ids got = tok_test_encode(tok, "Hey   friend!"), want = {0};
        mt_ids_push(&want, 95);
        push_chars(&want, "Hey");
        if (split) {
            mt_ids_push(&want, 95);
            mt_ids_push(&want, 95);
            mt_ids_push(&want, 95);
        } else {
            /* "▁▁▁" merges from the left: ▁▁ then ▁. */
            mt_ids_push(&want, 96);
            mt_ids_push(&want, 95);
        }
        push_chars(&want, "friend!");
        expect_ids_and_free(tok, &got, &want, split ? "split" : "no split");
    }
}

/* One tokenizer, several threads at once (the word cache is shared): each gets the ids one thread
 * alone gets. */
typedef struct {
    const mt_tokenizer *tok;
    const char *text;
    size_t len;
    mt_ids ids;
    mt_status st;
} encode_job;

static void *encode_thread(void *arg) {
    encode_job *j = arg;
    for (int k = 0; k < 3 && !j->st; k++) {
        j->ids.n = 0;
        j->st = mt_tokenizer_encode(j->tok, j->text, j->len, 1, &j->ids);
    }
    return NULL;
}

Test(tokenizer, concurrent_encoding) {
    mt_tokenizer *tok = tok_test_load("qwen3");
    size_t len;
    char *text = tok_test_read(tok_test_corpus("prose.txt"), &len);
    mt_ids alone = {0};
    cr_assert_eq(mt_tokenizer_encode(tok, text, len, 1, &alone), MT_OK);
    mt_tokenizer_free(tok);
    tok = tok_test_load("qwen3"); /* a cold cache, filled by the threads together */
    encode_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (encode_job){tok, text, len, {0}, MT_OK};
        pthread_create(&th[i], NULL, encode_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].st, MT_OK);
        expect_ids(&jobs[i].ids, alone.ids, alone.n, "thread");
        mt_ids_free(&jobs[i].ids);
    }
    mt_ids_free(&alone);
    free(text);
    mt_tokenizer_free(tok);
}

/* ---- errors ---- */

Test(tokenizer, invalid_utf8_named_by_offset) {
    mt_tokenizer *tok = tok_test_load("llama3");
    mt_ids ids = {0};
    mt_ids_push(&ids, 7);
    const char bad[] = "caf\xc3\xa9 ok \xe2\x82 then";
    cr_assert_eq(mt_tokenizer_encode(tok, bad, sizeof bad - 1, 1, &ids), MT_ERR_INVALID);
    cr_expect_not_null(strstr(mt_error(), "invalid UTF-8 at byte 9"), "%s", mt_error());
    cr_expect_eq(ids.n, 1, "the ids held before a failed call stay as they were");
    const char overlong[] = "\xc0\xaf", surrogate[] = "a\xed\xa0\x80";
    cr_expect_eq(mt_tokenizer_encode(tok, overlong, 2, 1, &ids), MT_ERR_INVALID);
    cr_expect_eq(mt_tokenizer_encode(tok, surrogate, 4, 1, &ids), MT_ERR_INVALID);
    cr_expect_not_null(strstr(mt_error(), "at byte 1"), "%s", mt_error());
    mt_ids_free(&ids);
    mt_tokenizer_free(tok);
}

/* tokenizer.json with `field` set to `value` (JSON text) in the character tokenizer, loaded; the
 * load must fail with a message holding the file's path and `needle`. */
static void expect_refused(const char *field, const char *value, const char *needle) {
    json_t *t = char_tokenizer(NULL, 0, NULL);
    json_error_t err;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &err);
    cr_assert_not_null(v, "bad test JSON %s: %s", value, err.text);
    if (!strncmp(field, "model.", 6)) json_object_set_new(json_object_get(t, "model"), field + 6, v);
    else json_object_set_new(t, field, v);
    char *text = json_dumps(t, 0);
    json_decref(t);
    mt_tokenizer *tok;
    cr_expect_neq(tok_test_load_json(dir, text, &tok), MT_OK, "%s = %s was accepted", field, value);
    cr_expect_null(tok);
    cr_expect_not_null(strstr(mt_error(), dir), "the message names the file: %s", mt_error());
    cr_expect_not_null(strstr(mt_error(), needle), "the message names '%s': %s", needle, mt_error());
    free(text);
}

Test(tokenizer, unsupported_components_refused) {
    expect_refused("model.type", "\"WordPiece\"", "'WordPiece' is not supported");
    expect_refused("model.type", "\"Unigram\"", "'Unigram' is not supported");
    expect_refused("model.dropout", "0.1", "dropout");
    expect_refused("normalizer", "{\"type\": \"Lowercase\"}", "normalizer 'Lowercase' is not supported");
    expect_refused("normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": "
                                 "\"BertNormalizer\"}]}",
                   "'BertNormalizer' is not supported");
    expect_refused("pre_tokenizer", "{\"type\": \"Whitespace\"}", "pre-tokenizer 'Whitespace' is not supported");
    expect_refused("pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
                                    "{\"type\": \"Digits\"}]}",
                   "'Digits' is not supported");
    expect_refused("pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
                                    "{\"type\": \"Metaspace\", \"replacement\": \"_\"}]}",
                   "ByteLevel pre-tokenizer followed by");
    expect_refused("pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": "
                                    "\"Isolated\"}",
                   "regex");
    expect_refused("decoder", "{\"type\": \"WordPiece\"}", "decoder 'WordPiece' is not supported");
}

Test(tokenizer, malformed_files_refused) {
    expect_refused("model.merges", "[\"a zz\"]", "merges[0]: token \"zz\" is not in the vocabulary");
    expect_refused("model.merges", "[\"a b c\"]", "merges[0]");
    expect_refused("model.vocab", "{\"a\": -1}", "vocab[\"a\"]");
    expect_refused("added_tokens", "[{\"content\": \"x\"}]", "added_tokens[0]: field 'id'");
    expect_refused("pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"first\", "
                                    "\"add_prefix_space\": false}",
                   "add_prefix_space false contradicts prepend_scheme 'first'");
    expect_refused("pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}", "must be one character");
    mt_tokenizer *tok;
    cr_expect_eq(tok_test_load_json(dir, "{\"model\": ", &tok), MT_ERR_INVALID);
    cr_expect_not_null(strstr(mt_error(), "line 1"), "%s", mt_error());
    cr_expect_eq(mt_tokenizer_load("/nonexistent/dir", &tok), MT_ERR_IO);
    cr_expect_not_null(strstr(mt_error(), "/nonexistent/dir"), "%s", mt_error());
    /* A directory without tokenizer.json. */
    char empty[PATH_MAX + 8];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    cr_assert_eq(mkdir(empty, 0755), 0);
    cr_expect_eq(mt_tokenizer_load(empty, &tok), MT_ERR_IO);
    cr_expect_not_null(strstr(mt_error(), "tokenizer.json"), "%s", mt_error());
}
