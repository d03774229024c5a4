/* mt_bench: timed training steps on synthetic tokens. TFLOP/s counts model FLOPs per token, the
 * way the PyTorch peers in bench/ count them: 6 x (the blocks' active parameters + the LM head's
 * V x D) for the linear layers (forward 2, backward 4; recomputation not counted; a mixture of
 * experts counts its router and the top_k experts a token goes to, and a shared expert) plus
 * 6 x L x seq x Q for causal attention (forward 2 x seq x Q per layer, half of 4 x seq x Q for the
 * causal mask; backward twice the forward), a local layer's over the keys its window lets a query
 * see (model/kinds/attention.c); with local layers, the figure counted as if every layer attended
 * to the whole sequence is reported beside it. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device_info.h"
#include "engine/block.h"
#include "megatrain.h"
#include "train/options.h"
#include "train/train_devices.h"
#include "train/profile_report.h"
#include "train/progress.h"
#include "util/host_memory.h"
#include "util/rng.h"
#include "util/clock.h"
#include "util/stop_signal.h"

static double model_flops_per_token(const mt_config *c, int seq) {
    double linear = (double)mt_config_blocks_active_params(c) + (double)c->vocab_size * c->hidden_size;
    double attention = 3.0 * mt_config_blocks_extra_flops(c, seq);
    return 6.0 * linear + attention;
}

/* The same with no layer local: what a step would count if its windows were whole sequences. */
static double full_attention_flops_per_token(const mt_config *c, int seq) {
    mt_config full = *c;
    full.sliding_window = 0;
    memset(full.local_layers, 0, sizeof full.local_layers);
    return model_flops_per_token(&full, seq);
}

/* Bytes each GPU moves over its PCIe link in a step, by the schedule (engine.h): every streamed
 * block's weights come in for the forward and, but for the K still in their slots, again for the
 * backward (the resident device_blocks never move); the embedding and head once each unless the
 * device keeps them (processes that split the units: each its 1/loads_split slice); its 1/ranks
 * slice of every gradient the host optimizer updates goes home in fp32. The weights' bytes the
 * steps report (a mixture of experts' reloads leave unrouted experts home) replace h2d's. */
static void pcie_bytes(const mt_layout *lay, const mt_engine_options *eo, int ranks, int loads_split, mt_dtype weight,
                       double *h2d, double *d2h) {
    int S = lay->cfg.num_layers - eo->device_blocks, K = eo->slots < S ? eo->slots : S, U = lay->num_units;
    double wsize = (double)mt_dtype_size(weight), ends = (double)(lay->units[0].numel + lay->units[U - 1].numel);
    double block = (double)lay->max_block_numel;
    *h2d = wsize * (block * (2.0 * S - K) + (eo->ends_on_device ? 0 : ends)) / loads_split;
    *d2h = 4.0 * (block * S + (eo->ends_on_device ? 0 : ends)) / ranks;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double step_s, tokens_per_s, tflops, stall_share, opt_wait_share;
    double tflops_full; /* counted as if no layer were local */
    double idle_share;         /* the device's idle time over the step time (1 - computing) */
    double idle_forward_share, idle_backward_share; /* its parts between jobs of the two passes */
    double opt_s, opt_block_s; /* the optimizer's mean time a step, and a block */
    double after_norm_s, backlog; /* exact clipping: its mean time from the norm to the last master
                                   * out, and the units' updates ahead of it still to take then */
    const mt_placement *plan;  /* where everything lived: the run's memory plan */
    /* The device memory in use by the driver's count (cudaMemGetInfo: the CUDA context and the
     * libraries' workspaces included), sampled after every step and at the end: the engine
     * allocates all it uses at its creation and the libraries theirs in the first step. */
    double driver_peak_bytes;
    int gpus;                  /* ranks: --gpus, or the world's processes */
    int processes;             /* the world's processes (torchrun); 0 or 1: one */
    int clipped, skipped;      /* timed steps whose norm was over --clip (their update corrected), or not finite */
    double grad_norm;          /* the last timed step's gradient norm */
    double h2d_bytes, d2h_bytes; /* PCIe bytes per GPU per step, each way */
    int moe;                   /* a mixture of experts: */
    double experts_unrouted;   /* the mean share of the reloaded blocks' experts left home */
    int packed_mean;           /* packed examples' mean length (bench --packed), or 0 */
    double segments_per_window; /* their mean count a window (1: plain windows) */
} bench_summary;

/* The summary line, and with `json_file` (opened by mt_bench before anything ran) the summary as a
 * JSON line appended there; MT_ERR_IO naming `json` when it cannot be written. */
static mt_status print_summary(FILE *out, const mt_train_options *o, const mt_backend *be, const mt_config *cfg,
                               const bench_summary *s, double peak_gpu, double host, const char *json,
                               FILE *json_file) {
    const mt_engine_options *eo = &s->plan->eo;
    double tokens = (double)s->gpus * s->plan->tokens;
    char where[768], grads[96], unrouted[96] = "";
    mt_placement_describe(s->plan, where, sizeof where);
    if (s->moe && eo->all_experts)
        snprintf(unrouted, sizeof unrouted, " (the backward reloaded every expert: --all-experts)");
    else if (s->moe)
        snprintf(unrouted, sizeof unrouted, " (the backward's reloads left %.1f%% of their experts home: no token "
                 "chose them)", 100 * s->experts_unrouted);
    mt_placement_grads_where(s->plan, grads, sizeof grads);
    fprintf(out, "megatrain %s on %d %s%s: %.0f tokens/step, median step %.3f s, %.0f tokens/s, %.1f TFLOP/s, "
            "peak device memory %.2f GiB (%.2f GiB by the driver's count, context included), host %.1f GiB, "
            "block chunk %d tokens, attention tile %d queries, checkpoints of %d of %d blocks on the host, device idle %.1f%% of the step (%.1f%% in the forward, "
            "%.1f%% in the backward, the rest at the step's ends; stalled on copies %.1f%%), issuing thread waited on the optimizer %.1f%% (that wait overlaps queued GPU work), "
            "optimizer %.3f s a step (%.4f s a block, %.0f%% of the step); PCIe per GPU per step %.2f GB in, %.2f GB "
            "out%s; plan's floor %.3f s, its host %.1f GiB (%.2f bytes a parameter; measured %.2f); plan: %s\n", o->preset ? o->preset : "model", s->gpus,
            mt_backend_has_own_memory(be) ? "GPU" : "cpu rank", s->gpus > 1 ? "s" : "", tokens, s->step_s,
            s->tokens_per_s, s->tflops, peak_gpu / 1073741824.0, s->driver_peak_bytes / 1073741824.0,
            host / 1073741824.0, mt_block_piece_rows(eo->batch, eo->seq, eo->chunk),
            mt_block_tile_rows(eo->batch, eo->seq, eo->attn_tile), eo->ckpt_on_host, cfg->num_layers,
            100 * s->idle_share,
            100 * s->idle_forward_share, 100 * s->idle_backward_share, 100 * s->stall_share, 100 * s->opt_wait_share, s->opt_s, s->opt_block_s,
            s->step_s > 0 ? 100 * s->opt_s / s->step_s : 0, s->h2d_bytes / 1e9, s->d2h_bytes / 1e9, unrouted,
            s->plan->floor_s,
            (double)mt_placement_host_bytes(s->plan) / 1073741824.0,
            (double)mt_placement_host_bytes(s->plan) / (double)mt_config_total_params(cfg),
            host / (double)mt_config_total_params(cfg), where);
    if (s->tflops_full != s->tflops)
        fprintf(out, "local layers: TFLOP/s counts the keys their windows let a query see (%.1f); counted as if "
                "every layer attended to the whole sequence, %.1f\n", s->tflops, s->tflops_full);
    if (s->packed_mean)
        fprintf(out, "packed examples of about %d tokens, %.1f a window, attention masked between them (TFLOP/s "
                "counts causal attention over whole windows, as for plain steps)\n", s->packed_mean,
                s->segments_per_window);
    if (!json_file) return MT_OK;
    json_t *j = json_pack("{s:i, s:f, s:f, s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:b, s:f, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:i, s:i, s:f, s:i, s:i}",
                          "gpus", s->gpus, "pcie_h2d_gb_per_gpu", s->h2d_bytes / 1e9, "pcie_d2h_gb_per_gpu",
                          s->d2h_bytes / 1e9, "system", s->processes > 1 ? "megatrain-processes" : "megatrain", "backend", be->ops->name, "model", o->preset ? o->preset : "model",
                          "params", (json_int_t)mt_config_total_params(cfg), "seq", eo->seq, "batch", eo->batch,
                          "micro_batches", eo->micro_batches, "tokens_per_step", tokens, "step_s", s->step_s,
                          "tokens_per_s", s->tokens_per_s, "tflops", s->tflops, "peak_gpu_gib",
                          peak_gpu / 1073741824.0, "host_gib", host / 1073741824.0, "copy_wait_share",
                          s->stall_share, "opt_wait_share", s->opt_wait_share, "opt_seconds", s->opt_s,
                          "opt_seconds_per_block", s->opt_block_s, "device_idle_share", s->idle_share,
                          "idle_forward_share", s->idle_forward_share, "idle_backward_share", s->idle_backward_share,
                          "clip",
                          (double)o->max_grad_norm, "opt_cores", o->opt_cores ? o->opt_cores : "",
                          "ends_on_device", eo->ends_on_device, "gpu_mem_gib", (double)o->gpu_mem / 1073741824.0,
                          "ckpt_on_host", eo->ckpt_on_host, "layers", cfg->num_layers,
                          "device_blocks", eo->device_blocks, "opt_units_on_device", s->plan->units_on_device,
                          "units", s->plan->units, "grads_wait", grads, "placement", where,
                          "slots", mt_placement_slots(s->plan), "lm_chunk", eo->lm_chunk, "driver_peak_gpu_gib",
                          s->driver_peak_bytes / 1073741824.0, "chunk", mt_block_piece_rows(eo->batch, eo->seq, eo->chunk),
                          "attn_tile", mt_block_tile_rows(eo->batch, eo->seq, eo->attn_tile));
    /* Beside what was measured, what the plan said: its floor and its host bytes. */
    double plan_host = (double)mt_placement_host_bytes(s->plan), params = (double)mt_config_total_params(cfg);
    json_t *planned = json_pack("{s:f, s:f, s:f, s:f, s:i, s:i, s:f, s:i}", "plan_floor_s", s->plan->floor_s, "plan_host_gib",
                                plan_host / 1073741824.0, "plan_host_bytes_per_param", plan_host / params,
                                "host_bytes_per_param", host / params, "clipped_steps", s->clipped, "skipped_steps",
                                s->skipped, "grad_norm", s->grad_norm, "grad_ring", eo->grad_ring);
    if (planned && o->max_grad_norm > 0 &&
        (json_object_set_new(planned, "opt_after_norm_s", json_real(s->after_norm_s)) != 0 ||
         json_object_set_new(planned, "opt_backlog_units", json_real(s->backlog)) != 0)) {
        json_decref(planned);
        planned = NULL;
    }
    if (j && planned) json_object_update(j, planned);
    json_decref(planned);
    if (j && (json_object_set_new(j, "packed_mean", json_integer(s->packed_mean)) != 0 ||
              json_object_set_new(j, "segments_per_window", json_real(s->segments_per_window)) != 0 ||
              json_object_set_new(j, "tflops_full_attention", json_real(s->tflops_full)) != 0 ||
              (s->moe && json_object_set_new(j, "experts_unrouted_share", json_real(s->experts_unrouted)) != 0) ||
              json_object_set_new(j, "all_experts", json_boolean(eo->all_experts)) != 0)) {
        json_decref(j);
        j = NULL;
    }
    int bad = !j || json_dumpf(j, json_file, JSON_COMPACT) != 0 || fputc('\n', json_file) == EOF ||
              fflush(json_file) != 0;
    json_decref(j);
    return bad ? mt_fail(MT_ERR_IO, "--json %s: cannot write the summary: %s", json, j ? strerror(errno) : "out of memory")
               : MT_OK;
}

/* Packed examples in every window: lengths uniform in [mean/2, 3*mean/2], the last one of a window
 * cut to fit; a segment's last token predicts nothing. Returns the segments. */
static size_t pack_windows(mt_rng *rng, int mean, int seq, size_t windows, int32_t *positions, int32_t *targets) {
    size_t segments = 0;
    int lo = mean / 2 > 1 ? mean / 2 : 1, span = mean + 1;
    for (size_t w = 0; w < windows; w++)
        for (int at = 0; at < seq; segments++) {
            int len = lo + (int)(mt_rng_next(rng) % (uint64_t)span);
            if (len > seq - at) len = seq - at;
            for (int i = 0; i < len; i++) positions[w * seq + at + i] = i;
            at += len;
            targets[w * seq + at - 1] = -1;
        }
    return segments;
}

/* --profile times one GPU's ops, through its backend's device timers. */
static mt_status profile_possible(mt_backend *be, int ranks, const char *profile) {
    if (!mt_backend_has_profile(be))
        return mt_fail(MT_ERR_INVALID, "--profile %s: the %s backend has no device timers to profile its ops with; "
                       "the profile needs the cuda backend (--backend cuda)", profile, be->ops->name);
    if (ranks > 1)
        return mt_fail(MT_ERR_INVALID, "--profile %s: the profile times one GPU's ops; run it on one (%d ranks here)",
                       profile, ranks);
    return MT_OK;
}

/* The profile's spans are timed from the last warm-up step on (so that its events are made before the
 * timed steps), and its rows kept from the first timed step. */
static mt_status profile_around_step(mt_backend *be, int64_t s, int warmup, int after) {
    int first = warmup > 0 ? warmup - 1 : 0;
    if (!after) return s == first ? mt_profile_start(be) : MT_OK;
    if (s < first) return MT_OK;
    MT_TRY(mt_profile_collect(be));
    if (s < warmup) mt_profile_clear(be);
    return MT_OK;
}

static mt_status write_profile(mt_backend *be, const mt_train_options *o, const mt_config *cfg, double tokens,
                               double seconds, double tflops, const char *profile, FILE *out) {
    mt_profile_stop(be);
    const mt_device_info *info = mt_backend_device_info(be);
    mt_profile_run run = {.model = o->preset ? o->preset : "model", .device = info ? info->name : "",
                          .steps = (int)o->steps, .layers = cfg->num_layers, .tokens_per_step = tokens,
                          .step_seconds = seconds, .tflops = tflops};
    int count;
    const mt_prof_row *rows = mt_profile_rows(be, &count);
    return mt_profile_report(rows, count, &run, profile, out);
}

mt_status mt_bench(const mt_train_options *given, int warmup, int packed_mean, FILE *out, const char *json,
                   const char *profile) {
    mt_train_options resolved;
    MT_TRY(mt_train_options_fresh(given, &resolved));
    if (packed_mean > 0) resolved.packing = "on"; /* the engine takes positions */
    const mt_train_options *o = &resolved;
    mt_host_memory_give(o->host_mem);
    if (o->steps < 1) return mt_fail(MT_ERR_INVALID, "--steps %lld: bench needs at least one timed step", (long long)o->steps);
    mt_config cfg;
    MT_TRY(mt_train_model_config(o, &cfg));
    /* Opened before the steps run, so that a path it cannot write is refused before, not lost after. */
    FILE *json_file = json ? fopen(json, "a") : NULL;
    if (json && !json_file) return mt_fail(MT_ERR_IO, "--json %s: cannot open it to append to: %s", json, strerror(errno));
    mt_layout lay;
    mt_status laid = mt_layout_init(&lay, &cfg);
    if (laid != MT_OK) {
        if (json_file) fclose(json_file);
        return laid;
    }
    mt_devices dev = {0};
    mt_store store = {0};
    /* Under torchrun's variables every process of the world runs this with the same steps; rank 0
     * alone appends the summary. */
    mt_status rc = mt_devices_world(&dev);
    int ranks = rc == MT_OK ? mt_devices_ranks(&dev, o) : 1;
    size_t n = (size_t)ranks * o->micro_batches * o->batch * o->seq_len;
    int32_t *inputs = mt_malloc(n * sizeof *inputs, "bench tokens"), *targets = mt_malloc(n * sizeof *targets, "bench tokens");
    int32_t *positions = packed_mean > 0 ? mt_malloc(n * sizeof *positions, "bench positions") : NULL;
    double *times = mt_calloc((size_t)o->steps, sizeof *times, "bench timings");
    if (rc == MT_OK && !(inputs && targets && times && (positions || !packed_mean))) rc = MT_ERR_NOMEM;
    mt_placement plan;
    double t0 = mt_now();
    if (rc == MT_OK) rc = mt_devices_open(&dev, o);
    mt_backend *be = dev.be;
    if (rc == MT_OK && profile) rc = profile_possible(be, ranks, profile);
    double t1 = mt_now();
    mt_moments_format moments;
    if (rc == MT_OK) rc = mt_moments_format_parse(o->moments, &moments);
    /* Refused up front, as train is: what the store and the engine need against what is there. */
    if (rc == MT_OK) rc = mt_train_placement(o, be, &cfg, &plan, NULL);
    if (rc == MT_OK) rc = mt_devices_check_memory(&dev, &lay, &plan.eo, moments);
    if (rc == MT_OK) rc = mt_engine_store_create(&store, &lay, be, moments, &plan.eo);
    double t2 = mt_now();
    if (rc == MT_OK) {
        mt_store_init_random(&store, (uint64_t)o->seed);
        fprintf(out, "set-up: backend %.1f s, host store %.1f s, initialization %.1f s\n", t1 - t0, t2 - t1,
                mt_now() - t2);
        rc = mt_devices_start(&dev, &store, &plan.eo, 0);
    }
    if (rc == MT_OK) fprintf(out, "set-up: engine ready at %.1f s\n", mt_now() - t0);
    mt_rng rng = {(uint64_t)o->seed};
    double stall = 0, opt_wait = 0, opt = 0, opt_block = 0, computing = 0, idle_forward = 0, idle_backward = 0;
    double after_norm = 0, backlog = 0;
    double total = 0, driver_peak = 0, segments = 0, grad_norm = 0, weights_in = 0, unrouted = 0;
    int clipped = 0, skipped = 0;
    for (int64_t s = 0; rc == MT_OK && s < warmup + o->steps; s++) {
        for (size_t i = 0; i < n; i++) {
            inputs[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)cfg.vocab_size);
            targets[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)cfg.vocab_size);
        }
        if (positions) segments += (double)pack_windows(&rng, packed_mean, o->seq_len, n / o->seq_len, positions, targets);
        mt_step_result r;
        if (mt_stop_requested()) {
            rc = mt_stop_status("benchmarking");
            break;
        }
        if (profile) rc = profile_around_step(be, s, warmup, 0);
        if (rc == MT_OK) rc = mt_devices_step(&dev, inputs, targets, positions, 1e-4f, &r);
        if (rc == MT_OK && profile) rc = profile_around_step(be, s, warmup, 1);
        if (rc != MT_OK) break;
        if ((double)mt_dev_in_use(be) > driver_peak) driver_peak = (double)mt_dev_in_use(be);
        double ends = r.seconds - r.compute_seconds - r.idle_forward_seconds - r.idle_backward_seconds;
        fprintf(out, "%s step %lld: %.3f s, %.0f tokens/s, loss %.4f, device computing %.3f s, idle %.3f s in the "
                "forward, %.3f s in the backward, %.3f s at the step's ends, compute waited %.3f s on copies, issue "
                "waited %.3f s on the optimizer, optimizer %.3f s (%.4f s a block)",
                s < warmup ? "warmup" : "timed", (long long)s, r.seconds, (double)n / r.seconds, r.loss,
                r.compute_seconds, r.idle_forward_seconds, r.idle_backward_seconds, ends, r.stall_seconds,
                r.wait_opt_seconds, r.opt_seconds, r.opt_seconds_per_block);
        if (r.moe)
            fprintf(out, ", weights in %.3f GB (%.1f%% of the reloaded experts left home)", r.weight_bytes_in / 1e9,
                    100 * r.experts_unrouted);
        if (r.opt_after_norm_seconds > 0)
            fprintf(out, ", its last master out %.3f s after the norm (%d units' updates ahead of the norm still "
                    "to take then)", r.opt_after_norm_seconds, r.opt_backlog_units);
        fputc('\n', out);
        fflush(out);
        if (s < warmup) continue;
        times[s - warmup] = r.seconds;
        clipped += o->max_grad_norm > 0 && r.grad_norm > o->max_grad_norm;
        skipped += r.skipped;
        grad_norm = r.grad_norm;
        stall += r.stall_seconds;
        computing += r.compute_seconds;
        idle_forward += r.idle_forward_seconds;
        idle_backward += r.idle_backward_seconds;
        opt_wait += r.wait_opt_seconds;
        opt += r.opt_seconds;
        opt_block += r.opt_seconds_per_block;
        after_norm += r.opt_after_norm_seconds;
        backlog += r.opt_backlog_units;
        weights_in += r.weight_bytes_in;
        unrouted += r.experts_unrouted;
        total += r.seconds;
    }
    if (rc == MT_OK) {
        mt_engine_finish(dev.engine);
        size_t peak = mt_dev_peak(be);
        qsort(times, (size_t)o->steps, sizeof *times, compare_doubles);
        if ((double)mt_dev_in_use(be) > driver_peak) driver_peak = (double)mt_dev_in_use(be);
        bench_summary sum = {.step_s = times[o->steps / 2], .plan = &plan, .gpus = ranks, .processes = dev.world.size,
                             .clipped = clipped, .skipped = skipped, .grad_norm = grad_norm,
                             .driver_peak_bytes = driver_peak};
        /* Processes split the units unless the moments are 8-bit; each then loads its slice alone. */
        int split = dev.world.size > 1 && moments != MT_MOMENTS_8BIT ? dev.world.size : 1;
        pcie_bytes(&lay, &plan.eo, dev.world.size > 1 ? split : sum.gpus, split, be->ops->weight_dtype, &sum.h2d_bytes,
                   &sum.d2h_bytes);
        if (weights_in > 0) sum.h2d_bytes = weights_in / (double)o->steps;
        sum.moe = cfg.num_experts > 0;
        sum.experts_unrouted = unrouted / (double)o->steps;
        sum.tokens_per_s = (double)n / sum.step_s;
        sum.tflops = sum.tokens_per_s * model_flops_per_token(&cfg, o->seq_len) / 1e12;
        sum.tflops_full = sum.tokens_per_s * full_attention_flops_per_token(&cfg, o->seq_len) / 1e12;
        sum.stall_share = total > 0 ? stall / total : 0;
        sum.idle_share = total > 0 ? 1 - computing / total : 0;
        sum.idle_forward_share = total > 0 ? idle_forward / total : 0;
        sum.idle_backward_share = total > 0 ? idle_backward / total : 0;
        sum.opt_wait_share = total > 0 ? opt_wait / total : 0;
        sum.opt_s = opt / (double)o->steps;
        sum.opt_block_s = opt_block / (double)o->steps;
        sum.after_norm_s = after_norm / (double)o->steps;
        sum.backlog = backlog / (double)o->steps;
        sum.packed_mean = packed_mean;
        sum.segments_per_window = packed_mean ? segments / (double)(warmup + o->steps) / (double)(n / o->seq_len) : 1;
        int64_t host_peak = mt_host_memory_peak();
        rc = print_summary(out, o, be, &cfg, &sum, (double)peak, host_peak > 0 ? (double)host_peak : 0, json,
                           mt_devices_writes(&dev) ? json_file : NULL);
        if (rc == MT_OK && profile) rc = write_profile(be, o, &cfg, (double)n, total, sum.tflops, profile, out);
    }
    if (json_file && fclose(json_file) != 0 && rc == MT_OK)
        rc = mt_fail(MT_ERR_IO, "--json %s: cannot write the summary: %s", json, strerror(errno));
    mt_devices_stop(&dev);
    if (store.layout) mt_store_free(&store);
    mt_devices_close(&dev);
    mt_layout_free(&lay);
    free(inputs);
    free(targets);
    free(positions);
    free(times);
    return rc;
}
