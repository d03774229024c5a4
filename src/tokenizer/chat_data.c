#include "tokenizer/chat_data.h"

#include <stdlib.h>
#include <string.h>

mt_jsonl_kind mt_jsonl_kind_of(const json_t *line) {
    if (!json_is_object(line)) return MT_JSONL_OTHER;
    if (json_object_get(line, "messages")) return MT_JSONL_CHAT;
    if (json_object_get(line, "prompt") && json_object_get(line, "completion")) return MT_JSONL_INSTRUCTION;
    return MT_JSONL_OTHER;
}

/* A string field: its text and length (JSON strings are valid UTF-8 and may hold NUL). */
static mt_status string_field(const json_t *obj, const char *key, const char *where, const char **text, size_t *len) {
    const json_t *v = json_object_get(obj, key);
    if (!v) return mt_fail(MT_ERR_INVALID, "%s: no \"%s\" field", where, key);
    if (!json_is_string(v)) return mt_fail(MT_ERR_INVALID, "%s: \"%s\" is not a string", where, key);
    *text = json_string_value(v);
    *len = json_string_length(v);
    return MT_OK;
}

static mt_status parse_role(const json_t *msg, const char *where, mt_chat_role *role) {
    const char *name;
    size_t len;
    MT_TRY(string_field(msg, "role", where, &name, &len));
    if (!strcmp(name, "system")) *role = MT_ROLE_SYSTEM;
    else if (!strcmp(name, "user")) *role = MT_ROLE_USER;
    else if (!strcmp(name, "assistant")) *role = MT_ROLE_ASSISTANT;
    else return mt_fail(MT_ERR_INVALID, "%s: role \"%s\" is not system, user or assistant", where, name);
    return MT_OK;
}

static mt_status parse_messages(mt_chat_example *e, const char *where) {
    const json_t *list = json_object_get(e->json, "messages");
    if (!json_is_array(list)) return mt_fail(MT_ERR_INVALID, "%s: \"messages\" is not a list", where);
    e->n = json_array_size(list);
    if (e->n == 0) return mt_fail(MT_ERR_INVALID, "%s: \"messages\" is empty", where);
    e->m = calloc(e->n, sizeof *e->m);
    if (!e->m) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold %zu messages", where, e->n);
    for (size_t i = 0; i < e->n; i++) {
        char at[1100];
        snprintf(at, sizeof at, "%s: message %zu", where, i + 1);
        const json_t *msg = json_array_get(list, i);
        if (!json_is_object(msg)) return mt_fail(MT_ERR_INVALID, "%s is not an object", at);
        mt_chat_message *m = &e->m[i];
        MT_TRY(parse_role(msg, at, &m->role));
        MT_TRY(string_field(msg, "content", at, &m->content, &m->len));
        const json_t *reasoning = json_object_get(msg, "reasoning_content");
        if (reasoning && !json_is_null(reasoning)) {
            if (m->role != MT_ROLE_ASSISTANT || !json_is_string(reasoning))
                return mt_fail(MT_ERR_INVALID, "%s: reasoning_content must be a string on an assistant message", at);
            m->reasoning = json_string_value(reasoning);
            m->reasoning_len = json_string_length(reasoning);
        }
    }
    return MT_OK;
}

static mt_status parse_instruction(mt_chat_example *e, const char *where) {
    e->m = calloc(2, sizeof *e->m);
    if (!e->m) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold an example", where);
    e->n = 2;
    e->m[0].role = MT_ROLE_USER;
    e->m[1].role = MT_ROLE_ASSISTANT;
    MT_TRY(string_field(e->json, "prompt", where, &e->m[0].content, &e->m[0].len));
    return string_field(e->json, "completion", where, &e->m[1].content, &e->m[1].len);
}

static mt_status parse(const char *text, size_t len, const char *where, mt_chat_example *e) {
    json_error_t err;
    e->json = json_loadb(text, len, JSON_ALLOW_NUL, &err);
    if (!e->json) return mt_fail(MT_ERR_INVALID, "%s: not JSON: %s (column %d)", where, err.text, err.column);
    switch (mt_jsonl_kind_of(e->json)) {
    case MT_JSONL_CHAT: return parse_messages(e, where);
    case MT_JSONL_INSTRUCTION: return parse_instruction(e, where);
    default:
        return mt_fail(MT_ERR_INVALID, "%s: %s", where,
                       json_is_object(e->json) ? "neither \"messages\" nor \"prompt\" and \"completion\""
                                               : "not a JSON object");
    }
}

mt_status mt_chat_example_parse(const char *text, size_t len, const char *file, size_t line, mt_chat_example *out) {
    *out = (mt_chat_example){0};
    char where[1024];
    snprintf(where, sizeof where, "%s:%zu", file, line);
    mt_status st = parse(text, len, where, out);
    if (st != MT_OK) mt_chat_example_free(out);
    return st;
}

void mt_chat_example_free(mt_chat_example *e) {
    free(e->m);
    json_decref(e->json);
    *e = (mt_chat_example){0};
}
