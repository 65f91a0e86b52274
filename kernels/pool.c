/* pool.c - persistent spinning-then-sleeping worker pool. */
#include "kernels/pool.h"

#include "common/log.h"
#include "common/sync.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define TAG "pool"

/* the spin-wait hint: pause on x86, yield on aarch64 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define HR_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define HR_CPU_RELAX() __asm__ volatile("yield" ::: "memory")
#else
#define HR_CPU_RELAX() ((void)0)
#endif

/* Spin iterations (pause instructions) a worker waits for the next job
 * before sleeping: roughly a few hundred microseconds. */
#define HR_POOL_SPIN 20000

/* Stepping back on a busy machine: over every HR_POOL_WINDOW jobs run on
 * several threads, the caller's time waiting for workers' parts is
 * compared with its own parts' time; when it waited more than
 * HR_POOL_WAIT_SHARE of that (workers that lose their cores to other
 * programs, so that one thread would do as well), the pool runs its jobs
 * on the caller alone for HR_POOL_BACKOFF_S, then tries its threads again.
 * Thread counts never change a result (every kernel computes the same
 * numbers on any number of threads). */
#define HR_POOL_WINDOW 64
#define HR_POOL_WAIT_SHARE 0.5
#define HR_POOL_BACKOFF_S 1.0

/* A job's part ith (1 <= ith < nth): who runs it. */
enum { HR_PART_FREE = 0, HR_PART_TAKEN = 1, HR_PART_DONE = 2 };

typedef struct {
    struct hr_pool *pool;
    int ith;
    pthread_t thread;
    _Atomic int part; /* HR_PART_*: the current job's part ith */
} hr_worker;

struct hr_pool {
    int n;
    hr_worker *workers;   /* n - 1 workers; the caller is thread 0 */
    _Atomic unsigned gen; /* bumped for every job */
    bool steal;           /* the caller may run a part a worker has not started */
    _Atomic int n_sleeping;
    _Atomic int stop;
    hr_pool_fn fn;
    void *ctx;
    int nth;      /* threads taking part in the current job */
    int n_active; /* threads hr_pool_run uses */
    /* stepping back (caller only): this window's jobs and times, s */
    int win_jobs;
    double win_own, win_wait, backoff_until;
    unsigned long long backoffs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *hr_worker_main(void *arg) {
    hr_worker *w = arg;
    struct hr_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            if (++spins < HR_POOL_SPIN) {
                HR_CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        /* the part is ours unless the caller took it while we were away (a
         * worker that lost its core to another program); the job read after
         * the claim is the one the part belongs to */
        int free_part = HR_PART_FREE;
        if (atomic_compare_exchange_strong_explicit(&w->part, &free_part, HR_PART_TAKEN,
                                                    memory_order_acq_rel, memory_order_acquire)) {
            p->fn(p->ctx, w->ith, p->nth);
            atomic_store_explicit(&w->part, HR_PART_DONE, memory_order_release);
        }
    }
}

hr_pool *hr_pool_create(int n_threads) { return hr_pool_create_pinned(n_threads, NULL); }

hr_pool *hr_pool_create_pinned(int n_threads, const int *cpus) {
    if (n_threads < 1)
        n_threads = 1;
    hr_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads;
    p->n_active = n_threads;
    p->steal = true;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            free(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            hr_worker *w = &p->workers[i - 1];
            w->pool = p;
            w->ith = i;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            if (cpus && cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpus[i], &set);
                pthread_attr_setaffinity_np(&attr, sizeof set, &set);
            }
            int rc = pthread_create(&w->thread, &attr, hr_worker_main, w);
            if (rc != 0 && cpus && cpus[i] >= 0) {
                HR_LOG_WARN(TAG, "cannot pin worker %d to cpu %d; running it unpinned", i, cpus[i]);
                rc = pthread_create(&w->thread, NULL, hr_worker_main, w);
            }
            pthread_attr_destroy(&attr);
            if (rc != 0) {
                p->n = i; /* keep the ones created */
                break;
            }
        }
    }
    return p;
}

void hr_pool_destroy(hr_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->workers);
    free(p);
}

int hr_pool_size(const hr_pool *p) { return p->n; }

double hr_pool_cpu_s(const hr_pool *p) {
    double s = hr_clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 1; p && i < p->n && s >= 0; i++) {
        clockid_t id;
        double w = -1;
        if (pthread_getcpuclockid(p->workers[i - 1].thread, &id) == 0)
            w = hr_clock_s(id);
        s = w >= 0 ? s + w : -1;
    }
    return s;
}

void hr_pool_run_n(hr_pool *p, int nth, hr_pool_fn fn, void *ctx) {
    if (nth > p->n)
        nth = p->n;
    if (nth < 1)
        nth = 1;
    if (nth > 1 && p->backoff_until > 0) { /* stepped back: the caller alone for a while */
        if (hr_now_s() < p->backoff_until)
            nth = 1;
        else
            p->backoff_until = 0;
    }
    if (p->n == 1 || nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    double t0 = hr_now_s();
    p->fn = fn;
    p->ctx = ctx;
    p->nth = nth;
    for (int i = 1; i < p->n; i++) /* release: the job above is seen with its part */
        atomic_store_explicit(&p->workers[i - 1].part, i < nth ? HR_PART_FREE : HR_PART_DONE,
                              memory_order_release);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with n_sleeping */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, nth);
    /* Parts no worker has started yet: run them here (a worker without a
     * core - another program took it - would hold the whole job up). Each
     * part computes the same numbers whoever runs it. Then wait for the
     * parts workers run: spin briefly, then yield, since a worker that lost
     * its core mid-part needs it back. */
    for (int i = 1; p->steal && i < nth; i++) {
        hr_worker *w = &p->workers[i - 1];
        int free_part = HR_PART_FREE;
        if (atomic_compare_exchange_strong_explicit(&w->part, &free_part, HR_PART_TAKEN,
                                                    memory_order_acq_rel, memory_order_acquire)) {
            fn(ctx, i, nth);
            atomic_store_explicit(&w->part, HR_PART_DONE, memory_order_release);
        }
    }
    double t1 = hr_now_s();
    for (int i = 1; i < nth; i++) {
        int spins = 0;
        while (atomic_load_explicit(&p->workers[i - 1].part, memory_order_acquire) !=
               HR_PART_DONE) {
            if (++spins < 4000)
                HR_CPU_RELAX();
            else
                sched_yield();
        }
    }
    double t2 = hr_now_s();
    p->win_own += t1 - t0;
    p->win_wait += t2 - t1;
    if (p->steal && ++p->win_jobs >= HR_POOL_WINDOW) { /* parts that meet (steal off) all run */
        if (p->win_wait > HR_POOL_WAIT_SHARE * p->win_own) {
            p->backoff_until = t2 + HR_POOL_BACKOFF_S;
            p->backoffs++;
        }
        p->win_jobs = 0;
        p->win_own = p->win_wait = 0;
    }
}

unsigned long long hr_pool_backoffs(const hr_pool *p) { return p->backoffs; }

void hr_pool_set_steal(hr_pool *p, bool on) { p->steal = on; }

void hr_pool_run(hr_pool *p, hr_pool_fn fn, void *ctx) { hr_pool_run_n(p, p->n_active, fn, ctx); }

void hr_pool_set_active(hr_pool *p, int nth) {
    p->n_active = nth < 1 ? 1 : nth > p->n ? p->n : nth;
}

int hr_pool_active(const hr_pool *p) { return p->n_active; }

void hr_split_range(long n, int ith, int nth, long align, long *begin, long *end) {
    if (align < 1)
        align = 1;
    long units = (n + align - 1) / align;
    long per = units / nth, rem = units % nth;
    long b = ith * per + (ith < rem ? ith : rem);
    long e = b + per + (ith < rem ? 1 : 0);
    b *= align;
    e *= align;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}

/* ---- barrier ---- */

/* Pause spins before a waiter starts yielding its CPU (a few tens of
 * microseconds: group imbalance within a layer is usually shorter). */
#define HR_BARRIER_SPIN 4000

void hr_barrier_init(hr_barrier *b) {
    atomic_store(&b->count, 0);
    atomic_store(&b->phase, 0);
}

void hr_barrier_wait(hr_barrier *b, int n) {
    if (n <= 1)
        return;
    unsigned ph = atomic_load_explicit(&b->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == n - 1) {
        atomic_store_explicit(&b->count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->phase, 1, memory_order_release);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&b->phase, memory_order_acquire) == ph) {
        if (++spins < HR_BARRIER_SPIN)
            HR_CPU_RELAX();
        else
            sched_yield();
    }
}
