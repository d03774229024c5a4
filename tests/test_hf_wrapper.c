/* Wrappers (model/wrappers.h): Gemma3ForConditionalGeneration directories. The hub's config.json
 * reads as its text model's (the presets), with Gemma3TextConfig's defaults where text_config is
 * silent; a directory under either layout of names (the hub's language_model.model.*, vision_tower.*;
 * transformers 5's model.language_model.*, model.vision_tower.*) trains and exports as the
 * wrapper: its vision tensors byte for byte, the text tensors the trained ones, its config.json
 * with the text config the run's, its image processor's config; and what is wrong is refused
 * naming the file and the problem. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "config_cases.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "model/families.h"
#include "model/wrappers.h"
#include "run_fixture.h"
#include "tiny_model.h"

/* google/gemma-3-4b-it's config.json (vision_config shortened to what names its shape). */
static const char *gemma3_4b_it =
    "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"boi_token_index\": 255999,"
    " \"eoi_token_index\": 256000, \"eos_token_id\": [1, 106], \"image_token_index\": 262144,"
    " \"initializer_range\": 0.02, \"mm_tokens_per_image\": 256, \"model_type\": \"gemma3\","
    " \"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240, \"model_type\": \"gemma3_text\","
    " \"num_hidden_layers\": 34, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},"
    " \"sliding_window\": 1024}, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\","
    " \"vision_config\": {\"hidden_size\": 1152, \"image_size\": 896, \"intermediate_size\": 4304,"
    " \"model_type\": \"siglip_vision_model\", \"num_attention_heads\": 16, \"num_hidden_layers\": 27,"
    " \"patch_size\": 14, \"vision_use_head\": false}}";
/* google/gemma-3-27b-it's text_config (the rest as 4b-it's). */
static const char *gemma3_27b_text =
    "{\"head_dim\": 128, \"hidden_size\": 5376, \"intermediate_size\": 21504, \"model_type\": \"gemma3_text\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 62, \"num_key_value_heads\": 16,"
    " \"query_pre_attn_scalar\": 168, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},"
    " \"sliding_window\": 1024}";

Test(hf_wrapper, the_hubs_configs_give_the_presets) {
    cfg_case_expect_preset(gemma3_4b_it, "gemma-3-4b");
    char *by_type = cfg_case_with_field(gemma3_4b_it, "architectures", NULL); /* model_type alone names it */
    cfg_case_expect_preset(by_type, "gemma-3-4b");
    free(by_type);
    char *text = cfg_case_with_field(gemma3_4b_it, "text_config", gemma3_27b_text);
    cfg_case_expect_preset(text, "gemma-3-27b");
    free(text);
}

/* Each row of the table names a family of the registry for its text model, and its text defaults
 * are a JSON object. */
Test(hf_wrapper, every_wrappers_text_model_is_a_family) {
    for (const mt_wrapper *const *w = mt_wrappers; *w; w++) {
        cr_expect_not_null(mt_family_find((*w)->text_architecture, NULL), "%s", (*w)->architecture);
        cr_expect_null(mt_family_find((*w)->architecture, NULL), "%s is a family too", (*w)->architecture);
        json_t *defaults = json_loads((*w)->text_defaults, 0, NULL);
        cr_expect(json_is_object(defaults), "%s: text_defaults is not a JSON object", (*w)->architecture);
        json_decref(defaults);
    }
}

Test(hf_wrapper, refuses_what_it_cannot_read) {
    cfg_case_expect_refusal(gemma3_4b_it, "text_config", NULL, "required field 'text_config' is missing");
    cfg_case_expect_refusal(gemma3_4b_it, "text_config", "[1]", "field 'text_config' must be an object");
    /* a text model of another family: its model_type disagrees with the wrapper's text family */
    cfg_case_expect_refusal(gemma3_4b_it, "text_config", "{\"model_type\": \"qwen3\"}",
                            "config.json (text_config): field 'model_type' ('qwen3') disagrees");
    cfg_case_expect_refusal(gemma3_4b_it, "architectures", "[\"PaliGemmaForConditionalGeneration\"]",
                            "the text model of Gemma3ForConditionalGeneration");
    cfg_case_expect_refusal(gemma3_4b_it, "model_type", "\"gemma3_text\"",
                            "field 'model_type' ('gemma3_text') disagrees with architectures[0]");
    /* the text config's own refusals name it */
    cfg_case_expect_refusal(gemma3_4b_it, "text_config", "{\"hidden_size\": \"wide\"}",
                            "(text_config): field 'hidden_size' must be an integer");
}

/* ---- directories: both layouts of names, trained and exported ---- */

/* The tiny Gemma 3 of tiny_model.h over bytes (the corpus's tokens). */
static mt_config tiny_gemma3(void) {
    mt_config c = mt_tiny_config_gemma3();
    c.vocab_size = 256;
    return c;
}

/* What the wrapper keeps: a vision tower's and a projector's tensors, bf16, one of four dims. */
static void write_vision(const char *path, const mt_wrapper_layout *l) {
    static float values[8 * 3 * 4 * 4];
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) values[i] = (float)((i * 37) % 101) / 50.0f - 1;
    char names[4][128];
    snprintf(names[0], sizeof names[0], "%svision_model.embeddings.patch_embedding.weight", l->kept[0]);
    snprintf(names[1], sizeof names[1], "%svision_model.post_layernorm.weight", l->kept[0]);
    snprintf(names[2], sizeof names[2], "%smm_input_projection_weight", l->kept[1]);
    snprintf(names[3], sizeof names[3], "%smm_soft_emb_norm.weight", l->kept[1]);
    mt_st_source src[4] = {{.name = names[0], .ndim = 4, .shape = {8, 3, 4, 4}, .data = values},
                           {.name = names[1], .ndim = 1, .shape = {8}, .data = values},
                           {.name = names[2], .ndim = 2, .shape = {8, 32}, .data = values},
                           {.name = names[3], .ndim = 1, .shape = {8}, .data = values + 5}};
    cr_assert_eq(mt_safetensors_write_file(path, src, 4, MT_ST_BF16), MT_OK, "%s", mt_error());
}

/* config.json: the wrapper's fields around the text model's config (its architectures left out,
 * as the hub's nested configs do). */
static void write_wrapper_config(const char *dir, const char *text_dir, const char *dtype_key) {
    char path[PATH_MAX];
    json_t *text = hf_test_nested_config(text_dir);
    json_t *doc = json_pack("{s:[s], s:s, s:o, s:{s:i, s:i, s:i, s:s}, s:i, s:i, s:[i, i], s:s, s:s}",
                            "architectures", "Gemma3ForConditionalGeneration", "model_type", "gemma3",
                            "text_config", text, "vision_config", "hidden_size", 8, "image_size", 16,
                            "patch_size", 4, "model_type", "siglip_vision_model", "mm_tokens_per_image", 4,
                            "boi_token_index", 250, "eos_token_id", 1, 106, dtype_key, "bfloat16",
                            "transformers_version", "4.50.0.dev0");
    cr_assert_eq(json_dump_file(doc, hf_test_path(path, dir, "config.json"), JSON_INDENT(2)), 0);
    json_decref(doc);
}

/* A Gemma3ForConditionalGeneration directory at `dir` named as layout `which` of the wrapper (0:
 * the hub's, 1: transformers 5's, in shards): the text model of random fp32 weights, the vision
 * tensors; `drop`: a text tensor (its text model's name) left out, or NULL; `extra`: a tensor
 * added under this name, or NULL. */
static void write_wrapped(const char *dir, int which, const char *drop, const char *extra) {
    const mt_wrapper_layout *l = &mt_wrapper_find("Gemma3ForConditionalGeneration", NULL)->layouts[which];
    char text_dir[PATH_MAX], vision[PATH_MAX];
    snprintf(text_dir, sizeof text_dir, "%s.text", dir);
    snprintf(vision, sizeof vision, "%s.vision.safetensors", dir);
    mt_config c = tiny_gemma3();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK, "%s", mt_error());
    float *masters = calloc((size_t)lay.total_numel, sizeof *masters);
    for (int64_t i = 0; i < lay.total_numel; i++) masters[i] = (float)((i * 7919) % 2003) / 2003.0f - 0.5f;
    mt_hf_export_options opt = {.dtype = MT_ST_F32};
    cr_assert_eq(mt_hf_export(&lay, masters, text_dir, &opt), MT_OK, "%s", mt_error());
    write_vision(vision, l);
    mt_safetensors *text, *kept;
    cr_assert_eq(mt_safetensors_open_dir(text_dir, &text), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_open_file(vision, &kept), MT_OK, "%s", mt_error());
    int n = 0;
    mt_st_source src[64];
    char names[64][160];
    for (int i = 0; i < mt_safetensors_count(text); i++) {
        const mt_st_tensor *t = mt_safetensors_at(text, i);
        if (drop && !strcmp(t->name, drop)) continue;
        mt_wrapper_hub_name(l, t->name, names[n], sizeof names[n]);
        src[n] = (mt_st_source){.name = names[n], .ndim = t->ndim, .kept = t};
        memcpy(src[n++].shape, t->shape, sizeof t->shape);
    }
    for (int i = 0; i < mt_safetensors_count(kept); i++) {
        const mt_st_tensor *t = mt_safetensors_at(kept, i);
        src[n] = (mt_st_source){.name = t->name, .ndim = t->ndim, .kept = t};
        memcpy(src[n++].shape, t->shape, sizeof t->shape);
    }
    if (extra) src[n++] = (mt_st_source){.name = extra, .ndim = 1, .shape = {4}, .data = masters};
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(mt_safetensors_write_dir(dir, src, n, MT_ST_F32, which ? 4096 : 0), MT_OK, "%s", mt_error());
    write_wrapper_config(dir, text_dir, which ? "dtype" : "torch_dtype");
    char path[PATH_MAX];
    hf_test_write_text(hf_test_path(path, dir, "preprocessor_config.json"),
                       "{\"image_processor_type\": \"Gemma3ImageProcessor\", \"size\": {\"height\": 16}}\n");
    mt_safetensors_close(text);
    mt_safetensors_close(kept);
    mt_layout_free(&lay);
    free(masters);
}

static void ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

#define STEP "--steps", "2", "--seq", "16", "--batch", "2", "--lr", "1e-3", "--backend", "cpu", "--eval-every", "0", \
             "--threads", "1"

/* The export's config.json: the wrapper's as it was but for its text config, which reads as the
 * run's model (the same as the one it was initialized from: training changes no config), and the
 * dtype, the weights'. */
static void expect_config_round_trip(const char *model, const char *out) {
    char a[PATH_MAX], b[PATH_MAX];
    json_error_t err;
    json_t *was = json_load_file(hf_test_path(a, model, "config.json"), 0, &err),
           *is = json_load_file(hf_test_path(b, out, "config.json"), 0, &err);
    cr_assert(was && is, "%s", err.text);
    const char *key;
    json_t *v;
    json_object_foreach(was, key, v) {
        if (!strcmp(key, "text_config")) continue;
        if (!strcmp(key, "torch_dtype") || !strcmp(key, "dtype"))
            cr_expect_str_eq(json_string_value(json_object_get(is, key)), "float32", "%s", key);
        else cr_expect(json_equal(v, json_object_get(is, key)), "config.json's %s changed", key);
    }
    cr_expect_eq(json_object_size(is), json_object_size(was));
    mt_config before, after;
    cr_assert_eq(mt_hf_config_read(a, &before), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_hf_config_read(b, &after), MT_OK, "%s", mt_error());
    cr_expect(!memcmp(&before, &after, sizeof before), "the exported text_config reads otherwise");
    json_decref(was);
    json_decref(is);
}

/* Every tensor the wrapper keeps is in the export with its dtype, shape and bytes; the others are
 * the text model's, under the layout's names. */
static void expect_kept_as_they_were(const char *model, const char *out, const mt_wrapper_layout *l) {
    mt_safetensors *was, *is;
    cr_assert_eq(mt_safetensors_open_dir(model, &was), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_open_dir(out, &is), MT_OK, "%s", mt_error());
    int kept = 0;
    for (int i = 0; i < mt_safetensors_count(was); i++) {
        const mt_st_tensor *a = mt_safetensors_at(was, i);
        if (!mt_wrapper_kept(l, a->name)) continue;
        const mt_st_tensor *b = mt_safetensors_find(is, a->name);
        cr_assert_not_null(b, "%s: '%s' is not in the export", out, a->name);
        cr_expect(a->dtype == b->dtype && a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof a->shape) &&
                      a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes),
                  "'%s' changed", a->name);
        kept++;
    }
    cr_expect_eq(kept, 4);
    char text[160];
    for (int i = 0; i < mt_safetensors_count(is); i++) {
        const char *name = mt_safetensors_at(is, i)->name;
        cr_expect(mt_wrapper_kept(l, name) || mt_wrapper_text_name(l, name, text, sizeof text),
                  "the export holds '%s'", name);
    }
    mt_safetensors_close(was);
    mt_safetensors_close(is);
}

/* The export's text tensors, read back under the wrapper's names, are the run's trained masters
 * (an fp32 export: exactly), not the ones it started from (the first of the two steps moves them;
 * the cosine's last is at lr 0). */
static void expect_trained(const char *model, const char *out, const char *run) {
    mt_config c = tiny_gemma3();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK, "%s", mt_error());
    size_t bytes = (size_t)lay.total_numel * sizeof(float);
    float *start = malloc(bytes), *exported = malloc(bytes), *trained = malloc(bytes);
    cr_assert_eq(mt_hf_load_weights(model, &lay, start, NULL, NULL), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_hf_load_weights(out, &lay, exported, NULL, NULL), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read(mt_test_in(run, "ckpt-000002"), "master", trained, bytes), MT_OK, "%s",
                 mt_error());
    cr_expect(!memcmp(exported, trained, bytes), "the export's text tensors are not the run's masters");
    int64_t moved = 0;
    for (int64_t i = 0; i < lay.total_numel; i++) moved += start[i] != trained[i];
    cr_expect_gt(moved, lay.total_numel / 2, "a step moved %lld of %lld weights", (long long)moved,
                 (long long)lay.total_numel);
    free(start);
    free(exported);
    free(trained);
    mt_layout_free(&lay);
}

static void trains_and_exports(int which) {
    char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX], model[PATH_MAX], out[PATH_MAX];
    mt_test_make_run_dirs(dir, corpus, run);
    hf_test_path(model, dir, "model");
    hf_test_path(out, dir, "out");
    write_wrapped(model, which, NULL, NULL);
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", "--init-from", model, "--data", corpus, STEP, "--out", run, NULL);
    ran(&r);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60, "export", run, out, "--dtype", "fp32", NULL);
    ran(&r);
    mt_cli_result_free(&r);
    const mt_wrapper_layout *l = &mt_wrapper_find("Gemma3ForConditionalGeneration", NULL)->layouts[which];
    expect_config_round_trip(model, out);
    expect_kept_as_they_were(model, out, l);
    expect_trained(model, out, run);
    char a[PATH_MAX], b[PATH_MAX];
    cr_expect(mt_test_files_equal(hf_test_path(a, model, "preprocessor_config.json"),
                                  hf_test_path(b, out, "preprocessor_config.json")),
              "the image processor's config is not the wrapper's");
    /* the directory it writes back from changed: refused, naming it */
    char config[PATH_MAX];
    hf_test_write_text(hf_test_path(config, model, "config.json"), "{}");
    mt_cli_run(&r, 60, "export", run, mt_test_in(dir, "again"), NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, model) && strstr(r.err, "changed since the run stored it"), "%s", r.err);
    mt_cli_result_free(&r);
    hf_test_rmtree(dir);
}

Test(hf_wrapper, the_hubs_names_train_and_export_as_the_wrapper) { trains_and_exports(0); }
Test(hf_wrapper, transformers_5s_names_train_and_export_as_the_wrapper) { trains_and_exports(1); }

/* A text tensor missing, or one under neither the text model's names nor the kept ones: refused,
 * naming the file and the tensor (the command exits 2). */
Test(hf_wrapper, refuses_a_missing_or_unknown_tensor) {
    char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];
    mt_test_make_run_dirs(dir, corpus, run);
    write_wrapped(mt_test_in(dir, "missing"), 0, "model.layers.1.mlp.up_proj.weight", NULL);
    write_wrapped(mt_test_in(dir, "unknown"), 1, NULL, "audio_tower.proj.weight");
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", "--init-from", mt_test_in(dir, "missing"), "--data", corpus, STEP, "--out", run, NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, mt_test_in(dir, "missing")) &&
                  strstr(r.err, "tensor 'language_model.model.layers.1.mlp.up_proj.weight' is missing"),
              "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60, "train", "--init-from", mt_test_in(dir, "unknown"), "--data", corpus, STEP, "--out", run, NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "unexpected tensor 'audio_tower.proj.weight'") && strstr(r.err, ".safetensors"), "%s",
              r.err);
    mt_cli_result_free(&r);
    hf_test_rmtree(dir);
}
