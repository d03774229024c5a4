/* Work shares for the host optimizer's threads: each thread starts on its own share, the part of
 * the range the store's first touch gave it (on a NUMA host, its own pages), in pieces taken from
 * the front; a thread done with its share takes pieces from the others' shares, so that a thread
 * slowed by something else (another thread on its core, a hypervisor that runs its vCPU less) does
 * not hold the whole update back. The work is elementwise, so who takes what changes no bit. */
#ifndef MT_OPTIM_SHARES_H
#define MT_OPTIM_SHARES_H

#include <stddef.h>

/* Thread t of nt's share of n units in whole granules: [*begin, *begin + *count) (count 0: none). */
void mt_share_of(size_t n, size_t granule, int t, int nt, size_t *begin, size_t *count);

/* Runs fn(ctx, begin, end) over [0, n) on `threads` threads (the calling thread one of them), each
 * piece at most `piece` units and whole granules but for the range's end; piece is a multiple of
 * granule. */
typedef void (*mt_share_fn)(void *ctx, size_t begin, size_t end);
void mt_shares_run(size_t n, size_t granule, size_t piece, int threads, mt_share_fn fn, void *ctx);

#endif
