#include "model/layer_spec.h"

#include <math.h>

#define REFUSE_IF(cond, ...)                                        \
    do {                                                            \
        if (cond) return mt_fail(MT_ERR_INVALID, __VA_ARGS__);      \
    } while (0)

mt_status mt_model_spec_check(const mt_model_spec *m) {
    REFUSE_IF(!(m->embed_scale > 0) || !isfinite(m->embed_scale), "the embedding scale must be positive, got %g",
              (double)m->embed_scale);
    REFUSE_IF(!(m->logit_softcap >= 0) || !isfinite(m->logit_softcap),
              "final_logit_softcapping must be positive or none, got %g", (double)m->logit_softcap);
    REFUSE_IF(m->num_ropes < 1 || m->num_ropes > MT_MODEL_MAX_ROPES, "%d RoPE tables (1 to %d)", m->num_ropes,
              MT_MODEL_MAX_ROPES);
    for (int r = 0; r < m->num_ropes; r++) {
        REFUSE_IF(m->rope[r].type == MT_ROPE_YARN, "RoPE table %d's scaling (yarn) is not supported yet", r);
        REFUSE_IF(!(m->rope[r].theta > 0) || !isfinite(m->rope[r].theta), "RoPE table %d's theta must be positive",
                  r);
        REFUSE_IF(m->rope[r].type == MT_ROPE_LINEAR && !(m->rope[r].factor >= 1 && isfinite(m->rope[r].factor)),
                  "RoPE table %d's linear scaling factor must be >= 1, got %g", r, (double)m->rope[r].factor);
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
    REFUSE_IF(a->flags & (MT_ATTN_BIAS_O | MT_ATTN_SINKS),
              "layer %d: an o_proj bias or attention sinks are not supported yet", l);
    REFUSE_IF((a->flags & MT_ATTN_QK_NORM_HEAD) && (a->flags & MT_ATTN_QK_NORM_FULL),
              "layer %d: q/k RMSNorm is over each head or over the whole projection, not both", l);
    REFUSE_IF(s->ffn_spec.act == MT_GLU_SILU_CLAMPED, "layer %d: the clamped SwiGLU is not supported yet", l);
    REFUSE_IF(s->ffn_spec.flags & (MT_FFN_EXPERT_BIAS | MT_FFN_ROUTER_BIAS),
              "layer %d: expert biases or a router bias are not supported yet", l);
    REFUSE_IF(s->ffn == MT_FFN_MOE && (s->ffn_spec.flags & MT_FFN_POST_NORM),
              "layer %d: a post-feedforward norm after a mixture of experts is not supported yet", l);
    REFUSE_IF(s->ffn != MT_FFN_MOE && (s->ffn_spec.flags & (MT_FFN_SHARED_EXPERT | MT_FFN_RENORM)),
              "layer %d: a shared expert and renormalised routing are part of a mixture of experts", l);
    return MT_OK;
}

int mt_rope_rotary_dim(const mt_rope_spec *r, int head_dim) {
    return r->partial > 0 ? (int)(head_dim * (double)r->partial) : head_dim;
}

void mt_rope_inv_freq(const mt_rope_spec *r, int head_dim, float *inv_freq) {
    int dim = mt_rope_rotary_dim(r, head_dim), half = dim / 2;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow((double)r->theta, (2.0 * i) / dim);
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
