/* The Jinja interpreter (tokenizer/jinja.h) against Jinja2 as transformers sets it up
 * (tests/data/jinja/render_jinja.py), byte for byte: every known template (tests/data/chat), Gemma
 * 3's, gpt-oss's, a harmony-style template and custom ones with macros, namespaces and generation
 * tags, on the conversations of tests/data/jinja/conversations.json (system, developer or none,
 * tools with nested parameter types and tool calls, multi-turn, reasoning_content and thinking,
 * gpt-oss's reasoning_effort, model_identity and builtin_tools, unicode, with and without the
 * generation prompt); the answers it marks against the known templates' renderers; templates refused at load naming the line and column;
 * what a template raises refusing the conversation. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chat_test_files.h"
#include "tokenizer/chat_data.h"
#include "tokenizer/chat_encode.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "test_limits.h"
#include "tokenizer_files.h"

#define JINJA_DATA "tests/data/jinja"
#define DATE MT_CHAT_TEMPLATE_DATE

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* The chat_template of a tokenizer_config.json, or a .jinja file's text. */
static char *template_text(const char *path) {
    if (strstr(path, ".jinja")) return read_text(path);
    json_t *cfg = chat_test_json(path);
    char *text = strdup(json_string_value(json_object_get(cfg, "chat_template")));
    json_decref(cfg);
    return text;
}

/* Jinja2's renders of `template` for each variable set of conversations.json. */
static json_t *jinja2_renders(const char *template) {
    char file[] = "/tmp/mt-jinja-XXXXXX", out[] = "/tmp/mt-jinja-out-XXXXXX", cmd[512];
    int fd = mkstemp(file), fo = mkstemp(out);
    cr_assert(fd >= 0 && fo >= 0);
    cr_assert_eq(write(fd, template, strlen(template)), (ssize_t)strlen(template));
    close(fd);
    close(fo);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 " JINJA_DATA "/render_jinja.py %s " JINJA_DATA "/conversations.json "
             DATE " '{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}' > %s", file, out);
    int rc = system(cmd);
    cr_assert_neq(WEXITSTATUS(rc), 2, "/usr/bin/python3 cannot import jinja2: install python3-jinja2");
    cr_assert_eq(rc, 0, "%s failed", cmd);
    json_t *renders = json_load_file(out, 0, NULL);
    unlink(file);
    unlink(out);
    cr_assert(json_is_array(renders));
    return renders;
}

static const char *const TEMPLATES[] = {
    CHAT_DATA "/llama3/tokenizer_config.json",   CHAT_DATA "/llama3-gen/tokenizer_config.json",
    CHAT_DATA "/llama3.1/tokenizer_config.json", CHAT_DATA "/llama3.2/tokenizer_config.json",
    CHAT_DATA "/qwen2/tokenizer_config.json",    CHAT_DATA "/qwen2.5/tokenizer_config.json",
    CHAT_DATA "/qwen3/tokenizer_config.json",    CHAT_DATA "/qwen3-thinking-2507/tokenizer_config.json",
    CHAT_DATA "/llama2/tokenizer_config.json",   CHAT_DATA "/mistral-v0.1/tokenizer_config.json",
    CHAT_DATA "/mistral-v0.2/tokenizer_config.json", CHAT_DATA "/mistral-v0.3/tokenizer_config.json",
    "tests/data/tokenizers/gemma3/tokenizer_config.json", JINJA_DATA "/harmony.jinja", JINJA_DATA "/custom.jinja",
    JINJA_DATA "/generation.jinja", JINJA_DATA "/tojson.jinja", CHAT_DATA "/gpt-oss/chat_template.jinja"};

Test(jinja, renders_every_template_as_jinja2_does, .timeout = MT_TEST_LIMIT(120)) {
    json_t *convs = json_load_file(JINJA_DATA "/conversations.json", 0, NULL); /* integers stay integers */
    cr_assert_not_null(convs);
    size_t same = 0, raised = 0;
    for (size_t k = 0; k < sizeof TEMPLATES / sizeof *TEMPLATES; k++) {
        char *text = template_text(TEMPLATES[k]);
        json_t *want = jinja2_renders(text);
        mt_jinja *t;
        cr_assert_eq(mt_jinja_compile(text, TEMPLATES[k], &t), MT_OK, "%s", mt_error());
        cr_assert_eq(json_array_size(want), json_array_size(convs));
        for (size_t i = 0; i < json_array_size(convs); i++) {
            json_t *vars = json_deep_copy(json_array_get(convs, i));
            json_object_set_new(vars, "bos_token", json_string("<s>"));
            json_object_set_new(vars, "eos_token", json_string("</s>"));
            mt_jinja_output out;
            mt_status st = mt_jinja_render(t, vars, DATE, &out);
            const json_t *w = json_array_get(want, i);
            if (json_is_string(w)) {
                cr_assert_eq(st, MT_OK, "%s, set %zu: %s", TEMPLATES[k], i, mt_error());
                cr_expect(out.len == json_string_length(w) && !memcmp(out.text, json_string_value(w), out.len),
                          "%s, set %zu:\n--- Jinja2\n%s\n--- megatrain\n%s", TEMPLATES[k], i, json_string_value(w), out.text);
                same++;
            } else {
                cr_expect_neq(st, MT_OK, "%s, set %zu: Jinja2 raised %s; megatrain rendered", TEMPLATES[k], i,
                              json_string_value(json_object_get(w, "error")));
                raised++;
            }
            mt_jinja_output_free(&out);
            json_decref(vars);
        }
        mt_jinja_free(t);
        json_decref(want);
        free(text);
    }
    cr_expect_gt(same, 300, "only %zu renders compared", same);
    cr_expect_gt(raised, 10, "only %zu raises compared", raised);
    json_decref(convs);
}

/* The text of tests/data/chat/<name>'s template: its chat_template.jinja where it has one, else
 * tokenizer_config.json's; *cfg the latter. */
static char *known_text(const char *name, json_t **cfg) {
    char path[256];
    snprintf(path, sizeof path, CHAT_DATA "/%s/tokenizer_config.json", name);
    *cfg = chat_test_json(path);
    snprintf(path, sizeof path, CHAT_DATA "/%s/chat_template.jinja", name);
    return access(path, F_OK) == 0 ? read_text(path) : strdup(json_string_value(json_object_get(*cfg, "chat_template")));
}

/* A known template read as any other: compiled by the interpreter, its answers found from its
 * renders. */
static void as_jinja(const char *name, mt_chat_template *t) {
    json_t *cfg;
    char *text = known_text(name, &cfg);
    *t = (mt_chat_template){.family = MT_CHAT_JINJA, .name = "test", .today = DATE};
    snprintf(t->bos, sizeof t->bos, "%s", json_string_value(json_object_get(cfg, "bos_token")) ?: "");
    snprintf(t->eos, sizeof t->eos, "%s", json_string_value(json_object_get(cfg, "eos_token")) ?: "");
    cr_assert_eq(mt_jinja_compile(text, name, &t->jinja), MT_OK, "%s", mt_error());
    free(text);
    json_decref(cfg);
}

static int marks_removed_equal(const char *a, const char *b) {
    for (;;) {
        while (!strncmp(a, "⟦", 3) || !strncmp(a, "⟧", 3)) a += 3;
        while (!strncmp(b, "⟦", 3) || !strncmp(b, "⟧", 3)) b += 3;
        if (*a != *b) return 0;
        if (!*a) return 1;
        a++, b++;
    }
}

/* The real tokenizer of each template's model, each loaded once. */
static mt_tokenizer *loaded[4];

static mt_tokenizer *tokenizer_for(const char *tmpl) {
    int k = !strncmp(tmpl, "llama3", 6) ? 0 : !strncmp(tmpl, "qwen", 4) ? 1 : !strcmp(tmpl, "gpt-oss") ? 3 : 2;
    static const char *const names[] = {"llama3", "qwen3", "mistral", "gpt-oss"};
    return loaded[k] ? loaded[k] : (loaded[k] = tok_test_load(names[k]));
}

/* The interpreter renders every case of cases.json to the known renderer's text; the answers it
 * finds from the renders (the conversation before each answer with the generation prompt, then
 * with the answer, less the whitespace after its end-of-turn token) are the known renderer's
 * wherever the renders are prefixes of one another, and so are the ids and masks with the real
 * tokenizers (today's, issue 43's regression suite); so are they where the whole text shows an
 * answer otherwise than the render through it (Qwen3 drops the reasoning of answers before the last
 * question), found from the conversation without it. Where the renders fit neither (Qwen3's two
 * answers in a row, the first rendered with its <think> block while it is the last; Mistral v0.3
 * moves the system prompt to the last question; Llama 3's first template ends every text with an
 * assistant header; gpt-oss ends the last answer with <|return|>, earlier ones with <|end|>, and
 * shows the reasoning of the last only), the conversation is refused naming the message: why those
 * templates keep their C renderer (gpt-oss: its answers found from its harmony messages). */
Test(jinja, finds_the_answers_the_known_renderers_mark, .timeout = MT_TEST_LIMIT(60)) {
    json_t *cases = json_load_file(CHAT_DATA "/cases.json", 0, NULL); /* integers stay integers */
    cr_assert_not_null(cases);
    size_t i, agreed = 0, refused = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *conv = json_object_get(c, "conversation");
        json_t *line = json_is_array(conv) ? json_pack("{s:O}", "messages", conv) : json_incref(conv);
        char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
        mt_chat_template known, interp;
        chat_test_template(name, &known);
        as_jinja(name, &interp);
        mt_chat_example e;
        cr_assert_eq(mt_chat_example_parse(text, strlen(text), "case", i, &e), MT_OK, "%s", mt_error());
        mt_chat_rendered a, b;
        mt_status sa = mt_chat_render(&known, e.m, e.n, e.tools, &a), sb = mt_chat_render(&interp, e.m, e.n, e.tools, &b);
        if (sa == MT_OK && sb == MT_OK) {
            char *ma = chat_test_marked(&a), *mb = chat_test_marked(&b);
            cr_expect_str_eq(mb, ma, "case %zu (%s)", i, name);
            agreed++;
            free(ma);
            free(mb);
            /* and so the same ids and masks with the model's real tokenizer */
            mt_tokenizer *tok = tokenizer_for(name);
            mt_ids ia = {0}, ib = {0};
            mt_mask ka = {0}, kb = {0};
            cr_assert_eq(mt_chat_encode(tok, &a, &ia, &ka), MT_OK, "%s", mt_error());
            cr_assert_eq(mt_chat_encode(tok, &b, &ib, &kb), MT_OK, "%s", mt_error());
            cr_assert_eq(ia.n, ib.n, "case %zu (%s)", i, name);
            cr_expect(!memcmp(ia.ids, ib.ids, ia.n * sizeof *ia.ids) && !memcmp(ka.v, kb.v, ka.n),
                      "case %zu (%s): other ids or masks", i, name);
            mt_ids_free(&ia);
            mt_ids_free(&ib);
            mt_mask_free(&ka);
            mt_mask_free(&kb);
        } else if (sa == MT_OK) {
            cr_expect(strstr(mt_error(), "are not prefixes of one another"), "case %zu (%s): %s", i, name,
                      mt_error());
            cr_expect(!strcmp(name, "qwen3") || !strcmp(name, "qwen3-thinking-2507") || !strcmp(name, "mistral-v0.3") ||
                      !strcmp(name, "llama3") || !strcmp(name, "gpt-oss"), "case %zu (%s) refused: %s", i, name,
                      mt_error());
            refused++;
        }
        if (sa == MT_OK) mt_chat_rendered_free(&a);
        if (sb == MT_OK) mt_chat_rendered_free(&b);
        mt_chat_example_free(&e);
        mt_chat_template_free(&known);
        mt_chat_template_free(&interp);
        free(text);
        json_decref(line);
    }
    cr_expect_gt(agreed, 40, "%zu cases agreed, %zu refused", agreed, refused);
    json_decref(cases);
    for (int k = 0; k < 4; k++) mt_tokenizer_free(loaded[k]);
}

/* The whole text still matches where the masks cannot be found: rendered with the interpreter
 * directly, every case is the known renderer's text. */
Test(jinja, renders_every_case_as_the_known_renderers_do) {
    json_t *cases = json_load_file(CHAT_DATA "/cases.json", 0, NULL); /* integers stay integers */
    cr_assert_not_null(cases);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *want = json_string_value(json_object_get(c, "expected"));
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *cfg, *conv = json_object_get(c, "conversation");
        char *source = known_text(name, &cfg);
        json_t *line = json_is_array(conv) ? json_pack("{s:O}", "messages", conv) : json_incref(conv);
        char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
        mt_chat_example e;
        cr_assert_eq(mt_chat_example_parse(text, strlen(text), "case", i, &e), MT_OK, "%s", mt_error());
        json_t *msgs = json_array();
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
        for (size_t k = 0; k < e.n; k++) {
            json_t *m = json_pack("{s:s,s:o}", "role", roles[e.m[k].role], "content",
                                  e.m[k].content ? json_stringn(e.m[k].content, e.m[k].len) : json_null());
            if (e.m[k].reasoning) json_object_set_new(m, "reasoning_content", json_string(e.m[k].reasoning));
            if (e.m[k].thinking) json_object_set_new(m, "thinking", json_string(e.m[k].thinking));
            if (e.m[k].tool_calls) json_object_set(m, "tool_calls", (json_t *)e.m[k].tool_calls);
            json_array_append_new(msgs, m);
        }
        json_t *vars = json_pack("{s:o,s:O,s:O,s:O,s:b}", "messages", msgs, "tools", e.tools ? (json_t *)e.tools : json_null(),
                                 "bos_token", json_object_get(cfg, "bos_token") ?: json_string(""), "eos_token",
                                 json_object_get(cfg, "eos_token") ?: json_string(""), "add_generation_prompt", 0);
        mt_jinja *t;
        cr_assert_eq(mt_jinja_compile(source, name, &t), MT_OK);
        mt_jinja_output out;
        cr_assert_eq(mt_jinja_render(t, vars, DATE, &out), MT_OK, "case %zu: %s", i, mt_error());
        cr_expect(marks_removed_equal(out.text, want), "case %zu (%s):\n%s\n---\n%s", i, name, out.text, want);
        mt_jinja_output_free(&out);
        mt_jinja_free(t);
        json_decref(vars);
        mt_chat_example_free(&e);
        free(text);
        free(source);
        json_decref(line);
        json_decref(cfg);
    }
    json_decref(cases);
}

static char *render_marked(const char *template, const char *line) {
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(template, "<s>", "</s>", "t.jinja", &t), MT_OK, "%s", mt_error());
    cr_assert_eq(t.family, MT_CHAT_JINJA);
    mt_chat_example e;
    cr_assert_eq(mt_chat_example_parse(line, strlen(line), "case", 1, &e), MT_OK, "%s", mt_error());
    mt_chat_rendered r;
    char *got = NULL;
    if (mt_chat_render(&t, e.m, e.n, e.tools, &r) == MT_OK) {
        got = chat_test_marked(&r);
        mt_chat_rendered_free(&r);
    }
    mt_chat_example_free(&e);
    mt_chat_template_free(&t);
    return got;
}

Test(jinja, generation_tags_mark_the_answers) {
    char *tpl = read_text(JINJA_DATA "/generation.jinja");
    char *got = render_marked(tpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                                   "\"content\": \"a\", \"reasoning_content\": \"r\"}, {\"role\": \"user\", \"content\": "
                                   "\"q2\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}");
    cr_assert_not_null(got, "%s", mt_error());
    cr_expect_str_eq(got, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n⟦<think>\nr\n</think>\n\na<|im_end|>⟧\n"
                          "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n⟦b<|im_end|>⟧\n");
    free(got);
    free(tpl);
}

Test(jinja, prefix_renders_mark_a_custom_templates_answers) {
    const char *tpl = "{% for m in messages %}{{ '### ' + m.role|capitalize + ':\\n' + m.content|trim + '\\n' }}"
                      "{% if m.role == 'assistant' %}{{ eos_token + '\\n' }}{% endif %}{% endfor %}"
                      "{% if add_generation_prompt %}{{ '### Assistant:\\n' }}{% endif %}";
    char *got = render_marked(tpl, "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                                   "\"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \" a \"}]}");
    cr_assert_not_null(got, "%s", mt_error());
    cr_expect_str_eq(got, "### System:\ns\n### User:\nq\n### Assistant:\n⟦a\n</s>⟧\n");
    free(got);
    /* a template that shows an answer differently once a later message follows: the answer is what
     * the conversation without it lacks, after the prompt's "assistant: " */
    const char *conversation = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                               "\"content\": \"a\"}, {\"role\": \"user\", \"content\": \"q2\"}]}";
    const char *moving = "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if loop.last %} (last){% endif %}"
                         "{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";
    got = render_marked(moving, conversation);
    cr_expect_str_eq(got, "user: q\nassistant: ⟦a⟧\nuser: q2 (last)\n", "%s", got ? "" : mt_error());
    free(got);
    /* ... and one that numbers the turns too: without the answer the later turns' numbers change */
    const char *numbered = "{% for m in messages %}{{ loop.index }} {{ m.role }}: {{ m.content }}{% if loop.last %} "
                           "(last){% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ messages|length + 1 }}"
                           " assistant: {% endif %}";
    got = render_marked(numbered, conversation);
    cr_expect_null(got, "rendered %s", got);
    cr_expect(strstr(mt_error(), "t.jinja: the chat template's renders are not prefixes of one another at message 2 "
                                 "(an assistant's)"), "%s", mt_error());
    cr_expect(strstr(mt_error(), "{% generation %}"), "%s", mt_error());
    free(got);
}

static void expect_refused(const char *template, const char *needle) {
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(template, "<s>", "</s>", "models/x/chat_template.jinja", &t), MT_ERR_INVALID,
                 "compiled: %s", template);
    cr_expect(strstr(mt_error(), "models/x/chat_template.jinja: chat"), "no file: %s", mt_error());
    cr_expect(strstr(mt_error(), needle), "'%s' not in: %s", needle, mt_error());
}

Test(jinja, refuses_bad_templates_at_load_naming_line_and_column) {
    expect_refused("{% if x %}a", "line 1, column 12: the template ends where `{% endif %}` was expected");
    expect_refused("hello\n  {{ x | shout }}", "line 2, column 10: no filter named `shout`");
    expect_refused("{% if x is loud %}{% endif %}", "line 1, column 12: no test named `loud`");
    expect_refused("{% include 'other.jinja' %}", "line 1, column 4: unknown tag `include`");
    expect_refused("{% endfor %}", "line 1, column 4: `{% endfor %}` where no such tag");
    expect_refused("{% for m in messages %}{% endif %}", "`{% endif %}` where `{% endfor %}` was expected");
    expect_refused("\n\n{{ (1 + ) }}", "line 3, column 9: unexpected `)`");
    expect_refused("{% for in messages %}", "line 1, column 8: expected a name, found `in`");
    expect_refused("{{ messages[0 }}", "a {{ tag opened at line 1, column 1 is never closed");
    expect_refused("{{ messages[0) }}", "line 1, column 14: expected `]`, found `)`");
    expect_refused("{% set x = %}", "expected an expression");
    /* the lexer's own: a tag or string never closed */
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse("{{ 'abc }}", NULL, NULL, "a.jinja", &t), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "a.jinja: chat_template: a string opened at line 1, column 4 is never closed"), "%s",
              mt_error());
}

static mt_status render_text(const char *template, const char *vars_json, char **out) {
    mt_jinja *t;
    MT_TRY(mt_jinja_compile(template, "t.jinja", &t));
    json_t *vars = json_loads(vars_json, 0, NULL);
    mt_jinja_output o;
    mt_status st = mt_jinja_render(t, vars, DATE, &o);
    *out = st == MT_OK ? strdup(o.text) : NULL;
    if (st == MT_OK) mt_jinja_output_free(&o);
    json_decref(vars);
    mt_jinja_free(t);
    return st;
}

Test(jinja, refuses_what_a_template_raises_naming_the_message) {
    char *got;
    cr_assert_eq(render_text("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role, "
                             "message ' ~ loop.index) }}{% endif %}{% endfor %}",
                             "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"system\"}]}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "t.jinja: chat template line 1, column 54: the template refuses the conversation: no "
                                 "system role, message 2"), "%s", mt_error());
    cr_assert_eq(render_text("{{ messages[0].content.name }}", "{\"messages\": []}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "line 1, column 15: an undefined value has no attribute `content`"), "%s", mt_error());
    cr_assert_eq(render_text("{{ 1 + 'a' }}", "{}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "unsupported operand types for +: int and str"), "%s", mt_error());
    cr_assert_eq(render_text("{{ 'a,b'.split('') }}", "{}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "split with an empty separator"), "%s", mt_error());
    /* an attribute= that is not a name is refused by every filter that takes one */
    const char *bad_attribute[] = {"{{ messages | join(',', attribute=1) }}", "{{ messages | sum(attribute=[]) }}",
                                   "{{ messages | sort(attribute=2) }}", "{{ messages | map(attribute=none) }}",
                                   "{{ messages | selectattr(3) | list }}"};
    for (size_t i = 0; i < sizeof bad_attribute / sizeof *bad_attribute; i++) {
        cr_assert_eq(render_text(bad_attribute[i], "{\"messages\": [{\"a\": 1}]}", &got), MT_ERR_INVALID, "%s",
                     bad_attribute[i]);
        cr_expect(strstr(mt_error(), "needs a string, not a"), "%s: %s", bad_attribute[i], mt_error());
    }
}

/* strftime_now is the fixed date (Llama 3.2's header, gpt-oss's), not the day of tokenizing. */
Test(jinja, strftime_now_is_the_fixed_date) {
    char *got;
    cr_assert_eq(render_text("{{ strftime_now('%d %b %Y') }} {{ strftime_now is defined }}", "{}", &got), MT_OK, "%s",
                 mt_error());
    cr_expect_str_eq(got, "26 Jul 2024 True");
    free(got);
}

Test(jinja, stops_a_template_that_runs_away, .timeout = MT_TEST_LIMIT(30)) {
    char *got;
    cr_assert_eq(render_text("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "macro calls nested more than 100 deep"), "%s", mt_error());
    cr_assert_eq(render_text("{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}", "{}", &got),
                 MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "the template runs too long"), "%s", mt_error());
    cr_assert_eq(render_text("{% set ns = namespace(a=1) %}{% set ns.self = [ns] %}", "{}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "a namespace set into itself"), "%s", mt_error());
    /* only a namespace() takes attributes: the conversation's own values are never changed */
    cr_assert_eq(render_text("{% set m = messages[0] %}{% set m.content = 'x' %}", "{\"messages\": [{}]}", &got),
                 MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "`m.content = ...` on a dict, not a namespace()"), "%s", mt_error());
}

/* sample --chat's prompt with a template megatrain does not know: the conversation with the
 * generation prompt, all context; an answer first is an answer from the start of the text. */
Test(jinja, renders_a_prompt_and_an_answer_first) {
    const char *tpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>\n{% endfor %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}";
    mt_chat_template t;
    cr_assert_eq(mt_chat_template_parse(tpl, NULL, "</s>", "t.jinja", &t), MT_OK, "%s", mt_error());
    mt_chat_message user = {.role = MT_ROLE_USER, .content = "Hi", .len = 2};
    mt_chat_rendered r;
    cr_assert_eq(mt_chat_render_prompt(&t, &user, 1, &r), MT_OK, "%s", mt_error());
    char *got = chat_test_marked(&r);
    cr_expect_str_eq(got, "<user>Hi</s>\n<assistant>");
    free(got);
    mt_chat_rendered_free(&r);
    mt_chat_template_free(&t);
    got = render_marked(tpl, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"I start.\"}, {\"role\": \"user\", "
                             "\"content\": \"ok\"}]}");
    cr_assert_not_null(got, "%s", mt_error());
    cr_expect_str_eq(got, "⟦<assistant>I start.</s>⟧\n<user>ok</s>\n");
    free(got);
}

/* select and reject with no test keep (drop) the truthy items, as Jinja's do. */
Test(jinja, select_and_reject_without_a_test_go_by_truth) {
    char *got;
    cr_assert_eq(render_text("{{ [1, 0, 'a', ''] | reject | list }} {{ [1, 0, 'a', ''] | select | list }}", "{}",
                             &got), MT_OK, "%s", mt_error());
    cr_expect_str_eq(got, "[0, ''] [1, 'a']");
    free(got);
}

/* However deep a template nests (unary operators, parentheses, tags, a chain of operators that
 * parses as deep as it is long), it is refused with a message, never by running out of stack. */
Test(jinja, refuses_templates_nested_past_its_bounds) {
    enum { DEEP = 20000 };
    char *text = malloc(4 * DEEP + 64), *got;
    cr_assert(text);
    strcpy(text, "{{ ");
    memset(text + 3, '-', DEEP);
    strcpy(text + 3 + DEEP, "1 }}");
    expect_refused(text, "expressions and tags nested more than 500 deep");
    size_t at = (size_t)sprintf(text, "{{ ");
    for (int i = 0; i < DEEP; i++) text[at++] = '(';
    text[at++] = '1';
    for (int i = 0; i < DEEP; i++) text[at++] = ')';
    strcpy(text + at, " }}");
    expect_refused(text, "nested more than 500 deep");
    at = (size_t)sprintf(text, "{{ 1");
    for (int i = 0; i < 2000; i++) at += (size_t)sprintf(text + at, " + 1");
    strcpy(text + at, " }}");
    cr_assert_eq(render_text(text, "{}", &got), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "the template nests more than 1000 expressions and statements deep"), "%s",
              mt_error());
    /* within the bounds, as deep as real templates go and far beyond */
    at = (size_t)sprintf(text, "{{ ");
    for (int i = 0; i < 100; i++) text[at++] = '(';
    at += (size_t)sprintf(text + at, "-1");
    for (int i = 0; i < 100; i++) text[at++] = ')';
    strcpy(text + at, " }}");
    cr_assert_eq(render_text(text, "{}", &got), MT_OK, "%s", mt_error());
    cr_expect_str_eq(got, "-1");
    free(got);
    free(text);
}
