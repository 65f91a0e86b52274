/* disk.c - read throughput of the file system holding the model, measured
 * by reading the model file itself (never by writing scratch data):
 * sequential 1 MiB reads and random 4 KiB reads with O_DIRECT (page cache
 * bypassed; where O_DIRECT is refused, the range is evicted with
 * posix_fadvise first), and page faults on an evicted range of a read-only
 * mapping, which is what a non-resident layer window costs during decode.
 * The mmap test evicts at most 128 MiB of the file (2 chunks of 64 MiB) from
 * the page cache; a later run reads those pages from disk once. Time our
 * threads spent waiting for a CPU (other programs) is not charged to the
 * disk. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define HR_DISK_BLOCK (1u << 20) /* sequential read size */
#define HR_DISK_RAND 4096u       /* random read size */

void hr_prof_disk_unknown(hr_prof_disk *dk) {
    memset(dk, 0, sizeof *dk);
    dk->rotational = dk->read_ahead_kb = -1;
    dk->seq_mbs = dk->rand_mbs = dk->rand_iops = dk->mmap_mbs = dk->read_cpu_ms_mb = -1.0;
    hr_prof_strlcpy(dk->method, "none", sizeof dk->method);
}

void hr_prof_disk_info(hr_prof_disk *dk, const char *path, const char *sysroot) {
    hr_prof_disk_unknown(dk);
    if (!path)
        return;
    char real[PATH_MAX];
    if (!realpath(path, real))
        hr_prof_strlcpy(real, path, sizeof real);
    hr_prof_strlcpy(dk->path, real, sizeof dk->path);
    struct stat st;
    if (stat(real, &st) != 0) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot stat %s: %s", real, strerror(errno));
        return;
    }
    unsigned maj = major(st.st_dev), min = minor(st.st_dev);
    /* longest mount point with this device that prefixes the path */
    char mi[512];
    hr_prof_path(mi, sizeof mi, sysroot, "/proc/self/mountinfo");
    FILE *f = fopen(mi, "r");
    if (!f) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: file system of %s unknown", mi, real);
    } else {
        char line[2048];
        size_t best = 0;
        while (fgets(line, sizeof line, f)) {
            unsigned a, b;
            char mnt[512];
            if (sscanf(line, "%*s %*s %u:%u %*s %511s", &a, &b, mnt) != 3 || a != maj || b != min)
                continue;
            size_t ml = strlen(mnt);
            bool prefix = strcmp(mnt, "/") == 0 ||
                          (strncmp(real, mnt, ml) == 0 && (real[ml] == '/' || real[ml] == 0));
            if (!prefix || (best && ml <= best))
                continue;
            best = ml ? ml : 1;
            hr_prof_strlcpy(dk->mount, mnt, sizeof dk->mount);
            const char *dash = strstr(line, " - ");
            char fstype[32] = "", source[256] = "";
            if (dash && sscanf(dash + 3, "%31s %255s", fstype, source) >= 1)
                hr_prof_strlcpy(dk->fs_type, fstype, sizeof dk->fs_type);
        }
        fclose(f);
    }
    /* block device: /sys/dev/block/MAJ:MIN -> .../block/<disk>[/<partition>] */
    char link[512], target[512];
    snprintf(link, sizeof link, "%s/sys/dev/block/%u:%u", sysroot ? sysroot : "", maj, min);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return; /* tmpfs, overlay, network file systems: no block device */
    target[n] = 0;
    const char *base = strrchr(target, '/');
    hr_prof_strlcpy(dk->device, base ? base + 1 : target, sizeof dk->device);
    char p2[700];
    int64_t v;
    snprintf(p2, sizeof p2, "%s/queue/rotational", link);
    if (hr_prof_read_i64(p2, &v) != 0) {
        snprintf(p2, sizeof p2, "%s/../queue/rotational", link); /* a partition */
        if (hr_prof_read_i64(p2, &v) != 0)
            v = -1;
    }
    dk->rotational = (int)v;
    snprintf(p2, sizeof p2, "%s/queue/read_ahead_kb", link);
    if (hr_prof_read_i64(p2, &v) != 0) {
        snprintf(p2, sizeof p2, "%s/../queue/read_ahead_kb", link);
        if (hr_prof_read_i64(p2, &v) != 0)
            v = -1;
    }
    dk->read_ahead_kb = (int)v;
}

/* Elapsed seconds since t0 less the time this thread spent waiting for a
 * CPU since w0 (other programs or a CPU quota, not the disk; not the
 * process's other threads' waits: hr_prof_thread_run_delay_ns): never
 * below half of it. */
static double hr_io_elapsed(double t0, int64_t w0) {
    double dt = hr_now_s() - t0;
    int64_t w1 = hr_prof_thread_run_delay_ns();
    double wait = w0 >= 0 && w1 >= w0 ? (double)(w1 - w0) * 1e-9 : 0.0;
    return dt - wait > 0.5 * dt ? dt - wait : 0.5 * dt;
}

static uint64_t hr_rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

/* Reads blocks of bs sequentially from *pos, wrapping to 0 at span (a
 * block-aligned length within the file), until max_bytes are read or the
 * deadline passes; evicts each block first when the reads are not direct.
 * Advances *pos; returns bytes read or -1. */
static long long hr_read_seq(int fd, void *buf, uint64_t *pos, uint64_t span, size_t bs,
                             bool direct, uint64_t max_bytes, double deadline) {
    long long got = 0;
    while ((uint64_t)got < max_bytes) {
        if (*pos + bs > span)
            *pos = 0;
        if (!direct)
            posix_fadvise(fd, (off_t)*pos, (off_t)bs, POSIX_FADV_DONTNEED);
        ssize_t r = pread(fd, buf, bs, (off_t)*pos);
        if (r < 0)
            return -1;
        if (r == 0) { /* the file ended early (shrunk meanwhile): wrap once, or stop */
            if (*pos == 0)
                break;
            *pos = 0;
            continue;
        }
        got += r;
        *pos += (uint64_t)r;
        if (hr_now_s() > deadline)
            break;
    }
    return got;
}

/* Faults one evicted chunk [off, off+len) of a fresh read-only mapping in
 * page order (default advice: the kernel's read-around applies, as during
 * decode). Returns MB/s over its second half, or -1 when the chunk stayed
 * cached (pages mapped elsewhere, e.g. by a running agent) or could not be
 * mapped; *cpu_ms_mb the thread's CPU time per MB faulted over all of it
 * and its eviction afterwards (-1 unknown). */
static double hr_mmap_chunk(int fd, uint64_t off, uint64_t len, long pg, double budget_s,
                            double *cpu_ms_mb) {
    *cpu_ms_mb = -1.0;
    posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
    const volatile unsigned char *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
    if (map == MAP_FAILED)
        return -1.0;
    size_t n_pages = (size_t)(len / (uint64_t)pg), absent = 0;
    unsigned char *vec = malloc(n_pages);
    double rate = -1.0;
    if (vec && mincore((void *)map, len, vec) == 0)
        for (size_t i = 0; i < n_pages; i++)
            absent += !(vec[i] & 1);
    if (vec && absent * 2 >= n_pages) {
        /* the rate counts the second half of the chunk only: a throttled
         * disk (cgroup blkio) lets a burst through at first */
        unsigned sum = 0;
        size_t faulted = 0, i = 0, half = n_pages / 2, f_half = 0;
        int64_t w0 = hr_prof_thread_run_delay_ns();
        double t0 = hr_now_s(), t_half = t0, c0 = hr_prof_cpu_s(true);
        while (i < n_pages) {
            size_t end = i + 256 < n_pages ? i + 256 : n_pages; /* 1 MiB of 4 KiB pages */
            for (; i < end; i++) {
                sum += map[i * (size_t)pg];
                faulted += !(vec[i] & 1);
            }
            if (i >= half && f_half == 0 && faulted > 0) {
                f_half = faulted;
                w0 = hr_prof_thread_run_delay_ns();
                t_half = hr_now_s();
            }
            if (hr_now_s() - t0 > budget_s)
                break; /* slow disk: enough of a sample */
        }
        double c1 = hr_prof_cpu_s(true);
        /* dropping the pages again, as a streaming device's pump does
         * behind its computing thread (mmap/stream.c hr_stream_evict), is
         * CPU time of the same share */
#ifdef MADV_PAGEOUT
        madvise((void *)map, len, MADV_PAGEOUT);
#endif
        madvise((void *)map, len, MADV_DONTNEED);
        posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
        double c2 = hr_prof_cpu_s(true);
        if (c0 >= 0 && c1 > c0 && c2 >= c1 && faulted > 0)
            *cpu_ms_mb = (c2 - c0) * 1e3 / ((double)faulted * (double)pg / 1e6);
        double dt = hr_io_elapsed(t_half, w0);
        if (dt > 0 && faulted > f_half && f_half > 0)
            rate = (double)(faulted - f_half) * (double)pg / dt / 1e6;
        HR_LOG_DEBUG(HR_PROF_TAG, "mmap faults: %zu pages, %zu in the last %.3f s (sum %u)",
                     faulted, faulted - f_half, dt, sum);
    }
    free(vec);
    munmap((void *)map, len);
    return rate;
}

/* Median fault rate over chunks spread through the file (1 x 48 MiB quick,
 * 2 x 64 MiB otherwise: long enough for the kernel's read-ahead to reach
 * its streaming rate, as it does over a window of layers), MB/s; -1 when
 * no chunk could be evicted. */
static double hr_mmap_rate(const char *path, uint64_t size, bool quick, double *cpu_ms_mb) {
    *cpu_ms_mb = -1.0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1.0;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0)
        pg = 4096;
    int n_chunks = quick ? 1 : 2, n = 0;
    uint64_t len = quick ? (48u << 20) : (64u << 20);
    if (len > size / (uint64_t)(n_chunks + 1))
        len = (size / (uint64_t)(n_chunks + 1)) & ~(uint64_t)(pg - 1);
    double rates[2], cpus[2];
    int n_cpu = 0;
    for (int k = 0; k < n_chunks && len > 0; k++) {
        uint64_t off = (size / (uint64_t)(n_chunks + 1) * (uint64_t)(k + 1)) & ~(uint64_t)(pg - 1);
        if (off + len > size)
            continue;
        double cpu;
        double r = hr_mmap_chunk(fd, off, len, pg, quick ? 0.4 : 0.6, &cpu);
        if (r > 0)
            rates[n++] = r;
        if (r > 0 && cpu > 0)
            cpus[n_cpu++] = cpu;
    }
    close(fd);
    if (n == 0)
        HR_LOG_WARN(HR_PROF_TAG,
                    "could not evict %s from the page cache (mapped elsewhere?): mmap read "
                    "speed unknown",
                    path);
    if (n_cpu)
        *cpu_ms_mb = hr_prof_median(cpus, n_cpu);
    return n ? hr_prof_median(rates, n) : -1.0;
}

void hr_prof_disk_measure(hr_prof_disk *dk, const char *path, bool quick) {
    struct stat pst;
    if (stat(path, &pst) != 0 || !S_ISREG(pst.st_mode)) {
        /* never open a FIFO or device: it could block or read forever */
        HR_LOG_WARN(HR_PROF_TAG, "%s is not a regular file: disk speed unknown", path);
        return;
    }
    int fd = open(path, O_RDONLY | O_DIRECT);
    bool direct = fd >= 0;
    if (!direct)
        fd = open(path, O_RDONLY);
    if (fd < 0) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot open %s: disk speed unknown (%s)", path, strerror(errno));
        return;
    }
    struct stat st;
    void *buf = NULL;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)(4 * HR_DISK_RAND) ||
        posix_memalign(&buf, 4096, HR_DISK_BLOCK) != 0) {
        HR_LOG_WARN(HR_PROF_TAG, "%s is too small or unreadable: disk speed unknown", path);
        close(fd);
        return;
    }
    uint64_t size = (uint64_t)st.st_size;
    /* random 4 KiB reads first, queue depth 1, over the whole file: the
     * sequential test then ends right before the mmap test, so a throttled
     * disk (cgroup blkio, io.max) has no unspent allowance left for it */
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)st.st_ino;
    int max_reads = quick ? 300 : 2000, n = 0;
    uint64_t n_slots = size / HR_DISK_RAND;
    int64_t w0 = hr_prof_thread_run_delay_ns();
    double t0 = hr_now_s();
    double rb = quick ? 0.1 : 0.3;
    for (; n < max_reads; n++) {
        uint64_t o = (hr_rng(&rng) % n_slots) * HR_DISK_RAND;
        if (!direct)
            posix_fadvise(fd, (off_t)o, HR_DISK_RAND, POSIX_FADV_DONTNEED);
        if (pread(fd, buf, HR_DISK_RAND, (off_t)o) < 0) {
            if (n == 0 && direct && errno == EINVAL) {
                /* this file system takes the O_DIRECT flag at open but not the read */
                close(fd);
                fd = open(path, O_RDONLY);
                direct = false;
                if (fd < 0)
                    break;
                n--;
                continue;
            }
            break;
        }
        if (hr_now_s() - t0 > rb)
            break;
    }
    double dt = hr_io_elapsed(t0, w0);
    if (n > 0 && dt > 0) {
        dk->rand_iops = (double)n / dt;
        dk->rand_mbs = dk->rand_iops * HR_DISK_RAND / 1e6;
    }
    /* sequential 1 MiB reads from the middle of the file (where the layers
     * are), wrapping around: first a warm-up that spends a throttle's burst
     * allowance (blk-throttle lets about one slice, 100 ms, of its rate
     * through at once), then the measured part, long enough to be the
     * sustained rate */
    size_t bs = size >= HR_DISK_BLOCK ? HR_DISK_BLOCK : (size_t)(size & ~(uint64_t)4095);
    uint64_t span = size & ~(uint64_t)(bs - 1);
    long long got = -1;
    if (fd >= 0) {
        uint64_t pos = (size / 2) & ~(uint64_t)(bs - 1);
        got = hr_read_seq(fd, buf, &pos, span, bs, direct, 32u << 20, hr_now_s() + 0.1);
        if (got >= 0) {
            double budget = quick ? 0.2 : 0.5;
            uint64_t cap = quick ? (256ull << 20) : (1ull << 30);
            w0 = hr_prof_thread_run_delay_ns();
            t0 = hr_now_s();
            got = hr_read_seq(fd, buf, &pos, span, bs, direct, cap, t0 + budget);
            dt = hr_io_elapsed(t0, w0);
        }
    }
    if (got > 0 && dt > 0) {
        hr_prof_strlcpy(dk->method, direct ? "direct" : "evicted", sizeof dk->method);
        dk->seq_mbs = (double)got / dt / 1e6;
    } else {
        HR_LOG_WARN(HR_PROF_TAG, "reading %s failed: sequential disk speed unknown", path);
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    dk->mmap_mbs = hr_mmap_rate(path, size, quick, &dk->read_cpu_ms_mb);
}
