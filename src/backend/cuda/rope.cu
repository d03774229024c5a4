/* Rotary embedding in place over the first rotary_dim values of each head, Hugging Face's
 * rotate_half pairing (i, i + rotary_dim/2): one thread per (row, pair index), turning that pair in
 * every head of the row by one angle; the values past rotary_dim stay. A row's position is pos[r]
 * (packed examples), or (pos0 + r) % seq. */
#include "backend/cuda/bf16_vec.cuh"

__global__ void rope_pairs(bf16 *x, const float *inv_freq, int n, int seq, int pos0, const int32_t *pos, int heads,
                           int head_dim, int rotary_dim, float sign) {
    int half = rotary_dim / 2;
    size_t item = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (item >= (size_t)n * half) return;
    int r = (int)(item / half), i = (int)(item % half);
    /* the same fp32 angle as the CPU reference, with full-precision sin and cos */
    float angle = (float)(pos ? pos[r] : (pos0 + r) % seq) * inv_freq[i];
    float sn, c;
    sincosf(angle, &sn, &c);
    sn *= sign;
    bf16 *row = x + (size_t)r * heads * head_dim;
    for (int h = 0; h < heads; h++) {
        bf16 *xh = row + (size_t)h * head_dim;
        float a = __bfloat162float(xh[i]), b = __bfloat162float(xh[i + half]);
        xh[i] = __float2bfloat16(a * c - b * sn);
        xh[i + half] = __float2bfloat16(b * c + a * sn);
    }
}

extern "C" mt_status mt_cuda_rope(cudaStream_t s, void *x, const float *inv_freq, int n, int seq, int pos0,
                                  const int32_t *pos, int heads, int head_dim, int rotary_dim, int inverse) {
    size_t items = (size_t)n * (rotary_dim / 2);
    if (items == 0) return MT_OK;
    /* the inverse of a rotation is the rotation by the opposite angle */
    rope_pairs<<<(unsigned)((items + 255) / 256), 256, 0, s>>>((bf16 *)x, inv_freq, n, seq, pos0, pos, heads,
                                                                head_dim, rotary_dim, inverse ? -1.0f : 1.0f);
    return launch_status("rope");
}
