#include "model/layer_spec.h"

#include <math.h>

#define REFUSE_IF(cond, ...)                                        \
    do {                                                            \
        if (cond) return mt_fail(MT_ERR_INVALID, __VA_ARGS__);      \
    } while (0)

static mt_status check_yarn(const mt_rope_spec *y, int r) {
    REFUSE_IF(!(y->factor > 0) || !isfinite(y->factor), "RoPE table %d's yarn factor must be positive, got %g", r,
              (double)y->factor);
    REFUSE_IF(!(y->beta_fast > 0) || !(y->beta_slow > 0) || !isfinite(y->beta_fast) || !isfinite(y->beta_slow),
              "RoPE table %d's yarn beta_fast and beta_slow must be positive", r);
    REFUSE_IF(y->original_max_position < 1, "RoPE table %d's yarn original_max_position_embeddings must be positive",
              r);
    REFUSE_IF(!(y->attention_factor >= 0) || !isfinite(y->attention_factor),
              "RoPE table %d's yarn attention_factor must be positive, got %g", r, (double)y->attention_factor);
    return MT_OK;
}

mt_status mt_model_spec_check(const mt_model_spec *m) {
    REFUSE_IF(!(m->embed_scale > 0) || !isfinite(m->embed_scale), "the embedding scale must be positive, got %g",
              (double)m->embed_scale);
    REFUSE_IF(!(m->logit_softcap >= 0) || !isfinite(m->logit_softcap),
              "final_logit_softcapping must be positive or none, got %g", (double)m->logit_softcap);
    REFUSE_IF(m->num_ropes < 1 || m->num_ropes > MT_MODEL_MAX_ROPES, "%d RoPE tables (1 to %d)", m->num_ropes,
              MT_MODEL_MAX_ROPES);
    for (int r = 0; r < m->num_ropes; r++) {
        REFUSE_IF(!(m->rope[r].theta > 0) || !isfinite(m->rope[r].theta), "RoPE table %d's theta must be positive",
                  r);
        REFUSE_IF(m->rope[r].type == MT_ROPE_LINEAR && !(m->rope[r].factor >= 1 && isfinite(m->rope[r].factor)),
                  "RoPE table %d's linear scaling factor must be >= 1, got %g", r, (double)m->rope[r].factor);
        if (m->rope[r].type == MT_ROPE_YARN) MT_TRY(check_yarn(&m->rope[r], r));
    }
    return MT_OK;
}

mt_status mt_layer_spec_check(const mt_layer_spec *s, const mt_model_spec *m, int l) {
    const mt_attn_spec *a = &s->attn;
    REFUSE_IF(s->mixer == MT_MIXER_GDN && a->flags, "layer %d: Gated DeltaNet takes no attention variants", l);
    REFUSE_IF(s->mixer != MT_MIXER_GDN && s->gdn.flags, "layer %d: Gated DeltaNet's variants on another mixer", l);
    REFUSE_IF(a->window < 0, "layer %d: an attention window of %d keys", l, a->window);
    REFUSE_IF(a->rope < 0 || a->rope >= m->num_ropes, "layer %d: RoPE table %d does not exist", l, a->rope);
    REFUSE_IF(!(a->q_scale >= 0) || !isfinite(a->q_scale), "layer %d: the attention scale must be positive, got %g",
              l, (double)a->q_scale);
    REFUSE_IF(!(a->logit_softcap >= 0) || !isfinite(a->logit_softcap),
              "layer %d: attn_logit_softcapping must be positive or none, got %g", l, (double)a->logit_softcap);
    REFUSE_IF((a->flags & MT_ATTN_QK_NORM_HEAD) && (a->flags & MT_ATTN_QK_NORM_FULL),
              "layer %d: q/k RMSNorm is over each head or over the whole projection, not both", l);
    REFUSE_IF(s->ffn_spec.act == MT_GLU_SILU_CLAMPED &&
                  (!(s->ffn_spec.clamp > 0) || !(s->ffn_spec.alpha > 0) || !isfinite(s->ffn_spec.clamp) ||
                   !isfinite(s->ffn_spec.alpha)),
              "layer %d: the clamped SwiGLU's swiglu_limit and swiglu_alpha must be positive", l);
    REFUSE_IF(s->ffn != MT_FFN_MOE && (s->ffn_spec.flags & (MT_FFN_EXPERT_BIAS | MT_FFN_ROUTER_BIAS)),
              "layer %d: expert biases and a router bias are part of a mixture of experts", l);
    REFUSE_IF(s->ffn == MT_FFN_MOE && (s->ffn_spec.flags & MT_FFN_POST_NORM),
              "layer %d: a post-feedforward norm after a mixture of experts is not supported yet", l);
    REFUSE_IF(s->ffn != MT_FFN_MOE && (s->ffn_spec.flags & (MT_FFN_SHARED_EXPERT | MT_FFN_RENORM)),
              "layer %d: a shared expert and renormalised routing are part of a mixture of experts", l);
    return MT_OK;
}

int mt_rope_rotary_dim(const mt_rope_spec *r, int head_dim) {
    return r->partial > 0 ? (int)(head_dim * (double)r->partial) : head_dim;
}

/* transformers' _compute_yarn_parameters: the dimension at which a frequency turns `rotations`
 * times over the original context. */
static double yarn_dim(double rotations, int head_dim, const mt_rope_spec *r) {
    return head_dim * log(r->original_max_position / (rotations * 2 * M_PI)) / (2 * log((double)r->theta));
}

/* Frequency i's share of its unscaled value (1 - the linear ramp from the dimension beta_fast
 * turns at to beta_slow's); the rest is the interpolated f / factor. */
static double yarn_extrapolation(const mt_rope_spec *r, int head_dim, int i) {
    double low = yarn_dim(r->beta_fast, head_dim, r), high = yarn_dim(r->beta_slow, head_dim, r);
    if (r->truncate) low = floor(low), high = ceil(high);
    low = fmax(low, 0), high = fmin(high, head_dim - 1);
    if (low == high) high += 0.001; /* transformers' guard against a zero-width ramp */
    double ramp = fmin(fmax((i - low) / (high - low), 0), 1);
    return 1 - ramp;
}

float mt_rope_attention_factor(const mt_rope_spec *r) {
    if (r->type != MT_ROPE_YARN) return 1.0f;
    if (r->attention_factor > 0) return r->attention_factor;
    return r->factor <= 1 ? 1.0f : (float)(0.1 * log((double)r->factor) + 1.0);
}

void mt_rope_inv_freq(const mt_rope_spec *r, int head_dim, float *inv_freq) {
    int dim = mt_rope_rotary_dim(r, head_dim), half = dim / 2;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow((double)r->theta, (2.0 * i) / dim);
        if (r->type == MT_ROPE_YARN) {
            double keep = yarn_extrapolation(r, dim, i);
            f = f / r->factor * (1 - keep) + f * keep;
        }
        if (r->type == MT_ROPE_LINEAR) f /= r->factor; /* positions divided by the factor */
        if (r->type == MT_ROPE_LLAMA3) {
            /* transformers' _compute_llama3_parameters */
            double low_wavelen = r->original_max_position / r->low_freq_factor;
            double high_wavelen = r->original_max_position / r->high_freq_factor;
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / r->factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (r->original_max_position / wavelen - r->low_freq_factor) /
                                (r->high_freq_factor - r->low_freq_factor);
                f = (1 - smooth) * f / r->factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}
