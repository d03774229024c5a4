#include "tokenizer/chat_data.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json_kind.h"

mt_jsonl_kind mt_jsonl_kind_of(const json_t *line) {
    if (!json_is_object(line)) return MT_JSONL_OTHER;
    if (json_object_get(line, "messages")) return MT_JSONL_CHAT;
    if (json_object_get(line, "conversations")) return MT_JSONL_SHAREGPT;
    if (json_object_get(line, "prompt") && json_object_get(line, "completion")) return MT_JSONL_INSTRUCTION;
    if (json_object_get(line, "instruction") && json_object_get(line, "output")) return MT_JSONL_ALPACA;
    return MT_JSONL_OTHER;
}

/* The layouts by the fields that make them, for the refusals of a line in two or in half of one. */
static const struct {
    const char *name, *first, *second;
} layouts[] = {
    {"OpenAI messages", "messages", NULL},
    {"ShareGPT", "conversations", NULL},
    {"prompt/completion", "prompt", "completion"},
    {"alpaca", "instruction", "output"},
};
enum { N_LAYOUTS = sizeof layouts / sizeof layouts[0] };

const char *mt_jsonl_layout_problem(const json_t *line, char *buf, size_t cap) {
    int whole[N_LAYOUTS], n_whole = 0;
    if (!json_is_object(line)) return NULL;
    for (int i = 0; i < N_LAYOUTS; i++) {
        int a = json_object_get(line, layouts[i].first) != NULL;
        int b = !layouts[i].second || json_object_get(line, layouts[i].second);
        if (a && b) whole[n_whole++] = i;
    }
    if (n_whole > 1) {
        snprintf(buf, cap, "holds the fields of two chat layouts, \"%s\" (%s) and \"%s\" (%s): a line is one "
                 "example in one layout", layouts[whole[0]].first, layouts[whole[0]].name, layouts[whole[1]].first,
                 layouts[whole[1]].name);
        return buf;
    }
    if (n_whole == 1) return NULL;
    for (int i = 0; i < N_LAYOUTS; i++) {
        if (!layouts[i].second) continue;
        const char *has = json_object_get(line, layouts[i].first) ? layouts[i].first :
                          json_object_get(line, layouts[i].second) ? layouts[i].second : NULL;
        if (!has) continue;
        snprintf(buf, cap, "has \"%s\" but no \"%s\" field: the %s layout needs both \"%s\" and \"%s\"", has,
                 has == layouts[i].first ? layouts[i].second : layouts[i].first, layouts[i].name, layouts[i].first,
                 layouts[i].second);
        return buf;
    }
    return NULL;
}

/* A string field: its text and length (JSON strings are valid UTF-8 and may hold NUL). */
static mt_status string_field(const json_t *obj, const char *key, const char *where, const char **text, size_t *len) {
    const json_t *v = json_object_get(obj, key);
    if (!v) return mt_fail(MT_ERR_INVALID, "%s: no \"%s\" field", where, key);
    if (!json_is_string(v)) return mt_fail(MT_ERR_INVALID, "%s: \"%s\" is not a string but %s", where, key, mt_json_kind(v));
    *text = json_string_value(v);
    *len = json_string_length(v);
    return MT_OK;
}

/* Keeps a value made while reading for as long as the example. */
static mt_status keep(mt_chat_example *e, json_t *v, const char *where) {
    if (!v || json_array_append_new(e->owned, v))
        return mt_fail(MT_ERR_NOMEM, "%s: cannot hold the example", where);
    return MT_OK;
}

static mt_status alloc_messages(mt_chat_example *e, size_t n, const char *where) {
    e->m = calloc(n ? n : 1, sizeof *e->m);
    if (!e->m) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold %zu messages", where, n);
    return MT_OK;
}

/* ---- tools and tool calls ---- */

static mt_status check_tools(const json_t *tools, const char *where) {
    if (!json_is_array(tools))
        return mt_fail(MT_ERR_INVALID, "%s: \"tools\" is not a list of tool definitions but %s", where, mt_json_kind(tools));
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (!json_is_object(json_array_get(tools, i)))
            return mt_fail(MT_ERR_INVALID, "%s: tool %zu of \"tools\" is not an object but %s", where, i + 1,
                           mt_json_kind(json_array_get(tools, i)));
    return MT_OK;
}

/* A call is {"function": {"name": string, "arguments": ...}} (OpenAI, with "id" and "type" as
 * they come) or {"name": string, "arguments": ...}; arguments an object or its JSON text. */
static mt_status check_call(const json_t *call, const char *at) {
    if (!json_is_object(call)) return mt_fail(MT_ERR_INVALID, "%s is not an object but %s", at, mt_json_kind(call));
    const json_t *fn = json_object_get(call, "function");
    if (fn && !json_is_object(fn))
        return mt_fail(MT_ERR_INVALID, "%s: \"function\" is not an object but %s", at, mt_json_kind(fn));
    if (!fn) fn = call;
    const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_string(name)) return mt_fail(MT_ERR_INVALID, "%s: the function's \"name\" is missing or not a string", at);
    if (!json_is_object(args) && !json_is_string(args))
        return mt_fail(MT_ERR_INVALID, "%s: the function's \"arguments\" is %s, not an object (or its JSON text)", at,
                       args ? mt_json_kind(args) : "missing");
    if (json_is_string(args)) { /* a template renders the object the text holds */
        json_error_t err;
        json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, &err);
        json_decref(parsed);
        if (!parsed)
            return mt_fail(MT_ERR_INVALID, "%s: the function's \"arguments\" is a string that is not the JSON text of an "
                           "object: %s (column %d)", at, err.text, err.column);
    }
    return MT_OK;
}

static mt_status check_calls(const json_t *calls, const char *at) {
    if (!json_is_array(calls)) return mt_fail(MT_ERR_INVALID, "%s: \"tool_calls\" is not a list but %s", at, mt_json_kind(calls));
    for (size_t k = 0; k < json_array_size(calls); k++) {
        char call_at[PATH_MAX + 128];
        snprintf(call_at, sizeof call_at, "%s: tool call %zu", at, k + 1);
        MT_TRY(check_call(json_array_get(calls, k), call_at));
    }
    return MT_OK;
}

/* ---- OpenAI messages ---- */

static mt_status parse_role(const json_t *msg, const char *where, mt_chat_role *role) {
    const char *name;
    size_t len;
    MT_TRY(string_field(msg, "role", where, &name, &len));
    if (!strcmp(name, "system")) *role = MT_ROLE_SYSTEM;
    else if (!strcmp(name, "user")) *role = MT_ROLE_USER;
    else if (!strcmp(name, "assistant")) *role = MT_ROLE_ASSISTANT;
    else if (!strcmp(name, "tool")) *role = MT_ROLE_TOOL;
    else if (!strcmp(name, "developer")) *role = MT_ROLE_DEVELOPER;
    else return mt_fail(MT_ERR_INVALID, "%s: role \"%s\" is not system, developer, user, assistant or tool", where, name);
    return MT_OK;
}

/* An assistant message's reasoning under `key` (reasoning_content, which Qwen3's templates read;
 * thinking, gpt-oss's): a string, or absent (null). */
static mt_status reasoning_field(const json_t *msg, const char *key, const char *at, const mt_chat_message *m,
                                 const char **text, size_t *len) {
    const json_t *v = json_object_get(msg, key);
    if (!v || json_is_null(v)) return MT_OK;
    if (m->role != MT_ROLE_ASSISTANT || !json_is_string(v))
        return mt_fail(MT_ERR_INVALID, "%s: %s must be a string on an assistant message", at, key);
    *text = json_string_value(v);
    *len = json_string_length(v);
    return MT_OK;
}

static mt_status parse_message(const json_t *msg, const char *at, mt_chat_message *m) {
    if (!json_is_object(msg)) return mt_fail(MT_ERR_INVALID, "%s is not an object", at);
    MT_TRY(parse_role(msg, at, &m->role));
    const json_t *calls = json_object_get(msg, "tool_calls");
    if (calls && !json_is_null(calls)) {
        if (m->role != MT_ROLE_ASSISTANT)
            return mt_fail(MT_ERR_INVALID, "%s: tool_calls on a %s message (only an assistant calls tools)", at,
                           m->role == MT_ROLE_TOOL        ? "tool"
                           : m->role == MT_ROLE_USER      ? "user"
                           : m->role == MT_ROLE_DEVELOPER ? "developer"
                                                          : "system");
        MT_TRY(check_calls(calls, at));
        m->tool_calls = calls;
    }
    const json_t *content = json_object_get(msg, "content");
    if (json_is_null(content) && m->tool_calls) {
        m->content = NULL; /* OpenAI's content of a turn that only calls tools */
    } else {
        MT_TRY(string_field(msg, "content", at, &m->content, &m->len));
    }
    MT_TRY(reasoning_field(msg, "reasoning_content", at, m, &m->reasoning, &m->reasoning_len));
    return reasoning_field(msg, "thinking", at, m, &m->thinking, &m->thinking_len);
}

static mt_status parse_messages(mt_chat_example *e, const char *where) {
    const json_t *list = json_object_get(e->json, "messages");
    if (!json_is_array(list)) return mt_fail(MT_ERR_INVALID, "%s: \"messages\" is not a list", where);
    e->n = json_array_size(list);
    if (e->n == 0) return mt_fail(MT_ERR_INVALID, "%s: \"messages\" is empty", where);
    MT_TRY(alloc_messages(e, e->n, where));
    for (size_t i = 0; i < e->n; i++) {
        char at[PATH_MAX + 96];
        snprintf(at, sizeof at, "%s: message %zu", where, i + 1);
        MT_TRY(parse_message(json_array_get(list, i), at, &e->m[i]));
    }
    const json_t *tools = json_object_get(e->json, "tools");
    if (tools && !json_is_null(tools)) {
        MT_TRY(check_tools(tools, where));
        e->tools = tools;
    }
    return MT_OK;
}

/* ---- prompt/completion and alpaca ---- */

static mt_status parse_instruction(mt_chat_example *e, const char *where) {
    MT_TRY(alloc_messages(e, 2, where));
    e->n = 2;
    e->m[0].role = MT_ROLE_USER;
    e->m[1].role = MT_ROLE_ASSISTANT;
    MT_TRY(string_field(e->json, "prompt", where, &e->m[0].content, &e->m[0].len));
    return string_field(e->json, "completion", where, &e->m[1].content, &e->m[1].len);
}

/* alpaca's "history": earlier turns as [instruction, answer] pairs of strings, oldest first. */
static mt_status alpaca_history(mt_chat_example *e, const json_t *history, const char *where) {
    for (size_t i = 0; i < json_array_size(history); i++) {
        const json_t *pair = json_array_get(history, i);
        const json_t *user = json_array_get(pair, 0), *answer = json_array_get(pair, 1);
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(user) || !json_is_string(answer))
            return mt_fail(MT_ERR_INVALID, "%s: \"history\" item %zu is not a pair of strings [instruction, answer] "
                           "but %s", where, i + 1, mt_json_kind(pair));
        e->m[e->n++] = (mt_chat_message){.role = MT_ROLE_USER, .content = json_string_value(user),
                                         .len = json_string_length(user)};
        e->m[e->n++] = (mt_chat_message){.role = MT_ROLE_ASSISTANT, .content = json_string_value(answer),
                                         .len = json_string_length(answer)};
    }
    return MT_OK;
}

static mt_status parse_alpaca(mt_chat_example *e, const char *where) {
    const char *instruction, *input = "", *output, *system = NULL;
    size_t ilen, inlen = 0, olen, slen = 0;
    MT_TRY(string_field(e->json, "instruction", where, &instruction, &ilen));
    MT_TRY(string_field(e->json, "output", where, &output, &olen));
    const json_t *in = json_object_get(e->json, "input"), *sys = json_object_get(e->json, "system");
    const json_t *history = json_object_get(e->json, "history");
    if (history && !json_is_null(history) && !json_is_array(history))
        return mt_fail(MT_ERR_INVALID, "%s: \"history\" is not a list of [instruction, answer] pairs but %s", where,
                       mt_json_kind(history));
    if (in && !json_is_null(in)) MT_TRY(string_field(e->json, "input", where, &input, &inlen));
    if (sys && !json_is_null(sys)) MT_TRY(string_field(e->json, "system", where, &system, &slen));
    MT_TRY(alloc_messages(e, 3 + 2 * json_array_size(history), where));
    if (system) e->m[e->n++] = (mt_chat_message){.role = MT_ROLE_SYSTEM, .content = system, .len = slen};
    MT_TRY(alpaca_history(e, history, where));
    const char *user = instruction;
    size_t ulen = ilen;
    if (inlen) {
        /* LLaMA-Factory's joining: the instruction, a newline, the input */
        char *joined = malloc(ilen + 1 + inlen + 1);
        if (!joined) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold the example", where);
        memcpy(joined, instruction, ilen);
        joined[ilen] = '\n';
        memcpy(joined + ilen + 1, input, inlen);
        json_t *kept = json_stringn_nocheck(joined, ilen + 1 + inlen);
        free(joined);
        MT_TRY(keep(e, kept, where));
        user = json_string_value(kept);
        ulen = json_string_length(kept);
    }
    e->m[e->n++] = (mt_chat_message){.role = MT_ROLE_USER, .content = user, .len = ulen};
    e->m[e->n++] = (mt_chat_message){.role = MT_ROLE_ASSISTANT, .content = output, .len = olen};
    return MT_OK;
}

/* ---- ShareGPT ---- */

/* A field that is JSON or the JSON text of it (ShareGPT's tools and function calls). */
static mt_status json_or_text(mt_chat_example *e, const json_t *v, const char *at, const char *what, const json_t **out) {
    if (!json_is_string(v)) {
        *out = v;
        return MT_OK;
    }
    json_error_t err;
    json_t *parsed = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &err);
    if (!parsed) return mt_fail(MT_ERR_INVALID, "%s: %s is not JSON text: %s (column %d)", at, what, err.text, err.column);
    MT_TRY(keep(e, parsed, at));
    *out = parsed;
    return MT_OK;
}

/* function_call's value as the tool_calls of an assistant message: [{"type": "function",
 * "function": call}, ...]. */
static mt_status sharegpt_calls(mt_chat_example *e, const json_t *value, const char *at, mt_chat_message *m) {
    const json_t *calls;
    MT_TRY(json_or_text(e, value, at, "the function_call's value", &calls));
    json_t *list = json_array();
    MT_TRY(keep(e, list, at));
    size_t n = json_is_array(calls) ? json_array_size(calls) : 1;
    for (size_t k = 0; k < n; k++) {
        const json_t *call = json_is_array(calls) ? json_array_get(calls, k) : calls;
        char call_at[PATH_MAX + 128];
        snprintf(call_at, sizeof call_at, "%s: call %zu", at, k + 1);
        MT_TRY(check_call(call, call_at));
        if (json_array_append_new(list, json_pack("{s:s, s:O}", "type", "function", "function", call)))
            return mt_fail(MT_ERR_NOMEM, "%s: cannot hold the example", at);
    }
    if (n == 0) return mt_fail(MT_ERR_INVALID, "%s: the function_call holds no call", at);
    *m = (mt_chat_message){.role = MT_ROLE_ASSISTANT, .content = "", .len = 0, .tool_calls = list};
    return MT_OK;
}

static mt_status sharegpt_turn(mt_chat_example *e, const json_t *turn, const char *at, mt_chat_message *m) {
    if (!json_is_object(turn)) return mt_fail(MT_ERR_INVALID, "%s is not an object", at);
    const char *from, *value;
    size_t len, vlen;
    MT_TRY(string_field(turn, "from", at, &from, &len));
    const json_t *v = json_object_get(turn, "value");
    if (!strcmp(from, "function_call") && v) return sharegpt_calls(e, v, at, m);
    MT_TRY(string_field(turn, "value", at, &value, &vlen));
    mt_chat_role role;
    if (!strcmp(from, "human") || !strcmp(from, "user")) role = MT_ROLE_USER;
    else if (!strcmp(from, "gpt") || !strcmp(from, "assistant")) role = MT_ROLE_ASSISTANT;
    else if (!strcmp(from, "system")) role = MT_ROLE_SYSTEM;
    else if (!strcmp(from, "observation") || !strcmp(from, "tool")) role = MT_ROLE_TOOL;
    else
        return mt_fail(MT_ERR_INVALID, "%s: \"from\" is \"%s\", not human, gpt, system, function_call or observation",
                       at, from);
    *m = (mt_chat_message){.role = role, .content = value, .len = vlen};
    return MT_OK;
}

static mt_status parse_sharegpt(mt_chat_example *e, const char *where) {
    const json_t *list = json_object_get(e->json, "conversations"), *sys = json_object_get(e->json, "system");
    if (!json_is_array(list)) return mt_fail(MT_ERR_INVALID, "%s: \"conversations\" is not a list", where);
    if (json_array_size(list) == 0) return mt_fail(MT_ERR_INVALID, "%s: \"conversations\" is empty", where);
    MT_TRY(alloc_messages(e, json_array_size(list) + 1, where));
    if (sys && !json_is_null(sys)) {
        mt_chat_message *m = &e->m[e->n++];
        m->role = MT_ROLE_SYSTEM;
        MT_TRY(string_field(e->json, "system", where, &m->content, &m->len));
    }
    for (size_t i = 0; i < json_array_size(list); i++) {
        char at[PATH_MAX + 96];
        snprintf(at, sizeof at, "%s: conversations[%zu]", where, i);
        MT_TRY(sharegpt_turn(e, json_array_get(list, i), at, &e->m[e->n++]));
    }
    const json_t *tools = json_object_get(e->json, "tools");
    if (tools && !json_is_null(tools) && !(json_is_string(tools) && json_string_length(tools) == 0)) {
        MT_TRY(json_or_text(e, tools, where, "\"tools\"", &e->tools));
        MT_TRY(check_tools(e->tools, where));
    }
    return MT_OK;
}

static mt_status parse(json_t *record, const char *where, mt_chat_example *e) {
    e->json = record;
    e->owned = json_array();
    if (!e->owned) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold the example", where);
    char problem[512];
    if (mt_jsonl_layout_problem(e->json, problem, sizeof problem)) return mt_fail(MT_ERR_INVALID, "%s: %s", where, problem);
    switch (mt_jsonl_kind_of(e->json)) {
    case MT_JSONL_CHAT: return parse_messages(e, where);
    case MT_JSONL_INSTRUCTION: return parse_instruction(e, where);
    case MT_JSONL_ALPACA: return parse_alpaca(e, where);
    case MT_JSONL_SHAREGPT: return parse_sharegpt(e, where);
    default:
        return mt_fail(MT_ERR_INVALID, "%s: %s", where,
                       json_is_object(e->json)
                           ? "in none of the chat layouts: \"messages\" (OpenAI), \"prompt\" and \"completion\", "
                             "\"instruction\" and \"output\" (alpaca) or \"conversations\" (ShareGPT)"
                           : "not a JSON object");
    }
}

mt_status mt_chat_example_read(json_t *record, const char *where, mt_chat_example *out) {
    *out = (mt_chat_example){0};
    mt_status st = parse(record, where, out);
    if (st != MT_OK) mt_chat_example_free(out);
    return st;
}

mt_status mt_chat_example_parse(const char *text, size_t len, const char *file, size_t line, mt_chat_example *out) {
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%zu", file, line);
    json_error_t err;
    json_t *record = json_loadb(text, len, JSON_ALLOW_NUL, &err);
    *out = (mt_chat_example){0};
    if (!record) return mt_fail(MT_ERR_INVALID, "%s: not JSON: %s (column %d)", where, err.text, err.column);
    return mt_chat_example_read(record, where, out);
}

void mt_chat_example_free(mt_chat_example *e) {
    free(e->m);
    json_decref(e->owned);
    json_decref(e->json);
    *e = (mt_chat_example){0};
}
