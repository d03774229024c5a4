#include "hf_test_files.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
