/* The megatrain command: one file per subcommand. Each returns the process exit code; only
 * this layer prints errors and exits. */
#ifndef MT_CLI_H
#define MT_CLI_H

#include "megatrain.h"

int mt_cli_train(int argc, char **argv);
int mt_cli_plan(int argc, char **argv);
int mt_cli_sample(int argc, char **argv);
int mt_cli_export(int argc, char **argv);
int mt_cli_bench(int argc, char **argv);
int mt_cli_tokenize(int argc, char **argv);

/* Parses the training options shared by train and plan; returns -1 after printing an error,
 * 1 when --help was printed, 0 otherwise. */
int mt_cli_parse_train(int argc, char **argv, const char *command, mt_train_options *o);

/* "megatrain: error: <mt_error()>" on stderr; returns the exit code for the status. */
int mt_cli_fail(mt_status status);

/* Numbers with unit suffixes: "10GiB", "512MB", "1e-3". Return -1 on a malformed value. */
int mt_cli_parse_bytes(const char *text, int64_t *out);

#endif
