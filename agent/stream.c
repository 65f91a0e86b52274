/* stream.c - this device's windows of weights, used in place from the
 * read-only mapping, and the streamer that keeps them where the plan's
 * disk model says they are.
 *
 * The scheme (sched/sched.h hr_sched_stream_split, "pinned" reclaim): when
 * the device's k windows fit the room it has for weights (hr_prof_stream_room
 * of the same budget its admission check uses) everything stays resident
 * and nothing is read per token. Otherwise hr_prof_stream_parts keeps a head
 * of every window resident (mlock where the kernel allows it, else read in
 * and never dropped), `resident` bytes in all, and streams the tails through
 * a buffer of `buffer` bytes: the pump (mmap/stream.h) drops window r's tail
 * once r is computed and reads window r+1's from its start up to the buffer
 * while the rest of the ring computes; a tail larger than the buffer slides
 * on as the compute thread posts each finished layer (hr_ctx_params
 * on_layer), never more than the buffer ahead of the layer computing. The
 * compute thread only posts "layer done" / "window done" (a mutex and a
 * condition variable): no madvise in the send path, none under plan_mu.
 *
 * Measurement: read_bytes of /proc/self/io over the windows computed,
 * sampled by the control loop's timer (hr_node_io_sample), from the moment
 * the pump finished warming the plan's resident part.
 *
 * HEARTH_STREAM=legacy brings back the earlier behaviour for comparisons
 * (whole windows: WILLNEED of the next one and, where the plan says
 * release, MADV_COLD of the finished one, on the computing thread);
 * HEARTH_MLOCK=0 keeps the resident part by advice only. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "mmap/experts.h"
#include "mmap/stream.h"
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "stream"
/* s: reads sampled this long after the last window computed still count
 * as that window's (a ring's turn, and the pump's reading ahead, are
 * shorter on any ring that streams usefully) */
#define HR_IO_TRAIL_S 5.0
/* windows of one-row steps (decode) the CPU a window is measured over at
 * least: a prompt's steps are not counted (their rows' compute is not a
 * token's), and a few windows alone are noise */
#define HR_CPU_MIN_ROUNDS 16

_Static_assert(HR_AGENT_MAX_K <= HR_STREAM_MAX_WINDOWS, "the pump takes every window");

struct hr_streamer {
    const hr_gguf *g;
    hr_stream_pump *pump;  /* NULL in legacy mode */
    hr_expert_cache *ex;   /* a model with experts (not HEARTH_EXPERTS=whole), else NULL */
    atomic_bool by_expert; /* the plan streams by expert: post routes and layers to ex */
    bool legacy;           /* HEARTH_STREAM=legacy */
    bool try_mlock;        /* HEARTH_MLOCK != 0 */
    atomic_bool windows;   /* post window events: some window has a tail */
    atomic_bool layers;    /* post layer events: some tail is larger than the buffer */
    pthread_mutex_t mu;
    /* ---- mu ---- */
    hr_stream_stats st;
    bool rebase; /* legacy: measure from the plan on */
    /* ---- measurement: the sampling thread alone (hr_node_io_sample) ---- */
    atomic_ullong rounds; /* windows computed (any thread) */
    atomic_ullong multi;  /* of them, windows of steps with several rows */
    atomic_int rows_now;  /* rows of the window being computed; 0 between windows */
    int64_t last_io;
    uint64_t last_rounds, last_multi, warm_seen, ex_warm_seen;
    double last_active;          /* s, monotonic: the last sample with windows computed; 0 = none */
    bool multi_before;           /* the previous sample had steps of several rows */
    double acc_io, acc_rounds;   /* every step */
    double acc1_io, acc1_rounds; /* samples of one-row steps only */
    double last_cpu;             /* the process's CPU s at the last sample; < 0 none */
    double acc1_cpu;             /* CPU s over the same samples as acc1_io */
    /* ---- the controlling thread (plans) ---- */
    bool out_locked; /* the output head is mlock'ed (head, streaming plans) */
};

int hr_local_plan_layers(const hr_local_plan *lp) {
    int n = 0;
    for (int r = 0; r < lp->k && r < HR_AGENT_MAX_K; r++)
        n += lp->count[r] > 0 ? lp->count[r] : 0;
    return n;
}

int hr_local_plan_wmax(const hr_local_plan *lp) {
    int n = 0;
    for (int r = 0; r < lp->k && r < HR_AGENT_MAX_K; r++)
        n = lp->count[r] > n ? lp->count[r] : n;
    return n;
}

void hr_node_windows(const hr_agent *a, hr_local_plan *lp) {
    for (int r = 0; r < HR_AGENT_MAX_K; r++)
        lp->win_off[r] = lp->win_len[r] = 0;
    for (int r = 0; r < lp->k && r < HR_AGENT_MAX_K; r++) {
        int b = lp->first[r];
        if (lp->count[r] > 0 &&
            hr_stream_window_range(a->g, b, b + lp->count[r], &lp->win_off[r], &lp->win_len[r]))
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

void hr_node_window_start(const hr_agent *a, int rows) {
    if (a->streamer)
        atomic_store(&a->streamer->rows_now, rows);
}

void hr_node_after_window(const hr_agent *a, const hr_local_plan *lp, int round, int rows) {
    hr_streamer *s = a->streamer;
    if (s)
        atomic_store(&s->rows_now, 0);
    if (lp->k < 1 || round < 0 || round >= lp->k || round >= HR_AGENT_MAX_K ||
        lp->count[round] <= 0)
        return;
    if (s) {
        if (rows > 1)
            atomic_fetch_add(&s->multi, 1);
        atomic_fetch_add(&s->rounds, 1);
    }
    if (!s || s->legacy) {
        hr_after_window_legacy(a, lp, round);
        return;
    }
    if (atomic_load_explicit(&s->windows, memory_order_relaxed))
        hr_stream_pump_window_done(s->pump, round);
}

void hr_node_on_layer(void *ud, int layer) {
    hr_streamer *s = ((const hr_agent *)ud)->streamer;
    if (s && s->pump && atomic_load_explicit(&s->layers, memory_order_relaxed))
        hr_stream_pump_layer_done(s->pump, layer);
    if (s && s->ex && atomic_load_explicit(&s->by_expert, memory_order_relaxed))
        hr_expert_cache_layer_done(s->ex, layer);
}

void hr_node_on_route(void *ud, int layer, const int *experts, int n) {
    hr_streamer *s = ((const hr_agent *)ud)->streamer;
    if (s && s->ex && atomic_load_explicit(&s->by_expert, memory_order_relaxed))
        hr_expert_cache_route(s->ex, layer, experts, n);
}

/* The expert cache of a model with experts: each layer's stacks in the file. */
static int hr_node_experts_start(hr_streamer *s, const hr_agent *a, char *err) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    const char *mode = getenv("HEARTH_EXPERTS");
    if (hp->n_expert == 0 || (mode && strcmp(mode, "whole") == 0))
        return 0;
    hr_expert_layer *L = calloc((size_t)hp->n_layer, sizeof *L);
    if (!L)
        return hr_seterr(err, HR_ENOMEM, "out of memory for the expert cache");
    const char *base = hr_gguf_base(a->g);
    for (int il = 0; il < hp->n_layer; il++) {
        const hr_layer_weights *W = hr_model_layer(a->m, il);
        const hr_weight *st[3] = {&W->gate_exps, &W->up_exps, &W->down_exps};
        for (int p = 0; p < 3; p++) {
            L[il].off[p] = (uint64_t)((const char *)st[p]->data - base);
            L[il].stride[p] = st[p]->row_bytes * (uint64_t)(st[p]->n_out / hp->n_expert);
        }
    }
    int rc = hr_expert_cache_create(&s->ex, a->g, hp->n_layer, hp->n_expert, L, err);
    free(L);
    return rc;
}

double hr_node_resident(const hr_agent *a, const hr_local_plan *lp) {
    int n = lp->k < HR_AGENT_MAX_K ? lp->k : HR_AGENT_MAX_K;
    return hr_stream_residency(a->g, lp->win_off, lp->win_len, n > 0 ? n : 0);
}

/* ---- the streamer ---- */

int hr_node_streamer_start(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_streamer *s = calloc(1, sizeof *s);
    if (!s)
        return hr_seterr(err, HR_ENOMEM, "out of memory for the streamer");
    s->g = a->g;
    const char *mode = getenv("HEARTH_STREAM"), *ml = getenv("HEARTH_MLOCK");
    s->legacy = mode && strcmp(mode, "legacy") == 0;
    s->try_mlock = !(ml && strcmp(ml, "0") == 0);
    s->st = (hr_stream_stats){
        .read_round = -1, .cpu_round = -1, .stream_round = 0, .pinned = 0, .locked = -1};
    s->last_io = -1;
    s->last_cpu = -1;
    pthread_mutex_init(&s->mu, NULL);
    int rc = s->legacy ? 0 : hr_stream_pump_create(&s->pump, a->g, err);
    if (rc == 0 && !s->legacy && (rc = hr_node_experts_start(s, a, err)))
        hr_stream_pump_destroy(s->pump);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    a->streamer = s;
    return 0;
}

void hr_node_streamer_stop(hr_agent *a) {
    hr_streamer *s = a->streamer;
    if (!s)
        return;
    hr_stream_pump_destroy(s->pump);
    hr_expert_cache_destroy(s->ex);
    pthread_mutex_destroy(&s->mu);
    free(s);
    a->streamer = NULL;
}

/* lp's windows as parts, with their layers. */
static int hr_node_parts(const hr_local_plan *lp, hr_stream_part *part) {
    memset(part, 0, sizeof(hr_stream_part) * HR_AGENT_MAX_K);
    int n = hr_local_plan_layers(lp) > 0 ? (lp->k < HR_AGENT_MAX_K ? lp->k : HR_AGENT_MAX_K) : 0;
    for (int r = 0; r < n; r++) { /* a round without layers: an empty part */
        part[r].off = lp->win_off[r];
        part[r].len = lp->win_len[r];
        part[r].layer_begin = lp->first[r];
        part[r].n_layers = lp->count[r];
    }
    return n;
}

/* A model with experts whose windows do not fit: the always-read part and
 * as many experts as fit stay, the routed others are read as chosen
 * (mmap/experts.h), by the scheduler's expert scheme
 * (hr_sched_stream_split_rounds with experts). Returns the bytes it reads per round
 * (predicted), or -1 when the plan is not streamed by expert (the windows
 * fit, or no expert cache): then the dense scheme applies. */
static double hr_node_expert_plan(hr_agent *a, hr_stream_part *part, int n, double room,
                                  double layer_bytes) {
    hr_streamer *s = a->streamer;
    if (!s || !s->ex)
        return -1;
    const hr_hparams *hp = hr_model_hparams(a->m);
    double all = 0, ex = 0, bytes[HR_AGENT_MAX_K];
    for (int r = 0; r < n; r++)
        for (int il = part[r].layer_begin; il < part[r].layer_begin + part[r].n_layers; il++) {
            all += (double)hr_model_layer_bytes(a->m, il);
            ex += (double)hr_model_layer_expert_bytes(a->m, il);
        }
    for (int r = 0; r < n; r++)
        bytes[r] = (double)part[r].len; /* 0: a round without layers here */
    hr_sched_stream sc = {0};
    double frac = all > 0 ? ex / all : 0, share = (double)hp->n_expert_used / hp->n_expert;
    int rc = n > 0 && all > 0
                 ? hr_sched_stream_split_rounds(bytes, n, room, layer_bytes, frac, share, &sc, NULL)
                 : 0;
    bool split = n > 0 && sc.streams && a->p.release != 0;
    atomic_store(&s->by_expert, split);
    if (!split) {
        /* the cache gives its stacks' advice back before the pump advises
         * the dense plan's tails (both would touch the same pages) */
        hr_expert_cache_plan(s->ex, NULL, NULL, NULL, NULL, 0, 0, 0, false);
        if (hr_expert_cache_wait(s->ex, 30000) != 0)
            HR_LOG_WARN(TAG, "%s: the expert cache did not let go of its plan in 30 s", a->name);
        return -1;
    }
    if (rc == HR_ERANGE)
        HR_LOG_WARN(TAG,
                    "%s: %.1f MiB of room is less than one layer's always-read part and "
                    "routed experts (%.1f MiB per layer)",
                    a->name, room / 1048576.0, layer_bytes / 1048576.0);
    double always = all - ex, per_expert = ex / hp->n_expert; /* one expert of each layer */
    int n_layers = 0;
    uint64_t off[HR_AGENT_MAX_K], len[HR_AGENT_MAX_K];
    int lb[HR_AGENT_MAX_K], nl[HR_AGENT_MAX_K];
    for (int r = 0; r < n; r++) {
        off[r] = part[r].off;
        len[r] = part[r].len;
        lb[r] = part[r].layer_begin;
        nl[r] = part[r].n_layers;
        n_layers += part[r].n_layers;
    }
    /* keep: experts per layer beside the always-read part */
    double spare = sc.resident - always;
    int keep = spare > 0 && per_expert > 0 ? (int)(spare / per_expert) : 0;
    keep = keep > hp->n_expert ? hp->n_expert : keep;
    hr_expert_cache_plan(s->ex, off, len, lb, nl, n, keep, 64, s->try_mlock);
    if (s->pump) /* nothing for the dense pump: it lets go of an earlier plan */
        hr_stream_pump_plan(s->pump, part, 0, 0, 0);
    atomic_store(&s->windows, false);
    atomic_store(&s->layers, false);
    HR_LOG_INFO(TAG,
                "%s: streams by expert: %.1f MiB always read and %d of %d experts per layer "
                "kept of %d layers, %.1f MiB read per round predicted (room %.1f MiB)",
                a->name, always / 1048576.0, keep, hp->n_expert, n_layers,
                sc.read_round / 1048576.0, room / 1048576.0);
    hr_lock(&s->mu, HR_RANK_STREAM);
    s->st.stream_round = sc.read_round;
    s->st.pinned = sc.resident;
    s->st.locked = -1;
    s->st.read_round = s->st.cpu_round = -1;
    s->rebase = true;
    hr_unlock(&s->mu, HR_RANK_STREAM);
    return sc.read_round;
}

/* The head of a plan that streams keeps its output head (which the plan's
 * memory counts as resident, and which every token reads whole) locked, so
 * that the streamed weights do not push parts of it out under a memory
 * limit; it lets go of it for a plan that does not stream. */
static void hr_node_output_pin(hr_agent *a, bool pin) {
    hr_streamer *s = a->streamer;
    const hr_weight *w = hr_model_output(a->m);
    const char *base = hr_gguf_base(a->g);
    if (!s || !w || !w->data || !base || pin == s->out_locked)
        return;
    uint64_t off = (uint64_t)((const char *)w->data - base);
    uint64_t len = w->row_bytes * (uint64_t)hr_model_hparams(a->m)->n_vocab;
    if (!pin) {
        hr_stream_unlock(a->g, off, len);
        s->out_locked = false;
        return;
    }
    hr_stream_prefetch(a->g, off, len);
    s->out_locked = hr_stream_lock(a->g, off, len) == 0;
    if (!s->out_locked) /* a lock that failed part-way may leave some pages locked */
        hr_stream_unlock(a->g, off, len);
    HR_LOG_INFO(TAG, "%s: output head (%.1f MiB) %s", a->name, (double)len / 1048576.0,
                s->out_locked ? "locked in memory" : "not locked (mlock refused)");
}

static double hr_node_stream_windows(hr_agent *a, const hr_local_plan *lp, double room,
                                     double layer_bytes);

double hr_node_stream_plan(hr_agent *a, const hr_local_plan *lp, double room, double layer_bytes) {
    double r = hr_node_stream_windows(a, lp, room, layer_bytes);
    hr_streamer *s = a->streamer;
    if (s && !s->legacy)
        hr_node_output_pin(a, a->is_head && s->try_mlock && hr_local_plan_layers(lp) > 0 &&
                                  (atomic_load(&s->windows) || atomic_load(&s->by_expert)));
    return r;
}

static double hr_node_stream_windows(hr_agent *a, const hr_local_plan *lp, double room,
                                     double layer_bytes) {
    hr_streamer *s = a->streamer;
    hr_stream_part part[HR_AGENT_MAX_K];
    int n = hr_node_parts(lp, part);
    double by_expert = hr_node_expert_plan(a, part, n, room, layer_bytes);
    if (by_expert >= 0)
        return by_expert;
    hr_sched_stream sc = {0};
    int rc = n > 0 ? hr_prof_stream_parts(part, n, room, layer_bytes, &sc) : 0;
    double total = 0, kept = 0, all = 0, max_tail = 0;
    for (int r = 0; r < n; r++) {
        total += (double)part[r].stream_len;
        kept += (double)part[r].keep_len;
        all += (double)part[r].len;
        max_tail = (double)part[r].stream_len > max_tail ? (double)part[r].stream_len : max_tail;
    }
    bool split = total > 0;
    if (rc == HR_ERANGE)
        HR_LOG_WARN(TAG,
                    "%s: %.1f MiB of room for weights is less than one layer (%.1f MiB): every "
                    "window (%.1f MiB) is read from disk each round through a one-layer buffer",
                    a->name, room / 1048576.0, layer_bytes / 1048576.0,
                    n ? all / n / 1048576.0 : 0.0);
    else if (split)
        HR_LOG_INFO(TAG,
                    "%s: %.1f MiB of %d window(s) kept, %.1f MiB streamed per round through a "
                    "%.1f MiB buffer%s (room %.1f MiB, scheme %.1f MiB per round)",
                    a->name, kept / 1048576.0, n, total / n / 1048576.0, sc.buffer / 1048576.0,
                    max_tail > sc.buffer ? " sliding layer by layer" : "", room / 1048576.0,
                    sc.read_round / 1048576.0);
    if (!s)
        return n ? total / n : 0;
    uint64_t buffer = (uint64_t)sc.buffer;
    bool whole = !split && lp->release && lp->k > 1; /* forced --release on a plan that fits */
    if (whole) { /* every window streams whole and is dropped after use */
        long pg = sysconf(_SC_PAGESIZE);
        for (int r = 0; r < n; r++) {
            uint64_t end = part[r].off + part[r].len;
            part[r].keep_len = 0;
            part[r].stream_off = part[r].off;
            part[r].stream_len = end - end % (uint64_t)(pg > 0 ? pg : 4096) - part[r].off;
            buffer = part[r].stream_len > buffer ? part[r].stream_len : buffer;
        }
    }
    if (a->p.release == 0) { /* --release off: nothing is ever dropped, all stays */
        for (int r = 0; r < n; r++) {
            part[r].keep_len = part[r].len;
            part[r].stream_off = part[r].stream_len = 0;
        }
        split = whole = false;
    }
    hr_lock(&s->mu, HR_RANK_STREAM);
    s->st.stream_round = split && n ? total / n : 0;
    s->st.pinned = split ? kept : all;
    s->st.locked = split ? -1 : 0;
    s->st.read_round = s->st.cpu_round = -1;
    s->rebase = true;
    hr_unlock(&s->mu, HR_RANK_STREAM);
    atomic_store(&s->windows, split || whole);
    atomic_store(&s->layers, split && max_tail > (double)buffer);
    if (s->pump) {
        unsigned fl = (lp->prefetch ? HR_STREAM_PREFETCH : 0) |
                      (s->try_mlock ? HR_STREAM_LOCK : 0) | HR_STREAM_DROP;
        if (hr_stream_pump_plan(s->pump, part, n, buffer, fl) != 0)
            HR_LOG_WARN(TAG, "%s: out of memory for the streaming plan", a->name);
    }
    return split && n ? total / n : 0;
}

void hr_node_stream_stats(const hr_agent *a, hr_stream_stats *out) {
    hr_streamer *s = a->streamer;
    *out = (hr_stream_stats){.read_round = -1, .cpu_round = -1, .locked = -1, .ex_keep = -1};
    if (!s)
        return;
    hr_lock(&s->mu, HR_RANK_STREAM);
    *out = s->st;
    hr_unlock(&s->mu, HR_RANK_STREAM);
    out->ex_keep = -1;
    if (s->ex && atomic_load(&s->by_expert)) {
        hr_expert_cache_stats es;
        hr_expert_cache_get_stats(s->ex, &es);
        out->ex_keep = es.keep;
        out->ex_routed = es.routed;
        out->ex_hits = es.hits;
        out->ex_fetched = es.fetched;
        out->ex_moved = es.rerank_bytes;
        out->locked = es.locked;
    }
    if (s->pump) {
        hr_stream_pump_stats ps;
        hr_stream_pump_get_stats(s->pump, &ps);
        if (out->stream_round > 0 && out->ex_keep < 0)
            out->locked = ps.locked;
        out->pump_bytes = (double)ps.disk_bytes;
        out->pump_s = ps.disk_s;
    }
}

void hr_node_io_sample(hr_agent *a) {
    hr_streamer *s = a->streamer;
    if (!s)
        return;
    int64_t io = hr_stream_io_read_bytes();
    uint64_t multi = atomic_load(&s->multi), rounds = atomic_load(&s->rounds);
    if (io < 0)
        return;
    /* the process's CPU less its planning's (the head's solves) */
    double cpu = hr_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (cpu >= 0)
        cpu -= (double)atomic_load(&a->cpu_aside_ns) * 1e-9;
    hr_lock(&s->mu, HR_RANK_STREAM);
    bool rebase = s->rebase && s->legacy;
    if (s->legacy)
        s->rebase = false;
    hr_unlock(&s->mu, HR_RANK_STREAM);
    if (s->pump) { /* from the end of the pump's warm-up of the latest plan */
        hr_stream_pump_stats ps;
        hr_stream_pump_get_stats(s->pump, &ps);
        rebase = ps.plans_warm != s->warm_seen;
        s->warm_seen = ps.plans_warm;
    }
    if (s->ex) { /* ... or of the expert cache's (pinning its part reads hundreds of MiB) */
        hr_expert_cache_stats es;
        hr_expert_cache_get_stats(s->ex, &es);
        rebase = rebase || es.plans_applied != s->ex_warm_seen;
        s->ex_warm_seen = es.plans_applied;
    }
    double now = hr_now_s();
    /* a step of several rows counted, or computing, since the last sample */
    bool multi_now = multi != s->last_multi || atomic_load(&s->rows_now) > 1;
    if (s->last_io < 0 || rebase) { /* from the end of the warm-up */
        s->acc_io = s->acc_rounds = s->acc1_io = s->acc1_rounds = 0;
        s->acc1_cpu = 0;
        s->last_active = 0;
    } else {
        /* reads trail their window by up to a ring's turn, and the pump
         * reads the next window while the rest of the ring computes: an
         * interval counts when windows were computed in it or less than
         * HR_IO_TRAIL_S before it. (The rule was "in it or in the interval
         * before", which lost most reads where samples come faster than a
         * ring's turn: the head samples every control-loop turn, and
         * on five-small its status said 24.6 MiB read per token while
         * /proc/PID/io grew by 1892 MiB over 8 steps, ~236 MiB each, 249
         * predicted.) */
        double d_io = (double)(io - s->last_io), d_r = (double)(rounds - s->last_rounds);
        /* the CPU of the same spans: the windows' compute, the pump's reads
         * and the page cache's work for them (a CPU quota caps their sum) */
        double d_cpu = cpu >= 0 && s->last_cpu >= 0 && cpu >= s->last_cpu ? cpu - s->last_cpu : 0;
        if (d_r > 0 || (s->last_active > 0 && now - s->last_active < HR_IO_TRAIL_S)) {
            s->acc_io += d_io;
            s->acc_rounds += d_r;
            /* A step of several rows (a prompt, requests batched together)
             * reads the union of its rows' experts: the per-token figure,
             * which the plan predicts, is taken from samples of one-row
             * steps only, neither in (its reads come before its window is
             * counted) nor right after such a step. */
            if (!multi_now && !s->multi_before) {
                s->acc1_io += d_io;
                s->acc1_cpu += d_cpu;
                s->acc1_rounds += d_r;
            }
        }
        if (d_r > 0)
            s->last_active = now;
    }
    s->multi_before = s->last_io < 0 || multi_now;
    s->last_io = io;
    s->last_cpu = cpu;
    s->last_rounds = rounds;
    s->last_multi = multi;
    if (s->acc_rounds >= 1) { /* steps of several rows alone: every step */
        hr_lock(&s->mu, HR_RANK_STREAM);
        bool one = s->acc1_rounds >= 1;
        s->st.read_round = one ? s->acc1_io / s->acc1_rounds : s->acc_io / s->acc_rounds;
        s->st.cpu_round = cpu >= 0 && s->acc1_rounds >= HR_CPU_MIN_ROUNDS
                              ? 1e3 * s->acc1_cpu / s->acc1_rounds
                              : -1;
        hr_unlock(&s->mu, HR_RANK_STREAM);
    }
}
