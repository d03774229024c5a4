/* mt_tokenizer_encode: tokenizers' pipeline for one sequence. Added tokens with normalized: false
 * are split off the input; each piece between them is normalized, then split on the normalized
 * added tokens; each remaining piece goes through the pre-tokenizer steps in turn, and each word
 * they leave through the BPE model. */
#include <stdlib.h>

#include "tokenizer/internal.h"
#include "tokenizer/pre_tokenizer.h"

typedef struct mt_encode_ctx {
    const mt_tokenizer *tok;
    int allow_special;
    mt_ids *out;
    mt_regex_scratch rx;
    mt_bpe_scratch bpe;
    mt_str norm[2];
    mt_spans *spans; /* one list per pre-tokenizer step */
    mt_str *bufs;    /* one rewritten text per pre-tokenizer step */
} mt_encode_ctx;

/* Pre-tokenizer step `level` on s, then the following steps on each of its pieces, then the model
 * on each word. `at_start`: s starts the input. */
static mt_status pre_tokenize(mt_encode_ctx *c, size_t level, const char *s, size_t len, int at_start) {
    if (len == 0) return MT_OK;
    if (level == c->tok->n_pre) return mt_bpe_encode_word(&c->tok->bpe, &c->bpe, s, len, c->out);
    const char *text;
    size_t text_len;
    MT_TRY(mt_pre_apply(&c->tok->pre[level], &c->rx, s, len, at_start, &c->bufs[level], &text, &text_len,
                        &c->spans[level]));
    for (size_t i = 0; i < c->spans[level].n; i++) {
        mt_span sp = c->spans[level].v[i];
        MT_TRY(pre_tokenize(c, level + 1, text + sp.start, sp.end - sp.start, at_start && sp.start == 0));
    }
    return MT_OK;
}

/* Splits s on the added tokens of `trie`, handing each piece between them to `piece`. */
static mt_status split_added(mt_encode_ctx *c, const mt_trie *trie, const char *s, size_t len, int at_start,
                             mt_status (*piece)(mt_encode_ctx *, const char *, size_t, int)) {
    size_t done = 0, search = 0;
    for (;;) {
        int found;
        size_t start, stop;
        int32_t id;
        mt_added_next(c->tok, trie, s, len, search, done, c->allow_special, &found, &start, &stop, &search, &id);
        if (!found) break;
        if (done < start) MT_TRY(piece(c, s + done, start - done, at_start && done == 0));
        MT_TRY(mt_ids_push(c->out, id));
        done = stop;
    }
    if (done < len) MT_TRY(piece(c, s + done, len - done, at_start && done == 0));
    return MT_OK;
}

static mt_status normalized_piece(mt_encode_ctx *c, const char *s, size_t len, int at_start) {
    return pre_tokenize(c, 0, s, len, at_start);
}

static mt_status raw_piece(mt_encode_ctx *c, const char *s, size_t len, int at_start) {
    const char *norm;
    size_t norm_len;
    MT_TRY(mt_norm_apply(c->tok, &c->rx, s, len, c->norm, &norm, &norm_len));
    return split_added(c, &c->tok->added.norm, norm, norm_len, at_start, normalized_piece);
}

mt_status mt_tokenizer_encode(const mt_tokenizer *tok, const char *text, size_t len, int allow_special,
                              mt_ids *out) {
    size_t bad;
    if (mt_utf8_check(text, len, &bad)) return mt_fail(MT_ERR_INVALID, "invalid UTF-8 at byte %zu", bad);
    size_t n0 = out->n;
    mt_encode_ctx c = {.tok = tok, .allow_special = allow_special, .out = out};
    c.spans = calloc(tok->n_pre + 1, sizeof *c.spans);
    c.bufs = calloc(tok->n_pre + 1, sizeof *c.bufs);
    mt_status st = c.spans && c.bufs ? MT_OK : mt_fail(MT_ERR_NOMEM, "encode: cannot allocate its scratch");
    if (!st) st = split_added(&c, &tok->added.raw, text, len, 1, raw_piece);
    for (size_t i = 0; c.spans && c.bufs && i < tok->n_pre; i++) {
        mt_spans_free(&c.spans[i]);
        mt_str_free(&c.bufs[i]);
    }
    free(c.spans);
    free(c.bufs);
    mt_str_free(&c.norm[0]);
    mt_str_free(&c.norm[1]);
    mt_regex_scratch_free(&c.rx);
    mt_bpe_scratch_free(&c.bpe);
    if (st) out->n = n0;
    return st;
}
