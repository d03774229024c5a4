/* megatrain train and megatrain plan: the training options. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char train_help[] =
    "usage: megatrain %s [options]\n"
    "\n"
    "model (default: the demo preset; on --resume, the checkpoint's):\n"
    "  --preset NAME          demo, tiny, llama-3.2-1b, llama-3.2-3b, llama-3-8b, qwen2.5-14b,\n"
    "                         qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b\n"
    "  --config FILE          a Hugging Face config.json (random initialization)\n"
    "  --init-from DIR        fine-tune a Hugging Face model directory (config.json + safetensors)\n"
    "data:\n"
    "  --data FILE            tokens (llm.c .bin shard, masked shard, .npy of uint16/uint32), or text:\n"
    "                         a text file, JSONL of {\"text\"} documents, or chat JSONL ({\"messages\"} or\n"
    "                         {\"prompt\", \"completion\"}: loss on the answers only), tokenized with the\n"
    "                         run's tokenizer into a cache in --out/data, or read as bytes when the run\n"
    "                         has none (default: data/kjv.txt, the demo corpus)\n"
    "  --tokenizer PATH       a tokenizer.json or model directory (default: the --init-from directory's\n"
    "                         when it has a tokenizer.json; on --resume, the run's)\n"
    "  --val-fraction F       held out for validation (default 0.05)\n"
    "  --sequential           take windows in order instead of at random\n"
    "  --seed N               initialization and sampling seed (default 1337)\n"
    "step:\n"
    "  --seq N                tokens per sequence (default 256)\n"
    "  --batch N              sequences per micro-batch (default 8)\n"
    "  --micro-batches N      micro-batches per optimizer step, run layer-major (default 1)\n"
    "optimization:\n"
    "  --steps N              optimizer steps (default 600; 0 writes the initial checkpoint, e.g. to\n"
    "                         re-export an imported model)\n"
    "  --lr F                 peak learning rate (default 3e-3)\n"
    "  --schedule NAME        cosine or constant (default cosine)\n"
    "  --warmup N             linear warmup steps (default: a tenth of --steps, at most 100)\n"
    "  --min-lr-ratio F       cosine floor as a fraction of --lr (default 0.1)\n"
    "  --weight-decay F       AdamW decoupled weight decay on matrices (default 0.1)\n"
    "  --beta1 F --beta2 F --eps F   AdamW (defaults 0.9, 0.95, 1e-8)\n"
    "  --clip F               global gradient-norm clipping, exact; 0 turns it off (default 1.0)\n"
    "  --max-skips N          stop after more than N steps in a row skipped for a NaN/Inf gradient\n"
    "                         (default 10; skipping needs --clip above 0)\n"
    "  --moments FORMAT       Adam moments: fp32 (default), or as an option bf16 (half the bytes) or\n"
    "                         8bit (block-quantized, about a quarter); a resumed run keeps its format\n"
    "engine:\n"
    "  --backend NAME         auto, cpu or cuda (default auto: cuda when a GPU is usable)\n"
    "  --threads N            cpu backend compute threads (default: all cores)\n"
    "  --slots N              block weight slots on the device, >= 2 (default 2)\n"
    "  --opt-threads N        optimizer threads (default: all cores but one, left to the issuing\n"
    "                         thread and the copies; with --opt-cores, one per listed core)\n"
    "  --opt-cores LIST       pin the optimizer threads one per core, e.g. 2-15 or 4,5,6; none:\n"
    "                         unpinned (default: with a GPU, every core but the first; on the cpu\n"
    "                         backend, unpinned)\n"
    "  --ends-on-device MODE  on: the GPU keeps the embedding's and head's fp32 masters and moments\n"
    "                         (12 bytes a parameter) and updates them itself, off: the host optimizer\n"
    "                         does (default auto: on where they fit --gpu-mem or the GPU's free memory)\n"
    "  --lm-chunk N           rows of logits the LM head holds at once (default 512)\n"
    "  --gpu-mem SIZE         device memory budget, e.g. 24GiB: fewer slots, smaller micro-batches, a\n"
    "                         smaller LM-head chunk, then activation checkpoints in pinned host memory\n"
    "                         are chosen to fit, or the run is refused up front (default: none)\n"
    "run:\n"
    "  --out DIR              run directory: checkpoints, metrics.jsonl, loss.svg (default runs/demo)\n"
    "  --resume               continue from the newest good checkpoint in --out\n"
    "  --ckpt-every N         checkpoint period in steps (default 200; always at the end)\n"
    "  --eval-every N         validation period in steps (default 100)\n"
    "  --eval-batches N       validation batches each time (default 8)\n"
    "  --keep N               checkpoints kept, 0 for all (default 2)\n"
    "  --continue-on-save-error  when a periodic checkpoint cannot be written (disk full), say so and\n"
    "                         train on; by default the run stops (the previous checkpoint stays valid)\n"
    "  --sync-save            training waits while a periodic checkpoint is written (by default it\n"
    "                         is written in the background while the next steps run; the last one\n"
    "                         is always written before the run ends)\n"
    "  --save-staging SIZE    host memory a background save may copy parts of the state into so that\n"
    "                         the optimizer need not wait for the disk, e.g. 8GiB; 0: none (default:\n"
    "                         half the host memory available when the save starts)\n"
    "  --help\n";

enum {
    OPT_PRESET = 256, OPT_CONFIG, OPT_INIT_FROM, OPT_DATA, OPT_VAL_FRACTION, OPT_SEQUENTIAL, OPT_SEED,
    OPT_SEQ, OPT_BATCH, OPT_MICRO, OPT_STEPS, OPT_LR, OPT_SCHEDULE, OPT_WARMUP, OPT_MIN_LR, OPT_WD,
    OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_CLIP, OPT_BACKEND, OPT_THREADS, OPT_SLOTS, OPT_OPT_THREADS,
    OPT_LM_CHUNK, OPT_OUT, OPT_RESUME, OPT_CKPT_EVERY, OPT_EVAL_EVERY, OPT_EVAL_BATCHES, OPT_KEEP, OPT_MAX_SKIPS, OPT_GPU_MEM, OPT_CONTINUE_ON_SAVE_ERROR,
    OPT_MOMENTS, OPT_OPT_CORES, OPT_SYNC_SAVE, OPT_SAVE_STAGING, OPT_ENDS_ON_DEVICE, OPT_TOKENIZER, OPT_HELP
};

static const struct option long_options[] = {
    {"preset", required_argument, 0, OPT_PRESET}, {"config", required_argument, 0, OPT_CONFIG},
    {"init-from", required_argument, 0, OPT_INIT_FROM}, {"data", required_argument, 0, OPT_DATA},
    {"val-fraction", required_argument, 0, OPT_VAL_FRACTION}, {"sequential", no_argument, 0, OPT_SEQUENTIAL},
    {"seed", required_argument, 0, OPT_SEED}, {"seq", required_argument, 0, OPT_SEQ},
    {"batch", required_argument, 0, OPT_BATCH}, {"micro-batches", required_argument, 0, OPT_MICRO},
    {"steps", required_argument, 0, OPT_STEPS}, {"lr", required_argument, 0, OPT_LR},
    {"schedule", required_argument, 0, OPT_SCHEDULE}, {"warmup", required_argument, 0, OPT_WARMUP},
    {"min-lr-ratio", required_argument, 0, OPT_MIN_LR}, {"weight-decay", required_argument, 0, OPT_WD},
    {"beta1", required_argument, 0, OPT_BETA1}, {"beta2", required_argument, 0, OPT_BETA2},
    {"eps", required_argument, 0, OPT_EPS}, {"clip", required_argument, 0, OPT_CLIP},
    {"backend", required_argument, 0, OPT_BACKEND}, {"threads", required_argument, 0, OPT_THREADS},
    {"slots", required_argument, 0, OPT_SLOTS}, {"opt-threads", required_argument, 0, OPT_OPT_THREADS},
    {"lm-chunk", required_argument, 0, OPT_LM_CHUNK}, {"out", required_argument, 0, OPT_OUT},
    {"resume", no_argument, 0, OPT_RESUME}, {"ckpt-every", required_argument, 0, OPT_CKPT_EVERY},
    {"eval-every", required_argument, 0, OPT_EVAL_EVERY}, {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
    {"keep", required_argument, 0, OPT_KEEP}, {"max-skips", required_argument, 0, OPT_MAX_SKIPS},
    {"gpu-mem", required_argument, 0, OPT_GPU_MEM},
    {"continue-on-save-error", no_argument, 0, OPT_CONTINUE_ON_SAVE_ERROR},
    {"moments", required_argument, 0, OPT_MOMENTS}, {"opt-cores", required_argument, 0, OPT_OPT_CORES},
    {"sync-save", no_argument, 0, OPT_SYNC_SAVE}, {"save-staging", required_argument, 0, OPT_SAVE_STAGING},
    {"ends-on-device", required_argument, 0, OPT_ENDS_ON_DEVICE}, {"tokenizer", required_argument, 0, OPT_TOKENIZER},
    {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};

/* Whole-string numbers only: "12x" and "" are refused, naming the option. */
static int parse_int64(const char *opt, const char *text, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min) {
        fprintf(stderr, "megatrain: error: --%s wants an integer >= %" PRId64 ", got '%s'\n", opt, min, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *opt, const char *text, int min, int *out) {
    int64_t v;
    if (parse_int64(opt, text, min, &v) || v > 1 << 30) return -1;
    *out = (int)v;
    return 0;
}

static int parse_float(const char *opt, const char *text, float min, float *out) {
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (errno || end == text || *end || !(v >= min)) {
        fprintf(stderr, "megatrain: error: --%s wants a number >= %g, got '%s'\n", opt, (double)min, text);
        return -1;
    }
    *out = v;
    return 0;
}

int mt_cli_parse_train(int argc, char **argv, const char *command, mt_train_options *o) {
    *o = mt_train_defaults();
    o->progress = isatty(STDERR_FILENO);
    optind = 1;
    int c, idx, bad = 0;
    float f;
    int64_t i64;
    while ((c = getopt_long(argc, argv, "", long_options, &idx)) != -1) {
        const char *name = c >= 256 ? long_options[idx].name : "";
        switch (c) {
        case OPT_PRESET: o->preset = optarg; break;
        case OPT_CONFIG: o->config_path = optarg; break;
        case OPT_INIT_FROM: o->init_from = optarg; break;
        case OPT_DATA: o->data_path = optarg; break;
        case OPT_TOKENIZER: o->tokenizer = optarg; break;
        case OPT_VAL_FRACTION: bad |= parse_float(name, optarg, 0, &f); o->val_fraction = f; break;
        case OPT_SEQUENTIAL: o->sequential = 1; break;
        case OPT_SEED: bad |= parse_int64(name, optarg, 0, &i64); o->seed = (uint64_t)i64; break;
        case OPT_SEQ: bad |= parse_int(name, optarg, 1, &o->seq_len); break;
        case OPT_BATCH: bad |= parse_int(name, optarg, 1, &o->batch); break;
        case OPT_MICRO: bad |= parse_int(name, optarg, 1, &o->micro_batches); break;
        case OPT_STEPS: bad |= parse_int64(name, optarg, 0, &o->steps); break;
        case OPT_LR: bad |= parse_float(name, optarg, 0, &o->lr); break;
        case OPT_SCHEDULE: o->schedule = optarg; break;
        case OPT_WARMUP: bad |= parse_int64(name, optarg, 0, &o->warmup_steps); break;
        case OPT_MIN_LR: bad |= parse_float(name, optarg, 0, &o->min_lr_ratio); break;
        case OPT_WD: bad |= parse_float(name, optarg, 0, &o->weight_decay); break;
        case OPT_BETA1: bad |= parse_float(name, optarg, 0, &o->beta1); break;
        case OPT_BETA2: bad |= parse_float(name, optarg, 0, &o->beta2); break;
        case OPT_EPS: bad |= parse_float(name, optarg, 0, &o->eps); break;
        case OPT_CLIP: bad |= parse_float(name, optarg, 0, &o->max_grad_norm); break;
        case OPT_BACKEND: o->backend = optarg; break;
        case OPT_THREADS: bad |= parse_int(name, optarg, 0, &o->threads); break;
        case OPT_SLOTS: bad |= parse_int(name, optarg, 2, &o->slots); break;
        case OPT_OPT_THREADS: bad |= parse_int(name, optarg, 0, &o->opt_threads); break;
        case OPT_LM_CHUNK: bad |= parse_int(name, optarg, 1, &o->lm_chunk); break;
        case OPT_OUT: o->out_dir = optarg; break;
        case OPT_RESUME: o->resume = 1; break;
        case OPT_CONTINUE_ON_SAVE_ERROR: o->continue_on_save_error = 1; break;
        case OPT_CKPT_EVERY: bad |= parse_int64(name, optarg, 0, &o->ckpt_every); break;
        case OPT_EVAL_EVERY: bad |= parse_int64(name, optarg, 0, &o->eval_every); break;
        case OPT_EVAL_BATCHES: bad |= parse_int64(name, optarg, 0, &o->eval_batches); break;
        case OPT_KEEP: bad |= parse_int(name, optarg, 0, &o->keep); break;
        case OPT_MAX_SKIPS: bad |= parse_int(name, optarg, 0, &o->max_skips); break;
        case OPT_MOMENTS: o->moments = optarg; break;
        case OPT_OPT_CORES: o->opt_cores = optarg; break;
        case OPT_ENDS_ON_DEVICE: o->ends_on_device = optarg; break;
        case OPT_GPU_MEM:
            if (mt_cli_parse_bytes(optarg, &o->gpu_mem) != 0) {
                fprintf(stderr, "megatrain: error: --gpu-mem wants a size such as 24GiB, got '%s'\n", optarg);
                bad = 1;
            }
            break;
        case OPT_SYNC_SAVE: o->sync_save = 1; break;
        case OPT_SAVE_STAGING:
            if (mt_cli_parse_bytes(optarg, &o->save_staging) != 0) {
                fprintf(stderr, "megatrain: error: --save-staging wants a size such as 8GiB, got '%s'\n", optarg);
                bad = 1;
            }
            break;
        case OPT_HELP: printf(train_help, command); return 1;
        default: bad = 1; break;
        }
    }
    if (!bad && optind < argc) {
        fprintf(stderr, "megatrain: error: unexpected argument '%s'\n", argv[optind]);
        bad = 1;
    }
    if (!bad && (!!o->preset + !!o->config_path + !!o->init_from) > 1) {
        fprintf(stderr, "megatrain: error: give at most one of --preset, --config and --init-from\n");
        bad = 1;
    }
    if (bad) fprintf(stderr, "see 'megatrain %s --help'\n", command);
    return bad ? -1 : 0;
}

int mt_cli_train(int argc, char **argv) {
    mt_train_options o;
    int parsed = mt_cli_parse_train(argc, argv, "train", &o);
    if (parsed) return parsed > 0 ? 0 : 2;
    mt_status rc = mt_train(&o);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}

int mt_cli_plan(int argc, char **argv) {
    mt_train_options o;
    int parsed = mt_cli_parse_train(argc, argv, "plan", &o);
    if (parsed) return parsed > 0 ? 0 : 2;
    mt_status rc = mt_plan(&o, stdout);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
