/* mt_tokenizer_encode and mt_tokenizer_encode_part: tokenizers' pipeline for one sequence. Added
 * tokens with normalized: false are split off the input; each piece between them is normalized,
 * then split on the normalized added tokens; each remaining piece goes through the pre-tokenizer
 * steps in turn, and each word they leave through the BPE model. A part of a document cut at
 * verified points (cut.c) is encoded the same way, its last piece with the text after the cut in
 * view. */
#include <stdlib.h>

#include "tokenizer/internal.h"
#include "tokenizer/pre_tokenizer.h"

/* How a piece begins: the input's start, after an added token, or inside a piece cut before it. */
typedef enum { PIECE_FIRST, PIECE_NEW, PIECE_CONT } piece_start;

/* The raw text a part's verification looks at past its end, at first (it grows when short). */
#define CUT_VIEW 256

typedef struct mt_encode_ctx {
    const mt_tokenizer *tok;
    int allow_special;
    mt_ids *out;
    mt_regex_scratch rx;
    mt_bpe_scratch bpe;
    mt_str norm[2];
    mt_str win[3];   /* the text after a part's end, normalized */
    mt_spans *spans; /* one list per pre-tokenizer step */
    mt_str *bufs;    /* one rewritten text per pre-tokenizer step */
    const char *doc; /* the document and where the part ends in it */
    size_t doc_len, part_end;
    int in_tail;     /* the raw piece at hand ends the part, before the document's end */
    const char *tail_norm; /* that piece, normalized */
    size_t tail_norm_len;
    int end_ok;      /* the part's end is the document's, or a verified cut */
} mt_encode_ctx;

typedef mt_status (*piece_fn)(mt_encode_ctx *, const char *, size_t, piece_start, int);

/* Pre-tokenizer step `level` on s, then the following steps on each of its pieces, then the model
 * on each word. `at_start`: s starts the input; `cont` (level 0 only): s continues a cut piece. */
static mt_status pre_tokenize(mt_encode_ctx *c, size_t level, const char *s, size_t len, int at_start, int cont,
                              mt_pre_more *more) {
    if (len == 0) return MT_OK;
    if (level == c->tok->n_pre) return mt_bpe_encode_word(&c->tok->bpe, &c->bpe, s, len, c->out);
    const char *text;
    size_t text_len;
    MT_TRY(mt_pre_apply(&c->tok->pre[level], &c->rx, s, len, at_start, cont, more, &c->bufs[level], &text, &text_len,
                        &c->spans[level]));
    for (size_t i = 0; i < c->spans[level].n; i++) {
        mt_span sp = c->spans[level].v[i];
        MT_TRY(pre_tokenize(c, level + 1, text + sp.start, sp.end - sp.start, at_start && sp.start == 0, 0, NULL));
    }
    return MT_OK;
}

/* The last piece of a part that ends at a cut: encoded with the text after the cut in view, which
 * says whether the cut is a boundary of the whole document's first pre-tokenizer step. */
static mt_status tail_piece(mt_encode_ctx *c, const char *s, size_t len, int at_start, int cont) {
    const mt_tokenizer *tok = c->tok;
    int allowed = mt_cut_allowed(tok, c->doc, c->doc_len, c->part_end);
    for (size_t want = CUT_VIEW; allowed; want *= 8) {
        mt_pre_more more = {0};
        int state;
        MT_TRY(mt_cut_next_text(tok, &c->rx, c->doc, c->doc_len, c->part_end, want, c->allow_special, c->tail_norm,
                                c->tail_norm_len, c->win, &more.s, &more.len, &more.open, &state));
        if (state == 0) break;
        if (state == 2) continue;
        if (tok->n_pre == 0) { /* the model's word: BPE decides the cut */
            if (more.len == 0 && more.open) continue;
            c->end_ok = (more.len == 0 && !more.open) || mt_bpe_cut_ok(&tok->bpe, s, len, more.s, more.len);
            return mt_bpe_encode_word(&tok->bpe, &c->bpe, s, len, c->out);
        }
        size_t n0 = c->out->n;
        MT_TRY(pre_tokenize(c, 0, s, len, at_start, cont, &more));
        if (more.need_more && more.open) {
            c->out->n = n0;
            continue;
        }
        c->end_ok = more.boundary && !more.need_more;
        /* Metaspace without split hands the model one word: BPE decides the cut. */
        if (tok->n_pre == 1 && tok->pre[0].kind == PRE_METASPACE && !tok->pre[0].split && !more.boundary &&
            more.next)
            c->end_ok = mt_bpe_cut_ok(&tok->bpe, c->bufs[0].s, c->bufs[0].len - more.next_len, more.next,
                                      more.next_len);
        return MT_OK;
    }
    /* Unverifiable: the ids of the part as if it ended here, which the caller drops. */
    c->end_ok = 0;
    return pre_tokenize(c, 0, s, len, at_start, cont, NULL);
}

/* Splits s on the added tokens of `trie`, handing each piece between them to `piece` with how it
 * starts (`first` for one at s's start) and whether it ends s. */
static mt_status split_added(mt_encode_ctx *c, const mt_trie *trie, const char *s, size_t len, piece_start first,
                             piece_fn piece) {
    size_t done = 0, search = 0;
    for (;;) {
        int found;
        size_t start, stop;
        int32_t id;
        mt_added_next(c->tok, trie, s, len, search, done, c->allow_special, &found, &start, &stop, &search, &id);
        if (!found) break;
        if (done < start) MT_TRY(piece(c, s + done, start - done, done == 0 ? first : PIECE_NEW, 0));
        MT_TRY(mt_ids_push(c->out, id));
        done = stop;
    }
    if (done < len) MT_TRY(piece(c, s + done, len - done, done == 0 ? first : PIECE_NEW, 1));
    return MT_OK;
}

static mt_status normalized_piece(mt_encode_ctx *c, const char *s, size_t len, piece_start how, int last) {
    if (c->in_tail && last) return tail_piece(c, s, len, how == PIECE_FIRST, how == PIECE_CONT);
    return pre_tokenize(c, 0, s, len, how == PIECE_FIRST, how == PIECE_CONT, NULL);
}

static mt_status raw_piece(mt_encode_ctx *c, const char *s, size_t len, piece_start how, int last) {
    const char *norm;
    size_t norm_len;
    MT_TRY(mt_norm_apply(c->tok, &c->rx, s, len, how == PIECE_CONT, c->norm, &norm, &norm_len));
    c->in_tail = last && c->part_end < c->doc_len;
    c->tail_norm = norm;
    c->tail_norm_len = norm_len;
    return split_added(c, &c->tok->added.norm, norm, norm_len, how, normalized_piece);
}

mt_status mt_tokenizer_encode_part(const mt_tokenizer *tok, const char *text, size_t len, size_t start, size_t end,
                                   int allow_special, mt_ids *out, int *end_ok) {
    if (start > end || end > len)
        return mt_fail(MT_ERR_INVALID, "encode: part [%zu, %zu) is not within the %zu bytes of its document", start,
                       end, len);
    size_t bad;
    if (mt_utf8_check(text + start, end - start, &bad))
        return mt_fail(MT_ERR_INVALID, "invalid UTF-8 at byte %zu", start + bad);
    size_t n0 = out->n;
    mt_encode_ctx c = {.tok = tok, .allow_special = allow_special, .out = out, .doc = text, .doc_len = len,
                       .part_end = end, .end_ok = end == len};
    c.spans = calloc(tok->n_pre + 1, sizeof *c.spans);
    c.bufs = calloc(tok->n_pre + 1, sizeof *c.bufs);
    mt_status st = c.spans && c.bufs ? MT_OK : mt_fail(MT_ERR_NOMEM, "encode: cannot allocate its scratch");
    if (!st)
        st = split_added(&c, &tok->added.raw, text + start, end - start, start == 0 ? PIECE_FIRST : PIECE_CONT,
                         raw_piece);
    for (size_t i = 0; c.spans && c.bufs && i < tok->n_pre; i++) {
        mt_spans_free(&c.spans[i]);
        mt_str_free(&c.bufs[i]);
    }
    free(c.spans);
    free(c.bufs);
    for (int i = 0; i < 3; i++) mt_str_free(&c.win[i]);
    mt_str_free(&c.norm[0]);
    mt_str_free(&c.norm[1]);
    mt_regex_scratch_free(&c.rx);
    mt_bpe_scratch_free(&c.bpe);
    if (st) out->n = n0;
    if (end_ok) *end_ok = !st && c.end_ok;
    return st;
}

mt_status mt_tokenizer_encode(const mt_tokenizer *tok, const char *text, size_t len, int allow_special,
                              mt_ids *out) {
    return mt_tokenizer_encode_part(tok, text, len, 0, len, allow_special, out, NULL);
}
