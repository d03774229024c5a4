/* Adam's moments m and v in a storage format. fp32 is the default and the reference; bf16 and
 * 8-bit are options that halve or quarter the moments' host bytes (and traffic), never on by
 * default. The update math is fp32 AdamW's on the dequantized values (optim/adamw.h).
 *
 *   fp32  m, v as float.
 *   bf16  m, v as bfloat16, rounded to nearest even after each update.
 *   8bit  per block of MT_MOMENTS_BLOCK values of the flat array, one fp32 scale per moment:
 *         m: signed int8, linear: m = code * absmax / 127 (absmax quantization);
 *         v: an 8-bit float code with a 4-bit exponent and 4-bit mantissa relative to the
 *            block's absmax (a dynamic map: 3% relative precision over 2^15 of range, where a
 *            linear code would turn v's small values into 0 and their steps into lr * m / eps).
 *            A positive v never encodes as 0, for the same reason. */
#ifndef MT_OPTIM_MOMENTS_H
#define MT_OPTIM_MOMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef enum { MT_MOMENTS_F32, MT_MOMENTS_BF16, MT_MOMENTS_8BIT } mt_moments_format;

#define MT_MOMENTS_BLOCK 256

/* "fp32", "bf16" or "8bit" (the --moments names). */
mt_status mt_moments_format_parse(const char *name, mt_moments_format *format);
const char *mt_moments_format_name(mt_moments_format format);

/* Both moments of n elements. */
typedef struct {
    mt_moments_format format;
    size_t n;
    void *m, *v;              /* n values each: float, bf16 bits, or 8-bit codes */
    float *m_scale, *v_scale; /* 8bit: one per block (the block's absmax) */
} mt_moments;

static inline size_t mt_moments_blocks(size_t n) { return (n + MT_MOMENTS_BLOCK - 1) / MT_MOMENTS_BLOCK; }
/* Bytes of one value in a format (8bit: one code; scales apart). */
size_t mt_moments_value_size(mt_moments_format format);
/* Bytes of both moments of n elements in a format, scales included. */
int64_t mt_moments_bytes(mt_moments_format format, size_t n);

/* Zero moments, their pages untouched until the first write (engine/store.h touches them in the
 * optimizer's split). */
mt_status mt_moments_create(mt_moments *mom, mt_moments_format format, size_t n);
void mt_moments_free(mt_moments *mom);

/* One 8-bit block of count <= MT_MOMENTS_BLOCK values: from fp32 (setting *scale) and back. */
void mt_moments_quantize_m(const float *x, size_t count, int8_t *codes, float *scale);
void mt_moments_dequantize_m(const int8_t *codes, size_t count, float scale, float *x);
void mt_moments_quantize_v(const float *x, size_t count, uint8_t *codes, float *scale);
void mt_moments_dequantize_v(const uint8_t *codes, size_t count, float scale, float *x);

#endif
