/* A CUDA GPU with `memory` bytes that is not here: the CUDA backend's types, kind, workspace sizes
 * and device optimizer, and nothing that runs. `megatrain plan --backend cuda --gpu-mem 16GiB` on
 * a machine without a GPU sizes the run with it, so that a plan for a user's card can be made
 * anywhere. Attention's workspace is the larger of its own kernels' and cuDNN's dQ accumulators
 * (which the backend needs where cuDNN runs the dims); what cuDNN's plans ask beside it is known
 * only on a GPU. The Gated DeltaNet rule's workspace is its kernels'. */
#include "backend/gpu_model.h"

#include <stdlib.h>

#include "backend/cuda_workspace.h"

typedef struct {
    mt_backend base;
    size_t memory;
} gpu_model;

static void model_destroy(mt_backend *be) { free(be); }

/* Its memory is free memory; it never allocates, so its peak is 0. */
static void model_mem_info(mt_backend *be, size_t *free_bytes, size_t *peak_bytes) {
    if (free_bytes) *free_bytes = ((gpu_model *)be)->memory;
    if (peak_bytes) *peak_bytes = 0;
}

static size_t model_attention_workspace(mt_backend *be, mt_attn_dims dims, int segmented) {
    size_t kernels = mt_cuda_attention_workspace_bytes(dims.batch, dims.heads, mt_attn_q_rows(dims));
    size_t cudnn = mt_cudnn_attention_accum_bytes(dims.batch, dims.heads, mt_attn_q_rows(dims), mt_attn_kv_rows(dims),
                                                  dims.head_dim);
    return kernels > cudnn ? kernels : cudnn;
}

static size_t model_lmhead_workspace(mt_backend *be, int chunk, int vocab) {
    return mt_cuda_lmhead_workspace_bytes(chunk, vocab);
}

static size_t model_gdn_rule_workspace(mt_backend *be, mt_gdn_dims d) {
    return mt_cuda_gdn_rule_workspace_bytes(d.n, d.seq, d.v_heads, d.d_k, d.d_v);
}

/* The CUDA backend updates the ends on the device; the model says so, and never runs them. */
static void model_clip_scale(mt_backend *be, mt_stream *s, float *scale, const float *norms, int count, float max_norm) {}
static void model_adamw(mt_backend *be, mt_stream *s, const struct mt_adamw_params *p, int decay, const float *scale,
                        float *master, float *m, float *v, const float *grad, void *w, size_t n) {}

/* Not through mt_backend_init, which wants every op: the planner calls only these. */
static const mt_backend_ops model_ops = {
    .name = "cuda (a model of the GPU: none here)",
    .kind = MT_DEVICE_GPU,
    .act_dtype = MT_DTYPE_BF16,
    .weight_dtype = MT_DTYPE_BF16,
    .destroy = model_destroy,
    .mem = {.dev_mem_info = model_mem_info},
    .op = {.attention_workspace = model_attention_workspace, .lmhead_workspace = model_lmhead_workspace,
           .clip_scale = model_clip_scale, .adamw = model_adamw},
    .gdn = {.rule_workspace = model_gdn_rule_workspace},
};

mt_status mt_backend_gpu_model_create(mt_backend **out, int64_t memory) {
    if (memory <= 0) return mt_fail(MT_ERR_INVALID, "a GPU model needs its memory (--gpu-mem)");
    gpu_model *g = mt_calloc(1, sizeof *g, "a GPU model");
    if (!g) return MT_ERR_NOMEM;
    g->base.ops = &model_ops;
    g->memory = (size_t)memory;
    *out = &g->base;
    return MT_OK;
}
