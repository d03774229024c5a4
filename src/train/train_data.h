/* What `train --data` reads. A token file (llm.c shard, masked shard, .npy) is read as it is. Any
 * other file is text: with no tokenizer, its bytes are the tokens (vocabulary 256, the demo's);
 * with one (--tokenizer, the --init-from model directory's tokenizer.json, or on --resume the
 * run's), it is tokenized as `megatrain tokenize` would: plain text is one document, JSONL
 * (.jsonl) is a document a line in its "text" field, or chat and instruction examples rendered
 * with the model's chat template (or --chat-template's) into a masked shard, the loss where
 * --loss-on says (the answers by default).
 *
 * Tokenized data is cached in the run directory, data/<name>-<key>_000000.bin, where the key
 * hashes the input's size and modification time, the tokenizer's files, and --chat-template's file
 * and --loss-on where they are not the defaults: the same input with
 * the same tokenizer is tokenized once (a resumed run reads the cache), a changed one again
 * (replacing the stale cache). */
#ifndef MT_TRAIN_TRAIN_DATA_H
#define MT_TRAIN_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokens.h"
#include "megatrain.h"

/* The tokenizer that options name, as an absolute path (to its tokenizer.json or model directory)
 * into out[cap]: o->tokenizer, else the --init-from directory when it holds a tokenizer.json; ""
 * when neither does. A resumed run's comes from its settings (train.c). */
mt_status mt_train_tokenizer_resolve(const mt_train_options *o, char *out, size_t cap);

/* The token file to train on for o->data_path into tokens[cap]: the file itself, or its cache
 * tokenized with o->tokenizer (resolved: an absolute path, or NULL for bytes) under the run
 * directory, made now when missing; several datasets (a comma-separated list), their mix
 * (train/data_mix.h). `vocab` is the model's vocabulary, which the tokenizer's must fit. */
mt_status mt_train_data_resolve(const mt_train_options *o, uint32_t vocab, char *tokens, size_t cap);

/* Removes the caches in cache_dir of input `name` whose key is not the one about to be made (a
 * changed input or tokenizer): data/<name>-<key>_*.bin. */
void mt_train_cache_remove_stale(const char *cache_dir, const char *name);

/* The windows' layout for the open token file `tokens` (named `name`), io/dataset.h's:
 * o->packing resolved where unset, "on" for a masked shard that records its examples, else "off"
 * (a masked shard that does not: with a warning); --packing on for data that is not chat data, and
 * --doc-mask for chat data or without a tokenizer (raw bytes have no end-of-text token), are
 * refused. *eot: the end-of-text id after which --doc-mask ends documents (o->tokenizer's), or -1. */
mt_status mt_train_data_layout(mt_train_options *o, const mt_tokens *tokens, const char *name, int32_t *eot);

#endif
