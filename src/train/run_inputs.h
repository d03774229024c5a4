/* The inputs a run reads, and what identifies each (io/file_identity.h), kept in the settings of
 * every checkpoint as "inputs" so that a resumed run, and sample, can tell whether they are still
 * the ones the run used:
 *
 *   data       --data, the file as the user gave it (a text file before its tokenization), or
 *              the files of a mix of datasets
 *   tokenizer  the run's tokenizer: its tokenizer.json and tokenizer_config.json (the chat
 *              template lives there)
 *   init-from  the model directory the run was initialized from: config.json, the safetensors
 *              files and their index, and the wrapper its config.json names, if any ("wrapper")
 *
 * Each is {"path": the absolute path, "files": [identities]}, in a table (`mt_run_input_kinds`)
 * that a new input joins as one more row. --config needs no entry: its contents are the run's
 * model, which every checkpoint stores and a resume compares whole.
 *
 * What a resume checks (mt_run_inputs_check):
 *   - data at the run's path whose contents, size or modification time changed: refused, naming
 *     the file and what changed, unless --accept-changed-data (then its new identity is stored);
 *     a --data at another path is a change the user asks for, applied with a log line
 *   - the tokenizer changed: refused (its ids would mean other text; no option takes it)
 *   - --init-from given again: refused unless it is the run's own directory, unchanged (a resume
 *     continues from its checkpoint's weights, never from a model directory's)
 * A checkpoint written before identities were kept has no "inputs": its run resumes as before
 * (the paths it stored, relative ones against the working directory), a line saying that its
 * inputs could not be checked, and its next checkpoints keep them. */
#ifndef MT_TRAIN_RUN_INPUTS_H
#define MT_TRAIN_RUN_INPUTS_H

#include <jansson.h>

#include "megatrain.h"

/* The identities of the inputs the resolved options `o` name (the data when it is a regular file,
 * the tokenizer when the run has one, the --init-from directory when given), as a new JSON object
 * keyed by input. */
mt_status mt_run_inputs_identify(const mt_train_options *o, json_t **inputs);

/* A resumed run: `now` (mt_run_inputs_identify of its resolved options) against the inputs
 * `saved` (the checkpoint's settings, which `checkpoint` names in messages); `given` are the
 * options as the user gave them. Refuses (MT_ERR_INVALID) as above. *data_changed is 1 when the
 * run goes on with other data (another path, or --accept-changed-data on a changed file): its
 * sampler may then start a new epoch. Inputs the checkpoint did not identify are carried into
 * `now` from `saved` where they still apply. */
mt_status mt_run_inputs_check(const json_t *saved, json_t *now, const mt_train_options *given,
                              const char *checkpoint, int *data_changed);

/* The run's tokenizer `path` against the identity its checkpoint's settings keep: refused when it
 * changed (sample decodes with it). Nothing to check for a checkpoint without identities. */
mt_status mt_run_inputs_check_tokenizer(const json_t *settings, const char *path, const char *checkpoint);
/* The same for the run's --chat-template file (export and sample --chat render with it). */
mt_status mt_run_inputs_check_template(const json_t *settings, const char *path, const char *checkpoint);

/* The --init-from directory of a run initialized from a wrapper's (model/wrappers.h), which its
 * export writes back (mt_hf_export_options.wrapped_from), into dir[cap]; "" for any other run.
 * Refused when the directory changed since the run stored it. */
mt_status mt_run_inputs_wrapped_from(const json_t *settings, const char *checkpoint, char *dir, size_t cap);

#endif
