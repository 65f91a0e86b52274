/* sync.h - the monotonic clock and timed waits on condition variables
 * (CLOCK_REALTIME deadlines, as pthread_cond_timedwait expects). Reentrant. */
#ifndef HR_COMMON_SYNC_H
#define HR_COMMON_SYNC_H

#include <pthread.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC (durations, timeouts, rates). */
double hr_now_s(void);
/* Seconds on clock id (a thread's or the process's CPU clock, say); -1
 * where it cannot be read. */
double hr_clock_s(clockid_t id);

/* Sleeps s seconds (resumed after signals); nothing for s <= 0. */
void hr_sleep_s(double s);

/* *dl = now + ms, normalised. */
void hr_deadline_ms(struct timespec *dl, long ms);
/* pthread_cond_timedwait for at most ms milliseconds (mu held by caller);
 * returns its result (0, ETIMEDOUT, ...). */
int hr_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);

/* Ranked locks: a thread takes them in increasing rank only (a lock order,
 * written where the locks are declared). hr_lock / hr_unlock lock and
 * unlock mu; in builds without NDEBUG (debug and sanitizer builds) they
 * also keep the ranks each thread holds and abort, naming both locks, when
 * a thread takes a lock whose rank is not above every rank it holds. A
 * condition wait on a ranked mutex keeps its rank held. Ranks are 1..63. */
#ifndef NDEBUG
#define HR_LOCK_CHECK 1
#endif
void hr_lock_ranked(pthread_mutex_t *mu, int rank, const char *name);
void hr_unlock_ranked(pthread_mutex_t *mu, int rank);
#define hr_lock(mu, rank) hr_lock_ranked((mu), (rank), #rank)
#define hr_unlock(mu, rank) hr_unlock_ranked((mu), (rank))
/* The ranks the calling thread holds (bit r for rank r); 0 in builds that
 * do not check. */
unsigned long long hr_lock_held(void);

#endif
