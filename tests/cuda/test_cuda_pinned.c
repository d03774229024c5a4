/* Pinned host memory in pieces on a real GPU (backend/pinned_pieces.h): a buffer of a few GiB
 * from the backend's host_alloc is registered piece by piece, round-trips through the device in
 * one copy each way that crosses every piece boundary, and a registration that fails in the
 * middle leaves nothing registered. */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "gpu_harness.h"

/* Three pieces and a bit: every boundary inside the copy, the last piece short. */
#define BYTES (3 * MT_PIN_PIECE_BYTES + 12345)

static uint32_t pattern(size_t i) { return (uint32_t)(i * 2654435761u) ^ 0x9e3779b9u; }

Test(cuda, pinned_pieces_round_trip_through_the_device) {
    gpu g;
    gpu_open(&g);
    size_t words = BYTES / 4;
    uint32_t *host = mt_host_alloc(g.be, BYTES, "a test buffer of a few GiB");
    cr_assert_not_null(host, "%s", mt_error());
    for (size_t piece = 0; piece < 4; piece++) {
        struct cudaPointerAttributes attr;
        cr_assert_eq(cudaPointerGetAttributes(&attr, (char *)host + piece * MT_PIN_PIECE_BYTES), cudaSuccess);
        cr_assert_eq(attr.type, cudaMemoryTypeHost, "piece %zu is not registered with the driver", piece);
    }
    for (size_t i = 0; i < words; i++) host[i] = pattern(i);
    void *dev = gpu_alloc(&g, BYTES);
    mt_copy_async(g.be, dev, host, BYTES, g.s);
    gpu_sync(&g);
    memset(host, 0, BYTES);
    mt_copy_async(g.be, host, dev, BYTES, g.s);
    gpu_sync(&g);
    size_t wrong = 0;
    for (size_t i = 0; i < words; i++) wrong += host[i] != pattern(i);
    cr_assert_eq(wrong, 0, "%zu of %zu words came back wrong", wrong, words);
    /* A short copy across a boundary alone. */
    size_t at = MT_PIN_PIECE_BYTES - 64;
    memset((char *)host + at, 0xab, 128);
    mt_copy_async(g.be, dev, (char *)host + at, 128, g.s);
    gpu_sync(&g); /* the copy reads the host memory when it runs, not when it is issued */
    memset((char *)host + at, 0, 128);
    mt_copy_async(g.be, (char *)host + at, dev, 128, g.s);
    gpu_sync(&g);
    for (int i = 0; i < 128; i++) cr_assert_eq(((unsigned char *)host)[at + i], 0xab, "byte %d", i);
    mt_host_free(g.be, host);
    cr_assert_eq(mt_backend_check(g.be), MT_OK, "%s", mt_error());
    gpu_close(&g);
}

/* The real registration, failing its third piece. */
typedef struct {
    int pins, unpins;
    void *first;
} counting;

static mt_status pin_failing_third(void *ctx, void *p, size_t bytes) {
    counting *c = ctx;
    if (c->pins == 2) return mt_fail(MT_ERR_NOMEM, "refused by the test");
    if (!c->first) c->first = p;
    c->pins++;
    return mt_cuda_pin_ops()->pin(NULL, p, bytes);
}

static void unpin_counted(void *ctx, void *p) {
    counting *c = ctx;
    c->unpins++;
    if (p == c->first) { /* still mapped here: the driver must know it until this call, not after */
        struct cudaPointerAttributes attr;
        cr_assert_eq(cudaPointerGetAttributes(&attr, p), cudaSuccess);
        cr_assert_eq(attr.type, cudaMemoryTypeHost, "the first piece was not registered");
    }
    mt_cuda_pin_ops()->unpin(NULL, p);
    if (p == c->first) {
        struct cudaPointerAttributes attr;
        cudaError_t err = cudaPointerGetAttributes(&attr, p);
        cr_assert(err != cudaSuccess || attr.type != cudaMemoryTypeHost, "unpinned, yet still registered");
        cudaGetLastError();
    }
}

Test(cuda, pinned_pieces_failure_in_the_middle_unregisters_the_rest) {
    gpu g;
    gpu_open(&g);
    counting c = {0};
    mt_pin_ops ops = {.pin = pin_failing_third, .unpin = unpin_counted, .ctx = &c};
    size_t piece = (size_t)64 << 20;
    void *p = mt_pinned_alloc(5 * piece, piece, "the failing test buffer", &ops);
    cr_assert_null(p);
    cr_assert(strstr(mt_error(), "piece 3 of 5") && strstr(mt_error(), "refused by the test"), "%s", mt_error());
    cr_assert_eq(c.pins, 2);
    cr_assert_eq(c.unpins, 2);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "an error was left behind");
    cr_assert_eq(mt_backend_check(g.be), MT_OK, "%s", mt_error());
    gpu_close(&g);
}
