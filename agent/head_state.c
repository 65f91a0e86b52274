/* head_state.c - the one place where the head's control thread and its
 * generating thread meet (see head-impl.h): the control thread publishes
 * a snapshot of the ring's state and the head's own part of the plan; the
 * generating thread waits on it, marks itself busy while it runs a request
 * and takes the plan to apply. Also hr_head_wait_ready for any thread. */
#include "agent/head-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/msg.h"

#include <stdio.h>
#include <string.h>

#define TAG "head"

void hr_head_publish(hr_head *hd) {
    hr_head_snap n;
    memset(&n, 0, sizeof n); /* compared whole below */
    for (int i = 1; i < hd->n_devs; i++)
        n.n_ready += !hd->devs[i].lost && hd->devs[i].ready_plan == hd->plan_id;
    n.plan_id = hd->plan_id;
    n.ready = hd->ready;
    n.planned = hd->planned;
    n.replan = hd->replan;
    n.expect = hd->expect;
    snprintf(n.plan_err, sizeof n.plan_err, "%s", hd->plan_err);
    snprintf(n.lost_msg, sizeof n.lost_msg, "%s", hd->lost_msg);
    hr_lock(&hd->mu, HR_RANK_SHARED);
    if (memcmp(&n, &hd->snap, sizeof n) != 0 || hd->pending.plan_id != hd->own.plan_id ||
        atomic_load(&hd->lost) != hd->lost_di) {
        memcpy(&hd->snap, &n, sizeof n);
        hd->pending = hd->own;
        atomic_store(&hd->lost, hd->lost_di);
        pthread_cond_broadcast(&hd->cv);
    }
    hr_unlock(&hd->mu, HR_RANK_SHARED);
}

unsigned hr_head_traffic(hr_head *hd, bool *busy) {
    hr_lock(&hd->mu, HR_RANK_SHARED);
    unsigned t = hd->traffic;
    *busy = hd->busy;
    hr_unlock(&hd->mu, HR_RANK_SHARED);
    return t;
}

bool hr_head_claim(hr_head *hd) {
    hr_lock(&hd->mu, HR_RANK_SHARED);
    bool ok = !hd->busy;
    if (ok)
        hd->snap.ready = false;
    hr_unlock(&hd->mu, HR_RANK_SHARED);
    return ok;
}

void hr_head_snap_get(hr_head *hd, hr_head_snap *out) {
    hr_lock(&hd->mu, HR_RANK_SHARED);
    *out = hd->snap;
    hr_unlock(&hd->mu, HR_RANK_SHARED);
}

int hr_head_lost_err(hr_head *hd, char err[HR_ERR_LEN]) {
    hr_lock(&hd->mu, HR_RANK_SHARED);
    int rc = hr_seterr(err, HR_ENET, "%s",
                       hd->snap.lost_msg[0] ? hd->snap.lost_msg : "a device was lost");
    hr_unlock(&hd->mu, HR_RANK_SHARED);
    return rc;
}

/* A device joined, came back or was lost since the last request: waits
 * (bounded) for the re-plan the control thread is making. */
int hr_head_begin(hr_head *hd, hr_local_plan *np, char err[HR_ERR_LEN]) {
    hr_agent *a = hd->a;
    const hr_head_snap *s = &hd->snap;
    hr_lock(&hd->mu, HR_RANK_SHARED);
    double until = hr_now_s() + a->p.recover_ms / 1000.0;
    while (!s->ready && s->planned && !atomic_load(&a->stop) && hr_now_s() < until &&
           (s->replan ||
            (strncmp(s->plan_err, "no plan", 7) != 0 && !strstr(s->plan_err, "cannot apply")))) {
        hr_cond_wait_ms(&hd->cv, &hd->mu, 100);
    }
    int rc = 0;
    if (s->ready) {
        hd->busy = true;
        hd->traffic++;
        *np = hd->pending;
    } else {
        rc = hr_seterr(err, HR_EAGAIN, "cluster not ready%s%s", s->plan_err[0] ? ": " : "",
                       s->plan_err);
    }
    hr_unlock(&hd->mu, HR_RANK_SHARED);
    return rc;
}

void hr_head_end(hr_head *hd) {
    hr_lock(&hd->mu, HR_RANK_SHARED);
    hd->busy = false;
    hr_unlock(&hd->mu, HR_RANK_SHARED);
}

/* Waits (busy left) for a ready plan newer than old_plan, or, when adapt,
 * for the control thread to give the adaptive re-plan up (hd->adapt back
 * to 0: the plan in use goes on). */
static int hr_head_wait_plan(hr_head *hd, uint32_t old_plan, bool adapt, hr_local_plan *np,
                             char err[HR_ERR_LEN]) {
    hr_agent *a = hd->a;
    const hr_head_snap *s = &hd->snap;
    double deadline = hr_now_s() + a->p.recover_ms / 1000.0;
    char why[HR_ERR_LEN];
    hr_lock(&hd->mu, HR_RANK_SHARED);
    hd->busy = false; /* the control thread may re-plan now */
    if (adapt)
        snprintf(why, sizeof why, "adaptive re-plan of plan %u", old_plan);
    else
        snprintf(why, sizeof why, "%s", s->lost_msg[0] ? s->lost_msg : "a device was lost");
    int rc = 0;
    for (;;) {
        if (s->ready && !s->replan &&
            (s->plan_id != old_plan || (adapt && atomic_load(&hd->adapt) == 0))) {
            if (!adapt)
                atomic_fetch_add(&hd->recoveries, 1);
            hd->busy = true;
            hd->traffic++;
            *np = hd->pending;
            break;
        }
        if (!s->replan && strncmp(s->plan_err, "no plan", 7) == 0) {
            rc = hr_seterr(err, HR_EINFEASIBLE, "%s and no feasible plan remains (%s)", why,
                           s->plan_err);
            break;
        }
        if (atomic_load(&a->stop)) {
            rc = hr_seterr(err, HR_ECANCELED, "agent stopping");
            break;
        }
        if (hr_now_s() > deadline) {
            rc = hr_seterr(err, HR_ETIMEDOUT, "%s; no working plan within %d ms%s%s", why,
                           a->p.recover_ms, s->plan_err[0] ? ": " : "", s->plan_err);
            break;
        }
        hr_cond_wait_ms(&hd->cv, &hd->mu, 100);
    }
    hr_unlock(&hd->mu, HR_RANK_SHARED);
    return rc;
}

int hr_head_recover_wait(hr_head *hd, uint32_t old_plan, hr_local_plan *np, char err[HR_ERR_LEN]) {
    return hr_head_wait_plan(hd, old_plan, false, np, err);
}

int hr_head_adapt_wait(hr_head *hd, uint32_t old_plan, hr_local_plan *np, char err[HR_ERR_LEN]) {
    return hr_head_wait_plan(hd, old_plan, true, np, err);
}

int hr_head_wait_ready(hr_agent *a, int n_workers, int timeout_ms, char err[HR_ERR_LEN]) {
    hr_head *hd = a->head;
    if (!hd)
        return hr_seterr(err, HR_EINVAL, "not a head");
    const hr_head_snap *s = &hd->snap;
    struct timespec dl;
    hr_deadline_ms(&dl, timeout_ms);
    hr_lock(&hd->mu, HR_RANK_SHARED);
    int rc = 0;
    for (;;) {
        if (s->ready && s->n_ready >= n_workers)
            break;
        if (atomic_load(&hd->lost) && !s->replan && strncmp(s->plan_err, "no plan", 7) == 0) {
            rc = hr_seterr(err, HR_EINFEASIBLE, "cluster not ready: %s", s->plan_err);
            break;
        }
        if (pthread_cond_timedwait(&hd->cv, &hd->mu, &dl) != 0) {
            char why[96];
            if (atomic_load(&hd->lost))
                snprintf(why, sizeof why, "re-planning after a lost device");
            else if (!s->planned && s->expect > s->n_ready)
                snprintf(why, sizeof why, "waiting for %d worker%s (%d ready)", s->expect,
                         s->expect == 1 ? "" : "s", s->n_ready);
            else if (s->replan)
                snprintf(why, sizeof why, "re-planning");
            else if (n_workers > s->n_ready)
                snprintf(why, sizeof why, "waiting for %d worker%s (%d ready)", n_workers,
                         n_workers == 1 ? "" : "s", s->n_ready);
            else
                snprintf(why, sizeof why, "no plan serving yet");
            char waited[32] = "";
            if (timeout_ms > 0)
                snprintf(waited, sizeof waited, " after %d ms", timeout_ms);
            rc = hr_seterr(err, HR_ETIMEDOUT, "cluster not ready%s: %s%s%s", waited, why,
                           s->plan_err[0] ? "; " : "", s->plan_err);
            break;
        }
    }
    hr_unlock(&hd->mu, HR_RANK_SHARED);
    return rc;
}

/* Control thread: a message to a peer of the control socket. */
void hr_head_send(hr_head *hd, const uint8_t *id, size_t idl, hr_msg *m) {
    char err[HR_ERR_LEN];
    int type = m->h.type;
    if (hr_msg_send(hd->a->ctrl, id, idl, m, err))
        HR_LOG_DEBUG(TAG, "reply %s: %s", hr_ring_type_name(type), err);
}
