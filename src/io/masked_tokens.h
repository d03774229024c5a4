/* Masked token shards: token ids with a loss mask, for chat and instruction data where only the
 * answers should carry loss (docs/data-formats.md), and where each example begins.
 *
 * Layout, all little-endian:
 *   int32 header[256] (1024 bytes)
 *     [0] magic 0x534D544D (the bytes "MTMS")   [1] version 1   [2] header bytes, 1024
 *     [3] id width in bytes: 2 (uint16) or 4 (uint32)
 *     [4] token count, low 32 bits              [5] token count, high 32 bits
 *     [6] mask encoding: one byte per token, either
 *           1: the byte is 0 or 1, the loss bit alone (earlier writers: no example boundaries)
 *           2: bit 0 the loss bit, bit 1 set on the first token of each example (and so on the
 *              file's first token): what this writer writes
 *     [7..255] 0 (reserved)
 *   count ids of `width` bytes
 *   count mask bytes. The loss bit of token i is 1 when token i is a target that carries loss
 *   (predicted from token i - 1), 0 when it is context only (a prompt, a system message, a
 *   template's markup).
 * The file is exactly 1024 + count * (width + 1) bytes; a reader checks every header field, the
 * size and every mask byte before it trusts the file. */
#ifndef MT_IO_MASKED_TOKENS_H
#define MT_IO_MASKED_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/tokens.h"
#include "util/status.h"

#define MT_MASKED_MAGIC 0x534D544D
#define MT_MASKED_VERSION 1
#define MT_MASKED_HEADER_BYTES 1024
#define MT_MASKED_LOSS 1       /* a mask byte's loss bit */
#define MT_MASKED_STARTS 2     /* a mask byte's example-start bit (encoding 2) */
#define MT_MASKED_ENCODING_LOSS 1
#define MT_MASKED_ENCODING_STARTS 2

/* Whether the first bytes of a file are a masked shard's magic. */
bool mt_masked_shard_magic(const void *bytes, size_t size);

/* Where a masked shard's parts lie, from its header. */
typedef struct {
    size_t count;
    int width;
    int encoding; /* MT_MASKED_ENCODING_* */
    size_t data_offset, mask_offset;
} mt_masked_layout;

/* Checks a masked shard's header (the file's first head_len bytes) against the file's size and
 * gives its layout; fails naming `path` and the field at fault. The mask bytes themselves are
 * checked by the reader (io/tokens.c), which reads them. */
mt_status mt_masked_shard_parse(const char *path, const void *head, size_t head_len, size_t size,
                                mt_masked_layout *layout);

/* targets[k] = -1 (ignored by the loss) where token start + k carries no loss; a no-op for a
 * source with no mask. */
void mt_tokens_mask_targets(const mt_tokens *tokens, size_t start, size_t n, int32_t *targets);

/* Counts the tokens whose mask is 1 (all of them for a source with no mask). */
size_t mt_tokens_loss_count(const mt_tokens *tokens);

/* Writes one masked shard: the ids stream to a temporary file beside `path` while the mask
 * waits in memory (one byte a token); mt_masked_writer_finish writes the mask and the header,
 * fsyncs and renames it into place. Nothing is left at `path` or beside it on failure or
 * mt_masked_writer_abort. */
typedef struct mt_masked_writer mt_masked_writer;

/* width: 2 or 4 bytes an id. */
mt_status mt_masked_writer_open(mt_masked_writer **w, const char *path, int width);
/* Appends n ids and their loss flags (any nonzero byte is a 1). `example`: the ids begin an
 * example (its first token is marked); 0: they continue the one before (a file's first token is
 * marked whatever it is). An id that does not fit the width is refused. */
mt_status mt_masked_writer_add(mt_masked_writer *w, const uint32_t *ids, const uint8_t *mask, size_t n, int example);
size_t mt_masked_writer_count(const mt_masked_writer *w);
/* Completes the file and frees the writer, which is freed on failure too. An empty shard is
 * refused (a reader would refuse it). */
mt_status mt_masked_writer_finish(mt_masked_writer *w);
void mt_masked_writer_abort(mt_masked_writer *w);

#endif
