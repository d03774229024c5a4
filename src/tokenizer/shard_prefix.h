/* Where a series of shards PREFIX_000000.bin, PREFIX_000001.bin, ... goes (tokenize's llm.c and
 * masked shards alike), taken before the first is written and given back if the series fails:
 *   - any PREFIX_<digits>.bin already there is refused (an earlier series' shards, even with its
 *     first removed, would mix with this one's);
 *   - temporaries an interrupted series left (PREFIX_<digits>.bin.tmp*: killed, it could not
 *     remove them) are removed, said so;
 *   - the prefix's directory is created, noting what was made, which a failed series takes back;
 *   - this series' temporaries, and the directories made, are registered with util/stop_signal.h,
 *     so that a second signal, which ends the process at once, removes them too. */
#ifndef MT_TOKENIZER_SHARD_PREFIX_H
#define MT_TOKENIZER_SHARD_PREFIX_H

#include <limits.h>

#include "util/status.h"

enum { MT_SHARD_DIR_TEMPS = 16 }; /* the made directories a second signal takes back: this many levels */

typedef struct {
    char made[PATH_MAX]; /* the outermost directory created ("": none) */
    char dir[PATH_MAX];  /* the prefix's directory */
    int temps;           /* the stop registration of the temporaries, -1: none */
    int dir_temps[MT_SHARD_DIR_TEMPS], n_dir_temps; /* those of the directories made, outermost first */
} mt_shard_prefix;

mt_status mt_shard_prefix_claim(const char *prefix, mt_shard_prefix *p);
/* The series is done: `failed`, the directories claim made go (when empty). */
void mt_shard_prefix_release(mt_shard_prefix *p, int failed);

#endif
