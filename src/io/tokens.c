#include "io/tokens.h"

#include "io/masked_tokens.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)

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

/* Maps the whole file read-only; fails on a missing or empty file. */
static mt_status map_file(const char *path, void **map, size_t *bytes) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open token file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return mt_fail(MT_ERR_IO, "%s: cannot stat token file: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mt_fail(MT_ERR_INVALID, "%s: token file is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return mt_fail(MT_ERR_INVALID, "%s: token file is empty", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) return mt_fail(MT_ERR_IO, "%s: cannot map token file: %s", path, strerror(err));
    *map = p;
    *bytes = (size_t)st.st_size;
    return MT_OK;
}

static mt_status open_llmc(const char *path, mt_tokens *t) {
    if (t->map_bytes < LLMC_HEADER_BYTES)
        return mt_fail(MT_ERR_INVALID, "%s: truncated llm.c header: %zu bytes, need %d", path,
                       t->map_bytes, LLMC_HEADER_BYTES);
    int32_t header[3];
    memcpy(header, t->map, sizeof header);
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
    if (t->map_bytes != expected)
        return mt_fail(MT_ERR_INVALID,
                       "%s: file is %zu bytes but its header promises %zu (%zu tokens of %d bytes "
                       "after a %d-byte header)",
                       path, t->map_bytes, expected, t->count, t->width, LLMC_HEADER_BYTES);
    t->ids = (const char *)t->map + LLMC_HEADER_BYTES;
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

static mt_status open_npy(const char *path, mt_tokens *t) {
    const unsigned char *b = t->map;
    int major = t->map_bytes >= 8 ? b[6] : 0;
    if (t->map_bytes >= 8 && (major < 1 || major > 3))
        return mt_fail(MT_ERR_INVALID, "%s: unsupported npy format version %d.%d", path, major, b[7]);
    size_t len_bytes = major == 1 ? 2 : 4; /* the header length field grew in version 2 */
    if (t->map_bytes < 8 + len_bytes)
        return mt_fail(MT_ERR_INVALID, "%s: truncated npy preamble (%zu bytes)", path, t->map_bytes);
    size_t header_len = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                                   : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
                                         (size_t)b[11] << 24;
    size_t data_offset = 8 + len_bytes + header_len;
    if (data_offset > t->map_bytes)
        return mt_fail(MT_ERR_INVALID, "%s: truncated npy header: needs %zu bytes, file has %zu",
                       path, data_offset, t->map_bytes);
    npy_header h = {.p = (const char *)b + 8 + len_bytes, .end = (const char *)b + data_offset};
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
    size_t payload = t->map_bytes - data_offset;
    if (t->count > payload / (size_t)t->width || payload != t->count * (size_t)t->width)
        return mt_fail(MT_ERR_INVALID,
                       "%s: npy payload is %zu bytes but the header promises %llu tokens of %d bytes",
                       path, payload, (unsigned long long)h.shape[0], t->width);
    t->ids = b + data_offset;
    t->format = MT_TOKENS_NPY;
    return MT_OK;
}

mt_status mt_tokens_open(const char *path, mt_tokens *tokens) {
    mt_tokens t = {0};
    MT_TRY(map_file(path, &t.map, &t.map_bytes));
    int32_t first = 0;
    memcpy(&first, t.map, t.map_bytes < 4 ? t.map_bytes : 4);
    mt_status st;
    if (t.map_bytes >= 6 && !memcmp(t.map, npy_magic, sizeof npy_magic)) {
        st = open_npy(path, &t);
    } else if (mt_masked_shard_magic(t.map, t.map_bytes)) {
        st = mt_masked_shard_parse(path, &t);
    } else if (first == LLMC_MAGIC || has_suffix(path, ".bin")) {
        st = open_llmc(path, &t);
    } else if (has_suffix(path, ".npy")) {
        st = mt_fail(MT_ERR_INVALID, "%s: not an npy file (bad magic)", path);
    } else {
        t.ids = t.map;
        t.count = t.map_bytes;
        t.width = 1;
        t.format = MT_TOKENS_TEXT;
        st = MT_OK;
    }
    if (st != MT_OK) {
        mt_tokens_close(&t);
        return st;
    }
    *tokens = t;
    return MT_OK;
}

void mt_tokens_close(mt_tokens *tokens) {
    if (tokens->map) munmap(tokens->map, tokens->map_bytes);
    *tokens = (mt_tokens){0};
}

void mt_tokens_copy(const mt_tokens *tokens, size_t start, size_t n, int32_t *dst) {
    for (size_t k = 0; k < n; k++) dst[k] = (int32_t)mt_tokens_get(tokens, start + k);
}

mt_status mt_tokens_validate(const mt_tokens *tokens, uint32_t vocab_size, const char *name) {
    for (size_t i = 0; i < tokens->count; i++) {
        uint32_t id = mt_tokens_get(tokens, i);
        if (id >= vocab_size)
            return mt_fail(MT_ERR_INVALID,
                           "%s: token %u at position %zu is outside the vocabulary of %u", name,
                           id, i, vocab_size);
    }
    return MT_OK;
}
