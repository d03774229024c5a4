/* Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration directories (model/wrappers.h):
 * the text model under text_config and model.language_model.*, beside a vision tower (model.visual.*)
 * and the multi-token prediction head (mtp.*). The config reads as the text model's, the weights load
 * bitwise, and an export wrapped from the directory is the wrapper again: its kept tensors byte for
 * byte, its text tensors the model's; a text_config silent on a size is refused naming it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_cases.h"
#include "hf_test_files.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "model/wrappers.h"
#include "tiny_model.h"

enum { KEPT = 2 };
static const char *const kept_names[KEPT] = {"model.visual.patch_embed.proj.weight", "mtp.fc.weight"};

/* config.json: the wrapper's fields around the text model's. */
static void write_config(const char *dir, const char *text_dir, const mt_wrapper *w) {
    char path[PATH_MAX];
    json_t *text = hf_test_nested_config(text_dir);
    json_t *doc = json_pack("{s:[s], s:s, s:o, s:{s:i, s:i}, s:i, s:b, s:s}", "architectures", w->architecture,
                            "model_type", w->model_type, "text_config", text, "vision_config", "depth", 1,
                            "hidden_size", 8, "image_token_id", 248056, "tie_word_embeddings", 0, "torch_dtype",
                            "bfloat16");
    cr_assert_eq(json_dump_file(doc, hf_test_path(path, dir, "config.json"), JSON_INDENT(2)), 0);
    json_decref(doc);
}

/* The wrapper's directory at dir/model of the text model `lay` with masters `m` (exported to
 * dir/text first), its tensors under the hub's names, and the kept ones. */
static void write_wrapped(const char *dir, const mt_wrapper *w, const mt_layout *lay, const float *m) {
    char text_dir[PATH_MAX], model[PATH_MAX];
    hf_test_path(text_dir, dir, "text");
    hf_test_path(model, dir, "model");
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    cr_assert_eq(mt_hf_export(lay, m, text_dir, &opt), MT_OK, "%s", mt_error());
    mt_safetensors *text;
    cr_assert_eq(mt_safetensors_open_dir(text_dir, &text), MT_OK, "%s", mt_error());
    int n = mt_safetensors_count(text);
    mt_st_source *src = calloc((size_t)n + KEPT, sizeof *src);
    char (*names)[160] = calloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        const mt_st_tensor *t = mt_safetensors_at(text, i);
        mt_wrapper_hub_name(&w->layouts[0], t->name, names[i], sizeof names[i]);
        src[i] = (mt_st_source){.name = names[i], .ndim = t->ndim, .kept = t};
        memcpy(src[i].shape, t->shape, sizeof t->shape);
    }
    for (int k = 0; k < KEPT; k++)
        src[n + k] = (mt_st_source){.name = kept_names[k], .ndim = 2, .shape = {4, 3 + k}, .data = m + 5 * k};
    cr_assert_eq(mkdir(model, 0755), 0);
    cr_assert_eq(mt_safetensors_write_dir(model, src, n + KEPT, MT_ST_F32, 0), MT_OK, "%s", mt_error());
    write_config(model, text_dir, w);
    mt_safetensors_close(text);
    free(src);
    free(names);
}

/* The kept tensors of `out` are those of `model`, byte for byte. */
static void expect_kept(const char *model, const char *out) {
    mt_safetensors *was, *is;
    cr_assert_eq(mt_safetensors_open_dir(model, &was), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_open_dir(out, &is), MT_OK, "%s", mt_error());
    for (int k = 0; k < KEPT; k++) {
        const mt_st_tensor *a = mt_safetensors_find(was, kept_names[k]), *b = mt_safetensors_find(is, kept_names[k]);
        cr_assert(a && b, "'%s' is not in the export", kept_names[k]);
        cr_expect(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes), "'%s' changed", kept_names[k]);
    }
    mt_safetensors_close(was);
    mt_safetensors_close(is);
}

/* Whether every tensor of lay is the same in a and b (the units' alignment padding is no tensor's). */
static int same_tensors(const mt_layout *lay, const float *a, const float *b) {
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        int64_t at = lay->units[t->unit].offset + t->offset;
        if (memcmp(a + at, b + at, (size_t)t->rows * t->cols * sizeof *a)) return 0;
    }
    return 1;
}

static void check_wrapper(mt_config c, const char *architecture) {
    const mt_wrapper *w = mt_wrapper_find(architecture, NULL);
    cr_assert_not_null(w, "%s is no wrapper", architecture);
    memset(c.linear_layers, 0, sizeof c.linear_layers); /* the config's own layers only, as it reads back */
    for (int l = 0; l < c.num_layers; l++)
        if ((l + 1) % 3) mt_config_set_linear(&c, l);
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK, "%s", mt_error());
    size_t bytes = (size_t)lay.total_numel * sizeof(float);
    float *masters = malloc(bytes), *back = malloc(bytes);
    for (int64_t i = 0; i < lay.total_numel; i++) masters[i] = (float)((i * 7919) % 2003) / 2003.0f - 0.5f;
    char dir[PATH_MAX], model[PATH_MAX], out[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    write_wrapped(dir, w, &lay, masters);
    hf_test_path(model, dir, "model");
    hf_test_path(out, dir, "out");

    mt_config read, want;
    cr_assert_eq(mt_hf_config_read(hf_test_path(path, dir, "text/config.json"), &want), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_hf_config_read(hf_test_path(path, model, "config.json"), &read), MT_OK, "%s", mt_error());
    cr_expect(!memcmp(&read, &want, sizeof read), "%s's text_config reads otherwise than its text model", architecture);
    cr_assert_eq(mt_hf_load_weights(model, &lay, back, NULL, NULL), MT_OK, "%s", mt_error());
    cr_expect(same_tensors(&lay, masters, back), "the text model's weights under %s's names do not load bitwise",
              architecture);

    mt_hf_export_options opt = {.dtype = MT_ST_F32, .wrapped_from = model};
    cr_assert_eq(mt_hf_export(&lay, masters, out, &opt), MT_OK, "%s", mt_error());
    expect_kept(model, out);
    const mt_wrapper *again = NULL;
    cr_assert_eq(mt_hf_config_wrapper(hf_test_path(path, out, "config.json"), &again), MT_OK, "%s", mt_error());
    cr_expect_eq(again, w, "the export is not %s", architecture);
    memset(back, 0, bytes);
    cr_assert_eq(mt_hf_load_weights(out, &lay, back, NULL, NULL), MT_OK, "%s", mt_error());
    cr_expect(same_tensors(&lay, masters, back), "the export's text tensors are not the model's");

    /* the text_config silent on a size: refused, naming it (no Qwen3_5TextConfig default is guessed) */
    json_error_t err;
    json_t *doc = json_load_file(hf_test_path(path, model, "config.json"), 0, &err);
    cr_assert_not_null(doc, "%s", err.text);
    json_object_del(json_object_get(doc, "text_config"), "hidden_size");
    char *text = json_dumps(doc, 0);
    mt_config refused;
    cr_expect_neq(cfg_case_parse(text, &refused), MT_OK);
    cr_expect(strstr(mt_error(), "(text_config)") && strstr(mt_error(), "hidden_size"), "%s", mt_error());
    free(text);
    json_decref(doc);

    free(masters);
    free(back);
    mt_layout_free(&lay);
    hf_test_rmtree(dir);
}

Test(hf_wrapper, qwen3_5_conditional_generation_loads_and_exports_as_the_wrapper) {
    check_wrapper(mt_tiny_config_qwen3_5(), "Qwen3_5ForConditionalGeneration");
}

Test(hf_wrapper, qwen3_5_moe_conditional_generation_loads_and_exports_as_the_wrapper) {
    check_wrapper(mt_tiny_config_qwen3_5_moe(), "Qwen3_5MoeForConditionalGeneration");
}
