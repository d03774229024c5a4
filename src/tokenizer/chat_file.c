#include "tokenizer/chat_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_data.h"
#include "tokenizer/utf8.h"

enum { BATCH_LINES = 1024 };

typedef struct {
    char *text;
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

static mt_status encode_example(const mt_tokenizer *tok, const mt_chat_template *t, mt_chat_loss loss,
                                const char *path, example *x) {
    mt_chat_example e;
    MT_TRY(mt_chat_example_parse(x->text, x->len, path, x->line, &e));
    mt_chat_rendered r;
    mt_status st = mt_chat_render(t, e.m, e.n, e.tools, &r);
    if (st == MT_OK) mt_chat_rendered_set_loss(&r, loss);
    if (st == MT_OK) st = mt_chat_encode(tok, &r, &x->ids, &x->mask);
    if (st != MT_OK) st = mt_fail_context(st, "%s:%zu", path, x->line);
    mt_chat_rendered_free(&r);
    mt_chat_example_free(&e);
    return st;
}

static void free_batch(example *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(b[i].text);
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

mt_status mt_chat_file_encode(const mt_tokenizer *tok, const mt_chat_template *t, mt_chat_loss loss,
                              const char *path, mt_chat_sink sink, void *user, mt_chat_file_stats *stats) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    example *batch = calloc(BATCH_LINES, sizeof *batch);
    mt_status st = batch ? MT_OK : mt_fail(MT_ERR_NOMEM, "%s: cannot hold a batch of lines", path);
    size_t line = 0, n = 0;
    while (st == MT_OK && (st = read_batch(f, path, &line, batch, &n)) == MT_OK && n > 0) {
#pragma omp parallel for schedule(dynamic, 4)
        for (size_t i = 0; i < n; i++) {
            batch[i].st = encode_example(tok, t, loss, path, &batch[i]);
            if (batch[i].st != MT_OK) batch[i].err = strdup(mt_error());
        }
        st = deliver(batch, n, sink, user, stats);
        free_batch(batch, n);
    }
    free(batch);
    fclose(f);
    return st;
}

mt_status mt_jsonl_is_chat(const char *path, int *chat) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, line = 0;
    ssize_t len;
    *chat = 0;
    mt_status st = MT_OK;
    while ((len = getline(&buf, &cap, f)) != -1) {
        size_t bom = ++line == 1 ? mt_utf8_bom(buf, (size_t)len) : 0;
        if (blank(buf + bom, (size_t)len - bom)) continue;
        json_error_t err;
        json_t *j = json_loadb(buf + bom, (size_t)len - bom, JSON_ALLOW_NUL, &err);
        if (!j) st = mt_fail(MT_ERR_INVALID, "%s:%zu: not JSON: %s (column %d)", path, line, err.text, err.column);
        *chat = j && mt_jsonl_kind_of(j) != MT_JSONL_OTHER;
        json_decref(j);
        break;
    }
    free(buf);
    fclose(f);
    return st;
}
