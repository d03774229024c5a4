/* A layout tensor as a checkpoint holds it in its role's form (model/tensor_roles.h's mt_hub_form):
 * the rows of each expert interleaved, each expert's matrix transposed, or an MXFP4 pair. Reading
 * turns the held form into the layout's rows a band at a time, straight from the mapped file;
 * writing gives the held form's elements in the file's order from the layout's masters. */
#ifndef MT_IO_HUB_FORM_H
#define MT_IO_HUB_FORM_H

#include <stdint.h>

#include "io/safetensors.h"
#include "model/tensor_roles.h"

typedef struct {
    const mt_st_tensor *src;    /* the tensor, or the MXFP4 pair's blocks */
    const mt_st_tensor *scales; /* the pair's scales; NULL when src is plain */
    mt_hub_form form;
    int64_t experts, rows, cols; /* experts of [rows, cols] each, as the layout holds them */
} mt_held_tensor;

/* Layout rows [r0, r0 + n) (the experts' stacked) into dst, n x cols floats, on all cores. A corrupt
 * MXFP4 block is refused naming the tensor and the file (io/mxfp4.h). */
mt_status mt_held_read_rows(const mt_held_tensor *h, int64_t r0, int64_t n, float *dst);
/* Gives back the mapping's pages of experts [e0, e1), read (mt_st_tensor_release). */
void mt_held_release(const mt_held_tensor *h, int64_t e0, int64_t e1);

/* For an export (mt_st_source's gather): the masters of a tensor of `experts` x [rows, cols] and the
 * form to write it in (interleaved, transposed; never MXFP4). */
typedef struct {
    mt_hub_form form;
    int64_t rows, cols;
    const float *masters;
} mt_held_masters;
void mt_held_gather(const void *held_masters, int64_t first, int64_t n, float *dst);

#endif
