/* The regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers and
 * decoders) through PCRE2, in UTF mode with Unicode properties (\p{L}, \p{N}, \s as Unicode
 * defines them) and JIT-compiled. Patterns in tokenizer.json are Oniguruma syntax, which PCRE2
 * reads the same for everything these tokenizers use. */
#ifndef MT_TOKENIZER_REGEX_H
#define MT_TOKENIZER_REGEX_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>

#include "util/status.h"

typedef struct {
    pcre2_code *code;
    int looks_back; /* a lookbehind, \b, \B, \A, \G or ^: matches depend on text before the start */
} mt_regex;

/* What one thread needs to run matches: match data and, when a pattern needs more than the
 * default, a larger JIT stack. Zero-initialize; mt_regex_scratch_free releases it. */
typedef struct {
    pcre2_match_data *match;
    pcre2_match_context *context;
    pcre2_jit_stack *stack;
} mt_regex_scratch;

/* Compiles `pattern` (len bytes); `literal` matches it as a plain string. `what` names the file
 * and component for the error message. */
mt_status mt_regex_compile(mt_regex *re, const char *pattern, size_t len, int literal, const char *what);
void mt_regex_free(mt_regex *re);
void mt_regex_scratch_free(mt_regex_scratch *s);

/* The first non-empty match at or after byte `start` of subject[0, len) (valid UTF-8; the whole
 * subject is visible to lookarounds). Sets *found to 0 when none; [*ms, *me) otherwise. Empty
 * matches are stepped over one character at a time, as Oniguruma's find_iter does. */
mt_status mt_regex_next(const mt_regex *re, mt_regex_scratch *s, const char *subject, size_t len, size_t start,
                        int *found, size_t *ms, size_t *me);

/* As mt_regex_next for a subject that goes on past `len` with text not given here: *more is set
 * (and *found is 0) when the answer could depend on that text (PCRE2's hard partial match: a
 * match, or a lookahead, reached the end of the subject). */
mt_status mt_regex_next_open(const mt_regex *re, mt_regex_scratch *s, const char *subject, size_t len, size_t start,
                             int *found, size_t *ms, size_t *me, int *more);

#endif
