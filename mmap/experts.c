/* experts.c - a mixture-of-experts window streamed by expert (experts.h):
 * one thread that pins the always-read part and the resident experts, reads
 * the routed experts that are not resident and drops them again. */
#include "mmap/experts.h"

#include "mmap/stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HR_EXQ_CAP 4096 /* queued events */
#define HR_EX_MAX_LOCKS 4096

enum { HR_EXE_FETCH, HR_EXE_DONE };

typedef struct {
    int type, layer, expert;
} hr_exe;

struct hr_expert_cache {
    const hr_gguf *g;
    int n_layer, n_expert;
    hr_expert_layer *layers; /* [n_layer] */
    uint64_t page;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* ---- mu ---- */
    bool stop, busy;  /* busy: the thread works on what it took */
    bool lock_failed; /* the thread: a pin of this plan fell back to advice */
    hr_exe q[HR_EXQ_CAP];
    int q_head, q_len;
    bool plan_new;           /* a plan waits for the thread */
    uint64_t *p_off, *p_len; /* [64] the waiting plan's windows */
    int p_b[64], p_n[64], p_win, p_keep, p_rerank;
    bool p_lock;
    uint8_t *resident; /* [n_layer * n_expert] as the computing thread sees it */
    uint64_t *counts;  /* [n_layer * n_expert] routing counts */
    uint8_t *pending;  /* [n_layer] experts were read for the layer's step */
    int *routes;       /* [n_layer] routes since its last rerank */
    hr_expert_cache_stats st;
    /* ---- the thread alone ---- */
    uint8_t *active;       /* [n_layer] layers of the plan */
    uint8_t *advised;      /* [n_layer] layers whose stacks this module advised random */
    uint8_t *res_row;      /* [n_expert] a copy of a layer's resident flags */
    uint8_t *used;         /* [n_layer * n_expert] read on demand, to drop after the layer */
    uint64_t (*locked)[2]; /* ranges this module mlock'ed */
    int n_locked, keep, rerank;
    bool lock;
};

/* [off, off + len) shrunk to the whole pages inside it; false when none. */
static bool hr_ex_inside(const hr_expert_cache *c, uint64_t *off, uint64_t *len) {
    uint64_t b = (*off + c->page - 1) / c->page * c->page, e = (*off + *len) / c->page * c->page;
    if (e <= b)
        return false;
    *off = b;
    *len = e - b;
    return true;
}

static void hr_ex_pin(hr_expert_cache *c, uint64_t off, uint64_t len) {
    if (len == 0)
        return;
    /* the reads go out at once; mlock then waits for them (in a random
     * range its own faults would read one page at a time) */
    hr_stream_prefetch(c->g, off, len);
    if (c->lock && c->n_locked < HR_EX_MAX_LOCKS && hr_stream_lock(c->g, off, len) == 0) {
        c->locked[c->n_locked][0] = off;
        c->locked[c->n_locked++][1] = len;
        return;
    }
    c->lock_failed = true;
    hr_stream_fetch(c->g, off, len);
}

static void hr_ex_unpin_all(hr_expert_cache *c) {
    for (int i = 0; i < c->n_locked; i++)
        hr_stream_unlock(c->g, c->locked[i][0], c->locked[i][1]);
    c->n_locked = 0;
}

/* Reads expert e of layer il in (pin: and keeps it), or drops it. */
static uint64_t hr_ex_expert(hr_expert_cache *c, int il, int e, int how) {
    const hr_expert_layer *L = &c->layers[il];
    uint64_t bytes = 0;
    for (int p = 0; p < 3; p++) {
        uint64_t off = L->off[p] + (uint64_t)e * L->stride[p], len = L->stride[p];
        bytes += len;
        if (how == 1)
            hr_ex_pin(c, off, len);
        else if (how == 0)
            hr_stream_fetch(c->g, off, len);
        else if (hr_ex_inside(c, &off, &len)) /* never a page a neighbour shares */
            hr_stream_evict(c->g, off, len);
    }
    return bytes;
}

/* The `keep` most routed experts of layer il (ties: the lower index). */
static void hr_ex_top(const hr_expert_cache *c, const uint64_t *counts, int keep, uint8_t *want) {
    memset(want, 0, (size_t)c->n_expert);
    for (int j = 0; j < keep && j < c->n_expert; j++) {
        int best = -1;
        for (int e = 0; e < c->n_expert; e++)
            if (!want[e] && (best < 0 || counts[e] > counts[best]))
                best = e;
        want[best] = 1;
    }
}

/* Applies a plan: the always-read part of each window pinned, the resident
 * experts pinned, the others dropped. */
static void hr_ex_apply_plan(hr_expert_cache *c, const uint64_t *off, const uint64_t *len,
                             const int *lb, const int *nl, int n_win) {
    hr_ex_unpin_all(c);
    c->lock_failed = false;
    memset(c->active, 0, (size_t)c->n_layer);
    memset(c->used, 0, (size_t)c->n_layer * (size_t)c->n_expert);
    for (int w = 0; w < n_win; w++)
        for (int il = lb[w]; il < lb[w] + nl[w] && il < c->n_layer; il++)
            c->active[il] = 1;
    /* Expert stacks of the plan's layers are read expert by expert, each as
     * the router picks it: a fault there (an expert reclaimed under the
     * memory limit before its layer ran) must read that page, not the
     * kernel's read-around window (read_ahead_kb: up to megabytes, a dozen
     * neighbouring experts, whose room then pushes out more). */
    for (int il = 0; il < c->n_layer; il++) {
        for (int p = 0; p < 3 && c->active[il] != c->advised[il]; p++)
            hr_stream_random(c->g, c->layers[il].off[p],
                             c->layers[il].stride[p] * (uint64_t)c->n_expert, c->active[il]);
        c->advised[il] = c->active[il];
    }
    uint64_t pinned = 0;
    uint64_t *counts = malloc((size_t)c->n_expert * sizeof *counts);
    uint8_t *want = malloc((size_t)c->n_expert);
    for (int w = 0; w < n_win && counts && want; w++) {
        /* the window minus its layers' stacks, in file order */
        uint64_t cur = off[w], end = off[w] + len[w];
        for (int il = lb[w]; il < lb[w] + nl[w] && il < c->n_layer; il++) {
            for (int p = 0; p < 3; p++) {
                uint64_t s0 = c->layers[il].off[p];
                uint64_t s1 = s0 + c->layers[il].stride[p] * (uint64_t)c->n_expert;
                if (s0 > cur && s0 <= end) {
                    hr_ex_pin(c, cur, s0 - cur);
                    pinned += s0 - cur;
                }
                cur = s1 > cur ? s1 : cur;
            }
        }
        if (end > cur) {
            hr_ex_pin(c, cur, end - cur);
            pinned += end - cur;
        }
        for (int il = lb[w]; il < lb[w] + nl[w] && il < c->n_layer; il++) {
            pthread_mutex_lock(&c->mu);
            memcpy(counts, c->counts + (size_t)il * c->n_expert, (size_t)c->n_expert * 8);
            pthread_mutex_unlock(&c->mu);
            hr_ex_top(c, counts, c->keep, want);
            for (int e = 0; e < c->n_expert; e++)
                if (want[e])
                    pinned += hr_ex_expert(c, il, e, 1);
                else
                    hr_ex_expert(c, il, e, 2);
            pthread_mutex_lock(&c->mu);
            memcpy(c->resident + (size_t)il * c->n_expert, want, (size_t)c->n_expert);
            pthread_mutex_unlock(&c->mu);
        }
    }
    free(counts);
    free(want);
    pthread_mutex_lock(&c->mu);
    c->st.pinned = pinned;
    c->st.locked = n_win > 0 ? !c->lock_failed : -1;
    c->st.keep = c->keep;
    c->st.plans_applied++;
    pthread_mutex_unlock(&c->mu);
}

/* Moves layer il's resident experts toward its most routed ones: the most
 * routed expert that is not resident replaces the least routed resident
 * one only while it was routed clearly more often (by a quarter and at
 * least 2 routes), so near-even routing does not make every rerank read
 * experts in and drop others. */
static void hr_ex_rerank(hr_expert_cache *c, int il) {
    size_t NE = (size_t)c->n_expert;
    uint64_t *counts = malloc(NE * sizeof *counts);
    uint8_t *want = malloc(NE), *have = malloc(NE);
    if (counts && want && have) {
        pthread_mutex_lock(&c->mu);
        memcpy(counts, c->counts + (size_t)il * NE, NE * 8);
        memcpy(have, c->resident + (size_t)il * NE, NE);
        pthread_mutex_unlock(&c->mu);
        memcpy(want, have, NE);
        for (;;) {
            int in = -1, out = -1; /* the best outside, the weakest inside */
            for (int e = 0; e < c->n_expert; e++) {
                if (!want[e] && (in < 0 || counts[e] > counts[in]))
                    in = e;
                if (want[e] && (out < 0 || counts[e] < counts[out]))
                    out = e;
            }
            uint64_t margin = counts[out < 0 ? 0 : out] / 4;
            if (in < 0 || out < 0 || counts[in] <= counts[out] + (margin > 2 ? margin : 2))
                break;
            want[in] = 1;
            want[out] = 0;
        }
        uint64_t moved = 0, bytes = 0;
        for (int e = 0; e < c->n_expert; e++) {
            if (want[e] && !have[e]) {
                bytes += hr_ex_expert(c, il, e, 1);
                moved++;
            } else if (!want[e] && have[e]) {
                hr_ex_expert(c, il, e, 2); /* its pages stay locked until the next plan */
            }
        }
        pthread_mutex_lock(&c->mu);
        memcpy(c->resident + (size_t)il * NE, want, NE);
        c->st.reranks += moved;
        c->st.rerank_bytes += bytes;
        pthread_mutex_unlock(&c->mu);
    }
    free(counts);
    free(want);
    free(have);
}

static void *hr_ex_thread(void *arg) {
    hr_expert_cache *c = arg;
    uint64_t off[64], len[64];
    int lb[64], nl[64];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        c->busy = false;
        while (!c->stop && !c->plan_new && c->q_len == 0)
            pthread_cond_wait(&c->cv, &c->mu);
        c->busy = true;
        if (c->stop)
            break;
        if (c->plan_new) {
            int n = c->p_win;
            memcpy(off, c->p_off, (size_t)n * 8);
            memcpy(len, c->p_len, (size_t)n * 8);
            memcpy(lb, c->p_b, (size_t)n * sizeof(int));
            memcpy(nl, c->p_n, (size_t)n * sizeof(int));
            c->keep = c->p_keep;
            c->rerank = c->p_rerank;
            c->lock = c->p_lock;
            c->plan_new = false;
            c->q_len = 0; /* events of the old plan */
            pthread_mutex_unlock(&c->mu);
            hr_ex_apply_plan(c, off, len, lb, nl, n);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        hr_exe ev = c->q[c->q_head];
        c->q_head = (c->q_head + 1) % HR_EXQ_CAP;
        c->q_len--;
        pthread_mutex_unlock(&c->mu);
        if (ev.layer >= 0 && ev.layer < c->n_layer && c->active[ev.layer]) {
            size_t at = (size_t)ev.layer * c->n_expert;
            if (ev.type == HR_EXE_FETCH && !c->used[at + ev.expert]) {
                uint64_t b = hr_ex_expert(c, ev.layer, ev.expert, 0);
                c->used[at + ev.expert] = 1;
                pthread_mutex_lock(&c->mu);
                c->st.fetched += b;
                pthread_mutex_unlock(&c->mu);
            } else if (ev.type == HR_EXE_DONE) {
                pthread_mutex_lock(&c->mu);
                memcpy(c->res_row, c->resident + at, (size_t)c->n_expert);
                bool rr = c->rerank > 0 && c->routes[ev.layer] >= c->rerank;
                if (rr)
                    c->routes[ev.layer] = 0;
                pthread_mutex_unlock(&c->mu);
                for (int e = 0; e < c->n_expert; e++)
                    if (c->used[at + e]) {
                        if (!c->res_row[e])
                            hr_ex_expert(c, ev.layer, e, 2);
                        c->used[at + e] = 0;
                    }
                if (rr)
                    hr_ex_rerank(c, ev.layer);
            }
        }
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int hr_expert_cache_create(hr_expert_cache **out, const hr_gguf *g, int n_layer, int n_expert,
                           const hr_expert_layer *layers, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!g || !layers || n_layer < 1 || n_expert < 1)
        return hr_seterr(err, HR_EINVAL, "expert cache: no layers or experts");
    hr_expert_cache *c = calloc(1, sizeof *c);
    size_t LE = (size_t)n_layer * (size_t)n_expert;
    if (c) {
        c->layers = malloc((size_t)n_layer * sizeof *c->layers);
        c->resident = calloc(LE, 1);
        c->counts = calloc(LE, sizeof *c->counts);
        c->active = calloc((size_t)n_layer, 1);
        c->advised = calloc((size_t)n_layer, 1);
        c->routes = calloc((size_t)n_layer, sizeof *c->routes);
        c->pending = calloc((size_t)n_layer, 1);
        c->res_row = malloc((size_t)n_expert);
        c->used = calloc(LE, 1);
        c->locked = malloc(HR_EX_MAX_LOCKS * sizeof *c->locked);
        c->p_off = malloc(64 * sizeof *c->p_off);
        c->p_len = malloc(64 * sizeof *c->p_len);
    }
    if (!c || !c->layers || !c->resident || !c->counts || !c->active || !c->advised || !c->routes ||
        !c->used || !c->locked || !c->p_off || !c->p_len || !c->pending || !c->res_row) {
        hr_expert_cache_destroy(c);
        return hr_seterr(err, HR_ENOMEM, "out of memory for the expert cache");
    }
    memcpy(c->layers, layers, (size_t)n_layer * sizeof *layers);
    c->g = g;
    c->n_layer = n_layer;
    c->n_expert = n_expert;
    c->st.locked = -1;
    long pg = sysconf(_SC_PAGESIZE);
    c->page = pg > 0 ? (uint64_t)pg : 4096;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->th, NULL, hr_ex_thread, c) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        c->th = 0;
        hr_expert_cache_destroy(c);
        return hr_seterr(err, HR_ENOMEM, "cannot start the expert cache's thread");
    }
    *out = c;
    return 0;
}

void hr_expert_cache_destroy(hr_expert_cache *c) {
    if (!c)
        return;
    if (c->th) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
        hr_ex_unpin_all(c);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    free(c->layers);
    free(c->resident);
    free(c->counts);
    free(c->active);
    free(c->advised);
    free(c->routes);
    free(c->pending);
    free(c->res_row);
    free(c->used);
    free(c->locked);
    free(c->p_off);
    free(c->p_len);
    free(c);
}

int hr_expert_cache_plan(hr_expert_cache *c, const uint64_t *win_off, const uint64_t *win_len,
                         const int *layer_begin, const int *n_layers, int n_win, int keep,
                         int rerank, bool lock) {
    if (!c || n_win < 0 || n_win > 64 ||
        (n_win > 0 && (!win_off || !win_len || !layer_begin || !n_layers)))
        return HR_EINVAL;
    pthread_mutex_lock(&c->mu);
    for (int w = 0; w < n_win; w++) {
        c->p_off[w] = win_off[w];
        c->p_len[w] = win_len[w];
        c->p_b[w] = layer_begin[w];
        c->p_n[w] = n_layers[w];
    }
    c->p_win = n_win;
    c->p_keep = keep < 0 ? 0 : keep > c->n_expert ? c->n_expert : keep;
    c->p_rerank = rerank;
    c->p_lock = lock;
    c->plan_new = true;
    memset(c->resident, 1, (size_t)c->n_layer * (size_t)c->n_expert); /* until applied */
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void hr_ex_push(hr_expert_cache *c, int type, int layer, int expert) {
    if (c->q_len == HR_EXQ_CAP) {
        c->st.dropped_events++;
        return;
    }
    c->q[(c->q_head + c->q_len) % HR_EXQ_CAP] = (hr_exe){type, layer, expert};
    c->q_len++;
}

void hr_expert_cache_route(hr_expert_cache *c, int layer, const int *experts, int n) {
    if (!c || layer < 0 || layer >= c->n_layer)
        return;
    pthread_mutex_lock(&c->mu);
    size_t at = (size_t)layer * c->n_expert;
    bool any = false;
    for (int i = 0; i < n; i++) {
        int e = experts[i];
        if (e < 0 || e >= c->n_expert)
            continue;
        c->counts[at + e]++;
        c->st.routed++;
        const hr_expert_layer *L = &c->layers[layer];
        bool kept = c->resident[at + e];
        c->st.hits += kept;
        /* read ahead now, every routed expert at once (the reads go out
         * together; the computing thread meets them as it gets there); a
         * kept one too where it is kept by advice (no mlock): it may have
         * been reclaimed, and its stacks fault page by page (asking costs
         * nothing when cached) */
        for (int p = 0; p < 3 && (!kept || c->st.locked != 1); p++)
            hr_stream_prefetch(c->g, L->off[p] + (uint64_t)e * L->stride[p], L->stride[p]);
        if (!kept) {
            hr_ex_push(c, HR_EXE_FETCH, layer, e);
            any = true;
        }
    }
    c->routes[layer]++;
    c->pending[layer] = c->pending[layer] || any;
    if (any)
        pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void hr_expert_cache_layer_done(hr_expert_cache *c, int layer) {
    if (!c || layer < 0 || layer >= c->n_layer)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->p_win > 0 &&
        (c->pending[layer] || (c->p_rerank > 0 && c->routes[layer] >= c->p_rerank))) {
        c->pending[layer] = 0;
        hr_ex_push(c, HR_EXE_DONE, layer, 0);
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

int hr_expert_cache_wait(hr_expert_cache *c, int timeout_ms) {
    for (int waited = 0;; waited++) {
        pthread_mutex_lock(&c->mu);
        bool idle = !c->busy && !c->plan_new && c->q_len == 0;
        pthread_mutex_unlock(&c->mu);
        if (idle)
            return 0;
        if (waited >= timeout_ms)
            return HR_ETIMEDOUT;
        usleep(1000);
    }
}

void hr_expert_cache_get_stats(hr_expert_cache *c, hr_expert_cache_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
