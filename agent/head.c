/* head.c - the head's control plane: accepts joins (checking protocol
 * version and model fingerprint), makes the plan (forced k / windows, or
 * the Halda scheduler over the devices' profiles, or an even split), sends
 * it, tracks readiness and heartbeats (a silent device is reported lost),
 * serves status and hands CLI prompts to the request service (prompt.c). */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/msg.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "head"

/* ---- helpers ---- */

/* Sends m to the peer with ROUTER identity id (frees its payload). */
static void hr_head_send(hr_agent *a, const uint8_t *id, size_t idl, hr_msg *m) {
    char err[HR_ERR_LEN];
    int type = m->h.type;
    if (hr_msg_send(a->ctrl, id, idl, m, err))
        HR_LOG_DEBUG(TAG, "reply %s: %s", hr_ring_type_name(type), err);
}

static void hr_head_reject(hr_agent *a, const uint8_t *id, size_t idl, bool fatal,
                           const char *reason) {
    hr_msg_reject rj = {.fatal = fatal};
    snprintf(rj.reason, sizeof rj.reason, "%s", reason);
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_reject_encode(&m, &rj, err) == 0)
        hr_head_send(a, id, idl, &m);
}

static void hr_head_error(hr_agent *a, const uint8_t *id, size_t idl, const char *text) {
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_error_encode(&m, text, err) == 0)
        hr_head_send(a, id, idl, &m);
}

static int hr_find_dev(const hr_agent *a, const uint8_t *id, size_t idl) {
    for (int i = 1; i < a->n_devs; i++)
        if (a->devs[i].id_len == idl && memcmp(a->devs[i].id, id, idl) == 0)
            return i;
    return -1;
}

/* The scheduler's view of d from its profile (JSON text, may be NULL). */
static void hr_dev_sched(hr_agent *a, hr_dev *d, const char *profile, bool is_head) {
    d->has_sched = false;
    if (!a->have_pm)
        return;
    if (profile) {
        hr_prof_device *pd = calloc(1, sizeof *pd);
        char err[HR_ERR_LEN];
        int prc = pd ? hr_prof_device_parse(profile, strlen(profile), pd, err) : HR_ENOMEM;
        if (prc)
            HR_LOG_WARN("head", "device '%s': unusable profile (%s); no predictions for it",
                        d->name, prc == HR_ENOMEM ? "out of memory" : err);
        if (prc == 0) {
            hr_prof_sched_params sp = hr_prof_sched_params_default();
            sp.is_head = is_head;
            sp.n_ctx = hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx);
            if (hr_prof_to_sched_device(pd, &a->pm, NULL, &sp, &d->sd, err) == 0) {
                snprintf(d->sd.name, sizeof d->sd.name, "%s", d->name);
                if (d->sd.link_bps <= 0)
                    d->sd.link_bps = 1e9; /* loopback-class until measured */
                if (d->sd.rtt_ms <= 0)
                    d->sd.rtt_ms = 0.1;
                d->has_sched = true;
            } else {
                HR_LOG_WARN("head", "device '%s': profile not usable for planning: %s", d->name,
                            err);
            }
        }
        free(pd);
    }
}

/* ---- planning ---- */

static int hr_parse_windows(const char *s, int *w, int max) {
    int n = 0;
    while (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 100000 || n >= max)
            return -1;
        w[n++] = (int)v;
        s = end;
        while (*s == ',' || *s == ' ')
            s++;
    }
    return n;
}

/* Picks k and w[] for devices cand[0..n) (cand[0] = head). */
static int hr_head_assign(hr_agent *a, const int *cand, int n, int *k_out, int *w,
                          char err[HR_ERR_LEN]) {
    int L = hr_model_hparams(a->m)->n_layer;
    if (a->p.windows) {
        int nw = hr_parse_windows(a->p.windows, w, HR_AGENT_MAX_DEV);
        if (nw != n)
            return hr_seterr(err, HR_EINVAL, "--windows lists %d sizes for %d devices", nw, n);
        int sum = 0;
        for (int i = 0; i < n; i++)
            sum += w[i];
        int k = a->p.k > 0 ? a->p.k : (sum > 0 ? L / sum : 0);
        if (sum <= 0 || sum * k != L)
            return hr_seterr(err, HR_EINVAL, "windows sum to %d; k x sum must be %d layers", sum,
                             L);
        *k_out = k;
        return 0;
    }
    bool all_sched = true;
    for (int i = 0; i < n; i++)
        all_sched &= a->devs[cand[i]].has_sched;
    if (all_sched && a->have_pm) {
        hr_sched_device sd[HR_AGENT_MAX_DEV];
        for (int i = 0; i < n; i++) {
            sd[i] = a->devs[cand[i]].sd;
            sd[i].is_head = i == 0;
        }
        hr_sched_model sm;
        hr_sched_opts so = hr_sched_opts_default();
        so.k_fixed = a->p.k;
        if (hr_prof_to_sched_model(&a->pm, hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx), &sm,
                                   err) == 0 &&
            hr_sched_solve(&sm, sd, n, &so, &a->sched, err) == 0) {
            *k_out = a->sched.k;
            for (int i = 0; i < n; i++)
                w[i] = a->sched.dev[i].w;
            return 0;
        }
        HR_LOG_WARN(TAG, "scheduler: %s; splitting evenly", err);
    }
    int k = a->p.k > 0 ? a->p.k : 1;
    if (L % k != 0)
        return hr_seterr(err, HR_EINVAL, "k = %d does not divide %d layers", k, L);
    int W = L / k;
    for (int i = 0; i < n; i++)
        w[i] = W / n + (i < W % n);
    *k_out = k;
    return 0;
}

static int hr_head_n_workers(const hr_agent *a) {
    int n = 0;
    for (int i = 1; i < a->n_devs; i++)
        n += !a->devs[i].lost;
    return n;
}

/* Predicted figures (a->sched) when every device has a profile. */
static void hr_head_predict(hr_agent *a, const int *cand, int n, int k, const int *w) {
    bool all_sched = a->have_pm;
    hr_sched_device sd[HR_AGENT_MAX_DEV];
    for (int i = 0; i < n; i++) {
        all_sched &= a->devs[cand[i]].has_sched;
        sd[i] = a->devs[cand[i]].sd;
        sd[i].is_head = i == 0;
    }
    hr_sched_model sm;
    char e2[HR_ERR_LEN];
    if (all_sched &&
        hr_prof_to_sched_model(&a->pm, hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx), &sm,
                               e2) == 0 &&
        hr_sched_evaluate(&sm, sd, n, NULL, k, w, NULL, &a->sched, e2) == 0)
        a->have_sched = true;
    else if (all_sched)
        HR_LOG_WARN("head", "no predicted times for plan: %s", e2);
    else
        HR_LOG_INFO("head", "no predicted times: not every device sent a profile");
}

/* Windows and ring positions for the candidates; ring[] gets the device
 * indexes in ring order (the head first, devices with w 0 left out). */
static void hr_head_layout(hr_agent *a, const int *cand, int n, int k, const int *w, int *ring,
                           int *n_active) {
    int off = 0;
    *n_active = 0;
    for (int i = 0; i < a->n_devs; i++) {
        a->devs[i].ring_pos = -1;
        a->devs[i].w = 0;
    }
    for (int i = 0; i < n; i++) {
        hr_dev *d = &a->devs[cand[i]];
        d->w = w[i];
        d->offset = off;
        off += w[i];
        d->overloaded = a->have_sched && a->sched.dev[i].overloaded;
        d->pred_ms_round =
            a->have_sched ? (a->sched.dev[i].compute_ms + a->sched.dev[i].disk_exposed_ms) / k : 0;
        d->ready = false;
        if (i == 0 || w[i] > 0) {
            d->ring_pos = *n_active;
            ring[(*n_active)++] = cand[i];
        }
    }
}

/* Applies the head's own part and sends every other device its PLAN
 * (devices left out of the ring get an empty window). */
static int hr_head_send_plans(hr_agent *a, int k, int W, const int *ring, int n_active,
                              char err[HR_ERR_LEN]) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    int rc;
    int n_ctx = hr_hparams_ctx(hp, a->p.n_ctx);
    hr_msg_plan pm = {.plan_id = a->plan_id,
                      .k = k,
                      .W = W,
                      .n_active = n_active,
                      .n_ctx = n_ctx,
                      .n_batch = a->p.n_batch,
                      .dtype = a->p.wire_dtype};
    for (int r = 0; r < n_active; r++) /* ring members vouched for to each other */
        if (a->devs[ring[r]].pubkey[0])
            snprintf(pm.keys[pm.n_keys++], HR_RING_KEY_LEN, "%s", a->devs[ring[r]].pubkey);
    for (int r = 0; r < n_active; r++) {
        hr_dev *d = &a->devs[ring[r]];
        const char *next = n_active > 1 ? a->devs[ring[(r + 1) % n_active]].data_ep : "";
        const char *next_key = n_active > 1 ? a->devs[ring[(r + 1) % n_active]].pubkey : "";
        pm.w = d->w;
        pm.offset = d->offset;
        pm.prefetch = a->p.prefetch;
        pm.release = a->p.release >= 0 ? a->p.release == 1 : d->overloaded;
        snprintf(pm.next, sizeof pm.next, "%s", next);
        snprintf(pm.next_key, sizeof pm.next_key, "%s", next_key);
        if (r == 0) {
            hr_local_plan np = {.plan_id = a->plan_id,
                                .k = k,
                                .W = W,
                                .w = d->w,
                                .offset = d->offset,
                                .n_active = n_active,
                                .index = r,
                                .n_ctx = n_ctx,
                                .n_batch = a->p.n_batch,
                                .dtype = a->p.wire_dtype,
                                .prefetch = pm.prefetch,
                                .release = pm.release};
            snprintf(np.next_ep, sizeof np.next_ep, "%s", next);
            snprintf(np.next_key, sizeof np.next_key, "%s", next_key);
            if ((rc = hr_agent_apply_plan(a, &np, err)))
                return rc;
            d->ready = true;
            d->ready_plan = a->plan_id;
            continue;
        }
        hr_msg m;
        if ((rc = hr_msg_plan_encode(&m, &pm, err)))
            return rc;
        hr_head_send(a, d->id, d->id_len, &m);
    }
    a->planned = true;
    /* devices left out of the ring get an empty window */
    hr_msg_plan empty = {.plan_id = a->plan_id,
                         .k = k,
                         .W = W,
                         .n_active = n_active,
                         .n_ctx = n_ctx,
                         .n_batch = a->p.n_batch,
                         .dtype = a->p.wire_dtype};
    for (int i = 1; i < a->n_devs; i++) {
        hr_dev *d = &a->devs[i];
        if (d->lost || d->ring_pos >= 0)
            continue;
        hr_msg m;
        if ((rc = hr_msg_plan_encode(&m, &empty, err)))
            return rc;
        hr_head_send(a, d->id, d->id_len, &m);
    }
    return 0;
}

/* Makes and sends a plan over the devices not lost (dev_mu and plan_mu
 * held by the control thread). */
static int hr_head_replan(hr_agent *a, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    int cand[HR_AGENT_MAX_DEV], n = 0, w[HR_AGENT_MAX_DEV], k = 1;
    for (int i = 0; i < a->n_devs; i++)
        if (!a->devs[i].lost)
            cand[n++] = i;
    a->ready = false;
    a->have_sched = false;
    int rc = hr_head_assign(a, cand, n, &k, w, err);
    if (rc)
        return rc;
    hr_head_predict(a, cand, n, k, w);
    a->plan_id++;
    a->plan_k = k;
    int W = hp->n_layer / k, n_active = 0, ring[HR_AGENT_MAX_DEV];
    hr_head_layout(a, cand, n, k, w, ring, &n_active);
    if ((rc = hr_head_send_plans(a, k, W, ring, n_active, err)))
        return rc;
    HR_LOG_INFO(TAG, "plan %u: %d devices in the ring, k %d, %d layers per round", a->plan_id,
                n_active, k, W);
    return 0;
}

static void hr_head_update_ready(hr_agent *a) {
    bool ok = a->plan_id > 0 && !a->replan;
    for (int i = 0; i < a->n_devs; i++) {
        const hr_dev *d = &a->devs[i];
        if (d->lost)
            continue;
        if (!d->ready || d->ready_plan != a->plan_id)
            ok = false;
    }
    if (ok && !a->ready) {
        HR_LOG_INFO(TAG, "ring ready: plan %u, %d workers", a->plan_id, hr_head_n_workers(a));
        atomic_store(&a->lost, 0);
    }
    a->ready = ok;
    pthread_cond_broadcast(&a->dev_cv);
}

/* ---- messages ---- */

static void hr_head_join(hr_agent *a, const uint8_t *id, size_t idl, const hr_ring_hdr *h,
                         const char *pl) {
    hr_msg_join jm;
    char msg[HR_ERR_LEN], e2[HR_ERR_LEN];
    if (hr_msg_join_decode(h, pl, &jm, e2)) {
        snprintf(msg, sizeof msg, "malformed JOIN: %.200s", e2);
        HR_LOG_WARN(TAG, "%s", msg);
        hr_head_reject(a, id, idl, true, msg);
        return;
    }
    if (jm.version != HR_RING_VERSION) {
        snprintf(msg, sizeof msg, "protocol version %d unsupported (head speaks %d)", jm.version,
                 HR_RING_VERSION);
    } else if (jm.model_size != a->model_size || jm.model_hash != a->model_hash) {
        snprintf(msg, sizeof msg,
                 "model mismatch: device '%.40s' has %llu bytes, header hash %016llx; head has "
                 "%llu bytes, hash %016llx (every device needs the same GGUF file)",
                 jm.name, (unsigned long long)jm.model_size, (unsigned long long)jm.model_hash,
                 (unsigned long long)a->model_size, (unsigned long long)a->model_hash);
    } else {
        msg[0] = 0;
    }
    if (msg[0]) {
        HR_LOG_ERROR(TAG, "refused %s: %s", jm.ctrl, msg);
        hr_head_reject(a, id, idl, true, msg);
        hr_msg_join_clear(&jm);
        return;
    }
    int di = -1;
    for (int i = 1; i < a->n_devs; i++)
        if (strcmp(a->devs[i].ctrl_ep, jm.ctrl) == 0)
            di = i;
    if (di < 0) {
        if (a->n_devs >= HR_AGENT_MAX_DEV) {
            hr_head_reject(a, id, idl, true, "cluster is full");
            hr_msg_join_clear(&jm);
            return;
        }
        di = a->n_devs++;
    }
    hr_dev *d = &a->devs[di];
    if (d->ring_pos >= 0 && !d->lost && d->id_len &&
        (d->id_len != idl || memcmp(d->id, id, idl) != 0)) { /* restarted, not yet missed */
        snprintf(a->lost_msg, sizeof a->lost_msg, "device '%s' (%s) restarted", d->name,
                 d->ctrl_ep);
        HR_LOG_WARN(TAG, "%s", a->lost_msg);
        atomic_store(&a->lost, di + 1);
    }
    free(d->info);
    memset(d, 0, sizeof *d);
    snprintf(d->pubkey, sizeof d->pubkey, "%s", jm.pubkey);
    snprintf(d->name, sizeof d->name, "%s", jm.name);
    snprintf(d->ctrl_ep, sizeof d->ctrl_ep, "%s", jm.ctrl);
    snprintf(d->data_ep, sizeof d->data_ep, "%s", jm.data);
    memcpy(d->id, id, idl);
    d->id_len = idl;
    d->info = strndup(pl, h->len);
    d->last_seen = hr_now_s();
    d->ring_pos = -1;
    hr_dev_sched(a, d, jm.profile, false);
    hr_msg_join_clear(&jm);
    HR_LOG_INFO(TAG, "%s joined from %s (data %s)", d->name, d->ctrl_ep, d->data_ep);
    hr_msg w = hr_msg_empty(HR_RING_WELCOME, 0, 0);
    w.h.pos = 0;
    hr_head_send(a, id, idl, &w);
    a->replan = true;
    a->ready = false;
}

static void hr_head_heartbeat(hr_agent *a, int di, const hr_ring_hdr *h, const char *pl) {
    hr_dev *d = &a->devs[di];
    d->last_seen = hr_now_s();
    hr_msg_heartbeat hb;
    char err[HR_ERR_LEN];
    if (hr_msg_heartbeat_decode(h, pl, &hb, err) != 0) {
        HR_LOG_DEBUG(TAG, "%s: %s", d->name, err);
        return;
    }
    d->meas_ms_round = hb.ms_round;
    d->resident = hb.resident;
    d->tokens = hb.tokens;
    d->mem_avail = hb.mem_avail;
}

static void hr_head_check_lost(hr_agent *a) {
    double now = hr_now_s();
    for (int i = 1; i < a->n_devs; i++) {
        hr_dev *d = &a->devs[i];
        if (d->lost || now - d->last_seen < a->p.hb_timeout_ms / 1000.0)
            continue;
        d->lost = true;
        d->ready = false;
        snprintf(a->lost_msg, sizeof a->lost_msg,
                 "device '%.64s' (%.96s) lost: no heartbeat for %.1f s", d->name, d->ctrl_ep,
                 now - d->last_seen);
        HR_LOG_ERROR(TAG, "%s", a->lost_msg);
        if (d->ring_pos >= 0) {
            atomic_store(&a->lost, i + 1);
            a->ready = false;
            a->replan = true; /* plan again with the devices that remain */
            snprintf(a->plan_err, sizeof a->plan_err, "%s", a->lost_msg);
        }
        pthread_cond_broadcast(&a->dev_cv);
    }
}

static void hr_head_broadcast(hr_agent *a, int type, uint64_t req) {
    for (int i = 1; i < a->n_devs; i++)
        if (!a->devs[i].lost && a->devs[i].ring_pos >= 0) {
            hr_msg m = hr_msg_empty(type, req, a->plan_id);
            hr_head_send(a, a->devs[i].id, a->devs[i].id_len, &m);
        }
}

/* Events from the generating thread: START/CANCEL go to the workers,
 * TOKEN/DONE/ERROR to the `hearth prompt` client they name. */
static void hr_head_event(hr_agent *a, uint8_t *buf, size_t cap) {
    hr_ring_hdr h;
    char err[HR_ERR_LEN];
    long n;
    while ((n = hr_ring_recv(a->ev_pull, NULL, NULL, buf, cap, 0, &h, err)) > 0) {
        if (h.type == HR_RING_START || h.type == HR_RING_CANCEL) {
            pthread_mutex_lock(&a->dev_mu);
            hr_head_broadcast(a, h.type, h.req_id);
            pthread_mutex_unlock(&a->dev_mu);
            continue;
        }
        hr_prompt_forward(a, &h, buf, (size_t)n);
    }
}

static void hr_head_prompt(hr_agent *a, const uint8_t *id, size_t idl, const char *pl, size_t len) {
    hr_prompt_submit(a, id, idl, pl, len);
}

/* HR_RING_PAIR from a join token holder: trust its key under its name. */
static void hr_head_pair(hr_agent *a, const uint8_t *id, size_t idl, const hr_ring_hdr *h,
                         const char *pl) {
    char err[HR_ERR_LEN] = "";
    const hr_msg_info *mi = hr_msg_info_of(h->type);
    if (!mi || !(mi->flags & HR_MSG_F_PAIRING)) {
        HR_LOG_WARN(TAG, "join token holder sent %s; only PAIR is allowed before pairing",
                    hr_ring_type_name(h->type));
        return;
    }
    hr_msg_pair pm;
    if (hr_msg_pair_decode(h, pl, &pm, err) == 0 &&
        hr_ring_trust_add(hr_ring_keys_dir(a->keys), pm.name, pm.pubkey, err) == 0)
        HR_LOG_INFO(TAG, "paired '%s' (key %s) by join token", pm.name, pm.pubkey);
    if (err[0]) {
        HR_LOG_WARN(TAG, "pairing refused: %s", err);
        hr_head_reject(a, id, idl, true, err);
        return;
    }
    hr_msg ok = hr_msg_empty(HR_RING_PAIR, 0, 0);
    hr_head_send(a, id, idl, &ok);
}

/* ---- the control loop: handlers by message type, timers ---- */

typedef struct {
    hr_agent *a;
    hr_ring_loop *loop;
    void *inv[HR_AGENT_MAX_DEV]; /* --peers: DEALERs to the agents we invite */
    int n_inv;
    uint8_t *buf; /* one control frame */
    size_t cap;
    int rc; /* 1: invited, become a worker */
} hr_head_loop;

/* The sender of the message being handled. */
typedef struct {
    const uint8_t *id; /* ROUTER identity */
    size_t idl;
    int di; /* device index, -1 unknown (handlers run under dev_mu) */
} hr_head_from;

typedef void (*hr_head_fn)(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                           const char *pl);

static void hr_head_on_join(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                            const char *pl) {
    hr_head_join(hl->a, f->id, f->idl, h, pl);
}

static void hr_head_on_heartbeat(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                                 const char *pl) {
    hr_agent *a = hl->a;
    if (a->devs[f->di].lost) {
        hr_head_reject(a, f->id, f->idl, false, "unknown or lost device; join again");
        return;
    }
    hr_head_heartbeat(a, f->di, h, pl);
    hr_msg echo = hr_msg_empty(HR_RING_HEARTBEAT, 0, a->plan_id);
    hr_head_send(a, f->id, f->idl, &echo);
}

static void hr_head_on_ready(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                             const char *pl) {
    hr_agent *a = hl->a;
    hr_dev *d = &a->devs[f->di];
    char e2[HR_ERR_LEN];
    d->last_seen = hr_now_s();
    hr_msg_ready rd;
    if (hr_msg_ready_decode(h, pl, &rd, e2) != 0) {
        rd.ok = false;
        snprintf(rd.error, sizeof rd.error, "%s", e2);
    }
    if (rd.ok) {
        d->ready = true;
        d->ready_plan = h->plan_id;
    } else {
        snprintf(d->ready_err, HR_ERR_LEN, "%.200s", rd.error);
        snprintf(a->plan_err, sizeof a->plan_err, "device '%.64s' cannot apply the plan: %.150s",
                 d->name, d->ready_err);
        HR_LOG_ERROR(TAG, "%s", a->plan_err);
    }
    hr_head_update_ready(a);
}

static void hr_head_on_leave(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                             const char *pl) {
    (void)h;
    (void)pl;
    hr_agent *a = hl->a;
    hr_dev *d = &a->devs[f->di];
    HR_LOG_INFO(TAG, "%s left", d->name);
    if (d->ring_pos >= 0 && !d->lost) {
        snprintf(a->lost_msg, sizeof a->lost_msg, "device '%s' (%s) left", d->name, d->ctrl_ep);
        atomic_store(&a->lost, f->di + 1);
    }
    free(d->info);
    *d = a->devs[--a->n_devs];
    memset(&a->devs[a->n_devs], 0, sizeof a->devs[0]);
    a->replan = true;
    a->ready = false;
}

/* INVITE: an agent alone (no workers, none expected) becomes a worker. */
static void hr_head_on_invite(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                              const char *pl) {
    (void)f;
    hr_agent *a = hl->a;
    char ep[HR_EP_LEN], e2[HR_ERR_LEN];
    hr_msg_invite im;
    if (hr_msg_invite_decode(h, pl, &im, e2) != 0) {
        HR_LOG_WARN(TAG, "malformed INVITE ignored: %s", e2);
        return;
    }
    pthread_mutex_lock(&a->dev_mu);
    bool alone = a->n_devs == 1 && a->p.expect <= 0 && !a->p.peers;
    pthread_mutex_unlock(&a->dev_mu);
    if (alone && hr_ring_endpoint(im.head, 0, ep, sizeof ep) == 0) {
        HR_LOG_INFO(TAG, "%s: invited by %s; joining as a worker", a->name, ep);
        snprintf(a->head_ep, sizeof a->head_ep, "%s", ep);
        hl->rc = 1;
        hr_ring_loop_break(hl->loop);
        return;
    }
    HR_LOG_WARN(TAG, "invite from %s ignored (this agent is a head)", im.head);
}

static void hr_head_on_prompt(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                              const char *pl) {
    hr_head_prompt(hl->a, f->id, f->idl, pl, h->len);
}

static void hr_head_on_cancel(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                              const char *pl) {
    (void)h;
    (void)pl;
    hr_prompt_cancel(hl->a, f->id, f->idl);
}

static void hr_head_on_status(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                              const char *pl) {
    (void)h;
    (void)pl;
    char e2[HR_ERR_LEN];
    char *s = hr_head_status_json(hl->a);
    hr_msg m;
    if (s && hr_msg_status_encode(&m, s, e2) == 0)
        hr_head_send(hl->a, f->id, f->idl, &m);
    else
        hr_head_error(hl->a, f->id, f->idl, s ? e2 : "out of memory");
    free(s);
}

/* One row per message type the head's control port acts on; devs: run
 * under dev_mu with the sender looked up in the device table (messages
 * flagged HR_MSG_F_KNOWN in ring/msg.c need it found). */
static const struct {
    hr_head_fn fn;
    bool devs;
} hr_head_handlers[HR_RING_TYPE_END] = {
    [HR_RING_JOIN] = {hr_head_on_join, true},
    [HR_RING_HEARTBEAT] = {hr_head_on_heartbeat, true},
    [HR_RING_READY] = {hr_head_on_ready, true},
    [HR_RING_LEAVE] = {hr_head_on_leave, true},
    [HR_RING_INVITE] = {hr_head_on_invite, false},
    [HR_RING_PROMPT] = {hr_head_on_prompt, false},
    [HR_RING_CANCEL] = {hr_head_on_cancel, false},
    [HR_RING_STATUS_REQ] = {hr_head_on_status, false},
};

static void hr_head_dispatch(hr_head_loop *hl, hr_head_from *f, const hr_ring_hdr *h,
                             const char *pl) {
    hr_agent *a = hl->a;
    hr_head_fn fn = hr_head_handlers[h->type].fn;
    if (!fn) {
        HR_LOG_WARN(TAG, "unexpected %s on the control port ignored", hr_ring_type_name(h->type));
        return;
    }
    if (!hr_head_handlers[h->type].devs) {
        fn(hl, f, h, pl);
        return;
    }
    pthread_mutex_lock(&a->dev_mu);
    f->di = hr_find_dev(a, f->id, f->idl);
    if (f->di < 0 && (hr_msg_info_of(h->type)->flags & HR_MSG_F_KNOWN))
        hr_head_reject(a, f->id, f->idl, false, "unknown or lost device; join again");
    else
        fn(hl, f, h, pl);
    pthread_mutex_unlock(&a->dev_mu);
}

/* The control port is readable: one message. */
static void hr_head_on_ctrl(void *ud) {
    hr_head_loop *hl = ud;
    hr_agent *a = hl->a;
    uint8_t id[HR_RING_MAX_ID];
    hr_head_from f = {.id = id, .di = -1};
    hr_ring_hdr h;
    char e2[HR_ERR_LEN] = "", user[HR_RING_KEY_LEN];
    long n = hr_ring_recv_user(a->ctrl, id, &f.idl, hl->buf, hl->cap, 0, &h, user, e2);
    if (n == 0)
        return;
    const char *pl = (const char *)hl->buf + HR_RING_HDR_SIZE;
    if (n > 0 && strcmp(user, "pairing") == 0) { /* a join token holder: PAIR only */
        hr_head_pair(a, id, f.idl, &h, pl);
        return;
    }
    if (n < 0) {
        HR_LOG_WARN(TAG, "rejected frame on the control port: %s", e2);
        if (n == HR_EUNSUPPORTED && f.idl > 0)
            hr_head_reject(a, id, f.idl, true, e2);
        return;
    }
    hr_head_dispatch(hl, &f, &h, pl);
}

static void hr_head_on_events(void *ud) {
    hr_head_loop *hl = ud;
    hr_head_event(hl->a, hl->buf, hl->cap);
}

/* --peers: invites every agent each second until enough have joined. */
static void hr_head_invite_timer(void *ud) {
    hr_head_loop *hl = ud;
    hr_agent *a = hl->a;
    if (!hl->n_inv)
        return;
    char err[HR_ERR_LEN];
    hr_msg_invite im;
    snprintf(im.head, sizeof im.head, "%s", a->ctrl_ep);
    for (int i = 0; i < hl->n_inv; i++) {
        hr_msg m;
        if (hr_msg_invite_encode(&m, &im, err) == 0)
            hr_msg_send(hl->inv[i], NULL, 0, &m, err);
    }
    pthread_mutex_lock(&a->dev_mu);
    int nw = hr_head_n_workers(a);
    pthread_mutex_unlock(&a->dev_mu);
    if (nw >= hl->n_inv) {
        for (int i = 0; i < hl->n_inv; i++)
            hr_ring_close(hl->inv[i]);
        hl->n_inv = 0;
    }
}

/* Every turn: lost devices, a pending re-plan, our own residency. */
static void hr_head_plan_timer(void *ud) {
    hr_agent *a = ((hr_head_loop *)ud)->a;
    pthread_mutex_lock(&a->dev_mu);
    hr_head_check_lost(a);
    if (a->replan && (a->planned || a->p.expect <= 0 || hr_head_n_workers(a) >= a->p.expect) &&
        pthread_mutex_trylock(&a->plan_mu) == 0) {
        char e2[HR_ERR_LEN] = "";
        a->replan = false;
        if (hr_head_replan(a, e2)) {
            snprintf(a->plan_err, sizeof a->plan_err, "no plan: %.200s", e2);
            HR_LOG_ERROR(TAG, "%s", a->plan_err);
        } else {
            a->plan_err[0] = 0;
        }
        pthread_mutex_unlock(&a->plan_mu);
        hr_head_update_ready(a);
    }
    if (pthread_mutex_trylock(&a->plan_mu) == 0) {
        a->head_resident = hr_stream_resident(a);
        pthread_mutex_unlock(&a->plan_mu);
    }
    pthread_mutex_unlock(&a->dev_mu);
}

/* The head is device 0; its JOIN payload gives its own profile. */
static void hr_head_self(hr_agent *a, char err[HR_ERR_LEN]) {
    pthread_mutex_lock(&a->dev_mu);
    hr_dev *me = &a->devs[0];
    a->n_devs = 1;
    snprintf(me->name, sizeof me->name, "%s", a->name);
    snprintf(me->ctrl_ep, sizeof me->ctrl_ep, "%s", a->ctrl_ep);
    snprintf(me->data_ep, sizeof me->data_ep, "%s", a->data_ep);
    me->info = strdup(a->info_json);
    if (a->keys)
        snprintf(me->pubkey, sizeof me->pubkey, "%s", hr_ring_keys_public(a->keys));
    if (hr_prof_model_build(&a->pm, a->m, a->g, err) == 0)
        a->have_pm = true;
    hr_msg_join own;
    hr_ring_hdr oh = {.type = HR_RING_JOIN, .len = (uint32_t)strlen(a->info_json)};
    if (hr_msg_join_decode(&oh, a->info_json, &own, err) == 0) {
        hr_dev_sched(a, me, own.profile, true);
        hr_msg_join_clear(&own);
    }
    a->replan = true;
    pthread_mutex_unlock(&a->dev_mu);
}

/* --peers "[NAME@]host:port,...": one DEALER per agent to invite. */
static int hr_head_peers(hr_head_loop *hl, char err[HR_ERR_LEN]) {
    hr_agent *a = hl->a;
    char list[1024];
    snprintf(list, sizeof list, "%s", a->p.peers);
    for (char *tok = strtok(list, ","); tok && hl->n_inv < HR_AGENT_MAX_DEV;
         tok = strtok(NULL, ",")) {
        char ep[HR_EP_LEN], pk[HR_RING_KEY_LEN] = "";
        char *at = strchr(tok, '@'); /* NAME@host:port: NAME is a trusted peer */
        if (at) {
            *at = 0;
            if (a->keys && hr_ring_keys_lookup(a->keys, tok, pk) != 0)
                return hr_seterr(err, HR_EINVAL, "peer '%s' is not trusted (hearth trust add)",
                                 tok);
            tok = at + 1;
        } else if (a->keys) {
            snprintf(pk, sizeof pk, "%s", hr_ring_keys_public(a->keys));
        }
        if (hr_ring_endpoint(tok, 0, ep, sizeof ep))
            return hr_seterr(err, HR_EINVAL, "bad peer address '%s'", tok);
        hr_ring_sockopt so = hr_ring_sockopt_default();
        so.snd_timeout_ms = 0;
        void *s = hr_ring_socket(a->zctx, HR_RING_DEALER, &so, err);
        if (s && a->keys && hr_ring_secure_client(s, a->keys, pk, err)) {
            hr_ring_close(s);
            return HR_EINVAL;
        }
        if (s && hr_ring_connect(s, ep, err) == 0)
            hl->inv[hl->n_inv++] = s;
        else
            hr_ring_close(s);
    }
    if (a->p.expect <= 0)
        a->p.expect = hl->n_inv;
    return 0;
}

int hr_head_run(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_head_self(a, err);
    char ev_ep[64];
    snprintf(ev_ep, sizeof ev_ep, "inproc://hr-events-%p", (void *)a);
    hr_ring_sockopt eo = hr_ring_sockopt_default();
    eo.hwm = 4096;
    if (!(a->ev_pull = hr_ring_socket(a->zctx, HR_RING_PULL, &eo, err)) ||
        hr_ring_bind(a->ev_pull, ev_ep, NULL, 0, err) != 0)
        return hr_seterr(err, HR_ENET, "cannot bind %s", ev_ep);
    hr_head_loop hl = {.a = a, .cap = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL};
    int rc = a->p.peers ? hr_head_peers(&hl, err) : 0;
    hl.buf = rc ? NULL : malloc(hl.cap);
    hl.loop = rc ? NULL : hr_ring_loop_create(&a->stop);
    if (!rc && (!hl.buf || !hl.loop))
        rc = hr_seterr(err, HR_ENOMEM, "out of memory");
    if (!rc) {
        hr_ring_loop_timer(hl.loop, 1000, hr_head_invite_timer, &hl);
        hr_ring_loop_timer(hl.loop, 0, hr_head_plan_timer, &hl);
        hr_ring_loop_socket(hl.loop, a->ev_pull, hr_head_on_events, &hl);
        hr_ring_loop_socket(hl.loop, a->ctrl, hr_head_on_ctrl, &hl);
        rc = hr_ring_loop_run(hl.loop, err);
        if (rc == 0)
            rc = hl.rc;
    }
    for (int i = 0; i < hl.n_inv; i++)
        hr_ring_close(hl.inv[i]);
    hr_ring_loop_destroy(hl.loop);
    free(hl.buf);
    return rc;
}

/* ---- status ---- */

static void hr_layers_str(char *out, size_t cap, int k, int W, int off, int w) {
    size_t n = 0;
    out[0] = 0;
    for (int r = 0; r < k && w > 0 && n < cap; r++) {
        int b = r * W + off;
        n += (size_t)snprintf(out + n, cap - n, "%s%d-%d", r ? "," : "", b, b + w - 1);
    }
    if (w <= 0)
        snprintf(out, cap, "-");
}

char *hr_head_status_json(hr_agent *a) {
    json_t *devs = json_array();
    pthread_mutex_lock(&a->dev_mu);
    const hr_hparams *hp = hr_model_hparams(a->m);
    int k = a->plan_k > 0 ? a->plan_k : 1, W = hp->n_layer / k;
    /* the head's own figures */
    pthread_mutex_lock(&a->st.mu);
    a->devs[0].meas_ms_round = a->st.ms_round;
    a->devs[0].tokens = a->st.tokens;
    pthread_mutex_unlock(&a->st.mu);
    a->devs[0].resident = a->head_resident;
    a->devs[0].last_seen = hr_now_s();
    for (int i = 0; i < a->n_devs; i++) {
        hr_dev *d = &a->devs[i];
        json_t *info = d->info ? json_loads(d->info, 0, NULL) : NULL;
        if (!info)
            info = json_object();
        json_object_del(info, "profile");
        char layers[256];
        hr_layers_str(layers, sizeof layers, k, W, d->offset, d->w);
        json_t *o =
            json_pack("{s:s,s:s,s:s,s:b,s:b,s:b,s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:I,s:b,s:O}", "name",
                      d->name, "address", d->ctrl_ep, "data", d->data_ep, "head", i == 0, "lost",
                      d->lost, "ready", d->ready && d->ready_plan == a->plan_id, "ring_pos",
                      d->ring_pos, "w", d->w, "k", k, "layers", layers, "pred_ms_round",
                      d->pred_ms_round, "meas_ms_round", d->meas_ms_round, "resident", d->resident,
                      "tokens", (json_int_t)d->tokens, "overloaded", d->overloaded, "info", info);
        json_decref(info);
        if (o)
            json_array_append_new(devs, o);
    }
    json_t *j = json_pack("{s:s,s:i,s:I,s:i,s:i,s:b,s:s,s:s,s:i,s:o}", "head", a->name, "version",
                          HR_RING_VERSION, "plan_id", (json_int_t)a->plan_id, "k", k, "n_layer",
                          hp->n_layer, "ready", a->ready, "wire",
                          a->p.wire_dtype == HR_RING_F32 ? "f32" : "f16", "error", a->plan_err,
                          "prefetch", (int)a->p.prefetch, "devices", devs);
    if (j) {
        json_object_set_new(j, "secure", json_boolean(a->keys != NULL));
        json_object_set_new(j, "pubkey", json_string(a->keys ? hr_ring_keys_public(a->keys) : ""));
        json_object_set_new(j, "auth_refused",
                            json_integer(a->keys ? (json_int_t)hr_ring_keys_refused(a->keys) : 0));
        json_object_set_new(j, "recoveries", json_integer((json_int_t)a->recoveries));
    }
    pthread_mutex_unlock(&a->dev_mu);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}
