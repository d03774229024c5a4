/* The BPE model: vocabulary, merge ranks, and the merge loop of tokenizers' BPE (a min-heap of
 * candidate merges ordered by rank then position, over a linked list of symbols), with its
 * byte_fallback, unk_token/fuse_unk, ignore_merges and subword prefix/suffix rules.
 *
 * Byte-level models (a ByteLevel pre-tokenizer) take words as raw bytes: the vocabulary is also
 * indexed by the bytes each token stands for, so that no word is ever mapped to the byte alphabet
 * and back. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/internal.h"
#include "tokenizer/utf8.h"
#include "util/log.h"

#define EMPTY_KEY UINT64_MAX
/* unk_token is set but the vocabulary lacks it: an error only when a word needs it, as in
 * tokenizers. */
#define UNK_MISSING (-2)

typedef struct {
    int32_t id, prev, next;
    uint32_t len; /* bytes of the word it covers; 0 once merged into its left neighbour */
} symbol;

typedef struct {
    uint32_t rank, pos;
    int32_t new_id;
} candidate;

static size_t merge_index(uint64_t key, size_t mask) {
    key ^= key >> 31;
    key *= 0x9E3779B97F4A7C15ull;
    return (size_t)(key >> 17) & mask;
}

static const mt_merge_slot *merge_get(const mt_bpe *b, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = merge_index(key, b->merges_mask);; i = (i + 1) & b->merges_mask) {
        const mt_merge_slot *s = &b->merges[i];
        if (s->key == key) return s;
        if (s->key == EMPTY_KEY) return NULL;
    }
}

/* Later merges of the same pair replace earlier ones, as collecting them into a map does. */
static void merge_set(mt_bpe *b, int32_t left, int32_t right, uint32_t rank, int32_t new_id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = merge_index(key, b->merges_mask);
    while (b->merges[i].key != EMPTY_KEY && b->merges[i].key != key) i = (i + 1) & b->merges_mask;
    if (b->merges[i].key == EMPTY_KEY) b->n_merges++;
    b->merges[i] = (mt_merge_slot){key, rank, new_id};
}

/* ---- loading ---- */

static mt_status parse_vocab(mt_bpe *b, const json_t *vocab, const char *what) {
    if (!json_is_object(vocab))
        return mt_fail(MT_ERR_INVALID, "%s: field 'vocab' must be an object, found %s", what,
                       vocab ? mt_json_kind(vocab) : "nothing");
    MT_TRY(mt_strmap_init(&b->vocab, json_object_size(vocab), what));
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)vocab, key, value) {
        if (!json_is_integer(value) || json_integer_value(value) < 0 || json_integer_value(value) >= MT_MAX_TOKEN_ID)
            return mt_fail(MT_ERR_INVALID, "%s: vocab[\"%s\"] must be an integer id in [0, %d)", what, key,
                           MT_MAX_TOKEN_ID);
        size_t len = strlen(key);
        if (mt_utf8_check(key, len, NULL)) return mt_fail(MT_ERR_INVALID, "%s: a vocab token is not UTF-8", what);
        MT_TRY(mt_strmap_set(&b->vocab, key, len, (int32_t)json_integer_value(value)));
    }
    return MT_OK;
}

/* One merge as its two token strings: "a b" (the older format) or ["a", "b"]. */
static mt_status merge_parts(const json_t *m, size_t rank, const char *what, const char **a, size_t *a_len,
                             const char **b, size_t *b_len) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *space = strchr(s, ' ');
        if (!space || strchr(space + 1, ' '))
            return mt_fail(MT_ERR_INVALID, "%s: merges[%zu] \"%s\" is not two tokens separated by one space", what,
                           rank, s);
        *a = s;
        *a_len = (size_t)(space - s);
        *b = space + 1;
        *b_len = strlen(space + 1);
        return MT_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *a_len = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *b_len = json_string_length(json_array_get(m, 1));
        return MT_OK;
    }
    return mt_fail(MT_ERR_INVALID, "%s: merges[%zu] must be \"a b\" or [\"a\", \"b\"], found %s", what, rank,
                   mt_json_kind(m));
}

static mt_status token_id(const mt_bpe *b, const char *s, size_t len, size_t rank, const char *what, int32_t *id) {
    *id = mt_strmap_get(&b->vocab, s, len);
    if (*id < 0)
        return mt_fail(MT_ERR_INVALID, "%s: merges[%zu]: token \"%.*s\" is not in the vocabulary", what, rank,
                       (int)(len > 100 ? 100 : len), s);
    return MT_OK;
}

static mt_status parse_merges(mt_bpe *b, const json_t *merges, const char *what) {
    if (!json_is_array(merges))
        return mt_fail(MT_ERR_INVALID, "%s: field 'merges' must be a list, found %s", what,
                       merges ? mt_json_kind(merges) : "nothing");
    size_t n = json_array_size(merges), slots = 16;
    if (n >= UINT32_MAX) return mt_fail(MT_ERR_INVALID, "%s: %zu merges are too many", what, n);
    while (slots < n * 2) slots *= 2;
    b->merges = malloc(slots * sizeof *b->merges);
    if (!b->merges) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate %zu merge slots", what, slots);
    for (size_t i = 0; i < slots; i++) b->merges[i].key = EMPTY_KEY;
    b->merges_mask = slots - 1;
    mt_str joined = {0};
    mt_status st = MT_OK;
    for (size_t rank = 0; rank < n && !st; rank++) {
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        int32_t lid, rid, nid;
        st = merge_parts(json_array_get(merges, rank), rank, what, &l, &ll, &r, &rl);
        if (!st) st = token_id(b, l, ll, rank, what, &lid);
        if (!st) st = token_id(b, r, rl, rank, what, &rid);
        /* The merged token drops the right part's continuing-subword prefix. */
        size_t skip = b->prefix_len < rl ? b->prefix_len : rl;
        joined.len = 0;
        if (!st) st = mt_str_put(&joined, l, ll);
        if (!st) st = mt_str_put(&joined, r + skip, rl - skip);
        if (!st) st = token_id(b, joined.s, joined.len, rank, what, &nid);
        if (!st) merge_set(b, lid, rid, (uint32_t)rank, nid);
    }
    mt_str_free(&joined);
    return st;
}

/* Byte-level models: each token also under the bytes it stands for, and each byte's token. */
static mt_status index_bytes(mt_bpe *b, const char *what) {
    MT_TRY(mt_strmap_init(&b->raw_vocab, b->vocab.count, what));
    unsigned char *raw = malloc(b->vocab.arena_len + 1);
    if (!raw) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate the byte vocabulary", what);
    mt_status st = MT_OK;
    for (size_t i = 0; i <= b->vocab.mask && !st; i++) {
        const mt_strmap_slot *s = &b->vocab.slots[i];
        if (s->value < 0) continue;
        long n = mt_byte_level_decode(b->vocab.arena + s->key_off, s->key_len, raw);
        if (n >= 0) st = mt_strmap_set(&b->raw_vocab, (const char *)raw, (size_t)n, s->value);
    }
    free(raw);
    for (int c = 0; c < 256; c++) {
        char s[4];
        b->byte_id[c] = mt_strmap_get(&b->vocab, s, mt_utf8_encode(mt_byte_level_char((unsigned char)c), s));
    }
    return st;
}

#define META "\xe2\x96\x81" /* U+2581, SentencePiece's word boundary */

static int meta_at(const char *s, size_t len, size_t i) { return len - i >= 3 && !memcmp(s + i, META, 3); }

/* Whether a word may be cut before each "▁" that follows another character: then no merge can
 * join the two sides (its token would hold that character then "▁", and none does), so BPE on the
 * pieces gives what BPE on the word gives. Words without a pre-tokenizer (Llama 2's and Mistral's
 * whole text) become the words SentencePiece would see, and the merge loop runs on each alone. */
static int can_split_at_meta(const mt_bpe *b) {
    if (b->byte_level || b->prefix_len || b->suffix_len) return 0;
    for (size_t i = 0; i <= b->vocab.mask; i++) {
        const mt_strmap_slot *s = &b->vocab.slots[i];
        if (s->value < 0) continue;
        const char *t = b->vocab.arena + s->key_off;
        for (size_t k = 1; k < s->key_len; k++)
            if (meta_at(t, s->key_len, k) && !(k >= 3 && meta_at(t, s->key_len, k - 3))) return 0;
    }
    return 1;
}

int mt_bpe_cut_ok(const mt_bpe *b, const char *left, size_t left_len, const char *right, size_t right_len) {
    /* ignore_merges looks the whole word up before cutting it: a part could be a token the whole is not. */
    return b->meta_split && !b->ignore_merges && left_len > 0 && meta_at(right, right_len, 0) &&
           !(left_len >= 3 && meta_at(left, left_len, left_len - 3));
}

static mt_status optional_string(const json_t *model, const char *key, const char *what, char **out, size_t *len) {
    const char *s;
    MT_TRY(mt_json_string(model, key, 0, what, &s));
    if (!s) return MT_OK;
    if (!(*out = strdup(s))) return mt_fail(MT_ERR_NOMEM, "%s: cannot copy '%s'", what, key);
    if (len) *len = strlen(s);
    return MT_OK;
}

mt_status mt_bpe_parse(mt_tokenizer *tok, const json_t *model) {
    mt_bpe *b = &tok->bpe;
    char what[600];
    snprintf(what, sizeof what, "%s: model", tok->path);
    const char *type;
    MT_TRY(mt_json_string(model, "type", 0, what, &type));
    if (type && strcmp(type, "BPE"))
        return mt_fail(MT_ERR_INVALID, "%s: tokenizer model '%s' is not supported (only BPE)", what, type);
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && (!json_is_number(dropout) || json_number_value(dropout) != 0))
        return mt_fail(MT_ERR_INVALID, "%s: BPE dropout is not supported (it makes encoding random)", what);
    b->path = tok->path;
    MT_TRY(optional_string(model, "unk_token", what, &b->unk_token, NULL));
    MT_TRY(optional_string(model, "continuing_subword_prefix", what, &b->prefix, &b->prefix_len));
    MT_TRY(optional_string(model, "end_of_word_suffix", what, &b->suffix, &b->suffix_len));
    MT_TRY(mt_json_bool(model, "fuse_unk", 0, what, &b->fuse_unk));
    MT_TRY(mt_json_bool(model, "byte_fallback", 0, what, &b->byte_fallback));
    MT_TRY(mt_json_bool(model, "ignore_merges", 0, what, &b->ignore_merges));
    if (b->byte_level && (b->prefix_len || b->suffix_len))
        return mt_fail(MT_ERR_INVALID,
                       "%s: a continuing_subword_prefix or end_of_word_suffix with a ByteLevel pre-tokenizer is "
                       "not supported",
                       what);
    MT_TRY(parse_vocab(b, json_object_get(model, "vocab"), what));
    MT_TRY(parse_merges(b, json_object_get(model, "merges"), what));
    for (int c = 0; c < 256; c++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", c);
        b->fallback_id[c] = mt_strmap_get(&b->vocab, name, 6);
    }
    if (b->byte_level) MT_TRY(index_bytes(b, what));
    if (b->unk_token && mt_strmap_get(&b->vocab, b->unk_token, strlen(b->unk_token)) < 0)
        mt_log_warn("%s: unk_token \"%s\" is not in the vocabulary: text holding a character the vocabulary lacks "
                    "will fail to encode", what, b->unk_token);
    b->meta_split = can_split_at_meta(b);
    if (!(b->cache = mt_cache_new())) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate the word cache", what);
    return MT_OK;
}

void mt_bpe_free(mt_bpe *b) {
    mt_strmap_free(&b->vocab);
    mt_strmap_free(&b->raw_vocab);
    free(b->merges);
    free(b->unk_token);
    free(b->prefix);
    free(b->suffix);
    mt_cache_free(b->cache);
    *b = (mt_bpe){0};
}

/* ---- encoding one word ---- */

void mt_bpe_scratch_free(mt_bpe_scratch *s) {
    free(s->sym);
    free(s->heap);
    mt_ids_free(&s->word);
    *s = (mt_bpe_scratch){0};
}

typedef struct {
    symbol *sym;
    size_t n;
    int32_t unk;      /* a pending unk symbol's id (-1: none) and length */
    uint32_t unk_len;
} word;

static mt_status add_symbol(mt_bpe_scratch *s, word *w, int32_t id, uint32_t len) {
    if (w->n == s->sym_cap) {
        size_t cap = s->sym_cap ? s->sym_cap * 2 : 256;
        symbol *sym = realloc(s->sym, cap * sizeof *sym);
        if (!sym) return mt_fail(MT_ERR_NOMEM, "BPE: cannot grow a word to %zu symbols", cap);
        s->sym = sym;
        s->sym_cap = cap;
        w->sym = sym;
    }
    w->sym[w->n] = (symbol){id, (int32_t)w->n - 1, -1, len};
    if (w->n) w->sym[w->n - 1].next = (int32_t)w->n;
    w->n++;
    return MT_OK;
}

/* A character (or, byte-level, a byte) the vocabulary lacks: its <0xNN> byte tokens when
 * byte_fallback has them all, else the unk token (fused with a pending one when fuse_unk), else
 * nothing, in tokenizers' order. `s` is the string looked up, `len` the bytes of word it covers. */
static mt_status unknown(const mt_bpe *b, mt_bpe_scratch *sc, word *w, const char *s, size_t n, uint32_t len) {
    if (b->byte_fallback) {
        size_t k = 0;
        while (k < n && b->fallback_id[(unsigned char)s[k]] >= 0) k++;
        if (k == n) {
            for (k = 0; k < n; k++) MT_TRY(add_symbol(sc, w, b->fallback_id[(unsigned char)s[k]], 1));
            return MT_OK;
        }
    }
    if (!b->unk_token) return MT_OK;
    int32_t unk = mt_strmap_get(&b->vocab, b->unk_token, strlen(b->unk_token));
    if (unk < 0) /* the tokenizer is at fault, which a message about the text would hide */
        return mt_fail(MT_ERR_INVALID, "the tokenizer %s: its model's unk_token \"%s\" is not in its vocabulary, and "
                       "this text holds a character the vocabulary lacks (\"%.*s\"): fix the tokenizer", b->path,
                       b->unk_token, (int)(n < 16 ? n : 16), s);
    if (w->unk >= 0 && b->fuse_unk) {
        w->unk_len += len;
        return MT_OK;
    }
    if (w->unk >= 0) MT_TRY(add_symbol(sc, w, w->unk, w->unk_len));
    w->unk = unk;
    w->unk_len = len;
    return MT_OK;
}

static mt_status known(mt_bpe_scratch *sc, word *w, int32_t id, uint32_t len) {
    if (w->unk >= 0) {
        MT_TRY(add_symbol(sc, w, w->unk, w->unk_len));
        w->unk = -1;
    }
    return add_symbol(sc, w, id, len);
}

static mt_status byte_symbols(const mt_bpe *b, mt_bpe_scratch *sc, word *w, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (b->byte_id[c] >= 0) {
            MT_TRY(known(sc, w, b->byte_id[c], 1));
        } else {
            char name[4];
            MT_TRY(unknown(b, sc, w, name, mt_utf8_encode(mt_byte_level_char(c), name), 1));
        }
    }
    return MT_OK;
}

static mt_status char_symbols(const mt_bpe *b, mt_bpe_scratch *sc, word *w, const char *s, size_t len) {
    mt_str key = {0};
    mt_status st = MT_OK;
    for (size_t i = 0; i < len && !st;) {
        size_t cl = mt_utf8_len((unsigned char)s[i]);
        if (cl > len - i) cl = len - i;
        const char *k = s + i;
        size_t kl = cl;
        if ((i > 0 && b->prefix_len) || (i + cl == len && b->suffix_len)) {
            key.len = 0;
            if (i > 0) st = mt_str_put(&key, b->prefix, b->prefix_len);
            if (!st) st = mt_str_put(&key, s + i, cl);
            if (!st && i + cl == len) st = mt_str_put(&key, b->suffix, b->suffix_len);
            k = key.s;
            kl = key.len;
        }
        int32_t id = st ? -1 : mt_strmap_get(&b->vocab, k, kl);
        if (!st) st = id >= 0 ? known(sc, w, id, (uint32_t)cl) : unknown(b, sc, w, k, kl, (uint32_t)cl);
        i += cl;
    }
    mt_str_free(&key);
    return st;
}

static mt_status heap_push(mt_bpe_scratch *s, size_t *n, candidate c) {
    if (*n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
        candidate *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return mt_fail(MT_ERR_NOMEM, "BPE: cannot grow the merge queue to %zu", cap);
        s->heap = h;
        s->heap_cap = cap;
    }
    candidate *h = s->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent].rank < c.rank || (h[parent].rank == c.rank && h[parent].pos <= c.pos)) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
    return MT_OK;
}

static candidate heap_pop(mt_bpe_scratch *s, size_t *n) {
    candidate *h = s->heap, top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
            c++;
        if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos <= h[c].pos)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static mt_status push_pair(const mt_bpe *b, mt_bpe_scratch *s, size_t *n, const word *w, int32_t pos) {
    const mt_merge_slot *m = merge_get(b, w->sym[pos].id, w->sym[w->sym[pos].next].id);
    return m ? heap_push(s, n, (candidate){m->rank, (uint32_t)pos, m->new_id}) : MT_OK;
}

/* tokenizers' Word::merge_all: the lowest-ranked candidate first (leftmost on ties); a candidate
 * whose pair has changed since it was queued is dropped when its pair no longer makes its token. */
static mt_status merge_all(const mt_bpe *b, mt_bpe_scratch *s, word *w) {
    size_t n = 0;
    for (size_t i = 0; i + 1 < w->n; i++) MT_TRY(push_pair(b, s, &n, w, (int32_t)i));
    while (n) {
        candidate top = heap_pop(s, &n);
        symbol *cur = &w->sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        symbol right = w->sym[cur->next];
        const mt_merge_slot *m = merge_get(b, cur->id, right.id);
        if (!m || m->new_id != top.new_id) continue;
        w->sym[cur->next].len = 0;
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        if (right.next >= 0) w->sym[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) MT_TRY(push_pair(b, s, &n, w, cur->prev));
        if (cur->next >= 0) MT_TRY(push_pair(b, s, &n, w, (int32_t)top.pos));
    }
    return MT_OK;
}

/* One word, or one piece of a word cut at "▁". */
static mt_status encode_piece(const mt_bpe *b, mt_bpe_scratch *s, const char *text, size_t len, mt_ids *out) {
    int cacheable = len <= MT_CACHE_MAX_WORD;
    if (cacheable && mt_cache_get(b->cache, text, len, out)) return MT_OK;
    word w = {(symbol *)s->sym, 0, -1, 0};
    MT_TRY(b->byte_level ? byte_symbols(b, s, &w, text, len) : char_symbols(b, s, &w, text, len));
    if (w.unk >= 0) MT_TRY(add_symbol(s, &w, w.unk, w.unk_len));
    MT_TRY(merge_all(b, s, &w));
    size_t first = out->n;
    for (size_t i = 0; i < w.n; i++)
        if (w.sym[i].len) MT_TRY(mt_ids_push(out, w.sym[i].id));
    if (cacheable) mt_cache_put(b->cache, text, len, out->n > first ? out->ids + first : NULL, out->n - first);
    return MT_OK;
}

mt_status mt_bpe_encode_word(const mt_bpe *b, mt_bpe_scratch *s, const char *text, size_t len, mt_ids *out) {
    if (len == 0) return MT_OK;
    if (b->ignore_merges) {
        int32_t id = mt_strmap_get(b->byte_level ? &b->raw_vocab : &b->vocab, text, len);
        if (id >= 0) return mt_ids_push(out, id);
    }
    if (!b->meta_split) return encode_piece(b, s, text, len, out);
    size_t start = 0;
    for (size_t i = 1; i < len; i++)
        if (meta_at(text, len, i) && !(i >= 3 && meta_at(text, len, i - 3))) {
            MT_TRY(encode_piece(b, s, text + start, i - start, out));
            start = i;
        }
    return encode_piece(b, s, text + start, len - start, out);
}
