/* mt_sample: text from a checkpoint. The context runs through the same engine as training
 * (forward only), one new token at a time; there is no KV cache, which is fine for the demo's
 * sizes. Text goes through the run's tokenizer, or is bytes (train/sample_text.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "megatrain.h"
#include "train/backend_select.h"
#include "train/memory_check.h"
#include "train/run_state.h"
#include "train/sample.h"
#include "train/sample_text.h"
#include "util/rng.h"
#include "util/stop_signal.h"

enum { MAX_CONTEXT = 1024 };

/* Draws from softmax(logits / temperature) over the top_k largest logits (greedy at 0). */
static int draw(float *logits, int vocab, float temperature, int top_k, mt_rng *rng) {
    int best = 0;
    for (int v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0) return best;
    float threshold = -INFINITY;
    if (top_k > 0 && top_k < vocab) {
        /* The k-th largest logit, by repeated selection: k is small. */
        float *copy = malloc((size_t)vocab * sizeof *copy);
        if (copy) {
            memcpy(copy, logits, (size_t)vocab * sizeof *copy);
            for (int i = 0; i < top_k; i++) {
                int m = 0;
                for (int v = 1; v < vocab; v++)
                    if (copy[v] > copy[m]) m = v;
                threshold = copy[m];
                copy[m] = -INFINITY;
            }
            free(copy);
        }
    }
    double sum = 0;
    for (int v = 0; v < vocab; v++) sum += logits[v] >= threshold ? exp((logits[v] - logits[best]) / temperature) : 0;
    double u = mt_rng_uniform(rng) * sum;
    for (int v = 0; v < vocab; v++) {
        if (logits[v] < threshold) continue;
        u -= exp((logits[v] - logits[best]) / temperature);
        if (u <= 0) return v;
    }
    return best;
}

mt_status mt_sample(const mt_sample_options *o, FILE *out) {
    MT_TRY(mt_sample_options_check(o));
    char checkpoint[4096];
    MT_TRY(mt_run_resolve(o->run, checkpoint, sizeof checkpoint));
    mt_config cfg;
    MT_TRY(mt_run_load_config(checkpoint, &cfg));
    int context = cfg.max_position < MAX_CONTEXT ? cfg.max_position : MAX_CONTEXT;
    mt_sample_text text;
    MT_TRY(mt_sample_text_open(checkpoint, &cfg, &text));
    int32_t *prompt = NULL;
    int prompt_len = 0;
    mt_status prompt_rc = o->chat ? mt_sample_text_chat(&text, checkpoint, o->chat, &prompt, &prompt_len)
                                  : mt_sample_text_prompt(&text, o->prompt, &prompt, &prompt_len);
    if (prompt_rc != MT_OK) {
        mt_sample_text_close(&text);
        /* the prompt is at fault, not the checkpoint */
        return mt_fail_context(prompt_rc, o->chat ? "--chat" : "--prompt");
    }

    mt_layout layout = {0};
    mt_backend *be = NULL;
    mt_store store = {0};
    mt_engine *engine = NULL;
    int32_t *tokens = malloc(((size_t)prompt_len + o->tokens + 1) * sizeof *tokens);
    float *logits = malloc((size_t)cfg.vocab_size * sizeof *logits);
    mt_status rc = tokens && logits ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot allocate the sampling buffers");
    if (rc == MT_OK) rc = mt_layout_init(&layout, &cfg);
    if (rc == MT_OK) rc = mt_backend_open(o->backend, 0, &be);
    /* The model runs forward only: the working weights and a forward-only engine are all that is
     * checked against the machine and allocated (no fp32 master, moments or gradients). */
    mt_engine_options eo = mt_engine_defaults();
    eo.batch = 1;
    eo.seq = context;
    eo.max_grad_norm = 0;
    eo.forward_only = 1;
    int64_t step = 0;
    if (rc == MT_OK) rc = mt_memory_check_fit_of(&layout, be, &eo, MT_MOMENTS_F32, "sampling");
    if (rc == MT_OK) rc = mt_store_create_weights(&store, &layout, be);
    if (rc == MT_OK) rc = mt_run_load_weights(checkpoint, &store, &step);
    if (rc == MT_OK) rc = mt_engine_create(&engine, be, &store, &eo, step);
    if (rc == MT_OK) {
        int len = prompt_len;
        memcpy(tokens, prompt, (size_t)prompt_len * sizeof *tokens);
        if (!o->chat) fputs(o->prompt, out);
        mt_rng rng = {o->seed};
        for (int i = 0; i < o->tokens && rc == MT_OK; i++) {
            if (mt_stop_requested()) {
                rc = mt_stop_status("sampling");
                break;
            }
            int start = len > context ? len - context : 0;
            rc = mt_engine_next_logits(engine, tokens + start, len - start, logits);
            if (rc != MT_OK) break;
            tokens[len] = draw(logits, cfg.vocab_size, o->temperature, o->top_k, &rng);
            if (mt_sample_text_emit(&text, tokens[len++], out)) break;
        }
        fputc('\n', out);
    }
    mt_engine_destroy(engine);
    if (store.layout) mt_store_free(&store);
    if (be) mt_backend_destroy(be);
    if (layout.units) mt_layout_free(&layout);
    free(tokens);
    free(logits);
    free(prompt);
    mt_sample_text_close(&text);
    return rc;
}
