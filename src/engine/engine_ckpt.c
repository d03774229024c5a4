/* Where activation checkpoints live. ckpt[l] is the input of block l for every micro-batch
 * ([M][n, D]; ckpt[L] is the head's). The last L + 1 - P stay on the device; the first P
 * (ckpt_on_host) live in pinned host memory and pass through a ring of CKPT_STAGES device
 * buffers: the forward writes ckpt[l] into stage l mod CKPT_STAGES and copies it out while the
 * next blocks run; the backward copies it back in, one block ahead of its use. That is 2 x M n D
 * activation bytes a block over PCIe, traded for the device memory a tight --gpu-mem lacks.
 *
 * Each stage has three events: filled (its data is there: after the forward's write on compute,
 * or after the backward's copy in on h2d), drained (its copy out is done, d2h) and released (its
 * last reader on compute is done). A write into a stage, by compute or h2d, waits for the last
 * two. */
#include "engine/engine_internal.h"

static size_t ckpt_bytes(const mt_engine *e) {
    return (size_t)e->o.micro_batches * e->o.batch * e->o.seq * e->cfg->hidden_size * mt_dtype_size(e->be->ops->act_dtype);
}

static int on_host(const mt_engine *e, int l) { return l < e->o.ckpt_on_host; }

void *mt_engine_ckpt(const mt_engine *e, int l) {
    if (on_host(e, l)) return e->ckpt_stage[l % CKPT_STAGES];
    return (char *)e->ckpt + (size_t)(l - e->o.ckpt_on_host) * ckpt_bytes(e);
}

static void wait_writable(mt_engine *e, int stage, mt_stream *s) {
    mt_engine_wait(e, s, MT_EV_STAGE_DRAINED, stage);
    mt_engine_wait(e, s, MT_EV_STAGE_RELEASED, stage);
}

void mt_engine_ckpt_before_write(mt_engine *e, int l) {
    if (on_host(e, l)) wait_writable(e, l % CKPT_STAGES, e->compute);
}

void mt_engine_ckpt_written(mt_engine *e, int l, int keep) {
    if (!on_host(e, l) || !keep) return;
    int stage = l % CKPT_STAGES;
    mt_engine_record(e, MT_EV_STAGE_FILLED, stage, e->compute);
    mt_engine_wait(e, e->d2h, MT_EV_STAGE_FILLED, stage);
    mt_copy_async(e->be, (char *)e->host_ckpt + (size_t)l * ckpt_bytes(e), e->ckpt_stage[stage], ckpt_bytes(e), e->d2h);
    mt_engine_record(e, MT_EV_STAGE_DRAINED, stage, e->d2h);
}

void mt_engine_ckpt_read(mt_engine *e, int l) {
    if (on_host(e, l)) mt_engine_record(e, MT_EV_STAGE_RELEASED, l % CKPT_STAGES, e->compute);
}

void mt_engine_ckpt_fetch(mt_engine *e, int l) {
    if (l < 0 || !on_host(e, l)) return;
    int stage = l % CKPT_STAGES;
    wait_writable(e, stage, e->h2d);
    mt_copy_async(e->be, e->ckpt_stage[stage], (char *)e->host_ckpt + (size_t)l * ckpt_bytes(e), ckpt_bytes(e), e->h2d);
    mt_engine_record(e, MT_EV_STAGE_FILLED, stage, e->h2d);
}

int mt_engine_ckpt_fetched(const mt_engine *e, int l) { return on_host(e, l) ? l % CKPT_STAGES : -1; }
