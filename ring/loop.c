/* loop.c - a per-thread event loop over zmq_poll: socket callbacks and
 * periodic timers, used by the agent's control threads. */
#include "ring/ring.h"

#include "common/sync.h"

#include <errno.h>
#include <stdlib.h>
#include <zmq.h>

typedef struct {
    hr_ring_loop_fn fn;
    void *ud;
    double period_s, due_s; /* s, monotonic */
} hr_ring_timer;

struct hr_ring_loop {
    const atomic_int *stop;
    bool brk;
    double wake_s; /* s, monotonic: the end of the next wait asked by a callback; 0 = none */
    int n_socks, n_timers;
    zmq_pollitem_t items[HR_RING_LOOP_MAX];
    hr_ring_loop_fn sock_fn[HR_RING_LOOP_MAX];
    void *sock_ud[HR_RING_LOOP_MAX];
    hr_ring_timer timers[HR_RING_LOOP_MAX];
};

hr_ring_loop *hr_ring_loop_create(const atomic_int *stop) {
    hr_ring_loop *l = calloc(1, sizeof *l);
    if (l)
        l->stop = stop;
    return l;
}

void hr_ring_loop_destroy(hr_ring_loop *l) { free(l); }

int hr_ring_loop_socket(hr_ring_loop *l, void *sock, hr_ring_loop_fn fn, void *ud) {
    if (l->n_socks >= HR_RING_LOOP_MAX)
        return HR_ERANGE;
    l->items[l->n_socks] = (zmq_pollitem_t){.socket = sock, .events = ZMQ_POLLIN};
    l->sock_fn[l->n_socks] = fn;
    l->sock_ud[l->n_socks++] = ud;
    return 0;
}

int hr_ring_loop_fd(hr_ring_loop *l, int fd, hr_ring_loop_fn fn, void *ud) {
    if (l->n_socks >= HR_RING_LOOP_MAX)
        return HR_ERANGE;
    l->items[l->n_socks] = (zmq_pollitem_t){.socket = NULL, .fd = fd, .events = ZMQ_POLLIN};
    l->sock_fn[l->n_socks] = fn;
    l->sock_ud[l->n_socks++] = ud;
    return 0;
}

int hr_ring_loop_timer(hr_ring_loop *l, int period_ms, hr_ring_loop_fn fn, void *ud) {
    if (l->n_timers >= HR_RING_LOOP_MAX)
        return HR_ERANGE;
    l->timers[l->n_timers++] = (hr_ring_timer){
        .fn = fn, .ud = ud, .period_s = period_ms > 0 ? period_ms / 1000.0 : 0, .due_s = 0};
    return 0;
}

void hr_ring_loop_break(hr_ring_loop *l) { l->brk = true; }

void hr_ring_loop_wake_at(hr_ring_loop *l, double t_s) {
    if (l->wake_s == 0 || t_s < l->wake_s)
        l->wake_s = t_s;
}

/* How long the next poll may sleep: until the first periodic timer is due
 * or a callback's wake-up, at most HR_RING_LOOP_IDLE_MS (ms). */
static long hr_ring_loop_wait_ms(const hr_ring_loop *l, double now) {
    double until = now + HR_RING_LOOP_IDLE_MS / 1000.0;
    for (int i = 0; i < l->n_timers; i++)
        if (l->timers[i].period_s > 0 && l->timers[i].due_s < until)
            until = l->timers[i].due_s;
    if (l->wake_s > 0 && l->wake_s < until)
        until = l->wake_s;
    long ms = (long)((until - now) * 1000.0 + 0.999);
    return ms < 0 ? 0 : ms;
}

static bool hr_ring_loop_done(const hr_ring_loop *l) {
    return l->brk || (l->stop && atomic_load(l->stop));
}

int hr_ring_loop_run(hr_ring_loop *l, char err[HR_ERR_LEN]) {
    l->brk = false;
    while (!hr_ring_loop_done(l)) {
        double now = hr_now_s();
        for (int i = 0; i < l->n_timers && !hr_ring_loop_done(l); i++) {
            hr_ring_timer *t = &l->timers[i];
            if (now < t->due_s)
                continue;
            t->due_s = now + t->period_s;
            t->fn(t->ud);
        }
        if (hr_ring_loop_done(l))
            break;
        long wait = hr_ring_loop_wait_ms(l, hr_now_s());
        l->wake_s = 0;
        int n = zmq_poll(l->items, l->n_socks, wait);
        if (n < 0 && zmq_errno() != EINTR)
            return hr_seterr(err, HR_ENET, "zmq_poll: %s", zmq_strerror(zmq_errno()));
        for (int i = 0; n > 0 && i < l->n_socks && !hr_ring_loop_done(l); i++)
            if (l->items[i].revents & ZMQ_POLLIN)
                l->sock_fn[i](l->sock_ud[i]);
    }
    return 0;
}
