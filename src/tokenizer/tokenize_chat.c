#include "tokenizer/tokenize_chat.h"

#include <errno.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/masked_tokens.h"
#include "tokenizer/chat_file.h"
#include "tokenizer/input_files.h"
#include "tokenizer/shard_prefix.h"
#include "tokenizer/shard_writer.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/stop_signal.h"

mt_status mt_tokenize_inputs_are_chat(const char *const *inputs, size_t n, int *chat) {
    mt_input_list files = {0};
    MT_TRY(mt_input_files_collect(inputs, n, &files));
    const char *a_chat = NULL, *other = NULL;
    mt_status st = MT_OK;
    for (size_t i = 0; i < files.n && st == MT_OK; i++) {
        int is_chat = 0;
        if (files.v[i].records) st = mt_jsonl_is_chat(files.v[i].path, &is_chat);
        if (is_chat && !a_chat) a_chat = files.v[i].path;
        if (!is_chat && !other) other = files.v[i].path;
    }
    if (st == MT_OK && a_chat && other)
        st = mt_fail(MT_ERR_INVALID, "%s holds chat data (\"messages\", \"prompt\"/\"completion\", \"instruction\"/\"output\" or "
                     "\"conversations\") but %s does not: "
                     "tokenize chat and text data separately", a_chat, other);
    *chat = a_chat != NULL;
    mt_input_files_free(&files);
    return st;
}

mt_status mt_tokenizer_chat(const mt_tokenizer *tok, const char *file, mt_chat_template *t) {
    int32_t bos = mt_tokenizer_bos(tok), eos = mt_tokenizer_eos(tok);
    const char *bos_text = bos >= 0 ? mt_tokenizer_token(tok, bos) : NULL, *eos_text = eos >= 0 ? mt_tokenizer_token(tok, eos) : NULL;
    if (file) {
        char *text;
        MT_TRY(mt_chat_template_read(file, &text));
        mt_status st = mt_chat_template_parse(text, bos_text, eos_text, file, t);
        free(text);
        return st;
    }
    const char *source = mt_tokenizer_chat_template_source(tok);
    char config[PATH_MAX];
    if (!source) { /* none: the message names where it was looked for */
        const char *json = mt_tokenizer_path(tok), *slash = strrchr(json, '/');
        snprintf(config, sizeof config, "%.*stokenizer_config.json", slash ? (int)(slash - json + 1) : 0, json);
        source = config;
    }
    if (mt_tokenizer_chat_template_names(tok))
        return mt_fail(MT_ERR_INVALID, "%s: chat_template is a list of named templates (%s), none named \"default\": "
                       "chat data is rendered with the one named \"default\"; name the one to use so", source,
                       mt_tokenizer_chat_template_names(tok));
    return mt_chat_template_parse(mt_tokenizer_chat_template(tok), bos_text, eos_text, source, t);
}

/* ---- masked shards in a series, renamed into place together ---- */

typedef struct {
    const char *prefix;
    int width;
    int64_t shard_tokens;
    mt_masked_writer *open;  /* the shard being written, or NULL */
    size_t shards;           /* started, the open one included */
    uint64_t tokens;
    mt_shard_prefix place;   /* the prefix taken (tokenizer/shard_prefix.h) */
    int claimed;
} series;

static mt_status series_start(series *s, const char *prefix, int width, int64_t shard_tokens) {
    *s = (series){.prefix = prefix, .width = width, .shard_tokens = shard_tokens, .place = {.temps = -1}};
    if (shard_tokens <= 0) return mt_fail(MT_ERR_INVALID, "shards: %lld tokens a shard", (long long)shard_tokens);
    MT_TRY(mt_shard_prefix_claim(prefix, &s->place));
    s->claimed = 1;
    return MT_OK;
}

/* Completes the open shard under its temporary name. */
static mt_status series_close(series *s) {
    mt_masked_writer *w = s->open;
    s->open = NULL;
    return w ? mt_masked_writer_finish(w) : MT_OK;
}

/* Adds one example. It goes whole into one shard: one that does not fit what the open shard has
 * left starts the next shard; only one longer than a whole shard is cut, its pieces after the first
 * beginning their shards (where they count as examples of their own). */
static mt_status series_add(series *s, const int32_t *ids, const uint8_t *mask, size_t n) {
    if (s->open && mt_masked_writer_count(s->open) > 0 &&
        n > (size_t)s->shard_tokens - mt_masked_writer_count(s->open))
        MT_TRY(series_close(s));
    int example = 1;
    while (n > 0) {
        if (!s->open) {
            char *name = mt_shard_name(s->prefix, s->shards, 1);
            if (!name) return mt_fail(MT_ERR_NOMEM, "shards: cannot copy a path");
            mt_status st = mt_masked_writer_open(&s->open, name, s->width);
            free(name);
            MT_TRY(st);
            s->shards++;
        }
        size_t room = (size_t)s->shard_tokens - mt_masked_writer_count(s->open), k = n < room ? n : room;
        /* Ids are >= 0: the same bits as uint32. */
        MT_TRY(mt_masked_writer_add(s->open, (const uint32_t *)ids, mask, k, example));
        example = 0;
        s->tokens += k;
        ids += k;
        mask += k;
        n -= k;
        if (k == room) MT_TRY(series_close(s));
    }
    return MT_OK;
}

static mt_status series_finish(series *s) {
    MT_TRY(series_close(s));
    for (size_t i = 0; i < s->shards; i++) {
        char *from = mt_shard_name(s->prefix, i, 1), *to = mt_shard_name(s->prefix, i, 0);
        int rc = from && to ? rename(from, to) : -1;
        mt_status st = rc == 0 ? MT_OK : mt_fail(MT_ERR_IO, "%s: cannot rename into place: %s", to ? to : s->prefix,
                                                 strerror(errno));
        free(from);
        free(to);
        MT_TRY(st);
    }
    mt_shard_prefix_release(&s->place, 0);
    s->claimed = 0;
    return MT_OK;
}

/* Removes every shard of the series, finished or not: a failed run leaves none. */
static void series_abort(series *s) {
    mt_masked_writer_abort(s->open);
    s->open = NULL;
    for (size_t i = 0; i < s->shards; i++)
        for (int temporary = 0; temporary <= 1; temporary++) {
            char *name = mt_shard_name(s->prefix, i, temporary);
            if (name) unlink(name);
            free(name);
        }
    if (s->claimed) mt_shard_prefix_release(&s->place, 1);
    s->claimed = 0;
}

/* ---- the command ---- */

/* Sets the threads of chat_file.c's OpenMP loops (n > 0) and returns how many there were before;
 * 1 in builds without OpenMP (the fuzzers'), whose loops run serially. */
static int set_threads(int n) {
#ifdef _OPENMP
    int before = omp_get_max_threads();
    if (n > 0) omp_set_num_threads(n);
    return before;
#else
    (void)n;
    return 1;
#endif
}

static mt_status to_shards(const int32_t *ids, const uint8_t *mask, size_t n, void *user) {
    if (mt_stop_requested()) return mt_stop_status("tokenizing chat data");
    mt_test_pause("MT_TEST_WRITE_PAUSE_MS");
    return series_add(user, ids, mask, n);
}

static mt_status chat_width(const mt_tokenize_options *o, const mt_tokenizer *tok, int *width) {
    uint32_t vocab = mt_tokenizer_vocab_size(tok);
    *width = o->width ? o->width : vocab <= 65536 ? 2 : 4;
    if (*width == 2 && vocab > 65536)
        return mt_fail(MT_ERR_INVALID, "%s: a vocabulary of %u tokens does not fit uint16 ids (at most 65536); use uint32",
                       mt_tokenizer_path(tok), vocab);
    return MT_OK;
}

static mt_status encode_files(const mt_tokenize_options *o, const mt_tokenizer *tok, const mt_chat_template *t,
                              const mt_input_list *files, series *sink, mt_tokenize_summary *s, uint64_t *trained) {
    mt_chat_file_stats stats = {0};
    for (size_t i = 0; i < files->n; i++) {
        if (!files->v[i].records)
            return mt_fail(MT_ERR_INVALID, "%s: chat data must be JSONL (a .jsonl file, one conversation a line) "
                           "or a JSON array of conversations (a .json file)",
                           files->v[i].path);
        MT_TRY(mt_chat_file_encode(tok, t, (mt_chat_loss)o->loss, !o->no_analysis_loss, files->v[i].path, to_shards, sink, &stats));
        s->files++;
        mt_log_info("%s: %llu conversations, %llu tokens so far", files->v[i].path, (unsigned long long)stats.examples,
                    (unsigned long long)stats.tokens);
    }
    if (stats.tokens == 0) return mt_fail(MT_ERR_INVALID, "%s: the inputs hold no conversation", o->inputs[0]);
    s->documents = stats.examples;
    s->bytes = stats.bytes;
    s->tokens = stats.tokens;
    *trained = stats.trained_tokens;
    return MT_OK;
}

mt_status mt_tokenize_chat_files(const mt_tokenize_options *o, mt_tokenize_summary *s, uint64_t *trained) {
    *s = (mt_tokenize_summary){0};
    *trained = 0;
    double start = mt_now();
    mt_tokenizer *tok;
    MT_TRY(mt_tokenizer_load(o->tokenizer, &tok));
    mt_chat_template t = {0};
    mt_input_list files = {0};
    series sink = {0};
    int threads_before = set_threads(o->threads);
    s->threads = o->threads > 0 ? o->threads : threads_before;
    mt_status st = mt_tokenizer_chat(tok, o->chat_template, &t);
    if (st == MT_OK) st = chat_width(o, tok, &s->width);
    if (st == MT_OK) st = mt_input_files_collect(o->inputs, o->n_inputs, &files);
    if (st == MT_OK)
        st = series_start(&sink, o->out_prefix, s->width,
                          o->shard_tokens ? o->shard_tokens : MT_TOKENIZE_DEFAULT_SHARD);
    if (st == MT_OK) st = encode_files(o, tok, &t, &files, &sink, s, trained);
    if (st == MT_OK) st = series_finish(&sink);
    if (st == MT_OK) s->shards = sink.shards;
    else series_abort(&sink);
    set_threads(threads_before);
    s->seconds = mt_now() - start;
    mt_input_files_free(&files);
    mt_chat_template_free(&t);
    mt_tokenizer_free(tok);
    return st;
}
