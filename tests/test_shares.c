/* The host optimizer's work shares (optim/shares.h): every unit of the range is run exactly once,
 * in pieces of whole granules no larger than asked, each thread on its own share first; and a
 * thread held up on its share does not hold the rest back: the others take its pieces. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "optim/shares.h"

typedef struct {
    atomic_uchar *runs;    /* how many times each unit ran */
    atomic_int *by_thread; /* thread of the unit's run */
    size_t granule, piece, n;
    atomic_int bad_piece;
    int slow_thread; /* -1: none; else that thread sleeps 2 ms a piece */
} record;

static int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static void note(void *ctx, size_t begin, size_t end) {
    record *r = ctx;
    int t = thread_num();
    if (end <= begin || end - begin > r->piece || (begin % r->granule && begin != 0) ||
        (end % r->granule && end != r->n))
        atomic_store(&r->bad_piece, 1);
    for (size_t i = begin; i < end && i < r->n; i++) {
        atomic_fetch_add(&r->runs[i], 1);
        atomic_store(&r->by_thread[i], t);
    }
    if (t == r->slow_thread) nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
}

static record run(size_t n, size_t granule, size_t piece, int threads, int slow_thread) {
    record r = {.runs = calloc(n ? n : 1, 1), .by_thread = calloc(n ? n : 1, sizeof(atomic_int)), .granule = granule,
                .piece = piece, .n = n, .slow_thread = slow_thread};
    cr_assert(r.runs && r.by_thread);
    mt_shares_run(n, granule, piece, threads, note, &r);
    cr_assert_eq(atomic_load(&r.bad_piece), 0, "n %zu granule %zu piece %zu threads %d: a piece out of bounds", n,
                 granule, piece, threads);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&r.runs[i]), 1, "n %zu granule %zu threads %d: unit %zu ran %d times", n, granule,
                     threads, i, atomic_load(&r.runs[i]));
    return r;
}

static void drop(record *r) {
    free(r->runs);
    free(r->by_thread);
}

Test(shares, every_unit_runs_once_in_whole_granules) {
    size_t sizes[] = {0, 1, 63, 64, 65, 1000, 123457};
    int teams[] = {1, 2, 3, 7, 65 /* more than the cursors on the stack */};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (size_t j = 0; j < sizeof teams / sizeof *teams; j++) {
            record r = run(sizes[i], 64, 256, teams[j], -1);
            drop(&r);
        }
}

Test(shares, a_share_is_the_split_of_whole_granules) {
    size_t next = 0;
    for (int t = 0; t < 7; t++) {
        size_t begin, count;
        mt_share_of(1000, 64, t, 7, &begin, &count);
        if (!count) continue;
        cr_assert_eq(begin, next);
        cr_assert_eq(begin % 64, 0);
        next = begin + count;
    }
    cr_assert_eq(next, 1000);
}

#ifdef _OPENMP
/* Thread 0 (the caller) sleeps after each piece: with four threads and shares of 16 pieces, the
 * others finish theirs and take most of its share. */
Test(shares, the_others_take_a_slow_threads_pieces) {
    size_t n = 4 * 16 * 64, begin, count;
    record r = run(n, 64, 64, 4, 0);
    mt_share_of(n, 64, 0, 4, &begin, &count);
    size_t taken = 0;
    for (size_t i = begin; i < begin + count; i++) taken += atomic_load(&r.by_thread[i]) != 0;
    int team;
#pragma omp parallel num_threads(4)
#pragma omp single
    team = omp_get_num_threads();
    if (team > 1) cr_assert_gt(taken, count / 2, "others took %zu of the slow thread's %zu units", taken, count);
    drop(&r);
}
#endif
