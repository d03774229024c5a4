/* What the train, plan and bench entry points derive alike from mt_train_options. */
#ifndef MT_TRAIN_OPTIONS_H
#define MT_TRAIN_OPTIONS_H

#include <string.h>

#include "engine/engine.h"
#include "megatrain.h"
#include "plan/placement.h"
#include "train/machine_rates.h"

/* Whether a run's windows have segments (packed examples, masked documents): its engine takes
 * positions. */
static inline int mt_train_segmented(const mt_train_options *o) {
    return o->doc_mask || (o->packing && !strcmp(o->packing, "on"));
}

/* The options of a command that starts nothing from a checkpoint (plan, bench): checked, and
 * every run setting at its default where unset. */
mt_status mt_train_options_fresh(const mt_train_options *given, mt_train_options *out);
/* The model a run asked for (without --resume): --init-from, --config or a preset (demo), with
 * --max-positions and --rope-theta applied. */
mt_status mt_train_model_config(const mt_train_options *o, mt_config *cfg);
/* Whether --max-positions or --rope-theta is given; applying them to a config. */
int mt_train_model_changed(const mt_train_options *o);
void mt_train_model_change(const mt_train_options *o, mt_config *cfg);
/* The run's memory plan (plan/placement.h): the engine's options it runs with, fitted into
 * --gpu-mem (or the device's free memory less a margin), the units whose state the device keeps,
 * weighed at this machine's rates (train/machine_rates.h: measured, looked up or given), which go
 * to `rates` when it is not NULL. */
mt_status mt_train_placement(const mt_train_options *o, mt_backend *be, const mt_config *cfg, mt_placement *out,
                             mt_machine_rates *rates);

#endif
