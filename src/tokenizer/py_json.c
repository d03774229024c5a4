#include "tokenizer/py_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
    int failed;
    const mt_py_json_options *o;
} buf;

static void put(buf *b, const char *s, size_t len) {
    if (b->failed) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *grown = realloc(b->p, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* The code point at s as \uXXXX, a surrogate pair past U+FFFF; returns its length. A byte that
 * starts no whole UTF-8 sequence within the n left (text that was not checked) is escaped alone. */
static size_t ascii_escape(buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = u[0] < 0xC0 || u[0] >= 0xF8 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    for (size_t i = 1; i < k; i++)
        if (i >= n || (u[i] & 0xC0) != 0x80) k = 1;
    if (k == 1) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\u%04x", u[0]);
        puts_(b, esc);
        return 1;
    }
    unsigned c = k == 2 ? (unsigned)(u[0] & 0x1F) << 6 | (u[1] & 0x3F)
               : k == 3 ? (unsigned)(u[0] & 0x0F) << 12 | (unsigned)(u[1] & 0x3F) << 6 | (u[2] & 0x3F)
                        : (unsigned)(u[0] & 0x07) << 18 | (unsigned)(u[1] & 0x3F) << 12 | (unsigned)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    char esc[16];
    if (c >= 0x10000) snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + ((c - 0x10000) >> 10), 0xDC00 + ((c - 0x10000) & 0x3FF));
    else snprintf(esc, sizeof esc, "\\u%04x", c);
    puts_(b, esc);
    return k;
}

static void string(buf *b, const char *s, size_t len) {
    put(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (!e && c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), e = esc;
        if (!e && c >= 0x80 && b->o->ensure_ascii) {
            i += ascii_escape(b, s + i, len - i) - 1;
            continue;
        }
        if (e) puts_(b, e);
        else put(b, s + i, 1);
    }
    put(b, "\"", 1);
}

/* Python's repr of a float: the shortest digits that read back as x, written fixed between 1e-4
 * and 1e16 (always with a fraction) and with an exponent of at least two digits otherwise. */
static void real(buf *b, double x) {
    if (isnan(x) || isinf(x)) {
        puts_(b, isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char sci[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, x);
        if (strtod(sci, NULL) == x) break;
    }
    char digits[24], out[64];
    size_t nd = 0, k = 0;
    const char *s = sci;
    if (*s == '-') out[k++] = '-', s++;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            k += (size_t)sprintf(out + k, "0.");
            for (int z = 0; z < -exp - 1; z++) out[k++] = '0';
            memcpy(out + k, digits, nd), k += nd;
        } else {
            for (int d = 0; d <= exp; d++) out[k++] = (size_t)d < nd ? digits[d] : '0';
            out[k++] = '.';
            if ((size_t)exp + 1 < nd) memcpy(out + k, digits + exp + 1, nd - (size_t)exp - 1), k += nd - (size_t)exp - 1;
            else out[k++] = '0';
        }
    } else {
        out[k++] = digits[0];
        if (nd > 1) out[k++] = '.', memcpy(out + k, digits + 1, nd - 1), k += nd - 1;
        k += (size_t)sprintf(out + k, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    }
    put(b, out, k);
}

static void newline(buf *b, int indent, int depth) {
    if (indent < 0) return;
    put(b, "\n", 1);
    for (int i = 0; i < indent * depth; i++) put(b, " ", 1);
}

static int by_key(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

static void value(buf *b, const json_t *v, int indent, int depth) {
    const char *item_sep = b->o->item_sep ? b->o->item_sep : indent < 0 ? ", " : ",";
    const char *key_sep = b->o->key_sep ? b->o->key_sep : ": ";
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) {
            puts_(b, "{}");
            return;
        }
        put(b, "{", 1);
        size_t n = json_object_size(v), k = 0;
        const char **keys = malloc(n * sizeof *keys), *key;
        json_t *item;
        if (!keys) {
            b->failed = 1;
            return;
        }
        json_object_foreach((json_t *)v, key, item) keys[k++] = key;
        if (b->o->sort_keys) qsort(keys, n, sizeof *keys, by_key);
        for (k = 0; k < n; k++) {
            if (k) puts_(b, item_sep);
            newline(b, indent, depth + 1);
            string(b, keys[k], strlen(keys[k]));
            puts_(b, key_sep);
            value(b, json_object_get(v, keys[k]), indent, depth + 1);
        }
        free(keys);
        newline(b, indent, depth);
        put(b, "}", 1);
        return;
    }
    case JSON_ARRAY: {
        if (json_array_size(v) == 0) {
            puts_(b, "[]");
            return;
        }
        put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) puts_(b, item_sep);
            newline(b, indent, depth + 1);
            value(b, json_array_get(v, i), indent, depth + 1);
        }
        newline(b, indent, depth);
        put(b, "]", 1);
        return;
    }
    case JSON_STRING: string(b, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, num);
        return;
    case JSON_REAL: real(b, json_real_value(v)); return;
    case JSON_TRUE: puts_(b, "true"); return;
    case JSON_FALSE: puts_(b, "false"); return;
    case JSON_NULL: puts_(b, "null"); return;
    }
}

mt_status mt_py_json_dumps(const json_t *v, int indent, char **out, size_t *len) {
    mt_py_json_options o = {.indent = indent};
    return mt_py_json_dumps_with(v, &o, out, len);
}

mt_status mt_py_json_dumps_with(const json_t *v, const mt_py_json_options *o, char **out, size_t *len) {
    buf b = {.o = o};
    value(&b, v, o->indent, 0);
    if (b.failed || !b.p) {
        free(b.p);
        return mt_fail(MT_ERR_NOMEM, "cannot hold a JSON text");
    }
    *out = b.p;
    *len = b.n;
    return MT_OK;
}
