#include "hf_test_files.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

void hf_test_mkdtemp(char *dir) {
    snprintf(dir, PATH_MAX, "/tmp/mt-hf-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "cannot create a scratch directory");
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

void hf_test_rmtree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

char *hf_test_path(char *out, const char *dir, const char *name) {
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
    return out;
}

void hf_test_write_raw(const char *path, unsigned long long header_len, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(header_len >> (8 * i)); /* little-endian */
    fwrite(len, 1, sizeof len, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

json_t *hf_test_nested_config(const char *text_dir) {
    char path[PATH_MAX];
    json_error_t err;
    json_t *text = json_load_file(hf_test_path(path, text_dir, "config.json"), 0, &err);
    cr_assert_not_null(text, "%s", err.text);
    json_object_del(text, "architectures");
    json_object_del(text, "torch_dtype");
    return text;
}

void hf_test_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s", path);
    fputs(text, f);
    fclose(f);
}

int hf_test_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

void hf_test_expect_same_tensors(const char *dir_a, const char *dir_b) {
    mt_safetensors *a, *b;
    cr_assert_eq(mt_safetensors_open_dir(dir_a, &a), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_open_dir(dir_b, &b), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_count(a), mt_safetensors_count(b), "%s and %s hold different tensor counts", dir_a,
                 dir_b);
    for (int i = 0; i < mt_safetensors_count(a); i++) {
        const mt_st_tensor *ta = mt_safetensors_at(a, i), *tb = mt_safetensors_find(b, ta->name);
        cr_assert_not_null(tb, "%s: no tensor %s", dir_b, ta->name);
        cr_assert(ta->dtype == tb->dtype && ta->ndim == tb->ndim && ta->nbytes == tb->nbytes, "%s differs", ta->name);
        cr_assert(!memcmp(ta->shape, tb->shape, sizeof ta->shape), "%s: shape differs", ta->name);
        cr_assert(!memcmp(ta->data, tb->data, ta->nbytes), "%s: bytes differ", ta->name);
    }
    mt_safetensors_close(a);
    mt_safetensors_close(b);
}
