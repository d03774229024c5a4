#include "tokenizer/shard_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define LLMC_MAGIC 20240520
#define HEADER_BYTES 1024
#define BUF_BYTES (1u << 20)

char *mt_shard_name(const char *prefix, size_t index, int temporary) {
    char *name;
    if (asprintf(&name, "%s_%06zu.bin%s", prefix, index, temporary ? ".tmp" : "") < 0) return NULL;
    return name;
}

static mt_status io_error(const char *what, const char *path, int err) {
    return mt_fail(MT_ERR_IO, "%s: %s: %s", path, what, strerror(err));
}

mt_status mt_shard_writer_open(mt_shard_writer *w, const char *prefix, int width, int64_t shard_tokens) {
    *w = (mt_shard_writer){.fd = -1, .width = width, .shard_tokens = shard_tokens};
    if (width != 2 && width != 4) return mt_fail(MT_ERR_INVALID, "shards: ids of %d bytes are not 2 or 4", width);
    if (shard_tokens <= 0 || shard_tokens > INT32_MAX)
        return mt_fail(MT_ERR_INVALID, "shards: %lld tokens a shard is not in [1, %d] (the header counts in int32)",
                       (long long)shard_tokens, INT32_MAX);
    if (!(w->prefix = strdup(prefix)) || !(w->buf = malloc(BUF_BYTES)))
        return mt_fail(MT_ERR_NOMEM, "shards: cannot allocate a write buffer");
    w->buf_cap = BUF_BYTES;
    return mt_shard_prefix_claim(prefix, &w->place);
}

static mt_status flush(mt_shard_writer *w) {
    for (size_t done = 0; done < w->buf_len;) {
        ssize_t n = write(w->fd, w->buf + done, w->buf_len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            char *name = mt_shard_name(w->prefix, w->shards - 1, 1);
            mt_status st = io_error("cannot write", name ? name : w->prefix, err);
            free(name);
            return st;
        }
        done += (size_t)n;
    }
    w->buf_len = 0;
    return MT_OK;
}

/* Writes the open shard's header (now that its count is known), syncs and closes it. */
static mt_status close_shard(mt_shard_writer *w) {
    if (w->fd < 0) return MT_OK;
    MT_TRY(flush(w));
    int32_t header[HEADER_BYTES / 4] = {LLMC_MAGIC, w->width == 2 ? 1 : 2, (int32_t)w->in_shard};
    char *name = mt_shard_name(w->prefix, w->shards - 1, 1);
    if (!name) return mt_fail(MT_ERR_NOMEM, "shards: cannot copy a path");
    mt_status st = MT_OK;
    if (pwrite(w->fd, header, sizeof header, 0) != (ssize_t)sizeof header) st = io_error("cannot write the header", name, errno);
    else if (fsync(w->fd) != 0) st = io_error("cannot sync", name, errno);
    if (close(w->fd) != 0 && !st) st = io_error("cannot close", name, errno);
    w->fd = -1;
    free(name);
    return st;
}

static mt_status open_shard(mt_shard_writer *w) {
    char *name = mt_shard_name(w->prefix, w->shards, 1);
    if (!name) return mt_fail(MT_ERR_NOMEM, "shards: cannot copy a path");
    w->fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    mt_status st = w->fd < 0 ? io_error("cannot create", name, errno) : MT_OK;
    free(name);
    MT_TRY(st);
    w->shards++;
    w->in_shard = 0;
    /* The header's place; it is written once the count is known. */
    memset(w->buf, 0, HEADER_BYTES);
    w->buf_len = HEADER_BYTES;
    return MT_OK;
}

mt_status mt_shard_writer_write(mt_shard_writer *w, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (w->fd < 0) MT_TRY(open_shard(w));
        if (w->buf_len + 4 > w->buf_cap) MT_TRY(flush(w));
        uint32_t id = (uint32_t)ids[i];
        if (w->width == 2) {
            uint16_t v = (uint16_t)id;
            memcpy(w->buf + w->buf_len, &v, 2);
        } else {
            memcpy(w->buf + w->buf_len, &id, 4);
        }
        w->buf_len += (size_t)w->width;
        w->tokens++;
        if (++w->in_shard == w->shard_tokens) MT_TRY(close_shard(w));
    }
    return MT_OK;
}

mt_status mt_shard_writer_finish(mt_shard_writer *w) {
    MT_TRY(close_shard(w));
    if (w->shards == 0) return mt_fail(MT_ERR_INVALID, "%s: no tokens to write", w->prefix);
    for (size_t i = 0; i < w->shards; i++) {
        char *from = mt_shard_name(w->prefix, i, 1), *to = mt_shard_name(w->prefix, i, 0);
        mt_status st = !from || !to ? mt_fail(MT_ERR_NOMEM, "shards: cannot copy a path")
                       : rename(from, to) != 0 ? io_error("cannot rename the finished shard", from, errno)
                                               : MT_OK;
        free(from);
        free(to);
        if (st) {
            /* The shards already renamed go too: a partial set would pass for a whole one. */
            for (size_t k = 0; k < i; k++) {
                char *done = mt_shard_name(w->prefix, k, 0);
                if (done) unlink(done);
                free(done);
            }
            return st;
        }
    }
    w->shards = 0; /* nothing left for abort */
    mt_shard_prefix_release(&w->place, 0);
    free(w->buf);
    free(w->prefix);
    w->buf = NULL;
    w->prefix = NULL;
    return MT_OK;
}

void mt_shard_writer_abort(mt_shard_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    for (size_t i = 0; w->prefix && i < w->shards; i++) {
        char *name = mt_shard_name(w->prefix, i, 1);
        if (name) unlink(name);
        free(name);
    }
    w->shards = 0;
    if (w->prefix) mt_shard_prefix_release(&w->place, 1);
    free(w->buf);
    free(w->prefix);
    w->buf = NULL;
    w->prefix = NULL;
}
