/* The planner (plan/placement.h): it refuses what cannot fit before anything is allocated, naming
 * each class of bytes; it keeps the device's bytes within the budget (--gpu-mem, or the free memory
 * less a margin); it spends what is left on units whose state the device keeps and updates, the
 * best saving per byte first; and what it resolves is what runs (the split it prints is the
 * engine's). Sizes are the cpu backend's; the request says what device there is. */
#include <criterion/criterion.h>
#include <string.h>

#include "backend/backend.h"
#include "plan/placement.h"
#include "tiny_model.h"
#include "train/backend_select.h"

static mt_backend *cpu(void) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK, "%s", mt_error());
    return be;
}

static mt_config eight_blocks(void) {
    mt_config c = mt_tiny_config_gqa();
    c.num_layers = 8;
    return c;
}

/* A run of 2 x 4 sequences of 16 tokens, clipped, on a device of `free_bytes` with optimizer ops. */
static mt_placement_request request(int64_t gpu_mem, int64_t free_bytes) {
    mt_placement_request rq = {.eo = mt_engine_defaults(), .moments = MT_MOMENTS_F32, .gpu_mem = gpu_mem,
                               .ends = MT_PLACE_AUTO, .device_blocks = MT_PLACE_AUTO, .device_memory = 1,
                               .device_optimizer = 1, .device_free = free_bytes, .host_available = -1,
                               .rates = mt_placement_rates()};
    rq.eo.batch = 4;
    rq.eo.micro_batches = 2;
    rq.eo.seq = 16;
    rq.eo.lm_chunk = 8;
    return rq;
}

static int64_t bytes_with(mt_backend *be, const mt_config *c, mt_engine_options o, int ends, int blocks) {
    o.ends_on_device = ends;
    o.device_blocks = blocks;
    return mt_engine_size(be, c, &o).total;
}

Test(placement, prefers_the_device_optimizer_where_it_fits) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement p;
    mt_placement_request rq = request(0, (int64_t)64 << 30);
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect(p.eo.ends_on_device, "the ends stayed on the host with room to spare");
    cr_expect_eq(p.eo.device_blocks, c.num_layers, "only %d of %d blocks on the device", p.eo.device_blocks,
                 c.num_layers);
    cr_expect_eq(p.units_on_device, p.units);
    cr_expect_eq(p.opt_s, 0, "the host optimizer still has work: %g s", p.opt_s);
    char grads[96];
    mt_placement_grads_where(&p, grads, sizeof grads);
    cr_expect_str_eq(grads, "device");
    mt_backend_destroy(be);
}

/* A budget between the shape's own bytes and every unit on the device: the plan fills it (one more
 * block would not fit) and stays within it, the ends first (the most step time a byte). */
Test(placement, spends_the_budget_and_stays_within_it) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement_request rq = request(0, -1);
    int64_t base = bytes_with(be, &c, rq.eo, 0, 0), ends = bytes_with(be, &c, rq.eo, 1, 0);
    int64_t three = bytes_with(be, &c, rq.eo, 1, 3), four = bytes_with(be, &c, rq.eo, 1, 4);
    cr_assert(base < ends && ends < three && three < four);
    rq.gpu_mem = (three + four) / 2;
    mt_placement p;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect(p.eo.ends_on_device);
    cr_expect_eq(p.eo.device_blocks, 3, "%d blocks on the device in a budget for 3", p.eo.device_blocks);
    cr_expect_leq(p.dev.total, rq.gpu_mem);
    cr_expect_eq(p.dev.total, three, "what the plan reports is what the engine would allocate");
    cr_expect_gt(p.opt_s, 0, "5 blocks are the host's");
    /* Room for the ends and not one block: the ends. */
    rq.gpu_mem = ends + (bytes_with(be, &c, rq.eo, 1, 1) - ends) / 2;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect(p.eo.ends_on_device && p.eo.device_blocks == 0, "ends %d, blocks %d", p.eo.ends_on_device,
              p.eo.device_blocks);
    mt_backend_destroy(be);
}

/* Without --gpu-mem the budget is the free memory less a margin (a twentieth, at least 2 GiB). */
Test(placement, without_a_budget_leaves_a_margin_of_the_free_memory) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement_request rq = request(0, -1);
    int64_t margin = (int64_t)2 << 30, two = bytes_with(be, &c, rq.eo, 1, 2), three = bytes_with(be, &c, rq.eo, 1, 3);
    rq.device_free = margin + (two + three) / 2;
    mt_placement p;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect_eq(p.eo.device_blocks, 2);
    cr_expect_eq(p.device_limit, rq.device_free - margin);
    cr_expect_not(p.budget_given);
    mt_backend_destroy(be);
}

/* No device optimizer ops, quantized moments, or a device without memory of its own: auto keeps
 * every unit's state on the host; asking for blocks there is refused up front. */
Test(placement, keeps_state_on_the_host_where_the_device_cannot_update) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement p;
    for (int why = 0; why < 3; why++) {
        mt_placement_request rq = request(0, (int64_t)64 << 30);
        if (why == 0) rq.device_optimizer = 0;
        if (why == 1) rq.moments = MT_MOMENTS_BF16;
        if (why == 2) rq.device_memory = 0;
        cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
        cr_expect(!p.eo.ends_on_device && p.eo.device_blocks == 0, "case %d: ends %d, blocks %d", why,
                  p.eo.ends_on_device, p.eo.device_blocks);
        if (why == 2) continue; /* the cpu backend's own "device" may still be asked for */
        rq.device_blocks = 2;
        cr_expect_eq(mt_placement_resolve(be, &c, &rq, &p), MT_ERR_INVALID, "case %d", why);
    }
    mt_backend_destroy(be);
}

/* A budget the shape cannot fit even at its smallest is refused, naming each class. */
Test(placement, refuses_what_cannot_fit_naming_each_class) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement p;
    mt_placement_request rq = request(4096, -1);
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_ERR_NOMEM);
    const char *classes[] = {"weight slots", "embedding and head", "gradients", "activation checkpoints", "workspace",
                             "--gpu-mem"};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        cr_expect(strstr(mt_error(), classes[i]), "the refusal does not name '%s': %s", classes[i], mt_error());
    /* Blocks asked for that do not fit the budget are refused too, not silently dropped. */
    rq = request(0, -1);
    rq.gpu_mem = bytes_with(be, &c, rq.eo, 0, 2);
    rq.ends = 0;
    rq.device_blocks = 6;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_ERR_NOMEM);
    cr_expect(strstr(mt_error(), "device-updated units' fp32 master and moments"), "%s", mt_error());
    cr_expect(strstr(mt_error(), "resident blocks' weights"), "%s", mt_error());
    rq.device_blocks = 9;
    cr_expect_eq(mt_placement_resolve(be, &c, &rq, &p), MT_ERR_INVALID, "9 of 8 blocks");
    mt_backend_destroy(be);
}

/* A budget that needs a smaller micro-batch: the plan's split is what runs and what it says. */
Test(placement, the_split_it_reports_is_the_one_that_runs) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement_request rq = request(0, -1);
    rq.ends = 0;
    rq.device_blocks = 0;
    mt_engine_options half = rq.eo;
    half.slots = 2;
    half.batch = 2;
    half.micro_batches = 4;
    rq.gpu_mem = mt_engine_size(be, &c, &half).total;
    mt_placement p;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect_eq(p.eo.batch * p.eo.micro_batches, 8, "the same sequences a step");
    cr_expect_lt(p.eo.batch, 4, "the budget left the micro-batch whole");
    char text[768], want[64];
    mt_placement_describe(&p, text, sizeof text);
    snprintf(want, sizeof want, "%d micro-batches x %d sequences", p.eo.micro_batches, p.eo.batch);
    cr_expect(strstr(text, want), "'%s' not in: %s", want, text);
    mt_backend_destroy(be);
}

/* Llama-3-8B, clipped, 8 x 1 x 4096, on a 139 GiB device with no budget: most blocks' state moves to
 * the device, so that the gradients waiting on the host are a few blocks', not 32 GB. */
Test(placement, eight_b_clipped_keeps_few_gradients_on_the_host) {
    mt_backend *be = cpu();
    mt_config c;
    cr_assert_eq(mt_config_preset("llama-3-8b", &c), MT_OK);
    mt_placement_request rq = request(0, (int64_t)139 << 30);
    rq.eo.batch = 1;
    rq.eo.micro_batches = 8;
    rq.eo.seq = 4096;
    rq.eo.lm_chunk = 512;
    mt_placement p;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_log_info("8B: %d blocks on the device, ends %d, %.1f GB of gradients on the host, device %.1f of %.1f GB",
                p.eo.device_blocks, p.eo.ends_on_device, p.dev.host_grads / 1e9, p.dev.total / 1e9,
                p.device_limit / 1e9);
    cr_expect_geq(p.eo.device_blocks, 16, "only %d of 32 blocks on the device", p.eo.device_blocks);
    cr_expect_lt(p.dev.host_grads, (int64_t)16e9, "%.1f GB of gradients wait on the host", p.dev.host_grads / 1e9);
    cr_expect_leq(p.dev.total, p.device_limit);
    mt_backend_destroy(be);
}

/* The host's bytes a parameter (host total / parameters, as `plan` prints them) at issue 25's
 * shapes, planned for a CUDA GPU (bf16 weights: the masters split): 12 (the fp32 masters and both
 * moments) and, without clipping, a ring of two blocks and the ends' chunk buffers: at most 12.3;
 * with exact clipping the host-updated units' gradients: at most 16.3. Llama-3-8B at --gpu-mem
 * 24GiB (the ends' state on the host) on the lent H200's rates, the default within a 128 GiB host;
 * Qwen2.5-14B on an H100's free memory, the host AdamW at what the 14B step's own optimizer moved on
 * nvidia-h100-x2's host (175 GB/s, issue 25): there the optimizer keeps pace with the backward and
 * the ring stays at two blocks (slower, the planner grows it: the last check). */
static double host_bytes_a_parameter(const char *preset, int batch, int micro_batches, int64_t gpu_mem, int64_t free,
                                     float clip, double host_bytes_per_s, mt_placement *p) {
    mt_backend *be = NULL;
    cr_assert_eq(mt_backend_open_for_plan("cuda", 1, gpu_mem ? gpu_mem : free, &be), MT_OK, "%s", mt_error());
    mt_config c;
    cr_assert_eq(mt_config_preset(preset, &c), MT_OK);
    mt_placement_request rq = request(gpu_mem, free);
    rq.eo.batch = batch;
    rq.eo.micro_batches = micro_batches;
    rq.eo.seq = 4096;
    rq.eo.lm_chunk = 512;
    rq.eo.max_grad_norm = clip;
    rq.host_available = (int64_t)256 << 30;
    if (host_bytes_per_s > 0) rq.rates.host_bytes_per_s = host_bytes_per_s;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, p), MT_OK, "%s", mt_error());
    mt_backend_destroy(be);
    return (double)mt_placement_host_bytes(p) / p->params;
}

Test(placement, host_bytes_a_parameter_at_the_issue_shapes) {
    mt_placement p;
    int64_t gib = (int64_t)1 << 30;
    double b = host_bytes_a_parameter("llama-3-8b", 1, 8, 24 * gib, -1, 0.0f, 0, &p);
    cr_expect_leq(b, 12.3, "Llama-3-8B, --gpu-mem 24GiB, --clip 0: %.3f bytes a parameter", b);
    cr_expect_eq(p.eo.grad_ring, MT_ENGINE_GRAD_RING, "a ring of %d blocks", p.eo.grad_ring);
    b = host_bytes_a_parameter("llama-3-8b", 1, 8, 24 * gib, -1, 1.0f, 0, &p);
    cr_expect_leq(b, 16.3, "Llama-3-8B, --gpu-mem 24GiB, default: %.3f bytes a parameter", b);
    cr_expect_leq(mt_placement_host_bytes(&p), 128 * gib, "the 8B default needs %.1f GB", mt_placement_host_bytes(&p) / 1e9);
    int64_t h100 = (int64_t)(79.1 * (double)gib);
    b = host_bytes_a_parameter("qwen2.5-14b", 4, 1, 0, h100, 0.0f, 175e9, &p);
    cr_expect_leq(b, 12.3, "Qwen2.5-14B on an H100, --clip 0: %.3f bytes a parameter", b);
    b = host_bytes_a_parameter("qwen2.5-14b", 4, 1, 0, h100, 1.0f, 175e9, &p);
    cr_expect_leq(b, 16.3, "Qwen2.5-14B on an H100, default: %.3f bytes a parameter", b);
    /* a host AdamW slower than the backward: the ring takes the optimizer's backlog, as far as the
     * quarter of a byte a parameter it may grow to */
    b = host_bytes_a_parameter("qwen2.5-14b", 4, 1, 0, h100, 0.0f, 80e9, &p);
    cr_expect_gt(p.eo.grad_ring, MT_ENGINE_GRAD_RING, "a ring of %d blocks for a slow host", p.eo.grad_ring);
    cr_expect_leq(b, 12.3, "Qwen2.5-14B on an H100, --clip 0, a slow host: %.3f bytes a parameter", b);
    b = host_bytes_a_parameter("qwen2.5-14b", 4, 1, 0, h100, 0.0f, 10e9, &p);
    cr_expect_leq(b, 12.3, "Qwen2.5-14B on an H100, --clip 0, a very slow host: %.3f bytes a parameter", b);
}

/* A ring pays only for the host's backlog that the GPU's work without the host (the backward and
 * forward of the blocks it updates itself) covers, and takes at most a quarter of a byte a
 * parameter of host memory (two blocks whatever the model): with no block on the device it stays
 * at two blocks however slow the host; with a quarter of them on the device it grows for some
 * host, never past the quarter byte. */
Test(placement, the_ring_grows_only_over_the_devices_own_blocks) {
    mt_backend *be = cpu();
    mt_config c = mt_tiny_config_gqa();
    c.num_layers = 64;
    c.vocab_size = 64; /* the blocks nearly all of the parameters: a quarter byte holds 4 of them */
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK);
    int64_t most = (int64_t)(0.25 * (double)lay.total_numel) / (lay.max_block_numel * 4);
    mt_layout_free(&lay);
    cr_assert_gt(most, MT_ENGINE_GRAD_RING, "the quarter byte a parameter holds %lld blocks", (long long)most);
    for (int blocks = 0; blocks <= 16; blocks += 16) {
        mt_placement_request rq = request(0, (int64_t)64 << 30);
        rq.eo.max_grad_norm = 0;
        rq.ends = 0;
        rq.device_blocks = blocks;
        int largest = 0;
        for (double rate = 1e3; rate < 1e16; rate *= 1.5) {
            rq.rates.host_bytes_per_s = rate;
            mt_placement p;
            cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
            cr_assert_eq(p.eo.device_blocks, blocks);
            if (p.eo.grad_ring > largest) largest = p.eo.grad_ring;
        }
        if (blocks == 0) cr_expect_eq(largest, MT_ENGINE_GRAD_RING, "no block on the device, a ring of %d", largest);
        else {
            cr_expect_gt(largest, MT_ENGINE_GRAD_RING, "%d blocks on the device, a ring of %d at most", blocks, largest);
            cr_expect_leq(largest, most, "a ring of %d blocks, past the quarter byte a parameter's %lld", largest,
                          (long long)most);
        }
    }
    mt_backend_destroy(be);
}

/* --grad-ring N is the ring, at most the blocks that stream; the planner grows none of its own then. */
Test(placement, a_given_gradient_ring_is_the_ring) {
    mt_backend *be = cpu();
    mt_config c = eight_blocks();
    mt_placement p;
    mt_placement_request rq = request(0, 0);
    rq.device_optimizer = 0;
    rq.eo.max_grad_norm = 0;
    rq.rates.host_bytes_per_s = 1; /* a host so slow that the planner would take every ring it may */
    rq.eo.grad_ring = 8;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect_eq(p.eo.grad_ring, 8);
    int64_t ring_of_8 = p.dev.host_grads;
    rq.eo.grad_ring = 3;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect_eq(p.eo.grad_ring, 3);
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK);
    cr_expect_eq(ring_of_8 - p.dev.host_grads, 5 * lay.max_block_numel * 4, "a ring of 3 holds %lld bytes of "
                 "host gradients, of 8 %lld: not 5 fp32 blocks less", (long long)p.dev.host_grads, (long long)ring_of_8);
    mt_layout_free(&lay);
    rq.eo.grad_ring = 100;
    cr_assert_eq(mt_placement_resolve(be, &c, &rq, &p), MT_OK, "%s", mt_error());
    cr_expect_eq(p.eo.grad_ring, c.num_layers, "more than the blocks: %d", p.eo.grad_ring);
    mt_backend_destroy(be);
}
