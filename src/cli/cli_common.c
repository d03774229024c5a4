/* What the commands share: error reporting and exit codes, and the training options that train,
 * plan and bench take. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model/config.h"

static const char train_help[] =
    "usage: megatrain %s [RUN.yaml] [options]\n"
    "\n"
    "RUN.yaml, a run file, sets options by their long names (steps: 1000, sequential: true; data\n"
    "and val-data may be lists). An\n"
    "option given here wins over the file's key, a flag's too (--sequential=false), and a model\n"
    "given here (--preset, --config, --init-from) replaces the file's. Relative paths in the file\n"
    "are taken relative to the file's own directory (~/: the home directory). A run writes the\n"
    "settings it resolved into OUT/run.yaml, paths absolute: 'megatrain train OUT/run.yaml\n"
    "--resume' continues the run from any working directory.\n"
    "\n"
    "Every option but the engine's and --out, --resume and the save options is a setting of the\n"
    "run, stored in its checkpoints: --resume takes the stored value of each one not given, applies\n"
    "a new --data, --steps, learning-rate schedule, optimizer setting or period (and says so), and\n"
    "refuses another model, --seq, --batch, --micro-batches, --val-fraction, --sequential,\n"
    "--packing, --doc-mask, --seed, --moments, --tokenizer, --chat-template, --loss-on or\n"
    "--analysis-loss.\n"
    "\n"
    "model (default: the demo preset; on --resume, the checkpoint's):\n"
    "  --preset NAME          one of: %s\n"
    "  --config FILE          a Hugging Face config.json (random initialization)\n"
    "  --init-from DIR        fine-tune a Hugging Face model directory (config.json + safetensors)\n"
    "  --max-positions N      the model's max_position_embeddings raised (or lowered) to N: a longer\n"
    "                         context than its config allows (context extension)\n"
    "  --rope-theta F         the model's RoPE base replaced by F (raised with --max-positions, as\n"
    "                         long-context recipes do; any rope scaling of the config still applies)\n"
    "data:\n"
    "  --data FILE            tokens (llm.c .bin shard, masked shard, .npy of uint16/uint32), or text:\n"
    "                         a text file, JSONL of {\"text\"} documents, or chat data: JSONL or a\n"
    "                         .json array (LLaMA-Factory's) of records in one of the layouts\n"
    "                         {\"messages\"} (OpenAI), {\"prompt\", \"completion\"}, {\"instruction\",\n"
    "                         \"output\"} (alpaca) or {\"conversations\"} (ShareGPT): loss on the answers\n"
    "                         only (an example without one within --seq is refused, counted),\n"
    "                         tokenized with the run's tokenizer into a cache in --out/data; without\n"
    "                         one, plain text is read as bytes, for a model of a 256-token vocabulary\n"
    "                         only; Parquet, Arrow and compressed files are refused (default:\n"
    "                         data/kjv.txt, the demo corpus). Given more than once (FILE:WEIGHT, a run\n"
    "                         file's list): the datasets mixed into one in the shares of their weights\n"
    "                         (without weights, their sizes), the smaller repeated until each is used up\n"
    "  --tokenizer PATH       a tokenizer.json or model directory (default: the --init-from directory's\n"
    "                         when it has a tokenizer.json; on --resume, the run's, which cannot change)\n"
    "  --chat-template FILE   chat data: render with this template (a chat_template.jinja) instead of the\n"
    "                         tokenizer's (its chat_template.jinja, else tokenizer_config.json's): for a\n"
    "                         base model that has none, or a custom one (rendered as transformers renders\n"
    "                         it: docs/data-formats.md)\n"
    "  --loss-on WHAT         chat data: the tokens that carry loss: assistant (every answer; default),\n"
    "                         last-turn (each conversation's last answer only) or all (every token, the\n"
    "                         prompts and the template's markup too: train_on_prompt)\n"
    "  --train-on-prompt      the same as --loss-on all\n"
    "  --analysis-loss on|off chat data: whether the answers' analysis channel (gpt-oss's reasoning, the\n"
    "                         messages' \"thinking\", where its template shows it) carries loss (default on)\n"
    "  --val-fraction F       held out of the training data for validation (default 0.05; 0 with\n"
    "                         --val-data)\n"
    "  --val-data FILE,...    validation files of their own (read as --data is), each evaluated every\n"
    "                         --eval-every steps, a partial last batch included: its loss, as\n"
    "                         val_loss/<file's base name>, in metrics.jsonl, loss.svg and TensorBoard\n"
    "  --sequential           take windows in order instead of at random\n"
    "  --packing on|off       chat data: examples packed whole into the windows, attention masked\n"
    "                         between them and positions restarted on each (on, the default where the\n"
    "                         data records its examples); off: windows of the token stream\n"
    "  --long-examples MODE   packed examples longer than --seq: truncate (default: their first --seq\n"
    "                         tokens, counted in a warning) or refuse\n"
    "  --doc-mask             text: documents end after each end-of-text token of the tokenizer,\n"
    "                         attention masked and positions restarted there (refused for raw bytes)\n"
    "  --seed N               initialization and sampling seed (default 1337)\n"
    "step:\n"
    "  --seq N                tokens per sequence (default 256)\n"
    "  --batch N              sequences per micro-batch (default 8)\n"
    "  --micro-batches N      micro-batches per optimizer step, run layer-major (default 1)\n"
    "optimization:\n"
    "  --steps N              optimizer steps (default 600; 0 writes the initial checkpoint, e.g. to\n"
    "                         re-export an imported model)\n"
    "  --epochs F             passes over the training windows instead of --steps: the steps follow\n"
    "                         once the data is open (rounded up to whole steps)\n"
    "The defaults below are pretraining's; with --init-from, fine-tuning's (in brackets), as\n"
    "LLaMA-Factory and axolotl fine-tune. The first log line names those a run takes.\n"
    "  --lr F                 peak learning rate (default 3e-3 [1e-5])\n"
    "  --schedule NAME        cosine or constant (default cosine)\n"
    "  --warmup N             linear warmup steps (default: a tenth of the steps, at most 100 [no\n"
    "                         limit])\n"
    "  --min-lr-ratio F       cosine floor as a fraction of --lr (default 0.1 [0])\n"
    "  --weight-decay F       AdamW decoupled weight decay on matrices, never on norms and biases\n"
    "                         (default 0.1 [0])\n"
    "  --beta1 F --beta2 F   AdamW moment decay rates, in [0, 1) (defaults 0.9, 0.95 [0.9, 0.999])\n"
    "  --eps F                AdamW epsilon, in (0, 1] (default 1e-8)\n"
    "  --clip F               global gradient-norm clipping, exact; 0 turns it off (default 1.0)\n"
    "  --max-skips N          stop after more than N steps in a row with a NaN/Inf gradient (skipped,\n"
    "                         which needs --clip above 0) or loss (default 10); the message names\n"
    "                         the newest good checkpoint to resume from; also after more than N steps\n"
    "                         in a row whose windows have no target that carries loss (masked data)\n"
    "  --diverge-after N      stop for divergence after more than N steps in a row whose loss is over\n"
    "                         2 ln(vocabulary) and not falling, or a spike (default 20; 0: never for a\n"
    "                         finite loss)\n"
    "  --moments FORMAT       Adam moments: fp32 (default), or as an option bf16 (half the bytes) or\n"
    "                         8bit (block-quantized, about a quarter); a resumed run keeps its format\n"
    "engine:\n"
    "  --backend NAME         auto, cpu or cuda (default auto: cuda when a GPU is usable)\n"
    "  --threads N            cpu backend compute threads (default: all cores)\n"
    "  --slots N              block weight slots on the device, >= 2 (default 2)\n"
    "  --all-experts          a mixture of experts' backward reloads every expert of a streamed\n"
    "                         block (default: only those some token of the step chose; the same\n"
    "                         bits, fewer bytes over PCIe)\n"
    "  --grad-ring N          without clipping: host buffers the block gradients come home through,\n"
    "                         each 4 bytes a parameter of a block (default 0: the planner's, 2, more\n"
    "                         where the host optimizer is busy most of a block's backward, up to a\n"
    "                         quarter of a byte a parameter)\n"
    "  --opt-threads N        optimizer threads (default: all cores but one, left to the issuing\n"
    "                         thread and the copies; with --opt-cores, one per listed core)\n"
    "  --opt-cores LIST       pin the optimizer threads one per core, e.g. 2-15 or 4,5,6; none:\n"
    "                         unpinned (default: with a GPU, every core but the first; on the cpu\n"
    "                         backend, unpinned)\n"
    "  --ends-on-device MODE  on: the GPU keeps the embedding's and head's fp32 masters and moments\n"
    "                         (12 bytes a parameter) and updates them itself, off: the host optimizer\n"
    "                         does (default auto: on where they fit --gpu-mem or the GPU's free memory)\n"
    "  --device-blocks N      blocks whose fp32 masters and moments the GPU keeps and updates itself,\n"
    "                         their weights resident and their gradients waiting there for the norm\n"
    "                         (at most 18 bytes a parameter): a count (the first blocks), all, or auto\n"
    "                         (default: as many as fit --gpu-mem or the GPU's free memory)\n"
    "  --lm-chunk N           rows of logits the LM head holds at once (default 512)\n"
    "  --chunk N              tokens a block's norms, projections and MLP take at once (default 8192;\n"
    "                         0: the whole micro-batch); --gpu-mem may lower it\n"
    "  --attn-tile N          queries attention takes at once, each seeing every key before it; the\n"
    "                         queries' other buffers are a tile's too (default 65536: a longer\n"
    "                         sequence runs in windows; 0: the whole micro-batch); --gpu-mem may\n"
    "                         lower it\n"
    "  --gpus N               data parallelism over GPUs 0..N-1 of this host, one host copy of the\n"
    "                         model and one optimizer for all; each GPU runs --micro-batches x --batch\n"
    "                         sequences a step (default 1)\n"
    "  --gpu-mem SIZE         device memory budget, e.g. 24GiB: fewer slots, smaller micro-batches,\n"
    "                         activation checkpoints in pinned host memory, a smaller LM-head chunk,\n"
    "                         attention tile and block chunk are chosen to fit, or the run is refused\n"
    "                         up front (default: none; a size from 1 byte to 1 PiB)\n"
    "  --host-mem SIZE        host memory the process may use in all, e.g. 500GiB (what it holds\n"
    "                         counts against it), in place of what the machine reports (MemAvailable\n"
    "                         and the VM's balloon, capped by the memory cgroups): for a plan of\n"
    "                         another machine, or a VM whose memory grows as it is used (default:\n"
    "                         the machine's report; 1 byte to 1 PiB)\n"
    "  --rate-gemm TFLOPS     plan: the GPU's bf16 GEMM rate, e.g. for another machine (default: looked\n"
    "                         up for this GPU; a number in [0.001, 100000])\n"
    "  --rate-pcie GBPS       plan: PCIe GB/s each way (default: measured on this GPU, else its link in\n"
    "                         sysfs; a number in [0.001, 10000])\n"
    "  --rate-adamw GPARAMS   plan: host AdamW G parameters/s (default: measured here in 50 ms on the\n"
    "                         optimizer's threads; a number in [0.001, 10000])\n"
    "run:\n"
    "  --out DIR              run directory: checkpoints, metrics.jsonl, loss.svg (default runs/demo);\n"
    "                         locked while a run uses it\n"
    "  --resume               continue from the newest good checkpoint in --out (finite values, not\n"
    "                         part of a divergence), with the run's stored settings; refused when an\n"
    "                         input changed since (the data, the tokenizer, the --init-from model);\n"
    "                         in a new or empty --out it starts the run, and refused (exit 2) where\n"
    "                         --out holds files of a run but no checkpoint\n"
    "  --resume-diverged      with --resume: take the newest checkpoint whose values are finite even\n"
    "                         when a divergence stop marked it (a stop judged wrong)\n"
    "  --accept-changed-data  with --resume: train on a data file whose contents, size or modification\n"
    "                         time changed since the run stored them (its new identity is stored)\n"
    "  --ckpt-every N         checkpoint period in steps (default 200; always at the end)\n"
    "  --eval-every N         validation period in steps (default 100)\n"
    "  --eval-batches N       validation batches each time (default 8)\n"
    "  --keep N               checkpoints kept besides the newest good one, which is never deleted;\n"
    "                         0 for all (default 2)\n"
    "  --continue-on-save-error  when a periodic checkpoint cannot be written (disk full), say so and\n"
    "                         train on; by default the run stops (the previous checkpoint stays valid)\n"
    "  --sync-save            training waits while a periodic checkpoint is written (by default it\n"
    "                         is written in the background while the next steps run; the last one\n"
    "                         is always written before the run ends)\n"
    "  --save-staging SIZE    host memory a background save may copy parts of the state into so that\n"
    "                         the optimizer need not wait for the disk, e.g. 8GiB; 0: none (default:\n"
    "                         half the host memory available when the save starts)\n"
    "  --help\n"
    "\n"
    "Exit status: 0 done, 1 failed, 2 bad options, 128 + N stopped by signal N (SIGINT, SIGTERM,\n"
    "SIGHUP: the step finishes and a checkpoint is written; --resume continues).\n";

int mt_cli_fail(mt_status status) {
    if (status == MT_ERR_INTERRUPTED && mt_train_stop_signal() > 0) {
        fprintf(stderr, "megatrain: %s\n", mt_error());
        return 128 + mt_train_stop_signal();
    }
    fprintf(stderr, "megatrain: error: %s\n", mt_error());
    return status == MT_ERR_INVALID ? 2 : 1;
}

int mt_cli_usage_error(const char *command, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("megatrain: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nsee 'megatrain %s --help'\n", command);
    return 2;
}

/* getopt_long's table, built from the library's list of training options, plus --help. */
static struct option *train_long_options(void) {
    int count = 0, takes_value;
    while (mt_train_option_name(count, NULL)) count++;
    struct option *opts = calloc((size_t)count + 3, sizeof *opts);
    if (!opts) return NULL;
    for (int i = 0; i < count; i++) {
        opts[i].name = mt_train_option_name(i, &takes_value);
        opts[i].has_arg = takes_value ? required_argument : optional_argument; /* --sequential=false */
        opts[i].val = 256 + i;
    }
    opts[count] = (struct option){"help", no_argument, 0, 'h'};
    opts[count + 1] = (struct option){"train-on-prompt", no_argument, 0, 'p'};
    return opts;
}

/* "FIRST,NEXT" kept in `strings` (freed with them): one more --data of a mix. */
static const char *join_data(mt_run_file_strings *strings, const char *first, const char *next) {
    char **grown = realloc(strings->v, (strings->n + 1) * sizeof *grown);
    if (grown) strings->v = grown;
    char *joined = NULL;
    if (!grown || asprintf(&joined, "%s,%s", first, next) < 0) return NULL;
    return strings->v[strings->n++] = joined;
}

/* Sets the flags of argv in *o; 1 for --help, -1 (printed) for a bad one. --data given more than
 * once is a mix of datasets (train/data_mix.h): the first here replaces a run file's, the others
 * join it. */
static int parse_flags(int argc, char **argv, const struct option *opts, mt_train_options *o,
                       mt_run_file_strings *strings) {
    optind = 1;
    int c;
    const char *data = NULL;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') return 1;
        if (c == 'p') { /* LLaMA-Factory's name for --loss-on all */
            if (mt_train_option_set(o, "loss-on", "all") != MT_OK) {
                fprintf(stderr, "megatrain: error: %s\n", mt_error());
                return -1;
            }
            continue;
        }
        if (c < 256) return -1; /* getopt printed what was wrong */
        const char *value = optarg;
        if (!strcmp(opts[c - 256].name, "data")) {
            if (data && !(value = join_data(strings, data, optarg))) {
                fprintf(stderr, "megatrain: error: out of memory\n");
                return -1;
            }
            data = value;
        }
        if (mt_train_option_set(o, opts[c - 256].name, value) != MT_OK) {
            fprintf(stderr, "megatrain: error: %s\n", mt_error());
            return -1;
        }
    }
    return 0;
}

int mt_cli_parse_train(int argc, char **argv, const char *command, mt_train_options *o,
                       mt_run_file_strings *strings) {
    *o = mt_train_defaults();
    o->progress = isatty(STDERR_FILENO);
    *strings = (mt_run_file_strings){0};
    struct option *opts = train_long_options();
    if (!opts) {
        fprintf(stderr, "megatrain: error: out of memory\n");
        return -1;
    }
    int bad = 0, flags = parse_flags(argc, argv, opts, o, strings);
    if (flags == 1) {
        free(opts);
        printf(train_help, command, mt_config_preset_names());
        return 1;
    }
    bad = flags < 0;
    if (!bad && optind + 1 < argc) {
        fprintf(stderr, "megatrain: error: unexpected argument '%s' (one run file at most)\n", argv[optind + 1]);
        bad = 1;
    }
    if (!bad && optind < argc) {
        /* A run file: its values first, then the command line's over them; a model the command
         * line names replaces the file's (one source of the three). */
        const char *file = argv[optind];
        int model_given = o->preset || o->config_path || o->init_from;
        *o = mt_train_defaults();
        o->progress = isatty(STDERR_FILENO);
        if (mt_run_file_read(file, o, strings) != MT_OK) {
            fprintf(stderr, "megatrain: error: %s\n", mt_error());
            bad = 1;
        } else {
            if (model_given) o->preset = o->config_path = o->init_from = NULL;
            bad = parse_flags(argc, argv, opts, o, strings) != 0;
        }
    }
    free(opts);
    if (!bad && (!!o->preset + !!o->config_path + !!o->init_from) > 1) {
        fprintf(stderr, "megatrain: error: give at most one of --preset, --config and --init-from\n");
        bad = 1;
    }
    if (bad) fprintf(stderr, "see 'megatrain %s --help'\n", command);
    return bad ? -1 : 0;
}
