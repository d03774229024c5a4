#include "moe_check.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/bf16.h"

void moe_open(moe_dev *d, const char *gemm, int streams) {
    memset(d, 0, sizeof *d);
    char count[16];
    snprintf(count, sizeof count, "%d", streams);
    cr_assert_eq(gemm ? setenv("MT_MOE_GEMM", gemm, 1) : unsetenv("MT_MOE_GEMM"), 0);
    cr_assert_eq(streams ? setenv("MT_MOE_STREAMS", count, 1) : unsetenv("MT_MOE_STREAMS"), 0);
    mt_status status = mt_backend_cuda_create(&d->be, 0);
    cr_assert_eq(status, MT_OK, "cuda backend (MT_MOE_GEMM=%s, MT_MOE_STREAMS=%s): %s", gemm ? gemm : "(unset)",
                 streams ? count : "(unset)", mt_error());
    cr_assert(mt_backend_has_moe(d->be), "the cuda backend has no moe group");
    d->s = mt_stream_create(d->be);
    d->done = mt_event_create(d->be);
    cr_assert(d->s && d->done, "stream or event: %s", mt_error());
}

void moe_close(moe_dev *d) {
    for (int i = 0; i < d->count; i++) mt_dev_free(d->be, d->buffers[i]);
    mt_event_destroy(d->be, d->done);
    mt_stream_destroy(d->be, d->s);
    mt_backend_destroy(d->be);
}

void moe_sync(moe_dev *d, const char *what) {
    mt_event_record(d->be, d->done, d->s);
    mt_event_sync(d->be, d->done);
    mt_status status = mt_backend_check(d->be);
    cr_assert_eq(status, MT_OK, "%s: device error: %s", what, mt_error());
}

void *moe_zeros(moe_dev *d, size_t bytes) {
    cr_assert_lt(d->count, 96, "too many test buffers");
    void *p = mt_dev_alloc(d->be, bytes ? bytes : 1, "a moe test buffer");
    cr_assert(p, "%s", mt_error());
    mt_zero_async(d->be, p, bytes ? bytes : 1, d->s);
    moe_sync(d, "zeroing a buffer");
    d->buffers[d->count++] = p;
    return p;
}

static int act_is_bf16(const moe_dev *d) { return d->be->ops->act_dtype == MT_DTYPE_BF16; }

size_t moe_act_bytes(const moe_dev *d, size_t count) { return count * mt_dtype_size(d->be->ops->act_dtype); }

void *moe_put_act(moe_dev *d, float *host, size_t count) {
    if (!act_is_bf16(d)) return moe_put_f32(d, host, count);
    uint16_t *staged = malloc(count * 2 + 2);
    cr_assert(staged);
    for (size_t i = 0; i < count; i++) {
        staged[i] = mt_f32_to_bf16(host[i]);
        host[i] = mt_bf16_to_f32(staged[i]);
    }
    void *dev = moe_zeros(d, count * 2);
    mt_copy_async(d->be, dev, staged, count * 2, d->s);
    moe_sync(d, "an upload");
    free(staged);
    return dev;
}

void *moe_put_f32(moe_dev *d, const float *host, size_t count) {
    void *dev = moe_zeros(d, count * 4);
    mt_copy_async(d->be, dev, host, count * 4, d->s);
    moe_sync(d, "an upload");
    return dev;
}

void *moe_put_i32(moe_dev *d, const int32_t *host, size_t count) {
    void *dev = moe_zeros(d, count * 4);
    mt_copy_async(d->be, dev, host, count * 4, d->s);
    moe_sync(d, "an upload");
    return dev;
}

void moe_get_act(moe_dev *d, float *host, const void *dev, size_t count) {
    if (!act_is_bf16(d)) {
        moe_get_f32(d, host, dev, count);
        return;
    }
    uint16_t *staged = malloc(count * 2 + 2);
    cr_assert(staged);
    mt_copy_async(d->be, staged, dev, count * 2, d->s);
    moe_sync(d, "a download");
    for (size_t i = 0; i < count; i++) host[i] = mt_bf16_to_f32(staged[i]);
    free(staged);
}

void moe_get_f32(moe_dev *d, float *host, const void *dev, size_t count) {
    mt_copy_async(d->be, host, dev, count * 4, d->s);
    moe_sync(d, "a download");
}

void moe_get_i32(moe_dev *d, int32_t *host, const void *dev, size_t count) {
    mt_copy_async(d->be, host, dev, count * 4, d->s);
    moe_sync(d, "a download");
}

float *moe_floats(size_t count) {
    float *p = calloc(count ? count : 1, sizeof *p);
    cr_assert(p, "out of host memory for %zu floats", count);
    return p;
}

int32_t *moe_ints(size_t count) {
    int32_t *p = calloc(count ? count : 1, sizeof *p);
    cr_assert(p, "out of host memory for %zu ints", count);
    return p;
}

uint64_t moe_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void moe_fill(float *x, size_t count, float lo, float hi, uint64_t *state) {
    for (size_t i = 0; i < count; i++)
        x[i] = (float)(lo + (hi - lo) * ((double)(moe_next(state) >> 11) / 9007199254740992.0));
}

void moe_random_experts(int32_t *experts, int n, int k, int used, int skewed, uint64_t *state) {
    cr_assert(k <= used, "top %d of %d experts", k, used);
    double total = 0;
    for (int e = 0; e < used; e++) total += 1.0 / (e + 1);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int32_t e, again;
            do {
                double u = (double)(moe_next(state) >> 11) / 9007199254740992.0;
                if (skewed) {
                    double acc = 0;
                    for (e = 0; e < used - 1; e++) {
                        acc += 1.0 / (e + 1) / total;
                        if (u < acc) break;
                    }
                } else {
                    e = (int32_t)(u * used);
                }
                again = 0;
                for (int i = 0; i < j; i++) again |= experts[(size_t)t * k + i] == e;
            } while (again);
            experts[(size_t)t * k + j] = e;
        }
}

void moe_expect_close(const char *what, const char *the_case, const float *got, const float *want, size_t count,
                      int width, double tol) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < count; i++) {
        double e = (double)got[i] - want[i];
        diff += e * e;
        norm += (double)want[i] * want[i];
    }
    double rel = sqrt(diff / (norm > 0 ? norm : 1e-30));
    if (rel < tol) return;
    double bound = tol * sqrt(norm / (count ? count : 1));
    size_t first = count, worst = 0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (first == count && !(e <= bound)) first = i;
        if (!(e <= fabs((double)got[worst] - want[worst]))) worst = i;
    }
    if (first == count) first = worst;
    cr_expect_lt(rel, tol,
                 "%s (%s): [%zu x %d] off the CPU reference by %.3g (relative), more than %.3g; first element off by "
                 "more than %.3g: [%zu] = row %zu, column %zu: %.7g, the reference %.7g; the largest difference at row "
                 "%zu, column %zu: %.7g against %.7g",
                 what, the_case, count / (width ? width : 1), width, rel, tol, bound, first, first / width,
                 first % width, (double)got[first], (double)want[first], worst / width, worst % width,
                 (double)got[worst], (double)want[worst]);
}

void moe_expect_same_floats(const char *what, const char *the_case, const float *got, const float *want,
                            size_t count) {
    size_t i = 0;
    while (i < count && !memcmp(&got[i], &want[i], sizeof *got)) i++;
    cr_expect_eq(i, count, "%s (%s): element %zu of %zu is %.9g, expected %.9g (bitwise)", what, the_case, i, count,
                 (double)got[i % count], (double)want[i % count]);
}

void moe_expect_same_ids(const char *what, const char *the_case, const int32_t *got, const int32_t *want,
                         size_t count) {
    size_t i = 0;
    while (i < count && got[i] == want[i]) i++;
    if (i == count) return;
    char near[256];
    int used = 0;
    size_t lo = i > 3 ? i - 3 : 0;
    for (size_t j = lo; j < count && j < i + 4 && used < (int)sizeof near - 32; j++)
        used += snprintf(near + used, sizeof near - used, " [%zu] %d/%d", j, got[j], want[j]);
    cr_expect_eq(i, count, "%s (%s): element %zu of %zu is %d, the CPU reference %d (got/reference near it:%s)", what,
                 the_case, i, count, got[i], want[i], near);
}
