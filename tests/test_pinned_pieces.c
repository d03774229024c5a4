/* Pinned host memory in pieces (backend/pinned_pieces.h), with a recording stand-in for the
 * driver's registration: the pieces cover the range exactly and in order, a failure in the middle
 * unpins what was pinned and frees the range, freeing unpins every piece once, and copies are cut
 * at piece boundaries. tests/cuda/test_cuda_pinned.c runs the real registration on a GPU. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "backend/pinned_pieces.h"

#define PIECE ((size_t)64 << 10)
#define MAX_PIECES 16

typedef struct {
    char *pinned_at[MAX_PIECES];
    size_t pinned_bytes[MAX_PIECES];
    int pins, fail_at; /* fail_at: 1-based pin that fails; 0: none */
    char *unpinned_at[MAX_PIECES];
    int unpins;
} fake_driver;

static mt_status fake_pin(void *ctx, void *p, size_t bytes) {
    fake_driver *d = ctx;
    if (d->pins + 1 == d->fail_at) return mt_fail(MT_ERR_NOMEM, "fake driver: out of pinnable pages");
    d->pinned_at[d->pins] = p;
    d->pinned_bytes[d->pins++] = bytes;
    return MT_OK;
}

static void fake_unpin(void *ctx, void *p) {
    fake_driver *d = ctx;
    d->unpinned_at[d->unpins++] = p;
}

static mt_pin_ops ops_of(fake_driver *d) { return (mt_pin_ops){.pin = fake_pin, .unpin = fake_unpin, .ctx = d}; }

Test(pinned_pieces, piece_count_covers_the_bytes) {
    cr_assert_eq(mt_pin_piece_count(0, PIECE), 1, "an empty buffer is still one mapping");
    cr_assert_eq(mt_pin_piece_count(1, PIECE), 1);
    cr_assert_eq(mt_pin_piece_count(PIECE, PIECE), 1);
    cr_assert_eq(mt_pin_piece_count(PIECE + 1, PIECE), 2);
    cr_assert_eq(mt_pin_piece_count(64 * MT_PIN_PIECE_BYTES, MT_PIN_PIECE_BYTES), 64);
}

Test(pinned_pieces, pieces_cover_the_range_in_order_and_free_unpins_each_once) {
    fake_driver d = {0};
    mt_pin_ops ops = ops_of(&d);
    size_t bytes = 5 * PIECE + 100;
    char *p = mt_pinned_alloc(bytes, PIECE, "test buffer", &ops);
    cr_assert_not_null(p, "%s", mt_error());
    cr_assert_eq(d.pins, 6);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(d.pinned_at[i], p + (size_t)i * PIECE, "piece %d starts where the one before ended", i);
        cr_assert_eq(d.pinned_bytes[i], i < 5 ? PIECE : 4096, "piece %d's length (the last: its page)", i);
    }
    for (size_t i = 0; i < bytes; i += 4093) cr_assert_eq(p[i], 0, "mapped memory is zeroed");
    memset(p, 0x5a, bytes);
    cr_assert_eq(mt_pinned_free(p, &ops), 1);
    cr_assert_eq(d.unpins, 6);
    for (int i = 0; i < 6; i++) {
        int seen = 0;
        for (int j = 0; j < 6; j++) seen += d.unpinned_at[j] == d.pinned_at[i];
        cr_assert_eq(seen, 1, "piece %d unpinned %d times", i, seen);
    }
    cr_assert_eq(mt_pinned_free(p, &ops), 0, "a second free finds nothing");
    cr_assert_eq(d.unpins, 6);
}

Test(pinned_pieces, a_failure_in_the_middle_unpins_what_was_pinned) {
    fake_driver d = {.fail_at = 3};
    mt_pin_ops ops = ops_of(&d);
    char *p = mt_pinned_alloc(6 * PIECE, PIECE, "the working weights", &ops);
    cr_assert_null(p);
    const char *msg = mt_error();
    cr_assert(strstr(msg, "the working weights") && strstr(msg, "393216 bytes") && strstr(msg, "piece 3 of 6") &&
              strstr(msg, "out of pinnable pages"), "the message must name what, how much, where and why: %s", msg);
    cr_assert_eq(d.pins, 2);
    cr_assert_eq(d.unpins, 2, "both pieces pinned before the failure are unpinned");
    cr_assert(d.unpinned_at[0] == d.pinned_at[1] && d.unpinned_at[1] == d.pinned_at[0], "newest first");
    cr_assert_eq(mt_pinned_run(d.pinned_at[0], 3 * PIECE), 3 * PIECE, "nothing of it is left in the table");
}

Test(pinned_pieces, copies_are_cut_at_piece_boundaries) {
    fake_driver d = {0};
    mt_pin_ops ops = ops_of(&d);
    size_t bytes = 3 * PIECE + 4096;
    char *p = mt_pinned_alloc(bytes, PIECE, "test buffer", &ops);
    cr_assert_not_null(p, "%s", mt_error());
    cr_assert_eq(mt_pinned_run(p, bytes), PIECE, "the first piece");
    cr_assert_eq(mt_pinned_run(p, 100), 100, "a copy inside a piece is whole");
    cr_assert_eq(mt_pinned_run(p + PIECE - 10, 1000), 10, "to the boundary");
    cr_assert_eq(mt_pinned_run(p + PIECE, 5 * PIECE), PIECE, "the next piece");
    cr_assert_eq(mt_pinned_run(p + 3 * PIECE + 96, 1 << 20), 4000, "the short last piece, to the end of its page");
    char outside[64];
    cr_assert_eq(mt_pinned_run(outside, sizeof outside), sizeof outside, "ordinary memory is not cut");
    const char *before = (const char *)((uintptr_t)p - 10);
    cr_assert_eq(mt_pinned_run(before, 100), 10, "a copy running into the buffer stops at its start");
    /* Adding up the runs walks the whole buffer, boundary by boundary. */
    size_t at = 0;
    int runs = 0;
    while (at < bytes) at += mt_pinned_run(p + at, bytes - at), runs++;
    cr_assert_eq(at, bytes);
    cr_assert_eq(runs, 4);
    cr_assert_eq(mt_pinned_free(p, &ops), 1);
    cr_assert_eq(mt_pinned_run(p, bytes), bytes, "freed: no longer cut");
}
