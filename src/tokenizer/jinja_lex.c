#include "tokenizer/jinja_lex.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_status push(mt_jinja_tokens *t, mt_jinja_kind kind, const char *value, size_t len, size_t at,
                      size_t src_len) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        mt_jinja_token *grown = realloc(t->t, cap * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template's tokens");
        t->t = grown;
        t->cap = cap;
    }
    char *v = malloc(len + 1);
    if (!v) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template's tokens");
    memcpy(v, value, len);
    v[len] = '\0';
    t->t[t->n++] = (mt_jinja_token){kind, v, len, at, src_len};
    return MT_OK;
}

/* Text between tags: adjacent runs (around a comment) are one token; empty ones none. */
static mt_status push_data(mt_jinja_tokens *t, const char *s, size_t len, size_t at) {
    if (len == 0) return MT_OK;
    mt_jinja_token *last = t->n ? &t->t[t->n - 1] : NULL;
    if (!last || last->kind != MT_JT_DATA) return push(t, MT_JT_DATA, s, len, at, len);
    char *grown = realloc(last->value, last->len + len + 1);
    if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template's tokens");
    memcpy(grown + last->len, s, len);
    last->len += len;
    grown[last->len] = '\0';
    last->value = grown;
    return MT_OK;
}

static int space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Appends the UTF-8 encoding of code point c. */
static size_t utf8(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 0x3F)), o[2] = (char)(0x80 | (c & 0x3F)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 0x3F));
    return o[2] = (char)(0x80 | (c >> 6 & 0x3F)), o[3] = (char)(0x80 | (c & 0x3F)), 4;
}

/* A string literal's value, its escapes decoded as Python's unicode-escape does; an escape it
 * does not know stays as written (the same on both sides of a comparison). */
static size_t decode_string(const char *p, size_t n, char *o) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 == n) {
            o[k++] = p[i];
            continue;
        }
        char e = p[++i];
        const char *simple = strchr("n\nt\tr\rb\bf\fv\va\a\\\\''\"\"", e);
        if (e && simple && (simple - "n\nt\tr\rb\bf\fv\va\a\\\\''\"\"") % 2 == 0) {
            o[k++] = simple[1];
        } else if (e == '\n') {
            /* a backslash before a line end joins the lines */
        } else if ((e == 'x' || e == 'u' || e == 'U') && i + (e == 'x' ? 2u : e == 'u' ? 4u : 8u) < n) {
            size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8, d;
            uint32_t c = 0;
            for (d = 1; d <= digits && isxdigit((unsigned char)p[i + d]); d++)
                c = c * 16 + (uint32_t)(isdigit((unsigned char)p[i + d]) ? p[i + d] - '0' : (tolower(p[i + d]) - 'a' + 10));
            if (d <= digits || c > 0x10FFFF) {
                o[k++] = '\\';
                o[k++] = e;
            } else {
                k += utf8(c, o + k);
                i += digits;
            }
        } else {
            o[k++] = '\\';
            o[k++] = e;
        }
    }
    return k;
}

typedef struct {
    const char *s;
    size_t n;
    const char *source;
    mt_jinja_tokens *out;
} lexer;

static mt_status unclosed(const lexer *lx, size_t at, const char *what) {
    size_t line, col;
    mt_jinja_position(lx->out, at, &line, &col);
    return mt_fail(MT_ERR_INVALID, "%s: chat_template: %s opened at line %zu, column %zu is never closed", lx->source,
                   what, line, col);
}

/* The tokens inside a tag from *pos to its close (`%}` or `}}`, with a '-' or '+' before it);
 * *strip_next says what the close strips from the text after it: 1 all whitespace, 2 one
 * newline (trim_blocks). */
static mt_status lex_tag(lexer *lx, size_t open_at, size_t *pos, int block, int *strip_next) {
    const char *s = lx->s;
    size_t i = *pos, depth = 0;
    char close = block ? '%' : '}';
    for (;;) {
        while (i < lx->n && space(s[i])) i++;
        if (i >= lx->n) return unclosed(lx, open_at, block ? "a {% tag" : "a {{ tag");
        if (depth == 0) {
            size_t k = i;
            int mod = (s[k] == '-' || s[k] == '+') ? s[k++] : 0;
            if (k + 1 < lx->n && s[k] == close && s[k + 1] == '}') {
                MT_TRY(push(lx->out, MT_JT_END, block ? "%}" : "}}", 2, i, k + 2 - i));
                *pos = k + 2;
                *strip_next = mod == '-' ? 1 : block && mod != '+' ? 2 : 0;
                return MT_OK;
            }
        }
        size_t start = i;
        if (s[i] == '\'' || s[i] == '"') {
            char q = s[i++];
            while (i < lx->n && s[i] != q) i += s[i] == '\\' && i + 1 < lx->n ? 2 : 1;
            if (i >= lx->n) return unclosed(lx, start, "a string");
            char *v = malloc(i - start);
            if (!v) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template's tokens");
            size_t len = decode_string(s + start + 1, i - start - 1, v);
            mt_status st = push(lx->out, MT_JT_STRING, v, len, start, i + 1 - start);
            free(v);
            MT_TRY(st);
            i++;
        } else if (isdigit((unsigned char)s[i])) {
            while (i < lx->n && (isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' ||
                                 ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E'))))
                i++;
            MT_TRY(push(lx->out, MT_JT_NUMBER, s + start, i - start, start, i - start));
        } else if (isalpha((unsigned char)s[i]) || s[i] == '_') {
            while (i < lx->n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
            MT_TRY(push(lx->out, MT_JT_NAME, s + start, i - start, start, i - start));
        } else {
            static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
            size_t len = 1;
            for (size_t k = 0; k < sizeof two / sizeof *two; k++)
                if (i + 1 < lx->n && s[i] == two[k][0] && s[i + 1] == two[k][1]) len = 2;
            if (len == 1 && strchr("([{", s[i])) depth++;
            if (len == 1 && strchr(")]}", s[i]) && depth > 0) depth--;
            MT_TRY(push(lx->out, MT_JT_OP, s + start, len, start, len));
            i += len;
        }
    }
}

/* Where the next tag opens at or after `from` ({{, {% or {#), or n. */
static size_t next_open(const lexer *lx, size_t from) {
    for (size_t i = from; i + 1 < lx->n; i++)
        if (lx->s[i] == '{' && (lx->s[i + 1] == '{' || lx->s[i + 1] == '%' || lx->s[i + 1] == '#')) return i;
    return lx->n;
}

static mt_status lex(lexer *lx) {
    size_t pos = 0;
    int strip_next = 0;
    while (pos <= lx->n) {
        size_t open = next_open(lx, pos), a = pos, b = open;
        if (strip_next == 1)
            while (a < b && space(lx->s[a])) a++;
        else if (strip_next == 2 && a < b && lx->s[a] == '\n')
            a++;
        char kind = open < lx->n ? lx->s[open + 1] : 0;
        char mod = open + 2 < lx->n ? lx->s[open + 2] : 0;
        if (kind && mod == '-') {
            while (b > a && space(lx->s[b - 1])) b--;
        } else if ((kind == '%' || kind == '#') && mod != '+') {
            /* lstrip_blocks: spaces and tabs alone before a block or comment on its line */
            size_t k = b;
            while (k > a && (lx->s[k - 1] == ' ' || lx->s[k - 1] == '\t')) k--;
            int line_starting = a == 0 || lx->s[a - 1] == '\n'; /* what the last tag's close took ended a line */
            if ((k > a && lx->s[k - 1] == '\n') || (k == a && line_starting)) b = k;
        }
        MT_TRY(push_data(lx->out, lx->s + a, b - a, a));
        if (!kind) return MT_OK;
        size_t body = open + 2 + (mod == '-' || mod == '+');
        if (kind == '#') {
            const char *end = strstr(lx->s + body, "#}");
            if (!end) return unclosed(lx, open, "a {# comment");
            strip_next = end > lx->s + body && end[-1] == '-' ? 1 : end > lx->s + body && end[-1] == '+' ? 0 : 2;
            pos = (size_t)(end - lx->s) + 2;
            continue;
        }
        MT_TRY(push(lx->out, kind == '%' ? MT_JT_BLOCK : MT_JT_VAR, kind == '%' ? "{%" : "{{", 2, open, body - open));
        pos = body;
        MT_TRY(lex_tag(lx, open, &pos, kind == '%', &strip_next));
    }
    return MT_OK;
}

mt_status mt_jinja_lex(const char *text, const char *source, mt_jinja_tokens *out) {
    *out = (mt_jinja_tokens){0};
    size_t n = strlen(text), k = 0;
    out->src = malloc(n + 1);
    if (!out->src) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\r') {
            out->src[k++] = '\n';
            if (text[i + 1] == '\n') i++;
        } else {
            out->src[k++] = text[i];
        }
    }
    if (k && out->src[k - 1] == '\n') k--; /* keep_trailing_newline is off */
    out->src[k] = '\0';
    out->src_len = k;
    lexer lx = {out->src, k, source, out};
    mt_status st = lex(&lx);
    if (st != MT_OK) mt_jinja_tokens_free(out);
    return st;
}

void mt_jinja_tokens_free(mt_jinja_tokens *t) {
    for (size_t i = 0; i < t->n; i++) free(t->t[i].value);
    free(t->t);
    free(t->src);
    *t = (mt_jinja_tokens){0};
}

void mt_jinja_position(const mt_jinja_tokens *t, size_t at, size_t *line, size_t *column) {
    *line = 1;
    *column = 1;
    for (size_t i = 0; i < at && i < t->src_len; i++) {
        if (t->src[i] == '\n') ++*line, *column = 1;
        else if (((unsigned char)t->src[i] & 0xC0) != 0x80) ++*column;
    }
}
