/* The tokenizer's parts, shared by its source files (not by the rest of megatrain).
 *
 * tokenizer.json's Sequence normalizers, pre-tokenizers and decoders are flattened into one list
 * of steps each at load time: a Sequence applies its members in order, so nesting adds nothing. */
#ifndef MT_TOKENIZER_INTERNAL_H
#define MT_TOKENIZER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>

#include "tokenizer/regex.h"
#include "tokenizer/strmap.h"
#include "tokenizer/tokenizer.h"
#include "util/json_kind.h"

/* Token ids are below this: the id table has an entry per id up to the largest (the largest real
 * vocabularies hold a few hundred thousand). */
#define MT_MAX_TOKEN_ID (1 << 24)

/* ---- normalizers ---- */
typedef enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE } mt_norm_kind;

typedef struct {
    mt_norm_kind kind;
    char *text;          /* Prepend: the prefix; Replace: the replacement */
    size_t text_len;
    mt_regex pattern;    /* Replace: what is replaced (a literal or a regex) */
    int empty_pattern;   /* Replace with "": tokenizers matches nothing */
    char one_char[5];    /* Replace: the pattern when it is one character given as a String, else "" */
} mt_norm_step;

/* ---- pre-tokenizers ---- */
typedef enum { PRE_SPLIT, PRE_METASPACE, PRE_BYTE_LEVEL } mt_pre_kind;
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_WITH_PREVIOUS, SPLIT_MERGED_WITH_NEXT, SPLIT_CONTIGUOUS } mt_split_behavior;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } mt_prepend_scheme;

typedef struct {
    mt_pre_kind kind;
    mt_regex pattern;            /* Split; ByteLevel with use_regex (GPT-2's pattern) */
    int has_pattern;
    int empty_pattern;           /* Split on "": no matches */
    mt_split_behavior behavior;  /* Split */
    int invert;                  /* Split */
    char replacement[5];         /* Metaspace: the meta character, UTF-8 */
    size_t replacement_len;
    mt_prepend_scheme prepend;   /* Metaspace */
    int split;                   /* Metaspace: split before each meta character */
    int add_prefix_space;        /* ByteLevel */
} mt_pre_step;

/* ---- decoders ---- */
typedef enum { DEC_BYTE_LEVEL, DEC_METASPACE, DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP } mt_dec_kind;

typedef struct {
    mt_dec_kind kind;
    mt_regex pattern;            /* Replace */
    int empty_pattern;
    char *text;                  /* Replace: the replacement */
    size_t text_len;
    char ch[5];                  /* Metaspace: the meta character; Strip: the stripped one */
    size_t ch_len;
    mt_prepend_scheme prepend;   /* Metaspace */
    size_t start, stop;          /* Strip: at most this many from each end */
} mt_dec_step;

/* ---- added tokens ---- */
typedef struct {
    char *content;
    size_t len;
    int32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} mt_added_token;

/* A byte trie over added-token contents, for leftmost-longest matching. */
typedef struct {
    int32_t child, sibling; /* node indices, -1 for none */
    int32_t token;          /* index into mt_added.tokens of the token ending here, or -1 */
    unsigned char byte;
} mt_trie_node;

typedef struct {
    mt_trie_node *nodes;
    size_t n, cap;
    unsigned char first[32]; /* bit set of the bytes some token starts with */
    int empty;
    size_t max_len;          /* the longest content */
} mt_trie;

typedef struct {
    mt_added_token *tokens;
    size_t n;
    mt_trie raw;        /* tokens with normalized: false, matched in the input */
    mt_trie norm;       /* normalized: true, matched (normalized) in the normalized text */
    char **norm_content; /* per token: its normalized content (normalized ones only) */
    size_t *norm_len;
} mt_added;

/* ---- the BPE model ---- */
typedef struct {
    uint64_t key;    /* left id << 32 | right id; UINT64_MAX when empty */
    uint32_t rank;
    int32_t new_id;
} mt_merge_slot;

typedef struct mt_word_cache mt_word_cache;

typedef struct {
    mt_strmap vocab;            /* token string -> id */
    mt_strmap raw_vocab;        /* byte-level models: the bytes a token stands for -> id */
    int byte_level;             /* pieces reach the model as raw bytes (ByteLevel pre-tokenizer) */
    int32_t byte_id[256];       /* byte-level: the id of each byte's character token, or -1 */
    int32_t fallback_id[256];   /* the id of <0xNN>, or -1 */
    mt_merge_slot *merges;
    size_t merges_mask, n_merges;
    char *unk_token;            /* NULL when unset */
    const char *path;           /* the tokenizer.json, for messages (the tokenizer's own string) */
    int fuse_unk, byte_fallback, ignore_merges;
    char *prefix, *suffix;      /* continuing_subword_prefix, end_of_word_suffix (NULL: unset) */
    size_t prefix_len, suffix_len;
    int meta_split;             /* no token has "▁" after another character: a word can be cut
                                 * before each "▁" that follows a non-"▁" (see bpe.c) */
    mt_word_cache *cache;
} mt_bpe;

/* Where a document may be cut into parts encoded apart (cut.c): nowhere, after a newline that a
 * non-space follows (regex pre-tokenizers), before a space that follows a non-space (Metaspace). */
typedef enum { MT_CUT_NONE, MT_CUT_LINE, MT_CUT_SPACE } mt_cut_kind;

struct mt_tokenizer {
    char *path;                 /* tokenizer.json */
    mt_norm_step *norm;
    size_t n_norm;
    mt_pre_step *pre;
    size_t n_pre;
    mt_dec_step *dec;
    size_t n_dec;
    int has_decoder;
    mt_bpe bpe;
    mt_added added;
    uint32_t vocab_size;
    const char **id_text;       /* per id: its token string (added tokens override), or NULL */
    uint32_t *id_len;
    unsigned char *id_special; /* per id: a special added token */
    int32_t bos, eos, eot;
    int adds_bos;
    char *chat_template;
    char *chat_template_source; /* the file it was read from */
    mt_cut_kind cut;
};

/* A string built piece by piece. */
typedef struct {
    char *s;
    size_t len, cap;
} mt_str;

mt_status mt_str_reserve(mt_str *b, size_t extra);
mt_status mt_str_put(mt_str *b, const char *s, size_t n);
void mt_str_free(mt_str *b);

/* ---- parsing helpers (load.c) ---- */
/* A string field: *out = its value (NULL when absent or null and !required). */
mt_status mt_json_string(const json_t *obj, const char *key, int required, const char *what, const char **out);
mt_status mt_json_bool(const json_t *obj, const char *key, int fallback, const char *what, int *out);
/* A pattern object {"String": s} or {"Regex": r}, compiled. */
mt_status mt_json_pattern(const json_t *obj, const char *key, const char *what, mt_regex *re, int *empty);
/* Parses one normalizer, pre-tokenizer or decoder (`type` is its "type") into `tok`. */
typedef mt_status (*mt_step_parser)(mt_tokenizer *tok, const json_t *spec, const char *type, const char *what);
/* `spec`, or for a Sequence each of its `list_key` members in order (nested Sequences flattened),
 * handed to `parse`; `kind` ("normalizer", ...) names the component in messages. */
mt_status mt_json_steps(mt_tokenizer *tok, const json_t *spec, const char *kind, const char *list_key,
                        const char *what, mt_step_parser parse);
/* Appends `item` (`size` bytes) to the array whose pointer is at `array_ptr` (e.g. &tok->pre) and
 * whose length is *n; fails, leaving both as they were, when memory runs out. */
mt_status mt_array_append(void *array_ptr, size_t *n, size_t size, const void *item, const char *what);
/* A one-character string field (Metaspace's replacement, Strip's content) as UTF-8. */
mt_status mt_json_char(const json_t *obj, const char *key, const char *fallback, const char *what, char out[5],
                       size_t *len);

/* ---- per component (normalizer.c, pre_tokenizer.c, decoder.c, added_tokens.c, bpe.c) ---- */
mt_status mt_norm_parse(mt_tokenizer *tok, const json_t *spec);
void mt_norm_free(mt_tokenizer *tok);
/* Applies every normalizer step to s[0, len). *out points at s when nothing changed, else into
 * `buf` (two scratch strings, reused). `cont`: s continues a piece cut before it (see cut.c), so
 * Prepend, which writes at a piece's start, does not apply. */
mt_status mt_norm_apply(const mt_tokenizer *tok, mt_regex_scratch *rx, const char *s, size_t len, int cont,
                        mt_str buf[2], const char **out, size_t *out_len);

mt_status mt_pre_parse(mt_tokenizer *tok, const json_t *spec);
void mt_pre_free(mt_tokenizer *tok);

mt_status mt_dec_parse(mt_tokenizer *tok, const json_t *spec);
void mt_dec_free(mt_tokenizer *tok);

mt_status mt_added_parse(mt_tokenizer *tok, const json_t *list);
void mt_added_free(mt_added *added);
/* The next added-token match in s[0, len) found from byte `search`, as tokenizers' AddedVocabulary
 * finds it (leftmost-longest; single_word, lstrip and rstrip applied; special tokens passed over
 * unless allow_special). *found 0: none. [*start, *stop) is the matched span after stripping
 * (never before `done`, the end of the previous match); *next is where the search goes on. */
void mt_added_next(const mt_tokenizer *tok, const mt_trie *trie, const char *s, size_t len, size_t search,
                   size_t done, int allow_special, int *found, size_t *start, size_t *stop, size_t *next,
                   int32_t *id);

/* Whether s[0, len) may be cut at `cut` without changing the added tokens `trie` matches: no
 * content occurs across or against the cut (starting or ending there), and the characters on
 * both sides are not both whitespace (lstrip and rstrip take whitespace runs). */
int mt_added_cut_ok(const mt_trie *trie, const char *s, size_t len, size_t cut);

mt_status mt_bpe_parse(mt_tokenizer *tok, const json_t *model);
void mt_bpe_free(mt_bpe *bpe);

/* Scratch for one encode call. */
typedef struct {
    void *sym;       /* BPE symbols (bpe.c) */
    size_t sym_cap;
    void *heap;
    size_t heap_cap;
    mt_ids word;     /* one word's ids, for the cache */
} mt_bpe_scratch;

void mt_bpe_scratch_free(mt_bpe_scratch *s);
/* Appends the ids of one pre-tokenized word (raw bytes for byte-level models, else the text the
 * pre-tokenizers produced). */
mt_status mt_bpe_encode_word(const mt_bpe *bpe, mt_bpe_scratch *s, const char *w, size_t len, mt_ids *out);

/* Whether BPE on a word cut between left and right gives the ids of the two halves: the cut is
 * one mt_bpe_encode_word makes itself (before a "▁" that follows another character). */
int mt_bpe_cut_ok(const mt_bpe *b, const char *left, size_t left_len, const char *right, size_t right_len);

/* The word cache: words of up to MT_CACHE_MAX_WORD bytes and their ids, in shards with a lock each
 * (one tokenizer serves many threads). Full shards stop taking words, as tokenizers' cache does. */
#define MT_CACHE_MAX_WORD 256
mt_word_cache *mt_cache_new(void);
void mt_cache_free(mt_word_cache *c);
/* Appends the cached ids of w to out and returns 1, or returns 0 when w is not cached. */
int mt_cache_get(mt_word_cache *c, const char *w, size_t len, mt_ids *out);
/* Caches w's ids (best effort: nothing happens when the shard is full or memory runs out). */
void mt_cache_put(mt_word_cache *c, const char *w, size_t len, const int32_t *ids, size_t n);

/* ---- cutting a document into parts (cut.c) ---- */
/* The kind of cut tok's pipeline allows (set once everything is loaded). */
mt_cut_kind mt_cut_analyse(const mt_tokenizer *tok);

/* Whether doc[0, len) may be cut at `cut` as far as the pipeline and the added tokens matched in
 * the input say (what the text after it does to the pre-tokenizer is verified as parts encode). */
int mt_cut_allowed(const mt_tokenizer *tok, const char *doc, size_t len, size_t cut);

/* The normalized text that follows the cut at doc[cut] within its piece, from the raw text up to
 * about `want` bytes past the cut: *next (in `win`, or empty), *open when the piece goes on past
 * it. `left` is the normalized text of the piece before the cut, for the added tokens matched in
 * normalized text. *state: 0 the cut cannot be verified (an added token against it, invalid
 * UTF-8 after it), 1 ready, 2 ready but short (call again with more). */
mt_status mt_cut_next_text(const mt_tokenizer *tok, mt_regex_scratch *rx, const char *doc, size_t doc_len,
                           size_t cut, size_t want, int allow_special, const char *left, size_t left_len,
                           mt_str win[3], const char **next, size_t *next_len, int *open, int *state);

/* Unicode helpers (unicode.c): Rust's char::is_whitespace (White_Space) and regex \w. */
int mt_unicode_is_space(uint32_t cp);
int mt_unicode_is_word(uint32_t cp);

/* Writes bytes as UTF-8 the way Rust's String::from_utf8_lossy does: each maximal invalid
 * subsequence becomes one U+FFFD. */
mt_status mt_utf8_lossy(const unsigned char *b, size_t n, mt_str *out);

#endif
