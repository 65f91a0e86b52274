/* link.c - link profile over the real transport: round-trip time of
 * hidden-state-sized messages and one-way throughput of a burst, against the
 * echo responder every agent hosts. The probe frames and sockets are ring's
 * (ring/echo.c); this file times them. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/ring.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define HR_LINK_BURST_MSG (1u << 20)
#define HR_LINK_GAP_MAX_S 0.15 /* the longest wait between two timed round trips */

/* ---- responder ---- */

struct hr_prof_echo {
    void *ctx;
    bool own_ctx;
    void *sock;
    char endpoint[256];
    atomic_int stop;
    atomic_ullong served, dropped;
};

int hr_prof_echo_create(hr_prof_echo **out, void *zctx, const char *endpoint,
                        char err[HR_ERR_LEN]) {
    return hr_prof_echo_create_secure(out, zctx, endpoint, NULL, err);
}

int hr_prof_echo_create_secure(hr_prof_echo **out, void *zctx, const char *endpoint,
                               const hr_ring_keys *keys, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!endpoint)
        return hr_seterr(err, HR_EINVAL, "no endpoint to bind");
    hr_prof_echo *e = calloc(1, sizeof *e);
    if (!e)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    e->ctx = zctx;
    if (!e->ctx) {
        e->ctx = hr_ring_context();
        e->own_ctx = true;
    }
    if (!e->ctx || !(e->sock = hr_ring_echo_bind_secure(e->ctx, endpoint, keys, e->endpoint,
                                                        sizeof e->endpoint, err))) {
        if (!e->ctx)
            hr_seterr(err, HR_ENET, "cannot create a messaging context");
        hr_prof_echo_destroy(e);
        return HR_ENET;
    }
    *out = e;
    return 0;
}

const char *hr_prof_echo_endpoint(const hr_prof_echo *e) { return e->endpoint; }
void hr_prof_echo_stop(hr_prof_echo *e) { atomic_store(&e->stop, 1); }
uint64_t hr_prof_echo_served(const hr_prof_echo *e) {
    return (uint64_t)atomic_load(&((hr_prof_echo *)e)->served);
}

int hr_prof_echo_serve(hr_prof_echo *e) {
    int rc = hr_ring_echo_serve(e->sock, &e->stop, &e->served, &e->dropped);
    if (atomic_load(&e->dropped))
        HR_LOG_DEBUG(HR_PROF_TAG, "echo: dropped %llu malformed probes",
                     (unsigned long long)atomic_load(&e->dropped));
    return rc;
}

void hr_prof_echo_destroy(hr_prof_echo *e) {
    if (!e)
        return;
    hr_ring_close(e->sock);
    if (e->own_ctx)
        hr_ring_context_term(e->ctx);
    free(e);
}

/* ---- client ---- */

/* Sends one probe and waits for its answer; returns 0 or an HR_E* code. */
static int hr_probe(void *sock, unsigned char *frame, uint32_t payload, uint16_t flags,
                    uint32_t seq, unsigned char *rbuf, size_t rcap, char *err) {
    int rc = hr_ring_probe_send(sock, frame, payload, flags, seq, err);
    for (;;) {
        uint32_t s, l;
        if (rc || (rc = hr_ring_probe_recv(sock, rbuf, rcap, &s, &l, err)))
            return rc;
        if (s != seq)
            continue; /* a late answer to an earlier probe */
        uint32_t want = (flags & HR_RING_ECHO_ACK) ? 0 : payload;
        if (l != want)
            return hr_seterr(err, HR_EFORMAT, "answer of %u bytes, expected %u", l, want);
        return 0;
    }
}

hr_prof_link_params hr_prof_link_params_default(void) {
    return (hr_prof_link_params){.msg_bytes = 16384,
                                 .n_samples = 20,
                                 .timeout_ms = 2000,
                                 .burst_bytes = HR_LINK_BURST_MSG,
                                 .burst_s = 0.2};
}

int hr_prof_link_measure(hr_prof_link *out, void *zctx, const char *endpoint, int msg_bytes,
                         int n_samples, int timeout_ms, char err[HR_ERR_LEN]) {
    hr_prof_link_params p = hr_prof_link_params_default();
    p.endpoint = endpoint;
    p.msg_bytes = msg_bytes;
    p.n_samples = n_samples;
    p.timeout_ms = timeout_ms;
    return hr_prof_link_measure_ex(out, zctx, &p, err);
}

/* Throughput: one bmsg probe sizes a burst of about burst_s; a link slower
 * than one message per burst_s is measured on that one message, less a
 * round trip (rtt_us). Fills out->bw_mbs and burst_bytes. */
static int hr_link_throughput(void *sock, unsigned char *frame, uint32_t bmsg, double burst_s,
                              double rtt_us, uint32_t *seq, unsigned char *rbuf, size_t fcap,
                              const char *endpoint, hr_prof_link *out, char err[HR_ERR_LEN]) {
    double t0 = hr_now_s();
    int rc = hr_probe(sock, frame, bmsg, HR_RING_ECHO_ACK, (*seq)++, rbuf, fcap, err);
    if (rc)
        return rc;
    double one = hr_now_s() - t0;
    out->burst_bytes = (int)bmsg;
    if (one >= burst_s) { /* a slow link: that one message took the whole time */
        double dt = one - (rtt_us > 0 ? rtt_us : 0) * 1e-6;
        out->bw_mbs = (double)(bmsg + HR_RING_ECHO_HDR) / (dt > one / 2 ? dt : one) / 1e6;
        return 0;
    }
    int burst = one > 0 ? (int)(burst_s / one) : 32;
    burst = burst < 2 ? 2 : burst > 32 ? 32 : burst;
    uint32_t first = *seq;
    t0 = hr_now_s();
    char e2[HR_ERR_LEN];
    for (int i = 0; i < burst; i++)
        if (hr_ring_probe_send(sock, frame, bmsg, HR_RING_ECHO_ACK, (*seq)++, e2))
            return hr_seterr(err, HR_ENET, "burst %s", e2);
    for (int got = 0; got < burst;) {
        uint32_t s, l;
        rc = hr_ring_probe_recv(sock, rbuf, fcap, &s, &l, err);
        if (rc == HR_ETIMEDOUT || rc == HR_ENET)
            return hr_seterr(err, HR_ETIMEDOUT, "%s: burst acks timed out", endpoint);
        if (rc == 0 && s >= first && s < *seq)
            got++;
    }
    out->bw_mbs = (double)burst * (bmsg + HR_RING_ECHO_HDR) / (hr_now_s() - t0) / 1e6;
    return 0;
}

int hr_prof_link_measure_ex(hr_prof_link *out, void *zctx, const hr_prof_link_params *p,
                            char err[HR_ERR_LEN]) {
    memset(out, 0, sizeof *out);
    out->rtt_us = out->rtt_min_us = out->bw_mbs = -1.0;
    const char *endpoint = p ? p->endpoint : NULL;
    int msg_bytes = p ? p->msg_bytes : -1;
    uint32_t bmsg = p && p->burst_bytes > 0 ? (uint32_t)p->burst_bytes : HR_LINK_BURST_MSG;
    if (!endpoint || msg_bytes < 0 || (uint32_t)msg_bytes > HR_RING_ECHO_MAX_PAYLOAD ||
        bmsg > HR_RING_ECHO_MAX_PAYLOAD || (p->keys && !p->server_pub))
        return hr_seterr(err, HR_EINVAL, "bad link probe parameters");
    int n_samples = p->n_samples < 1 ? 1 : p->n_samples > 1000 ? 1000 : p->n_samples;
    int timeout_ms = p->timeout_ms > 0 ? p->timeout_ms : 2000;
    double burst_s = p->burst_s > 0 ? p->burst_s : 0.2;
    hr_prof_strlcpy(out->endpoint, endpoint, sizeof out->endpoint);
    out->msg_bytes = msg_bytes;
    void *ctx = zctx ? zctx : hr_ring_context();
    size_t fcap =
        HR_RING_ECHO_HDR + (size_t)((uint32_t)msg_bytes > bmsg ? (uint32_t)msg_bytes : bmsg);
    unsigned char *frame = malloc(fcap), *rbuf = malloc(fcap);
    double *t = malloc((size_t)n_samples * sizeof *t);
    int rc = 0;
    void *sock = NULL;
    if (!frame || !rbuf || !t) {
        rc = hr_seterr(err, HR_ENOMEM, "cannot set up the link probe");
        goto done;
    }
    if (!(sock =
              hr_ring_probe_open_secure(ctx, endpoint, p->keys, p->server_pub, timeout_ms, err))) {
        rc = HR_ENET;
        goto done;
    }
    for (size_t i = HR_RING_ECHO_HDR; i < fcap; i++)
        frame[i] = (unsigned char)(i * 131u);
    uint32_t seq = 1;
    /* warm-up: connection set-up (and the CURVE handshake) is not a round
     * trip; the later two bound the round trip for a slow link below */
    double warm_min = -1;
    for (int i = 0; i < 3; i++) {
        double t0 = hr_now_s();
        if ((rc = hr_probe(sock, frame, (uint32_t)msg_bytes, 0, seq++, rbuf, fcap, err))) {
            hr_seterr(err, rc, "%s: no echo within %d ms", endpoint, timeout_ms);
            goto done;
        }
        double us = (hr_now_s() - t0) * 1e6;
        if (i > 0 && (warm_min < 0 || us < warm_min))
            warm_min = us;
    }
    if ((rc = hr_link_throughput(sock, frame, bmsg, burst_s, warm_min, &seq, rbuf, fcap, endpoint,
                                 out, err)))
        goto done;
    /* round trips at the ring's pace: spaced so that a link which queues
     * or buffers (a token bucket) is idle again, as between a ring's hops,
     * by four hidden states' worth of its throughput (at most 0.15 s) */
    double gap = out->bw_mbs > 0 ? 4.0 * (msg_bytes + HR_RING_ECHO_HDR) / (out->bw_mbs * 1e6) : 0;
    gap = gap > HR_LINK_GAP_MAX_S ? HR_LINK_GAP_MAX_S : gap;
    for (int i = 0; i < n_samples; i++) {
        hr_sleep_s(gap);
        double t0 = hr_now_s();
        if ((rc = hr_probe(sock, frame, (uint32_t)msg_bytes, 0, seq++, rbuf, fcap, err)))
            goto done;
        t[i] = (hr_now_s() - t0) * 1e6;
    }
    out->n_samples = n_samples;
    out->rtt_us = hr_prof_median(t, n_samples);
    out->rtt_min_us = t[0];
    for (int i = 1; i < n_samples; i++)
        if (t[i] < out->rtt_min_us)
            out->rtt_min_us = t[i];
done:
    hr_ring_close(sock);
    if (!zctx)
        hr_ring_context_term(ctx);
    free(frame);
    free(rbuf);
    free(t);
    return rc;
}
