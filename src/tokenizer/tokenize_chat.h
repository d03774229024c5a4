/* megatrain tokenize for chat and instruction data: JSONL files of conversations
 * (tokenizer/chat_data.h) rendered with the model's chat template and encoded with the loss on
 * the answers only, into masked shards (io/masked_tokens.h, docs/data-formats.md) named as the
 * text shards are, PREFIX_000000.bin, PREFIX_000001.bin, ... Every shard but the last holds
 * exactly shard_tokens tokens. On any error no shard is left: shards are completed under
 * temporary names and renamed only when every input has been read. */
#ifndef MT_TOKENIZER_TOKENIZE_CHAT_H
#define MT_TOKENIZER_TOKENIZE_CHAT_H

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenize_files.h"
#include "tokenizer/tokenizer.h"

/* Whether the inputs are chat data: JSONL files whose first line is a chat or instruction example.
 * Inputs that mix chat and other files are refused, naming one of each. */
mt_status mt_tokenize_inputs_are_chat(const char *const *inputs, size_t n, int *chat);

/* The chat template of file `file` (--chat-template), or when NULL the tokenizer's own
 * (chat_template.jinja or tokenizer_config.json beside its tokenizer.json), recognised; the caller
 * frees it with mt_chat_template_free. */
mt_status mt_tokenizer_chat(const mt_tokenizer *tok, const char *file, mt_chat_template *t);

/* Tokenizes the chat inputs of `o` (its tokenizer, chat_template, loss, inputs, out_prefix,
 * shard_tokens, width and threads; text_field, allow_special and bos do not apply: templates say).
 * *trained counts the tokens that carry loss. */
mt_status mt_tokenize_chat_files(const mt_tokenize_options *o, mt_tokenize_summary *s, uint64_t *trained);

#endif
