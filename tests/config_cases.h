/* Test helper: config.json texts parsed as megatrain reads a model directory's, and variants of
 * them with one field changed (the hfconfig suites). */
#ifndef MT_TESTS_CONFIG_CASES_H
#define MT_TESTS_CONFIG_CASES_H

#include "model/config.h"

/* text parsed as a file named config.json. */
mt_status cfg_case_parse(const char *text, mt_config *cfg);
/* `base` with `key` set to `value` (a JSON literal), or removed when value is NULL; free it. */
char *cfg_case_with_field(const char *base, const char *key, const char *value);
/* That variant parsed. */
mt_status cfg_case_parse_variant(const char *base, const char *key, const char *value, mt_config *cfg);
/* Asserts that text reads as the preset's config, field for field, and that written back
 * (mt_hf_config_to_json) it reads the same. */
void cfg_case_expect_preset(const char *text, const char *preset);
/* Asserts that the variant is refused, the message naming config.json and holding `needle`. */
void cfg_case_expect_refusal(const char *base, const char *key, const char *value, const char *needle);

#endif
