/* Run files: `megatrain train run.yaml` reads one YAML document, a mapping whose keys are the long
 * option names of `megatrain train` (steps: 1000, lr: 3e-4, data: chat.jsonl, resume: true, ...),
 * each value checked as on the command line. One rule for both: an option given on the command
 * line wins over the file's key of the same option (a flag's too: --resume=false), and a model
 * source on the command line (--preset, --config, --init-from) replaces the file's. A relative
 * path in the file (data, val-data, tokenizer, config, init-from, out) is taken relative to the
 * file's own directory ("~/" is $HOME's). A run writes the settings it resolved into <run>/run.yaml, a run file
 * that reproduces the run (give another --out), with absolute paths, `out` included. Parsed and
 * written with libyaml. */
#ifndef MT_TRAIN_RUN_FILE_H
#define MT_TRAIN_RUN_FILE_H

#include "megatrain.h"

/* The strings a run file's values set (names point into them); free with mt_run_file_free. */
typedef struct {
    char **v;
    size_t n;
} mt_run_file_strings;

/* Sets the options of the run file at `path` (a regular file) in *o. Fails naming path:line and
 * the key for a repeated key, a value that is not a single scalar, one the option refuses, or a
 * second document; every unknown key in one message, each with the nearest known key. */
mt_status mt_run_file_read(const char *path, mt_train_options *o, mt_run_file_strings *strings);
void mt_run_file_free(mt_run_file_strings *strings);

/* Writes the run settings of resolved options, and --out, as a run file at `path` (through a
 * temporary file renamed into place). */
mt_status mt_run_file_write(const char *path, const mt_train_options *o);

#endif
