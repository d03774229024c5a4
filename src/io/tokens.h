/* Token sources: a file of token ids, read with pread as windows are needed (never mapped, so
 * that a file cut short or changed underneath is reported, not a SIGBUS).
 *
 * Four formats, chosen by the file's magic and extension:
 *   llm.c .bin shards  256 int32 header (magic 20240520, version 1 = uint16 tokens, 2 = uint32,
 *                      header[2] = token count), then the tokens; size must be exactly
 *                      1024 + count * width
 *   masked shards      ids and a loss mask, magic "MTMS" (io/masked_tokens.h): chat data
 *   .npy arrays        1-D, C order, dtype <u2 or <u4
 *   anything else      raw bytes (UTF-8 text): each byte a token, vocabulary 256
 * Only regular files are taken: a FIFO, directory or device is refused when opened, without
 * waiting for a writer. The file's size and modification time are noted when it is opened and
 * checked before each read; a change stops the reads with an error naming the file. */
#ifndef MT_IO_TOKENS_H
#define MT_IO_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef enum { MT_TOKENS_LLMC, MT_TOKENS_NPY, MT_TOKENS_TEXT, MT_TOKENS_MASKED } mt_token_format;

typedef struct mt_token_reader mt_token_reader;

typedef struct {
    size_t count;           /* number of tokens */
    int width;              /* bytes per id in the file: 1 (text bytes), 2 or 4, little-endian */
    mt_token_format format;
    mt_token_reader *reader; /* the open file, what it was when opened, the first read error */
} mt_tokens;

/* Opens `path`; fails naming the file and the problem (missing, not a regular file, empty,
 * truncated, bad magic, version or header, size not what the header promises). */
mt_status mt_tokens_open(const char *path, mt_tokens *tokens);
void mt_tokens_close(mt_tokens *tokens);

const char *mt_token_format_name(mt_token_format format);

/* dst[k] = id at start + k for k < n; the caller keeps start + n <= count. A read that fails
 * (the file changed, was cut short, or an I/O error) fills dst with 0 and leaves its error for
 * mt_tokens_status: check it before using what was read. */
void mt_tokens_copy(const mt_tokens *tokens, size_t start, size_t n, int32_t *dst);
/* The id at position i (< count), read as mt_tokens_copy reads. */
uint32_t mt_tokens_get(const mt_tokens *tokens, size_t i);
/* dst[k] = loss mask of token start + k: 0 or 1 for a masked shard, 1 for any other source. A
 * failed read fills dst with 0 and leaves its error for mt_tokens_status, as mt_tokens_copy. */
void mt_tokens_copy_mask(const mt_tokens *tokens, size_t start, size_t n, uint8_t *dst);
/* The examples of a masked shard that records where each begins (mask encoding 2, which megatrain
 * writes): *starts points at their first tokens, ascending from 0, and their count is returned.
 * 0 (and NULL) for any other source. Valid while the file is open. */
size_t mt_tokens_examples(const mt_tokens *tokens, const uint64_t **starts);
/* MT_OK, or the first read error (again in mt_error()). */
mt_status mt_tokens_status(const mt_tokens *tokens);

/* Checks every id is below vocab_size; the message names `name` (usually the file), the first
 * offending position and its id. */
mt_status mt_tokens_validate(const mt_tokens *tokens, uint32_t vocab_size, const char *name);

#endif
