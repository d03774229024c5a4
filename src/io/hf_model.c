#include "io/hf_model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/hf_config.h"
#include "util/log.h"

/* Hugging Face stores vectors (norms, biases) as 1-D tensors, matrices as [rows, cols]. */
static int hf_shape(const mt_tensor *t, int64_t shape[2]) {
    shape[0] = t->rows;
    shape[1] = t->cols;
    return t->cols == 1 ? 1 : 2;
}

static int same_shape(const mt_st_tensor *s, const mt_tensor *t) {
    int64_t shape[2];
    int ndim = hf_shape(t, shape);
    if (s->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (s->shape[i] != shape[i]) return 0;
    return 1;
}

static mt_status shape_mismatch(const mt_st_tensor *s, const mt_tensor *t) {
    int64_t shape[2];
    int ndim = hf_shape(t, shape);
    char expected[64], found[160];
    mt_st_shape_str(ndim, shape, expected, sizeof expected);
    mt_st_shape_str(s->ndim, s->shape, found, sizeof found);
    return mt_fail(MT_ERR_INVALID, "%s: tensor '%s': expected shape %s, found %s", s->file, s->name, expected, found);
}

mt_status mt_hf_load_config(const char *dir, mt_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return mt_hf_config_read(path, cfg);
}

/* Every tensor the layout needs is present, shaped as the layout says and convertible. */
static mt_status check_needed(const mt_safetensors *set, const char *dir, const mt_layout *lay, int64_t *total) {
    *total = 0;
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        const mt_st_tensor *s = mt_safetensors_find(set, t->name);
        if (!s) return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it)", dir, t->name);
        if (!same_shape(s, t)) return shape_mismatch(s, t);
        if (s->dtype != MT_ST_BF16 && s->dtype != MT_ST_F16 && s->dtype != MT_ST_F32)
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' has dtype %s; only BF16, F16 and F32 load", s->file,
                           s->name, mt_st_dtype_name(s->dtype));
        *total += (int64_t)s->nbytes;
    }
    return MT_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* A tensor the layout does not have is refused unless it is known to be harmless: older
 * checkpoints saved RoPE's inverse frequencies, and tied models may carry lm_head.weight. */
static mt_status check_extras(const mt_safetensors *set, const mt_layout *lay) {
    for (int i = 0; i < mt_safetensors_count(set); i++) {
        const mt_st_tensor *s = mt_safetensors_at(set, i);
        if (mt_layout_find(lay, s->name, NULL)) continue;
        if (ends_with(s->name, ".rotary_emb.inv_freq")) {
            mt_log_debug("%s: ignoring '%s' (recomputed from rope_theta)", s->file, s->name);
            continue;
        }
        if (lay->cfg.tie_embeddings && !strcmp(s->name, "lm_head.weight")) {
            const mt_tensor *wte = mt_layout_tensor(lay, mt_unit_embed(), MT_T_WTE);
            if (!same_shape(s, wte)) return shape_mismatch(s, wte);
            mt_log_info("%s: ignoring '%s': tie_word_embeddings reuses the embedding", s->file, s->name);
            continue;
        }
        return mt_fail(MT_ERR_INVALID, "%s: unexpected tensor '%s': not part of the model config.json describes",
                       s->file, s->name);
    }
    return MT_OK;
}

static int64_t padded_numel(int64_t n) { return (n + MT_TENSOR_ALIGN - 1) / MT_TENSOR_ALIGN * MT_TENSOR_ALIGN; }

/* Where tensor t starts in the master array. */
static int64_t master_offset(const mt_layout *lay, const mt_tensor *t) { return lay->units[t->unit].offset + t->offset; }

/* Tensors convert this many elements at a time, through a buffer of their own. */
enum { CONVERT_PIECE = 1 << 22 };

static mt_status convert_all(const mt_safetensors *set, const mt_layout *lay, mt_hf_sink_fn sink, void *sink_user,
                             int64_t total, mt_hf_progress_fn progress, void *user) {
    float *buf = mt_malloc(CONVERT_PIECE * sizeof *buf, "the weights' conversion buffer");
    if (!buf) return MT_ERR_NOMEM;
    int64_t done = 0;
    mt_status st = MT_OK;
    for (int i = 0; st == MT_OK && i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        const mt_st_tensor *s = mt_safetensors_find(set, t->name);
        int64_t at = master_offset(lay, t), elem = s->numel ? (int64_t)s->nbytes / s->numel : 0;
        for (int64_t first = 0; st == MT_OK && first < s->numel; first += CONVERT_PIECE) {
            mt_st_tensor piece = *s; /* a view of the elements from `first` on */
            piece.numel = s->numel - first < CONVERT_PIECE ? s->numel - first : CONVERT_PIECE;
            piece.nbytes = (size_t)(piece.numel * elem);
            piece.data = (const uint8_t *)s->data + first * elem;
            st = mt_st_tensor_to_f32(&piece, buf);
            if (st == MT_OK) sink(sink_user, at + first, buf, piece.numel);
        }
        int64_t padding = padded_numel(s->numel) - s->numel;
        if (st == MT_OK && padding > 0) {
            memset(buf, 0, (size_t)padding * sizeof *buf);
            sink(sink_user, at + s->numel, buf, padding);
        }
        done += (int64_t)s->nbytes;
        if (st == MT_OK && progress) progress(done, total, user);
    }
    free(buf);
    return st;
}

mt_status mt_hf_load_weights_into(const char *dir, const mt_layout *lay, mt_hf_sink_fn sink, void *sink_user,
                                  mt_hf_progress_fn progress, void *user) {
    mt_safetensors *set;
    MT_TRY(mt_safetensors_open_dir(dir, &set));
    int64_t total;
    mt_status st = check_needed(set, dir, lay, &total);
    if (st == MT_OK) st = check_extras(set, lay);
    if (st == MT_OK) st = convert_all(set, lay, sink, sink_user, total, progress, user);
    mt_safetensors_close(set);
    return st;
}

static void into_array(void *masters, int64_t at, const float *values, int64_t n) {
    memcpy((float *)masters + at, values, (size_t)n * sizeof *values);
}

mt_status mt_hf_load_weights(const char *dir, const mt_layout *lay, float *masters, mt_hf_progress_fn progress,
                             void *user) {
    return mt_hf_load_weights_into(dir, lay, into_array, masters, progress, user);
}

/* ---- export ---- */

static mt_status check_finite(const mt_layout *lay, const float *masters, const char *out_dir) {
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        const float *p = masters + master_offset(lay, t);
        int64_t n = (int64_t)t->rows * t->cols, bad = 0;
#pragma omp parallel for reduction(+ : bad) if (n >= (1 << 20))
        for (int64_t j = 0; j < n; j++) bad += !isfinite(p[j]);
        if (bad)
            return mt_fail(MT_ERR_NUMERIC, "%s: not exported: tensor '%s' holds %lld non-finite values", out_dir,
                           t->name, (long long)bad);
    }
    return MT_OK;
}

/* The export may go to a new path or to an empty directory (rename replaces an empty one). */
static mt_status check_destination(const char *out_dir) {
    DIR *d = opendir(out_dir);
    if (!d) {
        if (errno == ENOENT) return MT_OK;
        return mt_fail(MT_ERR_IO, "%s: cannot export there: %s", out_dir, strerror(errno));
    }
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty ? MT_OK : mt_fail(MT_ERR_INVALID, "%s: exists and is not empty; refusing to overwrite it", out_dir);
}

/* Removes the temporary directory and the files this export wrote into it. */
static void remove_tmp_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char file[8192];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        unlink(file);
    }
    closedir(d);
    rmdir(path);
}

static mt_status sync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: cannot sync: %s", path, strerror(errno));
    return MT_OK;
}

static mt_st_source *export_sources(const mt_layout *lay, const float *masters) {
    mt_st_source *src = mt_calloc((size_t)lay->num_tensors, sizeof *src, "the export's tensor list");
    if (!src) return NULL;
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        src[i].name = t->name;
        src[i].ndim = hf_shape(t, src[i].shape);
        src[i].data = masters + master_offset(lay, t);
    }
    return src;
}

static mt_status write_model(const mt_layout *lay, const float *masters, const char *dir,
                             const mt_hf_export_options *opt) {
    mt_st_source *src = export_sources(lay, masters);
    if (!src) return MT_ERR_NOMEM;
    const char *torch_dtype = opt->dtype == MT_ST_BF16 ? "bfloat16" : "float32";
    mt_status st = mt_hf_config_write(&lay->cfg, torch_dtype, dir);
    if (st == MT_OK) st = mt_safetensors_write_dir(dir, src, lay->num_tensors, opt->dtype, opt->max_shard_bytes);
    free(src);
    return st;
}

mt_status mt_hf_export(const mt_layout *lay, const float *masters, const char *out_dir,
                       const mt_hf_export_options *opt) {
    if (opt->dtype != MT_ST_BF16 && opt->dtype != MT_ST_F32)
        return mt_fail(MT_ERR_INVALID, "%s: export dtype must be BF16 or F32, got %s", out_dir,
                       mt_st_dtype_name(opt->dtype));
    /* Without trailing slashes, so the temporary directory is a sibling and not a child. */
    char target[4096];
    snprintf(target, sizeof target, "%s", out_dir);
    for (size_t n = strlen(target); n > 1 && target[n - 1] == '/'; n--) target[n - 1] = '\0';
    if (!target[0]) return mt_fail(MT_ERR_INVALID, "export: the output directory is empty");
    MT_TRY(check_finite(lay, masters, target));
    MT_TRY(check_destination(target));
    char tmp[4096 + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", target);
    if (!mkdtemp(tmp)) return mt_fail(MT_ERR_IO, "%s: cannot create a temporary directory: %s", tmp, strerror(errno));
    mt_status st = write_model(lay, masters, tmp, opt);
    if (st == MT_OK) st = sync_dir(tmp);
    if (st == MT_OK && rename(tmp, target) != 0)
        st = mt_fail(MT_ERR_IO, "%s: cannot move the export into place: %s", target, strerror(errno));
    if (st != MT_OK) {
        remove_tmp_dir(tmp);
        return st;
    }
    char *parent = dirname(tmp); /* tmp is no longer needed; dirname may write into it */
    MT_TRY(sync_dir(parent));
    mt_log_info("exported %d tensors (%s) to %s", lay->num_tensors, mt_st_dtype_name(opt->dtype), target);
    return MT_OK;
}
