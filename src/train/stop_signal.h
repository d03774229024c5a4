/* A clean stop on request: the first SIGINT, SIGTERM or SIGHUP asks the training loop to stop
 * after the step in progress (a checkpoint is then written and the run returns
 * MT_ERR_INTERRUPTED); a second one ends the process at once with 128 + the signal. A signal that
 * was ignored when the run started (nohup's SIGHUP) stays ignored. */
#ifndef MT_TRAIN_STOP_SIGNAL_H
#define MT_TRAIN_STOP_SIGNAL_H

#include <signal.h>

typedef struct {
    struct sigaction old[3];
} mt_stop_signals;

/* Installs the handlers (clearing an earlier request), keeping the old ones in `saved`. */
void mt_stop_signals_install(mt_stop_signals *saved);
void mt_stop_signals_restore(const mt_stop_signals *saved);
/* The signal that asked for the stop, 0 while none has. */
int mt_stop_requested(void);

#endif
