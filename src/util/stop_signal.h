/* A clean stop on request, for every command that runs long or writes files: the first SIGINT,
 * SIGTERM or SIGHUP asks the work in progress to stop at its next safe point (training: after the
 * step, a checkpoint written; tokenizing, exporting, sampling: at once, their temporary files
 * removed), and the command returns MT_ERR_INTERRUPTED (exit 128 + the signal). A second one ends
 * the process at once with 128 + the signal, removing first the temporary paths registered here.
 * A signal that was ignored when the command started (nohup's SIGHUP) stays ignored.
 *
 * Long loops poll mt_stop_requested(); library code that finds it set fails with
 * mt_stop_status(). */
#ifndef MT_UTIL_STOP_SIGNAL_H
#define MT_UTIL_STOP_SIGNAL_H

#include <signal.h>

#include "util/status.h"

typedef struct {
    struct sigaction old[3];
} mt_stop_signals;

/* Installs the handlers (clearing an earlier request), keeping the old ones in `saved`. */
void mt_stop_signals_install(mt_stop_signals *saved);
void mt_stop_signals_restore(const mt_stop_signals *saved);
/* The signal that asked for the stop, 0 while none has. */
int mt_stop_requested(void);
/* MT_ERR_INTERRUPTED with "stopped on request (signal N, Name) while <what>", for a loop that saw
 * the request. */
mt_status mt_stop_status(const char *what);

/* A temporary file, or directory of files, to remove should a second signal end the process at
 * once (newest first; a directory with the files in it). Returns a handle for mt_stop_temp_forget
 * (-1 when the table is full: then the path is just not removed on such an exit). */
int mt_stop_temp_add(const char *path);
/* The entries of directory `dir` whose names start with `name` (not empty) and hold `part`: the
 * temporaries of a series of files whose names are not all known in advance (tokenize's shards). */
int mt_stop_temp_add_matching(const char *dir, const char *name, const char *part);
void mt_stop_temp_forget(int handle);

#endif
