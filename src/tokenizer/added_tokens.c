/* Added tokens: parsed from tokenizer.json's added_tokens and matched in the text before anything
 * else, as tokenizers' AddedVocabulary does: leftmost-longest over all contents, then the
 * single_word, lstrip and rstrip rules. Tokens with normalized: false are matched in the input,
 * those with normalized: true (in their normalized form) in the normalized text. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/utf8.h"

static mt_status trie_node(mt_trie *t, unsigned char byte, int32_t *index) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        mt_trie_node *nodes = realloc(t->nodes, cap * sizeof *nodes);
        if (!nodes) return mt_fail(MT_ERR_NOMEM, "added tokens: cannot grow the match trie");
        t->nodes = nodes;
        t->cap = cap;
    }
    t->nodes[t->n] = (mt_trie_node){.child = -1, .sibling = -1, .token = -1, .byte = byte};
    *index = (int32_t)t->n++;
    return MT_OK;
}

static mt_status trie_insert(mt_trie *t, const char *s, size_t len, int32_t token) {
    if (len == 0) return MT_OK;
    if (t->n == 0) {
        int32_t root;
        MT_TRY(trie_node(t, 0, &root));
    }
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = t->nodes[node].child;
        while (c >= 0 && t->nodes[c].byte != b) c = t->nodes[c].sibling;
        if (c < 0) {
            MT_TRY(trie_node(t, b, &c));
            t->nodes[c].sibling = t->nodes[node].child;
            t->nodes[node].child = c;
        }
        node = c;
    }
    if (len > t->max_len) t->max_len = len;
    /* The first token with a given content keeps it, as the first pattern does in Aho-Corasick. */
    if (t->nodes[node].token < 0) t->nodes[node].token = token;
    t->first[(unsigned char)s[0] >> 3] |= (unsigned char)(1u << ((unsigned char)s[0] & 7));
    return MT_OK;
}

/* The token of the longest content that starts s, or -1; its length in *match_len. */
static int32_t trie_longest(const mt_trie *t, const char *s, size_t len, size_t *match_len) {
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < len; i++) {
        int32_t c = t->nodes[node].child;
        while (c >= 0 && t->nodes[c].byte != (unsigned char)s[i]) c = t->nodes[c].sibling;
        if (c < 0) break;
        node = c;
        if (t->nodes[c].token >= 0) {
            best = t->nodes[c].token;
            *match_len = i + 1;
        }
    }
    return best;
}

static mt_status parse_token(const mt_tokenizer *tok, const json_t *item, size_t index, mt_added_token *a) {
    char what[700];
    snprintf(what, sizeof what, "%s: added_tokens[%zu]", tok->path, index);
    if (!json_is_object(item)) return mt_fail(MT_ERR_INVALID, "%s: must be an object, found %s", what, mt_json_kind(item));
    const char *content;
    MT_TRY(mt_json_string(item, "content", 1, what, &content));
    const json_t *id = json_object_get(item, "id");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= MT_MAX_TOKEN_ID)
        return mt_fail(MT_ERR_INVALID, "%s: field 'id' must be an integer in [0, %d)", what, MT_MAX_TOKEN_ID);
    MT_TRY(mt_json_bool(item, "special", 0, what, &a->special));
    MT_TRY(mt_json_bool(item, "single_word", 0, what, &a->single_word));
    MT_TRY(mt_json_bool(item, "lstrip", 0, what, &a->lstrip));
    MT_TRY(mt_json_bool(item, "rstrip", 0, what, &a->rstrip));
    MT_TRY(mt_json_bool(item, "normalized", !a->special, what, &a->normalized));
    a->len = strlen(content);
    if (mt_utf8_check(content, a->len, NULL)) return mt_fail(MT_ERR_INVALID, "%s: content is not UTF-8", what);
    if (!(a->content = strdup(content))) return mt_fail(MT_ERR_NOMEM, "%s: cannot copy the content", what);
    /* A content the model already has keeps the model's id, as tokenizers assigns it. */
    int32_t model_id = mt_strmap_get(&tok->bpe.vocab, content, a->len);
    a->id = model_id >= 0 ? model_id : (int32_t)json_integer_value(id);
    return MT_OK;
}

static mt_status build_tries(mt_tokenizer *tok) {
    mt_added *ad = &tok->added;
    ad->norm_content = calloc(ad->n ? ad->n : 1, sizeof *ad->norm_content);
    if (!ad->norm_content) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate the added tokens", tok->path);
    mt_str buf[2] = {{0}};
    mt_regex_scratch rx = {0};
    mt_status st = MT_OK;
    /* Special tokens first, then the others, as tokenizers orders its patterns. */
    for (int pass = 0; pass < 2 && !st; pass++) {
        for (size_t i = 0; i < ad->n && !st; i++) {
            mt_added_token *a = &ad->tokens[i];
            if (a->special != (pass == 0)) continue;
            if (!a->normalized) {
                st = trie_insert(&ad->raw, a->content, a->len, (int32_t)i);
                continue;
            }
            const char *norm;
            size_t norm_len;
            st = mt_norm_apply(tok, &rx, a->content, a->len, 0, buf, &norm, &norm_len);
            if (!st && !(ad->norm_content[i] = strndup(norm, norm_len)))
                st = mt_fail(MT_ERR_NOMEM, "%s: cannot copy an added token", tok->path);
            if (!st) st = trie_insert(&ad->norm, norm, norm_len, (int32_t)i);
        }
    }
    mt_str_free(&buf[0]);
    mt_str_free(&buf[1]);
    mt_regex_scratch_free(&rx);
    return st;
}

mt_status mt_added_parse(mt_tokenizer *tok, const json_t *list) {
    if (!list || json_is_null(list)) return MT_OK;
    if (!json_is_array(list))
        return mt_fail(MT_ERR_INVALID, "%s: field 'added_tokens' must be a list, found %s", tok->path,
                       mt_json_kind(list));
    mt_added *ad = &tok->added;
    ad->tokens = calloc(json_array_size(list) + 1, sizeof *ad->tokens);
    if (!ad->tokens) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate the added tokens", tok->path);
    size_t i;
    const json_t *item;
    json_array_foreach(list, i, item) {
        mt_added_token a = {0};
        mt_status st = parse_token(tok, item, i, &a);
        if (st) {
            free(a.content);
            return st;
        }
        if (a.len == 0) { /* tokenizers ignores empty tokens */
            free(a.content);
            continue;
        }
        ad->tokens[ad->n++] = a;
    }
    return build_tries(tok);
}

void mt_added_free(mt_added *ad) {
    for (size_t i = 0; i < ad->n; i++) {
        free(ad->tokens[i].content);
        if (ad->norm_content) free(ad->norm_content[i]);
    }
    free(ad->tokens);
    free(ad->norm_content);
    free(ad->raw.nodes);
    free(ad->norm.nodes);
    *ad = (mt_added){0};
}

/* The code point that ends s[0, end) (end > 0, valid UTF-8) and where it starts. */
static uint32_t last_char(const char *s, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    size_t l;
    *start = i;
    return mt_utf8_decode(s + i, end - i, &l);
}

void mt_added_next(const mt_tokenizer *tok, const mt_trie *trie, const char *s, size_t len, size_t search,
                   size_t done, int allow_special, int *found, size_t *start, size_t *stop, size_t *next,
                   int32_t *id) {
    *found = 0;
    if (trie->n == 0) return;
    for (size_t i = search; i < len; i++) {
        unsigned char b = (unsigned char)s[i];
        if (!(trie->first[b >> 3] & (1u << (b & 7)))) continue;
        size_t mlen = 0;
        int32_t t = trie_longest(trie, s + i, len - i, &mlen);
        if (t < 0) continue;
        const mt_added_token *a = &tok->added.tokens[t];
        size_t ms = i, me = i + mlen, l, cs;
        /* A match passed over still consumes its span: the search goes on after it. */
        i = me - 1;
        if (a->special && !allow_special) continue;
        if (a->single_word) {
            int word_before = ms > 0 && mt_unicode_is_word(last_char(s, ms, &cs));
            int word_after = me < len && mt_unicode_is_word(mt_utf8_decode(s + me, len - me, &l));
            if (word_before || word_after) continue;
        }
        if (a->lstrip) {
            size_t ws = ms;
            while (ws > 0 && mt_unicode_is_space(last_char(s, ws, &cs))) ws = cs;
            ms = ws > done ? ws : done;
        }
        if (a->rstrip)
            while (me < len && mt_unicode_is_space(mt_utf8_decode(s + me, len - me, &l))) me += l;
        *found = 1;
        *start = ms;
        *stop = me;
        *next = i + 1;
        *id = a->id;
        return;
    }
}

/* Whether the whitespace character ends s[0, end) / starts s[start, len). */
static int space_before(const char *s, size_t end) {
    size_t cs;
    return end > 0 && mt_unicode_is_space(last_char(s, end, &cs));
}

static int space_at(const char *s, size_t len, size_t start) {
    size_t l;
    return start < len && mt_unicode_is_space(mt_utf8_decode(s + start, len - start, &l));
}

int mt_added_cut_ok(const mt_trie *trie, const char *s, size_t len, size_t cut) {
    if (space_before(s, cut) && space_at(s, len, cut)) return 0;
    if (trie->n == 0) return 1;
    /* Every content that starts within max_len before the cut, or at it, must end before it. */
    for (size_t i = cut > trie->max_len ? cut - trie->max_len : 0; i <= cut && i < len; i++) {
        int32_t node = 0;
        for (size_t k = i; k < len; k++) {
            int32_t c = trie->nodes[node].child;
            while (c >= 0 && trie->nodes[c].byte != (unsigned char)s[k]) c = trie->nodes[c].sibling;
            if (c < 0) break;
            node = c;
            if (trie->nodes[c].token >= 0 && k + 1 >= cut) return 0;
        }
    }
    return 1;
}
