/* An fp32 value kept as two 16-bit halves, exactly: the high half is the value rounded to bf16,
 * which is what the device streams and computes with; the low half is what, with the high half,
 * gives back every bit of the fp32 value. The host store keeps each fp32 master weight this way
 * (engine/store.h), so that the bf16 working weights are no copy of their own: 4 bytes a
 * parameter hold the master and the weights the device reads.
 *
 * With u the value's bits, lo is always u's low 16 bits, and
 *   hi = (u + 0x8000) >> 16          for every finite value, the infinities and the NaNs whose
 *                                    payload is below 0x8000 (a magnitude of at most 0x7f807fff):
 *                                    bf16 rounded to nearest, ties away from zero (round to nearest
 *                                    even differs only on exact ties); a magnitude from 0x7f7f8000
 *                                    on rounds to the infinity, as for nearest even
 *   hi = sign                        (a zero) for the NaNs of magnitude 0x7f808000 to 0x7f80ffff
 *   hi = u >> 16                     for the NaNs of magnitude from 0x7f810000 on: a NaN
 * and back:
 *   hi a NaN:                        u = hi << 16 | lo
 *   hi a zero and lo >= 0x8000:      u = hi << 16 | 0x7f800000 | lo
 *   otherwise:                       u = (hi - (lo >= 0x8000)) << 16 | lo
 *
 * This is a bijection on all 2^32 patterns (tests/test_split.c checks every one). Counting says
 * that no bijection keeps every NaN a NaN in the high half: bf16 has 2^16 fewer NaN patterns per
 * sign than there are fp32 NaNs above the low halves. The ones that fall out here are signaling
 * NaNs with payloads below 0x10000, whose high half is the infinity (payload below 0x8000) or a
 * zero (the rest). Arithmetic never makes a signaling NaN (x86 and CUDA make quiet ones, CUDA's
 * 0x7fffffff among them, whose high half is a NaN), so only such a pattern read from a file could
 * stream as a zero; a checkpoint or an export of it still says the master is not finite.
 *
 * Round to nearest even has no such bijection with lo = u's low bits: at a tie, both neighbours
 * map to the same (hi, lo). */
#ifndef MT_UTIL_SPLIT_F32_H
#define MT_UTIL_SPLIT_F32_H

#include <stdint.h>

#ifdef __CUDACC__
#define MT_SPLIT_FN static inline __host__ __device__
#else
#define MT_SPLIT_FN static inline
#endif

MT_SPLIT_FN uint16_t mt_split_hi_bits(uint32_t u) {
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f810000u) return (uint16_t)(u >> 16);
    if (a >= 0x7f808000u) return (uint16_t)((u >> 16) & 0x8000u);
    return (uint16_t)((u + 0x8000u) >> 16);
}

MT_SPLIT_FN uint16_t mt_split_lo_bits(uint32_t u) { return (uint16_t)u; }

MT_SPLIT_FN uint32_t mt_split_join_bits(uint16_t hi, uint16_t lo) {
    uint32_t h = (uint32_t)hi << 16, mag = hi & 0x7fffu;
    if (mag > 0x7f80u) return h | lo;
    if (mag == 0 && lo >= 0x8000u) return h | 0x7f800000u | lo;
    return (h - ((uint32_t)(lo >= 0x8000u) << 16)) | lo;
}

#ifndef __CUDACC__
#include <string.h>

static inline uint32_t mt_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mt_f32_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void mt_split_f32(float x, uint16_t *hi, uint16_t *lo) {
    uint32_t u = mt_f32_bits(x);
    *hi = mt_split_hi_bits(u);
    *lo = mt_split_lo_bits(u);
}

static inline float mt_split_join(uint16_t hi, uint16_t lo) { return mt_f32_of_bits(mt_split_join_bits(hi, lo)); }
#endif

#endif
