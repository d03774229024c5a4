/* Chat templates rendered in C (tokenizer/chat_template.h) against the text each real template
 * renders, derived by hand (tests/data/chat/cases.json: the trainable parts between ⟦ and ⟧;
 * tests/data/chat/README.md says where each template comes from) and checked with Jinja2 as
 * transformers renders them, in every line layout (OpenAI messages with tools, prompt/completion,
 * alpaca, ShareGPT); the recognition of the known templates by their Jinja tokens, other templates
 * rendered by the interpreter, and the chat JSONL lines we refuse. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chat_test_files.h"
#include "tokenizer/chat_data.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_lex.h"
#include "tokenizer/tokenizer.h"
#include "test_limits.h"


static mt_status render_line(const mt_chat_template *t, const char *line, char **text) {
    mt_chat_example e;
    MT_TRY(mt_chat_example_parse(line, strlen(line), "case", 1, &e));
    mt_chat_rendered r;
    mt_status st = mt_chat_render(t, e.m, e.n, e.tools, &r);
    if (st == MT_OK) *text = chat_test_marked(&r);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
    return st;
}

Test(chat_template, renders_each_case_as_its_template_does) {
    /* integers stay integers: a tool's "default": 3 is written 3 by tojson, 3.0 is 3.0 */
    json_t *cases = json_load_file(CHAT_DATA "/cases.json", 0, NULL);
    cr_assert_not_null(cases);
    size_t i;
    json_t *c;
    cr_assert_gt(json_array_size(cases), 50);
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *conv = json_object_get(c, "conversation");
        json_t *line = json_is_array(conv) ? json_pack("{s:O}", "messages", conv) : json_incref(conv);
        char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
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

/* The expected texts of cases.json are what Jinja2 renders from the real templates, each layout
 * turned into messages independently of megatrain (tests/data/chat/check_cases_jinja.py). */
Test(chat_template, expected_texts_are_what_jinja_renders, .timeout = MT_TEST_LIMIT(120)) {
    int rc = system("/usr/bin/python3 " CHAT_DATA "/check_cases_jinja.py " CHAT_DATA " > /dev/null");
    cr_assert_neq(WEXITSTATUS(rc), 2, "/usr/bin/python3 cannot import jinja2: install python3-jinja2 (Debian; "
                                      "scripts/install-deps.sh)");
    cr_assert_eq(rc, 0, "cases.json differs from Jinja2's rendering: run %s/check_cases_jinja.py %s", CHAT_DATA, CHAT_DATA);
}

/* megatrain's Jinja lexer gives the tokens Jinja2's own lexer gives, whitespace control included,
 * for every known template and for variants that change its whitespace control and line ends
 * (tests/data/chat/check_lex_jinja.py compares the dumps written here). */
static void dump_tokens(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.jinja", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    mt_jinja_tokens t;
    cr_assert_eq(mt_jinja_lex(text, name, &t), MT_OK, "%s", mt_error());
    snprintf(path, sizeof path, "%s/%s.tokens", dir, name);
    f = fopen(path, "wb");
    for (size_t i = 0; i < t.n; i++) {
        fprintf(f, "%d ", (int)t.t[i].kind);
        for (size_t k = 0; k < t.t[i].len; k++) fprintf(f, "%02x", (unsigned char)t.t[i].value[k]);
        fputc('\n', f);
    }
    fclose(f);
    mt_jinja_tokens_free(&t);
}

static char *replace_all(const char *text, const char *from, const char *to) {
    size_t n = 0, fl = strlen(from), tl = strlen(to);
    for (const char *p = strstr(text, from); p; p = strstr(p + fl, from)) n++;
    char *out = malloc(strlen(text) + n * tl + 1), *o = out;
    for (const char *p = text, *q; ; p = q + fl) {
        q = strstr(p, from);
        size_t k = q ? (size_t)(q - p) : strlen(p);
        memcpy(o, p, k), o += k;
        if (!q) break;
        memcpy(o, to, tl), o += tl;
    }
    *o = '\0';
    return out;
}

Test(chat_template, lexes_templates_as_jinja_does, .timeout = MT_TEST_LIMIT(120)) {
    char dir[] = "/tmp/mt-jinja-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    static const char *const names[] = {"llama2",       "llama3",       "llama3-gen", "llama3.1", "llama3.2",
                                        "mistral-v0.1", "mistral-v0.2", "mistral-v0.3", "qwen2",  "qwen2.5",
                                        "qwen3",        "qwen3-thinking-2507", "gpt-oss"};
    static const char *const changes[][2] = {{"", ""}, {"{%-", "{%"}, {"-%}", "%}"}, {"{{-", "{{"}, {"\n", "\r\n"},
                                             {" %}", " +%}"}, {"{%", "{%+"}, {"}}", "}}\n  "}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[256], *file = NULL;
        snprintf(path, sizeof path, CHAT_DATA "/%s/chat_template.jinja", names[i]);
        if (access(path, F_OK) == 0) cr_assert_eq(mt_chat_template_read(path, &file), MT_OK, "%s", mt_error());
        snprintf(path, sizeof path, CHAT_DATA "/%s/tokenizer_config.json", names[i]);
        json_t *cfg = chat_test_json(path);
        const char *text = file ? file : json_string_value(json_object_get(cfg, "chat_template"));
        for (size_t c = 0; c < sizeof changes / sizeof *changes; c++) {
            char *variant = c ? replace_all(text, changes[c][0], changes[c][1]) : strdup(text);
            char name[64];
            snprintf(name, sizeof name, "%s-%zu", names[i], c);
            dump_tokens(dir, name, variant);
            free(variant);
        }
        free(file);
        json_decref(cfg);
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 " CHAT_DATA "/check_lex_jinja.py %s", dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_neq(WEXITSTATUS(rc), 2, "/usr/bin/python3 cannot import jinja2: install python3-jinja2 (Debian)");
    cr_assert_eq(rc, 0, "the lexer differs from Jinja2's (the lines above say where)");
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
    cr_expect(t.inst == MT_INST_SYSTEM_IF_LAST && t.tools == MT_TOOLS_NONE);
    chat_test_template("llama3.1", &t);
    cr_expect(t.tools == MT_TOOLS_LLAMA31);
    cr_expect_str_eq(t.name, "Llama 3.1");
    chat_test_template("qwen2.5", &t);
    cr_expect(t.tools == MT_TOOLS_QWEN25);
    mt_chat_template_free(&t);
    chat_test_template("qwen3-thinking-2507", &t);
    cr_expect(t.think && t.think_in_prompt && t.tools == MT_TOOLS_QWEN3 && !t.null_content_raises);
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

/* A copy of a known template with changes that do not change what it renders is the same
 * template: whitespace inside tags, quotes, escapes, comments, and a default system prompt or
 * dates of its own (the holes), which the rendering then uses. */
Test(chat_template, accepts_copies_that_render_the_same) {
    char *text = variant_of("qwen2", "{% for message in messages %}", "{#- a comment -#}{%for   message in messages%}");
    char *qwen2 = variant_of("qwen2", "You are a helpful assistant.", "You are a pirate.");
    render_variant(text, NULL, "<|im_end|>", "{\"prompt\": \"q\", \"completion\": \"a\"}",
                   "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>assistant\n⟦a<|im_end|>⟧\n");
    render_variant(qwen2, NULL, "<|im_end|>", "{\"prompt\": \"q\", \"completion\": \"a\"}",
                   "<|im_start|>system\nYou are a pirate.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>assistant\n⟦a<|im_end|>⟧\n");
    free(text);
    free(qwen2);
    char *dated = variant_of("llama3.1", "\"26 Jul 2024\"", "'1 Jan 2025'");
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(dated, "<|begin_of_text|>", "<|eot_id|>", "variant", &t), MT_OK, "%s", mt_error());
    cr_expect_str_eq(t.today_date, "1 Jan 2025");
    cr_expect_str_eq(t.knowledge_date, "December 2023");
    mt_chat_template_free(&t);
    free(dated);
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

Test(chat_template, refuses_no_template) { expect_refused(NULL, "no chat_template"); }

/* A template megatrain does not know is rendered by the Jinja interpreter as written (tests/test_jinja.c
 * checks it against Jinja2), the answers found from its renders. */
static void render_other(const char *text, const char *line, const char *want) {
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(text, "<bos>", "<eos>", "models/x/tokenizer_config.json", &t), MT_OK, "%s",
                 mt_error());
    cr_expect_eq(t.family, MT_CHAT_JINJA);
    char *got = NULL;
    cr_assert_eq(render_line(&t, line, &got), MT_OK, "%s", mt_error());
    cr_expect_str_eq(got, want);
    free(got);
    mt_chat_template_free(&t);
}

static const char TWO_TURNS[] = "{\"messages\": [{\"role\": \"user\", \"content\": \" q \"}, {\"role\": \"assistant\", "
                                "\"content\": \"a \"}, {\"role\": \"user\", \"content\": \"r\"}, {\"role\": \"assistant\", "
                                "\"content\": \"b\"}]}";

Test(chat_template, renders_templates_it_does_not_know_through_the_interpreter) {
    /* Gemma's turns (no generation prompt in this copy: the answer starts after the last user turn) */
    render_other("{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
                 "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}",
                 TWO_TURNS, "<bos><start_of_turn>user\nq<end_of_turn>\n⟦<start_of_turn>assistant\na<end_of_turn>⟧\n"
                            "<start_of_turn>user\nr<end_of_turn>\n⟦<start_of_turn>assistant\nb<end_of_turn>⟧\n");
    /* a ChatML template that trims contents */
    render_other("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>\\n'}}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                 TWO_TURNS, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n⟦a<|im_end|>⟧\n<|im_start|>user\n"
                            "r<|im_end|>\n<|im_start|>assistant\n⟦b<|im_end|>⟧\n");
    /* ChatML without the newline after <|im_end|>, and with the roles upper-cased */
    char *text = variant_of("qwen2", "'<|im_end|>' + '\n'}}", "'<|im_end|>'}}");
    char *upper = variant_of("qwen2", "'<|im_start|>' + message['role'] + '", "'<|im_start|>' + message['role'] | upper + '");
    render_other(text, "{\"prompt\": \"q\", \"completion\": \"a\"}",
                 "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>"
                 "<|im_start|>assistant\n⟦a<|im_end|>⟧");
    free(text);
    /* ... but upper-cased roles open an assistant turn otherwise than its generation prompt does
     * ("<|im_start|>assistant"): which text is the answer cannot be told, and the conversation is refused */
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(upper, "<bos>", "<eos>", "models/x/tokenizer_config.json", &t), MT_OK);
    char *got = NULL;
    cr_expect_eq(render_line(&t, "{\"prompt\": \"q\", \"completion\": \"a\"}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "models/x/tokenizer_config.json: the chat template's renders are not prefixes of one "
                                 "another at message 2"), "%s", mt_error());
    free(got);
    mt_chat_template_free(&t);
    free(upper);
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
    /* tools, tool calls and tool results where a template has no place for them: transformers
     * would drop them (issue 28, class 3) */
    const char *calls = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                        "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {}}}]}]}";
    expect_render_error("qwen2", calls, "message 2 has tool_calls, which the Qwen2 template would drop");
    expect_render_error("llama3-gen", "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"tools\": []}",
                        "the Llama 3 template has no tool section");
    expect_render_error("mistral-v0.3", "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                        "\"tool\", \"content\": \"r\"}]}", "message 2 is a tool result");
    /* what the tool templates themselves raise on */
    expect_render_error("qwen3", calls, "message 2: content is null, which the Qwen3 template cannot render");
    expect_render_error("llama3.1",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                        "\"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {}}}, "
                        "{\"function\": {\"name\": \"g\", \"arguments\": {}}}]}]}",
                        "exactly one tool call a turn");
    expect_render_error("llama3.1",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                        "\"content\": \"\", \"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}]}",
                        "a tool call without \"function\"");
    expect_render_error("llama3.1", "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}], \"tools\": []}",
                        "puts the tools in the first user message, and there is none");
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
    expect_bad_line("{\"text\": \"plain\"}", "in none of the chat layouts");
    expect_bad_line("{\"prompt\": \"q\"}", "has \"prompt\" but no \"completion\" field: the prompt/completion layout");
    expect_bad_line("{\"prompt\": \"q\", \"completion\": \"a\", \"conversations\": []}",
                    "two chat layouts, \"conversations\" (ShareGPT) and \"prompt\" (prompt/completion)");
    expect_bad_line("{\"prompt\": \"q\", \"completion\": 3}", "\"completion\" is not a string");
    expect_bad_line("{\"messages\": []}", "empty");
    expect_bad_line("{\"messages\": {\"role\": \"user\"}}", "not a list");
    expect_bad_line("{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}", "role \"function\"");
    expect_bad_line("{\"messages\": [{\"role\": \"user\"}]}", "message 1: no \"content\"");
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, \"a\"]}", "message 2 is not an object");
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "not a string");
    /* tools and tool calls */
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"tool_calls\": []}]}",
                    "message 1: tool_calls on a user message");
    expect_bad_line("{\"messages\": [{\"role\": \"assistant\", \"content\": null}]}", "message 1: \"content\" is not a string");
    expect_bad_line("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": {}}]}",
                    "\"tool_calls\" is not a list");
    expect_bad_line("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": "
                    "{\"arguments\": {}}}]}]}", "message 1: tool call 1: the function's \"name\" is missing");
    expect_bad_line("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": "
                    "{\"name\": \"f\", \"arguments\": 3}}]}]}", "\"arguments\" is an integer");
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"tools\": {}}", "\"tools\" is not a list");
    expect_bad_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"tools\": [1]}", "tool 1 of \"tools\" is not an object");
    /* alpaca */
    expect_bad_line("{\"instruction\": \"q\", \"output\": 1}", "\"output\" is not a string");
    expect_bad_line("{\"instruction\": \"q\", \"input\": [], \"output\": \"a\"}", "\"input\" is not a string");
    expect_bad_line("{\"instruction\": \"q\", \"output\": \"a\", \"history\": [[\"q0\"]]}",
                    "\"history\" item 1 is not a pair of strings");
    expect_bad_line("{\"instruction\": \"q\", \"output\": \"a\", \"history\": \"q0\"}",
                    "\"history\" is not a list of [instruction, answer] pairs");
    /* ShareGPT */
    expect_bad_line("{\"conversations\": []}", "\"conversations\" is empty");
    expect_bad_line("{\"conversations\": [{\"from\": \"bot\", \"value\": \"x\"}]}",
                    "conversations[0]: \"from\" is \"bot\", not human, gpt");
    expect_bad_line("{\"conversations\": [{\"from\": \"human\"}]}", "conversations[0]: no \"value\"");
    expect_bad_line("{\"conversations\": [{\"from\": \"function_call\", \"value\": \"{oops\"}]}",
                    "conversations[0]: the function_call's value is not JSON text");
    expect_bad_line("{\"conversations\": [{\"from\": \"function_call\", \"value\": \"{\\\"name\\\": 1}\"}]}",
                    "conversations[0]: call 1: the function's \"name\" is missing or not a string");
    expect_bad_line("{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}], \"tools\": \"[\"}",
                    "\"tools\" is not JSON text");
}
