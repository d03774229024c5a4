/* Operation graphs and execution plans through cuDNN's backend API, in plain C.
 *
 * A graph owns every descriptor made through it (tensors, operations, the graph, the plan) and
 * destroys them together. Tensors are 4-d; virtual tensors (intermediates that never reach
 * memory) get packed strides. Every cuDNN call is checked with MT_CUDNN_CHECK. */
#ifndef MT_BACKEND_CUDA_CUDNN_GRAPH_H
#define MT_BACKEND_CUDA_CUDNN_GRAPH_H

#include <cudnn.h>
#include <stdint.h>

#include "util/status.h"

/* Records the failed expression, cuDNN's message, the file and the line, and returns
 * MT_ERR_DEVICE from the enclosing function. */
#define MT_CUDNN_CHECK(expr)                                                                \
    do {                                                                                    \
        cudnnStatus_t mt_cudnn_err_ = (expr);                                               \
        if (mt_cudnn_err_ != CUDNN_STATUS_SUCCESS)                                          \
            return mt_fail(MT_ERR_DEVICE, "%s failed: %s (%s:%d)", #expr,                   \
                           cudnnGetErrorString(mt_cudnn_err_), __FILE__, __LINE__);         \
    } while (0)

enum { MT_CUDNN_MAX_DESCRIPTORS = 192, MT_CUDNN_MAX_OPS = 64 };

typedef struct {
    cudnnBackendDescriptor_t desc;
    int64_t dim[4];
} mt_cudnn_tensor;

/* How a tensor is passed: by pointer to device memory, as a host scalar, or not at all. */
typedef enum { MT_CUDNN_IN_MEMORY, MT_CUDNN_BY_VALUE, MT_CUDNN_VIRTUAL } mt_cudnn_storage;

typedef struct {
    cudnnHandle_t handle;
    cudnnBackendDescriptor_t owned[MT_CUDNN_MAX_DESCRIPTORS];
    int owned_count;
    cudnnBackendDescriptor_t ops[MT_CUDNN_MAX_OPS];
    int op_count;
    int64_t next_virtual_uid;
    cudnnBackendDescriptor_t plan; /* set by mt_cudnn_graph_plan */
    int64_t workspace_bytes;
    int64_t engine; /* the plan's engine (cuDNN's global index; -1 when it does not say), for logs */
} mt_cudnn_graph;

/* Virtual tensors get uids from first_virtual_uid up, above every uid the caller names. */
void mt_cudnn_graph_init(mt_cudnn_graph *g, cudnnHandle_t handle, int64_t first_virtual_uid);
void mt_cudnn_graph_destroy(mt_cudnn_graph *g);

/* A tensor the caller binds by uid at execution (reordered: cuDNN's F16x16 tile order). */
mt_status mt_cudnn_tensor_make(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid,
                               cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4],
                               mt_cudnn_storage storage, int reordered);
/* A tensor in memory whose batch entries start at the element offsets that `offsets` (an int64
 * [b + 1, 1, 1, 1] tensor in memory) holds: the ragged (packed) layout. */
mt_status mt_cudnn_tensor_ragged(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, cudnnDataType_t type,
                                 const int64_t dim[4], const int64_t stride[4], const mt_cudnn_tensor *offsets);
/* An intermediate of the given shape, packed. */
mt_status mt_cudnn_virtual(mt_cudnn_graph *g, mt_cudnn_tensor *t, cudnnDataType_t type,
                           const int64_t dim[4]);
/* A virtual view of x with other dims and strides (a transpose), through a reshape operation. */
mt_status mt_cudnn_reshape(mt_cudnn_graph *g, const mt_cudnn_tensor *x, mt_cudnn_tensor *y,
                           cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4]);

/* The same view of a ragged tensor, keeping its offsets. */
mt_status mt_cudnn_reshape_ragged(mt_cudnn_graph *g, const mt_cudnn_tensor *x, mt_cudnn_tensor *y,
                                  cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4],
                                  const mt_cudnn_tensor *offsets);

/* y = mode(x[, b[, t]]) computed in `compute`; b and t may be NULL. */
mt_status mt_cudnn_pointwise(mt_cudnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t compute,
                             const mt_cudnn_tensor *x, const mt_cudnn_tensor *b,
                             const mt_cudnn_tensor *t, const mt_cudnn_tensor *y);
/* y (int32, x's shape) = the index of each element along `axis`. */
mt_status mt_cudnn_gen_index(mt_cudnn_graph *g, const mt_cudnn_tensor *x, int64_t axis,
                             const mt_cudnn_tensor *y);
/* c = a . b over the last two dims, fp32 accumulation (batch dims broadcast). */
mt_status mt_cudnn_matmul(mt_cudnn_graph *g, const mt_cudnn_tensor *a, const mt_cudnn_tensor *b,
                          const mt_cudnn_tensor *c);
/* The same whose M, N and K dims are per batch entry (int32 [b, 1, 1, 1] tensors: sequence lengths
 * of the padded and ragged layouts); each may be NULL. */
mt_status mt_cudnn_matmul_sized(mt_cudnn_graph *g, const mt_cudnn_tensor *a, const mt_cudnn_tensor *b,
                                const mt_cudnn_tensor *c, const mt_cudnn_tensor *m, const mt_cudnn_tensor *n,
                                const mt_cudnn_tensor *k);
/* y = x reduced with op over the dims where y is smaller. */
mt_status mt_cudnn_reduction(mt_cudnn_graph *g, cudnnReduceTensorOp_t op, const mt_cudnn_tensor *x,
                             const mt_cudnn_tensor *y);

/* Finalizes the graph and keeps the first plan of cuDNN's heuristics (mode A) that builds and
 * needs at most max_workspace bytes; MT_ERR_INVALID when none does (cuDNN refuses the graph). */
mt_status mt_cudnn_graph_plan(mt_cudnn_graph *g, int64_t max_workspace);
/* Enqueues the plan on the handle's stream, binding count uids to pointers. */
mt_status mt_cudnn_graph_execute(const mt_cudnn_graph *g, int count, const int64_t *uids,
                                 void *const *pointers, void *workspace);

#endif
