/* Normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Prepend, Replace, and Sequences of them. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/internal.h"
#include "tokenizer/utf8.h"

static const char supported[] = "NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence";

static void free_step(mt_norm_step *step) {
    mt_regex_free(&step->pattern);
    free(step->text);
}

static mt_status add_step(mt_tokenizer *tok, const json_t *spec, const char *type, const char *what) {
    mt_norm_step step = {0};
    if (!strcmp(type, "NFC")) step.kind = NORM_NFC;
    else if (!strcmp(type, "NFD")) step.kind = NORM_NFD;
    else if (!strcmp(type, "NFKC")) step.kind = NORM_NFKC;
    else if (!strcmp(type, "NFKD")) step.kind = NORM_NFKD;
    else if (!strcmp(type, "Prepend")) step.kind = NORM_PREPEND;
    else if (!strcmp(type, "Replace")) step.kind = NORM_REPLACE;
    else
        return mt_fail(MT_ERR_INVALID, "%s: normalizer '%s' is not supported (supported: %s)", what, type,
                       supported);
    const char *text = NULL;
    mt_status st = MT_OK;
    if (step.kind == NORM_PREPEND) st = mt_json_string(spec, "prepend", 1, what, &text);
    if (step.kind == NORM_REPLACE) st = mt_json_string(spec, "content", 1, what, &text);
    if (!st && step.kind == NORM_REPLACE) st = mt_json_pattern(spec, "pattern", what, &step.pattern, &step.empty_pattern);
    if (!st && step.kind == NORM_REPLACE) {
        const char *one = json_string_value(json_object_get(json_object_get(spec, "pattern"), "String"));
        size_t cp_len = 0;
        if (one && *one) mt_utf8_decode(one, strlen(one), &cp_len);
        if (one && *one && cp_len == strlen(one)) memcpy(step.one_char, one, cp_len + 1);
    }
    if (!st && text && !(step.text = strdup(text))) st = mt_fail(MT_ERR_NOMEM, "%s: cannot copy a normalizer", what);
    step.text_len = text ? strlen(text) : 0;
    if (!st) st = mt_array_append(&tok->norm, &tok->n_norm, sizeof step, &step, what);
    if (st) free_step(&step);
    return st;
}

mt_status mt_norm_parse(mt_tokenizer *tok, const json_t *spec) {
    if (!spec || json_is_null(spec)) return MT_OK;
    char what[600];
    snprintf(what, sizeof what, "%s: normalizer", tok->path);
    return mt_json_steps(tok, spec, "normalizer", "normalizers", what, add_step);
}

void mt_norm_free(mt_tokenizer *tok) {
    for (size_t i = 0; i < tok->n_norm; i++) free_step(&tok->norm[i]);
    free(tok->norm);
    tok->norm = NULL;
    tok->n_norm = 0;
}

static int ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

static mt_status unicode_form(mt_norm_kind kind, const char *s, size_t len, mt_str *out) {
    int options = UTF8PROC_STABLE;
    if (kind == NORM_NFC || kind == NORM_NFKC) options |= UTF8PROC_COMPOSE;
    else options |= UTF8PROC_DECOMPOSE;
    if (kind == NORM_NFKC || kind == NORM_NFKD) options |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *result = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &result, options);
    if (n < 0) return mt_fail(MT_ERR_INVALID, "normalizer: %s", utf8proc_errmsg(n));
    out->len = 0;
    mt_status st = mt_str_put(out, (const char *)result, (size_t)n);
    free(result);
    return st;
}

/* Every non-overlapping match of the step's pattern replaced with its text. */
static mt_status replace(const mt_norm_step *step, mt_regex_scratch *rx, const char *s, size_t len, mt_str *out) {
    out->len = 0;
    MT_TRY(mt_str_reserve(out, len));
    size_t pos = 0;
    while (!step->empty_pattern) {
        int found;
        size_t ms, me;
        MT_TRY(mt_regex_next(&step->pattern, rx, s, len, pos, &found, &ms, &me));
        if (!found) break;
        MT_TRY(mt_str_put(out, s + pos, ms - pos));
        MT_TRY(mt_str_put(out, step->text, step->text_len));
        pos = me;
    }
    return mt_str_put(out, s + pos, len - pos);
}

mt_status mt_norm_apply(const mt_tokenizer *tok, mt_regex_scratch *rx, const char *s, size_t len, int cont,
                        mt_str buf[2], const char **out, size_t *out_len) {
    int next = 0;
    for (size_t i = 0; i < tok->n_norm; i++) {
        const mt_norm_step *step = &tok->norm[i];
        mt_str *dst = &buf[next];
        switch (step->kind) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD:
            if (ascii(s, len)) continue; /* every form leaves ASCII as it is */
            MT_TRY(unicode_form(step->kind, s, len, dst));
            break;
        case NORM_PREPEND:
            if (len == 0 || cont) continue;
            dst->len = 0;
            MT_TRY(mt_str_put(dst, step->text, step->text_len));
            MT_TRY(mt_str_put(dst, s, len));
            break;
        case NORM_REPLACE:
            MT_TRY(replace(step, rx, s, len, dst));
            break;
        }
        s = dst->s;
        len = dst->len;
        next ^= 1;
    }
    *out = s;
    *out_len = len;
    return MT_OK;
}
