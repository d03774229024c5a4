/* The engine's protocol: every event and flag that orders its three streams (h2d, compute, d2h)
 * and its two host threads (the issuing thread, which calls mt_engine_step and enqueues all the
 * device work, and the optimizer thread), in one table: protocol.c's mt_protocol. docs/engine.md
 * tells the story the table is the summary of.
 *
 * An event is a backend event (backend.h): a stream records it, and a stream waits for its latest
 * record, or a host thread blocks on it (sync), polls it (done) or reads its time (elapsed). A flag
 * (flag.h) is a host counter of steps: a thread raises it to g + 1 when step g's work is done,
 * another waits until it reaches a step. "g" is the generation of the one who waits: the issuing
 * thread's count of steps issued (mt_engine.generation), or the optimizer job's step.
 *
 * Each row of the table is one use of an event or flag: who records (raises) it, who waits on it,
 * for which generation (flags), and in which modes. The engine reaches events and flags only
 * through engine_internal.h's mt_engine_record / _wait / _sync / _raise / _await, which can trace
 * every use; tests/test_protocol.c runs the engine in each mode and checks the trace against the
 * table both ways (a use the table lacks fails; a row whose mode ran but that nothing used fails;
 * an event waited on that nothing records fails). */
#ifndef MT_ENGINE_PROTOCOL_H
#define MT_ENGINE_PROTOCOL_H

#include <pthread.h>
#include <stddef.h>

/* The events, each an array of instances (mt_sync_point.per says how many). */
typedef enum {
    MT_EV_TOKENS_READY,
    MT_EV_EMBED_LOADED,
    MT_EV_EMBED_FREE,
    MT_EV_SLOT_LOADED,
    MT_EV_SLOT_FREE,
    MT_EV_HEAD_LOADED,
    MT_EV_HEAD_FREE,
    MT_EV_GRAD_READY,
    MT_EV_GRAD_FREE,
    MT_EV_UNIT_READY,
    MT_EV_GRADS_HOME,
    MT_EV_EMBED_EARLY_HOME,
    MT_EV_DEVICE_UPDATED,
    MT_EV_STAGE_FILLED,
    MT_EV_STAGE_DRAINED,
    MT_EV_STAGE_RELEASED,
    MT_EV_CHUNK_HOME,
    MT_EV_ROUTED_HOME,
    MT_EV_DONE,
    MT_EV_STALL_BEGIN,
    MT_EV_STALL_END,
    MT_EV_JOB_BEGIN,
    MT_EV_JOB_END,
    MT_EV_COUNT
} mt_ev;

/* The flags. */
typedef enum {
    MT_FL_UPDATED,
    MT_FL_GRADS_ISSUED,
    MT_FL_EMBED_EARLY_ISSUED,
    MT_FL_EMBED_EARLY_DONE,
    MT_FL_NORM_KNOWN,
    MT_FL_GRADS_TAKEN,
    MT_FL_CHUNK_ISSUED,
    MT_FL_CHUNK_DONE,
    MT_FL_COUNT
} mt_fl;

/* How many instances an event or flag has. */
typedef enum {
    MT_PER_ENGINE,    /* one */
    MT_PER_SLOT,      /* K: one per block weight slot */
    MT_PER_GRAD_SLOT, /* 2: the block gradient slots the backward alternates */
    MT_PER_UNIT,      /* U: one per unit (embedding, blocks, head) */
    MT_PER_STAGE,     /* CKPT_STAGES when checkpoints live on the host, else none */
    MT_PER_DEVICE,    /* one when the device updates some unit (ends_on_device, device_blocks) */
    MT_PER_STALL,     /* the compute stream's timed waits of one pass */
    MT_PER_JOB,       /* the compute jobs of one pass */
    MT_PER_CHUNK,     /* the chunks of the ends' gradients a step brings home through the chunk buffers */
} mt_per;

typedef struct {
    const char *name; /* as the engine's comments call it */
    mt_per per;
} mt_sync_point;

extern const mt_sync_point mt_events[MT_EV_COUNT];
extern const mt_sync_point mt_flags[MT_FL_COUNT];

/* Who acts: streams record events and wait on them; host threads wait on events and raise and
 * wait on flags. */
enum {
    MT_BY_H2D = 1 << 0,
    MT_BY_COMPUTE = 1 << 1,
    MT_BY_D2H = 1 << 2,
    MT_BY_ISSUER = 1 << 3,
    MT_BY_OPTIMIZER = 1 << 4,
};

/* The engine's modes, as far as they change the protocol (mt_engine_modes). */
enum {
    MT_MODE_CLIPPED = 1 << 0,     /* max_grad_norm > 0: the optimizer updates after the backward */
    MT_MODE_OVERLAPPED = 1 << 1,  /* no clipping: each unit is updated as its gradients come home */
    MT_MODE_RING = 1 << 2,        /* overlapped without keep_grads: block gradients in a ring */
    MT_MODE_ENDS_DEVICE = 1 << 3, /* the device updates the embedding and head */
    MT_MODE_CKPT_HOST = 1 << 4,   /* some activation checkpoints live in pinned host memory */
    MT_MODE_DEVICE_STATE = 1 << 5, /* the device updates some unit: the ends, device_blocks or both */
    MT_MODE_EMBED_LATE = 1 << 6,  /* tied, in vocabulary chunks: the embedding's gradient is made whole in
                                   * its backward, with no early copy */
    MT_MODE_SPECULATIVE = 1 << 7, /* clipped with fp32 moments: the optimizer's job starts with the
                                   * backward (the update ahead of the norm after an unclipped step),
                                   * the masters then the moments once the norm is known */
    MT_MODE_CHUNK_BUFFERS = 1 << 8, /* overlapped, the ends in vocabulary chunks, nothing keeping their whole
                                     * gradients: the chunks come home through a few host buffers, each
                                     * updated as it lands */
    MT_MODE_MOE = 1 << 9,         /* a mixture of experts: the forward's routing statistics go home */
    MT_MODE_ROUTED = 1 << 10,     /* and the backward reloads streamed blocks' routed experts only */
};

/* The generations a flag is waited for, relative to the waiter's g. */
enum {
    MT_GEN_G = 1 << 0,    /* step g - 1's work: raised by the previous step */
    MT_GEN_NEXT = 1 << 1, /* step g's work: raised by this step */
};

typedef struct {
    int flag;            /* 0: id is an mt_ev; 1: an mt_fl */
    int id;
    unsigned by;         /* MT_BY_*: who records (raises) it */
    unsigned waited_by;  /* MT_BY_*: who waits on it (streams: stream_wait; threads: sync, done,
                          * elapsed, flag waits and peeks); 0: nobody */
    unsigned gens;       /* flags: MT_GEN_* it is waited for */
    unsigned needs;      /* MT_MODE_*: used only when all of these hold */
    unsigned unless;     /* MT_MODE_*: never when any of these holds */
    const char *passes;  /* which passes and places use it, for the reader */
    const char *meaning; /* what a record (raise) says, and why the waiter waits */
} mt_protocol_row;

extern const mt_protocol_row mt_protocol[];
extern const int mt_protocol_rows;

/* A trace of every use of an event or flag, kept while the engine's trace is set (tests). */
typedef enum { MT_USE_RECORD, MT_USE_WAIT } mt_use_kind;

typedef struct {
    int flag, id, index;
    mt_use_kind kind;  /* RECORD: a record or a raise; WAIT: everything else */
    unsigned by;       /* MT_BY_* of the stream or thread */
    int gen;           /* flag waits: MT_GEN_* */
} mt_protocol_use;

typedef struct {
    pthread_mutex_t lock;
    mt_protocol_use *uses;
    size_t count, capacity;
    int dropped; /* a use was lost (no memory): the trace cannot be checked */
} mt_protocol_trace;

void mt_protocol_trace_init(mt_protocol_trace *t);
void mt_protocol_trace_free(mt_protocol_trace *t);
/* Appends one use from any thread; one that does not fit sets dropped. */
void mt_protocol_trace_add(mt_protocol_trace *t, mt_protocol_use use);

#endif
