/* Every CUDA op: the op table (tests/ops_table.c), which the cpu backend runs too, here against
 * the CPU reference kernels on the same bf16-rounded inputs, with the tolerances each output
 * states; then the table's timing mode at Llama-3.2-3B's sizes (run with --verbose for the rates). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "../ops_table.h"

static mt_backend *open_gpu(void) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "cuda backend: %s", mt_error());
    return be;
}

ParameterizedTestParameters(cuda, ops_table) {
    return cr_make_param_array(size_t, ops_case_indices(ops_case_count), ops_case_count);
}

ParameterizedTest(size_t *i, cuda, ops_table) {
    mt_backend *be = open_gpu();
    ops_run_case(be, &ops_cases[*i]);
    mt_backend_destroy(be);
}

/* Seconds per call of each timing case, with TFLOP/s (GEMM-like ops) or GB/s (the rest: each
 * tensor read or written once). */
Test(cuda, ops_timing) {
    mt_backend *be = open_gpu();
    for (size_t i = 0; i < ops_timing_case_count; i++) {
        const ops_case *c = &ops_timing_cases[i];
        double seconds = ops_time_case(be, c, 5);
        double flops = c->kind->flops ? c->kind->flops(c) : 0;
        if (flops > 0)
            cr_log_info("%-28s %9.3f ms  %7.1f TFLOP/s", c->name, seconds * 1e3, flops / seconds * 1e-12);
        else
            cr_log_info("%-28s %9.3f ms  %7.1f GB/s", c->name, seconds * 1e3, ops_case_bytes(be, c) / seconds * 1e-9);
    }
    mt_backend_destroy(be);
}

/* The benchmark's attention (seq 4096, 24 heads, 8 kv heads, head_dim 128), forward and backward:
 * finite outputs (ops_time_case checks them) within a generous bound, a guard against a
 * pathological kernel rather than a measure of speed (bench/ measures it). */
Test(cuda, attention_benchmark_shape_speed) {
    mt_backend *be = open_gpu();
    const ops_case *attention = NULL;
    for (size_t i = 0; i < ops_timing_case_count; i++)
        if (!attention && strstr(ops_timing_cases[i].name, "attention")) attention = &ops_timing_cases[i];
    cr_assert(attention);
    double seconds = ops_time_case(be, attention, 3);
    cr_log_info("attention seq 4096, forward and backward: %.3f ms (%.1f TFLOP/s)", seconds * 1e3,
                attention->kind->flops(attention) / seconds * 1e-12);
    cr_assert_lt(seconds, 0.5, "forward + backward took %.3f s", seconds);
    mt_backend_destroy(be);
}
