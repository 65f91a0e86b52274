/* guard.c - the HTTP server's connection bookkeeping: every open
 * connection has a slot with the time by which its next request (headers
 * and body) must have arrived; a watchdog thread shuts down the sockets
 * that miss it, so idle or trickling clients (one byte a second keeps
 * libmicrohttpd's own idle timer happy) cannot hold connections. While a
 * request is served its slot has no deadline: answers are not timed.
 *
 * The watchdog only shuts a socket down (the connection's thread sees the
 * hang-up and closes it); the slot leaves the list, under cmu, in MHD's
 * "closed" notification, which comes before MHD closes the descriptor, so
 * the watchdog never touches a reused one. */
#include "api/http-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define TAG "http"

/* a and b are the same client address (the port aside). */
static bool hr_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return false;
}

bool hr_guard_over(hr_http *h, struct MHD_Connection *c, char *addr, size_t cap) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hr_slot *s = ci ? ci->socket_context : NULL;
    if (!s || !s->over)
        return false;
    const void *ip = s->addr.ss_family == AF_INET6
                         ? (const void *)&((struct sockaddr_in6 *)&s->addr)->sin6_addr
                         : (const void *)&((struct sockaddr_in *)&s->addr)->sin_addr;
    if (!inet_ntop(s->addr.ss_family, ip, addr, (socklen_t)cap))
        snprintf(addr, cap, "?");
    double now = hr_now_s();
    pthread_mutex_lock(&h->cmu);
    h->n_over++;
    unsigned long long n = h->n_over;
    bool log = h->over_logged == 0 || now - h->over_logged >= 60.0;
    if (log)
        h->over_logged = now;
    pthread_mutex_unlock(&h->cmu);
    if (log)
        HR_LOG_WARN(TAG,
                    "HTTP API: more than %d connections from %s: answered 503 (%llu such "
                    "connections so far; raise --api-max-conns-per-ip if one address serves many "
                    "users, such as a reverse proxy; logged at most once a minute)",
                    h->p.max_conns_per_ip, addr, n);
    return true;
}

void hr_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code) {
    hr_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        hr_slot *s = calloc(1, sizeof *s);
        *socket_context = s;
        if (!s)
            return; /* not watched: MHD's idle timeout still applies */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        s->fd = ci ? ci->connect_fd : -1;
        s->deadline = hr_now_s() + h->p.read_timeout_s;
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr)
            memcpy(&s->addr, ci->client_addr,
                   ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                          : sizeof(struct sockaddr_in));
        pthread_mutex_lock(&h->cmu);
        int same = 0; /* open connections from the same address */
        for (hr_slot *o = h->slots; o && s->addr.ss_family; o = o->next)
            same += hr_same_host(&o->addr, &s->addr);
        s->over = same >= h->p.max_conns_per_ip;
        s->next = h->slots;
        if (h->slots)
            h->slots->prev = s;
        h->slots = s;
        h->n_conns++;
        pthread_mutex_unlock(&h->cmu);
        return;
    }
    hr_slot *s = *socket_context;
    if (!s)
        return;
    pthread_mutex_lock(&h->cmu);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->slots = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->n_conns--;
    pthread_mutex_unlock(&h->cmu);
    free(s);
    *socket_context = NULL;
}

void hr_guard_serving(hr_http *h, struct MHD_Connection *c, bool serving) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hr_slot *s = ci ? ci->socket_context : NULL;
    if (!s)
        return;
    pthread_mutex_lock(&h->cmu);
    s->deadline = serving ? 0 : hr_now_s() + h->p.read_timeout_s;
    pthread_mutex_unlock(&h->cmu);
}

int hr_guard_count(hr_http *h) {
    pthread_mutex_lock(&h->cmu);
    int n = h->n_conns;
    pthread_mutex_unlock(&h->cmu);
    return n;
}

static void *hr_guard_main(void *arg) {
    hr_http *h = arg;
    pthread_mutex_lock(&h->cmu);
    while (!h->wd_stop) {
        double now = hr_now_s();
        int n_cut = 0;
        for (hr_slot *s = h->slots; s; s = s->next) {
            if (s->cut || s->deadline <= 0 || now < s->deadline || s->fd < 0)
                continue;
            shutdown(s->fd, SHUT_RDWR);
            s->cut = true;
            n_cut++;
        }
        if (n_cut)
            HR_LOG_DEBUG(TAG, "closed %d connection%s without a request after %d s", n_cut,
                         n_cut == 1 ? "" : "s", h->p.read_timeout_s);
        hr_cond_wait_ms(&h->wcv, &h->cmu, 250);
    }
    pthread_mutex_unlock(&h->cmu);
    return NULL;
}

int hr_guard_start(hr_http *h) {
    if (pthread_create(&h->wd, NULL, hr_guard_main, h) != 0)
        return HR_ENOMEM;
    h->wd_started = true;
    return 0;
}

void hr_guard_stop(hr_http *h) {
    if (!h->wd_started)
        return;
    pthread_mutex_lock(&h->cmu);
    h->wd_stop = true;
    pthread_cond_broadcast(&h->wcv);
    pthread_mutex_unlock(&h->cmu);
    pthread_join(h->wd, NULL);
    h->wd_started = false;
}
