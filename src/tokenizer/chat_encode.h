/* A rendered conversation (tokenizer/chat_template.h) as token ids and a loss mask.
 *
 * The ids are exactly those of encoding the whole rendered text at once with special tokens
 * allowed (transformers' apply_chat_template(tokenize=True)): the text is never tokenized in
 * pieces that the tokenizer would not itself split it into. A token carries loss (mask 1) when it
 * holds any byte of a trainable segment, so that a token the answer shares with the markup before
 * it (a ChatML answer that starts with a newline: "\n\n" is one token) is learned too.
 *
 * How: the template's special tokens split the text into chunks that the tokenizer encodes
 * independently (added tokens are matched first and the text between them is normalized and
 * pre-tokenized on its own), each chunk encoded with the special token that opens it; within a
 * chunk, the token where a trainable part starts or ends is found by encoding the chunk up to that
 * byte and comparing with the chunk's ids. */
#ifndef MT_TOKENIZER_CHAT_ENCODE_H
#define MT_TOKENIZER_CHAT_ENCODE_H

#include <stdint.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

/* A growable byte array, one loss flag a token. Zero-initialize; mt_mask_free releases it. */
typedef struct {
    uint8_t *v;
    size_t n, cap;
} mt_mask;

void mt_mask_free(mt_mask *m);

/* Appends the ids of the rendered conversation to `ids` and their loss flags to `mask` (the two
 * grow together). Fails on text the tokenizer refuses; both keep what they held before then. */
mt_status mt_chat_encode(const mt_tokenizer *tok, const mt_chat_rendered *r, mt_ids *ids, mt_mask *mask);

#endif
