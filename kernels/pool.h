/* pool.h - persistent worker threads for the kernels.
 *
 * hr_pool_run(pool, fn, ctx) runs fn(ctx, ith, nth) on every thread of the
 * pool (the caller is thread 0) and returns when all have finished. Workers
 * are created once, spin briefly between jobs (so back-to-back kernels in a
 * forward pass cost no wake-up) and then sleep on a condition variable, so
 * an idle agent does not burn its cores. Nothing is allocated per run.
 *
 * Thread-safety: one caller at a time per pool. */
#ifndef HR_KERNELS_POOL_H
#define HR_KERNELS_POOL_H

#include <stdbool.h>

typedef struct hr_pool hr_pool;
typedef void (*hr_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (1 means the caller alone). Returns NULL on failure. */
hr_pool *hr_pool_create(int n_threads);
/* Like hr_pool_create, with worker i (1 <= i < n_threads) pinned to CPU
 * cpus[i] (OS index; -1 = not pinned) before it starts, so its stack and
 * first touches land on that CPU's node. cpus[0] (the caller) is ignored;
 * cpus may be NULL. A failed pin is logged and the worker runs unpinned. */
hr_pool *hr_pool_create_pinned(int n_threads, const int *cpus);
void hr_pool_destroy(hr_pool *p); /* NULL is a no-op */
int hr_pool_size(const hr_pool *p);
/* Threads hr_pool_run uses (1..size, default size): a per-phase thread
 * plan switches it with one store (prefill: all, decode: fewer). */
void hr_pool_set_active(hr_pool *p, int nth);
int hr_pool_active(const hr_pool *p);
/* Runs on the first hr_pool_active() threads. Once its own part 0 is done,
 * the caller runs any part a worker has not started yet (a worker whose
 * core another program took), unless stealing is off for the pool: part
 * ith must then compute the same whoever runs it, and parts must not wait
 * for each other. */
void hr_pool_run(hr_pool *p, hr_pool_fn fn, void *ctx);
/* Times the pool stepped back to the caller alone because its workers
 * kept it waiting (a busy machine; see pool.c). */
unsigned long long hr_pool_backoffs(const hr_pool *p);
/* Off for a pool whose parts wait for each other (a barrier inside the
 * job): every part then runs on its own thread, and the pool never steps
 * back to fewer threads (pool.c). Default on. */
void hr_pool_set_steal(hr_pool *p, bool on);
/* CPU seconds the calling thread (the pool's thread 0 when it runs the
 * jobs) and the pool's workers have used since they started; -1 where a
 * thread's clock cannot be read. Other threads of the process (I/O, links)
 * are not in it. */
double hr_pool_cpu_s(const hr_pool *p);
/* Runs with only the first nth threads (1 <= nth <= size); others idle. */
void hr_pool_run_n(hr_pool *p, int nth, hr_pool_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal contiguous parts, rounded to multiples
 * of `align`; part ith is [*begin, *end). */
void hr_split_range(long n, int ith, int nth, long align, long *begin, long *end);

/* A reusable spin-then-yield barrier for a fixed set of n threads (the
 * global barrier between group leaders, or an intra-group barrier inside a
 * job). Zero-initialise (or hr_barrier_init) before first use; every
 * participant passes the same n. Thread-safe by design; allocates nothing. */
typedef struct {
    _Atomic int count;
    _Atomic unsigned phase;
} hr_barrier;

void hr_barrier_init(hr_barrier *b);
void hr_barrier_wait(hr_barrier *b, int n);

#endif
