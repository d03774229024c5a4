/* The tokenizer files of an export (mt_export), so that the directory is a whole model: what
 * transformers' AutoTokenizer and apply_chat_template read, and what `megatrain tokenize
 * --tokenizer` and `train --init-from` read back. They come from the run's tokenizer source (its
 * --tokenizer, or the --init-from directory's), with the run's chat template (its --chat-template
 * file, else the tokenizer's own):
 *   tokenizer.json           copied
 *   tokenizer_config.json    the source's (or bos_token and eos_token), chat_template the run's
 *   special_tokens_map.json  the source's, or bos/eos/unk/pad_token of tokenizer_config.json
 *   chat_template.jinja      the run's chat template, where it has one
 * and the ids generation ends at: the tokenizer's eos and the template's end of turn (<|im_end|>,
 * <|eot_id|>), which go into generation_config.json. A run without a tokenizer (bytes) has none. */
#ifndef MT_TRAIN_EXPORT_TOKENIZER_H
#define MT_TRAIN_EXPORT_TOKENIZER_H

#include "io/hf_model.h"

typedef struct {
    mt_hf_file files[4];
    size_t n_files;
    char *text[4];          /* the files' texts, owned */
    int32_t stop_ids[2];
    size_t n_stop_ids;
} mt_export_tokenizer;

/* Reads the tokenizer files of `checkpoint`'s run; refuses a tokenizer or template file that
 * changed since the run stored it, or that cannot be read, naming it. */
mt_status mt_export_tokenizer_read(const char *checkpoint, mt_export_tokenizer *out);
void mt_export_tokenizer_free(mt_export_tokenizer *t);

#endif
