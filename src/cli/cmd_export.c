/* megatrain export CHECKPOINT OUT_DIR [options] */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util/size.h"
#include "util/stop_signal.h"

static const char export_help[] =
    "usage: megatrain export RUN_DIR|CHECKPOINT OUT_DIR [options]\n"
    "\n"
    "Writes a checkpoint (a run's newest good one, or the one named) as a Hugging Face model\n"
    "directory: config.json, generation_config.json and safetensors weights that transformers\n"
    "loads and, for a run with a tokenizer, its files: tokenizer.json, tokenizer_config.json and\n"
    "special_tokens_map.json from the run's --tokenizer (or --init-from directory), with the run's\n"
    "chat template (--chat-template, else the tokenizer's) in tokenizer_config.json and\n"
    "chat_template.jinja; generation_config.json's eos_token_id then holds the tokenizer's eos and\n"
    "the template's end of turn. The directory is 0755, its files 0644 (less the umask): `train\n"
    "--init-from OUT_DIR` and `tokenize --tokenizer OUT_DIR` read it back. OUT_DIR must not exist\n"
    "(or be empty); nothing is left there on failure. A checkpoint whose weights are not all\n"
    "finite is refused, naming the tensor.\n"
    "  --dtype bf16|fp32   weight type in the files (default bf16)\n"
    "  --shard-size SIZE   split the weights into shards of at most SIZE, e.g. 5GB (default: one file)\n"
    "  --help\n";

int mt_cli_export(int argc, char **argv) {
    static const struct option opts[] = {{"dtype", required_argument, 0, 'd'},
                                         {"shard-size", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int bf16 = 1, c;
    int64_t shard = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (strcmp(optarg, "bf16") && strcmp(optarg, "fp32"))
                return mt_cli_usage_error("export", "--dtype '%s': expected bf16 or fp32", optarg);
            bf16 = !strcmp(optarg, "bf16");
            break;
        case 's':
            if (mt_size_parse("--shard-size", optarg, 1, &shard) != MT_OK)
                return mt_cli_usage_error("export", "%s", mt_error());
            break;
        case 'h': fputs(export_help, stdout); return 0;
        default: return mt_cli_usage_error("export", "bad option (getopt said why above)");
        }
    }
    if (argc - optind != 2)
        return mt_cli_usage_error("export", "export takes a run directory or checkpoint and an output directory, "
                                  "got %d argument%s", argc - optind, argc - optind == 1 ? "" : "s");
    mt_stop_signals signals;
    mt_stop_signals_install(&signals);
    mt_status rc = mt_export(argv[optind], argv[optind + 1], bf16, shard);
    mt_stop_signals_restore(&signals);
    if (rc != MT_OK) return mt_cli_fail(rc);
    printf("exported %s to %s\n", argv[optind], argv[optind + 1]);
    return 0;
}
