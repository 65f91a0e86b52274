/* gen.c - generation on the head: prefill in batches and decode tokens by
 * sending hidden states around the ring k times (the head computes its own
 * window in each round), output head + sampling on the head.
 * hr_head_generate() is the entry point the request service (service.c)
 * calls. */
#include "agent/head-impl.h"
#include "common/sync.h"

#include "common/log.h"
#include "common/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    pthread_mutex_lock(&hd->ev_mu);
    int rc = hr_head_post_locked(a, h, payload);
    pthread_mutex_unlock(&hd->ev_mu);
    return rc;
}

void hr_head_post_simple(hr_agent *a, int type, uint64_t req) {
    hr_ring_hdr h = {.type = (uint8_t)type, .pos = -1, .req_id = req};
    hr_head_post(a, &h, NULL);
}

/* Waits for our hidden state (req, pos, n_tok, round) to come back. */
static int hr_gen_wait(hr_agent *a, const hr_ring_hdr *want, const atomic_int *cancel,
                       char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    double deadline = hr_now_s() + a->p.data_timeout_ms / 1000.0;
    for (;;) {
        if (cancel && atomic_load(cancel))
            return hr_seterr(err, HR_ECANCELED, "canceled");
        if (atomic_load(&a->head->lost))
            return hr_head_lost_err(a->head, err);
        if (atomic_load(&a->stop))
            return hr_seterr(err, HR_ECANCELED, "agent stopping");
        if (hr_now_s() > deadline)
            return hr_seterr(err, HR_ETIMEDOUT,
                             "no hidden state back from the ring within %d ms (round %u, pos %d)",
                             a->p.data_timeout_ms, want->round, want->pos);
        hr_ring_hdr h;
        char e2[HR_ERR_LEN] = "";
        long n = hr_ring_recv(a->pull, NULL, NULL, lp->rx, lp->frame_cap, 50, &h, e2);
        if (n == 0)
            continue;
        if (n < 0) {
            HR_LOG_WARN(TAG, "rejected frame on the data port: %s", e2);
            continue;
        }
        if (h.type != HR_RING_HIDDEN || h.plan_id != lp->plan_id || h.req_id != want->req_id ||
            h.pos != want->pos || h.n_tok != want->n_tok || h.round != want->round ||
            h.dtype != lp->dtype ||
            (size_t)h.len != (size_t)h.n_tok * E * hr_ring_dtype_size(h.dtype)) {
            HR_LOG_WARN(TAG,
                        "dropped unexpected %s frame on the data port (req %llu pos %d round %u)",
                        hr_ring_type_name(h.type), (unsigned long long)h.req_id, h.pos, h.round);
            continue;
        }
        return hr_ring_unpack(lp->hid, (size_t)h.n_tok * E, lp->rx + HR_RING_HDR_SIZE, h.len,
                              h.dtype);
    }
}

/* One pass of lp->hid ([nb][n_embd], tokens at pos..) through all k rounds. */
static int hr_gen_pass(hr_agent *a, uint64_t req, int nb, int pos, const atomic_int *cancel,
                       char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    if (lp->n_active > 1)
        hr_node_push_connect(a);
    for (int r = 0; r < lp->k; r++) {
        int rc;
        if (lp->w > 0) {
            double t0 = hr_now_s(); /* the window alone, as on a worker */
            if ((rc = hr_ctx_layers(lp->ctx[r], lp->hid, nb, pos, err)))
                return rc;
            hr_node_test_slow(a);
            hr_node_stats_round(a, (hr_now_s() - t0) * 1000.0, nb, false);
        }
        if (lp->n_active <= 1) {
            hr_node_after_window(a, lp, r); /* the streamer reads the next window ahead */
            continue;
        }
        hr_ring_hdr h = {.type = HR_RING_HIDDEN,
                         .dtype = (uint8_t)lp->dtype,
                         .round = (uint16_t)r,
                         .n_tok = (uint16_t)nb,
                         .pos = pos,
                         .plan_id = lp->plan_id,
                         .req_id = req};
        long len = hr_ring_pack(lp->frame + HR_RING_HDR_SIZE, lp->frame_cap - HR_RING_HDR_SIZE,
                                lp->hid, (size_t)nb * E, lp->dtype);
        h.len = (uint32_t)len;
        if ((rc = hr_ring_send(a->push, NULL, 0, lp->frame, &h, err))) {
            /* the next device is gone or stuck: give the heartbeats time to name it */
            double until = hr_now_s() + a->p.hb_timeout_ms / 1000.0 + 0.5;
            while (hr_now_s() < until && !atomic_load(&a->head->lost)) {
                struct timespec ts = {0, 20000000};
                nanosleep(&ts, NULL);
            }
            return atomic_load(&a->head->lost) ? hr_head_lost_err(a->head, err) : rc;
        }
        hr_node_after_window(a, lp, r); /* after the send: off the ring's critical path */
        if ((rc = hr_gen_wait(a, &h, cancel, err)))
            return rc;
    }
    pthread_mutex_lock(&a->st.mu);
    a->st.tokens += (uint64_t)nb;
    pthread_mutex_unlock(&a->st.mu);
    return 0;
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
    pthread_mutex_unlock(&a->plan_mu);
    hr_head_end(a->head);
    pthread_mutex_unlock(&a->head->gen_mu);
}

/* Locks gen_mu and plan_mu when the ring is ready and applies the head's
 * part of the current plan. */
int hr_head_gen_begin(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_head *hd = a->head;
    pthread_mutex_lock(&hd->gen_mu);
    hr_local_plan np;
    int rc = hr_head_begin(hd, &np, err);
    if (rc) {
        pthread_mutex_unlock(&hd->gen_mu);
        return rc;
    }
    pthread_mutex_lock(&a->plan_mu);
    if ((rc = hr_head_gen_apply(a, &np, err)))
        hr_head_gen_end(a);
    return rc;
}

/* Prefill ids[n] at pos 0 in batches; logits of the last token (or all). */
static int hr_gen_prefill(hr_agent *a, uint64_t req, const int32_t *ids, int n, float *logits,
                          bool all, const atomic_int *cancel, char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    size_t nv = (size_t)hr_model_hparams(a->m)->n_vocab;
    hr_progress pr;
    hr_progress_begin(&pr, TAG, "prefill", "tokens", n);
    for (int done = 0; done < n;) {
        int nb = n - done < lp->n_batch ? n - done : lp->n_batch;
        int rc = hr_model_embed(a->m, ids + done, nb, lp->hid, err);
        if (rc || (rc = hr_gen_pass(a, req, nb, done, cancel, err))) {
            hr_progress_end(&pr);
            return rc;
        }
        if (all)
            hr_ctx_output(lp->out_ctx, lp->hid, 0, nb, logits + (size_t)done * nv);
        else if (done + nb == n)
            hr_ctx_output(lp->out_ctx, lp->hid, nb - 1, 1, logits);
        done += nb;
        hr_progress_update(&pr, done);
    }
    hr_progress_end(&pr);
    return 0;
}

/* ---- recovery from a lost device ---- */

static bool hr_gen_lost(hr_agent *a, int rc) {
    return (rc == HR_ENET || rc == HR_ETIMEDOUT) && atomic_load(&a->head->lost) != 0;
}

/* Waits until the control thread made and readied a plan newer than
 * old_plan over the remaining devices, and applies the head's part. */
static int hr_gen_recover(hr_agent *a, uint32_t old_plan, char err[HR_ERR_LEN]) {
    hr_local_plan np;
    int rc = hr_head_recover_wait(a->head, old_plan, &np, err);
    return rc ? rc : hr_head_gen_apply(a, &np, err);
}

/* Feeds hist[0..n) exactly as the request did (the prompt in n_batch
 * batches, then every later token alone), leaving the logits of the last. */
static int hr_gen_replay(hr_agent *a, uint64_t req, const int32_t *hist, int n, int n_prompt,
                         const atomic_int *cancel, char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    int rc = hr_gen_prefill(a, req, hist, n_prompt, lp->logits, false, cancel, err);
    for (int p = n_prompt; rc == 0 && p < n; p++) {
        if ((rc = hr_model_embed(a->m, &hist[p], 1, lp->hid, err)) ||
            (rc = hr_gen_pass(a, req, 1, p, cancel, err)))
            break;
        if (p + 1 == n)
            hr_ctx_output(lp->out_ctx, lp->hid, 0, 1, lp->logits);
    }
    return rc;
}

/* The control thread asked for an adaptive re-plan of the plan in use
 * (head_adapt.c): between two tokens, nothing of the request is on the
 * ring; leave the plan, apply the new one and replay hist[0..n) on it
 * under a new request id, exactly as after a lost device. */
static int hr_gen_adapt(hr_agent *a, uint64_t *req, const int32_t *hist, int n, int n_prompt,
                        const atomic_int *cancel, char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    hr_local_plan np;
    uint32_t old = lp->plan_id;
    double t0 = hr_now_s();
    hr_head_post_simple(a, HR_RING_CANCEL, *req);
    int rc = hr_head_adapt_wait(a->head, old, &np, err);
    if (rc == 0)
        rc = hr_head_gen_apply(a, &np, err);
    if (rc)
        return rc;
    *req = a->head->next_req++;
    hr_head_post_simple(a, HR_RING_START, *req);
    double t1 = hr_now_s();
    rc = hr_gen_replay(a, *req, hist, n, n_prompt, cancel, err);
    if (rc == 0)
        HR_LOG_INFO(TAG,
                    "request %llu: adaptive re-plan: plan %u -> %u (waited %.2f s), %d tokens "
                    "replayed in %.2f s",
                    (unsigned long long)*req, old, lp->plan_id, t1 - t0, n, hr_now_s() - t1);
    return rc;
}

/* Brings the ring to hist[0..n): the prompt (n == n_prompt) or one more
 * token. A lost device costs a re-plan and a replay of the whole history,
 * never a different answer; so does an adaptive re-plan, taken between
 * tokens. *req may change (a new request id per replay). */
static int hr_gen_advance(hr_agent *a, uint64_t *req, const int32_t *hist, int n, int n_prompt,
                          const atomic_int *cancel, char err[HR_ERR_LEN]) {
    hr_local_plan *lp = &a->lp;
    int rc;
    if (n > n_prompt && atomic_load(&a->head->adapt) == lp->plan_id)
        rc = hr_gen_adapt(a, req, hist, n, n_prompt, cancel, err);
    else if (n == n_prompt)
        rc = hr_gen_prefill(a, *req, hist, n, lp->logits, false, cancel, err);
    else if ((rc = hr_model_embed(a->m, &hist[n - 1], 1, lp->hid, err)) == 0 &&
             (rc = hr_gen_pass(a, *req, 1, n - 1, cancel, err)) == 0)
        hr_ctx_output(lp->out_ctx, lp->hid, 0, 1, lp->logits);
    for (int tries = 0; rc && hr_gen_lost(a, rc) && tries < HR_AGENT_MAX_DEV; tries++) {
        HR_LOG_WARN(TAG, "request %llu: %s; re-planning, then replaying %d tokens",
                    (unsigned long long)*req, err, n);
        uint32_t old = lp->plan_id;
        hr_head_post_simple(a, HR_RING_CANCEL, *req);
        if ((rc = hr_gen_recover(a, old, err)))
            return rc;
        *req = a->head->next_req++;
        hr_head_post_simple(a, HR_RING_START, *req);
        double t0 = hr_now_s();
        rc = hr_gen_replay(a, *req, hist, n, n_prompt, cancel, err);
        if (rc == 0)
            HR_LOG_INFO(TAG, "request %llu: recovered on plan %u (%d tokens replayed in %.2f s)",
                        (unsigned long long)*req, lp->plan_id, n, hr_now_s() - t0);
    }
    return rc;
}

int hr_head_logits(hr_agent *a, const int32_t *ids, int n, float *logits, char err[HR_ERR_LEN]) {
    if (!a->is_head || !a->head)
        return hr_seterr(err, HR_EINVAL, "not a head");
    int rc = hr_head_gen_begin(a, err);
    if (rc)
        return rc;
    if (n < 1 || n > a->lp.n_ctx) {
        hr_head_gen_end(a);
        return hr_seterr(err, HR_EINVAL, "%d tokens for a context of %d", n, a->lp.n_ctx);
    }
    hr_head_cache_forget(a->head, 0); /* slot 0's KV is rewritten */
    uint64_t req = a->head->next_req++;
    hr_head_post_simple(a, HR_RING_START, req);
    rc = hr_gen_prefill(a, req, ids, n, logits, true, NULL, err);
    if (rc)
        hr_head_post_simple(a, HR_RING_CANCEL, req);
    hr_head_gen_end(a);
    return rc;
}

int hr_head_generate(hr_agent *a, const int32_t *ids, int n_ids, const hr_sampler_params *sp,
                     int max_tokens, hr_head_token_fn on_token, void *ud, const atomic_int *cancel,
                     hr_head_stats *stats, char err[HR_ERR_LEN]) {
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!a->is_head || !a->head)
        return hr_seterr(err, HR_EINVAL, "not a head");
    if (n_ids < 1)
        return hr_seterr(err, HR_EINVAL, "empty prompt");
    int rc = hr_head_gen_begin(a, err);
    if (rc)
        return rc;
    hr_local_plan *lp = &a->lp;
    const hr_hparams *hp = hr_model_hparams(a->m);
    hr_sampler *smp = NULL;
    int32_t *hist = NULL;
    hr_head_cache_forget(a->head, 0); /* slot 0's KV is rewritten */
    if (n_ids >= lp->n_ctx) {
        rc = hr_seterr(err, HR_ERANGE, "prompt has %d tokens but the context holds %d", n_ids,
                       lp->n_ctx);
        goto done;
    }
    if (max_tokens < 0 || n_ids + max_tokens > lp->n_ctx)
        max_tokens = lp->n_ctx - n_ids;
    smp = hr_sampler_create(sp, hp->n_vocab);
    hist = malloc(((size_t)n_ids + (size_t)max_tokens + 1) * sizeof *hist);
    if (!smp || !hist) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    uint64_t req = a->head->next_req++;
    hr_head_post_simple(a, HR_RING_START, req);
    for (int i = 0; i < n_ids; i++)
        hr_sampler_accept(smp, ids[i]);
    memcpy(hist, ids, (size_t)n_ids * sizeof *hist);
    int n_hist = n_ids;
    double t0 = hr_now_s();
    if ((rc = hr_gen_advance(a, &req, hist, n_hist, n_ids, cancel, err)))
        goto fail;
    double t1 = hr_now_s();
    if (stats) {
        stats->n_prompt = n_ids;
        stats->prompt_s = t1 - t0;
    }
    hr_detok dt;
    hr_detok_init(&dt, false);
    char piece[512];
    for (int i = 0; i < max_tokens; i++) {
        int32_t id = hr_sampler_sample(smp, lp->logits);
        hr_sampler_accept(smp, id);
        bool eog = hr_tokenizer_is_eog(a->tok, id);
        int nb = eog ? 0 : hr_detok_push(&dt, a->tok, id, piece, sizeof piece);
        if (stats) {
            stats->n_gen++;
            stats->gen_s = hr_now_s() - t1;
        }
        if (on_token && on_token(ud, id, piece, nb > 0 ? nb : 0))
            break;
        if (eog || i + 1 == max_tokens)
            break;
        if (cancel && atomic_load(cancel)) {
            rc = hr_seterr(err, HR_ECANCELED, "canceled");
            goto fail;
        }
        hist[n_hist++] = id;
        atomic_store(&a->head->gen_done, i + 1); /* for head_adapt.c */
        atomic_store(&a->head->gen_left, max_tokens - i - 1);
        if ((rc = hr_gen_advance(a, &req, hist, n_hist, n_ids, cancel, err)))
            goto fail;
    }
    int nb = hr_detok_flush(&dt, piece, sizeof piece);
    if (nb > 0 && on_token)
        on_token(ud, -1, piece, nb);
    if (stats)
        stats->gen_s = hr_now_s() - t1;
    goto done;
fail:
    if (rc == HR_ECANCELED) /* the client hung up or the server stops: not an error */
        HR_LOG_INFO(TAG, "request %llu canceled", (unsigned long long)req);
    else
        HR_LOG_ERROR(TAG, "request %llu failed: %s", (unsigned long long)req, err);
    hr_head_post_simple(a, HR_RING_CANCEL, req);
done:
    atomic_store(&a->head->gen_done, 0);
    atomic_store(&a->head->gen_left, 0);
    hr_sampler_destroy(smp);
    free(hist);
    hr_head_gen_end(a);
    return rc;
}
