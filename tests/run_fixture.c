#include "run_fixture.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_test_files.h"

void mt_test_write_corpus(const char *path) {
    static const char *const words[] = {"the", "lord", "said", "unto", "moses", "and", "it", "was",
                                        "good", "light", "of", "day", "in", "beginning", "earth"};
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s", path);
    uint32_t state = 12345;
    for (long written = 0; written < 20000;) {
        state = state * 1664525u + 1013904223u;
        written += fprintf(f, "%s%s", words[(state >> 16) % 15], (state >> 8) % 11 ? " " : ".\n");
    }
    cr_assert_eq(fclose(f), 0, "cannot write %s", path);
}

void mt_test_make_run_dirs(char *dir, char *corpus, char *run) {
    hf_test_mkdtemp(dir);
    mt_test_write_corpus(hf_test_path(corpus, dir, "corpus.txt"));
    hf_test_path(run, dir, "run");
}

static char *slurp(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    rewind(f);
    char *data = malloc((size_t)*size + 1);
    cr_assert_not_null(data);
    cr_assert_eq(fread(data, 1, (size_t)*size, f), (size_t)*size, "cannot read %s", path);
    fclose(f);
    return data;
}

int mt_test_files_equal(const char *a, const char *b) {
    long na, nb;
    char *da = slurp(a, &na), *db = slurp(b, &nb);
    int equal = na == nb && !memcmp(da, db, (size_t)na);
    free(da);
    free(db);
    return equal;
}

const char *mt_test_blob(const char *run, int step, const char *name) {
    static char paths[8][PATH_MAX];
    static int next;
    char *p = paths[next++ % 8];
    int n = snprintf(p, PATH_MAX, "%s/ckpt-%06d/%s.bin", run, step, name);
    cr_assert(n > 0 && n < PATH_MAX, "path too long under %s", run);
    return p;
}

const char *mt_test_state_differs(const char *run_a, const char *run_b, int step) {
    static const char *const blobs[] = {"master", "adam_m", "adam_v"};
    for (int i = 0; i < 3; i++) {
        char a[PATH_MAX];
        snprintf(a, sizeof a, "%s", mt_test_blob(run_a, step, blobs[i]));
        if (!mt_test_files_equal(a, mt_test_blob(run_b, step, blobs[i]))) return blobs[i];
    }
    return NULL;
}

int mt_test_exists(const char *path) { return access(path, F_OK) == 0; }

const char *mt_test_in(const char *dir, const char *name) {
    static char paths[16][PATH_MAX];
    static int next;
    return hf_test_path(paths[next++ % 16], dir, name);
}
