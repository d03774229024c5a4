/* Rotary position embedding, Hugging Face's rotate_half form over the first rotary_dim values of
 * each head: element i pairs with element i + rotary_dim/2, both turned by the angle
 * position * inv_freq[i]; the values past rotary_dim stay. A row's position is pos[r], or
 * (pos0 + r) % seq without pos. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

void mt_cpu_rope(float *x, const float *inv_freq, int n, int seq, int pos0, const int32_t *pos, int heads,
                 int head_dim, int rotary_dim, int inverse) {
    int half = rotary_dim / 2;
    /* The inverse (transpose) of a rotation is the rotation by the opposite angle. */
    float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float p = (float)(pos ? pos[r] : (pos0 + r) % seq);
        float *row = x + (size_t)r * heads * head_dim;
        for (int i = 0; i < half; i++) {
            float angle = p * inv_freq[i];
            float c = cosf(angle), s = sign * sinf(angle);
            for (int h = 0; h < heads; h++) {
                float *xh = row + (size_t)h * head_dim;
                float a = xh[i], b = xh[i + half];
                xh[i] = a * c - b * s;
                xh[i + half] = b * c + a * s;
            }
        }
    }
}
