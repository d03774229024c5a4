/* The safetensors reader on Python-written fixtures, the writer, and every malformed file the
 * reader must refuse with a message naming the file and the tensor. */
#include <criterion/criterion.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_test_files.h"
#include "io/safetensors.h"

#define FIXTURES "tests/data/safetensors"

static void assert_bits(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        cr_assert(!memcmp(&got[i], &want[i], sizeof(float)), "%s[%d]: got %a, want %a", what, i, (double)got[i],
                  (double)want[i]);
}

static const mt_st_tensor *must_find(const mt_safetensors *set, const char *name) {
    const mt_st_tensor *t = mt_safetensors_find(set, name);
    cr_assert_not_null(t, "tensor '%s' not found", name);
    return t;
}

Test(safetensors, reads_python_fixture_dtypes_exactly) {
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_file(FIXTURES "/dtypes.safetensors", &set), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_count(set), 5);
    float out[6];

    const mt_st_tensor *bf16 = must_find(set, "bf16");
    cr_assert(bf16->dtype == MT_ST_BF16 && bf16->ndim == 1 && bf16->shape[0] == 6);
    const float bf16_want[6] = {1.0f, -3.140625f, 0x1p-133f, INFINITY, -0.0f, 65536.0f};
    cr_assert_eq(mt_st_tensor_to_f32(bf16, out), MT_OK);
    assert_bits(out, bf16_want, 6, "bf16");

    /* f16 subnormals, the largest finite half, -inf and -0: every path of the hand conversion. */
    const mt_st_tensor *f16 = must_find(set, "f16");
    cr_assert(f16->dtype == MT_ST_F16 && f16->ndim == 2 && f16->shape[0] == 3 && f16->shape[1] == 2);
    const float f16_want[6] = {1.0f, 0x1p-24f, 1023 * 0x1p-24f, 65504.0f, -INFINITY, -0.0f};
    cr_assert_eq(mt_st_tensor_to_f32(f16, out), MT_OK);
    assert_bits(out, f16_want, 6, "f16");

    const float f32_want[6] = {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 65504.0f};
    cr_assert_eq(mt_st_tensor_to_f32(must_find(set, "f32"), out), MT_OK);
    assert_bits(out, f32_want, 6, "f32");

    const mt_st_tensor *scalar = must_find(set, "scalar");
    cr_assert(scalar->ndim == 0 && scalar->numel == 1);
    cr_assert_eq(mt_st_tensor_to_f32(scalar, out), MT_OK);
    cr_assert_eq(out[0], 7.0f);

    /* I64 is a valid safetensors dtype but not a weight: converting it must fail by name. */
    cr_assert_eq(mt_st_tensor_to_f32(must_find(set, "i64"), out), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "'i64'") && strstr(mt_error(), "I64"), "%s", mt_error());
    cr_assert_null(mt_safetensors_find(set, "absent"));
    mt_safetensors_close(set);
}

Test(safetensors, bf16_writer_rounds_to_nearest_even) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    /* 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1);
     * 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
     * Just above halfway rounds up; powers of two are exact; FLT_MAX rounds up to infinity. */
    const float in[5] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f + 0x1p-20f), 0x1p-130f, FLT_MAX};
    const float want[5] = {1.0f, 1.0f + 0x1p-6f, -(1.0f + 0x1p-7f), 0x1p-130f, INFINITY};
    mt_st_source src = {.name = "x", .ndim = 1, .shape = {5}, .data = in};
    cr_assert_eq(mt_safetensors_write_file(hf_test_path(path, dir, "x.safetensors"), &src, 1, MT_ST_BF16), MT_OK,
                 "%s", mt_error());
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_file(path, &set), MT_OK, "%s", mt_error());
    float out[5];
    cr_assert_eq(mt_st_tensor_to_f32(must_find(set, "x"), out), MT_OK);
    assert_bits(out, want, 5, "rounded");
    mt_safetensors_close(set);
    hf_test_rmtree(dir);
}

Test(safetensors, writer_header_is_aligned_and_tagged) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    const float a[3] = {1, 2, 3};
    mt_st_source src[2] = {{.name = "a", .ndim = 1, .shape = {3}, .data = a},
                           {.name = "b.weight", .ndim = 2, .shape = {1, 3}, .data = a}};
    cr_assert_eq(mt_safetensors_write_file(hf_test_path(path, dir, "m.safetensors"), src, 2, MT_ST_F32), MT_OK);
    FILE *f = fopen(path, "rb");
    unsigned long long n = 0;
    cr_assert_eq(fread(&n, 8, 1, f), 1);
    char *header = calloc(1, n + 1);
    cr_assert_eq(fread(header, 1, n, f), n);
    fclose(f);
    cr_assert_eq(n % 8, 0, "header length %llu is not a multiple of 8", n);
    json_error_t err;
    json_t *root = json_loads(header, 0, &err); /* trailing space padding is valid JSON whitespace */
    cr_assert_not_null(root, "%s", err.text);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(root, "__metadata__"), "format")), "pt");
    json_t *b = json_object_get(root, "b.weight");
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(b, "data_offsets"), 0)), 12);
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(b, "data_offsets"), 1)), 24);
    json_decref(root);
    free(header);
    hf_test_rmtree(dir);
}

Test(safetensors, writer_shards_by_size_with_index) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    float data[4][16];
    mt_st_source src[4];
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < 16; i++) data[t][i] = (float)(t * 100 + i);
        src[t] = (mt_st_source){.ndim = 2, .shape = {4, 4}, .data = data[t]};
    }
    src[0].name = "w0"; src[1].name = "w1"; src[2].name = "w2"; src[3].name = "w3";
    /* Each tensor is 64 bytes in F32: a 130-byte limit puts two in each of two shards. */
    cr_assert_eq(mt_safetensors_write_dir(dir, src, 4, MT_ST_F32, 130), MT_OK, "%s", mt_error());
    cr_assert_eq(hf_test_count_entries(dir), 3);
    json_t *index = json_load_file(hf_test_path(path, dir, "model.safetensors.index.json"), 0, NULL);
    cr_assert_not_null(index);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")), 256);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(index, "weight_map"), "w3")),
                     "model-00002-of-00002.safetensors");
    json_decref(index);
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(dir, &set), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_safetensors_count(set), 4);
    float out[16];
    cr_assert_eq(mt_st_tensor_to_f32(must_find(set, "w3"), out), MT_OK);
    assert_bits(out, data[3], 16, "w3");
    cr_assert(strstr(must_find(set, "w1")->file, "model-00001-of-00002.safetensors"));
    mt_safetensors_close(set);
    hf_test_rmtree(dir);
}

/* ---- malformed files: each must fail with a message that holds every `needles` string ---- */

static void expect_bad_file(unsigned long long header_len, const char *header, size_t data_len,
                            const char *needle1, const char *needle2) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    hf_test_write_raw(hf_test_path(path, dir, "bad.safetensors"), header_len, header, data_len);
    mt_safetensors *set = (mt_safetensors *)1;
    mt_status st = mt_safetensors_open_file(path, &set);
    cr_assert_neq(st, MT_OK, "a malformed file was accepted: %s", header);
    cr_assert_null(set, "a failed open must not leave a set behind");
    cr_assert(strstr(mt_error(), "bad.safetensors"), "message lacks the file: %s", mt_error());
    cr_assert(strstr(mt_error(), needle1), "message lacks '%s': %s", needle1, mt_error());
    if (needle2) cr_assert(strstr(mt_error(), needle2), "message lacks '%s': %s", needle2, mt_error());
    hf_test_rmtree(dir);
}

#define ENTRY(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

Test(safetensors, refuses_header_length_past_end) {
    const char *h = "{" ENTRY("w", "F32", "[2]", 0, 8) "}";
    expect_bad_file(strlen(h) + 100, h, 8, "runs past the end", NULL);
}

Test(safetensors, refuses_file_shorter_than_length_field) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    hf_test_write_text(hf_test_path(path, dir, "short.safetensors"), "abc");
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_file(path, &set), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "short.safetensors") && strstr(mt_error(), "too short"), "%s", mt_error());
    hf_test_rmtree(dir);
}

Test(safetensors, refuses_header_that_is_not_json) {
    const char *h = "{\"w\":{\"dtype\":\"F32\",";
    expect_bad_file(strlen(h), h, 0, "not valid JSON", NULL);
}

Test(safetensors, refuses_offsets_out_of_range) {
    const char *h = "{" ENTRY("w", "F32", "[4]", 0, 16) "}";
    expect_bad_file(strlen(h), h, 8, "'w'", "outside the 8-byte data section");
}

Test(safetensors, refuses_overlapping_tensors) {
    const char *h = "{" ENTRY("a", "F32", "[2]", 0, 8) "," ENTRY("b", "F32", "[2]", 4, 12) "}";
    expect_bad_file(strlen(h), h, 12, "'a' and 'b' overlap", NULL);
}

Test(safetensors, refuses_gap_between_tensors) {
    const char *h = "{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("b", "F32", "[1]", 8, 12) "}";
    expect_bad_file(strlen(h), h, 12, "belong to no tensor", "'b'");
}

Test(safetensors, refuses_trailing_bytes) {
    const char *h = "{" ENTRY("a", "F32", "[1]", 0, 4) "}";
    expect_bad_file(strlen(h), h, 12, "data section is 12 bytes", NULL);
}

Test(safetensors, refuses_offsets_that_disagree_with_shape) {
    const char *h = "{" ENTRY("w", "BF16", "[2,3]", 0, 8) "}";
    expect_bad_file(strlen(h), h, 8, "'w'", "shape [2, 3] of BF16 needs 12");
}

Test(safetensors, refuses_unknown_dtype) {
    const char *h = "{" ENTRY("w", "F24", "[2]", 0, 6) "}";
    expect_bad_file(strlen(h), h, 6, "'w'", "unknown dtype 'F24'");
}

Test(safetensors, refuses_duplicate_tensor_names) {
    const char *h = "{" ENTRY("w", "F32", "[1]", 0, 4) "," ENTRY("w", "F32", "[1]", 4, 8) "}";
    expect_bad_file(strlen(h), h, 8, "duplicate", "\"w\"");
}

Test(safetensors, refuses_negative_dimension) {
    const char *h = "{" ENTRY("w", "F32", "[-1]", 0, 4) "}";
    expect_bad_file(strlen(h), h, 4, "'w'", "shape dimension 0");
}

Test(safetensors, refuses_metadata_that_is_not_strings) {
    const char *h = "{\"__metadata__\":{\"format\":1}}";
    expect_bad_file(strlen(h), h, 0, "__metadata__", "'format'");
}

Test(safetensors, refuses_missing_shard) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    const float a[1] = {1};
    mt_st_source src = {.name = "a", .ndim = 1, .shape = {1}, .data = a};
    cr_assert_eq(mt_safetensors_write_file(hf_test_path(path, dir, "model-00001-of-00002.safetensors"), &src, 1,
                                           MT_ST_F32), MT_OK);
    hf_test_write_text(hf_test_path(path, dir, "model.safetensors.index.json"),
                       "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                       "\"b\": \"model-00002-of-00002.safetensors\"}}");
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(dir, &set), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "model-00002-of-00002.safetensors") && strstr(mt_error(), "'b'") &&
              strstr(mt_error(), "does not exist"), "%s", mt_error());
    hf_test_rmtree(dir);
}

Test(safetensors, refuses_index_that_misplaces_a_tensor) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    const float a[1] = {1};
    mt_st_source src[2] = {{.name = "a", .ndim = 1, .shape = {1}, .data = a},
                           {.name = "b", .ndim = 1, .shape = {1}, .data = a}};
    cr_assert_eq(mt_safetensors_write_file(hf_test_path(path, dir, "one.safetensors"), &src[0], 1, MT_ST_F32), MT_OK);
    cr_assert_eq(mt_safetensors_write_file(hf_test_path(path, dir, "two.safetensors"), &src[1], 1, MT_ST_F32), MT_OK);
    hf_test_write_text(hf_test_path(path, dir, "model.safetensors.index.json"),
                       "{\"weight_map\": {\"a\": \"two.safetensors\", \"b\": \"two.safetensors\"}}");
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(dir, &set), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "'a'") && strstr(mt_error(), "does not contain it"), "%s", mt_error());
    hf_test_rmtree(dir);
}

Test(safetensors, refuses_shard_path_outside_the_directory) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    hf_test_write_text(hf_test_path(path, dir, "model.safetensors.index.json"),
                       "{\"weight_map\": {\"a\": \"../elsewhere.safetensors\"}}");
    mt_safetensors *set;
    cr_assert_eq(mt_safetensors_open_dir(dir, &set), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "'a'") && strstr(mt_error(), "file name"), "%s", mt_error());
    hf_test_rmtree(dir);
}

Test(safetensors, refuses_directory_without_weights) {
    char dir[PATH_MAX];
    hf_test_mkdtemp(dir);
    mt_safetensors *set;
    cr_assert_neq(mt_safetensors_open_dir(dir, &set), MT_OK);
    cr_assert(strstr(mt_error(), dir) && strstr(mt_error(), "model.safetensors"), "%s", mt_error());
    hf_test_rmtree(dir);
}

/* Found by the fuzzer: a header of no tensors ("{}") must not do arithmetic on the empty tensor
 * array (undefined behaviour the sanitizers report). With no data it is an empty set; with data,
 * bytes no tensor covers. */
Test(safetensors, header_of_no_tensors) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    hf_test_write_raw(hf_test_path(path, dir, "empty.safetensors"), 2, "{}", 0);
    mt_safetensors *set = NULL;
    cr_assert_eq(mt_safetensors_open_file(path, &set), MT_OK, "%s", mt_error());
    cr_expect_eq(mt_safetensors_count(set), 0);
    cr_expect_null(mt_safetensors_find(set, "w"));
    mt_safetensors_close(set);
    hf_test_rmtree(dir);
    expect_bad_file(2, "{}", 8, "data section is 8 bytes", NULL);
}
