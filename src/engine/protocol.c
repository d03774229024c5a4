/* The engine's protocol table (protocol.h says how to read it; docs/engine.md tells the story).
 *
 * One step g, as the issuing thread issues it (engine_schedule.c): tokens and weights go up on
 * h2d, each load waiting until the optimizer has written that unit's weights for step g (flag
 * updated >= g) and until compute is done with the buffer (slot_free, embed_free, head_free);
 * compute runs the forward and, with the head, the backward, each job waiting for its weights
 * (slot_loaded, ...); each unit's gradients go home on d2h (grad_ready, then grads_home[u]) and
 * the optimizer thread updates the unit once they are there, raising updated[u] to g + 1.
 * Without clipping the optimizer starts during the backward (grads_issued tells it a copy is
 * issued); with clipping and fp32 moments (speculative) it takes each unit's whole update then
 * if the step before was applied unclipped, and waits for the issuing thread to tell it the global
 * norm (norm_known) for the masters otherwise or the correction; with clipping and bf16 or 8-bit
 * moments it starts once the pass is done and the norm is known. */
#include "engine/protocol.h"

#include <stdlib.h>

const mt_sync_point mt_events[MT_EV_COUNT] = {
    [MT_EV_TOKENS_READY] = {"tokens_ready", MT_PER_ENGINE},
    [MT_EV_EMBED_LOADED] = {"embed_loaded", MT_PER_ENGINE},
    [MT_EV_EMBED_FREE] = {"embed_free", MT_PER_ENGINE},
    [MT_EV_SLOT_LOADED] = {"slot_loaded", MT_PER_SLOT},
    [MT_EV_SLOT_FREE] = {"slot_free", MT_PER_SLOT},
    [MT_EV_HEAD_LOADED] = {"head_loaded", MT_PER_ENGINE},
    [MT_EV_HEAD_FREE] = {"head_free", MT_PER_ENGINE},
    [MT_EV_GRAD_READY] = {"grad_ready", MT_PER_GRAD_SLOT},
    [MT_EV_GRAD_FREE] = {"grad_free", MT_PER_GRAD_SLOT},
    [MT_EV_UNIT_READY] = {"unit_ready", MT_PER_ENGINE},
    [MT_EV_GRADS_HOME] = {"grads_home", MT_PER_UNIT},
    [MT_EV_EMBED_EARLY_HOME] = {"embed_early_home", MT_PER_ENGINE},
    [MT_EV_DEVICE_UPDATED] = {"device_updated", MT_PER_DEVICE},
    [MT_EV_STAGE_FILLED] = {"stage_filled", MT_PER_STAGE},
    [MT_EV_STAGE_DRAINED] = {"stage_drained", MT_PER_STAGE},
    [MT_EV_STAGE_RELEASED] = {"stage_released", MT_PER_STAGE},
    [MT_EV_CHUNK_HOME] = {"chunk_home", MT_PER_CHUNK},
    [MT_EV_ROUTED_HOME] = {"routed_home", MT_PER_ENGINE},
    [MT_EV_DONE] = {"done", MT_PER_ENGINE},
    [MT_EV_STALL_BEGIN] = {"stall_begin", MT_PER_STALL},
    [MT_EV_STALL_END] = {"stall_end", MT_PER_STALL},
    [MT_EV_JOB_BEGIN] = {"job_begin", MT_PER_JOB},
    [MT_EV_JOB_END] = {"job_end", MT_PER_JOB},
};

const mt_sync_point mt_flags[MT_FL_COUNT] = {
    [MT_FL_UPDATED] = {"updated", MT_PER_UNIT},
    [MT_FL_GRADS_ISSUED] = {"grads_issued", MT_PER_UNIT},
    [MT_FL_EMBED_EARLY_ISSUED] = {"embed_early_issued", MT_PER_ENGINE},
    [MT_FL_EMBED_EARLY_DONE] = {"embed_early_done", MT_PER_ENGINE},
    [MT_FL_NORM_KNOWN] = {"norm_known", MT_PER_ENGINE},
    [MT_FL_GRADS_TAKEN] = {"grads_taken", MT_PER_UNIT},
    [MT_FL_CHUNK_ISSUED] = {"chunk_issued", MT_PER_CHUNK},
    [MT_FL_CHUNK_DONE] = {"chunk_done", MT_PER_CHUNK},
};

#define EV(name) 0, MT_EV_##name
#define FL(name) 1, MT_FL_##name
#define H2D MT_BY_H2D
#define COMPUTE MT_BY_COMPUTE
#define D2H MT_BY_D2H
#define ISSUER MT_BY_ISSUER
#define OPTIMIZER MT_BY_OPTIMIZER
#define CLIPPED MT_MODE_CLIPPED
#define OVERLAPPED MT_MODE_OVERLAPPED
#define RING MT_MODE_RING
#define ENDS_DEVICE MT_MODE_ENDS_DEVICE
#define CKPT_HOST MT_MODE_CKPT_HOST
#define DEVICE_STATE MT_MODE_DEVICE_STATE
#define EMBED_LATE MT_MODE_EMBED_LATE
#define SPECULATIVE MT_MODE_SPECULATIVE
#define CHUNK_BUFFERS MT_MODE_CHUNK_BUFFERS
#define MOE MT_MODE_MOE
#define ROUTED MT_MODE_ROUTED

const mt_protocol_row mt_protocol[] = {
    /* sync point           recorded by       waited by       for          needs        unless */
    {EV(TOKENS_READY),      H2D,              COMPUTE,        0,           0,           0,
     "every pass", "the pass's token ids (and all h2d did before: the RoPE frequencies) are on the device; "
     "the embedding's forward reads them"},
    {EV(EMBED_LOADED),      H2D,              COMPUTE,        0,           0,           0,
     "every pass; with the ends on the device only the upload at creation records it",
     "the embedding's weights are in their buffer; its forward reads them"},
    {EV(EMBED_FREE),        COMPUTE,          H2D,            0,           0,           ENDS_DEVICE,
     "every pass, after the embedding's forward (tied: after the head)",
     "compute is done reading the embedding's weights; the next load may overwrite them"},
    {EV(SLOT_LOADED),       H2D,              COMPUTE,        0,           0,           0,
     "every pass: forward loads; the backward reloads the blocks that left",
     "slot k holds block l's weights; block l's forward or backward reads them"},
    {EV(SLOT_FREE),         COMPUTE,          H2D,            0,           0,           0,
     "every pass, after each block's forward and backward",
     "compute is done with slot k; the load of block l + K (forward) or l - K (backward) may overwrite it"},
    {EV(HEAD_LOADED),       H2D,              COMPUTE,        0,           0,           0,
     "every pass; with the ends on the device only the upload at creation records it",
     "the head's weights (final norm, LM head) are in their buffer; the head's job reads them"},
    {EV(HEAD_FREE),         COMPUTE,          H2D,            0,           0,           ENDS_DEVICE,
     "every pass, after the head", "compute is done reading the head's weights; the next load may overwrite them"},
    {EV(GRAD_READY),        COMPUTE,          D2H,            0,           0,           0,
     "training passes, after each block's backward", "block l's gradients are complete in gradient slot s; "
     "d2h copies them home"},
    {EV(GRAD_FREE),         D2H,              COMPUTE,        0,           0,           0,
     "training passes", "gradient slot s went home; the backward of block l - 2 may zero and reuse it (a "
     "resident block's too, whose gradient then waits there for the device's update)"},
    {EV(UNIT_READY),        COMPUTE,          D2H,            0,           0,           0,
     "training passes (the head's, the embedding's gradients, the embedding's early copy); "
     "evaluation and sampling (the loss, the logits)", "compute wrote what d2h copies next"},
    {EV(GRADS_HOME),        D2H,              COMPUTE,        0,           0,           0,
     "training passes", "unit u's gradients are on the host; compute waits before it zeroes the embedding's, "
     "the head's or a resident block's gradient buffer for the next pass (a wait on a record that never came "
     "is none)"},
    {EV(GRADS_HOME),        D2H,              OPTIMIZER,      0,           OVERLAPPED,  0,
     "steps", "unit u's gradients are on the host; the optimizer updates u (clipped: it needs none, it starts "
     "after the pass)"},
    {EV(GRADS_HOME),        D2H,              OPTIMIZER,      0,           SPECULATIVE, 0,
     "steps", "unit u's gradients are on the host; the optimizer takes u's moments, and keeps the gradients for "
     "the masters' update once the norm is known"},
    {EV(EMBED_EARLY_HOME),  D2H,              OPTIMIZER,      0,           OVERLAPPED,  ENDS_DEVICE | EMBED_LATE | CHUNK_BUFFERS,
     "steps, right after the head", "the embedding's gradient so far is home: its rows no input token touches "
     "are final, and the optimizer updates them during the backward"},
    {EV(DEVICE_UPDATED),    COMPUTE,          D2H,            0,           DEVICE_STATE, 0,
     "steps, after the device's update of the units whose state it keeps; mt_engine_finish",
     "the device's update is done: d2h may read the norms and, in mt_engine_finish, bring the state home"},
    {EV(DEVICE_UPDATED),    H2D,              ISSUER,         0,           DEVICE_STATE, 0,
     "creation", "the device-kept units' state is on the device (mt_engine_device_upload waits for it)"},
    {EV(STAGE_FILLED),      COMPUTE | H2D,    D2H | COMPUTE,  0,           CKPT_HOST,   0,
     "forward (compute wrote it, d2h copies it out); backward (h2d copied it in, compute reads it)",
     "checkpoint stage s holds a host-kept checkpoint"},
    {EV(STAGE_DRAINED),     D2H,              COMPUTE | H2D,  0,           CKPT_HOST,   0,
     "forward", "stage s's copy out is done; a later write into it (forward on compute, fetch on h2d) may start"},
    {EV(STAGE_RELEASED),    COMPUTE,          COMPUTE | H2D,  0,           CKPT_HOST,   0,
     "every pass, after the last job that reads stage s", "stage s may be written again"},
    {EV(CHUNK_HOME),        COMPUTE,          OPTIMIZER,      0,           CHUNK_BUFFERS, 0,
     "steps, after each job of a vocabulary chunk of the head's or the embedding's gradient",
     "the step's chunk k is in its chunk buffer (the job copied it there); the optimizer updates its rows"},
    {EV(ROUTED_HOME),       COMPUTE,          D2H,            0,           MOE,         0,
     "every pass of a mixture of experts, once its forward is done",
     "the forward's routing statistics (each block's tokens per expert) are at home; the pass's end (done) "
     "follows them"},
    {EV(ROUTED_HOME),       COMPUTE,          ISSUER,         0,           ROUTED,      0,
     "training passes, before the backward's first reload of a streamed block",
     "the issuing thread reads which experts each reload brings: those some token of the pass chose"},
    {EV(DONE),              D2H,              ISSUER,         0,           0,           0,
     "the end of every pass; mt_engine_finish", "everything the pass (or the ends' homecoming) issued is done; "
     "the issuing thread reads the loss and norms"},
    {EV(STALL_BEGIN),       COMPUTE,          ISSUER,         0,           0,           0,
     "every pass, around each timed compute wait", "read with stall_end (elapsed): time compute sat waiting"},
    {EV(STALL_END),         COMPUTE,          ISSUER,         0,           0,           0,
     "every pass", "the end of a timed compute wait"},
    {EV(JOB_BEGIN),         COMPUTE,          ISSUER,         0,           0,           0,
     "every pass, around each compute job", "read with job_end (elapsed): time compute was busy"},
    {EV(JOB_END),           COMPUTE,          ISSUER,         0,           0,           0,
     "every pass", "the end of a compute job"},
    {FL(UPDATED),           OPTIMIZER,        ISSUER,         MT_GEN_G,    0,           0,
     "every pass's loads; mt_engine_finish", "unit u's working weights in the store hold step g - 1's update: "
     "h2d may copy them for step g"},
    {FL(UPDATED),           OPTIMIZER,        ISSUER,         MT_GEN_NEXT, RING,        0,
     "steps, in the backward", "step g's update of block l + ring is done: its ring buffer may take block l's "
     "gradients"},
    {FL(GRADS_ISSUED),      ISSUER,           OPTIMIZER,      MT_GEN_NEXT, OVERLAPPED,  0,
     "steps", "the copy home of unit u's step g gradients is issued: the optimizer may wait on grads_home[u]"},
    {FL(GRADS_ISSUED),      ISSUER,           OPTIMIZER,      MT_GEN_NEXT, SPECULATIVE, 0,
     "steps", "the copy home of unit u's step g gradients is issued: the optimizer may wait on grads_home[u]"},
    {FL(NORM_KNOWN),        ISSUER,           OPTIMIZER,      MT_GEN_NEXT, SPECULATIVE, 0,
     "steps, once the pass is done", "step g's global norm is known (its clip coefficient, or that the step is "
     "skipped): the optimizer updates the masters"},
    {FL(GRADS_TAKEN),       OPTIMIZER,        ISSUER,         MT_GEN_G,    SPECULATIVE, 0,
     "training passes, before a unit's gradients go home; mt_engine_finish", "the optimizer is through with unit "
     "u's step g - 1 gradients (a clipped step's moments are corrected from them after its masters): step g's may "
     "land where they lie"},
    {FL(EMBED_EARLY_ISSUED), ISSUER,          OPTIMIZER,      MT_GEN_NEXT, OVERLAPPED,  ENDS_DEVICE | EMBED_LATE | CHUNK_BUFFERS,
     "steps", "the early copy of the embedding's gradient is issued: the optimizer may wait on embed_early_home"},
    {FL(EMBED_EARLY_DONE),  OPTIMIZER,        ISSUER,         MT_GEN_NEXT, OVERLAPPED,  ENDS_DEVICE | EMBED_LATE | CHUNK_BUFFERS,
     "steps, before the embedding's full gradient goes home", "the optimizer is done with the early copy: the "
     "full one may land where it lies"},
    {FL(CHUNK_ISSUED),      ISSUER,           OPTIMIZER,      MT_GEN_NEXT, CHUNK_BUFFERS, 0,
     "steps", "the job of the step's chunk k is issued: the optimizer may wait on chunk_home[k]"},
    {FL(CHUNK_DONE),        OPTIMIZER,        ISSUER,         MT_GEN_NEXT, CHUNK_BUFFERS, 0,
     "steps, before the job of chunk k + B (B chunk buffers)", "the optimizer is done with step g's chunk k: "
     "its buffer may take chunk k + B"},
};

const int mt_protocol_rows = sizeof mt_protocol / sizeof mt_protocol[0];

void mt_protocol_trace_init(mt_protocol_trace *t) {
    pthread_mutex_init(&t->lock, NULL);
    t->uses = NULL;
    t->count = t->capacity = 0;
    t->dropped = 0;
}

void mt_protocol_trace_free(mt_protocol_trace *t) {
    pthread_mutex_destroy(&t->lock);
    free(t->uses);
}

void mt_protocol_trace_add(mt_protocol_trace *t, mt_protocol_use use) {
    pthread_mutex_lock(&t->lock);
    if (t->count == t->capacity) {
        size_t capacity = t->capacity ? 2 * t->capacity : 1024;
        mt_protocol_use *grown = realloc(t->uses, capacity * sizeof *grown);
        if (grown) {
            t->uses = grown;
            t->capacity = capacity;
        }
    }
    if (t->count < t->capacity) t->uses[t->count++] = use;
    else t->dropped = 1;
    pthread_mutex_unlock(&t->lock);
}
