/* The safetensors format: an 8-byte little-endian header length N, N bytes of JSON header
 * ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, padded
 * with spaces), then the tensors' bytes, contiguous, offsets relative to the end of the header.
 * A model may be one model.safetensors or shards listed by model.safetensors.index.json.
 *
 * The reader maps the files and validates every header before a byte of data is trusted; tensor
 * data is converted to fp32 straight from the mapping, one tensor at a time, so loading never
 * needs a second copy of the model in memory. The writer converts fp32 to bf16 or fp32, and
 * copies a tensor it keeps as it was. */
#ifndef MT_IO_SAFETENSORS_H
#define MT_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef enum {
    MT_ST_BOOL, MT_ST_U8, MT_ST_I8, MT_ST_F8_E5M2, MT_ST_F8_E4M3, MT_ST_I16, MT_ST_U16, MT_ST_F16,
    MT_ST_BF16, MT_ST_I32, MT_ST_U32, MT_ST_F32, MT_ST_F64, MT_ST_I64, MT_ST_U64,
    MT_ST_DTYPE_COUNT
} mt_st_dtype;

#define MT_ST_MAX_DIMS 8
/* The Python library refuses larger headers; so does this reader. */
#define MT_ST_MAX_HEADER_BYTES 100000000

/* "BF16", "F32", ... as the header spells it. */
const char *mt_st_dtype_name(mt_st_dtype dtype);
size_t mt_st_dtype_size(mt_st_dtype dtype);
/* Writes a shape as "[4096, 128]" into buf. */
void mt_st_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);

/* One tensor of an open set: its bytes are inside the mapped file. */
typedef struct {
    const char *name;
    mt_st_dtype dtype;
    int ndim;
    int64_t shape[MT_ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* numel * dtype size bytes, not necessarily aligned */
    size_t nbytes;
    const char *file; /* path of the file holding it, for messages */
} mt_st_tensor;

/* The tensors of one file or of all shards of a model, sorted by name. */
typedef struct mt_safetensors mt_safetensors;

/* Opens and validates one .safetensors file. */
mt_status mt_safetensors_open_file(const char *path, mt_safetensors **out);
/* Opens a model directory: its model.safetensors.index.json and every shard it names, or else its
 * model.safetensors. */
mt_status mt_safetensors_open_dir(const char *dir, mt_safetensors **out);
void mt_safetensors_close(mt_safetensors *set);

int mt_safetensors_count(const mt_safetensors *set);
const mt_st_tensor *mt_safetensors_at(const mt_safetensors *set, int i);
/* The tensor called `name`, or NULL. */
const mt_st_tensor *mt_safetensors_find(const mt_safetensors *set, const char *name);

/* Converts a BF16, F16 or F32 tensor to `dst` (numel floats), exactly; other dtypes fail. */
mt_status mt_st_tensor_to_f32(const mt_st_tensor *t, float *dst);
/* The same for elements first, first + stride, ... (n of them) into dst[0..n), on the calling thread:
 * a column of a matrix held transposed. */
mt_status mt_st_tensor_gather_f32(const mt_st_tensor *t, int64_t first, int64_t n, int64_t stride, float *dst);
/* Gives back the memory of the mapping's pages wholly inside bytes [begin, end) of t's data once it
 * is converted (it reads again from the file if touched): loading holds no more of the files than
 * the piece it converts. */
void mt_st_tensor_release(const mt_st_tensor *t, size_t begin, size_t end);

/* Writing: fp32 sources stored as MT_ST_F32 or MT_ST_BF16 (round to nearest even), or a tensor
 * kept as it is: `kept` (a tensor of an open set) written byte for byte in its own dtype. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[MT_ST_MAX_DIMS];
    const float *data;
    const mt_st_tensor *kept;
    /* Or, where the file's order is not data's (a tensor held transposed): gather(user, first, n, dst)
     * gives elements [first, first + n) in the file's order. */
    void (*gather)(const void *user, int64_t first, int64_t n, float *dst);
    const void *user;
} mt_st_source;

/* Writes one .safetensors file with __metadata__ {"format": "pt"}. */
mt_status mt_safetensors_write_file(const char *path, const mt_st_source *tensors, int count, mt_st_dtype dtype);
/* Writes the tensors into the existing directory `dir`: one model.safetensors when they fit in
 * `max_shard_bytes` (0: no limit), else model-0000k-of-0000n.safetensors shards, filled in order,
 * and model.safetensors.index.json. */
mt_status mt_safetensors_write_dir(const char *dir, const mt_st_source *tensors, int count, mt_st_dtype dtype,
                                   int64_t max_shard_bytes);

#endif
