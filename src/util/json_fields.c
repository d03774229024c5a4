#include "util/json_fields.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/json_kind.h"

const json_t *mt_json_field(const mt_json_src *s, const char *key) {
    const json_t *v = json_object_get(s->obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

mt_status mt_json_wrong_type(const mt_json_src *s, const char *key, const char *expected, const json_t *v) {
    return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' must be %s, found %s", s->source, s->scope, key,
                   expected, mt_json_kind(v));
}

mt_status mt_json_missing(const mt_json_src *s, const char *key) {
    return mt_fail(MT_ERR_INVALID, "%s: required field '%s%s' is missing", s->source, s->scope, key);
}

mt_status mt_json_get_int(const mt_json_src *s, const char *key, int required, int *out) {
    const json_t *v = mt_json_field(s, key);
    if (!v) return required ? mt_json_missing(s, key) : MT_OK;
    if (!json_is_integer(v)) return mt_json_wrong_type(s, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' = %lld is out of range", s->source, s->scope,
                       key, (long long)x);
    *out = (int)x;
    return MT_OK;
}

mt_status mt_json_get_float(const mt_json_src *s, const char *key, int required, float *out) {
    const json_t *v = mt_json_field(s, key);
    if (!v) return required ? mt_json_missing(s, key) : MT_OK;
    if (!json_is_number(v)) return mt_json_wrong_type(s, key, "a number", v);
    *out = (float)json_number_value(v);
    return MT_OK;
}

mt_status mt_json_get_bool(const mt_json_src *s, const char *key, int *out) {
    const json_t *v = mt_json_field(s, key);
    if (!v) return MT_OK;
    if (!json_is_boolean(v)) return mt_json_wrong_type(s, key, "true or false", v);
    *out = json_is_true(v);
    return MT_OK;
}

mt_status mt_json_get_string(const mt_json_src *s, const char *key, const char **out) {
    const json_t *v = mt_json_field(s, key);
    if (!v) return MT_OK;
    if (!json_is_string(v)) return mt_json_wrong_type(s, key, "a string", v);
    *out = json_string_value(v);
    return MT_OK;
}

mt_status mt_json_get_token_id(const mt_json_src *s, const char *key, int *out) {
    const json_t *v = mt_json_field(s, key);
    if (v && json_is_array(v)) {
        if (json_array_size(v) == 0) return MT_OK;
        const json_t *first = json_array_get(v, 0);
        if (!json_is_integer(first)) return mt_json_wrong_type(s, key, "an integer or a list of integers", v);
        *out = (int)json_integer_value(first);
        return MT_OK;
    }
    return mt_json_get_int(s, key, 0, out);
}

json_t *mt_json_float(float x) {
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

json_t *mt_json_token_id(int id) { return id >= 0 ? json_integer(id) : json_null(); }
