#include "engine/store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/families.h"
#include "optim/adamw.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/memory.h"
#include "util/rng.h"

enum { PAGE = 4096 };

static int split_weights(mt_dtype weight_dtype) { return weight_dtype == MT_DTYPE_BF16; }

mt_store_bytes mt_store_size(const mt_layout *layout, mt_dtype weight_dtype, mt_moments_format moments) {
    int64_t n = layout->total_numel;
    return (mt_store_bytes){.weights = n * (int64_t)mt_dtype_size(weight_dtype),
                            .low = split_weights(weight_dtype) ? n * 2 : 0,
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
    if (s->low) touch_pages(s->low + at, 2, begin, count);
    else touch_pages((float *)s->weights + at, 4, begin, count);
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
    int64_t n = s->layout->total_numel;
    int64_t bytes = n * (s->low ? 2 : 4) + mt_moments_bytes(s->moments.format, (size_t)n);
    int nodes = mt_numa_node_count("/sys/devices/system/node/online");
    /* Worth a line where it takes time or where placement matters. */
    mt_log(bytes >= 1000000000 || nodes > 1 ? MT_LOG_INFO : MT_LOG_DEBUG,
           "host store: %.2f GB of %s and moments first touched in %.2f s by %d thread%s%s in the optimizer's "
           "split; %d NUMA node%s", (double)bytes / 1e9, s->low ? "the masters' low halves" : "fp32 masters",
           mt_now() - t0, job.threads, job.threads == 1 ? "" : "s",
           team && team->cores ? " pinned to the optimizer's cores" : "", nodes, nodes == 1 ? "" : "s");
}

mt_status mt_store_create_touched(mt_store *s, const mt_layout *layout, mt_backend *be, mt_moments_format moments,
                                  const mt_cpu_team *team) {
    memset(s, 0, sizeof *s);
    s->layout = layout;
    s->be = be;
    s->weight_dtype = be->ops->weight_dtype;
    size_t n = (size_t)layout->total_numel;
    int split = split_weights(s->weight_dtype);
    /* The halves the device copies: pinned (mt_host_alloc); fp32 weights are the cpu backend's, which
     * reads them where they are: pages, first touched below as the masters they are. */
    s->weights = split ? mt_host_alloc(be, n * 2, "the masters' high halves (the bf16 weights)")
                       : mt_pages_alloc(n * 4, "fp32 master weights");
    if (s->weights && split) s->low = mt_pages_alloc(n * 2, "the masters' low halves");
    if (!s->weights || (split && !s->low) || mt_moments_create(&s->moments, moments, n) != MT_OK) {
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
    size_t n = (size_t)layout->total_numel;
    /* As mt_store_create_touched allocates them, which mt_store_free undoes. */
    s->weights = split_weights(s->weight_dtype) ? mt_host_alloc(be, n * 2, "working weights (bf16)")
                                                : mt_pages_alloc(n * 4, "working weights (fp32)");
    if (s->weights) return MT_OK;
    mt_status rc = mt_fail_context(MT_ERR_NOMEM, "working weights for %lld parameters", (long long)layout->total_numel);
    mt_store_free(s);
    return rc;
}

void mt_store_free(mt_store *s) {
    int split = split_weights(s->weight_dtype);
    if (split && s->be && s->weights) mt_host_free(s->be, s->weights);
    if (!split && s->layout) mt_pages_free(s->weights, (size_t)s->layout->total_numel * 4);
    if (s->layout) mt_pages_free(s->low, (size_t)s->layout->total_numel * 2);
    mt_moments_free(&s->moments);
    memset(s, 0, sizeof *s);
}

void *mt_store_unit_weights(const mt_store *s, int u) {
    return (char *)s->weights + s->layout->units[u].offset * (int64_t)mt_dtype_size(s->weight_dtype);
}

mt_master mt_store_masters(const mt_store *s, int64_t at) {
    if (!s->low) return (mt_master){.f32 = (float *)s->weights + at};
    return (mt_master){.hi = (uint16_t *)s->weights + at, .lo = s->low + at};
}

void mt_store_read_masters(const mt_store *s, int64_t at, size_t n, float *dst) {
    mt_master_read(mt_store_masters(s, at), n, dst);
}

void mt_store_write_masters(mt_store *s, int64_t at, size_t n, const float *src) {
    mt_master_write(mt_store_masters(s, at), n, src);
}

/* Each run of RNG_CHUNK elements of a tensor has its own generator, seeded from (seed, tensor,
 * chunk), so that the weights are the same whatever the number of threads. */
enum { RNG_CHUNK = 1 << 16 };

/* Chunk c of tensor i (at master element `at`, count elements in all), through a buffer on the
 * stack. */
static void init_chunk(mt_store *s, int i, int64_t at, int64_t count, int64_t c, uint64_t seed) {
    enum { PIECE = 4096 };
    float buf[PIECE];
    const mt_tensor *t = &s->layout->tensors[i];
    /* A (1 + w) norm starts at 1 as the others do: its weight at 0. */
    float norm = mt_model_spec_of(&s->layout->cfg).norm_unit_offset ? 0.0f : 1.0f;
    int is_norm = mt_tensor_is_norm(t->kind);
    int is_gain = mt_tensor_role_class(t->kind) == MT_ROLE_GAIN;
    int is_bias = mt_tensor_role_class(t->kind) == MT_ROLE_BIAS;
    mt_rng rng = {seed ^ ((uint64_t)i << 40) ^ (uint64_t)c * 0x9e3779b97f4a7c15ull};
    int64_t end = (c + 1) * RNG_CHUNK < count ? (c + 1) * RNG_CHUNK : count;
    for (int64_t j = c * RNG_CHUNK; j < end; j += PIECE) {
        int64_t k, piece = end - j < PIECE ? end - j : PIECE;
        for (k = 0; k < piece; k++)
            buf[k] = is_norm ? norm : is_gain ? 1.0f : is_bias ? 0.0f : (float)(0.02 * mt_rng_normal(&rng));
        mt_master_write_with(MT_ADAMW_BEST, mt_store_masters(s, at + j), (size_t)piece, buf);
    }
}

void mt_store_init_random(mt_store *s, uint64_t seed) {
    const mt_layout *lay = s->layout;
    size_t n = (size_t)lay->total_numel;
    /* The layout's padding between tensors stays zero. */
    mt_zero_parallel(s->weights, n * mt_dtype_size(s->weight_dtype));
    if (s->low) mt_zero_parallel(s->low, n * 2);
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        int64_t at = lay->units[t->unit].offset + t->offset, count = (int64_t)t->rows * t->cols;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < (count + RNG_CHUNK - 1) / RNG_CHUNK; c++) init_chunk(s, i, at, count, c, seed);
    }
}
