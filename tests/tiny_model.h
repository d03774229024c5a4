/* Test helper: a tiny model on the cpu backend, its engine, and random token windows. */
#ifndef MT_TESTS_TINY_MODEL_H
#define MT_TESTS_TINY_MODEL_H

#include "engine/engine.h"

typedef struct {
    mt_config cfg;
    mt_layout layout;
    mt_backend *be;
    mt_store store;
    mt_engine *engine;
} mt_tiny_model;

/* Shapes the tests use: GQA untied, tied with q/k/v bias, plain multi-head attention, and Qwen3
 * (per-head q/k norms, head_dim 16 where hidden / heads is 8), tied or not. */
mt_config mt_tiny_config_gqa(void);
mt_config mt_tiny_config_tied_bias(void);
mt_config mt_tiny_config_mha(void);
mt_config mt_tiny_config_qwen3(int tied);
/* Mistral with a sliding window of `window` keys on blocks 0 and 2, block 1 full (sequences are
 * longer than the window). */
mt_config mt_tiny_config_windowed(int window);
/* gpt-oss's attention on Llama's block: q/k/v and o_proj biases, a sink logit a head, a window of 3
 * on blocks 0 and 2 (block 1 full). */
mt_config mt_tiny_config_sinks(void);
/* Gemma 3: a window of 3 on blocks 0 and 1 (sliding_window_pattern 3) with their own RoPE base,
 * linear scaling 8 on the global block 2, per-head q/k norms of head_dim 16, a query scalar of 12,
 * the sandwich norms, (1 + w), GeGLU, the scaled embedding, tied. Gemma 2: a window of 3 on blocks
 * 0 and 2, no q/k norms, scores soft-capped at 2 and logits at 3 (caps that bind at these
 * weights' scale). */
mt_config mt_tiny_config_gemma3(void);
mt_config mt_tiny_config_gemma2(void);
/* Qwen3.5 with Gated DeltaNet on every block: 2 q/k heads of 8, 4 value heads of 12 (each q/k head
 * read by two), (1 + w) norms, untied. The hybrid: Gated DeltaNet on two blocks of three, gated
 * attention with per-head q/k norms and RoPE over a quarter of each head of 16 on the third. */
mt_config mt_tiny_config_qwen3_5_linear(void);
mt_config mt_tiny_config_qwen3_5(void);
/* The hybrid with Qwen3.5-MoE's feed-forward on every block: 6 experts of 16, top 2 renormalised, a
 * shared expert of 24 behind its gate. */
mt_config mt_tiny_config_qwen3_5_moe(void);
/* Qwen3-Next: that hybrid with the linear layers' projections fused and grouped by q/k head, experts
 * on every second block (decoder_sparse_step 2), a dense MLP on the others. */
mt_config mt_tiny_config_qwen3_next(void);
/* Tiny mixtures of experts, one of each family (arch: MT_ARCH_QWEN3_MOE, MT_ARCH_QWEN2_MOE,
 * MT_ARCH_MIXTRAL, MT_ARCH_OLMOE, MT_ARCH_GPT_OSS), each with what makes its family: Qwen3-MoE
 * per-head q/k norms, 8 experts top 3 renormalised, a dense block among sparse ones
 * (mlp_only_layers); Qwen2-MoE q/k/v biases, 6 experts top 2 and a shared expert, every second
 * block sparse (decoder_sparse_step); Mixtral 4 experts top 2; OLMoE q/k norms over the
 * projections, 8 experts top 3 not renormalised; gpt-oss sinks and every attention bias, q wider
 * than the hidden size, a window of 3 on blocks 0 and 2, YaRN (factor 4 over 32 positions), 6
 * experts top 3 with the router's and the experts' biases, the clamped SwiGLU at a limit of 0.1
 * (which these activations cross, so that the clamps bind).
 * `aux`: output_router_logits on, with a coefficient large enough to matter (0.1). */
mt_config mt_tiny_config_moe(mt_arch arch, int aux);
/* A shape made wide enough for the GPU's kernels and libraries (hidden 128, 4 heads of 32, MLP
 * 344, vocabulary 300): the CUDA tests' models. */
mt_config mt_tiny_wider(mt_config c);

/* Builds everything with weights from `seed` on a cpu backend; asserts (Criterion) on failure. */
void mt_tiny_model_open(mt_tiny_model *t, const mt_config *cfg, const mt_engine_options *opt, uint64_t seed);
/* The same on a given backend, which the model then owns. */
void mt_tiny_model_open_on(mt_tiny_model *t, mt_backend *be, const mt_config *cfg, const mt_engine_options *opt,
                           uint64_t seed);
void mt_tiny_model_close(mt_tiny_model *t);

/* Random windows of seq + 1 ids below vocab: tokens[count][seq + 1], split into inputs and
 * targets [count][seq]. */
void mt_tiny_windows(uint64_t seed, int count, int seq, int vocab, int32_t *tokens, int32_t *inputs,
                     int32_t *targets);

/* The loss and gradients (grads[total_numel]) of one example of `len` tokens at row `at` of a packed
 * sequence of `seq` tokens whose segments start at starts[count], the other rows' tokens fixed and
 * their targets carrying no loss, on `be` (NULL: a cpu backend; the model owns it), weights of
 * seed 7, attention in tiles of `attn_tile` queries: packing_hybrid's case, the same alone. */
double mt_tiny_packed_example_grads(mt_backend *be, const mt_config *c, int seq, const int *starts, int count, int at,
                                    int len, int attn_tile, float *grads);

/* The loss and the host gradients (total_numel, malloc'd) of one mt_engine_grads on a cpu model of
 * weights from `seed`, over o->micro_batches x o->batch windows of o->seq tokens from
 * mt_tiny_windows(windows); positions: NULL, or packed examples' over those rows (a segment's last
 * token then predicts nothing). o must keep every gradient on the host (clipping, or keep_grads). */
typedef struct {
    double loss;
    float *grads;
    size_t n;
} mt_tiny_grads;
mt_tiny_grads mt_tiny_grads_of(const mt_config *cfg, const mt_engine_options *o, uint64_t seed, uint64_t windows,
                               const int32_t *positions);
/* ||got - want|| / ||want|| over every gradient. */
double mt_tiny_grads_error(const mt_tiny_grads *got, const mt_tiny_grads *want);
/* The fp32 masters after three steps of o (at lr 3e-3) over o->micro_batches x o->batch windows
 * of o->seq tokens from mt_tiny_windows(windows + step), from weights of `seed`, and the first
 * step's loss; the caller frees them. */
float *mt_tiny_masters_after_steps(const mt_config *cfg, const mt_engine_options *o, uint64_t seed, uint64_t windows,
                                   double *first_loss);
/* Expects got to be want bit for bit (loss and gradients); `what` names the run in a failure. */
void mt_tiny_expect_same_bits(const mt_tiny_grads *got, const mt_tiny_grads *want, const char *what);
/* Expects got within fp32 rounding of want: the loss within 1e-6 of it, relatively, and the
 * gradients within a relative error of 1e-5 (mt_tiny_grads_error). */
void mt_tiny_expect_close(const mt_tiny_grads *got, const mt_tiny_grads *want, const char *what);

#endif
