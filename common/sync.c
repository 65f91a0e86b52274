/* sync.c - deadline arithmetic for timed condition waits; ranked locks. */
#include "common/sync.h"

#include <stdio.h>
#include <stdlib.h>

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

double hr_clock_s(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void hr_sleep_s(double s) {
    if (!(s > 0))
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- ranked locks ---- */

#ifdef HR_LOCK_CHECK
static _Thread_local unsigned long long hr_held;   /* bit r: rank r held */
static _Thread_local const char *hr_held_name[64]; /* the name it was taken as */

void hr_lock_ranked(pthread_mutex_t *mu, int rank, const char *name) {
    if (rank < 1 || rank > 63) {
        fprintf(stderr, "hearth: lock %s has rank %d outside 1..63\n", name, rank);
        abort();
    }
    unsigned long long above = hr_held >> rank; /* held ranks >= rank */
    if (above) {
        int top = 63 - __builtin_clzll(hr_held);
        fprintf(stderr,
                "hearth: lock order violated: taking %s (rank %d) while holding %s (rank %d)\n",
                name, rank, hr_held_name[top] ? hr_held_name[top] : "?", top);
        abort();
    }
    pthread_mutex_lock(mu);
    hr_held |= 1ull << rank;
    hr_held_name[rank] = name;
}

void hr_unlock_ranked(pthread_mutex_t *mu, int rank) {
    hr_held &= ~(1ull << rank);
    pthread_mutex_unlock(mu);
}

unsigned long long hr_lock_held(void) { return hr_held; }
#else
void hr_lock_ranked(pthread_mutex_t *mu, int rank, const char *name) {
    (void)rank;
    (void)name;
    pthread_mutex_lock(mu);
}

void hr_unlock_ranked(pthread_mutex_t *mu, int rank) {
    (void)rank;
    pthread_mutex_unlock(mu);
}

unsigned long long hr_lock_held(void) { return 0; }
#endif
