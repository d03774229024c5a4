/* Model shapes near the integer limits: a config.json whose sizes would overflow the layout's
 * arithmetic is refused naming the field, never laid out with a negative count (UBSan, in the
 * sanitizer build of `make test`, stays silent); the largest shape the limits allow is laid out
 * and planned with its true, positive sizes. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "model/config.h"
#include "model/layout.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX];

static void make_dir(void) { hf_test_mkdtemp(dir); }
static void remove_dir(void) { hf_test_rmtree(dir); }

TestSuite(limits, .init = make_dir, .fini = remove_dir);

static const char *write_config(const char *name, long long hidden, long long intermediate, long long layers,
                                long long heads, long long vocab, long long head_dim) {
    static char path[PATH_MAX];
    char text[1024];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %lld, \"intermediate_size\": %lld, "
             "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, "
             "\"vocab_size\": %lld, \"max_position_embeddings\": 4096, \"head_dim\": %lld}",
             hidden, intermediate, layers, heads, heads, vocab, head_dim);
    hf_test_write_text(hf_test_path(path, dir, name), text);
    return path;
}

static void expect_plan_refused(const char *config, const char *problem) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--config", config, "--backend", "cpu", NULL);
    cr_assert(!r.timed_out && r.signal == 0, "plan died (a sanitizer?) or hung:\n%s", r.err);
    cr_assert_eq(r.exit_code, 2, "plan of an impossible model: exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
                 r.err);
    cr_assert_not_null(strstr(r.err, problem), "the refusal does not say '%s':\n%s", problem, r.err);
    cr_assert_null(strstr(r.out, "parameters"), "plan printed a plan:\n%s", r.out);
    mt_cli_result_free(&r);
}

/* These made the old plan print a negative parameter count and say the run fits. */
Test(limits, sizes_near_the_integer_limits_are_refused) {
    expect_plan_refused(write_config("huge.json", 1073741824, 2147483647, 1, 536870912, 2147483647, 2),
                        "hidden_size must be from 1 to 65536, got 1073741824");
    expect_plan_refused(write_config("vocab.json", 4096, 8192, 2, 32, 2147483647, 128),
                        "vocab_size must be from 2 to 16777216");
    expect_plan_refused(write_config("layers.json", 4096, 8192, 2147483647, 32, 32000, 128),
                        "num_hidden_layers must be from 1 to 4096");
    expect_plan_refused(write_config("heads.json", 4096, 8192, 2, 2147483647, 32000, 2),
                        "num_attention_heads must be from 1 to 4096");
    /* Every field within its limit, the whole past what the code takes. */
    expect_plan_refused(write_config("total.json", 65536, 1048576, 4096, 256, 16777216, 256),
                        "parameters, more than the 1099511627776 this code takes");
}

/* The largest shape within the limits: counts exact and positive, and the plan says it does not
 * fit rather than that it does. */
Test(limits, the_largest_allowed_shape_is_planned_with_true_sizes) {
    const char *config = write_config("largest.json", 65536, 1048576, 1, 256, 1048576, 256);
    mt_config cfg = {.arch = MT_ARCH_LLAMA, .hidden_size = 65536, .intermediate_size = 1048576, .num_layers = 1,
                     .num_heads = 256, .num_kv_heads = 256, .head_dim = 256, .vocab_size = 1048576,
                     .max_position = 4096, .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f};
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK, "%s", mt_error());
    int64_t d = 65536, f = 1048576, v = 1048576, q = 256 * 256;
    int64_t params = 2 * v * d + d + 2 * d + 4 * q * d + 3 * d * f;
    cr_assert_eq(mt_config_total_params(&cfg), params);
    cr_assert_geq(lay.total_numel, params, "padding only adds");
    cr_assert_lt(lay.total_numel, params + 64 * 16, "at most one alignment per tensor");
    mt_layout_free(&lay);

    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--config", config, "--backend", "cpu", "--seq", "4096", "--batch", "1024", NULL);
    cr_assert(!r.timed_out && r.signal == 0, "plan died (a sanitizer?) or hung:\n%s", r.err);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    char expected[64];
    snprintf(expected, sizeof expected, "model     %.3f B parameters", (double)params / 1e9);
    cr_assert_not_null(strstr(r.out, expected), "not '%s':\n%s", expected, r.out);
    for (const char *c = r.out; *c; c++)
        cr_assert(!(c[0] == '-' && c[1] >= '0' && c[1] <= '9'), "a negative count:\n%s", r.out);
    cr_assert_not_null(strstr(r.out, "does NOT fit"), "%s", r.out);
    mt_cli_result_free(&r);
}
