/* stream.c - weights used in place from the read-only mapping: after a
 * window is computed, madvise(WILLNEED) the next window (next round, wrapping
 * to the next token) so disk reads overlap the rest of the ring; optionally
 * release the finished window (MADV_COLD, else MADV_DONTNEED); residency of
 * this device's windows measured with mincore. */
#include "agent/agent-impl.h"

#include "common/log.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t hr_page(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

void hr_stream_windows(hr_agent *a) {
    hr_local_plan *lp = &a->lp;
    for (int r = 0; r < HR_AGENT_MAX_K; r++)
        lp->win_off[r] = lp->win_len[r] = 0;
    if (lp->w <= 0)
        return;
    for (int r = 0; r < lp->k && r < HR_AGENT_MAX_K; r++) {
        int b = r * lp->W + lp->offset, e = b + lp->w;
        uint64_t b0 = 0, e0 = 0, b1 = 0, e1 = 0;
        if (hr_gguf_layer_range(a->g, b, &b0, &e0) || hr_gguf_layer_range(a->g, e - 1, &b1, &e1))
            continue;
        uint64_t lo = b0 < b1 ? b0 : b1, hi = e0 > e1 ? e0 : e1;
        uint64_t pg = hr_page();
        lo = lo / pg * pg;
        lp->win_off[r] = lo;
        lp->win_len[r] = hi - lo;
    }
}

static void hr_advise(hr_agent *a, int r, int advice) {
    const hr_local_plan *lp = &a->lp;
    if (r < 0 || r >= lp->k || lp->win_len[r] == 0)
        return;
    char *base = (char *)hr_gguf_base(a->g);
    if (madvise(base + lp->win_off[r], lp->win_len[r], advice) != 0)
        HR_LOG_DEBUG("stream", "madvise(%d) on window %d failed", advice, r);
}

void hr_stream_after(hr_agent *a, int round) {
    const hr_local_plan *lp = &a->lp;
    if (lp->w <= 0)
        return;
    if (lp->release && lp->k > 1) {
#ifdef MADV_COLD
        hr_advise(a, round, MADV_COLD);
#else
        hr_advise(a, round, MADV_DONTNEED);
#endif
    }
    if (lp->prefetch)
        hr_advise(a, (round + 1) % lp->k, MADV_WILLNEED);
}

double hr_stream_resident(hr_agent *a) {
    const hr_local_plan *lp = &a->lp;
    size_t pg = hr_page(), total = 0, res = 0;
    const char *base = hr_gguf_base(a->g);
    unsigned char vec[4096];
    for (int r = 0; r < lp->k && r < HR_AGENT_MAX_K; r++) {
        for (uint64_t off = 0; off < lp->win_len[r]; off += sizeof vec * pg) {
            uint64_t len = lp->win_len[r] - off;
            if (len > sizeof vec * pg)
                len = sizeof vec * pg;
            size_t np = (size_t)((len + pg - 1) / pg);
            if (mincore((void *)(base + lp->win_off[r] + off), len, vec) != 0)
                return -1.0;
            for (size_t i = 0; i < np; i++)
                res += vec[i] & 1;
            total += np;
        }
    }
    return total ? (double)res / (double)total : 1.0;
}
