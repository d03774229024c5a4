/* Times the CUDA backend's gated delta rule (backend.h's gdn.rule and gdn.rule_dx, the chunked form
 * of gdn_rule.cu) forward and backward, and keeps its results for bench/gdn/fla_gdn.py to compare
 * with flash-linear-attention's chunk_gated_delta_rule on the same inputs. One line a layout,
 * key=value fields.
 *
 *   bench_gdn [--batch 4] [--seq 4096] [--heads 32] [--dk 128] [--dv 128] [--iters K] [--packed LEN]
 *             [--out DIR]
 *
 * Inputs are a fixed function of the element index (bench_gdn_input; fla_gdn.py computes the same),
 * rounded to bf16: q and k through the gdn.qk_norm op (L2-normalised, q times dk^-0.5), v and dout
 * in [-1, 1), g in [-1, 0), beta in [0, 1). --packed LEN: the same tokens again as packed examples of
 * LEN rows each (segments; the state restarts on each). Times: the mean of K runs after one warm-up.
 * --out DIR: DIR/gdn-LAYOUT.bin holds o, dq, dk, dv (bf16) then dg, dbeta (fp32) of the last run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/bf16.h"

typedef struct {
    int batch, seq, heads, dk, dv, iters, packed;
    const char *out;
} options;

static void usage_and_exit(void) {
    fprintf(stderr, "usage: bench_gdn [--batch B] [--seq T] [--heads H] [--dk K] [--dv V] [--iters N] "
                    "[--packed LEN] [--out DIR]\n");
    exit(2);
}

static int positive(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v <= 0 || v > (1L << 24)) usage_and_exit();
    return (int)v;
}

static options parse_options(int argc, char **argv) {
    options o = {.batch = 4, .seq = 4096, .heads = 32, .dk = 128, .dv = 128, .iters = 10};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage_and_exit();
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--batch")) o.batch = positive(v);
        else if (!strcmp(k, "--seq")) o.seq = positive(v);
        else if (!strcmp(k, "--heads")) o.heads = positive(v);
        else if (!strcmp(k, "--dk")) o.dk = positive(v);
        else if (!strcmp(k, "--dv")) o.dv = positive(v);
        else if (!strcmp(k, "--iters")) o.iters = positive(v);
        else if (!strcmp(k, "--packed")) o.packed = positive(v);
        else if (!strcmp(k, "--out")) o.out = v;
        else usage_and_exit();
    }
    return o;
}

/* Element i of input `salt`, uniform in [-1, 1): a multiplicative hash (fla_gdn.py's input()). */
static float bench_gdn_input(uint64_t i, uint32_t salt) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (salt * 40503u);
    h = h * 2246822519u ^ (h >> 13);
    return (float)(h >> 8) / (float)(1u << 23) - 1.0f;
}

static void *upload(mt_backend *be, mt_stream *s, size_t count, uint32_t salt, float lo, float hi, int bf16) {
    size_t el = bf16 ? 2 : 4;
    void *host = malloc(count * el), *dev = mt_dev_alloc(be, count * el, "a bench input");
    if (!host || !dev) {
        fprintf(stderr, "bench_gdn: out of memory for %zu elements\n", count);
        exit(1);
    }
    for (size_t i = 0; i < count; i++) {
        float x = lo + (hi - lo) * (bench_gdn_input(i, salt) + 1.0f) / 2.0f;
        if (bf16) ((uint16_t *)host)[i] = mt_f32_to_bf16(x);
        else ((float *)host)[i] = x;
    }
    mt_copy_async(be, dev, host, count * el, s);
    mt_event *e = mt_event_create(be);
    mt_event_record(be, e, s);
    mt_event_sync(be, e);
    mt_event_destroy(be, e);
    free(host);
    return dev;
}

static void *zeros(mt_backend *be, mt_stream *s, size_t bytes) {
    void *dev = mt_dev_alloc(be, bytes, "a bench output");
    if (!dev) {
        fprintf(stderr, "bench_gdn: out of memory for %zu bytes\n", bytes);
        exit(1);
    }
    mt_zero_async(be, dev, bytes, s);
    return dev;
}

static void save(mt_backend *be, mt_stream *s, FILE *f, const void *dev, size_t bytes) {
    void *host = malloc(bytes);
    mt_copy_async(be, host, dev, bytes, s);
    mt_event *e = mt_event_create(be);
    mt_event_record(be, e, s);
    mt_event_sync(be, e);
    mt_event_destroy(be, e);
    fwrite(host, 1, bytes, f);
    free(host);
}

int main(int argc, char **argv) {
    options o = parse_options(argc, argv);
    mt_backend *be;
    if (mt_backend_cuda_create(&be, 0) != MT_OK) {
        fprintf(stderr, "bench_gdn: %s\n", mt_error());
        return 1;
    }
    mt_stream *s = mt_stream_create(be);
    int n = o.batch * o.seq, H = o.heads;
    size_t nh = (size_t)n * H, nk = nh * o.dk, nv = nh * o.dv;
    mt_gdn_dims d = {.n = n, .seq = o.seq, .k_heads = H, .v_heads = H, .d_k = o.dk, .d_v = o.dv, .qk_ld = H * o.dk,
                     .v_ld = H * o.dv};
    void *qraw = upload(be, s, nk, 1, -1, 1, 1), *kraw = upload(be, s, nk, 2, -1, 1, 1);
    void *v = upload(be, s, nv, 3, -1, 1, 1), *dout = upload(be, s, nv, 6, -1, 1, 1);
    float *g = upload(be, s, nh, 4, -1, 0, 0), *beta = upload(be, s, nh, 5, 0, 1, 0);
    void *q = zeros(be, s, nk * 2), *k = zeros(be, s, nk * 2), *out = zeros(be, s, nv * 2);
    void *dq = zeros(be, s, nk * 2), *dk = zeros(be, s, nk * 2), *dv = zeros(be, s, nv * 2);
    float *dg = zeros(be, s, nh * 4), *dbeta = zeros(be, s, nh * 4);
    be->ops->gdn.qk_norm(be, s, q, k, qraw, kraw, d);

    int32_t *pos_h = malloc((size_t)n * 4), *starts_h = malloc(((size_t)n + 1) * 4), count = 0;
    for (int layout = 0; layout < (o.packed ? 2 : 1); layout++) {
        mt_segments seg;
        int32_t *pos = NULL, *starts = NULL;
        if (layout) { /* examples of o.packed rows, none crossing a sequence */
            count = 0;
            for (int r = 0; r < n; r++) {
                int p = (r % o.seq) % o.packed;
                if (!p) starts_h[count++] = r;
                pos_h[r] = p;
            }
            starts_h[count] = n;
            pos = zeros(be, s, (size_t)n * 4);
            starts = zeros(be, s, ((size_t)count + 1) * 4);
            mt_copy_async(be, pos, pos_h, (size_t)n * 4, s);
            mt_copy_async(be, starts, starts_h, ((size_t)count + 1) * 4, s);
            seg = (mt_segments){pos, starts, count, 0};
            d.seg = &seg;
        }
        size_t ws_bytes = be->ops->gdn.rule_workspace(be, d);
        void *ws = mt_dev_alloc(be, ws_bytes, "the rule's workspace");
        if (!ws) {
            fprintf(stderr, "bench_gdn: %s\n", mt_error());
            return 1;
        }
        mt_event *t0 = mt_event_create(be), *t1 = mt_event_create(be), *t2 = mt_event_create(be);
        double fwd = 0, bwd = 0;
        for (int it = 0; it <= o.iters; it++) {
            mt_event_record(be, t0, s);
            be->ops->gdn.rule(be, s, out, q, k, v, g, beta, d, ws);
            mt_event_record(be, t1, s);
            be->ops->gdn.rule_dx(be, s, dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, d, ws);
            mt_event_record(be, t2, s);
            mt_event_sync(be, t2);
            if (it) fwd += mt_event_elapsed(be, t0, t1), bwd += mt_event_elapsed(be, t1, t2);
        }
        if (mt_backend_check(be) != MT_OK) {
            fprintf(stderr, "bench_gdn: %s\n", mt_error());
            return 1;
        }
        fwd /= o.iters, bwd /= o.iters;
        printf("system=megatrain layout=%s batch=%d seq=%d heads=%d dk=%d dv=%d segments=%d fwd_ms=%.3f bwd_ms=%.3f "
               "total_ms=%.3f workspace_mib=%.0f\n",
               layout ? "packed" : "plain", o.batch, o.seq, H, o.dk, o.dv, layout ? count : o.batch, fwd * 1e3,
               bwd * 1e3, (fwd + bwd) * 1e3, ws_bytes / 1048576.0);
        fflush(stdout);
        if (o.out) {
            char path[512];
            snprintf(path, sizeof path, "%s/gdn-%s.bin", o.out, layout ? "packed" : "plain");
            FILE *f = fopen(path, "wb");
            if (!f) {
                fprintf(stderr, "bench_gdn: cannot write %s\n", path);
                return 1;
            }
            save(be, s, f, out, nv * 2);
            save(be, s, f, dq, nk * 2);
            save(be, s, f, dk, nk * 2);
            save(be, s, f, dv, nv * 2);
            save(be, s, f, dg, nh * 4);
            save(be, s, f, dbeta, nh * 4);
            fclose(f);
        }
        mt_event_destroy(be, t0);
        mt_event_destroy(be, t1);
        mt_event_destroy(be, t2);
        mt_dev_free(be, ws);
        if (pos) mt_dev_free(be, pos), mt_dev_free(be, starts);
    }
    free(pos_h);
    free(starts_h);
    mt_stream_destroy(be, s);
    mt_backend_destroy(be);
    return 0;
}
