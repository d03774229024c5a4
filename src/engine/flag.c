#include "engine/flag.h"

#include "util/clock.h"

void mt_flag_init(mt_flag *f, int64_t value) {
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->changed, NULL);
    f->value = value;
}

void mt_flag_destroy(mt_flag *f) {
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->changed);
}

void mt_flag_set(mt_flag *f, int64_t value) {
    pthread_mutex_lock(&f->lock);
    f->value = value;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->lock);
}

int64_t mt_flag_peek(mt_flag *f) {
    pthread_mutex_lock(&f->lock);
    int64_t value = f->value;
    pthread_mutex_unlock(&f->lock);
    return value;
}

double mt_flag_wait(mt_flag *f, int64_t value) {
    double t0 = mt_now();
    pthread_mutex_lock(&f->lock);
    while (f->value < value) pthread_cond_wait(&f->changed, &f->lock);
    pthread_mutex_unlock(&f->lock);
    return mt_now() - t0;
}
