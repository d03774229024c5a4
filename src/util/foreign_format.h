/* Dataset files megatrain does not read (Parquet, Arrow, compressed files), told by their first
 * bytes or their name, so that they are refused as what they are rather than read as text. */
#ifndef MT_UTIL_FOREIGN_FORMAT_H
#define MT_UTIL_FOREIGN_FORMAT_H

#include "util/status.h"

/* What megatrain reads, for the messages that refuse a file. */
#define MT_READABLE_FORMATS                                                                            \
    "token files (llm.c .bin shards, masked shards, .npy arrays), text, JSONL (one record a line: "   \
    "{\"text\": ...} documents or chat examples) and JSON arrays of chat examples (LLaMA-Factory's "   \
    ".json files)"

/* Fails (MT_ERR_INVALID) naming `path`, what it is and the formats megatrain reads, when it is a
 * Parquet, Arrow, gzip or zstd file; MT_OK otherwise (and when it cannot be read: its reader says
 * why). */
mt_status mt_refuse_foreign_format(const char *path);

#endif
