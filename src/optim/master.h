/* The fp32 master weights as the host store keeps them (engine/store.h): either one fp32 array,
 * which is also what the device reads (the cpu backend's fp32 weights), or split into two 16-bit
 * arrays (util/split_f32.h): the high halves, which are the bf16 weights the device reads, and
 * the low halves, which with them are every bit of the fp32 masters. The AdamW kernels
 * (optim/adamw.h) read and write masters in either form; these functions convert ranges of them
 * from and to plain fp32 (checkpoints, imports, the device's copy of the units it updates). */
#ifndef MT_OPTIM_MASTER_H
#define MT_OPTIM_MASTER_H

#include <stddef.h>
#include <stdint.h>

/* The implementations of the optimizer's vector code, slowest first. MT_ADAMW_BEST picks the
 * fastest this CPU supports; all give the same bits. */
typedef enum { MT_ADAMW_REF, MT_ADAMW_AVX2, MT_ADAMW_AVX512, MT_ADAMW_BEST } mt_adamw_impl;

typedef struct {
    float *f32;        /* the masters as fp32, or NULL when they are split */
    uint16_t *hi, *lo; /* split: the high halves (bf16 weights) and the low halves */
} mt_master;

static inline int mt_master_is_split(mt_master w) { return w.f32 == NULL; }

/* The masters from element i on. */
static inline mt_master mt_master_at(mt_master w, size_t i) {
    if (w.f32) return (mt_master){.f32 = w.f32 + i};
    return (mt_master){.hi = w.hi + i, .lo = w.lo + i};
}

/* n masters into fp32 dst, and from fp32 src; split ones are joined and split exactly, on the
 * OpenMP threads when n is large. */
void mt_master_read(mt_master w, size_t n, float *dst);
void mt_master_write(mt_master w, size_t n, const float *src);
/* The same with a chosen implementation, on the calling thread (tests, benchmarks). */
void mt_master_read_with(mt_adamw_impl impl, mt_master w, size_t n, float *dst);
void mt_master_write_with(mt_adamw_impl impl, mt_master w, size_t n, const float *src);

int mt_adamw_impl_supported(mt_adamw_impl impl);
const char *mt_adamw_impl_name(mt_adamw_impl impl);
/* The implementation MT_ADAMW_BEST stands for here, or impl itself where the CPU supports it. */
mt_adamw_impl mt_adamw_impl_resolve(mt_adamw_impl impl);

#endif
