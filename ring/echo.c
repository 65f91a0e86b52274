/* echo.c - the link probe's transport: an echo responder (ROUTER) that
 * answers well-formed probes and drops anything else, and the probing side
 * (DEALER) that sends probes and reads answers. The profiler times them.
 *
 * Probe frame (little-endian): magic u32 "HRPE", version u16, flags u16
 * (bit 0: answer with the header only), seq u32, payload length u32, then
 * the payload. The responder checks magic, version and that the length
 * matches the frame before answering. */
#include "ring/ring.h"

#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#define TAG "ring"

#define HR_ECHO_MAGIC 0x45505248u /* "HRPE" */
#define HR_ECHO_VERSION 1

static void hr_echo_put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void hr_echo_put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static uint32_t hr_echo_get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t hr_echo_get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

void hr_ring_echo_hdr_write(unsigned char *p, uint16_t flags, uint32_t seq, uint32_t len) {
    hr_echo_put32(p, HR_ECHO_MAGIC);
    hr_echo_put16(p + 4, HR_ECHO_VERSION);
    hr_echo_put16(p + 6, flags);
    hr_echo_put32(p + 8, seq);
    hr_echo_put32(p + 12, len);
}

bool hr_ring_echo_hdr_check(const unsigned char *p, size_t n, uint16_t *flags, uint32_t *seq,
                            uint32_t *len) {
    if (n < HR_RING_ECHO_HDR || hr_echo_get32(p) != HR_ECHO_MAGIC ||
        hr_echo_get16(p + 4) != HR_ECHO_VERSION)
        return false;
    *flags = hr_echo_get16(p + 6);
    *seq = hr_echo_get32(p + 8);
    *len = hr_echo_get32(p + 12);
    return *len <= HR_RING_ECHO_MAX_PAYLOAD && (size_t)*len + HR_RING_ECHO_HDR == n;
}

/* ---- responder ---- */

void *hr_ring_echo_bind(void *zctx, const char *endpoint, char *out, size_t cap,
                        char err[HR_ERR_LEN]) {
    return hr_ring_echo_bind_secure(zctx, endpoint, NULL, out, cap, err);
}

void *hr_ring_echo_bind_secure(void *zctx, const char *endpoint, const hr_ring_keys *keys,
                               char *out, size_t cap, char err[HR_ERR_LEN]) {
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    if (!s) {
        hr_seterr(err, HR_ENET, "zmq socket: %s", zmq_strerror(errno));
        return NULL;
    }
    if (keys && hr_ring_secure_server(s, keys, err)) { /* before bind: CURVE as the data port */
        zmq_close(s);
        return NULL;
    }
    int linger = 0;
    int64_t maxmsg = HR_RING_ECHO_MAX_PAYLOAD + HR_RING_ECHO_HDR;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
        HR_LOG_WARN(TAG, "echo: cannot cap message size: %s", zmq_strerror(errno));
    if (zmq_bind(s, endpoint) != 0) {
        int en = errno;
        zmq_close(s);
        hr_seterr(err, HR_ENET, "cannot bind %s: %s", endpoint, zmq_strerror(en));
        return NULL;
    }
    size_t len = cap;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, out, &len) != 0)
        snprintf(out, cap, "%s", endpoint);
    return s;
}

/* Receives the rest of a multipart message and drops it. */
static void hr_echo_drain(void *sock) {
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

/* Answers one probe waiting on sock; false when it was malformed. */
static bool hr_echo_answer(void *sock) {
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    bool ok = zmq_msg_recv(&id, sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&id) &&
              zmq_msg_recv(&body, sock, ZMQ_DONTWAIT) >= 0 && !zmq_msg_more(&body);
    uint16_t flags = 0;
    uint32_t seq = 0, len = 0;
    if (ok)
        ok = hr_ring_echo_hdr_check(zmq_msg_data(&body), zmq_msg_size(&body), &flags, &seq, &len);
    if (!ok) {
        hr_echo_drain(sock);
    } else if (flags & HR_RING_ECHO_ACK) {
        unsigned char ack[HR_RING_ECHO_HDR];
        hr_ring_echo_hdr_write(ack, flags, seq, 0);
        if (zmq_msg_send(&id, sock, ZMQ_SNDMORE) >= 0)
            zmq_send(sock, ack, sizeof ack, 0);
    } else if (zmq_msg_send(&id, sock, ZMQ_SNDMORE) >= 0) {
        zmq_msg_send(&body, sock, 0); /* the frame itself goes back (zero-copy) */
    }
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    return ok;
}

int hr_ring_echo_serve(void *sock, const atomic_int *stop, atomic_ullong *served,
                       atomic_ullong *dropped) {
    while (!atomic_load(stop)) {
        zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
        int r = zmq_poll(&it, 1, 50);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return hr_seterr(NULL, HR_ENET, "poll");
        }
        if (r == 0)
            continue;
        atomic_fetch_add(hr_echo_answer(sock) ? served : dropped, 1);
    }
    return 0;
}

/* ---- probing side ---- */

void *hr_ring_probe_open(void *zctx, const char *endpoint, int timeout_ms, char err[HR_ERR_LEN]) {
    return hr_ring_probe_open_secure(zctx, endpoint, NULL, NULL, timeout_ms, err);
}

void *hr_ring_probe_open_secure(void *zctx, const char *endpoint, const hr_ring_keys *keys,
                                const char *server_pub, int timeout_ms, char err[HR_ERR_LEN]) {
    void *s = zctx ? zmq_socket(zctx, ZMQ_DEALER) : NULL;
    if (!s) {
        hr_seterr(err, HR_ENET, "cannot set up the link probe");
        return NULL;
    }
    if (keys && hr_ring_secure_client(s, keys, server_pub, err)) {
        zmq_close(s);
        return NULL;
    }
    int linger = 0, hwm = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_connect(s, endpoint) != 0) {
        hr_seterr(err, HR_ENET, "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
        zmq_close(s);
        return NULL;
    }
    return s;
}

int hr_ring_probe_send(void *sock, unsigned char *frame, uint32_t payload, uint16_t flags,
                       uint32_t seq, char err[HR_ERR_LEN]) {
    hr_ring_echo_hdr_write(frame, flags, seq, payload);
    if (zmq_send(sock, frame, HR_RING_ECHO_HDR + (size_t)payload, 0) < 0)
        return hr_seterr(err, errno == EAGAIN ? HR_ETIMEDOUT : HR_ENET, "send: %s",
                         zmq_strerror(errno));
    return 0;
}

int hr_ring_probe_recv(void *sock, unsigned char *rbuf, size_t rcap, uint32_t *seq, uint32_t *len,
                       char err[HR_ERR_LEN]) {
    int n = zmq_recv(sock, rbuf, rcap, 0);
    if (n < 0)
        return hr_seterr(err, errno == EAGAIN ? HR_ETIMEDOUT : HR_ENET, "no answer: %s",
                         errno == EAGAIN ? "timed out" : zmq_strerror(errno));
    uint16_t f;
    if ((size_t)n > rcap || !hr_ring_echo_hdr_check(rbuf, (size_t)n, &f, seq, len))
        return hr_seterr(err, HR_EFORMAT, "malformed answer (%d bytes)", n);
    return 0;
}
