/* Crash-safe checkpoints: a directory of named binary blobs plus a JSON metadata document.
 *
 *   <dir>/<name>.bin     one per blob: header (magic "MTCKBLOB", version, header size, payload
 *                        size) then the payload bytes, in host byte order
 *   <dir>/manifest.json  written last: {"format", "version", "meta": {...}, "blobs": [{"name",
 *                        "file", "bytes", "xxh64"}]}; a directory without it is incomplete
 *
 * A write fills "<dir>.tmp-XXXXXX" beside the target, fsyncs every file and the directory, then
 * renames it into place (an existing target is first renamed aside, and deleted after) and
 * fsyncs the parent. A crash at any moment leaves either the old or the new checkpoint whole.
 * The engine decides what the blobs are (master weights, Adam moments, ...). */
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

/* Reads blob `name` into dst, which must be exactly `bytes` long; verifies header, size and
 * checksum and names the file on any mismatch. */
mt_status mt_checkpoint_read(const char *dir, const char *name, void *dst, size_t bytes);

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

/* Deletes all but the newest `keep` (>= 1) complete checkpoints under run_dir. */
mt_status mt_checkpoint_keep(const char *run_dir, int keep);

/* Tidies what a crash during a write can leave under run_dir: temporary directories of
 * unfinished writes ("ckpt-N.tmp-*") are deleted; an old checkpoint moved aside for its
 * replacement ("ckpt-N.old-*") is deleted when ckpt-N is complete, else renamed back. Each action
 * is logged. */
mt_status mt_checkpoint_tidy(const char *run_dir);

#endif
