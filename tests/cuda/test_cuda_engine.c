/* The whole engine on the cuda backend against the cpu backend on the same weights: loss and
 * every parameter's gradient, and a few training steps. With MT_TRANSFORMERS_DIR set, it also
 * leaves each model, its tokens, loss and gradients there for tests/device/check_transformers.py,
 * which compares them with transformers' LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM.
 *
 * The cuda backend keeps weights and activations in bf16 (8 mantissa bits, relative rounding
 * up to 2^-9 per value) with fp32 accumulation; the cpu backend runs fp32 on the same
 * bf16-rounded weights. Tolerances: the loss within 1% relative; each tensor's gradient within
 * 5% relative (||cuda - cpu|| / ||cpu||): bf16 rounding of activations at every layer compounds
 * through the backward to a few percent, while a wrong term in any backward is O(1). A mixture of
 * experts' gradients move further under bf16-sized noise, for a token whose top-k choice flips
 * moves its expert rows whole: measured on the cpu, masters perturbed by up to 2^-8 relative moved
 * gpt-oss's worst tensor 7.6%, Qwen3-Next's router 22%, Qwen3-MoE's 6.1% (a dense hybrid's 1.5%).
 * There the bound is twice that floor, measured in the test on the same tokens, when above 5%. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../tiny_model.h"
#include "engine/engine_internal.h"
#include "io/hf_model.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "util/bf16.h"
#include "util/rng.h"
#include "util/split_f32.h"

enum { SEQ = 32, SEQUENCES = 4 };

static mt_engine_options options(void) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    o.micro_batches = SEQUENCES / 2;
    o.lm_chunk = 24;
    return o;
}

/* The masters as fp32 (malloc'd). */
static float *masters_of(const mt_tiny_model *t) {
    size_t n = (size_t)t->layout.total_numel;
    float *x = malloc(n * sizeof *x);
    cr_assert_not_null(x);
    mt_store_read_masters(&t->store, 0, n, x);
    return x;
}

/* Both models hold the same bf16-representable masters. */
static void round_masters(mt_tiny_model *t) {
    size_t n = (size_t)t->layout.total_numel;
    float *x = masters_of(t);
    for (size_t i = 0; i < n; i++) x[i] = mt_bf16_to_f32(mt_f32_to_bf16(x[i]));
    mt_store_write_masters(&t->store, 0, n, x);
    free(x);
}

/* Each master times 1 + u, u uniform in [-2^-8, 2^-8): noise of bf16's size, for the floor. */
static void perturb_masters(mt_tiny_model *t) {
    size_t n = (size_t)t->layout.total_numel;
    float *x = masters_of(t);
    mt_rng rng = {99};
    for (size_t i = 0; i < n; i++) x[i] *= 1.0f + (float)((2.0 * mt_rng_uniform(&rng) - 1.0) * 0x1.0p-8);
    mt_store_write_masters(&t->store, 0, n, x);
    free(x);
}

static double tensor_rel_err(const mt_layout *lay, int i, const float *got, const float *want) {
    const mt_tensor *t = &lay->tensors[i];
    int64_t at = lay->units[t->unit].offset + t->offset, n = (int64_t)t->rows * t->cols;
    double num = 0, den = 0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)got[at + j] - want[at + j];
        num += d * d;
        den += (double)want[at + j] * want[at + j];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The largest tensor_rel_err over every tensor, and that tensor's name. */
/* The k projection's bias is left out: its exact gradient is zero (it adds q_i . b_k to every score
 * of row i, which the softmax ignores), so both sides hold rounding noise, whose relative
 * difference says nothing. */
static double worst_rel_err(const mt_layout *lay, const float *got, const float *want, const char **name) {
    double worst = 0;
    *name = "-";
    for (int i = 0; i < lay->num_tensors; i++) {
        if (lay->tensors[i].kind == MT_T_BK) continue;
        double err = tensor_rel_err(lay, i, got, want);
        if (err > worst) worst = err, *name = lay->tensors[i].name;
    }
    return worst;
}

static void write_file(const char *dir, const char *name, const void *data, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, bytes, f), bytes);
    fclose(f);
}

/* Leaves model/, grads/, tokens.bin ([SEQUENCES][SEQ + 1] int32) and case.json (loss, shape)
 * under dir/name. */
static void dump_for_transformers(const char *name, mt_tiny_model *t, const int32_t *tokens, double loss) {
    const char *root = getenv("MT_TRANSFORMERS_DIR");
    if (!root) return;
    char dir[4096], sub[4200];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(root, 0777);
    cr_assert(mkdir(dir, 0777) == 0, "cannot create %s", dir);
    mt_hf_export_options fp32 = {.dtype = MT_ST_F32};
    snprintf(sub, sizeof sub, "%s/model", dir);
    float *masters = masters_of(t);
    cr_assert_eq(mt_hf_export(&t->layout, masters, sub, &fp32), MT_OK, "%s", mt_error());
    free(masters);
    snprintf(sub, sizeof sub, "%s/grads", dir);
    cr_assert_eq(mt_hf_export(&t->layout, mt_engine_host_grads(t->engine), sub, &fp32), MT_OK, "%s", mt_error());
    write_file(dir, "tokens.bin", tokens, sizeof(int32_t) * SEQUENCES * (SEQ + 1));
    char text[128];
    int len = snprintf(text, sizeof text, "{\"loss\": %.9g, \"sequences\": %d, \"seq\": %d}\n", loss,
                       SEQUENCES, SEQ);
    write_file(dir, "case.json", text, (size_t)len);
}

/* positions: NULL, or packed examples' (engine.h): both engines attend within segments; the
 * transformers dump is left out (it has no segments), and where the config has sinks (Llama's block
 * with them has no transformers class; gpt-oss is checked against its own by
 * tests/device/check_gptoss.py, its load-balancing loss included). gpu_tile: the cuda engine's
 * attention tile (0: the default, untiled at this length); the cpu engine runs untiled. */
static void compare_backends_at(const char *name, const mt_config *cfg, const int32_t *positions, int gpu_tile) {
    mt_engine_options o = options();
    o.packed = positions != NULL;
    mt_engine_options og = o;
    if (gpu_tile) og.attn_tile = gpu_tile;
    mt_tiny_model cpu, gpu;
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open(&cpu, cfg, &o, 5);
    mt_tiny_model_open_on(&gpu, be, cfg, &og, 5);
    round_masters(&cpu);
    round_masters(&gpu);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(6, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
    for (int i = 0; positions && i < SEQUENCES * SEQ; i++) /* a segment's last token predicts nothing */
        if (i % SEQ == SEQ - 1 || positions[i + 1] == 0) targets[i] = -1;
    double loss_cpu, loss_gpu;
    cr_assert_eq(mt_engine_grads(cpu.engine, inputs, targets, positions, &loss_cpu), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_grads(gpu.engine, inputs, targets, positions, &loss_gpu), MT_OK, "%s", mt_error());
    cr_expect_lt(fabs(loss_gpu - loss_cpu), 1e-2 * loss_cpu, "%s: loss cuda %.6f, cpu %.6f", name, loss_gpu, loss_cpu);
    const char *worst_name;
    double worst = worst_rel_err(&cpu.layout, mt_engine_host_grads(gpu.engine),
                                 mt_engine_host_grads(cpu.engine), &worst_name);
    double bound = 5e-2;
    if (cfg->num_experts > 0) { /* the routing's floor: the cpu again on perturbed masters */
        mt_tiny_model noisy;
        mt_tiny_model_open(&noisy, cfg, &o, 5);
        round_masters(&noisy);
        perturb_masters(&noisy);
        double loss_noisy;
        const char *floor_name;
        cr_assert_eq(mt_engine_grads(noisy.engine, inputs, targets, positions, &loss_noisy), MT_OK, "%s", mt_error());
        double floor = worst_rel_err(&cpu.layout, mt_engine_host_grads(noisy.engine),
                                     mt_engine_host_grads(cpu.engine), &floor_name);
        cr_log_info("%s: the routing's floor (cpu, masters perturbed by 2^-8): %s at %.3g relative", name,
                    floor_name, floor);
        if (2 * floor > bound) bound = 2 * floor;
        mt_tiny_model_close(&noisy);
    }
    cr_log_info("%s: loss cuda %.6f cpu %.6f; worst gradient %s at %.3g relative (bound %.3g)", name, loss_gpu,
                loss_cpu, worst_name, worst, bound);
    cr_expect_lt(worst, bound, "%s: gradient of %s off by %.3g relative", name, worst_name, worst);
    if (!positions && !cfg->attention_sinks) dump_for_transformers(name, &gpu, tokens, loss_gpu);
    mt_tiny_model_close(&gpu);
    mt_tiny_model_close(&cpu);
}

static void compare_backends(const char *name, const mt_config *cfg) { compare_backends_at(name, cfg, NULL, 0); }

static mt_config wider_qwen3(int tied);

/* Packed examples, segments of 10 and 22; 1 and 31; 32; 5, 5, 5 and 17 tokens. */
static void packed_positions(int32_t *positions) {
    static const int lengths[] = {10, 22, 1, 31, 32, 5, 5, 5, 17};
    int row = 0;
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++)
        for (int i = 0; i < lengths[k]; i++) positions[row++] = i;
    cr_assert_eq(row, SEQUENCES * SEQ);
}

Test(cuda, engine_matches_cpu_packed_llama_gqa) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    int32_t positions[SEQUENCES * SEQ];
    packed_positions(positions);
    compare_backends_at("packed_llama_gqa", &c, positions, 0);
}

Test(cuda, engine_matches_cpu_packed_qwen3) {
    mt_config c = wider_qwen3(1);
    int32_t positions[SEQUENCES * SEQ];
    packed_positions(positions);
    compare_backends_at("packed_qwen3", &c, positions, 0);
}

Test(cuda, engine_matches_cpu_llama_gqa_untied) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    compare_backends("llama_gqa_untied", &c);
}

Test(cuda, engine_matches_cpu_qwen2_tied_bias) {
    mt_config c = mt_tiny_wider(mt_tiny_config_tied_bias());
    compare_backends("qwen2_tied_bias", &c);
}

Test(cuda, engine_matches_cpu_llama3_rope_mha) {
    mt_config c = mt_tiny_wider(mt_tiny_config_mha());
    c.num_kv_heads = c.num_heads;
    compare_backends("llama3_rope_mha", &c);
}

/* Llama's attention_bias: q/k/v and o_proj biases (transformers' LlamaAttention's). */
Test(cuda, engine_matches_cpu_llama_attention_bias) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    c.attention_bias = 1;
    compare_backends("llama_attention_bias", &c);
}

/* gpt-oss's attention: q/k/v and o_proj biases, sinks (their fp32 copy and gradient), sliding
 * windows of 3 on blocks 0 and 2 (the kernels) and block 1 full; whole, and in windows of 12
 * queries (each window adding its share of the sinks' gradient). */
Test(cuda, engine_matches_cpu_sinks) {
    mt_config c = mt_tiny_wider(mt_tiny_config_sinks());
    compare_backends("sinks", &c);
}

Test(cuda, engine_matches_cpu_in_windows_sinks) {
    mt_config c = mt_tiny_wider(mt_tiny_config_sinks());
    compare_backends_at("sinks_windows", &c, NULL, 12);
}

/* Qwen3: per-head q/k norms (rows of head_dim on the GPU), head_dim 64 where hidden / heads is 32. */
static mt_config wider_qwen3(int tied) {
    mt_config c = mt_tiny_wider(mt_tiny_config_qwen3(tied));
    c.head_dim = 64;
    return c;
}

Test(cuda, engine_matches_cpu_qwen3_untied) {
    mt_config c = wider_qwen3(0);
    compare_backends("qwen3_untied", &c);
}

Test(cuda, engine_matches_cpu_qwen3_tied) {
    mt_config c = wider_qwen3(1);
    compare_backends("qwen3_tied", &c);
}

/* The cuda engine in attention windows of 12 queries (32 = 8 + 12 + 12: cuDNN's bottom-right
 * windows, the fp32 sums of dk and dv, RoPE from a window's position) against the cpu engine
 * untiled. */
Test(cuda, engine_matches_cpu_in_windows_llama3_rope_gqa) {
    mt_config c = mt_tiny_wider(mt_tiny_config_mha());
    c.num_kv_heads = 2;
    compare_backends_at("llama3_rope_gqa_windows", &c, NULL, 12);
}

Test(cuda, engine_matches_cpu_in_windows_qwen3) {
    mt_config c = wider_qwen3(0);
    compare_backends_at("qwen3_windows", &c, NULL, 12);
}

/* gpt-oss (tiny_model.h): sinks and every attention bias, q 256 wide over a hidden 128, a window of
 * 3, YaRN, 6 experts top 3 with the router's and the experts' biases, the clamped SwiGLU with its
 * clamps binding, the load-balancing loss; whole and in attention windows of 12 queries. */
static mt_config wider_gpt_oss(void) {
    mt_config c = mt_tiny_wider(mt_tiny_config_moe(MT_ARCH_GPT_OSS, 1));
    c.head_dim = 64;
    c.moe_intermediate_size = c.intermediate_size;
    return c;
}

Test(cuda, engine_matches_cpu_gpt_oss) {
    mt_config c = wider_gpt_oss();
    compare_backends("gpt_oss", &c);
}

Test(cuda, engine_matches_cpu_in_windows_gpt_oss) {
    mt_config c = wider_gpt_oss();
    compare_backends_at("gpt_oss_windows", &c, NULL, 12);
}

/* Packed examples in windows of 12: the windows with segments run on the CUDA-core kernels. */
Test(cuda, engine_matches_cpu_in_windows_packed_llama_gqa) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    int32_t positions[SEQUENCES * SEQ];
    packed_positions(positions);
    compare_backends_at("packed_llama_gqa_windows", &c, positions, 12);
}

/* Eight AdamW steps on one batch: the two backends' losses stay within 2% of each other. */
Test(cuda, training_tracks_cpu_backend) {
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    mt_engine_options o = options();
    mt_tiny_model cpu, gpu;
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open(&cpu, &cfg, &o, 8);
    mt_tiny_model_open_on(&gpu, be, &cfg, &o, 8);
    round_masters(&cpu);
    round_masters(&gpu);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(9, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    for (int s = 0; s < 8; s++) {
        mt_step_result rc, rg;
        cr_assert_eq(mt_engine_step(cpu.engine, inputs, targets, NULL, 3e-3f, &rc), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_engine_step(gpu.engine, inputs, targets, NULL, 3e-3f, &rg), MT_OK, "%s", mt_error());
        cr_log_info("step %d: loss cuda %.5f cpu %.5f", s, rg.loss, rc.loss);
        cr_expect_lt(fabs(rg.loss - rc.loss), 2e-2 * rc.loss, "step %d: loss cuda %.5f, cpu %.5f", s, rg.loss, rc.loss);
    }
    mt_tiny_model_close(&gpu);
    mt_tiny_model_close(&cpu);
}

/* Units updated on the GPU (ends_on_device: the embedding and head; device_blocks: the first
 * blocks): after each step, the host's AdamW (optim/adamw.h) applied to a shadow copy of their
 * state with the gradients that step brought home (keep_grads) and the clip coefficient of its
 * norm, as the host optimizer applies it once the norm is known (backend.h: the plain update with
 * the clip coefficient); the device's masters, moments and
 * bf16 weights (the masters' high halves) must equal the shadow's bit for bit: the clip
 * coefficient, step count, tensor offsets, state offsets and decay flags of the device path, each
 * independently of the engine's other path. */
static void device_update_is_host_adamw(const mt_config *cfg, float clip, int ends, int blocks) {
    mt_engine_options o = options();
    o.max_grad_norm = clip;
    o.keep_grads = 1;
    o.ends_on_device = ends;
    o.device_blocks = blocks;
    mt_tiny_model t;
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(&t, be, cfg, &o, 12);
    const mt_layout *lay = &t.layout;
    size_t n = (size_t)lay->total_numel;
    float *master = masters_of(&t), *m = calloc(n, 4), *v = calloc(n, 4);
    int units[64], count = 0;
    for (int u = 0; u < lay->num_units && count < 64; u++) {
        int end = u == 0 || u == lay->num_units - 1;
        if (end ? ends : u - 1 < blocks) units[count++] = u;
    }
    cr_assert_eq(count, 2 * ends + blocks);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 1; s <= 4; s++) {
        mt_tiny_windows(70 + s, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
        mt_engine_finish(t.engine); /* the step's gradients are home once its update is */
        const float *grads = mt_engine_host_grads(t.engine);
        mt_adamw_params p = {.lr = 3e-3f, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps,
                             .weight_decay = o.weight_decay, .step = s,
                             .grad_scale = clip > 0 ? mt_clip_scale(r.grad_norm, clip) : 1.0f};
        cr_log_info("clip %g, ends %d, blocks %d, step %d: gradient norm %.6g, scale %.9g", (double)clip, ends, blocks,
                    s, r.grad_norm, (double)p.grad_scale);
        for (int i = 0; i < count; i++) {
            const mt_unit *u = &lay->units[units[i]];
            for (int k = 0; k < u->num_tensors; k++) {
                const mt_tensor *tensor = &lay->tensors[u->first_tensor + k];
                size_t at = (size_t)(u->offset + tensor->offset);
                size_t numel = (size_t)tensor->rows * tensor->cols;
                mt_master w = {.f32 = master + at};
                mt_adamw_update(MT_ADAMW_FULL, &p, tensor->decay, w, m + at, v + at, grads + at, numel);
            }
        }
    }
    const float *moments[2] = {t.store.moments.m, t.store.moments.v}, *shadow[2] = {m, v};
    float *stored = masters_of(&t);
    for (int i = 0; i < count; i++) {
        const mt_unit *u = &lay->units[units[i]];
        const uint16_t *weights = mt_store_unit_weights(&t.store, units[i]);
        for (int64_t j = u->offset; j < u->offset + u->numel; j++) {
            cr_assert(!memcmp(&stored[j], &master[j], 4), "clip %g: unit %d master %lld: device %.9g, host %.9g",
                      (double)clip, units[i], (long long)j, (double)stored[j], (double)master[j]);
            for (int k = 0; k < 2; k++)
                cr_assert(!memcmp(&moments[k][j], &shadow[k][j], 4), "clip %g: unit %d %s %lld: device %.9g, host %.9g",
                          (double)clip, units[i], k ? "v" : "m", (long long)j, (double)moments[k][j],
                          (double)shadow[k][j]);
            cr_assert_eq(weights[j - u->offset], mt_split_hi_bits(mt_f32_bits(master[j])),
                         "clip %g: unit %d bf16 weight %lld", (double)clip, units[i], (long long)j);
        }
    }
    free(master), free(m), free(v), free(stored);
    mt_tiny_model_close(&t);
}

Test(cuda, ends_update_is_host_adamw_clipped_untied) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    device_update_is_host_adamw(&c, 0.5f, 1, 0);
}

Test(cuda, ends_update_is_host_adamw_overlapped_tied) {
    mt_config c = mt_tiny_wider(mt_tiny_config_tied_bias());
    device_update_is_host_adamw(&c, 0.0f, 1, 0);
}

/* Several blocks' state on the GPU, with the ends and without, clipped and not; 5 blocks, so that
 * some still stream through the weight slots. */
Test(cuda, device_blocks_update_is_host_adamw_clipped) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    c.num_layers = 5;
    device_update_is_host_adamw(&c, 0.5f, 0, 3);
}

Test(cuda, device_blocks_and_ends_update_is_host_adamw_overlapped_tied) {
    mt_config c = mt_tiny_wider(mt_tiny_config_tied_bias());
    c.num_layers = 5;
    device_update_is_host_adamw(&c, 0.0f, 1, 2);
}

Test(cuda, every_block_on_the_device_is_host_adamw_clipped) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    device_update_is_host_adamw(&c, 1.0f, 1, c.num_layers);
}

/* Blocks kept on the GPU against the same run with every unit on the host, sequences of `seq`
 * tokens: the same losses over four steps up to the GPU's run-to-run atomics (the update math is
 * the same; the bf16 weights the next step reads come from the same masters). Returns how many of
 * the resident blocks' gradients lay in the checkpoints' memory. */
static int device_blocks_against_the_host(int seq) {
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    cfg.num_layers = 5;
    if (cfg.max_position < seq) cfg.max_position = seq;
    mt_engine_options on_host = options(), on_device = options();
    on_host.seq = on_device.seq = seq;
    on_device.device_blocks = 3;
    on_device.ends_on_device = 1;
    mt_tiny_model dev, host;
    mt_backend *be_dev, *be_host;
    cr_assert_eq(mt_backend_cuda_create(&be_dev, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_backend_cuda_create(&be_host, 0), MT_OK, "%s", mt_error());
    int in_ckpts = mt_engine_size(be_dev, &cfg, &on_device).grads_in_checkpoints;
    mt_tiny_model_open_on(&dev, be_dev, &cfg, &on_device, 21);
    mt_tiny_model_open_on(&host, be_host, &cfg, &on_host, 21);
    size_t rows = (size_t)SEQUENCES * seq;
    int32_t *tokens = malloc((rows + SEQUENCES) * sizeof *tokens), *inputs = malloc(rows * sizeof *inputs),
            *targets = malloc(rows * sizeof *targets);
    for (int s = 0; s < 4; s++) {
        mt_tiny_windows(40 + s, SEQUENCES, seq, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result rd, rh;
        cr_assert_eq(mt_engine_step(dev.engine, inputs, targets, NULL, 3e-3f, &rd), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_engine_step(host.engine, inputs, targets, NULL, 3e-3f, &rh), MT_OK, "%s", mt_error());
        cr_log_info("seq %d, step %d: loss %.7f with blocks on the device (%d gradients in the checkpoints), "
                    "%.7f on the host", seq, s, rd.loss, in_ckpts, rh.loss);
        cr_expect_lt(fabs(rh.loss - rd.loss), 1e-4 * rh.loss, "seq %d, step %d: loss %.7f against %.7f", seq, s,
                     rd.loss, rh.loss);
    }
    free(tokens);
    free(inputs);
    free(targets);
    mt_tiny_model_close(&host);
    mt_tiny_model_close(&dev);
    return in_ckpts;
}

Test(cuda, device_blocks_train_like_the_host) { device_blocks_against_the_host(SEQ); }

/* Long enough sequences that the checkpoints' memory holds the first resident blocks' gradients
 * (engine_buffers.c): the backward writes each over checkpoints it has read for the last time. */
Test(cuda, device_blocks_train_like_the_host_with_gradients_in_the_checkpoints) {
    cr_expect_gt(device_blocks_against_the_host(1024), 0, "no gradient lay in the checkpoints' memory");
}

/* Activation checkpoints in pinned host memory (ckpt_on_host, what a tight --gpu-mem chooses)
 * against all on the device: the same loss and gradients up to the run-to-run order of the GPU's
 * atomics (1e-5 relative; a checkpoint read before it is back, or from the wrong stage, is off
 * by O(1)), then the same losses over three training steps. 7 blocks: more than the staging
 * ring's 3 buffers. */
Test(cuda, checkpoints_on_host_change_nothing) {
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    cfg.num_layers = 7;
    mt_engine_options o = options(), on_host = options();
    on_host.ckpt_on_host = cfg.num_layers;
    mt_tiny_model dev, host;
    mt_backend *be_dev, *be_host;
    cr_assert_eq(mt_backend_cuda_create(&be_dev, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_backend_cuda_create(&be_host, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(&dev, be_dev, &cfg, &o, 14);
    mt_tiny_model_open_on(&host, be_host, &cfg, &on_host, 14);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(15, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    double loss_dev, loss_host;
    cr_assert_eq(mt_engine_grads(dev.engine, inputs, targets, NULL, &loss_dev), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_grads(host.engine, inputs, targets, NULL, &loss_host), MT_OK, "%s", mt_error());
    cr_expect_lt(fabs(loss_host - loss_dev), 1e-6 * loss_dev, "loss %.9f with checkpoints on the host, %.9f without",
                 loss_host, loss_dev);
    const char *worst_name;
    double worst = worst_rel_err(&dev.layout, mt_engine_host_grads(host.engine),
                                 mt_engine_host_grads(dev.engine), &worst_name);
    cr_log_info("checkpoints on the host: loss %.9f against %.9f, worst gradient %s at %.3g", loss_host, loss_dev,
                worst_name, worst);
    cr_expect_lt(worst, 1e-5, "gradient of %s off by %.3g relative", worst_name, worst);
    for (int s = 0; s < 3; s++) {
        mt_tiny_windows(16 + s, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result rd, rh;
        cr_assert_eq(mt_engine_step(dev.engine, inputs, targets, NULL, 3e-3f, &rd), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_engine_step(host.engine, inputs, targets, NULL, 3e-3f, &rh), MT_OK, "%s", mt_error());
        cr_expect_lt(fabs(rh.loss - rd.loss), 1e-4 * rd.loss, "step %d: loss %.7f against %.7f", s, rh.loss, rd.loss);
    }
    mt_tiny_model_close(&host);
    mt_tiny_model_close(&dev);
}

/* Long-context settings (issue 13) against the defaults on the same GPU: a block's token-wise ops in
 * pieces of 8 tokens (4 a sequence), the head's and embedding's gradients 64 vocabulary rows at a
 * time (5 chunks of 300), every checkpoint on the host, a small LM-head chunk. bf16 activations:
 * a piece's GEMMs may take other cuBLASLt algorithms than the whole sequence's and the chunked
 * head computes softmax from the stored log-sum-exp, so values can round to a neighbouring bf16;
 * the loss within 1e-3 and each gradient within 1e-2 relative (a lost or misplaced piece or chunk
 * is O(1)), then three training steps without clipping (the overlapped optimizer, the early copy of
 * the embedding's zeros) within 1e-3. */
static void expect_chunking_changes_nothing(mt_config cfg, int piece) {
    cfg.num_layers = 4;
    mt_engine_options o = options(), chunked = options();
    o.max_grad_norm = chunked.max_grad_norm = 0;
    o.keep_grads = chunked.keep_grads = 1;
    chunked.chunk = piece;
    chunked.head_vocab_chunk = 64;
    chunked.ckpt_on_host = cfg.num_layers;
    chunked.lm_chunk = 7;
    mt_tiny_model whole, pieces;
    mt_backend *be_whole, *be_pieces;
    cr_assert_eq(mt_backend_cuda_create(&be_whole, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_backend_cuda_create(&be_pieces, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(&whole, be_whole, &cfg, &o, 21);
    mt_tiny_model_open_on(&pieces, be_pieces, &cfg, &chunked, 21);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(22, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    double loss_whole, loss_pieces;
    cr_assert_eq(mt_engine_grads(whole.engine, inputs, targets, NULL, &loss_whole), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_grads(pieces.engine, inputs, targets, NULL, &loss_pieces), MT_OK, "%s", mt_error());
    cr_expect_lt(fabs(loss_pieces - loss_whole), 1e-3 * loss_whole, "loss %.7f chunked, %.7f whole", loss_pieces,
                 loss_whole);
    const char *worst_name;
    double worst = worst_rel_err(&whole.layout, mt_engine_host_grads(pieces.engine),
                                 mt_engine_host_grads(whole.engine), &worst_name);
    cr_log_info("chunked: loss %.7f against %.7f, worst gradient %s at %.3g", loss_pieces, loss_whole, worst_name,
                worst);
    cr_expect_lt(worst, 1e-2, "gradient of %s off by %.3g relative", worst_name, worst);
    for (int s = 0; s < 3; s++) {
        mt_tiny_windows(23 + s, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result rw, rp;
        cr_assert_eq(mt_engine_step(whole.engine, inputs, targets, NULL, 3e-3f, &rw), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_engine_step(pieces.engine, inputs, targets, NULL, 3e-3f, &rp), MT_OK, "%s", mt_error());
        cr_expect_lt(fabs(rp.loss - rw.loss), 1e-3 * rw.loss, "step %d: loss %.7f chunked, %.7f whole", s, rp.loss,
                     rw.loss);
    }
    mt_tiny_model_close(&pieces);
    mt_tiny_model_close(&whole);
}

Test(cuda, chunking_changes_nothing) { expect_chunking_changes_nothing(mt_tiny_wider(mt_tiny_config_gqa()), 8); }

/* Tied: the one matrix's gradient chunks made in the embedding's backward, the head's part first. */
Test(cuda, chunking_changes_nothing_tied) {
    expect_chunking_changes_nothing(mt_tiny_wider(mt_tiny_config_tied_bias()), 8);
}

/* Without clipping, the ends' gradients in vocabulary chunks through the two host chunk buffers
 * (the issuing thread waiting for the optimizer between the chunks' jobs, each chunk's copy home
 * issued from inside its job) against the same chunks kept whole on the host (keep_grads), on the
 * same GPU: the same arithmetic, up to the run-to-run order of the embedding gradient's atomics, so
 * the losses of four steps within 1e-5 relative and the masters within 1e-4 (a chunk updated from
 * the wrong buffer, or before it landed, is off by O(1)). 300 rows in chunks of 64: 5 a step each
 * end, past the two buffers. */
static void expect_chunk_buffers_train_like_whole_ends(mt_config cfg) {
    cfg.num_layers = 4;
    mt_engine_options whole = options(), buffered = options();
    whole.max_grad_norm = buffered.max_grad_norm = 0;
    whole.head_vocab_chunk = buffered.head_vocab_chunk = 64;
    whole.keep_grads = 1;
    cr_assert_eq(mt_engine_chunk_buffers_for(&cfg, &buffered), MT_ENGINE_CHUNK_BUFFERS);
    mt_tiny_model a, b;
    mt_backend *be_a, *be_b;
    cr_assert_eq(mt_backend_cuda_create(&be_a, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_backend_cuda_create(&be_b, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(&a, be_a, &cfg, &whole, 31);
    mt_tiny_model_open_on(&b, be_b, &cfg, &buffered, 31);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 0; s < 4; s++) {
        mt_tiny_windows(50 + s, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result ra, rb;
        cr_assert_eq(mt_engine_step(a.engine, inputs, targets, NULL, 3e-3f, &ra), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_engine_step(b.engine, inputs, targets, NULL, 3e-3f, &rb), MT_OK, "%s", mt_error());
        cr_expect_lt(fabs(rb.loss - ra.loss), 1e-5 * ra.loss, "step %d: loss %.7f through the chunk buffers, %.7f "
                     "whole", s, rb.loss, ra.loss);
    }
    mt_engine_finish(a.engine);
    mt_engine_finish(b.engine);
    float *want = masters_of(&a), *got = masters_of(&b);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < a.layout.total_numel; i++) {
        diff += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        norm += (double)want[i] * want[i];
    }
    cr_log_info("chunk buffers: the masters' relative difference %.3g", sqrt(diff / norm));
    cr_expect_lt(sqrt(diff / norm), 1e-4, "the masters' relative difference is %g", sqrt(diff / norm));
    free(want);
    free(got);
    mt_tiny_model_close(&b);
    mt_tiny_model_close(&a);
}

Test(cuda, chunk_buffers_train_like_whole_ends) {
    expect_chunk_buffers_train_like_whole_ends(mt_tiny_wider(mt_tiny_config_gqa()));
}

Test(cuda, chunk_buffers_train_like_whole_ends_tied) {
    expect_chunk_buffers_train_like_whole_ends(mt_tiny_wider(mt_tiny_config_tied_bias()));
}

/* The weights the GPU computes with are the store's masters' high halves, bit for bit: after an
 * evaluation (whose forward loads every streamed block), the last streamed blocks are still in
 * their weight slots; each must be its unit's high halves after the steps' updates. */
Test(cuda, the_gpu_reads_the_masters_high_halves) {
    mt_config c = mt_tiny_wider(mt_tiny_config_gqa());
    mt_engine_options o = options();
    mt_tiny_model t;
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(&t, be, &c, &o, 31);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 1; s <= 2; s++) {
        mt_tiny_windows(90 + s, SEQUENCES, SEQ, c.vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
    }
    double loss;
    cr_assert_eq(mt_engine_eval(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    mt_engine *e = t.engine;
    mt_stream *s = mt_stream_create(be);
    mt_event *done = mt_event_create(be);
    int checked = 0;
    for (int l = e->L - e->K; l < e->L; l++) {
        int u = mt_unit_block(l);
        size_t bytes = (size_t)t.layout.units[u].numel * 2;
        uint16_t *slot = malloc(bytes);
        mt_copy_async(be, slot, mt_engine_block_weights(e, l), bytes, s);
        mt_event_record(be, done, s);
        mt_event_sync(be, done);
        cr_assert(!memcmp(slot, mt_store_unit_weights(&t.store, u), bytes), "block %d: the slot is not the high halves", l);
        /* and those are the masters rounded as util/split_f32.h says */
        float *masters = masters_of(&t);
        for (int64_t j = 0; j < t.layout.units[u].numel; j++)
            cr_assert_eq(slot[j], mt_split_hi_bits(mt_f32_bits(masters[t.layout.units[u].offset + j])), "block %d, %lld", l,
                         (long long)j);
        free(masters);
        free(slot);
        checked++;
    }
    cr_assert_gt(checked, 0);
    mt_event_destroy(be, done);
    mt_stream_destroy(be, s);
    mt_tiny_model_close(&t);
}

/* Qwen3.5's hybrid (two Gated DeltaNet blocks to one gated attention block, RoPE over a quarter of
 * each head of 32; 4 value heads of 32 over 2 q/k heads): the cuda engine's chunked delta rule,
 * convolution, gated norm, output gate and partial RoPE against the cpu engine's, whole (and dumped
 * for check_transformers.py), packed (the state and convolution restarting on each example), and in
 * attention windows of 12 (the recurrence's backward after the last window); Qwen3-Next's fused
 * projections with experts, packed. */
static mt_config wider_hybrid(mt_config c) {
    c = mt_tiny_wider(c);
    c.linear_k_heads = 2, c.linear_v_heads = 4, c.linear_k_dim = c.linear_v_dim = 32;
    return c;
}

Test(cuda, engine_matches_cpu_qwen3_5_hybrid) {
    mt_config c = wider_hybrid(mt_tiny_config_qwen3_5());
    compare_backends("qwen3_5_hybrid", &c);
}

Test(cuda, engine_matches_cpu_packed_qwen3_5_hybrid) {
    mt_config c = wider_hybrid(mt_tiny_config_qwen3_5());
    int32_t positions[SEQUENCES * SEQ];
    packed_positions(positions);
    compare_backends_at("packed_qwen3_5_hybrid", &c, positions, 0);
}

Test(cuda, engine_matches_cpu_in_windows_qwen3_5_hybrid) {
    mt_config c = wider_hybrid(mt_tiny_config_qwen3_5());
    compare_backends_at("qwen3_5_hybrid_windows", &c, NULL, 12);
}

/* Packing without leakage on the cuda backend: test_packing_hybrid.c's case at a shape the GPU's
 * kernels take, the example 70 tokens (past a delta-rule chunk of 64) between 37 and 21 others, in
 * attention windows of 32 queries. Alone and packed differ only in how bf16 sums are blocked, less
 * than this file's cuda-against-cpu comparisons allow (5e-2, the worst tensor); a convolution or
 * recurrent state that crossed the example's start would move it by O(1). */
Test(cuda, packing_hybrid_example_alone_is_the_example_packed) {
    enum { BEFORE = 37, LEN = 70, AFTER = 21 };
    mt_config c = wider_hybrid(mt_tiny_config_qwen3_5());
    c.max_position = BEFORE + LEN + AFTER;
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK, "%s", mt_error());
    float *alone = calloc((size_t)lay.total_numel, sizeof *alone);
    float *packed = calloc((size_t)lay.total_numel, sizeof *packed);
    cr_assert(alone && packed);
    const int alone_starts[] = {0}, packed_starts[] = {0, BEFORE, BEFORE + LEN};
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    double want = mt_tiny_packed_example_grads(be, &c, LEN, alone_starts, 1, 0, LEN, 32, alone);
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    double got = mt_tiny_packed_example_grads(be, &c, BEFORE + LEN + AFTER, packed_starts, 3, BEFORE, LEN, 32, packed);
    const char *worst_name;
    double worst = worst_rel_err(&lay, packed, alone, &worst_name);
    cr_log_info("packed hybrid: loss %.6f packed, %.6f alone; worst gradient %s at %.3g relative", got, want,
                worst_name, worst);
    cr_expect_lt(fabs(got - want), 1e-2 * fabs(want), "loss %.6f packed, %.6f alone", got, want);
    cr_expect_lt(worst, 5e-2, "gradient of %s off by %.3g relative packed", worst_name, worst);
    free(alone);
    free(packed);
    mt_layout_free(&lay);
}

Test(cuda, engine_matches_cpu_packed_qwen3_next) {
    mt_config c = wider_hybrid(mt_tiny_config_qwen3_next());
    c.moe_intermediate_size = 64, c.shared_expert_intermediate_size = 64;
    int32_t positions[SEQUENCES * SEQ];
    packed_positions(positions);
    compare_backends_at("packed_qwen3_next", &c, positions, 0);
}

/* A mixture of experts' backward reloads only the experts some token chose (engine_schedule.c):
 * against every expert reloaded (all_experts) on the same GPU, the same loss and gradients up to the
 * run-to-run order of the GPU's atomics (an expert whose rows were left as another block's weights
 * and read would be off by O(1)), then three training steps; 8 tokens a step routed to 2 of 32
 * experts leave most of the experts home in the three reloaded blocks (5 through 2 slots). */
Test(cuda, moe_reloads_of_routed_experts_change_nothing) {
    mt_config cfg = mt_tiny_wider(mt_tiny_config_moe(MT_ARCH_MIXTRAL, 1));
    cfg.intermediate_size = cfg.moe_intermediate_size = 128; /* Mixtral's experts are intermediate_size wide */
    cfg.num_layers = 5;
    cfg.num_experts = 32;
    mt_engine_options o = options();
    o.batch = 1, o.micro_batches = 1, o.seq = 8;
    mt_engine_options every = o;
    every.all_experts = 1;
    mt_tiny_model routed, all;
    mt_backend *be_routed, *be_all;
    cr_assert_eq(mt_backend_cuda_create(&be_routed, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_backend_cuda_create(&be_all, 0), MT_OK, "%s", mt_error());
    mt_tiny_model_open_on(&routed, be_routed, &cfg, &o, 31);
    mt_tiny_model_open_on(&all, be_all, &cfg, &every, 31);
    int32_t tokens[8 + 1], inputs[8], targets[8];
    mt_tiny_windows(32, 1, 8, cfg.vocab_size, tokens, inputs, targets);
    double loss_routed, loss_all;
    cr_assert_eq(mt_engine_grads(routed.engine, inputs, targets, NULL, &loss_routed), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_grads(all.engine, inputs, targets, NULL, &loss_all), MT_OK, "%s", mt_error());
    cr_expect_lt(fabs(loss_routed - loss_all), 1e-6 * loss_all, "loss %.9f routed, %.9f every expert", loss_routed,
                 loss_all);
    const char *worst_name;
    double worst = worst_rel_err(&all.layout, mt_engine_host_grads(routed.engine), mt_engine_host_grads(all.engine),
                                 &worst_name);
    cr_log_info("routed reloads: loss %.9f against %.9f, worst gradient %s at %.3g", loss_routed, loss_all, worst_name,
                worst);
    cr_expect_lt(worst, 1e-5, "gradient of %s off by %.3g relative", worst_name, worst);
    for (int s = 0; s < 3; s++) {
        mt_tiny_windows(33 + s, 1, 8, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result rr, ra;
        cr_assert_eq(mt_engine_step(routed.engine, inputs, targets, NULL, 3e-3f, &rr), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_engine_step(all.engine, inputs, targets, NULL, 3e-3f, &ra), MT_OK, "%s", mt_error());
        cr_log_info("step %d: %.0f bytes in routed (%.0f%% of the experts home), %.0f every expert", s,
                    rr.weight_bytes_in, 100 * rr.experts_unrouted, ra.weight_bytes_in);
        cr_expect_lt(fabs(rr.loss - ra.loss), 1e-4 * ra.loss, "step %d: loss %.7f against %.7f", s, rr.loss, ra.loss);
        cr_expect(rr.experts_unrouted >= 0.5 && ra.experts_unrouted == 0, "step %d: %g of the experts home routed, %g "
                  "with every expert", s, rr.experts_unrouted, ra.experts_unrouted);
        cr_expect_lt(rr.weight_bytes_in, ra.weight_bytes_in, "step %d", s);
    }
    mt_tiny_model_close(&all);
    mt_tiny_model_close(&routed);
}
