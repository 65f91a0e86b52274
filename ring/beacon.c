/* beacon.c - the head's LAN beacon: its wire format, the sender (one
 * datagram per interface the control port is reachable on) and the
 * listener's table of heads heard, with rate-limited logging of what it
 * refuses. */
#include "ring/beacon.h"
#include "ring/le.h"

#include "common/log.h"
#include "common/sync.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG "discover"
#define HR_BEACON_LOG_EVERY_S 5.0

static const uint8_t hr_beacon_magic[4] = {'H', 'R', 'B', 'C'};

void hr_beacon_fingerprint(const char *pubkey, uint8_t fp[HR_BEACON_FP_LEN]) {
    memset(fp, 0, HR_BEACON_FP_LEN);
    if (!pubkey || !*pubkey)
        return;
    crypto_generichash(fp, HR_BEACON_FP_LEN, (const unsigned char *)pubkey, strlen(pubkey), NULL,
                       0);
}

void hr_beacon_fp_hex(const uint8_t fp[HR_BEACON_FP_LEN], char out[2 * HR_BEACON_FP_LEN + 1]) {
    for (int i = 0; i < HR_BEACON_FP_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

bool hr_beacon_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > HR_BEACON_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* "tcp://HOST:PORT": HOST of [A-Za-z0-9.:-*[]], PORT 1..65535. */
static bool hr_beacon_ep_valid(const char *ep, size_t n) {
    if (n < 9 || n > HR_BEACON_EP_MAX || memcmp(ep, "tcp://", 6) != 0)
        return false;
    size_t colon = 0;
    for (size_t i = 6; i < n; i++) {
        char c = ep[i];
        if (c == ':')
            colon = i;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '*' || c == '[' || c == ']'))
            return false;
    }
    if (colon <= 6 || colon + 1 >= n || n - colon - 1 > 5)
        return false;
    long port = 0;
    for (size_t i = colon + 1; i < n; i++) {
        if (ep[i] < '0' || ep[i] > '9')
            return false;
        port = port * 10 + (ep[i] - '0');
    }
    return port >= 1 && port <= 65535;
}

int hr_beacon_encode(const hr_beacon *b, uint8_t *out, size_t cap) {
    size_t cl = strlen(b->cluster), el = strlen(b->ctrl);
    if (!hr_beacon_name_valid(b->cluster) || !hr_beacon_ep_valid(b->ctrl, el) ||
        cap < HR_BEACON_HDR + cl + el)
        return HR_EINVAL;
    memcpy(out, hr_beacon_magic, 4);
    hr_put16(out + 4, HR_BEACON_VERSION);
    hr_put16(out + 6, (uint16_t)b->proto);
    hr_put32(out + 8, b->seq);
    hr_put64(out + 12, b->model_size);
    hr_put64(out + 20, b->model_hash);
    memcpy(out + 28, b->fp, HR_BEACON_FP_LEN);
    out[44] = (uint8_t)cl;
    out[45] = (uint8_t)el;
    memcpy(out + HR_BEACON_HDR, b->cluster, cl);
    memcpy(out + HR_BEACON_HDR + cl, b->ctrl, el);
    return (int)(HR_BEACON_HDR + cl + el);
}

int hr_beacon_parse(const void *buf, size_t n, hr_beacon *b, char err[HR_ERR_LEN]) {
    const uint8_t *p = buf;
    if (n < HR_BEACON_HDR)
        return hr_seterr(err, HR_EFORMAT, "beacon of %zu bytes (at least %d)", n, HR_BEACON_HDR);
    if (memcmp(p, hr_beacon_magic, 4) != 0)
        return hr_seterr(err, HR_EFORMAT, "not a beacon (bad magic)");
    if (hr_get16(p + 4) != HR_BEACON_VERSION)
        return hr_seterr(err, HR_EFORMAT, "beacon version %u (want %d)", hr_get16(p + 4),
                         HR_BEACON_VERSION);
    size_t cl = p[44], el = p[45];
    if (cl < 1 || cl > HR_BEACON_NAME_MAX || el < 1 || el > HR_BEACON_EP_MAX ||
        n != HR_BEACON_HDR + cl + el)
        return hr_seterr(err, HR_EFORMAT,
                         "beacon of %zu bytes does not hold its name (%zu) and endpoint (%zu)", n,
                         cl, el);
    memset(b, 0, sizeof *b);
    memcpy(b->cluster, p + HR_BEACON_HDR, cl);
    memcpy(b->ctrl, p + HR_BEACON_HDR + cl, el);
    if (strlen(b->cluster) != cl || strlen(b->ctrl) != el)
        return hr_seterr(err, HR_EFORMAT, "beacon with a NUL in its name or endpoint");
    if (!hr_beacon_name_valid(b->cluster))
        return hr_seterr(err, HR_EFORMAT, "beacon with a bad cluster name");
    if (!hr_beacon_ep_valid(b->ctrl, el))
        return hr_seterr(err, HR_EFORMAT, "beacon with a bad endpoint");
    b->proto = hr_get16(p + 6);
    b->seq = hr_get32(p + 8);
    b->model_size = hr_get64(p + 12);
    b->model_hash = hr_get64(p + 20);
    memcpy(b->fp, p + 28, HR_BEACON_FP_LEN);
    return 0;
}

/* ---- sender ---- */

#define HR_BEACON_MAX_IF 16

struct hr_beacon_sender {
    int fd, port;
    struct in_addr only; /* the listen address; INADDR_ANY = every interface */
    double last_s;
    uint32_t seq;
};

int hr_beacon_sender_open(hr_beacon_sender **out, const char *listen_host, int port,
                          char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_beacon_sender *s = calloc(1, sizeof *s);
    if (!s)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    s->port = port > 0 ? port : HR_BEACON_PORT;
    s->only.s_addr = htonl(INADDR_ANY);
    if (listen_host && strcmp(listen_host, "*") != 0 && strcmp(listen_host, "0.0.0.0") != 0 &&
        inet_pton(AF_INET, listen_host, &s->only) != 1) {
        free(s);
        return hr_seterr(err, HR_EINVAL, "beacon: '%s' is not an IPv4 address", listen_host);
    }
    s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof one) != 0) {
        int e = errno;
        if (s->fd >= 0)
            close(s->fd);
        free(s);
        return hr_seterr(err, HR_ENET, "beacon socket: %s", strerror(e));
    }
    s->last_s = -1e9;
    *out = s;
    return 0;
}

int hr_beacon_send(hr_beacon_sender *s, const hr_beacon *b) {
    double now = hr_now_s();
    if (now - s->last_s < HR_BEACON_INTERVAL_MS / 2000.0)
        return 0; /* rate limit: never faster than twice the interval */
    s->last_s = now;
    hr_beacon c = *b;
    c.seq = ++s->seq;
    uint8_t buf[HR_BEACON_MAX];
    int n = hr_beacon_encode(&c, buf, sizeof buf);
    if (n < 0)
        return n;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return HR_ENET;
    int sent = 0;
    struct in_addr done[HR_BEACON_MAX_IF];
    int n_done = 0;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        bool lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
        if (s->only.s_addr != htonl(INADDR_ANY)) {
            /* only the interface holding the listen address (any of 127/8 for loopback) */
            bool mine = a.s_addr == s->only.s_addr || (lo && (ntohl(s->only.s_addr) >> 24) == 127 &&
                                                       (ntohl(a.s_addr) >> 24) == 127);
            if (!mine)
                continue;
        }
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
        if (lo)
            to.sin_addr.s_addr = htonl(0x7fffffffu); /* 127.255.255.255 */
        else if ((i->ifa_flags & IFF_BROADCAST) && i->ifa_broadaddr &&
                 ((struct sockaddr_in *)i->ifa_broadaddr)->sin_addr.s_addr != 0 &&
                 ((struct sockaddr_in *)i->ifa_broadaddr)->sin_addr.s_addr != a.s_addr)
            to.sin_addr = ((struct sockaddr_in *)i->ifa_broadaddr)->sin_addr;
        else if ((i->ifa_flags & IFF_BROADCAST) && i->ifa_netmask) /* no brd set (glibc then
                                                                       gives the address) */
            to.sin_addr.s_addr =
                a.s_addr | ~((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
        else
            continue;
        bool dup = false;
        for (int k = 0; k < n_done; k++)
            dup |= done[k].s_addr == to.sin_addr.s_addr;
        if (dup || n_done == HR_BEACON_MAX_IF)
            continue;
        done[n_done++] = to.sin_addr;
        if (sendto(s->fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof to) == n)
            sent++;
    }
    freeifaddrs(ifs);
    return sent;
}

void hr_beacon_sender_close(hr_beacon_sender *s) {
    if (!s)
        return;
    close(s->fd);
    free(s);
}

/* ---- listener ---- */

struct hr_beacon_listener {
    int fd;
    hr_beacon_head heads[HR_BEACON_MAX_HEADS];
    int n;
    hr_beacon_stats st;
    double log_s;            /* last refusal logged */
    uint64_t logged_refused; /* malformed + table_full at that time */
};

int hr_beacon_listen(hr_beacon_listener **out, int port, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_beacon_listener *l = calloc(1, sizeof *l);
    if (!l)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    l->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)(port > 0 ? port : HR_BEACON_PORT)),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(l->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        if (l->fd >= 0)
            close(l->fd);
        free(l);
        return hr_seterr(err, HR_ENET, "cannot listen for beacons on UDP port %d: %s",
                         port > 0 ? port : HR_BEACON_PORT, strerror(e));
    }
    l->log_s = -1e9;
    *out = l;
    return 0;
}

/* Drops the heads not heard for HR_BEACON_MAX_AGE_S. */
static void hr_beacon_expire(hr_beacon_listener *l, double now) {
    for (int i = 0; i < l->n;) {
        if (now - l->heads[i].last_s > HR_BEACON_MAX_AGE_S)
            memmove(&l->heads[i], &l->heads[i + 1], (size_t)(l->n - i - 1) * sizeof l->heads[0]);
        else {
            i++;
            continue;
        }
        l->n--;
    }
}

/* The endpoint to join: a wildcard host replaced by the source address. */
static void hr_beacon_join_ep(const hr_beacon *b, const char *from, char *ep, size_t cap) {
    const char *host = b->ctrl + 6, *colon = strrchr(b->ctrl, ':');
    size_t hl = (size_t)(colon - host);
    if ((hl == 1 && host[0] == '*') || (hl == 7 && memcmp(host, "0.0.0.0", 7) == 0))
        snprintf(ep, cap, "tcp://%s%s", from, colon);
    else
        snprintf(ep, cap, "%s", b->ctrl);
}

static void hr_beacon_take(hr_beacon_listener *l, const uint8_t *buf, size_t n,
                           const struct sockaddr_in *src, double now, char *why, size_t why_cap) {
    char err[HR_ERR_LEN];
    hr_beacon b;
    l->st.received++;
    if (hr_beacon_parse(buf, n, &b, err) != 0) {
        l->st.malformed++;
        snprintf(why, why_cap, "%s", err);
        return;
    }
    char from[64] = "?";
    inet_ntop(AF_INET, &src->sin_addr, from, sizeof from);
    char ep[HR_BEACON_EP_MAX + 1];
    hr_beacon_join_ep(&b, from, ep, sizeof ep);
    for (int i = 0; i < l->n; i++) {
        hr_beacon_head *h = &l->heads[i];
        if (strcmp(h->ep, ep) == 0 && strcmp(h->b.cluster, b.cluster) == 0 &&
            memcmp(h->b.fp, b.fp, HR_BEACON_FP_LEN) == 0) {
            h->b = b;
            h->last_s = now;
            h->count++;
            snprintf(h->from, sizeof h->from, "%s", from);
            return;
        }
    }
    hr_beacon_head *h;
    if (l->n == HR_BEACON_MAX_HEADS) {
        /* full (a flood of made-up heads): the one heard least often gives way, so a
         * head that beacons every second stays while one-off beacons replace each other */
        int v = 0;
        for (int i = 1; i < l->n; i++)
            if (l->heads[i].count < l->heads[v].count ||
                (l->heads[i].count == l->heads[v].count && l->heads[i].last_s < l->heads[v].last_s))
                v = i;
        l->st.table_full++;
        snprintf(why, why_cap, "%d heads heard already; '%.63s' at %.100s forgotten",
                 HR_BEACON_MAX_HEADS, l->heads[v].b.cluster, l->heads[v].ep);
        h = &l->heads[v];
    } else {
        h = &l->heads[l->n++];
    }
    memset(h, 0, sizeof *h);
    h->b = b;
    snprintf(h->ep, sizeof h->ep, "%s", ep);
    snprintf(h->from, sizeof h->from, "%s", from);
    h->first_s = h->last_s = now;
    h->count = 1;
}

int hr_beacon_poll(hr_beacon_listener *l, int timeout_ms, const atomic_int *stop) {
    double until = hr_now_s() + timeout_ms / 1000.0;
    uint8_t buf[HR_BEACON_MAX + 1]; /* one more: a longer datagram is seen as longer */
    char why[HR_ERR_LEN] = "";
    for (;;) {
        double now = hr_now_s();
        if (now >= until || (stop && atomic_load(stop)))
            break;
        struct pollfd pf = {.fd = l->fd, .events = POLLIN};
        int wait = (int)((until - now) * 1000.0) + 1;
        int r = poll(&pf, 1, wait < 100 ? wait : 100);
        if (r < 0 && errno != EINTR)
            return HR_ENET;
        if (r <= 0)
            continue;
        for (int k = 0; k < 4096; k++) { /* drain what is queued */
            struct sockaddr_in src;
            socklen_t sl = sizeof src;
            ssize_t n =
                recvfrom(l->fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&src, &sl);
            if (n < 0)
                break;
            hr_beacon_take(l, buf, (size_t)n, &src, hr_now_s(), why, sizeof why);
        }
    }
    double now = hr_now_s();
    hr_beacon_expire(l, now);
    uint64_t refused = l->st.malformed + l->st.table_full;
    if (refused > l->logged_refused && now - l->log_s >= HR_BEACON_LOG_EVERY_S) {
        HR_LOG_WARN(TAG, "ignored %llu beacons since the last report (latest: %s)",
                    (unsigned long long)(refused - l->logged_refused), why[0] ? why : "see above");
        l->logged_refused = refused;
        l->log_s = now;
    }
    return 0;
}

int hr_beacon_heads(hr_beacon_listener *l, hr_beacon_head *out, int max) {
    hr_beacon_expire(l, hr_now_s());
    int n = l->n < max ? l->n : max;
    memcpy(out, l->heads, (size_t)n * sizeof *out);
    return n;
}

void hr_beacon_listener_stats(const hr_beacon_listener *l, hr_beacon_stats *out) { *out = l->st; }

void hr_beacon_listener_close(hr_beacon_listener *l) {
    if (!l)
        return;
    close(l->fd);
    free(l);
}
