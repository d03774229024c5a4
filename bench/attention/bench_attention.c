/* Times the CUDA backend's causal attention (the op the engine calls: cuDNN's fused SDPA, or the
 * flash kernels where cuDNN has no plan) forward and backward at long sequences, one sequence a
 * run, and keeps a sample of its results for bench/attention/torch_attention.py to check against
 * PyTorch's SDPA on the same inputs. One line per length, key=value fields.
 *
 *   bench_attention [--seqs 32768,65536,...] [--heads 24] [--kv-heads 8] [--head-dim 128]
 *                   [--iters K] [--sample DIR] [--tile T] [--packed MEAN,MEAN,...] [--window W] [--sinks 1]
 *
 * --tile T runs the sequence as the engine does with --attn-tile T (engine/kinds/attention_run.c): in
 * windows of T queries cut from its end, each attending to every key before it; the backward from
 * the last window, each window's share of dk and dv summed in fp32 and its own rows rounded back.
 * The times are the whole sequence's (every window, the sums included); 0 or T >= seq: one call.
 * The packed runs are one call each.
 *
 * --window W: a sliding window of W keys (backend.h's mt_attn_params); --sinks 1: a sink logit a head
 * and its gradient (gpt-oss: --heads 64 --kv-heads 8 --head-dim 64, its local layers --window 128).
 * Neither goes with --sample (the check against PyTorch computes plain causal attention); FLOPs
 * then count the keys each query sees.
 *
 * --packed: after each length's plain run, the same tokens as packed examples (segments, backend.h)
 * of lengths drawn uniformly in [MEAN/2, 3*MEAN/2] (the last cut to fit), one run a mean, whose
 * line says packed=MEAN and segments=COUNT; with --sample, DIR/attention-SEQ-packed-MEAN.bin holds
 * the whole of out and dq (bf16) and DIR/attention-SEQ-packed-MEAN.lengths the segments' lengths
 * (int32), for the check against PyTorch run on each example alone.
 *
 * Inputs are a fixed function of the element index (bench_attention_input, which the Python side
 * computes alike), rounded to bf16. Times are the mean of K runs after one warm-up. FLOPs: forward
 * 2 * seq^2 * heads * head_dim (the causal half of QK^T and PV), backward 2.5 times that. With
 * --sample, writes DIR/attention-SEQ.bin: the first and last SAMPLE_ROWS rows of out (bf16), dq
 * (bf16) and the lse of the last rows (fp32), all heads. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/bf16.h"

#define SAMPLE_ROWS 64
#define MAX_SEQS 16

typedef struct {
    int seqs[MAX_SEQS], n_seqs, heads, kv_heads, head_dim, iters, tile, window, sinks;
    int packed[MAX_SEQS], n_packed;
    const char *sample_dir;
} options;

static void usage_and_exit(void) {
    fprintf(stderr, "usage: bench_attention [--seqs 32768,65536,...] [--heads H] [--kv-heads KV] [--head-dim D] "
                    "[--iters K] [--sample DIR] [--tile T] [--packed MEAN,...] [--window W] [--sinks 1]\n");
    exit(2);
}

static int positive(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v <= 0 || v > (1L << 24)) usage_and_exit();
    return (int)v;
}

static options parse_options(int argc, char **argv) {
    options o = {.seqs = {32768, 65536, 131072, 262144, 524288}, .n_seqs = 5, .heads = 24, .kv_heads = 8,
                 .head_dim = 128, .iters = 2};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage_and_exit();
        const char *flag = argv[i], *value = argv[++i];
        if (!strcmp(flag, "--seqs")) {
            char *list = strdup(value);
            o.n_seqs = 0;
            for (char *t = strtok(list, ","); t && o.n_seqs < MAX_SEQS; t = strtok(NULL, ",")) o.seqs[o.n_seqs++] = positive(t);
            free(list);
        } else if (!strcmp(flag, "--heads")) o.heads = positive(value);
        else if (!strcmp(flag, "--kv-heads")) o.kv_heads = positive(value);
        else if (!strcmp(flag, "--head-dim")) o.head_dim = positive(value);
        else if (!strcmp(flag, "--iters")) o.iters = positive(value);
        else if (!strcmp(flag, "--sample")) o.sample_dir = value;
        else if (!strcmp(flag, "--tile")) o.tile = !strcmp(value, "0") ? 0 : positive(value);
        else if (!strcmp(flag, "--window")) o.window = positive(value);
        else if (!strcmp(flag, "--sinks") && !strcmp(value, "1")) o.sinks = 1;
        else if (!strcmp(flag, "--packed")) {
            char *list = strdup(value);
            o.n_packed = 0;
            for (char *t = strtok(list, ","); t && o.n_packed < MAX_SEQS; t = strtok(NULL, ","))
                o.packed[o.n_packed++] = positive(t);
            free(list);
        }
        else usage_and_exit();
    }
    if (o.heads % o.kv_heads || (o.sample_dir && (o.window || o.sinks))) usage_and_exit();
    return o;
}

/* Element i of tensor `which` (0 q, 1 k, 2 v, 3 dout): a hash of (which, i) in [-1, 1). */
static float bench_attention_input(int which, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(which + 1) * 0xD1B54A32D192ED03ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (float)((x >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

/* Waits until everything issued on s is done. */
static void finish(mt_backend *be, mt_stream *s) {
    mt_event *e = mt_event_create(be);
    mt_event_record(be, e, s);
    mt_event_sync(be, e);
    mt_event_destroy(be, e);
}

static void *device_input(mt_backend *be, mt_stream *s, int which, size_t count, uint16_t *host) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) host[i] = mt_f32_to_bf16(bench_attention_input(which, i));
    void *dev = mt_dev_alloc(be, count * 2, "a bench input");
    if (dev) mt_copy_async(be, dev, host, count * 2, s), finish(be, s);
    return dev;
}

/* last_lse: the lse block [heads][last_rows] that holds the sequence's last rows. */
static int write_sample(const options *o, mt_backend *be, mt_stream *s, int seq, const void *out, const void *dq,
                        const float *last_lse, int last_rows) {
    size_t row = (size_t)o->heads * o->head_dim * 2, rows = SAMPLE_ROWS < last_rows ? SAMPLE_ROWS : last_rows;
    size_t bytes = 4 * rows * row + (size_t)o->heads * rows * 4;
    char *buf = malloc(bytes), path[4096];
    if (!buf) return -1;
    char *at = buf;
    const void *sources[2] = {out, dq};
    for (int t = 0; t < 2; t++) { /* first rows, then last rows */
        mt_copy_async(be, at, sources[t], rows * row, s), at += rows * row;
        mt_copy_async(be, at, (const char *)sources[t] + (seq - rows) * row, rows * row, s), at += rows * row;
    }
    for (int h = 0; h < o->heads; h++, at += rows * 4)
        mt_copy_async(be, at, last_lse + (size_t)h * last_rows + (last_rows - rows), rows * 4, s);
    finish(be, s);
    snprintf(path, sizeof path, "%s/attention-%d.bin", o->sample_dir, seq);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, bytes, f) == bytes;
    if (f) ok = !fclose(f) && ok;
    if (!ok) fprintf(stderr, "bench_attention: cannot write %s: %s\n", path, strerror(errno));
    free(buf);
    return ok ? 0 : -1;
}

/* Segments of lengths uniform in [mean/2, 3*mean/2] over seq rows (the last cut to fit), from a
 * fixed generator: host positions and starts [*count + 1]. */
static void packed_layout(int seq, int mean, int32_t *pos, int32_t *starts, int *count) {
    uint64_t x = 0x2545F4914F6CDD1Dull * (uint64_t)mean;
    int lo = mean / 2 > 1 ? mean / 2 : 1;
    *count = 0;
    for (int at = 0; at < seq;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int len = lo + (int)(x % (uint64_t)(mean + 1));
        if (len > seq - at) len = seq - at;
        starts[(*count)++] = at;
        for (int i = 0; i < len; i++) pos[at + i] = i;
        at += len;
    }
    starts[*count] = seq;
}

static int write_file(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, bytes, f) == bytes;
    if (f) ok = !fclose(f) && ok;
    if (!ok) fprintf(stderr, "bench_attention: cannot write %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

/* The packed run's results for the check: all of out and dq, and the segments' lengths. */
static int write_packed_sample(const options *o, mt_backend *be, mt_stream *s, int seq, int mean, const void *out,
                               const void *dq, const int32_t *starts, int count) {
    size_t bytes = (size_t)seq * o->heads * o->head_dim * 2;
    char *buf = malloc(2 * bytes), path[4096];
    int32_t *lengths = malloc((size_t)count * sizeof *lengths);
    int rc = -1;
    if (buf && lengths) {
        mt_copy_async(be, buf, out, bytes, s);
        mt_copy_async(be, buf + bytes, dq, bytes, s);
        finish(be, s);
        for (int k = 0; k < count; k++) lengths[k] = starts[k + 1] - starts[k];
        snprintf(path, sizeof path, "%s/attention-%d-packed-%d.bin", o->sample_dir, seq, mean);
        rc = write_file(path, buf, 2 * bytes);
        snprintf(path, sizeof path, "%s/attention-%d-packed-%d.lengths", o->sample_dir, seq, mean);
        if (rc == 0) rc = write_file(path, lengths, (size_t)count * sizeof *lengths);
    }
    free(buf);
    free(lengths);
    return rc;
}

/* The whole sequence's q, k, v, dout, out, dq, dk, dv; lse as each window's [heads][rows] block
 * one after another (the whole [heads][seq] in one call); the fp32 sums of dk and dv over the
 * windows. */
typedef struct {
    void *q, *k, *v, *dout, *out, *dq, *dk, *dv, *ws;
    float *lse, *dk_sum, *dv_sum;
    mt_attn_params params; /* the window, and the sinks and their gradient on the device */
} tensors;

/* The windows of a sequence (engine/block.c): T queries each from its end, the first the rest. */
typedef struct {
    int T, count, first;
} windows;

static windows windows_of(int seq, int tile) {
    windows w = {tile > 0 && tile < seq ? tile : seq, 0, 0};
    w.count = (seq + w.T - 1) / w.T;
    w.first = seq - (w.count - 1) * w.T;
    return w;
}

/* Window i's first query, its queries, and its dims (the first is plain attention over its rows). */
static int window_q0(windows w, int i) { return i == 0 ? 0 : w.first + (i - 1) * w.T; }
static int window_rows(windows w, int i) { return i == 0 ? w.first : w.T; }
static mt_attn_dims window_dims(const options *o, int seq, windows w, int i) {
    mt_attn_dims d = {1, window_rows(w, i), o->heads, o->kv_heads, o->head_dim, 0, 0};
    if (i > 0) d.seq = seq, d.q0 = window_q0(w, i), d.q_len = w.T;
    return d;
}

static void windows_forward(const options *o, mt_backend *be, mt_stream *s, int seq, windows w, const tensors *t) {
    size_t row = (size_t)o->heads * o->head_dim * 2;
    for (int i = 0; i < w.count; i++) {
        size_t at = (size_t)window_q0(w, i) * row;
        be->ops->op.attention(be, s, (char *)t->out + at, t->lse + (size_t)o->heads * window_q0(w, i),
                              (const char *)t->q + at, t->k, t->v, window_dims(o, seq, w, i), &t->params, NULL, t->ws);
    }
}

/* The backward from the last window; each window's share of dk and dv joins the fp32 sums and the
 * window's own rows are rounded back, as the engine does. */
static void windows_backward(const options *o, mt_backend *be, mt_stream *s, int seq, windows w, const tensors *t) {
    size_t row = (size_t)o->heads * o->head_dim * 2, kv = (size_t)o->kv_heads * o->head_dim;
    for (int i = w.count - 1; i >= 0; i--) {
        int q0 = window_q0(w, i), rows = window_rows(w, i);
        size_t at = (size_t)q0 * row, keys = (size_t)(q0 + rows) * kv, own = (size_t)q0 * kv;
        be->ops->op.attention_dx(be, s, (char *)t->dq + at, t->dk, t->dv, (const char *)t->dout + at,
                                 (const char *)t->out + at, t->lse + (size_t)o->heads * q0, (const char *)t->q + at,
                                 t->k, t->v, window_dims(o, seq, w, i), &t->params, NULL, t->ws);
        be->ops->op.accumulate_f32(be, s, t->dk_sum, t->dk, keys, i < w.count - 1);
        be->ops->op.accumulate_f32(be, s, t->dv_sum, t->dv, keys, i < w.count - 1);
        be->ops->op.round_f32(be, s, (char *)t->dk + own * 2, t->dk_sum + own, (size_t)rows * kv);
        be->ops->op.round_f32(be, s, (char *)t->dv + own * 2, t->dv_sum + own, (size_t)rows * kv);
    }
}

/* Mean seconds of forward and backward of the whole sequence in its windows, as time_runs. */
static void time_windows(const options *o, mt_backend *be, mt_stream *s, int seq, windows w, const tensors *t,
                         double *fwd, double *bwd) {
    mt_event *t0 = mt_event_create(be), *t1 = mt_event_create(be), *t2 = mt_event_create(be);
    *fwd = *bwd = 0;
    for (int it = 0; it <= o->iters; it++) {
        mt_event_record(be, t0, s);
        windows_forward(o, be, s, seq, w, t);
        mt_event_record(be, t1, s);
        windows_backward(o, be, s, seq, w, t);
        mt_event_record(be, t2, s);
        mt_event_sync(be, t2);
        if (it > 0) *fwd += mt_event_elapsed(be, t0, t1) / o->iters, *bwd += mt_event_elapsed(be, t1, t2) / o->iters;
    }
    mt_event_destroy(be, t0), mt_event_destroy(be, t1), mt_event_destroy(be, t2);
}

/* Mean seconds of forward and backward over iters runs after one warm-up. */
static void time_runs(const options *o, mt_backend *be, mt_stream *s, mt_attn_dims d, const mt_segments *seg,
                      const tensors *t, double *fwd, double *bwd) {
    mt_event *t0 = mt_event_create(be), *t1 = mt_event_create(be), *t2 = mt_event_create(be);
    *fwd = *bwd = 0;
    for (int it = 0; it <= o->iters; it++) {
        mt_event_record(be, t0, s);
        be->ops->op.attention(be, s, t->out, t->lse, t->q, t->k, t->v, d, &t->params, seg, t->ws);
        mt_event_record(be, t1, s);
        be->ops->op.attention_dx(be, s, t->dq, t->dk, t->dv, t->dout, t->out, t->lse, t->q, t->k, t->v, d, &t->params,
                                 seg, t->ws);
        mt_event_record(be, t2, s);
        mt_event_sync(be, t2);
        if (it > 0) *fwd += mt_event_elapsed(be, t0, t1) / o->iters, *bwd += mt_event_elapsed(be, t1, t2) / o->iters;
    }
    mt_event_destroy(be, t0), mt_event_destroy(be, t1), mt_event_destroy(be, t2);
}

/* The packed runs of one length: the same tensors, the segments of each mean. */
static int run_packed(const options *o, mt_backend *be, mt_stream *s, mt_attn_dims d, const tensors *t) {
    int seq = d.seq, failed = 0;
    int32_t *pos = malloc((size_t)seq * 4), *starts = malloc(((size_t)seq + 1) * 4);
    int32_t *dev = mt_dev_alloc(be, ((size_t)2 * seq + 1) * 4, "the segments");
    for (int m = 0; m < o->n_packed && pos && starts && dev; m++) {
        int count, mean = o->packed[m];
        packed_layout(seq, mean, pos, starts, &count);
        mt_copy_async(be, dev, pos, (size_t)seq * 4, s);
        mt_copy_async(be, dev + seq, starts, ((size_t)count + 1) * 4, s);
        finish(be, s);
        mt_segments seg = {dev, dev + seq, count, 0};
        double fwd, bwd;
        time_runs(o, be, s, d, &seg, t, &fwd, &bwd);
        double work = 0; /* the causal halves of the segments' score matrices */
        for (int k = 0; k < count; k++) work += (double)(starts[k + 1] - starts[k]) * (starts[k + 1] - starts[k]);
        double flops = 2.0 * work * o->heads * o->head_dim;
        if (mt_backend_check(be) == MT_OK &&
            (!o->sample_dir || write_packed_sample(o, be, s, seq, mean, t->out, t->dq, starts, count) == 0)) {
            printf("system=megatrain-packed seq=%d packed=%d segments=%d heads=%d kv_heads=%d head_dim=%d fwd_ms=%.2f "
                   "bwd_ms=%.2f fwd_tflops=%.1f bwd_tflops=%.1f\n", seq, mean, count, o->heads, o->kv_heads,
                   o->head_dim, fwd * 1e3, bwd * 1e3, flops / fwd * 1e-12, 2.5 * flops / bwd * 1e-12);
        } else {
            printf("system=megatrain-packed seq=%d packed=%d error=\"%s\"\n", seq, mean, mt_error());
            failed = 1;
        }
        fflush(stdout);
    }
    mt_dev_free(be, dev);
    free(pos);
    free(starts);
    return failed ? -1 : 0;
}

/* One length: allocate, run warm-up + iters, print the line (and the packed runs' lines).
 * Returns 0, or -1 on an error. */
static int run_length(const options *o, mt_backend *be, mt_stream *s, int seq) {
    mt_attn_dims d = {.batch = 1, .seq = seq, .heads = o->heads, .kv_heads = o->kv_heads, .head_dim = o->head_dim};
    windows w = windows_of(seq, o->tile);
    size_t qc = (size_t)seq * o->heads * o->head_dim, kc = (size_t)seq * o->kv_heads * o->head_dim;
    uint16_t *host = malloc(qc * 2);
    size_t ws_bytes = be->ops->op.attention_workspace(be, d, o->n_packed > 0);
    for (int i = 0; w.count > 1 && i < w.count; i += w.count - 1) { /* the first window and the last */
        size_t bytes = be->ops->op.attention_workspace(be, window_dims(o, seq, w, i), 0);
        if (bytes > ws_bytes) ws_bytes = bytes;
    }
    tensors t = {0};
    t.q = host ? device_input(be, s, 0, qc, host) : NULL, t.k = t.q ? device_input(be, s, 1, kc, host) : NULL;
    t.v = t.k ? device_input(be, s, 2, kc, host) : NULL, t.dout = t.v ? device_input(be, s, 3, qc, host) : NULL;
    t.out = mt_dev_alloc(be, qc * 2, "out"), t.dq = mt_dev_alloc(be, qc * 2, "dq");
    t.dk = mt_dev_alloc(be, kc * 2, "dk"), t.dv = mt_dev_alloc(be, kc * 2, "dv");
    t.lse = mt_dev_alloc(be, (size_t)o->heads * seq * 4, "lse");
    t.ws = mt_dev_alloc(be, ws_bytes ? ws_bytes : 1, "the attention workspace");
    t.params.window = o->window;
    float *sinks = o->sinks ? mt_dev_alloc(be, (size_t)2 * o->heads * 4, "the sinks and their gradient") : NULL;
    if (sinks) { /* sinks of 0 (their values change no time), their gradient from 0 */
        mt_zero_async(be, sinks, (size_t)2 * o->heads * 4, s);
        t.params.sinks = sinks, t.params.dsinks = sinks + o->heads;
    }
    int sums = w.count == 1 || ((t.dk_sum = mt_dev_alloc(be, kc * 4, "dk's fp32 sum")) &&
                                (t.dv_sum = mt_dev_alloc(be, kc * 4, "dv's fp32 sum")));
    int rc = -1;
    if (t.dout && t.out && t.dq && t.dk && t.dv && t.lse && t.ws && sums && (sinks || !o->sinks)) {
        double fwd, bwd;
        if (w.count == 1) time_runs(o, be, s, d, NULL, &t, &fwd, &bwd);
        else time_windows(o, be, s, seq, w, &t, &fwd, &bwd);
        double keys = o->window > 0 && o->window < seq ? (double)seq * o->window - (double)o->window * o->window / 2
                                                       : (double)seq * seq / 2; /* the scores each query's row has */
        double flops = 4.0 * keys * o->heads * o->head_dim;
        int last = window_q0(w, w.count - 1);
        if (mt_backend_check(be) == MT_OK &&
            (!o->sample_dir || write_sample(o, be, s, seq, t.out, t.dq, t.lse + (size_t)o->heads * last,
                                            window_rows(w, w.count - 1)) == 0)) {
            printf("system=megatrain seq=%d heads=%d kv_heads=%d head_dim=%d tile=%d windows=%d window=%d sinks=%d "
                   "fwd_ms=%.2f bwd_ms=%.2f fwd_tflops=%.1f bwd_tflops=%.1f workspace_gib=%.2f peak_gib=%.2f\n", seq,
                   o->heads, o->kv_heads, o->head_dim, w.T, w.count, o->window, o->sinks, fwd * 1e3, bwd * 1e3,
                   flops / fwd * 1e-12,
                   2.5 * flops / bwd * 1e-12, ws_bytes / 1073741824.0, mt_dev_peak(be) / 1073741824.0);
            fflush(stdout);
            rc = 0;
        }
    }
    if (rc) printf("system=megatrain seq=%d error=\"%s\"\n", seq, mt_error());
    else rc = run_packed(o, be, s, d, &t);
    fflush(stdout);
    void *bufs[] = {t.q, t.k, t.v, t.dout, t.out, t.dq, t.dk, t.dv, t.lse, t.ws, t.dk_sum, t.dv_sum, sinks};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) mt_dev_free(be, bufs[i]);
    free(host);
    return rc;
}

int main(int argc, char **argv) {
    options o = parse_options(argc, argv);
    mt_backend *be;
    if (mt_backend_cuda_create(&be, 0) != MT_OK) {
        fprintf(stderr, "bench_attention: %s\n", mt_error());
        return 1;
    }
    mt_stream *s = mt_stream_create(be);
    int failed = !s;
    for (int i = 0; i < o.n_seqs && s; i++) failed |= run_length(&o, be, s, o.seqs[i]) != 0;
    if (s) mt_stream_destroy(be, s);
    mt_backend_destroy(be);
    return failed;
}
