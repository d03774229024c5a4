/* mt_export: a run checkpoint's fp32 masters as a Hugging Face model directory, with the run's
 * tokenizer files (train/export_tokenizer.h); a run initialized from a wrapper's directory
 * (model/wrappers.h) as that wrapper, what it keeps besides the text model written back from
 * there. */
#include <stdlib.h>

#include "io/checkpoint.h"
#include "io/hf_model.h"
#include "megatrain.h"
#include "train/export_tokenizer.h"
#include "train/memory_check.h"
#include "train/run_inputs.h"
#include "train/run_state.h"

static mt_status wrapped_dir(const char *checkpoint, char *dir, size_t cap) {
    int64_t step;
    json_t *settings;
    MT_TRY(mt_run_read_info(checkpoint, &step, &settings));
    mt_status st = mt_run_inputs_wrapped_from(settings, checkpoint, dir, cap);
    json_decref(settings);
    return st;
}

mt_status mt_export(const char *path, const char *out_dir, int bf16, int64_t max_shard_bytes) {
    char checkpoint[4096];
    MT_TRY(mt_run_resolve(path, checkpoint, sizeof checkpoint));
    mt_config cfg;
    MT_TRY(mt_run_load_config(checkpoint, &cfg));
    mt_layout layout;
    MT_TRY(mt_layout_init(&layout, &cfg));
    size_t bytes = (size_t)layout.total_numel * sizeof(float);
    mt_memory_class need = {"fp32 master weights", (int64_t)bytes};
    char wrapped_from[4096];
    mt_status rc = wrapped_dir(checkpoint, wrapped_from, sizeof wrapped_from);
    mt_export_tokenizer tok = {0};
    if (rc == MT_OK) rc = mt_export_tokenizer_read(checkpoint, &tok);
    if (rc != MT_OK) {
        mt_layout_free(&layout);
        return rc;
    }
    rc = mt_memory_check_host("export", &need, 1);
    float *master = rc == MT_OK ? mt_malloc(bytes, "the exported master weights") : NULL;
    if (rc == MT_OK) rc = master ? mt_checkpoint_read(checkpoint, "master", master, bytes) : MT_ERR_NOMEM;
    if (rc == MT_OK) {
        mt_hf_export_options eo = {.dtype = bf16 ? MT_ST_BF16 : MT_ST_F32, .max_shard_bytes = max_shard_bytes,
                                   .files = tok.files, .n_files = tok.n_files, .stop_ids = tok.stop_ids,
                                   .n_stop_ids = tok.n_stop_ids, .wrapped_from = wrapped_from[0] ? wrapped_from : NULL};
        rc = mt_hf_export(&layout, master, out_dir, &eo);
    }
    free(master);
    mt_export_tokenizer_free(&tok);
    mt_layout_free(&layout);
    return rc;
}
