/* Crash-safe checkpoints: a directory of named binary blobs plus a JSON metadata document.
 *
 *   <dir>/<name>.bin     one per blob: header (magic "MTCKBLOB", version, header size, payload
 *                        size) then the payload bytes, in host byte order
 *   <dir>/manifest.json  written last: {"blobs": [{"name", "file", "bytes", "xxh64"}], "format",
 *                        "meta": {...}, "version": 2, "manifest_xxh64"}; the last member is the
 *                        XXH64 of every byte of the file before it, so the manifest's own fields
 *                        (the step and settings in "meta" among them) are checked like the blobs
 *
 * The protocol of a run directory (docs/checkpoints.md says the same for users):
 *   - A write fills "<dir>.tmp-XXXXXX" beside the target, fsyncs every file and the directory,
 *     then renames it into place and fsyncs the parent. An existing complete checkpoint at the
 *     target is first renamed to "<dir>.old-XXXXXX" and deleted once the new one is in place; an
 *     existing directory that is not a complete checkpoint is never replaced (the write fails).
 *   - A deletion first renames the checkpoint to "<dir>.deleting-XXXXXX" (durably), then deletes
 *     its files. The name is the marker that proves a leftover to be a deletion cut short.
 *   - A directory "ckpt-<step>" with a manifest is a checkpoint; one without is incomplete and is
 *     never listed, resumed from or deleted: no write or deletion above leaves one, so it is
 *     someone else's (a copy in progress, a user's) and is reported and left alone.
 *   - Tidying after a crash removes "*.tmp-*" and "*.deleting-*" directories, removes an ".old-"
 *     one whose target is complete, and renames it back when the target is missing.
 *   - A run holds the directory's lock (train/run_lock.h) while it reads or writes any of this.
 * A crash at any moment leaves the previous checkpoint or the new one whole. The engine decides
 * what the blobs are (master weights, Adam moments, ...). */
#ifndef MT_IO_CHECKPOINT_H
#define MT_IO_CHECKPOINT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct {
    const char *name;  /* letters, digits, '_', '-', '.'; not starting with '.' */
    const void *data;
    size_t bytes;
} mt_ckpt_blob;

/* Writes the checkpoint `dir` (its parent must exist). `meta` may be NULL (stored as {}).
 * On failure the previous checkpoint at `dir`, if any, is untouched and the temp dir is gone. */
mt_status mt_checkpoint_write(const char *dir, const mt_ckpt_blob *blobs, int count,
                              const json_t *meta);

/* The same checkpoint written piece by piece, for a writer that walks memory in its own order:
 * the blobs and their sizes are declared up front, then each blob's payload is appended in order
 * (appends to different blobs may interleave), its checksum computed as it goes; finish writes
 * the manifest and installs the directory exactly as mt_checkpoint_write does (which is begin,
 * one append per blob, finish). A call that fails removes the temp dir and frees the writer;
 * after a failure, call nothing more on it. */
typedef struct mt_ckpt_writer mt_ckpt_writer;
typedef struct {
    const char *name;  /* as mt_ckpt_blob's */
    size_t bytes;
} mt_ckpt_blob_size;
mt_status mt_checkpoint_begin(mt_ckpt_writer **writer, const char *dir, const mt_ckpt_blob_size *blobs,
                              int count);
mt_status mt_checkpoint_append(mt_ckpt_writer *writer, int blob, const void *data, size_t bytes);
/* Fails when a blob got fewer bytes than declared. Frees the writer either way. */
mt_status mt_checkpoint_finish(mt_ckpt_writer *writer, const json_t *meta);
/* Gives up a write in progress: the temp dir goes and the writer is freed. */
void mt_checkpoint_abandon(mt_ckpt_writer *writer);

/* Reads blob `name` into dst, which must be exactly `bytes` long; verifies header, size and
 * checksum and names the file on any mismatch. */
mt_status mt_checkpoint_read(const char *dir, const char *name, void *dst, size_t bytes);

/* The same in pieces, for a reader that keeps the values in a form of its own: reads at most
 * `piece` bytes at a time into buf and hands each to sink(user, offset, buf, n) as it comes. The
 * checksum is known only at the end: on a mismatch the sink has seen the corrupt bytes and the
 * call fails, naming the file. A sink's failure ends the read with it. */
typedef mt_status (*mt_ckpt_sink)(void *user, size_t offset, const void *data, size_t bytes);
mt_status mt_checkpoint_read_pieces(const char *dir, const char *name, size_t bytes, void *buf, size_t piece,
                                    mt_ckpt_sink sink, void *user);

/* Checks every blob the manifest lists (header, size, checksum) without loading it: each file is
 * read through once in pieces. */
mt_status mt_checkpoint_verify(const char *dir);

/* The metadata document; the caller owns the reference (json_decref). */
mt_status mt_checkpoint_read_meta(const char *dir, json_t **meta);

/* "<run_dir>/ckpt-<step, 6+ digits>"; fails if it does not fit in `cap` bytes. */
mt_status mt_checkpoint_path(char *path, size_t cap, const char *run_dir, int64_t step);

typedef struct {
    int64_t step;
    char *path;
} mt_ckpt_entry;

/* The complete checkpoints (ckpt-<step> with a manifest) under run_dir, newest first. A missing
 * run_dir holds none. Free with mt_checkpoint_list_free. */
mt_status mt_checkpoint_list(const char *run_dir, mt_ckpt_entry **entries, int *count);
void mt_checkpoint_list_free(mt_ckpt_entry *entries, int count);

/* Deletes all but the newest `keep` (>= 1) complete checkpoints of steps up to `upto_step` under
 * run_dir, sparing the one of step `spare_step` (-1: none) wherever it stands. Checkpoints past
 * upto_step (of a stretch of the run abandoned by a resume from an older one) are left alone. */
mt_status mt_checkpoint_keep(const char *run_dir, int keep, int64_t spare_step, int64_t upto_step);

/* Replaces the metadata of the checkpoint `dir` (the manifest is rewritten beside itself, sealed,
 * and renamed over the old one: a crash leaves one or the other). */
mt_status mt_checkpoint_update_meta(const char *dir, const json_t *meta);

/* Tidies what a crash can leave under run_dir (see the protocol above): unfinished writes
 * ("ckpt-N.tmp-*") and deletions cut short ("ckpt-N.deleting-*") are deleted; an old checkpoint
 * moved aside for its replacement ("ckpt-N.old-*") is deleted when ckpt-N is complete, else
 * renamed back. A "ckpt-N" without a manifest is reported and left alone. Each action is logged. */
mt_status mt_checkpoint_tidy(const char *run_dir);

#endif
