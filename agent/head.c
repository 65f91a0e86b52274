/* head.c - the head's control thread: accepts joins (checking protocol
 * version and model fingerprint), re-plans when the devices change
 * (head_plan.c), tracks readiness and heartbeats (a silent device is
 * reported lost), publishes its state for the generating thread
 * (head_state.c), forwards the generating thread's events, serves status
 * and hands CLI prompts to the request service (prompt.c). Also the head's
 * create / destroy. */
#include "agent/head-impl.h"
#include "agent/service.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/quant.h"
#include "kernels/types.h"
#include "ring/beacon.h"
#include "ring/knock.h"
#include "ring/msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "head"

/* ---- helpers ---- */

static void hr_head_reject(hr_agent *a, const uint8_t *id, size_t idl, bool fatal,
                           const char *reason) {
    hr_msg_reject rj = {.fatal = fatal};
    snprintf(rj.reason, sizeof rj.reason, "%s", reason);
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_reject_encode(&m, &rj, err) == 0)
        hr_head_send(a->head, id, idl, &m);
}

static void hr_head_error(hr_agent *a, const uint8_t *id, size_t idl, const char *text) {
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_error_encode(&m, text, err) == 0)
        hr_head_send(a->head, id, idl, &m);
}

static int hr_find_dev(const hr_agent *a, const uint8_t *id, size_t idl) {
    hr_head *hd = a->head;
    for (int i = 1; i < hd->n_devs; i++)
        if (hd->devs[i].id_len == idl && memcmp(hd->devs[i].id, id, idl) == 0)
            return i;
    return -1;
}

/* Device d's decoded JOIN j (its profile text taken out): the head keeps
 * the JOIN and, of the profile, the scheduler's view. */
static void hr_head_keep_join(hr_head *hd, hr_dev *d, hr_msg_join *j, bool is_head) {
    char *profile = j->profile;
    j->profile = NULL;
    d->join = *j;
    d->has_join = true;
    hr_head_dev_sched(hd, d, profile, is_head);
    free(profile);
}

/* ---- messages ---- */

static void hr_head_join(hr_agent *a, const uint8_t *id, size_t idl, const hr_ring_hdr *h,
                         const char *pl) {
    hr_head *hd = a->head;
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
    for (int i = 1; i < hd->n_devs; i++)
        if (strcmp(hd->devs[i].ctrl_ep, jm.ctrl) == 0)
            di = i;
    if (di < 0) {
        if (hd->n_devs >= HR_AGENT_MAX_DEV) {
            hr_head_reject(a, id, idl, true, "cluster is full");
            hr_msg_join_clear(&jm);
            return;
        }
        di = hd->n_devs++;
    }
    hr_dev *d = &hd->devs[di];
    if (!d->lost && d->id_len && d->id_len == idl && memcmp(d->id, id, idl) == 0 &&
        strcmp(d->pubkey, jm.pubkey) == 0 && strcmp(d->data_ep, jm.data) == 0) {
        /* a repeated JOIN (queued while we were away, or a retry): the same
         * link, key and ports refresh the device; no new plan */
        d->last_seen = hr_now_s();
        HR_LOG_DEBUG(TAG, "%s: repeated JOIN; already joined", d->name);
        hr_msg_join_clear(&jm);
        hr_msg w = hr_msg_empty(HR_RING_WELCOME, 0, 0);
        hr_head_send(a->head, id, idl, &w);
        return;
    }
    if (d->ring_pos >= 0 && !d->lost && d->id_len &&
        (d->id_len != idl || memcmp(d->id, id, idl) != 0)) { /* restarted, not yet missed */
        snprintf(hd->lost_msg, sizeof hd->lost_msg, "device '%s' (%s) restarted", d->name,
                 d->ctrl_ep);
        HR_LOG_WARN(TAG, "%s", hd->lost_msg);
        hd->lost_di = di + 1;
    }
    memset(d, 0, sizeof *d);
    snprintf(d->pubkey, sizeof d->pubkey, "%s", jm.pubkey);
    snprintf(d->name, sizeof d->name, "%s", jm.name);
    snprintf(d->ctrl_ep, sizeof d->ctrl_ep, "%s", jm.ctrl);
    snprintf(d->data_ep, sizeof d->data_ep, "%s", jm.data);
    memcpy(d->id, id, idl);
    d->id_len = idl;
    d->last_seen = hr_now_s();
    d->ring_pos = -1;
    snprintf(d->echo_ep, sizeof d->echo_ep, "%s", jm.echo);
    d->pred_read_token = d->meas_read_round = d->stream_round = d->pinned = -1;
    d->pred_cpu_token = d->meas_cpu_round = d->read_cpu_ms_mb = -1;
    d->ex_keep = -1;
    d->fetch_done = d->fetch_total = d->fetch_wire = -1;
    d->locked = -1;
    hr_head_keep_join(hd, d, &jm, false);
    HR_LOG_INFO(TAG, "%s joined from %s (data %s)", d->name, d->ctrl_ep, d->data_ep);
    hr_msg w = hr_msg_empty(HR_RING_WELCOME, 0, 0);
    w.h.pos = 0;
    hr_head_send(a->head, id, idl, &w);
    hr_head_link_join(hd, d); /* its link to us, for the plan */
    hd->replan = true;
    hd->ready = false;
}

static void hr_head_heartbeat(hr_agent *a, int di, const hr_ring_hdr *h, const char *pl) {
    hr_head *hd = a->head;
    hr_dev *d = &hd->devs[di];
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
    d->meas_read_round = hb.read_round;
    d->meas_cpu_round = hb.cpu_round;
    d->cpu_plan = h->plan_id;
    d->stream_round = hb.stream_round;
    d->pinned = hb.pinned;
    d->locked = hb.locked;
    d->fetch_done = hb.fetch_done;
    d->fetch_total = hb.fetch_total;
    d->fetch_wire = hb.fetch_wire;
    d->ex_keep = hb.ex_keep;
    d->ex_routed = hb.ex_routed;
    d->ex_hits = hb.ex_hits;
    d->ex_fetched = hb.ex_fetched;
    d->ex_moved = hb.ex_moved;
    d->ex_miss =
        hr_head_expert_miss(hr_model_hparams(hd->a->m), hb.ex_keep, hb.ex_routed, hb.ex_hits);
    hr_head_pump_sample(d, h->plan_id, hb.pump_bytes, hb.pump_s);
    hr_head_adapt_sample(hd, di, h->plan_id, hb.ms_round, hb.rounds, hb.ms_total);
}

/* s of silence allowed to a ring device applying the plan it was sent (no
 * READY yet): it allocates the KV of its slots and maps its windows, which
 * on a slow or CPU-limited device takes seconds, and its control thread
 * sends no heartbeat meanwhile */
#define HR_PLAN_APPLY_S 15.0

static void hr_head_check_lost(hr_agent *a) {
    hr_head *hd = a->head;
    double now = hr_now_s();
    for (int i = 1; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        double limit = a->p.hb_timeout_ms / 1000.0;
        if (d->ring_pos >= 0 && d->ready_plan != hd->plan_id && limit < HR_PLAN_APPLY_S)
            limit = HR_PLAN_APPLY_S;
        if (d->lost || now - d->last_seen < limit)
            continue;
        d->lost = true;
        d->ready = false;
        snprintf(hd->lost_msg, sizeof hd->lost_msg,
                 "device '%.64s' (%.96s) lost: no heartbeat for %.1f s", d->name, d->ctrl_ep,
                 now - d->last_seen);
        HR_LOG_ERROR(TAG, "%s", hd->lost_msg);
        if (d->ring_pos >= 0) {
            hd->lost_di = i + 1;
            hd->ready = false;
            hd->replan = true; /* plan again with the devices that remain */
            snprintf(hd->plan_err, sizeof hd->plan_err, "%s", hd->lost_msg);
        }
    }
}

static void hr_head_broadcast(hr_agent *a, int type, uint64_t req) {
    hr_head *hd = a->head;
    for (int i = 1; i < hd->n_devs; i++)
        if (!hd->devs[i].lost && hd->devs[i].ring_pos >= 0) {
            hr_msg m = hr_msg_empty(type, req, hd->plan_id);
            hr_head_send(a->head, hd->devs[i].id, hd->devs[i].id_len, &m);
        }
}

/* Events from the generating thread: START/CANCEL go to the workers,
 * TOKEN/DONE/ERROR to the `hearth prompt` client they name. */

static void hr_head_solved(hr_agent *a, uint64_t gen);

static void hr_head_event(hr_agent *a, uint8_t *buf, size_t cap) {
    hr_head *hd = a->head;
    hr_ring_hdr h;
    char err[HR_ERR_LEN];
    long n;
    while ((n = hr_ring_recv(hd->ev_pull, NULL, NULL, buf, cap, 0, &h, err)) > 0) {
        if (h.type == HR_RING_PLAN) { /* the solver thread: job req_id is solved */
            hr_head_solved(a, h.req_id);
            continue;
        }
        if (h.type == HR_RING_START || h.type == HR_RING_CANCEL) {
            hr_lock(&hd->dev_mu, HR_RANK_DEV);
            hr_head_broadcast(a, h.type, h.req_id);
            hr_unlock(&hd->dev_mu, HR_RANK_DEV);
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
    hr_head_send(a->head, id, idl, &ok);
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
    hr_head *hd = a->head;
    if (hd->devs[f->di].lost) {
        hr_head_reject(a, f->id, f->idl, false, "unknown or lost device; join again");
        return;
    }
    hr_head_heartbeat(a, f->di, h, pl);
    hr_msg echo = hr_msg_empty(HR_RING_HEARTBEAT, 0, hd->plan_id);
    hr_head_send(a->head, f->id, f->idl, &echo);
}

static void hr_head_on_link(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                            const char *pl) {
    hr_head_link_msg(hl->a->head, f->di, h, pl);
}

static void hr_head_on_ready(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                             const char *pl) {
    hr_agent *a = hl->a;
    hr_head *hd = a->head;
    hr_dev *d = &hd->devs[f->di];
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
        snprintf(hd->plan_err, sizeof hd->plan_err, "device '%.64s' cannot apply the plan: %.150s",
                 d->name, d->ready_err);
        HR_LOG_ERROR(TAG, "%s", hd->plan_err);
    }
    hr_head_update_ready(hd);
}

static void hr_head_on_leave(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                             const char *pl) {
    (void)h;
    (void)pl;
    hr_agent *a = hl->a;
    hr_head *hd = a->head;
    hr_dev *d = &hd->devs[f->di];
    HR_LOG_INFO(TAG, "%s left", d->name);
    if (d->ring_pos >= 0 && !d->lost) { /* a ring member: lost until a plan without it */
        snprintf(hd->lost_msg, sizeof hd->lost_msg, "device '%s' (%s) left", d->name, d->ctrl_ep);
        hd->lost_di = f->di + 1;
        d->lost = true;
        d->ready = false;
        d->id_len = 0; /* its link is gone: nothing more from or to it */
        hd->replan = true;
        hd->ready = false;
        return;
    }
    *d = hd->devs[--hd->n_devs];
    memset(&hd->devs[hd->n_devs], 0, sizeof hd->devs[0]);
    hd->replan = true;
    hd->ready = false;
}

/* INVITE: an agent alone (no workers, none expected) becomes a worker. */
static void hr_head_on_invite(hr_head_loop *hl, const hr_head_from *f, const hr_ring_hdr *h,
                              const char *pl) {
    (void)f;
    hr_agent *a = hl->a;
    hr_head *hd = a->head;
    char ep[HR_EP_LEN], e2[HR_ERR_LEN];
    hr_msg_invite im;
    if (hr_msg_invite_decode(h, pl, &im, e2) != 0) {
        HR_LOG_WARN(TAG, "malformed INVITE ignored: %s", e2);
        return;
    }
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    bool alone = hd->n_devs == 1 && hd->expect <= 0 && !a->p.peers;
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
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
        hr_head_send(hl->a->head, f->id, f->idl, &m);
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
    [HR_RING_LINK] = {hr_head_on_link, true},
};

static void hr_head_dispatch(hr_head_loop *hl, hr_head_from *f, const hr_ring_hdr *h,
                             const char *pl) {
    hr_agent *a = hl->a;
    hr_head *hd = a->head;
    hr_head_fn fn = hr_head_handlers[h->type].fn;
    if (!fn) {
        HR_LOG_WARN(TAG, "unexpected %s on the control port ignored", hr_ring_type_name(h->type));
        return;
    }
    if (!hr_head_handlers[h->type].devs) {
        fn(hl, f, h, pl);
        return;
    }
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    f->di = hr_find_dev(a, f->id, f->idl);
    if (f->di < 0 && (hr_msg_info_of(h->type)->flags & HR_MSG_F_KNOWN))
        hr_head_reject(a, f->id, f->idl, false, "unknown or lost device; join again");
    else
        fn(hl, f, h, pl);
    hr_head_publish(hd);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
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
    if (h.type == HR_RING_FETCH) { /* any authenticated peer, joined or not */
        hr_fetch_serve(a, id, f.idl, user, &h, pl, &a->head->served);
        return;
    }
    hr_head_dispatch(hl, &f, &h, pl);
}

static void hr_head_on_events(void *ud) {
    hr_head_loop *hl = ud;
    hr_head_event(hl->a, hl->buf, hl->cap);
}

/* Discovery: one beacon a second on the interfaces of the control port. */
static void hr_head_beacon_timer(void *ud) {
    hr_head_loop *hl = ud;
    hr_agent *a = hl->a;
    if (!a->head->beacon || hl->rc)
        return;
    hr_beacon b = {
        .proto = HR_RING_VERSION, .model_size = a->model_size, .model_hash = a->model_hash};
    snprintf(b.cluster, sizeof b.cluster, "%s", a->p.cluster ? a->p.cluster : "hearth");
    snprintf(b.ctrl, sizeof b.ctrl, "%s", a->ctrl_ep);
    hr_beacon_fingerprint(a->keys ? hr_ring_keys_public(a->keys) : NULL, b.fp);
    if (hr_beacon_send(a->head->beacon, &b) < 0)
        HR_LOG_DEBUG(TAG, "beacon not sent");
}

/* Opens the beacon sender on the control endpoint's host. */
static void hr_head_beacon_open(hr_agent *a) {
    if (a->p.no_discovery || a->p.peers)
        return;
    char host[HR_EP_LEN], e2[HR_ERR_LEN];
    const char *h0 = strncmp(a->ctrl_ep, "tcp://", 6) == 0 ? a->ctrl_ep + 6 : a->ctrl_ep;
    snprintf(host, sizeof host, "%s", h0);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = 0;
    const char *cl = a->p.cluster ? a->p.cluster : "hearth";
    if (!hr_beacon_name_valid(cl)) {
        HR_LOG_WARN(TAG, "cluster name '%s' is not 1-63 of [A-Za-z0-9._-]: no beacon", cl);
        return;
    }
    if (hr_beacon_sender_open(&a->head->beacon, host, a->p.discovery_port, e2) != 0) {
        HR_LOG_WARN(TAG, "no discovery beacon: %s", e2);
        return;
    }
    char fp[2 * HR_BEACON_FP_LEN + 1];
    uint8_t raw[HR_BEACON_FP_LEN];
    hr_beacon_fingerprint(a->keys ? hr_ring_keys_public(a->keys) : NULL, raw);
    hr_beacon_fp_hex(raw, fp);
    HR_LOG_INFO(TAG, "%s: beaconing cluster '%s' at %s on UDP port %d (key fingerprint %s)",
                a->name, cl, a->ctrl_ep,
                a->p.discovery_port > 0 ? a->p.discovery_port : HR_BEACON_PORT, fp);
}

/* Knocks (ring/knock.h): a device that trusts no head key, or another
 * one, cannot complete a CURVE handshake, so it says who it is in a UDP
 * datagram to our control port's number; the keys' log says how to pair
 * it. Nothing is answered and nothing is granted. */
static void hr_head_knock_open(hr_agent *a) {
    char e2[HR_ERR_LEN];
    if (!a->keys)
        return;
    if (hr_knock_listen(&a->head->knock, a->ctrl_ep, e2) != 0) {
        HR_LOG_INFO(TAG, "%s: %s: devices that cannot reach this head over CURVE go unheard",
                    a->name, e2);
        return;
    }
    HR_LOG_DEBUG(TAG, "%s: knocks of unpaired devices heard on UDP %s", a->name, a->ctrl_ep);
}

static void hr_head_on_knock(void *ud) {
    hr_head_loop *hl = ud;
    hr_agent *a = hl->a;
    hr_knock k;
    char from[64];
    for (int i = 0; i < 64 && hr_knock_recv(a->head->knock, &k, from) > 0; i++)
        hr_ring_keys_knock(a->keys, k.name, k.key, k.head_fp, k.proto, from);
}

/* --peers: invites every agent each second until enough have joined. */
static void hr_head_invite_timer(void *ud) {
    hr_head_loop *hl = ud;
    hr_agent *a = hl->a;
    hr_head *hd = a->head;
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
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    int nw = hr_head_n_workers(hd);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
    if (nw >= hl->n_inv) {
        for (int i = 0; i < hl->n_inv; i++)
            hr_ring_close(hl->inv[i]);
        hl->n_inv = 0;
    }
}

/* No plan fits: plan_err says so ("no plan: ..." is what the generating
 * thread and /health look for), naming the lost ring member that left the
 * plan in use unable to serve, if any. */
static void hr_head_no_plan(hr_head *hd, const char *why) {
    const hr_dev *lost = NULL;
    for (int i = 1; i < hd->n_devs && !lost; i++)
        if (hd->devs[i].lost && hd->devs[i].ring_pos >= 0)
            lost = &hd->devs[i];
    if (lost)
        snprintf(hd->plan_err, sizeof hd->plan_err,
                 "no plan: device '%.40s' (%.48s) is lost; the rest cannot serve: %.100s",
                 lost->name, lost->ctrl_ep, why);
    else
        snprintf(hd->plan_err, sizeof hd->plan_err, "no plan: %.200s", why);
}

/* A plan attempt ended with prc (0 or HR_E*, e2 saying why). dev_mu held. */
static void hr_head_planned(hr_head *hd, int prc, const char *e2) {
    if (prc) {
        hr_head_no_plan(hd, e2);
        HR_LOG_ERROR(TAG, "%s", hd->plan_err);
    } else {
        hd->plan_err[0] = 0;
    }
    hr_head_adapt_planned(hd, prc);
    hr_head_update_ready(hd);
}

/* The solver thread's PLAN event for job gen: the plan is finished. */
static void hr_head_solved(hr_agent *a, uint64_t gen) {
    hr_head *hd = a->head;
    char e2[HR_ERR_LEN] = "";
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    int prc = hr_head_replan_solved(hd, gen, e2);
    if (prc != HR_PLAN_STALE)
        hr_head_planned(hd, prc, e2);
    hr_head_publish(hd);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
}

/* Every turn: lost devices, a pending re-plan, our own residency. */
static void hr_head_plan_timer(void *ud) {
    hr_agent *a = ((hr_head_loop *)ud)->a;
    hr_head *hd = a->head;
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    hr_head_check_lost(a);
    hr_head_link_timer(hd);
    if (!hd->solving) /* measured vs predicted rounds: may ask for a re-plan */
        hr_head_adapt_check(hd);
    if (hd->replan && !hd->solving && !hr_head_link_wait(hd) &&
        (hd->planned || hd->expect <= 0 || hr_head_n_workers(hd) >= hd->expect) &&
        hr_head_claim(hd)) {
        char e2[HR_ERR_LEN] = "";
        hd->replan = false;
        int prc = hr_head_replan(hd, e2);
        /* else the solver's event (SOLVING) or the next turn (STALE) finishes it */
        if (prc != HR_PLAN_SOLVING && prc != HR_PLAN_STALE)
            hr_head_planned(hd, prc, e2);
    }
    hd->resident = hr_node_resident(a, &hd->own);
    hr_node_io_sample(a);
    hr_head_publish(hd);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
}

/* The head is device 0; its JOIN payload gives its own profile. */
static void hr_head_self(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_head *hd = a->head;
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    hr_dev *me = &hd->devs[0];
    hd->n_devs = 1;
    snprintf(me->name, sizeof me->name, "%s", a->name);
    snprintf(me->ctrl_ep, sizeof me->ctrl_ep, "%s", a->ctrl_ep);
    snprintf(me->data_ep, sizeof me->data_ep, "%s", a->data_ep);
    me->pred_read_token = me->pred_cpu_token = me->meas_cpu_round = me->read_cpu_ms_mb = -1;
    if (a->keys)
        snprintf(me->pubkey, sizeof me->pubkey, "%s", hr_ring_keys_public(a->keys));
    if (hr_prof_model_build(&hd->pm, a->m, a->g, err) == 0) {
        hd->have_pm = true;
        if (a->p.wire_dtype != HR_RING_F32)
            hd->pm.hidden_bytes /= 2; /* an f16 wire sends half the bytes per hop */
    }
    hr_msg_join own;
    hr_ring_hdr oh = {.type = HR_RING_JOIN, .len = (uint32_t)strlen(a->info_json)};
    if (hr_msg_join_decode(&oh, a->info_json, &own, err) == 0)
        hr_head_keep_join(hd, me, &own, true);
    hd->replan = true;
    hr_head_publish(hd);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
}

/* --peers "[NAME@]host:port,...": one DEALER per agent to invite. */
static int hr_head_peers(hr_head_loop *hl, char err[HR_ERR_LEN]) {
    hr_agent *a = hl->a;
    hr_head *hd = a->head;
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
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    if (hd->expect <= 0)
        hd->expect = hl->n_inv;
    hr_head_publish(hd);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
    return 0;
}

/* The head stops: tells every worker, which then joins again (with its
 * backoff) instead of waiting for the heartbeat silence. */
static void hr_head_farewell(hr_agent *a) {
    hr_head *hd = a->head;
    int n = 0;
    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    for (int i = 1; i < hd->n_devs; i++) {
        if (hd->devs[i].lost || !hd->devs[i].id_len)
            continue;
        hr_msg m = hr_msg_empty(HR_RING_LEAVE, 0, hd->plan_id);
        hr_head_send(hd, hd->devs[i].id, hd->devs[i].id_len, &m);
        n++;
    }
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
    if (n) { /* sockets close without linger: give the frames time to go out */
        HR_LOG_INFO(TAG, "told %d worker%s the head is stopping", n, n == 1 ? "" : "s");
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* ---- create / destroy / run ---- */

/* True when a decode row computes exactly what a prefill row computes, so
 * the prompt cache may reuse generated tokens too: every CPU kernel table
 * follows one float order (kernels/canon-impl.h) in its decode and prompt
 * kernels, or else every matmul weight of the model is F32. (GPU layers
 * are checked per plan: hr_head.plan_gpu.) */
static bool hr_head_decode_exact(const hr_agent *a) {
    if (hr_kernels_best()->canonical)
        return true;
    hr_prof_model pm = {0};
    char err[HR_ERR_LEN];
    int types[16], n = 0;
    if (hr_prof_model_build(&pm, a->m, a->g, err) == 0)
        n = hr_prof_model_types(&pm, types, 16);
    hr_prof_model_clear(&pm);
    bool exact = n > 0;
    for (int i = 0; i < n; i++)
        exact = exact && types[i] == HR_TYPE_F32;
    return exact;
}

/* --parallel 0: HR_AGENT_PARALLEL_DEFAULT requests at once when the KV of
 * that many contexts of the whole model fits in half of this machine's
 * available memory, else as many as fit (at least 1). */
static int hr_head_parallel_default(const hr_agent *a) {
    hr_prof_model pm = {0};
    char err[HR_ERR_LEN];
    int64_t avail, total;
    hr_node_mem_room(&avail, &total);
    if (hr_prof_model_build(&pm, a->m, a->g, err) != 0)
        return 1;
    const hr_hparams *hp = hr_model_hparams(a->m);
    /* a slot's context: --ctx, else as short as the planner may make it */
    int ctx = hr_hparams_ctx(hp, a->p.n_ctx);
    if (a->p.n_ctx <= 0 && ctx > HR_AGENT_SLOT_CTX_MIN)
        ctx = HR_AGENT_SLOT_CTX_MIN;
    double kv = (double)pm.kv_bytes_per_token * hp->n_layer * ctx;
    hr_prof_model_clear(&pm);
    int n = HR_AGENT_PARALLEL_DEFAULT;
    if (avail > 0 && kv > 0)
        while (n > 1 && n * kv > 0.5 * (double)avail)
            n--;
    return n;
}

int hr_head_create(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_head *hd = calloc(1, sizeof *hd);
    if (!hd)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    hd->a = a;
    pthread_mutex_init(&hd->mu, NULL);
    pthread_cond_init(&hd->cv, NULL);
    pthread_mutex_init(&hd->dev_mu, NULL);
    pthread_mutex_init(&hd->gen_mu, NULL);
    pthread_mutex_init(&hd->ev_mu, NULL);
    pthread_mutex_init(&hd->solve_mu, NULL);
    pthread_cond_init(&hd->solve_cv, NULL);
    hd->next_req = 1;
    hd->expect = hd->snap.expect = a->p.expect;
    hd->parallel_auto = a->p.n_parallel <= 0;
    if (a->p.n_parallel <= 0)
        a->p.n_parallel = hr_head_parallel_default(a);
    if (a->p.n_parallel > HR_AGENT_MAX_PARALLEL)
        a->p.n_parallel = HR_AGENT_MAX_PARALLEL;
    hd->plan_seq = a->p.n_parallel;
    hd->decode_exact = hr_head_decode_exact(a);
    HR_LOG_INFO(TAG, "%s: up to %d requests generate at once", a->name, a->p.n_parallel);
    a->head = hd;
    return hr_service_create(&hd->svc, a, err);
}

void hr_head_destroy(hr_agent *a) {
    hr_head *hd = a->head;
    if (!hd)
        return;
    hr_service_destroy(hd->svc); /* joins the generating thread */
    hr_prof_model_clear(&hd->pm);
    for (int i = 0; i < HR_AGENT_MAX_PARALLEL; i++)
        free(hd->cache[i].tok);
    hr_ring_close(hd->ev_push);
    hr_ring_close(hd->ev_pull);
    pthread_mutex_destroy(&hd->mu);
    pthread_cond_destroy(&hd->cv);
    pthread_mutex_destroy(&hd->dev_mu);
    pthread_mutex_destroy(&hd->gen_mu);
    pthread_mutex_destroy(&hd->ev_mu);
    pthread_mutex_destroy(&hd->solve_mu);
    pthread_cond_destroy(&hd->solve_cv);
    free(hd);
    a->head = NULL;
}

int hr_head_run(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_head *hd = a->head;
    hr_head_self(a, err);
    char ev_ep[64];
    snprintf(ev_ep, sizeof ev_ep, "inproc://hr-events-%p", (void *)a);
    hr_ring_sockopt eo = hr_ring_sockopt_default();
    eo.hwm = 4096;
    if (!(hd->ev_pull = hr_ring_socket(a->zctx, HR_RING_PULL, &eo, err)) ||
        hr_ring_bind(hd->ev_pull, ev_ep, NULL, 0, err) != 0)
        return hr_seterr(err, HR_ENET, "cannot bind %s", ev_ep);
    hr_head_loop hl = {.a = a, .cap = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL};
    int rc = a->p.peers ? hr_head_peers(&hl, err) : 0;
    hl.buf = rc ? NULL : malloc(hl.cap);
    hl.loop = rc ? NULL : hr_ring_loop_create(&a->stop);
    if (!rc && (!hl.buf || !hl.loop))
        rc = hr_seterr(err, HR_ENOMEM, "out of memory");
    if (!rc)
        rc = hr_head_solve_start(hd, err);
    if (!rc) {
        hr_ring_loop_timer(hl.loop, 1000, hr_head_invite_timer, &hl);
        hr_head_beacon_open(a);
        hr_head_beacon_timer(&hl);
        hr_ring_loop_timer(hl.loop, HR_BEACON_INTERVAL_MS, hr_head_beacon_timer, &hl);
        hr_ring_loop_timer(hl.loop, 0, hr_head_plan_timer, &hl);
        hr_ring_loop_timer(hl.loop, HR_NODE_TRIM_MS, hr_node_trim_timer, NULL);
        hr_ring_loop_socket(hl.loop, hd->ev_pull, hr_head_on_events, &hl);
        hr_ring_loop_socket(hl.loop, a->ctrl, hr_head_on_ctrl, &hl);
        hr_head_knock_open(a);
        if (hd->knock)
            hr_ring_loop_fd(hl.loop, hr_knock_fd(hd->knock), hr_head_on_knock, &hl);
        rc = hr_ring_loop_run(hl.loop, err);
        if (rc == 0)
            rc = hl.rc;
        if (rc == 0)
            hr_head_farewell(a);
    }
    for (int i = 0; i < hl.n_inv; i++)
        hr_ring_close(hl.inv[i]);
    hr_beacon_sender_close(hd->beacon);
    hd->beacon = NULL;
    hr_knock_listener_close(hd->knock);
    hd->knock = NULL;
    hr_head_solve_stop(hd); /* a plan being solved is dropped with the loop */
    hr_sched_thread_done(); /* this thread's re-plans (hr_adapt_solve) used GLPK */
    hr_ring_loop_destroy(hl.loop);
    free(hl.buf);
    return rc;
}
