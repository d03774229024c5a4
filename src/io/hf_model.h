/* Hugging Face model directories in and out: config.json plus safetensors weights, read into
 * (and written from) the fp32 master array that mt_layout describes: one float array of
 * layout->total_numel, tensor t of unit u at units[u].offset + t->offset. */
#ifndef MT_IO_HF_MODEL_H
#define MT_IO_HF_MODEL_H

#include <stdint.h>

#include "io/safetensors.h"
#include "model/layout.h"

/* Called after each tensor is loaded: source bytes converted so far, of the total. */
typedef void (*mt_hf_progress_fn)(int64_t bytes_done, int64_t bytes_total, void *user);

/* Reads dir/config.json. */
mt_status mt_hf_load_config(const char *dir, mt_config *cfg);

/* Fills `masters` with the weights of the model in `dir`, whose shapes must match `layout`: each
 * tensor under its name, in its hub parts (layout.h), or in the form its family's hub holds its role
 * (io/hub_form.h: transposed, interleaved, MXFP4 pairs decoded a band of rows at a time), the mapped
 * file's pages given back as they are converted. Everything is validated before anything is
 * converted: a tensor the layout needs that is missing or shaped differently, a tensor it does not
 * know, or an MXFP4 pair that is not one, fails naming file and tensor.
 * Harmless extras are skipped: rotary_emb.inv_freq buffers, and lm_head.weight of a tied
 * model. Alignment padding is zeroed. `progress` may be NULL. Where dir/config.json names a
 * wrapper (model/wrappers.h), the text model's tensors are read under its names, and what it
 * keeps besides (its prefixes) is passed over. */
mt_status mt_hf_load_weights(const char *dir, const mt_layout *layout, float *masters,
                             mt_hf_progress_fn progress, void *user);
/* The same into masters kept in a form of their own (engine/store.h's split masters): each tensor
 * is converted to fp32 a piece at a time and handed to sink(sink_user, at, values, n), n masters
 * from layout element `at`; the padding after each tensor comes as zeros. */
typedef void (*mt_hf_sink_fn)(void *sink_user, int64_t at, const float *values, int64_t n);
mt_status mt_hf_load_weights_into(const char *dir, const mt_layout *layout, mt_hf_sink_fn sink, void *sink_user,
                                  mt_hf_progress_fn progress, void *user);

/* A file of an export beside the weights (a tokenizer's). */
typedef struct {
    const char *name;        /* in the directory: "tokenizer.json" */
    const char *text;
    size_t len;
} mt_hf_file;

typedef struct {
    mt_st_dtype dtype;       /* MT_ST_BF16 or MT_ST_F32 */
    int64_t max_shard_bytes; /* split into shards above this many bytes; 0: one file */
    const mt_hf_file *files; /* written beside the weights: n_files of them */
    size_t n_files;
    const int32_t *stop_ids; /* ids generation also ends at (a chat template's end of turn), added to
                              * generation_config.json's eos_token_id: n_stop_ids of them */
    size_t n_stop_ids;
    /* NULL, or the directory of a wrapper (model/wrappers.h) the model is the text model of: the
     * export is then that wrapper, its config.json with its text config this model's, the text
     * tensors under its names, what it keeps besides (a vision tower) copied from there byte for
     * byte, in their own dtype, and the files it keeps (its image processor's configs). */
    const char *wrapped_from;
} mt_hf_export_options;

/* Writes config.json, generation_config.json, the weights (under the hub's names and in its roles'
 * forms, never MXFP4) and options->files to `out_dir`, atomically: they are written into a
 * temporary sibling directory that is renamed into place, so a failure leaves nothing at
 * `out_dir`, which is then a directory of mode 0755 (files 0666 less the umask). `out_dir` must not exist or be an empty directory. Non-finite masters are refused,
 * naming the tensor. */
mt_status mt_hf_export(const mt_layout *layout, const float *masters, const char *out_dir,
                       const mt_hf_export_options *options);

#endif
