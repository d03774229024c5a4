/* Times megatrain's CPU AdamW (each kernel, each thread count, on split masters: the bf16 weights
 * the device reads are the masters' high halves, optim/master.h) over one
 * large parameter array, beside STREAM-style loops that measure what the host's memory gives in
 * the same run. One line per measurement, key=value fields, for bench/adamw/run.sh to tabulate.
 *
 *   bench_adamw [--params N] [--threads 1,2,4,8,16] [--impl ref,avx2,avx512]
 *               [--parts full,masters,moments] [--iters K]
 *
 * Each time is the best of K timed runs after one untimed warm-up run (STREAM's convention).
 * Bytes counted: each part's own (mt_adamw_part_bytes: the whole update 28 per parameter, reading
 * both halves of the masters, m, v, grad and writing the halves, m, v; the masters' part after the
 * norm 20, the moments' 20); copy 8, triad 12 and in-place axpy 12 per element, not counting the
 * extra read a cached store of copy and triad makes (STREAM's convention too). A part's G params/s
 * beside its GB/s says whether the host's memory or its arithmetic sets the pace: parts of
 * different bytes at one element rate are bound by the arithmetic. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw.h"
#include "util/clock.h"

typedef struct {
    size_t params;
    int threads[32], n_threads;
    mt_adamw_impl impls[3];
    int n_impls;
    mt_adamw_part parts[3];
    int n_parts;
    int iters;
} options;

static void *alloc_or_die(size_t bytes, const char *what) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_adamw: cannot allocate %zu bytes for %s\n", bytes, what);
        exit(1);
    }
    return p;
}

static void usage_and_exit(void) {
    fprintf(stderr, "usage: bench_adamw [--params N] [--threads 1,2,4,...] "
                    "[--impl ref,avx2,avx512] [--parts full,masters,moments] [--iters K]\n");
    exit(2);
}

static int parse_impl(const char *name, mt_adamw_impl *impl) {
    static const mt_adamw_impl all[] = {MT_ADAMW_REF, MT_ADAMW_AVX2, MT_ADAMW_AVX512};
    for (int k = 0; k < 3; k++)
        if (strcmp(name, mt_adamw_impl_name(all[k])) == 0) return *impl = all[k], 1;
    return 0;
}

/* The parts the engine runs most: the whole update (no clipping, or ahead of the norm), and a
 * clipped step's two passes after the norm. */
static const struct {
    mt_adamw_part part;
    const char *name;
} part_names[] = {{MT_ADAMW_FULL, "full"}, {MT_ADAMW_MASTERS, "masters"}, {MT_ADAMW_MOMENTS, "moments"}};

static int parse_part(const char *name, mt_adamw_part *part) {
    for (size_t k = 0; k < sizeof part_names / sizeof *part_names; k++)
        if (strcmp(name, part_names[k].name) == 0) return *part = part_names[k].part, 1;
    return 0;
}

static const char *part_name(mt_adamw_part part) {
    for (size_t k = 0; k < sizeof part_names / sizeof *part_names; k++)
        if (part_names[k].part == part) return part_names[k].name;
    return "?";
}

static options parse_options(int argc, char **argv) {
    options o = {.params = (size_t)256 << 20, .threads = {1, 2, 4, 8, 16}, .n_threads = 5,
                 .impls = {MT_ADAMW_REF, MT_ADAMW_AVX2, MT_ADAMW_AVX512}, .n_impls = 3,
                 .parts = {MT_ADAMW_FULL}, .n_parts = 1, .iters = 5};
    for (int i = 1; i + 1 < argc; i += 2) {
        char *value = argv[i + 1], *tok, *save = NULL;
        if (strcmp(argv[i], "--params") == 0) {
            o.params = strtoull(value, NULL, 10);
        } else if (strcmp(argv[i], "--iters") == 0) {
            o.iters = atoi(value);
        } else if (strcmp(argv[i], "--threads") == 0) {
            o.n_threads = 0;
            for (tok = strtok_r(value, ",", &save); tok && o.n_threads < 32;
                 tok = strtok_r(NULL, ",", &save))
                o.threads[o.n_threads++] = atoi(tok);
        } else if (strcmp(argv[i], "--impl") == 0) {
            o.n_impls = 0;
            for (tok = strtok_r(value, ",", &save); tok && o.n_impls < 3;
                 tok = strtok_r(NULL, ",", &save))
                if (!parse_impl(tok, &o.impls[o.n_impls++])) usage_and_exit();
        } else if (strcmp(argv[i], "--parts") == 0) {
            o.n_parts = 0;
            for (tok = strtok_r(value, ",", &save); tok && o.n_parts < 3; tok = strtok_r(NULL, ",", &save))
                if (!parse_part(tok, &o.parts[o.n_parts++])) usage_and_exit();
        } else {
            usage_and_exit();
        }
    }
    if (argc % 2 == 0 || o.params == 0 || o.iters < 1 || o.n_threads == 0 || o.n_parts == 0) usage_and_exit();
    return o;
}

/* Plausible optimizer state, written by the threads of a static split so that first touch
 * places each page near the thread that will use it. */
static void init_state(float *master, float *m, float *v, float *grad, size_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = (float)(i % 1021) / 1021.0f - 0.5f;
        master[i] = x;
        m[i] = 1e-3f * x;
        v[i] = 1e-6f * (x * x + 0.01f);
        grad[i] = 1e-2f * ((float)(i % 977) / 977.0f - 0.5f);
    }
}

/* Best-of-`iters` seconds of one memory loop. */
typedef enum { LOOP_COPY, LOOP_TRIAD, LOOP_AXPY } memory_loop;

static double time_memory_loop(memory_loop loop, float *a, const float *b, const float *c,
                               size_t n, int threads, int iters) {
    double best = 1e30;
    for (int it = 0; it <= iters; it++) {
        double t0 = mt_now();
        if (loop == LOOP_COPY) {
#pragma omp parallel for num_threads(threads) schedule(static)
            for (size_t i = 0; i < n; i++) a[i] = b[i];
        } else if (loop == LOOP_TRIAD) {
#pragma omp parallel for num_threads(threads) schedule(static)
            for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        } else {
#pragma omp parallel for num_threads(threads) schedule(static)
            for (size_t i = 0; i < n; i++) a[i] = a[i] + 1e-6f * b[i];
        }
        double t = mt_now() - t0;
        if (it > 0 && t < best) best = t; /* run 0 is the warm-up */
    }
    return best;
}

static double time_adamw(mt_adamw_impl impl, mt_adamw_part part, mt_master w, float *m, float *v, const float *grad,
                         size_t n, int threads, int iters) {
    mt_adamw_params p = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .step = 1, .grad_scale = 1.0f};
    double best = 1e30;
    for (int it = 0; it <= iters; it++, p.step++) {
        double t0 = mt_now();
        mt_adamw_update_with(impl, part, &p, 1, w, m, v, grad, n, threads);
        double t = mt_now() - t0;
        if (it > 0 && t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    options o = parse_options(argc, argv);
    size_t n = o.params, bytes = n * sizeof(float);
    int max_threads = 1;
    for (int t = 0; t < o.n_threads; t++)
        if (o.threads[t] > max_threads) max_threads = o.threads[t];

    float *master = alloc_or_die(bytes, "master"), *m = alloc_or_die(bytes, "m");
    float *v = alloc_or_die(bytes, "v"), *grad = alloc_or_die(bytes, "grad");
    uint16_t *halves = alloc_or_die(2 * n * sizeof(uint16_t), "the masters' halves");
    init_state(master, m, v, grad, n, max_threads);
    mt_master w = {.hi = halves, .lo = halves + n};
    mt_master_write(w, n, master);
    /* The memory loops get arrays of their own, as large as the optimizer's. */
    float *a = alloc_or_die(bytes, "stream a"), *b = alloc_or_die(bytes, "stream b");
    float *c = alloc_or_die(bytes, "stream c");
    init_state(a, b, c, c, n, max_threads);

    printf("# bench_adamw params=%zu iters=%d omp_max_threads=%d\n", n, o.iters,
           omp_get_max_threads());
    static const struct { memory_loop loop; const char *name; double bytes; } loops[] = {
        {LOOP_COPY, "copy", 8}, {LOOP_TRIAD, "triad", 12}, {LOOP_AXPY, "axpy_inplace", 12}};
    for (int t = 0; t < o.n_threads; t++) {
        int threads = o.threads[t];
        for (int l = 0; l < 3; l++) {
            double s = time_memory_loop(loops[l].loop, a, b, c, n, threads, o.iters);
            printf("kind=stream impl=%s threads=%d seconds=%.6f gb_per_s=%.2f\n", loops[l].name,
                   threads, s, loops[l].bytes * (double)n / s / 1e9);
        }
        for (int k = 0; k < o.n_impls; k++) {
            if (!mt_adamw_impl_supported(o.impls[k])) continue;
            for (int q = 0; q < o.n_parts; q++) {
                double s = time_adamw(o.impls[k], o.parts[q], w, m, v, grad, n, threads, o.iters);
                double bytes = mt_adamw_part_bytes(o.parts[q], sizeof(float));
                printf("kind=adamw impl=%s part=%s threads=%d seconds=%.6f gparams_per_s=%.3f "
                       "gb_per_s=%.2f\n",
                       mt_adamw_impl_name(o.impls[k]), part_name(o.parts[q]), threads, s, (double)n / s / 1e9,
                       bytes * (double)n / s / 1e9);
            }
        }
        fflush(stdout);
    }
    free(master), free(m), free(v), free(grad), free(halves), free(a), free(b), free(c);
    return 0;
}
