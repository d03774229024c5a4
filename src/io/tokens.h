/* Token sources: a file of token ids opened read-only (mapped, not copied).
 *
 * Four formats, chosen by the file's magic and extension:
 *   llm.c .bin shards  256 int32 header (magic 20240520, version 1 = uint16 tokens, 2 = uint32,
 *                      header[2] = token count), then the tokens; size must be exactly
 *                      1024 + count * width
 *   masked shards      ids and a loss mask, magic "MTMS" (io/masked_tokens.h): chat data
 *   .npy arrays        1-D, C order, dtype <u2 or <u4
 *   anything else      raw bytes (UTF-8 text): each byte a token, vocabulary 256
 * Ids keep the file's width in memory; mt_tokens_get and mt_tokens_copy widen them. */
#ifndef MT_IO_TOKENS_H
#define MT_IO_TOKENS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/status.h"

typedef enum { MT_TOKENS_LLMC, MT_TOKENS_NPY, MT_TOKENS_TEXT, MT_TOKENS_MASKED } mt_token_format;

typedef struct {
    const void *ids;        /* the first token id, `width` bytes each, little-endian */
    size_t count;           /* number of tokens */
    int width;              /* 1 (text bytes), 2 or 4 */
    mt_token_format format;
    const uint8_t *mask;    /* masked shards: mask[i] = 1 when token i carries loss; else NULL */
    void *map;              /* the whole mapped file, for mt_tokens_close */
    size_t map_bytes;
} mt_tokens;

/* Opens `path`; fails naming the file and the problem (missing, empty, truncated, bad magic,
 * version or header, size not what the header promises). */
mt_status mt_tokens_open(const char *path, mt_tokens *tokens);
void mt_tokens_close(mt_tokens *tokens);

const char *mt_token_format_name(mt_token_format format);

/* The id at position i (< count). memcpy because a .npy payload need not be aligned. */
static inline uint32_t mt_tokens_get(const mt_tokens *tokens, size_t i) {
    const unsigned char *p = (const unsigned char *)tokens->ids + i * (size_t)tokens->width;
    uint16_t u16;
    uint32_t u32;
    switch (tokens->width) {
    case 1: return p[0];
    case 2: memcpy(&u16, p, 2); return u16;
    default: memcpy(&u32, p, 4); return u32;
    }
}

/* dst[k] = id at start + k for k < n; the caller keeps start + n <= count. */
void mt_tokens_copy(const mt_tokens *tokens, size_t start, size_t n, int32_t *dst);

/* Checks every id is below vocab_size; the message names `name` (usually the file), the first
 * offending position and its id. */
mt_status mt_tokens_validate(const mt_tokens *tokens, uint32_t vocab_size, const char *name);

#endif
