/* stream.c - layer-window byte ranges, read-ahead, release and residency
 * over the read-only mapping of an opened GGUF file (see stream.h). The
 * layer spans come from the parsed file (gguf-impl.h); the rest is
 * madvise/mincore on page-aligned sub-ranges of the mapping. */
#include "mmap/stream.h"

#include "common/log.h"
#include "mmap/gguf-impl.h"

#include <inttypes.h>
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
