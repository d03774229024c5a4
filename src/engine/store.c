#include "engine/store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "optim/adamw.h"
#include "util/bf16.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/memory.h"
#include "util/rng.h"

enum { PAGE = 4096 };

mt_store_bytes mt_store_size(const mt_layout *layout, mt_dtype weight_dtype, mt_moments_format moments) {
    int64_t n = layout->total_numel;
    return (mt_store_bytes){.weights = n * (int64_t)mt_dtype_size(weight_dtype),
                            .master = n * 4,
                            .moments = mt_moments_bytes(moments, (size_t)n)};
}

mt_status mt_store_create(mt_store *s, const mt_layout *layout, mt_backend *be) {
    return mt_store_create_with_moments(s, layout, be, MT_MOMENTS_F32);
}

mt_status mt_store_create_with_moments(mt_store *s, const mt_layout *layout, mt_backend *be,
                                       mt_moments_format moments) {
    return mt_store_create_touched(s, layout, be, moments, NULL);
}

/* ---- the first touch ---- */

typedef struct {
    mt_store *s;
    const mt_cpu_team *team;
    int threads;
} first_touch;

/* Writes a zero into every page of elements [begin, begin + count) of `size` bytes at base. */
static void touch_pages(void *base, size_t size, size_t begin, size_t count) {
    if (!count) return;
    volatile char *p = (char *)base + begin * size, *last = (char *)base + (begin + count) * size - 1;
    for (; p < last; p += PAGE) *p = 0;
    *last = 0;
}

static void touch_share(mt_store *s, size_t at, size_t n, int t, int nt) {
    size_t begin, count, msize = mt_moments_value_size(s->moments.format);
    mt_adamw_share(n, t, nt, &begin, &count);
    touch_pages(s->master + at, 4, begin, count);
    touch_pages((char *)s->moments.m + at * msize, msize, begin, count);
    touch_pages((char *)s->moments.v + at * msize, msize, begin, count);
}

/* On a thread of its own, so that the team's pinning stays with its threads, which end with it. */
static void *first_touch_main(void *arg) {
    first_touch *job = arg;
    const mt_layout *lay = job->s->layout;
#ifdef _OPENMP
    if (job->team && job->team->cores) {
#pragma omp parallel num_threads(job->threads)
        if (mt_cpu_pin_self(job->team->cores[omp_get_thread_num()]) != MT_OK) mt_log_debug("%s", mt_error());
    }
#endif
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        size_t at = (size_t)(lay->units[t->unit].offset + t->offset), n = (size_t)t->rows * (size_t)t->cols;
#ifdef _OPENMP
#pragma omp parallel num_threads(mt_adamw_threads(n, job->threads))
        touch_share(job->s, at, n, omp_get_thread_num(), omp_get_num_threads());
#else
        touch_share(job->s, at, n, 0, 1);
#endif
    }
    return NULL;
}

static void touch_first(mt_store *s, const mt_cpu_team *team) {
    first_touch job = {.s = s, .team = team, .threads = team ? team->threads : 1};
#ifdef _OPENMP
    if (!team) job.threads = omp_get_max_threads();
#endif
    double t0 = mt_now();
    pthread_t thread;
    if (pthread_create(&thread, NULL, first_touch_main, &job) == 0) pthread_join(thread, NULL);
    else first_touch_main(&job); /* the caller's threads then: still the split, only unpinned */
    int64_t bytes = s->layout->total_numel * 4 + mt_moments_bytes(s->moments.format, (size_t)s->layout->total_numel);
    int nodes = mt_numa_node_count("/sys/devices/system/node/online");
    /* Worth a line where it takes time or where placement matters. */
    mt_log(bytes >= 1000000000 || nodes > 1 ? MT_LOG_INFO : MT_LOG_DEBUG,
           "host store: %.2f GB of fp32 masters and moments first touched in %.2f s by %d thread%s%s in the "
           "optimizer's split; %d NUMA node%s", (double)bytes / 1e9, mt_now() - t0, job.threads,
           job.threads == 1 ? "" : "s", team && team->cores ? " pinned to the optimizer's cores" : "", nodes,
           nodes == 1 ? "" : "s");
}

mt_status mt_store_create_touched(mt_store *s, const mt_layout *layout, mt_backend *be, mt_moments_format moments,
                                  const mt_cpu_team *team) {
    memset(s, 0, sizeof *s);
    s->layout = layout;
    s->be = be;
    s->weight_dtype = be->ops->weight_dtype;
    size_t n = (size_t)layout->total_numel;
    s->weights = mt_host_alloc(be, n * mt_dtype_size(s->weight_dtype), "working weights");
    s->master = s->weights ? mt_pages_alloc(n * 4, "fp32 master weights") : NULL;
    if (!s->master || mt_moments_create(&s->moments, moments, n) != MT_OK) {
        mt_status rc = mt_fail_context(MT_ERR_NOMEM, "host parameter store for %zu parameters", n);
        mt_store_free(s);
        return rc;
    }
    touch_first(s, team);
    return MT_OK;
}

mt_status mt_store_create_weights(mt_store *s, const mt_layout *layout, mt_backend *be) {
    memset(s, 0, sizeof *s);
    s->layout = layout;
    s->be = be;
    s->weight_dtype = be->ops->weight_dtype;
    s->weights = mt_host_alloc(be, (size_t)layout->total_numel * mt_dtype_size(s->weight_dtype), "working weights");
    if (s->weights) return MT_OK;
    mt_status rc = mt_fail_context(MT_ERR_NOMEM, "working weights for %lld parameters", (long long)layout->total_numel);
    mt_store_free(s);
    return rc;
}

void mt_store_free(mt_store *s) {
    if (s->be && s->weights) mt_host_free(s->be, s->weights);
    if (s->layout) mt_pages_free(s->master, (size_t)s->layout->total_numel * 4);
    mt_moments_free(&s->moments);
    memset(s, 0, sizeof *s);
}

void *mt_store_unit_weights(const mt_store *s, int u) {
    return (char *)s->weights + s->layout->units[u].offset * (int64_t)mt_dtype_size(s->weight_dtype);
}

/* Each run of RNG_CHUNK elements of a tensor has its own generator, seeded from (seed, tensor,
 * chunk), so that the weights are the same whatever the number of threads. */
enum { RNG_CHUNK = 1 << 16 };

void mt_store_init_random(mt_store *s, uint64_t seed) {
    const mt_layout *lay = s->layout;
    mt_zero_parallel(s->master, (size_t)lay->total_numel * 4);
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        float *p = s->master + lay->units[t->unit].offset + t->offset;
        int64_t count = (int64_t)t->rows * t->cols;
        int is_norm = mt_tensor_is_norm(t->kind);
        int is_bias = t->kind == MT_T_BQ || t->kind == MT_T_BK || t->kind == MT_T_BV;
        if (is_norm || is_bias) {
            for (int64_t j = 0; j < count; j++) p[j] = is_norm ? 1.0f : 0.0f;
            continue;
        }
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < (count + RNG_CHUNK - 1) / RNG_CHUNK; c++) {
            mt_rng rng = {seed ^ ((uint64_t)i << 40) ^ (uint64_t)c * 0x9e3779b97f4a7c15ull};
            int64_t end = (c + 1) * RNG_CHUNK < count ? (c + 1) * RNG_CHUNK : count;
            for (int64_t j = c * RNG_CHUNK; j < end; j++) p[j] = (float)(0.02 * mt_rng_normal(&rng));
        }
    }
    mt_store_sync_weights(s);
}

void mt_store_sync_weights(mt_store *s) {
    size_t n = (size_t)s->layout->total_numel;
    if (s->weight_dtype == MT_DTYPE_F32) {
        memcpy(s->weights, s->master, n * 4);
        return;
    }
    uint16_t *w = s->weights;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) w[i] = mt_f32_to_bf16(s->master[i]);
}
