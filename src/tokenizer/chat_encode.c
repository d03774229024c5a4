#include "tokenizer/chat_encode.h"

#include <stdlib.h>
#include <string.h>

void mt_mask_free(mt_mask *m) {
    free(m->v);
    *m = (mt_mask){0};
}

static mt_status mask_append(mt_mask *m, const uint8_t *flags, size_t n) {
    if (n == 0) return MT_OK; /* a conversation that renders to nothing (a lone system message) */
    if (m->n + n > m->cap) {
        size_t cap = m->cap ? m->cap : 256;
        while (cap < m->n + n) cap *= 2;
        uint8_t *grown = realloc(m->v, cap);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "token loss mask: cannot grow to %zu tokens", cap);
        m->v = grown;
        m->cap = cap;
    }
    memcpy(m->v + m->n, flags, n);
    m->n += n;
    return MT_OK;
}

/* Whether a segment is a special token of this tokenizer (the template's markers are not always:
 * "[INST]" is plain text to Llama 2's tokenizer). */
static int is_special_token(const mt_tokenizer *tok, const mt_chat_segment *s) {
    char name[128];
    if (!s->special || s->len >= sizeof name) return 0;
    memcpy(name, s->text, s->len);
    name[s->len] = '\0';
    int32_t id = mt_tokenizer_token_id(tok, name);
    return id >= 0 && mt_tokenizer_is_special(tok, id);
}

/* The first token of `chunk` (the ids of `text`) that holds byte `at` or a later one; with
 * `through`, one past the last token that holds a byte before `at`. Found by encoding text[0, at):
 * where its ids are a prefix of the chunk's, the boundary falls between tokens; else the first
 * token that differs straddles it. */
static mt_status boundary(const mt_tokenizer *tok, const char *text, size_t at, const mt_ids *chunk, int through,
                          size_t *k) {
    mt_ids prefix = {0};
    MT_TRY(mt_tokenizer_encode(tok, text, at, 1, &prefix));
    size_t same = 0;
    while (same < prefix.n && same < chunk->n && prefix.ids[same] == chunk->ids[same]) same++;
    *k = same == prefix.n || !through ? same : same + 1;
    if (*k > chunk->n) *k = chunk->n;
    mt_ids_free(&prefix);
    return MT_OK;
}

/* Encodes text[cs, ce) and flags the tokens that hold bytes of a trainable segment. */
static mt_status encode_chunk(const mt_tokenizer *tok, const mt_chat_rendered *r, const char *text,
                              const size_t *start, size_t cs, size_t ce, mt_ids *ids, mt_mask *mask) {
    mt_ids chunk = {0};
    MT_TRY(mt_tokenizer_encode(tok, text + cs, ce - cs, 1, &chunk));
    uint8_t *flags = calloc(chunk.n ? chunk.n : 1, 1);
    mt_status st = flags ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a conversation's loss mask");
    for (size_t i = 0; st == MT_OK && i < r->n; i++) {
        if (!r->seg[i].trainable) continue;
        size_t a = start[i], b = start[i] + r->seg[i].len;
        while (i + 1 < r->n && r->seg[i + 1].trainable) b += r->seg[++i].len; /* a whole trainable run */
        if (b <= cs || a >= ce) continue;
        size_t first = 0, end = chunk.n;
        if (a > cs) st = boundary(tok, text + cs, a - cs, &chunk, 0, &first);
        if (st == MT_OK && b < ce) st = boundary(tok, text + cs, b - cs, &chunk, 1, &end);
        for (size_t k = first; k < end; k++) flags[k] = 1;
    }
    if (st == MT_OK) st = mt_ids_append(ids, chunk.ids, chunk.n);
    if (st == MT_OK) st = mask_append(mask, flags, chunk.n);
    free(flags);
    mt_ids_free(&chunk);
    return st;
}

static mt_status encode_all(const mt_tokenizer *tok, const mt_chat_rendered *r, char *text, size_t *start,
                            mt_ids *ids, mt_mask *mask) {
    size_t total = 0;
    for (size_t i = 0; i < r->n; i++) {
        start[i] = total;
        memcpy(text + total, r->seg[i].text, r->seg[i].len);
        total += r->seg[i].len;
    }
    size_t cs = 0;
    for (size_t i = 0; i <= r->n; i++) {
        if (i < r->n && !(start[i] > cs && is_special_token(tok, &r->seg[i]))) continue;
        size_t ce = i < r->n ? start[i] : total;
        MT_TRY(encode_chunk(tok, r, text, start, cs, ce, ids, mask));
        cs = ce;
    }
    return MT_OK;
}

mt_status mt_chat_encode(const mt_tokenizer *tok, const mt_chat_rendered *r, mt_ids *ids, mt_mask *mask) {
    size_t total = 0, ids_before = ids->n, mask_before = mask->n;
    for (size_t i = 0; i < r->n; i++) total += r->seg[i].len;
    char *text = malloc(total + 1);
    size_t *start = malloc((r->n + 1) * sizeof *start);
    mt_status st = text && start ? encode_all(tok, r, text, start, ids, mask)
                                 : mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation of %zu bytes", total);
    if (st != MT_OK) {
        ids->n = ids_before;
        mask->n = mask_before;
    }
    free(text);
    free(start);
    return st;
}
