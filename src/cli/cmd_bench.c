/* megatrain bench: timed steps on synthetic tokens, with the training options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int mt_cli_bench(int argc, char **argv) {
    /* bench's own flags come first and are removed before the training options are parsed. */
    int warmup = 2;
    const char *json = NULL;
    char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
    if (!rest) return 1;
    int count = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--warmup-steps") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else rest[count++] = argv[i];
    }
    rest[count] = NULL;
    mt_train_options o;
    int parsed = mt_cli_parse_train(count, rest, "bench", &o);
    free(rest);
    if (parsed) {
        if (parsed > 0) printf("bench also takes:\n  --warmup-steps N   untimed steps first (default 2)\n"
                               "  --json FILE        append the summary as a JSON line\n"
                               "(--steps is the number of timed steps; default 5 here)\n");
        return parsed > 0 ? 0 : 2;
    }
    if (o.steps == mt_train_defaults().steps) o.steps = 5;
    mt_status rc = mt_bench(&o, warmup, stdout, json);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
