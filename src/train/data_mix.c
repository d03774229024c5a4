#include "train/data_mix.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "io/masked_tokens.h"
#include "io/tokens.h"
#include "tokenizer/shard_writer.h"
#include "train/train_data.h"
#include "util/fs.h"
#include "util/log.h"

/* Bump when the same datasets and weights would mix otherwise. */
#define MIX_VERSION 1

static int parse_weight(const char *text, double *w) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno) return 0;
    *w = v;
    return 1;
}

mt_status mt_data_list_parse(const char *list, mt_data_source *out, int *n) {
    *n = 0;
    int weighted = 0, single = !strchr(list, ',');
    for (const char *p = list; *p;) {
        size_t len = single ? strlen(p) : strcspn(p, ",");
        if (*n == MT_MAX_DATA) return mt_fail(MT_ERR_INVALID, "--data %s: more than %d datasets", list, MT_MAX_DATA);
        if (len == 0 || len >= sizeof out->path)
            return mt_fail(MT_ERR_INVALID, "--data %s: an empty or overlong dataset path", list);
        mt_data_source *s = &out[(*n)++];
        snprintf(s->path, sizeof s->path, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
        char *colon = strrchr(s->path, ':');
        s->weight = 0;
        if (single || !colon || !parse_weight(colon + 1, &s->weight)) continue;
        if (!(s->weight > 0) || !isfinite(s->weight))
            return mt_fail(MT_ERR_INVALID, "--data %s: the weight of %.*s is %s, not a positive number", list,
                           (int)(colon - s->path), s->path, colon + 1);
        *colon = '\0';
        weighted++;
    }
    if (weighted && weighted != *n)
        return mt_fail(MT_ERR_INVALID, "--data %s: weights for some datasets and not others: give each one a weight "
                       "(PATH:WEIGHT) or none", list);
    return MT_OK;
}

/* One dataset of the mix: its token file, its units (examples, or pieces of a stream) and how
 * much of it the mix holds so far. */
typedef struct {
    const mt_data_source *given;
    char file[8192];
    mt_tokens tokens;
    int open;
    const uint64_t *starts; /* chat data: its examples' starts; NULL: a stream */
    size_t units, next;
    uint64_t written;
    int passes;
    double share;
} source;

static size_t unit_start(const source *s, size_t i) { return s->starts ? (size_t)s->starts[i] : i * MT_MIX_PIECE; }

static size_t unit_end(const source *s, size_t i) {
    if (s->starts) return i + 1 < s->units ? (size_t)s->starts[i + 1] : s->tokens.count;
    size_t end = (i + 1) * MT_MIX_PIECE;
    return end < s->tokens.count ? end : s->tokens.count;
}

/* Each dataset's token file, open; all chat data or all streams (*chat says which). */
static mt_status open_sources(const mt_train_options *o, uint32_t vocab, source *s, int n, int *chat) {
    for (int k = 0; k < n; k++) {
        mt_train_options one = *o;
        one.data_path = s[k].given->path;
        MT_TRY(mt_train_data_resolve(&one, vocab, s[k].file, sizeof s[k].file));
        MT_TRY(mt_tokens_open(s[k].file, &s[k].tokens));
        s[k].open = 1;
        size_t examples = mt_tokens_examples(&s[k].tokens, &s[k].starts);
        int masked = s[k].tokens.format == MT_TOKENS_MASKED;
        if (masked && !examples)
            return mt_fail(MT_ERR_INVALID, "--data %s does not record where its examples start (a masked shard of an "
                           "earlier megatrain): tokenize it again to mix it", s[k].given->path);
        if (k > 0 && masked != *chat)
            return mt_fail(MT_ERR_INVALID, "--data %s is %s but %s is %s: the datasets of a mix are all chat data or "
                           "all text and tokens", s[k].given->path, masked ? "chat data" : "text or tokens",
                           s[0].given->path, *chat ? "chat data" : "text or tokens");
        *chat = masked;
        if (!masked) s[k].starts = NULL;
        s[k].units = masked ? examples : (s[k].tokens.count + MT_MIX_PIECE - 1) / MT_MIX_PIECE;
    }
    return MT_OK;
}

/* The shares: the weights, or without them each dataset's tokens; normalized. */
static void set_shares(source *s, int n) {
    double sum = 0;
    for (int k = 0; k < n; k++) sum += s[k].given->weight > 0 ? s[k].given->weight : (double)s[k].tokens.count;
    for (int k = 0; k < n; k++)
        s[k].share = (s[k].given->weight > 0 ? s[k].given->weight : (double)s[k].tokens.count) / sum;
}

/* The dataset furthest below its share, or -1 when every one has been taken whole. */
static int next_source(const source *s, int n) {
    int done = 1, best = 0;
    for (int k = 0; k < n; k++) {
        done &= s[k].passes > 0;
        if ((double)s[k].written / s[k].share < (double)s[best].written / s[best].share) best = k;
    }
    return done ? -1 : best;
}

/* Takes the next unit of dataset k: its token range into *start, *len. */
static void take(source *s, size_t *start, size_t *len) {
    *start = unit_start(s, s->next);
    *len = unit_end(s, s->next) - *start;
    s->written += *len;
    if (++s->next == s->units) {
        s->next = 0;
        s->passes++;
    }
}

static void rewind_sources(source *s, int n) {
    for (int k = 0; k < n; k++) {
        s[k].next = 0;
        s[k].written = 0;
        s[k].passes = 0;
    }
}

/* The tokens the mix will hold, refused past one shard's INT32_MAX. */
static mt_status plan_mix(source *s, int n, const char *list, uint64_t *total) {
    *total = 0;
    for (int k; (k = next_source(s, n)) >= 0;) {
        size_t start, len;
        take(&s[k], &start, &len);
        *total += len;
        if (*total > INT32_MAX)
            return mt_fail(MT_ERR_INVALID, "--data %s: the mix would hold more than %d tokens (a small dataset of a "
                           "large share is repeated until the largest is used up): change the weights, or mix fewer",
                           list, INT32_MAX);
    }
    rewind_sources(s, n);
    return MT_OK;
}

/* Writes the mix into the first shard of `prefix`: a masked shard of whole examples, or an llm.c
 * shard of the streams' pieces. */
static mt_status write_mix(source *s, int n, int chat, uint32_t vocab, const char *prefix, const char *path) {
    int width = vocab > 65536 ? 4 : 2;
    mt_masked_writer *mw = NULL;
    mt_shard_writer sw = {.fd = -1};
    MT_TRY(chat ? mt_masked_writer_open(&mw, path, width) : mt_shard_writer_open(&sw, prefix, width, INT32_MAX));
    size_t cap = MT_MIX_PIECE;
    int32_t *ids = malloc(cap * sizeof *ids);
    uint8_t *mask = malloc(cap);
    mt_status st = ids && mask ? MT_OK : mt_fail(MT_ERR_NOMEM, "%s: cannot hold a unit of the mix", path);
    for (int k; st == MT_OK && (k = next_source(s, n)) >= 0;) {
        size_t start, len;
        take(&s[k], &start, &len);
        if (len > cap) {
            cap = len;
            int32_t *more = realloc(ids, cap * sizeof *ids);
            if (more) ids = more;
            uint8_t *more_mask = more ? realloc(mask, cap) : NULL;
            if (more_mask) mask = more_mask;
            if (!more || !more_mask) st = mt_fail(MT_ERR_NOMEM, "%s: cannot hold an example of %zu tokens", path, len);
            if (st != MT_OK) break;
        }
        mt_tokens_copy(&s[k].tokens, start, len, ids);
        if (chat) mt_tokens_copy_mask(&s[k].tokens, start, len, mask);
        st = mt_tokens_status(&s[k].tokens);
        if (st == MT_OK) st = chat ? mt_masked_writer_add(mw, (const uint32_t *)ids, mask, len, 1)
                                   : mt_shard_writer_write(&sw, ids, len);
    }
    free(ids);
    free(mask);
    if (st == MT_OK) return chat ? mt_masked_writer_finish(mw) : mt_shard_writer_finish(&sw);
    if (chat) mt_masked_writer_abort(mw);
    else mt_shard_writer_abort(&sw);
    return st;
}

/* The mix's key: its version, the shares asked for and each dataset's token file. */
static uint64_t mix_key(const source *s, int n) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    XXH3_64bits_reset(h);
    int version = MIX_VERSION;
    XXH3_64bits_update(h, &version, sizeof version);
    for (int k = 0; k < n; k++) {
        struct stat st = {0};
        stat(s[k].file, &st);
        int64_t fields[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
        XXH3_64bits_update(h, &s[k].given->weight, sizeof s[k].given->weight);
        XXH3_64bits_update(h, s[k].file, strlen(s[k].file) + 1);
        XXH3_64bits_update(h, fields, sizeof fields);
    }
    uint64_t key = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return key;
}

static void report(const mt_train_options *o, const source *s, int n, const char *path) {
    char line[4096];
    size_t at = 0;
    uint64_t total = 0;
    for (int k = 0; k < n; k++) total += s[k].written;
    for (int k = 0; k < n && at < sizeof line; k++) {
        const char *base = strrchr(s[k].given->path, '/') ? strrchr(s[k].given->path, '/') + 1 : s[k].given->path;
        double written = (double)s[k].written;
        int w = snprintf(line + at, sizeof line - at, "%s%s %.1f%% of the tokens (%.2f passes)", k ? ", " : "", base,
                         100.0 * written / (double)total, written / (double)s[k].tokens.count);
        at += w > 0 ? (size_t)w : 0;
    }
    mt_log_info("mixed %d datasets into %s, %llu tokens: %s", n, path, (unsigned long long)total, line);
    for (int k = 0; k < n; k++)
        if (o->val_fraction > 0 && s[k].written > s[k].tokens.count) {
            mt_log_warn("the held-out split (--val-fraction %g) comes from the mix, which repeats %s: its examples may "
                        "be trained on too; --val-data gives a validation set of its own", o->val_fraction,
                        s[k].given->path);
            break;
        }
}

static mt_status mix(const mt_train_options *o, uint32_t vocab, const mt_data_source *given, int n, char *tokens,
                     size_t cap) {
    source *s = calloc((size_t)n, sizeof *s);
    if (!s) return mt_fail(MT_ERR_NOMEM, "cannot hold the datasets of --data");
    for (int k = 0; k < n; k++) s[k].given = &given[k];
    int chat = 0;
    mt_status st = open_sources(o, vocab, s, n, &chat);
    char cache_dir[PATH_MAX], prefix[PATH_MAX + 64];
    snprintf(cache_dir, sizeof cache_dir, "%s/data", o->out_dir);
    snprintf(prefix, sizeof prefix, "%s/mix-%016llx", cache_dir, (unsigned long long)(st == MT_OK ? mix_key(s, n) : 0));
    char *first = st == MT_OK ? mt_shard_name(prefix, 0, 0) : NULL;
    if (st == MT_OK && !first) st = mt_fail(MT_ERR_NOMEM, "cannot copy a path");
    if (st == MT_OK) snprintf(tokens, cap, "%s", first);
    struct stat seen;
    if (st == MT_OK && stat(tokens, &seen) == 0) {
        mt_log_info("%s: the mix cached in %s", o->data_path, tokens);
    } else if (st == MT_OK) {
        set_shares(s, n);
        uint64_t total;
        st = plan_mix(s, n, o->data_path, &total);
        if (st == MT_OK) st = mt_mkdir_p(cache_dir);
        if (st == MT_OK) mt_train_cache_remove_stale(cache_dir, "mix");
        if (st == MT_OK) st = write_mix(s, n, chat, vocab, prefix, tokens);
        if (st == MT_OK) report(o, s, n, tokens);
    }
    free(first);
    for (int k = 0; k < n; k++)
        if (s[k].open) mt_tokens_close(&s[k].tokens);
    free(s);
    return st;
}

mt_status mt_data_mix_resolve(const mt_train_options *o, uint32_t vocab, char *tokens, size_t cap) {
    mt_data_source given[MT_MAX_DATA];
    int n;
    MT_TRY(mt_data_list_parse(o->data_path, given, &n));
    if (n == 1) {
        mt_train_options one = *o;
        one.data_path = given[0].path;
        return mt_train_data_resolve(&one, vocab, tokens, cap);
    }
    return mix(o, vocab, given, n, tokens, cap);
}
