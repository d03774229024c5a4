/* A read-mostly map from byte strings to token ids: open addressing over xxHash3, the keys in
 * one arena, each followed by a NUL (so that a key can be handed out as a C string). Built once
 * at load time; lookups need no lock. */
#ifndef MT_TOKENIZER_STRMAP_H
#define MT_TOKENIZER_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct {
    uint64_t hash;
    size_t key_off;  /* into arena */
    uint32_t key_len;
    int32_t value;   /* -1 marks an empty slot */
} mt_strmap_slot;

typedef struct {
    mt_strmap_slot *slots;
    size_t mask;     /* slot count - 1 (a power of two) */
    size_t count;
    char *arena;
    size_t arena_len, arena_cap;
} mt_strmap;

/* An empty map sized for about `expected` keys. */
mt_status mt_strmap_init(mt_strmap *m, size_t expected, const char *what);
void mt_strmap_free(mt_strmap *m);
/* Inserts or replaces (the last value set for a key wins, as in a JSON object). */
mt_status mt_strmap_set(mt_strmap *m, const char *key, size_t len, int32_t value);
/* The value of `key`, or -1. */
int32_t mt_strmap_get(const mt_strmap *m, const char *key, size_t len);
/* The same with the hash already computed (mt_strmap_hash). */
int32_t mt_strmap_get_hashed(const mt_strmap *m, const char *key, size_t len, uint64_t hash);
uint64_t mt_strmap_hash(const char *key, size_t len);

#endif
