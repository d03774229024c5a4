/* Where a series of shards PREFIX_000000.bin, PREFIX_000001.bin, ... goes (tokenize's llm.c and
 * masked shards alike), taken before the first is written and given back if the series fails:
 *   - any PREFIX_<digits>.bin already there is refused (an earlier series' shards, even with its
 *     first removed, would mix with this one's);
 *   - temporaries an interrupted series left (PREFIX_<digits>.bin.tmp*: killed, it could not
 *     remove them) are removed, said so;
 *   - the prefix's directory is created, noting what was made, which a failed series takes back;
 *   - this series' temporaries are registered with util/stop_signal.h, so that a second signal,
 *     which ends the process at once, removes them too. */
#ifndef MT_TOKENIZER_SHARD_PREFIX_H
#define MT_TOKENIZER_SHARD_PREFIX_H

#include <limits.h>

#include "util/status.h"

typedef struct {
    char made[PATH_MAX]; /* the outermost directory created ("": none) */
    char dir[PATH_MAX];  /* the prefix's directory */
    int temps;           /* the stop registration of the temporaries, -1: none */
} mt_shard_prefix;

mt_status mt_shard_prefix_claim(const char *prefix, mt_shard_prefix *p);
/* The series is done: `failed`, the directories claim made go (when empty). */
void mt_shard_prefix_release(mt_shard_prefix *p, int failed);

#endif
