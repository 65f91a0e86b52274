/* profiler-impl.h - helpers shared by the profiler's .c files. Internal to
 * profiler/: no other module includes this. */
#ifndef HR_PROFILER_IMPL_H
#define HR_PROFILER_IMPL_H

#include "profiler/profiler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_PROF_TAG "profiler"

/* Monotonic clock, seconds. */
/* Sorts v[0..n) and returns its median (-1 when n == 0). */
double hr_prof_median(double *v, int n);

/* buf = sysroot + abs ("" or NULL sysroot: abs unchanged). */
void hr_prof_path(char *buf, size_t cap, const char *sysroot, const char *abs);
/* Reads up to cap-1 bytes of a (small, pseudo-) file, NUL-terminated.
 * Returns the byte count or -1 when it cannot be opened or read. */
long hr_prof_read_text(const char *path, char *buf, size_t cap);
/* First integer in a file; returns 0 or -1. */
int hr_prof_read_i64(const char *path, int64_t *out);
/* Copies a string, truncating, always NUL-terminated. */
void hr_prof_strlcpy(char *dst, const char *src, size_t cap);
/* mkdir -p with mode 0700 (device.c); 0 or -1 with errno. */
int hr_prof_mkdir_p(const char *dir);
/* Writes text to path in folder dir (made as needed) through a temporary
 * file renamed over it, so a reader never sees half a file. 0, or -1 with
 * errno (the temporary file removed). */
int hr_prof_write_atomic(const char *dir, const char *path, const char *text);
/* CPU seconds the calling thread (thread) or this process (all its
 * threads) has run; -1 unknown. */
double hr_prof_cpu_s(bool thread);
/* 64-bit FNV-1a of a string. */
uint64_t hr_prof_hash(const char *s, uint64_t h);
#define HR_PROF_HASH_INIT 1469598103934665603ull

/* Nanoseconds this process's threads have spent runnable but waiting for a
 * CPU (sum of /proc/self/task/N/schedstat run_delay); -1 when unavailable.
 * A repetition during which this grows was slowed by other programs. */
int64_t hr_prof_run_delay_ns(void);
/* The same for the calling thread alone (/proc/thread-self/schedstat): a
 * disk test's own waits. The process's sum also counts its other threads'
 * waits for a CPU quota while this one read (an agent's ZeroMQ and link
 * threads as it profiled): subtracted from the read's time, they flattered
 * a 300 MB/s throttled disk to 429 MB/s (sequential) and 639 (mmap). -1
 * unknown. */
int64_t hr_prof_thread_run_delay_ns(void);

/* sysinfo.c: /proc, /sys, uname. Each degrades to unknown with a warning. */
void hr_prof_read_os(hr_prof_os *os, const char *sysroot);
void hr_prof_read_mem(hr_prof_mem *m, const char *sysroot);
/* The CPU and disk limits of our cgroups as text (v1: cfs quota/period,
 * blkio read throttles; v2: cpu.max, io.max), for the profile cache key:
 * measured rates depend on them. Empty when there are none. */
/* The CPU time our cgroups allow: cores = quota / period, the smallest over
 * the cgroup and its ancestors (v1 cpu.cfs_quota_us, v2 cpu.max); -1 and -1
 * when there is no quota. */
void hr_prof_read_cpu_quota(const char *sysroot, double *cores, double *period_ms);
void hr_prof_cg_limits_key(char *out, size_t cap, const char *sysroot);
double hr_prof_read_load(const char *sysroot); /* 1-minute load average; -1 unknown */
int hr_prof_read_gpus(char gpus[][64], int max, const char *sysroot);
void hr_prof_topo_sysfs(hr_prof_topo *t, const char *sysroot);
void hr_prof_topo_unknown(hr_prof_topo *t);

/* topo.c: hwloc. Returns 0 or a negative code (t left unknown). */
int hr_prof_topo_hwloc(hr_prof_topo *t);

/* disk.c */
void hr_prof_disk_unknown(hr_prof_disk *dk);
/* Mount point, file system, block device of path (no timing). */
void hr_prof_disk_info(hr_prof_disk *dk, const char *path, const char *sysroot);
/* Timed reads of the file itself (never writes). */
void hr_prof_disk_measure(hr_prof_disk *dk, const char *path, bool quick);

/* cpu.c: kernel rates, memory bandwidth, op costs. Fills d->rates,
 * d->opcosts, d->membw_*, d->kv_copy_gbs, d->eltwise. */
int hr_prof_cpu_measure(hr_prof_device *d, const int *types, int n_types, const int *threads,
                        int n_threads, int64_t row_len, int64_t ffn_len, bool quick,
                        char err[HR_ERR_LEN]);

#endif
