/* Hugging Face model directories into and out of the fp32 masters: Python-written fixtures,
 * export -> import round trips, and the model-level inputs that must be refused. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hf_test_files.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "tiny_model.h"

#define FIXTURES "tests/data/safetensors"

/* The values tests/reference/make_safetensors_fixture.py gives element i of tensor `name`. */
static float fixture_value(const char *name, int64_t i) {
    int k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) k += *p;
    k %= 31;
    return (float)((i * 7 + k * 3) % 29 - 14) / 16.0f;
}

static float *new_masters(const mt_layout *lay, float fill) {
    float *m = malloc((size_t)lay->total_numel * sizeof *m);
    cr_assert_not_null(m);
    for (int64_t i = 0; i < lay->total_numel; i++) m[i] = fill;
    return m;
}

static const float *tensor_data(const mt_layout *lay, const float *masters, const mt_tensor *t) {
    return masters + lay->units[t->unit].offset + t->offset;
}

typedef struct {
    int calls;
    int64_t last_done, total;
    int monotone;
} progress_log;

static void record_progress(int64_t done, int64_t total, void *user) {
    progress_log *p = user;
    if (done < p->last_done) p->monotone = 0;
    p->calls++;
    p->last_done = done;
    p->total = total;
}

/* Loads a fixture and checks every element against fixture_value and every padding slot is 0. */
static void check_fixture_model(const char *dir, mt_config *cfg) {
    mt_layout lay;
    cr_assert_eq(mt_hf_load_config(dir, cfg), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_layout_init(&lay, cfg), MT_OK, "%s", mt_error());
    float *masters = new_masters(&lay, NAN);
    progress_log progress = {.monotone = 1};
    cr_assert_eq(mt_hf_load_weights(dir, &lay, masters, record_progress, &progress), MT_OK, "%s", mt_error());
    for (int i = 0; i < lay.num_tensors; i++) {
        const mt_tensor *t = &lay.tensors[i];
        const float *p = tensor_data(&lay, masters, t);
        int64_t n = (int64_t)t->rows * t->cols;
        for (int64_t j = 0; j < n; j++)
            cr_assert_eq(p[j], fixture_value(t->name, j), "%s[%lld] = %g", t->name, (long long)j, (double)p[j]);
        for (int64_t j = n; j % MT_TENSOR_ALIGN; j++) cr_assert_eq(p[j], 0.0f, "%s: padding not zeroed", t->name);
    }
    cr_assert_eq(progress.calls, lay.num_tensors);
    cr_assert(progress.monotone && progress.last_done == progress.total && progress.total > 0);
    free(masters);
    mt_layout_free(&lay);
}

Test(hfmodel, loads_sharded_python_llama) {
    mt_config cfg;
    check_fixture_model(FIXTURES "/tiny_llama", &cfg);
    cr_assert(cfg.arch == MT_ARCH_LLAMA && cfg.num_kv_heads == 1 && !cfg.tie_embeddings && !cfg.attention_bias);
    cr_assert(cfg.bos_token_id == 1 && cfg.eos_token_id == 2);
}

Test(hfmodel, loads_tied_qwen2_that_carries_lm_head) {
    mt_config cfg;
    check_fixture_model(FIXTURES "/tiny_qwen2_tied", &cfg);
    cr_assert(cfg.arch == MT_ARCH_QWEN2 && cfg.tie_embeddings && cfg.attention_bias);
}

Test(hfmodel, loads_untied_qwen3_with_head_norms) {
    mt_config cfg;
    check_fixture_model(FIXTURES "/tiny_qwen3", &cfg);
    cr_assert(cfg.arch == MT_ARCH_QWEN3 && cfg.qk_norm && !cfg.attention_bias && !cfg.tie_embeddings);
    cr_assert(cfg.head_dim == 6 && cfg.hidden_size / cfg.num_heads == 4);
}

/* A Hugging Face Qwen3 in, exported (BF16, as it came) out: the same tensors, q_norm and k_norm
 * included, bit for bit, and the same model from its config.json. */
Test(hfmodel, qwen3_in_and_out_is_exact) {
    mt_config cfg, back;
    mt_layout lay;
    char dir[PATH_MAX], out[PATH_MAX];
    cr_assert_eq(mt_hf_load_config(FIXTURES "/tiny_qwen3", &cfg), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK, "%s", mt_error());
    float *masters = new_masters(&lay, NAN);
    cr_assert_eq(mt_hf_load_weights(FIXTURES "/tiny_qwen3", &lay, masters, NULL, NULL), MT_OK, "%s", mt_error());
    hf_test_mkdtemp(dir);
    mt_hf_export_options opt = {.dtype = MT_ST_BF16};
    cr_assert_eq(mt_hf_export(&lay, masters, hf_test_path(out, dir, "out"), &opt), MT_OK, "%s", mt_error());
    hf_test_expect_same_tensors(FIXTURES "/tiny_qwen3", out);
    cr_assert_eq(mt_hf_load_config(out, &back), MT_OK, "%s", mt_error());
    cr_assert(!memcmp(&cfg, &back, sizeof cfg), "config.json did not round-trip");
    free(masters);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

/* ---- export -> import ---- */

static void fill_random(const mt_layout *lay, float *masters, uint32_t seed) {
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        float *p = masters + lay->units[t->unit].offset + t->offset;
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++) {
            seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
            p[j] = ((float)seed / 4294967296.0f - 0.5f) * 0.2f;
        }
    }
}

/* Round to the nearest bf16, ties to even, by comparing distances to the two neighbours
 * (independent of the bit trick the writer uses). */
static float bf16_nearest(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
    float lo, hi;
    memcpy(&lo, &lo_bits, sizeof lo);
    memcpy(&hi, &hi_bits, sizeof hi);
    double dlo = fabs((double)x - lo), dhi = fabs((double)hi - x);
    if (dlo != dhi) return dlo < dhi ? lo : hi;
    return (lo_bits >> 16) % 2 == 0 ? lo : hi;
}

/* Exports a model of cfg with random masters to base/export and loads it back. */
static void export_and_reload_config(const mt_config *cfg, const mt_hf_export_options *opt, const char *base,
                                     mt_layout *lay, float **orig, float **back) {
    mt_config cfg_back;
    cr_assert_eq(mt_layout_init(lay, cfg), MT_OK, "%s", mt_error());
    *orig = new_masters(lay, 0.0f);
    fill_random(lay, *orig, 12345);
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/export/", base); /* trailing slash: the temp dir must still be a sibling */
    cr_assert_eq(mt_hf_export(lay, *orig, dir, opt), MT_OK, "%s", mt_error());
    cr_assert_eq(hf_test_count_entries(base), 1, "the temporary directory was left behind");
    cr_assert_eq(mt_hf_load_config(dir, &cfg_back), MT_OK, "%s", mt_error());
    cr_assert(!memcmp(cfg, &cfg_back, sizeof cfg_back), "config.json did not round-trip");
    *back = new_masters(lay, NAN);
    cr_assert_eq(mt_hf_load_weights(dir, lay, *back, NULL, NULL), MT_OK, "%s", mt_error());
}

/* The same of a preset. */
static void export_and_reload(const char *preset, const mt_hf_export_options *opt, const char *base, mt_layout *lay,
                              float **orig, float **back) {
    mt_config cfg;
    cr_assert_eq(mt_config_preset(preset, &cfg), MT_OK);
    export_and_reload_config(&cfg, opt, base, lay, orig, back);
}

/* Qwen3.5's hybrid (and Qwen3.5-MoE's): its layer_types, partial RoPE and Gated DeltaNet sizes
 * through config.json, the conv1d as transformers holds it ([C, 1, 4]), the gated q_proj, bitwise
 * in fp32. */
static void check_qwen3_5_round_trip(mt_config c) {
    mt_layout lay;
    float *orig, *back;
    char dir[PATH_MAX];
    memset(c.linear_layers, 0, sizeof c.linear_layers); /* the config's own layers only, as it reads back */
    for (int l = 0; l < c.num_layers; l++)
        if ((l + 1) % 3) mt_config_set_linear(&c, l);
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    hf_test_mkdtemp(dir);
    export_and_reload_config(&c, &opt, dir, &lay, &orig, &back);
    cr_assert(!memcmp(orig, back, (size_t)lay.total_numel * sizeof *orig), "fp32 round trip is not bitwise");
    const mt_tensor *conv = mt_layout_find(&lay, "model.layers.0.linear_attn.conv1d.weight", NULL);
    const mt_tensor *q = mt_layout_find(&lay, "model.layers.2.self_attn.q_proj.weight", NULL);
    cr_assert(conv && q && !mt_layout_find(&lay, "model.layers.0.self_attn.q_proj.weight", NULL));
    cr_expect_eq(q->rows, 2 * c.num_heads * c.head_dim, "q_proj holds each head's query and gate");
    free(orig);
    free(back);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

Test(hfmodel, qwen3_5_export_import_is_bitwise) { check_qwen3_5_round_trip(mt_tiny_config_qwen3_5()); }

Test(hfmodel, qwen3_5_moe_export_import_is_bitwise) { check_qwen3_5_round_trip(mt_tiny_config_qwen3_5_moe()); }

Test(hfmodel, qwen3_next_export_import_is_bitwise) { check_qwen3_5_round_trip(mt_tiny_config_qwen3_next()); }

Test(hfmodel, fp32_export_import_is_bitwise_and_sharded) {
    mt_layout lay;
    float *orig, *back;
    char dir[PATH_MAX], path[PATH_MAX];
    /* 64 KiB shards split the tiny preset (about 0.5 MB in fp32) into several files. */
    mt_hf_export_options opt = {.dtype = MT_ST_F32, .max_shard_bytes = 64 << 10};
    hf_test_mkdtemp(dir);
    export_and_reload("tiny", &opt, dir, &lay, &orig, &back);
    cr_assert(!memcmp(orig, back, (size_t)lay.total_numel * sizeof *orig), "fp32 round trip is not bitwise");
    hf_test_path(path, dir, "export/model.safetensors.index.json");
    cr_assert_eq(access(path, F_OK), 0, "no index for a sharded export");
    cr_assert_gt(hf_test_count_entries(hf_test_path(path, dir, "export")), 4);
    free(orig);
    free(back);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

/* Llama's attention_bias: q/k/v and o_proj biases out and back (the load refuses a missing one), as
 * LlamaAttention has them. */
Test(hfmodel, llama_attention_bias_round_trips_with_o_proj_bias) {
    mt_config cfg;
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cfg.attention_bias = 1;
    mt_layout lay;
    float *orig, *back;
    char dir[PATH_MAX];
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    hf_test_mkdtemp(dir);
    export_and_reload_config(&cfg, &opt, dir, &lay, &orig, &back);
    cr_assert(!memcmp(orig, back, (size_t)lay.total_numel * sizeof *orig), "fp32 round trip is not bitwise");
    int o_bias = 0;
    for (int i = 0; i < lay.num_tensors; i++) o_bias += lay.tensors[i].kind == MT_T_BO;
    cr_assert_eq(o_bias, cfg.num_layers, "%d o_proj biases for %d layers", o_bias, cfg.num_layers);
    free(orig);
    free(back);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

Test(hfmodel, bf16_export_import_rounds_to_nearest_even) {
    mt_layout lay;
    float *orig, *back;
    char dir[PATH_MAX];
    mt_hf_export_options opt = {.dtype = MT_ST_BF16};
    hf_test_mkdtemp(dir);
    export_and_reload("demo", &opt, dir, &lay, &orig, &back); /* demo is tied: no lm_head written */
    for (int64_t i = 0; i < lay.total_numel; i++)
        cr_assert_eq(back[i], bf16_nearest(orig[i]), "element %lld: %a -> %a", (long long)i, (double)orig[i],
                     (double)back[i]);
    free(orig);
    free(back);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

Test(hfmodel, export_refuses_a_nonempty_directory) {
    mt_config cfg;
    mt_layout lay;
    char dir[PATH_MAX], path[PATH_MAX];
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    float *masters = new_masters(&lay, 0.0f);
    hf_test_mkdtemp(dir);
    hf_test_write_text(hf_test_path(path, dir, "notes.txt"), "keep me");
    mt_hf_export_options opt = {.dtype = MT_ST_BF16};
    cr_assert_eq(mt_hf_export(&lay, masters, dir, &opt), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), dir) && strstr(mt_error(), "not empty"), "%s", mt_error());
    cr_assert_eq(hf_test_count_entries(dir), 1);
    free(masters);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

Test(hfmodel, export_refuses_nonfinite_masters_and_writes_nothing) {
    mt_config cfg;
    mt_layout lay;
    char dir[PATH_MAX], out[PATH_MAX];
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    float *masters = new_masters(&lay, 0.0f);
    const mt_tensor *wq = mt_layout_tensor(&lay, mt_unit_block(1), MT_T_WQ);
    masters[lay.units[wq->unit].offset + wq->offset + 5] = INFINITY;
    hf_test_mkdtemp(dir);
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    cr_assert_eq(mt_hf_export(&lay, masters, hf_test_path(out, dir, "out"), &opt), MT_ERR_NUMERIC);
    cr_assert(strstr(mt_error(), "model.layers.1.self_attn.q_proj.weight"), "%s", mt_error());
    cr_assert_eq(hf_test_count_entries(dir), 0, "a failed export left files behind");
    free(masters);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

/* A write that fails halfway (here: a file size limit, as a full disk would) must leave neither
 * the output nor the temporary directory. Criterion runs each test in its own process, so the
 * limit does not leak into other tests. */
Test(hfmodel, export_failing_midway_leaves_nothing) {
    mt_config cfg;
    mt_layout lay;
    char dir[PATH_MAX], out[PATH_MAX];
    cr_assert_eq(mt_config_preset("tiny", &cfg), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    float *masters = new_masters(&lay, 0.5f);
    hf_test_mkdtemp(dir);
    signal(SIGXFSZ, SIG_IGN); /* make the oversized write fail with EFBIG instead of killing us */
    struct rlimit limit = {.rlim_cur = 64 << 10, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &limit), 0);
    mt_hf_export_options opt = {.dtype = MT_ST_F32}; /* one file of about 0.5 MB */
    cr_assert_eq(mt_hf_export(&lay, masters, hf_test_path(out, dir, "out"), &opt), MT_ERR_IO);
    cr_assert(strstr(mt_error(), "model.safetensors"), "%s", mt_error());
    cr_assert_eq(hf_test_count_entries(dir), 0, "a failed export left files behind");
    free(masters);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

/* ---- model-level refusals: the fixture loaded with a config that disagrees with it ---- */

/* Loads tiny_llama with `cfg` and expects a refusal naming `tensor` and `detail`; the masters
 * must be untouched because validation runs before any conversion. */
static void expect_refusal(const mt_config *cfg, const char *tensor, const char *detail) {
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, cfg), MT_OK, "%s", mt_error());
    float *masters = new_masters(&lay, -7.0f);
    cr_assert_eq(mt_hf_load_weights(FIXTURES "/tiny_llama", &lay, masters, NULL, NULL), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), tensor), "message lacks the tensor %s: %s", tensor, mt_error());
    cr_assert(strstr(mt_error(), detail), "message lacks '%s': %s", detail, mt_error());
    cr_assert(strstr(mt_error(), "tiny_llama"), "message lacks the file: %s", mt_error());
    for (int64_t i = 0; i < lay.total_numel; i++) cr_assert_eq(masters[i], -7.0f, "masters written before validation");
    free(masters);
    mt_layout_free(&lay);
}

static mt_config fixture_config(void) {
    mt_config cfg;
    cr_assert_eq(mt_hf_load_config(FIXTURES "/tiny_llama", &cfg), MT_OK, "%s", mt_error());
    return cfg;
}

Test(hfmodel, refuses_a_shape_that_disagrees_with_the_layout) {
    mt_config cfg = fixture_config();
    cfg.intermediate_size = 16;
    expect_refusal(&cfg, "'model.layers.0.mlp.gate_proj.weight'", "expected shape [16, 8], found [12, 8]");
}

Test(hfmodel, refuses_a_missing_tensor) {
    mt_config cfg = fixture_config();
    cfg.attention_bias = 1;
    expect_refusal(&cfg, "'model.layers.0.self_attn.q_proj.bias'", "is missing");
}

Test(hfmodel, refuses_an_unexpected_tensor) {
    mt_config cfg = fixture_config();
    cfg.num_layers = 1;
    expect_refusal(&cfg, "'model.layers.1.", "unexpected tensor");
}

Test(hfmodel, ignores_lm_head_for_a_tied_config) {
    mt_config cfg = fixture_config();
    cfg.tie_embeddings = 1;
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    float *masters = new_masters(&lay, 0.0f);
    cr_assert_eq(mt_hf_load_weights(FIXTURES "/tiny_llama", &lay, masters, NULL, NULL), MT_OK, "%s", mt_error());
    free(masters);
    mt_layout_free(&lay);
}

Test(hfmodel, refuses_a_tied_lm_head_of_another_shape) {
    mt_config cfg = fixture_config();
    cfg.tie_embeddings = 1;
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    float *masters = new_masters(&lay, 0.0f);
    /* Every tensor the layout needs, plus an lm_head one column short. */
    mt_st_source *src = calloc((size_t)lay.num_tensors + 1, sizeof *src);
    for (int i = 0; i < lay.num_tensors; i++) {
        const mt_tensor *t = &lay.tensors[i];
        src[i] = (mt_st_source){.name = t->name, .ndim = t->cols == 1 ? 1 : 2, .shape = {t->rows, t->cols},
                                .data = tensor_data(&lay, masters, t)};
    }
    src[lay.num_tensors] = (mt_st_source){.name = "lm_head.weight", .ndim = 2, .shape = {cfg.vocab_size, 7},
                                          .data = masters};
    char dir[PATH_MAX];
    hf_test_mkdtemp(dir);
    cr_assert_eq(mt_safetensors_write_dir(dir, src, lay.num_tensors + 1, MT_ST_F32, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_hf_load_weights(dir, &lay, masters, NULL, NULL), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "'lm_head.weight'") && strstr(mt_error(), "expected shape [10, 8], found [10, 7]") &&
              strstr(mt_error(), "model.safetensors"), "%s", mt_error());
    free(src);
    free(masters);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}
