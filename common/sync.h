/* sync.h - the monotonic clock and timed waits on condition variables
 * (CLOCK_REALTIME deadlines, as pthread_cond_timedwait expects). Reentrant. */
#ifndef HR_COMMON_SYNC_H
#define HR_COMMON_SYNC_H

#include <pthread.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC (durations, timeouts, rates). */
double hr_now_s(void);

/* *dl = now + ms, normalised. */
void hr_deadline_ms(struct timespec *dl, long ms);
/* pthread_cond_timedwait for at most ms milliseconds (mu held by caller);
 * returns its result (0, ETIMEDOUT, ...). */
int hr_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);

#endif
