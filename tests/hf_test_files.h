/* Test helper for the Hugging Face and safetensors tests: scratch directories and raw files. */
#ifndef MT_TESTS_HF_TEST_FILES_H
#define MT_TESTS_HF_TEST_FILES_H

#include <jansson.h>
#include <stddef.h>

/* Creates a fresh directory under /tmp; `dir` receives its path (PATH_MAX bytes). */
void hf_test_mkdtemp(char *dir);
/* Removes a scratch directory and everything below it. */
void hf_test_rmtree(const char *dir);
/* Joins dir and name into out (PATH_MAX bytes) and returns out. */
char *hf_test_path(char *out, const char *dir, const char *name);
/* Writes a safetensors file by hand: the 8-byte length `header_len` (which a test may make lie),
 * the header text, then `data_len` bytes of zeros. */
void hf_test_write_raw(const char *path, unsigned long long header_len, const char *header, size_t data_len);
/* The config.json of the text model exported to text_dir as a wrapper nests it under text_config:
 * its architectures and dtype left out, as the hub's nested configs do. */
json_t *hf_test_nested_config(const char *text_dir);
/* Writes a text file. */
void hf_test_write_text(const char *path, const char *text);
/* Number of entries in a directory, -1 when it does not exist. */
int hf_test_count_entries(const char *dir);
/* Asserts that two model directories hold the same safetensors tensors: names, dtypes, shapes and
 * bytes, however they are sharded or ordered. */
void hf_test_expect_same_tensors(const char *dir_a, const char *dir_b);

#endif
