/* The engine's protocol table (engine/protocol.c) against the code: the engine runs in each mode
 * with every use of an event or flag traced, and the trace is checked against the table both ways.
 *   - every use is one a row of the table allows: that event or flag, recorded (raised) or waited
 *     on by that stream or thread, for that generation, in a mode the row's needs/unless admit;
 *   - every event or flag waited on is recorded (raised) somewhere in the run;
 *   - every row whose modes the run has is used: recorded by each agent it names, waited on by
 *     each, for each generation it names.
 * Then a table broken on purpose, and a trace with a wait nothing records, must fail the check. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "tiny_model.h"

enum { SEQ = 8, SEQUENCES = 4 };

static const char *agent_name(unsigned by) {
    switch (by) {
    case MT_BY_H2D: return "h2d";
    case MT_BY_COMPUTE: return "compute";
    case MT_BY_D2H: return "d2h";
    case MT_BY_ISSUER: return "the issuing thread";
    case MT_BY_OPTIMIZER: return "the optimizer thread";
    }
    return "?";
}

static const char *point_name(int flag, int id) { return flag ? mt_flags[id].name : mt_events[id].name; }

static int row_applies(const mt_protocol_row *r, unsigned modes) {
    return (r->needs & modes) == r->needs && !(r->unless & modes);
}

static int use_matches(const mt_protocol_row *r, const mt_protocol_use *u) {
    if (r->flag != u->flag || r->id != u->id) return 0;
    if (u->kind == MT_USE_RECORD) return (r->by & u->by) != 0;
    return (r->waited_by & u->by) && (!u->flag || (r->gens & (unsigned)u->gen));
}

static int seen(const mt_protocol_trace *t, int flag, int id, mt_use_kind kind, unsigned by, int gen) {
    for (size_t i = 0; i < t->count; i++) {
        const mt_protocol_use *u = &t->uses[i];
        if (u->flag == flag && u->id == id && u->kind == kind && (!by || u->by == by) && (!gen || u->gen == gen))
            return 1;
    }
    return 0;
}

/* Checks a run's trace against `rows`; returns 0, or 1 with the first mismatch in `why`. */
static int check_trace(const mt_protocol_row *rows, int n, const mt_protocol_trace *t, unsigned modes, char *why,
                       size_t len) {
    if (t->dropped) return snprintf(why, len, "the trace lost uses"), 1;
    for (size_t i = 0; i < t->count; i++) {
        const mt_protocol_use *u = &t->uses[i];
        int allowed = 0;
        for (int r = 0; r < n && !allowed; r++) allowed = row_applies(&rows[r], modes) && use_matches(&rows[r], u);
        if (!allowed)
            return snprintf(why, len, "%s %s %s[%d]%s, which no row of the table allows in this mode",
                            agent_name(u->by), u->kind == MT_USE_RECORD ? "records" : "waits on",
                            point_name(u->flag, u->id), u->index,
                            u->flag && u->kind == MT_USE_WAIT ? (u->gen == MT_GEN_NEXT ? " for g + 1" : " for g") : ""),
                   1;
        if (u->kind == MT_USE_WAIT && !seen(t, u->flag, u->id, MT_USE_RECORD, 0, 0))
            return snprintf(why, len, "%s waits on %s, which nothing records", agent_name(u->by),
                            point_name(u->flag, u->id)),
                   1;
    }
    for (int r = 0; r < n; r++) {
        const mt_protocol_row *row = &rows[r];
        if (!row_applies(row, modes)) continue;
        for (unsigned by = 1; by <= MT_BY_OPTIMIZER; by <<= 1) {
            if ((row->by & by) && !seen(t, row->flag, row->id, MT_USE_RECORD, by, 0))
                return snprintf(why, len, "row %d: %s never records %s in this mode", r, agent_name(by),
                                point_name(row->flag, row->id)),
                       1;
            if (!(row->waited_by & by)) continue;
            for (int gen = MT_GEN_G; gen <= MT_GEN_NEXT; gen <<= 1)
                if ((!row->flag || (row->gens & (unsigned)gen)) &&
                    !seen(t, row->flag, row->id, MT_USE_WAIT, by, row->flag ? gen : 0))
                    return snprintf(why, len, "row %d: %s never waits on %s in this mode", r, agent_name(by),
                                    point_name(row->flag, row->id)),
                           1;
        }
    }
    return 0;
}

/* One run: two steps, the gradients where the engine keeps them, an evaluation, a sample's logits,
 * mt_engine_finish; every use traced from the engine's creation to its end. */
static void trace_run(mt_engine_options o, const mt_config *cfg, mt_moments_format moments, mt_protocol_trace *t,
                      unsigned *modes) {
    mt_tiny_model m;
    mt_tiny_model_open(&m, cfg, &o, 9);
    mt_engine_destroy(m.engine);
    if (moments != MT_MOMENTS_F32) { /* clipping takes the deferred update then */
        mt_store_free(&m.store);
        cr_assert_eq(mt_store_create_with_moments(&m.store, &m.layout, m.be, moments), MT_OK, "%s", mt_error());
        mt_store_init_random(&m.store, 9);
    }
    mt_protocol_trace_init(t);
    cr_assert_eq(mt_engine_create_traced(&m.engine, m.be, &m.store, &o, 0, t), MT_OK, "%s", mt_error());
    *modes = mt_engine_modes(m.engine);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 0; s < 2; s++) {
        mt_tiny_windows(60 + s, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(m.engine, inputs, targets, NULL, 1e-3f, &r), MT_OK, "%s", mt_error());
    }
    double loss;
    if (mt_engine_host_grads(m.engine))
        cr_assert_eq(mt_engine_grads(m.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_eval(m.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    float logits[64];
    cr_assert(cfg->vocab_size <= 64);
    cr_assert_eq(mt_engine_next_logits(m.engine, inputs, 5, logits), MT_OK, "%s", mt_error());
    mt_engine_finish(m.engine);
    mt_tiny_model_close(&m);
}

typedef struct {
    const char *name;
    float clip;
    int keep_grads, ends_on_device, ckpt_on_host, tied, slots, micro_batches;
    int device_blocks;
    int head_vocab_chunk; /* 0: the default (no chunks at this vocabulary) */
    mt_moments_format moments;
    int moe; /* Qwen3-MoE's experts: routing statistics home, the backward's reloads of routed experts */
} run_mode;

/* Every mode the table names, alone and together. */
static const run_mode RUNS[] = {
    {"clipped", 1.0f, 0, 0, 0, 0, 2, 1, 0, 0, MT_MOMENTS_F32, 0},
    {"overlapped, gradient ring", 0.0f, 0, 0, 0, 0, 2, 1, 0, 0, MT_MOMENTS_F32, 0},
    {"overlapped, every gradient kept", 0.0f, 1, 0, 0, 1, 3, 2, 0, 0, MT_MOMENTS_F32, 0},
    {"clipped, ends on the device", 1.0f, 0, 1, 0, 0, 2, 1, 0, 0, MT_MOMENTS_F32, 0},
    {"overlapped ring, ends on the device", 0.0f, 0, 1, 0, 1, 2, 2, 0, 0, MT_MOMENTS_F32, 0},
    {"clipped, checkpoints on the host", 1.0f, 0, 0, -1, 0, 2, 2, 0, 0, MT_MOMENTS_F32, 0},
    {"overlapped ring, some checkpoints on the host, ends on the device", 0.0f, 0, 1, 2, 1, 3, 1, 0, 0, MT_MOMENTS_F32, 0},
    /* The ends' gradients in vocabulary chunks, copied home by compute: the same table. */
    {"clipped, ends in vocabulary chunks", 1.0f, 0, 0, 0, 0, 2, 2, 0, 16, MT_MOMENTS_F32, 0},
    {"overlapped ring, ends in vocabulary chunks, checkpoints on the host", 0.0f, 0, 0, -1, 0, 2, 1, 0, 16, MT_MOMENTS_F32, 0},
    {"clipped, two blocks on the device", 1.0f, 0, 0, 0, 0, 2, 1, 2, 0, MT_MOMENTS_F32, 0},
    {"overlapped ring, a block and the ends on the device, checkpoints on the host", 0.0f, 0, 1, -1, 1, 2, 2, 1, 0, MT_MOMENTS_F32, 0},
    {"clipped, every gradient kept, blocks on the device", 1.0f, 1, 0, 1, 0, 3, 1, 4, 0, MT_MOMENTS_F32, 0},
    /* Tied in vocabulary chunks: the embedding's gradient whole only after its backward. */
    {"overlapped ring, tied in vocabulary chunks", 0.0f, 0, 0, 0, 1, 2, 1, 0, 16, MT_MOMENTS_F32, 0},
    {"clipped, tied in vocabulary chunks, checkpoints on the host", 1.0f, 0, 0, -1, 1, 2, 2, 0, 16, MT_MOMENTS_F32, 0},
    /* bf16 moments: clipping waits for the norm to update anything (deferred). */
    {"clipped, bf16 moments", 1.0f, 0, 0, 0, 0, 2, 1, 0, 0, MT_MOMENTS_BF16, 0},
    {"clipped, bf16 moments, ends in vocabulary chunks", 1.0f, 0, 0, 0, 1, 2, 2, 0, 16, MT_MOMENTS_BF16, 0},
    /* A mixture of experts: its routing goes home after the forward, and the reloads read it. */
    {"overlapped ring, a mixture of experts", 0.0f, 0, 0, 0, 0, 2, 2, 0, 0, MT_MOMENTS_F32, 1},
};

static void trace_mode(const run_mode *m, mt_protocol_trace *t, unsigned *modes) {
    mt_config cfg = m->moe ? mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 1)
                    : m->tied ? mt_tiny_config_tied_bias() : mt_tiny_config_gqa();
    cfg.num_layers = 6; /* more blocks than the gradient ring and the slots hold */
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = m->micro_batches;
    o.batch = SEQUENCES / m->micro_batches;
    o.slots = m->slots;
    o.lm_chunk = 5;
    o.max_grad_norm = m->clip;
    o.keep_grads = m->keep_grads;
    o.ends_on_device = m->ends_on_device;
    o.device_blocks = m->device_blocks;
    o.ckpt_on_host = m->ckpt_on_host < 0 ? cfg.num_layers : m->ckpt_on_host;
    if (m->head_vocab_chunk) o.head_vocab_chunk = m->head_vocab_chunk;
    trace_run(o, &cfg, m->moments, t, modes);
}

Test(protocol, the_table_is_what_the_engine_does) {
    enum { NUM_RUNS = sizeof RUNS / sizeof RUNS[0] };
    unsigned modes[NUM_RUNS], all_modes = 0;
    for (size_t i = 0; i < NUM_RUNS; i++) {
        mt_protocol_trace t;
        trace_mode(&RUNS[i], &t, &modes[i]);
        all_modes |= modes[i];
        char why[256];
        int bad = check_trace(mt_protocol, mt_protocol_rows, &t, modes[i], why, sizeof why);
        cr_expect_not(bad, "%s: %s", RUNS[i].name, why);
        mt_protocol_trace_free(&t);
    }
    unsigned every = MT_MODE_CLIPPED | MT_MODE_OVERLAPPED | MT_MODE_RING | MT_MODE_ENDS_DEVICE | MT_MODE_CKPT_HOST |
                     MT_MODE_DEVICE_STATE | MT_MODE_EMBED_LATE | MT_MODE_SPECULATIVE | MT_MODE_CHUNK_BUFFERS |
                     MT_MODE_MOE | MT_MODE_ROUTED;
    cr_expect_eq(all_modes, every, "the runs cover every mode the table names");
    for (int r = 0; r < mt_protocol_rows; r++) { /* no row is dead */
        int applies = 0;
        for (size_t i = 0; i < NUM_RUNS && !applies; i++) applies = row_applies(&mt_protocol[r], modes[i]);
        cr_expect(applies, "row %d (%s) applies in none of the runs", r,
                  point_name(mt_protocol[r].flag, mt_protocol[r].id));
    }
}

/* The check itself fails on a table that says something else than the code. */
static void expect_broken(const run_mode *m, void (*breaks)(mt_protocol_row *rows, int n), const char *wanted) {
    mt_protocol_row rows[64];
    cr_assert(mt_protocol_rows <= 64);
    memcpy(rows, mt_protocol, (size_t)mt_protocol_rows * sizeof *rows);
    breaks(rows, mt_protocol_rows);
    mt_protocol_trace t;
    unsigned modes;
    trace_mode(m, &t, &modes);
    char why[256] = "";
    cr_expect(check_trace(rows, mt_protocol_rows, &t, modes, why, sizeof why), "the broken table passed");
    cr_expect(strstr(why, wanted), "wanted '%s' in: %s", wanted, why);
    mt_protocol_trace_free(&t);
}

static mt_protocol_row *row_of(mt_protocol_row *rows, int n, int flag, int id) {
    for (int r = 0; r < n; r++)
        if (rows[r].flag == flag && rows[r].id == id) return &rows[r];
    cr_assert_fail("no row for %s", point_name(flag, id));
    return NULL;
}

static void slot_free_waited_by_compute(mt_protocol_row *rows, int n) {
    row_of(rows, n, 0, MT_EV_SLOT_FREE)->waited_by = MT_BY_COMPUTE;
}
static void early_copy_in_every_mode(mt_protocol_row *rows, int n) {
    row_of(rows, n, 0, MT_EV_EMBED_EARLY_HOME)->needs = 0;
}
static void updated_waited_for_g_only(mt_protocol_row *rows, int n) {
    for (int r = 0; r < n; r++)
        if (rows[r].flag && rows[r].id == MT_FL_UPDATED) rows[r].gens = MT_GEN_G;
}

Test(protocol, a_table_that_says_otherwise_fails) {
    expect_broken(&RUNS[0], slot_free_waited_by_compute, "h2d waits on slot_free");
    expect_broken(&RUNS[0], early_copy_in_every_mode, "never records embed_early_home");
    expect_broken(&RUNS[1], updated_waited_for_g_only, "waits on updated");
}

Test(protocol, a_wait_nothing_records_fails) {
    mt_protocol_trace t;
    unsigned modes;
    trace_mode(&RUNS[0], &t, &modes);
    /* drop every record of head_loaded: compute still waits on it */
    size_t kept = 0;
    for (size_t i = 0; i < t.count; i++)
        if (!(t.uses[i].id == MT_EV_HEAD_LOADED && !t.uses[i].flag && t.uses[i].kind == MT_USE_RECORD))
            t.uses[kept++] = t.uses[i];
    t.count = kept;
    char why[256] = "";
    cr_expect(check_trace(mt_protocol, mt_protocol_rows, &t, modes, why, sizeof why));
    cr_expect(strstr(why, "head_loaded, which nothing records"), "%s", why);
    mt_protocol_trace_free(&t);
}

/* docs/engine.md's summary of the table names every event and flag the table has. */
static int names(const char *text, const char *name) {
    char whole[64], indexed[64];
    snprintf(whole, sizeof whole, "`%s`", name);
    snprintf(indexed, sizeof indexed, "`%s[", name);
    return strstr(text, whole) || strstr(text, indexed);
}

Test(protocol, the_guide_names_every_event_and_flag) {
    FILE *f = fopen("docs/engine.md", "r");
    cr_assert(f, "docs/engine.md: cannot open it (run from the repository root)");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    for (int id = 0; id < MT_EV_COUNT; id++)
        cr_expect(names(text, mt_events[id].name), "docs/engine.md does not name the event %s", mt_events[id].name);
    for (int id = 0; id < MT_FL_COUNT; id++)
        cr_expect(names(text, mt_flags[id].name), "docs/engine.md does not name the flag %s", mt_flags[id].name);
}
