/* Packed examples that do not see each other: the reference attention and RoPE with segments
 * against each example run alone (bitwise: the same calls on the same rows) and against a naive
 * block-diagonal definition; the packer (whole examples, first-fit decreasing, determinism, the
 * state a resumed run seeks to); the dataset's packed windows (positions restart, no target across
 * a boundary, padding) and --doc-mask's documents. The whole model against PyTorch with segments is
 * test_model_ref.c's; a run on packed chat data is test_chat_cli.c's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_ops.h"
#include "io/dataset.h"
#include "io/masked_tokens.h"
#include "io/packer.h"
#include "ops_check.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/mt-packing-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(packing, .init = make_dir, .fini = remove_dir);

static const char *path_of(const char *name) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}


/* ---- attention and rope with segments ---- */

/* Segments of a micro-batch of 2 sequences of 150 tokens: one-token ones, ones across the
 * reference's 64-row tiles, and a sequence that is one segment. */
static const int LENGTHS[] = {63, 1, 2, 70, 14, 150};
static const mt_attn_dims PACKED = {.batch = 2, .seq = 150, .heads = 6, .kv_heads = 2, .head_dim = 24};

static void segments_of(const int *lengths, int count, int32_t *pos, int32_t *starts) {
    int row = 0;
    for (int k = 0; k < count; k++) {
        starts[k] = row;
        for (int i = 0; i < lengths[k]; i++) pos[row++] = i;
    }
    starts[count] = row;
}

typedef struct {
    size_t qn, kvn, rows;
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv, *ws;
} attn_buffers;

static attn_buffers attn_alloc(mt_attn_dims d) {
    attn_buffers b = {.rows = (size_t)d.batch * d.seq};
    b.qn = b.rows * d.heads * d.head_dim, b.kvn = b.rows * d.kv_heads * d.head_dim;
    size_t sizes[] = {b.qn, b.kvn, b.kvn, b.qn, b.qn, b.rows * d.heads, b.qn, b.kvn, b.kvn,
                      mt_cpu_attention_workspace(d) / 4 + 1};
    float **ptrs[] = {&b.q, &b.k, &b.v, &b.dout, &b.out, &b.lse, &b.dq, &b.dk, &b.dv, &b.ws};
    for (size_t i = 0; i < COUNT(ptrs); i++) cr_assert_not_null(*ptrs[i] = calloc(sizes[i], sizeof(float)));
    return b;
}

static void attn_free(attn_buffers *b) {
    float *ptrs[] = {b->q, b->k, b->v, b->dout, b->out, b->lse, b->dq, b->dk, b->dv, b->ws};
    for (size_t i = 0; i < COUNT(ptrs); i++) free(ptrs[i]);
}

/* Packed attention forward and backward equal, bit for bit, each example's attention run on its
 * own as a batch of one sequence of its length: out, lse ([n, heads] packed, [heads, len] alone),
 * dq, dk, dv. */
Test(packing, attention_of_packed_examples_is_each_example_alone) {
    mt_attn_dims d = PACKED;
    int count = (int)COUNT(LENGTHS), hq = d.heads * d.head_dim, hkv = d.kv_heads * d.head_dim;
    attn_buffers p = attn_alloc(d);
    ops_fill(p.q, p.qn, 1, -2, 2), ops_fill(p.k, p.kvn, 2, -2, 2), ops_fill(p.v, p.kvn, 3, -1, 1);
    ops_fill(p.dout, p.qn, 4, -1, 1);
    ops_fill(p.dq, p.qn, 5, -9, 9), ops_fill(p.dk, p.kvn, 6, -9, 9); /* garbage: the backward overwrites */
    int32_t pos[2 * 150], starts[COUNT(LENGTHS) + 1];
    segments_of(LENGTHS, count, pos, starts);
    mt_segments seg = {pos, starts, count, 0};
    mt_cpu_attention(p.out, p.lse, p.q, p.k, p.v, d, NULL, &seg);
    mt_cpu_attention_dx(p.dq, p.dk, p.dv, p.dout, p.out, p.lse, p.q, p.k, p.v, d, NULL, &seg, p.ws);

    for (int s = 0; s < count; s++) {
        size_t r0 = (size_t)starts[s];
        mt_attn_dims one = d;
        one.batch = 1, one.seq = LENGTHS[s];
        attn_buffers a = attn_alloc(one);
        memcpy(a.q, p.q + r0 * hq, a.qn * 4), memcpy(a.k, p.k + r0 * hkv, a.kvn * 4);
        memcpy(a.v, p.v + r0 * hkv, a.kvn * 4), memcpy(a.dout, p.dout + r0 * hq, a.qn * 4);
        mt_cpu_attention(a.out, a.lse, a.q, a.k, a.v, one, NULL, NULL);
        mt_cpu_attention_dx(a.dq, a.dk, a.dv, a.dout, a.out, a.lse, a.q, a.k, a.v, one, NULL, NULL, a.ws);
        cr_assert(!memcmp(a.out, p.out + r0 * hq, a.qn * 4), "segment %d: out differs from the example alone", s);
        cr_assert(!memcmp(a.dq, p.dq + r0 * hq, a.qn * 4), "segment %d: dq differs", s);
        cr_assert(!memcmp(a.dk, p.dk + r0 * hkv, a.kvn * 4), "segment %d: dk differs", s);
        cr_assert(!memcmp(a.dv, p.dv + r0 * hkv, a.kvn * 4), "segment %d: dv differs", s);
        for (int h = 0; h < d.heads; h++)
            for (int i = 0; i < one.seq; i++)
                cr_assert_eq(a.lse[(size_t)h * one.seq + i], p.lse[(r0 + i) * d.heads + h], "segment %d lse", s);
        attn_free(&a);
    }
    attn_free(&p);
}

/* Against the definition, in double: query i sees keys j <= i of its own segment only. */
Test(packing, attention_of_packed_examples_matches_a_block_diagonal_mask) {
    mt_attn_dims d = PACKED;
    int count = (int)COUNT(LENGTHS), group = d.heads / d.kv_heads, hd = d.head_dim;
    attn_buffers p = attn_alloc(d);
    ops_fill(p.q, p.qn, 11, -2, 2), ops_fill(p.k, p.kvn, 12, -2, 2), ops_fill(p.v, p.kvn, 13, -1, 1);
    int32_t pos[2 * 150], starts[COUNT(LENGTHS) + 1];
    segments_of(LENGTHS, count, pos, starts);
    mt_segments seg = {pos, starts, count, 0};
    mt_cpu_attention(p.out, p.lse, p.q, p.k, p.v, d, NULL, &seg);
    double *scores = malloc(p.rows * sizeof *scores), worst = 0;
    for (size_t i = 0; i < p.rows; i++)
        for (int h = 0; h < d.heads; h++) {
            const float *qi = p.q + (i * d.heads + h) * hd;
            double max = -INFINITY, sum = 0;
            size_t first = i - (size_t)pos[i];
            for (size_t j = first; j <= i; j++) {
                const float *kj = p.k + (j * d.kv_heads + h / group) * hd;
                double s = 0;
                for (int e = 0; e < hd; e++) s += (double)qi[e] * kj[e];
                scores[j] = s / sqrt((double)hd);
                if (scores[j] > max) max = scores[j];
            }
            for (size_t j = first; j <= i; j++) sum += exp(scores[j] - max);
            double lse = max + log(sum);
            worst = fmax(worst, fabs(lse - p.lse[i * d.heads + h]));
            for (int e = 0; e < hd; e++) {
                double o = 0;
                for (size_t j = first; j <= i; j++)
                    o += exp(scores[j] - lse) * p.v[(j * d.kv_heads + h / group) * hd + e];
                worst = fmax(worst, fabs(o - p.out[(i * d.heads + h) * hd + e]));
            }
        }
    cr_assert_lt(worst, 1e-5, "packed attention is %g off the block-diagonal definition", worst);
    free(scores);
    attn_free(&p);
}

/* RoPE at a segment's positions is RoPE of that segment alone: positions restart. */
Test(packing, rope_positions_restart_at_each_segment) {
    enum { HEADS = 3, HD = 16, N = 2 * 150 };
    float inv_freq[HD / 2], *x = malloc(N * HEADS * HD * sizeof *x), *packed = malloc(N * HEADS * HD * sizeof *x);
    for (int i = 0; i < HD / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / HD);
    ops_fill(x, N * HEADS * HD, 21, -1, 1);
    memcpy(packed, x, N * HEADS * HD * sizeof *x);
    int32_t pos[N], starts[COUNT(LENGTHS) + 1];
    segments_of(LENGTHS, (int)COUNT(LENGTHS), pos, starts);
    for (int inverse = 0; inverse <= 1; inverse++) {
        mt_cpu_rope(packed, inv_freq, N, 150, 0, pos, HEADS, HD, HD, inverse);
        for (size_t s = 0; s < COUNT(LENGTHS); s++) {
            float *alone = x + (size_t)starts[s] * HEADS * HD;
            mt_cpu_rope(alone, inv_freq, LENGTHS[s], LENGTHS[s], 0, NULL, HEADS, HD, HD, inverse);
        }
        cr_assert(!memcmp(x, packed, N * HEADS * HD * sizeof *x), "rope at packed positions (inverse %d)", inverse);
    }
    free(x);
    free(packed);
}

/* ---- the packer ---- */

enum { SEQ = 64 };

/* n examples with lengths 1..SEQ + 20 (some longer than SEQ, taken as SEQ), from a seed. */
static mt_example *examples_of(size_t n, uint64_t seed) {
    mt_example *ex = malloc(n * sizeof *ex);
    mt_rng rng = {seed};
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = 1 + (uint32_t)(mt_rng_next(&rng) % (SEQ + 20));
        ex[i] = (mt_example){.start = at, .len = len < SEQ ? len : SEQ};
        at += len;
    }
    return ex;
}

/* One epoch's windows as drawn: every example whole in exactly one window that it fits. */
static uint64_t check_epoch(mt_packer *p, const mt_example *ex, size_t n, uint64_t windows) {
    int *seen = calloc(n, sizeof *seen);
    uint64_t tokens = 0;
    for (uint64_t w = 0; w < windows; w++) {
        const uint32_t *items;
        size_t count, used = 0;
        cr_assert_eq(mt_packer_next(p, &items, &count), MT_OK);
        cr_assert_gt(count, 0, "window %llu is empty", (unsigned long long)w);
        for (size_t k = 0; k < count; k++) {
            cr_assert_lt(items[k], n);
            cr_assert_eq(seen[items[k]]++, 0, "example %u drawn twice in an epoch", items[k]);
            used += ex[items[k]].len;
        }
        cr_assert_leq(used, SEQ, "window %llu holds %zu tokens", (unsigned long long)w, used);
        tokens += used;
    }
    for (size_t i = 0; i < n; i++) cr_assert_eq(seen[i], 1, "example %zu drawn %d times in an epoch", i, seen[i]);
    free(seen);
    return tokens;
}

Test(packing, packer_puts_every_example_whole_in_one_window_an_epoch) {
    size_t n = 3 * MT_PACK_BUFFER + 123; /* several buffers and a partial one */
    mt_example *ex = examples_of(n, 7);
    for (int order = 0; order <= 1; order++) {
        mt_packer *p;
        cr_assert_eq(mt_packer_create(&p, ex, n, SEQ, order), MT_OK, "%s", mt_error());
        uint64_t windows, padding, total = 0;
        cr_assert_eq(mt_packer_count(p, 99, &windows, &padding), MT_OK);
        cr_assert_eq(mt_packer_seek(p, 99, 0, 0), MT_OK);
        for (size_t i = 0; i < n; i++) total += ex[i].len;
        cr_assert_eq(windows * SEQ - padding, total, "the padding does not add up");
        /* First-fit decreasing wastes little: lengths uniform up to the window leave under 10%. */
        cr_expect_lt((double)padding / (double)(windows * SEQ), 0.10, "%.1f%% padding",
                     100.0 * (double)padding / (double)(windows * SEQ));
        cr_assert_eq(check_epoch(p, ex, n, windows), total);
        uint64_t rng, cursor, epoch;
        mt_packer_state(p, &rng, &cursor, &epoch);
        cr_assert_eq(cursor, windows);
        cr_assert_eq(epoch, 0);
        /* The next draw starts the second epoch, which holds every example once again. */
        uint64_t windows2, padding2;
        const uint32_t *items;
        size_t count;
        cr_assert_eq(mt_packer_next(p, &items, &count), MT_OK);
        mt_packer_state(p, &rng, &cursor, &epoch);
        cr_assert_eq(epoch, 1);
        cr_assert_eq(cursor, 1);
        cr_assert_eq(mt_packer_count(p, rng, &windows2, &padding2), MT_OK);
        cr_assert_eq(mt_packer_seek(p, rng, 0, 1), MT_OK);
        cr_assert_eq(check_epoch(p, ex, n, windows2), total);
        mt_packer_free(p);
    }
    free(ex);
}

/* The windows an epoch draws, as (first example, count) pairs hashed into one number. */
static uint64_t epoch_digest(mt_packer *p, uint64_t windows) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t w = 0; w < windows; w++) {
        const uint32_t *items;
        size_t count;
        cr_assert_eq(mt_packer_next(p, &items, &count), MT_OK);
        for (size_t k = 0; k < count; k++) h = (h ^ items[k]) * 1099511628211ull;
        h = (h ^ 0xffffffffu) * 1099511628211ull;
    }
    return h;
}

Test(packing, packer_is_deterministic_from_its_seed) {
    size_t n = MT_PACK_BUFFER + 500;
    mt_example *ex = examples_of(n, 8);
    mt_packer *a, *b;
    cr_assert_eq(mt_packer_create(&a, ex, n, SEQ, 1), MT_OK);
    cr_assert_eq(mt_packer_create(&b, ex, n, SEQ, 1), MT_OK);
    uint64_t windows, padding;
    cr_assert_eq(mt_packer_count(a, 5, &windows, &padding), MT_OK);
    cr_assert_eq(mt_packer_seek(a, 5, 0, 0), MT_OK);
    cr_assert_eq(mt_packer_seek(b, 5, 0, 0), MT_OK);
    cr_assert_eq(epoch_digest(a, windows), epoch_digest(b, windows), "the same seed drew other windows");
    cr_assert_eq(mt_packer_seek(a, 5, 0, 0), MT_OK);
    cr_assert_eq(mt_packer_seek(b, 6, 0, 0), MT_OK);
    uint64_t windows6;
    cr_assert_eq(mt_packer_count(b, 6, &windows6, &padding), MT_OK);
    cr_assert_neq(epoch_digest(a, windows), epoch_digest(b, windows6), "another seed drew the same windows");
    mt_packer_free(a);
    mt_packer_free(b);
    free(ex);
}

/* A packer set to a saved state (mid-buffer, at a buffer's end, in a later epoch) draws what the
 * one that saved it draws next. */
Test(packing, packer_resumes_exactly_from_its_state) {
    size_t n = 2 * MT_PACK_BUFFER + 77;
    mt_example *ex = examples_of(n, 9);
    mt_packer *run, *resumed;
    cr_assert_eq(mt_packer_create(&run, ex, n, SEQ, 1), MT_OK);
    cr_assert_eq(mt_packer_create(&resumed, ex, n, SEQ, 1), MT_OK);
    cr_assert_eq(mt_packer_seek(run, 42, 0, 0), MT_OK);
    uint64_t windows, padding;
    cr_assert_eq(mt_packer_count(run, 42, &windows, &padding), MT_OK);
    const uint64_t stops[] = {1, 17, windows / 2, windows - 1, windows, windows + 3, 2 * windows + 50};
    uint64_t drawn = 0;
    for (size_t s = 0; s < COUNT(stops); s++) {
        const uint32_t *items;
        size_t count;
        for (; drawn < stops[s]; drawn++) cr_assert_eq(mt_packer_next(run, &items, &count), MT_OK);
        uint64_t rng, cursor, epoch;
        mt_packer_state(run, &rng, &cursor, &epoch);
        cr_assert_eq(mt_packer_seek(resumed, rng, cursor, epoch), MT_OK, "%s", mt_error());
        for (int w = 0; w < 40; w++, drawn++) {
            const uint32_t *want, *got;
            size_t want_count, got_count;
            cr_assert_eq(mt_packer_next(run, &want, &want_count), MT_OK);
            cr_assert_eq(mt_packer_next(resumed, &got, &got_count), MT_OK);
            cr_assert_eq(got_count, want_count, "stop %zu, window %d", s, w);
            cr_assert(!memcmp(got, want, want_count * sizeof *got), "stop %zu, window %d differs", s, w);
        }
    }
    uint64_t rng, cursor, epoch;
    mt_packer_state(run, &rng, &cursor, &epoch);
    cr_assert_eq(mt_packer_seek(resumed, rng, windows + 1, epoch), MT_ERR_INVALID,
                 "a position past the epoch's windows was taken");
    cr_expect(strstr(mt_error(), "past the epoch") != NULL, "%s", mt_error());
    mt_packer_free(run);
    mt_packer_free(resumed);
    free(ex);
}

/* ---- the dataset's windows ---- */

/* A masked shard of `count` examples with the given lengths: token t of the file has id 1000 + t,
 * and carries loss when t % 3 != 0 (and is not an example's first token). */
static void write_examples(const char *path, const int *lengths, int count) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path, 4), MT_OK, "%s", mt_error());
    uint32_t at = 0;
    for (int e = 0; e < count; e++) {
        uint32_t ids[512];
        uint8_t mask[512];
        cr_assert_leq(lengths[e], 512);
        for (int i = 0; i < lengths[e]; i++, at++) {
            ids[i] = 1000 + at;
            mask[i] = i > 0 && at % 3 != 0;
        }
        cr_assert_eq(mt_masked_writer_add(w, ids, mask, (size_t)lengths[e], 1), MT_OK, "%s", mt_error());
    }
    cr_assert_eq(mt_masked_writer_finish(w), MT_OK, "%s", mt_error());
}

/* Every window: its segments are whole examples (the ids run on from a start), positions restart
 * at each, a segment's last token has no target and the others have their next id where it carries
 * loss, and the padding after them is a segment of id 0 without targets. Returns the padding. */
static size_t check_window(const int32_t *in, const int32_t *tg, const int32_t *pos, int seq, const uint64_t *starts,
                           size_t examples, uint64_t count) {
    size_t padding = 0;
    for (int i = 0; i < seq;) {
        cr_assert_eq(pos[i], 0, "token %d does not start a segment", i);
        int len = 1;
        while (i + len < seq && pos[i + len] == len) len++;
        uint64_t first = (uint64_t)in[i] - 1000;
        if (in[i] == 0) { /* padding: the window's end */
            cr_assert_eq(i + len, seq, "padding before the window's end");
            for (int k = 0; k < len; k++) cr_assert(in[i + k] == 0 && tg[i + k] == -1, "padding token %d", i + k);
            padding = (size_t)len;
            break;
        }
        size_t e = 0;
        while (e < examples && starts[e] != first) e++;
        cr_assert_lt(e, examples, "segment at %d does not start an example (id %d)", i, in[i]);
        uint64_t end = e + 1 < examples ? starts[e + 1] : count, whole = end - first;
        cr_assert_eq((uint64_t)len, whole < (uint64_t)seq ? whole : (uint64_t)seq, "example %zu cut or run over", e);
        for (int k = 0; k < len; k++) {
            uint64_t t = first + (uint64_t)k;
            cr_assert_eq(in[i + k], (int32_t)(1000 + t));
            int32_t want = k + 1 == len ? -1 : (t + 1) % 3 != 0 ? (int32_t)(1000 + t + 1) : -1;
            cr_assert_eq(tg[i + k], want, "target of token %d (example %zu, position %d)", i + k, e, k);
        }
        i += len;
    }
    return padding;
}

static const int EXAMPLE_LENGTHS[] = {5, 17, 1, 30, 9, 40, 3, 12, 25, 8, 2, 33, 14, 6, 21, 11, 4, 19, 7, 28,
                                      16, 10, 26, 13, 3, 35, 9, 22, 5, 15, 31, 2, 18, 24, 8, 12, 20, 6, 27, 11};

Test(packing, packed_windows_restart_positions_and_predict_nothing_across_examples) {
    write_examples(path_of("chat.bin"), EXAMPLE_LENGTHS, (int)COUNT(EXAMPLE_LENGTHS));
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path_of("chat.bin"), &t), MT_OK, "%s", mt_error());
    const uint64_t *starts;
    size_t examples = mt_tokens_examples(&t, &starts);
    cr_assert_eq(examples, COUNT(EXAMPLE_LENGTHS));
    enum { W = 32 };
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init_packed(&ds, &t, 0.1, W, MT_SAMPLE_RANDOM, 3, MT_LONG_TRUNCATE, "chat.bin"), MT_OK,
                 "%s", mt_error());
    cr_assert(mt_dataset_segmented(&ds));
    cr_assert_eq(ds.report.truncated, 3, "examples of 40, 33 and 35 tokens are longer than 32");
    cr_assert_eq(ds.report.longest, 40);
    int32_t in[4 * W], tg[4 * W], pos[4 * W];
    size_t padding = 0, want_padding = 0;
    for (size_t w = 0; w < ds.report.windows; w += 4) {
        int batch = ds.report.windows - w < 4 ? (int)(ds.report.windows - w) : 4;
        padding += mt_dataset_train_batch(&ds, batch, in, tg, pos);
        for (int b = 0; b < batch; b++)
            want_padding += check_window(in + b * W, tg + b * W, pos + b * W, W, starts, examples, t.count);
    }
    cr_assert_eq(padding, want_padding, "the padding the batches report");
    cr_assert_eq(padding, ds.report.padding, "an epoch's padding is not what the report said");
    cr_assert_eq(ds.state.epoch, 0);
    cr_assert_eq(ds.state.cursor, ds.report.windows);
    for (int64_t i = 0; i < mt_dataset_val_batches(&ds, 1); i++) {
        mt_dataset_val_batch(&ds, i, 1, in, tg, pos);
        check_window(in, tg, pos, W, starts, examples, t.count);
        cr_assert_geq((uint64_t)in[0] - 1000, ds.train_tokens, "a validation window holds a training example");
    }
    cr_assert_gt(mt_dataset_val_batches(&ds, 1), 0);
    cr_assert_eq(mt_tokens_status(&t), MT_OK, "%s", mt_error());
    mt_dataset_free(&ds);
    mt_tokens_close(&t);
}

Test(packing, long_examples_refused_when_asked) {
    write_examples(path_of("chat.bin"), EXAMPLE_LENGTHS, (int)COUNT(EXAMPLE_LENGTHS));
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path_of("chat.bin"), &t), MT_OK, "%s", mt_error());
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init_packed(&ds, &t, 0, 32, MT_SAMPLE_RANDOM, 3, MT_LONG_REFUSE, "chat.bin"),
                 MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "chat.bin: 3 examples are longer than --seq 32") != NULL, "%s", mt_error());
    cr_expect(strstr(mt_error(), "the longest 40") != NULL, "%s", mt_error());
    cr_assert_eq(mt_dataset_init_packed(&ds, &t, 0, 40, MT_SAMPLE_RANDOM, 3, MT_LONG_REFUSE, "chat.bin"), MT_OK,
                 "%s", mt_error());
    cr_assert_eq(ds.report.truncated, 0);
    mt_dataset_free(&ds);
    mt_tokens_close(&t);
}

/* A shard without recorded examples (mask encoding 1: an earlier writer) is refused for packing,
 * saying what to do. */
Test(packing, a_shard_without_example_starts_cannot_be_packed) {
    unsigned char buf[1024 + 12] = {0};
    int32_t h[7] = {MT_MASKED_MAGIC, 1, 1024, 2, 4, 0, 1};
    memcpy(buf, h, sizeof h);
    uint16_t ids[4] = {1, 2, 3, 4};
    memcpy(buf + 1024, ids, sizeof ids);
    FILE *f = fopen(path_of("old.bin"), "wb");
    cr_assert_not_null(f);
    fwrite(buf, 1, sizeof buf, f);
    fclose(f);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path_of("old.bin"), &t), MT_OK, "%s", mt_error());
    const uint64_t *starts;
    cr_assert_eq(mt_tokens_examples(&t, &starts), 0);
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init_packed(&ds, &t, 0, 4, MT_SAMPLE_RANDOM, 1, MT_LONG_TRUNCATE, "old.bin"),
                 MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "old.bin") && strstr(mt_error(), "--packing off"), "%s", mt_error());
    mt_tokens_close(&t);
}

/* --doc-mask on a token stream: a segment ends after each end-of-text id, positions restart
 * there, and the end-of-text token predicts nothing; other targets are the next token. */
Test(packing, doc_mask_ends_documents_after_end_of_text) {
    enum { EOT = 7, N = 200, W = 24 };
    uint16_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = i % 11 == 3 || i % 17 == 0 ? EOT : (uint16_t)(20 + i % 50);
    int32_t header[256] = {20240520, 1, N};
    FILE *f = fopen(path_of("text.bin"), "wb");
    cr_assert_not_null(f);
    fwrite(header, sizeof header, 1, f);
    fwrite(ids, sizeof ids, 1, f);
    fclose(f);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path_of("text.bin"), &t), MT_OK, "%s", mt_error());
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.2, W, MT_SAMPLE_SEQUENTIAL, 1), MT_OK, "%s", mt_error());
    cr_assert(!mt_dataset_segmented(&ds));
    mt_dataset_doc_mask(&ds, EOT);
    cr_assert(mt_dataset_segmented(&ds));
    int32_t in[W], tg[W], pos[W];
    for (int w = 0; w < 6; w++) {
        size_t first = ds.state.cursor;
        cr_assert_eq(mt_dataset_train_batch(&ds, 1, in, tg, pos), 0, "stream windows have no padding");
        for (int k = 0; k < W; k++) {
            cr_assert_eq(in[k], ids[first + k]);
            int32_t want_pos = k == 0 || ids[first + k - 1] == EOT ? 0 : pos[k - 1] + 1;
            cr_assert_eq(pos[k], want_pos, "window %d position %d", w, k);
            cr_assert_eq(tg[k], ids[first + k] == EOT ? -1 : ids[first + k + 1], "window %d target %d", w, k);
        }
    }
    mt_dataset_free(&ds);
    mt_tokens_close(&t);
}
