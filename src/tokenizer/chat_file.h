/* A chat or instruction file (tokenizer/chat_data.h) as token ids with a loss mask: JSONL (one
 * example a line) or a JSON array of examples (LLaMA-Factory's .json files, read whole), each
 * example rendered with the model's chat template and encoded (tokenizer/chat_encode.h), lines in
 * batches across all cores, handed on in file order. Conversations follow one another with
 * nothing between them: each begins with its template's own opening (bos, <|im_start|>). Blank
 * lines are skipped. */
#ifndef MT_TOKENIZER_CHAT_FILE_H
#define MT_TOKENIZER_CHAT_FILE_H

#include <stdint.h>

#include "tokenizer/chat_encode.h"

/* Receives one example's ids and loss flags. */
typedef mt_status (*mt_chat_sink)(const int32_t *ids, const uint8_t *mask, size_t n, void *user);

typedef struct {
    uint64_t examples, tokens, trained_tokens, bytes;
} mt_chat_file_stats;

/* Encodes every example of `path` with the loss on the tokens `loss` says (harmony's analysis
 * channel too where `analysis` is 1: mt_chat_rendered_set_loss), adding to *stats. Fails at the
 * first that is not a chat or instruction example or that its template refuses, naming path:line
 * (JSONL) or "path: record N" (an array). */
mt_status mt_chat_file_encode(const mt_tokenizer *tok, const mt_chat_template *t, mt_chat_loss loss, int analysis,
                              const char *path, mt_chat_sink sink, void *user, mt_chat_file_stats *stats);

/* Whether the first example of a JSONL file (its first non-blank line) or of a JSON array is a
 * chat or instruction example (tokenizer/chat_data.h's layouts). Fails naming the file when it
 * cannot be read, when its first line is not JSON (one JSON value over many lines is named as not
 * records), or when it is an array that is empty or whose first record is not such an example (an
 * array of text documents is not read). */
mt_status mt_jsonl_is_chat(const char *path, int *chat);

#endif
