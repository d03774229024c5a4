/* Decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, and Sequences of them) and
 * mt_tokenizer_decode, which runs them over the ids' token strings as tokenizers' decode does. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/internal.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

static const char supported[] = "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";

static mt_status parse_step(const json_t *spec, const char *type, const char *what, mt_dec_step *step) {
    if (!strcmp(type, "ByteLevel")) step->kind = DEC_BYTE_LEVEL;
    else if (!strcmp(type, "ByteFallback")) step->kind = DEC_BYTE_FALLBACK;
    else if (!strcmp(type, "Fuse")) step->kind = DEC_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        step->kind = DEC_METASPACE;
        MT_TRY(mt_json_char(spec, "replacement", NULL, what, step->ch, &step->ch_len));
        return mt_prepend_parse(spec, what, &step->prepend);
    } else if (!strcmp(type, "Replace")) {
        const char *content;
        step->kind = DEC_REPLACE;
        MT_TRY(mt_json_string(spec, "content", 1, what, &content));
        if (!(step->text = strdup(content))) return mt_fail(MT_ERR_NOMEM, "%s: cannot copy a decoder", what);
        step->text_len = strlen(content);
        return mt_json_pattern(spec, "pattern", what, &step->pattern, &step->empty_pattern);
    } else if (!strcmp(type, "Strip")) {
        step->kind = DEC_STRIP;
        MT_TRY(mt_json_char(spec, "content", NULL, what, step->ch, &step->ch_len));
        const json_t *start = json_object_get(spec, "start"), *stop = json_object_get(spec, "stop");
        if (!json_is_integer(start) || !json_is_integer(stop) || json_integer_value(start) < 0 ||
            json_integer_value(stop) < 0)
            return mt_fail(MT_ERR_INVALID, "%s: Strip needs non-negative integers 'start' and 'stop'", what);
        step->start = (size_t)json_integer_value(start);
        step->stop = (size_t)json_integer_value(stop);
    } else {
        return mt_fail(MT_ERR_INVALID, "%s: decoder '%s' is not supported (supported: %s)", what, type, supported);
    }
    return MT_OK;
}

static void free_step(mt_dec_step *step) {
    mt_regex_free(&step->pattern);
    free(step->text);
}

static mt_status add_step(mt_tokenizer *tok, const json_t *spec, const char *type, const char *what) {
    mt_dec_step step = {0};
    mt_status st = parse_step(spec, type, what, &step);
    if (!st) st = mt_array_append(&tok->dec, &tok->n_dec, sizeof step, &step, what);
    if (st) free_step(&step);
    return st;
}

mt_status mt_dec_parse(mt_tokenizer *tok, const json_t *spec) {
    if (!spec || json_is_null(spec)) return MT_OK;
    char what[600];
    snprintf(what, sizeof what, "%s: decoder", tok->path);
    tok->has_decoder = 1;
    return mt_json_steps(tok, spec, "decoder", "decoders", what, add_step);
}

void mt_dec_free(mt_tokenizer *tok) {
    for (size_t i = 0; i < tok->n_dec; i++) free_step(&tok->dec[i]);
    free(tok->dec);
    tok->dec = NULL;
    tok->n_dec = 0;
}

/* ---- running the decoders over a list of token strings ---- */

typedef struct {
    mt_str *v;
    size_t n, cap;
} toklist;

static void list_free(toklist *l) {
    for (size_t i = 0; i < l->n; i++) mt_str_free(&l->v[i]);
    free(l->v);
    *l = (toklist){0};
}

/* Appends an empty string and returns it (NULL when memory runs out). */
static mt_str *list_add(toklist *l) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        mt_str *v = realloc(l->v, cap * sizeof *v);
        if (!v) return NULL;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = (mt_str){0};
    if (mt_str_reserve(&l->v[l->n], 0)) return NULL;
    return &l->v[l->n++];
}

static mt_status list_put(toklist *l, const char *s, size_t n) {
    mt_str *t = list_add(l);
    if (!t) return mt_fail(MT_ERR_NOMEM, "decode: cannot grow the token list");
    return mt_str_put(t, s, n);
}

static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xHH>" (Rust's u8::from_str_radix also takes "+H") -> the byte, else -1. */
static int fallback_byte(const mt_str *t) {
    if (t->len != 6 || memcmp(t->s, "<0x", 3) || t->s[5] != '>') return -1;
    if (t->s[3] == '+') return hex(t->s[4]);
    int hi = hex(t->s[3]), lo = hex(t->s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static mt_status flush_bytes(mt_str *bytes, toklist *out) {
    if (!bytes->len) return MT_OK;
    if (mt_utf8_check(bytes->s, bytes->len, NULL) == 0) {
        MT_TRY(list_put(out, bytes->s, bytes->len));
    } else {
        for (size_t i = 0; i < bytes->len; i++) MT_TRY(list_put(out, "\xef\xbf\xbd", 3));
    }
    bytes->len = 0;
    return MT_OK;
}

static mt_status byte_fallback(const toklist *in, toklist *out) {
    mt_str bytes = {0};
    mt_status st = mt_str_reserve(&bytes, 16);
    for (size_t i = 0; i < in->n && !st; i++) {
        int b = fallback_byte(&in->v[i]);
        if (b >= 0) {
            char c = (char)b;
            st = mt_str_put(&bytes, &c, 1);
        } else {
            st = flush_bytes(&bytes, out);
            if (!st) st = list_put(out, in->v[i].s, in->v[i].len);
        }
    }
    if (!st) st = flush_bytes(&bytes, out);
    mt_str_free(&bytes);
    return st;
}

static mt_status byte_level(const toklist *in, toklist *out) {
    mt_str bytes = {0};
    mt_status st = MT_OK;
    for (size_t i = 0; i < in->n && !st; i++) {
        const mt_str *t = &in->v[i];
        st = mt_str_reserve(&bytes, t->len);
        if (st) break;
        long n = mt_byte_level_decode(t->s, t->len, (unsigned char *)bytes.s + bytes.len);
        /* A token with a character outside the alphabet (an added token) counts as its own bytes. */
        if (n < 0) {
            memcpy(bytes.s + bytes.len, t->s, t->len);
            n = (long)t->len;
        }
        bytes.len += (size_t)n;
    }
    mt_str *t = st ? NULL : list_add(out);
    if (!st && !t) st = mt_fail(MT_ERR_NOMEM, "decode: cannot grow the token list");
    if (!st) st = mt_utf8_lossy((const unsigned char *)bytes.s, bytes.len, t);
    mt_str_free(&bytes);
    return st;
}

static mt_status replace(const mt_dec_step *step, mt_regex_scratch *rx, const mt_str *t, mt_str *dst) {
    size_t pos = 0;
    while (!step->empty_pattern) {
        int found;
        size_t ms, me;
        MT_TRY(mt_regex_next(&step->pattern, rx, t->s, t->len, pos, &found, &ms, &me));
        if (!found) break;
        MT_TRY(mt_str_put(dst, t->s + pos, ms - pos));
        MT_TRY(mt_str_put(dst, step->text, step->text_len));
        pos = me;
    }
    return mt_str_put(dst, t->s + pos, t->len - pos);
}

/* Metaspace: each meta character becomes a space, except in the first token (unless the scheme
 * is never) where they are dropped. */
static mt_status metaspace(const mt_dec_step *step, size_t index, const mt_str *t, mt_str *dst) {
    int drop = index == 0 && step->prepend != PREPEND_NEVER;
    for (size_t i = 0; i < t->len;) {
        if (t->len - i >= step->ch_len && !memcmp(t->s + i, step->ch, step->ch_len)) {
            if (!drop) MT_TRY(mt_str_put(dst, " ", 1));
            i += step->ch_len;
        } else {
            MT_TRY(mt_str_put(dst, t->s + i, 1));
            i++;
        }
    }
    return MT_OK;
}

/* Strip: up to `start` leading and `stop` trailing copies of the character. */
static mt_status strip(const mt_dec_step *step, const mt_str *t, mt_str *dst) {
    size_t b = 0, e = t->len, cl = step->ch_len;
    for (size_t k = 0; k < step->start && e - b >= cl && !memcmp(t->s + b, step->ch, cl); k++) b += cl;
    for (size_t k = 0; k < step->stop && e - b >= cl && !memcmp(t->s + e - cl, step->ch, cl); k++) e -= cl;
    return mt_str_put(dst, t->s + b, e - b);
}

static mt_status run_step(const mt_dec_step *step, mt_regex_scratch *rx, const toklist *in, toklist *out) {
    switch (step->kind) {
    case DEC_BYTE_LEVEL: return byte_level(in, out);
    case DEC_BYTE_FALLBACK: return byte_fallback(in, out);
    case DEC_FUSE: {
        mt_str *t = list_add(out);
        if (!t) return mt_fail(MT_ERR_NOMEM, "decode: cannot grow the token list");
        for (size_t i = 0; i < in->n; i++) MT_TRY(mt_str_put(t, in->v[i].s, in->v[i].len));
        return MT_OK;
    }
    case DEC_METASPACE:
    case DEC_REPLACE:
    case DEC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            mt_str *t = list_add(out);
            if (!t) return mt_fail(MT_ERR_NOMEM, "decode: cannot grow the token list");
            if (step->kind == DEC_METASPACE) MT_TRY(metaspace(step, i, &in->v[i], t));
            else if (step->kind == DEC_REPLACE) MT_TRY(replace(step, rx, &in->v[i], t));
            else MT_TRY(strip(step, &in->v[i], t));
        }
        return MT_OK;
    }
    return MT_OK;
}

static mt_status decode(const mt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, toklist *list,
                        mt_regex_scratch *rx) {
    for (size_t i = 0; i < n; i++) {
        /* Ids no token has are passed over, as tokenizers does. */
        const char *s = mt_tokenizer_token(tok, ids[i]);
        if (!s || (skip_special && mt_tokenizer_is_special(tok, ids[i]))) continue;
        MT_TRY(list_put(list, s, tok->id_len[ids[i]]));
    }
    if (!tok->has_decoder) {
        /* tokenizers joins the tokens with spaces when there is no decoder. */
        toklist joined = {0};
        mt_str *t = list_add(&joined);
        mt_status st = t ? MT_OK : mt_fail(MT_ERR_NOMEM, "decode: cannot grow the token list");
        for (size_t i = 0; i < list->n && !st; i++) {
            if (i) st = mt_str_put(t, " ", 1);
            if (!st) st = mt_str_put(t, list->v[i].s, list->v[i].len);
        }
        list_free(list);
        *list = joined;
        return st;
    }
    for (size_t k = 0; k < tok->n_dec; k++) {
        toklist next = {0};
        mt_status st = run_step(&tok->dec[k], rx, list, &next);
        list_free(list);
        *list = next;
        MT_TRY(st);
    }
    return MT_OK;
}

mt_status mt_tokenizer_decode(const mt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, char **text,
                              size_t *len) {
    *text = NULL;
    *len = 0;
    toklist list = {0};
    mt_regex_scratch rx = {0};
    mt_str out = {0};
    mt_status st = decode(tok, ids, n, skip_special, &list, &rx);
    if (!st) st = mt_str_reserve(&out, 0);
    for (size_t i = 0; i < list.n && !st; i++) st = mt_str_put(&out, list.v[i].s, list.v[i].len);
    list_free(&list);
    mt_regex_scratch_free(&rx);
    if (st) {
        mt_str_free(&out);
        return st;
    }
    *text = out.s;
    *len = out.len;
    return MT_OK;
}
