#include "chat_test_files.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"

json_t *chat_test_json(const char *path) {
    json_error_t err;
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    cr_assert_not_null(j, "%s: %s", path, err.text);
    return j;
}

void chat_test_template(const char *name, mt_chat_template *t) {
    char path[256], jinja[256];
    snprintf(path, sizeof path, CHAT_DATA "/%s/tokenizer_config.json", name);
    snprintf(jinja, sizeof jinja, CHAT_DATA "/%s/chat_template.jinja", name);
    json_t *cfg = chat_test_json(path);
    char *file = NULL;
    if (access(jinja, F_OK) == 0) cr_assert_eq(mt_chat_template_read(jinja, &file), MT_OK, "%s", mt_error());
    mt_status st = mt_chat_template_parse(file ? file : json_string_value(json_object_get(cfg, "chat_template")),
                                          json_string_value(json_object_get(cfg, "bos_token")),
                                          json_string_value(json_object_get(cfg, "eos_token")), file ? jinja : path, t);
    free(file);
    json_decref(cfg);
    cr_assert_eq(st, MT_OK, "%s", mt_error());
}

char *chat_test_marked(const mt_chat_rendered *r) {
    size_t cap = 16;
    for (size_t i = 0; i < r->n; i++) cap += r->seg[i].len + 8;
    char *out = calloc(1, cap);
    int open = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->seg[i].trainable != open) strcat(out, open ? "⟧" : "⟦");
        open = r->seg[i].trainable;
        strncat(out, r->seg[i].text, r->seg[i].len);
    }
    if (open) strcat(out, "⟧");
    return out;
}
