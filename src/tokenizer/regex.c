#include "tokenizer/regex.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/utf8.h"

/* Oniguruma's \s is Unicode's White_Space property; PCRE2 10.42's also matches U+180E, which
 * Unicode stopped counting as a space in 6.3. So \s and \S are spelled out as these classes
 * (the second is the first's complement, usable inside a negated class too). */
static const char WS[] = "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
static const char NON_WS[] = "\\x00-\\x08\\x0E-\\x1F\\x21-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}"
                             "\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}"
                             "\\x{3001}-\\x{10FFFF}";

typedef struct {
    char *s;
    size_t len, cap;
} buf;

static int put(buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) return -1;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

/* The pattern with \s and \S replaced as above, in and out of character classes; everything
 * else is copied. *anchors: the pattern has ^ outside a class or \G (they test where the subject
 * or the search starts). NULL when memory runs out. */
static char *rewrite_spaces(const char *p, size_t len, size_t *out_len, int *anchors) {
    buf b = {0};
    *anchors = 0;
    int in_class = 0, rc = 0;
    for (size_t i = 0; i < len && !rc;) {
        char c = p[i];
        if (c == '\\' && i + 1 < len && (p[i + 1] == 's' || p[i + 1] == 'S')) {
            const char *cls = p[i + 1] == 's' ? WS : NON_WS;
            if (in_class) rc = put(&b, cls, strlen(cls));
            else rc = put(&b, "[", 1) || put(&b, cls, strlen(cls)) || put(&b, "]", 1);
            i += 2;
            continue;
        }
        size_t n = c == '\\' && i + 1 < len ? 2 : 1;
        if (!in_class && ((c == '^') || (n == 2 && p[i + 1] == 'G'))) *anchors = 1;
        if (c == '[' && !in_class) {
            in_class = 1;
            /* A ']' first in the class (after an optional '^') is a literal. */
            if (i + 1 < len && p[i + 1] == '^') n++;
            if (i + n < len && p[i + n] == ']') n++;
        } else if (c == '[' && i + 1 < len && p[i + 1] == ':') {
            const char *end = memmem(p + i, len - i, ":]", 2);
            if (end) n = (size_t)(end - (p + i)) + 2;
        } else if (c == ']' && in_class) {
            in_class = 0;
        }
        rc = put(&b, p + i, n);
        i += n;
    }
    if (rc || !b.s) {
        free(b.s);
        return rc ? NULL : calloc(1, 1);
    }
    *out_len = b.len;
    return b.s;
}

/* The JIT stack a pattern may grow to after the default 32 KiB overflows (long runs of one
 * class with lookaheads). */
#define JIT_STACK_MAX (8u << 20)
#define BASE_MATCH_LIMIT 10000000u

mt_status mt_regex_compile(mt_regex *re, const char *pattern, size_t len, int literal, const char *what) {
    int err;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    size_t rewritten_len = len;
    int anchors = 0;
    char *rewritten = literal ? NULL : rewrite_spaces(pattern, len, &rewritten_len, &anchors);
    if (!literal && !rewritten) return mt_fail(MT_ERR_NOMEM, "%s: cannot copy a regex of %zu bytes", what, len);
    re->code = pcre2_compile((PCRE2_SPTR)(literal ? pattern : rewritten), rewritten_len, options, &err, &at, NULL);
    free(rewritten);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return mt_fail(MT_ERR_INVALID, "%s: regex /%.*s/ is not supported: %s at offset %zu", what,
                       (int)(len > 200 ? 200 : len), pattern, (const char *)msg, (size_t)at);
    }
    /* Without JIT (a build of PCRE2 without it) the interpreter gives the same matches. */
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    uint32_t behind = 0;
    pcre2_pattern_info(re->code, PCRE2_INFO_MAXLOOKBEHIND, &behind);
    re->looks_back = anchors || behind > 0;
    return MT_OK;
}

void mt_regex_free(mt_regex *re) {
    pcre2_code_free(re->code);
    re->code = NULL;
}

void mt_regex_scratch_free(mt_regex_scratch *s) {
    pcre2_match_data_free(s->match);
    pcre2_match_context_free(s->context);
    pcre2_jit_stack_free(s->stack);
    *s = (mt_regex_scratch){0};
}

static mt_status grow_stack(mt_regex_scratch *s) {
    if (s->stack) return mt_fail(MT_ERR_INVALID, "regex: the match needs more than %u bytes of stack", JIT_STACK_MAX);
    s->stack = pcre2_jit_stack_create(32 * 1024, JIT_STACK_MAX, NULL);
    if (!s->stack) return mt_fail(MT_ERR_NOMEM, "regex: cannot allocate a JIT stack");
    pcre2_jit_stack_assign(s->context, NULL, s->stack);
    return MT_OK;
}

/* The search of mt_regex_next and mt_regex_next_open; `open` matches with PCRE2_PARTIAL_HARD. */
static mt_status search(const mt_regex *re, mt_regex_scratch *s, const char *subject, size_t len, size_t start,
                        int open, int *found, size_t *ms, size_t *me, int *more) {
    *found = *more = 0;
    if (!s->match) {
        /* Only the whole match's offsets are read. */
        s->match = pcre2_match_data_create(1, NULL);
        s->context = pcre2_match_context_create(NULL);
        if (!s->match || !s->context) return mt_fail(MT_ERR_NOMEM, "regex: cannot allocate match data");
    }
    /* PCRE2's default budget (10M backtracking steps a match) is spent by one long run of spaces
     * under \s*[\r\n]+|\s+(?!\S), which backtracks over the run once per alternative: the budget
     * grows with the text, which keeps it linear and still stops a pattern that would explode. */
    uint32_t limit = len < (UINT32_MAX - BASE_MATCH_LIMIT) / 16 ? BASE_MATCH_LIMIT + 16 * (uint32_t)len : UINT32_MAX;
    pcre2_set_match_limit(s->context, limit);
    uint32_t options = PCRE2_NO_UTF_CHECK | (open ? PCRE2_PARTIAL_HARD : 0);
    while (start <= len) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, len, start, options, s->match, s->context);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            MT_TRY(grow_stack(s));
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_PARTIAL) {
            *more = 1;
            return MT_OK;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mt_fail(MT_ERR_INVALID, "regex: matching failed at byte %zu: %s", start, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->match);
        if (ov[1] > ov[0]) {
            *found = 1;
            *ms = ov[0];
            *me = ov[1];
            return MT_OK;
        }
        /* An empty match: look again from the next character. */
        if (ov[0] >= len) break;
        start = ov[0] + mt_utf8_len((unsigned char)subject[ov[0]]);
    }
    return MT_OK;
}

mt_status mt_regex_next(const mt_regex *re, mt_regex_scratch *s, const char *subject, size_t len, size_t start,
                        int *found, size_t *ms, size_t *me) {
    int more;
    return search(re, s, subject, len, start, 0, found, ms, me, &more);
}

mt_status mt_regex_next_open(const mt_regex *re, mt_regex_scratch *s, const char *subject, size_t len, size_t start,
                             int *found, size_t *ms, size_t *me, int *more) {
    return search(re, s, subject, len, start, 1, found, ms, me, more);
}
