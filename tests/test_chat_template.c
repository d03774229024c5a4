/* Chat templates rendered in C (tokenizer/chat_template.h) against the text each real template
 * renders, derived by hand (tests/data/chat/cases.json: the trainable parts between ⟦ and ⟧;
 * tests/data/chat/README.md says where each template comes from), the recognition of each
 * family's variants, the templates we refuse, and the chat JSONL lines we refuse. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat_test_files.h"
#include "tokenizer/chat_data.h"
#include "tokenizer/chat_template.h"


/* The template of tests/data/chat/<name>/tokenizer_config.json. */

/* The rendered text with each trainable run between ⟦ and ⟧. */
static char *marked(const mt_chat_rendered *r) {
    size_t cap = 16;
    for (size_t i = 0; i < r->n; i++) cap += r->seg[i].len + 8;
    char *out = calloc(1, cap);
    int open = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->seg[i].trainable != open) strcat(out, open ? "⟧" : "⟦");
        open = r->seg[i].trainable;
        strncat(out, r->seg[i].text, r->seg[i].len);
    }
    if (open) strcat(out, "⟧");
    return out;
}

static mt_status render_line(const mt_chat_template *t, const char *line, char **text) {
    mt_chat_example e;
    MT_TRY(mt_chat_example_parse(line, strlen(line), "case", 1, &e));
    mt_chat_rendered r;
    mt_status st = mt_chat_render(t, e.m, e.n, e.tools, &r);
    if (st == MT_OK) *text = marked(&r);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
    return st;
}

Test(chat_template, renders_each_case_as_its_template_does) {
    json_t *cases = chat_test_json(CHAT_DATA "/cases.json");
    size_t i;
    json_t *c;
    cr_assert_gt(json_array_size(cases), 30);
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *conv = json_object_get(c, "conversation");
        json_t *line = json_is_array(conv) ? json_pack("{s:O}", "messages", conv) : json_incref(conv);
        char *text = json_dumps(line, JSON_COMPACT);
        mt_chat_template t;
        chat_test_template(name, &t);
        char *got = NULL;
        cr_assert_eq(render_line(&t, text, &got), MT_OK, "case %zu (%s): %s", i, name, mt_error());
        const char *want = json_string_value(json_object_get(c, "expected"));
        cr_expect_str_eq(got, want, "case %zu (%s, %s)", i, name, text);
        free(got);
        free(text);
        json_decref(line);
        mt_chat_template_free(&t);
    }
    json_decref(cases);
}

/* ---- what each template is recognised as ---- */

Test(chat_template, recognises_the_variants) {
    mt_chat_template t;
    chat_test_template("llama3", &t);
    cr_expect(t.family == MT_CHAT_LLAMA3 && t.trailing_header && !t.date_header);
    chat_test_template("llama3-gen", &t);
    cr_expect(t.family == MT_CHAT_LLAMA3 && !t.trailing_header && !t.date_header);
    chat_test_template("llama3.2", &t);
    cr_expect(t.date_header);
    cr_expect_str_eq(t.knowledge_date, "December 2023");
    cr_expect_str_eq(t.today_date, "26 Jul 2024");
    chat_test_template("qwen2", &t);
    cr_expect(t.family == MT_CHAT_CHATML && !t.think);
    cr_expect_str_eq(t.default_system, "You are a helpful assistant.");
    mt_chat_template_free(&t);
    chat_test_template("qwen3", &t);
    cr_expect(t.think && !t.think_in_prompt && !t.default_system);
    chat_test_template("llama2", &t);
    cr_expect(t.family == MT_CHAT_INST && t.inst == MT_INST_LLAMA2);
    chat_test_template("mistral-v0.1", &t);
    cr_expect(t.inst == MT_INST_NO_SYSTEM);
    chat_test_template("mistral-v0.2", &t);
    cr_expect(t.inst == MT_INST_SYSTEM_FIRST);
    chat_test_template("mistral-v0.3", &t);
    cr_expect(t.inst == MT_INST_SYSTEM_IF_LAST);
}

/* A template text with one substring replaced (it must occur). */
static char *variant_of(const char *name, const char *from, const char *to) {
    char path[256];
    snprintf(path, sizeof path, CHAT_DATA "/%s/tokenizer_config.json", name);
    json_t *cfg = chat_test_json(path);
    const char *text = json_string_value(json_object_get(cfg, "chat_template"));
    const char *at = strstr(text, from);
    cr_assert_not_null(at, "%s has no '%s'", name, from);
    char *out = malloc(strlen(text) + strlen(to) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    json_decref(cfg);
    return out;
}

static void render_variant(const char *text, const char *bos, const char *eos, const char *line, const char *want) {
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(text, bos, eos, "variant", &t), MT_OK, "%s", mt_error());
    char *got = NULL;
    cr_assert_eq(render_line(&t, line, &got), MT_OK, "%s", mt_error());
    cr_expect_str_eq(got, want);
    free(got);
    mt_chat_template_free(&t);
}

/* Mistral v0.3 as later published: the system prompt before the last user message, even when an
 * answer follows it; a user message equal to the last one gets it too (the template compares
 * messages by value). */
Test(chat_template, mistral_v03_system_before_the_last_user_message) {
    char *text = variant_of("mistral-v0.3", "loop.last and system_message", "(message == user_messages[-1]) and system_message");
    render_variant(text, "<s>", "</s>",
                   "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"q\"}, "
                   "{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"q\"}, "
                   "{\"role\": \"assistant\", \"content\": \" b \"}]}",
                   "<s>[INST] S\n\nq[/INST]⟦ a</s>⟧[INST] S\n\nq[/INST]⟦ b</s>⟧");
    free(text);
}

/* Qwen3 thinking-2507: "<think>\n" is in the generation prompt, so it carries no loss. */
Test(chat_template, qwen3_think_in_the_generation_prompt_is_context) {
    char *text = variant_of("qwen3", "{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}");
    render_variant(text, NULL, "<|im_end|>", "{\"prompt\": \"q\", \"completion\": \"<think>r</think>a\"}",
                   "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n⟦r\n</think>\n\na<|im_end|>⟧\n");
    free(text);
}

/* Python's str.strip() removes Unicode whitespace (U+3000, U+00A0, U+2028), not other characters. */
Test(chat_template, trim_removes_unicode_whitespace_as_python_does) {
    mt_chat_template t;
    chat_test_template("llama3-gen", &t);
    char *got = NULL;
    cr_assert_eq(render_line(&t, "{\"prompt\": \"\\u3000\\u00a0q\\u2028\", \"completion\": \"\\u200b a\\t\"}", &got), MT_OK,
                 "%s", mt_error());
    cr_expect_str_eq(got, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|><|start_header_id|>"
                          "assistant<|end_header_id|>\n\n⟦\u200b a<|eot_id|>⟧");
    free(got);
}

/* ---- what is refused ---- */

static void expect_refused(const char *text, const char *needle) {
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(text, "<s>", "</s>", "models/x/tokenizer_config.json", &t), MT_ERR_INVALID,
                 "accepted: %s", text ? text : "(null)");
    cr_expect(strstr(mt_error(), "models/x/tokenizer_config.json"), "no file named: %s", mt_error());
    cr_expect(strstr(mt_error(), needle), "'%s' not in: %s", needle, mt_error());
}

Test(chat_template, refuses_templates_it_does_not_render) {
    expect_refused(NULL, "no chat_template");
    /* Gemma's turns: none of our families. */
    expect_refused("{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
                   "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}",
                   "none of the markers");
    /* A ChatML template that trims contents: rendering it as Qwen's would be wrong. */
    expect_refused("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>\\n'}}"
                   "{% endfor %}",
                   "trims");
    /* Llama 3 markers without Meta's trim. */
    expect_refused("{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] "
                   "+ '<|eot_id|>' }}{% endfor %}",
                   "trim");
    /* An [INST] template of no variant we know. */
    expect_refused("{% for m in messages %}{{ '[INST]' + m['content'] + '[/INST]' }}{% endfor %}", "variant");
}

static void expect_render_error(const char *name, const char *line, const char *needle) {
    mt_chat_template t;
    chat_test_template(name, &t);
    char *got = NULL;
    cr_expect_eq(render_line(&t, line, &got), MT_ERR_INVALID, "%s rendered %s", name, got ? got : "");
    cr_expect(strstr(mt_error(), needle), "'%s' not in: %s", needle, mt_error());
    free(got);
    mt_chat_template_free(&t);
}

/* Where the template itself raises, so do we. */
Test(chat_template, refuses_what_the_template_raises_on) {
    const char *sys_user = "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"q\"}]}";
    const char *two_users = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"user\", \"content\": \"r\"}]}";
    expect_render_error("mistral-v0.1", sys_user, "no system role");
    expect_render_error("mistral-v0.1", two_users, "alternate");
    expect_render_error("mistral-v0.2", two_users, "alternate");
    expect_render_error("llama2", two_users, "alternate");
    expect_render_error("mistral-v0.3",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                        "\"a\"}, {\"role\": \"system\", \"content\": \"s\"}]}",
                        "only as the first message");
}

static void expect_bad_line(const char *line, const char *needle) {
    mt_chat_example e;
    cr_expect_eq(mt_chat_example_parse(line, strlen(line), "data/chat.jsonl", 7, &e), MT_ERR_INVALID, "accepted %s", line);
    cr_expect(strstr(mt_error(), "data/chat.jsonl:7"), "no file:line in: %s", mt_error());
    cr_expect(strstr(mt_error(), needle), "'%s' not in: %s", needle, mt_error());
}

Test(chat_template, refuses_bad_jsonl_lines_naming_file_and_line) {
    expect_bad_line("{\"messages\": [", "not JSON");
    expect_bad_line("[1, 2]", "not a JSON object");
    expect_bad_line("{\"text\": \"plain\"}", "neither \"messages\" nor \"prompt\"");
    expect_bad_line("{\"prompt\": \"q\"}", "neither");
    expect_bad_line("{\"prompt\": \"q\", \"completion\": 3}", "\"completion\" is not a string");
    expect_bad_line("{\"messages\": []}", "empty");
    expect_bad_line("{\"messages\": {\"role\": \"user\"}}", "not a list");
    expect_bad_line("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "role \"tool\"");
    expect_bad_line("{\"messages\": [{\"role\": \"user\"}]}", "message 1: no \"content\"");
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, \"a\"]}", "message 2 is not an object");
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "not a string");
}
