#include "gpu_harness.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "util/bf16.h"

void gpu_open(gpu *g) {
    memset(g, 0, sizeof *g);
    mt_status status = mt_backend_cuda_create(&g->be, 0);
    cr_assert_eq(status, MT_OK, "cuda backend: %s", mt_error());
    g->s = mt_stream_create(g->be);
    g->done = mt_event_create(g->be);
    cr_assert(g->s && g->done, "stream or event: %s", mt_error());
}

void gpu_close(gpu *g) {
    for (int i = 0; i < g->allocation_count; i++) mt_dev_free(g->be, g->allocations[i]);
    mt_event_destroy(g->be, g->done);
    mt_stream_destroy(g->be, g->s);
    mt_backend_destroy(g->be);
}

void gpu_sync(gpu *g) {
    mt_event_record(g->be, g->done, g->s);
    mt_event_sync(g->be, g->done);
    mt_status status = mt_backend_check(g->be);
    cr_assert_eq(status, MT_OK, "device error: %s", mt_error());
}

void *gpu_alloc(gpu *g, size_t bytes) {
    cr_assert_lt(g->allocation_count, 64, "too many test allocations");
    void *p = mt_dev_alloc(g->be, bytes, "a test buffer");
    cr_assert(p, "%s", mt_error());
    mt_zero_async(g->be, p, bytes, g->s);
    g->allocations[g->allocation_count++] = p;
    return p;
}

void *gpu_put_bf16(gpu *g, float *host, size_t count) {
    uint16_t *staged = malloc(count * 2 + 2);
    for (size_t i = 0; i < count; i++) {
        staged[i] = mt_f32_to_bf16(host[i]);
        host[i] = mt_bf16_to_f32(staged[i]);
    }
    void *dev = gpu_alloc(g, count * 2);
    mt_copy_async(g->be, dev, staged, count * 2, g->s);
    gpu_sync(g);
    free(staged);
    return dev;
}

void gpu_get_bf16(gpu *g, float *host, const void *dev, size_t count) {
    uint16_t *staged = malloc(count * 2 + 2);
    mt_copy_async(g->be, staged, dev, count * 2, g->s);
    gpu_sync(g);
    for (size_t i = 0; i < count; i++) host[i] = mt_bf16_to_f32(staged[i]);
    free(staged);
}

void gpu_get_f32(gpu *g, float *host, const void *dev, size_t count) {
    mt_copy_async(g->be, host, dev, count * 4, g->s);
    gpu_sync(g);
}

void fill_random(float *x, size_t count, float scale, unsigned *seed) {
    for (size_t i = 0; i < count; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = scale * ((float)(*seed >> 8) / 8388608.0f - 1.0f);
    }
}
