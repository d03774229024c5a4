/* A chat template's Jinja source as the token stream Jinja renders from: what the interpreter's
 * parser reads (tokenizer/jinja.h), and what known templates are compared by
 * (tokenizer/chat_known.h): two templates with equal streams render the same text for every input.
 *
 * Lexed as transformers sets Jinja up (trim_blocks, lstrip_blocks, no trailing newline kept):
 * line ends become "\n"; each run of text between tags becomes one DATA token holding the text
 * Jinja outputs for it, after the tags' whitespace control ({%- -%} {{- -}}), trim_blocks and
 * lstrip_blocks; comments vanish; inside a tag, whitespace separates tokens and means nothing, and
 * a string literal is its value (so 'a\n' and "a<newline>" are the same token). */
#ifndef MT_TOKENIZER_JINJA_LEX_H
#define MT_TOKENIZER_JINJA_LEX_H

#include <stddef.h>

#include "util/status.h"

typedef enum {
    MT_JT_DATA,   /* text output as it stands */
    MT_JT_BLOCK,  /* {% */
    MT_JT_VAR,    /* {{ */
    MT_JT_END,    /* %} or }} */
    MT_JT_NAME,
    MT_JT_STRING, /* value: the literal's decoded text */
    MT_JT_NUMBER,
    MT_JT_OP
} mt_jinja_kind;

typedef struct {
    mt_jinja_kind kind;
    char *value;          /* NUL-terminated (a value may also hold NUL: use len) */
    size_t len;
    size_t at, src_len;   /* where the token's source text is (in the normalised source) */
} mt_jinja_token;

typedef struct {
    mt_jinja_token *t;
    size_t n, cap;
    char *src;            /* the source with line ends made "\n", which `at` points into */
    size_t src_len;
} mt_jinja_tokens;

/* Lexes `text`. Fails on a tag or string that is never closed, naming `source` and the line. */
mt_status mt_jinja_lex(const char *text, const char *source, mt_jinja_tokens *out);
void mt_jinja_tokens_free(mt_jinja_tokens *t);

/* The 1-based line and column of byte `at` of the lexed source. */
void mt_jinja_position(const mt_jinja_tokens *t, size_t at, size_t *line, size_t *column);

#endif
