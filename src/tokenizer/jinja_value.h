/* What the evaluator (jinja_eval.c) and the filters, tests and methods (jinja_filters.c) share:
 * the render's state, and Python's semantics over jansson values (undefined is NULL): truth,
 * str(), ==, <, and strings as sequences of code points. */
#ifndef MT_TOKENIZER_JINJA_VALUE_H
#define MT_TOKENIZER_JINJA_VALUE_H

#include <jansson.h>
#include <stddef.h>

#include "tokenizer/jinja_ast.h"

typedef struct j_frame {
    json_t *vars;
    struct j_frame *parent;
} j_frame;

typedef struct {
    const mt_jinja *t;
    mt_jinja_output *out;
    const char *today;     /* strftime_now's date, YYYY-MM-DD */
    j_frame *top;          /* the template's own variables, under which macros run */
    j_frame *scope;        /* the innermost scope: where names resolve and {% set %} binds */
    json_t *namespaces;    /* the namespace() objects made: the only values `set x.attr =` changes */
    int flow;              /* J_BREAK or J_CONTINUE while one unwinds to its loop; else 0 */
    int depth;             /* macro calls under way */
    int nest;              /* evaluations and statements under way, one inside another */
    size_t steps;          /* nodes evaluated: a template that runs away is stopped */
} j_ctx;

/* Arguments of a call or filter: v[i] (NULL: undefined), name[i] its keyword (NULL: positional). */
typedef struct {
    json_t **v;
    char **name;
    size_t n;
} j_args;

/* Fails naming the source and the line and column of byte `at`. */
mt_status j_fail(const j_ctx *c, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Appends to the output or a buffer (mt_jinja_output used as a buffer). */
mt_status j_put(mt_jinja_output *o, const char *s, size_t len);

int j_truthy(const json_t *v);
/* str(v) as Python writes it (None, True, 1.5, ['a', 1]); undefined writes nothing. */
mt_status j_str(mt_jinja_output *o, const json_t *v);
/* str(v) as a new string value. */
json_t *j_to_string(const json_t *v);
int j_is_number(const json_t *v);  /* int, float or bool, as Python's numbers */
double j_number(const json_t *v);
int j_equal(const json_t *a, const json_t *b);
/* Python's a < b for numbers, strings and lists; -2 when they cannot be ordered. */
int j_compare(const json_t *a, const json_t *b);
/* The type's name, for messages. */
const char *j_type(const json_t *v);

/* Strings as code points. */
size_t j_ulen(const char *s, size_t n);
size_t j_uoffset(const char *s, size_t n, size_t k); /* byte offset of code point k */
int j_py_space(unsigned c);
unsigned j_decode(const char *s, size_t n, size_t i, size_t *len);

/* Filters, tests, methods and global functions (jinja_filters.c). *out is a new reference (NULL:
 * undefined). `at` is where the call is, for messages. */
mt_status j_filter(j_ctx *c, size_t at, const char *name, json_t *v, const j_args *a, json_t **out);
mt_status j_test(j_ctx *c, size_t at, const char *name, const json_t *v, const j_args *a, int *out);
/* A method of a string or dict (startswith, items, get, ...): *found 0 when the value has none of
 * that name. */
mt_status j_method(j_ctx *c, size_t at, const json_t *obj, const char *name, const j_args *a, int *found,
                   json_t **out);
/* range, namespace, dict, raise_exception, strftime_now: *found 0 for another name. */
mt_status j_global(j_ctx *c, size_t at, const char *name, const j_args *a, int *found, json_t **out);

#endif
