/* megatrain sample RUN|CHECKPOINT [options] */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

static const char sample_help[] =
    "usage: megatrain sample RUN_DIR|CHECKPOINT [options]\n"
    "\n"
    "Generates text from the newest good checkpoint of a run (or the checkpoint named).\n"
    "  --prompt TEXT       text to continue (default: none)\n"
    "  --tokens N          tokens to generate (default 200)\n"
    "  --temperature F     sampling temperature, 0 for greedy (default 0.8)\n"
    "  --top-k N           sample among the N likeliest tokens, 0 for all (default 40)\n"
    "  --seed N            sampling seed (default 1)\n"
    "  --backend NAME      auto, cpu or cuda (default auto)\n"
    "  --help\n";

int mt_cli_sample(int argc, char **argv) {
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'}, {"tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'}, {"top-k", required_argument, 0, 'k'},
        {"seed", required_argument, 0, 's'}, {"backend", required_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    mt_sample_options o = mt_sample_defaults();
    optind = 1;
    int c, bad = 0;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        errno = 0;
        switch (c) {
        case 'p': o.prompt = optarg; break;
        case 'n': o.tokens = (int)strtol(optarg, &end, 10); bad |= *end || o.tokens < 0; break;
        case 't': o.temperature = strtof(optarg, &end); bad |= *end || o.temperature < 0; break;
        case 'k': o.top_k = (int)strtol(optarg, &end, 10); bad |= *end || o.top_k < 0; break;
        case 's': o.seed = strtoull(optarg, &end, 10); bad |= *end != 0; break;
        case 'b': o.backend = optarg; break;
        case 'h': fputs(sample_help, stdout); return 0;
        default: bad = 1; break;
        }
        if (bad) break;
    }
    if (!bad && optind + 1 != argc) bad = 1;
    if (bad) {
        fprintf(stderr, "megatrain: error: bad arguments\n%s", sample_help);
        return 2;
    }
    o.run = argv[optind];
    mt_status rc = mt_sample(&o, stdout);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
