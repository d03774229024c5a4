/* megatrain train and megatrain plan. */
#include "cli/cli.h"

int mt_cli_train(int argc, char **argv) {
    mt_train_options o;
    mt_run_file_strings strings;
    int parsed = mt_cli_parse_train(argc, argv, "train", &o, &strings);
    mt_status rc = parsed ? MT_OK : mt_train(&o);
    mt_run_file_free(&strings);
    if (parsed) return parsed > 0 ? 0 : 2;
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}

int mt_cli_plan(int argc, char **argv) {
    mt_train_options o;
    mt_run_file_strings strings;
    int parsed = mt_cli_parse_train(argc, argv, "plan", &o, &strings);
    mt_status rc = parsed ? MT_OK : mt_plan(&o, stdout);
    mt_run_file_free(&strings);
    if (parsed) return parsed > 0 ? 0 : 2;
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
