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

/* Options left unset: a run setting (see below) that is MT_UNSET (integers), MT_UNSET_NUMBER
 * (floating point) or NULL (names) takes the checkpoint's value on resume, and its default
 * otherwise. mt_train_defaults() leaves every run setting unset. */
#define MT_UNSET (-1)
#define MT_UNSET_NUMBER (__builtin_nan(""))

typedef struct {
    /* ---- run settings: stored in every checkpoint of the run. On resume, one left unset takes
     * the checkpoint's value; one given with another value is either applied with a log line
     * saying so (data, steps, the learning-rate schedule, the optimizer's hyperparameters, the
     * checkpoint and evaluation periods) or refused naming both values (the model, the sequence
     * layout: seq_len, batch, micro_batches, val_fraction, sequential, seed, moments, tokenizer,
     * chat_template, loss_on, analysis_loss). ---- */

    /* The model: one of a preset name, a config.json, or a Hugging Face model directory to
     * fine-tune. None of them: the "demo" preset (on resume, the checkpoint's model). */
    const char *preset;
    const char *config_path;
    const char *init_from;
    /* Changes to that model's config for a longer context: max_position_embeddings and the RoPE
     * base (MT_UNSET / MT_UNSET_NUMBER: the config's). */
    int max_positions;
    float rope_theta;

    /* Data: a token file (llm.c .bin, masked shard, .npy), or text or JSONL, tokenized with the
     * run's tokenizer when it has one, else read as bytes. Default: the demo corpus. */
    const char *data_path;
    const char *tokenizer;   /* a tokenizer.json or model directory; NULL: the --init-from directory's
                              * tokenizer.json if it has one, else on resume the run's, else none */
    double val_fraction;     /* held out for validation, in [0, 1) (default 0.05) */
    const char *val_data;    /* validation files of their own, comma-separated, each read as --data
                              * is and evaluated with the held-out part (NULL: none) */
    int sequential;          /* 1: windows in order, 0: at random (default) */
    const char *chat_template; /* chat data: a template file (a chat_template.jinja) rendered in place of
                              * the tokenizer's, for a base model or another known template (NULL: the
                              * tokenizer's own); stored as an absolute path */
    const char *loss_on;     /* chat data: "assistant" (every answer: default), "last-turn" (the last
                              * answer of each conversation) or "all" (every token) carry loss */
    const char *analysis_loss; /* chat data: "on" (default) or "off": whether the answers' analysis
                              * channel (gpt-oss's reasoning, harmony) carries loss */
    const char *packing;     /* chat data: "on" packs whole examples into windows, attention masked
                              * at their boundaries (the default where the data records them);
                              * "off": windows of the token stream, across examples. NULL: by the
                              * data, and stored so resolved */
    int doc_mask;            /* text and token files: documents end after each end-of-text token,
                              * attention masked and positions restarted there */
    const char *long_examples; /* packed examples longer than seq_len: "truncate" (default: their
                              * first seq_len tokens, counted in a warning) or "refuse" */
    int64_t seed;            /* initialization and sampling, >= 0 (default 1337) */

    /* Shape of a step: micro_batches x batch sequences of seq_len tokens. */
    int seq_len, batch, micro_batches;

    /* Optimization. */
    int64_t steps;
    double epochs;           /* passes over the training split instead of --steps: the steps are the
                              * windows of `epochs` epochs over the windows of a step, rounded up
                              * (MT_UNSET_NUMBER: --steps decides) */
    float lr, min_lr_ratio;
    int64_t warmup_steps;    /* default: a tenth of steps, at most 100 */
    const char *schedule;    /* "cosine" (default) or "constant" */
    float weight_decay, beta1, beta2, eps, max_grad_norm;
    int max_skips;           /* stop after more than this many steps in a row with a non-finite
                              * gradient or loss */
    int diverge_after;       /* stop after more than this many steps in a row whose loss is far
                              * worse than guessing and not falling, or a spike (default 20); 0:
                              * never for a finite loss */
    const char *moments;     /* Adam moments format: "fp32" (default), or as an option "bf16" or
                              * "8bit" (block-quantized) */
    int64_t ckpt_every, eval_every, eval_batches;
    int keep;                /* checkpoints kept besides the newest good one; 0: all */

    /* ---- how this process runs it (not stored; concrete defaults) ---- */

    /* Engine. */
    const char *backend;     /* "auto", "cpu" or "cuda" */
    int threads;             /* cpu backend compute threads; 0: all cores */
    int slots;               /* block weight slots on the device (>= 2) */
    int grad_ring;           /* without clipping: host buffers of block gradients; 0: the planner's */
    int all_experts;         /* a mixture of experts' backward reloads every expert, not only those
                              * some token of the step chose (the same bits, more bytes) */
    int opt_threads;         /* optimizer threads; 0: all cores but one, or one per opt_cores core */
    const char *opt_cores;   /* cores such as "2-15" or "4,5,6", one optimizer thread pinned to
                              * each; "none": unpinned; NULL: with a GPU, each pinned to a core
                              * but the first (left to the issuing thread and the copies),
                              * unpinned on the cpu backend (its compute uses every core) */
    const char *ends_on_device; /* "on": the GPU keeps the embedding's and head's fp32 masters and
                              * moments and updates them itself; "off": the host optimizer does;
                              * "auto" or NULL: on where the GPU can hold them (12 bytes a
                              * parameter) within --gpu-mem or its free memory, with fp32 moments */
    const char *device_blocks; /* blocks whose fp32 masters and moments the GPU keeps and updates
                              * itself, their weights resident and their gradients waiting there
                              * for the clipping norm (18 bytes a parameter): "auto" or NULL: as
                              * many as fit --gpu-mem or the GPU's free memory, best saving first;
                              * "all"; or a count (the first blocks) */
    int lm_chunk;            /* rows of logits the LM head holds at once */
    int chunk;               /* tokens a block's norms, projections and MLP take at once (the
                              * workspace is a chunk's, not the sequence's); 0: the whole
                              * micro-batch; --gpu-mem may halve it */
    int attn_tile;           /* queries a block's attention takes at once (each attending to every
                              * key before it), and the rows of the queries' other buffers: the
                              * workspace is a tile's on the queries' side; 0: the whole
                              * micro-batch; --gpu-mem may halve it */
    int gpus;                /* data-parallel ranks on this host (default 1): GPUs 0..gpus-1, or with
                              * the cpu backend as many ranks as threads; each runs micro_batches x
                              * batch sequences a step, one host store and optimizer for all */
    int64_t gpu_mem;         /* device memory budget in bytes (0: none): slots and chunk shrink to
                              * fit, or the run is refused before it starts */
    int64_t host_mem;        /* host memory the process may use in all, in bytes (what it holds
                              * counts against it), in place of what the machine reports
                              * (util/host_memory.h); 0: the machine's report */
    /* The planner's rates (train/machine_rates.h), for a plan of another machine: bf16 GEMM
     * TFLOP/s, PCIe GB/s each way, host AdamW G parameters/s; 0: measured or looked up here. */
    double rate_gemm, rate_pcie, rate_adamw;

    /* The run directory: checkpoints, metrics.jsonl, loss.svg; locked while a run uses it. */
    const char *out_dir;
    int resume;              /* continue from the newest good checkpoint in out_dir */
    int resume_diverged;     /* with resume: a checkpoint a divergence stop marked may be taken too,
                              * when its values are finite (a stop judged wrong) */
    int accept_changed_data; /* on resume, a data file whose contents, size or modification time
                              * changed since the run stored them is taken (and its new identity
                              * stored); by default the resume is refused, naming what changed */
    int continue_on_save_error; /* a failed periodic checkpoint (disk full) is reported and
                                 * training goes on; by default the run stops there */
    int sync_save;           /* periodic checkpoints stop training until they are on disk; by
                              * default they are written while training goes on */
    int64_t save_staging;    /* bytes of host memory a background save may copy units into, so
                              * that the optimizer need not wait for the disk; 0: none; -1: half
                              * the host memory available when the save starts */
    int progress;            /* redraw a live progress line (for a terminal) */
} mt_train_options;

/* Every run setting unset, the process options at their defaults. */
mt_train_options mt_train_defaults(void);

/* Sets the option of command-line name `name` ("lr" for --lr) from its text ("3e-4", "24GiB",
 * "cosine"; for a flag such as "resume", NULL to turn it on or true/false, yes/no, on/off). Refused (MT_ERR_INVALID, the message names --name,
 * the text and what the option accepts) when the text is not of the option's type or lies outside
 * its domain; the options are left as they were then. */
mt_status mt_train_option_set(mt_train_options *options, const char *name, const char *value);
/* The name of option i (0, 1, ...; NULL past the last) and whether it takes a value (a flag's
 * true or false is optional). */
const char *mt_train_option_name(int i, int *takes_value);

/* Trains as the options say. SIGINT, SIGTERM and SIGHUP stop it cleanly: the step finishes, a
 * checkpoint is written, and it returns MT_ERR_INTERRUPTED (mt_train_stop_signal() says which
 * signal); a second signal ends the process at once. */
mt_status mt_train(const mt_train_options *options);
/* The signal that stopped the last mt_train of this process, 0 when none did. */
int mt_train_stop_signal(void);

typedef struct {
    const char *run;         /* a run directory (its newest checkpoint) or one checkpoint */
    const char *prompt;
    const char *chat;        /* a user message answered as a chat (the run's chat template), or NULL */
    int tokens;              /* how many to generate, 0 to MT_SAMPLE_TOKENS_MAX */
    float temperature;       /* finite, >= 0; 0: greedy */
    int top_k;               /* >= 0; 0: the whole vocabulary */
    uint64_t seed;
    const char *backend;
} mt_sample_options;

#define MT_SAMPLE_TOKENS_MAX (1 << 20)

mt_sample_options mt_sample_defaults(void);
/* Sets sample option `name` ("tokens" for --tokens) from its text; refused (MT_ERR_INVALID, the
 * message names --name, the text and what it accepts) when it is malformed or out of range. */
mt_status mt_sample_option_set(mt_sample_options *options, const char *name, const char *value);
/* Writes the prompt and its continuation to `out` (for chat, the answer alone, generated until the
 * end of the assistant's turn). Text is bytes without a tokenizer (the demo's). */
mt_status mt_sample(const mt_sample_options *options, FILE *out);

/* Prints the host and device bytes a run with these options needs, by class, and the time
 * floor of one step on the given machine figures, before anything is allocated. */
mt_status mt_plan(const mt_train_options *options, FILE *out);

/* Times training steps on synthetic tokens with the model, shape and engine options of a
 * training run (weights random, nothing written), after `warmup` untimed steps. packed_mean > 0:
 * every window holds packed examples of lengths drawn uniformly around that mean (half to one and
 * a half times it), attention masked between them, as chat data trains; 0: plain windows. Prints a
 * line per step and a summary, and appends the summary as one JSON object to `json` when non-NULL.
 * `profile` non-NULL, a path prefix: the timed steps' per-op profile (one GPU on the cuda backend;
 * refused otherwise) printed after the summary and written to `profile`.md and `profile`.json
 * (docs/profile.md). */
mt_status mt_bench(const mt_train_options *options, int warmup, int packed_mean, FILE *out, const char *json,
                   const char *profile);

/* Writes a checkpoint (or a run's newest) as a Hugging Face model directory. */
mt_status mt_export(const char *checkpoint, const char *out_dir, int bf16, int64_t max_shard_bytes);

#ifdef __cplusplus
}
#endif

#endif
