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

#include <stdlib.h>
#include <sys/socket.h>

#define TAG "http"

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
        pthread_mutex_lock(&h->cmu);
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
