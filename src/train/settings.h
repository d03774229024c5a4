/* A run's settings in its checkpoints, and what --resume makes of them.
 *
 * Every checkpoint's metadata holds "settings": the run settings of option_table.h (every option
 * but the process ones) as the run resolved them, by command-line name. A resumed run starts from
 * them: an option left unset takes the stored value; one given with another value is applied with
 * a log line when it may change (MT_OPT_MAY_CHANGE: the data, the steps, the learning-rate
 * schedule, the optimizer's hyperparameters, the checkpoint and evaluation periods) and refused,
 * naming both values, when it may not (MT_OPT_FIXED: the sequence layout, the seed, the moments
 * format). The model (MT_OPT_MODEL) is compared as a model, by its config: see train.c. */
#ifndef MT_TRAIN_SETTINGS_H
#define MT_TRAIN_SETTINGS_H

#include <jansson.h>

#include "megatrain.h"

/* The run settings of resolved options as a JSON object (the caller owns it); NULL when out of
 * memory. */
json_t *mt_settings_to_json(const mt_train_options *o);

/* `out` = `given` with every unset run setting resolved, from `saved` (a checkpoint's settings,
 * which `checkpoint` names in messages; NULL for a fresh run) or else the default, and changes
 * to stored settings applied (logged) or refused. The warmup stays unset when neither sets it:
 * its default, a tenth of the steps (at most 100), follows the steps (mt_settings_warmup). Names
 * in `out` may point into `saved`, which must outlive it. */
mt_status mt_settings_resolve(const mt_train_options *given, const json_t *saved, const char *checkpoint,
                              mt_train_options *out);

/* Defaults differ by the model's origin: with --init-from (fine-tuning a pretrained model) the
 * learning rate is 1e-5, weight decay 0, beta2 0.999, the cosine ends at 0 (min-lr-ratio 0) and a
 * fresh run's warmup is set to a tenth of its steps (mt_settings_finetune_warmup); without it
 * pretraining's stay (option_table.c).
 * A run stores what it resolved, so a resumed run keeps them. */

/* Fine-tuning's warmup, a tenth of the steps, set on a fresh --init-from run's options whose
 * warmup is unset once its steps are known (--epochs: once the data is open). */
void mt_settings_finetune_warmup(mt_train_options *o);

/* One log line naming the optimizer's settings a fresh run took by default (not `given`), which
 * defaults they are (fine-tuning's or pretraining's) and that an option changes them. */
void mt_settings_log_defaults(const mt_train_options *given, const mt_train_options *resolved);

/* The warmup of resolved options: theirs, or a tenth of the steps, at most 100. */
int64_t mt_settings_warmup(const mt_train_options *o);

/* "preset tiny", "config path/config.json", "init-from dir", or "preset demo" when none is set:
 * where the options' model comes from, for messages. */
const char *mt_settings_model_source(const mt_train_options *o, char *buf, size_t cap);

#endif
