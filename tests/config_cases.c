#include "config_cases.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"

mt_status cfg_case_parse(const char *text, mt_config *cfg) {
    return mt_hf_config_parse(text, strlen(text), "config.json", cfg);
}

char *cfg_case_with_field(const char *base, const char *key, const char *value) {
    json_t *root = json_loads(base, 0, NULL);
    cr_assert_not_null(root);
    if (value) json_object_set_new(root, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else json_object_del(root, key);
    char *text = json_dumps(root, 0);
    json_decref(root);
    return text;
}

mt_status cfg_case_parse_variant(const char *base, const char *key, const char *value, mt_config *cfg) {
    char *text = cfg_case_with_field(base, key, value);
    mt_status st = cfg_case_parse(text, cfg);
    free(text);
    return st;
}

void cfg_case_expect_refusal(const char *base, const char *key, const char *value, const char *needle) {
    mt_config cfg;
    cr_assert_eq(cfg_case_parse_variant(base, key, value, &cfg), MT_ERR_INVALID, "%s = %s was accepted", key,
                 value ? value : "(absent)");
    cr_assert(strstr(mt_error(), "config.json"), "message lacks the file: %s", mt_error());
    cr_assert(strstr(mt_error(), needle), "message lacks '%s': %s", needle, mt_error());
}

void cfg_case_expect_preset(const char *text, const char *preset) {
    mt_config c, want;
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "%s: %s", preset, mt_error());
    cr_assert_eq(mt_config_preset(preset, &want), MT_OK);
    cr_expect(!memcmp(&c, &want, sizeof c), "the hub's config.json differs from the %s preset", preset);
    /* and written back, it reads the same */
    json_t *doc = mt_hf_config_to_json(&c, "bfloat16");
    mt_config back;
    cr_assert_eq(mt_hf_config_from_json(doc, "written", &back), MT_OK, "%s: %s", preset, mt_error());
    cr_expect(!memcmp(&c, &back, sizeof c), "%s's config.json written back reads otherwise", preset);
    json_decref(doc);
}
