/* head.c - the head's control plane: accepts joins (checking protocol
 * version and model fingerprint), makes the plan (forced k / windows, or
 * the Halda scheduler over the devices' profiles, or an even split), sends
 * it, tracks readiness and heartbeats (a silent device is reported lost),
 * serves status and hands CLI prompts to the request service (prompt.c). */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define TAG "head"

/* ---- helpers ---- */

static void hr_head_reply(hr_agent *a, const uint8_t *id, size_t idl, int type, int32_t pos,
                          uint64_t req, uint32_t plan_id, const char *msg) {
    char err[HR_ERR_LEN];
    hr_ring_hdr h = {.type = (uint8_t)type,
                     .pos = pos,
                     .req_id = req,
                     .plan_id = plan_id,
                     .len = msg ? (uint32_t)strlen(msg) : 0};
    if (hr_ring_send_msg(a->ctrl, id, idl, &h, msg, err))
        HR_LOG_DEBUG(TAG, "reply %s: %s", hr_ring_type_name(type), err);
}

static int hr_find_dev(const hr_agent *a, const uint8_t *id, size_t idl) {
    for (int i = 1; i < a->n_devs; i++)
        if (a->devs[i].id_len == idl && memcmp(a->devs[i].id, id, idl) == 0)
            return i;
    return -1;
}

static void hr_dev_sched(hr_agent *a, hr_dev *d, const char *info, bool is_head) {
    d->has_sched = false;
    if (!a->have_pm)
        return;
    json_t *j = json_loads(info, 0, NULL);
    json_t *pj = j ? json_object_get(j, "profile") : NULL;
    if (pj) {
        char *s = json_dumps(pj, JSON_COMPACT);
        hr_prof_device *pd = calloc(1, sizeof *pd);
        char err[HR_ERR_LEN];
        int prc = s && pd ? hr_prof_device_parse(s, strlen(s), pd, err) : HR_ENOMEM;
        if (prc)
            HR_LOG_WARN("head", "device '%s': unusable profile (%s); no predictions for it",
                        d->name, prc == HR_ENOMEM ? "out of memory" : err);
        if (prc == 0) {
            hr_prof_sched_params sp = hr_prof_sched_params_default();
            sp.is_head = is_head;
            sp.n_ctx = a->lp.n_ctx > 0 ? a->lp.n_ctx : 4096;
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
        free(s);
    }
    json_decref(j);
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
        if (hr_prof_to_sched_model(&a->pm, a->lp.n_ctx > 0 ? a->lp.n_ctx : 4096, &sm, err) == 0 &&
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

int hr_head_replan(hr_agent *a, char err[HR_ERR_LEN]) {
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
    /* predicted figures when every device has a profile */
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
        hr_prof_to_sched_model(&a->pm, a->lp.n_ctx > 0 ? a->lp.n_ctx : 4096, &sm, e2) == 0 &&
        hr_sched_evaluate(&sm, sd, n, NULL, k, w, NULL, &a->sched, e2) == 0)
        a->have_sched = true;
    else if (all_sched)
        HR_LOG_WARN("head", "no predicted times for plan: %s", e2);
    else
        HR_LOG_INFO("head", "no predicted times: not every device sent a profile");
    a->plan_id++;
    a->plan_k = k;
    int W = hp->n_layer / k, off = 0, n_active = 0, ring[HR_AGENT_MAX_DEV];
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
            d->ring_pos = n_active;
            ring[n_active++] = cand[i];
        }
    }
    int n_ctx = a->p.n_ctx > 0 ? a->p.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    json_t *keys = json_array(); /* ring members vouched for to each other */
    for (int r = 0; r < n_active; r++)
        if (a->devs[ring[r]].pubkey[0])
            json_array_append_new(keys, json_string(a->devs[ring[r]].pubkey));
    for (int r = 0; r < n_active; r++) {
        hr_dev *d = &a->devs[ring[r]];
        const char *next = n_active > 1 ? a->devs[ring[(r + 1) % n_active]].data_ep : "";
        const char *next_key = n_active > 1 ? a->devs[ring[(r + 1) % n_active]].pubkey : "";
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
                            .prefetch = a->p.prefetch,
                            .release = a->p.release >= 0 ? a->p.release == 1 : d->overloaded};
        snprintf(np.next_ep, sizeof np.next_ep, "%s", next);
        snprintf(np.next_key, sizeof np.next_key, "%s", next_key);
        if (r == 0) {
            if ((rc = hr_agent_apply_plan(a, &np, err))) {
                json_decref(keys);
                return rc;
            }
            d->ready = true;
            d->ready_plan = a->plan_id;
            continue;
        }
        json_t *j = json_pack("{s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:b,s:b}", "plan_id",
                              (json_int_t)np.plan_id, "k", k, "W", W, "w", np.w, "offset",
                              np.offset, "n_active", n_active, "n_ctx", n_ctx, "n_batch",
                              np.n_batch, "dtype", np.dtype, "next", next, "prefetch",
                              (int)np.prefetch, "release", (int)np.release);
        if (j) {
            json_object_set_new(j, "next_key", json_string(next_key));
            json_object_set(j, "keys", keys);
        }
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (!s) {
            json_decref(keys);
            return hr_seterr(err, HR_ENOMEM, "out of memory");
        }
        hr_head_reply(a, d->id, d->id_len, HR_RING_PLAN, -1, 0, a->plan_id, s);
        free(s);
    }
    json_decref(keys);
    a->planned = true;
    /* devices left out of the ring get an empty window */
    for (int i = 1; i < a->n_devs; i++) {
        hr_dev *d = &a->devs[i];
        if (d->lost || d->ring_pos >= 0)
            continue;
        char s[256];
        snprintf(s, sizeof s,
                 "{\"plan_id\":%u,\"k\":%d,\"W\":%d,\"w\":0,\"offset\":0,\"n_active\":%d,"
                 "\"n_ctx\":%d,\"n_batch\":%d,\"dtype\":%d,\"next\":\"\",\"prefetch\":false,"
                 "\"release\":false}",
                 a->plan_id, k, W, n_active, n_ctx, a->p.n_batch, a->p.wire_dtype);
        hr_head_reply(a, d->id, d->id_len, HR_RING_PLAN, -1, 0, a->plan_id, s);
    }
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

static void hr_head_join(hr_agent *a, const uint8_t *id, size_t idl, const char *pl, size_t len) {
    json_error_t je;
    json_t *j = json_loadb(pl, len, 0, &je);
    const char *name = NULL, *ctrl = NULL, *data = NULL, *hash = NULL;
    json_int_t size = 0;
    int ver = 0;
    char msg[HR_ERR_LEN];
    if (!j || json_unpack_ex(j, &je, 0, "{s:i,s:s,s:s,s:s,s:I,s:s}", "version", &ver, "name", &name,
                             "ctrl", &ctrl, "data", &data, "model_size", &size, "model_hash",
                             &hash) != 0) {
        snprintf(msg, sizeof msg, "malformed JOIN: %s", je.text);
        HR_LOG_WARN(TAG, "%s", msg);
        hr_head_reply(a, id, idl, HR_RING_REJECT, 1, 0, 0, msg);
        json_decref(j);
        return;
    }
    char mine[24];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)a->model_hash);
    if (ver != HR_RING_VERSION) {
        snprintf(msg, sizeof msg, "protocol version %d unsupported (head speaks %d)", ver,
                 HR_RING_VERSION);
    } else if ((uint64_t)size != a->model_size || strcmp(hash, mine) != 0) {
        snprintf(msg, sizeof msg,
                 "model mismatch: device '%.40s' has %lld bytes, header hash %.16s; head has "
                 "%llu bytes, hash %s (every device needs the same GGUF file)",
                 name, (long long)size, hash, (unsigned long long)a->model_size, mine);
    } else {
        msg[0] = 0;
    }
    if (msg[0]) {
        HR_LOG_ERROR(TAG, "refused %s: %s", ctrl, msg);
        hr_head_reply(a, id, idl, HR_RING_REJECT, 1, 0, 0, msg);
        json_decref(j);
        return;
    }
    int di = -1;
    for (int i = 1; i < a->n_devs; i++)
        if (strcmp(a->devs[i].ctrl_ep, ctrl) == 0)
            di = i;
    if (di < 0) {
        if (a->n_devs >= HR_AGENT_MAX_DEV) {
            hr_head_reply(a, id, idl, HR_RING_REJECT, 1, 0, 0, "cluster is full");
            json_decref(j);
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
    const char *pk = json_string_value(json_object_get(j, "pubkey"));
    free(d->info);
    memset(d, 0, sizeof *d);
    snprintf(d->pubkey, sizeof d->pubkey, "%s", pk && hr_ring_key_valid(pk) ? pk : "");
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->ctrl_ep, sizeof d->ctrl_ep, "%s", ctrl);
    snprintf(d->data_ep, sizeof d->data_ep, "%s", data);
    memcpy(d->id, id, idl);
    d->id_len = idl;
    d->info = strndup(pl, len);
    d->last_seen = hr_now_s();
    d->ring_pos = -1;
    hr_dev_sched(a, d, d->info ? d->info : "{}", false);
    json_decref(j);
    HR_LOG_INFO(TAG, "%s joined from %s (data %s)", d->name, d->ctrl_ep, d->data_ep);
    hr_head_reply(a, id, idl, HR_RING_WELCOME, 0, 0, 0, NULL);
    a->replan = true;
    a->ready = false;
}

static void hr_head_heartbeat(hr_agent *a, int di, const char *pl, size_t len) {
    hr_dev *d = &a->devs[di];
    d->last_seen = hr_now_s();
    json_t *j = json_loadb(pl, len, 0, NULL);
    if (!j)
        return;
    double ms = 0, res = 0;
    json_int_t tok = 0, avail = -1;
    if (json_unpack(j, "{s:F,s:F,s:I,s:I}", "ms_round", &ms, "resident", &res, "tokens", &tok,
                    "mem_avail", &avail) == 0) {
        d->meas_ms_round = ms;
        d->resident = res;
        d->tokens = (uint64_t)tok;
        d->mem_avail = avail;
    }
    json_decref(j);
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
        if (!a->devs[i].lost && a->devs[i].ring_pos >= 0)
            hr_head_reply(a, a->devs[i].id, a->devs[i].id_len, type, -1, req, a->plan_id, NULL);
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
    const char *name = NULL, *pub = NULL;
    if (h->type != HR_RING_PAIR) {
        HR_LOG_WARN(TAG, "join token holder sent %s; only PAIR is allowed before pairing",
                    hr_ring_type_name(h->type));
        return;
    }
    json_t *j = json_loadb(pl, h->len, 0, NULL);
    if (!j || json_unpack(j, "{s:s,s:s}", "name", &name, "pubkey", &pub) != 0)
        snprintf(err, sizeof err, "malformed PAIR");
    else if (hr_ring_trust_add(hr_ring_keys_dir(a->keys), name, pub, err) == 0)
        HR_LOG_INFO(TAG, "paired '%s' (key %s) by join token", name, pub);
    if (err[0])
        HR_LOG_WARN(TAG, "pairing refused: %s", err);
    hr_head_reply(a, id, idl, err[0] ? HR_RING_REJECT : HR_RING_PAIR, -1, 0, 0,
                  err[0] ? err : "ok");
    json_decref(j);
}

static void hr_head_invite(hr_agent *a, void **inv, int n_inv, bool *joined) {
    char err[HR_ERR_LEN];
    for (int i = 0; i < n_inv; i++) {
        if (joined[i] || !inv[i])
            continue;
        hr_ring_hdr h = {.type = HR_RING_INVITE, .pos = -1, .len = (uint32_t)strlen(a->ctrl_ep)};
        hr_ring_send_msg(inv[i], NULL, 0, &h, a->ctrl_ep, err);
    }
}

int hr_head_run(hr_agent *a, char err[HR_ERR_LEN]) {
    int rc = 0;
    /* the head is device 0 */
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
    hr_dev_sched(a, me, a->info_json, true);
    a->replan = true;
    pthread_mutex_unlock(&a->dev_mu);
    char ev_ep[64];
    snprintf(ev_ep, sizeof ev_ep, "inproc://hr-events-%p", (void *)a);
    hr_ring_sockopt eo = hr_ring_sockopt_default();
    eo.hwm = 4096;
    if (!(a->ev_pull = hr_ring_socket(a->zctx, ZMQ_PULL, &eo, err)) ||
        zmq_bind(a->ev_pull, ev_ep) != 0)
        return hr_seterr(err, HR_ENET, "cannot bind %s", ev_ep);
    /* --peers: invite each agent to join us */
    void *inv[HR_AGENT_MAX_DEV] = {0};
    bool inv_joined[HR_AGENT_MAX_DEV] = {0};
    int n_inv = 0;
    if (a->p.peers) {
        char list[1024];
        snprintf(list, sizeof list, "%s", a->p.peers);
        for (char *tok = strtok(list, ","); tok && n_inv < HR_AGENT_MAX_DEV;
             tok = strtok(NULL, ",")) {
            char ep[HR_EP_LEN], pk[HR_RING_KEY_LEN] = "";
            char *at = strchr(tok, '@'); /* NAME@host:port: NAME is a trusted peer */
            if (at) {
                *at = 0;
                if (a->keys && hr_ring_keys_lookup(a->keys, tok, pk) != 0) {
                    rc = hr_seterr(err, HR_EINVAL, "peer '%s' is not trusted (hearth trust add)",
                                   tok);
                    goto out;
                }
                tok = at + 1;
            } else if (a->keys) {
                snprintf(pk, sizeof pk, "%s", hr_ring_keys_public(a->keys));
            }
            if (hr_ring_endpoint(tok, 0, ep, sizeof ep)) {
                rc = hr_seterr(err, HR_EINVAL, "bad peer address '%s'", tok);
                goto out;
            }
            hr_ring_sockopt so = hr_ring_sockopt_default();
            so.snd_timeout_ms = 0;
            inv[n_inv] = hr_ring_socket(a->zctx, ZMQ_DEALER, &so, err);
            if (inv[n_inv] && a->keys && hr_ring_secure_client(inv[n_inv], a->keys, pk, err)) {
                zmq_close(inv[n_inv]);
                inv[n_inv] = NULL;
                rc = HR_EINVAL;
                goto out;
            }
            if (inv[n_inv] && zmq_connect(inv[n_inv], ep) == 0)
                n_inv++;
        }
        if (a->p.expect <= 0)
            a->p.expect = n_inv;
    }
    size_t cap = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory");
        goto out;
    }
    double last_inv = 0;
    while (!atomic_load(&a->stop)) {
        double now = hr_now_s();
        if (n_inv && now - last_inv > 1.0) {
            pthread_mutex_lock(&a->dev_mu);
            for (int i = 0; i < n_inv; i++)
                inv_joined[i] = false;
            pthread_mutex_unlock(&a->dev_mu);
            hr_head_invite(a, inv, n_inv, inv_joined);
            last_inv = now;
            if (hr_head_n_workers(a) >= n_inv) {
                for (int i = 0; i < n_inv; i++)
                    zmq_close(inv[i]);
                n_inv = 0;
            }
        }
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
        zmq_pollitem_t it[2] = {{.socket = a->ctrl, .events = ZMQ_POLLIN},
                                {.socket = a->ev_pull, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 2, 50) <= 0)
            continue;
        if (it[1].revents & ZMQ_POLLIN)
            hr_head_event(a, buf, cap);
        if (!(it[0].revents & ZMQ_POLLIN))
            continue;
        uint8_t id[HR_RING_MAX_ID];
        size_t idl = 0;
        hr_ring_hdr h;
        char e2[HR_ERR_LEN] = "";
        char user[HR_RING_KEY_LEN];
        long n = hr_ring_recv_user(a->ctrl, id, &idl, buf, cap, 0, &h, user, e2);
        if (n == 0)
            continue;
        if (n > 0 && strcmp(user, "pairing") == 0) { /* a join token holder: PAIR only */
            hr_head_pair(a, id, idl, &h, (const char *)buf + HR_RING_HDR_SIZE);
            continue;
        }
        if (n < 0) {
            HR_LOG_WARN(TAG, "rejected frame on the control port: %s", e2);
            if (n == HR_EUNSUPPORTED && idl > 0)
                hr_head_reply(a, id, idl, HR_RING_REJECT, 1, 0, 0, e2);
            continue;
        }
        const char *pl = (const char *)buf + HR_RING_HDR_SIZE;
        if (h.type == HR_RING_INVITE) {
            pthread_mutex_lock(&a->dev_mu);
            bool alone = a->n_devs == 1 && a->p.expect <= 0 && !a->p.peers;
            pthread_mutex_unlock(&a->dev_mu);
            char ep[HR_EP_LEN], hs[HR_EP_LEN];
            snprintf(hs, sizeof hs, "%.*s", (int)(h.len < HR_EP_LEN - 1 ? h.len : HR_EP_LEN - 1),
                     pl);
            if (alone && hr_ring_endpoint(hs, 0, ep, sizeof ep) == 0) {
                HR_LOG_INFO(TAG, "%s: invited by %s; joining as a worker", a->name, ep);
                snprintf(a->head_ep, sizeof a->head_ep, "%s", ep);
                rc = 1;
                break;
            }
            HR_LOG_WARN(TAG, "invite from %s ignored (this agent is a head)", hs);
            continue;
        }
        if (h.type == HR_RING_PROMPT) {
            hr_head_prompt(a, id, idl, pl, h.len);
            continue;
        }
        if (h.type == HR_RING_CANCEL) {
            hr_prompt_cancel(a, id, idl);
            continue;
        }
        if (h.type == HR_RING_STATUS_REQ) {
            char *s = hr_head_status_json(a);
            hr_head_reply(a, id, idl, s ? HR_RING_STATUS : HR_RING_ERROR, -1, 0, 0,
                          s ? s : "out of memory");
            free(s);
            continue;
        }
        pthread_mutex_lock(&a->dev_mu);
        int di = hr_find_dev(a, id, idl);
        switch (h.type) {
        case HR_RING_JOIN:
            hr_head_join(a, id, idl, pl, h.len);
            break;
        case HR_RING_HEARTBEAT:
            if (di < 0 || a->devs[di].lost) {
                hr_head_reply(a, id, idl, HR_RING_REJECT, 0, 0, 0,
                              "unknown or lost device; join again");
                break;
            }
            hr_head_heartbeat(a, di, pl, h.len);
            hr_head_reply(a, id, idl, HR_RING_HEARTBEAT, -1, 0, a->plan_id, NULL);
            break;
        case HR_RING_READY:
            if (di < 0)
                break;
            a->devs[di].last_seen = hr_now_s();
            if (h.len >= 11 && strncmp(pl, "{\"ok\":true}", 11) == 0) {
                a->devs[di].ready = true;
                a->devs[di].ready_plan = h.plan_id;
            } else {
                snprintf(a->devs[di].ready_err, HR_ERR_LEN, "%.*s",
                         (int)(h.len < 200 ? h.len : 200), pl);
                snprintf(a->plan_err, sizeof a->plan_err,
                         "device '%.64s' cannot apply the plan: %.150s", a->devs[di].name,
                         a->devs[di].ready_err);
                HR_LOG_ERROR(TAG, "%s", a->plan_err);
            }
            hr_head_update_ready(a);
            break;
        case HR_RING_LEAVE:
            if (di >= 0) {
                HR_LOG_INFO(TAG, "%s left", a->devs[di].name);
                if (a->devs[di].ring_pos >= 0 && !a->devs[di].lost) {
                    snprintf(a->lost_msg, sizeof a->lost_msg, "device '%s' (%s) left",
                             a->devs[di].name, a->devs[di].ctrl_ep);
                    atomic_store(&a->lost, di + 1);
                }
                free(a->devs[di].info);
                a->devs[di] = a->devs[--a->n_devs];
                memset(&a->devs[a->n_devs], 0, sizeof a->devs[0]);
                a->replan = true;
                a->ready = false;
            }
            break;
        default:
            HR_LOG_WARN(TAG, "unexpected %s on the control port ignored",
                        hr_ring_type_name(h.type));
        }
        pthread_mutex_unlock(&a->dev_mu);
    }
    free(buf);
out:
    for (int i = 0; i < n_inv; i++)
        if (inv[i])
            zmq_close(inv[i]);
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
