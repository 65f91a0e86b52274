/* gen.c - where the generating thread meets the control thread: events
 * posted to the control loop (START, CANCEL, tokens for `hearth prompt`
 * clients), and taking the ring for a session (the ring ready, the head's
 * part of the current plan applied). The engine itself is batch.c. */
#include "agent/head-impl.h"
#include "common/sync.h"

#include "common/log.h"

#include <stdio.h>

#define TAG "head"

const hr_tokenizer *hr_head_tokenizer(const hr_agent *a) { return a->tok; }

int hr_head_n_vocab(const hr_agent *a) { return hr_model_hparams(a->m)->n_vocab; }

/* hr_head_post with ev_mu held. */
static int hr_head_post_locked(hr_agent *a, const hr_ring_hdr *h, const void *payload) {
    hr_head *hd = a->head;
    char err[HR_ERR_LEN];
    if (!hd->ev_push) {
        char ep[64];
        snprintf(ep, sizeof ep, "inproc://hr-events-%p", (void *)a);
        hr_ring_sockopt eo = hr_ring_sockopt_default();
        eo.hwm = 4096;
        if (!(hd->ev_push = hr_ring_socket(a->zctx, HR_RING_PUSH, &eo, err)))
            return HR_ENET;
        if (hr_ring_connect(hd->ev_push, ep, err) != 0) {
            hr_ring_close(hd->ev_push);
            hd->ev_push = NULL;
            return HR_ENET;
        }
    }
    return hr_ring_send_msg(hd->ev_push, NULL, 0, h, payload, err);
}

/* Posts an event to the control thread. */
int hr_head_post(hr_agent *a, const hr_ring_hdr *h, const void *payload) {
    hr_head *hd = a->head;
    hr_lock(&hd->ev_mu, HR_RANK_EV);
    int rc = hr_head_post_locked(a, h, payload);
    hr_unlock(&hd->ev_mu, HR_RANK_EV);
    return rc;
}

void hr_head_post_simple(hr_agent *a, int type, uint64_t req) {
    hr_ring_hdr h = {.type = (uint8_t)type, .pos = -1, .req_id = req};
    hr_head_post(a, &h, NULL);
}

/* Applies the head's part of plan np unless it is the one in use
 * (plan_mu held). */
int hr_head_gen_apply(hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]) {
    if (np->plan_id == a->lp.plan_id)
        return 0;
    int rc = hr_node_apply_plan(a, np, err);
    if (rc)
        HR_LOG_ERROR(TAG, "%s: cannot apply plan %u: %s", a->name, np->plan_id, err);
    return rc;
}

void hr_head_gen_end(hr_agent *a) {
    hr_unlock(&a->plan_mu, HR_RANK_PLAN);
    hr_head_end(a->head);
    hr_unlock(&a->head->gen_mu, HR_RANK_GEN);
}

/* Locks gen_mu and plan_mu when the ring is ready and applies the head's
 * part of the current plan. */
int hr_head_gen_begin(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_head *hd = a->head;
    hr_lock(&hd->gen_mu, HR_RANK_GEN);
    hr_local_plan np;
    int rc = hr_head_begin(hd, &np, err);
    if (rc) {
        hr_unlock(&hd->gen_mu, HR_RANK_GEN);
        return rc;
    }
    hr_lock(&a->plan_mu, HR_RANK_PLAN);
    if ((rc = hr_head_gen_apply(a, &np, err)))
        hr_head_gen_end(a);
    return rc;
}
