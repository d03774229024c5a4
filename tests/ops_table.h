/* The op tests as one table of cases (ops_table.c) that runs on every backend: tests/test_ops.c
 * runs it on the cpu backend, tests/cuda/test_cuda_ops.c on the GPU, and a timing mode times the
 * cases at a model's sizes.
 *
 * A case is an op (its kind) at some sizes. The runner (ops_runner.c) fills the case's inputs from
 * a fixed seed, rounds them to the backend's types (so that both sides see the very same values),
 * puts every tensor in device memory with guard bytes after it, runs the op on a stream, and
 * compares each output with the CPU reference kernels (backend/cpu/cpu_ops.h, optim/) run on the
 * same values: bitwise on the cpu backend, which is the reference (its ops are those kernels);
 * within the tolerance each output states on another backend. After every op it checks that no
 * guard byte and no input changed. The reference kernels' own accuracy (against double-precision
 * definitions and finite differences) is tests/test_ops.c's. */
#ifndef MT_TESTS_OPS_TABLE_H
#define MT_TESTS_OPS_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* A tensor's type on the device: the backend's activation or weight type, fp32, or int32 ids. */
typedef enum { OPS_ACT, OPS_W, OPS_F32, OPS_I32 } ops_type;
/* Inputs are filled and must not change; outputs start zeroed and are compared; in/outs are filled
 * and compared; scratch is a workspace of ops_kind.workspace bytes, neither filled nor compared.
 * int32 tensors are filled by the kind's prepare (zeros else) and compared exactly. */
typedef enum { OPS_IN, OPS_OUT, OPS_INOUT, OPS_SCRATCH } ops_role;

typedef struct {
    const char *name;
    ops_type type;
    ops_role role;
    size_t count;  /* elements; 0: the op gets NULL */
    float lo, hi;  /* filled uniform in [lo, hi); lo == hi: that value everywhere */
    double tol;    /* outputs, off the reference backend: the largest ||out - ref|| / ||ref||; 0: bitwise */
} ops_tensor;

enum { OPS_MAX_TENSORS = 14 };

typedef struct ops_case ops_case;

/* Host copies of a case's tensors, in the order declared: values as floats, or ids. */
typedef struct {
    float *x[OPS_MAX_TENSORS];
    int32_t *ids[OPS_MAX_TENSORS];
} ops_host;

typedef struct {
    /* Declares the case's tensors into t[OPS_MAX_TENSORS]; returns how many. */
    int (*declare)(const ops_case *c, ops_tensor *t);
    /* Bytes of each scratch tensor (NULL: the kind has none). */
    size_t (*workspace)(mt_backend *be, const ops_case *c);
    /* Sets values the random fill cannot give (ids, frequencies, special values); may be NULL. */
    void (*prepare)(const ops_case *c, ops_host *h);
    /* Issues the op on stream s; dev[i] is tensor i's device buffer. */
    void (*call)(mt_backend *be, mt_stream *s, const ops_case *c, void *const *dev);
    /* Computes the outputs of `want` in place (they hold the starting values) from its inputs;
     * `got` holds what the backend gave, for ops whose backward starts from its forward's outputs.
     * `exact` (off the reference backend): an output whose float sum over many rows strays further
     * than its tolerance is summed in float64 instead. */
    void (*reference)(const ops_case *c, ops_host *want, const ops_host *got, int exact);
    /* Asserts what the backend's outputs must be besides the reference's (NULL: nothing). */
    void (*check)(const ops_case *c, const ops_host *got);
    /* Floating-point operations of one call, for the timing mode (0: report bytes per second). */
    double (*flops)(const ops_case *c);
    /* The op is one of backend.h's optional moe group: a backend without it skips the case. */
    int needs_moe;
} ops_kind;

struct ops_case {
    const char *name;
    const ops_kind *kind;
    unsigned seed;
    int n, in, out, d, vocab, chunk;  /* rows, GEMM sizes, hidden size, vocabulary, LM head chunk */
    size_t count;                     /* elementwise ops */
    mt_attn_dims dims;                /* attention, rope (seq, heads, head_dim) */
    mt_attn_params attn;              /* attention's variants (its sinks: flag, the pointers unused) */
    const int *segments;              /* attention, rope: NULL, or the lengths of the micro-batch's
                                       * segments in row order (packed examples: backend.h) */
    int segment_count;
    int flag;                         /* the case's variant: accumulate, inverse, bias, decay, ... */
    float scale;                      /* LM head scale, AdamW's scale, clip's max norm, the embedding's
                                       * scale (0: 1) */
    float softcap;                    /* the LM head's logit soft-cap (0: none) */
    const float *values;              /* prepare's values (clip_scale's sums) */
    float expect;                     /* clip_scale: the coefficient the values must give (check) */
    int experts, top_k, seg, layers;  /* mixture of experts: E, k, the segment rows, the aux loss's layers */
};

extern const ops_case ops_cases[];
extern const size_t ops_case_count;
/* The same ops at Llama-3.2-3B's sizes (4096 tokens), for the timing mode. */
extern const ops_case ops_timing_cases[];
extern const size_t ops_timing_case_count;
/* The mixture-of-experts ops at OLMoE-1B-7B's and Qwen3-30B-A3B's sizes (4096 tokens), for the
 * timing mode of a backend that has them (ops_case_runs_on). */
extern const ops_case ops_moe_timing_cases[];
extern const size_t ops_moe_timing_case_count;

/* The mixture-of-experts kinds (ops_moe.c). */
extern const ops_kind OPS_MOE_ROUTE, OPS_MOE_PERMUTE, OPS_MOE_GATHER, OPS_MOE_GROUPED, OPS_MOE_SWIGLU,
    OPS_MOE_COMBINE, OPS_MOE_GATE_ADD, OPS_MOE_AUX;

/* The GLU of a swiglu case (dense or the experts'): its flag is an mt_glu, SILU_CLAMPED with
 * gpt-oss's limit 7 and alpha 1.702. Its inputs: uniform in (-range, range) for the gate and up. */
mt_glu_params ops_glu(const ops_case *c);
float ops_glu_range(const ops_case *c);

/* 0..count-1 in Criterion's shared memory: the parameters of a ParameterizedTest over a table
 * (a test process may map the binary elsewhere, so the parameters cannot be the cases' pointers). */
size_t *ops_case_indices(size_t count);

/* Whether `be` has the ops case c calls (the moe group is optional). */
int ops_case_runs_on(mt_backend *be, const ops_case *c);
/* Runs case c on `be` and asserts (Criterion) every output, guard and input, naming the case; skips
 * it (cr_skip_test) on a backend without its ops. */
void ops_run_case(mt_backend *be, const ops_case *c);
/* The timing mode: runs case c `reps` times after a warm-up, asserts the last call's outputs are
 * finite and the guards intact, and returns the mean seconds per call (event_elapsed). */
double ops_time_case(mt_backend *be, const ops_case *c, int reps);
/* The bytes a call of case c reads and writes (its tensors once each). */
double ops_case_bytes(mt_backend *be, const ops_case *c);

#endif
