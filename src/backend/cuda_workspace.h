/* The device scratch the CUDA backend's kernels need, as plain arithmetic shared by the kernels
 * (attention.cu, lmhead_loss.cu, gdn_rule.cu) and the GPU model that plans for a GPU elsewhere
 * (gpu_model.c). */
#ifndef MT_BACKEND_CUDA_WORKSPACE_H
#define MT_BACKEND_CUDA_WORKSPACE_H

#include <stddef.h>

/* The LM head's: fp32 logits [chunk, vocab], then (256-byte aligned) bf16 dlogits [chunk, vocab]. */
static inline size_t mt_cuda_lmhead_dlogits_offset(int chunk, int vocab) {
    return ((size_t)chunk * vocab * sizeof(float) + 255) / 256 * 256;
}
static inline size_t mt_cuda_lmhead_workspace_bytes(int chunk, int vocab) {
    return mt_cuda_lmhead_dlogits_offset(chunk, vocab) + (size_t)chunk * vocab * 2;
}

/* The attention kernels' backward: delta [batch, heads, q rows] floats. */
static inline size_t mt_cuda_attention_workspace_bytes(int batch, int heads, int q_rows) {
    return (size_t)batch * heads * q_rows * sizeof(float);
}

/* cuDNN's attention backward: dQ's fp32 accumulator [batch, heads, q rows, head_dim], and for a
 * window of queries after the first (q rows != kv rows: a graph for the keys before it, one for its
 * own) the bf16 dQ of its own keys' graph; its plans' own workspace beside these is known only once
 * they are built, on a GPU. */
static inline size_t mt_cudnn_attention_accum_bytes(int batch, int heads, int q_rows, int kv_rows, int head_dim) {
    size_t elements = (size_t)batch * heads * q_rows * head_dim;
    return elements * sizeof(float) + (q_rows != kv_rows ? elements * 2 : 0);
}

/* The Gated DeltaNet rule's chunks: MT_CUDA_GDN_CHUNK rows of a sequence. Its workspace: per chunk
 * and value head, fp32 S0 and dS1 [d_k, d_v] and Vn and dVn [chunk, d_v]. */
enum { MT_CUDA_GDN_CHUNK = 64 };
static inline size_t mt_cuda_gdn_rule_workspace_bytes(int rows, int seq, int v_heads, int d_k, int d_v) {
    size_t chunks = (size_t)(rows / seq) * ((seq + MT_CUDA_GDN_CHUNK - 1) / MT_CUDA_GDN_CHUNK);
    return chunks * v_heads * (2 * (size_t)d_k * d_v + 2 * (size_t)MT_CUDA_GDN_CHUNK * d_v) * sizeof(float);
}

#endif
