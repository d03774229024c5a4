/* bfloat16 <-> float on the host. Rounding is to nearest, ties to even; NaN stays NaN. */
#ifndef MT_UTIL_BF16_H
#define MT_UTIL_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t mt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float mt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
