#include "backend/pinned_pieces.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/memory.h"

/* The live allocations, for mt_pinned_free and mt_pinned_run (copies may come from any thread,
 * and a store is shared by the ranks' backends, so the table is the process's). */
typedef struct {
    char *base;
    size_t bytes, piece;
} pinned;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pinned *table;
static size_t count, capacity;

static double gib(size_t bytes) { return (double)bytes / (double)((size_t)1 << 30); }

size_t mt_pin_piece_count(size_t bytes, size_t piece) { return bytes ? (bytes + piece - 1) / piece : 1; }

static size_t piece_bytes(size_t bytes, size_t piece, size_t i) {
    size_t at = i * piece;
    return bytes - at < piece ? bytes - at : piece;
}

static void unpin_first(char *base, size_t piece, size_t pieces, const mt_pin_ops *ops) {
    for (size_t i = pieces; i-- > 0;) ops->unpin(ops->ctx, base + i * piece);
}

static mt_status remember(char *base, size_t bytes, size_t piece) {
    pthread_mutex_lock(&lock);
    mt_status rc = MT_OK;
    if (count == capacity) {
        size_t grown = capacity ? 2 * capacity : 16;
        pinned *t = realloc(table, grown * sizeof *t);
        if (t) table = t, capacity = grown;
        else rc = mt_fail(MT_ERR_NOMEM, "cannot grow the table of pinned host allocations");
    }
    if (rc == MT_OK) table[count++] = (pinned){base, bytes, piece};
    pthread_mutex_unlock(&lock);
    return rc;
}

void *mt_pinned_alloc(size_t bytes, size_t piece, const char *what, const mt_pin_ops *ops) {
    if (!piece) piece = MT_PIN_PIECE_BYTES;
    /* Whole pages, as the mapping is: every piece registered starts and ends on a page. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), span = ((bytes ? bytes : 1) + page - 1) / page * page;
    size_t pieces = mt_pin_piece_count(span, piece);
    double t0 = mt_now();
    char *base = mt_pages_alloc_touched(span, what);
    if (!base) return NULL;
    double t1 = mt_now();
    for (size_t i = 0; i < pieces; i++) {
        if (ops->pin(ops->ctx, base + i * piece, piece_bytes(span, piece, i)) == MT_OK) continue;
        char why[512];
        snprintf(why, sizeof why, "%s", mt_error());
        unpin_first(base, piece, i, ops);
        mt_pages_free(base, span);
        mt_fail(MT_ERR_NOMEM, "cannot pin %zu bytes (%.2f GiB) of host memory for %s: piece %zu of %zu (%zu bytes "
                "at offset %zu) failed: %s; the %zu pieces before it are unpinned and the memory freed", bytes,
                gib(bytes), what, i + 1, pieces, piece_bytes(span, piece, i), i * piece, why, i);
        return NULL;
    }
    if (remember(base, span, piece) != MT_OK) {
        unpin_first(base, piece, pieces, ops);
        mt_pages_free(base, span);
        return NULL;
    }
    double t2 = mt_now();
    /* Seconds here are the driver held: worth seeing where they are many. */
    mt_log(t2 - t0 >= 1.0 ? MT_LOG_INFO : MT_LOG_DEBUG, "pinned %.2f GiB of host memory for %s in %zu pieces: "
           "touched in %.2f s, registered in %.2f s", gib(bytes), what, pieces, t1 - t0, t2 - t1);
    return base;
}

int mt_pinned_free(void *p, const mt_pin_ops *ops) {
    pinned found = {0};
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count; i++)
        if (table[i].base == p) {
            found = table[i];
            table[i] = table[--count];
            break;
        }
    if (!count) {
        free(table);
        table = NULL;
        capacity = 0;
    }
    pthread_mutex_unlock(&lock);
    if (!found.base) return 0;
    unpin_first(found.base, found.piece, mt_pin_piece_count(found.bytes, found.piece), ops);
    mt_pages_free(found.base, found.bytes);
    return 1;
}

size_t mt_pinned_run(const void *p, size_t n) {
    const char *c = p;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count; i++) {
        const pinned *a = &table[i];
        if (c >= a->base && c < a->base + a->bytes) { /* to the end of p's piece */
            size_t at = (size_t)(c - a->base), end = (at / a->piece + 1) * a->piece;
            if (end > a->bytes) end = a->bytes;
            if (end - at < n) n = end - at;
        } else if (c < a->base && (size_t)(a->base - c) < n) { /* to the allocation's start */
            n = (size_t)(a->base - c);
        }
    }
    pthread_mutex_unlock(&lock);
    return n;
}
