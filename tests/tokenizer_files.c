#include "tokenizer_files.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DATA "tests/data/tokenizers"

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

const char *tok_test_dir(const char *name) {
    static char dir[PATH_MAX];
    char file[PATH_MAX + 32];
    snprintf(dir, sizeof dir, DATA "/%s", name);
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    if (exists(file)) return dir;
    const char *unpacked = getenv("MT_TOKENIZER_DATA");
    snprintf(dir, sizeof dir, "%s/%s", unpacked ? unpacked : "build/tokenizers", name);
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    cr_assert(exists(file), "%s is missing: run `make tokenizer-data` (or set MT_TOKENIZER_DATA)", file);
    return dir;
}

mt_tokenizer *tok_test_load(const char *name) {
    mt_tokenizer *tok = NULL;
    cr_assert_eq(mt_tokenizer_load(tok_test_dir(name), &tok), MT_OK, "loading %s: %s", name, mt_error());
    return tok;
}

char *tok_test_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "cannot read %s", path);
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

const char *tok_test_corpus(const char *file) {
    static char path[PATH_MAX];
    snprintf(path, sizeof path, DATA "/corpus/%s", file);
    return path;
}

mt_status tok_test_load_json(const char *dir, const char *json, mt_tokenizer **tok) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(json, f);
    fclose(f);
    *tok = NULL;
    return mt_tokenizer_load(path, tok);
}

mt_ids tok_test_encode(const mt_tokenizer *tok, const char *text) {
    mt_ids ids = {0};
    cr_assert_eq(mt_tokenizer_encode(tok, text, strlen(text), 1, &ids), MT_OK, "encoding \"%s\": %s", text,
                 mt_error());
    return ids;
}

char *tok_test_decode(const mt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special) {
    char *text;
    size_t len;
    cr_assert_eq(mt_tokenizer_decode(tok, ids, n, skip_special, &text, &len), MT_OK, "decoding: %s", mt_error());
    cr_assert_eq(strlen(text), len);
    return text;
}
