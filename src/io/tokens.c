#include "io/tokens.h"

#include "io/masked_tokens.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)
/* The most of a file's head read to tell its format: an llm.c header, an .npy header. */
#define HEAD_MAX (1 << 20)
#define READ_PIECE (1 << 20)

/* The open file behind an mt_tokens, and what it was when opened. */
struct mt_token_reader {
    int fd;
    char *path;
    size_t data_offset;       /* the first id's byte */
    size_t mask_offset;       /* masked shards: the first mask byte */
    int mask_encoding;        /* masked shards: MT_MASKED_ENCODING_* */
    uint64_t *example_starts; /* masked shards that record examples: each one's first token */
    size_t examples;
    off_t size;
    struct timespec mtime;
    mt_status error;          /* the first failed read; later reads fail the same way */
    char message[1024];
};

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

const char *mt_token_format_name(mt_token_format format) {
    switch (format) {
    case MT_TOKENS_LLMC: return "llm.c shard";
    case MT_TOKENS_NPY: return "npy array";
    case MT_TOKENS_TEXT: return "text bytes";
    case MT_TOKENS_MASKED: return "masked shard";
    }
    return "unknown";
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* "a FIFO", "a directory": what a file that is not a regular one is. */
static const char *file_kind(mode_t mode) {
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

/* Opens the file without blocking (a FIFO without a writer would block open(2) for ever) and
 * refuses anything but a non-empty regular file. */
static mt_status open_file(const char *path, mt_token_reader *r) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open token file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return mt_fail(MT_ERR_IO, "%s: cannot stat token file: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mt_fail(MT_ERR_INVALID, "%s: the token file is %s; give a regular file", path, file_kind(st.st_mode));
    }
    if (st.st_size == 0) {
        close(fd);
        return mt_fail(MT_ERR_INVALID, "%s: token file is empty", path);
    }
    r->fd = fd;
    r->size = st.st_size;
    r->mtime = st.st_mtim;
    return MT_OK;
}

/* Sets the reader's error (first one wins) and returns it. */
static mt_status read_failed(mt_token_reader *r, mt_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mt_status read_failed(mt_token_reader *r, mt_status status, const char *fmt, ...) {
    if (r->error == MT_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->message, sizeof r->message, fmt, ap);
        va_end(ap);
        r->error = status;
    }
    return mt_fail(r->error, "%s", r->message);
}

/* Reads `bytes` at `offset`, after checking that the file is still what it was when opened. */
static mt_status read_at(mt_token_reader *r, size_t offset, void *dst, size_t bytes) {
    if (r->error != MT_OK) return mt_fail(r->error, "%s", r->message);
    struct stat st;
    if (fstat(r->fd, &st) != 0)
        return read_failed(r, MT_ERR_IO, "%s: cannot stat token file: %s", r->path, strerror(errno));
    if (st.st_size != r->size || st.st_mtim.tv_sec != r->mtime.tv_sec || st.st_mtim.tv_nsec != r->mtime.tv_nsec)
        return read_failed(r, MT_ERR_IO, "%s changed while the run was reading it (%lld bytes when opened, %lld "
                           "now%s): stopping rather than training on other data; restore the file, or start "
                           "over with the new one", r->path, (long long)r->size, (long long)st.st_size,
                           st.st_size == r->size ? ", modified since" : "");
    for (char *p = dst; bytes > 0;) {
        ssize_t n = pread(r->fd, p, bytes, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return read_failed(r, MT_ERR_IO, "%s: read failed at byte %zu: %s", r->path, offset, strerror(errno));
        if (n == 0)
            return read_failed(r, MT_ERR_IO, "%s: ends at byte %zu while the run was reading it (it was %lld bytes "
                               "when opened): the file was cut short", r->path, offset, (long long)r->size);
        p += n;
        offset += (size_t)n;
        bytes -= (size_t)n;
    }
    return MT_OK;
}

/* The first bytes of a file (len of them, at most HEAD_MAX) and its size. */
typedef struct {
    const unsigned char *b;
    size_t len, size;
} file_head;

static mt_status open_llmc(const char *path, const file_head *h, mt_tokens *t, size_t *data_offset) {
    if (h->size < LLMC_HEADER_BYTES)
        return mt_fail(MT_ERR_INVALID, "%s: truncated llm.c header: %zu bytes, need %d", path,
                       h->size, LLMC_HEADER_BYTES);
    int32_t header[3];
    memcpy(header, h->b, sizeof header);
    if (header[0] != LLMC_MAGIC)
        return mt_fail(MT_ERR_INVALID, "%s: bad llm.c magic %d (expected %d)", path, header[0],
                       LLMC_MAGIC);
    if (header[1] != 1 && header[1] != 2)
        return mt_fail(MT_ERR_INVALID,
                       "%s: unsupported llm.c version %d (1 = uint16 tokens, 2 = uint32 tokens)",
                       path, header[1]);
    if (header[2] <= 0)
        return mt_fail(MT_ERR_INVALID, "%s: llm.c header promises %d tokens", path, header[2]);
    t->width = header[1] == 1 ? 2 : 4;
    t->count = (size_t)header[2];
    size_t expected = LLMC_HEADER_BYTES + t->count * (size_t)t->width;
    if (h->size != expected)
        return mt_fail(MT_ERR_INVALID,
                       "%s: file is %zu bytes but its header promises %zu (%zu tokens of %d bytes "
                       "after a %d-byte header)",
                       path, h->size, expected, t->count, t->width, LLMC_HEADER_BYTES);
    *data_offset = LLMC_HEADER_BYTES;
    t->format = MT_TOKENS_LLMC;
    return MT_OK;
}

/* The .npy header is a Python dict literal, e.g.
 *   {'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }
 * A small recursive-descent reader over exactly that grammar: string keys; values that are a
 * quoted string, True/False, or a tuple of non-negative integers. */
typedef struct {
    const char *p, *end;
    char descr[16];
    int fortran_order;
    int ndim;
    uint64_t shape[8];
    bool seen_descr, seen_order, seen_shape;
} npy_header;

static void skip_space(npy_header *h) {
    while (h->p < h->end && isspace((unsigned char)*h->p)) h->p++;
}

static bool eat(npy_header *h, char c) {
    skip_space(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return true;
    }
    return false;
}

static bool read_string(npy_header *h, char *out, size_t cap) {
    skip_space(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return false;
    char quote = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != quote) {
        if (n + 1 >= cap) return false;
        out[n++] = *h->p++;
    }
    out[n] = '\0';
    return eat(h, quote);
}

static bool read_word(npy_header *h, const char *word) {
    skip_space(h);
    size_t n = strlen(word);
    if ((size_t)(h->end - h->p) < n || memcmp(h->p, word, n)) return false;
    h->p += n;
    return true;
}

static bool read_shape(npy_header *h) {
    if (!eat(h, '(')) return false;
    h->ndim = 0;
    while (!eat(h, ')')) {
        skip_space(h);
        if (h->ndim == 8 || h->p >= h->end || !isdigit((unsigned char)*h->p)) return false;
        uint64_t v = 0;
        while (h->p < h->end && isdigit((unsigned char)*h->p)) {
            if (v > (UINT64_MAX - 9) / 10) return false;
            v = v * 10 + (uint64_t)(*h->p++ - '0');
        }
        h->shape[h->ndim++] = v;
        if (!eat(h, ',') && !(skip_space(h), h->p < h->end && *h->p == ')')) return false;
    }
    return true;
}

static bool read_entry(npy_header *h) {
    char key[32];
    if (!read_string(h, key, sizeof key) || !eat(h, ':')) return false;
    if (!strcmp(key, "descr") && !h->seen_descr) {
        h->seen_descr = true;
        return read_string(h, h->descr, sizeof h->descr);
    }
    if (!strcmp(key, "fortran_order") && !h->seen_order) {
        h->seen_order = true;
        h->fortran_order = read_word(h, "True");
        return h->fortran_order || read_word(h, "False");
    }
    if (!strcmp(key, "shape") && !h->seen_shape) {
        h->seen_shape = true;
        return read_shape(h);
    }
    return false; /* an unknown or repeated key */
}

static bool parse_npy_dict(npy_header *h) {
    if (!eat(h, '{')) return false;
    while (!eat(h, '}')) {
        if (!read_entry(h)) return false;
        if (!eat(h, ',') && !(skip_space(h), h->p < h->end && *h->p == '}')) return false;
    }
    skip_space(h); /* the header is padded with spaces and ends with '\n' */
    return h->p == h->end && h->seen_descr && h->seen_order && h->seen_shape;
}

static mt_status open_npy(const char *path, const file_head *fh, mt_tokens *t, size_t *data_offset) {
    const unsigned char *b = fh->b;
    int major = fh->size >= 8 ? b[6] : 0;
    if (fh->size >= 8 && (major < 1 || major > 3))
        return mt_fail(MT_ERR_INVALID, "%s: unsupported npy format version %d.%d", path, major, b[7]);
    size_t len_bytes = major == 1 ? 2 : 4; /* the header length field grew in version 2 */
    if (fh->size < 8 + len_bytes)
        return mt_fail(MT_ERR_INVALID, "%s: truncated npy preamble (%zu bytes)", path, fh->size);
    size_t header_len = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                                   : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
                                         (size_t)b[11] << 24;
    size_t offset = 8 + len_bytes + header_len;
    if (offset > fh->size)
        return mt_fail(MT_ERR_INVALID, "%s: truncated npy header: needs %zu bytes, file has %zu",
                       path, offset, fh->size);
    if (offset > fh->len)
        return mt_fail(MT_ERR_INVALID, "%s: npy header of %zu bytes: more than the %d this reader takes", path,
                       header_len, HEAD_MAX);
    npy_header h = {.p = (const char *)b + 8 + len_bytes, .end = (const char *)b + offset};
    if (!parse_npy_dict(&h))
        return mt_fail(MT_ERR_INVALID,
                       "%s: malformed npy header near byte %zu (expected {'descr': ..., "
                       "'fortran_order': ..., 'shape': (...)})",
                       path, (size_t)(h.p - (const char *)b));
    if (strcmp(h.descr, "<u2") && strcmp(h.descr, "<u4"))
        return mt_fail(MT_ERR_INVALID, "%s: npy dtype '%s' not supported (need '<u2' or '<u4')",
                       path, h.descr);
    if (h.ndim != 1)
        return mt_fail(MT_ERR_INVALID, "%s: npy array has %d dimensions, need 1", path, h.ndim);
    if (h.fortran_order)
        return mt_fail(MT_ERR_INVALID, "%s: npy array is in Fortran order, need C order", path);
    t->width = h.descr[2] - '0';
    t->count = h.shape[0];
    if (t->count == 0) return mt_fail(MT_ERR_INVALID, "%s: npy array holds no tokens", path);
    size_t payload = fh->size - offset;
    if (t->count > payload / (size_t)t->width || payload != t->count * (size_t)t->width)
        return mt_fail(MT_ERR_INVALID,
                       "%s: npy payload is %zu bytes but the header promises %llu tokens of %d bytes",
                       path, payload, (unsigned long long)h.shape[0], t->width);
    *data_offset = offset;
    t->format = MT_TOKENS_NPY;
    return MT_OK;
}

/* Tells the format from the file's head and sets count, width and where the ids start. */
static mt_status read_format(const char *path, const file_head *h, mt_tokens *t, size_t *data_offset) {
    int32_t first = 0;
    memcpy(&first, h->b, h->len < 4 ? h->len : 4);
    if (h->len >= 6 && !memcmp(h->b, npy_magic, sizeof npy_magic)) return open_npy(path, h, t, data_offset);
    if (mt_masked_shard_magic(h->b, h->len)) {
        mt_masked_layout m;
        MT_TRY(mt_masked_shard_parse(path, h->b, h->len, h->size, &m));
        t->count = m.count;
        t->width = m.width;
        t->format = MT_TOKENS_MASKED;
        t->reader->mask_offset = m.mask_offset;
        t->reader->mask_encoding = m.encoding;
        *data_offset = m.data_offset;
        return MT_OK;
    }
    if (first == LLMC_MAGIC || has_suffix(path, ".bin")) return open_llmc(path, h, t, data_offset);
    if (has_suffix(path, ".npy")) return mt_fail(MT_ERR_INVALID, "%s: not an npy file (bad magic)", path);
    t->count = h->size;
    t->width = 1;
    t->format = MT_TOKENS_TEXT;
    *data_offset = 0;
    return MT_OK;
}

/* Notes that an example starts at token i. */
static mt_status add_example(mt_token_reader *r, size_t *cap, size_t i, const char *path) {
    if (r->examples == *cap) {
        size_t grown = *cap ? *cap * 2 : 1024;
        uint64_t *p = realloc(r->example_starts, grown * sizeof *p);
        if (!p) return mt_fail(MT_ERR_NOMEM, "%s: cannot hold the starts of %zu examples", path, grown);
        r->example_starts = p;
        *cap = grown;
    }
    r->example_starts[r->examples++] = i;
    return MT_OK;
}

/* A masked shard's mask bytes, all read once, a piece at a time, when opened: each 0 or 1 (encoding
 * 1), or loss and example-start bits with the first token starting an example (encoding 2), whose
 * starts are noted. */
static mt_status read_mask(const mt_tokens *t, const char *path) {
    mt_token_reader *r = t->reader;
    int starts = r->mask_encoding == MT_MASKED_ENCODING_STARTS;
    unsigned most = starts ? MT_MASKED_LOSS | MT_MASKED_STARTS : MT_MASKED_LOSS;
    uint8_t *piece = malloc(READ_PIECE);
    if (!piece) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate a read buffer", path);
    size_t cap = 0;
    mt_status st = MT_OK;
    for (size_t at = 0; st == MT_OK && at < t->count; at += READ_PIECE) {
        size_t n = t->count - at < READ_PIECE ? t->count - at : READ_PIECE;
        st = read_at(r, r->mask_offset + at, piece, n);
        for (size_t k = 0; st == MT_OK && k < n; k++) {
            if (piece[k] > most)
                st = mt_fail(MT_ERR_INVALID, "%s: mask byte of token %zu is %u (%s)", path, at + k, piece[k],
                             starts ? "0 to 3: a loss bit and an example-start bit" : "0 or 1");
            else if (starts && at + k == 0 && !(piece[k] & MT_MASKED_STARTS))
                st = mt_fail(MT_ERR_INVALID, "%s: the first token does not start an example (mask byte %u)", path,
                             piece[k]);
            else if (starts && piece[k] & MT_MASKED_STARTS)
                st = add_example(r, &cap, at + k, path);
        }
    }
    free(piece);
    return st;
}

mt_status mt_tokens_open(const char *path, mt_tokens *tokens) {
    *tokens = (mt_tokens){0};
    mt_token_reader *r = calloc(1, sizeof *r);
    if (r) r->path = strdup(path);
    if (!r || !r->path) {
        free(r);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot open token file: out of memory", path);
    }
    r->fd = -1;
    tokens->reader = r;
    mt_status st = open_file(path, r);
    file_head h = {.size = (size_t)r->size};
    h.len = h.size < HEAD_MAX ? h.size : HEAD_MAX;
    unsigned char *head = st == MT_OK ? malloc(h.len) : NULL;
    if (st == MT_OK && !head) st = mt_fail(MT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, h.len);
    if (st == MT_OK) st = read_at(r, 0, head, h.len);
    h.b = head;
    if (st == MT_OK) st = read_format(path, &h, tokens, &r->data_offset);
    free(head);
    if (st == MT_OK && tokens->format == MT_TOKENS_MASKED) st = read_mask(tokens, path);
    if (st != MT_OK) mt_tokens_close(tokens);
    return st;
}

void mt_tokens_close(mt_tokens *tokens) {
    mt_token_reader *r = tokens->reader;
    if (r) {
        if (r->fd >= 0) close(r->fd);
        free(r->path);
        free(r->example_starts);
        free(r);
    }
    *tokens = (mt_tokens){0};
}

/* Reads ids [start, start + n) into dst, widened in place from the back of dst's bytes: id k is
 * read before dst[k] is written, and dst[k] never reaches an id not yet read. */
static mt_status read_ids(const mt_tokens *t, size_t start, size_t n, int32_t *dst) {
    size_t w = (size_t)t->width, bytes = n * w;
    unsigned char *raw = (unsigned char *)dst + n * sizeof *dst - bytes;
    MT_TRY(read_at(t->reader, t->reader->data_offset + start * w, raw, bytes));
    for (size_t k = 0; k < n; k++) {
        const unsigned char *p = raw + k * w;
        uint32_t id = w == 1 ? p[0] : w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                                             : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                                   (uint32_t)p[3] << 24;
        dst[k] = (int32_t)id;
    }
    return MT_OK;
}

void mt_tokens_copy(const mt_tokens *tokens, size_t start, size_t n, int32_t *dst) {
    if (read_ids(tokens, start, n, dst) != MT_OK) memset(dst, 0, n * sizeof *dst);
}

uint32_t mt_tokens_get(const mt_tokens *tokens, size_t i) {
    int32_t id;
    mt_tokens_copy(tokens, i, 1, &id);
    return (uint32_t)id;
}

void mt_tokens_copy_mask(const mt_tokens *tokens, size_t start, size_t n, uint8_t *dst) {
    if (tokens->format != MT_TOKENS_MASKED) {
        memset(dst, 1, n);
        return;
    }
    if (read_at(tokens->reader, tokens->reader->mask_offset + start, dst, n) != MT_OK) memset(dst, 0, n);
    if (tokens->reader->mask_encoding == MT_MASKED_ENCODING_STARTS)
        for (size_t k = 0; k < n; k++) dst[k] &= MT_MASKED_LOSS;
}

size_t mt_tokens_examples(const mt_tokens *tokens, const uint64_t **starts) {
    *starts = tokens->reader ? tokens->reader->example_starts : NULL;
    return tokens->reader ? tokens->reader->examples : 0;
}

mt_status mt_tokens_status(const mt_tokens *tokens) {
    const mt_token_reader *r = tokens->reader;
    if (!r) return mt_fail(MT_ERR_INVALID, "token file not open");
    return r->error == MT_OK ? MT_OK : mt_fail(r->error, "%s", r->message);
}

mt_status mt_tokens_validate(const mt_tokens *tokens, uint32_t vocab_size, const char *name) {
    enum { PIECE = READ_PIECE / 4 };
    int32_t *ids = malloc(PIECE * sizeof *ids);
    if (!ids) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate a read buffer", name);
    mt_status st = MT_OK;
    for (size_t at = 0; st == MT_OK && at < tokens->count; at += PIECE) {
        size_t n = tokens->count - at < PIECE ? tokens->count - at : PIECE;
        st = read_ids(tokens, at, n, ids);
        for (size_t k = 0; st == MT_OK && k < n; k++)
            if ((uint32_t)ids[k] >= vocab_size)
                st = mt_fail(MT_ERR_INVALID, "%s: token %u at position %zu is outside the vocabulary of %u", name,
                             (uint32_t)ids[k], at + k, vocab_size);
    }
    free(ids);
    return st;
}
