/* megatrain sample RUN|CHECKPOINT [options] */
#include <getopt.h>
#include <stdio.h>

#include "cli/cli.h"
#include "util/stop_signal.h"

static const char sample_help[] =
    "usage: megatrain sample RUN_DIR|CHECKPOINT [options]\n"
    "\n"
    "Generates text from the newest good checkpoint of a run (or the checkpoint named).\n"
    "  --prompt TEXT       text to continue (default: none)\n"
    "  --chat TEXT         a user message: rendered with the run's chat template (its --chat-template,\n"
    "                      else its tokenizer's) and the generation prompt, as transformers'\n"
    "                      apply_chat_template(add_generation_prompt=True) renders it; the assistant's\n"
    "                      answer is printed, generated until its turn ends (<|im_end|>, <|eot_id|>, eos)\n"
    "  --tokens N          tokens to generate, 0 to 1048576 (default 200)\n"
    "  --temperature F     sampling temperature, finite and >= 0; 0 for greedy (default 0.8)\n"
    "  --top-k N           sample among the N likeliest tokens, 0 for all (default 40)\n"
    "  --seed N            sampling seed, >= 0 (default 1)\n"
    "  --backend NAME      auto, cpu or cuda (default auto)\n"
    "  --help\n";

int mt_cli_sample(int argc, char **argv) {
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 1}, {"chat", required_argument, 0, 1}, {"tokens", required_argument, 0, 1},
        {"temperature", required_argument, 0, 1}, {"top-k", required_argument, 0, 1},
        {"seed", required_argument, 0, 1}, {"backend", required_argument, 0, 1},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    mt_sample_options o = mt_sample_defaults();
    optind = 1;
    int c, idx;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c == 'h') {
            fputs(sample_help, stdout);
            return 0;
        }
        if (c != 1) return mt_cli_usage_error("sample", "bad option (getopt said why above)");
        if (mt_sample_option_set(&o, opts[idx].name, optarg) != MT_OK)
            return mt_cli_usage_error("sample", "%s", mt_error());
    }
    if (optind == argc) return mt_cli_usage_error("sample", "no run directory or checkpoint given");
    if (optind + 1 < argc)
        return mt_cli_usage_error("sample", "one run directory or checkpoint, got also '%s'", argv[optind + 1]);
    o.run = argv[optind];
    mt_stop_signals signals;
    mt_stop_signals_install(&signals);
    mt_status rc = mt_sample(&o, stdout);
    mt_stop_signals_restore(&signals);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
