/* The backward's reloads of a mixture of experts' streamed blocks bring only the experts some token
 * of the pass chose (engine_schedule.c, reload_slot): the same bits as reloading every expert
 * (all_experts), the skipped experts' bytes fewer, counted in the step's weight_bytes_in and
 * experts_unrouted. On the cpu backend a slot is memory the loads copy into, so a skipped expert's
 * rows hold another block's weights: a GEMM that read them would change the bits. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tiny_model.h"

enum { SEQ = 4, SEQUENCES = 2, LAYERS = 5, SLOTS = 2, STEPS = 3 };

typedef struct {
    double loss[STEPS];
    mt_step_result first;
    float *masters;
} run;

/* STEPS steps of cfg with every expert reloaded or only the routed ones; `zero_router`: the
 * routers start at zero, so every token of the first step picks the first k experts (ties go to
 * the lower index). positions: NULL, or packed examples with padding (engine.h). */
static run train(const mt_config *cfg, int all_experts, int zero_router, int micro_batches, float clip,
                 const int32_t *inputs, const int32_t *targets, const int32_t *positions) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = micro_batches;
    o.batch = SEQUENCES / micro_batches;
    o.slots = SLOTS;
    o.lm_chunk = 3;
    o.max_grad_norm = clip;
    o.packed = positions != NULL;
    o.all_experts = all_experts;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 71);
    for (int l = 0; zero_router && l < cfg->num_layers; l++) {
        const mt_tensor *router = mt_layout_tensor(&t.layout, mt_unit_block(l), MT_T_ROUTER);
        if (router)
            memset(mt_store_f32(&t.store) + t.layout.units[router->unit].offset + router->offset, 0,
                   (size_t)router->rows * router->cols * sizeof(float));
    } /* (the cpu backend's weights are the fp32 masters themselves) */
    run r = {0};
    for (int s = 0; s < STEPS; s++) {
        mt_step_result res;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, positions, 1e-2f, &res), MT_OK, "%s", mt_error());
        r.loss[s] = res.loss;
        if (s == 0) r.first = res;
    }
    mt_engine_finish(t.engine);
    size_t n = (size_t)t.layout.total_numel;
    r.masters = malloc(n * sizeof *r.masters);
    cr_assert(r.masters);
    memcpy(r.masters, mt_store_f32(&t.store), n * sizeof *r.masters);
    mt_tiny_model_close(&t);
    return r;
}

static void expect_same_bits(const run *routed, const run *all, size_t n, const char *what) {
    for (int s = 0; s < STEPS; s++)
        cr_expect(!memcmp(&routed->loss[s], &all->loss[s], sizeof(double)), "%s: step %d's loss %.17g routed, %.17g "
                  "every expert", what, s, routed->loss[s], all->loss[s]);
    size_t first = 0;
    while (first < n && !memcmp(&routed->masters[first], &all->masters[first], sizeof(float))) first++;
    cr_expect_eq(first, n, "%s: master %zu differs after %d steps", what, first, (int)STEPS);
}

/* Elements of one expert's matrices in a block (what a reload leaves home; biases travel whole). */
static int64_t expert_numel(const mt_layout *lay, int l, int experts) {
    const mt_tensor_kind matrices[] = {MT_T_EXPERTS_GATE_UP, MT_T_EXPERTS_DOWN};
    int64_t n = 0;
    for (int i = 0; i < 2; i++) {
        const mt_tensor *t = mt_layout_tensor(lay, mt_unit_block(l), matrices[i]);
        n += (int64_t)t->rows * t->cols / experts;
    }
    return n;
}

/* Collapsed routing: the first k of 8 experts take every token, 5 of 8 stay home in each of the
 * three blocks the backward reloads (blocks 2, 1, 0 of 5 with 2 slots). The bytes the step copies
 * are every unit's forward load plus those reloads', less the skipped experts' rows. */
Test(moe_reload, unrouted_experts_stay_home_with_the_same_bits) {
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_MIXTRAL, 1);
    cfg.num_layers = LAYERS;
    cfg.num_experts = 8;
    cfg.experts_per_token = 3;
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(72, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK, "%s", mt_error());
    for (int clip = 0; clip < 2; clip++) {
        run all = train(&cfg, 1, 1, 1, clip ? 1.0f : 0.0f, inputs, targets, NULL);
        run routed = train(&cfg, 0, 1, 1, clip ? 1.0f : 0.0f, inputs, targets, NULL);
        expect_same_bits(&routed, &all, (size_t)lay.total_numel, clip ? "clipped" : "unclipped");
        cr_expect_eq(all.first.experts_unrouted, 0.0);
        cr_expect_eq(routed.first.experts_unrouted, 5.0 / 8, "share of experts left home %g",
                     routed.first.experts_unrouted);
        int64_t loaded = lay.units[0].numel + lay.units[mt_unit_head(&lay)].numel, skipped = 0;
        for (int l = 0; l < LAYERS; l++) loaded += lay.units[mt_unit_block(l)].numel;
        for (int l = 0; l < LAYERS - SLOTS; l++) {
            loaded += lay.units[mt_unit_block(l)].numel;
            skipped += 5 * expert_numel(&lay, l, cfg.num_experts);
        }
        cr_expect_eq(all.first.weight_bytes_in, (double)loaded * sizeof(float), "every expert: %.0f bytes, %lld "
                     "expected", all.first.weight_bytes_in, (long long)loaded * 4);
        cr_expect_eq(routed.first.weight_bytes_in, (double)(loaded - skipped) * sizeof(float), "routed: %.0f bytes, "
                     "%lld expected", routed.first.weight_bytes_in, (long long)(loaded - skipped) * 4);
        free(all.masters);
        free(routed.masters);
    }
    mt_layout_free(&lay);
}

/* Random routers over few tokens, dense blocks among sparse ones (Qwen2-MoE's decoder_sparse_step,
 * its shared expert; Qwen3-Next's, whose Gated DeltaNet blocks stack their conv1d as [channels, 1,
 * 4] beside the experts), gpt-oss's expert biases, two micro-batches whose routings differ: a reload
 * brings the experts of either; and packed examples whose padding runs through experts too. Always
 * the same bits. */
Test(moe_reload, any_routing_gives_the_bits_of_every_expert) {
    enum { FAMILIES = 3 };
    mt_config cfgs[FAMILIES] = {mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1), mt_tiny_config_moe(MT_ARCH_GPT_OSS, 1),
                                mt_tiny_config_qwen3_next()};
    const char *names[FAMILIES] = {"Qwen2-MoE", "gpt-oss", "Qwen3-Next"};
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    int32_t padded_in[SEQUENCES * SEQ], padded_tg[SEQUENCES * SEQ], positions[SEQUENCES * SEQ];
    for (int c = 0; c < FAMILIES; c++) {
        mt_config cfg = cfgs[c];
        cfg.num_layers = LAYERS;
        cfg.num_experts = 16; /* 8 tokens x top k of 16: a third or so of the experts get none */
        mt_tiny_windows(73 + c, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
        for (int i = 0; i < SEQUENCES * SEQ; i++) { /* an example of 3 tokens, then one of padding */
            int pad = i % SEQ == SEQ - 1;
            padded_in[i] = pad ? 0 : inputs[i];
            padded_tg[i] = pad ? -1 : targets[i];
            positions[i] = pad ? 0 : i % SEQ;
        }
        mt_layout lay;
        cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK, "%s", mt_error());
        for (int packed = 0; packed < 2; packed++) {
            const int32_t *in = packed ? padded_in : inputs, *tg = packed ? padded_tg : targets;
            run all = train(&cfg, 1, 0, 2, 1.0f, in, tg, packed ? positions : NULL);
            run routed = train(&cfg, 0, 0, 2, 1.0f, in, tg, packed ? positions : NULL);
            char what[96];
            snprintf(what, sizeof what, "%s, %s", names[c], packed ? "packed with padding" : "two micro-batches");
            expect_same_bits(&routed, &all, (size_t)lay.total_numel, what);
            cr_expect(routed.first.experts_unrouted > 0, "%s: some expert of %d got none of %d tokens x top %d", what,
                      cfg.num_experts, SEQUENCES * SEQ, cfg.experts_per_token);
            cr_expect_lt(routed.first.weight_bytes_in, all.first.weight_bytes_in);
            free(all.masters);
            free(routed.masters);
        }
        mt_layout_free(&lay);
    }
}
