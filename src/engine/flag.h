/* A host-side monotonic counter that threads wait on: "unit u's weights are updated up to
 * step s". The optimizer thread raises it; the thread that issues copies waits on it. */
#ifndef MT_ENGINE_FLAG_H
#define MT_ENGINE_FLAG_H

#include <pthread.h>
#include <stdint.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int64_t value;
} mt_flag;

void mt_flag_init(mt_flag *f, int64_t value);
void mt_flag_destroy(mt_flag *f);
void mt_flag_set(mt_flag *f, int64_t value);
/* The value now, without waiting. */
int64_t mt_flag_peek(mt_flag *f);
/* Blocks until the value is at least `value`; returns the seconds spent waiting. */
double mt_flag_wait(mt_flag *f, int64_t value);

#endif
