/* A Hugging Face tokenizer (tokenizer.json) in C: encodes and decodes exactly as the `tokenizers`
 * library does for the models megatrain trains.
 *
 * Supported pipelines (anything else is refused at load time, naming the file and component):
 *   model          BPE: byte-level (GPT-2, Llama 3, Qwen2/Qwen3) or with byte_fallback and the
 *                  metaspace convention (Llama 2, Mistral)
 *   normalizer     none, NFC, Prepend, Replace (string pattern), Sequence of these
 *   pre-tokenizer  none, ByteLevel, Split (regex, PCRE2), Metaspace, Sequence of these
 *   decoder        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence of these
 *   added tokens   matched in the text first (longest match, lstrip/rstrip/single_word/
 *                  normalized as `tokenizers` honours them)
 * BOS/EOS and the chat template come from tokenizer_config.json (and chat_template.jinja) beside
 * tokenizer.json.
 *
 * A loaded tokenizer is read-only except for an internal word cache guarded by a lock: one
 * mt_tokenizer may be used by several threads at once. */
#ifndef MT_TOKENIZER_TOKENIZER_H
#define MT_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct mt_tokenizer mt_tokenizer;

/* A growable array of token ids. Zero-initialize it ({0}); mt_ids_free releases it. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} mt_ids;

/* Appends one id / n ids, growing the array; fails only when memory runs out. */
mt_status mt_ids_push(mt_ids *a, int32_t id);
mt_status mt_ids_append(mt_ids *a, const int32_t *ids, size_t n);
void mt_ids_free(mt_ids *a);

/* Loads `path`: a tokenizer.json, or a model directory holding tokenizer.json (and, optionally,
 * tokenizer_config.json for bos_token/eos_token/add_bos_token/chat_template and chat_template.jinja;
 * when `path` is a file, they are looked for in the same directory). Fails naming the file and
 * the field or component at fault (an unsupported model, normalizer, pre-tokenizer or decoder;
 * a malformed vocabulary or merge; a regex PCRE2 rejects). */
mt_status mt_tokenizer_load(const char *path, mt_tokenizer **out);
void mt_tokenizer_free(mt_tokenizer *tok);

/* Encodes `len` bytes of UTF-8 `text` and appends the ids to `out` (no BOS/EOS is added: see
 * mt_tokenizer_adds_bos). Added tokens are matched in the text first; special ones (special:
 * true) only when `allow_special` (tokenizers' default; allow_special = 0 is its
 * split_special_tokens = True: special-token strings are encoded as plain text). Invalid UTF-8
 * is refused with the byte offset of the first bad byte in the message ("invalid UTF-8 at byte
 * N"); mt_utf8_check gives the offset to callers that want it as a number. On failure `out`
 * keeps what it held before the call. */
mt_status mt_tokenizer_encode(const mt_tokenizer *tok, const char *text, size_t len, int allow_special,
                              mt_ids *out);

/* One document in parts, for encoding it on several threads (mt_tokenize_files does): the ids of
 * the parts, in order, are exactly the ids of mt_tokenizer_encode on the whole document.
 *
 * mt_tokenizer_next_cut: the first candidate cut at or after byte `from` of text[0, len) (len when
 * there is none, or when the tokenizer's pipeline cannot be cut: see cut.c): after a newline that
 * a non-space follows for regex pre-tokenizers, before a space that follows a non-space for
 * Metaspace ones, where no added token occurs across or against it.
 *
 * mt_tokenizer_encode_part: appends the ids of text[start, end) as part of the document text[0,
 * len): `start` is 0 or a candidate cut that ended the previous part with *end_ok set; `end` is
 * len or a candidate cut. *end_ok says whether `end` is verified: the document's end, or a
 * boundary of the whole document's encoding. When it is 0, the ids of this part and of the next
 * are not the document's: encode this part and the next as one part instead (its start unchanged).
 * Invalid UTF-8 is refused with the document's byte offset, as mt_tokenizer_encode does. */
size_t mt_tokenizer_next_cut(const mt_tokenizer *tok, const char *text, size_t len, size_t from);
mt_status mt_tokenizer_encode_part(const mt_tokenizer *tok, const char *text, size_t len, size_t start, size_t end,
                                   int allow_special, mt_ids *out, int *end_ok);

/* Decodes `n` ids into a NUL-terminated string (malloc'd; *len excludes the NUL) with the
 * tokenizer.json's decoder. Ids of special added tokens are dropped when `skip_special`; ids no
 * token has (a model's padded embedding rows) are dropped, as tokenizers drops them. Bytes the ids
 * spell that are not valid UTF-8 become U+FFFD, as tokenizers does. transformers'
 * clean_up_tokenization_spaces is not applied. */
mt_status mt_tokenizer_decode(const mt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                              char **text, size_t *len);

/* The id of token string `token` (vocabulary or added tokens), or -1 when absent. */
int32_t mt_tokenizer_token_id(const mt_tokenizer *tok, const char *token);
/* The token string of `id` (vocabulary form, e.g. "Ġthe" or "▁the"), or NULL when no token has
 * that id. */
const char *mt_tokenizer_token(const mt_tokenizer *tok, int32_t id);
/* Largest id + 1, added tokens included: the smallest embedding that holds every id. */
uint32_t mt_tokenizer_vocab_size(const mt_tokenizer *tok);
/* Whether `id` is a special added token (special: true). */
int mt_tokenizer_is_special(const mt_tokenizer *tok, int32_t id);

/* tokenizer_config.json's bos_token and eos_token ids, or -1 where not set. */
int32_t mt_tokenizer_bos(const mt_tokenizer *tok);
int32_t mt_tokenizer_eos(const mt_tokenizer *tok);
/* Whether the model expects BOS before each sequence: tokenizer_config.json's add_bos_token where
 * present, else whether tokenizer.json's post-processor inserts one (Llama 3's TemplateProcessing).
 * Callers that want it add mt_tokenizer_bos() themselves. */
int mt_tokenizer_adds_bos(const mt_tokenizer *tok);
/* The end-of-text token that separates documents in pre-training data: <|end_of_text|> (Llama 3),
 * <|endoftext|> (GPT-2, Qwen), </s> (Llama 2, Mistral); else tokenizer_config.json's eos_token.
 * -1 when the tokenizer has none of them. */
int32_t mt_tokenizer_eot(const mt_tokenizer *tok);
/* The chat template: chat_template.jinja beside tokenizer.json where there is one (transformers'
 * place for it since 4.50, which wins over the other), else tokenizer_config.json's chat_template
 * string (the default one when it lists several); NULL when neither has one. _source is the file
 * it came from, for messages. */
const char *mt_tokenizer_chat_template(const mt_tokenizer *tok);
const char *mt_tokenizer_chat_template_source(const mt_tokenizer *tok);
/* Reads a chat template file (chat_template.jinja, --chat-template) as transformers does, the
 * whole text (malloc'd); refused naming the file when it cannot be read, holds a NUL byte or is
 * not UTF-8. */
mt_status mt_chat_template_read(const char *path, char **text);
/* The path tokenizer.json was read from, for messages. */
const char *mt_tokenizer_path(const mt_tokenizer *tok);

/* 0 when `len` bytes at `text` are valid UTF-8 (no overlongs, surrogates or code points past
 * U+10FFFF); else -1 with the offset of the first invalid byte in *bad_offset. */
int mt_utf8_check(const char *text, size_t len, size_t *bad_offset);

#endif
