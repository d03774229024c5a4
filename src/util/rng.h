/* A small, fast, seedable generator whose whole state is one integer (so checkpoints can save
 * it): splitmix64. Not for cryptography. */
#ifndef MT_UTIL_RNG_H
#define MT_UTIL_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} mt_rng;

static inline uint64_t mt_rng_next(mt_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double mt_rng_uniform(mt_rng *r) { return (mt_rng_next(r) >> 11) * 0x1.0p-53; }

/* Standard normal (Box-Muller; one of the pair is discarded to keep the state a single word). */
static inline double mt_rng_normal(mt_rng *r) {
    double u1 = mt_rng_uniform(r), u2 = mt_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

#endif
