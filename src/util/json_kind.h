/* The JSON type of a value in words ("an object", "a string", ...), for error messages about
 * files users bring. */
#ifndef MT_UTIL_JSON_KIND_H
#define MT_UTIL_JSON_KIND_H

#include <jansson.h>

const char *mt_json_kind(const json_t *v);

#endif
