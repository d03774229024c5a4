/* Writes token ids as llm.c .bin shards (the format src/io/tokens.h reads): PREFIX_000000.bin,
 * PREFIX_000001.bin, ..., each a 256-int32 header (magic 20240520, version 1 for uint16 ids or 2
 * for uint32, the token count) then the ids, little-endian. Every shard but the last holds exactly
 * `shard_tokens` ids. Shards are written under temporary names and renamed only by
 * mt_shard_writer_finish, so that a failed run leaves none behind (mt_shard_writer_abort removes
 * the temporary files). */
#ifndef MT_TOKENIZER_SHARD_WRITER_H
#define MT_TOKENIZER_SHARD_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/shard_prefix.h"
#include "util/status.h"

typedef struct {
    char *prefix;
    int width;              /* 2 or 4 bytes an id */
    int64_t shard_tokens;
    int fd;                 /* the open shard, or -1 */
    int64_t in_shard;       /* ids in the open shard */
    size_t shards;          /* shards started (the open one included) */
    uint64_t tokens;        /* ids written in all */
    unsigned char *buf;     /* ids converted to `width`, before they are written */
    size_t buf_len, buf_cap;
    mt_shard_prefix place; /* the prefix taken (tokenizer/shard_prefix.h) */
} mt_shard_writer;

/* Prepares to write PREFIX_*.bin: takes the prefix (tokenizer/shard_prefix.h: refuses existing
 * shards of it, creates its directory). */
mt_status mt_shard_writer_open(mt_shard_writer *w, const char *prefix, int width, int64_t shard_tokens);
/* Appends n ids (each must fit `width`; the caller checked the vocabulary). */
mt_status mt_shard_writer_write(mt_shard_writer *w, const int32_t *ids, size_t n);
/* Completes the last shard and renames every shard to its final name. */
mt_status mt_shard_writer_finish(mt_shard_writer *w);
/* Removes every temporary shard; safe after a failed finish and on a writer never opened. */
void mt_shard_writer_abort(mt_shard_writer *w);

/* The name of shard `index` (malloc'd, or NULL when memory runs out). */
char *mt_shard_name(const char *prefix, size_t index, int temporary);

#endif
