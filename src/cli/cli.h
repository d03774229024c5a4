/* The megatrain command: one file per subcommand, and cli_common.c for what they share. Each
 * command returns the process exit code; only this layer prints errors and exits. */
#ifndef MT_CLI_H
#define MT_CLI_H

#include "megatrain.h"
#include "train/run_file.h"

int mt_cli_train(int argc, char **argv);
int mt_cli_plan(int argc, char **argv);
int mt_cli_sample(int argc, char **argv);
int mt_cli_export(int argc, char **argv);
int mt_cli_bench(int argc, char **argv);
int mt_cli_tokenize(int argc, char **argv);

/* ---- cli_common.c ---- */

/* Parses the training options shared by train, plan and bench (each checked against its domain
 * as it is parsed), after those of a run file named as the one argument (train/run_file.h: the
 * flags win; its strings go to *strings, which the caller frees with mt_run_file_free once done
 * with *o); returns -1 after printing an error, 1 when --help was printed, 0 otherwise. */
int mt_cli_parse_train(int argc, char **argv, const char *command, mt_train_options *o,
                       mt_run_file_strings *strings);

/* "megatrain: error: <mt_error()>" on stderr; returns the exit code for the status: 2 for bad
 * input, 128 + the signal for a run stopped by one, 1 otherwise. */
int mt_cli_fail(mt_status status);

/* A usage error: "megatrain: error: <message>" and a pointer to the command's --help; returns 2. */
int mt_cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
