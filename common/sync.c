/* sync.c - deadline arithmetic for timed condition waits. */
#include "common/sync.h"

void hr_deadline_ms(struct timespec *dl, long ms) {
    clock_gettime(CLOCK_REALTIME, dl);
    dl->tv_sec += ms / 1000;
    dl->tv_nsec += (ms % 1000) * 1000000L;
    if (dl->tv_nsec >= 1000000000L) {
        dl->tv_sec++;
        dl->tv_nsec -= 1000000000L;
    }
}

int hr_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms) {
    struct timespec dl;
    hr_deadline_ms(&dl, ms);
    return pthread_cond_timedwait(cv, mu, &dl);
}

double hr_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
