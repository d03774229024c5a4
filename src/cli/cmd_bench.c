/* megatrain bench: timed steps on synthetic tokens, with the training options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/stop_signal.h"

/* bench's own flags, anywhere on the line, are taken out before the training options are parsed;
 * returns -1 after printing an error. */
static int take_bench_flags(int argc, char **argv, char **rest, int *count, int *warmup, int *packed,
                            const char **json, const char **profile) {
    *count = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--warmup-steps") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 0 || v > 1000) {
                mt_cli_usage_error("bench", "--warmup-steps '%s': must be an integer from 0 to 1000", argv[i]);
                return -1;
            }
            *warmup = (int)v;
        } else if (!strcmp(argv[i], "--packed") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 1 || v > (1 << 24)) {
                mt_cli_usage_error("bench", "--packed '%s': must be a mean example length from 1 to 16777216 tokens",
                                   argv[i]);
                return -1;
            }
            *packed = (int)v;
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            *json = argv[++i];
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            *profile = argv[++i];
            if (!**profile) {
                mt_cli_usage_error("bench", "--profile '': give a path prefix (PREFIX.md and PREFIX.json are written)");
                return -1;
            }
        } else {
            rest[(*count)++] = argv[i];
        }
    }
    rest[*count] = NULL;
    return 0;
}

int mt_cli_bench(int argc, char **argv) {
    int warmup = 2, count = 0, packed = 0;
    const char *json = NULL, *profile = NULL;
    char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
    if (!rest) return 1;
    if (take_bench_flags(argc, argv, rest, &count, &warmup, &packed, &json, &profile) != 0) {
        free(rest);
        return 2;
    }
    mt_train_options o;
    mt_run_file_strings strings;
    int parsed = mt_cli_parse_train(count, rest, "bench", &o, &strings);
    free(rest);
    if (parsed) {
        mt_run_file_free(&strings);
        if (parsed > 0) printf("bench also takes:\n  --warmup-steps N   untimed steps first (default 2)\n"
                               "  --packed MEAN      windows of packed examples of about MEAN tokens, attention\n"
                               "                     masked between them (chat data's steps)\n"
                               "  --json FILE        append the summary as a JSON line\n"
                               "  --profile PREFIX   time each op of the blocks over the timed steps (cuda backend,\n"
                               "                     one GPU): a table printed and written to PREFIX.md and\n"
                               "                     PREFIX.json (docs/profile.md)\n"
                               "(--steps is the number of timed steps, at least 1; default 5 here)\n");
        return parsed > 0 ? 0 : 2;
    }
    if (o.steps == MT_UNSET) o.steps = 5;
    mt_stop_signals signals;
    mt_stop_signals_install(&signals);
    mt_status rc = o.steps < 1 ? MT_ERR_INVALID : mt_bench(&o, warmup, packed, stdout, json, profile);
    mt_stop_signals_restore(&signals);
    mt_run_file_free(&strings);
    if (o.steps < 1) return mt_cli_usage_error("bench", "--steps %lld: bench needs at least one timed step",
                                               (long long)o.steps);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
