/* megatrain <command>: the usage line and the dispatch to each command. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: megatrain <command> [options]\n"
    "\n"
    "Trains Llama-family language models whose weights and optimizer state live in host memory\n"
    "while the GPU streams one layer at a time.\n"
    "\n"
    "commands:\n"
    "  train    train a model (the demo model on the demo corpus by default)\n"
    "  sample   generate text from a checkpoint\n"
    "  plan     print the memory a run needs and its time floor, allocating nothing\n"
    "  export   write a checkpoint as a Hugging Face model directory\n"
    "  bench    time training steps on synthetic tokens\n"
    "  tokenize encode text and JSONL files into token shards with a model's tokenizer\n"
    "\n"
    "'megatrain <command> --help' describes each command's options.\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    /* A file-size limit (ulimit -f) fails the write past it with EFBIG, reported and handled as a
     * full disk is, instead of killing the process with SIGXFSZ mid-checkpoint. */
    signal(SIGXFSZ, SIG_IGN);
    const char *command = argv[1];
    if (!strcmp(command, "train")) return mt_cli_train(argc - 1, argv + 1);
    if (!strcmp(command, "sample")) return mt_cli_sample(argc - 1, argv + 1);
    if (!strcmp(command, "plan")) return mt_cli_plan(argc - 1, argv + 1);
    if (!strcmp(command, "export")) return mt_cli_export(argc - 1, argv + 1);
    if (!strcmp(command, "bench")) return mt_cli_bench(argc - 1, argv + 1);
    if (!strcmp(command, "tokenize")) return mt_cli_tokenize(argc - 1, argv + 1);
    fprintf(stderr, "megatrain: error: unknown command '%s'\n\n%s", command, usage);
    return 2;
}
