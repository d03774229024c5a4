/* The ends' maths, as the block's are its kinds': the embedding (tokens to rows, and its weight
 * gradient) and the head (the final norm, the LM head with its cross-entropy or its logits, and
 * their backward), as the model spec has them (model/layer_spec.h: its final norm, embedding scale
 * and logit soft-cap). engine_jobs.c cuts the ends' work into pieces and vocabulary chunks, sums
 * their gradients across ranks and copies them home; what is computed is here. */
#ifndef MT_ENGINE_ENDS_H
#define MT_ENGINE_ENDS_H

#include "backend/backend.h"
#include "model/families.h"

typedef struct {
    mt_backend *be;
    mt_stream *stream;
    const mt_config *cfg;
    mt_model_spec model;
} mt_ends;

mt_ends mt_ends_of(mt_backend *be, mt_stream *stream, const mt_config *cfg);

/* x[rows, D] = the embedding of tokens[rows]. */
void mt_embed_forward(const mt_ends *k, void *x, const int32_t *tokens, const void *wte, int rows);
/* dw (vocabulary rows [v0, v0 + vocab_rows)) += the gradient of one sequence's rows. */
void mt_embed_backward(const mt_ends *k, float *dw, const int32_t *tokens, const void *dx, int rows, int v0,
                       int vocab_rows);

/* h[rows, D] = the final norm of x (statistics into rstd), and its backward: dx = d(h)/dx . dh,
 * dw += the norm weight's gradient. */
void mt_head_norm(const mt_ends *k, void *h, float *rstd, const void *x, const void *norm_w, int rows);
void mt_head_norm_backward(const mt_ends *k, void *dx, float *dw, const void *dh, const void *x, const void *norm_w,
                           const float *rstd, int rows);
/* The LM head and cross-entropy of h's rows (backend.h's lmhead_loss: the loss, each row's
 * log-sum-exp, dh and the head's gradient where asked). */
void mt_head_loss(const mt_ends *k, float *loss, float *lse, void *dh, float *dw, const void *h, const void *lm_w,
                  const int32_t *targets, int rows, float scale, int chunk, void *ws);
/* The head's weight gradient for vocabulary rows [v0, v0 + vocab_rows) from the rows' log-sum-exp. */
void mt_head_dw(const mt_ends *k, float *dw, const void *h, const void *lm_w, const int32_t *targets, const float *lse,
                int rows, int v0, int vocab_rows, float scale, int chunk, void *ws);
/* One row's logits over the vocabulary. */
void mt_head_logits(const mt_ends *k, float *logits, const void *h, const void *lm_w);

#endif
