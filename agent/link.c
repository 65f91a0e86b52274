/* link.c - this agent's links, off the critical path: the echo responder
 * its peers probe (a thread of its own, bound next to the data port and
 * secured as the data port is) and the prober that measures the link to one
 * peer at a time (another thread), so that no measurement runs on the
 * control thread, on the data thread or under plan_mu. The control thread
 * asks (hr_link_request) and later collects the figures (hr_link_take). */
#include "agent/agent-impl.h"
#include "common/sync.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "link"

/* The probe: a short burst of 256 KiB messages aimed at 0.1 s, then round
 * trips of one token's hidden state spaced by four of them at that rate
 * (profiler/link.c); on a 10 Mbit/s link about 0.6 s in all, on a 2 Mbit/s
 * one about 2.5 s. */
#define HR_LINK_SAMPLES 10
#define HR_LINK_TIMEOUT_MS 1500
#define HR_LINK_BURST_BYTES (256 * 1024)
#define HR_LINK_BURST_S 0.1

struct hr_link {
    hr_agent *a;
    hr_prof_echo *echo;
    pthread_t echo_th, probe_th;
    bool echo_started, probe_started;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;
    bool stop;
    bool want; /* a request is waiting */
    hr_msg_probe req;
    bool have; /* a result is waiting */
    int res_rc;
    hr_msg_link res;
    char res_err[HR_ERR_LEN];
};

static void *hr_link_echo_main(void *arg) {
    hr_prof_echo_serve(arg);
    return NULL;
}

/* Measures one request; fills the result under mu. */
static void hr_link_measure(hr_link *l, const hr_msg_probe *rq) {
    hr_agent *a = l->a;
    hr_prof_link_params pp = hr_prof_link_params_default();
    pp.endpoint = rq->to;
    pp.msg_bytes = hr_model_hparams(a->m)->n_embd * 4; /* one token's hidden state, f32 */
    pp.n_samples = HR_LINK_SAMPLES;
    pp.timeout_ms = HR_LINK_TIMEOUT_MS;
    pp.burst_bytes = HR_LINK_BURST_BYTES;
    pp.burst_s = HR_LINK_BURST_S;
    pp.keys = a->keys;
    pp.server_pub = rq->key;
    hr_prof_link pl;
    char err[HR_ERR_LEN] = "";
    int rc;
    if (a->keys && !hr_ring_key_valid(rq->key))
        rc = hr_seterr(err, HR_EINVAL, "no public key for %s: not probed without CURVE", rq->to);
    else
        rc = hr_prof_link_measure_ex(&pl, a->zctx, &pp, err);
    hr_lock(&l->mu, HR_RANK_LINK);
    l->have = true;
    l->res_rc = rc;
    snprintf(l->res_err, sizeof l->res_err, "%s", err);
    memset(&l->res, 0, sizeof l->res);
    snprintf(l->res.to, sizeof l->res.to, "%s", rq->to);
    l->res.plan_id = rq->plan_id;
    if (rc == 0) {
        l->res.rtt_us = pl.rtt_us;
        l->res.rtt_min_us = pl.rtt_min_us;
        l->res.bw_mbs = pl.bw_mbs;
        l->res.msg_bytes = pl.msg_bytes;
        l->res.burst_bytes = pl.burst_bytes;
        l->res.samples = pl.n_samples;
    }
    hr_unlock(&l->mu, HR_RANK_LINK);
    if (rc == 0)
        HR_LOG_INFO(TAG, "%s: link to %s (%s): round trip %.3f ms, %.1f MB/s", a->name,
                    rq->name[0] ? rq->name : "?", rq->to, pl.rtt_us * 1e-3, pl.bw_mbs);
    else
        HR_LOG_WARN(TAG, "%s: cannot measure the link to %s (%s): %s", a->name,
                    rq->name[0] ? rq->name : "?", rq->to, err);
}

static void *hr_link_probe_main(void *arg) {
    hr_link *l = arg;
    hr_lock(&l->mu, HR_RANK_LINK);
    for (;;) {
        while (!l->stop && !l->want)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        hr_msg_probe rq = l->req;
        l->want = false;
        hr_unlock(&l->mu, HR_RANK_LINK);
        hr_link_measure(l, &rq);
        hr_lock(&l->mu, HR_RANK_LINK);
    }
    hr_unlock(&l->mu, HR_RANK_LINK);
    return NULL;
}

/* "tcp://host:port" -> "tcp://host:*": the responder listens where the
 * data port does, on a port of its own. */
static int hr_link_bind_ep(const char *data_ep, char *out, size_t cap) {
    const char *colon = strrchr(data_ep, ':');
    if (strncmp(data_ep, "tcp://", 6) != 0 || !colon || colon < data_ep + 6)
        return HR_EINVAL;
    int n = snprintf(out, cap, "%.*s:*", (int)(colon - data_ep), data_ep);
    return n < 0 || (size_t)n >= cap ? HR_ERANGE : 0;
}

int hr_link_start(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_link *l = calloc(1, sizeof *l);
    if (!l)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    l->a = a;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    a->link = l;
    char ep[HR_EP_LEN];
    int rc = hr_link_bind_ep(a->data_ep, ep, sizeof ep);
    if (rc)
        return hr_seterr(err, rc, "no link responder for data endpoint %s", a->data_ep);
    if ((rc = hr_prof_echo_create_secure(&l->echo, a->zctx, ep, a->keys, err)))
        return rc;
    snprintf(a->echo_ep, sizeof a->echo_ep, "%s", hr_prof_echo_endpoint(l->echo));
    if (pthread_create(&l->echo_th, NULL, hr_link_echo_main, l->echo) != 0)
        return hr_seterr(err, HR_EINTERNAL, "cannot start the link responder");
    l->echo_started = true;
    if (pthread_create(&l->probe_th, NULL, hr_link_probe_main, l) != 0)
        return hr_seterr(err, HR_EINTERNAL, "cannot start the link prober");
    l->probe_started = true;
    return 0;
}

void hr_link_stop(hr_agent *a) {
    hr_link *l = a->link;
    if (!l)
        return;
    hr_lock(&l->mu, HR_RANK_LINK);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    hr_unlock(&l->mu, HR_RANK_LINK);
    if (l->probe_started)
        pthread_join(l->probe_th, NULL);
    if (l->echo) {
        hr_prof_echo_stop(l->echo);
        if (l->echo_started)
            pthread_join(l->echo_th, NULL);
        hr_prof_echo_destroy(l->echo);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    a->link = NULL;
    a->echo_ep[0] = 0;
}

void hr_link_request(hr_agent *a, const hr_msg_probe *rq) {
    hr_link *l = a->link;
    if (!l || !l->probe_started)
        return;
    hr_lock(&l->mu, HR_RANK_LINK);
    l->req = *rq; /* the latest request wins */
    l->want = true;
    pthread_cond_signal(&l->cv);
    hr_unlock(&l->mu, HR_RANK_LINK);
}

int hr_link_take(hr_agent *a, hr_msg_link *out, char err[HR_ERR_LEN]) {
    hr_link *l = a->link;
    if (!l)
        return 0;
    int rc = 0;
    hr_lock(&l->mu, HR_RANK_LINK);
    if (l->have) {
        l->have = false;
        *out = l->res;
        rc = l->res_rc ? l->res_rc : 1;
        if (l->res_rc)
            snprintf(err, HR_ERR_LEN, "%s", l->res_err);
    }
    hr_unlock(&l->mu, HR_RANK_LINK);
    return rc;
}
