/* Cutting one document into parts that encode apart, in parallel, to the ids of encoding it whole.
 *
 * A cut at byte c is taken when three things hold. (1) The added tokens: no content occurs across
 * or against c, in the input (raw tokens) or in the normalized text (normalized ones), so both
 * sides see the same matches (mt_added_cut_ok). (2) The normalizer: every step gives the same text
 * for the two sides apart as for the whole: NFC/NFD/NFKC/NFKD when c follows a newline or precedes
 * an ASCII character (no composition or reordering crosses it), Replace with a one-character
 * pattern, and Prepend (it writes at a piece's start, which a part after a cut is not). (3) The
 * pre-tokenizer: c is a boundary between the first step's pieces in the whole document, which the
 * part before the cut verifies as it encodes (mt_tokenizer_encode_part): a regex step is matched
 * over the part and the text after the cut, with PCRE2's hard partial matching telling when the
 * answer depends on text not given yet; Metaspace splits before each meta character; without a
 * pre-tokenizer BPE itself cuts before "▁" (mt_bpe_cut_ok). Deeper steps and the model then see
 * the same pieces on both sides. A part after a cut is encoded as a continuation: no Prepend, no
 * Metaspace or ByteLevel prefix; a regex that looks behind its start (lookbehind, \b, ^, \A, \G)
 * rules cuts out, since the part after the cut is matched on its own. */
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/utf8.h"

#define META "\xe2\x96\x81"

/* Whether the normalizer's steps allow cuts; *space_to_meta: one replaces " " with "▁". */
static int norm_cuttable(const mt_tokenizer *tok, int *space_to_meta) {
    int replaced = 0;
    *space_to_meta = 0;
    for (size_t i = 0; i < tok->n_norm; i++) {
        const mt_norm_step *step = &tok->norm[i];
        switch (step->kind) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD:
            if (replaced) return 0; /* it would see the replacements at the cut */
            break;
        case NORM_PREPEND: break;
        case NORM_REPLACE:
            if (!step->one_char[0] || !strcmp(step->one_char, "\n")) return 0;
            replaced = 1;
            if (!strcmp(step->one_char, " ") && step->text && !strcmp(step->text, META)) *space_to_meta = 1;
            break;
        }
    }
    return 1;
}

mt_cut_kind mt_cut_analyse(const mt_tokenizer *tok) {
    int meta;
    if (!norm_cuttable(tok, &meta)) return MT_CUT_NONE;
    int bpe_cuts = tok->bpe.meta_split && !tok->bpe.ignore_merges; /* see mt_bpe_cut_ok */
    if (tok->n_pre == 0) return bpe_cuts && meta ? MT_CUT_SPACE : MT_CUT_NONE;
    const mt_pre_step *p = &tok->pre[0];
    switch (p->kind) {
    case PRE_SPLIT: return !p->empty_pattern && !p->pattern.looks_back ? MT_CUT_LINE : MT_CUT_NONE;
    case PRE_BYTE_LEVEL: return p->has_pattern && !p->pattern.looks_back ? MT_CUT_LINE : MT_CUT_NONE;
    case PRE_METASPACE:
        if (p->split) return MT_CUT_SPACE;
        /* One piece, the model's word: BPE cuts it before "▁" */
        return tok->n_pre == 1 && bpe_cuts && !strcmp(p->replacement, META) ? MT_CUT_SPACE : MT_CUT_NONE;
    }
    return MT_CUT_NONE;
}

static int space_at(const char *s, size_t len, size_t i) {
    size_t l;
    return i < len && mt_unicode_is_space(mt_utf8_decode(s + i, len - i, &l));
}

/* Whether the normalizer gives the same text for s cut at `pos` as for s whole (see above). */
static int norm_safe(const char *s, size_t len, size_t pos) {
    return pos == 0 || pos >= len || s[pos - 1] == '\n' || (unsigned char)s[pos] < 0x80;
}

int mt_cut_allowed(const mt_tokenizer *tok, const char *doc, size_t len, size_t cut) {
    return tok->cut != MT_CUT_NONE && cut > 0 && cut < len && norm_safe(doc, len, cut) &&
           mt_added_cut_ok(&tok->added.raw, doc, len, cut);
}

size_t mt_tokenizer_next_cut(const mt_tokenizer *tok, const char *text, size_t len, size_t from) {
    for (size_t p = from ? from : 1; p < len; p++) {
        if (tok->cut == MT_CUT_LINE) {
            const char *nl = memchr(text + p - 1, '\n', len - p);
            if (!nl) return len;
            p = (size_t)(nl - text) + 1;
            if (space_at(text, len, p)) continue;
        } else if (tok->cut == MT_CUT_SPACE) {
            const char *sp = memchr(text + p, ' ', len - p);
            if (!sp) return len;
            p = (size_t)(sp - text);
            if (text[p - 1] == ' ') continue;
        } else {
            return len;
        }
        if (mt_cut_allowed(tok, text, len, p)) return p;
    }
    return len;
}

/* Back from i to the start of the character it is in. */
static size_t char_start(const char *s, size_t i) {
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

mt_status mt_cut_next_text(const mt_tokenizer *tok, mt_regex_scratch *rx, const char *doc, size_t doc_len,
                           size_t cut, size_t want, int allow_special, const char *left, size_t left_len,
                           mt_str win[3], const char **next, size_t *next_len, int *open, int *state) {
    *state = 0;
    *next = "";
    *next_len = 0;
    *open = 0;
    size_t end = want < doc_len - cut ? cut + want : doc_len, bad;
    while (end < doc_len && !norm_safe(doc, doc_len, end)) end++;
    if (mt_utf8_check(doc + cut, end - cut, &bad)) return MT_OK;
    /* The piece ends at the next added token matched in the input. Matches that start before `end`
     * are exact when the scan sees the longest content past it. */
    const mt_trie *raw = &tok->added.raw, *norm_trie = &tok->added.norm;
    size_t scan = raw->max_len + 4 < doc_len - end ? end + raw->max_len + 4 : doc_len, ms, stop, search;
    int found, raw_open = end < doc_len;
    int32_t id;
    mt_added_next(tok, raw, doc, scan, cut, cut, allow_special, &found, &ms, &stop, &search, &id);
    if (found && ms < end) {
        end = ms;
        raw_open = 0;
    }
    const char *norm;
    size_t norm_len, room = norm_trie->max_len + 4;
    MT_TRY(mt_norm_apply(tok, rx, doc + cut, end - cut, 1, win, &norm, &norm_len));
    if (raw_open && norm_len < room) {
        *state = 2;
        return MT_OK;
    }
    /* The normalized tokens across the cut: the two sides' text next to it, joined. */
    size_t l0 = char_start(left, left_len > room ? left_len - room : 0);
    size_t r1 = norm_len < room ? norm_len : room;
    while (r1 < norm_len && ((unsigned char)norm[r1] & 0xC0) == 0x80) r1++;
    win[2].len = 0;
    MT_TRY(mt_str_put(&win[2], left + l0, left_len - l0));
    MT_TRY(mt_str_put(&win[2], norm, r1));
    if (!mt_added_cut_ok(norm_trie, win[2].s, win[2].len, left_len - l0)) return MT_OK;
    /* ... and the piece ends at the first of them after the cut. */
    size_t known = norm_len;
    int norm_open = raw_open;
    if (norm_trie->n) {
        size_t sure = raw_open ? char_start(norm, norm_len - room) : norm_len;
        mt_added_next(tok, norm_trie, norm, norm_len, 0, 0, allow_special, &found, &ms, &stop, &search, &id);
        if (found && ms < sure) {
            known = ms;
            norm_open = 0;
        } else {
            known = sure;
        }
    }
    *next = norm;
    *next_len = known;
    *open = norm_open;
    *state = 1;
    return MT_OK;
}
