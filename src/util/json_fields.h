/* Reading the fields of a JSON object users bring (config.json), with messages that name the
 * source and the field: "<source>: field '<scope><key>' ...". An absent field and a null one are
 * the same (transformers treats both as "unset"). */
#ifndef MT_UTIL_JSON_FIELDS_H
#define MT_UTIL_JSON_FIELDS_H

#include <jansson.h>

#include "util/status.h"

typedef struct {
    const char *source;
    const json_t *obj;
    const char *scope; /* "" at the top level, "rope_scaling." inside it */
} mt_json_src;

/* The value of `key`, or NULL when it is absent or null. */
const json_t *mt_json_field(const mt_json_src *s, const char *key);
mt_status mt_json_wrong_type(const mt_json_src *s, const char *key, const char *expected, const json_t *v);
mt_status mt_json_missing(const mt_json_src *s, const char *key);

/* Each reads `key` into `out`; an absent field is an error when `required`, else leaves `out`. */
mt_status mt_json_get_int(const mt_json_src *s, const char *key, int required, int *out);
mt_status mt_json_get_float(const mt_json_src *s, const char *key, int required, float *out);
mt_status mt_json_get_bool(const mt_json_src *s, const char *key, int *out);
mt_status mt_json_get_string(const mt_json_src *s, const char *key, const char **out);
/* A token id: an integer or a list of them (Llama 3 instruct's eos_token_id); the first is kept. */
mt_status mt_json_get_token_id(const mt_json_src *s, const char *key, int *out);

/* The float as the shortest decimal that reads back to it, so 1e-5f is written "1e-05" and
 * not "9.9999997473787516e-06": Python then reads the value the original held. */
json_t *mt_json_float(float x);
/* A token id, or null when it is -1 (absent). */
json_t *mt_json_token_id(int id);

#endif
