/* Applying one pre-tokenizer step to one piece of text (encode.c runs the steps in turn). */
#ifndef MT_TOKENIZER_PRE_TOKENIZER_H
#define MT_TOKENIZER_PRE_TOKENIZER_H

#include "tokenizer/internal.h"

typedef struct {
    size_t start, end;
    int is_match;
} mt_span;

typedef struct {
    mt_span *v;
    size_t n, cap;
} mt_spans;

void mt_spans_free(mt_spans *sp);

/* Splits s[0, len) as `step` does: *text is the text the spans index (s itself, or `buf` when the
 * step rewrites it: Metaspace's meta characters, ByteLevel's prefix space), `spans` its pieces in
 * order, none empty. `at_start`: the piece starts the input (Metaspace's prepend_scheme first). */
mt_status mt_pre_apply(const mt_pre_step *step, mt_regex_scratch *rx, const char *s, size_t len, int at_start,
                       mt_str *buf, const char **text, size_t *text_len, mt_spans *spans);

/* Metaspace's prepend_scheme (or the older add_prefix_space), shared with the Metaspace decoder. */
mt_status mt_prepend_parse(const json_t *spec, const char *what, mt_prepend_scheme *out);

#endif
