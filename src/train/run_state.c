#include "train/run_state.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "util/log.h"
#include "util/split_f32.h"

#define RUN_FORMAT "megatrain-run"
#define RUN_VERSION 2

/* The moment blobs of a store in its format: adam_m and adam_v (fp32 checkpoints keep the
 * names they always had), plus the block scales of 8-bit moments. Returns the count. */
static int moment_blobs(const mt_store *s, mt_run_blob *blobs) {
    const mt_moments *mom = &s->moments;
    size_t value = mt_moments_value_size(mom->format), blocks = mt_moments_blocks(mom->n);
    mt_run_value kind = mom->format == MT_MOMENTS_F32 ? MT_RUN_F32 : mom->format == MT_MOMENTS_BF16 ? MT_RUN_BF16
                                                                                                 : MT_RUN_CODES;
    blobs[0] = (mt_run_blob){"adam_m", mom->m, {0}, value, 1, mom->n, kind};
    blobs[1] = (mt_run_blob){"adam_v", mom->v, {0}, value, 1, mom->n, kind};
    if (mom->format != MT_MOMENTS_8BIT) return 2;
    blobs[2] = (mt_run_blob){"adam_m_scale", mom->m_scale, {0}, sizeof(float), MT_MOMENTS_BLOCK, blocks, MT_RUN_F32};
    blobs[3] = (mt_run_blob){"adam_v_scale", mom->v_scale, {0}, sizeof(float), MT_MOMENTS_BLOCK, blocks, MT_RUN_F32};
    return 4;
}

/* The masters are always fp32 in a checkpoint, however the store keeps them. */
int mt_run_blobs(const mt_store *s, mt_run_blob blobs[MT_RUN_MAX_BLOBS]) {
    mt_master w = mt_store_masters(s, 0);
    blobs[0] = (mt_run_blob){"master", w.f32, w, sizeof(float), 1, (size_t)s->layout->total_numel, MT_RUN_F32};
    return 1 + moment_blobs(s, blobs + 1);
}

const void *mt_run_blob_at(const mt_run_blob *b, size_t first) {
    return b->data ? (const char *)b->data + first * b->item_bytes : NULL;
}

void mt_run_blob_read(const mt_run_blob *b, size_t first, size_t count, void *dst) {
    if (b->data) memcpy(dst, mt_run_blob_at(b, first), count * b->item_bytes);
    else mt_master_read(mt_master_at(b->split, first), count, dst);
}

/* An IEEE value is finite unless its exponent bits are all ones; the loops below test the bits
 * (and vectorize), since the state may hold any pattern. */
int mt_run_items_finite(const mt_run_blob *b, const void *data, size_t items) {
    unsigned bad = 0;
    if (b->value == MT_RUN_F32) {
        const uint32_t *x = data;
        for (size_t i = 0; i < items; i++) bad |= (x[i] & 0x7f800000u) == 0x7f800000u;
    } else if (b->value == MT_RUN_BF16) {
        const uint16_t *x = data;
        for (size_t i = 0; i < items; i++) bad |= (x[i] & 0x7f80u) == 0x7f80u;
    }
    return !bad;
}

json_t *mt_run_meta(const mt_store *s, const mt_run_progress *p, const json_t *settings) {
    return json_pack("{s:s, s:i, s:I, s:I, s:b, s:s, s:o, s:o, s:O?}", "format", RUN_FORMAT, "version", RUN_VERSION,
                     "step", (json_int_t)p->step, "adam_step", (json_int_t)p->adam_step,
                     "update_ahead", p->update_ahead != 0,
                     "moments", mt_moments_format_name(s->moments.format),
                     "sampler", mt_sampler_state_to_json(&p->sampler),
                     "config", mt_hf_config_to_json(&s->layout->cfg, "float32"), "settings", settings);
}

mt_status mt_run_meta_set_finite(json_t *meta, int finite) {
    if (json_object_set_new(meta, "finite", json_boolean(finite)) != 0)
        return mt_fail(MT_ERR_NOMEM, "cannot build the checkpoint metadata");
    return MT_OK;
}

mt_status mt_run_rotate(const char *run_dir, const mt_run_save_options *o, int64_t step) {
    return o->keep > 0 ? mt_checkpoint_keep(run_dir, o->keep, o->good_step, step) : MT_OK;
}

/* Split masters go through a buffer of this many items at a time, as they are written and read. */
enum { BOUNCE_ITEMS = 1 << 22 };

/* Appends blob b (index i) to the writer, through `bounce` where it is not in memory as saved;
 * clears *finite on a value that is not. */
static mt_status append_blob(mt_ckpt_writer *w, int i, const mt_run_blob *b, float *bounce, int *finite) {
    if (b->data) {
        *finite &= mt_run_items_finite(b, b->data, b->items);
        return mt_checkpoint_append(w, i, b->data, b->items * b->item_bytes);
    }
    for (size_t at = 0; at < b->items; at += BOUNCE_ITEMS) {
        size_t count = b->items - at < BOUNCE_ITEMS ? b->items - at : BOUNCE_ITEMS;
        mt_run_blob_read(b, at, count, bounce);
        *finite &= mt_run_items_finite(b, bounce, count);
        MT_TRY(mt_checkpoint_append(w, i, bounce, count * b->item_bytes));
    }
    return MT_OK;
}

mt_status mt_run_save(const char *run_dir, const mt_store *s, const mt_run_progress *p,
                      const mt_run_save_options *o, int *finite) {
    char path[4096];
    MT_TRY(mt_checkpoint_path(path, sizeof path, run_dir, p->step));
    mt_run_blob state[MT_RUN_MAX_BLOBS];
    mt_ckpt_blob_size sizes[MT_RUN_MAX_BLOBS];
    int count = mt_run_blobs(s, state), all_finite = 1;
    for (int i = 0; i < count; i++) sizes[i] = (mt_ckpt_blob_size){state[i].name, state[i].items * state[i].item_bytes};
    json_t *meta = mt_run_meta(s, p, o->settings);
    float *bounce = meta ? mt_malloc(BOUNCE_ITEMS * sizeof *bounce, "the checkpoint's staging of the masters") : NULL;
    if (!bounce) {
        json_decref(meta);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot build the checkpoint metadata or its staging", path);
    }
    mt_ckpt_writer *w;
    mt_status rc = mt_checkpoint_begin(&w, path, sizes, count);
    for (int i = 0; rc == MT_OK && i < count; i++) rc = append_blob(w, i, &state[i], bounce, &all_finite);
    /* (a failed append has removed the write and freed the writer) */
    if (rc == MT_OK) {
        rc = mt_run_meta_set_finite(meta, all_finite);
        if (rc == MT_OK) rc = mt_checkpoint_finish(w, meta);
        else mt_checkpoint_abandon(w);
    }
    free(bounce);
    json_decref(meta);
    MT_TRY(rc);
    if (finite) *finite = all_finite;
    return mt_run_rotate(run_dir, o, p->step);
}

static mt_status read_meta(const char *checkpoint, json_t **meta) {
    MT_TRY(mt_checkpoint_read_meta(checkpoint, meta));
    const char *format = json_string_value(json_object_get(*meta, "format"));
    json_int_t version = json_integer_value(json_object_get(*meta, "version"));
    if (!format || strcmp(format, RUN_FORMAT) || version != RUN_VERSION) {
        json_decref(*meta);
        return mt_fail(MT_ERR_INVALID, "%s: not a megatrain run checkpoint of version %d", checkpoint, RUN_VERSION);
    }
    return MT_OK;
}

/* Why the checkpoint of this metadata is not good, or NULL when it is. */
static const char *not_good(const json_t *meta, char *why, size_t cap) {
    const json_t *diverged = json_object_get(meta, "diverged");
    if (json_is_false(json_object_get(meta, "finite"))) return "its saved values are not all finite (NaN or Inf)";
    if (!diverged) return NULL;
    snprintf(why, cap, "its step was part of a divergence (steps %lld to %lld)",
             (long long)json_integer_value(json_object_get(diverged, "first")),
             (long long)json_integer_value(json_object_get(diverged, "last")));
    return why;
}

/* The step the sealed manifest holds must be the one its directory's name says: the name orders
 * the checkpoints, and a copy or rename (ckpt-000030 holding step 10) would otherwise pass for the
 * newest. */
static mt_status step_as_named(const char *checkpoint, const json_t *meta, int64_t named) {
    const json_t *step = json_object_get(meta, "step");
    if (!json_is_integer(step)) return mt_fail(MT_ERR_INVALID, "its metadata has no step");
    if (json_integer_value(step) != named)
        return mt_fail(MT_ERR_INVALID, "it holds step %lld, not the step %lld its name says (a copy or a rename?)",
                       (long long)json_integer_value(step), (long long)named);
    return MT_OK;
}

/* The checkpoint of a run directory's listing can be resumed from: its metadata is a run's, of
 * the step its name says, it is good (unless `diverged_too`: then finite is enough), its blobs
 * verify. */
static mt_status usable(const mt_ckpt_entry *entry, int diverged_too) {
    json_t *meta;
    char why[160];
    MT_TRY(read_meta(entry->path, &meta));
    mt_status st = step_as_named(entry->path, meta, entry->step);
    const char *bad = st == MT_OK ? not_good(meta, why, sizeof why) : NULL;
    if (bad && diverged_too && !json_is_false(json_object_get(meta, "finite"))) bad = NULL;
    if (bad) st = mt_fail(MT_ERR_NUMERIC, "%s", bad);
    json_decref(meta);
    MT_TRY(st);
    return mt_checkpoint_verify(entry->path);
}

mt_status mt_run_latest(const char *run_dir, char *path, size_t cap) { return mt_run_latest_of(run_dir, 0, path, cap); }

mt_status mt_run_latest_of(const char *run_dir, int diverged_too, char *path, size_t cap) {
    mt_ckpt_entry *entries;
    int count;
    MT_TRY(mt_checkpoint_list(run_dir, &entries, &count));
    int found = 0;
    for (int i = 0; i < count && !found; i++) {
        if (usable(&entries[i], diverged_too) != MT_OK) {
            mt_log_warn("skipping checkpoint %s: %s", entries[i].path, mt_error());
            continue;
        }
        snprintf(path, cap, "%s", entries[i].path);
        found = 1;
    }
    mt_checkpoint_list_free(entries, count);
    /* Set last: the refusals above overwrite the thread's message. */
    return found ? MT_OK : mt_fail(MT_ERR_INVALID, "%s: no usable checkpoint to resume from", run_dir);
}

mt_status mt_run_mark_diverged(const char *run_dir, int64_t from_step, int64_t first, int64_t last, int *marked) {
    mt_ckpt_entry *entries;
    int count;
    *marked = 0;
    MT_TRY(mt_checkpoint_list(run_dir, &entries, &count));
    mt_status st = MT_OK;
    for (int i = 0; st == MT_OK && i < count && entries[i].step >= from_step; i++) {
        json_t *meta;
        st = read_meta(entries[i].path, &meta);
        if (st == MT_OK && step_as_named(entries[i].path, meta, entries[i].step) != MT_OK) {
            json_decref(meta); /* a misnamed copy is never resumed from: not this run's to mark */
            continue;
        }
        if (st != MT_OK) { /* a damaged checkpoint is not resumed from anyway */
            mt_log_warn("%s", mt_error());
            st = MT_OK;
            continue;
        }
        if (json_object_set_new(meta, "diverged", json_pack("{s:I, s:I}", "first", (json_int_t)first, "last",
                                                            (json_int_t)last)) != 0)
            st = mt_fail(MT_ERR_NOMEM, "%s: cannot build the checkpoint metadata", entries[i].path);
        if (st == MT_OK) st = mt_checkpoint_update_meta(entries[i].path, meta);
        if (st == MT_OK) ++*marked;
        json_decref(meta);
    }
    mt_checkpoint_list_free(entries, count);
    return st;
}

mt_status mt_run_resolve(const char *path, char *checkpoint, size_t cap) {
    char manifest[4096];
    struct stat st;
    snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
    if (stat(manifest, &st) == 0) {
        snprintf(checkpoint, cap, "%s", path);
        return MT_OK;
    }
    if (stat(path, &st) != 0) return mt_fail(MT_ERR_IO, "%s: no such checkpoint or run directory", path);
    return mt_run_latest(path, checkpoint, cap);
}

mt_status mt_run_read_info(const char *checkpoint, int64_t *step, json_t **settings) {
    json_t *meta;
    MT_TRY(read_meta(checkpoint, &meta));
    json_t *s = json_object_get(meta, "settings"), *n = json_object_get(meta, "step");
    if (json_is_null(s)) s = NULL;
    mt_status st = json_is_integer(n) && json_integer_value(n) >= 0 && (!s || json_is_object(s))
                       ? MT_OK
                       : mt_fail(MT_ERR_INVALID, "%s: metadata lacks a step, or its settings are not an object", checkpoint);
    if (st == MT_OK) {
        *step = json_integer_value(n);
        *settings = s ? json_incref(s) : NULL;
    }
    json_decref(meta);
    return st;
}

mt_status mt_run_load_config(const char *checkpoint, mt_config *cfg) {
    json_t *meta;
    MT_TRY(read_meta(checkpoint, &meta));
    char source[4096];
    snprintf(source, sizeof source, "%s/manifest.json (config)", checkpoint);
    mt_status rc = mt_hf_config_from_json(json_object_get(meta, "config"), source, cfg);
    json_decref(meta);
    return rc;
}

mt_status mt_run_load_tokenizer(const char *checkpoint, char *path, size_t cap) {
    json_t *meta;
    MT_TRY(read_meta(checkpoint, &meta));
    const json_t *tok = json_object_get(json_object_get(meta, "settings"), "tokenizer");
    mt_status rc = MT_OK;
    if (tok && !json_is_string(tok) && !json_is_null(tok))
        rc = mt_fail(MT_ERR_INVALID, "%s: metadata field settings.tokenizer is not a path", checkpoint);
    else
        snprintf(path, cap, "%s", json_is_string(tok) ? json_string_value(tok) : "");
    json_decref(meta);
    return rc;
}

static mt_status moments_format_of(const char *checkpoint, const json_t *meta, mt_moments_format *format) {
    const json_t *name = json_object_get(meta, "moments");
    if (!name) {
        *format = MT_MOMENTS_F32;
        return MT_OK;
    }
    if (!json_is_string(name) || mt_moments_format_parse(json_string_value(name), format) != MT_OK)
        return mt_fail(MT_ERR_INVALID, "%s: metadata field moments is not fp32, bf16 or 8bit", checkpoint);
    return MT_OK;
}

mt_status mt_run_load_moments_format(const char *checkpoint, mt_moments_format *format) {
    json_t *meta;
    MT_TRY(read_meta(checkpoint, &meta));
    mt_status rc = moments_format_of(checkpoint, meta, format);
    json_decref(meta);
    return rc;
}

/* A piece of the fp32 masters read from a checkpoint, split into the store's halves. */
static mt_status split_piece(void *user, size_t offset, const void *data, size_t bytes) {
    const mt_run_blob *b = user;
    mt_master_write(mt_master_at(b->split, offset / sizeof(float)), bytes / sizeof(float), data);
    return MT_OK;
}

static mt_status read_split(const char *checkpoint, const mt_run_blob *b, size_t bytes) {
    float *bounce = mt_malloc(BOUNCE_ITEMS * sizeof *bounce, "the staging of the masters read from a checkpoint");
    if (!bounce) return MT_ERR_NOMEM;
    mt_status rc = mt_checkpoint_read_pieces(checkpoint, b->name, bytes, bounce, BOUNCE_ITEMS * sizeof *bounce,
                                             split_piece, (void *)b);
    free(bounce);
    return rc;
}

mt_status mt_run_load(const char *checkpoint, mt_store *s, mt_run_progress *p) {
    json_t *meta;
    MT_TRY(read_meta(checkpoint, &meta));
    json_t *step = json_object_get(meta, "step"), *adam = json_object_get(meta, "adam_step");
    mt_moments_format saved, wanted = s->moments.format;
    mt_status rc = moments_format_of(checkpoint, meta, &saved);
    if (rc == MT_OK && saved != wanted)
        rc = mt_fail(MT_ERR_INVALID, "%s holds %s Adam moments but this run asks for --moments %s: resume "
                     "with --moments %s", checkpoint, mt_moments_format_name(saved),
                     mt_moments_format_name(wanted), mt_moments_format_name(saved));
    json_t *ahead = json_object_get(meta, "update_ahead");
    if (rc == MT_OK && (!json_is_integer(step) || !json_is_integer(adam)))
        rc = mt_fail(MT_ERR_INVALID, "%s: metadata lacks an integer step or adam_step", checkpoint);
    if (rc == MT_OK && ahead && !json_is_boolean(ahead))
        rc = mt_fail(MT_ERR_INVALID, "%s: metadata's update_ahead is not true or false", checkpoint);
    if (rc == MT_OK) rc = mt_sampler_state_from_json(json_object_get(meta, "sampler"), &p->sampler);
    if (rc == MT_OK) {
        p->step = json_integer_value(step);
        p->adam_step = json_integer_value(adam);
        p->update_ahead = json_is_true(ahead);
    }
    json_decref(meta);
    MT_TRY(rc);
    mt_run_blob blobs[MT_RUN_MAX_BLOBS];
    int count = mt_run_blobs(s, blobs);
    /* The blobs point into the store's own (writable) masters and moments; split masters are read
     * in pieces and split as they come. */
    for (int i = 0; i < count; i++) {
        size_t bytes = blobs[i].items * blobs[i].item_bytes;
        if (blobs[i].data) MT_TRY(mt_checkpoint_read(checkpoint, blobs[i].name, (void *)blobs[i].data, bytes));
        else MT_TRY(read_split(checkpoint, &blobs[i], bytes));
    }
    return MT_OK;
}

/* A piece of the masters into the working weights, in their type: bf16 weights are the masters'
 * high halves, what training streams (util/split_f32.h). */
static mt_status weights_piece(void *ctx, size_t offset, const void *data, size_t n) {
    const mt_store *s = ctx;
    const float *x = data;
    size_t first = offset / 4, count = n / 4;
    if (s->weight_dtype == MT_DTYPE_F32) {
        memcpy((float *)s->weights + first, x, count * 4);
        return MT_OK;
    }
    uint16_t *w = (uint16_t *)s->weights + first;
#pragma omp parallel for schedule(static) if (count >= (1 << 16))
    for (size_t i = 0; i < count; i++) w[i] = mt_split_hi_bits(mt_f32_bits(x[i]));
    return MT_OK;
}

mt_status mt_run_load_weights(const char *checkpoint, mt_store *s, int64_t *step) {
    json_t *settings;
    MT_TRY(mt_run_read_info(checkpoint, step, &settings));
    json_decref(settings);
    float *bounce = mt_malloc(BOUNCE_ITEMS * sizeof *bounce, "the staging of the masters read from a checkpoint");
    if (!bounce) return MT_ERR_NOMEM;
    mt_status rc = mt_checkpoint_read_pieces(checkpoint, "master", (size_t)s->layout->total_numel * 4, bounce,
                                             BOUNCE_ITEMS * sizeof *bounce, weights_piece, s);
    free(bounce);
    return rc;
}
