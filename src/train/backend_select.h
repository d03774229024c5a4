/* Picks the compute backend a run asked for: "cpu", "cuda", or "auto" (cuda when a GPU is
 * usable, else cpu). */
#ifndef MT_TRAIN_BACKEND_SELECT_H
#define MT_TRAIN_BACKEND_SELECT_H

#include "backend/backend.h"

mt_status mt_backend_open(const char *name, int threads, mt_backend **out);

#endif
