#include "tokenizer/input_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/foreign_format.h"
#include "util/fs.h"
#include "util/log.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static mt_status add(mt_input_list *l, const char *path) {
    MT_TRY(mt_refuse_foreign_format(path));
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        mt_input_file *v = realloc(l->v, cap * sizeof *v);
        if (!v) return mt_fail(MT_ERR_NOMEM, "inputs: cannot grow the file list");
        l->v = v;
        l->cap = cap;
    }
    char *copy = strdup(path);
    if (!copy) return mt_fail(MT_ERR_NOMEM, "inputs: cannot copy a path");
    l->v[l->n++] = (mt_input_file){copy, ends_with(path, ".jsonl") || ends_with(path, ".json")};
    return MT_OK;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const mt_input_file *)a)->path, ((const mt_input_file *)b)->path);
}

static int wanted(const char *path) {
    return ends_with(path, ".txt") || ends_with(path, ".text") || ends_with(path, ".md") || ends_with(path, ".jsonl");
}

/* What a directory's walk passed over, said once it is done. */
typedef struct {
    size_t count;
    char example[256];
} passed;

static void pass_over(passed *p, const char *path) {
    if (!p->count++) snprintf(p->example, sizeof p->example, "%s", path);
}

static mt_status walk(mt_input_list *l, const char *dir, passed *p) {
    DIR *d = opendir(dir);
    if (!d) return mt_fail(MT_ERR_IO, "%s: cannot read the directory: %s", dir, strerror(errno));
    mt_status st = MT_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *path;
        if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
            st = mt_fail(MT_ERR_NOMEM, "inputs: cannot copy a path");
            break;
        }
        struct stat ls, s;
        if (e->d_name[0] == '.') {
            pass_over(p, path); /* hidden */
        } else if (lstat(path, &ls) != 0) {
            st = mt_fail(MT_ERR_IO, "%s: %s", path, strerror(errno));
        } else if (stat(path, &s) != 0) {
            /* A link to nothing: a file the user meant to give that is not there. */
            char target[PATH_MAX] = "?";
            ssize_t n = readlink(path, target, sizeof target - 1);
            if (n >= 0) target[n] = '\0';
            st = mt_fail(MT_ERR_IO, "%s: a link to %s, which %s", path, target,
                         errno == ENOENT ? "does not exist" : strerror(errno));
        } else if (S_ISDIR(s.st_mode)) {
            if (S_ISLNK(ls.st_mode)) pass_over(p, path); /* a link to a directory: never followed (loops) */
            else st = walk(l, path, p);
        } else if (!wanted(path)) {
            pass_over(p, path);
        } else if (!S_ISREG(s.st_mode)) {
            st = mt_fail(MT_ERR_INVALID, "%s: an input must be a regular file, not %s", path, mt_file_kind(s.st_mode));
        } else {
            st = add(l, path);
        }
        free(path);
    }
    closedir(d);
    return st;
}

mt_status mt_input_files_collect(const char *const *paths, size_t n, mt_input_list *out) {
    *out = (mt_input_list){0};
    mt_status st = MT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        struct stat s;
        if (stat(paths[i], &s) != 0) {
            st = mt_fail(MT_ERR_IO, "%s: %s", paths[i], strerror(errno));
        } else if (S_ISDIR(s.st_mode)) {
            size_t first = out->n;
            passed p = {0};
            st = walk(out, paths[i], &p);
            if (!st && out->n > first) qsort(out->v + first, out->n - first, sizeof *out->v, by_path);
            else if (!st)
                st = mt_fail(MT_ERR_INVALID, "%s: no .txt, .text, .md or .jsonl files in the directory", paths[i]);
            if (!st && p.count)
                mt_log_info("%s: %zu entr%s passed over: hidden, links to directories, or not .txt, .text, .md or "
                            ".jsonl (%s%s)", paths[i], p.count, p.count == 1 ? "y" : "ies", p.example,
                            p.count > 1 ? ", ..." : "");
        } else if (!S_ISREG(s.st_mode)) {
            st = mt_fail(MT_ERR_INVALID, "%s: an input must be a regular file or a directory, not %s", paths[i],
                         mt_file_kind(s.st_mode));
        } else {
            st = add(out, paths[i]);
        }
    }
    if (!st && out->n == 0) st = mt_fail(MT_ERR_INVALID, "tokenize: no input files");
    if (st) mt_input_files_free(out);
    return st;
}

void mt_input_files_free(mt_input_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].path);
    free(l->v);
    *l = (mt_input_list){0};
}
