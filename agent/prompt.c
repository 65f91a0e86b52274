/* prompt.c - `hearth prompt` clients of the head: decodes a PROMPT from the
 * control socket into a request for the service (service.h), streams its
 * tokens back as TOKEN frames and ends with DONE (JSON stats) or ERROR.
 *
 * The control thread owns the ROUTER socket, so the service thread posts
 * TOKEN/DONE/ERROR as events (hr_head_post) whose payload starts with the
 * client's identity: [u16 LE len][identity][client payload];
 * hr_prompt_forward() on the control thread strips it and sends the rest to
 * that client. A request refused up front, or canceled while queued (its
 * on_done then runs inside hr_service_cancel_client on the control thread),
 * is answered directly. */
#include "agent/head-impl.h"
#include "agent/service.h"

#include "common/log.h"
#include "ring/msg.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "head"
#define HR_PROMPT_PIECE 512 /* bytes of text per TOKEN frame */

/* One PROMPT in flight (owned by the service until on_done). */
typedef struct {
    hr_agent *a;
    pthread_t ctl; /* the control thread (the one that submitted) */
    uint8_t id[HR_RING_MAX_ID];
    size_t idl;
} hr_prompt;

/* "zmq:" + identity: the service's client key of a ZeroMQ client. */
static size_t hr_prompt_key(uint8_t *key, const uint8_t *id, size_t idl) {
    memcpy(key, "zmq:", 4);
    memcpy(key + 4, id, idl);
    return 4 + idl;
}

/* Sends type + msg to the client: directly on the control thread, else as
 * an event for the control thread to forward. */
static void hr_prompt_send(hr_prompt *p, int type, const void *msg, size_t len) {
    char err[HR_ERR_LEN];
    if (pthread_equal(pthread_self(), p->ctl)) {
        hr_ring_hdr h = {.type = (uint8_t)type, .pos = -1, .len = (uint32_t)len};
        if (hr_ring_send_msg(p->a->ctrl, p->id, p->idl, &h, msg, err))
            HR_LOG_DEBUG(TAG, "reply %s: %s", hr_ring_type_name(type), err);
        return;
    }
    uint8_t pl[2 + HR_RING_MAX_ID + 4 + 1024];
    if (len > sizeof pl - 2 - p->idl)
        len = sizeof pl - 2 - p->idl;
    pl[0] = (uint8_t)(p->idl & 0xff);
    pl[1] = (uint8_t)(p->idl >> 8);
    memcpy(pl + 2, p->id, p->idl);
    memcpy(pl + 2 + p->idl, msg, len);
    hr_ring_hdr h = {.type = (uint8_t)type, .pos = -1, .len = (uint32_t)(2 + p->idl + len)};
    hr_head_post(p->a, &h, pl);
}

/* Sends an encoded message to the client (hr_prompt_send) and frees it. */
static void hr_prompt_send_msg(hr_prompt *p, hr_msg *m) {
    hr_prompt_send(p, m->h.type, m->data, m->h.len);
    free(m->data);
    m->data = NULL;
}

/* The end of a request: DONE with its statistics, or ERROR with err. */
static void hr_prompt_reply(hr_prompt *p, int rc, const hr_head_stats *st, const char *err) {
    hr_msg m;
    char e2[HR_ERR_LEN];
    int erc;
    if (rc == 0 && st) {
        hr_msg_done d = {.n_prompt = st->n_prompt,
                         .n_gen = st->n_gen,
                         .prompt_s = st->prompt_s,
                         .gen_s = st->gen_s,
                         .prompt_tps = st->n_prompt / (st->prompt_s > 0 ? st->prompt_s : 1e-9),
                         .gen_tps = st->n_gen / (st->gen_s > 0 ? st->gen_s : 1e-9)};
        erc = hr_msg_done_encode(&m, &d, e2);
    } else {
        erc = hr_msg_error_encode(&m, err && *err ? err : hr_strerror(rc), e2);
    }
    if (erc == 0)
        hr_prompt_send_msg(p, &m);
    else
        HR_LOG_WARN(TAG, "cannot encode the reply: %s", e2);
}

/* on_token: runs on the service thread while the request generates. */
static int hr_prompt_token(void *ud, int32_t id, const char *piece, int len) {
    hr_prompt *p = ud;
    if (len > HR_PROMPT_PIECE)
        len = HR_PROMPT_PIECE;
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_token_encode(&m, id, piece, len, err) == 0)
        hr_prompt_send_msg(p, &m);
    return 0;
}

static void hr_prompt_done(void *ud, int rc, const hr_head_stats *st, const char *err) {
    hr_prompt *p = ud;
    hr_prompt_reply(p, rc, st, err);
    free(p);
}

/* The PROMPT payload (ring/msg.h) onto r; absent sampler fields keep
 * hr_sampler_params_default()'s values. */
static int hr_prompt_decode(const char *pl, size_t len, hr_msg_prompt *pm, hr_service_req *r,
                            char err[HR_ERR_LEN]) {
    *pm = (hr_msg_prompt){.n_predict = 128,
                          .top_k = r->sp.top_k,
                          .wait_ms = 30000,
                          .temp = r->sp.temperature,
                          .top_p = r->sp.top_p,
                          .min_p = r->sp.min_p,
                          .repeat_penalty = r->sp.repeat_penalty,
                          .seed = -1};
    hr_ring_hdr h = {.type = HR_RING_PROMPT, .pos = -1, .len = (uint32_t)len};
    int rc = hr_msg_prompt_decode(&h, pl, pm, err);
    if (rc)
        return rc;
    r->text = pm->text;
    r->text_len = strlen(pm->text);
    r->max_tokens = pm->n_predict;
    r->fit = false; /* refused up front, not cut short */
    r->wait_ms = pm->wait_ms;
    r->sp.temperature = (float)pm->temp;
    r->sp.top_k = pm->top_k;
    r->sp.top_p = (float)pm->top_p;
    r->sp.min_p = (float)pm->min_p;
    r->sp.repeat_penalty = (float)pm->repeat_penalty;
    r->sp.seed = pm->seed >= 0 ? (uint64_t)pm->seed : (uint64_t)time(NULL);
    return 0;
}

void hr_prompt_submit(hr_agent *a, const uint8_t *id, size_t idl, const char *pl, size_t len) {
    char err[HR_ERR_LEN] = "";
    hr_prompt *p = calloc(1, sizeof *p);
    if (!p)
        return;
    p->a = a;
    p->ctl = pthread_self();
    p->idl = idl < HR_RING_MAX_ID ? idl : HR_RING_MAX_ID;
    memcpy(p->id, id, p->idl);
    uint8_t key[4 + HR_RING_MAX_ID];
    hr_service_req r = hr_service_req_default();
    r.client = key;
    r.client_len = hr_prompt_key(key, p->id, p->idl);
    hr_msg_prompt pm;
    int rc = hr_prompt_decode(pl, len, &pm, &r, err);
    if (rc == 0)
        rc = hr_service_submit(a->head->svc, &r, hr_prompt_token, hr_prompt_done, p, NULL, err);
    hr_msg_prompt_clear(&pm);
    if (rc) {
        hr_prompt_reply(p, rc, NULL, err);
        free(p);
    }
}

void hr_prompt_cancel(hr_agent *a, const uint8_t *id, size_t idl) {
    uint8_t key[4 + HR_RING_MAX_ID];
    size_t n = hr_prompt_key(key, id, idl < HR_RING_MAX_ID ? idl : HR_RING_MAX_ID);
    hr_service_cancel_client(a->head->svc, key, n);
}

void hr_prompt_forward(hr_agent *a, const hr_ring_hdr *h, uint8_t *buf, size_t n) {
    if (n < HR_RING_HDR_SIZE + 2 || h->len < 2)
        return;
    uint8_t *pl = buf + HR_RING_HDR_SIZE;
    size_t idl = (size_t)pl[0] | (size_t)pl[1] << 8;
    if (idl == 0 || idl > HR_RING_MAX_ID || 2 + idl > h->len)
        return;
    uint8_t id[HR_RING_MAX_ID];
    memcpy(id, pl + 2, idl);
    /* the client's frame: a new header right before the client payload */
    uint8_t *frame = buf + 2 + idl;
    hr_ring_hdr ch = {.type = h->type, .pos = -1, .len = (uint32_t)(h->len - 2 - idl)};
    hr_ring_hdr_write(frame, &ch);
    hr_ring_forward(a->ctrl, id, idl, frame, HR_RING_HDR_SIZE + ch.len);
}
