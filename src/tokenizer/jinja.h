/* A Jinja interpreter for chat templates: the subset the templates on the hub use, with the
 * environment transformers compiles them in (apply_chat_template: an ImmutableSandboxedEnvironment
 * with trim_blocks, lstrip_blocks, no trailing newline kept, loop controls, {% generation %},
 * tojson as json.dumps(ensure_ascii=False), raise_exception and strftime_now).
 *
 * Values are jansson values; Jinja's undefined is NULL. A template is compiled once (syntax
 * errors, unknown filters, tests and tags refused naming the file, line and column) and rendered
 * many times, from several threads at once. */
#ifndef MT_TOKENIZER_JINJA_H
#define MT_TOKENIZER_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "util/status.h"

typedef struct mt_jinja mt_jinja;

/* Compiles `text`; `source` names the file in messages. */
mt_status mt_jinja_compile(const char *text, const char *source, mt_jinja **out);
void mt_jinja_free(mt_jinja *t);

/* What a render wrote: the text, and the byte ranges [start, end) that {% generation %} blocks
 * wrote, in order. */
typedef struct {
    char *text;
    size_t len, cap;
    size_t (*gen)[2];
    size_t n_gen, gen_cap;
} mt_jinja_output;

void mt_jinja_output_free(mt_jinja_output *o);

/* Renders with the variables of `vars` (an object) and `today` as strftime_now's date ("YYYY-MM-DD":
 * the run's fixed date, so that the same data always gives the same tokens). Fails where the
 * template raises (raise_exception's message) or evaluates something it cannot (an attribute of an
 * undefined value, a filter on the wrong type), naming the source, line and column. */
mt_status mt_jinja_render(const mt_jinja *t, const json_t *vars, const char *today, mt_jinja_output *out);

/* Whether the template has {% generation %} blocks. */
int mt_jinja_has_generation(const mt_jinja *t);

#endif
