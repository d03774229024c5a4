/* megatrain export CHECKPOINT OUT_DIR [options] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char export_help[] =
    "usage: megatrain export RUN_DIR|CHECKPOINT OUT_DIR [options]\n"
    "\n"
    "Writes a checkpoint (a run's newest good one, or the one named) as a Hugging Face model\n"
    "directory: config.json, generation_config.json and safetensors weights that transformers\n"
    "loads. OUT_DIR must not exist (or be empty); nothing is left there on failure.\n"
    "  --dtype bf16|fp32   weight type in the files (default bf16)\n"
    "  --shard-size SIZE   split the weights into shards of at most SIZE, e.g. 5GB (default: one file)\n"
    "  --help\n";

int mt_cli_parse_bytes(const char *text, int64_t *out) {
    char *end;
    double v = strtod(text, &end);
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                 {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    if (end == text || !(v >= 0)) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].suffix)) {
            *out = (int64_t)(v * units[i].scale);
            return 0;
        }
    return -1;
}

int mt_cli_export(int argc, char **argv) {
    static const struct option opts[] = {{"dtype", required_argument, 0, 'd'},
                                         {"shard-size", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int bf16 = 1, c, bad = 0;
    int64_t shard = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (!strcmp(optarg, "bf16")) bf16 = 1;
            else if (!strcmp(optarg, "fp32")) bf16 = 0;
            else bad = 1;
            break;
        case 's': bad |= mt_cli_parse_bytes(optarg, &shard) != 0; break;
        case 'h': fputs(export_help, stdout); return 0;
        default: bad = 1; break;
        }
    }
    if (bad || optind + 2 != argc) {
        fprintf(stderr, "megatrain: error: bad arguments\n%s", export_help);
        return 2;
    }
    mt_status rc = mt_export(argv[optind], argv[optind + 1], bf16, shard);
    if (rc != MT_OK) return mt_cli_fail(rc);
    printf("exported %s to %s\n", argv[optind], argv[optind + 1]);
    return 0;
}
