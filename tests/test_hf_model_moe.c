/* The mixtures of experts' Hugging Face checkpoints in and out: export writes the experts one at a
 * time under each family's names (Mixtral's block_sparse_moe.experts.N.w1/w3/w2 and its router's
 * older name), which import reads back to the same bits; transformers 5's fused layout
 * (mlp.experts.gate_up_proj [E, 2F, D], gate's rows first; down_proj [E, D, F]; mlp.gate) reads to
 * the same masters; a missing expert, a tensor held both ways, or a wrong shape is refused naming
 * it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_test_files.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "tiny_model.h"
#include "util/rng.h"

static const mt_arch families[] = {MT_ARCH_QWEN3_MOE, MT_ARCH_QWEN2_MOE, MT_ARCH_MIXTRAL, MT_ARCH_OLMOE};

/* Random masters, alignment padding 0 (what an import leaves there). */
static float *random_masters(const mt_layout *lay, uint64_t seed) {
    float *m = calloc((size_t)lay->total_numel, sizeof *m);
    mt_rng rng = {seed};
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        float *p = m + lay->units[t->unit].offset + t->offset;
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++) p[j] = (float)mt_rng_normal(&rng);
    }
    return m;
}

static void open_layout(mt_arch arch, mt_layout *lay) {
    mt_config cfg = mt_tiny_config_moe(arch, 1);
    cr_assert_eq(mt_layout_init(lay, &cfg), MT_OK, "%s", mt_error());
}

static void expect_file_holds(const char *dir, const char *name, int present) {
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(dir, &set), MT_OK, "%s", mt_error());
    cr_expect_eq(mt_safetensors_find(set, name) != NULL, present, "%s: '%s' %s", dir, name,
                 present ? "missing" : "present");
    mt_safetensors_close(set);
}

Test(hfmodel_moe, export_writes_experts_one_at_a_time_and_reads_back) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        mt_layout lay;
        open_layout(families[f], &lay);
        float *masters = random_masters(&lay, 7 + f), *back = calloc((size_t)lay.total_numel, sizeof *back);
        char dir[PATH_MAX], out[PATH_MAX];
        hf_test_mkdtemp(dir);
        hf_test_path(out, dir, "model");
        mt_hf_export_options opt = {.dtype = MT_ST_F32};
        cr_assert_eq(mt_hf_export(&lay, masters, out, &opt), MT_OK, "%s", mt_error());
        int mixtral = families[f] == MT_ARCH_MIXTRAL;
        int sparse = mixtral || families[f] == MT_ARCH_OLMOE ? 0 : families[f] == MT_ARCH_QWEN3_MOE ? 2 : 1;
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.%s.experts.1.%s.weight", sparse,
                 mixtral ? "block_sparse_moe" : "mlp", mixtral ? "w3" : "up_proj");
        expect_file_holds(out, name, 1);
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", sparse, mixtral ? "block_sparse_moe.gate" : "mlp.gate");
        expect_file_holds(out, name, 1);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", sparse);
        expect_file_holds(out, name, 0);
        mt_config cfg;
        cr_assert_eq(mt_hf_load_config(out, &cfg), MT_OK, "%s", mt_error());
        cr_assert(!memcmp(&cfg, &lay.cfg, sizeof cfg), "family %zu: the config did not come back", f);
        cr_assert_eq(mt_hf_load_weights(out, &lay, back, NULL, NULL), MT_OK, "%s", mt_error());
        cr_expect(!memcmp(back, masters, (size_t)lay.total_numel * sizeof *back), "family %zu: the weights changed", f);
        hf_test_rmtree(dir);
        free(masters);
        free(back);
        mt_layout_free(&lay);
    }
}

/* transformers 5's in-memory names and shapes, as its save_pretrained without the reverse mapping,
 * or another tool, may leave them: each layout tensor whole. */
static void write_fused(const mt_layout *lay, const float *masters, const char *dir, int drop, int extra_part) {
    mt_st_source src[64] = {{0}};
    char extra_name[128];
    int n = 0;
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        if (i == drop) continue;
        mt_st_source *s = &src[n++];
        s->name = t->name;
        s->data = masters + lay->units[t->unit].offset + t->offset;
        if (t->experts) {
            s->ndim = 3;
            s->shape[0] = t->experts, s->shape[1] = t->rows / t->experts, s->shape[2] = t->cols;
        } else {
            s->ndim = t->cols == 1 ? 1 : 2;
            s->shape[0] = t->rows, s->shape[1] = t->cols;
        }
        if (t->experts && extra_part) { /* the same weights one expert at a time too */
            int64_t row0;
            int rows;
            mt_tensor_hub_part(lay, t, 0, extra_name, sizeof extra_name, &row0, &rows);
            src[n++] = (mt_st_source){.name = extra_name, .ndim = 2, .shape = {rows, t->cols}, .data = s->data};
            extra_part = 0;
        }
    }
    cr_assert_lt(n, 64);
    cr_assert_eq(mt_safetensors_write_dir(dir, src, n, MT_ST_F32, 0), MT_OK, "%s", mt_error());
}

Test(hfmodel_moe, reads_transformers_5s_fused_experts) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        mt_layout lay;
        open_layout(families[f], &lay);
        float *masters = random_masters(&lay, 17 + f), *back = calloc((size_t)lay.total_numel, sizeof *back);
        char dir[PATH_MAX];
        hf_test_mkdtemp(dir);
        write_fused(&lay, masters, dir, -1, 0);
        cr_assert_eq(mt_hf_load_weights(dir, &lay, back, NULL, NULL), MT_OK, "%s", mt_error());
        cr_expect(!memcmp(back, masters, (size_t)lay.total_numel * sizeof *back), "family %zu: fused differs", f);
        hf_test_rmtree(dir);
        free(masters);
        free(back);
        mt_layout_free(&lay);
    }
}

/* The fused gate_up holds each expert's gate rows, then its up rows: one expert at a time, its gate
 * is rows [e 2F, e 2F + F) of the fused tensor. */
Test(hfmodel_moe, an_experts_gate_and_up_are_its_fused_rows_in_that_order) {
    mt_layout lay;
    open_layout(MT_ARCH_QWEN3_MOE, &lay);
    const mt_tensor *gu = mt_layout_tensor(&lay, mt_unit_block(0), MT_T_EXPERTS_GATE_UP);
    char name[128];
    int64_t row0;
    int rows, F = lay.cfg.moe_intermediate_size;
    mt_tensor_hub_part(&lay, gu, 2 * 5 + 1, name, sizeof name, &row0, &rows);
    cr_expect_str_eq(name, "model.layers.0.mlp.experts.5.up_proj.weight");
    cr_expect(row0 == 5 * 2 * F + F && rows == F, "up of expert 5 at row %lld", (long long)row0);
    int part;
    cr_expect_eq(mt_layout_find_hub(&lay, "model.layers.0.mlp.experts.5.up_proj.weight", &part), gu);
    cr_expect_eq(part, 11);
    cr_expect_null(mt_layout_find_hub(&lay, "model.layers.1.mlp.experts.5.up_proj.weight", &part),
                   "block 1 is dense: it has no experts");
    cr_expect_null(mt_layout_find_hub(&lay, "model.layers.0.mlp.experts.8.up_proj.weight", &part), "8 experts");
    mt_layout_free(&lay);
}

Test(hfmodel_moe, refuses_a_missing_expert_a_tensor_held_twice_and_a_wrong_shape) {
    mt_layout lay;
    open_layout(MT_ARCH_MIXTRAL, &lay);
    float *masters = random_masters(&lay, 27), *back = calloc((size_t)lay.total_numel, sizeof *back);
    char dir[PATH_MAX], path[PATH_MAX];
    /* An export without one expert's up matrix. */
    hf_test_mkdtemp(dir);
    hf_test_path(path, dir, "model");
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    cr_assert_eq(mt_hf_export(&lay, masters, path, &opt), MT_OK, "%s", mt_error());
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(path, &set), MT_OK, "%s", mt_error());
    mt_st_source src[64] = {{0}};
    int n = 0;
    for (int i = 0; i < mt_safetensors_count(set); i++) {
        const mt_st_tensor *t = mt_safetensors_at(set, i);
        if (!strcmp(t->name, "model.layers.1.block_sparse_moe.experts.2.w3.weight")) continue;
        src[n] = (mt_st_source){.name = t->name, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]}, .data = t->data};
        n++;
    }
    char cut[PATH_MAX];
    hf_test_mkdtemp(cut);
    cr_assert_eq(mt_safetensors_write_dir(cut, src, n, MT_ST_F32, 0), MT_OK, "%s", mt_error());
    mt_safetensors_close(set);
    cr_assert_eq(mt_hf_load_weights(cut, &lay, back, NULL, NULL), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "'model.layers.1.mlp.experts.gate_up_proj' is missing") &&
              strstr(mt_error(), "'model.layers.1.block_sparse_moe.experts.2.w3.weight'"), "%s", mt_error());
    hf_test_rmtree(dir);
    hf_test_rmtree(cut);

    /* Fused, and one expert's gate once more. */
    hf_test_mkdtemp(dir);
    write_fused(&lay, masters, dir, -1, 1);
    cr_assert_eq(mt_hf_load_weights(dir, &lay, back, NULL, NULL), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "holds both") && strstr(mt_error(), "experts.0.w1.weight"), "%s", mt_error());
    hf_test_rmtree(dir);

    /* A fused tensor of another expert count. */
    mt_config eight = lay.cfg;
    eight.num_experts = 8;
    mt_layout other;
    cr_assert_eq(mt_layout_init(&other, &eight), MT_OK, "%s", mt_error());
    float *other_masters = random_masters(&other, 29);
    hf_test_mkdtemp(dir);
    write_fused(&other, other_masters, dir, -1, 0);
    cr_assert_eq(mt_hf_load_weights(dir, &lay, back, NULL, NULL), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "gate_up_proj': expected shape [4, 40, 32], found [8, 40, 32]") ||
                  strstr(mt_error(), "mlp.gate.weight': expected shape"), "%s", mt_error());
    hf_test_rmtree(dir);
    free(other_masters);
    mt_layout_free(&other);
    free(masters);
    free(back);
    mt_layout_free(&lay);
}

/* NaN in one expert's weights (a part of a tensor assembled from several): refused as bad input
 * (MT_ERR_INVALID, exit 2), naming the expert's own tensor. */
Test(hfmodel_moe, a_nan_expert_is_refused_as_bad_input_naming_it) {
    mt_layout lay;
    open_layout(MT_ARCH_QWEN3_MOE, &lay);
    float *masters = random_masters(&lay, 11), *back = calloc((size_t)lay.total_numel, sizeof *back);
    char dir[PATH_MAX], out[PATH_MAX], file[PATH_MAX + 32];
    hf_test_mkdtemp(dir);
    hf_test_path(out, dir, "model");
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    cr_assert_eq(mt_hf_export(&lay, masters, out, &opt), MT_OK, "%s", mt_error());
    /* the expert's data offsets from the safetensors header, then a NaN written over its first value */
    snprintf(file, sizeof file, "%s/model.safetensors", out);
    FILE *f = fopen(file, "r+b");
    cr_assert_not_null(f);
    uint64_t header_len;
    cr_assert_eq(fread(&header_len, 8, 1, f), 1);
    char *header = calloc(1, header_len + 1);
    cr_assert_eq(fread(header, 1, header_len, f), header_len);
    json_t *h = json_loads(header, 0, NULL);
    const char *name = "model.layers.2.mlp.experts.1.up_proj.weight";
    json_t *entry = json_object_get(h, name);
    cr_assert_not_null(entry, "no %s in the export", name);
    long at = 8 + (long)header_len + (long)json_integer_value(json_array_get(json_object_get(entry, "data_offsets"), 0));
    float nan = NAN;
    fseek(f, at, SEEK_SET);
    cr_assert_eq(fwrite(&nan, sizeof nan, 1, f), 1);
    fclose(f);
    json_decref(h);
    free(header);
    cr_assert_eq(mt_hf_load_weights(out, &lay, back, NULL, NULL), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), name) && strstr(mt_error(), "non-finite"), "%s", mt_error());
    hf_test_rmtree(dir);
    free(masters);
    free(back);
    mt_layout_free(&lay);
}
