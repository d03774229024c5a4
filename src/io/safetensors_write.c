/* The safetensors writer: fp32 sources stored as F32 or BF16, kept tensors as they were, one file
 * or shards plus index. */
#include "io/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/bf16.h"
#include "util/clock.h"
#include "util/stop_signal.h"

static int64_t numel_of(const mt_st_source *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The dtype a source is stored as: its own where it is kept, else the file's. */
static mt_st_dtype dtype_of(const mt_st_source *t, mt_st_dtype dtype) { return t->kept ? t->kept->dtype : dtype; }

static int64_t bytes_of(const mt_st_source *t, mt_st_dtype dtype) {
    return t->kept ? (int64_t)t->kept->nbytes : numel_of(t) * (int64_t)mt_st_dtype_size(dtype);
}

/* The header JSON, compact, with data offsets in the order the tensors are given. */
static char *header_json(const mt_st_source *ts, int count, mt_st_dtype dtype) {
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    json_int_t offset = 0;
    for (int i = 0; i < count; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < ts[i].ndim; d++) json_array_append_new(shape, json_integer(ts[i].shape[d]));
        json_int_t end = offset + bytes_of(&ts[i], dtype);
        const char *name = mt_st_dtype_name(dtype_of(&ts[i], dtype));
        json_object_set_new(root, ts[i].name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", name, "shape", shape,
                                                        "data_offsets", offset, end));
        offset = end;
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

static mt_status write_bytes(FILE *f, const char *path, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n) return mt_fail(MT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return MT_OK;
}

enum { CHUNK = 8192 };

static mt_status write_tensor_data(FILE *f, const char *path, const mt_st_source *t, mt_st_dtype dtype) {
    int64_t n = numel_of(t);
    if (t->kept) return write_bytes(f, path, t->kept->data, t->kept->nbytes);
    if (dtype == MT_ST_F32 && !t->gather) return write_bytes(f, path, t->data, (size_t)n * sizeof(float));
    float values[CHUNK];
    uint16_t bf16[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        if (t->gather) t->gather(t->user, i, m, values);
        const float *x = t->gather ? values : t->data + i;
        if (dtype == MT_ST_F32) {
            MT_TRY(write_bytes(f, path, x, (size_t)m * sizeof *x));
            continue;
        }
        for (int64_t j = 0; j < m; j++) bf16[j] = mt_f32_to_bf16(x[j]);
        MT_TRY(write_bytes(f, path, bf16, (size_t)m * sizeof *bf16));
    }
    return MT_OK;
}

static mt_status write_contents(FILE *f, const char *path, const mt_st_source *ts, int count, mt_st_dtype dtype) {
    char *header = header_json(ts, count, dtype);
    if (!header) return mt_fail(MT_ERR_NOMEM, "%s: cannot build the header", path);
    /* Pad the header with spaces so the data starts 8-byte aligned, as the Python library does. */
    size_t len = strlen(header);
    uint64_t padded = (len + 7) / 8 * 8;
    mt_status st = write_bytes(f, path, &padded, sizeof padded);
    if (st == MT_OK) st = write_bytes(f, path, header, len);
    if (st == MT_OK) st = write_bytes(f, path, "        ", (size_t)(padded - len));
    free(header);
    for (int i = 0; i < count && st == MT_OK; i++) {
        mt_test_pause("MT_TEST_WRITE_PAUSE_MS");
        st = mt_stop_requested() ? mt_stop_status("exporting") : write_tensor_data(f, path, &ts[i], dtype);
    }
    return st;
}

mt_status mt_safetensors_write_file(const char *path, const mt_st_source *tensors, int count, mt_st_dtype dtype) {
    if (dtype != MT_ST_F32 && dtype != MT_ST_BF16)
        return mt_fail(MT_ERR_INVALID, "%s: cannot write dtype %s (F32 or BF16)", path, mt_st_dtype_name(dtype));
    FILE *f = fopen(path, "wb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    mt_status st = write_contents(f, path, tensors, count, dtype);
    if (st == MT_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = mt_fail(MT_ERR_IO, "%s: cannot flush to disk: %s", path, strerror(errno));
    if (fclose(f) != 0 && st == MT_OK) st = mt_fail(MT_ERR_IO, "%s: cannot close: %s", path, strerror(errno));
    if (st != MT_OK) unlink(path);
    return st;
}

/* The end of the shard that starts at tensor `lo`: tensors are added while they fit in
 * `max_bytes`; a tensor larger than that gets a shard of its own. */
static int shard_end(const mt_st_source *ts, int count, int lo, mt_st_dtype dtype, int64_t max_bytes) {
    int64_t used = bytes_of(&ts[lo], dtype);
    int hi = lo + 1;
    while (hi < count && (max_bytes <= 0 || used + bytes_of(&ts[hi], dtype) <= max_bytes))
        used += bytes_of(&ts[hi++], dtype);
    return hi;
}

static mt_status write_index(const char *dir, const mt_st_source *ts, int count, mt_st_dtype dtype,
                             int64_t max_shard_bytes, int num_shards) {
    json_t *weight_map = json_object();
    json_int_t total = 0;
    int shard = 0;
    for (int lo = 0; lo < count; shard++) {
        int hi = shard_end(ts, count, lo, dtype, max_shard_bytes);
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard + 1, num_shards);
        for (; lo < hi; lo++) {
            json_object_set_new(weight_map, ts[lo].name, json_string(name));
            total += bytes_of(&ts[lo], dtype);
        }
    }
    json_t *index = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", total, "weight_map", weight_map);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = index ? json_dump_file(index, path, JSON_INDENT(2)) : -1;
    json_decref(index);
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return MT_OK;
}

mt_status mt_safetensors_write_dir(const char *dir, const mt_st_source *tensors, int count, mt_st_dtype dtype,
                                   int64_t max_shard_bytes) {
    char path[4096];
    int num_shards = 0;
    for (int lo = 0; lo < count; num_shards++) lo = shard_end(tensors, count, lo, dtype, max_shard_bytes);
    if (num_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return mt_safetensors_write_file(path, tensors, count, dtype);
    }
    int shard = 0;
    for (int lo = 0; lo < count; shard++) {
        int hi = shard_end(tensors, count, lo, dtype, max_shard_bytes);
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, shard + 1, num_shards);
        MT_TRY(mt_safetensors_write_file(path, tensors + lo, hi - lo, dtype));
        lo = hi;
    }
    return write_index(dir, tensors, count, dtype, max_shard_bytes, num_shards);
}
