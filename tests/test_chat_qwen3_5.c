/* Qwen3.5's chat template (tests/data/chat/qwen3.5: the hub's chat_template.jinja of Qwen3.5 and
 * Qwen3.6, its thinking blocks, XML tool calls and tool results): each conversation of
 * tests/data/tokenizers/chat/qwen3_5.jsonl, rendered as `tokenize` and `train` render it, gives the
 * text and the answers' bytes that an independent implementation gives
 * (tests/data/tokenizers/expected/qwen3_5-chat.json: @huggingface/jinja renders; written by
 * tests/reference/tokenizers/make_chat_spans.mjs, which says which bytes are an answer; Jinja2
 * renders the same texts). The
 * thinking of the last question's answers is shown and trained; earlier answers drop theirs, as
 * the template does, and train on what they show. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_test_files.h"
#include "tokenizer/chat_data.h"
#include "tokenizer_files.h"

#define DATA "tests/data/tokenizers"

/* The rendered text, its segments joined, and its trainable runs as [start, end) byte ranges. */
static char *text_and_runs(const mt_chat_rendered *r, json_t *runs) {
    size_t len = 0;
    for (size_t i = 0; i < r->n; i++) len += r->seg[i].len;
    char *text = malloc(len + 1);
    size_t at = 0, open = 0;
    for (size_t i = 0; i < r->n; at += r->seg[i++].len) {
        memcpy(text + at, r->seg[i].text, r->seg[i].len);
        int starts = r->seg[i].trainable && (i == 0 || !r->seg[i - 1].trainable);
        int ends = r->seg[i].trainable && (i + 1 == r->n || !r->seg[i + 1].trainable);
        if (starts) open = at;
        if (ends) json_array_append_new(runs, json_pack("[I,I]", (json_int_t)open, (json_int_t)(at + r->seg[i].len)));
    }
    text[len] = '\0';
    return text;
}

static void check_conversation(const mt_chat_template *t, const char *line, size_t index, const json_t *want) {
    mt_chat_example e;
    cr_assert_eq(mt_chat_example_parse(line, strlen(line), "qwen3_5.jsonl", index + 1, &e), MT_OK, "%s", mt_error());
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render(t, e.m, e.n, e.tools, &r), MT_OK, "conversation %zu: %s", index, mt_error());
    json_t *runs = json_array();
    char *text = text_and_runs(&r, runs);
    cr_expect_str_eq(text, json_string_value(json_object_get(want, "text")), "conversation %zu: the text", index);
    const json_t *spans = json_object_get(want, "spans");
    char *got = json_dumps(runs, JSON_COMPACT), *expected = json_dumps(spans, JSON_COMPACT);
    cr_expect(json_equal(runs, (json_t *)spans), "conversation %zu: answers at %s, the reference's at %s", index, got,
              expected);
    cr_expect_gt(json_array_size(runs), 0, "conversation %zu: no answer", index);
    free(got);
    free(expected);
    free(text);
    json_decref(runs);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
}

Test(chat_qwen3_5, texts_and_answers_are_the_references) {
    mt_chat_template t;
    chat_test_template("qwen3.5", &t);
    cr_expect_eq(t.family, MT_CHAT_JINJA, "Qwen3.5's template renders through the interpreter");
    json_error_t err;
    json_t *expected = json_load_file(DATA "/expected/qwen3_5-chat.json", 0, &err);
    cr_assert(json_is_array(expected), "%s", err.text);
    size_t len;
    char *lines = tok_test_read(DATA "/chat/qwen3_5.jsonl", &len), *save = NULL;
    size_t n = 0;
    for (char *line = strtok_r(lines, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
        cr_assert_lt(n, json_array_size(expected), "more conversations than references");
        check_conversation(&t, line, n, json_array_get(expected, n));
    }
    cr_expect_eq(n, json_array_size(expected));
    cr_expect_geq(n, 6);
    free(lines);
    json_decref(expected);
    mt_chat_template_free(&t);
}

/* Jinja2, which transformers renders with, gives the references' texts too
 * (tests/data/chat/render_file_jinja.py, python3-jinja2). */
Test(chat_qwen3_5, jinja2_renders_the_reference_texts) {
    char out[] = "/tmp/mt-qwen3_5-XXXXXX";
    int fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/data/chat/render_file_jinja.py tests/data/chat/qwen3.5/"
             "chat_template.jinja '' '<|im_end|>' " DATA "/chat/qwen3_5.jsonl > %s", out);
    int rc = system(cmd);
    cr_assert_neq(WEXITSTATUS(rc), 2, "/usr/bin/python3 cannot import jinja2: install python3-jinja2");
    cr_assert_eq(rc, 0, "%s failed", cmd);
    json_error_t err;
    json_t *renders = json_load_file(out, 0, &err);
    json_t *expected = json_load_file(DATA "/expected/qwen3_5-chat.json", 0, &err);
    unlink(out);
    cr_assert(json_is_array(renders) && json_is_array(expected), "%s", err.text);
    cr_assert_eq(json_array_size(renders), json_array_size(expected));
    for (size_t i = 0; i < json_array_size(renders); i++) {
        const char *want = json_string_value(json_object_get(json_array_get(expected, i), "text"));
        cr_expect_str_eq(json_string_value(json_array_get(renders, i)), want, "conversation %zu", i);
    }
    json_decref(renders);
    json_decref(expected);
}

/* The generation prompt opens the thinking block, as the template's does (enable_thinking is not
 * set), and what the template raises is reported with its message. */
Test(chat_qwen3_5, prompts_with_think_and_reports_what_the_template_raises) {
    mt_chat_template t;
    chat_test_template("qwen3.5", &t);
    const char *line = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";
    mt_chat_example e;
    cr_assert_eq(mt_chat_example_parse(line, strlen(line), "p.jsonl", 1, &e), MT_OK, "%s", mt_error());
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render_prompt(&t, e.m, e.n, &r), MT_OK, "%s", mt_error());
    json_t *runs = json_array();
    char *text = text_and_runs(&r, runs);
    cr_expect_str_eq(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    cr_expect_eq(json_array_size(runs), 0, "a prompt is context");
    free(text);
    json_decref(runs);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);

    line = "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, "
           "{\"role\": \"assistant\", \"content\": \"a\"}]}";
    cr_assert_eq(mt_chat_example_parse(line, strlen(line), "p.jsonl", 2, &e), MT_OK, "%s", mt_error());
    cr_expect_eq(mt_chat_render(&t, e.m, e.n, e.tools, &r), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "No user query found in messages."), "%s", mt_error());
    mt_chat_example_free(&e);
    mt_chat_template_free(&t);
}
