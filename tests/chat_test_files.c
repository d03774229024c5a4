#include "chat_test_files.h"

#include <criterion/criterion.h>
#include <stdio.h>

json_t *chat_test_json(const char *path) {
    json_error_t err;
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    cr_assert_not_null(j, "%s: %s", path, err.text);
    return j;
}

void chat_test_template(const char *name, mt_chat_template *t) {
    char path[256];
    snprintf(path, sizeof path, CHAT_DATA "/%s/tokenizer_config.json", name);
    json_t *cfg = chat_test_json(path);
    mt_status st = mt_chat_template_parse(json_string_value(json_object_get(cfg, "chat_template")),
                                          json_string_value(json_object_get(cfg, "bos_token")),
                                          json_string_value(json_object_get(cfg, "eos_token")), path, t);
    json_decref(cfg);
    cr_assert_eq(st, MT_OK, "%s", mt_error());
}
