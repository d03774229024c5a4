#include "io/mxfp4.h"

#include <math.h>
#include <stdio.h>

enum { BLOCK_VALUES = 32, BLOCK_BYTES = 16, NAN_SCALE = 255 };

static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static mt_status not_a_pair(const mt_st_tensor *blocks, const mt_st_tensor *scales, const char *why) {
    char bs[96], ss[96];
    mt_st_shape_str(blocks->ndim, blocks->shape, bs, sizeof bs);
    mt_st_shape_str(scales->ndim, scales->shape, ss, sizeof ss);
    return mt_fail(MT_ERR_INVALID, "%s: MXFP4 tensors '%s' %s %s and '%s' %s %s are not a pair: %s", blocks->file,
                   blocks->name, mt_st_dtype_name(blocks->dtype), bs, scales->name, mt_st_dtype_name(scales->dtype),
                   ss, why);
}

mt_status mt_mxfp4_shape(const mt_st_tensor *blocks, const mt_st_tensor *scales, int64_t *rows, int64_t *cols) {
    if (blocks->dtype != MT_ST_U8 || scales->dtype != MT_ST_U8) return not_a_pair(blocks, scales, "both must be U8");
    if (blocks->ndim < 3 || blocks->shape[blocks->ndim - 1] != BLOCK_BYTES)
        return not_a_pair(blocks, scales, "the blocks' shape must be [..., rows, cols / 32, 16]");
    if (scales->ndim != blocks->ndim - 1)
        return not_a_pair(blocks, scales, "the scales' shape must be the blocks' without its last dimension");
    for (int d = 0; d < scales->ndim; d++)
        if (scales->shape[d] != blocks->shape[d])
            return not_a_pair(blocks, scales, "the scales' shape must be the blocks' without its last dimension");
    int64_t r = 1;
    for (int d = 0; d < blocks->ndim - 2; d++) r *= blocks->shape[d];
    *rows = r;
    *cols = blocks->shape[blocks->ndim - 2] * BLOCK_VALUES;
    return MT_OK;
}

/* One row: `groups` blocks of 16 bytes and their scales. Returns the first corrupt block, or -1. */
static int64_t decode_row(const uint8_t *b, const uint8_t *s, int64_t groups, float *out) {
    for (int64_t g = 0; g < groups; g++, b += BLOCK_BYTES, out += BLOCK_VALUES) {
        if (s[g] == NAN_SCALE) return g;
        /* 2^(s - 127) is a float for every s < 255 (2^-127 a subnormal), so the product is ldexpf's */
        float scale = ldexpf(1.0f, (int)s[g] - 127);
        int finite = 1;
        for (int i = 0; i < BLOCK_BYTES; i++) {
            out[2 * i] = e2m1[b[i] & 0x0F] * scale;
            out[2 * i + 1] = e2m1[b[i] >> 4] * scale;
            finite &= isfinite(out[2 * i]) && isfinite(out[2 * i + 1]);
        }
        if (!finite) return g;
    }
    return -1;
}

mt_status mt_mxfp4_decode_rows(const mt_st_tensor *blocks, const mt_st_tensor *scales, int64_t row0, int64_t n,
                               float *dst) {
    int64_t rows, cols;
    MT_TRY(mt_mxfp4_shape(blocks, scales, &rows, &cols));
    if (row0 < 0 || n < 0 || row0 + n > rows)
        return mt_fail(MT_ERR_INVALID, "%s: rows [%lld, %lld) of '%s' asked, which has %lld", blocks->file,
                       (long long)row0, (long long)(row0 + n), blocks->name, (long long)rows);
    int64_t groups = cols / BLOCK_VALUES, bad_row = -1, bad_group = -1;
#pragma omp parallel for schedule(static) if (n * cols >= (1 << 20))
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *b = (const uint8_t *)blocks->data + (row0 + r) * groups * BLOCK_BYTES;
        const uint8_t *s = (const uint8_t *)scales->data + (row0 + r) * groups;
        int64_t g = decode_row(b, s, groups, dst + r * cols);
        if (g >= 0) {
#pragma omp critical(mt_mxfp4_corrupt)
            if (bad_row < 0 || row0 + r < bad_row) bad_row = row0 + r, bad_group = g;
        }
    }
    if (bad_row < 0) return MT_OK;
    uint8_t scale = ((const uint8_t *)scales->data)[bad_row * groups + bad_group];
    return mt_fail(MT_ERR_INVALID, "%s: MXFP4 tensor '%s' is corrupt: row %lld, block %lld has scale %u (%s)",
                   blocks->file, blocks->name, (long long)bad_row, (long long)bad_group, scale,
                   scale == NAN_SCALE ? "255 is NaN in the E8M0 encoding" : "its values overflow fp32");
}
