/* Several datasets in one run: --data given more than once (--data chat.jsonl:0.7 --data
 * alpaca.json:0.3), or a run file's list (data: [chat.jsonl:0.7, alpaca.json:0.3]), which the
 * option holds as one comma-separated list. Each dataset is read as a lone --data is
 * (train_data.h: its token file, tokenized into the run's cache when it is text), and their units
 * (each chat example whole, or pieces of MT_MIX_PIECE tokens of a token stream) are interleaved
 * into one token file in the run's cache, data/mix-<key>_000000.bin, which the run trains on as on
 * one dataset (its windows, packing, epochs, held-out split and resume as for any data).
 *
 * The interleaving takes next the dataset furthest below its share of the tokens written (its
 * weight; without weights, its size: the datasets as they come), going round a dataset again when
 * it is used up, until every one has been taken whole at least once: each ends within one unit of
 * its share, a smaller one repeated (oversampled) to reach it, as LLaMA-Factory's
 * interleave_over. The datasets must all be chat data (masked shards that record their examples)
 * or all token streams. The key hashes the weights and each dataset's token file (its path, size
 * and modification time: a tokenized input's cache name holds its own key), so a resumed run reads
 * the same mix and a changed dataset makes a new one. */
#ifndef MT_TRAIN_DATA_MIX_H
#define MT_TRAIN_DATA_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "megatrain.h"

enum { MT_MAX_DATA = 16, MT_MIX_PIECE = 1024 };

typedef struct {
    char path[4096];
    double weight; /* its share before normalizing; 0: none given */
} mt_data_source;

/* The datasets of a --data value: PATH, or PATH:WEIGHT items separated by commas; a value without
 * a comma is one path, taken whole. Fails naming the value when some items have weights and others
 * not, a weight is not a positive number, or there are more than MT_MAX_DATA. *n: how many. */
mt_status mt_data_list_parse(const char *list, mt_data_source *out, int *n);

/* The mixed token file of o->data_path's datasets (two or more) into tokens[cap], made now when
 * missing; `vocab` as for mt_train_data_resolve. */
mt_status mt_data_mix_resolve(const mt_train_options *o, uint32_t vocab, char *tokens, size_t cap);

#endif
