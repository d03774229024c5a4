/* The safetensors reader: map, validate, look up, convert. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/bf16.h"
#include "util/fs.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian and is read in place: big-endian hosts are not supported");

static const struct {
    const char *name;
    size_t size;
} dtypes[MT_ST_DTYPE_COUNT] = {
    [MT_ST_BOOL] = {"BOOL", 1}, [MT_ST_U8] = {"U8", 1},   [MT_ST_I8] = {"I8", 1},
    [MT_ST_F8_E5M2] = {"F8_E5M2", 1}, [MT_ST_F8_E4M3] = {"F8_E4M3", 1},
    [MT_ST_I16] = {"I16", 2},   [MT_ST_U16] = {"U16", 2}, [MT_ST_F16] = {"F16", 2},
    [MT_ST_BF16] = {"BF16", 2}, [MT_ST_I32] = {"I32", 4}, [MT_ST_U32] = {"U32", 4},
    [MT_ST_F32] = {"F32", 4},   [MT_ST_F64] = {"F64", 8}, [MT_ST_I64] = {"I64", 8},
    [MT_ST_U64] = {"U64", 8},
};

const char *mt_st_dtype_name(mt_st_dtype dtype) { return dtype < MT_ST_DTYPE_COUNT ? dtypes[dtype].name : "?"; }
size_t mt_st_dtype_size(mt_st_dtype dtype) { return dtype < MT_ST_DTYPE_COUNT ? dtypes[dtype].size : 0; }

void mt_st_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

typedef struct {
    char *path;
    void *map;
    size_t size;
} mapped_file;

struct mt_safetensors {
    int num_files;
    mapped_file *files;
    int num_tensors, cap_tensors;
    mt_st_tensor *tensors; /* names are owned (strdup) */
};

/* ---- opening and validating one file ---- */

static mt_status map_file(mt_safetensors *set, const char *path) {
    mapped_file *grown = realloc(set->files, (size_t)(set->num_files + 1) * sizeof *grown);
    if (!grown) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate the file table", path);
    set->files = grown;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return mt_fail(MT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mt_fail(MT_ERR_INVALID, "%s: is %s, not a safetensors file", path, mt_file_kind(sb.st_mode));
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return mt_fail(MT_ERR_INVALID, "%s: %zu bytes is too short for a safetensors file (no 8-byte header length)",
                       path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return mt_fail(MT_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
    char *owned_path = strdup(path);
    if (!owned_path) {
        munmap(map, size);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate its path", path);
    }
    set->files[set->num_files++] = (mapped_file){owned_path, map, size};
    return MT_OK;
}

static mt_status push_tensor(mt_safetensors *set, const mt_st_tensor *t) {
    if (set->num_tensors == set->cap_tensors) {
        int cap = set->cap_tensors ? 2 * set->cap_tensors : 64;
        mt_st_tensor *grown = realloc(set->tensors, (size_t)cap * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate the tensor table", t->file);
        set->tensors = grown;
        set->cap_tensors = cap;
    }
    mt_st_tensor *dst = &set->tensors[set->num_tensors];
    *dst = *t;
    dst->name = strdup(t->name);
    if (!dst->name) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate tensor name '%s'", t->file, t->name);
    set->num_tensors++;
    return MT_OK;
}

static mt_status parse_shape(const char *path, const char *name, const json_t *shape, mt_st_tensor *t) {
    if (!json_is_array(shape) || json_array_size(shape) > MT_ST_MAX_DIMS)
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': 'shape' must be a list of at most %d integers", path,
                       name, MT_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        json_int_t dim = json_is_integer(d) ? json_integer_value(d) : -1;
        if (dim < 0 || __builtin_mul_overflow(t->numel, dim, &t->numel))
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': shape dimension %d is not a valid size", path, name, i);
        t->shape[i] = dim;
    }
    return MT_OK;
}

static mt_status parse_dtype(const char *path, const char *name, const json_t *dtype, mt_st_tensor *t) {
    if (!json_is_string(dtype))
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': 'dtype' must be a string", path, name);
    for (int d = 0; d < MT_ST_DTYPE_COUNT; d++) {
        if (!strcmp(json_string_value(dtype), dtypes[d].name)) {
            t->dtype = (mt_st_dtype)d;
            return MT_OK;
        }
    }
    return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': unknown dtype '%s'", path, name, json_string_value(dtype));
}

/* Parses one header entry; its bytes must lie in the data section and match shape x dtype. */
static mt_status parse_entry(const mapped_file *f, const char *name, const json_t *v, const uint8_t *data,
                             uint64_t data_size, mt_st_tensor *t) {
    if (!json_is_object(v))
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': header entry must be an object", f->path, name);
    *t = (mt_st_tensor){.name = name, .file = f->path};
    MT_TRY(parse_dtype(f->path, name, json_object_get(v, "dtype"), t));
    MT_TRY(parse_shape(f->path, name, json_object_get(v, "shape"), t));
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)))
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': 'data_offsets' must be [begin, end]", f->path, name);
    json_int_t begin = json_integer_value(json_array_get(offs, 0));
    json_int_t end = json_integer_value(json_array_get(offs, 1));
    if (begin < 0 || end < begin || (uint64_t)end > data_size)
        return mt_fail(MT_ERR_INVALID,
                       "%s: tensor '%s': data_offsets [%lld, %lld] fall outside the %llu-byte data section",
                       f->path, name, (long long)begin, (long long)end, (unsigned long long)data_size);
    int64_t need;
    if (__builtin_mul_overflow(t->numel, (int64_t)dtypes[t->dtype].size, &need) || need != end - begin) {
        char shape[160];
        mt_st_shape_str(t->ndim, t->shape, shape, sizeof shape);
        return mt_fail(MT_ERR_INVALID,
                       "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes but shape %s of %s needs %lld",
                       f->path, name, (long long)begin, (long long)end, (long long)(end - begin), shape,
                       dtypes[t->dtype].name, (long long)need);
    }
    t->data = data + begin;
    t->nbytes = (size_t)need;
    return MT_OK;
}

static mt_status check_metadata(const char *path, const json_t *meta) {
    const char *key;
    const json_t *v;
    if (!json_is_object(meta)) return mt_fail(MT_ERR_INVALID, "%s: '__metadata__' must be an object", path);
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v))
            return mt_fail(MT_ERR_INVALID, "%s: '__metadata__' entry '%s' must be a string", path, key);
    }
    return MT_OK;
}

static int by_position(const void *a, const void *b) {
    const mt_st_tensor *x = a, *y = b;
    if (x->data != y->data) return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* The tensors of a file must tile its data section exactly: no overlap, no gap, nothing after. */
static mt_status check_tiling(const mapped_file *f, mt_st_tensor *ts, int n, const uint8_t *data,
                              uint64_t data_size) {
    if (n > 0) qsort(ts, (size_t)n, sizeof *ts, by_position);
    const uint8_t *expected = data;
    for (int i = 0; i < n; i++) {
        const uint8_t *p = ts[i].data;
        if (p < expected)
            return mt_fail(MT_ERR_INVALID, "%s: tensors '%s' and '%s' overlap (data_offsets %lld and %lld)", f->path,
                           ts[i - 1].name, ts[i].name, (long long)((const uint8_t *)ts[i - 1].data - data),
                           (long long)(p - data));
        if (p > expected)
            return mt_fail(MT_ERR_INVALID, "%s: bytes [%lld, %lld) of the data section belong to no tensor (before '%s')",
                           f->path, (long long)(expected - data), (long long)(p - data), ts[i].name);
        expected = p + ts[i].nbytes;
    }
    if ((uint64_t)(expected - data) != data_size)
        return mt_fail(MT_ERR_INVALID, "%s: the data section is %llu bytes but its tensors cover only %lld", f->path,
                       (unsigned long long)data_size, (long long)(expected - data));
    return MT_OK;
}

static mt_status parse_header(mt_safetensors *set, const mapped_file *f) {
    uint64_t n;
    memcpy(&n, f->map, sizeof n);
    if (n > f->size - 8)
        return mt_fail(MT_ERR_INVALID, "%s: header length %llu runs past the end of the file (%zu bytes)", f->path,
                       (unsigned long long)n, f->size);
    if (n > MT_ST_MAX_HEADER_BYTES)
        return mt_fail(MT_ERR_INVALID, "%s: header length %llu exceeds the %d-byte limit", f->path,
                       (unsigned long long)n, MT_ST_MAX_HEADER_BYTES);
    const uint8_t *data = (const uint8_t *)f->map + 8 + n;
    uint64_t data_size = f->size - 8 - n;
    json_error_t err;
    json_t *root = json_loadb((const char *)f->map + 8, n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return mt_fail(MT_ERR_INVALID, "%s: header is not valid JSON: %s (byte %d of the header)", f->path, err.text,
                       err.position);
    mt_status st = json_is_object(root) ? MT_OK
                                        : mt_fail(MT_ERR_INVALID, "%s: header must be a JSON object", f->path);
    int first = set->num_tensors;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (st != MT_OK) break;
        mt_st_tensor t;
        if (!strcmp(key, "__metadata__")) st = check_metadata(f->path, v);
        else if ((st = parse_entry(f, key, v, data, data_size, &t)) == MT_OK) st = push_tensor(set, &t);
    }
    int count = set->num_tensors - first;
    /* A header of no tensors leaves the array NULL: no arithmetic on it. */
    if (st == MT_OK) st = check_tiling(f, count ? set->tensors + first : NULL, count, data, data_size);
    json_decref(root);
    return st;
}

static mt_status add_file(mt_safetensors *set, const char *path) {
    MT_TRY(map_file(set, path));
    return parse_header(set, &set->files[set->num_files - 1]);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const mt_st_tensor *)a)->name, ((const mt_st_tensor *)b)->name);
}

/* Sorts the tensors by name for lookup; a name in two shards is an error. */
static mt_status index_names(mt_safetensors *set) {
    if (set->num_tensors > 0) qsort(set->tensors, (size_t)set->num_tensors, sizeof *set->tensors, by_name);
    for (int i = 1; i < set->num_tensors; i++) {
        const mt_st_tensor *a = &set->tensors[i - 1], *b = &set->tensors[i];
        if (!strcmp(a->name, b->name))
            return mt_fail(MT_ERR_INVALID, "tensor '%s' appears twice: in %s and in %s", a->name, a->file, b->file);
    }
    return MT_OK;
}

static mt_status new_set(mt_safetensors **out) {
    *out = calloc(1, sizeof **out);
    return *out ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot allocate a safetensors set");
}

/* Closes the set on failure so that callers get either an open set or nothing. */
static mt_status finish(mt_safetensors **out, mt_status st) {
    if (st != MT_OK) {
        mt_safetensors_close(*out);
        *out = NULL;
    }
    return st;
}

mt_status mt_safetensors_open_file(const char *path, mt_safetensors **out) {
    MT_TRY(new_set(out));
    mt_status st = add_file(*out, path);
    if (st == MT_OK) st = index_names(*out);
    return finish(out, st);
}

/* ---- sharded models ---- */

/* Every weight_map entry must be found in the shard it names, and every shard tensor listed. */
static mt_status check_weight_map(const mt_safetensors *set, const char *dir, const char *index_path,
                                  const json_t *weight_map) {
    const char *name;
    const json_t *shard;
    json_object_foreach((json_t *)weight_map, name, shard) {
        const mt_st_tensor *t = mt_safetensors_find(set, name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(shard));
        if (!t || strcmp(t->file, path))
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is mapped to %s, which does not contain it", index_path,
                           name, json_string_value(shard));
    }
    for (int i = 0; i < set->num_tensors; i++) {
        if (!json_object_get(weight_map, set->tensors[i].name))
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' in %s is missing from the index's weight_map",
                           index_path, set->tensors[i].name, set->tensors[i].file);
    }
    return MT_OK;
}

static int is_plain_file_name(const char *s) {
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Opens each shard the index names, once. */
static mt_status open_shards(mt_safetensors *set, const char *dir, const char *index_path, const json_t *weight_map) {
    const char *name;
    const json_t *shard;
    json_object_foreach((json_t *)weight_map, name, shard) {
        if (!json_is_string(shard) || !is_plain_file_name(json_string_value(shard)))
            return mt_fail(MT_ERR_INVALID, "%s: weight_map entry for tensor '%s' must be a file name in %s",
                           index_path, name, dir);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(shard));
        int seen = 0;
        for (int i = 0; i < set->num_files && !seen; i++) seen = !strcmp(set->files[i].path, path);
        if (seen) continue;
        if (access(path, F_OK) != 0)
            return mt_fail(MT_ERR_INVALID, "%s: shard %s (named for tensor '%s') does not exist", index_path,
                           json_string_value(shard), name);
        MT_TRY(add_file(set, path));
    }
    return MT_OK;
}

static mt_status open_index(mt_safetensors *set, const char *dir, const char *index_path) {
    json_error_t err;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return mt_fail(MT_ERR_INVALID, "%s: not readable as JSON: %s (line %d, column %d)", index_path, err.text,
                       err.line, err.column);
    const json_t *weight_map = json_object_get(root, "weight_map");
    mt_status st = json_is_object(weight_map)
                       ? open_shards(set, dir, index_path, weight_map)
                       : mt_fail(MT_ERR_INVALID, "%s: 'weight_map' is missing or not an object", index_path);
    if (st == MT_OK) st = index_names(set);
    if (st == MT_OK) st = check_weight_map(set, dir, index_path, weight_map);
    json_decref(root);
    return st;
}

mt_status mt_safetensors_open_dir(const char *dir, mt_safetensors **out) {
    char index_path[4096], single_path[4096];
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    snprintf(single_path, sizeof single_path, "%s/model.safetensors", dir);
    MT_TRY(new_set(out));
    mt_status st;
    if (access(index_path, F_OK) == 0) {
        st = open_index(*out, dir, index_path);
    } else if (access(single_path, F_OK) == 0) {
        st = add_file(*out, single_path);
        if (st == MT_OK) st = index_names(*out);
    } else {
        st = mt_fail(MT_ERR_IO, "%s: holds neither model.safetensors nor model.safetensors.index.json", dir);
    }
    return finish(out, st);
}

void mt_safetensors_close(mt_safetensors *set) {
    if (!set) return;
    for (int i = 0; i < set->num_tensors; i++) free((char *)set->tensors[i].name);
    for (int i = 0; i < set->num_files; i++) {
        munmap(set->files[i].map, set->files[i].size);
        free(set->files[i].path);
    }
    free(set->tensors);
    free(set->files);
    free(set);
}

int mt_safetensors_count(const mt_safetensors *set) { return set->num_tensors; }

const mt_st_tensor *mt_safetensors_at(const mt_safetensors *set, int i) { return &set->tensors[i]; }

const mt_st_tensor *mt_safetensors_find(const mt_safetensors *set, const char *name) {
    mt_st_tensor key = {.name = name};
    return set->num_tensors > 0 ? bsearch(&key, set->tensors, (size_t)set->num_tensors, sizeof key, by_name) : NULL;
}

/* ---- conversion ---- */

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half to single, exact for every input: normals rebias the exponent, subnormals are
 * mantissa x 2^-24 (exact in float), infinities and NaNs keep their payload. */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return bits_to_f32(sign | ((exp + 127 - 15) << 23) | (man << 13));
    float magnitude = (float)man * 0x1p-24f;
    return sign ? -magnitude : magnitude;
}

/* Element i of a BF16, F16 or F32 tensor's bytes. */
static float element_f32(mt_st_dtype dtype, const uint8_t *src, int64_t i) {
    uint16_t h;
    float f;
    switch (dtype) {
    case MT_ST_BF16:
        memcpy(&h, src + 2 * i, sizeof h);
        return mt_bf16_to_f32(h);
    case MT_ST_F16:
        memcpy(&h, src + 2 * i, sizeof h);
        return f16_to_f32(h);
    default:
        memcpy(&f, src + 4 * i, sizeof f);
        return f;
    }
}

static mt_status not_convertible(const mt_st_tensor *t) {
    return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' has dtype %s; only BF16, F16 and F32 convert to fp32", t->file,
                   t->name, dtypes[t->dtype].name);
}

static int convertible(mt_st_dtype dtype) { return dtype == MT_ST_BF16 || dtype == MT_ST_F16 || dtype == MT_ST_F32; }

/* Big tensors convert on all cores; page faults on the mapping dominate otherwise. */
#define PARALLEL_MIN_NUMEL (1 << 20)

mt_status mt_st_tensor_to_f32(const mt_st_tensor *t, float *dst) {
    if (!convertible(t->dtype)) return not_convertible(t);
    if (t->dtype == MT_ST_F32) {
        memcpy(dst, t->data, t->nbytes);
        return MT_OK;
    }
    int64_t n = t->numel;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_NUMEL)
    for (int64_t i = 0; i < n; i++) dst[i] = element_f32(t->dtype, t->data, i);
    return MT_OK;
}

mt_status mt_st_tensor_gather_f32(const mt_st_tensor *t, int64_t first, int64_t n, int64_t stride, float *dst) {
    if (!convertible(t->dtype)) return not_convertible(t);
    if (first < 0 || n < 0 || stride < 1 || (n > 0 && first + (n - 1) * stride >= t->numel))
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': elements %lld + %lld x %lld asked, of %lld", t->file, t->name,
                       (long long)first, (long long)n, (long long)stride, (long long)t->numel);
    for (int64_t i = 0; i < n; i++) dst[i] = element_f32(t->dtype, t->data, first + i * stride);
    return MT_OK;
}

void mt_st_tensor_release(const mt_st_tensor *t, size_t begin, size_t end) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), at = (uintptr_t)t->data;
    if (end > t->nbytes) end = t->nbytes;
    uintptr_t lo = (at + begin + page - 1) / page * page, hi = (at + end) / page * page;
    if (begin < end && lo < hi) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
