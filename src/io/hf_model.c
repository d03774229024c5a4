#include "io/hf_model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/hf_config.h"
#include "util/log.h"
#include "util/stop_signal.h"

/* Hugging Face stores vectors (norms, biases) as 1-D tensors, matrices as [rows, cols], and
 * transformers 5 the experts' stacked matrices as [experts, rows / experts, cols]. */
static int hf_shape(const mt_tensor *t, int64_t shape[3]) {
    if (t->experts) {
        shape[0] = t->experts;
        shape[1] = t->rows / t->experts;
        shape[2] = t->cols;
        return 3;
    }
    shape[0] = t->rows;
    shape[1] = t->cols;
    return t->cols == 1 ? 1 : 2;
}

static int shape_is(const mt_st_tensor *s, int ndim, const int64_t *shape) {
    if (s->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (s->shape[i] != shape[i]) return 0;
    return 1;
}

static mt_status shape_mismatch(const mt_st_tensor *s, int ndim, const int64_t *shape) {
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

/* One piece of a layout tensor as a checkpoint holds it: the tensor whole, or one of its hub parts
 * (layout.h: an expert's gate, up or down; Mixtral's router under its older name), rows [row0, row0 +
 * rows) of it. */
typedef struct {
    const mt_st_tensor *src;
    int tensor;
    int64_t row0;
} source;

/* The pieces of every tensor the layout needs: each whole by its name, or else by its hub parts
 * (all of them), each present, shaped as the layout says and convertible. */
typedef struct {
    source *pieces;
    int count;
    uint8_t *by_parts; /* [num_tensors]: the tensor comes in its hub parts */
    int64_t bytes;
} plan;

static mt_status take(plan *p, const mt_st_tensor *s, int tensor, int64_t row0) {
    if (s->dtype != MT_ST_BF16 && s->dtype != MT_ST_F16 && s->dtype != MT_ST_F32)
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' has dtype %s; only BF16, F16 and F32 load", s->file, s->name,
                       mt_st_dtype_name(s->dtype));
    p->pieces[p->count++] = (source){s, tensor, row0};
    p->bytes += (int64_t)s->nbytes;
    return MT_OK;
}

static mt_status plan_tensor(plan *p, const mt_safetensors *set, const char *dir, const mt_layout *lay, int i) {
    const mt_tensor *t = &lay->tensors[i];
    int64_t shape[3];
    int ndim = hf_shape(t, shape);
    const mt_st_tensor *whole = mt_safetensors_find(set, t->name);
    if (whole) {
        if (!shape_is(whole, ndim, shape)) return shape_mismatch(whole, ndim, shape);
        return take(p, whole, i, 0);
    }
    int parts = mt_tensor_hub_parts(t);
    for (int part = 0; part < parts; part++) {
        char name[sizeof t->name];
        int64_t row0, part_shape[2] = {0, t->cols};
        int rows;
        mt_tensor_hub_part(lay, t, part, name, sizeof name, &row0, &rows);
        const mt_st_tensor *s = mt_safetensors_find(set, name);
        if (!s && (part > 0 || parts > 1 || strcmp(name, t->name)))
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it), and so is '%s', which "
                           "holds %s", dir, t->name, name, parts > 1 ? "part of it one expert at a time" :
                           "it under its older name");
        if (!s) return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it)", dir, t->name);
        part_shape[0] = rows;
        int part_ndim = t->cols == 1 && !t->experts ? 1 : 2;
        if (!shape_is(s, part_ndim, part_shape)) return shape_mismatch(s, part_ndim, part_shape);
        MT_TRY(take(p, s, i, row0));
    }
    p->by_parts[i] = 1;
    return MT_OK;
}

static mt_status plan_all(plan *p, const mt_safetensors *set, const char *dir, const mt_layout *lay) {
    int most = 0;
    for (int i = 0; i < lay->num_tensors; i++) most += mt_tensor_hub_parts(&lay->tensors[i]);
    p->pieces = mt_calloc((size_t)most, sizeof *p->pieces, "the checkpoint's tensor list");
    p->by_parts = mt_calloc((size_t)lay->num_tensors, 1, "the checkpoint's tensor list");
    if (!p->pieces || !p->by_parts) return MT_ERR_NOMEM;
    for (int i = 0; i < lay->num_tensors; i++) MT_TRY(plan_tensor(p, set, dir, lay, i));
    return MT_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* A tensor the layout does not have is refused unless it is known to be harmless: older
 * checkpoints saved RoPE's inverse frequencies, and tied models may carry lm_head.weight. A
 * tensor held twice (whole and in its parts) is refused too. */
static mt_status check_extras(const mt_safetensors *set, const mt_layout *lay, const plan *p) {
    for (int i = 0; i < mt_safetensors_count(set); i++) {
        const mt_st_tensor *s = mt_safetensors_at(set, i);
        int part;
        const mt_tensor *t = mt_layout_find_hub(lay, s->name, &part);
        if (t && (part < 0) == !p->by_parts[t - lay->tensors]) continue;
        if (t)
            return mt_fail(MT_ERR_INVALID, "%s: holds both '%s' and '%s' (%s): the model's tensor twice", s->file,
                           t->name, s->name, part < 0 ? "its parts" : "a part of it");
        if (ends_with(s->name, ".rotary_emb.inv_freq")) {
            mt_log_debug("%s: ignoring '%s' (recomputed from rope_theta)", s->file, s->name);
            continue;
        }
        if (lay->cfg.tie_embeddings && !strcmp(s->name, "lm_head.weight")) {
            const mt_tensor *wte = mt_layout_tensor(lay, mt_unit_embed(), MT_T_WTE);
            int64_t shape[3];
            int ndim = hf_shape(wte, shape);
            if (!shape_is(s, ndim, shape)) return shape_mismatch(s, ndim, shape);
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

/* A model with NaN or Inf among its weights cannot be trained from: refused, naming the file and the
 * tensor (one it holds under its own name, or a part of one assembled from several: experts). */
static mt_status refuse_non_finite(const mt_st_tensor *s, const float *x, int64_t n) {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) if (n >= (1 << 20))
    for (int64_t j = 0; j < n; j++) bad += !isfinite(x[j]);
    if (!bad) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' holds non-finite values (NaN or Inf; %lld in its first piece that "
                   "does): the model cannot be trained from", s->file, s->name, (long long)bad);
}

/* Tensors convert this many elements at a time, through a buffer of their own. */
enum { CONVERT_PIECE = 1 << 22 };

static mt_status convert_all(const plan *p, const mt_layout *lay, mt_hf_sink_fn sink, void *sink_user,
                             mt_hf_progress_fn progress, void *user) {
    float *buf = mt_malloc(CONVERT_PIECE * sizeof *buf, "the weights' conversion buffer");
    if (!buf) return MT_ERR_NOMEM;
    int64_t done = 0;
    mt_status st = MT_OK;
    for (int i = 0; st == MT_OK && i < p->count; i++) {
        const source *piece = &p->pieces[i];
        const mt_tensor *t = &lay->tensors[piece->tensor];
        const mt_st_tensor *s = piece->src;
        int64_t at = master_offset(lay, t) + piece->row0 * t->cols, elem = s->numel ? (int64_t)s->nbytes / s->numel : 0;
        for (int64_t first = 0; st == MT_OK && first < s->numel; first += CONVERT_PIECE) {
            mt_st_tensor view = *s; /* the elements from `first` on */
            view.numel = s->numel - first < CONVERT_PIECE ? s->numel - first : CONVERT_PIECE;
            view.nbytes = (size_t)(view.numel * elem);
            view.data = (const uint8_t *)s->data + first * elem;
            st = mt_st_tensor_to_f32(&view, buf);
            if (st == MT_OK) st = refuse_non_finite(s, buf, view.numel);
            if (st == MT_OK) sink(sink_user, at + first, buf, view.numel);
        }
        int64_t numel = (int64_t)t->rows * t->cols, padding = padded_numel(numel) - numel;
        if (st == MT_OK && padding > 0) {
            memset(buf, 0, (size_t)padding * sizeof *buf);
            sink(sink_user, master_offset(lay, t) + numel, buf, padding);
        }
        done += (int64_t)s->nbytes;
        if (st == MT_OK && progress) progress(done, p->bytes, user);
    }
    free(buf);
    return st;
}

mt_status mt_hf_load_weights_into(const char *dir, const mt_layout *lay, mt_hf_sink_fn sink, void *sink_user,
                                  mt_hf_progress_fn progress, void *user) {
    mt_safetensors *set;
    MT_TRY(mt_safetensors_open_dir(dir, &set));
    plan p = {0};
    mt_status st = plan_all(&p, set, dir, lay);
    if (st == MT_OK) st = check_extras(set, lay, &p);
    if (st == MT_OK) st = convert_all(&p, lay, sink, sink_user, progress, user);
    free(p.pieces);
    free(p.by_parts);
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

/* The first tensor of `masters` holding NaN or Inf, with how many it holds; NULL when none does. */
static const mt_tensor *non_finite(const mt_layout *lay, const float *masters, int64_t *count) {
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        const float *p = masters + master_offset(lay, t);
        int64_t n = (int64_t)t->rows * t->cols, bad = 0;
#pragma omp parallel for reduction(+ : bad) if (n >= (1 << 20))
        for (int64_t j = 0; j < n; j++) bad += !isfinite(p[j]);
        *count = bad;
        if (bad) return t;
    }
    return NULL;
}

static mt_status check_finite(const mt_layout *lay, const float *masters, const char *out_dir) {
    int64_t bad;
    const mt_tensor *t = non_finite(lay, masters, &bad);
    if (t)
        return mt_fail(MT_ERR_NUMERIC, "%s: not exported: tensor '%s' holds %lld non-finite values", out_dir,
                       t->name, (long long)bad);
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

/* The temporary directories of earlier exports to `target` (target.tmp-XXXXXX) that no export
 * holds any more (a killed one's): removed, and said so. A running export holds its own locked
 * (flock on the directory), so it is never taken for a stale one. */
static void remove_stale_tmp_dirs(const char *target) {
    char parent_buf[4096], base_buf[4096], prefix[4096 + 8];
    snprintf(parent_buf, sizeof parent_buf, "%s", target);
    snprintf(base_buf, sizeof base_buf, "%s", target);
    const char *parent = dirname(parent_buf), *base = basename(base_buf);
    int n = snprintf(prefix, sizeof prefix, "%s.tmp-", base);
    DIR *d = opendir(parent);
    if (!d || n < 0 || (size_t)n >= sizeof prefix) {
        if (d) closedir(d);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, (size_t)n) || strlen(e->d_name) != (size_t)n + 6) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            mt_log_info("removing %s, the temporary directory of an export to %s that did not finish", path, target);
            remove_tmp_dir(path);
        }
        close(fd);
    }
    closedir(d);
}

static mt_status sync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: cannot sync: %s", path, strerror(errno));
    return MT_OK;
}

/* Every tensor under the names checkpoints on the hub hold it (mt_tensor_hub_part): the experts one
 * at a time, which transformers 4 loads as they are and transformers 5 through its conversion
 * mapping (the fused layout it keeps in memory), as do the other tools that read these families. */
static mt_st_source *export_sources(const mt_layout *lay, const float *masters, int *count, char **names) {
    int n = 0;
    for (int i = 0; i < lay->num_tensors; i++) n += mt_tensor_hub_parts(&lay->tensors[i]);
    mt_st_source *src = mt_calloc((size_t)n, sizeof *src, "the export's tensor list");
    *names = mt_calloc((size_t)n, sizeof lay->tensors[0].name, "the export's tensor names");
    if (!src || !*names) {
        free(src);
        free(*names);
        return NULL;
    }
    int at = 0;
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        for (int part = 0; part < mt_tensor_hub_parts(t); part++, at++) {
            char *name = *names + (size_t)at * sizeof t->name;
            int64_t row0;
            int rows;
            mt_tensor_hub_part(lay, t, part, name, sizeof t->name, &row0, &rows);
            src[at].name = name;
            src[at].ndim = t->cols == 1 && !t->experts ? 1 : 2;
            src[at].shape[0] = rows;
            src[at].shape[1] = t->cols;
            if (mt_tensor_hub_parts(t) == 1) src[at].ndim = hf_shape(t, src[at].shape); /* whole: the hub's shape */
            src[at].data = masters + master_offset(lay, t) + row0 * t->cols;
        }
    }
    *count = n;
    return src;
}

static mt_status write_file(const char *dir, const mt_hf_file *file) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, file->name);
    FILE *f = fopen(path, "wb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int bad = fwrite(file->text, 1, file->len, f) != file->len;
    bad |= fclose(f) != 0;
    return bad ? mt_fail(MT_ERR_IO, "%s: cannot write: %s", path, strerror(errno)) : MT_OK;
}

/* generation_config.json's eos_token_id with the stop ids added: a list of the distinct ids (one
 * id stays a number, as transformers writes it). */
static mt_status add_stop_ids(const char *dir, const int32_t *ids, size_t n) {
    char path[8192];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_error_t err;
    json_t *g = json_load_file(path, 0, &err), *eos = json_array();
    if (!g || !eos) {
        json_decref(g);
        json_decref(eos);
        return mt_fail(MT_ERR_IO, "%s: cannot read back: %s", path, err.text);
    }
    const json_t *had = json_object_get(g, "eos_token_id");
    if (json_is_integer(had)) json_array_append(eos, (json_t *)had);
    else if (json_is_array(had)) json_array_extend(eos, (json_t *)had);
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t k = 0; k < json_array_size(eos); k++) seen |= json_integer_value(json_array_get(eos, k)) == ids[i];
        if (!seen) json_array_append_new(eos, json_integer(ids[i]));
    }
    json_object_set(g, "eos_token_id", json_array_size(eos) == 1 ? json_array_get(eos, 0) : eos);
    int rc = json_dump_file(g, path, JSON_INDENT(2));
    json_decref(eos);
    json_decref(g);
    return rc == 0 ? MT_OK : mt_fail(MT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
}

static mt_status write_model(const mt_layout *lay, const float *masters, const char *dir,
                             const mt_hf_export_options *opt) {
    int count;
    char *names;
    mt_st_source *src = export_sources(lay, masters, &count, &names);
    if (!src) return MT_ERR_NOMEM;
    const char *torch_dtype = opt->dtype == MT_ST_BF16 ? "bfloat16" : "float32";
    mt_status st = mt_hf_config_write(&lay->cfg, torch_dtype, dir);
    if (st == MT_OK && opt->n_stop_ids) st = add_stop_ids(dir, opt->stop_ids, opt->n_stop_ids);
    if (st == MT_OK) st = mt_safetensors_write_dir(dir, src, count, opt->dtype, opt->max_shard_bytes);
    for (size_t i = 0; st == MT_OK && i < opt->n_files; i++) st = write_file(dir, &opt->files[i]);
    free(src);
    free(names);
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
    remove_stale_tmp_dirs(target);
    char tmp[4096 + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", target);
    if (!mkdtemp(tmp)) return mt_fail(MT_ERR_IO, "%s: cannot create a temporary directory: %s", tmp, strerror(errno));
    /* held while this export writes it: another export's clean-up passes it over */
    int held = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (held >= 0) flock(held, LOCK_EX);
    int temp = mt_stop_temp_add(tmp); /* a second signal, which ends the process at once, removes it too */
    mt_status st = write_model(lay, masters, tmp, opt);
    /* mkdtemp made it 0700: the model is for others to read too */
    if (st == MT_OK && chmod(tmp, 0755) != 0) st = mt_fail(MT_ERR_IO, "%s: cannot chmod: %s", tmp, strerror(errno));
    if (st == MT_OK) st = sync_dir(tmp);
    if (st == MT_OK && rename(tmp, target) != 0)
        st = mt_fail(MT_ERR_IO, "%s: cannot move the export into place: %s", target, strerror(errno));
    if (st != MT_OK) remove_tmp_dir(tmp);
    if (held >= 0) close(held);
    mt_stop_temp_forget(temp);
    MT_TRY(st);
    char *parent = dirname(tmp); /* tmp is no longer needed; dirname may write into it */
    MT_TRY(sync_dir(parent));
    int tensors = 0;
    for (int i = 0; i < lay->num_tensors; i++) tensors += mt_tensor_hub_parts(&lay->tensors[i]);
    mt_log_info("exported %d tensors (%s) to %s", tensors, mt_st_dtype_name(opt->dtype), target);
    return MT_OK;
}
