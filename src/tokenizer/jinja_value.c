#include "tokenizer/jinja_value.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/py_json.h"

mt_status j_fail(const j_ctx *c, size_t at, const char *fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t line, col;
    mt_jinja_position(&c->t->tokens, at, &line, &col);
    return mt_fail(MT_ERR_INVALID, "%s: chat template line %zu, column %zu: %s", c->t->source, line, col, what);
}

mt_status j_put(mt_jinja_output *o, const char *s, size_t len) {
    if (o->len + len + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + len + 1) cap *= 2;
        char *grown = realloc(o->text, cap);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered chat template");
        o->text = grown;
        o->cap = cap;
    }
    if (len) memcpy(o->text + o->len, s, len);
    o->len += len;
    o->text[o->len] = '\0';
    return MT_OK;
}

int j_truthy(const json_t *v) {
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

const char *j_type(const json_t *v) {
    if (!v) return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_NULL: return "None";
    default: return "bool";
    }
}

/* repr(s): in single quotes unless it holds one and no double quote, as Python chooses. */
static mt_status repr_string(mt_jinja_output *o, const char *s, size_t n) {
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    MT_TRY(j_put(o, &q, 1));
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        const char *e = ch == '\\' ? "\\\\" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
        if (!e && ch == (unsigned char)q) snprintf(esc, sizeof esc, "\\%c", q), e = esc;
        if (!e && (ch < 0x20 || ch == 0x7F)) snprintf(esc, sizeof esc, "\\x%02x", ch), e = esc;
        MT_TRY(e ? j_put(o, e, strlen(e)) : j_put(o, s + i, 1));
    }
    return j_put(o, &q, 1);
}

static mt_status repr(mt_jinja_output *o, const json_t *v) {
    if (json_is_string(v)) return repr_string(o, json_string_value(v), json_string_length(v));
    if (json_is_array(v)) {
        MT_TRY(j_put(o, "[", 1));
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) MT_TRY(j_put(o, ", ", 2));
            MT_TRY(repr(o, json_array_get(v, i)));
        }
        return j_put(o, "]", 1);
    }
    if (json_is_object(v)) {
        MT_TRY(j_put(o, "{", 1));
        const char *key;
        json_t *item;
        int first = 1;
        json_object_foreach((json_t *)v, key, item) {
            if (!first) MT_TRY(j_put(o, ", ", 2));
            first = 0;
            MT_TRY(repr_string(o, key, strlen(key)));
            MT_TRY(j_put(o, ": ", 2));
            MT_TRY(repr(o, item));
        }
        return j_put(o, "}", 1);
    }
    return j_str(o, v);
}

mt_status j_str(mt_jinja_output *o, const json_t *v) {
    char num[48];
    if (!v) return MT_OK;
    switch (json_typeof(v)) {
    case JSON_STRING: return j_put(o, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return j_put(o, num, strlen(num));
    case JSON_REAL: {
        double x = json_real_value(v);
        if (isnan(x) || isinf(x)) return j_put(o, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf", isnan(x) || x > 0 ? 3 : 4);
        char *text;
        size_t len;
        MT_TRY(mt_py_json_dumps(v, -1, &text, &len)); /* json.dumps writes a float as repr does */
        mt_status st = j_put(o, text, len);
        free(text);
        return st;
    }
    case JSON_TRUE: return j_put(o, "True", 4);
    case JSON_FALSE: return j_put(o, "False", 5);
    case JSON_NULL: return j_put(o, "None", 4);
    default: return repr(o, v);
    }
}

json_t *j_to_string(const json_t *v) {
    if (json_is_string(v)) return json_incref((json_t *)v);
    mt_jinja_output o = {0};
    json_t *s = j_str(&o, v) == MT_OK ? json_stringn_nocheck(o.text ? o.text : "", o.len) : NULL;
    free(o.text);
    return s;
}

int j_is_number(const json_t *v) { return v && (json_is_number(v) || json_is_boolean(v)); }

double j_number(const json_t *v) {
    return json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : json_is_true(v);
}

int j_equal(const json_t *a, const json_t *b) {
    if (!a || !b) return !a && !b;
    if (j_is_number(a) && j_is_number(b)) {
        if (json_is_real(a) || json_is_real(b)) return j_number(a) == j_number(b);
        return (json_is_integer(a) ? json_integer_value(a) : json_is_true(a)) ==
               (json_is_integer(b) ? json_integer_value(b) : json_is_true(b));
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_string(a))
        return json_string_length(a) == json_string_length(b) &&
               !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!j_equal(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)a, key, item) if (!j_equal(item, json_object_get(b, key))) return 0;
        return 1;
    }
    return 1; /* null */
}

int j_compare(const json_t *a, const json_t *b) {
    if (j_is_number(a) && j_is_number(b)) {
        double x = j_number(a), y = j_number(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t n = json_string_length(a), m = json_string_length(b);
        int r = memcmp(json_string_value(a), json_string_value(b), n < m ? n : m);
        return r < 0 ? -1 : r > 0 ? 1 : n < m ? -1 : n > m ? 1 : 0;
    }
    if (json_is_array(a) && json_is_array(b)) {
        size_t n = json_array_size(a), m = json_array_size(b);
        for (size_t i = 0; i < n && i < m; i++) {
            if (j_equal(json_array_get(a, i), json_array_get(b, i))) continue;
            return j_compare(json_array_get(a, i), json_array_get(b, i));
        }
        return n < m ? -1 : n > m ? 1 : 0;
    }
    return -2;
}

unsigned j_decode(const char *s, size_t n, size_t i, size_t *len) {
    const unsigned char *u = (const unsigned char *)s + i;
    size_t want = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    if (i + want > n) want = 1;
    *len = want;
    if (want == 1) return u[0];
    if (want == 2) return (unsigned)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    if (want == 3) return (unsigned)(u[0] & 0x0F) << 12 | (unsigned)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    return (unsigned)(u[0] & 0x07) << 18 | (unsigned)(u[1] & 0x3F) << 12 | (unsigned)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

size_t j_ulen(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t j_uoffset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    for (; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80 && k-- == 0) return i;
    return n;
}

/* Python's str.isspace(), which strip(), split() and Jinja's trim go by. */
int j_py_space(unsigned c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
