/* cuDNN backend-API graphs: descriptors, operations, heuristics and plans (see cudnn_graph.h). */
#include "backend/cuda/cudnn_graph.h"

#include <stdbool.h>
#include <string.h>

/* Heuristic candidates tried before giving up on a graph. */
enum { MAX_ENGINE_CONFIGS = 8 };

static const int64_t BYTE_ALIGNMENT = 16;

void mt_cudnn_graph_init(mt_cudnn_graph *g, cudnnHandle_t handle, int64_t first_virtual_uid) {
    memset(g, 0, sizeof *g);
    g->handle = handle;
    g->next_virtual_uid = first_virtual_uid;
}

void mt_cudnn_graph_destroy(mt_cudnn_graph *g) {
    while (g->owned_count > 0) cudnnBackendDestroyDescriptor(g->owned[--g->owned_count]);
    g->op_count = 0;
    g->plan = NULL;
}

static mt_status create(mt_cudnn_graph *g, cudnnBackendDescriptorType_t type,
                        cudnnBackendDescriptor_t *out) {
    if (g->owned_count == MT_CUDNN_MAX_DESCRIPTORS)
        return mt_fail(MT_ERR_INVALID, "cuDNN graph: more than %d descriptors", MT_CUDNN_MAX_DESCRIPTORS);
    MT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, out));
    g->owned[g->owned_count++] = *out;
    return MT_OK;
}

static mt_status set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     cudnnBackendAttributeType_t type, int64_t count, const void *value) {
    MT_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, value));
    return MT_OK;
}

static mt_status set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                          const mt_cudnn_tensor *t) {
    return set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->desc);
}

static mt_status finalize(cudnnBackendDescriptor_t d) {
    MT_CUDNN_CHECK(cudnnBackendFinalize(d));
    return MT_OK;
}

static mt_status add_op(mt_cudnn_graph *g, cudnnBackendDescriptor_t op) {
    if (g->op_count == MT_CUDNN_MAX_OPS)
        return mt_fail(MT_ERR_INVALID, "cuDNN graph: more than %d operations", MT_CUDNN_MAX_OPS);
    MT_TRY(finalize(op));
    g->ops[g->op_count++] = op;
    return MT_OK;
}

static mt_status make_tensor(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, cudnnDataType_t type,
                             const int64_t dim[4], const int64_t stride[4], mt_cudnn_storage storage, int reordered,
                             const mt_cudnn_tensor *ragged) {
    bool is_virtual = storage == MT_CUDNN_VIRTUAL, by_value = storage == MT_CUDNN_BY_VALUE;
    MT_TRY(create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t->desc));
    memcpy(t->dim, dim, sizeof t->dim);
    MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
    MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride));
    MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &BYTE_ALIGNMENT));
    MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
    if (by_value) MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    if (reordered) {
        cudnnBackendTensorReordering_t mode = CUDNN_TENSOR_REORDERING_F16x16;
        MT_TRY(set(t->desc, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &mode));
    }
    if (ragged) MT_TRY(set_desc(t->desc, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged));
    return finalize(t->desc);
}

mt_status mt_cudnn_tensor_make(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid,
                               cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4],
                               mt_cudnn_storage storage, int reordered) {
    return make_tensor(g, t, uid, type, dim, stride, storage, reordered, NULL);
}

mt_status mt_cudnn_tensor_ragged(mt_cudnn_graph *g, mt_cudnn_tensor *t, int64_t uid, cudnnDataType_t type,
                                 const int64_t dim[4], const int64_t stride[4], const mt_cudnn_tensor *offsets) {
    return make_tensor(g, t, uid, type, dim, stride, MT_CUDNN_IN_MEMORY, 0, offsets);
}

static void packed_strides(const int64_t dim[4], int64_t stride[4]) {
    stride[3] = 1;
    for (int i = 2; i >= 0; i--) stride[i] = stride[i + 1] * dim[i + 1];
}

mt_status mt_cudnn_virtual(mt_cudnn_graph *g, mt_cudnn_tensor *t, cudnnDataType_t type,
                           const int64_t dim[4]) {
    int64_t stride[4];
    packed_strides(dim, stride);
    return mt_cudnn_tensor_make(g, t, g->next_virtual_uid++, type, dim, stride, MT_CUDNN_VIRTUAL, 0);
}

mt_status mt_cudnn_reshape(mt_cudnn_graph *g, const mt_cudnn_tensor *x, mt_cudnn_tensor *y,
                           cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4]) {
    return mt_cudnn_reshape_ragged(g, x, y, type, dim, stride, NULL);
}

mt_status mt_cudnn_reshape_ragged(mt_cudnn_graph *g, const mt_cudnn_tensor *x, mt_cudnn_tensor *y,
                                  cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4],
                                  const mt_cudnn_tensor *offsets) {
    MT_TRY(make_tensor(g, y, g->next_virtual_uid++, type, dim, stride, MT_CUDNN_VIRTUAL, 0, offsets));
    cudnnBackendDescriptor_t op;
    MT_TRY(create(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, &op));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y));
    return add_op(g, op);
}

static mt_status pointwise_op(mt_cudnn_graph *g, cudnnBackendDescriptor_t pw, const mt_cudnn_tensor *x,
                              const mt_cudnn_tensor *b, const mt_cudnn_tensor *t,
                              const mt_cudnn_tensor *y) {
    MT_TRY(finalize(pw));
    cudnnBackendDescriptor_t op;
    MT_TRY(create(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op));
    MT_TRY(set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
    if (b) MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b));
    if (t) MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
    return add_op(g, op);
}

static mt_status pointwise_desc(mt_cudnn_graph *g, cudnnBackendDescriptor_t *pw,
                                cudnnPointwiseMode_t mode, cudnnDataType_t compute) {
    MT_TRY(create(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, pw));
    MT_TRY(set(*pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    return set(*pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
}

mt_status mt_cudnn_pointwise(mt_cudnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t compute,
                             const mt_cudnn_tensor *x, const mt_cudnn_tensor *b,
                             const mt_cudnn_tensor *t, const mt_cudnn_tensor *y) {
    cudnnBackendDescriptor_t pw;
    MT_TRY(pointwise_desc(g, &pw, mode, compute));
    return pointwise_op(g, pw, x, b, t, y);
}

mt_status mt_cudnn_gen_index(mt_cudnn_graph *g, const mt_cudnn_tensor *x, int64_t axis,
                             const mt_cudnn_tensor *y) {
    cudnnBackendDescriptor_t pw;
    MT_TRY(pointwise_desc(g, &pw, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32));
    MT_TRY(set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
    return pointwise_op(g, pw, x, NULL, NULL, y);
}

mt_status mt_cudnn_matmul(mt_cudnn_graph *g, const mt_cudnn_tensor *a, const mt_cudnn_tensor *b,
                          const mt_cudnn_tensor *c) {
    return mt_cudnn_matmul_sized(g, a, b, c, NULL, NULL, NULL);
}

mt_status mt_cudnn_matmul_sized(mt_cudnn_graph *g, const mt_cudnn_tensor *a, const mt_cudnn_tensor *b,
                                const mt_cudnn_tensor *c, const mt_cudnn_tensor *m, const mt_cudnn_tensor *n,
                                const mt_cudnn_tensor *k) {
    cudnnBackendDescriptor_t mm, op;
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    MT_TRY(create(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm));
    MT_TRY(set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
    MT_TRY(finalize(mm));
    MT_TRY(create(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c));
    MT_TRY(set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm));
    if (m) MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m));
    if (n) MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n));
    if (k) MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k));
    return add_op(g, op);
}

mt_status mt_cudnn_reduction(mt_cudnn_graph *g, cudnnReduceTensorOp_t reduce, const mt_cudnn_tensor *x,
                             const mt_cudnn_tensor *y) {
    cudnnBackendDescriptor_t red, op;
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    MT_TRY(create(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &red));
    MT_TRY(set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce));
    MT_TRY(set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
    MT_TRY(finalize(red));
    MT_TRY(create(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &op));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x));
    MT_TRY(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y));
    MT_TRY(set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red));
    return add_op(g, op);
}

/* The global index of the engine a config runs, or -1 when cuDNN does not say. */
static int64_t engine_of(cudnnBackendDescriptor_t config) {
    cudnnBackendDescriptor_t engine;
    int64_t got = 0, index = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return -1;
    if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                 &engine) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &index) !=
            CUDNN_STATUS_SUCCESS)
        index = -1;
    cudnnBackendDestroyDescriptor(engine);
    return index;
}

/* A plan for one engine config, or MT_ERR_INVALID when it does not build or needs too much. */
static mt_status try_config(mt_cudnn_graph *g, cudnnBackendDescriptor_t config, int64_t max_workspace) {
    cudnnBackendDescriptor_t plan;
    MT_TRY(create(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    MT_TRY(set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle));
    MT_TRY(set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config));
    MT_TRY(finalize(plan));
    int64_t bytes = 0, got = 0;
    MT_CUDNN_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &got, &bytes));
    if (bytes > max_workspace)
        return mt_fail(MT_ERR_INVALID, "the plan needs %lld bytes of workspace, over %lld",
                       (long long)bytes, (long long)max_workspace);
    g->plan = plan;
    g->workspace_bytes = bytes;
    g->engine = engine_of(config);
    return MT_OK;
}

mt_status mt_cudnn_graph_plan(mt_cudnn_graph *g, int64_t max_workspace) {
    cudnnBackendDescriptor_t graph, heur, configs[MAX_ENGINE_CONFIGS];
    MT_TRY(create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    MT_TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->op_count, g->ops));
    MT_TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle));
    MT_TRY(finalize(graph));

    MT_TRY(create(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    MT_TRY(set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    MT_TRY(set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    MT_TRY(finalize(heur));
    for (int i = 0; i < MAX_ENGINE_CONFIGS; i++)
        MT_TRY(create(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &configs[i]));
    int64_t count = 0;
    MT_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_ENGINE_CONFIGS,
                                            &count, configs));
    if (count == 0) return mt_fail(MT_ERR_INVALID, "cuDNN's heuristics offer no engine for this graph");
    for (int64_t i = 0; i < count; i++)
        if (try_config(g, configs[i], max_workspace) == MT_OK) return MT_OK;
    return mt_fail_context(MT_ERR_INVALID, "none of cuDNN's %lld engines for this graph builds; the last",
                           (long long)count);
}

static mt_status run_pack(const mt_cudnn_graph *g, cudnnBackendDescriptor_t pack, int count,
                          const int64_t *uids, void *const *pointers, void *workspace) {
    MT_TRY(set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids));
    MT_TRY(set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, pointers));
    MT_TRY(set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
    MT_TRY(finalize(pack));
    MT_CUDNN_CHECK(cudnnBackendExecute(g->handle, g->plan, pack));
    return MT_OK;
}

mt_status mt_cudnn_graph_execute(const mt_cudnn_graph *g, int count, const int64_t *uids,
                                 void *const *pointers, void *workspace) {
    cudnnBackendDescriptor_t pack;
    MT_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    mt_status status = run_pack(g, pack, count, uids, pointers, workspace);
    cudnnBackendDestroyDescriptor(pack);
    return status;
}
