#include "io/tb_events.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "util/memory.h"

struct mt_tb_events {
    FILE *file;
    char path[PATH_MAX];
};

static uint32_t table[256];

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t mt_crc32c(const void *data, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_table);
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t mt_tb_masked_crc(const void *data, size_t n) {
    uint32_t crc = mt_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- the protobuf encoding ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
    int failed;
} pb;

static void bytes(pb *b, const void *data, size_t n) {
    if (b->failed || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *grown = realloc(b->p, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void varint(pb *b, uint64_t v) {
    unsigned char out[10];
    size_t k = 0;
    do {
        out[k++] = (unsigned char)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    bytes(b, out, k);
}

static void little(pb *b, uint64_t v, size_t width) {
    unsigned char out[8];
    for (size_t i = 0; i < width; i++) out[i] = (unsigned char)(v >> (8 * i));
    bytes(b, out, width);
}

enum { VARINT = 0, FIXED64 = 1, LEN = 2, FIXED32 = 5 };

static void key(pb *b, unsigned field, unsigned wire) { varint(b, (uint64_t)field << 3 | wire); }

static void len_field(pb *b, unsigned field, const void *data, size_t n) {
    key(b, field, LEN);
    varint(b, n);
    bytes(b, data, n);
}

/* Event { wall_time = 1 (double), step = 2 (int64); then file_version = 3 or summary = 5 }. */
static void event_head(pb *b, int64_t step) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double wall = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
    uint64_t bits;
    memcpy(&bits, &wall, sizeof bits);
    key(b, 1, FIXED64);
    little(b, bits, 8);
    key(b, 2, VARINT);
    varint(b, (uint64_t)step);
}

/* ---- the TFRecord framing ---- */

static mt_status record(mt_tb_events *tb, const pb *b) {
    if (b->failed) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold an event", tb->path);
    unsigned char head[12];
    uint64_t n = b->n;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(n >> (8 * i));
    uint32_t c = mt_tb_masked_crc(head, 8), d = mt_tb_masked_crc(b->p, b->n);
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(c >> (8 * i));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(d >> (8 * i));
    int ok = fwrite(head, 1, 12, tb->file) == 12 && fwrite(b->p, 1, b->n, tb->file) == b->n &&
             fwrite(tail, 1, 4, tb->file) == 4 && fflush(tb->file) == 0;
    if (!ok) return mt_fail(MT_ERR_IO, "%s: write failed: %s", tb->path, strerror(errno));
    return MT_OK;
}

mt_status mt_tb_open(const char *dir, mt_tb_events **out) {
    mt_tb_events *tb = mt_calloc(1, sizeof *tb, "a TensorBoard event file");
    if (!tb) return MT_ERR_NOMEM;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    /* a file of its own even when this process opened one in the same second */
    for (int k = 0; !tb->file && k < 100; k++) {
        if (snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%ld.%02d.megatrain", dir,
                     (long long)tv.tv_sec, host, (long)getpid(), k) >= (int)sizeof tb->path) {
            free(tb);
            return mt_fail(MT_ERR_INVALID, "%s: TensorBoard event file path too long", dir);
        }
        tb->file = fopen(tb->path, "wbx");
        if (!tb->file && errno != EEXIST) break;
    }
    if (!tb->file) {
        mt_status st = mt_fail(MT_ERR_IO, "%s: cannot create: %s", tb->path, strerror(errno));
        free(tb);
        return st;
    }
    pb b = {0};
    event_head(&b, 0);
    len_field(&b, 3, "brain.Event:2", 13);
    mt_status st = record(tb, &b);
    free(b.p);
    if (st != MT_OK) {
        mt_tb_close(tb);
        return st;
    }
    *out = tb;
    return MT_OK;
}

mt_status mt_tb_scalars(mt_tb_events *tb, int64_t step, const char *const *tags, const double *values, size_t n) {
    pb summary = {0}, value = {0}, b = {0};
    for (size_t i = 0; i < n; i++) {
        value.n = 0;
        len_field(&value, 1, tags[i], strlen(tags[i]));
        float f = (float)values[i];
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        key(&value, 2, FIXED32);
        little(&value, bits, 4);
        if (value.failed) summary.failed = 1;
        len_field(&summary, 1, value.p, value.n);
    }
    event_head(&b, step);
    if (summary.failed) b.failed = 1;
    len_field(&b, 5, summary.p, summary.n);
    mt_status st = record(tb, &b);
    free(summary.p);
    free(value.p);
    free(b.p);
    return st;
}

void mt_tb_close(mt_tb_events *tb) {
    if (!tb) return;
    if (tb->file) fclose(tb->file);
    free(tb);
}

const char *mt_tb_path(const mt_tb_events *tb) { return tb->path; }
