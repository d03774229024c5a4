/* MXFP4 (OCP Microscaling), the format the hub's gpt-oss checkpoints hold their experts in: a matrix
 * W[..., rows, cols] is stored as two U8 tensors,
 *
 *   NAME_blocks  [..., rows, cols / 32, 16]  32 E2M1 codes a block, two a byte, the low nibble first
 *   NAME_scales  [..., rows, cols / 32]      each block's power of two, 2^(s - 127) (E8M0)
 *
 * An E2M1 code is a sign bit and a magnitude of {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Every value decodes
 * exactly in fp32, a row at a time straight from the mapped file, so a checkpoint loads without a
 * whole-tensor copy in any precision. */
#ifndef MT_IO_MXFP4_H
#define MT_IO_MXFP4_H

#include <stdint.h>

#include "io/safetensors.h"

/* Checks that `blocks` and `scales` are such a pair (U8; blocks' last dimension 16; scales' shape
 * blocks' without it) and gives the matrix's rows (every leading dimension's product) and columns
 * (cols / 32 x 32). Refuses naming both tensors and the file. */
mt_status mt_mxfp4_shape(const mt_st_tensor *blocks, const mt_st_tensor *scales, int64_t *rows, int64_t *cols);

/* Decodes rows [row0, row0 + n) of the pair into dst (n x cols floats, row-major). A scale of 255
 * (E8M0's NaN) or a block whose values overflow fp32 is corrupt: refused naming the tensor, the file
 * and the row. */
mt_status mt_mxfp4_decode_rows(const mt_st_tensor *blocks, const mt_st_tensor *scales, int64_t row0, int64_t n,
                               float *dst);

#endif
