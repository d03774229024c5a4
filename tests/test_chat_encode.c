/* Chat conversations as ids and loss masks (tokenizer/chat_encode.h) with the real Llama 3, Qwen3,
 * Llama 2/Mistral and gpt-oss (o200k_harmony) tokenizers, for every conversation of
 * tests/data/chat/cases.json:
 *   - the ids are those of the whole rendered text encoded at once (what apply_chat_template gives);
 *   - the mask is the one defined by bytes: a token carries loss when it holds a byte of a
 *     trainable part, found here by encoding the whole text's prefixes (no chunks);
 *   - each trainable run ends with the template's end-of-turn token (harmony's <|end|>, <|call|> or
 *     <|return|>), and (byte-level tokenizers)
 *     holds exactly the ids of the answer's text. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "chat_test_files.h"
#include "tokenizer/chat_data.h"
#include "tokenizer/chat_encode.h"
#include "tokenizer_files.h"
#include "test_limits.h"

/* The tokenizer each template's model uses (Qwen2/2.5 share Qwen3's vocabulary but <think>). */
static const char *tokenizer_for(const char *tmpl) {
    if (!strncmp(tmpl, "llama3", 6)) return "llama3";
    if (!strncmp(tmpl, "qwen", 4)) return "qwen3";
    if (!strcmp(tmpl, "gpt-oss")) return "gpt-oss";
    return "mistral";
}



/* The trainable runs of the rendered text as byte ranges; returns the count. */
static size_t trainable_runs(const mt_chat_rendered *r, size_t (*runs)[2], size_t cap) {
    size_t n = 0, at = 0;
    for (size_t i = 0; i < r->n; at += r->seg[i++].len) {
        if (!r->seg[i].trainable) continue;
        if (n > 0 && runs[n - 1][1] == at) runs[n - 1][1] += r->seg[i].len;
        else if (n < cap) runs[n][0] = at, runs[n][1] = at + r->seg[i].len, n++;
    }
    return n;
}

static size_t common_prefix(const mt_ids *a, const mt_ids *b) {
    size_t k = 0;
    while (k < a->n && k < b->n && a->ids[k] == b->ids[k]) k++;
    return k;
}

/* The mask by definition: encode text[0, a) and text[0, b) and compare with the whole text's ids. */
static void mask_by_prefixes(const mt_tokenizer *tok, const char *text, const mt_ids *all, size_t (*runs)[2],
                             size_t n_runs, uint8_t *want) {
    memset(want, 0, all->n);
    for (size_t j = 0; j < n_runs; j++) {
        mt_ids p = {0};
        cr_assert_eq(mt_tokenizer_encode(tok, text, runs[j][0], 1, &p), MT_OK, "%s", mt_error());
        size_t first = common_prefix(&p, all);
        mt_ids_free(&p);
        cr_assert_eq(mt_tokenizer_encode(tok, text, runs[j][1], 1, &p), MT_OK, "%s", mt_error());
        size_t end = common_prefix(&p, all);
        if (end < p.n) end++; /* the token that straddles the end holds answer bytes */
        mt_ids_free(&p);
        for (size_t k = first; k < end && k < all->n; k++) want[k] = 1;
    }
}

/* Whether id ends an assistant turn: the template's end-of-turn token (harmony: the end of each
 * of its messages, <|end|> after an analysis or an earlier answer, <|call|>, <|return|>). */
static int ends_turn(const mt_tokenizer *tok, const mt_chat_template *t, int32_t id) {
    const char *name = t->family == MT_CHAT_LLAMA3 ? "<|eot_id|>" : t->family == MT_CHAT_CHATML ? "<|im_end|>" : t->eos;
    cr_assert_geq(mt_tokenizer_token_id(tok, name), 0);
    if (t->harmony)
        return id == mt_tokenizer_token_id(tok, "<|end|>") || id == mt_tokenizer_token_id(tok, "<|call|>") ||
               id == mt_tokenizer_token_id(tok, "<|return|>");
    return id == mt_tokenizer_token_id(tok, name);
}

/* The tokenizers, each loaded once. */
static mt_tokenizer *loaded[4];

static mt_tokenizer *tokenizer_of(const char *name) {
    static const char *names[4] = {"llama3", "qwen3", "mistral", "gpt-oss"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(tokenizer_for(name), names[i])) return loaded[i] ? loaded[i] : (loaded[i] = tok_test_load(names[i]));
    return NULL;
}

static void check_case(size_t index, const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "template"));
    json_t *conv = json_object_get(c, "conversation");
    json_t *line = json_is_array(conv) ? json_pack("{s:O}", "messages", conv) : json_incref(conv);
    char *json = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
    const mt_tokenizer *tok = tokenizer_of(name);
    mt_chat_template t;
    chat_test_template(name, &t);
    mt_chat_example e;
    cr_assert_eq(mt_chat_example_parse(json, strlen(json), "case", index, &e), MT_OK, "%s", mt_error());
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render(&t, e.m, e.n, e.tools, &r), MT_OK, "%s", mt_error());
    mt_ids ids = {0}, all = {0};
    mt_mask mask = {0};
    cr_assert_eq(mt_chat_encode(tok, &r, &ids, &mask), MT_OK, "case %zu (%s): %s", index, name, mt_error());
    cr_assert_eq(ids.n, mask.n);

    size_t len = 0;
    for (size_t i = 0; i < r.n; i++) len += r.seg[i].len;
    char *text = malloc(len + 1);
    for (size_t i = 0, at = 0; i < r.n; at += r.seg[i++].len) memcpy(text + at, r.seg[i].text, r.seg[i].len);
    cr_assert_eq(mt_tokenizer_encode(tok, text, len, 1, &all), MT_OK, "%s", mt_error());
    cr_assert_eq(ids.n, all.n, "case %zu (%s): %zu ids, the whole text encodes to %zu", index, name, ids.n, all.n);
    for (size_t k = 0; k < ids.n; k++)
        cr_assert_eq(ids.ids[k], all.ids[k], "case %zu (%s): id %zu is %d, the whole text's %d", index, name, k,
                     ids.ids[k], all.ids[k]);

    size_t runs[16][2], n_runs = trainable_runs(&r, runs, 16);
    uint8_t *want = malloc(all.n + 1);
    mask_by_prefixes(tok, text, &all, runs, n_runs, want);
    for (size_t k = 0; k < ids.n; k++)
        cr_assert_eq(mask.v[k], want[k], "case %zu (%s): token %zu (id %d) mask %d, by prefixes %d", index, name, k,
                     ids.ids[k], mask.v[k], want[k]);

    /* Runs of the mask: as many as the answers, each ending with the end-of-turn token. */
    size_t seen = 0;
    for (size_t k = 0; k < mask.n; k++) {
        if (!mask.v[k] || (k + 1 < mask.n && mask.v[k + 1])) continue;
        cr_expect(ends_turn(tok, &t, ids.ids[k]), "case %zu (%s): a trainable run ends with id %d, not the end of a turn",
                  index, name, ids.ids[k]);
        seen++;
    }
    cr_expect_eq(seen, n_runs, "case %zu (%s): %zu trainable runs in the ids, %zu answers", index, name, seen, n_runs);

    /* Byte-level tokenizers: an answer that starts after a special token or a newline holds exactly
     * the ids of its own text. */
    for (size_t j = 0; j < n_runs && t.family != MT_CHAT_INST; j++) {
        const char *a = text + runs[j][0];
        if (strchr(" \n", *a)) continue; /* shares a token with the markup before it */
        mt_ids own = {0};
        cr_assert_eq(mt_tokenizer_encode(tok, a, runs[j][1] - runs[j][0], 1, &own), MT_OK, "%s", mt_error());
        size_t k = 0;
        while (k < mask.n && !(mask.v[k] && (k == 0 || !mask.v[k - 1]) && j-- == 0)) k++;
        for (size_t i = 0; i < own.n; i++)
            cr_expect_eq(ids.ids[k + i], own.ids[i], "case %zu (%s): answer id %zu", index, name, i);
        mt_ids_free(&own);
        break;
    }
    free(want);
    free(text);
    mt_ids_free(&ids);
    mt_ids_free(&all);
    mt_mask_free(&mask);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
    mt_chat_template_free(&t);
    free(json);
    json_decref(line);
}

Test(chat_encode, ids_and_masks_of_every_case_with_real_tokenizers, .timeout = MT_TEST_LIMIT(120)) {
    json_t *cases = json_load_file(CHAT_DATA "/cases.json", 0, NULL); /* integers stay integers */
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) check_case(i, c);
    json_decref(cases);
    for (int k = 0; k < 4; k++) mt_tokenizer_free(loaded[k]);
}

/* A ChatML answer that starts with a newline: "assistant\n" + "\n..." is one "\n\n" token in the
 * whole text, which carries loss (it holds the answer's first byte), and the ids are still the
 * whole text's. */
Test(chat_encode, an_answer_sharing_a_token_with_the_markup_carries_loss) {
    mt_tokenizer *tok = tok_test_load("qwen3");
    mt_chat_template t;
    chat_test_template("qwen2", &t);
    mt_chat_message m[2] = {{.role = MT_ROLE_USER, .content = "q", .len = 1}, {.role = MT_ROLE_ASSISTANT, .content = "\nA", .len = 2}};
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render(&t, m, 2, NULL, &r), MT_OK, "%s", mt_error());
    mt_ids ids = {0};
    mt_mask mask = {0};
    cr_assert_eq(mt_chat_encode(tok, &r, &ids, &mask), MT_OK, "%s", mt_error());
    int32_t nn = mt_tokenizer_token_id(tok, "ĊĊ"), start = mt_tokenizer_token_id(tok, "<|im_start|>");
    cr_assert_geq(nn, 0);
    size_t k = ids.n;
    while (k-- > 0 && ids.ids[k] != start) {}
    /* <|im_start|> assistant \n\n A <|im_end|> \n */
    cr_assert_eq(ids.ids[k + 2], nn, "the answer's newline is not merged into one token with the markup's");
    cr_expect_eq(mask.v[k + 1], 0);
    cr_expect_eq(mask.v[k + 2], 1, "the token that holds the answer's first byte carries no loss");
    cr_expect_eq(mask.v[ids.n - 1], 0, "the newline after <|im_end|> carries loss");
    mt_ids_free(&ids);
    mt_mask_free(&mask);
    mt_chat_rendered_free(&r);
    mt_chat_template_free(&t);
    mt_tokenizer_free(tok);
}

/* A conversation that renders to nothing (Llama 2 chat with only a system message) gives no ids. */
Test(chat_encode, a_conversation_that_renders_to_nothing_gives_no_ids) {
    mt_tokenizer *tok = tok_test_load("mistral");
    mt_chat_template t;
    chat_test_template("llama2", &t);
    mt_chat_message m[1] = {{.role = MT_ROLE_SYSTEM, .content = "s", .len = 1}};
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render(&t, m, 1, NULL, &r), MT_OK, "%s", mt_error());
    mt_ids ids = {0};
    mt_mask mask = {0};
    cr_assert_eq(mt_chat_encode(tok, &r, &ids, &mask), MT_OK, "%s", mt_error());
    cr_expect_eq(ids.n, 0);
    cr_expect_eq(mask.n, 0);
    mt_ids_free(&ids);
    mt_mask_free(&mask);
    mt_chat_rendered_free(&r);
    mt_chat_template_free(&t);
    mt_tokenizer_free(tok);
}
