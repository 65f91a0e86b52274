/* stream.c - this device's windows of weights, used in place from the
 * read-only mapping, and the streamer thread that keeps them where the
 * plan's disk model says they are.
 *
 * The scheme (sched/sched.h, "pinned" reclaim): when the device's k
 * windows fit the room it has for weights (hr_prof_stream_room of the
 * same budget its admission check uses) everything stays resident and
 * nothing is read per token. Otherwise hr_stream_split keeps a head of
 * every window resident (mlock where the kernel allows it, else read in
 * and never dropped) and streams the tail: after window r is computed the
 * streamer thread drops r's tail (MADV_COLD + MADV_DONTNEED) and reads
 * window r+1's tail in (WILLNEED, then touched) while the rest of the ring
 * computes. The compute thread only posts "window r done" (a mutex and a
 * condition variable): no madvise in the send path, none under plan_mu.
 *
 * Measurement: read_bytes of /proc/self/io over the windows computed,
 * sampled by the control loop's timer (hr_node_io_sample), from the moment
 * the streamer finished warming the plan's resident part.
 *
 * HEARTH_STREAM=legacy brings back the earlier behaviour for comparisons
 * (whole windows: WILLNEED of the next one and, where the plan says
 * release, MADV_COLD of the finished one, on the computing thread);
 * HEARTH_MLOCK=0 keeps the resident part by advice only. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "mmap/stream.h"

#include <stdlib.h>
#include <string.h>

#define TAG "stream"

struct hr_streamer {
    const hr_gguf *g;
    pthread_t th;
    bool started;
    bool legacy;    /* HEARTH_STREAM=legacy */
    bool try_mlock; /* HEARTH_MLOCK != 0 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* ---- mu ---- */
    bool stop;
    uint64_t gen; /* plans handed over */
    int n;        /* windows (k), 0 = no layers */
    hr_stream_part part[HR_AGENT_MAX_K];
    bool split;    /* some window streams a tail */
    bool prefetch; /* read the next tail ahead */
    bool whole;    /* --release on a plan that fits: drop whole windows (as before) */
    uint32_t done; /* bit r: window r computed, drop its tail */
    int want;      /* window to read ahead, -1 none */
    hr_stream_stats st;
    bool rebase; /* the warm-up is over: measure from here */
    /* ---- measurement: the sampling thread alone (hr_node_io_sample) ---- */
    atomic_ullong rounds; /* windows computed (any thread) */
    int64_t last_io;
    uint64_t last_rounds;
    bool active_prev;
    double acc_io, acc_rounds;
};

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

/* The earlier scheme, on the calling thread (HEARTH_STREAM=legacy). */
static void hr_after_window_legacy(const hr_agent *a, const hr_local_plan *lp, int round) {
    if (lp->release && lp->k > 1 && round >= 0 && round < lp->k &&
        hr_stream_release(a->g, lp->win_off[round], lp->win_len[round]) != 0)
        HR_LOG_DEBUG(TAG, "release of window %d failed", round);
    int next = (round + 1) % lp->k;
    if (lp->prefetch && hr_stream_prefetch(a->g, lp->win_off[next], lp->win_len[next]) != 0)
        HR_LOG_DEBUG(TAG, "prefetch of window %d failed", next);
}

void hr_node_after_window(const hr_agent *a, const hr_local_plan *lp, int round) {
    hr_streamer *s = a->streamer;
    if (lp->w <= 0 || lp->k < 1 || round < 0 || round >= lp->k || round >= HR_AGENT_MAX_K)
        return;
    if (!s || s->legacy) {
        if (s)
            atomic_fetch_add(&s->rounds, 1);
        hr_after_window_legacy(a, lp, round);
        return;
    }
    atomic_fetch_add(&s->rounds, 1);
    pthread_mutex_lock(&s->mu);
    if (s->split || s->whole) {
        s->done |= 1u << round;
        s->want = (round + 1) % lp->k;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

double hr_node_resident(const hr_agent *a, const hr_local_plan *lp) {
    int n = lp->k < HR_AGENT_MAX_K ? lp->k : HR_AGENT_MAX_K;
    return hr_stream_residency(a->g, lp->win_off, lp->win_len, n > 0 ? n : 0);
}

/* ---- the streamer thread ---- */

/* A new plan's parts: unpins the old resident parts, pins (or reads in)
 * the new ones and reads the first tail. Returns 1 when every resident
 * part is mlock'ed, 0 otherwise. */
static int hr_streamer_warm(hr_streamer *s, const hr_stream_part *part, int n, bool split,
                            bool prefetch, hr_stream_part *locked, int *n_locked) {
    for (int i = 0; i < *n_locked; i++)
        hr_stream_unlock(s->g, locked[i].off, locked[i].keep_len);
    *n_locked = 0;
    if (!split) { /* everything stays: ask for it once */
        for (int i = 0; i < n; i++)
            hr_stream_prefetch(s->g, part[i].off, part[i].len);
        return 0;
    }
    int all = 1;
    for (int i = 0; i < n; i++) {
        if (part[i].keep_len == 0)
            continue;
        if (s->try_mlock && hr_stream_lock(s->g, part[i].off, part[i].keep_len) == 0) {
            locked[(*n_locked)++] = part[i];
        } else {
            all = 0;
            hr_stream_fetch(s->g, part[i].off, part[i].keep_len);
        }
    }
    if (!all && s->try_mlock && *n_locked < n)
        HR_LOG_INFO(TAG, "mlock refused (no CAP_IPC_LOCK or RLIMIT_MEMLOCK too small): the "
                         "resident part is kept by advice");
    if (prefetch && n > 0 && part[0].stream_len)
        hr_stream_fetch(s->g, part[0].stream_off, part[0].stream_len);
    return all;
}

static void *hr_streamer_main(void *arg) {
    hr_streamer *s = arg;
    hr_stream_part part[HR_AGENT_MAX_K], locked[HR_AGENT_MAX_K];
    int n_locked = 0;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->gen == seen && !s->done && s->want < 0) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        bool fresh = s->gen != seen;
        seen = s->gen;
        int n = s->n, want = s->want;
        uint32_t done = s->done;
        bool split = s->split, whole = s->whole, prefetch = s->prefetch;
        memcpy(part, s->part, sizeof part);
        s->done = 0;
        s->want = -1;
        pthread_mutex_unlock(&s->mu);
        if (fresh) {
            int lk = hr_streamer_warm(s, part, n, split, prefetch, locked, &n_locked);
            pthread_mutex_lock(&s->mu);
            if (s->gen == seen) {
                s->st.locked = lk;
                s->rebase = true;
            }
            pthread_mutex_unlock(&s->mu);
        }
        for (int r = 0; r < n; r++) {
            if (!(done & (1u << r)))
                continue;
            if (split && part[r].stream_len)
                hr_stream_evict(s->g, part[r].stream_off, part[r].stream_len);
            else if (whole)
                hr_stream_release(s->g, part[r].off, part[r].len);
        }
        if (want >= 0 && want < n && prefetch) {
            if (split && part[want].stream_len)
                hr_stream_fetch(s->g, part[want].stream_off, part[want].stream_len);
            else if (whole)
                hr_stream_prefetch(s->g, part[want].off, part[want].len);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n_locked; i++)
        hr_stream_unlock(s->g, locked[i].off, locked[i].keep_len);
    return NULL;
}

int hr_node_streamer_start(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_streamer *s = calloc(1, sizeof *s);
    if (!s)
        return hr_seterr(err, HR_ENOMEM, "out of memory for the streamer");
    s->g = a->g;
    const char *mode = getenv("HEARTH_STREAM"), *ml = getenv("HEARTH_MLOCK");
    s->legacy = mode && strcmp(mode, "legacy") == 0;
    s->try_mlock = !(ml && strcmp(ml, "0") == 0);
    s->want = -1;
    s->st = (hr_stream_stats){.read_round = -1, .stream_round = 0, .pinned = 0, .locked = -1};
    s->last_io = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!s->legacy) {
        if (pthread_create(&s->th, NULL, hr_streamer_main, s) != 0) {
            pthread_mutex_destroy(&s->mu);
            pthread_cond_destroy(&s->cv);
            free(s);
            return hr_seterr(err, HR_ENOMEM, "cannot start the streamer thread");
        }
        s->started = true;
    }
    a->streamer = s;
    return 0;
}

void hr_node_streamer_stop(hr_agent *a) {
    hr_streamer *s = a->streamer;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started)
        pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    a->streamer = NULL;
}

double hr_node_stream_plan(hr_agent *a, const hr_local_plan *lp, double room) {
    hr_streamer *s = a->streamer;
    hr_stream_part part[HR_AGENT_MAX_K];
    memset(part, 0, sizeof part);
    int n = lp->w > 0 ? (lp->k < HR_AGENT_MAX_K ? lp->k : HR_AGENT_MAX_K) : 0;
    for (int r = 0; r < n; r++) {
        part[r].off = lp->win_off[r];
        part[r].len = lp->win_len[r];
    }
    int rc = n > 0 ? hr_stream_split(part, n, room) : 0;
    double total = 0, kept = 0;
    bool split = false;
    for (int r = 0; r < n; r++) {
        total += (double)part[r].stream_len;
        kept += (double)part[r].keep_len;
        split = split || part[r].stream_len > 0;
    }
    if (rc == HR_ERANGE)
        HR_LOG_WARN(TAG,
                    "%s: %d window(s) of %.1f MiB do not fit %.1f MiB and cannot be split "
                    "(k %d): every window is read from disk each round",
                    a->name, n, n ? (double)part[0].len / 1048576.0 : 0, room / 1048576.0, lp->k);
    else if (split)
        HR_LOG_INFO(TAG,
                    "%s: %.1f MiB of %d window(s) kept, %.1f MiB streamed per round (room "
                    "%.1f MiB)",
                    a->name, kept / 1048576.0, n, total / n / 1048576.0, room / 1048576.0);
    if (!s)
        return n ? total / n : 0;
    pthread_mutex_lock(&s->mu);
    s->gen++;
    s->n = n;
    memcpy(s->part, part, sizeof part);
    s->split = split;
    s->prefetch = lp->prefetch;
    s->whole = !split && lp->release && lp->k > 1; /* forced --release on a plan that fits */
    if (a->p.release == 0)                         /* --release off: nothing is ever dropped */
        s->split = s->whole = false;
    s->done = 0;
    s->want = -1;
    s->st.stream_round = s->split && n ? total / n : 0;
    s->st.pinned = s->split ? kept : (double)0;
    for (int r = 0; r < n && !s->split; r++)
        s->st.pinned += (double)part[r].len;
    s->st.locked = s->split ? -1 : 0;
    s->st.read_round = -1;
    s->rebase = s->legacy; /* no warm-up there: measure from the plan on */
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return s->split && n ? total / n : 0;
}

void hr_node_stream_stats(const hr_agent *a, hr_stream_stats *out) {
    hr_streamer *s = a->streamer;
    *out = (hr_stream_stats){.read_round = -1, .locked = -1};
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void hr_node_io_sample(hr_agent *a) {
    hr_streamer *s = a->streamer;
    if (!s)
        return;
    int64_t io = hr_stream_io_read_bytes();
    uint64_t rounds = atomic_load(&s->rounds);
    if (io < 0)
        return;
    pthread_mutex_lock(&s->mu);
    bool rebase = s->rebase;
    s->rebase = false;
    pthread_mutex_unlock(&s->mu);
    if (s->last_io < 0 || rebase) { /* from the end of the warm-up */
        s->acc_io = s->acc_rounds = 0;
        s->active_prev = false;
    } else {
        /* reads trail their window by up to a ring's turn: an interval counts
         * when windows were computed in it or in the one before */
        double d_io = (double)(io - s->last_io), d_r = (double)(rounds - s->last_rounds);
        if (d_r > 0 || s->active_prev) {
            s->acc_io += d_io;
            s->acc_rounds += d_r;
        }
        s->active_prev = d_r > 0;
    }
    s->last_io = io;
    s->last_rounds = rounds;
    if (s->acc_rounds >= 1) {
        pthread_mutex_lock(&s->mu);
        s->st.read_round = s->acc_io / s->acc_rounds;
        pthread_mutex_unlock(&s->mu);
    }
}
