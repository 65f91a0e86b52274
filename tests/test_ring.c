/* test_ring.c - wire format: header round trip, every rejection path
 * (short, bad magic, version, type, length, limits), F16/F32 packing, and
 * the socket helpers (timeouts, oversized and multi-part frames). */
#include "common/log.h"
#include "ring/ring.h"

#include "check.h"

#include <unistd.h>
#include <zmq.h>

static void test_header(void) {
    uint8_t buf[HR_RING_HDR_SIZE + 64];
    hr_ring_hdr h = {.type = HR_RING_HIDDEN,
                     .dtype = HR_RING_F16,
                     .round = 3,
                     .n_tok = 2,
                     .pos = 77,
                     .plan_id = 9,
                     .req_id = 0x1122334455667788ull,
                     .len = 8};
    hr_ring_hdr_write(buf, &h);
    CHECK_EQ(buf[0], 'H');
    CHECK_EQ(buf[1], 'R');
    CHECK_EQ(buf[2], 'T');
    CHECK_EQ(buf[3], 'H');
    CHECK_EQ(buf[8], 0x88); /* little-endian req_id */
    hr_ring_hdr g;
    char err[HR_ERR_LEN] = "";
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + 8, &g, err), 0);
    CHECK_EQ(g.type, HR_RING_HIDDEN);
    CHECK_EQ(g.round, 3);
    CHECK_EQ(g.n_tok, 2);
    CHECK_EQ(g.pos, 77);
    CHECK_EQ(g.plan_id, 9);
    CHECK(g.req_id == 0x1122334455667788ull);
    CHECK_EQ(g.len, 8);
    /* length must match the frame exactly */
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + 9, &g, err), HR_EFORMAT);
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + 7, &g, err), HR_EFORMAT);
    CHECK_EQ(hr_ring_hdr_read(buf, 10, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "shorter") != NULL);
    /* bad magic */
    uint8_t bad[HR_RING_HDR_SIZE + 8];
    memcpy(bad, buf, sizeof bad);
    bad[0] = 'X';
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "magic") != NULL);
    /* other version */
    memcpy(bad, buf, sizeof bad);
    bad[4] = 2;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EUNSUPPORTED);
    CHECK(strstr(err, "version") != NULL);
    /* unknown type */
    memcpy(bad, buf, sizeof bad);
    bad[6] = 200;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    bad[6] = 0;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    /* hidden frames: dtype and n_tok consistency */
    memcpy(bad, buf, sizeof bad);
    bad[7] = 9;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    memcpy(bad, buf, sizeof bad);
    bad[20] = 3; /* 8 bytes cannot hold 3 tokens of f16 evenly */
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    memcpy(bad, buf, sizeof bad);
    bad[16] = bad[17] = bad[18] = bad[19] = 0xff; /* pos -1 */
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    /* control payload over the limit (claimed and carried) */
    size_t big = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL + 1;
    uint8_t *bb = calloc(1, big);
    hr_ring_hdr c = {.type = HR_RING_JOIN, .len = HR_RING_MAX_CTRL + 1};
    hr_ring_hdr_write(bb, &c);
    CHECK_EQ(hr_ring_hdr_read(bb, big, &g, err), HR_EFORMAT);
    free(bb);
    CHECK_STR(hr_ring_type_name(HR_RING_PLAN), "PLAN");
    CHECK_STR(hr_ring_type_name(99), "?");
}

static void test_pack(void) {
    float src[5] = {1.0f, -2.5f, 0.0f, 65504.0f, 1e-3f}, dst[5];
    uint8_t buf[32];
    CHECK_EQ(hr_ring_pack(buf, sizeof buf, src, 5, HR_RING_F32), 20);
    CHECK_EQ(hr_ring_unpack(dst, 5, buf, 20, HR_RING_F32), 0);
    for (int i = 0; i < 5; i++)
        CHECK(dst[i] == src[i]);
    CHECK_EQ(hr_ring_pack(buf, sizeof buf, src, 5, HR_RING_F16), 10);
    CHECK_EQ(hr_ring_unpack(dst, 5, buf, 10, HR_RING_F16), 0);
    for (int i = 0; i < 5; i++)
        CHECK_NEAR(dst[i], src[i], fabs(src[i]) * 1e-3 + 1e-7);
    CHECK_EQ(hr_ring_unpack(dst, 5, buf, 9, HR_RING_F16), HR_EFORMAT);
    CHECK_EQ(hr_ring_unpack(dst, 5, buf, 10, 7), HR_EFORMAT);
    CHECK_EQ(hr_ring_pack(buf, 8, src, 5, HR_RING_F32), HR_ERANGE);
    CHECK_EQ(hr_ring_pack(buf, 8, src, 5, 7), HR_EINVAL);
}

static void test_endpoint(void) {
    char ep[64];
    CHECK_EQ(hr_ring_endpoint("127.0.0.1:7000", 1, ep, sizeof ep), 0);
    CHECK_STR(ep, "tcp://127.0.0.1:7001");
    CHECK_EQ(hr_ring_endpoint("tcp://10.0.0.2:80", 0, ep, sizeof ep), 0);
    CHECK_STR(ep, "tcp://10.0.0.2:80");
    CHECK_EQ(hr_ring_endpoint("nohost", 0, ep, sizeof ep), HR_EINVAL);
    CHECK_EQ(hr_ring_endpoint("h:99999", 0, ep, sizeof ep), HR_EINVAL);
    CHECK_EQ(hr_ring_endpoint("h:65535", 1, ep, sizeof ep), HR_ERANGE);
    CHECK_EQ(hr_ring_endpoint("h:0", 1, ep, sizeof ep), HR_EINVAL);
    CHECK(hr_ring_hash("abc", 3, 0) != hr_ring_hash("abd", 3, 0));
    CHECK(hr_ring_hash("abc", 3, 0) != hr_ring_hash("abc", 3, 1));
}

static void test_sockets(void) {
    char err[HR_ERR_LEN] = "", ep[128];
    void *z = zmq_ctx_new();
    hr_ring_sockopt o = hr_ring_sockopt_default();
    o.max_msg = 4096;
    void *srv = hr_ring_socket(z, ZMQ_ROUTER, &o, err);
    CHECK(srv != NULL);
    CHECK_EQ(hr_ring_bind(srv, "tcp://127.0.0.1:0", ep, sizeof ep, err), 0);
    CHECK(strncmp(ep, "tcp://127.0.0.1:", 16) == 0);
    void *cli = hr_ring_socket(z, ZMQ_DEALER, NULL, err);
    CHECK_EQ(zmq_connect(cli, ep), 0);
    uint8_t buf[1024], id[HR_RING_MAX_ID];
    size_t idl = 0;
    hr_ring_hdr h;
    /* timeout: nothing sent */
    CHECK_EQ(hr_ring_recv(srv, id, &idl, buf, sizeof buf, 50, &h, err), 0);
    /* a good message */
    hr_ring_hdr s = {.type = HR_RING_JOIN, .pos = -1, .len = 5};
    CHECK_EQ(hr_ring_send_msg(cli, NULL, 0, &s, "hello", err), 0);
    long n = hr_ring_recv(srv, id, &idl, buf, sizeof buf, 2000, &h, err);
    CHECK_EQ(n, HR_RING_HDR_SIZE + 5);
    CHECK_EQ(h.type, HR_RING_JOIN);
    CHECK(memcmp(buf + HR_RING_HDR_SIZE, "hello", 5) == 0);
    /* reply through the identity */
    hr_ring_hdr r = {.type = HR_RING_WELCOME, .pos = -1};
    CHECK_EQ(hr_ring_send_msg(srv, id, idl, &r, NULL, err), 0);
    CHECK_EQ(hr_ring_recv(cli, NULL, NULL, buf, sizeof buf, 2000, &h, err), HR_RING_HDR_SIZE);
    CHECK_EQ(h.type, HR_RING_WELCOME);
    /* garbage */
    zmq_send(cli, "garbage!", 8, 0);
    CHECK_EQ(hr_ring_recv(srv, id, &idl, buf, sizeof buf, 2000, &h, err), HR_EFORMAT);
    /* larger than the buffer but under MAXMSGSIZE */
    uint8_t big[2000] = {0};
    zmq_send(cli, big, sizeof big, 0);
    CHECK_EQ(hr_ring_recv(srv, id, &idl, buf, sizeof buf, 2000, &h, err), HR_ERANGE);
    /* multi-part */
    zmq_send(cli, "a", 1, ZMQ_SNDMORE);
    zmq_send(cli, "b", 1, 0);
    CHECK_EQ(hr_ring_recv(srv, id, &idl, buf, sizeof buf, 2000, &h, err), HR_EFORMAT);
    /* over MAXMSGSIZE: zmq drops the connection; the server keeps going */
    uint8_t *huge = calloc(1, 100000);
    zmq_send(cli, huge, 100000, 0);
    free(huge);
    CHECK_EQ(hr_ring_recv(srv, id, &idl, buf, sizeof buf, 300, &h, err), 0);
    void *cli2 = hr_ring_socket(z, ZMQ_DEALER, NULL, err);
    CHECK_EQ(zmq_connect(cli2, ep), 0);
    CHECK_EQ(hr_ring_send_msg(cli2, NULL, 0, &s, "again", err), 0);
    CHECK_EQ(hr_ring_recv(srv, id, &idl, buf, sizeof buf, 2000, &h, err), HR_RING_HDR_SIZE + 5);
    /* send timeout on a PUSH with nobody to take it */
    hr_ring_sockopt po = hr_ring_sockopt_default();
    po.snd_timeout_ms = 100;
    po.hwm = 1;
    void *push = hr_ring_socket(z, ZMQ_PUSH, &po, err);
    uint8_t frame[HR_RING_HDR_SIZE];
    hr_ring_hdr ph = {.type = HR_RING_CANCEL, .pos = -1};
    CHECK_EQ(hr_ring_send(push, NULL, 0, frame, &ph, err), HR_ETIMEDOUT);
    zmq_close(push);
    zmq_close(cli2);
    zmq_close(cli);
    zmq_close(srv);
    zmq_ctx_term(z);
}

/* CURVE + ZAP: a trusted client's frame arrives with its key as user id;
 * an untrusted key and a plaintext client get nothing through. */
static void test_curve(void) {
    char err[HR_ERR_LEN], ds[64], dt[64], du[64], ep[160];
    snprintf(ds, sizeof ds, "/tmp/hr_test_ring_%d/s", (int)getpid());
    snprintf(dt, sizeof dt, "/tmp/hr_test_ring_%d/t", (int)getpid());
    snprintf(du, sizeof du, "/tmp/hr_test_ring_%d/u", (int)getpid());
    hr_ring_keys *ks = NULL, *kt = NULL, *ku = NULL;
    CHECK_EQ(hr_ring_keys_open(&ks, ds, err), 0);
    CHECK_EQ(hr_ring_keys_open(&kt, dt, err), 0);
    CHECK_EQ(hr_ring_keys_open(&ku, du, err), 0);
    if (!ks || !kt || !ku)
        return;
    CHECK_EQ(hr_ring_trust_add(ds, "t", hr_ring_keys_public(kt), err), 0);
    void *z = zmq_ctx_new();
    CHECK_EQ(hr_ring_keys_zap_start(ks, z, "server", err), 0);
    void *srv = hr_ring_socket(z, ZMQ_PULL, NULL, err);
    CHECK_EQ(hr_ring_secure_server(srv, ks, err), 0);
    CHECK_EQ(hr_ring_bind(srv, "tcp://127.0.0.1:0", ep, sizeof ep, err), 0);
    void *c[3];
    hr_ring_keys *ck[3] = {kt, ku, NULL};
    for (int i = 0; i < 3; i++) {
        c[i] = hr_ring_socket(z, ZMQ_PUSH, NULL, err);
        if (ck[i])
            CHECK_EQ(hr_ring_secure_client(c[i], ck[i], hr_ring_keys_public(ks), err), 0);
        zmq_connect(c[i], ep);
        hr_ring_hdr h = {.type = HR_RING_STATUS_REQ, .pos = -1, .req_id = (uint64_t)i + 1};
        hr_ring_send_msg(c[i], NULL, 0, &h, NULL, err);
    }
    uint8_t buf[256];
    char user[HR_RING_KEY_LEN];
    int got = 0;
    uint64_t from = 0;
    hr_ring_hdr h;
    long n;
    while ((n = hr_ring_recv_user(srv, NULL, NULL, buf, sizeof buf, 1500, &h, user, err)) > 0) {
        got++;
        from = h.req_id;
        CHECK(strcmp(user, hr_ring_keys_public(kt)) == 0);
    }
    CHECK_EQ(got, 1);
    CHECK_EQ(from, 1);
    CHECK(hr_ring_keys_refused(ks) >= 1);
    for (int i = 0; i < 3; i++)
        zmq_close(c[i]);
    zmq_close(srv);
    hr_ring_keys_close(ks);
    zmq_ctx_term(z);
    hr_ring_keys_close(kt);
    hr_ring_keys_close(ku);
    char tok[96], hp[HR_RING_KEY_LEN], sec[HR_RING_KEY_LEN];
    CHECK_EQ(hr_ring_join_parse("HJ1short", hp, sec), HR_EINVAL);
    hr_ring_keys *kh = NULL;
    CHECK_EQ(hr_ring_keys_open(&kh, ds, err), 0);
    CHECK_EQ(hr_ring_keys_join_token(kh, tok, sizeof tok, err), 0);
    CHECK_EQ(hr_ring_join_parse(tok, hp, sec), 0);
    CHECK(kh && strcmp(hp, hr_ring_keys_public(kh)) == 0);
    hr_ring_keys_close(kh);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/hr_test_ring_%d", (int)getpid());
    CHECK_EQ(system(cmd), 0);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    test_header();
    test_pack();
    test_endpoint();
    test_sockets();
    test_curve();
    return hr_check_finish("ring");
}
