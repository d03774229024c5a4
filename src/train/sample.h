/* Sampling's option check, shared by mt_sample and its option parser. */
#ifndef MT_TRAIN_SAMPLE_H
#define MT_TRAIN_SAMPLE_H

#include "megatrain.h"

/* Refuses options out of their domains, naming the option. */
mt_status mt_sample_options_check(const mt_sample_options *o);

#endif
