/* link.c - link profile over the real transport (ZeroMQ): round-trip time of
 * hidden-state-sized messages and one-way throughput of a burst, against the
 * echo responder every agent hosts.
 *
 * Probe frame (little-endian): magic u32 "HRPE", version u16, flags u16
 * (bit 0: answer with the header only), seq u32, payload length u32, then
 * the payload. The responder checks magic, version and that the length
 * matches the frame before answering; anything else is dropped. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define HR_ECHO_MAGIC 0x45505248u /* "HRPE" */
#define HR_ECHO_VERSION 1
#define HR_ECHO_HDR 16
#define HR_ECHO_FLAG_ACK 1u
#define HR_ECHO_MAX_PAYLOAD (16u << 20)
#define HR_LINK_BURST_MSG (1u << 20)

static void hr_put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void hr_put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static uint32_t hr_get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t hr_get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

static void hr_hdr_write(unsigned char *p, uint16_t flags, uint32_t seq, uint32_t len) {
    hr_put32(p, HR_ECHO_MAGIC);
    hr_put16(p + 4, HR_ECHO_VERSION);
    hr_put16(p + 6, flags);
    hr_put32(p + 8, seq);
    hr_put32(p + 12, len);
}

/* Checks a frame of n bytes; on success sets flags, seq, payload length. */
static bool hr_hdr_check(const unsigned char *p, size_t n, uint16_t *flags, uint32_t *seq,
                         uint32_t *len) {
    if (n < HR_ECHO_HDR || hr_get32(p) != HR_ECHO_MAGIC || hr_get16(p + 4) != HR_ECHO_VERSION)
        return false;
    *flags = hr_get16(p + 6);
    *seq = hr_get32(p + 8);
    *len = hr_get32(p + 12);
    return *len <= HR_ECHO_MAX_PAYLOAD && (size_t)*len + HR_ECHO_HDR == n;
}

/* ---- responder ---- */

struct hr_prof_echo {
    void *ctx;
    bool own_ctx;
    void *sock;
    char endpoint[256];
    atomic_int stop;
    atomic_ullong served;
};

int hr_prof_echo_create(hr_prof_echo **out, void *zctx, const char *endpoint,
                        char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!endpoint)
        return hr_seterr(err, HR_EINVAL, "no endpoint to bind");
    hr_prof_echo *e = calloc(1, sizeof *e);
    if (!e)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    e->ctx = zctx;
    if (!e->ctx) {
        e->ctx = zmq_ctx_new();
        e->own_ctx = true;
    }
    if (!e->ctx || !(e->sock = zmq_socket(e->ctx, ZMQ_ROUTER))) {
        hr_prof_echo_destroy(e);
        return hr_seterr(err, HR_ENET, "zmq socket: %s", zmq_strerror(errno));
    }
    int linger = 0, maxmsg_ok = 1;
    int64_t maxmsg = HR_ECHO_MAX_PAYLOAD + HR_ECHO_HDR;
    zmq_setsockopt(e->sock, ZMQ_LINGER, &linger, sizeof linger);
    maxmsg_ok = zmq_setsockopt(e->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) == 0;
    if (!maxmsg_ok)
        HR_LOG_WARN(HR_PROF_TAG, "echo: cannot cap message size: %s", zmq_strerror(errno));
    if (zmq_bind(e->sock, endpoint) != 0) {
        int en = errno;
        hr_prof_echo_destroy(e);
        return hr_seterr(err, HR_ENET, "cannot bind %s: %s", endpoint, zmq_strerror(en));
    }
    size_t len = sizeof e->endpoint;
    if (zmq_getsockopt(e->sock, ZMQ_LAST_ENDPOINT, e->endpoint, &len) != 0)
        hr_prof_strlcpy(e->endpoint, endpoint, sizeof e->endpoint);
    *out = e;
    return 0;
}

const char *hr_prof_echo_endpoint(const hr_prof_echo *e) { return e->endpoint; }
void hr_prof_echo_stop(hr_prof_echo *e) { atomic_store(&e->stop, 1); }
uint64_t hr_prof_echo_served(const hr_prof_echo *e) {
    return (uint64_t)atomic_load(&((hr_prof_echo *)e)->served);
}

/* Receives the rest of a multipart message and drops it. */
static void hr_drain(void *sock) {
    int more = 1;
    size_t ml = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int r = zmq_msg_recv(&m, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        if (r < 0)
            break;
    }
}

int hr_prof_echo_serve(hr_prof_echo *e) {
    while (!atomic_load(&e->stop)) {
        zmq_pollitem_t it = {.socket = e->sock, .events = ZMQ_POLLIN};
        int r = zmq_poll(&it, 1, 50);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return hr_seterr(NULL, HR_ENET, "poll");
        }
        if (r == 0)
            continue;
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        int ok = zmq_msg_recv(&id, e->sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&id) &&
                 zmq_msg_recv(&body, e->sock, ZMQ_DONTWAIT) >= 0 && !zmq_msg_more(&body);
        uint16_t flags = 0;
        uint32_t seq = 0, len = 0;
        if (ok)
            ok = hr_hdr_check(zmq_msg_data(&body), zmq_msg_size(&body), &flags, &seq, &len);
        if (!ok) {
            hr_drain(e->sock);
            HR_LOG_DEBUG(HR_PROF_TAG, "echo: dropped a malformed probe");
        } else if (flags & HR_ECHO_FLAG_ACK) {
            unsigned char ack[HR_ECHO_HDR];
            hr_hdr_write(ack, (uint16_t)flags, seq, 0);
            if (zmq_msg_send(&id, e->sock, ZMQ_SNDMORE) >= 0)
                zmq_send(e->sock, ack, sizeof ack, 0);
            atomic_fetch_add(&e->served, 1);
        } else {
            /* echo the frame itself (zero-copy: the message moves back) */
            if (zmq_msg_send(&id, e->sock, ZMQ_SNDMORE) >= 0)
                zmq_msg_send(&body, e->sock, 0);
            atomic_fetch_add(&e->served, 1);
        }
        zmq_msg_close(&id);
        zmq_msg_close(&body);
    }
    return 0;
}

void hr_prof_echo_destroy(hr_prof_echo *e) {
    if (!e)
        return;
    if (e->sock)
        zmq_close(e->sock);
    if (e->own_ctx && e->ctx)
        zmq_ctx_term(e->ctx);
    free(e);
}

/* ---- client ---- */

/* Sends one probe and waits for its answer; returns 0 or an HR_E* code. */
static int hr_probe(void *sock, unsigned char *frame, uint32_t payload, uint16_t flags,
                    uint32_t seq, unsigned char *rbuf, size_t rcap, char *err) {
    hr_hdr_write(frame, flags, seq, payload);
    if (zmq_send(sock, frame, HR_ECHO_HDR + (size_t)payload, 0) < 0)
        return hr_seterr(err, errno == EAGAIN ? HR_ETIMEDOUT : HR_ENET, "send: %s",
                         zmq_strerror(errno));
    for (;;) {
        int n = zmq_recv(sock, rbuf, rcap, 0);
        if (n < 0)
            return hr_seterr(err, errno == EAGAIN ? HR_ETIMEDOUT : HR_ENET, "no answer: %s",
                             errno == EAGAIN ? "timed out" : zmq_strerror(errno));
        uint16_t f;
        uint32_t s, l;
        size_t got = (size_t)n < rcap ? (size_t)n : rcap;
        if ((size_t)n > rcap || !hr_hdr_check(rbuf, got, &f, &s, &l))
            return hr_seterr(err, HR_EFORMAT, "malformed answer (%d bytes)", n);
        if (s != seq)
            continue; /* a late answer to an earlier probe */
        uint32_t want = (flags & HR_ECHO_FLAG_ACK) ? 0 : payload;
        if (l != want)
            return hr_seterr(err, HR_EFORMAT, "answer of %u bytes, expected %u", l, want);
        return 0;
    }
}

int hr_prof_link_measure(hr_prof_link *out, void *zctx, const char *endpoint, int msg_bytes,
                         int n_samples, int timeout_ms, char err[HR_ERR_LEN]) {
    memset(out, 0, sizeof *out);
    out->rtt_us = out->rtt_min_us = out->bw_mbs = -1.0;
    if (!endpoint || msg_bytes < 0 || (uint32_t)msg_bytes > HR_ECHO_MAX_PAYLOAD)
        return hr_seterr(err, HR_EINVAL, "bad link probe parameters");
    if (n_samples < 1)
        n_samples = 1;
    if (n_samples > 1000)
        n_samples = 1000;
    if (timeout_ms <= 0)
        timeout_ms = 2000;
    hr_prof_strlcpy(out->endpoint, endpoint, sizeof out->endpoint);
    out->msg_bytes = msg_bytes;
    void *ctx = zctx ? zctx : zmq_ctx_new();
    void *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    size_t fcap = HR_ECHO_HDR + (size_t)(msg_bytes > (int)HR_LINK_BURST_MSG ? (uint32_t)msg_bytes
                                                                            : HR_LINK_BURST_MSG);
    unsigned char *frame = malloc(fcap), *rbuf = malloc(fcap);
    double *t = malloc((size_t)n_samples * sizeof *t);
    int rc = 0;
    if (!sock || !frame || !rbuf || !t) {
        rc = hr_seterr(err, sock ? HR_ENOMEM : HR_ENET, "cannot set up the link probe");
        goto done;
    }
    int linger = 0, hwm = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_connect(sock, endpoint) != 0) {
        rc = hr_seterr(err, HR_ENET, "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
        goto done;
    }
    for (size_t i = HR_ECHO_HDR; i < fcap; i++)
        frame[i] = (unsigned char)(i * 131u);
    uint32_t seq = 1;
    /* warm-up: connection set-up is not a round trip */
    for (int i = 0; i < 3; i++)
        if ((rc = hr_probe(sock, frame, (uint32_t)msg_bytes, 0, seq++, rbuf, fcap, err))) {
            hr_seterr(err, rc, "%s: no echo within %d ms", endpoint, timeout_ms);
            goto done;
        }
    for (int i = 0; i < n_samples; i++) {
        double t0 = hr_now_s();
        if ((rc = hr_probe(sock, frame, (uint32_t)msg_bytes, 0, seq++, rbuf, fcap, err)))
            goto done;
        t[i] = (hr_now_s() - t0) * 1e6;
    }
    out->n_samples = n_samples;
    out->rtt_us = hr_prof_median(t, n_samples);
    out->rtt_min_us = t[0];
    /* throughput: one 1 MiB probe sizes a burst of about 0.2 s */
    double t0 = hr_now_s();
    if ((rc = hr_probe(sock, frame, HR_LINK_BURST_MSG, HR_ECHO_FLAG_ACK, seq++, rbuf, fcap, err)))
        goto done;
    double one = hr_now_s() - t0;
    int burst = one > 0 ? (int)(0.2 / one) : 32;
    burst = burst < 2 ? 2 : burst > 32 ? 32 : burst;
    uint32_t first = seq;
    t0 = hr_now_s();
    for (int i = 0; i < burst; i++) {
        hr_hdr_write(frame, HR_ECHO_FLAG_ACK, seq++, HR_LINK_BURST_MSG);
        if (zmq_send(sock, frame, HR_ECHO_HDR + HR_LINK_BURST_MSG, 0) < 0) {
            rc = hr_seterr(err, HR_ENET, "burst send: %s", zmq_strerror(errno));
            goto done;
        }
    }
    for (int got = 0; got < burst;) {
        int n = zmq_recv(sock, rbuf, fcap, 0);
        uint16_t f;
        uint32_t s, l;
        if (n < 0) {
            rc = hr_seterr(err, HR_ETIMEDOUT, "%s: burst acks timed out", endpoint);
            goto done;
        }
        if ((size_t)n <= fcap && hr_hdr_check(rbuf, (size_t)n, &f, &s, &l) && s >= first && s < seq)
            got++;
    }
    double dt = hr_now_s() - t0;
    out->bw_mbs = (double)burst * (HR_LINK_BURST_MSG + HR_ECHO_HDR) / dt / 1e6;
done:
    if (sock)
        zmq_close(sock);
    if (!zctx && ctx)
        zmq_ctx_term(ctx);
    free(frame);
    free(rbuf);
    free(t);
    return rc;
}
