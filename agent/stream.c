/* stream.c - this device's windows of weights, used in place from the
 * read-only mapping: which file bytes each round's window is, and after a
 * window is computed, read the next one ahead (next round, wrapping to the
 * next token) so disk reads overlap the rest of the ring, optionally
 * release the finished one; residency of the windows. The round logic
 * lives here, the madvise / mincore calls in mmap/stream.h. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "mmap/stream.h"

#define TAG "stream"

void hr_node_windows(const hr_agent *a, hr_local_plan *lp) {
    for (int r = 0; r < HR_AGENT_MAX_K; r++)
        lp->win_off[r] = lp->win_len[r] = 0;
    if (lp->w <= 0)
        return;
    for (int r = 0; r < lp->k && r < HR_AGENT_MAX_K; r++) {
        int b = r * lp->W + lp->offset;
        if (hr_stream_window_range(a->g, b, b + lp->w, &lp->win_off[r], &lp->win_len[r]))
            lp->win_off[r] = lp->win_len[r] = 0;
    }
}

void hr_node_after_window(const hr_agent *a, const hr_local_plan *lp, int round) {
    if (lp->w <= 0 || lp->k < 1)
        return;
    if (lp->release && lp->k > 1 && round >= 0 && round < lp->k &&
        hr_stream_release(a->g, lp->win_off[round], lp->win_len[round]) != 0)
        HR_LOG_DEBUG(TAG, "release of window %d failed", round);
    int next = (round + 1) % lp->k;
    if (lp->prefetch && hr_stream_prefetch(a->g, lp->win_off[next], lp->win_len[next]) != 0)
        HR_LOG_DEBUG(TAG, "prefetch of window %d failed", next);
}

double hr_node_resident(const hr_agent *a, const hr_local_plan *lp) {
    int n = lp->k < HR_AGENT_MAX_K ? lp->k : HR_AGENT_MAX_K;
    return hr_stream_residency(a->g, lp->win_off, lp->win_len, n > 0 ? n : 0);
}
