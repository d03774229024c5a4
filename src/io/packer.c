#include "io/packer.h"

#include <stdlib.h>
#include <string.h>

struct mt_packer {
    const mt_example *ex;
    size_t n;
    int seq, random;
    uint32_t *perm;       /* the epoch's order of the examples */
    uint64_t epoch_rng;   /* the generator as of the epoch's start */
    mt_rng rng;           /* drawn on through the epoch: its order, then each buffer's windows' */
    uint64_t epoch, cursor;
    size_t next_example;  /* where in perm the next buffer starts */
    /* The current buffer: window w holds items[first[w] .. first[w + 1]); drawn in `order`. */
    uint32_t *items, *first, *order;
    size_t windows, drawn;
    /* First-fit scratch, for a buffer of at most MT_PACK_BUFFER examples. */
    uint64_t *sorted;                /* (seq - len) << 32 | position in the buffer */
    uint32_t *window_of, *room;      /* room: a max tree over the windows' free tokens */
    size_t leaves;
};

/* Uniform in [0, n) without modulo bias (io/dataset.c's). */
static uint64_t below(mt_rng *rng, uint64_t n) {
    uint64_t threshold = -n % n;
    for (;;) {
        uint64_t r = mt_rng_next(rng);
        if (r >= threshold) return r % n;
    }
}

static void shuffle(uint32_t *a, size_t n, mt_rng *rng) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)below(rng, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

mt_status mt_packer_create(mt_packer **out, const mt_example *ex, size_t n, int seq, int random_order) {
    if (n == 0 || n > UINT32_MAX) return mt_fail(MT_ERR_INVALID, "packing: %zu examples (1 to 2^32 - 1)", n);
    mt_packer *p = mt_calloc(1, sizeof *p, "the example packer");
    if (!p) return MT_ERR_NOMEM;
    *p = (mt_packer){.ex = ex, .n = n, .seq = seq, .random = random_order};
    size_t b = MT_PACK_BUFFER;
    for (p->leaves = 1; p->leaves < b; p->leaves *= 2) {}
    p->perm = malloc(n * sizeof *p->perm);
    p->items = malloc(b * sizeof *p->items);
    p->first = malloc((b + 1) * sizeof *p->first);
    p->order = malloc(b * sizeof *p->order);
    p->sorted = malloc(b * sizeof *p->sorted);
    p->window_of = malloc(b * sizeof *p->window_of);
    p->room = malloc(2 * p->leaves * sizeof *p->room);
    if (!p->perm || !p->items || !p->first || !p->order || !p->sorted || !p->window_of || !p->room) {
        mt_packer_free(p);
        return mt_fail(MT_ERR_NOMEM, "packing: cannot hold the order of %zu examples", n);
    }
    *out = p;
    return MT_OK;
}

void mt_packer_free(mt_packer *p) {
    if (!p) return;
    free(p->perm);
    free(p->items);
    free(p->first);
    free(p->order);
    free(p->sorted);
    free(p->window_of);
    free(p->room);
    free(p);
}

static void start_epoch(mt_packer *p, uint64_t rng, uint64_t epoch) {
    p->epoch_rng = rng;
    p->rng = (mt_rng){rng};
    p->epoch = epoch;
    p->cursor = 0;
    p->next_example = 0;
    p->windows = p->drawn = 0;
    for (size_t i = 0; i < p->n; i++) p->perm[i] = (uint32_t)i;
    if (p->random) shuffle(p->perm, p->n, &p->rng);
}

static int ascending(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The leftmost window with at least len free tokens (there is one: a buffer never fills more
 * windows than it has examples), and that window's room taken. */
static size_t first_fit(mt_packer *p, uint32_t len) {
    size_t node = 1;
    while (node < p->leaves) node = p->room[2 * node] >= len ? 2 * node : 2 * node + 1;
    p->room[node] -= len;
    for (size_t up = node / 2; up >= 1; up /= 2)
        p->room[up] = p->room[2 * up] > p->room[2 * up + 1] ? p->room[2 * up] : p->room[2 * up + 1];
    return node - p->leaves;
}

/* Packs the next buffer of the epoch's order into windows, first-fit decreasing. */
static void pack_buffer(mt_packer *p) {
    const uint32_t *idx = p->perm + p->next_example;
    size_t n = p->n - p->next_example < MT_PACK_BUFFER ? p->n - p->next_example : MT_PACK_BUFFER;
    /* Longest first; among equals, the earlier in the buffer. */
    for (size_t i = 0; i < n; i++) p->sorted[i] = (uint64_t)(p->seq - p->ex[idx[i]].len) << 32 | i;
    qsort(p->sorted, n, sizeof *p->sorted, ascending);
    for (size_t i = 0; i < 2 * p->leaves; i++) p->room[i] = (uint32_t)p->seq;
    p->windows = 0;
    for (size_t k = 0; k < n; k++) {
        size_t w = first_fit(p, p->ex[idx[(uint32_t)p->sorted[k]]].len);
        p->window_of[k] = (uint32_t)w;
        if (w + 1 > p->windows) p->windows = w + 1;
    }
    /* The windows' items, each window's in the order they were placed. */
    memset(p->first, 0, (p->windows + 1) * sizeof *p->first);
    for (size_t k = 0; k < n; k++) p->first[p->window_of[k] + 1]++;
    for (size_t w = 0; w < p->windows; w++) p->first[w + 1] += p->first[w];
    for (size_t w = 0; w < p->windows; w++) p->order[w] = p->first[w]; /* fill positions */
    for (size_t k = 0; k < n; k++) p->items[p->order[p->window_of[k]]++] = idx[(uint32_t)p->sorted[k]];
    for (size_t w = 0; w < p->windows; w++) p->order[w] = (uint32_t)w;
    if (p->random) shuffle(p->order, p->windows, &p->rng);
    p->next_example += n;
    p->drawn = 0;
}

mt_status mt_packer_seek(mt_packer *p, uint64_t rng, uint64_t cursor, uint64_t epoch) {
    start_epoch(p, rng, epoch);
    while (p->cursor < cursor) {
        if (p->next_example == p->n)
            return mt_fail(MT_ERR_INVALID, "packing: the saved position, window %llu of epoch %llu, is past the "
                           "epoch's %llu windows (was the checkpoint made with other data?)",
                           (unsigned long long)cursor, (unsigned long long)epoch, (unsigned long long)p->cursor);
        pack_buffer(p);
        size_t take = cursor - p->cursor < p->windows ? (size_t)(cursor - p->cursor) : p->windows;
        p->drawn = take;
        p->cursor += take;
    }
    return MT_OK;
}

void mt_packer_state(const mt_packer *p, uint64_t *rng, uint64_t *cursor, uint64_t *epoch) {
    *rng = p->epoch_rng;
    *cursor = p->cursor;
    *epoch = p->epoch;
}

mt_status mt_packer_next(mt_packer *p, const uint32_t **examples, size_t *count) {
    if (p->drawn == p->windows) {
        if (p->next_example == p->n) start_epoch(p, p->rng.state, p->epoch + 1);
        pack_buffer(p);
    }
    uint32_t w = p->order[p->drawn++];
    p->cursor++;
    *examples = p->items + p->first[w];
    *count = p->first[w + 1] - p->first[w];
    return MT_OK;
}

mt_status mt_packer_count(mt_packer *p, uint64_t rng, uint64_t *windows, uint64_t *padding) {
    uint64_t at_rng, at_cursor, at_epoch;
    mt_packer_state(p, &at_rng, &at_cursor, &at_epoch);
    start_epoch(p, rng, 0);
    uint64_t tokens = 0;
    *windows = 0;
    while (p->next_example < p->n) {
        pack_buffer(p);
        *windows += p->windows;
    }
    for (size_t i = 0; i < p->n; i++) tokens += p->ex[i].len;
    *padding = *windows * (uint64_t)p->seq - tokens;
    return mt_packer_seek(p, at_rng, at_cursor, at_epoch);
}
