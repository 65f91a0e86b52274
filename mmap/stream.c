/* stream.c - layer-window byte ranges, read-ahead, release and residency
 * over the read-only mapping of an opened GGUF file (see stream.h). The
 * layer spans come from the parsed file (gguf-impl.h); the rest is
 * madvise/mincore on page-aligned sub-ranges of the mapping. */
#include "mmap/stream.h"

#include "common/log.h"
#include "mmap/gguf-impl.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TAG "stream"

static uint64_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uint64_t)p : 4096;
}

int hr_stream_window_range(const hr_gguf *g, int layer_begin, int layer_end, uint64_t *off,
                           uint64_t *len) {
    if (!g || !off || !len || layer_begin < 0 || layer_end <= layer_begin)
        return HR_EINVAL;
    *off = *len = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int64_t i = 0; i < g->n_spans; i++) {
        const hr_gguf_span *s = &g->spans[i];
        if (s->layer < layer_begin || s->layer >= layer_end)
            continue;
        if (s->begin < lo)
            lo = s->begin;
        if (s->end > hi)
            hi = s->end;
    }
    if (lo >= hi)
        return HR_ENOENT;
    lo -= lo % page_size();
    *off = lo;
    *len = hi - lo;
    return 0;
}

/* Clamps [off, off + len) to the file and widens its start to a page:
 * *start (page-aligned) and *n bytes. 0, or HR_EINVAL / HR_ERANGE. */
static int page_range(const hr_gguf *g, uint64_t off, uint64_t len, uint64_t *start, uint64_t *n) {
    if (!g || !g->mapped)
        return HR_EINVAL;
    *start = *n = 0;
    if (len == 0)
        return 0;
    if (off >= g->size)
        return HR_ERANGE;
    uint64_t end = len > g->size - off ? g->size : off + len;
    *start = off - off % page_size();
    *n = end - *start;
    return 0;
}

static int advise(const hr_gguf *g, uint64_t off, uint64_t len, int advice, const char *what) {
    uint64_t start, n;
    int rc = page_range(g, off, len, &start, &n);
    if (rc || n == 0)
        return rc;
    if (madvise((void *)(g->base + start), (size_t)n, advice) != 0) {
        HR_LOG_DEBUG(TAG, "madvise(%s) of [%" PRIu64 ", +%" PRIu64 ") failed", what, start, n);
        return HR_EIO;
    }
    return 0;
}

int hr_stream_prefetch(const hr_gguf *g, uint64_t off, uint64_t len) {
    return advise(g, off, len, MADV_WILLNEED, "WILLNEED");
}

int hr_stream_release(const hr_gguf *g, uint64_t off, uint64_t len) {
#ifdef MADV_COLD
    return advise(g, off, len, MADV_COLD, "COLD");
#else
    return advise(g, off, len, MADV_DONTNEED, "DONTNEED");
#endif
}

int hr_stream_random(const hr_gguf *g, uint64_t off, uint64_t len, bool random) {
    int rc = random ? advise(g, off, len, MADV_RANDOM, "RANDOM")
                    : advise(g, off, len, MADV_NORMAL, "NORMAL");
    /* a fault in a huge range reads its aligned 2 MiB whatever MADV_RANDOM
     * says: a range read in scattered pieces goes back to small pages */
    return rc ? rc : hr_stream_small(g, off, len, random);
}

int hr_stream_small(const hr_gguf *g, uint64_t off, uint64_t len, bool small) {
    if (!g || !g->mapped)
        return HR_EINVAL;
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    if (g->huge)
        return small ? advise(g, off, len, MADV_NOHUGEPAGE, "NOHUGEPAGE")
                     : advise(g, off, len, MADV_HUGEPAGE, "HUGEPAGE");
#endif
    return page_range(g, off, len, &(uint64_t){0}, &(uint64_t){0});
}

bool hr_stream_huge(const hr_gguf *g) { return g && g->mapped && g->huge; }

double hr_stream_residency(const hr_gguf *g, const uint64_t *off, const uint64_t *len, int n) {
    if (!g || !g->mapped || n < 0 || (n > 0 && (!off || !len)))
        return -1.0;
    uint64_t pg = page_size(), total = 0, res = 0;
    unsigned char vec[4096]; /* one byte per page: mincore in chunks */
    for (int r = 0; r < n; r++) {
        uint64_t start, bytes;
        if (page_range(g, off[r], len[r], &start, &bytes) != 0)
            continue; /* past the end: no pages */
        for (uint64_t at = 0; at < bytes; at += sizeof vec * pg) {
            uint64_t chunk = bytes - at < sizeof vec * pg ? bytes - at : sizeof vec * pg;
            size_t np = (size_t)((chunk + pg - 1) / pg);
            if (mincore((void *)(g->base + start + at), (size_t)chunk, vec) != 0)
                return -1.0;
            for (size_t i = 0; i < np; i++)
                res += vec[i] & 1;
            total += np;
        }
    }
    return total ? (double)res / (double)total : 1.0;
}

/* ---- resident / streamed split ---- */

/* Resident bytes when every window streams min(len, s). */
static double split_kept(const hr_stream_part *p, int n, uint64_t s) {
    double keep = 0;
    for (int i = 0; i < n; i++)
        keep += (double)(p[i].len - (p[i].len < s ? p[i].len : s));
    return keep;
}

int hr_stream_split_resident(hr_stream_part *parts, int n, double resident) {
    if (!parts || n < 1)
        return HR_EINVAL;
    uint64_t pg = page_size(), max = 0;
    for (int i = 0; i < n; i++)
        max = parts[i].len > max ? parts[i].len : max;
    uint64_t lo = 0, hi = max; /* smallest s with split_kept(s) <= resident (non-increasing) */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (split_kept(parts, n, mid) <= resident)
            hi = mid;
        else
            lo = mid + 1;
    }
    for (int i = 0; i < n; i++) {
        hr_stream_part *p = &parts[i];
        uint64_t t = p->len < lo ? p->len : lo, end = p->off + p->len;
        uint64_t a = end - t, b = end - end % pg;
        a -= a % pg; /* the kept head may shrink by a page, never grow */
        if (a < p->off)
            a = p->off;
        p->stream_off = p->stream_len = 0;
        p->keep_len = t > 0 ? a - p->off : p->len; /* the last partial page stays, unpinned */
        if (t > 0 && a < b) {
            p->stream_off = a;
            p->stream_len = b - a;
        }
    }
    return 0;
}

int64_t hr_stream_mapped(const hr_gguf *g, const uint64_t *off, const uint64_t *len, int n) {
    if (!g || !g->mapped || n < 0 || (n > 0 && (!off || !len)))
        return -1;
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f)
        return -1;
    uint64_t pg = page_size(), ent[512];
    int64_t mapped = 0;
    for (int r = 0; r < n && mapped >= 0; r++) {
        uint64_t start, bytes;
        if (page_range(g, off[r], len[r], &start, &bytes) != 0 || bytes == 0)
            continue;
        uint64_t vp = (uint64_t)(uintptr_t)(g->base + start) / pg, np = (bytes + pg - 1) / pg;
        for (uint64_t at = 0; at < np;) {
            size_t want = np - at < 512 ? (size_t)(np - at) : 512;
            if (fseeko(f, (off_t)((vp + at) * sizeof ent[0]), SEEK_SET) != 0 ||
                fread(ent, sizeof ent[0], want, f) != want) {
                mapped = -1;
                break;
            }
            for (size_t i = 0; i < want; i++)
                mapped += (ent[i] >> 63) & 1 ? (int64_t)pg : 0; /* bit 63: present */
            at += want;
        }
    }
    fclose(f);
    return mapped;
}

/* Drops the file's cached pages of the range that no process maps. After
 * MADV_PAGEOUT some pages can still be cached (the kernel skips pages not
 * yet on its LRU lists, e.g. ones faulted in a moment ago); left there, the
 * fault-around of the next layer's first touch maps them again (the cached
 * pages of its aligned 64 KiB block), and they stay mapped behind the
 * computing thread. The page cache is what a memory limit charges, so
 * they go. */
static void uncache(const hr_gguf *g, uint64_t off, uint64_t len) {
    uint64_t start, n;
    if (g->fd < 0 || page_range(g, off, len, &start, &n) != 0 || n == 0)
        return;
    int e = posix_fadvise(g->fd, (off_t)start, (off_t)n, POSIX_FADV_DONTNEED);
    if (e != 0)
        HR_LOG_DEBUG(TAG, "fadvise(DONTNEED) of [%" PRIu64 ", +%" PRIu64 ") failed: %s", start, n,
                     strerror(e));
}

int hr_stream_evict(const hr_gguf *g, uint64_t off, uint64_t len) {
    int rc = 0;
#ifdef MADV_PAGEOUT
    /* reclaim the pages now (clean file pages no other process maps are
     * simply dropped): under a memory limit the next tail's reads then
     * find room at once, instead of the kernel choosing what to reclaim,
     * which can be pages read ahead and not computed on yet */
    if (getenv("HEARTH_EVICT_COLD") == NULL && advise(g, off, len, MADV_PAGEOUT, "PAGEOUT") == 0) {
        rc = advise(g, off, len, MADV_DONTNEED, "DONTNEED");
        if (rc == 0)
            uncache(g, off, len);
        return rc;
    }
#endif
#ifdef MADV_COLD
    rc = advise(g, off, len, MADV_COLD, "COLD");
#endif
    int rc2 = advise(g, off, len, MADV_DONTNEED, "DONTNEED");
    return rc ? rc : rc2;
}

/* Reads (faults) one byte of every page of [start, start + n). */
static void touch(const hr_gguf *g, uint64_t start, uint64_t n) {
    volatile const uint8_t *p = g->base + start;
    uint8_t sum = 0;
    for (uint64_t at = 0; at < n; at += page_size())
        sum ^= p[at];
    (void)sum;
}

/* hr_stream_fetch, or with will_need false the faults alone read it. */
static int bring_in(const hr_gguf *g, uint64_t off, uint64_t len, bool will_need) {
    uint64_t start, n;
    int rc = page_range(g, off, len, &start, &n);
    if (rc || n == 0)
        return rc;
    if (will_need)
        rc = advise(g, start, n, MADV_WILLNEED, "WILLNEED");
    touch(g, start, n);
    return rc;
}

int hr_stream_fetch(const hr_gguf *g, uint64_t off, uint64_t len) {
    return bring_in(g, off, len, true);
}

int hr_stream_keep(const hr_gguf *g, uint64_t off, uint64_t len) {
    return bring_in(g, off, len, !hr_stream_huge(g));
}

static int lock_range(const hr_gguf *g, uint64_t off, uint64_t len, bool lock) {
    uint64_t start, n;
    int rc = page_range(g, off, len, &start, &n);
    if (rc || n == 0)
        return rc;
    void *p = (void *)(g->base + start);
    if ((lock ? mlock(p, (size_t)n) : munlock(p, (size_t)n)) != 0) {
        HR_LOG_DEBUG(TAG, "%s of [%" PRIu64 ", +%" PRIu64 ") refused", lock ? "mlock" : "munlock",
                     start, n);
        return HR_EDENIED;
    }
    return 0;
}

int hr_stream_lock(const hr_gguf *g, uint64_t off, uint64_t len) {
    return lock_range(g, off, len, true);
}

int hr_stream_unlock(const hr_gguf *g, uint64_t off, uint64_t len) {
    return lock_range(g, off, len, false);
}

static int64_t io_read_bytes(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[128];
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}

int64_t hr_stream_io_read_bytes(void) { return io_read_bytes("/proc/self/io"); }

int64_t hr_stream_thread_io_read_bytes(void) { return io_read_bytes("/proc/thread-self/io"); }
