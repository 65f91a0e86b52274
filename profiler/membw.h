/* membw.h - memory read bandwidth measurement (streaming reads of a buffer
 * much larger than the caches, split across threads). Used by `hearth
 * bench` and the device profile. Not thread-safe (uses its own pool). */
#ifndef HR_PROFILER_MEMBW_H
#define HR_PROFILER_MEMBW_H

#include <stddef.h>

#include "kernels/pool.h"

/* Reads `bytes` (rounded to 4 KiB) `reps` times with n_threads threads and
 * returns the median read bandwidth in GB/s (1e9 bytes/s); <= 0 on error. */
double hr_membw_read(int n_threads, size_t bytes, int reps);

/* The same over a caller's buffer (borrowed, at least `bytes` long, already
 * touched) with the first n_threads threads of pool. */
double hr_membw_read_pool(hr_pool *pool, int n_threads, const void *buf, size_t bytes, int reps);

#endif
