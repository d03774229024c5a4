/* What identifies a file's contents, kept so that a later reader can tell whether the file is
 * still the one it was: its path, size, modification time and an XXH3 of its bytes. A file of up
 * to MT_IDENTITY_WHOLE_BYTES is hashed whole; a larger one by its first and last
 * MT_IDENTITY_END_BYTES and MT_IDENTITY_SAMPLES pieces of MT_IDENTITY_SAMPLE_BYTES spread evenly
 * between them (a few MiB read, whatever its size), which an edit in place almost always meets.
 *
 * As JSON (a run's checkpoints keep it, train/run_inputs.h): {"path", "bytes", "mtime_ns",
 * "xxh3" (16 hex digits), "hashed": "whole" or "sampled"}. */
#ifndef MT_IO_FILE_IDENTITY_H
#define MT_IO_FILE_IDENTITY_H

#include <jansson.h>
#include <stddef.h>

#include "util/status.h"

#define MT_IDENTITY_WHOLE_BYTES ((long long)64 << 20)
#define MT_IDENTITY_END_BYTES (1 << 20)
#define MT_IDENTITY_SAMPLES 64
#define MT_IDENTITY_SAMPLE_BYTES (64 << 10)

/* The identity of the regular file at `path` (stored as given: make it absolute first); fails
 * naming the file when it cannot be read. */
mt_status mt_file_identity(const char *path, json_t **identity);

/* 0 when the file `now` describes is the one `stored` did; else 1, with what changed in why[cap]
 * ("its size was 1000 bytes, now 2000", "its contents differ (the same size)", "it was modified
 * (the modification time moved from ... to ...), though its size and the bytes hashed are the
 * same"). A file hashed whole whose bytes are the same is the same whatever its time. A stored
 * identity that is not of this form counts as changed, saying so. */
int mt_file_identity_differs(const json_t *stored, const json_t *now, char *why, size_t cap);

#endif
