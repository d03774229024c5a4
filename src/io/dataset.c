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
    if (val_fraction > 0.0 && val_tokens < window)
        return mt_fail(MT_ERR_INVALID,
                       "dataset: the validation split (%g of %zu tokens = %zu) is shorter than one "
                       "window of seq_len + 1 = %zu tokens",
                       val_fraction, tokens->count, val_tokens, window);
    if (train_tokens < window)
        return mt_fail(MT_ERR_INVALID,
                       "dataset: the training split (%zu tokens) is shorter than one window of "
                       "seq_len + 1 = %zu tokens",
                       train_tokens, window);
    *ds = (mt_dataset){.tokens = tokens, .train_tokens = train_tokens, .val_tokens = val_tokens,
                       .seq_len = seq_len, .order = order, .state = {.rng = {seed}}};
    return MT_OK;
}

mt_status mt_dataset_init_val_only(mt_dataset *ds, const mt_tokens *tokens, int seq_len) {
    if (tokens->count < (size_t)seq_len + 1)
        return mt_fail(MT_ERR_INVALID, "%zu tokens, shorter than one window of seq_len + 1 = %d tokens", tokens->count,
                       seq_len + 1);
    *ds = (mt_dataset){.tokens = tokens, .train_tokens = 0, .val_tokens = tokens->count, .seq_len = seq_len};
    return MT_OK;
}

mt_status mt_dataset_set_state(mt_dataset *ds, const mt_sampler_state *state) {
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

/* Window starting at token `start`: inputs get tokens start.., targets start+1..; a target whose
 * token carries no loss (a masked shard's mask 0) is -1, which the loss ignores. */
static void copy_window(const mt_dataset *ds, size_t start, int32_t *inputs, int32_t *targets) {
    mt_tokens_copy(ds->tokens, start, (size_t)ds->seq_len, inputs);
    mt_tokens_copy(ds->tokens, start + 1, (size_t)ds->seq_len, targets);
    mt_tokens_mask_targets(ds->tokens, start + 1, (size_t)ds->seq_len, targets);
}

void mt_dataset_train_batch(mt_dataset *ds, int batch, int32_t *inputs, int32_t *targets) {
    for (int b = 0; b < batch; b++) {
        size_t off = (size_t)b * (size_t)ds->seq_len;
        copy_window(ds, next_window_start(ds), inputs + off, targets + off);
    }
}

int64_t mt_dataset_val_batches(const mt_dataset *ds, int batch) {
    if (ds->val_tokens == 0) return 0;
    size_t windows = (ds->val_tokens - 1) / (size_t)ds->seq_len;
    return (int64_t)(windows / (size_t)batch);
}

void mt_dataset_val_batch(const mt_dataset *ds, int64_t index, int batch, int32_t *inputs,
                          int32_t *targets) {
    for (int b = 0; b < batch; b++) {
        size_t window = (size_t)index * (size_t)batch + (size_t)b;
        size_t off = (size_t)b * (size_t)ds->seq_len;
        copy_window(ds, ds->train_tokens + window * (size_t)ds->seq_len, inputs + off,
                    targets + off);
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
