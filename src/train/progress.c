#include "train/progress.h"

#include <stdarg.h>
#include <stdio.h>

#include "util/clock.h"

void mt_progress_start(mt_progress *p, int live, int64_t first_step, int64_t total_steps) {
    *p = (mt_progress){.live = live, .total_steps = total_steps, .started = mt_now(),
                       .first_step = first_step};
}

double mt_progress_tokens_per_second(const mt_progress *p) {
    double elapsed = mt_now() - p->started;
    return elapsed > 0 ? p->tokens / elapsed : 0;
}

static void format_duration(char *out, size_t cap, double seconds) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600) snprintf(out, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(out, cap, "%ldm%02lds", s / 60, s % 60);
}

void mt_progress_step(mt_progress *p, int64_t step, double epoch, double loss, double tokens_in_step, float lr) {
    p->tokens += tokens_in_step;
    double now = mt_now(), elapsed = now - p->started;
    /* A terminal is redrawn at most 10 times a second; a log gets a line every 10 seconds. */
    int last = step == p->total_steps;
    if (!last && now - p->last_print < (p->live ? 0.1 : 10.0)) return;
    p->last_print = now;
    double per_step = elapsed / (double)(step - p->first_step);
    char eta[32];
    format_duration(eta, sizeof eta, per_step * (double)(p->total_steps - step));
    fprintf(stderr, "%sstep %lld/%lld  epoch %.2f  loss %.4f  lr %.2e  %.0f tok/s  ETA %s%s",
            p->live ? "\r\033[K" : "", (long long)step, (long long)p->total_steps, epoch, loss, (double)lr,
            p->tokens / elapsed, eta, p->live ? "" : "\n");
    fflush(stderr);
}

void mt_progress_note(mt_progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->live) fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    p->last_print = 0;
}

void mt_progress_finish(mt_progress *p) {
    if (p->live) fputc('\n', stderr);
}
