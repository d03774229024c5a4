#include "optim/moments.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/memory.h"

static const char *const format_names[] = {"fp32", "bf16", "8bit"};

mt_status mt_moments_format_parse(const char *name, mt_moments_format *format) {
    for (int f = MT_MOMENTS_F32; f <= MT_MOMENTS_8BIT; f++)
        if (!strcmp(name, format_names[f])) {
            *format = (mt_moments_format)f;
            return MT_OK;
        }
    return mt_fail(MT_ERR_INVALID, "unknown Adam moments format '%s' (fp32, bf16 or 8bit)", name);
}

const char *mt_moments_format_name(mt_moments_format format) { return format_names[format]; }

size_t mt_moments_value_size(mt_moments_format format) {
    return format == MT_MOMENTS_F32 ? 4 : format == MT_MOMENTS_BF16 ? 2 : 1;
}

int64_t mt_moments_bytes(mt_moments_format format, size_t n) {
    size_t scales = format == MT_MOMENTS_8BIT ? mt_moments_blocks(n) * sizeof(float) : 0;
    return 2 * (int64_t)(n * mt_moments_value_size(format) + scales);
}

mt_status mt_moments_create(mt_moments *mom, mt_moments_format format, size_t n) {
    memset(mom, 0, sizeof *mom);
    mom->format = format;
    mom->n = n;
    size_t size = mt_moments_value_size(format), blocks = format == MT_MOMENTS_8BIT ? mt_moments_blocks(n) : 0;
    mom->m = mt_pages_alloc(n * size, "Adam first moments");
    mom->v = mom->m ? mt_pages_alloc(n * size, "Adam second moments") : NULL;
    if (mom->v && blocks) {
        mom->m_scale = mt_calloc(blocks, sizeof(float), "Adam first-moment block scales");
        mom->v_scale = mom->m_scale ? mt_calloc(blocks, sizeof(float), "Adam second-moment block scales") : NULL;
    }
    if (!mom->v || (blocks && !mom->v_scale)) {
        mt_moments_free(mom);
        return MT_ERR_NOMEM;
    }
    return MT_OK;
}

void mt_moments_free(mt_moments *mom) {
    size_t bytes = mom->n * mt_moments_value_size(mom->format);
    mt_pages_free(mom->m, bytes);
    mt_pages_free(mom->v, bytes);
    free(mom->m_scale);
    free(mom->v_scale);
    memset(mom, 0, sizeof *mom);
}

static float absmax(const float *x, size_t count) {
    float a = 0;
    for (size_t i = 0; i < count; i++) a = fmaxf(a, fabsf(x[i]));
    return a;
}

void mt_moments_quantize_m(const float *x, size_t count, int8_t *codes, float *scale) {
    float a = absmax(x, count);
    *scale = a;
    for (size_t i = 0; i < count; i++) codes[i] = a > 0 ? (int8_t)lrintf(x[i] / a * 127.0f) : 0;
}

void mt_moments_dequantize_m(const int8_t *codes, size_t count, float scale, float *x) {
    for (size_t i = 0; i < count; i++) x[i] = (float)codes[i] * scale / 127.0f;
}

/* The v code: 0 is 0; code c = 16 e + f (e, f in 0..15, c > 0) is 2^(e - 15) (1 + f / 16), so
 * codes run from 2^-15 (17/16) to 31/16 and the block's absmax maps to 31/16, the top code. The
 * value is built from its float bits, exactly. */
#define V_TOP (31.0f / 16.0f)

static float v_code_value(uint8_t c) {
    if (!c) return 0;
    uint32_t u = (uint32_t)((c >> 4) + 127 - 15) << 23 | (uint32_t)(c & 15) << 19;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The nearest code of r in [0, V_TOP] (ties to even, as for bf16), never 0 for r > 0. */
static uint8_t v_code_of(float r) {
    const float lowest = v_code_value(1);
    if (r < lowest) return r > 0 ? 1 : 0;
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    u += (1u << 18) - 1 + ((u >> 19) & 1u);
    int c = ((int)(u >> 23) - 127 + 15) << 4 | (int)((u >> 19) & 15);
    return c > 255 ? 255 : (uint8_t)c;
}

void mt_moments_quantize_v(const float *x, size_t count, uint8_t *codes, float *scale) {
    float a = absmax(x, count);
    *scale = a;
    for (size_t i = 0; i < count; i++) codes[i] = a > 0 ? v_code_of(x[i] / a * V_TOP) : 0;
}

void mt_moments_dequantize_v(const uint8_t *codes, size_t count, float scale, float *x) {
    for (size_t i = 0; i < count; i++) x[i] = v_code_value(codes[i]) / V_TOP * scale;
}
