#include "engine/ends.h"

#include "util/bf16.h"

/* The embedding's scale rounded to the weights' type, as transformers multiplies by it (Gemma's
 * sqrt(hidden_size): 45.25 in bf16 for 2048, not 45.2548). */
mt_ends mt_ends_of(mt_backend *be, mt_stream *stream, const mt_config *cfg) {
    mt_ends k = {be, stream, cfg, mt_model_spec_of(cfg)};
    if (be->ops->weight_dtype == MT_DTYPE_BF16)
        k.model.embed_scale = mt_bf16_to_f32(mt_f32_to_bf16(k.model.embed_scale));
    return k;
}

static mt_rmsnorm_params final_norm(const mt_ends *k) {
    return (mt_rmsnorm_params){.eps = k->model.norm_eps, .unit_offset = k->model.norm_unit_offset};
}

void mt_embed_forward(const mt_ends *k, void *x, const int32_t *tokens, const void *wte, int rows) {
    k->be->ops->op.embedding(k->be, k->stream, x, tokens, wte, rows, k->cfg->hidden_size, k->model.embed_scale);
}

void mt_embed_backward(const mt_ends *k, float *dw, const int32_t *tokens, const void *dx, int rows, int v0,
                       int vocab_rows) {
    k->be->ops->op.embedding_dw(k->be, k->stream, dw, tokens, dx, rows, k->cfg->hidden_size, v0, vocab_rows,
                                k->model.embed_scale);
}

void mt_head_norm(const mt_ends *k, void *h, float *rstd, const void *x, const void *norm_w, int rows) {
    k->be->ops->op.rmsnorm(k->be, k->stream, h, rstd, x, norm_w, rows, k->cfg->hidden_size, final_norm(k));
}

void mt_head_norm_backward(const mt_ends *k, void *dx, float *dw, const void *dh, const void *x, const void *norm_w,
                           const float *rstd, int rows) {
    k->be->ops->op.rmsnorm_dx(k->be, k->stream, dx, dw, dh, x, norm_w, rstd, rows, k->cfg->hidden_size, final_norm(k),
                              0);
}

void mt_head_loss(const mt_ends *k, float *loss, float *lse, void *dh, float *dw, const void *h, const void *lm_w,
                  const int32_t *targets, int rows, float scale, int chunk, void *ws) {
    k->be->ops->op.lmhead_loss(k->be, k->stream, loss, lse, dh, dw, h, lm_w, targets, rows, k->cfg->hidden_size,
                               k->cfg->vocab_size, scale, k->model.logit_softcap, chunk, ws);
}

void mt_head_dw(const mt_ends *k, float *dw, const void *h, const void *lm_w, const int32_t *targets, const float *lse,
                int rows, int v0, int vocab_rows, float scale, int chunk, void *ws) {
    k->be->ops->op.lmhead_dw(k->be, k->stream, dw, h, lm_w, targets, lse, rows, k->cfg->hidden_size, v0, vocab_rows,
                             scale, k->model.logit_softcap, chunk, ws);
}

void mt_head_logits(const mt_ends *k, float *logits, const void *h, const void *lm_w) {
    k->be->ops->op.logits(k->be, k->stream, logits, h, lm_w, k->cfg->hidden_size, k->cfg->vocab_size,
                          k->model.logit_softcap);
}
