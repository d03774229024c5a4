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

/* The text that follows a piece cut at the end of a part of a document (see cut.c), and what the
 * step makes of the cut. */
typedef struct {
    const char *s;     /* the piece's text after the cut, as far as it is known */
    size_t len;
    int open;          /* the piece goes on past s[len) */
    int boundary;      /* out: the cut falls between two of the step's pieces */
    int need_more;     /* out: deciding needs more of the text after the cut */
    const char *next;  /* out: that text as the step rewrites it (Metaspace) */
    size_t next_len;
} mt_pre_more;

/* Splits s[0, len) as `step` does: *text is the text the spans index (s itself, or `buf` when the
 * step rewrites it: Metaspace's meta characters, ByteLevel's prefix space), `spans` its pieces in
 * order, none empty. `at_start`: the piece starts the input (Metaspace's prepend_scheme first).
 * `cont`: s continues a piece cut before it, so no prefix (Metaspace's, ByteLevel's) is written.
 * `more` (NULL when s ends its piece): s is cut from the text in `more`, which lookaheads see; the
 * spans are those of s's part of the whole piece and more->boundary says whether the cut is exact. */
mt_status mt_pre_apply(const mt_pre_step *step, mt_regex_scratch *rx, const char *s, size_t len, int at_start,
                       int cont, mt_pre_more *more, mt_str *buf, const char **text, size_t *text_len,
                       mt_spans *spans);

/* Metaspace's prepend_scheme (or the older add_prefix_space), shared with the Metaspace decoder. */
mt_status mt_prepend_parse(const json_t *spec, const char *what, mt_prepend_scheme *out);

#endif
