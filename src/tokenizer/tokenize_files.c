/* mt_tokenize_files: the reading thread maps each input, cuts it into batches of documents and
 * queues them in a ring; workers encode batches in queue order; the reading thread writes finished
 * batches to the shards strictly in sequence, so the output does not depend on the thread count.
 * A large plain-text document is cut into parts, a batch each (mt_tokenizer_next_cut); a part whose
 * end does not verify is encoded again with the next one by the reading thread. */
#include "tokenizer/tokenize_files.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer/input_files.h"
#include "tokenizer/shard_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/stop_signal.h"

#define BATCH_BYTES (1u << 20) /* text a batch of JSONL lines holds, about */
#define BATCH_DOCS 4096
#define PART_MIN (64u << 10) /* the parts of a large document: about 4 per thread, in these bounds */
#define PART_MAX (4u << 20)

/* An input file mapped into memory, shared by the batches that point into it. */
typedef struct {
    void *addr;
    size_t len;
    int refs; /* touched by the reading thread only */
} mapping;

typedef struct {
    const char *text;
    size_t len;
    size_t line;       /* JSONL: the line, from 1; 0 for a text file */
    size_t start, end; /* a text file: the part of it this is (all of it: 0, len) */
} doc;

enum { FREE, QUEUED, RUNNING, DONE };

typedef struct {
    int state;
    const mt_input_file *file;
    mapping *map;
    doc *docs;
    size_t n_docs, cap_docs, bytes;
    mt_ids ids;
    int end_ok; /* a part: its end is verified (mt_tokenizer_encode_part) */
    mt_status status;
    char error[1024];
} batch;

typedef struct {
    const mt_tokenize_options *o;
    const mt_tokenizer *tok;
    const char *field;
    int32_t eot, bos; /* bos -1: none */
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    batch *ring;
    size_t ring_n;
    size_t next_fill, next_take, next_write; /* batch sequence numbers */
    int quit;
} job;

/* ---- workers ---- */

static mt_status jsonl_text(const job *j, const batch *b, const doc *d, json_t **root, const char **text,
                            size_t *len) {
    json_error_t e;
    const char *path = b->file->path;
    *root = json_loadb(d->text, d->len, JSON_ALLOW_NUL, &e);
    if (!*root) return mt_fail(MT_ERR_INVALID, "%s:%zu: not JSON: %s (column %d)", path, d->line, e.text, e.column);
    if (!json_is_object(*root)) return mt_fail(MT_ERR_INVALID, "%s:%zu: not a JSON object", path, d->line);
    const json_t *v = json_object_get(*root, j->field);
    if (!v) return mt_fail(MT_ERR_INVALID, "%s:%zu: no \"%s\" field", path, d->line, j->field);
    if (!json_is_string(v))
        return mt_fail(MT_ERR_INVALID, "%s:%zu: field \"%s\" is not a string", path, d->line, j->field);
    *text = json_string_value(v);
    *len = json_string_length(v);
    return MT_OK;
}

static mt_status encode_doc(const job *j, batch *b, const doc *d) {
    json_t *root = NULL;
    const char *text = d->text;
    size_t len = d->len, start = d->start, end = d->end;
    mt_status st = b->file->records ? jsonl_text(j, b, d, &root, &text, &len) : MT_OK;
    if (b->file->records) end = len;
    if (!st && start == 0) st = mt_ids_push(&b->ids, j->eot);
    if (!st && start == 0 && j->bos >= 0) st = mt_ids_push(&b->ids, j->bos);
    if (!st) {
        st = mt_tokenizer_encode_part(j->tok, text, len, start, end, j->o->allow_special, &b->ids, &b->end_ok);
        if (st && b->file->records) mt_fail_context(st, "%s:%zu: field \"%s\"", b->file->path, d->line, j->field);
        else if (st) mt_fail_context(st, "%s", b->file->path);
    }
    json_decref(root);
    return st;
}

static void encode_batch(const job *j, batch *b) {
    b->ids.n = 0;
    b->end_ok = 0;
    b->status = MT_OK;
    for (size_t i = 0; i < b->n_docs && !b->status; i++) b->status = encode_doc(j, b, &b->docs[i]);
    if (b->status) snprintf(b->error, sizeof b->error, "%s", mt_error());
}

static void *worker(void *arg) {
    job *j = arg;
    pthread_mutex_lock(&j->lock);
    for (;;) {
        batch *b = &j->ring[j->next_take % j->ring_n];
        while (!j->quit && !(j->next_take < j->next_fill && b->state == QUEUED)) {
            pthread_cond_wait(&j->work, &j->lock);
            b = &j->ring[j->next_take % j->ring_n];
        }
        if (j->quit) break;
        j->next_take++;
        b->state = RUNNING;
        pthread_mutex_unlock(&j->lock);
        encode_batch(j, b);
        pthread_mutex_lock(&j->lock);
        b->state = DONE;
        pthread_cond_broadcast(&j->done);
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* ---- the reading and writing thread ---- */

typedef struct {
    job *j;
    mt_shard_writer *w;
    mt_tokenize_summary *s;
    batch *filling; /* the batch being filled, or NULL */
    double start, last_log;
} reader;

static void release(mapping *m) {
    if (--m->refs > 0) return;
    if (m->len) munmap(m->addr, m->len);
    free(m);
}

static void progress(reader *r, int force) {
    double now = mt_now(), dt = now - r->start;
    double period = r->j->o->progress_seconds > 0 ? r->j->o->progress_seconds : 2.0;
    if (!force && now - r->last_log < period) return;
    r->last_log = now;
    mt_log_info("tokenize: %zu documents, %.1f MB, %llu tokens, %.2f MB/s, %.0f tokens/s", r->s->documents,
                (double)r->s->bytes / 1e6, (unsigned long long)r->s->tokens,
                dt > 0 ? (double)r->s->bytes / 1e6 / dt : 0.0, dt > 0 ? (double)r->s->tokens / dt : 0.0);
}

/* Whether batch number `seq` is done, waiting for it when `wait`. */
static int batch_done(job *j, size_t seq, int wait) {
    pthread_mutex_lock(&j->lock);
    batch *b = &j->ring[seq % j->ring_n];
    while (wait && seq < j->next_fill && b->state != DONE) pthread_cond_wait(&j->done, &j->lock);
    int ready = seq < j->next_fill && b->state == DONE;
    pthread_mutex_unlock(&j->lock);
    return ready;
}

static void free_oldest(job *j, batch *b) {
    release(b->map);
    b->map = NULL;
    pthread_mutex_lock(&j->lock);
    b->state = FREE;
    j->next_write++;
    pthread_mutex_unlock(&j->lock);
}

/* The oldest batch is a part whose end did not verify: the next batch, the document's next part,
 * becomes both parts encoded as one (here, on the reading thread: it is rare), and the oldest is
 * dropped. *merged 0: the next part is not done yet. */
static void merge_parts(reader *r, batch *b, int wait, int *merged) {
    job *j = r->j;
    *merged = 0;
    if (!batch_done(j, j->next_write + 1, wait)) return;
    batch *next = &j->ring[(j->next_write + 1) % j->ring_n];
    next->docs[0].start = b->docs[0].start;
    next->bytes += b->bytes;
    r->s->merges++;
    encode_batch(j, next);
    free_oldest(j, b);
    *merged = 1;
}

/* Writes the oldest batch once it is done (waiting for it when `wait`); *wrote says whether it did. */
static mt_status write_oldest(reader *r, int wait, int *wrote) {
    job *j = r->j;
    *wrote = 0;
    if (!batch_done(j, j->next_write, wait)) return MT_OK;
    batch *b = &j->ring[j->next_write % j->ring_n];
    if (!b->status && !b->end_ok) {
        merge_parts(r, b, wait, wrote);
        return MT_OK;
    }
    if (b->status) return mt_fail(b->status, "%s", b->error);
    mt_test_pause("MT_TEST_WRITE_PAUSE_MS");
    MT_TRY(mt_shard_writer_write(r->w, b->ids.ids, b->ids.n));
    for (size_t i = 0; i < b->n_docs; i++) r->s->documents += b->docs[i].start == 0;
    r->s->parts += b->n_docs;
    r->s->bytes += b->bytes;
    r->s->tokens += b->ids.n;
    free_oldest(j, b);
    *wrote = 1;
    progress(r, 0);
    return MT_OK;
}

/* The free batch for the next sequence number, writing finished ones until there is one. */
static mt_status next_batch(reader *r, const mt_input_file *file, mapping *map, batch **out) {
    job *j = r->j;
    int wrote;
    while (j->next_fill - j->next_write >= j->ring_n) MT_TRY(write_oldest(r, 1, &wrote));
    do MT_TRY(write_oldest(r, 0, &wrote));
    while (wrote);
    batch *b = &j->ring[j->next_fill % j->ring_n];
    b->file = file;
    b->map = map;
    map->refs++;
    b->n_docs = b->bytes = 0;
    *out = b;
    return MT_OK;
}

static void queue(reader *r) {
    job *j = r->j;
    pthread_mutex_lock(&j->lock);
    r->filling->state = QUEUED;
    j->next_fill++;
    pthread_cond_signal(&j->work);
    pthread_mutex_unlock(&j->lock);
    r->filling = NULL;
}

static mt_status add_doc(reader *r, const mt_input_file *file, mapping *map, const char *text, size_t len,
                         size_t line, size_t start, size_t end) {
    if (mt_stop_requested()) return mt_stop_status("tokenizing");
    if (!r->filling) MT_TRY(next_batch(r, file, map, &r->filling));
    batch *b = r->filling;
    if (b->n_docs == b->cap_docs) {
        size_t cap = b->cap_docs ? b->cap_docs * 2 : 64;
        doc *d = realloc(b->docs, cap * sizeof *d);
        if (!d) return mt_fail(MT_ERR_NOMEM, "tokenize: cannot grow a batch to %zu documents", cap);
        b->docs = d;
        b->cap_docs = cap;
    }
    b->docs[b->n_docs++] = (doc){text, len, line, start, end};
    b->bytes += end - start;
    if (b->bytes >= BATCH_BYTES || b->n_docs >= BATCH_DOCS || !file->records) queue(r);
    return MT_OK;
}

static mt_status map_input(const char *path, mapping **out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY); /* a FIFO must not block */
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    mt_status status = MT_OK;
    mapping *m = calloc(1, sizeof *m);
    if (!m) status = mt_fail(MT_ERR_NOMEM, "%s: cannot allocate", path);
    else if (fstat(fd, &st) != 0) status = mt_fail(MT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        status = mt_fail(MT_ERR_INVALID, "%s: an input must be a regular file or a directory, not %s", path,
                         mt_file_kind(st.st_mode));
    if (!status && st.st_size > 0) {
        m->len = (size_t)st.st_size;
        m->addr = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->addr == MAP_FAILED) status = mt_fail(MT_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    }
    close(fd);
    if (status) {
        free(m);
        return status;
    }
    m->refs = 1; /* the reader's own, released once the file is cut into batches */
    *out = m;
    return MT_OK;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

static mt_status read_file(reader *r, const mt_input_file *file) {
    mapping *m = NULL;
    MT_TRY(map_input(file->path, &m));
    mt_status st = MT_OK;
    const char *text = m->addr;
    if (!file->records) {
        /* Parts of about `part` bytes, cut where mt_tokenizer_next_cut allows. */
        const mt_tokenize_options *o = r->j->o;
        size_t part = m->len / (4 * (size_t)r->s->threads);
        part = o->part_bytes ? o->part_bytes : part < PART_MIN ? PART_MIN : part > PART_MAX ? PART_MAX : part;
        size_t start = 0;
        do {
            size_t end = part < m->len - start ? mt_tokenizer_next_cut(r->j->tok, text, m->len, start + part) : m->len;
            st = add_doc(r, file, m, text, m->len, 0, start, end);
            start = end;
        } while (!st && start < m->len);
    } else {
        size_t line = 0;
        for (size_t pos = mt_utf8_bom(text, m->len); pos < m->len && !st;) {
            const char *nl = memchr(text + pos, '\n', m->len - pos);
            size_t end = nl ? (size_t)(nl - text) : m->len;
            line++;
            if (!blank(text + pos, end - pos)) st = add_doc(r, file, m, text + pos, end - pos, line, 0, end - pos);
            pos = end + 1;
        }
        if (!st && r->filling) queue(r);
    }
    release(m);
    r->s->files++;
    return st;
}

static int cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static mt_status check_tokenizer(job *j, const mt_tokenize_options *o, int *width) {
    const mt_tokenizer *tok = j->tok;
    uint32_t vocab = mt_tokenizer_vocab_size(tok);
    j->eot = mt_tokenizer_eot(tok);
    if (j->eot < 0)
        return mt_fail(MT_ERR_INVALID,
                       "%s: no end-of-text token to separate documents (<|end_of_text|>, <|endoftext|>, </s> or "
                       "tokenizer_config.json's eos_token)",
                       mt_tokenizer_path(tok));
    int add_bos = o->bos < 0 ? mt_tokenizer_adds_bos(tok) : o->bos;
    j->bos = add_bos ? mt_tokenizer_bos(tok) : -1;
    if (add_bos && j->bos < 0)
        return mt_fail(MT_ERR_INVALID, "%s: BOS was asked for but the tokenizer has no bos_token",
                       mt_tokenizer_path(tok));
    if (j->bos == j->eot) j->bos = -1; /* one token already separates the documents */
    *width = o->width ? o->width : vocab <= 65536 ? 2 : 4;
    if (*width == 2 && vocab > 65536)
        return mt_fail(MT_ERR_INVALID,
                       "%s: a vocabulary of %u tokens does not fit uint16 ids (at most 65536); use uint32",
                       mt_tokenizer_path(tok), vocab);
    return MT_OK;
}

static mt_status run(job *j, const mt_input_list *files, mt_shard_writer *w, mt_tokenize_summary *s) {
    reader r = {.j = j, .w = w, .s = s, .start = mt_now()};
    r.last_log = r.start;
    mt_status st = MT_OK;
    for (size_t i = 0; i < files->n && !st; i++) st = read_file(&r, &files->v[i]);
    int wrote = 1;
    while (!st && j->next_write < j->next_fill) {
        st = write_oldest(&r, 1, &wrote);
        if (!st && mt_stop_requested()) st = mt_stop_status("tokenizing");
    }
    size_t shards = w->shards;
    if (!st) st = mt_shard_writer_finish(w);
    s->shards = st ? 0 : shards;
    s->seconds = mt_now() - r.start;
    if (!st) progress(&r, 1);
    return st;
}

mt_status mt_tokenize_files(const mt_tokenize_options *o, mt_tokenize_summary *s) {
    *s = (mt_tokenize_summary){0};
    mt_tokenizer *tok;
    MT_TRY(mt_tokenizer_load(o->tokenizer, &tok));
    job j = {.o = o, .tok = tok, .field = o->text_field ? o->text_field : "text"};
    mt_input_list files = {0};
    mt_shard_writer w = {.fd = -1};
    mt_status st = check_tokenizer(&j, o, &s->width);
    if (!st) st = mt_input_files_collect(o->inputs, o->n_inputs, &files);
    if (!st)
        st = mt_shard_writer_open(&w, o->out_prefix, s->width,
                                  o->shard_tokens ? o->shard_tokens : MT_TOKENIZE_DEFAULT_SHARD);
    s->threads = o->threads > 0 ? o->threads : cores();
    j.ring_n = (size_t)s->threads * 4;
    j.ring = st ? NULL : calloc(j.ring_n, sizeof *j.ring);
    if (!st && !j.ring) st = mt_fail(MT_ERR_NOMEM, "tokenize: cannot allocate %zu batches", j.ring_n);
    pthread_t *threads = st ? NULL : calloc((size_t)s->threads, sizeof *threads);
    if (!st && !threads) st = mt_fail(MT_ERR_NOMEM, "tokenize: cannot allocate %d threads", s->threads);
    int started = 0;
    if (!st) {
        pthread_mutex_init(&j.lock, NULL);
        pthread_cond_init(&j.work, NULL);
        pthread_cond_init(&j.done, NULL);
        for (; started < s->threads && !st; started++)
            if (pthread_create(&threads[started], NULL, worker, &j) != 0)
                st = mt_fail(MT_ERR_IO, "tokenize: cannot start worker thread %d", started);
        if (st) started--;
        if (!st) st = run(&j, &files, &w, s);
        pthread_mutex_lock(&j.lock);
        j.quit = 1;
        pthread_cond_broadcast(&j.work);
        pthread_mutex_unlock(&j.lock);
        for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
        pthread_mutex_destroy(&j.lock);
        pthread_cond_destroy(&j.work);
        pthread_cond_destroy(&j.done);
    }
    if (st) mt_shard_writer_abort(&w);
    for (size_t i = 0; j.ring && i < j.ring_n; i++) {
        if (j.ring[i].map) release(j.ring[i].map);
        free(j.ring[i].docs);
        mt_ids_free(&j.ring[i].ids);
    }
    free(j.ring);
    free(threads);
    mt_input_files_free(&files);
    mt_tokenizer_free(tok);
    return st;
}
