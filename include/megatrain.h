/* megatrain: train Llama-family language models whose weights and optimizer state live in host
 * memory while the compute device streams one layer at a time.
 *
 * The public API: run a training job, sample from a checkpoint, plan a run's memory, export a
 * checkpoint as a Hugging Face model. Every call returns mt_status (0 on success); on failure
 * mt_error() holds a message that names the file, tensor or field at fault. */
#ifndef MEGATRAIN_H
#define MEGATRAIN_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MT_OK = 0,
    MT_ERR_INVALID,     /* bad argument, unsupported config, malformed file content */
    MT_ERR_IO,          /* a libc file or system call failed */
    MT_ERR_NOMEM,       /* host or device memory could not be had */
    MT_ERR_DEVICE,      /* CUDA, cuBLAS or another device library failed */
    MT_ERR_NUMERIC,     /* NaN/Inf where a number was needed */
    MT_ERR_INTERRUPTED, /* stopped on request (a signal) */
} mt_status;

/* The calling thread's last error message, and a status's name. */
const char *mt_error(void);
const char *mt_status_name(mt_status status);

typedef struct {
    /* The model: one of a preset name, a config.json, or a Hugging Face model directory to
     * fine-tune. None of them: the "demo" preset. Ignored on resume (the checkpoint's is used). */
    const char *preset;
    const char *config_path;
    const char *init_from;

    /* Data: a token file (llm.c .bin, masked shard, .npy), or text or JSONL, tokenized with the
     * run's tokenizer when it has one, else read as bytes. NULL: the demo corpus. */
    const char *data_path;
    const char *tokenizer;   /* a tokenizer.json or model directory; NULL: the --init-from directory's
                              * tokenizer.json if it has one, else on resume the run's, else none */
    double val_fraction;     /* held out for validation */
    int sequential;          /* windows in order instead of at random */
    uint64_t seed;           /* initialization and sampling */

    /* Shape of a step: micro_batches x batch sequences of seq_len tokens. */
    int seq_len, batch, micro_batches;

    /* Optimization. */
    int64_t steps;
    float lr, min_lr_ratio;
    int64_t warmup_steps;    /* -1: a tenth of steps, at most 100 */
    const char *schedule;    /* "cosine" or "constant" */
    float weight_decay, beta1, beta2, eps, max_grad_norm;
    int max_skips;           /* stop after more than this many steps in a row skipped for NaN/Inf */
    const char *moments;     /* Adam moments format: "fp32" (default), or as an option "bf16" or
                              * "8bit" (block-quantized); a resumed run must keep its format */

    /* Engine. */
    const char *backend;     /* "auto", "cpu" or "cuda" */
    int threads;             /* cpu backend compute threads; 0: all cores */
    int slots;               /* block weight slots on the device (>= 2) */
    int opt_threads;         /* optimizer threads; 0: all cores but one, or one per opt_cores core */
    const char *opt_cores;   /* cores such as "2-15" or "4,5,6", one optimizer thread pinned to
                              * each; "none": unpinned; NULL: with a GPU, each pinned to a core
                              * but the first (left to the issuing thread and the copies),
                              * unpinned on the cpu backend (its compute uses every core) */
    const char *ends_on_device; /* "on": the GPU keeps the embedding's and head's fp32 masters and
                              * moments and updates them itself; "off": the host optimizer does;
                              * "auto" or NULL: on where the GPU can hold them (12 bytes a
                              * parameter) within --gpu-mem or its free memory, with fp32 moments */
    int lm_chunk;            /* rows of logits the LM head holds at once */
    int64_t gpu_mem;         /* device memory budget in bytes (0: none): slots and chunk shrink to
                              * fit, or the run is refused before it starts */

    /* The run directory: checkpoints, metrics.jsonl, loss.svg. */
    const char *out_dir;
    int resume;              /* continue from the newest good checkpoint in out_dir */
    int64_t ckpt_every, eval_every, eval_batches;
    int keep;                /* checkpoints kept; 0: all */
    int continue_on_save_error; /* a failed periodic checkpoint (disk full) is reported and
                                 * training goes on; by default the run stops there */
    int sync_save;           /* periodic checkpoints stop training until they are on disk; by
                              * default they are written while training goes on */
    int64_t save_staging;    /* bytes of host memory a background save may copy units into, so
                              * that the optimizer need not wait for the disk; 0: none; -1: half
                              * the host memory available when the save starts */
    int progress;            /* redraw a live progress line (for a terminal) */
} mt_train_options;

mt_train_options mt_train_defaults(void);

/* Trains as the options say; stops cleanly (a checkpoint is written) on SIGINT or SIGTERM. */
mt_status mt_train(const mt_train_options *options);

typedef struct {
    const char *run;         /* a run directory (its newest checkpoint) or one checkpoint */
    const char *prompt;
    int tokens;              /* how many to generate */
    float temperature;       /* 0: greedy */
    int top_k;               /* 0: the whole vocabulary */
    uint64_t seed;
    const char *backend;
} mt_sample_options;

mt_sample_options mt_sample_defaults(void);
/* Writes the prompt and its continuation to `out`. Text is bytes (the demo's tokenizer). */
mt_status mt_sample(const mt_sample_options *options, FILE *out);

/* Prints the host and device bytes a run with these options needs, by class, and the time
 * floor of one step on the given machine figures, before anything is allocated. */
mt_status mt_plan(const mt_train_options *options, FILE *out);

/* Times training steps on synthetic tokens with the model, shape and engine options of a
 * training run (weights random, nothing written), after `warmup` untimed steps. Prints a line
 * per step and a summary, and appends the summary as one JSON object to `json` when non-NULL. */
mt_status mt_bench(const mt_train_options *options, int warmup, FILE *out, const char *json);

/* Writes a checkpoint (or a run's newest) as a Hugging Face model directory. */
mt_status mt_export(const char *checkpoint, const char *out_dir, int bf16, int64_t max_shard_bytes);

#ifdef __cplusplus
}
#endif

#endif
