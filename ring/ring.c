/* ring.c - wire format (32-byte little-endian header + payload), hidden
 * state packing (F16/F32) and ZeroMQ socket helpers with timeouts. */
#include "ring/ring.h"
#include "ring/le.h"
#include "ring/msg.h"

#include "kernels/types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

const char *hr_ring_type_name(int type) {
    const hr_msg_info *mi = hr_msg_info_of(type);
    return mi ? mi->name : "?";
}

size_t hr_ring_dtype_size(int dtype) {
    return dtype == HR_RING_F16 ? 2 : dtype == HR_RING_F32 ? 4 : 0;
}

void hr_ring_hdr_write(void *out, const hr_ring_hdr *h) {
    uint8_t *p = out;
    hr_put32(p, HR_RING_MAGIC);
    hr_put16(p + 4, HR_RING_VERSION);
    p[6] = h->type;
    p[7] = h->dtype;
    hr_put64(p + 8, h->req_id);
    hr_put32(p + 16, (uint32_t)h->pos);
    hr_put16(p + 20, h->n_tok);
    hr_put16(p + 22, h->round);
    hr_put32(p + 24, h->plan_id);
    hr_put32(p + 28, h->len);
}

int hr_ring_hdr_read(const void *frame, size_t n, hr_ring_hdr *h, char err[HR_ERR_LEN]) {
    const uint8_t *p = frame;
    memset(h, 0, sizeof *h);
    if (n < HR_RING_HDR_SIZE)
        return hr_seterr(err, HR_EFORMAT, "frame of %zu bytes is shorter than the %d-byte header",
                         n, HR_RING_HDR_SIZE);
    uint32_t magic = hr_get32(p);
    if (magic != HR_RING_MAGIC)
        return hr_seterr(err, HR_EFORMAT, "bad magic 0x%08x (expected 0x%08x)", magic,
                         HR_RING_MAGIC);
    uint16_t ver = hr_get16(p + 4);
    if (ver != HR_RING_VERSION)
        return hr_seterr(err, HR_EUNSUPPORTED, "protocol version %u (this build speaks %d)", ver,
                         HR_RING_VERSION);
    h->type = p[6];
    h->dtype = p[7];
    h->req_id = hr_get64(p + 8);
    h->pos = (int32_t)hr_get32(p + 16);
    h->n_tok = hr_get16(p + 20);
    h->round = hr_get16(p + 22);
    h->plan_id = hr_get32(p + 24);
    h->len = hr_get32(p + 28);
    if (!hr_msg_info_of(h->type))
        return hr_seterr(err, HR_EFORMAT, "unknown message type %u", h->type);
    if ((uint64_t)h->len != (uint64_t)n - HR_RING_HDR_SIZE)
        return hr_seterr(err, HR_EFORMAT, "%s frame says %u payload bytes but carries %zu",
                         hr_ring_type_name(h->type), h->len, n - HR_RING_HDR_SIZE);
    uint32_t max = hr_msg_info_of(h->type)->max_len; /* the message table's row */
    if (h->len > max)
        return hr_seterr(err, HR_EFORMAT, "%s payload of %u bytes exceeds the %u-byte limit",
                         hr_ring_type_name(h->type), h->len, max);
    if (h->type == HR_RING_BATCH) {
        size_t es = hr_ring_dtype_size(h->dtype);
        if (es == 0)
            return hr_seterr(err, HR_EFORMAT, "unknown hidden-state dtype %u", h->dtype);
        size_t row = h->n_tok ? h->len / h->n_tok : 0;
        if (h->n_tok == 0 || h->pos < 0 || h->len % h->n_tok != 0 || row <= HR_RING_ROW_SIZE ||
            (row - HR_RING_ROW_SIZE) % es != 0)
            return hr_seterr(err, HR_EFORMAT,
                             "BATCH frame with n_tok %u, tag %d and %u bytes is inconsistent",
                             h->n_tok, h->pos, h->len);
    }
    return 0;
}

void hr_ring_rows_write(void *p, const int32_t *slot, const int32_t *pos, int n) {
    uint8_t *d = p;
    for (int i = 0; i < n; i++) {
        hr_put32(d + (size_t)i * HR_RING_ROW_SIZE, (uint32_t)slot[i]);
        hr_put32(d + (size_t)i * HR_RING_ROW_SIZE + 4, (uint32_t)pos[i]);
    }
}

void hr_ring_rows_read(const void *p, int32_t *slot, int32_t *pos, int n) {
    const uint8_t *s = p;
    for (int i = 0; i < n; i++) {
        slot[i] = (int32_t)hr_get32(s + (size_t)i * HR_RING_ROW_SIZE);
        pos[i] = (int32_t)hr_get32(s + (size_t)i * HR_RING_ROW_SIZE + 4);
    }
}

long hr_ring_pack(void *dst, size_t cap, const float *src, size_t n, int dtype) {
    size_t es = hr_ring_dtype_size(dtype);
    if (es == 0)
        return HR_EINVAL;
    if (n > cap / es)
        return HR_ERANGE;
    uint8_t *d = dst;
    if (dtype == HR_RING_F32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &src[i], 4);
            hr_put32(d + 4 * i, u);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            hr_put16(d + 2 * i, hr_fp32_to_fp16(src[i]));
    }
    return (long)(n * es);
}

int hr_ring_unpack(float *dst, size_t n, const void *src, size_t len, int dtype) {
    size_t es = hr_ring_dtype_size(dtype);
    if (es == 0 || len != n * es)
        return HR_EFORMAT;
    const uint8_t *s = src;
    if (dtype == HR_RING_F32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u = hr_get32(s + 4 * i);
            memcpy(&dst[i], &u, 4);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = hr_fp16_to_fp32(hr_get16(s + 2 * i));
    }
    return 0;
}

_Static_assert(HR_RING_DEALER == ZMQ_DEALER && HR_RING_ROUTER == ZMQ_ROUTER &&
                   HR_RING_PULL == ZMQ_PULL && HR_RING_PUSH == ZMQ_PUSH,
               "socket types are zmq's");

void *hr_ring_context(void) { return zmq_ctx_new(); }

void hr_ring_context_term(void *zctx) {
    if (zctx)
        zmq_ctx_term(zctx);
}

void hr_ring_close(void *sock) {
    if (sock)
        zmq_close(sock);
}

int hr_ring_connect(void *sock, const char *endpoint, char err[HR_ERR_LEN]) {
    if (zmq_connect(sock, endpoint) != 0)
        return hr_seterr(err, HR_ENET, "cannot connect to %s: %s", endpoint,
                         zmq_strerror(zmq_errno()));
    return 0;
}

void hr_ring_disconnect(void *sock, const char *endpoint) { zmq_disconnect(sock, endpoint); }

int hr_ring_forward(void *sock, const void *id, size_t id_len, const void *frame, size_t n) {
    if ((id && zmq_send(sock, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) ||
        zmq_send(sock, frame, n, ZMQ_DONTWAIT) < 0)
        return zmq_errno() == EAGAIN ? HR_ETIMEDOUT : HR_ENET;
    return 0;
}

hr_ring_sockopt hr_ring_sockopt_default(void) {
    return (hr_ring_sockopt){
        .rcv_timeout_ms = 1000, .snd_timeout_ms = 1000, .hwm = 64, .max_msg = HR_RING_MAX_FRAME};
}

void *hr_ring_socket(void *zctx, int type, const hr_ring_sockopt *o, char err[HR_ERR_LEN]) {
    hr_ring_sockopt d = hr_ring_sockopt_default();
    if (!o)
        o = &d;
    void *s = zmq_socket(zctx, type);
    if (!s) {
        hr_seterr(err, HR_ENET, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int zero = 0;
    int rc = zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    rc |= zmq_setsockopt(s, ZMQ_RCVTIMEO, &o->rcv_timeout_ms, sizeof o->rcv_timeout_ms);
    rc |= zmq_setsockopt(s, ZMQ_SNDTIMEO, &o->snd_timeout_ms, sizeof o->snd_timeout_ms);
    rc |= zmq_setsockopt(s, ZMQ_SNDHWM, &o->hwm, sizeof o->hwm);
    rc |= zmq_setsockopt(s, ZMQ_RCVHWM, &o->hwm, sizeof o->hwm);
    rc |= zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &o->max_msg, sizeof o->max_msg);
    int one = 1;
    if (o->mandatory && type == ZMQ_ROUTER)
        rc |= zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (rc) {
        hr_seterr(err, HR_ENET, "zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

int hr_ring_bind(void *sock, const char *endpoint, char *out, size_t cap, char err[HR_ERR_LEN]) {
    char ep[280];
    snprintf(ep, sizeof ep, "%s", endpoint);
    size_t n = strlen(ep);
    if (n >= 2 && strcmp(ep + n - 2, ":0") == 0)
        snprintf(ep + n - 1, sizeof ep - (n - 1), "*");
    if (zmq_bind(sock, ep) != 0)
        return hr_seterr(err, HR_ENET, "cannot listen on %s: %s", endpoint,
                         zmq_strerror(zmq_errno()));
    if (out && cap) {
        size_t len = cap;
        if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, out, &len) != 0)
            snprintf(out, cap, "%s", ep);
    }
    return 0;
}

int hr_ring_endpoint(const char *addr, int port_delta, char *out, size_t cap) {
    if (!addr || !*addr)
        return HR_EINVAL;
    const char *a = strncmp(addr, "tcp://", 6) == 0 ? addr + 6 : addr;
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a)
        return HR_EINVAL;
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (!end || *end || port < 0 || port > 65535 || (port == 0 && port_delta))
        return HR_EINVAL;
    port += port_delta;
    if (port > 65535)
        return HR_ERANGE;
    int n = snprintf(out, cap, "tcp://%.*s:%ld", (int)(colon - a), a, port);
    return n < 0 || (size_t)n >= cap ? HR_ERANGE : 0;
}

int hr_ring_send(void *sock, const void *id, size_t id_len, void *frame, const hr_ring_hdr *h,
                 char err[HR_ERR_LEN]) {
    hr_ring_hdr_write(frame, h);
    if (id && zmq_send(sock, id, id_len, ZMQ_SNDMORE) < 0)
        goto fail;
    if (zmq_send(sock, frame, HR_RING_HDR_SIZE + (size_t)h->len, 0) < 0)
        goto fail;
    return 0;
fail:;
    int e = zmq_errno();
    if (e == EAGAIN)
        return hr_seterr(err, HR_ETIMEDOUT, "send of %s timed out (peer gone or queue full)",
                         hr_ring_type_name(h->type));
    return hr_seterr(err, HR_ENET, "send of %s: %s", hr_ring_type_name(h->type), zmq_strerror(e));
}

int hr_ring_send_msg(void *sock, const void *id, size_t id_len, const hr_ring_hdr *h,
                     const void *payload, char err[HR_ERR_LEN]) {
    uint8_t stack[HR_RING_HDR_SIZE + 4096];
    uint8_t *buf = stack;
    if (h->len > 4096) {
        buf = malloc(HR_RING_HDR_SIZE + (size_t)h->len);
        if (!buf)
            return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    if (h->len)
        memcpy(buf + HR_RING_HDR_SIZE, payload, h->len);
    int rc = hr_ring_send(sock, id, id_len, buf, h, err);
    if (buf != stack)
        free(buf);
    return rc;
}

static void hr_ring_drain(void *sock) {
    int more = 0;
    size_t ml = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        zmq_msg_close(&m);
        ml = sizeof more;
    }
}

long hr_ring_recv(void *sock, void *id, size_t *id_len, void *buf, size_t cap, int timeout_ms,
                  hr_ring_hdr *h, char err[HR_ERR_LEN]) {
    return hr_ring_recv_user(sock, id, id_len, buf, cap, timeout_ms, h, NULL, err);
}

long hr_ring_recv_user(void *sock, void *id, size_t *id_len, void *buf, size_t cap, int timeout_ms,
                       hr_ring_hdr *h, char *user, char err[HR_ERR_LEN]) {
    if (user)
        user[0] = 0;
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    int pr = zmq_poll(&it, 1, timeout_ms);
    if (pr < 0) {
        if (zmq_errno() == EINTR)
            return 0;
        return hr_seterr(err, HR_ENET, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    }
    if (pr == 0 || !(it.revents & ZMQ_POLLIN))
        return 0;
    if (id) {
        int n = zmq_recv(sock, id, HR_RING_MAX_ID, ZMQ_DONTWAIT);
        if (n < 0)
            return zmq_errno() == EAGAIN
                       ? 0
                       : hr_seterr(err, HR_ENET, "recv: %s", zmq_strerror(zmq_errno()));
        *id_len = n > HR_RING_MAX_ID ? HR_RING_MAX_ID : (size_t)n;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int n = zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT);
    if (n < 0) {
        int e = zmq_errno();
        zmq_msg_close(&msg);
        return e == EAGAIN ? 0 : hr_seterr(err, HR_ENET, "recv: %s", zmq_strerror(e));
    }
    memcpy(buf, zmq_msg_data(&msg), (size_t)n < cap ? (size_t)n : cap);
    if (user) {
        const char *u = zmq_msg_gets(&msg, "User-Id");
        snprintf(user, HR_RING_KEY_LEN, "%s", u ? u : "");
    }
    zmq_msg_close(&msg);
    int more = 0;
    size_t ml = sizeof more;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
    if (more) {
        hr_ring_drain(sock);
        return hr_seterr(err, HR_EFORMAT, "multi-part message refused (frames are single-part)");
    }
    if ((size_t)n > cap)
        return hr_seterr(err, HR_ERANGE, "frame of %d bytes exceeds the %zu-byte buffer", n, cap);
    int rc = hr_ring_hdr_read(buf, (size_t)n, h, err);
    return rc ? rc : n;
}

uint64_t hr_ring_hash(const void *data, size_t n, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t x = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        x ^= p[i];
        x *= 0x100000001b3ull;
    }
    return x;
}
