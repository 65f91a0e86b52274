/* head_link.c - measured links on the head (control thread, dev_mu held):
 * asking each device to measure its link (PROBE: to the head when it
 * joins, to its next device once a plan with another next is ready), the
 * head's own measurement to its next device (on its link thread), the
 * figures arriving (LINK), giving them to the planner instead of the
 * assumed ones, re-planning when a link turns out far from what the plan
 * used, and the status fields that say which figures are measured. */
#include "agent/head-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/msg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TAG "head"

#define HR_LINK_PROBE_WAIT_S 5.0 /* a probe unanswered this long has failed */
#define HR_LINK_RETRY_S 10.0     /* a failed probe is asked again after this */
#define HR_LINK_JOIN_WAIT_S 3.0  /* a plan waits this long for a joining device's link */
#define HR_LINK_REPLAN_S 10.0    /* at most one link-driven re-plan per this */
#define HR_LINK_REPLAN_RATIO 2.0 /* a hop this many times slower or faster ... */
#define HR_LINK_REPLAN_MS 0.5    /* ... and this many ms apart re-plans */

/* The name of the device whose responder is ep ("" unknown). */
static const char *hr_link_name(const hr_head *hd, const char *ep) {
    if (!ep[0])
        return "";
    if (strcmp(ep, hd->a->echo_ep) == 0)
        return hd->a->name;
    for (int i = 1; i < hd->n_devs; i++)
        if (strcmp(hd->devs[i].echo_ep, ep) == 0)
            return hd->devs[i].name;
    return "";
}

/* ms per hop of one token's hidden state, as the cost model counts it */
static double hr_link_hop_ms(const hr_head *hd, double rtt_ms, double bps, double rtt_bytes) {
    return hr_sched_hop_ms(rtt_ms, bps, rtt_bytes, hd->have_pm ? (double)hd->pm.hidden_bytes : 0);
}

/* The next ring member after d, NULL when d is not in a ring of two or more. */
static hr_dev *hr_link_next(hr_head *hd, const hr_dev *d) {
    int n_active = 0; /* the plan's ring (a lost member keeps its place until the next plan) */
    for (int i = 0; i < hd->n_devs; i++)
        n_active += hd->devs[i].ring_pos >= 0;
    if (d->ring_pos < 0 || n_active < 2)
        return NULL;
    for (int i = 0; i < hd->n_devs; i++)
        if (hd->devs[i].ring_pos == (d->ring_pos + 1) % n_active)
            return &hd->devs[i];
    return NULL;
}

/* New figures for d: kept, given to its scheduler inputs, and a re-plan
 * marked due when the hop they predict is far from the plan's. */
static void hr_link_store(hr_head *hd, hr_dev *d, const hr_msg_link *lk) {
    d->link_measured = true;
    d->link_rtt_ms = lk->rtt_us * 1e-3;
    d->link_bps = lk->bw_mbs * 1e6;
    d->link_rtt_bytes = lk->msg_bytes > 0 ? lk->msg_bytes : 0;
    d->link_t = hr_now_s();
    d->link_plan = lk->plan_id;
    d->link_n++;
    snprintf(d->link_to, sizeof d->link_to, "%s", lk->to);
    snprintf(d->link_to_name, sizeof d->link_to_name, "%s", hr_link_name(hd, lk->to));
    if (strcmp(d->probe_to, lk->to) == 0)
        d->probe_to[0] = 0;
    d->probe_failed = false;
    if (d->has_sched) {
        d->sd.rtt_ms = d->link_rtt_ms;
        d->sd.link_bps = d->link_bps;
        d->sd.rtt_bytes = d->link_rtt_bytes;
        d->sd.link_assumed = false;
    }
    hr_dev *nx = hr_link_next(hd, d);
    if (!hd->planned || !nx || strcmp(nx->echo_ep, lk->to) != 0 || hd->a->p.windows ||
        d->plan_bps <= 0)
        return;
    double was = hr_link_hop_ms(hd, d->plan_rtt_ms, d->plan_bps, d->plan_rtt_bytes);
    double now = hr_link_hop_ms(hd, d->link_rtt_ms, d->link_bps, d->link_rtt_bytes);
    double r = now > was ? now / (was > 0 ? was : 1e-9) : was / (now > 0 ? now : 1e-9);
    if (r > HR_LINK_REPLAN_RATIO && fabs(now - was) > HR_LINK_REPLAN_MS) {
        hd->link_replan_due = true;
        snprintf(hd->link_replan_why, sizeof hd->link_replan_why,
                 "link %.48s -> %.48s measured %.3f ms per hop, the plan used %.3f ms%s", d->name,
                 d->link_to_name, now, was, d->plan_link_measured ? "" : " (assumed)");
    }
}

static void hr_link_probe(hr_head *hd, hr_dev *d, const hr_dev *to, uint32_t plan_id) {
    hr_msg_probe rq = {.plan_id = plan_id};
    const char *ep = to ? to->echo_ep : hd->a->echo_ep;
    snprintf(rq.to, sizeof rq.to, "%s", ep);
    snprintf(rq.key, sizeof rq.key, "%s", to ? to->pubkey : hd->devs[0].pubkey);
    snprintf(rq.name, sizeof rq.name, "%s", to ? to->name : hd->a->name);
    snprintf(d->probe_to, sizeof d->probe_to, "%s", ep);
    d->probe_t = hr_now_s();
    d->probe_failed = false;
    bool busy;
    d->probe_traffic = hr_head_traffic(hd, &busy);
    if (d == &hd->devs[0]) { /* the head's own: its link thread */
        hr_link_request(hd->a, &rq);
        return;
    }
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_probe_encode(&m, &rq, err) == 0)
        hr_head_send(hd, d->id, d->id_len, &m);
}

void hr_head_link_join(hr_head *hd, hr_dev *d) {
    if (hd->a->echo_ep[0] && d->id_len)
        hr_link_probe(hd, d, NULL, 0);
}

/* True (and the figures dropped, the probe asked again when the ring is
 * idle) when a request ran on the ring during the probe: its hidden states
 * share the links, and on a slow link they fill the queue the probe times. */
static bool hr_link_disturbed(hr_head *hd, hr_dev *d, const hr_msg_link *lk) {
    bool busy;
    unsigned t = hr_head_traffic(hd, &busy);
    if (!busy && t == d->probe_traffic)
        return false;
    HR_LOG_INFO(TAG,
                "%s: link figures for %s taken while a request ran (round trip %.3f ms): "
                "measured again when the ring is idle",
                d->name, lk->to, lk->rtt_us * 1e-3);
    if (strcmp(d->probe_to, lk->to) == 0)
        d->probe_to[0] = 0;
    return true;
}

void hr_head_link_msg(hr_head *hd, int di, const hr_ring_hdr *h, const char *pl) {
    hr_dev *d = &hd->devs[di];
    hr_msg_link lk;
    char err[HR_ERR_LEN];
    d->last_seen = hr_now_s();
    if (hr_msg_link_decode(h, pl, &lk, err)) {
        HR_LOG_WARN(TAG, "%s: link figures refused: %s", d->name, err);
        return;
    }
    if (hr_link_disturbed(hd, d, &lk))
        return;
    hr_link_store(hd, d, &lk);
    HR_LOG_INFO(TAG, "%s: link to %s measured: round trip %.3f ms, %.1f MB/s", d->name,
                d->link_to_name[0] ? d->link_to_name : d->link_to, d->link_rtt_ms,
                d->link_bps * 1e-6);
}

bool hr_head_link_wait(const hr_head *hd) {
    if (hd->lost_di)
        return false;
    double now = hr_now_s();
    for (int i = 1; i < hd->n_devs; i++) {
        const hr_dev *d = &hd->devs[i];
        if (!d->lost && d->probe_to[0] && !d->link_measured && !d->probe_failed &&
            now - d->probe_t < HR_LINK_JOIN_WAIT_S)
            return true;
    }
    return false;
}

void hr_head_link_timer(hr_head *hd) {
    hr_agent *a = hd->a;
    hr_dev *me = &hd->devs[0];
    hr_msg_link lk;
    char err[HR_ERR_LEN] = "";
    int rc = hr_link_take(a, &lk, err);
    if (rc == 1 && !hr_link_disturbed(hd, me, &lk)) {
        hr_link_store(hd, me, &lk);
    } else if (rc < 0 && strcmp(me->probe_to, lk.to) == 0) {
        me->probe_failed = true;
        me->probe_t = hr_now_s();
    }
    double now = hr_now_s();
    /* one probe at a time: two on the links of one slow device (its
     * in-link and its out-link share its queues) would time each other */
    bool busy = false;
    for (int i = 0; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        if (d->probe_to[0] && !d->probe_failed && now - d->probe_t > HR_LINK_PROBE_WAIT_S) {
            HR_LOG_WARN(TAG, "%s: no link figures for %s within %.0f s", d->name, d->probe_to,
                        HR_LINK_PROBE_WAIT_S);
            d->probe_failed = true;
            d->probe_t = now;
        }
        busy = busy || (d->probe_to[0] && !d->probe_failed && !(i > 0 && d->lost));
    }
    bool gen_busy;
    hr_head_traffic(hd, &gen_busy);
    busy = busy || gen_busy; /* and none while a request runs: see hr_link_disturbed */
    for (int i = 0; i < hd->n_devs && !busy; i++) {
        hr_dev *d = &hd->devs[i];
        if (!hd->ready || (i > 0 && (d->lost || !d->id_len)) || (i == 0 && !a->link))
            continue;
        /* a ready ring: every member measures its link to its next device */
        const hr_dev *nx = hr_link_next(hd, d);
        if (!nx || !nx->echo_ep[0] || strcmp(d->link_to, nx->echo_ep) == 0)
            continue;
        bool pending = strcmp(d->probe_to, nx->echo_ep) == 0;
        if (pending && (!d->probe_failed || now - d->probe_t < HR_LINK_RETRY_S))
            continue;
        hr_link_probe(hd, d, nx, hd->plan_id);
        busy = true;
    }
    if (hd->link_replan_due && !hd->replan && now - hd->link_replan_t >= HR_LINK_REPLAN_S) {
        HR_LOG_INFO(TAG, "re-planning: %s", hd->link_replan_why);
        hd->link_replan_due = false;
        hd->link_replan_t = now;
        hd->replan = true;
    }
}

void hr_head_link_inputs(hr_head *hd, const int *cand, int n, hr_sched_device *sd) {
    for (int i = 0; i < n; i++) {
        hr_dev *d = &hd->devs[cand[i]];
        d->plan_link_measured = d->plan_link_reverse = false;
        d->plan_link_to[0] = 0;
        if (d->link_measured) {
            sd[i].rtt_ms = d->link_rtt_ms;
            sd[i].link_bps = d->link_bps;
            sd[i].rtt_bytes = d->link_rtt_bytes;
            sd[i].link_assumed = false;
            d->plan_link_measured = true;
            memcpy(d->plan_link_to, d->link_to_name, sizeof d->plan_link_to); /* same size */
        } else if (i == 0 && n > 1) {
            /* the head has not measured its own next hop yet: the first
             * other candidate (its next in the ring order when it gets
             * layers) measured the same link the other way at join */
            const hr_dev *o = &hd->devs[cand[1]];
            if (o->link_measured && strcmp(o->link_to, hd->a->echo_ep) == 0) {
                sd[i].rtt_ms = o->link_rtt_ms;
                sd[i].link_bps = o->link_bps;
                sd[i].rtt_bytes = o->link_rtt_bytes;
                sd[i].link_assumed = false;
                d->plan_link_measured = d->plan_link_reverse = true;
                memcpy(d->plan_link_to, o->name, sizeof d->plan_link_to); /* same size */
            }
        }
        d->plan_rtt_ms = sd[i].rtt_ms;
        d->plan_bps = sd[i].link_bps;
        d->plan_rtt_bytes = sd[i].rtt_bytes;
    }
}

void hr_head_link_status(const hr_dev *d, bool is_head, double now, hr_status_link *out) {
    bool measured = d->link_measured;
    bool reverse = !measured && is_head && d->plan_link_reverse;
    out->src = measured  ? HR_STATUS_LINK_MEASURED
               : reverse ? HR_STATUS_LINK_REVERSE
                         : HR_STATUS_LINK_ASSUMED;
    out->rtt_ms = out->bps = NAN; /* not shown: no profile and nothing measured */
    if (measured || reverse || d->has_sched) {
        out->rtt_ms = measured ? d->link_rtt_ms : reverse ? d->plan_rtt_ms : d->sd.rtt_ms;
        out->bps = measured ? d->link_bps : reverse ? d->plan_bps : d->sd.link_bps;
    }
    out->to[0] = out->endpoint[0] = out->probe[0] = 0;
    out->age_s = NAN;
    out->plan = 0;
    out->measurements = 0;
    if (measured) {
        snprintf(out->to, sizeof out->to, "%s", d->link_to_name);
        snprintf(out->endpoint, sizeof out->endpoint, "%s", d->link_to);
        out->age_s = now - d->link_t;
        out->plan = d->link_plan;
        out->measurements = d->link_n;
    } else if (reverse) { /* measured by its next device, the other way */
        snprintf(out->to, sizeof out->to, "%s", d->plan_link_to);
    }
    if (d->probe_to[0])
        snprintf(out->probe, sizeof out->probe, "%s", d->probe_failed ? "failed" : "pending");
    /* the figures the current plan ran on */
    out->plan_rtt_ms = d->plan_bps > 0 ? d->plan_rtt_ms : NAN;
    out->plan_bps = d->plan_bps > 0 ? d->plan_bps : NAN;
    out->plan_assumed = !d->plan_link_measured;
}
