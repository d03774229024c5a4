/* cuDNN's ragged layout (attention_cudnn.c) from a micro-batch's segments: one thread per entry. */
#include "backend/cuda/bf16_vec.cuh"

__global__ void ragged_offsets(const int32_t *starts, int count, int entries, int64_t q_row, int64_t kv_row,
                               int64_t stats_row, int32_t *lens, int64_t *off_q, int64_t *off_kv,
                               int64_t *off_stats) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e > entries) return;
    int64_t row = starts[e < count ? e : count]; /* the entries past the segments are empty, at the end */
    if (e < entries) lens[e] = e < count ? starts[e + 1] - starts[e] : 0;
    off_q[e] = row * q_row;
    off_kv[e] = row * kv_row;
    off_stats[e] = row * stats_row;
}

extern "C" mt_status mt_cuda_ragged_offsets(cudaStream_t s, const int32_t *starts, int count, int entries,
                                            int64_t q_row, int64_t kv_row, int64_t stats_row, void *lens,
                                            void *off_q, void *off_kv, void *off_stats) {
    if (count > entries) return mt_fail(MT_ERR_INVALID, "ragged attention: %d segments in %d entries", count, entries);
    ragged_offsets<<<(entries + 1 + 255) / 256, 256, 0, s>>>(starts, count, entries, q_row, kv_row, stats_row,
                                                             (int32_t *)lens, (int64_t *)off_q, (int64_t *)off_kv,
                                                             (int64_t *)off_stats);
    return launch_status("ragged offsets");
}
