#include "tokenizer/chat_template.h"

#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/chat_jinja.h"
#include "tokenizer/chat_known.h"
#include "tokenizer/jinja.h"
#include "tokenizer/py_json.h"

/* ---- reading a template ---- */

/* A template megatrain does not know, or one it knows that the interpreter renders (gpt-oss's):
 * compiled by the Jinja interpreter. */
static mt_status compile(const char *text, const char *source, mt_chat_template *t) {
    t->family = MT_CHAT_JINJA;
    if (!(t->source = strdup(source))) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    if (!t->name) t->name = t->source;
    return mt_jinja_compile(text, source, &t->jinja);
}

mt_status mt_chat_template_parse(const char *text, const char *bos, const char *eos, const char *source,
                                 mt_chat_template *t) {
    *t = (mt_chat_template){0};
    if (!text)
        return mt_fail(MT_ERR_INVALID, "%s: no chat_template (nor chat_template.jinja beside it): chat data needs a chat "
                       "template; give one with --chat-template FILE", source);
    if ((bos && strlen(bos) >= sizeof t->bos) || (eos && strlen(eos) >= sizeof t->eos))
        return mt_fail(MT_ERR_INVALID, "%s: bos_token or eos_token is longer than %zu bytes", source, sizeof t->bos - 1);
    snprintf(t->bos, sizeof t->bos, "%s", bos ? bos : "");
    snprintf(t->eos, sizeof t->eos, "%s", eos ? eos : "");
    mt_chat_holes *holes = calloc(1, sizeof *holes);
    if (!holes) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    int known = 0;
    mt_status st = mt_chat_known_match(text, source, t, holes, &known);
    snprintf(t->today, sizeof t->today, "%s", MT_CHAT_TEMPLATE_DATE);
    if (st == MT_OK && (!known || t->family == MT_CHAT_JINJA)) st = compile(text, source, t);
    if (st == MT_OK && t->family == MT_CHAT_INST && !eos)
        st = mt_fail(MT_ERR_INVALID, "%s: chat_template is %s's, but the tokenizer has no eos_token to end answers with",
                     source, t->name);
    if (st == MT_OK && holes->has_default_system && !(t->default_system = strdup(holes->default_system)))
        st = mt_fail(MT_ERR_NOMEM, "cannot hold a default system prompt");
    if (st == MT_OK) {
        memcpy(t->knowledge_date, holes->knowledge_date, sizeof t->knowledge_date);
        memcpy(t->today_date, holes->today_date, sizeof t->today_date);
    }
    free(holes);
    if (st != MT_OK) mt_chat_template_free(t);
    return st;
}

void mt_chat_template_free(mt_chat_template *t) {
    free(t->default_system);
    mt_jinja_free(t->jinja);
    free(t->source);
    *t = (mt_chat_template){0};
}

const char *mt_chat_turn_end(const mt_chat_template *t) {
    return t->family == MT_CHAT_LLAMA3 ? "<|eot_id|>" : t->family == MT_CHAT_CHATML ? "<|im_end|>" : t->eos;
}

/* ---- text helpers with Python's semantics ---- */

typedef struct {
    const char *p;
    size_t n;
} span;

static span whole(const mt_chat_message *m) { return (span){m->content, m->len}; }

/* The code point that starts at s[i] (s is valid UTF-8) and its length in bytes. */
static uint32_t decode(const char *s, size_t i, size_t *len) {
    const unsigned char *u = (const unsigned char *)s + i;
    if (u[0] < 0x80) return *len = 1, u[0];
    if (u[0] < 0xE0) return *len = 2, (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    if (u[0] < 0xF0) return *len = 3, (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    return *len = 4, (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 |
                     (u[3] & 0x3F);
}

/* Python's str.isspace(), which str.strip() and Jinja's trim remove. */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* str.strip() (all Unicode whitespace) or, with `newlines_only`, str.strip('\n'); left and right
 * choose the ends. */
static span strip(span s, int left, int right, int newlines_only) {
    size_t len;
    while (left && s.n) {
        uint32_t c = decode(s.p, 0, &len);
        if (newlines_only ? c != '\n' : !py_space(c)) break;
        s.p += len;
        s.n -= len;
    }
    while (right && s.n) {
        size_t start = s.n - 1;
        while (start > 0 && ((unsigned char)s.p[start] & 0xC0) == 0x80) start--;
        uint32_t c = decode(s.p, start, &len);
        if (newlines_only ? c != '\n' : !py_space(c)) break;
        s.n = start;
    }
    return s;
}

static span trim(span s) { return strip(s, 1, 1, 0); }

/* memmem for spans: the first (or, with `last`, the final) occurrence of needle, or NULL. */
static const char *find(span s, const char *needle, int last) {
    size_t k = strlen(needle);
    const char *found = NULL;
    for (const char *p = s.p; p + k <= s.p + s.n; p++)
        if (!memcmp(p, needle, k)) {
            found = p;
            if (!last) break;
        }
    return found;
}

/* ---- rendering ---- */

static mt_status emit(mt_chat_rendered *r, const char *text, size_t len, int trainable, int special) {
    if (len == 0) return MT_OK;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        mt_chat_segment *grown = realloc(r->seg, cap * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation");
        r->seg = grown;
        r->cap = cap;
    }
    r->seg[r->n++] = (mt_chat_segment){text, len, (unsigned char)trainable, (unsigned char)special, 0};
    return MT_OK;
}

#define TEXT(r, s, trainable) emit(r, s, strlen(s), trainable, 0)
#define SPECIAL(r, s, trainable) emit(r, s, strlen(s), trainable, 1)
#define SPAN(r, s, trainable) emit(r, (s).p, (s).n, trainable, 0)

static const char *role_name(mt_chat_role role) {
    return role == MT_ROLE_SYSTEM ? "system" : role == MT_ROLE_USER ? "user" : role == MT_ROLE_ASSISTANT ? "assistant"
                                                                                                        : "tool";
}

/* Keeps a string the segments point into until mt_chat_rendered_free. */
static mt_status own(mt_chat_rendered *r, char *s) {
    char **grown = s ? realloc(r->owned, (r->n_owned + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(s);
        return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation");
    }
    r->owned = grown;
    r->owned[r->n_owned++] = s;
    return MT_OK;
}

/* A JSON value as the template's tojson filter writes it (indent < 0: none). */
static mt_status tojson(mt_chat_rendered *r, const json_t *v, int indent, int trainable) {
    char *text;
    size_t len;
    MT_TRY(mt_py_json_dumps(v, indent, &text, &len));
    MT_TRY(own(r, text));
    return emit(r, text, len, trainable, 0);
}

/* Message i's content, which this place of the template needs as a string. */
static mt_status text_of(const mt_chat_template *t, const mt_chat_message *m, size_t i, span *out) {
    if (!m[i].content)
        return mt_fail(MT_ERR_INVALID, "message %zu: content is null, which the %s template cannot render here "
                       "(it needs a string)", i + 1, t->name);
    *out = whole(&m[i]);
    return MT_OK;
}

/* The tools and tool messages a template without a tool section would drop, refused. */
static mt_status check_tools(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools) {
    if (t->tools != MT_TOOLS_NONE) return MT_OK;
    if (tools)
        return mt_fail(MT_ERR_INVALID, "\"tools\": the %s template has no tool section that megatrain renders, so "
                       "the tools would be dropped", t->name);
    for (size_t i = 0; i < n; i++) {
        if (m[i].role == MT_ROLE_TOOL)
            return mt_fail(MT_ERR_INVALID, "message %zu is a tool result, which the %s template has no place for",
                           i + 1, t->name);
        if (m[i].tool_calls)
            return mt_fail(MT_ERR_INVALID, "message %zu has tool_calls, which the %s template would drop", i + 1,
                           t->name);
    }
    return MT_OK;
}

/* A tool call's name and arguments: those of its "function" where it has one (chat_data checked
 * the shapes), else its own; Llama 3.1's template reads only the function. */
static mt_status call_parts(const mt_chat_template *t, const json_t *call, size_t i, span *name, const json_t **args) {
    const json_t *fn = json_object_get(call, "function");
    if (!fn && t->tools == MT_TOOLS_LLAMA31)
        return mt_fail(MT_ERR_INVALID, "message %zu: a tool call without \"function\", which the %s template reads",
                       i + 1, t->name);
    if (!fn) fn = call;
    const json_t *nm = json_object_get(fn, "name");
    *name = (span){json_string_value(nm), json_string_length(nm)};
    *args = json_object_get(fn, "arguments");
    return MT_OK;
}

/* Llama 3: <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|>. */
static mt_status header(mt_chat_rendered *r, const char *role) {
    MT_TRY(SPECIAL(r, "<|start_header_id|>", 0));
    MT_TRY(TEXT(r, role, 0));
    MT_TRY(SPECIAL(r, "<|end_header_id|>", 0));
    return TEXT(r, "\n\n", 0);
}

static const char LLAMA31_TOOLS[] =
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    "best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n";

/* Llama 3.1+ with tools: they go into the first message after the system message, as the template
 * does by default (tools_in_user_message). */
static mt_status llama31_tools(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                               size_t *first, mt_chat_rendered *r) {
    if (*first == n)
        return mt_fail(MT_ERR_INVALID, "the %s template puts the tools in the first user message, and there is none",
                       t->name);
    span content = {0};
    MT_TRY(text_of(t, m, *first, &content));
    MT_TRY(header(r, "user"));
    MT_TRY(TEXT(r, LLAMA31_TOOLS, 0));
    for (size_t k = 0; k < json_array_size(tools); k++) {
        MT_TRY(tojson(r, json_array_get(tools, k), 4, 0));
        MT_TRY(TEXT(r, "\n\n", 0));
    }
    MT_TRY(SPAN(r, trim(content), 0));
    ++*first;
    return SPECIAL(r, "<|eot_id|>", 0);
}

/* A Llama 3.1 tool call: {"name": "...", "parameters": arguments|tojson}, one a turn. */
static mt_status llama31_call(const mt_chat_template *t, const mt_chat_message *m, size_t i, mt_chat_rendered *r) {
    if (!json_is_array(m[i].tool_calls) || json_array_size(m[i].tool_calls) != 1)
        return mt_fail(MT_ERR_INVALID, "message %zu: the %s template takes exactly one tool call a turn (\"This model "
                       "only supports single tool-calls at once!\")", i + 1, t->name);
    span name;
    const json_t *args;
    MT_TRY(call_parts(t, json_array_get(m[i].tool_calls, 0), i, &name, &args));
    MT_TRY(header(r, "assistant"));
    MT_TRY(TEXT(r, "{\"name\": \"", 1));
    MT_TRY(SPAN(r, name, 1));
    MT_TRY(TEXT(r, "\", \"parameters\": ", 1));
    MT_TRY(tojson(r, args, -1, 1));
    MT_TRY(TEXT(r, "}", 1));
    return SPECIAL(r, "<|eot_id|>", 1);
}

static mt_status render_llama3(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                               mt_chat_rendered *r) {
    MT_TRY(SPECIAL(r, t->bos, 0));
    size_t first = 0;
    if (t->date_header) {
        /* Llama 3.1+: the system header always comes first, with the conversation's system
         * message (trimmed) after the dates. */
        MT_TRY(header(r, "system"));
        if (tools) MT_TRY(TEXT(r, "Environment: ipython\n", 0));
        MT_TRY(TEXT(r, "Cutting Knowledge Date: ", 0));
        MT_TRY(TEXT(r, t->knowledge_date, 0));
        MT_TRY(TEXT(r, "\nToday Date: ", 0));
        MT_TRY(TEXT(r, t->today_date, 0));
        MT_TRY(TEXT(r, "\n\n", 0));
        if (m[0].role == MT_ROLE_SYSTEM) {
            span system = {0};
            MT_TRY(text_of(t, m, 0, &system));
            MT_TRY(SPAN(r, trim(system), 0));
            first = 1;
        }
        MT_TRY(SPECIAL(r, "<|eot_id|>", 0));
        if (tools) MT_TRY(llama31_tools(t, m, n, tools, &first, r));
    }
    for (size_t i = first; i < n; i++) {
        if (m[i].role == MT_ROLE_TOOL) {
            /* the template writes a tool result through tojson: a string in quotes */
            MT_TRY(header(r, "ipython"));
            json_t *content = json_stringn_nocheck(m[i].content, m[i].len);
            mt_status st = content ? tojson(r, content, -1, 0) : mt_fail(MT_ERR_NOMEM, "cannot hold a tool result");
            json_decref(content);
            MT_TRY(st);
            MT_TRY(SPECIAL(r, "<|eot_id|>", 0));
            continue;
        }
        if (m[i].tool_calls) {
            MT_TRY(llama31_call(t, m, i, r));
            continue;
        }
        int answer = m[i].role == MT_ROLE_ASSISTANT;
        span content = {0};
        MT_TRY(text_of(t, m, i, &content));
        MT_TRY(header(r, role_name(m[i].role)));
        MT_TRY(SPAN(r, trim(content), answer));
        MT_TRY(SPECIAL(r, "<|eot_id|>", answer));
    }
    return t->trailing_header ? header(r, "assistant") : MT_OK;
}

/* ChatML: <|im_start|>role\n content <|im_end|>\n. */
static mt_status chatml_turn(mt_chat_rendered *r, const char *role, span content) {
    MT_TRY(SPECIAL(r, "<|im_start|>", 0));
    MT_TRY(TEXT(r, role, 0));
    MT_TRY(TEXT(r, "\n", 0));
    MT_TRY(SPAN(r, content, 0));
    MT_TRY(SPECIAL(r, "<|im_end|>", 0));
    return TEXT(r, "\n", 0);
}

/* Qwen3: the index of the last user message (the last message when there is none). */
static size_t last_query(const mt_chat_message *m, size_t n) {
    for (size_t i = n; i-- > 0;) {
        span c = whole(&m[i]);
        int tool_response = c.n >= 31 && !memcmp(c.p, "<tool_response>", 15) &&
                            !memcmp(c.p + c.n - 16, "</tool_response>", 16);
        if (m[i].role == MT_ROLE_USER && !tool_response) return i;
    }
    return n - 1;
}

/* An assistant turn under Qwen3's rules: the reasoning comes from reasoning_content or from a
 * <think>...</think> block in the content; turns after the last user message show it in a <think>
 * block (the last turn always, with an empty one where there is none), earlier turns drop it.
 * *shown is the content written after it (tool calls follow it). */
static mt_status qwen3_answer(const mt_chat_template *t, const mt_chat_message *m, size_t i, size_t n, size_t query,
                              mt_chat_rendered *r, span *shown) {
    span content = whole(&m[i]), reasoning = {"", 0};
    if (m[i].reasoning) {
        reasoning = (span){m[i].reasoning, m[i].reasoning_len};
    } else {
        const char *close = find(content, "</think>", 0);
        if (close) {
            span before = {content.p, (size_t)(close - content.p)};
            before = strip(before, 0, 1, 1);
            const char *open = find(before, "<think>", 1);
            if (open) before = (span){open + 7, (size_t)(before.p + before.n - open - 7)};
            reasoning = strip(before, 1, 0, 1);
            const char *last = find(content, "</think>", 1) + 8;
            content = strip((span){last, (size_t)(content.p + content.n - last)}, 1, 0, 1);
        }
    }
    if (i > query && (i == n - 1 || reasoning.n)) {
        MT_TRY(TEXT(r, "<think>\n", !t->think_in_prompt));
        MT_TRY(SPAN(r, strip(reasoning, 1, 1, 1), 1));
        MT_TRY(TEXT(r, "\n</think>\n\n", 1));
        content = strip(content, 1, 0, 1);
    }
    *shown = content;
    return SPAN(r, content, 1);
}

static const char QWEN_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

/* Qwen's system turn with the tools: the system message (Qwen2.5: or the default one), then the
 * tools one a line. */
static mt_status qwen_tools(const mt_chat_template *t, const mt_chat_message *m, const json_t *tools, size_t *first,
                            mt_chat_rendered *r) {
    MT_TRY(SPECIAL(r, "<|im_start|>", 0));
    MT_TRY(TEXT(r, "system\n", 0));
    if (m[0].role == MT_ROLE_SYSTEM) {
        span system = {0};
        MT_TRY(text_of(t, m, 0, &system));
        MT_TRY(SPAN(r, system, 0));
        *first = 1;
    } else if (t->default_system) {
        MT_TRY(TEXT(r, t->default_system, 0));
    }
    if (*first || t->tools == MT_TOOLS_QWEN25) MT_TRY(TEXT(r, "\n\n", 0));
    MT_TRY(TEXT(r, QWEN_TOOLS_HEAD, 0));
    for (size_t k = 0; k < json_array_size(tools); k++) {
        MT_TRY(TEXT(r, "\n", 0));
        MT_TRY(tojson(r, json_array_get(tools, k), -1, 0));
    }
    MT_TRY(TEXT(r, QWEN_TOOLS_TAIL, 0));
    MT_TRY(SPECIAL(r, "<|im_end|>", 0));
    return TEXT(r, "\n", 0);
}

/* An assistant turn's tool calls in <tool_call> tags, each on a line of its own after what came
 * before (`after_text`: the turn shows text before them). */
static mt_status qwen_calls(const mt_chat_template *t, const mt_chat_message *m, size_t i, int after_text,
                            mt_chat_rendered *r) {
    for (size_t k = 0; k < json_array_size(m[i].tool_calls); k++) {
        span name;
        const json_t *args;
        MT_TRY(call_parts(t, json_array_get(m[i].tool_calls, k), i, &name, &args));
        if (k > 0 || after_text) MT_TRY(TEXT(r, "\n", 1));
        MT_TRY(TEXT(r, "<tool_call>\n{\"name\": \"", 1));
        MT_TRY(SPAN(r, name, 1));
        MT_TRY(TEXT(r, "\", \"arguments\": ", 1));
        if (t->tools == MT_TOOLS_QWEN3 && json_is_string(args))
            MT_TRY(emit(r, json_string_value(args), json_string_length(args), 1, 0));
        else
            MT_TRY(tojson(r, args, -1, 1));
        MT_TRY(TEXT(r, "}\n</tool_call>", 1));
    }
    return MT_OK;
}

/* Tool results: consecutive ones share a user turn, each in <tool_response> tags. */
static mt_status qwen_tool_result(const mt_chat_message *m, size_t i, size_t n, mt_chat_rendered *r) {
    if (i == 0 || m[i - 1].role != MT_ROLE_TOOL) {
        MT_TRY(SPECIAL(r, "<|im_start|>", 0));
        MT_TRY(TEXT(r, "user", 0));
    }
    MT_TRY(TEXT(r, "\n<tool_response>\n", 0));
    MT_TRY(SPAN(r, whole(&m[i]), 0));
    MT_TRY(TEXT(r, "\n</tool_response>", 0));
    if (i + 1 < n && m[i + 1].role == MT_ROLE_TOOL) return MT_OK;
    MT_TRY(SPECIAL(r, "<|im_end|>", 0));
    return TEXT(r, "\n", 0);
}

static int has_calls(const mt_chat_message *m) {
    return json_is_array(m->tool_calls) && json_array_size(m->tool_calls) > 0;
}

static mt_status chatml_answer(const mt_chat_template *t, const mt_chat_message *m, size_t i, size_t n, size_t query,
                               mt_chat_rendered *r) {
    if (t->think) {
        span shown = {0};
        if (!m[i].content && t->null_content_raises) return text_of(t, m, i, &shown);
        MT_TRY(SPECIAL(r, "<|im_start|>", 0));
        MT_TRY(TEXT(r, "assistant\n", 0));
        MT_TRY(qwen3_answer(t, m, i, n, query, r, &shown));
        if (has_calls(&m[i])) MT_TRY(qwen_calls(t, m, i, shown.n > 0, r));
    } else if (has_calls(&m[i])) {
        /* Qwen2.5: "<|im_start|>assistant" then "\n" + content where there is some, then the
         * calls; the first "\n" is the generation prompt's */
        MT_TRY(SPECIAL(r, "<|im_start|>", 0));
        MT_TRY(TEXT(r, "assistant\n", 0));
        MT_TRY(SPAN(r, whole(&m[i]), 1));
        MT_TRY(qwen_calls(t, m, i, m[i].len > 0, r));
    } else {
        span content = {0};
        MT_TRY(text_of(t, m, i, &content));
        MT_TRY(SPECIAL(r, "<|im_start|>", 0));
        MT_TRY(TEXT(r, "assistant\n", 0));
        MT_TRY(SPAN(r, content, 1));
    }
    MT_TRY(SPECIAL(r, "<|im_end|>", 1));
    return TEXT(r, "\n", 0);
}

static mt_status render_chatml(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                               mt_chat_rendered *r) {
    size_t first = 0;
    if (json_array_size(tools) > 0) {
        MT_TRY(qwen_tools(t, m, tools, &first, r));
    } else if (m[0].role == MT_ROLE_SYSTEM) {
        span system = {0};
        MT_TRY(text_of(t, m, 0, &system));
        MT_TRY(chatml_turn(r, "system", system));
        first = 1;
    } else if (t->default_system) {
        MT_TRY(chatml_turn(r, "system", (span){t->default_system, strlen(t->default_system)}));
    }
    size_t query = last_query(m, n);
    for (size_t i = first; i < n; i++) {
        if (m[i].role == MT_ROLE_ASSISTANT) {
            MT_TRY(chatml_answer(t, m, i, n, query, r));
        } else if (m[i].role == MT_ROLE_TOOL) {
            MT_TRY(qwen_tool_result(m, i, n, r));
        } else {
            span content = {0};
            MT_TRY(text_of(t, m, i, &content));
            MT_TRY(chatml_turn(r, role_name(m[i].role), content));
        }
    }
    return MT_OK;
}

/* The [INST] templates raise on roles that do not alternate user, assistant, user, ... */
static mt_status check_alternation(const mt_chat_message *m, size_t n, int after_system) {
    for (size_t k = 0; k < n; k++) {
        if ((m[k].role == MT_ROLE_USER) != (k % 2 == 0))
            return mt_fail(MT_ERR_INVALID, "the chat template needs %sroles that alternate user, assistant, user, ... "
                           "(message %zu is %s)", after_system ? "a system message first at most, then " : "",
                           k + 1 + (size_t)after_system, role_name(m[k].role));
    }
    return MT_OK;
}

static mt_status no_place_for_system(void) {
    return mt_fail(MT_ERR_INVALID, "the chat template takes a system message only as the first message");
}

/* Llama 2 chat: bos "[INST] " (<<SYS>>\n system \n<</SYS>>\n\n) user|strip " [/INST]", then
 * " " answer|strip " " eos. */
static mt_status render_llama2(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r,
                               const mt_chat_message *system) {
    for (size_t k = 0; k < n; k++) {
        /* The template checks alternation as it goes and renders nothing for another role. */
        if ((m[k].role == MT_ROLE_USER) != (k % 2 == 0))
            return check_alternation(m, k + 1, system != NULL);
        span content = whole(&m[k]);
        if (k == 0 && system) {
            size_t len = 8 + system->len + 11 + m[k].len;
            char *joined = malloc(len + 1);
            if (joined) snprintf(joined, len + 1, "<<SYS>>\n%.*s\n<</SYS>>\n\n%.*s", (int)system->len,
                                 system->content, (int)m[k].len, m[k].content);
            MT_TRY(own(r, joined));
            content = (span){joined, len};
        }
        if (m[k].role == MT_ROLE_USER) {
            MT_TRY(SPECIAL(r, t->bos, 0));
            MT_TRY(SPECIAL(r, "[INST]", 0));
            MT_TRY(TEXT(r, " ", 0));
            MT_TRY(SPAN(r, trim(content), 0));
            MT_TRY(TEXT(r, " ", 0));
            MT_TRY(SPECIAL(r, "[/INST]", 0));
        } else if (m[k].role == MT_ROLE_ASSISTANT) {
            MT_TRY(TEXT(r, " ", 1));
            MT_TRY(SPAN(r, trim(content), 1));
            MT_TRY(TEXT(r, " ", 1));
            MT_TRY(SPECIAL(r, t->eos, 1));
        }
    }
    return MT_OK;
}

/* Mistral Instruct: bos, then per turn [INST] user [/INST] and answer eos; the variants differ in
 * spaces, trimming and where a system message goes. */
static mt_status render_mistral(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r,
                                const mt_chat_message *system) {
    if (system && t->inst == MT_INST_NO_SYSTEM)
        return mt_fail(MT_ERR_INVALID, "the chat template has no system role (only user and assistant)");
    MT_TRY(check_alternation(m, n, system != NULL));
    int v03 = t->inst == MT_INST_SYSTEM_IF_LAST;
    MT_TRY(SPECIAL(r, t->bos, 0));
    for (size_t k = 0; k < n; k++) {
        if (m[k].role == MT_ROLE_ASSISTANT) {
            if (t->inst != MT_INST_NO_SYSTEM) MT_TRY(TEXT(r, " ", 1));
            MT_TRY(SPAN(r, v03 ? trim(whole(&m[k])) : whole(&m[k]), 1));
            MT_TRY(SPECIAL(r, t->eos, 1));
            continue;
        }
        /* Where the system message goes: before the first user message (v0.2), or before a user
         * message that ends the conversation (v0.3). */
        int with_system = system && (t->inst == MT_INST_SYSTEM_FIRST ? k == 0 : k == n - 1);
        if (t->inst == MT_INST_SYSTEM_FIRST) MT_TRY(TEXT(r, " ", 0));
        MT_TRY(SPECIAL(r, "[INST]", 0));
        MT_TRY(TEXT(r, " ", 0));
        if (with_system) {
            MT_TRY(SPAN(r, whole(system), 0));
            MT_TRY(TEXT(r, "\n\n", 0));
        }
        MT_TRY(SPAN(r, whole(&m[k]), 0));
        if (!v03) MT_TRY(TEXT(r, " ", 0));
        MT_TRY(SPECIAL(r, "[/INST]", 0));
    }
    return MT_OK;
}

static mt_status render_inst(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r) {
    const mt_chat_message *system = NULL;
    if (m[0].role == MT_ROLE_SYSTEM) {
        system = &m[0];
        m++;
        n--;
    }
    for (size_t k = 0; k < n; k++)
        if (m[k].role == MT_ROLE_SYSTEM && t->inst != MT_INST_LLAMA2) return no_place_for_system();
    return t->inst == MT_INST_LLAMA2 ? render_llama2(t, m, n, r, system) : render_mistral(t, m, n, r, system);
}

/* What the templates rendered in C have no place for (transformers would drop it): a developer
 * message, an answer's thinking (gpt-oss's field). */
static mt_status check_roles_and_fields(const mt_chat_template *t, const mt_chat_message *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (m[i].role == MT_ROLE_DEVELOPER)
            return mt_fail(MT_ERR_INVALID, "message %zu: a developer message, which the %s template has no place for",
                           i + 1, t->name);
        if (m[i].thinking)
            return mt_fail(MT_ERR_INVALID, "message %zu: thinking, which the %s template does not read%s", i + 1, t->name,
                           t->think ? " (it reads reasoning_content)" : "");
    }
    return MT_OK;
}

mt_status mt_chat_render(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                         mt_chat_rendered *out) {
    *out = (mt_chat_rendered){0};
    if (n == 0) return mt_fail(MT_ERR_INVALID, "a conversation with no message");
    if (t->family == MT_CHAT_JINJA) return mt_chat_jinja_render(t, m, n, tools, out);
    mt_status st = check_roles_and_fields(t, m, n);
    if (st == MT_OK) st = check_tools(t, m, n, tools);
    if (st == MT_OK)
        st = t->family == MT_CHAT_LLAMA3   ? render_llama3(t, m, n, tools, out)
             : t->family == MT_CHAT_CHATML ? render_chatml(t, m, n, tools, out)
                                           : render_inst(t, m, n, out);
    if (st != MT_OK) mt_chat_rendered_free(out);
    return st;
}

mt_status mt_chat_render_prompt(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *out) {
    /* The conversation with an empty answer, cut where the answer starts: the templates render the
     * generation prompt as the markup that opens an assistant turn. */
    *out = (mt_chat_rendered){0};
    if (t->family == MT_CHAT_JINJA) return mt_chat_jinja_render_prompt(t, m, n, out);
    mt_chat_message *with_answer = calloc(n + 1, sizeof *with_answer);
    if (!with_answer) return mt_fail(MT_ERR_NOMEM, "cannot hold a conversation");
    memcpy(with_answer, m, n * sizeof *m);
    with_answer[n] = (mt_chat_message){.role = MT_ROLE_ASSISTANT, .content = "", .len = 0};
    mt_status st = mt_chat_render(t, with_answer, n + 1, NULL, out);
    free(with_answer);
    MT_TRY(st);
    mt_chat_rendered_set_loss(out, MT_LOSS_LAST_TURN, 1);
    size_t answer = 0;
    while (answer < out->n && !out->seg[answer].trainable) answer++;
    out->n = answer;
    return MT_OK;
}

void mt_chat_rendered_free(mt_chat_rendered *r) {
    for (size_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->seg);
    *r = (mt_chat_rendered){0};
}

const char *const mt_chat_loss_names[] = {"assistant", "last-turn", "all", NULL};

void mt_chat_rendered_set_loss(mt_chat_rendered *r, mt_chat_loss loss, int analysis) {
    if (loss == MT_LOSS_ALL) {
        for (size_t i = 0; i < r->n; i++) r->seg[i].trainable = 1;
        return;
    }
    for (size_t i = 0; !analysis && i < r->n; i++)
        if (r->seg[i].analysis) r->seg[i].trainable = 0;
    if (loss == MT_LOSS_LAST_TURN) {
        size_t last = r->n;
        while (last > 0 && !r->seg[last - 1].trainable) last--;
        while (last > 0 && r->seg[last - 1].trainable) last--;
        for (size_t i = 0; i < last; i++) r->seg[i].trainable = 0;
    }
}
