/* megatrain train and megatrain plan. */
#include "cli/cli.h"

int mt_cli_train(int argc, char **argv) {
    mt_train_options o;
    int parsed = mt_cli_parse_train(argc, argv, "train", &o);
    if (parsed) return parsed > 0 ? 0 : 2;
    mt_status rc = mt_train(&o);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}

int mt_cli_plan(int argc, char **argv) {
    mt_train_options o;
    int parsed = mt_cli_parse_train(argc, argv, "plan", &o);
    if (parsed) return parsed > 0 ? 0 : 2;
    mt_status rc = mt_plan(&o, stdout);
    return rc == MT_OK ? 0 : mt_cli_fail(rc);
}
