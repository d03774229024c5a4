/* The CUDA backend's state, shared by backend_cuda.c (memory, streams, events, the ops table)
 * and gemm.c (cuBLASLt). An mt_stream* is a cudaStream_t and an mt_event* a cudaEvent_t. */
#ifndef MT_BACKEND_CUDA_BACKEND_H
#define MT_BACKEND_CUDA_BACKEND_H

#include <pthread.h>

#include "backend/cuda/attention_cudnn.h"
#include "backend/device_info.h"
#include "backend/pinned_pieces.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"

typedef struct {
    void *ptr;
    size_t bytes;
} mt_cuda_allocation;

typedef struct mt_cuda_moe_lt mt_cuda_moe_lt; /* moe_gemm_cublaslt.c */
typedef struct mt_cuda_profile mt_cuda_profile; /* profile.c */

struct mt_cuda_backend {
    mt_backend base;
    cublasLtHandle_t lt;
    void *lt_workspace; /* cuBLASLt's scratch, lt_workspace_bytes of device memory */
    size_t lt_workspace_bytes;
    mt_cudnn_attention *cudnn; /* cuDNN's fused attention and its cached plans */
    mt_device_info info; /* the GPU, as found at start */

    pthread_mutex_t lock; /* guards everything below */
    mt_cuda_allocation *allocations; /* live dev_alloc blocks, for in_use and peak */
    size_t allocation_count, allocation_capacity;
    size_t in_use, peak;
    mt_status sticky; /* the first error since the last check(), with its message */
    char sticky_message[1024];
    int device;       /* the CUDA device */
    void *comm;       /* a data-parallel group's ncclComm_t (coll_nccl.c), or NULL */
    cudaMemPool_t scratch_pool; /* mt_cuda_scratch_alloc's, made at its first use (under lock) */
    int moe_gemm_kernel;        /* MT_MOE_GEMM=kernel: the grouped GEMMs as moe_gemm.cu's kernels */
    mt_cuda_moe_lt *moe_lt;     /* else the cuBLASLt loop's streams, workspaces and algorithms */
    mt_cuda_profile *profile;   /* the profile's spans and rows (profile.c) */
};

static inline cudaStream_t mt_cuda_stream(mt_stream *s) { return (cudaStream_t)s; }

/* The collectives through NCCL (coll_nccl.c): backend.h's coll group. */
mt_status mt_cuda_comm_init(mt_backend **ranks, int n);
mt_status mt_cuda_comm_init_world(mt_backend *be, const struct mt_world *w);
void mt_cuda_all_reduce(mt_backend *be, mt_stream *s, float *buf, size_t count);
void mt_cuda_reduce_scatter(mt_backend *be, mt_stream *s, float *buf, size_t count);
void mt_cuda_broadcast(mt_backend *be, mt_stream *s, void *buf, size_t bytes, int root);
void mt_cuda_comm_abort(mt_backend *be);
void mt_cuda_comm_free(mt_backend *be);

/* cudaHostRegister and cudaHostUnregister as backend/pinned_pieces.h's registration. */
const mt_pin_ops *mt_cuda_pin_ops(void);

/* Keeps the first failure for check(): ops return void, so their errors are sticky. */
void mt_cuda_note(mt_cuda_backend *cb, mt_status status);

/* The GPU's name, compute capability, memory, PCI address and link (device_probe.c): no device
 * memory is allocated. */
mt_status mt_cuda_probe_device(int device, mt_device_info *info);
/* Times pinned copies of 64 MiB each way into info's PCIe rates. */
mt_status mt_cuda_measure_pcie(mt_device_info *info);

/* One cuBLASLt GEMM in parts (gemm.c), for callers that choose the algorithm once and reuse it
 * (moe_gemm_cublaslt.c): the descriptors of g, in place (nothing allocated); cuBLASLt's best
 * algorithm for them within workspace_bytes, with the pointers' alignments (bytes of A, B and D;
 * NULL: cuBLASLt's default, 256) when given; the GEMM with that algorithm. */
typedef struct {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t a, b, d;
} mt_cuda_gemm_plan;
mt_status mt_cuda_gemm_describe(const mt_cuda_gemm_desc *g, mt_cuda_gemm_plan *p);
mt_status mt_cuda_gemm_heuristic(mt_cuda_backend *cb, const mt_cuda_gemm_desc *g, mt_cuda_gemm_plan *p,
                                 size_t workspace_bytes, const uint32_t *align, cublasLtMatmulAlgo_t *algo);
cublasStatus_t mt_cuda_gemm_run(mt_cuda_backend *cb, cudaStream_t s, const mt_cuda_gemm_desc *g,
                                mt_cuda_gemm_plan *p, const cublasLtMatmulAlgo_t *algo, void *workspace,
                                size_t workspace_bytes);

/* The cuBLASLt loop's state (moe_gemm_cublaslt.c): `streams` streams (1 to MT_MOE_LT_MAX_STREAMS) the
 * experts' GEMMs fan out over, a cuBLASLt workspace each, the offsets' pinned home, the algorithm
 * cache. */
enum { MT_MOE_LT_MAX_STREAMS = 8 };
mt_status mt_cuda_moe_lt_create(mt_cuda_moe_lt **out, int streams);
void mt_cuda_moe_lt_destroy(mt_cuda_moe_lt *lt);

/* The profile (profile.c): backend.h's prof group, and the backend's own spans inside an op's (phase
 * the op's), which do nothing while the profile is off. */
mt_status mt_cuda_profile_create(mt_cuda_profile **out);
void mt_cuda_profile_destroy(mt_cuda_profile *p);
void mt_cuda_prof_begin(mt_backend *be, mt_stream *s, const char *phase, const char *op, double flops);
void mt_cuda_prof_end(mt_backend *be, mt_stream *s);
mt_status mt_cuda_prof_collect(mt_backend *be);
const mt_prof_row *mt_cuda_prof_rows(mt_backend *be, int *count);
void mt_cuda_prof_clear(mt_backend *be);
void mt_cuda_span_begin(mt_cuda_backend *cb, cudaStream_t s, const char *op);
void mt_cuda_span_end(mt_cuda_backend *cb, cudaStream_t s);

/* The GEMM ops of backend.h (gemm.c). */
void mt_cuda_op_matmul(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w,
                       const void *bias, int n, int in, int out);
void mt_cuda_op_matmul_dx(mt_backend *be, mt_stream *s, void *dx, const void *dy, const void *w,
                          int n, int in, int out, int accumulate);
void mt_cuda_op_matmul_dw(mt_backend *be, mt_stream *s, float *dw, float *dbias, const void *dy,
                          const void *x, int n, int in, int out);
void mt_cuda_op_logits(mt_backend *be, mt_stream *s, float *logits, const void *x, const void *w,
                       int d, int vocab, float softcap);

/* The attention ops of backend.h: cuDNN where it runs the dims and the variants (and with
 * segments, their ragged layout within the workspace sized for them), attention.cu's kernels
 * otherwise (attention_dispatch.c). */
mt_status mt_cuda_attention_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims,
                                     const mt_attn_params *params, const mt_segments *seg, void *workspace);
mt_status mt_cuda_attention_dx_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *dq, void *dk,
                                        void *dv, const void *dout, const void *out,
                                        const float *lse, const void *q, const void *k,
                                        const void *v, mt_attn_dims dims, const mt_attn_params *params,
                                        const mt_segments *seg, void *workspace);
size_t mt_cuda_attention_dispatch_workspace(mt_cuda_backend *cb, mt_attn_dims dims, int segmented);

#endif
