/* Test helper for the tokenizer tests: the reference tokenizers of tests/data/tokenizers (the big
 * ones unpacked by `make tokenizer-data` into $MT_TOKENIZER_DATA, default build/tokenizers), the
 * corpus files, and small tokenizer.json files written by the tests. */
#ifndef MT_TESTS_TOKENIZER_FILES_H
#define MT_TESTS_TOKENIZER_FILES_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* The directory holding reference tokenizer `name`'s tokenizer.json (static storage); the test
 * fails with a hint when it is missing. */
const char *tok_test_dir(const char *name);
/* Loads reference tokenizer `name`; the test fails with mt_error() when it cannot. */
mt_tokenizer *tok_test_load(const char *name);
/* The whole file, NUL-terminated (malloc'd); the test fails when it cannot be read. */
char *tok_test_read(const char *path, size_t *len);
/* tests/data/tokenizers/corpus/<file> (static storage). */
const char *tok_test_corpus(const char *file);
/* Writes `json` as dir/tokenizer.json and loads it: the status, and *tok on success. */
mt_status tok_test_load_json(const char *dir, const char *json, mt_tokenizer **tok);
/* Encodes text (NUL-terminated) with special tokens matched; the test fails on an error. */
mt_ids tok_test_encode(const mt_tokenizer *tok, const char *text);
/* Decodes ids; the test fails on an error. Returns a malloc'd string. */
char *tok_test_decode(const mt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special);

#endif
