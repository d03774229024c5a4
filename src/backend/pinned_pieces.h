/* Pinned host memory of tens of gigabytes (the working weights: 30 GB at 14B, 66 GB at 32B; the
 * gradients waiting on the host; the host-kept activation checkpoints), registered in pieces.
 *
 * One cudaHostAlloc of 64 GB is one driver call that faults in, pins and maps every page while it
 * holds the driver (and the process's address space), single-threaded: on a VM whose memory grows
 * as it is touched that is minutes in which no other CUDA call of the process runs, and some
 * kernels and drivers cap what one pinning may take. Instead the range is mapped anonymously
 * (transparent huge pages where offered), first touched by all the OpenMP threads, and then
 * registered MT_PIN_PIECE_BYTES at a time; freed by unregistering each piece. A failure in any
 * piece unregisters the pieces before it and unmaps the range.
 *
 * The driver promises a copy only within one registered range (or none), so copies that touch
 * such an allocation are cut at its piece boundaries (mt_pinned_run). The registration itself is
 * the backend's (mt_pin_ops): CUDA's cudaHostRegister, or a test's. */
#ifndef MT_BACKEND_PINNED_PIECES_H
#define MT_BACKEND_PINNED_PIECES_H

#include <stddef.h>

#include "util/status.h"

/* 1 GiB: a registration of it takes a fraction of a second (the driver is held that long, not
 * for the whole allocation), it is far below any cap on one pinning, and a 64 GiB range is only
 * 64 pieces to look up when a copy is cut. */
#define MT_PIN_PIECE_BYTES ((size_t)1 << 30)
/* Below this, one cudaHostAlloc is simpler and quick (staging, small checkpoints). */
#define MT_PIN_PIECES_MIN_BYTES ((size_t)256 << 20)

typedef struct {
    /* Registers [p, p + bytes); on failure returns its status with mt_fail's message set. */
    mt_status (*pin)(void *ctx, void *p, size_t bytes);
    /* Unregisters what pin registered at p. */
    void (*unpin)(void *ctx, void *p);
    void *ctx;
} mt_pin_ops;

/* The number of pieces of `piece` bytes (the last one shorter) that cover `bytes`. */
size_t mt_pin_piece_count(size_t bytes, size_t piece);

/* `bytes` of zeroed, touched memory, registered by `ops` `piece` bytes at a time (0:
 * MT_PIN_PIECE_BYTES; a multiple of the page size), the last piece to the end of its page;
 * `what` names it in messages and the log. NULL with mt_fail (naming what,
 * the bytes, the piece that failed and the driver's error) when any step fails, nothing left
 * registered or mapped. */
void *mt_pinned_alloc(size_t bytes, size_t piece, const char *what, const mt_pin_ops *ops);

/* Unregisters and unmaps an allocation of mt_pinned_alloc and returns 1; 0 (nothing done) when p
 * is not one. */
int mt_pinned_free(void *p, const mt_pin_ops *ops);

/* The bytes from p, at most n, that lie in one piece of one allocation of mt_pinned_alloc (n
 * when p lies in none): a copy of n bytes at p goes as copies of these runs. */
size_t mt_pinned_run(const void *p, size_t n);

#endif
