/* worker.c - a worker's two threads: the control loop (join, apply plans,
 * heartbeats, cancels; one handler per message type the head sends, timers
 * for joining, heartbeats and head silence) and the data thread that
 * computes this device's windows as BATCH frames come around the ring. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "agent"

/* ---- data thread ---- */

static void hr_reject_frame(hr_agent *a, const char *where, const char *why) {
    hr_lock(&a->st.mu, HR_RANK_STATS);
    a->st.frames_rejected++;
    hr_unlock(&a->st.mu, HR_RANK_STATS);
    HR_LOG_WARN(TAG, "%s: rejected frame on %s: %s", a->name, where, why);
}

/* The data thread's receive buffer and BATCH row tables, sized once for
 * the largest legal frame. */
#define HR_DATA_MAX_ROWS (4096 + HR_AGENT_MAX_PARALLEL)
typedef struct {
    uint8_t *rx;
    size_t cap;
    hr_seq_pos *rows;    /* [HR_DATA_MAX_ROWS] */
    int32_t *slot, *pos; /* [HR_DATA_MAX_ROWS] each */
    uint64_t session;    /* the newest batch session seen (plan_epoch's) */
    uint64_t epoch;
} hr_data_buf;

/* A BATCH frame (plan_mu held): rows of several sequences, each in its own
 * KV slot; computes the window of its round and passes it on. Returns 0,
 * 1 when the frame was dropped quietly (a canceled or older session), or a
 * negative HR_E* code with err (rejected). *ms: the window's time. */
static int hr_data_batch(hr_agent *a, hr_data_buf *b, hr_ring_hdr *h, double *ms,
                         char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd, es = hr_ring_dtype_size(h->dtype);
    int nt = h->n_tok;
    if (h->plan_id != lp->plan_id)
        return hr_seterr(err, HR_EINVAL, "frame of plan %u, current plan %u", h->plan_id,
                         lp->plan_id);
    if (h->dtype != lp->dtype || nt > hr_local_plan_rows(lp) || nt > HR_DATA_MAX_ROWS ||
        h->round >= lp->k || (size_t)h->len != (size_t)nt * (HR_RING_ROW_SIZE + E * es))
        return hr_seterr(err, HR_EFORMAT,
                         "BATCH frame does not fit the plan: dtype %u, %u rows (at most %d), "
                         "round %u (k %d), %u bytes for n_embd %zu",
                         h->dtype, nt, hr_local_plan_rows(lp), h->round, lp->k, h->len, E);
    if (h->req_id <= atomic_load(&a->canceled_req) || hr_local_plan_layers(lp) <= 0)
        return 1;
    if (b->epoch != a->plan_epoch) { /* a new plan: fresh KV, sessions start over */
        b->epoch = a->plan_epoch;
        b->session = 0;
    }
    if (h->req_id < b->session)
        return 1;
    const uint8_t *pl = b->rx + HR_RING_HDR_SIZE;
    hr_ring_rows_read(pl, b->slot, b->pos, nt);
    for (int i = 0; i < nt; i++) {
        bool decode = b->slot[i] >= 0 && (b->slot[i] & HR_RING_ROW_DECODE);
        if (decode)
            b->slot[i] &= ~HR_RING_ROW_DECODE;
        if (b->slot[i] < 0 || b->slot[i] >= lp->n_seq || b->pos[i] < 0 || b->pos[i] >= lp->n_ctx)
            return hr_seterr(err, HR_EFORMAT,
                             "BATCH row %d: slot %d, position %d outside %d slots of %d positions",
                             i, b->slot[i], b->pos[i], lp->n_seq, lp->n_ctx);
        b->rows[i] = (hr_seq_pos){.seq = b->slot[i], .pos = b->pos[i], .decode = decode};
    }
    size_t rt = (size_t)nt * HR_RING_ROW_SIZE;
    int rc = hr_ring_unpack(lp->hid, (size_t)nt * E, pl + rt, h->len - rt, h->dtype);
    if (rc)
        return hr_seterr(err, rc, "BATCH frame: bad hidden states");
    hr_node_push_connect(a);
    double t0 = hr_now_s();
    /* no window this round: the hidden states pass on as they came */
    if (lp->ctx[h->round] && (rc = hr_ctx_step(lp->ctx[h->round], lp->hid, b->rows, nt, err)))
        return rc;          /* rows out of order or beyond a slot's length: nothing computed */
    b->session = h->req_id; /* older sessions' frames are dropped from now on */
    hr_node_test_slow(a);
    *ms = (hr_now_s() - t0) * 1000.0;
    memcpy(lp->frame + HR_RING_HDR_SIZE, pl, rt);
    long len =
        hr_ring_pack(lp->frame + HR_RING_HDR_SIZE + rt, lp->frame_cap - HR_RING_HDR_SIZE - rt,
                     lp->hid, (size_t)nt * E, lp->dtype);
    if (len < 0)
        return hr_seterr(err, (int)len, "BATCH frame: cannot pack the hidden states");
    h->len = (uint32_t)(rt + (size_t)len);
    if ((rc = hr_ring_send(a->push, NULL, 0, lp->frame, h, err)))
        HR_LOG_WARN(TAG, "%s: cannot pass the batch on to %s: %s", a->name, a->push_ep, err);
    return 0;
}

static void *hr_data_main(void *arg) {
    hr_agent *a = arg;
    char err[HR_ERR_LEN];
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    hr_data_buf b = {.cap =
                         HR_RING_HDR_SIZE + (size_t)HR_DATA_MAX_ROWS * (HR_RING_ROW_SIZE + E * 4)};
    b.rx = malloc(b.cap); /* largest legal frame: allocated once */
    b.rows = malloc(HR_DATA_MAX_ROWS * sizeof *b.rows);
    b.slot = malloc(HR_DATA_MAX_ROWS * sizeof *b.slot);
    b.pos = malloc(HR_DATA_MAX_ROWS * sizeof *b.pos);
    if (!b.rx || !b.rows || !b.slot || !b.pos) {
        HR_LOG_ERROR(TAG, "%s: out of memory for the data thread", a->name);
        free(b.rx);
        free(b.rows);
        free(b.slot);
        free(b.pos);
        return NULL;
    }
    uint8_t *rx = b.rx;
    size_t cap = b.cap;
    while (!atomic_load(&a->stop)) {
        hr_ring_hdr h;
        err[0] = 0;
        long n = hr_ring_recv(a->pull, NULL, NULL, rx, cap, 200, &h, err);
        if (n == 0)
            continue;
        if (n < 0) {
            hr_reject_frame(a, "data port", err);
            continue;
        }
        if (h.type != HR_RING_BATCH) {
            snprintf(err, HR_ERR_LEN, "%s frame on the data port", hr_ring_type_name(h.type));
            hr_reject_frame(a, "data port", err);
            continue;
        }
        hr_lock(&a->plan_mu, HR_RANK_PLAN);
        hr_local_plan *lp = &a->lp;
        double ms = 0;
        int round = h.round, nt = h.n_tok;
        hr_node_window_start(a, nt);
        int rc = hr_data_batch(a, &b, &h, &ms, err);
        if (rc == 0) { /* after the send: the streamer reads ahead off the ring's path */
            hr_node_after_window(a, lp, round, nt);
            /* under plan_mu: a plan applied meanwhile starts its statistics over */
            hr_node_stats_round(a, lp->count[round] > 0 ? ms : -1.0, nt, round + 1 == lp->k);
        }
        hr_unlock(&a->plan_mu, HR_RANK_PLAN);
        if (rc < 0)
            hr_reject_frame(a, "data port", err);
    }
    free(b.rx);
    free(b.rows);
    free(b.slot);
    free(b.pos);
    return NULL;
}

/* ---- control loop ---- */

typedef struct {
    hr_agent *a;
    hr_ring_loop *loop;
    bool joined;
    double next_join, join_wait; /* s, monotonic: next JOIN, then the wait after it */
    int join_tries;              /* JOINs sent without an answer */
    double first_join;           /* s, monotonic: the first of them */
    bool unpaired_said;          /* hr_worker_warn_unpaired said it (once per start) */
    double last_head;            /* s, monotonic */
    uint8_t *buf;                /* one control frame */
    size_t cap;
    int rc; /* fatal refusal: HR_EDENIED, HR_EUNSUPPORTED */
    char *err;
    /* the applied plan's windows and id, for heartbeats: read without
     * plan_mu, which the data thread holds for a whole window (seconds on a
     * device that streams from a slow disk; the head must not think it lost) */
    hr_local_plan windows;
    /* a worker without the model file: the plan waiting for its bytes */
    bool pending;
    hr_local_plan pend;
    uint64_t pend_win_bytes; /* bytes of its windows */
} hr_worker;

/* Sends m to the head (frees its payload). */
static void hr_worker_send(hr_agent *a, hr_msg *m) {
    char err[HR_ERR_LEN];
    if (hr_msg_send(a->up, NULL, 0, m, err))
        HR_LOG_DEBUG(TAG, "%s: %s to head: %s", a->name, hr_ring_type_name(m->h.type), err);
}

/* Joins again from the start: a JOIN now, then 0.5 s doubling to 8 s. */
static void hr_worker_rejoin(hr_worker *w) {
    w->joined = false;
    w->next_join = 0;
    w->join_wait = 0.5;
    w->join_tries = 0;
}

/* After a fatal refusal (w->rc and w->err set): the agent stops. */
static void hr_worker_fatal(hr_worker *w) {
    atomic_store(&w->a->stop, 1);
    hr_ring_loop_break(w->loop);
}

/* PLAN payload -> this device's part, with our own prefetch / release
 * settings; the ring members the head vouches for may send us hidden states. */
static int hr_plan_from_msg(hr_agent *a, const hr_ring_hdr *h, const void *pl, hr_local_plan *np,
                            char err[HR_ERR_LEN]) {
    hr_msg_plan m;
    memset(np, 0, sizeof *np);
    int rc = hr_msg_plan_decode(h, pl, &m, err);
    if (rc)
        return rc;
    np->plan_id = m.plan_id;
    np->k = m.k;
    np->index = m.index;
    if (m.k > HR_AGENT_MAX_K)
        return hr_seterr(err, HR_EINVAL, "plan %u has %d rounds, this device runs at most %d",
                         m.plan_id, m.k, HR_AGENT_MAX_K);
    for (int r = 0; r < m.k && m.index >= 0; r++)
        hr_msg_plan_window(&m, m.index, r, &np->first[r], &np->count[r]);
    np->n_active = m.n_active;
    np->n_ctx = m.n_ctx;
    np->n_batch = m.n_batch;
    np->n_seq = m.n_seq;
    np->dtype = m.dtype;
    np->prefetch = m.prefetch && a->p.prefetch;
    np->release = a->p.release >= 0 ? a->p.release == 1 : m.release;
    np->mem_budget = m.mem_budget;
    np->n_gpu = m.n_gpu;
    snprintf(np->next_ep, sizeof np->next_ep, "%s", m.next);
    snprintf(np->next_key, sizeof np->next_key, "%s", m.next_key);
    if (a->keys)
        hr_ring_keys_vouch(a->keys, (const char(*)[HR_RING_KEY_LEN])m.keys, m.n_keys);
    return 0;
}

static void hr_worker_heartbeat(hr_worker *w, double t_sent) {
    hr_agent *a = w->a;
    double ms, res;
    uint64_t tok, rej, rounds;
    hr_lock(&a->st.mu, HR_RANK_STATS);
    ms = a->st.ms_round;
    rounds = a->st.rounds;
    double ms_total = a->st.ms_total;
    tok = a->st.tokens;
    rej = a->st.frames_rejected;
    hr_unlock(&a->st.mu, HR_RANK_STATS);
    res = hr_node_resident(a, &w->windows);
    uint32_t pid = w->windows.plan_id;
    int64_t avail, total; /* MemAvailable, bytes (cheap: no full sysinfo per heartbeat) */
    hr_node_meminfo(&avail, &total);
    hr_node_io_sample(a);
    hr_stream_stats ss;
    hr_node_stream_stats(a, &ss);
    hr_msg_heartbeat hb = {.ms_round = ms,
                           .resident = res,
                           .tokens = tok,
                           .rejected = rej,
                           .mem_avail = avail,
                           .t = t_sent,
                           .read_round = ss.read_round,
                           .cpu_round = ss.cpu_round,
                           .stream_round = ss.stream_round,
                           .pinned = ss.pinned,
                           .locked = ss.locked,
                           .rounds = rounds,
                           .ms_total = ms_total,
                           .fetch_done = -1,
                           .fetch_total = -1,
                           .fetch_wire = -1,
                           .ex_keep = ss.ex_keep,
                           .ex_routed = ss.ex_routed,
                           .ex_hits = ss.ex_hits,
                           .ex_fetched = ss.ex_fetched,
                           .ex_moved = ss.ex_moved,
                           .pump_bytes = ss.pump_bytes,
                           .pump_s = ss.pump_s};
    if (a->cache && a->fetch.want_bytes) {
        hb.fetch_done = (double)a->fetch.done_bytes;
        hb.fetch_total = (double)a->fetch.want_bytes;
        hb.fetch_wire = (double)a->fetch.wire_bytes;
    }
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_heartbeat_encode(&m, &hb, err) == 0) {
        m.h.plan_id = pid;
        hr_worker_send(a, &m);
    }
}

/* ---- handlers: one per message type from the head ---- */

typedef void (*hr_worker_fn)(hr_worker *w, const hr_ring_hdr *h, const char *pl);

static void hr_worker_on_welcome(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    (void)h;
    (void)pl;
    if (!w->joined)
        HR_LOG_INFO(TAG, "%s: joined head %s", w->a->name, w->a->head_ep);
    w->joined = true;
}

static void hr_worker_on_reject(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    hr_msg_reject rj;
    char e2[HR_ERR_LEN];
    if (hr_msg_reject_decode(h, pl, &rj, e2)) {
        hr_reject_frame(w->a, "head link", e2);
    } else if (rj.fatal) { /* model or version mismatch */
        w->rc = hr_seterr(w->err, HR_EDENIED, "head %s refused us: %s", w->a->head_ep, rj.reason);
        hr_worker_fatal(w);
    } else {
        HR_LOG_WARN(TAG, "%s: head says: %s", w->a->name, rj.reason);
        hr_worker_rejoin(w);
    }
}

/* Applies plan np (rc: its decode result) and answers READY. */
static void hr_worker_apply(hr_worker *w, hr_local_plan *np, int rc, char e2[HR_ERR_LEN]) {
    hr_agent *a = w->a;
    hr_msg_ready rd = {.ok = true};
    if (rc == 0) {
        hr_lock(&a->plan_mu, HR_RANK_PLAN);
        /* fetched layers: their norms were copied from holes at load */
        for (int r = 0; a->cache && rc == 0 && r < np->k && r < HR_AGENT_MAX_K; r++)
            if (np->count[r] > 0)
                rc = hr_model_refresh_layers(a->m, a->g, np->first[r], np->first[r] + np->count[r],
                                             e2);
        if (rc == 0)
            rc = hr_node_apply_plan(a, np, e2);
        /* request ids are the head's: a restarted head counts from 1 again.
         * Frames of requests canceled under an earlier plan carry its plan
         * id and are refused by that, so the cancel mark starts over. */
        atomic_store(&a->canceled_req, 0);
        /* only the windows and the plan id (the buffers stay the data thread's) */
        w->windows = (hr_local_plan){.plan_id = a->lp.plan_id, .k = a->lp.k};
        memcpy(w->windows.count, a->lp.count, sizeof w->windows.count);
        memcpy(w->windows.win_off, a->lp.win_off, sizeof w->windows.win_off);
        memcpy(w->windows.win_len, a->lp.win_len, sizeof w->windows.win_len);
        hr_unlock(&a->plan_mu, HR_RANK_PLAN);
    }
    if (rc) {
        rd.ok = false;
        snprintf(rd.error, sizeof rd.error, "%s", e2);
        HR_LOG_ERROR(TAG, "%s: cannot apply plan: %s", a->name, e2);
    }
    hr_msg m;
    if (hr_msg_ready_encode(&m, &rd, e2) == 0) {
        m.h.plan_id = np->plan_id;
        hr_worker_send(a, &m);
    }
}

/* A worker without the model file: starts fetching what plan np needs and
 * missing here (evicting old windows within --cache-gb). Returns 1 when
 * the plan waits for the fetch, 0 when everything is here, HR_E* + err. */
static int hr_worker_fetch_plan(hr_worker *w, hr_local_plan *np, char err[HR_ERR_LEN]) {
    hr_agent *a = w->a;
    uint64_t off[2 * HR_AGENT_MAX_K + 2], len[2 * HR_AGENT_MAX_K + 2];
    hr_node_windows(a, np);
    int n = hr_fetch_plan_ranges(a, np, off, len);
    uint64_t win_bytes = 0; /* the plan's windows alone (after the header and rope_freqs) */
    for (int i = a->rope_len ? 2 : 1; i < n; i++)
        win_bytes += len[i];
    w->pend_win_bytes = win_bytes;
    for (int r = 0; r < w->windows.k && r < HR_AGENT_MAX_K; r++)
        if (w->windows.win_len[r]) { /* the applied plan's windows: not evicted meanwhile */
            off[n] = w->windows.win_off[r];
            len[n++] = w->windows.win_len[r];
        }
    uint64_t *chunks = NULL, want = 0, miss = 0;
    long nc = 0;
    int rc = hr_cache_want(a->cache, off, len, n, &chunks, &nc, &want, &miss, err);
    if (rc)
        return rc;
    hr_fetch_begin(&a->fetch, chunks, nc, want, miss);
    if (!a->fetch.active) {
        HR_LOG_INFO(TAG, "%s: plan %u: its %.1f MiB are all here; nothing to fetch", a->name,
                    np->plan_id, want / 1048576.0);
        return 0;
    }
    HR_LOG_INFO(TAG,
                "%s: plan %u: windows of %llu bytes, %llu of them here; fetching %llu bytes "
                "missing from the head (%ld chunks)",
                a->name, np->plan_id, (unsigned long long)win_bytes,
                (unsigned long long)(miss < win_bytes ? win_bytes - miss : 0),
                (unsigned long long)miss, nc);
    hr_fetch_start(&a->fetch, a->up);
    return 1;
}

static void hr_worker_on_plan(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    hr_agent *a = w->a;
    hr_local_plan np;
    char e2[HR_ERR_LEN];
    int rc = hr_plan_from_msg(a, h, pl, &np, e2);
    if (rc == 0 && !np.plan_id)
        np.plan_id = h->plan_id;
    w->pending = false;
    if (rc == 0 && a->cache) {
        rc = hr_worker_fetch_plan(w, &np, e2);
        if (rc == 1) { /* READY when its bytes are here and verified */
            w->pending = true;
            w->pend = np;
            return;
        }
    }
    if (rc && !np.plan_id)
        np.plan_id = h->plan_id;
    hr_worker_apply(w, &np, rc, e2);
}

/* CHUNK: model bytes for the pending plan. */
static void hr_worker_on_chunk(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    hr_agent *a = w->a;
    char e2[HR_ERR_LEN];
    if (!a->cache || !w->pending)
        return; /* late duplicates */
    int rc = hr_fetch_on_chunk(&a->fetch, a->up, h, pl, a->name, e2);
    if (rc == 0)
        return;
    w->pending = false;
    if (rc == 1) {
        hr_fetch *f = &a->fetch;
        uint64_t got = f->done_bytes - (f->want_bytes - f->miss_bytes);
        HR_LOG_INFO(TAG,
                    "%s: plan %u: fetched %llu bytes (windows %llu bytes), %llu received, in "
                    "%.2f s: %.1f MB/s; all verified. Since start: %llu bytes fetched, %llu "
                    "received, %.2f s: %.1f MB/s",
                    a->name, w->pend.plan_id, (unsigned long long)got,
                    (unsigned long long)w->pend_win_bytes, (unsigned long long)f->wire_bytes,
                    f->done_s, f->done_s > 0 ? f->wire_bytes / f->done_s / 1e6 : 0.0,
                    (unsigned long long)f->tot_bytes, (unsigned long long)f->tot_wire, f->tot_s,
                    f->tot_s > 0 ? f->tot_wire / f->tot_s / 1e6 : 0.0);
    }
    hr_worker_apply(w, &w->pend, rc < 0 ? rc : 0, e2);
}

static void hr_worker_on_cancel(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    (void)pl;
    unsigned long long cur = atomic_load(&w->a->canceled_req);
    if (h->req_id > cur)
        atomic_store(&w->a->canceled_req, h->req_id);
    HR_LOG_INFO(TAG, "%s: request %llu canceled", w->a->name, (unsigned long long)h->req_id);
}

static void hr_worker_on_start(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    (void)pl;
    HR_LOG_DEBUG(TAG, "%s: request %llu starts", w->a->name, (unsigned long long)h->req_id);
}

/* LEAVE: the head is going away (shutdown): join again, with the backoff,
 * rather than wait for the heartbeat silence. */
static void hr_worker_on_leave(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    (void)h;
    (void)pl;
    HR_LOG_INFO(TAG, "%s: head %s is going away; joining again when it is back", w->a->name,
                w->a->head_ep);
    hr_worker_rejoin(w);
    w->next_join = hr_now_s() + w->join_wait; /* it is stopping: not at once */
}

static void hr_worker_on_echo(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    (void)w; /* the head's heartbeat echo: hearing from it is all it says */
    (void)h;
    (void)pl;
}

/* PROBE: measure the link to the responder named (the next device of a
 * plan, or the head at join) on the link thread; the figures go to the
 * head from the heartbeat timer (hr_worker_link_report). */
static void hr_worker_on_probe(hr_worker *w, const hr_ring_hdr *h, const char *pl) {
    hr_msg_probe rq;
    char e2[HR_ERR_LEN];
    if (hr_msg_probe_decode(h, pl, &rq, e2)) {
        hr_reject_frame(w->a, "head link", e2);
        return;
    }
    hr_link_request(w->a, &rq);
}

/* Sends the head a finished link measurement, if any. */
static void hr_worker_link_report(hr_worker *w) {
    hr_msg_link lk;
    char e2[HR_ERR_LEN];
    int rc = hr_link_take(w->a, &lk, e2);
    hr_msg m;
    if (rc == 1 && hr_msg_link_encode(&m, &lk, e2) == 0)
        hr_worker_send(w->a, &m);
}

static const hr_worker_fn hr_worker_handlers[HR_RING_TYPE_END] = {
    [HR_RING_WELCOME] = hr_worker_on_welcome, [HR_RING_REJECT] = hr_worker_on_reject,
    [HR_RING_PLAN] = hr_worker_on_plan,       [HR_RING_CANCEL] = hr_worker_on_cancel,
    [HR_RING_START] = hr_worker_on_start,     [HR_RING_HEARTBEAT] = hr_worker_on_echo,
    [HR_RING_LEAVE] = hr_worker_on_leave,     [HR_RING_PROBE] = hr_worker_on_probe,
    [HR_RING_CHUNK] = hr_worker_on_chunk,
};

/* The head link is readable: one message, dispatched by type. */
static void hr_worker_on_up(void *ud) {
    hr_worker *w = ud;
    hr_agent *a = w->a;
    hr_ring_hdr h;
    char e2[HR_ERR_LEN] = "";
    long n = hr_ring_recv(a->up, NULL, NULL, w->buf, w->cap, 0, &h, e2);
    if (n == HR_EUNSUPPORTED) { /* only the head reaches this link */
        w->rc = hr_seterr(w->err, HR_EUNSUPPORTED, "head %s speaks another protocol: %s",
                          a->head_ep, e2);
        hr_worker_fatal(w);
        return;
    }
    if (n <= 0) {
        if (n < 0)
            hr_reject_frame(a, "head link", e2);
        return;
    }
    w->last_head = hr_now_s();
    const hr_msg_info *mi = hr_msg_info_of(h.type);
    hr_worker_fn fn = hr_worker_handlers[h.type];
    if (!fn || !(mi->dir & HR_MSG_H2W)) {
        hr_reject_frame(a, "head link", hr_ring_type_name(h.type));
        return;
    }
    fn(w, &h, (const char *)w->buf + HR_RING_HDR_SIZE);
}

/* Our own control port: invites (we already have a head) and strays. */
static void hr_worker_on_ctrl(void *ud) {
    hr_worker *w = ud;
    hr_ring_hdr h;
    char e2[HR_ERR_LEN] = "";
    uint8_t id[HR_RING_MAX_ID];
    size_t idl = 0;
    long n = hr_ring_recv(w->a->ctrl, id, &idl, w->buf, w->cap, 0, &h, e2);
    if (n < 0)
        hr_reject_frame(w->a, "control port", e2);
    else if (n > 0 && h.type == HR_RING_INVITE)
        HR_LOG_INFO(TAG, "%s: already joined to %s; invite ignored", w->a->name, w->a->head_ep);
    else if (n > 0)
        hr_reject_frame(w->a, "control port", hr_ring_type_name(h.type));
}

/* ---- timers ---- */

/* A worker is told after this long without an answer that the head may
 * not accept it. */
#define HR_UNPAIRED_WARN_S 10.0

/* JOIN until the head answers: at once, then after 0.5 s doubling to 8 s,
 * saying so at each retry (the head folds repeated JOINs into one). */
static void hr_worker_join_timer(void *ud) {
    hr_worker *w = ud;
    double now = hr_now_s();
    if (!w->joined && now < w->next_join)
        hr_ring_loop_wake_at(w->loop, w->next_join); /* sleep until the next JOIN is due */
    if (!w->joined && w->join_tries > 0 && !w->unpaired_said &&
        now - w->first_join >= HR_UNPAIRED_WARN_S) {
        hr_worker_warn_unpaired(w->a, now - w->first_join);
        w->unpaired_said = true;
    }
    if (w->joined || now < w->next_join)
        return;
    if (w->join_tries == 0)
        w->first_join = now;
    if (w->join_tries > 0)
        HR_LOG_INFO(TAG, "%s: no answer from head %s yet; retrying in %.1f s", w->a->name,
                    w->a->head_ep, w->join_wait);
    hr_msg m = hr_msg_empty(HR_RING_JOIN, 0, 0);
    m.h.len = (uint32_t)strlen(w->a->info_json);
    if ((m.data = strdup(w->a->info_json)))
        hr_worker_send(w->a, &m);
    /* a head we cannot reach over CURVE (no head key here, or a stale one)
     * never sees the JOIN: a knock lets it log how to pair us */
    if (w->join_tries > 0 || hr_worker_no_head_key(w->a))
        hr_worker_knock(w->a);
    w->join_tries++;
    w->next_join = now + w->join_wait;
    w->join_wait = w->join_wait * 2 < 8.0 ? w->join_wait * 2 : 8.0;
}

static void hr_worker_hb_timer(void *ud) {
    hr_worker *w = ud;
    if (w->joined)
        hr_worker_heartbeat(w, hr_now_s());
}

/* A pending fetch: asks again after a stall, fails the plan after a minute
 * without bytes. */
static void hr_worker_fetch_timer(void *ud) {
    hr_worker *w = ud;
    char e2[HR_ERR_LEN];
    if (w->pending && hr_fetch_tick(&w->a->fetch, w->a->up, e2) != 0) {
        w->pending = false;
        hr_worker_apply(w, &w->pend, HR_ETIMEDOUT, e2);
    }
}

static void hr_worker_link_timer(void *ud) {
    hr_worker *w = ud;
    if (w->joined)
        hr_worker_link_report(w);
}

static void hr_worker_silence_timer(void *ud) {
    hr_worker *w = ud;
    double now = hr_now_s();
    if (w->joined && now - w->last_head > 3.0 * w->a->p.hb_timeout_ms / 1000.0) {
        HR_LOG_WARN(TAG, "%s: no word from head %s for %.1f s; joining again", w->a->name,
                    w->a->head_ep, now - w->last_head);
        hr_worker_rejoin(w);
        w->last_head = now;
    }
}

static int hr_worker_connect(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_ring_close(a->up);
    hr_ring_sockopt so = hr_ring_sockopt_default();
    so.max_msg = HR_RING_HDR_SIZE + HR_MSG_CHUNK_HDR + HR_MSG_CHUNK_MAX + 1024; /* CHUNKs */
    so.snd_timeout_ms = 100;
    if (!(a->up = hr_ring_socket(a->zctx, HR_RING_DEALER, &so, err)))
        return HR_ENET;
    int rc;
    if (a->keys && (rc = hr_ring_secure_client(a->up, a->keys, a->head_key, err)))
        return rc;
    return hr_ring_connect(a->up, a->head_ep, err);
}

int hr_worker_run(hr_agent *a, char err[HR_ERR_LEN]) {
    int rc;
    if (a->p.join && a->keys && !a->paired && (rc = hr_worker_pair(a, err)))
        return rc;
    if ((rc = hr_worker_connect(a, err)))
        return rc;
    if (pthread_create(&a->data_thread, NULL, hr_data_main, a) != 0)
        return hr_seterr(err, HR_EINTERNAL, "cannot start the data thread");
    a->data_started = true;
    hr_worker w = {.a = a, .last_head = hr_now_s(), .join_wait = 0.5, .err = err};
    w.cap = HR_RING_HDR_SIZE + HR_MSG_CHUNK_HDR + HR_MSG_CHUNK_MAX;
    w.buf = malloc(w.cap);
    w.loop = hr_ring_loop_create(&a->stop);
    if (!w.buf || !w.loop) {
        free(w.buf);
        hr_ring_loop_destroy(w.loop);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    hr_ring_loop_timer(w.loop, 0, hr_worker_join_timer, &w);
    hr_ring_loop_timer(w.loop, a->p.hb_interval_ms, hr_worker_hb_timer, &w);
    hr_ring_loop_timer(w.loop, 250, hr_worker_silence_timer, &w);
    hr_ring_loop_timer(w.loop, HR_NODE_TRIM_MS, hr_node_trim_timer, NULL);
    hr_ring_loop_timer(w.loop, 0, hr_worker_link_timer, &w);
    hr_ring_loop_timer(w.loop, 500, hr_worker_fetch_timer, &w);
    hr_ring_loop_socket(w.loop, a->up, hr_worker_on_up, &w);
    hr_ring_loop_socket(w.loop, a->ctrl, hr_worker_on_ctrl, &w);
    rc = hr_ring_loop_run(w.loop, err);
    if (w.rc)
        rc = w.rc;
    if (w.joined) {
        hr_msg m = hr_msg_empty(HR_RING_LEAVE, 0, 0);
        hr_worker_send(a, &m);
    }
    hr_ring_loop_destroy(w.loop);
    free(w.buf);
    return rc;
}
