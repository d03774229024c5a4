/* gpt-oss's checkpoints in and out: export writes transformers' BF16 layout (gate_up_proj [E, D,
 * 2F], gate the even columns, its bias interleaved alike, down_proj [E, F, D]; every layer's sinks
 * and o_proj bias; config.json without quantization_config) and reads it back to the same bits; the hub's MXFP4 experts (tests/reference/make_gpt_oss_checkpoint.py: random codes)
 * and their BF16 twin, decoded as transformers decodes them, load to the same weights, those that
 * GptOssExperts' forward reads; a corrupt block, scales of the wrong shape or missing, blocks that
 * are not U8, a tensor held both ways and a role held both ways are refused naming the tensor and
 * the file, and `train --init-from` exits 2 on them. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/hf_model.h"
#include "tiny_model.h"
#include "util/rng.h"

/* The tiny gpt-oss (tests/tiny_model.h) with experts 32 wide: MXFP4's blocks are 32 columns, of
 * gate_up's hidden size and of down's width. */
static void open_layout(mt_layout *lay) {
    mt_config c = mt_tiny_config_moe(MT_ARCH_GPT_OSS, 0);
    c.moe_intermediate_size = c.intermediate_size = 32;
    cr_assert_eq(c.hidden_size % 32, 0);
    cr_assert_eq(mt_layout_init(lay, &c), MT_OK, "%s", mt_error());
}

static float *at(const mt_layout *lay, float *masters, const mt_tensor *t) {
    return masters + lay->units[t->unit].offset + t->offset;
}

/* Random masters that bf16 holds exactly (k / 64, |k| < 128), padding 0. */
static float *random_masters(const mt_layout *lay, uint64_t seed) {
    float *m = calloc((size_t)lay->total_numel, sizeof *m);
    mt_rng rng = {seed};
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        float *p = at(lay, m, t);
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++) p[j] = (float)((int)(mt_rng_next(&rng) % 255) - 127) / 64;
    }
    return m;
}

static float *load(const mt_layout *lay, const char *dir) {
    float *back = calloc((size_t)lay->total_numel, sizeof *back);
    cr_assert_eq(mt_hf_load_weights(dir, lay, back, NULL, NULL), MT_OK, "%s: %s", dir, mt_error());
    return back;
}

static void export_bf16(const mt_layout *lay, const float *masters, const char *dir) {
    mt_hf_export_options opt = {.dtype = MT_ST_BF16};
    cr_assert_eq(mt_hf_export(lay, masters, dir, &opt), MT_OK, "%s", mt_error());
}

/* The tensor `name` of an export, as fp32 (malloc'd), its shape checked. */
static float *exported(const char *dir, const char *name, int ndim, const int64_t *shape) {
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(dir, &set), MT_OK, "%s", mt_error());
    const mt_st_tensor *s = mt_safetensors_find(set, name);
    cr_assert(s, "%s: no '%s'", dir, name);
    cr_assert_eq(s->ndim, ndim, "%s: %d dimensions", name, s->ndim);
    for (int d = 0; d < ndim; d++) cr_assert_eq(s->shape[d], shape[d], "%s: dimension %d is %lld", name, d,
                                                (long long)s->shape[d]);
    float *x = malloc((size_t)s->numel * sizeof *x);
    cr_assert_eq(mt_st_tensor_to_f32(s, x), MT_OK, "%s", mt_error());
    mt_safetensors_close(set);
    return x;
}

Test(hfmodel_gpt_oss, exports_transformers_layout_and_reads_it_back) {
    mt_layout lay;
    open_layout(&lay);
    float *masters = random_masters(&lay, 5);
    char dir[PATH_MAX], out[PATH_MAX], config[PATH_MAX];
    hf_test_mkdtemp(dir);
    export_bf16(&lay, masters, hf_test_path(out, dir, "model"));
    int64_t E = lay.cfg.num_experts, D = lay.cfg.hidden_size, F = lay.cfg.moe_intermediate_size;
    const int u = mt_unit_block(1);
    const float *gu = at(&lay, masters, mt_layout_tensor(&lay, u, MT_T_EXPERTS_GATE_UP));
    const float *gub = at(&lay, masters, mt_layout_tensor(&lay, u, MT_T_EXPERTS_GATE_UP_BIAS));
    const float *down = at(&lay, masters, mt_layout_tensor(&lay, u, MT_T_EXPERTS_DOWN));
    float *hf_gu = exported(out, "model.layers.1.mlp.experts.gate_up_proj", 3, (int64_t[]){E, D, 2 * F});
    float *hf_gub = exported(out, "model.layers.1.mlp.experts.gate_up_proj_bias", 2, (int64_t[]){E, 2 * F});
    float *hf_down = exported(out, "model.layers.1.mlp.experts.down_proj", 3, (int64_t[]){E, F, D});
    for (int64_t e = 0; e < E; e++)
        for (int64_t i = 0; i < F; i++) {
            for (int64_t d = 0; d < D; d++) {
                cr_expect_eq(hf_gu[(e * D + d) * 2 * F + 2 * i], gu[(e * 2 * F + i) * D + d], "gate %lld", (long long)i);
                cr_expect_eq(hf_gu[(e * D + d) * 2 * F + 2 * i + 1], gu[(e * 2 * F + F + i) * D + d]);
                cr_expect_eq(hf_down[(e * F + i) * D + d], down[(e * D + d) * F + i], "down %lld", (long long)d);
            }
            cr_expect_eq(hf_gub[e * 2 * F + 2 * i], gub[e * 2 * F + i]);
            cr_expect_eq(hf_gub[e * 2 * F + 2 * i + 1], gub[e * 2 * F + F + i]);
        }
    int64_t H = lay.cfg.num_heads;
    for (int l = 0; l < lay.cfg.num_layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.sinks", l);
        float *hf_sinks = exported(out, name, 1, (int64_t[]){H});
        const float *sinks = at(&lay, masters, mt_layout_tensor(&lay, mt_unit_block(l), MT_T_SINKS));
        cr_expect(!memcmp(hf_sinks, sinks, (size_t)H * sizeof *sinks), "%s is not the layer's sinks", name);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.bias", l);
        free(exported(out, name, 1, (int64_t[]){D}));
        free(hf_sinks);
    }
    json_t *cfg = json_load_file(hf_test_path(config, out, "config.json"), 0, NULL);
    cr_assert(cfg);
    cr_expect_null(json_object_get(cfg, "quantization_config"), "a BF16 export is not quantized");
    cr_expect_str_eq(json_string_value(json_object_get(cfg, "model_type")), "gpt_oss");
    json_decref(cfg);
    float *back = load(&lay, out);
    cr_expect(!memcmp(back, masters, (size_t)lay.total_numel * sizeof *back), "the export reads back otherwise");
    free(hf_gu), free(hf_gub), free(hf_down), free(back), free(masters);
    hf_test_rmtree(dir);
    mt_layout_free(&lay);
}

/* tests/reference/make_gpt_oss_checkpoint.py over an export of `masters` into dir. */
static void make_checkpoints(const mt_layout *lay, const float *masters, const char *dir) {
    char model[PATH_MAX], cmd[3 * PATH_MAX];
    export_bf16(lay, masters, hf_test_path(model, dir, "export"));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/reference/make_gpt_oss_checkpoint.py %s %s 7", model, dir);
    int rc = system(cmd);
    cr_assert_neq(WEXITSTATUS(rc), 3, "/usr/bin/python3 cannot import torch: install python3-torch (Debian)");
    cr_assert_eq(rc, 0, "%s failed", cmd);
}

static int is_expert_matrix(const mt_tensor *t) {
    return t->kind == MT_T_EXPERTS_GATE_UP || t->kind == MT_T_EXPERTS_DOWN;
}

Test(hfmodel_gpt_oss, mxfp4_and_its_bf16_twin_load_to_the_weights_transformers_computes_with) {
    mt_layout lay;
    open_layout(&lay);
    float *masters = random_masters(&lay, 11);
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    make_checkpoints(&lay, masters, dir);
    float *mxfp4 = load(&lay, hf_test_path(path, dir, "mxfp4"));
    float *bf16 = load(&lay, hf_test_path(path, dir, "bf16"));
    cr_expect(!memcmp(mxfp4, bf16, (size_t)lay.total_numel * sizeof *bf16), "MXFP4 and its BF16 twin differ");
    FILE *f = fopen(hf_test_path(path, dir, "expected.f32"), "rb");
    cr_assert(f);
    int checked = 0;
    for (int i = 0; i < lay.num_tensors; i++) {
        const mt_tensor *t = &lay.tensors[i];
        size_t n = (size_t)t->rows * t->cols;
        const float *got = at(&lay, mxfp4, t);
        if (!is_expert_matrix(t)) {
            cr_expect(!memcmp(got, at(&lay, masters, t), n * sizeof *got), "%s: not as exported", t->name);
            continue;
        }
        float *want = malloc(n * sizeof *want);
        cr_assert_eq(fread(want, sizeof *want, n, f), n, "expected.f32 ends before %s", t->name);
        cr_expect(!memcmp(got, want, n * sizeof *got), "%s: not the weights GptOssExperts reads", t->name);
        free(want);
        checked++;
    }
    cr_expect_eq(fgetc(f), EOF, "expected.f32 holds more than the experts");
    cr_expect_eq(checked, 2 * lay.cfg.num_layers);
    fclose(f);
    free(mxfp4), free(bf16), free(masters);
    hf_test_rmtree(dir);
    mt_layout_free(&lay);
}

Test(hfmodel_gpt_oss, refuses_broken_mxfp4_naming_the_tensor_and_the_file) {
    static const struct {
        const char *dir, *needles[3];
    } cases[] = {
        {"corrupt", {"'model.layers.1.mlp.experts.down_proj_blocks' is corrupt", "row 34, block 0 has scale 255",
                     "corrupt/model.safetensors"}},
        {"scales_shape", {"'model.layers.0.mlp.experts.gate_up_proj_scales'", "are not a pair",
                          "scales_shape/model.safetensors"}},
        {"mixed", {"'model.layers.0.mlp.experts.gate_up_proj_blocks' is MXFP4", "'model.layers.1.mlp.experts.gate_up_proj'",
                   "mixed/model.safetensors"}},
        {"dtype", {"'model.layers.0.mlp.experts.down_proj_blocks' I8", "both must be U8", "dtype/model.safetensors"}},
        {"both", {"'model.layers.0.mlp.experts.gate_up_proj' (BF16)", "the model's tensor twice",
                  "both/model.safetensors"}},
        {"no_scales", {"'model.layers.1.mlp.experts.down_proj_scales' is missing", "without their scales",
                       "no_scales/model.safetensors"}},
    };
    mt_layout lay;
    open_layout(&lay);
    float *masters = random_masters(&lay, 13), *back = calloc((size_t)lay.total_numel, sizeof *back);
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    make_checkpoints(&lay, masters, dir);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cr_expect_eq(mt_hf_load_weights(hf_test_path(path, dir, cases[c].dir), &lay, back, NULL, NULL), MT_ERR_INVALID,
                     "%s is taken", cases[c].dir);
        for (int k = 0; k < 3; k++)
            cr_expect(strstr(mt_error(), cases[c].needles[k]), "%s: '%s' not in: %s", cases[c].dir, cases[c].needles[k],
                      mt_error());
    }
    /* the command: exit 2, the error line naming them */
    char data[PATH_MAX], run[PATH_MAX];
    FILE *f = fopen(hf_test_path(data, dir, "ids.bin"), "wb");
    int32_t header[256] = {20240520, 1, 256};
    fwrite(header, sizeof header, 1, f);
    for (uint16_t i = 0; i < 256; i++) fwrite(&(uint16_t){(uint16_t)(i % lay.cfg.vocab_size)}, 2, 1, f);
    fclose(f);
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", "--init-from", hf_test_path(path, dir, "corrupt"), "--data", data, "--seq", "16",
               "--batch", "2", "--backend", "cpu", "--steps", "1", "--out", hf_test_path(run, dir, "run"), NULL);
    cr_expect_eq(r.exit_code, 2, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "megatrain: error: ") && strstr(r.err, cases[0].needles[0]) &&
              strstr(r.err, cases[0].needles[2]), "the error does not name the tensor and the file:\n%s", r.err);
    mt_cli_result_free(&r);
    free(back), free(masters);
    hf_test_rmtree(dir);
    mt_layout_free(&lay);
}
