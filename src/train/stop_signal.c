#include "train/stop_signal.h"

#include <unistd.h>

#include "megatrain.h"

static const int signals[3] = {SIGINT, SIGTERM, SIGHUP};
static volatile sig_atomic_t requested;

static void on_signal(int sig) {
    if (requested) _exit(128 + sig);
    requested = sig;
}

void mt_stop_signals_install(mt_stop_signals *saved) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    requested = 0;
    for (int i = 0; i < 3; i++) {
        sigaction(signals[i], NULL, &saved->old[i]);
        /* A signal ignored by whoever started the run stays ignored: nohup's SIGHUP, a background
         * job's SIGINT. */
        if (saved->old[i].sa_handler != SIG_IGN) sigaction(signals[i], &sa, NULL);
    }
}

void mt_stop_signals_restore(const mt_stop_signals *saved) {
    for (int i = 0; i < 3; i++) sigaction(signals[i], &saved->old[i], NULL);
}

int mt_stop_requested(void) { return requested; }

int mt_train_stop_signal(void) { return requested; }
