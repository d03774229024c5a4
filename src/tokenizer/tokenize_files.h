/* megatrain tokenize: text and JSONL files in, llm.c token shards out.
 *
 * Documents: a plain-text file is one document; a JSONL file holds one per line (the string field
 * `text_field` of a JSON object; blank lines are passed over). Each document is preceded by the
 * tokenizer's end-of-text token (mt_tokenizer_eot), as llm.c's data scripts do, then its BOS when
 * the tokenizer adds one; special-token strings inside documents are text unless allow_special.
 *
 * Documents are encoded by `threads` workers in batches and written in input order, so the shards
 * are the same whatever the thread count. A plain-text document larger than a part is cut into
 * parts encoded in parallel, with exactly the ids of encoding it whole (mt_tokenizer_encode_part). On any error no shard is left: they are written under
 * temporary names and renamed at the end (see shard_writer.h). */
#ifndef MT_TOKENIZER_TOKENIZE_FILES_H
#define MT_TOKENIZER_TOKENIZE_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#define MT_TOKENIZE_DEFAULT_SHARD 100000000 /* tokens a shard, as llm.c's FineWeb shards */

typedef struct {
    const char *tokenizer;      /* a model directory or a tokenizer.json */
    const char *const *inputs;  /* files and directories (see input_files.h) */
    size_t n_inputs;
    const char *out_prefix;     /* shards are out_prefix_000000.bin, ... */
    const char *text_field;     /* JSONL: the document's field (NULL: "text") */
    int64_t shard_tokens;       /* 0: MT_TOKENIZE_DEFAULT_SHARD */
    int width;                  /* bytes an id: 2 (uint16), 4 (uint32), 0: 2 when the vocabulary fits */
    int threads;                /* 0: every core this process may use */
    int allow_special;          /* match special-token strings in documents */
    const char *chat_template;  /* chat data: a template file in place of the tokenizer's (NULL: its own) */
    int loss;                   /* chat data: which tokens carry loss, an mt_chat_loss (0: the answers) */
    int no_analysis_loss;       /* chat data: harmony's analysis channel (gpt-oss's reasoning) is context */
    int bos;                    /* -1: when the tokenizer adds BOS (mt_tokenizer_adds_bos), 0 never, 1 always */
    double progress_seconds;    /* period of the progress line in the log; 0: 2 s */
    size_t part_bytes;          /* a plain-text document's parts, about; 0: a quarter of its share of the
                                 * threads, within 64 KiB and 4 MiB */
} mt_tokenize_options;

typedef struct {
    size_t files, documents, shards;
    size_t parts;   /* encoded apart: a document each, or the parts a large one was cut into */
    size_t merges;  /* cuts that did not verify, their parts encoded as one */
    uint64_t bytes, tokens;
    int width, threads;
    double seconds;
} mt_tokenize_summary;

mt_status mt_tokenize_files(const mt_tokenize_options *o, mt_tokenize_summary *summary);

#endif
