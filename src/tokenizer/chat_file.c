#include "tokenizer/chat_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_data.h"
#include "tokenizer/utf8.h"
#include "util/json_kind.h"

enum { BATCH_LINES = 1024 };

/* One example: a JSONL line's text, or a record of a JSON array (its index + 1 as `line`). */
typedef struct {
    char *text;
    json_t *record;
    size_t len, line;
    mt_ids ids;
    mt_mask mask;
    mt_status st;
    char *err; /* the message of a failed line (mt_error is per thread) */
} example;

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

/* path:line for a JSONL line, "path: record N" for a record of an array. */
static void locate(const char *path, const example *x, char *where, size_t cap) {
    snprintf(where, cap, x->record ? "%s: record %zu" : "%s:%zu", path, x->line);
}

static mt_status encode_example(const mt_tokenizer *tok, const mt_chat_template *t, mt_chat_loss loss, int analysis,
                                const char *path, example *x) {
    mt_chat_example e;
    char where[1100];
    locate(path, x, where, sizeof where);
    if (x->record) {
        json_t *record = x->record;
        x->record = NULL; /* the example's now */
        MT_TRY(mt_chat_example_read(record, where, &e));
    } else {
        MT_TRY(mt_chat_example_parse(x->text, x->len, path, x->line, &e));
    }
    mt_chat_rendered r;
    mt_status st = mt_chat_render(t, e.m, e.n, e.tools, &r);
    if (st == MT_OK) mt_chat_rendered_set_loss(&r, loss, analysis);
    if (st == MT_OK) st = mt_chat_encode(tok, &r, &x->ids, &x->mask);
    if (st != MT_OK) st = mt_fail_context(st, "%s", where);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
    return st;
}

static void free_batch(example *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(b[i].text);
        json_decref(b[i].record);
        free(b[i].err);
        mt_ids_free(&b[i].ids);
        mt_mask_free(&b[i].mask);
        b[i] = (example){0};
    }
}

/* Reads up to BATCH_LINES non-blank lines into b; *n says how many. */
static mt_status read_batch(FILE *f, const char *path, size_t *line, example *b, size_t *n) {
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    *n = 0;
    while (*n < BATCH_LINES && (len = getline(&buf, &cap, f)) != -1) {
        if (++*line == 1 && mt_utf8_bom(buf, (size_t)len)) memmove(buf, buf + 3, (size_t)(len -= 3) + 1);
        if (blank(buf, (size_t)len)) continue;
        b[*n] = (example){.text = buf, .len = (size_t)len, .line = *line};
        ++*n;
        buf = NULL;
        cap = 0;
    }
    free(buf);
    if (ferror(f)) return mt_fail(MT_ERR_IO, "%s: read failed after line %zu: %s", path, *line, strerror(errno));
    return MT_OK;
}

/* Hands the batch on in order; the first failed line ends the file. */
static mt_status deliver(example *b, size_t n, mt_chat_sink sink, void *user, mt_chat_file_stats *stats) {
    for (size_t i = 0; i < n; i++) {
        if (b[i].st != MT_OK) return mt_fail(b[i].st, "%s", b[i].err ? b[i].err : "out of memory");
        MT_TRY(sink(b[i].ids.ids, b[i].mask.v, b[i].ids.n, user));
        stats->examples++;
        stats->tokens += b[i].ids.n;
        stats->bytes += b[i].len;
        for (size_t k = 0; k < b[i].mask.n; k++) stats->trained_tokens += b[i].mask.v[k];
    }
    return MT_OK;
}

/* The file after a UTF-8 byte order mark, and its first byte that is not blank (EOF: none). */
static int first_byte(FILE *f) {
    unsigned char bom[3];
    if (fread(bom, 1, 3, f) != 3 || mt_utf8_bom((const char *)bom, 3) == 0) rewind(f);
    long at = ftell(f);
    int c;
    while ((c = fgetc(f)) != EOF && strchr(" \t\r\n", c)) continue;
    fseek(f, at, SEEK_SET);
    return c;
}

/* Whether the file, past a byte order mark, holds a JSON array of records: one that opens with
 * `[` and is not named as JSONL (whose lines are records, each refused when it is an array). */
static int holds_array(FILE *f, const char *path) {
    size_t n = strlen(path);
    int first = first_byte(f);
    return first == '[' && !(n >= 6 && !strcmp(path + n - 6, ".jsonl"));
}

/* A JSON array of records (LLaMA-Factory's .json files), read whole. */
static mt_status load_array(FILE *f, const char *path, json_t **array) {
    json_error_t err;
    *array = json_loadf(f, JSON_ALLOW_NUL, &err);
    if (!*array)
        return mt_fail(MT_ERR_INVALID, "%s: not JSON: %s (line %d, column %d)", path, err.text, err.line, err.column);
    if (json_array_size(*array) == 0) {
        json_decref(*array);
        return mt_fail(MT_ERR_INVALID, "%s: the JSON array holds no record", path);
    }
    return MT_OK;
}

/* Reads up to BATCH_LINES records of the array from *next on into b; a record's bytes are its
 * compact JSON's (for the summary). */
static void take_records(json_t *array, size_t *next, example *b, size_t *n) {
    for (*n = 0; *n < BATCH_LINES && *next < json_array_size(array); ++*n, ++*next) {
        json_t *record = json_array_get(array, *next);
        b[*n] = (example){.record = json_incref(record), .line = *next + 1,
                          .len = json_dumpb(record, NULL, 0, JSON_COMPACT)};
    }
}

static void encode_batch(const mt_tokenizer *tok, const mt_chat_template *t, mt_chat_loss loss, int analysis,
                         const char *path, example *b, size_t n) {
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t i = 0; i < n; i++) {
        b[i].st = encode_example(tok, t, loss, analysis, path, &b[i]);
        if (b[i].st != MT_OK) b[i].err = strdup(mt_error());
    }
}

mt_status mt_chat_file_encode(const mt_tokenizer *tok, const mt_chat_template *t, mt_chat_loss loss, int analysis,
                              const char *path, mt_chat_sink sink, void *user, mt_chat_file_stats *stats) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    json_t *array = NULL;
    mt_status st = holds_array(f, path) ? load_array(f, path, &array) : MT_OK;
    example *batch = st == MT_OK ? calloc(BATCH_LINES, sizeof *batch) : NULL;
    if (st == MT_OK && !batch) st = mt_fail(MT_ERR_NOMEM, "%s: cannot hold a batch of lines", path);
    size_t line = 0, n = 0;
    while (st == MT_OK) {
        if (array) take_records(array, &line, batch, &n);
        else st = read_batch(f, path, &line, batch, &n);
        if (st != MT_OK || n == 0) break;
        encode_batch(tok, t, loss, analysis, path, batch, n);
        st = deliver(batch, n, sink, user, stats);
        free_batch(batch, n);
    }
    free(batch);
    json_decref(array);
    fclose(f);
    return st;
}

/* Whether a record is a chat or instruction example; `where` names it when it is not JSON. */
static mt_status record_is_chat(const char *text, size_t len, const char *where, int *chat) {
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &err);
    if (!j) return mt_fail(MT_ERR_INVALID, "%s: not JSON: %s (column %d)", where, err.text, err.column);
    *chat = mt_jsonl_kind_of(j) != MT_JSONL_OTHER;
    json_decref(j);
    return MT_OK;
}

static mt_status array_is_chat(FILE *f, const char *path, int *chat) {
    json_t *array;
    MT_TRY(load_array(f, path, &array));
    *chat = mt_jsonl_kind_of(json_array_get(array, 0)) != MT_JSONL_OTHER;
    json_decref(array);
    if (!*chat)
        return mt_fail(MT_ERR_INVALID, "%s: a JSON array whose first record is not a chat or instruction example "
                       "(\"messages\", \"conversations\", \"instruction\" and \"output\", \"prompt\" and "
                       "\"completion\"); text documents are read from JSONL, one {\"text\": ...} a line", path);
    return MT_OK;
}

/* A file whose first line is not JSON: one JSON value over many lines is refused as what it is. */
static mt_status not_records(FILE *f, long start, const char *path) {
    char why[1024];
    snprintf(why, sizeof why, "%s", mt_error());
    fseek(f, start, SEEK_SET);
    json_error_t err;
    json_t *whole = json_loadf(f, JSON_ALLOW_NUL, &err);
    if (!whole) return mt_fail(MT_ERR_INVALID, "%s", why);
    const char *kind = mt_json_kind(whole);
    json_decref(whole);
    return mt_fail(MT_ERR_INVALID, "%s: the file is one JSON value (%s), not records: megatrain reads JSONL (one "
                   "record a line) or a JSON array of records", path, kind);
}

mt_status mt_jsonl_is_chat(const char *path, int *chat) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    *chat = 0;
    int array = holds_array(f, path);
    long start = ftell(f);
    if (array) {
        mt_status st = array_is_chat(f, path, chat);
        fclose(f);
        return st;
    }
    char *buf = NULL;
    size_t cap = 0, line = 0;
    ssize_t len;
    mt_status st = MT_OK;
    while ((len = getline(&buf, &cap, f)) != -1) {
        if (blank(buf, (size_t)len)) {
            line++;
            continue;
        }
        char where[1100];
        snprintf(where, sizeof where, "%s:%zu", path, ++line);
        st = record_is_chat(buf, (size_t)len, where, chat);
        if (st != MT_OK && line == 1) st = not_records(f, start, path);
        break;
    }
    free(buf);
    fclose(f);
    return st;
}
