#include "tokenizer/strmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t mt_strmap_hash(const char *key, size_t len) { return XXH3_64bits(key, len); }

static mt_status alloc_slots(mt_strmap *m, size_t n, const char *what) {
    m->slots = malloc(n * sizeof *m->slots);
    if (!m->slots) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate a map of %zu slots", what, n);
    for (size_t i = 0; i < n; i++) m->slots[i].value = -1;
    m->mask = n - 1;
    return MT_OK;
}

mt_status mt_strmap_init(mt_strmap *m, size_t expected, const char *what) {
    *m = (mt_strmap){0};
    size_t n = 16;
    while (n < expected * 2) n *= 2;
    return alloc_slots(m, n, what);
}

void mt_strmap_free(mt_strmap *m) {
    free(m->slots);
    free(m->arena);
    *m = (mt_strmap){0};
}

static size_t find_slot(const mt_strmap *m, const char *key, size_t len, uint64_t hash) {
    size_t i = (size_t)hash & m->mask;
    for (;;) {
        const mt_strmap_slot *s = &m->slots[i];
        if (s->value < 0) return i;
        if (s->hash == hash && s->key_len == len && !memcmp(m->arena + s->key_off, key, len)) return i;
        i = (i + 1) & m->mask;
    }
}

static mt_status grow(mt_strmap *m) {
    mt_strmap_slot *old = m->slots;
    size_t old_n = m->mask + 1;
    MT_TRY(alloc_slots(m, old_n * 2, "token map"));
    for (size_t i = 0; i < old_n; i++) {
        if (old[i].value < 0) continue;
        size_t j = (size_t)old[i].hash & m->mask;
        while (m->slots[j].value >= 0) j = (j + 1) & m->mask;
        m->slots[j] = old[i];
    }
    free(old);
    return MT_OK;
}

mt_status mt_strmap_set(mt_strmap *m, const char *key, size_t len, int32_t value) {
    if (len > UINT32_MAX) return mt_fail(MT_ERR_INVALID, "token map: a key of %zu bytes is too long", len);
    if ((m->count + 1) * 2 > m->mask + 1) MT_TRY(grow(m));
    uint64_t hash = mt_strmap_hash(key, len);
    size_t i = find_slot(m, key, len, hash);
    mt_strmap_slot *s = &m->slots[i];
    if (s->value >= 0) {
        s->value = value;
        return MT_OK;
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 4096;
        while (cap < m->arena_len + len + 1) cap *= 2;
        char *arena = realloc(m->arena, cap);
        if (!arena) return mt_fail(MT_ERR_NOMEM, "token map: cannot grow its key arena to %zu bytes", cap);
        m->arena = arena;
        m->arena_cap = cap;
    }
    if (len) memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = 0;
    *s = (mt_strmap_slot){.hash = hash, .key_off = m->arena_len, .key_len = (uint32_t)len, .value = value};
    m->arena_len += len + 1;
    m->count++;
    return MT_OK;
}

int32_t mt_strmap_get_hashed(const mt_strmap *m, const char *key, size_t len, uint64_t hash) {
    if (!m->slots) return -1;
    return m->slots[find_slot(m, key, len, hash)].value;
}

int32_t mt_strmap_get(const mt_strmap *m, const char *key, size_t len) {
    return mt_strmap_get_hashed(m, key, len, mt_strmap_hash(key, len));
}
