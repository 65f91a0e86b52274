/* bench_ring.c - cost of CURVE encryption on the data plane: hidden-state
 * frames ping-ponged between two PUSH/PULL pairs over loopback TCP (as two
 * ring neighbours do), plaintext vs CURVE, for a decode frame (1 token) and
 * a prefill frame (64 tokens) of an n_embd-2048 model (F16 wire).
 * Built on request: cmake --build B --target bench_ring; ./bench_ring [secs] */
#include "common/error.h"
#include "ring/ring.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    void *pull, *push;
    size_t len;
    volatile int stop;
} echo_t;

static void *echo_main(void *arg) {
    echo_t *e = arg;
    uint8_t *buf = malloc(e->len);
    while (!e->stop) {
        int n = zmq_recv(e->pull, buf, e->len, 0);
        if (n > 0)
            zmq_send(e->push, buf, (size_t)n, 0);
    }
    free(buf);
    return NULL;
}

static void run(bool secure, size_t len, double secs, int port) {
    char err[HR_ERR_LEN], ep_a[64], ep_b[64];
    void *z = zmq_ctx_new();
    hr_ring_keys *k = NULL;
    snprintf(ep_a, sizeof ep_a, "tcp://127.0.0.1:%d", port);
    snprintf(ep_b, sizeof ep_b, "tcp://127.0.0.1:%d", port + 1);
    hr_ring_sockopt so = hr_ring_sockopt_default();
    so.rcv_timeout_ms = 200;
    void *pa = hr_ring_socket(z, ZMQ_PULL, &so, err), *pb = hr_ring_socket(z, ZMQ_PULL, &so, err);
    void *qa = hr_ring_socket(z, ZMQ_PUSH, &so, err), *qb = hr_ring_socket(z, ZMQ_PUSH, &so, err);
    if (secure) {
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/hr_bench_ring_%d", (int)getpid());
        if (hr_ring_keys_open(&k, dir, err) || hr_ring_keys_zap_start(k, z, "bench", err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        hr_ring_secure_server(pa, k, err);
        hr_ring_secure_server(pb, k, err);
        hr_ring_secure_client(qa, k, hr_ring_keys_public(k), err);
        hr_ring_secure_client(qb, k, hr_ring_keys_public(k), err);
    }
    zmq_bind(pa, ep_a);
    zmq_bind(pb, ep_b);
    zmq_connect(qa, ep_b); /* a -> b */
    zmq_connect(qb, ep_a); /* b -> a */
    echo_t e = {.pull = pb, .push = qb, .len = len};
    pthread_t th;
    pthread_create(&th, NULL, echo_main, &e);
    uint8_t *buf = calloc(1, len);
    for (int i = 0; i < 20; i++) { /* warm-up, handshakes */
        zmq_send(qa, buf, len, 0);
        zmq_recv(pa, buf, len, 0);
    }
    long n = 0;
    double t0 = now_s(), t;
    while ((t = now_s()) - t0 < secs) {
        zmq_send(qa, buf, len, 0);
        if (zmq_recv(pa, buf, len, 0) < 0)
            break;
        n++;
    }
    double dt = t - t0;
    printf("%-9s %7zu-byte frames: %8.1f round trips/s, %7.1f us per hop, %8.1f MB/s\n",
           secure ? "CURVE" : "plaintext", len, n / dt, dt / n / 2 * 1e6,
           2.0 * n * (double)len / dt / 1e6);
    e.stop = 1;
    pthread_join(th, NULL);
    free(buf);
    zmq_close(pa);
    zmq_close(pb);
    zmq_close(qa);
    zmq_close(qb);
    hr_ring_keys_close(k);
    zmq_ctx_term(z);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3.0;
    size_t sizes[2] = {HR_RING_HDR_SIZE + 2048 * 2, HR_RING_HDR_SIZE + 64 * 2048 * 2};
    int port = 30000 + (int)(getpid() % 20000);
    for (int s = 0; s < 2; s++)
        for (int sec = 0; sec < 2; sec++) {
            run(sec == 1, sizes[s], secs, port);
            port += 2;
        }
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/hr_bench_ring_%d", (int)getpid());
    return system(cmd) == 0 ? 0 : 1;
}
