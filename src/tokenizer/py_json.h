/* JSON text as Python's json.dumps writes it, which transformers' chat templates use for their
 * `tojson` filter (json.dumps(x, ensure_ascii=False, indent=indent), and its other arguments with
 * mt_py_json_dumps_with): ", " and ": " between items
 * (",", ": " with an indent), keys in the order they came, non-ASCII kept, floats as Python's
 * repr (1500.0, 1e-05, 1e+16). */
#ifndef MT_TOKENIZER_PY_JSON_H
#define MT_TOKENIZER_PY_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "util/status.h"

/* Writes v into a new NUL-terminated string *out (free it), *len bytes; indent < 0 for none. */
mt_status mt_py_json_dumps(const json_t *v, int indent, char **out, size_t *len);

/* json.dumps's other arguments, as transformers' tojson filter passes them: separators (NULL:
 * Python's defaults for the indent), sort_keys, ensure_ascii (non-ASCII as \uXXXX escapes). */
typedef struct {
    int indent;
    const char *item_sep, *key_sep;
    int sort_keys, ensure_ascii;
} mt_py_json_options;

mt_status mt_py_json_dumps_with(const json_t *v, const mt_py_json_options *o, char **out, size_t *len);

#endif
