#include "io/masked_tokens.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { H_MAGIC, H_VERSION, H_HEADER_BYTES, H_WIDTH, H_COUNT_LO, H_COUNT_HI, H_MASK_ENCODING, H_RESERVED };

bool mt_masked_shard_magic(const void *bytes, size_t size) {
    int32_t magic;
    if (size < sizeof magic) return false;
    memcpy(&magic, bytes, sizeof magic);
    return magic == MT_MASKED_MAGIC;
}

/* The header's fields other than the count, each against the one value this version allows. */
static mt_status check_fields(const char *path, const int32_t *h) {
    if (h[H_MAGIC] != MT_MASKED_MAGIC)
        return mt_fail(MT_ERR_INVALID, "%s: bad masked shard magic 0x%08x (expected 0x%08x)", path,
                       (unsigned)h[H_MAGIC], MT_MASKED_MAGIC);
    if (h[H_VERSION] != MT_MASKED_VERSION)
        return mt_fail(MT_ERR_INVALID, "%s: unsupported masked shard version %d (this build reads %d)", path,
                       h[H_VERSION], MT_MASKED_VERSION);
    if (h[H_HEADER_BYTES] != MT_MASKED_HEADER_BYTES)
        return mt_fail(MT_ERR_INVALID, "%s: masked shard header size %d, expected %d", path, h[H_HEADER_BYTES],
                       MT_MASKED_HEADER_BYTES);
    if (h[H_WIDTH] != 2 && h[H_WIDTH] != 4)
        return mt_fail(MT_ERR_INVALID, "%s: masked shard id width %d bytes (2 or 4)", path, h[H_WIDTH]);
    if (h[H_MASK_ENCODING] != MT_MASKED_ENCODING_LOSS && h[H_MASK_ENCODING] != MT_MASKED_ENCODING_STARTS)
        return mt_fail(MT_ERR_INVALID, "%s: unknown masked shard mask encoding %d (1: a loss byte a token; 2: loss "
                       "and example-start bits)", path, h[H_MASK_ENCODING]);
    for (int i = H_RESERVED; i < MT_MASKED_HEADER_BYTES / 4; i++)
        if (h[i] != 0)
            return mt_fail(MT_ERR_INVALID, "%s: masked shard header word %d is %d; reserved words must be 0",
                           path, i, h[i]);
    return MT_OK;
}

mt_status mt_masked_shard_parse(const char *path, const void *head, size_t head_len, size_t size,
                                mt_masked_layout *layout) {
    if (head_len < MT_MASKED_HEADER_BYTES)
        return mt_fail(MT_ERR_INVALID, "%s: truncated masked shard header: %zu bytes, need %d", path, size,
                       MT_MASKED_HEADER_BYTES);
    int32_t h[MT_MASKED_HEADER_BYTES / 4];
    memcpy(h, head, sizeof h);
    MT_TRY(check_fields(path, h));
    uint64_t count = (uint64_t)(uint32_t)h[H_COUNT_LO] | (uint64_t)(uint32_t)h[H_COUNT_HI] << 32;
    size_t width = (size_t)h[H_WIDTH];
    if (count == 0) return mt_fail(MT_ERR_INVALID, "%s: masked shard holds no tokens", path);
    size_t payload = size - MT_MASKED_HEADER_BYTES;
    /* The division first: a count near 2^64 must not wrap the product. */
    if (count > payload / (width + 1) || payload != count * (width + 1))
        return mt_fail(MT_ERR_INVALID,
                       "%s: file is %zu bytes but its header promises %llu tokens (%zu-byte ids and a mask "
                       "byte each after a %d-byte header)",
                       path, size, (unsigned long long)count, width, MT_MASKED_HEADER_BYTES);
    *layout = (mt_masked_layout){.count = count, .width = (int)width, .encoding = h[H_MASK_ENCODING],
                                 .data_offset = MT_MASKED_HEADER_BYTES,
                                 .mask_offset = MT_MASKED_HEADER_BYTES + count * width};
    return MT_OK;
}

/* The most mask bytes read at once. */
#define MASK_PIECE 4096

void mt_tokens_mask_targets(const mt_tokens *tokens, size_t start, size_t n, int32_t *targets) {
    if (tokens->format != MT_TOKENS_MASKED) return;
    uint8_t mask[MASK_PIECE];
    for (size_t at = 0; at < n; at += MASK_PIECE) {
        size_t k = n - at < MASK_PIECE ? n - at : MASK_PIECE;
        mt_tokens_copy_mask(tokens, start + at, k, mask);
        for (size_t i = 0; i < k; i++)
            if (!mask[i]) targets[at + i] = -1;
    }
}

size_t mt_tokens_loss_count(const mt_tokens *tokens) {
    if (tokens->format != MT_TOKENS_MASKED) return tokens->count;
    uint8_t mask[MASK_PIECE];
    size_t n = 0;
    for (size_t at = 0; at < tokens->count; at += MASK_PIECE) {
        size_t k = tokens->count - at < MASK_PIECE ? tokens->count - at : MASK_PIECE;
        mt_tokens_copy_mask(tokens, at, k, mask);
        for (size_t i = 0; i < k; i++) n += mask[i];
    }
    return n;
}

/* ---- the writer ---- */

struct mt_masked_writer {
    char path[PATH_MAX], tmp[PATH_MAX];
    FILE *f;
    int width;
    uint8_t *mask;
    size_t count, cap;
};

mt_status mt_masked_writer_open(mt_masked_writer **out, const char *path, int width) {
    if (width != 2 && width != 4)
        return mt_fail(MT_ERR_INVALID, "%s: masked shard id width %d bytes (2 or 4)", path, width);
    mt_masked_writer *w = mt_calloc(1, sizeof *w, "a masked shard writer");
    if (!w) return MT_ERR_NOMEM;
    w->width = width;
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path ||
        snprintf(w->tmp, sizeof w->tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof w->tmp) {
        free(w);
        return mt_fail(MT_ERR_INVALID, "%s: path too long", path);
    }
    int fd = mkstemp(w->tmp);
    if (fd < 0) {
        mt_status st = mt_fail(MT_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        free(w);
        return st;
    }
    fchmod(fd, 0644); /* mkstemp makes it private; data is for everyone */
    w->f = fdopen(fd, "wb");
    static const char zero[MT_MASKED_HEADER_BYTES];
    if (!w->f || fwrite(zero, 1, sizeof zero, w->f) != sizeof zero) {
        mt_status st = mt_fail(MT_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
        if (!w->f) close(fd);
        mt_masked_writer_abort(w);
        return st;
    }
    *out = w;
    return MT_OK;
}

mt_status mt_masked_writer_add(mt_masked_writer *w, const uint32_t *ids, const uint8_t *mask, size_t n, int example) {
    if (n == 0) return MT_OK;
    if (w->count + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->count + n) cap *= 2;
        uint8_t *grown = realloc(w->mask, cap);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold the mask of %zu tokens", w->path, cap);
        w->mask = grown;
        w->cap = cap;
    }
    /* The ids in the file's width, a block at a time. */
    unsigned char block[4096 * 4];
    size_t per_block = sizeof block / (size_t)w->width;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < per_block ? n - done : per_block;
        for (size_t i = 0; i < k; i++) {
            uint32_t id = ids[done + i];
            if (w->width == 2 && id > UINT16_MAX)
                return mt_fail(MT_ERR_INVALID, "%s: token id %u does not fit a 16-bit shard", w->path, id);
            uint16_t u16 = (uint16_t)id;
            memcpy(block + i * (size_t)w->width, w->width == 2 ? (const void *)&u16 : (const void *)&id,
                   (size_t)w->width);
            w->mask[w->count + done + i] = mask[done + i] != 0 ? MT_MASKED_LOSS : 0;
        }
        if (fwrite(block, (size_t)w->width, k, w->f) != k)
            return mt_fail(MT_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
        done += k;
    }
    if (example || w->count == 0) w->mask[w->count] |= MT_MASKED_STARTS;
    w->count += n;
    return MT_OK;
}

size_t mt_masked_writer_count(const mt_masked_writer *w) { return w->count; }

static mt_status finish_file(mt_masked_writer *w) {
    if (w->count == 0) return mt_fail(MT_ERR_INVALID, "%s: no tokens to write", w->path);
    int32_t h[MT_MASKED_HEADER_BYTES / 4] = {0};
    h[H_MAGIC] = MT_MASKED_MAGIC;
    h[H_VERSION] = MT_MASKED_VERSION;
    h[H_HEADER_BYTES] = MT_MASKED_HEADER_BYTES;
    h[H_WIDTH] = w->width;
    h[H_COUNT_LO] = (int32_t)(uint32_t)(w->count & 0xffffffffu);
    h[H_COUNT_HI] = (int32_t)(uint32_t)((uint64_t)w->count >> 32);
    h[H_MASK_ENCODING] = MT_MASKED_ENCODING_STARTS;
    if (fwrite(w->mask, 1, w->count, w->f) != w->count || fseek(w->f, 0, SEEK_SET) != 0 ||
        fwrite(h, sizeof h, 1, w->f) != 1 || fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        return mt_fail(MT_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    if (rename(w->tmp, w->path) != 0)
        return mt_fail(MT_ERR_IO, "%s: cannot rename %s into place: %s", w->path, w->tmp, strerror(errno));
    w->tmp[0] = '\0';
    return MT_OK;
}

mt_status mt_masked_writer_finish(mt_masked_writer *w) {
    mt_status st = finish_file(w);
    mt_masked_writer_abort(w); /* frees; removes the temporary file only when it is still there */
    return st;
}

void mt_masked_writer_abort(mt_masked_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->tmp[0]) unlink(w->tmp);
    free(w->mask);
    free(w);
}
