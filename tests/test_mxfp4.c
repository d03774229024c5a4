/* MXFP4 decoding (io/mxfp4.h): values worked by hand, random blocks against PyTorch doing what
 * transformers' dequantization does (tests/reference/mxfp4_ref.py), and the pairs and blocks it
 * refuses. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/mxfp4.h"

/* A [rows, cols] pair over caller-owned bytes, named as the hub names gpt-oss's. */
typedef struct {
    mt_st_tensor blocks, scales;
} pair;

static pair make_pair(const uint8_t *blocks, const uint8_t *scales, int64_t rows, int64_t groups) {
    pair p = {
        .blocks = {.name = "model.layers.0.mlp.experts.down_proj_blocks", .dtype = MT_ST_U8, .ndim = 3,
                   .shape = {rows, groups, 16}, .numel = rows * groups * 16, .data = blocks,
                   .nbytes = (size_t)(rows * groups * 16), .file = "model-00001.safetensors"},
        .scales = {.name = "model.layers.0.mlp.experts.down_proj_scales", .dtype = MT_ST_U8, .ndim = 2,
                   .shape = {rows, groups}, .numel = rows * groups, .data = scales, .nbytes = (size_t)(rows * groups),
                   .file = "model-00001.safetensors"},
    };
    return p;
}

Test(mxfp4, decodes_low_nibble_first_times_the_scale) {
    uint8_t blocks[16] = {0x21, 0xF8, 0x7F}, scales[1] = {128};
    pair p = make_pair(blocks, scales, 1, 1);
    int64_t rows, cols;
    cr_assert_eq(mt_mxfp4_shape(&p.blocks, &p.scales, &rows, &cols), MT_OK, "%s", mt_error());
    cr_assert(rows == 1 && cols == 32);
    float out[32];
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 1, out), MT_OK, "%s", mt_error());
    /* 0x21: low nibble 1 (0.5), high 2 (1.0); 0xF8: 8 (-0), 15 (-6); 0x7F: 15 (-6), 7 (6); x 2^1 */
    const float want[6] = {1.0f, 2.0f, -0.0f, -12.0f, -12.0f, 12.0f};
    for (int i = 0; i < 6; i++) cr_expect_eq(out[i], want[i], "value %d: %g, expected %g", i, out[i], want[i]);
    cr_expect(signbit(out[2]), "code 8 is -0");
    for (int i = 6; i < 32; i++) cr_expect(out[i] == 0.0f && !signbit(out[i]), "value %d: %g", i, out[i]);
}

Test(mxfp4, scales_reach_both_ends_of_fp32) {
    uint8_t blocks[2 * 16], scales[2] = {254, 0};
    memset(blocks, 0x32, sizeof blocks); /* 1.0 then 1.5 */
    pair p = make_pair(blocks, scales, 2, 1);
    float out[64];
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 2, out), MT_OK, "%s", mt_error());
    cr_expect_eq(out[0], ldexpf(1.0f, 127));
    cr_expect_eq(out[1], ldexpf(1.5f, 127));
    cr_expect_eq(out[32], ldexpf(1.0f, -127), "a subnormal: %g", out[32]);
    cr_expect_eq(out[33], ldexpf(1.5f, -127));
}

/* Every code under every scale but E8M0's NaN: the value ldexpf gives, overflow to inf refused. */
Test(mxfp4, every_code_under_every_scale_is_ldexps) {
    static const float e2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    uint8_t blocks[16], scale;
    for (int i = 0; i < 16; i++) blocks[i] = (uint8_t)(i | (15 - i) << 4);
    for (int s = 0; s < 255; s++) {
        scale = (uint8_t)s;
        pair p = make_pair(blocks, &scale, 1, 1);
        float out[32];
        int overflows = ldexpf(6.0f, s - 127) == INFINITY;
        cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 1, out), overflows ? MT_ERR_INVALID : MT_OK,
                     "scale %d", s);
        for (int i = 0; !overflows && i < 16; i++) {
            float lo = ldexpf(e2m1[i], s - 127), hi = ldexpf(e2m1[15 - i], s - 127);
            cr_expect(out[2 * i] == lo && signbit(out[2 * i]) == signbit(lo), "scale %d, code %d", s, i);
            cr_expect(out[2 * i + 1] == hi && signbit(out[2 * i + 1]) == signbit(hi), "scale %d, code %d", s, 15 - i);
        }
    }
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

Test(mxfp4, random_blocks_decode_as_transformers_does) {
    enum { ROWS = 48, GROUPS = 6 };
    static uint8_t blocks[ROWS * GROUPS * 16], scales[ROWS * GROUPS];
    static float ours[ROWS * GROUPS * 32], theirs[ROWS * GROUPS * 32];
    srand(7);
    for (size_t i = 0; i < sizeof blocks; i++) blocks[i] = (uint8_t)rand();
    for (size_t i = 0; i < sizeof scales; i++) scales[i] = (uint8_t)(100 + rand() % 50);
    pair p = make_pair(blocks, scales, ROWS, GROUPS);
    /* Decoded in two calls, from row 0 and from row 17, as a loader takes a tensor in pieces. */
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 17, ours), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 17, ROWS - 17, ours + 17 * GROUPS * 32), MT_OK, "%s",
                 mt_error());

    char dir[] = "/tmp/mt_mxfp4_XXXXXX", b[64], s[64], o[64], cmd[512];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(b, sizeof b, "%s/blocks", dir);
    snprintf(s, sizeof s, "%s/scales", dir);
    snprintf(o, sizeof o, "%s/out", dir);
    write_bytes(b, blocks, sizeof blocks);
    write_bytes(s, scales, sizeof scales);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/reference/mxfp4_ref.py %s %s %d %d %s", b, s, ROWS, GROUPS, o);
    int rc = system(cmd);
    cr_assert_neq(WEXITSTATUS(rc), 3, "/usr/bin/python3 cannot import torch: install python3-torch (Debian)");
    cr_assert_eq(rc, 0, "%s failed", cmd);
    FILE *f = fopen(o, "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fread(theirs, sizeof(float), ROWS * GROUPS * 32, f), (size_t)ROWS * GROUPS * 32);
    fclose(f);
    unlink(b), unlink(s), unlink(o), rmdir(dir);
    cr_assert_eq(memcmp(ours, theirs, sizeof ours), 0, "the decoded values differ from PyTorch's bits");
}

Test(mxfp4, a_nan_scale_or_an_overflow_is_refused_naming_the_row) {
    uint8_t blocks[3 * 16] = {0}, scales[3] = {127, 127, 255};
    pair p = make_pair(blocks, scales, 3, 1);
    float out[96];
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 3, out), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "down_proj_blocks") && strstr(mt_error(), "model-00001.safetensors") &&
                  strstr(mt_error(), "row 2") && strstr(mt_error(), "NaN"),
              "%s", mt_error());
    scales[2] = 254;
    blocks[2 * 16 + 5] = 0x40; /* 2.0 x 2^127 = 2^128: past fp32 */
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 3, out), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "row 2") && strstr(mt_error(), "overflow"), "%s", mt_error());
    cr_assert_eq(mt_mxfp4_decode_rows(&p.blocks, &p.scales, 0, 2, out), MT_OK, "rows before it decode: %s", mt_error());
}

Test(mxfp4, tensors_that_are_not_a_pair_are_refused_naming_both) {
    uint8_t blocks[4 * 16] = {0}, scales[4] = {0};
    pair p = make_pair(blocks, scales, 2, 2);
    int64_t rows, cols;
    p.scales.shape[1] = 3;
    cr_assert_eq(mt_mxfp4_shape(&p.blocks, &p.scales, &rows, &cols), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "down_proj_scales") && strstr(mt_error(), "[2, 3]") &&
                  strstr(mt_error(), "down_proj_blocks"), "%s", mt_error());
    p = make_pair(blocks, scales, 2, 2);
    p.scales.dtype = MT_ST_F32;
    cr_assert_eq(mt_mxfp4_shape(&p.blocks, &p.scales, &rows, &cols), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "U8"), "%s", mt_error());
    p = make_pair(blocks, scales, 2, 2);
    p.blocks.shape[2] = 8;
    cr_assert_eq(mt_mxfp4_shape(&p.blocks, &p.scales, &rows, &cols), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "16]"), "%s", mt_error());
}
