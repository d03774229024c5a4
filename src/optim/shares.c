#include "optim/shares.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void mt_share_of(size_t n, size_t granule, int t, int nt, size_t *begin, size_t *count) {
    size_t granules = (n + granule - 1) / granule;
    size_t per_thread = (granules + (size_t)nt - 1) / (size_t)nt * granule;
    *begin = (size_t)t * per_thread;
    *count = *begin >= n ? 0 : n - *begin < per_thread ? n - *begin : per_thread;
}

/* A share's next unit and its end, a cache line each so that the threads' cursors do not share one. */
typedef struct {
    alignas(64) atomic_size_t next;
    size_t end;
} cursor;

/* Pieces of share s until it is taken. */
static void drain(cursor *s, size_t piece, mt_share_fn fn, void *ctx) {
    for (;;) {
        size_t b = atomic_fetch_add_explicit(&s->next, piece, memory_order_relaxed);
        if (b >= s->end) return;
        fn(ctx, b, b + piece < s->end ? b + piece : s->end);
    }
}

static void alone(size_t n, size_t piece, mt_share_fn fn, void *ctx) {
    for (size_t b = 0; b < n; b += piece) fn(ctx, b, b + piece < n ? b + piece : n);
}

enum { MAX_ON_STACK = 64 };

void mt_shares_run(size_t n, size_t granule, size_t piece, int threads, mt_share_fn fn, void *ctx) {
    if (n == 0) return;
    cursor on_stack[MAX_ON_STACK], *shares = on_stack;
    if (threads < 2 ||
        (threads > MAX_ON_STACK && !(shares = aligned_alloc(alignof(cursor), (size_t)threads * sizeof *shares)))) {
        alone(n, piece, fn, ctx); /* one thread (or no memory for the cursors): the same bits */
        return;
    }
    for (int t = 0; t < threads; t++) {
        size_t begin, count;
        mt_share_of(n, granule, t, threads, &begin, &count);
        atomic_init(&shares[t].next, begin);
        shares[t].end = begin + count;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        /* every thread goes round all the shares, its own first: should the runtime give fewer
         * threads than asked, the missing ones' shares are taken all the same */
        int t = omp_get_thread_num();
        for (int k = 0; k < threads; k++) drain(&shares[(t + k) % threads], piece, fn, ctx);
    }
#else
    for (int t = 0; t < threads; t++) drain(&shares[t], piece, fn, ctx);
#endif
    if (shares != on_stack) free(shares);
}
