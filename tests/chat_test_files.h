/* Test helper for the chat tests: the templates and cases of tests/data/chat. */
#ifndef MT_TESTS_CHAT_TEST_FILES_H
#define MT_TESTS_CHAT_TEST_FILES_H

#include <jansson.h>

#include "tokenizer/chat_template.h"

#define CHAT_DATA "tests/data/chat"

/* A JSON file (big integers such as model_max_length read as reals); the test fails when it
 * cannot be read. */
json_t *chat_test_json(const char *path);
/* The recognised template of tests/data/chat/<name>: its chat_template.jinja where it has one (it
 * wins, as in transformers), else tokenizer_config.json's chat_template; bos and eos from the latter. */
void chat_test_template(const char *name, mt_chat_template *t);
/* The rendered text with each trainable run between ⟦ and ⟧ (malloc'd). */
char *chat_test_marked(const mt_chat_rendered *r);

#endif
