#include "io/dataset.h"

#include "io/masked_tokens.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Uniform in [0, n) without modulo bias: reject the short top range. */
static uint64_t random_below(mt_rng *rng, uint64_t n) {
    uint64_t threshold = -n % n;
    for (;;) {
        uint64_t r = mt_rng_next(rng);
        if (r >= threshold) return r % n;
    }
}

mt_status mt_dataset_init(mt_dataset *ds, const mt_tokens *tokens, double val_fraction,
                          int seq_len, mt_sample_order order, uint64_t seed) {
    if (seq_len < 1) return mt_fail(MT_ERR_INVALID, "dataset: seq_len %d must be positive", seq_len);
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return mt_fail(MT_ERR_INVALID, "dataset: validation fraction %g must be in [0, 1)",
                       val_fraction);
    size_t window = (size_t)seq_len + 1;
    size_t val_tokens = (size_t)((double)tokens->count * val_fraction);
    size_t train_tokens = tokens->count - val_tokens;
    if (val_fraction > 0.0 && val_tokens < 2)
        return mt_fail(MT_ERR_INVALID,
                       "dataset: the validation split (%g of %zu tokens = %zu) holds no target: raise "
                       "--val-fraction, or pass --val-fraction 0",
                       val_fraction, tokens->count, val_tokens);
    if (train_tokens < window)
        return mt_fail(MT_ERR_INVALID,
                       "dataset: the training split (%zu tokens) is shorter than one window of "
                       "seq_len + 1 = %zu tokens",
                       train_tokens, window);
    *ds = (mt_dataset){.tokens = tokens, .train_tokens = train_tokens, .val_tokens = val_tokens,
                       .seq_len = seq_len, .order = order, .state = {.rng = {seed}}, .eot = -1};
    return MT_OK;
}

void mt_dataset_doc_mask(mt_dataset *ds, int32_t eot) { ds->eot = eot; }

/* ---- packed examples ---- */

/* Whether any of tokens [start + 1, start + n) carries loss (a target of the first n). */
static int carries_loss(const mt_tokens *tokens, uint64_t start, size_t n) {
    uint8_t mask[4096];
    for (size_t at = 1; at < n; at += sizeof mask) {
        size_t k = n - at < sizeof mask ? n - at : sizeof mask;
        mt_tokens_copy_mask(tokens, start + at, k, mask);
        for (size_t i = 0; i < k; i++)
            if (mask[i]) return 1;
    }
    return 0;
}

/* The examples and their lengths; refuses or counts those longer than seq_len (and of them those
 * whose first seq_len tokens hold no target with loss). */
static mt_status take_examples(mt_dataset *ds, const uint64_t *starts, size_t n, mt_long_examples long_examples,
                               const char *name) {
    size_t seq = (size_t)ds->seq_len, first_long = n;
    mt_pack_report *rep = &ds->report;
    ds->examples = mt_malloc(n * sizeof *ds->examples, "the examples' table");
    if (!ds->examples) return MT_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        uint64_t end = i + 1 < n ? starts[i + 1] : ds->tokens->count, len = end - starts[i];
        if (len > seq && rep->truncated++ == 0) first_long = i;
        if (len > seq && long_examples == MT_LONG_TRUNCATE && !carries_loss(ds->tokens, starts[i], seq))
            rep->truncated_no_loss++;
        if (len > rep->longest) rep->longest = len;
        ds->examples[i] = (mt_example){.start = starts[i], .len = (uint32_t)(len < seq ? len : seq)};
    }
    if (long_examples == MT_LONG_REFUSE && rep->truncated)
        return mt_fail(MT_ERR_INVALID, "%s: %zu examples are longer than --seq %d (the first, example %zu, has %llu "
                       "tokens; the longest %llu): raise --seq, or let --long-examples truncate take their first %d "
                       "tokens", name, rep->truncated, ds->seq_len, first_long,
                       (unsigned long long)(first_long + 1 < n ? starts[first_long + 1] : ds->tokens->count) -
                           (unsigned long long)starts[first_long],
                       (unsigned long long)rep->longest, ds->seq_len);
    return MT_OK;
}

/* The validation examples packed once, in file order. */
static mt_status pack_validation(mt_dataset *ds) {
    mt_packer *p;
    MT_TRY(mt_packer_create(&p, ds->examples + ds->train_examples, ds->val_examples, ds->seq_len, 0));
    uint64_t windows = 0, padding = 0;
    mt_status st = mt_packer_count(p, 0, &windows, &padding);
    ds->val_items = st == MT_OK ? mt_malloc(ds->val_examples * sizeof *ds->val_items, "the validation windows") : NULL;
    ds->val_first = st == MT_OK ? mt_malloc((windows + 1) * sizeof *ds->val_first, "the validation windows") : NULL;
    if (st == MT_OK && (!ds->val_items || !ds->val_first)) st = MT_ERR_NOMEM;
    size_t at = 0;
    for (uint64_t w = 0; st == MT_OK && w < windows; w++) {
        const uint32_t *items;
        size_t count;
        st = mt_packer_next(p, &items, &count);
        ds->val_first[w] = (uint32_t)at;
        for (size_t k = 0; st == MT_OK && k < count; k++) ds->val_items[at++] = items[k];
    }
    if (st == MT_OK) {
        ds->val_first[windows] = (uint32_t)at;
        ds->val_windows = (size_t)windows;
        ds->report.val_windows = (size_t)windows;
        ds->report.val_padding = padding;
    }
    mt_packer_free(p);
    return st;
}

static mt_status init_packed(mt_dataset *ds, const uint64_t *starts, size_t n, mt_long_examples long_examples,
                             const char *name) {
    MT_TRY(take_examples(ds, starts, n, long_examples, name));
    /* An example belongs to the split it starts in. */
    while (ds->train_examples < n && ds->examples[ds->train_examples].start < ds->train_tokens) ds->train_examples++;
    ds->val_examples = n - ds->train_examples;
    if (ds->val_tokens > 0 && ds->val_examples == 0)
        return mt_fail(MT_ERR_INVALID, "%s: the validation split (its last %zu tokens) holds no example's start: "
                       "raise --val-fraction, or pass --val-fraction 0", name, ds->val_tokens);
    if (ds->train_examples == 0)
        return mt_fail(MT_ERR_INVALID, "%s: the training split holds no example's start (%zu examples, all in the "
                       "validation split): lower --val-fraction", name, n);
    ds->report.examples = ds->train_examples;
    ds->report.val_examples = ds->val_examples;
    MT_TRY(mt_packer_create(&ds->packer, ds->examples, ds->train_examples, ds->seq_len,
                            ds->order == MT_SAMPLE_RANDOM));
    uint64_t windows, padding;
    MT_TRY(mt_packer_count(ds->packer, ds->state.rng.state, &windows, &padding));
    ds->report.windows = (size_t)windows;
    ds->report.padding = padding;
    ds->report.tokens = windows * (uint64_t)ds->seq_len - padding;
    if (ds->val_examples) MT_TRY(pack_validation(ds));
    return mt_packer_seek(ds->packer, ds->state.rng.state, 0, 0);
}

mt_status mt_dataset_init_packed(mt_dataset *ds, const mt_tokens *tokens, double val_fraction, int seq_len,
                                 mt_sample_order order, uint64_t seed, mt_long_examples long_examples,
                                 const char *name) {
    const uint64_t *starts;
    size_t n = mt_tokens_examples(tokens, &starts);
    if (n == 0)
        return mt_fail(MT_ERR_INVALID, "%s: the data does not record where its examples start (a masked shard "
                       "written by an earlier megatrain, or not chat data): tokenize it again to pack whole "
                       "examples, or pass --packing off to train on windows of its stream", name);
    if (seq_len < 1) return mt_fail(MT_ERR_INVALID, "dataset: seq_len %d must be positive", seq_len);
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return mt_fail(MT_ERR_INVALID, "dataset: validation fraction %g must be in [0, 1)", val_fraction);
    size_t val_tokens = (size_t)((double)tokens->count * val_fraction);
    *ds = (mt_dataset){.tokens = tokens, .train_tokens = tokens->count - val_tokens, .val_tokens = val_tokens,
                       .seq_len = seq_len, .order = order, .state = {.rng = {seed}}, .eot = -1};
    mt_status st = init_packed(ds, starts, n, long_examples, name);
    if (st != MT_OK) mt_dataset_free(ds);
    return st;
}

void mt_dataset_free(mt_dataset *ds) {
    mt_packer_free(ds->packer);
    free(ds->examples);
    free(ds->val_items);
    free(ds->val_first);
    ds->packer = NULL;
    ds->examples = NULL;
    ds->val_items = ds->val_first = NULL;
}

mt_status mt_dataset_init_val_only(mt_dataset *ds, const mt_tokens *tokens, int seq_len, int packed,
                                   mt_long_examples long_examples, const char *name) {
    if (!packed && tokens->count < 2)
        return mt_fail(MT_ERR_INVALID, "%zu token%s: no target to validate on", tokens->count,
                       tokens->count == 1 ? "" : "s");
    *ds = (mt_dataset){.tokens = tokens, .train_tokens = 0, .val_tokens = tokens->count, .seq_len = seq_len,
                       .eot = -1};
    if (!packed) return MT_OK;
    const uint64_t *starts;
    size_t n = mt_tokens_examples(tokens, &starts);
    if (n == 0) return mt_fail(MT_ERR_INVALID, "%s: the data does not record where its examples start", name);
    mt_status st = take_examples(ds, starts, n, long_examples, name);
    if (st == MT_OK) {
        ds->val_examples = ds->report.val_examples = n;
        st = pack_validation(ds);
    }
    if (st != MT_OK) mt_dataset_free(ds);
    return st;
}

double mt_dataset_epoch_windows(const mt_dataset *ds) {
    size_t seq = (size_t)ds->seq_len;
    if (ds->packer) return (double)ds->report.windows;
    if (ds->order == MT_SAMPLE_SEQUENTIAL) return (double)((ds->train_tokens - seq - 1) / seq + 1);
    return (double)ds->train_tokens / (double)seq;
}

double mt_dataset_epochs_done(const mt_dataset *ds) {
    const mt_sampler_state *s = &ds->state;
    double windows = mt_dataset_epoch_windows(ds);
    /* cursor: packed, the windows drawn in the epoch; stream, their tokens */
    double drawn = ds->packer ? (double)s->cursor : (double)s->cursor / (double)ds->seq_len;
    return (double)s->epoch + (windows > 0 ? drawn / windows : 0);
}

mt_status mt_dataset_set_state(mt_dataset *ds, const mt_sampler_state *state) {
    if (ds->packer) {
        MT_TRY(mt_packer_seek(ds->packer, state->rng.state, state->cursor, state->epoch));
        ds->state = *state;
        return MT_OK;
    }
    if (state->cursor >= ds->train_tokens)
        return mt_fail(MT_ERR_INVALID,
                       "dataset: saved cursor %" PRIu64 " is past the training split of %zu tokens "
                       "(was the checkpoint made with other data?)",
                       state->cursor, ds->train_tokens);
    ds->state = *state;
    return MT_OK;
}

/* The start of the next training window; advances cursor and epoch. */
static size_t next_window_start(mt_dataset *ds) {
    mt_sampler_state *s = &ds->state;
    size_t window = (size_t)ds->seq_len + 1;
    size_t start;
    if (ds->order == MT_SAMPLE_SEQUENTIAL) {
        start = s->cursor;
        s->cursor += (uint64_t)ds->seq_len;
        if (s->cursor + window > ds->train_tokens) {
            s->cursor = 0;
            s->epoch++;
        }
    } else {
        start = random_below(&s->rng, ds->train_tokens - window + 1);
        s->cursor += (uint64_t)ds->seq_len;
        if (s->cursor >= ds->train_tokens) {
            s->cursor -= ds->train_tokens;
            s->epoch++;
        }
    }
    return start;
}

/* The first n tokens of the window starting at token `start` (a whole one: n = seq_len): inputs
 * get tokens start.., targets start+1..; a target whose
 * token carries no loss (a masked shard's mask 0) is -1, which the loss ignores. With documents
 * masked, a segment ends after each end-of-text token, which then predicts nothing. */
static void copy_window(const mt_dataset *ds, size_t start, size_t n, int32_t *inputs, int32_t *targets,
                        int32_t *positions) {
    mt_tokens_copy(ds->tokens, start, n, inputs);
    mt_tokens_copy(ds->tokens, start + 1, n, targets);
    mt_tokens_mask_targets(ds->tokens, start + 1, n, targets);
    if (ds->eot >= 0)
        for (size_t k = 0; k < n; k++)
            if (inputs[k] == ds->eot) targets[k] = -1;
    if (!positions) return;
    for (size_t k = 0; k < n; k++)
        positions[k] = k == 0 || (ds->eot >= 0 && inputs[k - 1] == ds->eot) ? 0 : positions[k - 1] + 1;
}

/* A packed window: examples items[0..count) of ex one after another, each a segment whose last
 * token predicts nothing, then padding (a segment of id 0 with no targets). Returns the padding. */
static size_t fill_packed(const mt_dataset *ds, const mt_example *ex, const uint32_t *items, size_t count,
                          int32_t *inputs, int32_t *targets, int32_t *positions) {
    size_t at = 0, seq = (size_t)ds->seq_len;
    for (size_t k = 0; k < count; k++) {
        const mt_example *e = &ex[items[k]];
        size_t len = e->len;
        mt_tokens_copy(ds->tokens, e->start, len, inputs + at);
        mt_tokens_copy(ds->tokens, e->start + 1, len - 1, targets + at);
        mt_tokens_mask_targets(ds->tokens, e->start + 1, len - 1, targets + at);
        targets[at + len - 1] = -1;
        for (size_t i = 0; i < len; i++) positions[at + i] = (int32_t)i;
        at += len;
    }
    for (size_t i = 0; at + i < seq; i++) {
        inputs[at + i] = 0;
        targets[at + i] = -1;
        positions[at + i] = (int32_t)i;
    }
    return seq - at;
}

size_t mt_dataset_train_batch(mt_dataset *ds, int batch, int32_t *inputs, int32_t *targets, int32_t *positions) {
    size_t padding = 0;
    for (int b = 0; b < batch; b++) {
        size_t off = (size_t)b * (size_t)ds->seq_len;
        if (!ds->packer) {
            copy_window(ds, next_window_start(ds), (size_t)ds->seq_len, inputs + off, targets + off,
                        positions ? positions + off : NULL);
            continue;
        }
        const uint32_t *items;
        size_t count;
        mt_packer_next(ds->packer, &items, &count);
        padding += fill_packed(ds, ds->examples, items, count, inputs + off, targets + off, positions + off);
    }
    if (ds->packer) {
        uint64_t rng;
        mt_packer_state(ds->packer, &rng, &ds->state.cursor, &ds->state.epoch);
        ds->state.rng.state = rng;
    }
    return padding;
}

size_t mt_dataset_val_windows(const mt_dataset *ds) {
    if (ds->examples) return ds->val_windows;
    return ds->val_tokens < 2 ? 0 : (ds->val_tokens - 2) / (size_t)ds->seq_len + 1;
}

int64_t mt_dataset_val_batches(const mt_dataset *ds, int batch) {
    return (int64_t)((mt_dataset_val_windows(ds) + (size_t)batch - 1) / (size_t)batch);
}

/* A window that is all padding (past the last validation window): no targets. */
static void fill_padding(size_t from, size_t seq, int32_t *inputs, int32_t *targets, int32_t *positions) {
    for (size_t k = from; k < seq; k++) {
        inputs[k] = 0;
        targets[k] = -1;
        if (positions) positions[k] = k == from ? 0 : positions[k - 1] + 1;
    }
}

void mt_dataset_val_batch(const mt_dataset *ds, int64_t index, int batch, int32_t *inputs,
                          int32_t *targets, int32_t *positions) {
    size_t windows = mt_dataset_val_windows(ds), seq = (size_t)ds->seq_len;
    for (int b = 0; b < batch; b++) {
        size_t window = (size_t)index * (size_t)batch + (size_t)b;
        size_t off = (size_t)b * seq;
        int32_t *at_positions = positions ? positions + off : NULL;
        if (window >= windows) {
            fill_padding(0, seq, inputs + off, targets + off, at_positions);
            continue;
        }
        if (ds->examples) {
            const uint32_t *items = ds->val_items + ds->val_first[window];
            size_t count = ds->val_first[window + 1] - ds->val_first[window];
            fill_packed(ds, ds->examples + ds->train_examples, items, count, inputs + off, targets + off,
                        positions + off);
            continue;
        }
        /* The split's last window may be short: its targets end with the split, padding after. */
        size_t start = window * seq, n = ds->val_tokens - 1 - start < seq ? ds->val_tokens - 1 - start : seq;
        copy_window(ds, ds->train_tokens + start, n, inputs + off, targets + off, at_positions);
        fill_padding(n, seq, inputs + off, targets + off, at_positions);
    }
}

json_t *mt_sampler_state_to_json(const mt_sampler_state *state) {
    char rng[17];
    snprintf(rng, sizeof rng, "%016" PRIx64, state->rng.state);
    return json_pack("{s:s, s:I, s:I}", "rng", rng, "cursor", (json_int_t)state->cursor, "epoch",
                     (json_int_t)state->epoch);
}

mt_status mt_sampler_state_from_json(const json_t *json, mt_sampler_state *state) {
    const char *rng;
    json_int_t cursor, epoch;
    json_error_t err;
    if (json_unpack_ex((json_t *)json, &err, JSON_STRICT, "{s:s, s:I, s:I}", "rng", &rng,
                       "cursor", &cursor, "epoch", &epoch) != 0)
        return mt_fail(MT_ERR_INVALID, "sampler state: %s", err.text);
    char *end;
    errno = 0;
    unsigned long long r = strtoull(rng, &end, 16);
    if (errno || *end || !isxdigit((unsigned char)rng[0]))
        return mt_fail(MT_ERR_INVALID, "sampler state: rng '%s' is not a hex integer", rng);
    if (cursor < 0 || epoch < 0)
        return mt_fail(MT_ERR_INVALID, "sampler state: negative cursor or epoch");
    *state = (mt_sampler_state){.rng = {r}, .cursor = (uint64_t)cursor, .epoch = (uint64_t)epoch};
    return MT_OK;
}
