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
#include "io/hub_form.h"
#include "io/mxfp4.h"
#include "model/wrappers.h"
#include "util/log.h"
#include "util/stop_signal.h"

/* A tensor's name under a wrapper's prefix (the layout's names are at most 64 bytes). */
enum { NAME_MAX_BYTES = 160 };

/* Hugging Face stores vectors (norms, biases) as 1-D tensors, matrices as [rows, cols], and
 * transformers 5 the experts' stacked matrices as [experts, rows / experts, cols] (their stacked
 * biases [experts, rows / experts]); a role's form may hold each expert's matrix transposed. */
static int hf_shape(const mt_layout *lay, const mt_tensor *t, int64_t shape[3]) {
    if (t->experts) {
        int64_t rows = t->rows / t->experts;
        int transposed = mt_tensor_hub_form(lay, t).transposed;
        shape[0] = t->experts;
        shape[1] = transposed ? t->cols : rows;
        shape[2] = transposed ? rows : t->cols;
        return t->cols == 1 ? 2 : 3;
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
 * rows) of it; or the tensor whole in its role's form (held.src set: io/hub_form.h). */
typedef struct {
    const mt_st_tensor *src;
    int tensor;
    int64_t row0;
    mt_held_tensor held;
} source;

typedef enum { BY_NAME, BY_PARTS, BY_BLOCKS } held_as;

/* The pieces of every tensor the layout needs: each whole by its name, or else by its hub parts
 * (all of them), or else as an MXFP4 pair, each present, shaped as the layout says and convertible. */
typedef struct {
    source *pieces;
    int count;
    uint8_t *held_as; /* [num_tensors] */
    const mt_st_tensor *role_seen[MT_T_COUNT][2]; /* a role's first tensor held plain, as MXFP4 */
    int64_t bytes;
    const mt_wrapper_layout *names; /* a wrapper's names for the text model's tensors; NULL: their own */
} plan;

/* The name a checkpoint of these names holds a text model's tensor under. */
static const char *hub_name(const mt_wrapper_layout *names, const char *text_name, char *buf, size_t cap) {
    if (!names) return text_name;
    mt_wrapper_hub_name(names, text_name, buf, cap);
    return buf;
}

static mt_status take(plan *p, const mt_st_tensor *s, int tensor, int64_t row0, const mt_held_tensor *held) {
    if (s->dtype != MT_ST_BF16 && s->dtype != MT_ST_F16 && s->dtype != MT_ST_F32)
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' has dtype %s; only BF16, F16 and F32 load", s->file, s->name,
                       mt_st_dtype_name(s->dtype));
    p->pieces[p->count++] = (source){s, tensor, row0, *held};
    p->bytes += (int64_t)s->nbytes;
    return MT_OK;
}

/* A role's tensors come all as MXFP4 pairs or all plain. */
static mt_status note_role(plan *p, mt_tensor_kind kind, const mt_st_tensor *s, int blocks) {
    if (!p->role_seen[kind][blocks]) p->role_seen[kind][blocks] = s;
    const mt_st_tensor *b = p->role_seen[kind][1], *plain = p->role_seen[kind][0];
    if (!b || !plain) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is MXFP4 (blocks and scales) but '%s' (%s) is %s: a role's "
                   "tensors must all be MXFP4 or all plain", b->file, b->name, plain->name, plain->file,
                   mt_st_dtype_name(plain->dtype));
}

static const mt_st_tensor *find_suffixed(const mt_safetensors *set, const char *name, const char *suffix) {
    char full[NAME_MAX_BYTES + 16];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    return mt_safetensors_find(set, full);
}

/* Tensor i, held as `named`, as the MXFP4 pair NAME_blocks, NAME_scales: blocks [E, rows, cols / 32,
 * 16] of the layout's rows (as the form holds them) and columns. */
static mt_status plan_mxfp4(plan *p, const mt_safetensors *set, const char *dir, const mt_layout *lay, int i,
                            const char *named, const mt_st_tensor *blocks) {
    const mt_tensor *t = &lay->tensors[i];
    const mt_st_tensor *scales = find_suffixed(set, named, "_scales");
    if (!scales)
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s_scales' is missing: '%s' (%s) is MXFP4 blocks without their "
                       "scales", dir, named, blocks->name, blocks->file);
    int64_t rows, cols;
    MT_TRY(mt_mxfp4_shape(blocks, scales, &rows, &cols));
    if (t->cols % 32)
        return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is MXFP4, whose blocks are 32 columns, but the config gives "
                       "it %d", blocks->file, blocks->name, t->cols);
    int64_t experts = t->experts ? t->experts : 1, shape[4] = {experts, t->rows / experts, t->cols / 32, 16};
    int ndim = t->experts ? 4 : 3;
    if (!shape_is(blocks, ndim, shape + 4 - ndim)) return shape_mismatch(blocks, ndim, shape + 4 - ndim);
    MT_TRY(note_role(p, t->kind, blocks, 1));
    mt_hub_form form = mt_tensor_hub_form(lay, t);
    form.transposed = 0; /* MXFP4 blocks run along the layout's rows */
    p->pieces[p->count++] = (source){blocks, i, 0, {blocks, scales, form, experts, t->rows / experts, t->cols}};
    p->bytes += (int64_t)(blocks->nbytes + scales->nbytes);
    p->held_as[i] = BY_BLOCKS;
    return MT_OK;
}

/* Tensor i under its own name: as the layout, or in its role's form. */
static mt_status plan_whole(plan *p, const mt_layout *lay, int i, const mt_st_tensor *whole) {
    const mt_tensor *t = &lay->tensors[i];
    mt_hub_form form = mt_tensor_hub_form(lay, t);
    int64_t shape[3], experts = t->experts ? t->experts : 1;
    int ndim = hf_shape(lay, t, shape);
    if (!shape_is(whole, ndim, shape)) return shape_mismatch(whole, ndim, shape);
    if (form.mxfp4) MT_TRY(note_role(p, t->kind, whole, 0));
    mt_held_tensor held = {0};
    if (form.interleaved || form.transposed)
        held = (mt_held_tensor){whole, NULL, form, experts, t->rows / experts, t->cols};
    return take(p, whole, i, 0, &held);
}

static mt_status plan_tensor(plan *p, const mt_safetensors *set, const char *dir, const mt_layout *lay, int i) {
    const mt_tensor *t = &lay->tensors[i];
    char whole_name[NAME_MAX_BYTES], part_name[NAME_MAX_BYTES];
    const char *named = hub_name(p->names, t->name, whole_name, sizeof whole_name);
    const mt_st_tensor *whole = mt_safetensors_find(set, named);
    const mt_st_tensor *blocks = mt_tensor_hub_form(lay, t).mxfp4 ? find_suffixed(set, named, "_blocks") : NULL;
    if (whole && blocks)
        return mt_fail(MT_ERR_INVALID, "%s: holds both '%s' (%s) and '%s' (MXFP4): the model's tensor twice",
                       blocks->file, whole->name, mt_st_dtype_name(whole->dtype), blocks->name);
    if (blocks) return plan_mxfp4(p, set, dir, lay, i, named, blocks);
    if (whole) return plan_whole(p, lay, i, whole);
    int parts = mt_tensor_hub_parts(lay, t);
    for (int part = 0; part < parts; part++) {
        char name[sizeof t->name];
        int64_t row0, part_shape[2] = {0, t->cols};
        int rows;
        mt_tensor_hub_part(lay, t, part, name, sizeof name, &row0, &rows);
        const char *part_named = hub_name(p->names, name, part_name, sizeof part_name);
        const mt_st_tensor *s = mt_safetensors_find(set, part_named);
        if (!s && (part > 0 || parts > 1 || strcmp(name, t->name)))
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it), and so is '%s', which "
                           "holds %s", dir, named, part_named, parts > 1 ? "part of it one expert at a time" :
                           "it under its older name");
        if (!s && mt_tensor_hub_form(lay, t).mxfp4)
            return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it), and so are its MXFP4 "
                           "blocks '%s_blocks'", dir, named, named);
        if (!s) return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it)", dir, named);
        part_shape[0] = rows;
        int part_ndim = t->cols == 1 && !t->experts ? 1 : 2;
        if (!shape_is(s, part_ndim, part_shape)) return shape_mismatch(s, part_ndim, part_shape);
        MT_TRY(take(p, s, i, row0, &(mt_held_tensor){0}));
    }
    p->held_as[i] = BY_PARTS;
    return MT_OK;
}

static mt_status plan_all(plan *p, const mt_safetensors *set, const char *dir, const mt_layout *lay) {
    int most = 0;
    for (int i = 0; i < lay->num_tensors; i++) most += mt_tensor_hub_parts(lay, &lay->tensors[i]);
    p->pieces = mt_calloc((size_t)most, sizeof *p->pieces, "the checkpoint's tensor list");
    p->held_as = mt_calloc((size_t)lay->num_tensors, 1, "the checkpoint's tensor list");
    if (!p->pieces || !p->held_as) return MT_ERR_NOMEM;
    for (int i = 0; i < lay->num_tensors; i++) MT_TRY(plan_tensor(p, set, dir, lay, i));
    return MT_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The layout tensor whose MXFP4 blocks or scales `name` would be, or NULL. */
static const mt_tensor *mxfp4_owner(const mt_layout *lay, const char *name) {
    if (!ends_with(name, "_blocks") && !ends_with(name, "_scales")) return NULL;
    char base[sizeof lay->tensors[0].name];
    size_t n = strlen(name) - strlen("_blocks");
    if (n >= sizeof base) return NULL;
    memcpy(base, name, n);
    base[n] = '\0';
    const mt_tensor *t = mt_layout_find(lay, base, NULL);
    return t && mt_tensor_hub_form(lay, t).mxfp4 ? t : NULL;
}

/* A tensor the layout does not have is refused unless it is known to be harmless: older
 * checkpoints saved RoPE's inverse frequencies, and tied models may carry lm_head.weight. A
 * tensor held twice (whole and in its parts) is refused too. */
static mt_status check_extras(const mt_safetensors *set, const mt_layout *lay, const plan *p) {
    for (int i = 0; i < mt_safetensors_count(set); i++) {
        const mt_st_tensor *s = mt_safetensors_at(set, i);
        char text_name[NAME_MAX_BYTES];
        if (p->names && mt_wrapper_kept(p->names, s->name)) continue; /* the wrapper's own, kept as it is */
        if (p->names && !mt_wrapper_text_name(p->names, s->name, text_name, sizeof text_name))
            return mt_fail(MT_ERR_INVALID, "%s: unexpected tensor '%s': neither the text model's (%s...) nor one "
                           "the model keeps as it is", s->file, s->name, p->names->text);
        const char *name = p->names ? text_name : s->name;
        int part;
        const mt_tensor *t = mt_layout_find_hub(lay, name, &part);
        if (t && (part < 0) == (p->held_as[t - lay->tensors] != BY_PARTS)) continue;
        if (t)
            return mt_fail(MT_ERR_INVALID, "%s: holds both '%s' and '%s' (%s): the model's tensor twice", s->file,
                           t->name, s->name, part < 0 ? "its parts" : "a part of it");
        const mt_tensor *owner = mxfp4_owner(lay, name);
        if (owner && p->held_as[owner - lay->tensors] == BY_BLOCKS) continue;
        if (owner)
            return mt_fail(MT_ERR_INVALID, "%s: holds '%s' but not the rest of '%s' as an MXFP4 pair (blocks and "
                           "scales): the model's tensor twice, or half a pair", s->file, s->name, owner->name);
        if (ends_with(s->name, ".rotary_emb.inv_freq")) {
            mt_log_debug("%s: ignoring '%s' (recomputed from rope_theta)", s->file, s->name);
            continue;
        }
        if (lay->cfg.tie_embeddings && !strcmp(name, "lm_head.weight")) {
            const mt_tensor *wte = mt_layout_tensor(lay, mt_unit_embed(), MT_T_WTE);
            int64_t shape[3];
            int ndim = hf_shape(lay, wte, shape);
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

/* Tensors convert this many elements at a time (a row at least), through a buffer of their own. */
enum { CONVERT_PIECE = 1 << 22 };

typedef struct {
    mt_hf_sink_fn sink;
    void *user;
    float *buf;
} sink_to;

/* A piece as the checkpoint holds it, a run of elements at a time, each run's pages given back. */
static mt_status convert_plain(const source *piece, int64_t at, const sink_to *to) {
    const mt_st_tensor *s = piece->src;
    int64_t elem = s->numel ? (int64_t)s->nbytes / s->numel : 0;
    for (int64_t first = 0; first < s->numel; first += CONVERT_PIECE) {
        mt_st_tensor view = *s; /* the elements from `first` on */
        view.numel = s->numel - first < CONVERT_PIECE ? s->numel - first : CONVERT_PIECE;
        view.nbytes = (size_t)(view.numel * elem);
        view.data = (const uint8_t *)s->data + first * elem;
        MT_TRY(mt_st_tensor_to_f32(&view, to->buf));
        MT_TRY(refuse_non_finite(s, to->buf, view.numel));
        to->sink(to->user, at + first, to->buf, view.numel);
        mt_st_tensor_release(s, (size_t)(first * elem), (size_t)((first + view.numel) * elem));
    }
    return MT_OK;
}

/* A tensor in its role's form, a band of the layout's rows at a time, each expert's pages given back
 * once its rows are done. */
static mt_status convert_held(const mt_held_tensor *h, int64_t at, const sink_to *to) {
    int64_t total = h->experts * h->rows, band = CONVERT_PIECE / h->cols > 0 ? CONVERT_PIECE / h->cols : 1;
    int64_t released = 0;
    for (int64_t r0 = 0; r0 < total; r0 += band) {
        int64_t n = total - r0 < band ? total - r0 : band;
        MT_TRY(mt_held_read_rows(h, r0, n, to->buf));
        MT_TRY(refuse_non_finite(h->src, to->buf, n * h->cols));
        to->sink(to->user, at + r0 * h->cols, to->buf, n * h->cols);
        int64_t done = (r0 + n) / h->rows;
        mt_held_release(h, released, done);
        released = done;
    }
    return MT_OK;
}

static mt_status convert_all(const plan *p, const mt_layout *lay, mt_hf_sink_fn sink, void *sink_user,
                             mt_hf_progress_fn progress, void *user) {
    int64_t size = CONVERT_PIECE;
    for (int i = 0; i < p->count; i++)
        if (p->pieces[i].held.src && p->pieces[i].held.cols > size) size = p->pieces[i].held.cols;
    sink_to to = {sink, sink_user, mt_malloc((size_t)size * sizeof(float), "the weights' conversion buffer")};
    if (!to.buf) return MT_ERR_NOMEM;
    int64_t done = 0;
    mt_status st = MT_OK;
    for (int i = 0; st == MT_OK && i < p->count; i++) {
        const source *piece = &p->pieces[i];
        const mt_tensor *t = &lay->tensors[piece->tensor];
        int64_t at = master_offset(lay, t) + piece->row0 * t->cols;
        st = piece->held.src ? convert_held(&piece->held, at, &to) : convert_plain(piece, at, &to);
        int64_t numel = (int64_t)t->rows * t->cols, padding = padded_numel(numel) - numel;
        if (st == MT_OK && padding > 0) {
            memset(to.buf, 0, (size_t)padding * sizeof *to.buf);
            sink(sink_user, master_offset(lay, t) + numel, to.buf, padding);
        }
        done += (int64_t)piece->src->nbytes + (piece->held.scales ? (int64_t)piece->held.scales->nbytes : 0);
        if (st == MT_OK && progress) progress(done, p->bytes, user);
    }
    free(to.buf);
    return st;
}

/* The names the text model's tensors have in `set`: their own (also where dir has no config.json),
 * or where dir/config.json names a wrapper, the first of its layouts that holds the text model's
 * embedding. */
static mt_status text_names(const char *dir, const mt_safetensors *set, const mt_wrapper_layout **names,
                            const mt_wrapper **wrapper) {
    char path[4096], embed[NAME_MAX_BYTES];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const mt_wrapper *w = NULL;
    *names = NULL;
    if (access(path, F_OK) == 0) MT_TRY(mt_hf_config_wrapper(path, &w));
    *wrapper = w;
    if (!w) return MT_OK;
    for (int i = 0; i < MT_WRAPPER_LAYOUTS && w->layouts[i].text; i++) {
        mt_wrapper_hub_name(&w->layouts[i], "model.embed_tokens.weight", embed, sizeof embed);
        if (mt_safetensors_find(set, embed)) {
            *names = &w->layouts[i];
            return MT_OK;
        }
    }
    mt_wrapper_hub_name(&w->layouts[0], "model.embed_tokens.weight", embed, sizeof embed);
    return mt_fail(MT_ERR_INVALID, "%s: tensor '%s' is missing (the config needs it): it holds no text model of %s "
                   "under a name megatrain knows (%s...%s%s...)", dir, embed, w->architecture, w->layouts[0].text,
                   w->layouts[1].text ? ", " : "", w->layouts[1].text ? w->layouts[1].text : "");
}

mt_status mt_hf_load_weights_into(const char *dir, const mt_layout *lay, mt_hf_sink_fn sink, void *sink_user,
                                  mt_hf_progress_fn progress, void *user) {
    mt_safetensors *set;
    MT_TRY(mt_safetensors_open_dir(dir, &set));
    plan p = {0};
    const mt_wrapper *w;
    mt_status st = text_names(dir, set, &p.names, &w);
    if (st == MT_OK) st = plan_all(&p, set, dir, lay);
    if (st == MT_OK) st = check_extras(set, lay, &p);
    if (st == MT_OK) st = convert_all(&p, lay, sink, sink_user, progress, user);
    free(p.pieces);
    free(p.held_as);
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

/* The wrapper an export is written into (mt_hf_export_options.wrapped_from): its config.json as
 * it was, its tensors (what it keeps is written back from there) and its names for the text
 * model's. */
typedef struct {
    const char *dir;
    json_t *config;
    mt_safetensors *set;
    const mt_wrapper_layout *names;
    const mt_wrapper *wrapper;
} wrapped;

static mt_status open_wrapped(const char *dir, wrapped *w) {
    memset(w, 0, sizeof *w);
    w->dir = dir;
    if (!dir) return MT_OK;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    w->config = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!w->config) return mt_fail(MT_ERR_IO, "%s: %s", path, err.text);
    MT_TRY(mt_safetensors_open_dir(dir, &w->set));
    MT_TRY(text_names(dir, w->set, &w->names, &w->wrapper));
    if (!w->names)
        return mt_fail(MT_ERR_INVALID, "%s: names no model that wraps a text model (%s)", path,
                       mt_wrapper_architectures());
    return MT_OK;
}

static void close_wrapped(wrapped *w) {
    json_decref(w->config);
    if (w->set) mt_safetensors_close(w->set);
}

static int kept_count(const wrapped *w) {
    int n = 0;
    for (int i = 0; w->set && i < mt_safetensors_count(w->set); i++)
        n += mt_wrapper_kept(w->names, mt_safetensors_at(w->set, i)->name);
    return n;
}

/* The export's tensors: their sources, names and, for those held in a form, the masters to gather. */
typedef struct {
    mt_st_source *src;
    char *names; /* NAME_MAX_BYTES each */
    mt_held_masters *held;
    int count;
} export_list;

static void export_list_free(export_list *x) {
    free(x->src);
    free(x->names);
    free(x->held);
}

/* Part `part` of tensor t (mt_tensor_hub_part) as the hub holds it, under a wrapper's names where
 * there is one: a part of rows, or the tensor whole in its hf_shape, gathered in its role's form
 * where it has one. */
static void export_source(const mt_layout *lay, const float *masters, const mt_tensor *t, int part, const wrapped *w,
                          export_list *x) {
    int at = x->count++;
    char *name = x->names + (size_t)at * NAME_MAX_BYTES, text_name[sizeof t->name];
    int64_t row0;
    int rows;
    mt_tensor_hub_part(lay, t, part, text_name, sizeof text_name, &row0, &rows);
    if (w->names) mt_wrapper_hub_name(w->names, text_name, name, NAME_MAX_BYTES);
    else snprintf(name, NAME_MAX_BYTES, "%s", text_name);
    mt_st_source *src = &x->src[at];
    src->name = name;
    src->data = masters + master_offset(lay, t) + row0 * t->cols;
    if (mt_tensor_hub_parts(lay, t) > 1) {
        src->ndim = t->cols == 1 && !t->experts ? 1 : 2;
        src->shape[0] = rows;
        src->shape[1] = t->cols;
        return;
    }
    src->ndim = hf_shape(lay, t, src->shape);
    mt_hub_form form = mt_tensor_hub_form(lay, t);
    if (!form.interleaved && !form.transposed) return;
    int64_t experts = t->experts ? t->experts : 1;
    x->held[at] = (mt_held_masters){form, t->rows / experts, t->cols, src->data};
    src->gather = mt_held_gather;
    src->user = &x->held[at];
}

/* What the wrapper keeps, written back byte for byte after the text model's tensors. */
static void export_kept(const wrapped *w, export_list *x) {
    for (int i = 0; w->set && i < mt_safetensors_count(w->set); i++) {
        const mt_st_tensor *s = mt_safetensors_at(w->set, i);
        if (!mt_wrapper_kept(w->names, s->name)) continue;
        mt_st_source *src = &x->src[x->count++];
        *src = (mt_st_source){.name = s->name, .ndim = s->ndim, .kept = s};
        memcpy(src->shape, s->shape, sizeof s->shape);
    }
}

/* Every tensor under the names checkpoints on the hub hold it (mt_tensor_hub_part): the experts one
 * at a time, which transformers 4 loads as they are and transformers 5 through its conversion
 * mapping (the fused layout it keeps in memory), as do the other tools that read these families,
 * or whole in the form the family's checkpoints hold them (gpt-oss: transformers' BF16 layout); in
 * a wrapper, under its names, followed by what it keeps, as it was. */
static mt_status export_sources(const mt_layout *lay, const float *masters, const wrapped *w, export_list *x) {
    int n = 0;
    for (int i = 0; i < lay->num_tensors; i++) n += mt_tensor_hub_parts(lay, &lay->tensors[i]);
    *x = (export_list){mt_calloc((size_t)(n + kept_count(w)), sizeof *x->src, "the export's tensor list"),
                       mt_calloc((size_t)n, NAME_MAX_BYTES, "the export's tensor names"),
                       mt_calloc((size_t)n, sizeof *x->held, "the export's tensor list"), 0};
    if (!x->src || !x->names || !x->held) {
        export_list_free(x);
        return MT_ERR_NOMEM;
    }
    for (int i = 0; i < lay->num_tensors; i++)
        for (int part = 0; part < mt_tensor_hub_parts(lay, &lay->tensors[i]); part++)
            export_source(lay, masters, &lay->tensors[i], part, w, x);
    export_kept(w, x);
    return MT_OK;
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

/* The wrapper's files it keeps (mt_wrapper.kept_files), copied as they are where it has them. */
static mt_status copy_kept_files(const wrapped *w, const char *dir) {
    for (const char *const *name = w->wrapper ? w->wrapper->kept_files : NULL; name && *name; name++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", w->dir, *name);
        FILE *f = fopen(path, "rb");
        if (!f && errno == ENOENT) continue;
        if (!f) return mt_fail(MT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
        char *text = size >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)size + 1) : NULL;
        int bad = !text || fread(text, 1, (size_t)size, f) != (size_t)size;
        fclose(f);
        mt_status st = bad ? mt_fail(MT_ERR_IO, "%s: cannot read", path)
                           : write_file(dir, &(mt_hf_file){*name, text, (size_t)size});
        free(text);
        MT_TRY(st);
    }
    return MT_OK;
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
    wrapped w;
    export_list x = {0};
    mt_status st = open_wrapped(opt->wrapped_from, &w);
    if (st == MT_OK) st = export_sources(lay, masters, &w, &x);
    const char *torch_dtype = opt->dtype == MT_ST_BF16 ? "bfloat16" : "float32";
    if (st == MT_OK) st = mt_hf_config_write_wrapped(&lay->cfg, torch_dtype, w.config, dir);
    if (st == MT_OK && opt->n_stop_ids) st = add_stop_ids(dir, opt->stop_ids, opt->n_stop_ids);
    if (st == MT_OK) st = mt_safetensors_write_dir(dir, x.src, x.count, opt->dtype, opt->max_shard_bytes);
    for (size_t i = 0; st == MT_OK && i < opt->n_files; i++) st = write_file(dir, &opt->files[i]);
    if (st == MT_OK) st = copy_kept_files(&w, dir);
    export_list_free(&x);
    close_wrapped(&w);
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
    for (int i = 0; i < lay->num_tensors; i++) tensors += mt_tensor_hub_parts(lay, &lay->tensors[i]);
    mt_log_info("exported %d tensors (%s) to %s", tensors, mt_st_dtype_name(opt->dtype), target);
    return MT_OK;
}
