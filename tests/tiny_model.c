#include "tiny_model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

static mt_config base(void) {
    mt_config c = {.arch = MT_ARCH_LLAMA, .hidden_size = 32, .intermediate_size = 40, .num_layers = 3,
                   .num_heads = 4, .num_kv_heads = 2, .head_dim = 8, .vocab_size = 53,
                   .max_position = 64, .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f,
                   .bos_token_id = -1, .eos_token_id = -1};
    return c;
}

mt_config mt_tiny_config_gqa(void) { return base(); }

mt_config mt_tiny_config_tied_bias(void) {
    mt_config c = base();
    c.arch = MT_ARCH_QWEN2;
    c.tie_embeddings = 1;
    c.attention_bias = 1;
    return c;
}

mt_config mt_tiny_config_mha(void) {
    mt_config c = base();
    c.num_kv_heads = c.num_heads;
    c.num_layers = 2;
    c.rope_scaling_factor = 8.0f; /* exercises llama3 frequency scaling */
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_position = 16;
    return c;
}

mt_config mt_tiny_config_qwen3(int tied) {
    mt_config c = base();
    c.arch = MT_ARCH_QWEN3;
    c.qk_norm = 1;
    c.head_dim = 16;
    c.tie_embeddings = tied;
    return c;
}

mt_config mt_tiny_config_windowed(int window) {
    mt_config c = base();
    c.arch = MT_ARCH_MISTRAL;
    c.sliding_window = window;
    mt_config_set_local(&c, 0);
    mt_config_set_local(&c, 2);
    return c;
}

mt_config mt_tiny_config_sinks(void) {
    mt_config c = mt_tiny_config_windowed(3);
    c.arch = MT_ARCH_LLAMA; /* whose attention_bias is on o_proj too */
    c.attention_bias = 1;
    c.attention_sinks = 1;
    return c;
}

mt_config mt_tiny_config_gemma3(void) {
    mt_config c = base();
    c.arch = MT_ARCH_GEMMA3;
    c.qk_norm = MT_QK_NORM_HEAD;
    c.head_dim = 16;
    c.tie_embeddings = 1;
    c.rope_theta = 1000000.0f;
    c.rope_scaling_factor = 8.0f;
    c.rope_scaling_linear = 1;
    c.rope_local_theta = 10000.0f;
    c.query_pre_attn_scalar = 12.0f;
    c.sliding_window = 3;
    mt_config_set_local(&c, 0);
    mt_config_set_local(&c, 1);
    return c;
}

mt_config mt_tiny_config_gemma2(void) {
    mt_config c = base();
    c.arch = MT_ARCH_GEMMA2;
    c.tie_embeddings = 1;
    c.query_pre_attn_scalar = 12.0f;
    c.attn_logit_softcap = 2.0f;
    c.final_logit_softcap = 3.0f;
    c.sliding_window = 3;
    mt_config_set_local(&c, 0);
    mt_config_set_local(&c, 2);
    return c;
}

mt_config mt_tiny_config_qwen3_5_linear(void) {
    mt_config c = base();
    c.arch = MT_ARCH_QWEN3_5;
    c.qk_norm = MT_QK_NORM_HEAD;
    c.head_dim = 16;
    c.partial_rotary_factor = 0.25f;
    c.attn_output_gate = 1;
    c.linear_k_heads = 2, c.linear_v_heads = 4, c.linear_k_dim = 8, c.linear_v_dim = 12;
    for (int l = 0; l < 64; l++) mt_config_set_linear(&c, l); /* deeper copies (7 blocks) too */
    return c;
}

mt_config mt_tiny_config_qwen3_5(void) {
    mt_config c = mt_tiny_config_qwen3_5_linear();
    memset(c.linear_layers, 0, sizeof c.linear_layers);
    for (int l = 0; l < 64; l++)
        if ((l + 1) % 3) mt_config_set_linear(&c, l);
    return c;
}

mt_config mt_tiny_config_qwen3_5_moe(void) {
    mt_config c = mt_tiny_config_qwen3_5();
    c.arch = MT_ARCH_QWEN3_5_MOE;
    c.num_experts = 6, c.experts_per_token = 2, c.moe_intermediate_size = 16, c.norm_topk_prob = 1;
    c.shared_expert_intermediate_size = c.intermediate_size = 24;
    c.decoder_sparse_step = 1;
    return c;
}

mt_config mt_tiny_config_qwen3_next(void) {
    mt_config c = mt_tiny_config_qwen3_5_moe();
    c.arch = MT_ARCH_QWEN3_NEXT;
    c.intermediate_size = 40;
    c.decoder_sparse_step = 2;
    return c;
}

mt_config mt_tiny_config_moe(mt_arch arch, int aux) {
    mt_config c = base();
    c.arch = arch;
    c.decoder_sparse_step = 1;
    c.output_router_logits = aux;
    c.router_aux_loss_coef = 0.1f;
    switch (arch) {
    case MT_ARCH_QWEN3_MOE:
        c.qk_norm = MT_QK_NORM_HEAD;
        c.head_dim = 16;
        c.num_experts = 8, c.experts_per_token = 3, c.moe_intermediate_size = 12, c.norm_topk_prob = 1;
        c.mlp_only_layers[0] = 1u << 1; /* block 1 dense between sparse 0 and 2 */
        break;
    case MT_ARCH_QWEN2_MOE:
        c.attention_bias = 1;
        c.num_experts = 6, c.experts_per_token = 2, c.moe_intermediate_size = 10;
        c.shared_expert_intermediate_size = 24;
        c.decoder_sparse_step = 2; /* block 1 sparse, 0 and 2 dense */
        break;
    case MT_ARCH_MIXTRAL:
        c.num_layers = 2;
        c.num_experts = 4, c.experts_per_token = 2, c.moe_intermediate_size = 20, c.norm_topk_prob = 1;
        c.intermediate_size = 20;
        break;
    case MT_ARCH_GPT_OSS:
        c.head_dim = 16; /* q 64 wide over a hidden 32, as gpt-oss's 4096 over 2880 */
        c.attention_bias = 1;
        c.attention_sinks = 1;
        c.num_experts = 6, c.experts_per_token = 3, c.moe_intermediate_size = 12, c.norm_topk_prob = 1;
        c.intermediate_size = 12;
        c.sliding_window = 3;
        mt_config_set_local(&c, 0);
        mt_config_set_local(&c, 2);
        c.rope_scaling_factor = 4.0f, c.rope_scaling_yarn = 1, c.rope_original_max_position = 32;
        c.rope_beta_fast = 32.0f, c.rope_beta_slow = 1.0f;
        c.swiglu_limit = 0.1f, c.swiglu_alpha = 1.702f; /* a limit these activations cross */
        break;
    default: /* OLMoE */
        c.num_layers = 2;
        c.qk_norm = MT_QK_NORM_FULL;
        c.num_experts = 8, c.experts_per_token = 3, c.moe_intermediate_size = 12;
        c.intermediate_size = 12;
        break;
    }
    return c;
}

mt_config mt_tiny_wider(mt_config c) {
    c.hidden_size = 128;
    c.num_heads = 4;
    c.head_dim = 32;
    c.intermediate_size = 344;
    c.vocab_size = 300;
    return c;
}

void mt_tiny_model_open(mt_tiny_model *t, const mt_config *cfg, const mt_engine_options *opt, uint64_t seed) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 2), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(t, be, cfg, opt, seed);
}

void mt_tiny_model_open_on(mt_tiny_model *t, mt_backend *be, const mt_config *cfg, const mt_engine_options *opt,
                           uint64_t seed) {
    t->cfg = *cfg;
    t->be = be;
    cr_assert_eq(mt_layout_init(&t->layout, &t->cfg), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_store_create(&t->store, &t->layout, t->be), MT_OK, "%s", mt_error());
    mt_store_init_random(&t->store, seed);
    /* Norm weights and biases away from their 1 and 0 so that their gradients are tested too. */
    mt_rng rng = {seed ^ 0x5eed};
    for (int i = 0; i < t->layout.num_tensors; i++) {
        const mt_tensor *ten = &t->layout.tensors[i];
        if (ten->decay) continue;
        int64_t at = t->layout.units[ten->unit].offset + ten->offset, n = (int64_t)ten->rows * ten->cols;
        float *p = malloc((size_t)n * sizeof *p);
        cr_assert_not_null(p);
        mt_store_read_masters(&t->store, at, (size_t)n, p);
        for (int64_t j = 0; j < n; j++) p[j] += (float)(0.1 * mt_rng_normal(&rng));
        mt_store_write_masters(&t->store, at, (size_t)n, p);
        free(p);
    }
    cr_assert_eq(mt_engine_create(&t->engine, t->be, &t->store, opt, 0), MT_OK, "%s", mt_error());
}

void mt_tiny_model_close(mt_tiny_model *t) {
    mt_engine_destroy(t->engine);
    mt_store_free(&t->store);
    mt_backend_destroy(t->be);
    mt_layout_free(&t->layout);
}

mt_tiny_grads mt_tiny_grads_of(const mt_config *cfg, const mt_engine_options *o, uint64_t seed, uint64_t windows,
                               const int32_t *positions) {
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, o, seed);
    int count = o->micro_batches * o->batch, seq = o->seq;
    int32_t *tokens = malloc((size_t)count * (seq + 1) * sizeof *tokens);
    int32_t *inputs = malloc((size_t)count * seq * sizeof *inputs), *targets = malloc((size_t)count * seq * sizeof *targets);
    cr_assert(tokens && inputs && targets);
    mt_tiny_windows(windows, count, seq, cfg->vocab_size, tokens, inputs, targets);
    for (int i = 0; positions && i < count * seq; i++)
        if (i % seq == seq - 1 || positions[i + 1] == 0) targets[i] = -1;
    mt_tiny_grads r = {.n = (size_t)t.layout.total_numel};
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, positions, &r.loss), MT_OK, "%s", mt_error());
    r.grads = malloc(r.n * sizeof *r.grads);
    cr_assert(r.grads);
    memcpy(r.grads, mt_engine_host_grads(t.engine), r.n * sizeof *r.grads);
    mt_tiny_model_close(&t);
    free(tokens), free(inputs), free(targets);
    return r;
}

double mt_tiny_grads_error(const mt_tiny_grads *got, const mt_tiny_grads *want) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want->n; i++) {
        double d = (double)got->grads[i] - want->grads[i];
        diff += d * d;
        norm += (double)want->grads[i] * want->grads[i];
    }
    return sqrt(diff / norm);
}

float *mt_tiny_masters_after_steps(const mt_config *cfg, const mt_engine_options *o, uint64_t seed, uint64_t windows,
                                   double *first_loss) {
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, o, seed);
    size_t rows = (size_t)o->micro_batches * o->batch;
    int32_t *tokens = malloc(rows * (o->seq + 1) * sizeof *tokens), *inputs = malloc(rows * o->seq * sizeof *inputs);
    int32_t *targets = malloc(rows * o->seq * sizeof *targets);
    cr_assert(tokens && inputs && targets);
    for (int s = 0; s < 3; s++) {
        mt_tiny_windows(windows + s, (int)rows, o->seq, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
        if (s == 0) *first_loss = r.loss;
    }
    mt_engine_finish(t.engine);
    size_t n = (size_t)t.layout.total_numel;
    float *master = malloc(n * sizeof *master);
    cr_assert(master);
    mt_store_read_masters(&t.store, 0, n, master);
    mt_tiny_model_close(&t);
    free(tokens), free(inputs), free(targets);
    return master;
}

void mt_tiny_expect_same_bits(const mt_tiny_grads *got, const mt_tiny_grads *want, const char *what) {
    cr_expect(got->loss == want->loss, "%s: loss %.17g, against %.17g", what, got->loss, want->loss);
    cr_expect(!memcmp(got->grads, want->grads, want->n * sizeof *want->grads), "%s: the gradients are not bitwise",
              what);
}

void mt_tiny_expect_close(const mt_tiny_grads *got, const mt_tiny_grads *want, const char *what) {
    cr_expect(fabs(got->loss - want->loss) <= 1e-6 * fabs(want->loss), "%s: loss %.9g, against %.9g", what, got->loss,
              want->loss);
    double err = mt_tiny_grads_error(got, want);
    cr_expect(err <= 1e-5, "%s: the gradients' relative error is %g", what, err);
}

void mt_tiny_windows(uint64_t seed, int count, int seq, int vocab, int32_t *tokens, int32_t *inputs,
                     int32_t *targets) {
    mt_rng rng = {seed};
    for (int w = 0; w < count; w++) {
        int32_t *win = tokens + (size_t)w * (seq + 1);
        for (int t = 0; t <= seq; t++) win[t] = (int32_t)(mt_rng_next(&rng) % (uint64_t)vocab);
        for (int t = 0; t < seq; t++) {
            inputs[(size_t)w * seq + t] = win[t];
            targets[(size_t)w * seq + t] = win[t + 1];
        }
    }
}

double mt_tiny_packed_example_grads(mt_backend *be, const mt_config *c, int seq, const int *starts, int count, int at,
                                    int len, int attn_tile, float *grads) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = seq, o.batch = 1, o.micro_batches = 1, o.packed = 1, o.attn_tile = attn_tile;
    mt_tiny_model t;
    if (be) mt_tiny_model_open_on(&t, be, c, &o, 7);
    else mt_tiny_model_open(&t, c, &o, 7);
    int32_t *inputs = calloc((size_t)seq, sizeof *inputs), *targets = calloc((size_t)seq, sizeof *targets);
    int32_t *positions = calloc((size_t)seq, sizeof *positions);
    cr_assert(inputs && targets && positions);
    for (int i = 0, s = 0; i < seq; i++) {
        if (s + 1 < count && i == starts[s + 1]) s++;
        positions[i] = i - starts[s];
        inputs[i] = (int32_t)((i * 37 + 11) % c->vocab_size); /* the neighbours' tokens */
        targets[i] = -1;
    }
    for (int i = 0; i < len; i++) inputs[at + i] = (int32_t)((i * 13 + 5) % c->vocab_size);
    for (int i = 0; i + 1 < len; i++) targets[at + i] = inputs[at + i + 1];
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, positions, &loss), MT_OK, "%s", mt_error());
    memcpy(grads, mt_engine_host_grads(t.engine), (size_t)t.layout.total_numel * sizeof *grads);
    mt_tiny_model_close(&t);
    free(inputs);
    free(targets);
    free(positions);
    return loss;
}
