/* Causal GQA attention through cuDNN's fused scaled-dot-product attention (forward and backward),
 * with backend.h's semantics: q [n, heads, head_dim], k/v [n, kv_heads, head_dim] (bf16), out
 * [n, heads*head_dim], lse [batch, heads, seq] = natural-log logsumexp of the scaled scores.
 *
 * With segments (backend.h's mt_segments: packed examples) the graphs take cuDNN's ragged layout:
 * each segment is a batch entry of its own whose rows start at a per-entry offset of the packed
 * [n, heads, head_dim] tensors, its length a per-entry sequence length (the padding mask), causal
 * within it; lse is then [n, heads]. A plan serves up to a power of two of segments (the entries
 * past the count are empty), so a run builds a few.
 *
 * The forward and backward plans are built once per distinct dims (and segment bucket) and
 * cached. cuDNN may refuse some dims (the caller then uses the CUDA-core kernels of attention.cu);
 * attention_dispatch.c makes that choice. The context is thread-safe. */
#ifndef MT_BACKEND_CUDA_ATTENTION_CUDNN_H
#define MT_BACKEND_CUDA_ATTENTION_CUDNN_H

#include <cuda_runtime.h>

#include "backend/backend.h"

typedef struct mt_cudnn_attention mt_cudnn_attention;

/* Makes no CUDA or cuDNN call: the cuDNN handle is made on first use. */
mt_status mt_cudnn_attention_create(mt_cudnn_attention **out);
void mt_cudnn_attention_destroy(mt_cudnn_attention *ca);

/* band (all four): a sliding window of that many keys, itself included (backend.h's window; 0: none),
 * masked in the graphs as the frontend's diagonal band's left bound; whole sequences without
 * segments only (a window of queries or segments with a band: 0, or the calls fail). */

/* 1 when cuDNN runs attention of these dims (both plans built, now or before), else 0: without
 * segments (segments 0), or over `segments` segments in the ragged layout, which also needs a head
 * dim whose ragged plans cuDNN gets right (64, 128: attention_cudnn.c) and its workspace to fit
 * what mt_cudnn_attention_ragged_workspace sized for the dims. When 1, *workspace_bytes (if
 * non-NULL) is what the forward and backward need (the larger; they share it). */
int mt_cudnn_attention_supports(mt_cudnn_attention *ca, mt_attn_dims dims, int segments, int band,
                                size_t *workspace_bytes);

/* 1 when cuDNN builds both plans for these dims (and `segments`, 0: none), whatever the choice
 * mt_cudnn_attention_supports makes, with their workspace in *workspace_bytes (if non-NULL): the
 * tests run cuDNN through it where the backend does not, to show why it does not. */
int mt_cudnn_attention_plan_workspace(mt_cudnn_attention *ca, mt_attn_dims dims, int segments, int band,
                                      size_t *workspace_bytes);

/* The workspace for attention of these dims with segments: `bytes` (what the other paths need),
 * or more for the ragged plans of a typical count of segments; micro-batches whose segments'
 * plan needs more than this run on the kernels. */
size_t mt_cudnn_attention_ragged_workspace(mt_cudnn_attention *ca, mt_attn_dims dims, size_t bytes);

/* Both fail unless mt_cudnn_attention_plan_workspace(dims, seg ? seg->count : 0, band) returned 1 (the
 * backend calls them only where mt_cudnn_attention_supports did). scale: the scores' (backend.h's
 * mt_attn_scale); the graphs take no other variant of mt_attn_params. */
mt_status mt_cudnn_attention_forward(mt_cudnn_attention *ca, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims, float scale,
                                     const mt_segments *seg, int band, void *workspace);
/* dq, dk, dv overwritten (dk, dv summed over each kv head's query heads). */
mt_status mt_cudnn_attention_backward(mt_cudnn_attention *ca, cudaStream_t s, void *dq, void *dk,
                                      void *dv, const void *dout, const void *out, const float *lse,
                                      const void *q, const void *k, const void *v,
                                      mt_attn_dims dims, float scale, const mt_segments *seg, int band,
                                      void *workspace);

#endif
