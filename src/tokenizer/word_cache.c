/* The word cache (internal.h): 64 shards, each an open-addressing table behind its own mutex,
 * allocated on first use. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer/internal.h"

#define SHARDS 64
#define SHARD_SLOTS 8192                  /* a power of two */
#define SHARD_MAX (SHARD_SLOTS / 2)       /* words a shard takes before it stops */

typedef struct {
    uint64_t hash;
    int32_t *ids;   /* n_ids ids, then the word's bytes; NULL for an empty slot */
    uint32_t len, n_ids;
} slot;

typedef struct {
    pthread_mutex_t lock;
    slot *slots;
    size_t count;
} shard;

struct mt_word_cache {
    shard shards[SHARDS];
};

mt_word_cache *mt_cache_new(void) {
    mt_word_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < SHARDS; i++) pthread_mutex_init(&c->shards[i].lock, NULL);
    return c;
}

void mt_cache_free(mt_word_cache *c) {
    if (!c) return;
    for (int i = 0; i < SHARDS; i++) {
        shard *sh = &c->shards[i];
        if (sh->slots)
            for (size_t k = 0; k < SHARD_SLOTS; k++) free(sh->slots[k].ids);
        free(sh->slots);
        pthread_mutex_destroy(&sh->lock);
    }
    free(c);
}

/* The slot holding w, or the empty slot where it would go (never NULL: shards stay half empty). */
static slot *find(shard *sh, uint64_t hash, const char *w, size_t len) {
    for (size_t i = (size_t)hash & (SHARD_SLOTS - 1);; i = (i + 1) & (SHARD_SLOTS - 1)) {
        slot *s = &sh->slots[i];
        if (!s->ids) return s;
        if (s->hash == hash && s->len == len && !memcmp(s->ids + s->n_ids, w, len)) return s;
    }
}

int mt_cache_get(mt_word_cache *c, const char *w, size_t len, mt_ids *out) {
    uint64_t hash = XXH3_64bits(w, len);
    shard *sh = &c->shards[hash >> 58];
    int hit = 0;
    pthread_mutex_lock(&sh->lock);
    if (sh->slots) {
        slot *s = find(sh, hash, w, len);
        hit = s->ids && mt_ids_append(out, s->ids, s->n_ids) == MT_OK;
    }
    pthread_mutex_unlock(&sh->lock);
    return hit;
}

void mt_cache_put(mt_word_cache *c, const char *w, size_t len, const int32_t *ids, size_t n) {
    uint64_t hash = XXH3_64bits(w, len);
    shard *sh = &c->shards[hash >> 58];
    pthread_mutex_lock(&sh->lock);
    if (!sh->slots) sh->slots = calloc(SHARD_SLOTS, sizeof *sh->slots);
    if (sh->slots && sh->count < SHARD_MAX) {
        slot *s = find(sh, hash, w, len);
        int32_t *data = s->ids ? NULL : malloc(n * sizeof *ids + len);
        if (data) {
            if (n) memcpy(data, ids, n * sizeof *ids);
            memcpy(data + n, w, len);
            *s = (slot){hash, data, (uint32_t)len, (uint32_t)n};
            sh->count++;
        }
    }
    pthread_mutex_unlock(&sh->lock);
}
