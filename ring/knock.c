/* knock.c - the knock of a device its head cannot see yet (knock.h): the
 * wire format, the device's sender and the head's listener. What the head
 * makes of a knock is in keys.c (hr_ring_keys_knock). */
#include "ring/knock.h"
#include "ring/le.h"

#include "common/log.h"
#include "common/sync.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG "trust"
#define HR_KNOCK_LOG_EVERY_S 60.0

static const uint8_t hr_knock_magic[4] = {'H', 'R', 'K', 'N'};

static bool hr_knock_name_char(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

int hr_knock_encode(const hr_knock *k, uint8_t *out, size_t cap) {
    size_t nl = strnlen(k->name, HR_KNOCK_NAME_MAX);
    if (!hr_ring_key_valid(k->key) || nl < 1 || cap < HR_KNOCK_HDR + nl)
        return HR_EINVAL;
    memcpy(out, hr_knock_magic, 4);
    hr_put16(out + 4, HR_KNOCK_VERSION);
    hr_put16(out + 6, (uint16_t)k->proto);
    memcpy(out + 8, k->head_fp, HR_BEACON_FP_LEN);
    memcpy(out + 24, k->key, 40);
    out[64] = (uint8_t)nl;
    memcpy(out + HR_KNOCK_HDR, k->name, nl);
    return (int)(HR_KNOCK_HDR + nl);
}

int hr_knock_parse(const void *buf, size_t n, hr_knock *k, char err[HR_ERR_LEN]) {
    const uint8_t *p = buf;
    if (n < HR_KNOCK_HDR)
        return hr_seterr(err, HR_EFORMAT, "knock of %zu bytes (at least %d)", n, HR_KNOCK_HDR);
    if (memcmp(p, hr_knock_magic, 4) != 0)
        return hr_seterr(err, HR_EFORMAT, "not a knock (bad magic)");
    if (hr_get16(p + 4) != HR_KNOCK_VERSION)
        return hr_seterr(err, HR_EFORMAT, "knock version %u (want %d)", hr_get16(p + 4),
                         HR_KNOCK_VERSION);
    size_t nl = p[64];
    if (nl < 1 || nl > HR_KNOCK_NAME_MAX || n != HR_KNOCK_HDR + nl)
        return hr_seterr(err, HR_EFORMAT, "knock of %zu bytes does not hold its name (%zu)", n, nl);
    memset(k, 0, sizeof *k);
    for (int i = 0; i < 40; i++) /* Z85 is printable ASCII: no control byte reaches a log */
        if (p[24 + i] < '!' || p[24 + i] > '}')
            return hr_seterr(err, HR_EFORMAT, "knock without a valid Z85 key");
    memcpy(k->key, p + 24, 40);
    if (!hr_ring_key_valid(k->key))
        return hr_seterr(err, HR_EFORMAT, "knock without a valid Z85 key");
    for (size_t i = 0; i < nl; i++) {
        uint8_t c = p[HR_KNOCK_HDR + i];
        k->name[i] = hr_knock_name_char(c) && !(i == 0 && c == '-') ? (char)c : '_';
    }
    k->proto = hr_get16(p + 6);
    memcpy(k->head_fp, p + 8, HR_BEACON_FP_LEN);
    return 0;
}

/* "tcp://HOST:PORT" -> host (cap bytes) and port; false when it is not. */
static bool hr_knock_split(const char *ep, char *host, size_t cap, int *port) {
    const char *h = strncmp(ep, "tcp://", 6) == 0 ? ep + 6 : ep;
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h || (size_t)(colon - h) >= cap)
        return false;
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (!end || *end || p < 1 || p > 65535)
        return false;
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = 0;
    *port = (int)p;
    return true;
}

/* ---- sender ---- */

struct hr_knock_sender {
    int fd;
    struct sockaddr_in to;
};

int hr_knock_sender_open(hr_knock_sender **out, const char *head_ep, char err[HR_ERR_LEN]) {
    *out = NULL;
    char host[HR_BEACON_EP_MAX + 1];
    int port;
    if (!head_ep || !hr_knock_split(head_ep, host, sizeof host, &port))
        return hr_seterr(err, HR_EINVAL, "knock: '%s' is not tcp://HOST:PORT",
                         head_ep ? head_ep : "");
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    int g = getaddrinfo(host, NULL, &hints, &ai);
    if (g != 0 || !ai)
        return hr_seterr(err, HR_ENET, "knock: cannot resolve '%s' to IPv4: %s", host,
                         gai_strerror(g));
    hr_knock_sender *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    s->to = *(struct sockaddr_in *)ai->ai_addr;
    s->to.sin_port = htons((uint16_t)port);
    freeaddrinfo(ai);
    s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        int e = errno;
        free(s);
        return hr_seterr(err, HR_ENET, "knock socket: %s", strerror(e));
    }
    *out = s;
    return 0;
}

int hr_knock_send(hr_knock_sender *s, const hr_knock *k) {
    uint8_t buf[HR_KNOCK_MAX];
    int n = hr_knock_encode(k, buf, sizeof buf);
    if (n < 0)
        return n;
    ssize_t r =
        sendto(s->fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&s->to, sizeof s->to);
    return r == n ? 0 : HR_ENET;
}

void hr_knock_sender_close(hr_knock_sender *s) {
    if (!s)
        return;
    close(s->fd);
    free(s);
}

/* ---- listener ---- */

struct hr_knock_listener {
    int fd;
    uint64_t malformed, logged; /* datagrams not parsed; of them, reported */
    double log_s;               /* s, monotonic: the last report */
    char why[HR_ERR_LEN];       /* what was wrong with the latest */
};

int hr_knock_listen(hr_knock_listener **out, const char *ctrl_ep, char err[HR_ERR_LEN]) {
    *out = NULL;
    char host[HR_BEACON_EP_MAX + 1];
    int port;
    if (!ctrl_ep || !hr_knock_split(ctrl_ep, host, sizeof host, &port))
        return hr_seterr(err, HR_EINVAL, "knock: '%s' is not tcp://HOST:PORT",
                         ctrl_ep ? ctrl_ep : "");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0)
        a.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return hr_seterr(err, HR_EINVAL, "knock: '%s' is not an IPv4 address", host);
    hr_knock_listener *l = calloc(1, sizeof *l);
    if (!l)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    l->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        if (l->fd >= 0)
            close(l->fd);
        free(l);
        return hr_seterr(err, HR_ENET, "cannot listen for knocks on UDP %s:%d: %s", host, port,
                         strerror(e));
    }
    l->log_s = -1e9;
    *out = l;
    return 0;
}

int hr_knock_fd(const hr_knock_listener *l) { return l->fd; }

int hr_knock_recv(hr_knock_listener *l, hr_knock *k, char from[64]) {
    uint8_t buf[HR_KNOCK_MAX + 1]; /* one more: a longer datagram is seen as longer */
    int got = 0;
    for (;;) {
        struct sockaddr_in src;
        socklen_t sl = sizeof src;
        ssize_t n = recvfrom(l->fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&src, &sl);
        if (n < 0)
            break;
        char why[HR_ERR_LEN];
        if (hr_knock_parse(buf, (size_t)n, k, why) == 0) {
            snprintf(from, 64, "?");
            inet_ntop(AF_INET, &src.sin_addr, from, 64);
            got = 1;
            break;
        }
        l->malformed++;
        memcpy(l->why, why, sizeof why);
    }
    double now = hr_now_s();
    if (l->malformed > l->logged && now - l->log_s >= HR_KNOCK_LOG_EVERY_S) {
        HR_LOG_WARN(TAG, "ignored %llu malformed knocks since the last report (latest: %s)",
                    (unsigned long long)(l->malformed - l->logged), l->why);
        l->logged = l->malformed;
        l->log_s = now;
    }
    return got;
}

void hr_knock_listener_close(hr_knock_listener *l) {
    if (!l)
        return;
    close(l->fd);
    free(l);
}
