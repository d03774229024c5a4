/* Helpers of the CUDA mixture-of-experts tests (test_cuda_moe.c, test_cuda_moe_gemm.c): device buffers
 * in the backend's types (inputs rounded to them in place, so the CPU reference sees the values the
 * device sees), the routing inputs a layer would give, and comparisons whose failures explain
 * themselves: the case, the tensor's shape, the first element that is off and the largest, with both
 * values. */
#ifndef MT_TESTS_CUDA_MOE_CHECK_H
#define MT_TESTS_CUDA_MOE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct {
    mt_backend *be;
    mt_stream *s;
    mt_event *done;
    void *buffers[96];
    int count;
} moe_dev;

/* A cuda backend whose grouped GEMMs go `gemm`'s way ("cublaslt" or "kernel": MT_MOE_GEMM; NULL: the
 * default) over `streams` streams (MT_MOE_STREAMS; 0: the default). */
void moe_open(moe_dev *d, const char *gemm, int streams);
void moe_close(moe_dev *d);
/* Waits for the stream; asserts the backend saw no error (naming `what`). */
void moe_sync(moe_dev *d, const char *what);

void *moe_zeros(moe_dev *d, size_t bytes);
/* Bytes of count elements of the activation type. */
size_t moe_act_bytes(const moe_dev *d, size_t count);
/* Rounds host[count] to the activation (or weight) type in place and uploads it. */
void *moe_put_act(moe_dev *d, float *host, size_t count);
void *moe_put_f32(moe_dev *d, const float *host, size_t count);
void *moe_put_i32(moe_dev *d, const int32_t *host, size_t count);
void moe_get_act(moe_dev *d, float *host, const void *dev, size_t count);
void moe_get_f32(moe_dev *d, float *host, const void *dev, size_t count);
void moe_get_i32(moe_dev *d, int32_t *host, const void *dev, size_t count);

/* Host arrays (zeroed), freed by the test's end: Criterion runs each test in its own process. */
float *moe_floats(size_t count);
int32_t *moe_ints(size_t count);
/* Uniform in [lo, hi) from *state (splitmix64). */
void moe_fill(float *x, size_t count, float lo, float hi, uint64_t *state);
uint64_t moe_next(uint64_t *state);

/* Each of n tokens' k distinct experts among the first `used` of E: uniform, or skewed (expert e
 * about as likely as 1 / (e + 1)). */
void moe_random_experts(int32_t *experts, int n, int k, int used, int skewed, uint64_t *state);

/* ||got - want|| / ||want|| below tol, else a failure naming what, the case, the shape (rows of
 * `width`), the first element off by more than tol times the tensor's rms, and the largest. */
void moe_expect_close(const char *what, const char *the_case, const float *got, const float *want, size_t count,
                      int width, double tol);
/* Every element equal (float bits, or ids), else the first that differs, with its neighbours. */
void moe_expect_same_floats(const char *what, const char *the_case, const float *got, const float *want, size_t count);
void moe_expect_same_ids(const char *what, const char *the_case, const int32_t *got, const int32_t *want,
                         size_t count);

#endif
