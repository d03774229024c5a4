/* A clipped step's masters' pass after the norm beside the device's copies of the weights it writes
 * (issue 25): what the next forward waits for, and what the copies cost it.
 *
 *   bench_after_norm [--params N] [--piece P] [--threads T] [--iters K]
 *
 * Split masters, fp32 m, v and gradient in pinned host memory (as the store allocates them). The
 * pass (MASTERS: 16 bytes a parameter read, 4 written) runs P elements at a time over N, with a clip
 * coefficient of 0.5; per mode, after each piece:
 *   masters  no copy
 *   cold     the device copies P high halves of another array (the same bytes, none in the cache):
 *            the engine's clipped step, a block's copy after its whole pass
 *   behind   the device copies the piece's own high halves, just written (still in the cache)
 * Modes interleave round by round (round 0 warms up); each line gives the pass's seconds (the CPU's)
 * and those until the last copy is done, and the pass's rate in parameters and in its bytes. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "optim/adamw.h"
#include "util/clock.h"
#include "util/status.h"

typedef enum { MODE_MASTERS, MODE_COLD, MODE_BEHIND, MODE_COUNT } mode;
static const char *const mode_names[] = {"masters", "cold", "behind"};

static void *host_or_die(mt_backend *be, size_t bytes, const char *what) {
    void *p = mt_host_alloc(be, bytes, what);
    if (!p) {
        fprintf(stderr, "bench_after_norm: %s\n", mt_error());
        exit(1);
    }
    return p;
}

static void usage_and_exit(void) {
    fprintf(stderr, "usage: bench_after_norm [--params N] [--piece P] [--threads T] [--iters K]\n");
    exit(2);
}

int main(int argc, char **argv) {
    size_t n = (size_t)1 << 30, piece = (size_t)4 << 20;
    int threads = omp_get_max_threads() > 1 ? omp_get_max_threads() - 1 : 1, iters = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--params")) n = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--piece")) piece = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else usage_and_exit();
    }
    if (argc % 2 == 0 || !n || !piece || threads < 1 || iters < 1) usage_and_exit();
    mt_backend *be;
    if (mt_backend_cuda_create(&be, 0) != MT_OK) {
        fprintf(stderr, "bench_after_norm: needs the CUDA backend: %s\n", mt_error());
        return 1;
    }
    uint16_t *halves = host_or_die(be, 2 * n * sizeof(uint16_t), "the masters' halves");
    uint16_t *other = host_or_die(be, n * sizeof(uint16_t), "the cold high halves");
    float *m = host_or_die(be, n * sizeof(float), "m"), *v = host_or_die(be, n * sizeof(float), "v");
    float *grad = host_or_die(be, n * sizeof(float), "grad");
    void *dst = mt_dev_alloc(be, piece * sizeof(uint16_t), "the copies' destination");
    if (!dst) {
        fprintf(stderr, "bench_after_norm: %s\n", mt_error());
        return 1;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = (float)(i % 1021) / 1021.0f - 0.5f;
        uint32_t bits;
        memcpy(&bits, &x, sizeof bits);
        halves[i] = (uint16_t)(bits >> 16), halves[n + i] = (uint16_t)bits, other[i] = halves[i];
        m[i] = 1e-3f * x, v[i] = 1e-6f * (x * x + 0.01f), grad[i] = 1e-2f * ((float)(i % 977) / 977.0f - 0.5f);
    }
    mt_stream *s = mt_stream_create(be);
    mt_event *done = mt_event_create(be);
    mt_adamw_params p = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 1,
                         .grad_scale = 0.5f};
    printf("# bench_after_norm params=%zu piece=%zu threads=%d iters=%d\n", n, piece, threads, iters);
    for (int it = 0; it <= iters; it++) {
        for (int md = 0; md < MODE_COUNT; md++, p.step++) {
            double t0 = mt_now();
            for (size_t at = 0; at < n; at += piece) {
                size_t count = n - at < piece ? n - at : piece;
                mt_master w = {.hi = halves + at, .lo = halves + n + at};
                mt_adamw_update_parallel(MT_ADAMW_MASTERS, &p, 1, w, m + at, v + at, grad + at, count, threads);
                if (md != MODE_MASTERS)
                    mt_copy_async(be, dst, md == MODE_BEHIND ? halves + at : other + at, count * sizeof(uint16_t), s);
            }
            double pass = mt_now() - t0;
            mt_event_record(be, done, s);
            mt_event_sync(be, done);
            double total = mt_now() - t0;
            double bytes = mt_adamw_part_bytes(MT_ADAMW_MASTERS, sizeof(float));
            if (it > 0)
                printf("mode=%s round=%d pass_s=%.4f total_s=%.4f gparams_per_s=%.3f pass_gb_per_s=%.1f\n",
                       mode_names[md], it, pass, total, (double)n / pass / 1e9, bytes * (double)n / pass / 1e9);
            fflush(stdout);
        }
    }
    mt_event_destroy(be, done);
    mt_stream_destroy(be, s);
    mt_dev_free(be, dst);
    mt_host_free(be, halves), mt_host_free(be, other);
    mt_host_free(be, m), mt_host_free(be, v), mt_host_free(be, grad);
    mt_backend_destroy(be);
    return 0;
}
