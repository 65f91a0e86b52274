/* pump.c - the thread that moves one device's streamed window tails
 * through a sliding buffer (see stream.h, "the pump"): it pins the
 * resident heads, reads each tail ahead and drops what the computing
 * thread has finished with, never holding more than the buffer of
 * streamed pages mapped at once. */
#include "mmap/stream.h"

#include "common/log.h"
#include "common/sync.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "stream"
#define HR_PUMP_CHUNK ((uint64_t)2 << 20) /* bytes read per step: progress is re-read between */

struct hr_stream_pump {
    const hr_gguf *g;
    uint64_t pg;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* events for the pump */
    pthread_cond_t idle; /* the pump ran out of work (hr_stream_pump_wait) */
    /* ---- mu ---- */
    bool stop;
    uint64_t gen; /* plans handed over */
    int n;
    hr_stream_part part[HR_STREAM_MAX_WINDOWS];
    uint64_t *lstart; /* per window, per layer: first byte (page-aligned); owned */
    int lbase[HR_STREAM_MAX_WINDOWS + 1];
    uint64_t buffer;
    unsigned flags;
    uint64_t done;   /* bit r: window r was computed */
    int want;        /* the window to read next, -1 none */
    int cur_win;     /* the window whose layers are being computed, -1 none */
    int cur_done;    /* layers of cur_win computed */
    uint64_t events; /* events posted (plans, layers, windows) */
    uint64_t seen;   /* ... and handled by the pump */
    bool waiting;    /* the pump sleeps with nothing to do */
    hr_stream_pump_stats st;
};

/* ---- the pump thread's own copy of the plan and its cursor ---- */

typedef struct {
    int n;
    hr_stream_part part[HR_STREAM_MAX_WINDOWS];
    uint64_t *lstart;
    size_t lcap;
    int lbase[HR_STREAM_MAX_WINDOWS + 1];
    uint64_t buffer;
    unsigned flags;
    hr_stream_part locked[HR_STREAM_MAX_WINDOWS];
    int n_locked;
    int act;     /* window whose tail is moving, -1 none */
    uint64_t ev; /* [tail start, ev) of act is dropped */
    uint64_t fe; /* [ev, fe) of act was read */
} hr_pump_local;

static uint64_t tail_end(const hr_stream_part *p) { return p->stream_off + p->stream_len; }

/* Drops the whole tail of window r (also pages the computing thread
 * faulted in itself). */
static void hr_pump_drop(hr_stream_pump *p, hr_pump_local *L, int r, uint64_t *evicted) {
    const hr_stream_part *w = &L->part[r];
    if (!w->stream_len || !(L->flags & HR_STREAM_DROP))
        return;
    hr_stream_evict(p->g, w->stream_off, w->stream_len);
    if (r == L->act && L->fe > L->ev)
        *evicted += L->fe - L->ev;
}

/* Unpins the old heads, pins (or reads in) the new ones. 1 when every head
 * is mlock'ed, 0 otherwise. */
static int hr_pump_warm(hr_stream_pump *p, hr_pump_local *L) {
    for (int i = 0; i < L->n_locked; i++)
        hr_stream_unlock(p->g, L->locked[i].off, L->locked[i].keep_len);
    L->n_locked = 0;
    /* Tails fault page by page (MADV_RANDOM): the pump reads them ahead in
     * chunks, so a fault there is a page the computing thread reached
     * first or one reclaimed under the memory limit before use, and the
     * default read-around (read_ahead_kb, up to megabytes, half of it
     * behind the fault: pages already computed and dropped) read a third
     * to a half more than the plan on memory-short (218 MiB per token
     * predicted, 262 and 330 measured; 217 and 219 with this, and 1.5x the
     * tokens/s). Heads are pinned with the default, in large reads, and
     * so are tails where the pump does not read ahead (faults read them). */
    for (int i = 0; i < L->n; i++)
        hr_stream_random(p->g, L->part[i].off, L->part[i].len, false);
    bool split = false;
    for (int i = 0; i < L->n; i++)
        split = split || L->part[i].stream_len > 0;
    /* 2 MiB folios only where nothing streams: a fault in a huge range
     * reads the aligned 2 MiB about it and 2 MiB more ahead, across the
     * windows' bounds, which a plan that streams counts page by page */
    hr_stream_small(p->g, 0, UINT64_MAX, split);
    if (!split) { /* everything stays: ask for it once (read it, for huge pages) */
        for (int i = 0; i < L->n; i++)
            if (hr_stream_huge(p->g))
                hr_stream_keep(p->g, L->part[i].off, L->part[i].len);
            else
                hr_stream_prefetch(p->g, L->part[i].off, L->part[i].len);
        return 0;
    }
    int all = 1, refused = 0;
    for (int i = 0; i < L->n; i++) {
        const hr_stream_part *w = &L->part[i];
        if (w->keep_len == 0)
            continue;
        if ((L->flags & HR_STREAM_LOCK) && hr_stream_lock(p->g, w->off, w->keep_len) == 0) {
            L->locked[L->n_locked++] = *w;
        } else {
            all = 0;
            refused += (L->flags & HR_STREAM_LOCK) != 0;
            hr_stream_fetch(p->g, w->off, w->keep_len);
        }
    }
    for (int i = 0; i < L->n && (L->flags & HR_STREAM_PREFETCH); i++)
        if (L->part[i].stream_len)
            hr_stream_random(p->g, L->part[i].stream_off, L->part[i].stream_len, true);
    if (refused)
        HR_LOG_INFO(TAG, "mlock refused (no CAP_IPC_LOCK or RLIMIT_MEMLOCK too small): the "
                         "resident part is kept by advice");
    return all;
}

/* Copies the plan under mu into L (the layer table grows here only). */
static bool hr_pump_take_plan(hr_stream_pump *p, hr_pump_local *L) {
    size_t nl = (size_t)p->lbase[p->n];
    if (nl > L->lcap) {
        uint64_t *t = realloc(L->lstart, nl * sizeof *t);
        if (!t)
            return false;
        L->lstart = t;
        L->lcap = nl;
    }
    L->n = p->n;
    memcpy(L->part, p->part, sizeof L->part);
    memcpy(L->lbase, p->lbase, sizeof L->lbase);
    if (nl)
        memcpy(L->lstart, p->lstart, nl * sizeof *L->lstart);
    L->buffer = p->buffer;
    L->flags = p->flags;
    L->act = -1;
    L->ev = L->fe = 0;
    return true;
}

/* Makes window r the one whose tail moves. */
static void hr_pump_activate(hr_pump_local *L, int r) {
    L->act = r;
    L->ev = L->fe = L->part[r].stream_off;
}

static void *hr_pump_main(void *arg) {
    hr_stream_pump *p = arg;
    hr_pump_local L;
    memset(&L, 0, sizeof L);
    L.act = -1;
    uint64_t plan_seen = 0;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->gen != plan_seen) { /* a new plan: pin its heads, start at window 0 */
            plan_seen = p->gen;
            p->seen = p->events;
            p->done = 0;
            p->want = -1;
            p->cur_win = -1;
            hr_stream_part old = L.act >= 0 ? L.part[L.act] : (hr_stream_part){0};
            bool drop_old = L.act >= 0 && (L.flags & HR_STREAM_DROP);
            bool ok = hr_pump_take_plan(p, &L);
            pthread_mutex_unlock(&p->mu);
            if (drop_old) /* the old plan's tail in flight */
                hr_stream_evict(p->g, old.stream_off, old.stream_len);
            int lk = ok ? hr_pump_warm(p, &L) : 0;
            if (!ok) {
                HR_LOG_WARN(TAG, "out of memory for the streaming plan: nothing is streamed");
                L.n = 0;
            }
            pthread_mutex_lock(&p->mu);
            if (p->gen == plan_seen) {
                p->st.locked = lk;
                p->st.plans_warm++;
                if (L.n > 0 && L.part[0].stream_len && (L.flags & HR_STREAM_PREFETCH))
                    hr_pump_activate(&L, 0);
            }
            continue;
        }
        /* the events posted since the last look */
        p->seen = p->events;
        uint64_t done = p->done;
        int want = p->want, cw = p->cur_win, cd = p->cur_done;
        p->done = 0;
        p->want = -1;
        uint64_t evicted = 0;
        pthread_mutex_unlock(&p->mu);
        for (int r = 0; r < L.n; r++) {
            if (!(done >> r & 1))
                continue;
            hr_pump_drop(p, &L, r, &evicted);
            if (r == L.act)
                L.act = -1;
        }
        /* the next window with a tail (a round without layers has none) */
        for (int s = 0; want >= 0 && want < L.n && s < L.n && !L.part[want].stream_len; s++)
            want = (want + 1) % L.n;
        if (want >= 0 && want < L.n && want != L.act && L.part[want].stream_len &&
            (L.flags & HR_STREAM_PREFETCH)) {
            if (L.act >= 0)
                hr_pump_drop(p, &L, L.act, &evicted);
            hr_pump_activate(&L, want);
        }
        if (cw >= 0 && cw < L.n && cw != L.act && L.part[cw].stream_len) {
            if (L.act >= 0) /* computed out of turn: follow the window computing */
                hr_pump_drop(p, &L, L.act, &evicted);
            hr_pump_activate(&L, cw);
        }
        /* where the buffer lies now: [lo, hi) of the active tail */
        bool work = false;
        uint64_t fetched = 0, disk_bytes = 0;
        double disk_s = 0;
        if (L.act >= 0) {
            const hr_stream_part *w = &L.part[L.act];
            uint64_t lo = w->stream_off, end = tail_end(w);
            bool sliding = w->stream_len > L.buffer;
            if (sliding && cw == L.act) {
                int nl = L.lbase[L.act + 1] - L.lbase[L.act];
                uint64_t at = cd < nl ? L.lstart[L.lbase[L.act] + cd] : end;
                lo = at > lo ? (at < end ? at : end) : lo;
            }
            uint64_t hi = end - lo > L.buffer ? lo + L.buffer : end;
            if (L.ev < lo && (L.flags & HR_STREAM_DROP)) { /* the layers done */
                hr_stream_evict(p->g, L.ev, lo - L.ev);
                evicted += (L.fe < lo ? L.fe : lo) > L.ev ? (L.fe < lo ? L.fe : lo) - L.ev : 0;
                L.ev = lo;
                work = true;
            }
            if (L.fe < L.ev)
                L.fe = L.ev;
            if ((L.flags & HR_STREAM_PREFETCH) && L.fe < hi) {
                uint64_t c = hi - L.fe < HR_PUMP_CHUNK ? hi - L.fe : HR_PUMP_CHUNK;
                int64_t io0 = hr_stream_thread_io_read_bytes();
                double t0 = hr_now_s();
                hr_stream_fetch(p->g, L.fe, c);
                int64_t io1 = hr_stream_thread_io_read_bytes();
                if (io0 >= 0 && io1 > io0) { /* pages another thread read cost it nothing */
                    disk_bytes = (uint64_t)(io1 - io0);
                    disk_s = hr_now_s() - t0;
                }
                L.fe += c;
                fetched = c;
                work = true;
            }
        }
        pthread_mutex_lock(&p->mu);
        p->st.fetched += fetched;
        p->st.disk_bytes += disk_bytes;
        p->st.disk_s += disk_s;
        p->st.evicted += evicted;
        if (L.act >= 0 && L.fe - L.ev > p->st.max_span)
            p->st.max_span = L.fe - L.ev;
        if (work || p->seen != p->events || p->gen != plan_seen || p->stop)
            continue;
        p->waiting = true;
        pthread_cond_broadcast(&p->idle);
        pthread_cond_wait(&p->cv, &p->mu);
        p->waiting = false;
    }
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < L.n_locked; i++)
        hr_stream_unlock(p->g, L.locked[i].off, L.locked[i].keep_len);
    free(L.lstart);
    return NULL;
}

/* ---- public ---- */

int hr_stream_pump_create(hr_stream_pump **out, const hr_gguf *g, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!g)
        return hr_seterr(err, HR_EINVAL, "no file to stream from");
    hr_stream_pump *p = calloc(1, sizeof *p);
    if (!p)
        return hr_seterr(err, HR_ENOMEM, "out of memory for the streamer");
    p->g = g;
    long pg = sysconf(_SC_PAGESIZE);
    p->pg = pg > 0 ? (uint64_t)pg : 4096;
    p->want = p->cur_win = -1;
    p->st.locked = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (pthread_create(&p->th, NULL, hr_pump_main, p) != 0) {
        hr_stream_pump_destroy(p);
        return hr_seterr(err, HR_ENOMEM, "cannot start the streamer thread");
    }
    p->started = true;
    *out = p;
    return 0;
}

void hr_stream_pump_destroy(hr_stream_pump *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->started)
        pthread_join(p->th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->idle);
    free(p->lstart);
    free(p);
}

int hr_stream_pump_plan(hr_stream_pump *p, const hr_stream_part *parts, int n, uint64_t buffer,
                        unsigned flags) {
    if (!p || n < 0 || n > HR_STREAM_MAX_WINDOWS || (n > 0 && !parts))
        return HR_EINVAL;
    int lbase[HR_STREAM_MAX_WINDOWS + 1] = {0};
    for (int r = 0; r < n; r++)
        lbase[r + 1] = lbase[r] + (parts[r].n_layers > 0 ? parts[r].n_layers : 0);
    uint64_t *ls = lbase[n] ? malloc((size_t)lbase[n] * sizeof *ls) : NULL;
    if (lbase[n] && !ls)
        return HR_ENOMEM;
    for (int r = 0; r < n; r++) { /* each layer's first byte; an empty layer starts where it ends */
        uint64_t prev = parts[r].off;
        for (int j = 0; j < lbase[r + 1] - lbase[r]; j++) {
            uint64_t off, len;
            int l = parts[r].layer_begin + j;
            if (hr_stream_window_range(p->g, l, l + 1, &off, &len) == 0)
                prev = off > prev ? off : prev;
            ls[lbase[r] + j] = prev;
        }
    }
    buffer -= buffer % p->pg;
    pthread_mutex_lock(&p->mu);
    free(p->lstart);
    p->lstart = ls;
    memcpy(p->lbase, lbase, sizeof lbase);
    memset(p->part, 0, sizeof p->part);
    if (n)
        memcpy(p->part, parts, (size_t)n * sizeof *parts);
    p->n = n;
    p->buffer = buffer > p->pg ? buffer : p->pg;
    p->flags = flags;
    p->gen++;
    p->events++;
    p->st.buffer = p->buffer;
    p->st.locked = -1;
    p->st.max_span = 0;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void hr_stream_pump_layer_done(hr_stream_pump *p, int layer) {
    pthread_mutex_lock(&p->mu);
    for (int r = 0; r < p->n; r++) {
        int j = layer - p->part[r].layer_begin;
        if (j < 0 || j >= p->lbase[r + 1] - p->lbase[r])
            continue;
        p->cur_win = r;
        p->cur_done = j + 1;
        p->events++;
        if (p->waiting)
            pthread_cond_signal(&p->cv);
        break;
    }
    pthread_mutex_unlock(&p->mu);
}

void hr_stream_pump_window_done(hr_stream_pump *p, int window) {
    pthread_mutex_lock(&p->mu);
    if (window >= 0 && window < p->n) {
        p->done |= (uint64_t)1 << window;
        p->want = (window + 1) % p->n;
        p->cur_win = -1;
        p->events++;
        if (p->waiting)
            pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

int hr_stream_pump_wait(hr_stream_pump *p, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    while (!(p->waiting && p->seen == p->events) && !p->stop)
        if (pthread_cond_timedwait(&p->idle, &p->mu, &ts) != 0) {
            rc = HR_ETIMEDOUT;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void hr_stream_pump_get_stats(hr_stream_pump *p, hr_stream_pump_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}
