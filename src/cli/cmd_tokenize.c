/* megatrain tokenize --tokenizer MODEL INPUT... --out PREFIX [options] */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tokenizer/tokenize_chat.h"
#include "tokenizer/tokenize_files.h"
#include "util/stop_signal.h"

static const char tokenize_help[] =
    "usage: megatrain tokenize --tokenizer MODEL_DIR|tokenizer.json INPUT... --out PREFIX [options]\n"
    "\n"
    "Encodes text with a model's Hugging Face tokenizer into llm.c token shards PREFIX_000000.bin,\n"
    "PREFIX_000001.bin, ... that --data reads. INPUTs are plain-text files (each one document), JSONL\n"
    "files (.jsonl: one JSON object a line, the document in its --text-field), chat data (.jsonl, or\n"
    "a .json array of records: --chat) or directories (their .txt, .text, .md and .jsonl files,\n"
    "recursively, in path order). Each document is preceded by the tokenizer's end-of-text token\n"
    "(<|end_of_text|>, <|endoftext|>, </s>) and, when the tokenizer adds one, its BOS. The shards are\n"
    "the same whatever --threads; on any error none is left behind.\n"
    "  --tokenizer PATH     a model directory (tokenizer.json, tokenizer_config.json) or a tokenizer.json\n"
    "  --out PREFIX         shard path prefix; PREFIX_000000.bin must not exist yet\n"
    "  --text-field NAME    JSONL field holding each document (default text)\n"
    "  --shard-size N       tokens a shard, e.g. 100M (default 100M; suffixes K, M, G)\n"
    "  --dtype TYPE         uint16, uint32 or auto (default auto: uint16 when the vocabulary fits)\n"
    "  --threads N          encoding threads (default: all cores)\n"
    "  --bos MODE           auto, yes or no: a BOS after each separator (default auto: as the\n"
    "                       tokenizer's add_bos_token or post-processor says)\n"
    "  --allow-special      match special-token strings (<|im_start|>, </s>, ...) inside documents;\n"
    "                       by default they are encoded as the text they are\n"
    "  --chat MODE          auto, yes or no: chat and instruction data, JSONL lines or a .json file's\n"
    "                       array of records (LLaMA-Factory's), each in one of four layouts:\n"
    "                       {\"messages\": [{\"role\", \"content\"}, ...]} (OpenAI, with \"tools\" and\n"
    "                       \"tool_calls\"), {\"prompt\", \"completion\"}, {\"instruction\", \"input\",\n"
    "                       \"output\"} (alpaca) or {\"conversations\": [{\"from\", \"value\"}, ...]}\n"
    "                       (ShareGPT), rendered with the model's chat template into masked shards whose\n"
    "                       loss is on the answers only (default auto: when the first record of every\n"
    "                       JSONL or .json input is such an example); a record in two layouts, or half\n"
    "                       of one, is refused naming its fields\n"
    "  --chat-template FILE chat data: render with this template (a chat_template.jinja) instead of the\n"
    "                       tokenizer's chat_template.jinja or tokenizer_config.json chat_template; for a\n"
    "                       base model that has none, or a custom one: any template, rendered as\n"
    "                       transformers renders it (docs/data-formats.md)\n"
    "  --loss-on WHAT       chat data: which tokens carry loss: assistant (every answer: default),\n"
    "                       last-turn (the conversation's last answer only) or all (every token, the\n"
    "                       prompts too: train_on_prompt)\n"
    "  --train-on-prompt    the same as --loss-on all\n"
    "  --analysis-loss on|off\n"
    "                       chat data: whether the answers' analysis channel (gpt-oss's reasoning, the\n"
    "                       messages' \"thinking\", where its template shows it) carries loss (default on)\n"
    "  --help\n";

/* A token count: digits with an optional K, M or G (thousands, millions, billions). */
static int parse_count(const char *text, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    int64_t scale = !strcmp(end, "") ? 1 : !strcmp(end, "K") ? 1000 : !strcmp(end, "M") ? 1000000
                  : !strcmp(end, "G") ? 1000000000 : 0;
    if (errno || end == text || v <= 0 || !scale || v > INT64_MAX / scale) return -1;
    *out = v * scale;
    return 0;
}

/* Chat data: masked shards, and how many of their tokens carry loss. */
static int tokenize_chat(const mt_tokenize_options *o) {
    mt_tokenize_summary s;
    uint64_t trained;
    mt_status rc = mt_tokenize_chat_files(o, &s, &trained);
    if (rc != MT_OK) return mt_cli_fail(rc);
    printf("tokenized %zu conversations from %zu files (%.1f MB) into %llu tokens (%llu with loss, %.1f%%) in %zu "
           "masked shards %s_*.bin (%s), %.2f s on %d threads: %.2f MB/s, %.0f tokens/s\n",
           s.documents, s.files, (double)s.bytes / 1e6, (unsigned long long)s.tokens, (unsigned long long)trained,
           100.0 * (double)trained / (double)s.tokens, s.shards, o->out_prefix, s.width == 2 ? "uint16" : "uint32",
           s.seconds, s.threads, (double)s.bytes / 1e6 / (s.seconds > 0 ? s.seconds : 1),
           (double)s.tokens / (s.seconds > 0 ? s.seconds : 1));
    return 0;
}

/* Plain text and JSONL documents: llm.c shards. */
static int tokenize_text(const mt_tokenize_options *o) {
    mt_tokenize_summary s;
    mt_status rc = mt_tokenize_files(o, &s);
    if (rc != MT_OK) return mt_cli_fail(rc);
    printf("tokenized %zu documents from %zu files (%.1f MB, encoded in %zu parts) into %llu tokens in %zu shards "
           "%s_*.bin (%s), %.2f s on %d threads: %.2f MB/s, %.0f tokens/s\n",
           s.documents, s.files, (double)s.bytes / 1e6, s.parts, (unsigned long long)s.tokens, s.shards, o->out_prefix,
           s.width == 2 ? "uint16" : "uint32", s.seconds, s.threads, (double)s.bytes / 1e6 / (s.seconds > 0 ? s.seconds : 1),
           (double)s.tokens / (s.seconds > 0 ? s.seconds : 1));
    return 0;
}

/* auto, yes or no: -1, 1, 0; -2 for anything else. */
static int tri_state(const char *v) {
    return !strcmp(v, "auto") ? -1 : !strcmp(v, "yes") ? 1 : !strcmp(v, "no") ? 0 : -2;
}

int mt_cli_tokenize(int argc, char **argv) {
    enum { OPT_TOKENIZER = 256, OPT_OUT, OPT_FIELD, OPT_SHARD, OPT_DTYPE, OPT_THREADS, OPT_BOS, OPT_SPECIAL, OPT_CHAT,
           OPT_TEMPLATE, OPT_LOSS, OPT_PROMPT, OPT_ANALYSIS };
    static const struct option opts[] = {
        {"tokenizer", required_argument, 0, OPT_TOKENIZER}, {"out", required_argument, 0, OPT_OUT},
        {"text-field", required_argument, 0, OPT_FIELD},    {"shard-size", required_argument, 0, OPT_SHARD},
        {"dtype", required_argument, 0, OPT_DTYPE},         {"threads", required_argument, 0, OPT_THREADS},
        {"bos", required_argument, 0, OPT_BOS},             {"allow-special", no_argument, 0, OPT_SPECIAL},
        {"chat", required_argument, 0, OPT_CHAT},           {"chat-template", required_argument, 0, OPT_TEMPLATE},
        {"loss-on", required_argument, 0, OPT_LOSS},        {"train-on-prompt", no_argument, 0, OPT_PROMPT},
        {"analysis-loss", required_argument, 0, OPT_ANALYSIS}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    mt_tokenize_options o = {.bos = -1};
    int c, chat = -1;
    int64_t threads = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case OPT_TOKENIZER: o.tokenizer = optarg; break;
        case OPT_OUT: o.out_prefix = optarg; break;
        case OPT_FIELD: o.text_field = optarg; break;
        case OPT_SHARD:
            if (parse_count(optarg, &o.shard_tokens) != 0 || o.shard_tokens > INT32_MAX)
                return mt_cli_usage_error("tokenize", "--shard-size '%s': expected a count of tokens from 1 to %d, "
                                          "digits with an optional K, M or G (e.g. 100M)", optarg, INT32_MAX);
            break;
        case OPT_DTYPE:
            o.width = !strcmp(optarg, "uint16") ? 2 : !strcmp(optarg, "uint32") ? 4 : 0;
            if (o.width == 0 && strcmp(optarg, "auto"))
                return mt_cli_usage_error("tokenize", "--dtype '%s': expected uint16, uint32 or auto", optarg);
            break;
        case OPT_THREADS:
            if (parse_count(optarg, &threads) != 0 || threads > 4096)
                return mt_cli_usage_error("tokenize", "--threads '%s': expected an integer from 1 to 4096", optarg);
            break;
        case OPT_BOS:
            o.bos = tri_state(optarg);
            if (o.bos == -2) return mt_cli_usage_error("tokenize", "--bos '%s': expected auto, yes or no", optarg);
            break;
        case OPT_SPECIAL: o.allow_special = 1; break;
        case OPT_CHAT:
            chat = tri_state(optarg);
            if (chat == -2) return mt_cli_usage_error("tokenize", "--chat '%s': expected auto, yes or no", optarg);
            break;
        case OPT_TEMPLATE: o.chat_template = optarg; break;
        case OPT_LOSS:
            for (o.loss = 0; mt_chat_loss_names[o.loss] && strcmp(mt_chat_loss_names[o.loss], optarg);) o.loss++;
            if (!mt_chat_loss_names[o.loss])
                return mt_cli_usage_error("tokenize", "--loss-on '%s': expected assistant, last-turn or all", optarg);
            break;
        case OPT_PROMPT: o.loss = MT_LOSS_ALL; break; /* LLaMA-Factory's name for --loss-on all */
        case OPT_ANALYSIS:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return mt_cli_usage_error("tokenize", "--analysis-loss '%s': expected on or off", optarg);
            o.no_analysis_loss = !strcmp(optarg, "off");
            break;
        case 'h': fputs(tokenize_help, stdout); return 0;
        default: return mt_cli_usage_error("tokenize", "bad option (getopt said why above)");
        }
    }
    if (!o.tokenizer) return mt_cli_usage_error("tokenize", "--tokenizer is required: a model directory or a tokenizer.json");
    if (!o.out_prefix) return mt_cli_usage_error("tokenize", "--out is required: the shards' path prefix");
    if (optind >= argc) return mt_cli_usage_error("tokenize", "no INPUT: give the text, JSONL files or directories to tokenize");
    o.threads = (int)threads;
    o.inputs = (const char *const *)argv + optind;
    o.n_inputs = (size_t)(argc - optind);
    /* Ctrl-C, SIGTERM, SIGHUP: the shards stop being written and none is left behind. */
    mt_stop_signals signals;
    mt_stop_signals_install(&signals);
    mt_status rc = chat < 0 ? mt_tokenize_inputs_are_chat(o.inputs, o.n_inputs, &chat) : MT_OK;
    if (rc == MT_OK && !chat && (o.chat_template || o.loss || o.no_analysis_loss))
        rc = mt_fail(MT_ERR_INVALID, "%s: --chat-template, --loss-on and --analysis-loss apply to chat data, and the "
                     "inputs are text (give --chat yes to read them as chat data)", o.inputs[0]);
    int code = rc != MT_OK ? mt_cli_fail(rc) : chat ? tokenize_chat(&o) : tokenize_text(&o);
    mt_stop_signals_restore(&signals);
    return code;
}
