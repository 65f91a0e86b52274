/* test_ring.c - wire format: header round trip, every rejection path
 * (short, bad magic, version, type, length, limits), F16/F32 packing, and
 * the socket helpers (timeouts, oversized and multi-part frames), and the
 * message table with every typed payload's round trip and refusals. */
#include "common/log.h"
#include "ring/msg.h"
#include "ring/ring.h"

#include "check.h"

#include <unistd.h>
#include <zmq.h>

static void test_header(void) {
    uint8_t buf[HR_RING_HDR_SIZE + 64];
    /* a BATCH frame of 2 rows: 8 bytes of row entry + 2 f16 elements each */
    hr_ring_hdr h = {.type = HR_RING_BATCH,
                     .dtype = HR_RING_F16,
                     .round = 3,
                     .n_tok = 2,
                     .pos = 77,
                     .plan_id = 9,
                     .req_id = 0x1122334455667788ull,
                     .len = 24};
    hr_ring_hdr_write(buf, &h);
    CHECK_EQ(buf[0], 'H');
    CHECK_EQ(buf[1], 'R');
    CHECK_EQ(buf[2], 'T');
    CHECK_EQ(buf[3], 'H');
    CHECK_EQ(buf[8], 0x88); /* little-endian req_id */
    hr_ring_hdr g;
    char err[HR_ERR_LEN] = "";
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + 24, &g, err), 0);
    CHECK_EQ(g.type, HR_RING_BATCH);
    CHECK_EQ(g.round, 3);
    CHECK_EQ(g.n_tok, 2);
    CHECK_EQ(g.pos, 77);
    CHECK_EQ(g.plan_id, 9);
    CHECK(g.req_id == 0x1122334455667788ull);
    CHECK_EQ(g.len, 24);
    /* length must match the frame exactly */
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + 25, &g, err), HR_EFORMAT);
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + 23, &g, err), HR_EFORMAT);
    CHECK_EQ(hr_ring_hdr_read(buf, 10, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "shorter") != NULL);
    /* bad magic */
    uint8_t bad[HR_RING_HDR_SIZE + 24];
    memcpy(bad, buf, sizeof bad);
    bad[0] = 'X';
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "magic") != NULL);
    /* other version */
    memcpy(bad, buf, sizeof bad);
    bad[4] = HR_RING_VERSION + 1;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EUNSUPPORTED);
    bad[4] = HR_RING_VERSION - 1;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EUNSUPPORTED);
    CHECK(strstr(err, "version") != NULL);
    /* unknown type */
    memcpy(bad, buf, sizeof bad);
    bad[6] = 200;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    bad[6] = 0;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    /* the retired single-request data frame is an unknown type now */
    memcpy(bad, buf, sizeof bad);
    bad[6] = HR_RING_RETIRED;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "unknown") != NULL);
    /* data frames: dtype and n_tok consistency */
    memcpy(bad, buf, sizeof bad);
    bad[7] = 9;
    CHECK_EQ(hr_ring_hdr_read(bad, sizeof bad, &g, err), HR_EFORMAT);
    memcpy(bad, buf, sizeof bad);
    bad[20] = 3; /* 24 bytes hold no 3 rows of an entry and a hidden state */
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

/* ---- message table and typed payloads (msg.h) ---- */

/* Encodes into m, then reads the frame back as a receiver would. */
static uint8_t *roundtrip(hr_msg *m, hr_ring_hdr *h) {
    char err[HR_ERR_LEN] = "";
    uint8_t *f = malloc(HR_RING_HDR_SIZE + m->h.len + 1);
    hr_ring_hdr_write(f, &m->h);
    if (m->h.len)
        memcpy(f + HR_RING_HDR_SIZE, m->data, m->h.len);
    CHECK_EQ(hr_ring_hdr_read(f, HR_RING_HDR_SIZE + m->h.len, h, err), 0);
    hr_msg_clear(m);
    return f;
}

/* A hand-made frame of type with payload js. */
static hr_ring_hdr raw(int type, const char *js) {
    return (hr_ring_hdr){.type = (uint8_t)type, .pos = -1, .len = (uint32_t)strlen(js)};
}

/* BATCH frames: the row table round trip and the header's consistency
 * checks (rows of 8 bytes + whole hidden rows). */
static void test_batch_frame(void) {
    enum { N = 3, E = 4 };
    uint8_t buf[HR_RING_HDR_SIZE + N * (HR_RING_ROW_SIZE + E * 4)];
    int32_t slot[N] = {0, 2, 63}, pos[N] = {0, 17, 4095}, s2[N], p2[N];
    hr_ring_rows_write(buf + HR_RING_HDR_SIZE, slot, pos, N);
    hr_ring_rows_read(buf + HR_RING_HDR_SIZE, s2, p2, N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(s2[i], slot[i]);
        CHECK_EQ(p2[i], pos[i]);
    }
    CHECK_EQ(buf[HR_RING_HDR_SIZE + HR_RING_ROW_SIZE], 2); /* little-endian slot */
    hr_ring_hdr h = {.type = HR_RING_BATCH,
                     .dtype = HR_RING_F32,
                     .n_tok = N,
                     .pos = 1,
                     .plan_id = 3,
                     .req_id = 5,
                     .len = N * (HR_RING_ROW_SIZE + E * 4)};
    hr_ring_hdr_write(buf, &h);
    hr_ring_hdr g;
    char err[HR_ERR_LEN] = "";
    CHECK_EQ(hr_ring_hdr_read(buf, sizeof buf, &g, err), 0);
    CHECK_EQ(g.type, HR_RING_BATCH);
    CHECK_STR(hr_ring_type_name(g.type), "BATCH");
    /* rows that are not whole: one byte short per row, no hidden state, no rows */
    hr_ring_hdr bad = h;
    bad.len = N * (HR_RING_ROW_SIZE + E * 4) - N;
    hr_ring_hdr_write(buf, &bad);
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + bad.len, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "BATCH") != NULL);
    bad.len = N * HR_RING_ROW_SIZE;
    hr_ring_hdr_write(buf, &bad);
    CHECK_EQ(hr_ring_hdr_read(buf, HR_RING_HDR_SIZE + bad.len, &g, err), HR_EFORMAT);
    bad = h;
    bad.n_tok = 0;
    hr_ring_hdr_write(buf, &bad);
    CHECK_EQ(hr_ring_hdr_read(buf, sizeof buf, &g, err), HR_EFORMAT);
    bad = h;
    bad.pos = -1;
    hr_ring_hdr_write(buf, &bad);
    CHECK_EQ(hr_ring_hdr_read(buf, sizeof buf, &g, err), HR_EFORMAT);
    bad = h;
    bad.dtype = 7;
    hr_ring_hdr_write(buf, &bad);
    CHECK_EQ(hr_ring_hdr_read(buf, sizeof buf, &g, err), HR_EFORMAT);
}

static void test_msg_table(void) {
    CHECK(hr_msg_info_of(HR_RING_RETIRED) == NULL);
    for (int t = 1; t < HR_RING_TYPE_END; t++) {
        if (t == HR_RING_RETIRED)
            continue;
        const hr_msg_info *mi = hr_msg_info_of(t);
        CHECK(mi != NULL);
        if (!mi)
            continue;
        CHECK_STR(mi->name, hr_ring_type_name(t));
        CHECK(mi->dir != 0);
        bool data = t == HR_RING_BATCH || t == HR_RING_CHUNK;
        CHECK(mi->max_len <= (data ? HR_RING_MAX_FRAME : HR_RING_MAX_CTRL));
        CHECK(mi->kind != HR_MSG_NONE || mi->max_len == 0);
    }
    CHECK(hr_msg_info_of(0) == NULL);
    CHECK(hr_msg_info_of(HR_RING_TYPE_END) == NULL);
    CHECK(hr_msg_info_of(HR_RING_PAIR)->flags & HR_MSG_F_PAIRING);
    CHECK(!(hr_msg_info_of(HR_RING_JOIN)->flags & HR_MSG_F_PAIRING));
    CHECK(hr_msg_info_of(HR_RING_HEARTBEAT)->flags & HR_MSG_F_KNOWN);
    /* the frame header check takes each type's limit from the table */
    char err[HR_ERR_LEN];
    hr_ring_hdr g;
    uint8_t f[HR_RING_HDR_SIZE + 8] = {0};
    hr_ring_hdr w = {.type = HR_RING_WELCOME, .len = 1}; /* no payload allowed */
    hr_ring_hdr_write(f, &w);
    CHECK_EQ(hr_ring_hdr_read(f, HR_RING_HDR_SIZE + 1, &g, err), HR_EFORMAT);
    CHECK(strstr(err, "limit") != NULL);
    uint32_t pmax = hr_msg_info_of(HR_RING_PLAN)->max_len;
    uint8_t *big = calloc(1, HR_RING_HDR_SIZE + pmax + 1);
    hr_ring_hdr p = {.type = HR_RING_PLAN, .len = pmax + 1};
    hr_ring_hdr_write(big, &p);
    CHECK_EQ(hr_ring_hdr_read(big, HR_RING_HDR_SIZE + pmax + 1, &g, err), HR_EFORMAT);
    p.len = pmax;
    hr_ring_hdr_write(big, &p);
    CHECK_EQ(hr_ring_hdr_read(big, HR_RING_HDR_SIZE + pmax, &g, err), 0);
    free(big);
}

static void test_msg_roundtrip(const char *key) {
    char err[HR_ERR_LEN] = "";
    hr_msg m;
    hr_ring_hdr h;
    uint8_t *f;
    /* JOIN */
    hr_msg_join j = {.version = HR_RING_VERSION,
                     .model_size = 123456789012ull,
                     .model_hash = 0x0123456789abcdefull,
                     .n_layer = 22,
                     .threads = 4,
                     .cores = 8,
                     .numa = 1,
                     .mem_total = 1ll << 34,
                     .mem_avail = 1ll << 33,
                     .cg_limit = -1,
                     .disk_mbs = 512.5,
                     .profile = "{\"a\":1}"};
    snprintf(j.name, sizeof j.name, "laptop");
    snprintf(j.ctrl, sizeof j.ctrl, "tcp://10.0.0.2:7700");
    snprintf(j.data, sizeof j.data, "tcp://10.0.0.2:7701");
    snprintf(j.os, sizeof j.os, "Debian");
    snprintf(j.pubkey, sizeof j.pubkey, "%s", key);
    CHECK_EQ(hr_msg_join_encode(&m, &j, err), 0);
    CHECK_EQ(m.h.type, HR_RING_JOIN);
    f = roundtrip(&m, &h);
    hr_msg_join jd;
    CHECK_EQ(hr_msg_join_decode(&h, f + HR_RING_HDR_SIZE, &jd, err), 0);
    CHECK_EQ(jd.version, HR_RING_VERSION);
    CHECK(jd.model_size == j.model_size && jd.model_hash == j.model_hash);
    CHECK_STR(jd.name, "laptop");
    CHECK_STR(jd.data, j.data);
    CHECK_STR(jd.pubkey, key);
    CHECK_EQ(jd.n_layer, 22);
    CHECK_EQ(jd.mem_avail, 1ll << 33);
    CHECK_EQ(jd.cg_limit, -1);
    CHECK(jd.profile && strcmp(jd.profile, "{\"a\":1}") == 0);
    hr_msg_join_clear(&jd);
    /* a JOIN is not a PLAN */
    hr_msg_plan pd;
    CHECK_EQ(hr_msg_plan_decode(&h, f + HR_RING_HDR_SIZE, &pd, err), HR_EFORMAT);
    CHECK(strstr(err, "JOIN frame") != NULL);
    free(f);
    /* PLAN */
    hr_msg_plan p = {.plan_id = 4000000000u,
                     .k = 2,
                     .n_layer = 22,
                     .n_active = 3,
                     .index = 1,
                     .win = {{6, 5, 0}, {6, 5, 0}},
                     .n_ctx = 4096,
                     .n_batch = 64,
                     .dtype = HR_RING_F16,
                     .prefetch = true,
                     .release = false,
                     .n_keys = 2};
    snprintf(p.next, sizeof p.next, "tcp://10.0.0.3:7701");
    snprintf(p.next_key, sizeof p.next_key, "%s", key);
    snprintf(p.keys[0], HR_RING_KEY_LEN, "%s", key);
    snprintf(p.keys[1], HR_RING_KEY_LEN, "%s", key);
    CHECK_EQ(hr_msg_plan_encode(&m, &p, err), 0);
    CHECK_EQ(m.h.plan_id, 4000000000u);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_plan_decode(&h, f + HR_RING_HDR_SIZE, &pd, err), 0);
    CHECK_EQ(pd.plan_id, 4000000000u);
    CHECK(pd.k == 2 && pd.n_layer == 22 && pd.index == 1 && pd.n_active == 3);
    int first = -1, count = -1;
    CHECK_EQ(hr_msg_plan_window(&pd, pd.index, 1, &first, &count), 0);
    CHECK(first == 17 && count == 5); /* round 1 starts at 11; after the head's 6 */
    CHECK(pd.n_ctx == 4096 && pd.n_batch == 64 && pd.dtype == HR_RING_F16);
    CHECK(pd.prefetch && !pd.release);
    CHECK_STR(pd.next, p.next);
    CHECK_STR(pd.next_key, key);
    CHECK_EQ(pd.n_keys, 2);
    CHECK_EQ(pd.n_seq, 1); /* absent: one KV slot */
    free(f);
    p.n_seq = 8;
    CHECK_EQ(hr_msg_plan_encode(&m, &p, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_plan_decode(&h, f + HR_RING_HDR_SIZE, &pd, err), 0);
    CHECK_EQ(pd.n_seq, 8);
    free(f);
    /* READY: ok and not ok */
    hr_msg_ready r = {.ok = false}, rd;
    snprintf(r.error, sizeof r.error, "no memory for plan 3");
    CHECK_EQ(hr_msg_ready_encode(&m, &r, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_ready_decode(&h, f + HR_RING_HDR_SIZE, &rd, err), 0);
    CHECK(!rd.ok);
    CHECK_STR(rd.error, "no memory for plan 3");
    free(f);
    r.ok = true;
    CHECK_EQ(hr_msg_ready_encode(&m, &r, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_ready_decode(&h, f + HR_RING_HDR_SIZE, &rd, err), 0);
    CHECK(rd.ok);
    CHECK_STR(rd.error, "");
    free(f);
    /* REJECT: fatal is a field, not a header position */
    hr_msg_reject rj = {.fatal = true}, rjd;
    snprintf(rj.reason, sizeof rj.reason, "model mismatch");
    CHECK_EQ(hr_msg_reject_encode(&m, &rj, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_reject_decode(&h, f + HR_RING_HDR_SIZE, &rjd, err), 0);
    CHECK(rjd.fatal);
    CHECK_STR(rjd.reason, "model mismatch");
    free(f);
    rj.fatal = false;
    CHECK_EQ(hr_msg_reject_encode(&m, &rj, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_reject_decode(&h, f + HR_RING_HDR_SIZE, &rjd, err), 0);
    CHECK(!rjd.fatal);
    free(f);
    /* HEARTBEAT */
    hr_msg_heartbeat hb = {.ms_round = 1.25,
                           .resident = 0.5,
                           .tokens = 77,
                           .rejected = 3,
                           .mem_avail = 1ll << 32,
                           .t = 12.5,
                           .rounds = 40,
                           .ms_total = 52.5,
                           .cpu_round = -1,
                           .ex_keep = -1},
                     hbd;
    CHECK_EQ(hr_msg_heartbeat_encode(&m, &hb, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_heartbeat_decode(&h, f + HR_RING_HDR_SIZE, &hbd, err), 0);
    CHECK(hbd.ms_round == 1.25 && hbd.resident == 0.5 && hbd.t == 12.5);
    CHECK(hbd.tokens == 77 && hbd.rejected == 3 && hbd.mem_avail == 1ll << 32);
    CHECK(hbd.rounds == 40 && hbd.ms_total == 52.5);
    CHECK_EQ(hbd.ex_keep, -1);  /* no experts object: not streamed by expert */
    CHECK(hbd.cpu_round == -1); /* unknown: not sent */
    free(f);
    /* streamed by expert: the cache's figures travel, fetched / moved bytes too */
    hb.ex_keep = 17;
    hb.ex_routed = 4000;
    hb.ex_hits = 400;
    hb.ex_fetched = 5000000000ull;
    hb.ex_moved = 12345;
    CHECK_EQ(hr_msg_heartbeat_encode(&m, &hb, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_heartbeat_decode(&h, f + HR_RING_HDR_SIZE, &hbd, err), 0);
    CHECK(hbd.ex_keep == 17 && hbd.ex_routed == 4000 && hbd.ex_hits == 400);
    CHECK(hbd.ex_fetched == 5000000000ull && hbd.ex_moved == 12345);
    CHECK(hbd.pump_bytes == -1 && hbd.pump_s == -1); /* none read: not sent */
    free(f);
    /* its pump's reads travel as two totals */
    hb.pump_bytes = 3.5e9;
    hb.pump_s = 17.25;
    CHECK_EQ(hr_msg_heartbeat_encode(&m, &hb, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_heartbeat_decode(&h, f + HR_RING_HDR_SIZE, &hbd, err), 0);
    CHECK(hbd.pump_bytes == 3.5e9 && hbd.pump_s == 17.25);
    free(f);
    /* and its CPU per window computed */
    hb.cpu_round = 42.5;
    CHECK_EQ(hr_msg_heartbeat_encode(&m, &hb, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_heartbeat_decode(&h, f + HR_RING_HDR_SIZE, &hbd, err), 0);
    CHECK(hbd.cpu_round == 42.5);
    free(f);
    static const char *const hb_cpu_neg =
        "{\"ms_round\":1.0,\"resident\":1.0,\"tokens\":1,\"rejected\":0,\"mem_avail\":-1,"
        "\"cpu_round\":-3}";
    hr_ring_hdr hcn = {.type = HR_RING_HEARTBEAT, .len = (uint32_t)strlen(hb_cpu_neg)};
    CHECK_EQ(hr_msg_heartbeat_decode(&hcn, hb_cpu_neg, &hbd, err), HR_EFORMAT);
    static const char *const hb_pump_neg =
        "{\"ms_round\":1.0,\"resident\":1.0,\"tokens\":1,\"rejected\":0,\"mem_avail\":-1,"
        "\"pump_bytes\":1e6,\"pump_s\":-0.5}";
    hr_ring_hdr hp = {.type = HR_RING_HEARTBEAT, .len = (uint32_t)strlen(hb_pump_neg)};
    CHECK_EQ(hr_msg_heartbeat_decode(&hp, hb_pump_neg, &hbd, err), HR_EFORMAT);
    static const char *const hb_ex_old =
        "{\"ms_round\":1.0,\"resident\":1.0,\"tokens\":1,\"rejected\":0,\"mem_avail\":-1,"
        "\"experts\":{\"keep\":3,\"routed\":9,\"hits\":2}}";
    static const char *const hb_ex_neg =
        "{\"ms_round\":1.0,\"resident\":1.0,\"tokens\":1,\"rejected\":0,\"mem_avail\":-1,"
        "\"experts\":{\"keep\":3,\"routed\":9,\"hits\":2,\"fetched\":-5}}";
    hr_ring_hdr he = {.type = HR_RING_HEARTBEAT, .len = (uint32_t)strlen(hb_ex_old)};
    CHECK_EQ(hr_msg_heartbeat_decode(&he, hb_ex_old, &hbd, err), 0);
    CHECK(hbd.ex_keep == 3 && hbd.ex_fetched == 0 && hbd.ex_moved == 0);
    he.len = (uint32_t)strlen(hb_ex_neg);
    CHECK_EQ(hr_msg_heartbeat_decode(&he, hb_ex_neg, &hbd, err), HR_EFORMAT);
    /* a heartbeat without the round counters (an older worker) reads as 0;
     * negative ones are refused */
    static const char *const hb_old =
        "{\"ms_round\":1.0,\"resident\":1.0,\"tokens\":1,\"rejected\":0,\"mem_avail\":-1}";
    static const char *const hb_neg = "{\"ms_round\":1.0,\"resident\":1.0,\"tokens\":1,"
                                      "\"rejected\":0,\"mem_avail\":-1,\"rounds\":-2}";
    hr_ring_hdr hh = {.type = HR_RING_HEARTBEAT, .len = (uint32_t)strlen(hb_old)};
    CHECK_EQ(hr_msg_heartbeat_decode(&hh, hb_old, &hbd, err), 0);
    CHECK(hbd.rounds == 0 && hbd.ms_total == 0);
    hh.len = (uint32_t)strlen(hb_neg);
    CHECK_EQ(hr_msg_heartbeat_decode(&hh, hb_neg, &hbd, err), HR_EFORMAT);
    /* INVITE, PAIR */
    hr_msg_invite iv = {0}, ivd;
    snprintf(iv.head, sizeof iv.head, "tcp://10.0.0.1:7700");
    CHECK_EQ(hr_msg_invite_encode(&m, &iv, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_invite_decode(&h, f + HR_RING_HDR_SIZE, &ivd, err), 0);
    CHECK_STR(ivd.head, iv.head);
    free(f);
    hr_msg_pair pr = {0}, prd;
    snprintf(pr.name, sizeof pr.name, "nas");
    snprintf(pr.pubkey, sizeof pr.pubkey, "%s", key);
    CHECK_EQ(hr_msg_pair_encode(&m, &pr, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_pair_decode(&h, f + HR_RING_HDR_SIZE, &prd, err), 0);
    CHECK_STR(prd.name, "nas");
    CHECK_STR(prd.pubkey, key);
    free(f);
    /* STATUS */
    char *st = NULL;
    CHECK_EQ(hr_msg_status_encode(&m, "{\"head\":\"h\",\"k\":2}", err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_status_decode(&h, f + HR_RING_HDR_SIZE, &st, err), 0);
    CHECK(st && strcmp(st, "{\"head\":\"h\",\"k\":2}") == 0);
    free(st);
    free(f);
    /* PROMPT (absent fields keep the receiver's defaults) */
    const hr_msg_prompt dflt = {.n_predict = 128,
                                .top_k = 40,
                                .wait_ms = 30000,
                                .temp = 0.8,
                                .top_p = 0.95,
                                .min_p = 0.05,
                                .repeat_penalty = 1.0,
                                .seed = -1};
    hr_msg_prompt pm = dflt, pmd = dflt;
    pm.text = "Why is the sky blue?";
    pm.n_predict = 9;
    pm.seed = 42;
    pm.temp = 0.0;
    CHECK_EQ(hr_msg_prompt_encode(&m, &pm, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_prompt_decode(&h, f + HR_RING_HDR_SIZE, &pmd, err), 0);
    CHECK(pmd.text && strcmp(pmd.text, pm.text) == 0);
    CHECK(pmd.n_predict == 9 && pmd.seed == 42 && pmd.temp == 0.0 && pmd.top_k == 40);
    hr_msg_prompt_clear(&pmd);
    free(f);
    hr_ring_hdr ph = raw(HR_RING_PROMPT, "{\"text\":\"hi\"}");
    pmd = dflt;
    pmd.top_k = 7; /* a receiver default other than the sender's */
    CHECK_EQ(hr_msg_prompt_decode(&ph, "{\"text\":\"hi\"}", &pmd, err), 0);
    CHECK(pmd.n_predict == 128 && pmd.seed == -1 && pmd.wait_ms == 30000 && pmd.top_k == 7);
    hr_msg_prompt_clear(&pmd);
    /* TOKEN */
    hr_msg_token tk;
    CHECK_EQ(hr_msg_token_encode(&m, -1, "sky", 3, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_token_decode(&h, f + HR_RING_HDR_SIZE, &tk, err), 0);
    CHECK_EQ(tk.id, -1);
    CHECK_EQ(tk.len, 3);
    CHECK_STR(tk.piece, "sky");
    free(f);
    CHECK_EQ(hr_msg_token_encode(&m, 5, "x", HR_MSG_MAX_PIECE + 1, err), HR_ERANGE);
    /* DONE, ERROR */
    hr_msg_done dn = {.n_prompt = 5, .n_gen = 7, .prompt_s = 0.5, .gen_s = 2.0, .gen_tps = 3.5},
                dnd;
    CHECK_EQ(hr_msg_done_encode(&m, &dn, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_done_decode(&h, f + HR_RING_HDR_SIZE, &dnd, err), 0);
    CHECK(dnd.n_prompt == 5 && dnd.n_gen == 7 && dnd.gen_s == 2.0 && dnd.gen_tps == 3.5);
    free(f);
    char text[32];
    CHECK_EQ(hr_msg_error_encode(&m, "cluster not ready", err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_error_decode(&h, f + HR_RING_HDR_SIZE, text, sizeof text, err), 0);
    CHECK_STR(text, "cluster not ready");
    free(f);
}

static void test_msg_refusals(const char *key) {
    char err[HR_ERR_LEN];
    hr_ring_hdr h;
    hr_msg_plan p;
    hr_msg_ready r;
    hr_msg_reject rj;
    hr_msg_join j;
    hr_msg_pair pr;
    const char *plan =
        "{\"plan_id\":1,\"k\":1,\"n_layer\":2,\"n_active\":1,\"index\":0,\"rounds\":[[2]],"
        "\"n_ctx\":8,\"n_batch\":4,\"dtype\":0,\"next\":\"\",\"prefetch\":true,"
        "\"release\":false}";
    h = raw(HR_RING_PLAN, plan);
    CHECK_EQ(hr_msg_plan_decode(&h, plan, &p, err), 0);
    CHECK_EQ(p.n_keys, 0);
    /* KV slots: an integer in [1, HR_MSG_MAX_SEQ] */
    const char *seqs[] = {"0", "65", "2.5", "\"4\""};
    for (int i = 0; i < 4; i++) {
        char bad_seq[512];
        snprintf(bad_seq, sizeof bad_seq, "%.*s,\"n_seq\":%s}", (int)strlen(plan) - 1, plan,
                 seqs[i]);
        h = raw(HR_RING_PLAN, bad_seq);
        CHECK_EQ(hr_msg_plan_decode(&h, bad_seq, &p, err), HR_EFORMAT);
        CHECK(strstr(err, "n_seq") != NULL);
    }
    char ok_seq[512];
    snprintf(ok_seq, sizeof ok_seq, "%.*s,\"n_seq\":64}", (int)strlen(plan) - 1, plan);
    h = raw(HR_RING_PLAN, ok_seq);
    CHECK_EQ(hr_msg_plan_decode(&h, ok_seq, &p, err), 0);
    CHECK_EQ(p.n_seq, 64);
    /* wrong kind: the same payload under another type */
    h = raw(HR_RING_READY, plan);
    CHECK_EQ(hr_msg_plan_decode(&h, plan, &p, err), HR_EFORMAT);
    /* oversize: over the table's limit even when the bytes are there */
    h = raw(HR_RING_PLAN, plan);
    h.len = hr_msg_info_of(HR_RING_PLAN)->max_len + 1;
    CHECK_EQ(hr_msg_plan_decode(&h, plan, &p, err), HR_EFORMAT);
    CHECK(strstr(err, "limit") != NULL);
    /* missing and mistyped fields */
    const char *nok = "{\"plan_id\":1,\"k\":1}";
    h = raw(HR_RING_PLAN, nok);
    CHECK_EQ(hr_msg_plan_decode(&h, nok, &p, err), HR_EFORMAT);
    const char *badnext =
        "{\"plan_id\":1,\"k\":1,\"n_layer\":2,\"n_active\":1,\"index\":0,\"rounds\":[[2]],"
        "\"n_ctx\":8,\"n_batch\":4,\"dtype\":0,\"next\":5,\"prefetch\":true,"
        "\"release\":false}";
    h = raw(HR_RING_PLAN, badnext);
    CHECK_EQ(hr_msg_plan_decode(&h, badnext, &p, err), HR_EFORMAT);
    CHECK(strstr(err, "next") != NULL);
    const char *negid =
        "{\"plan_id\":-1,\"k\":1,\"n_layer\":2,\"n_active\":1,\"index\":0,\"rounds\":[[2]],"
        "\"n_ctx\":8,\"n_batch\":4,\"dtype\":0,\"next\":\"\",\"prefetch\":true,"
        "\"release\":false}";
    h = raw(HR_RING_PLAN, negid);
    CHECK_EQ(hr_msg_plan_decode(&h, negid, &p, err), HR_EFORMAT);
    h = raw(HR_RING_PLAN, "[1,2]");
    CHECK_EQ(hr_msg_plan_decode(&h, "[1,2]", &p, err), HR_EFORMAT);
    h = raw(HR_RING_PLAN, "{\"plan_id\"");
    CHECK_EQ(hr_msg_plan_decode(&h, "{\"plan_id\"", &p, err), HR_EFORMAT);
    /* READY needs a real boolean: the old prefix test no longer applies */
    h = raw(HR_RING_READY, "{\"ok\":\"true\"}");
    CHECK_EQ(hr_msg_ready_decode(&h, "{\"ok\":\"true\"}", &r, err), HR_EFORMAT);
    h = raw(HR_RING_READY, "{\"error\":\"x\"}");
    CHECK_EQ(hr_msg_ready_decode(&h, "{\"error\":\"x\"}", &r, err), HR_EFORMAT);
    h = raw(HR_RING_READY, "{\"ok\":false}");
    CHECK_EQ(hr_msg_ready_decode(&h, "{\"ok\":false}", &r, err), 0);
    CHECK(!r.ok && r.error[0]);
    /* REJECT needs fatal and a reason */
    h = raw(HR_RING_REJECT, "{\"fatal\":true}");
    CHECK_EQ(hr_msg_reject_decode(&h, "{\"fatal\":true}", &rj, err), HR_EFORMAT);
    h = raw(HR_RING_REJECT, "refused");
    CHECK_EQ(hr_msg_reject_decode(&h, "refused", &rj, err), HR_EFORMAT);
    /* JOIN: required fields, hash format, field sizes */
    const char *j0 = "{\"version\":2,\"name\":\"a\",\"ctrl\":\"c\",\"data\":\"d\","
                     "\"model_size\":10,\"model_hash\":\"xyz\"}";
    h = raw(HR_RING_JOIN, j0);
    CHECK_EQ(hr_msg_join_decode(&h, j0, &j, err), HR_EFORMAT);
    CHECK(strstr(err, "model_hash") != NULL);
    h = raw(HR_RING_JOIN, "{}");
    CHECK_EQ(hr_msg_join_decode(&h, "{}", &j, err), HR_EFORMAT);
    char longname[400];
    snprintf(longname, sizeof longname,
             "{\"version\":2,\"name\":\"%0100d\",\"ctrl\":\"c\",\"data\":\"d\","
             "\"model_size\":10,\"model_hash\":\"0123456789abcdef\"}",
             0);
    h = raw(HR_RING_JOIN, longname);
    CHECK_EQ(hr_msg_join_decode(&h, longname, &j, err), HR_EFORMAT);
    CHECK(strstr(err, "name") != NULL);
    /* PAIR: the key must be a key */
    char pair[200];
    snprintf(pair, sizeof pair, "{\"name\":\"n\",\"pubkey\":\"%s\"}", key);
    h = raw(HR_RING_PAIR, pair);
    CHECK_EQ(hr_msg_pair_decode(&h, pair, &pr, err), 0);
    h = raw(HR_RING_PAIR, "{\"name\":\"n\",\"pubkey\":\"short\"}");
    CHECK_EQ(hr_msg_pair_decode(&h, "{\"name\":\"n\",\"pubkey\":\"short\"}", &pr, err), HR_EFORMAT);
    /* TOKEN shorter than its id; ERROR with a NUL */
    hr_msg_token tk;
    h = (hr_ring_hdr){.type = HR_RING_TOKEN, .len = 3};
    CHECK_EQ(hr_msg_token_decode(&h, "abc", &tk, err), HR_EFORMAT);
    char text[8];
    h = (hr_ring_hdr){.type = HR_RING_ERROR, .len = 3};
    CHECK_EQ(hr_msg_error_decode(&h, "a\0b", text, sizeof text, err), HR_EFORMAT);
}

/* PROBE / LINK round trips, JOIN's echo endpoint, and the figures no
 * link gives refused at decode. */
static void test_msg_links(const char *key) {
    char err[HR_ERR_LEN] = "";
    hr_msg m;
    hr_ring_hdr h;
    uint8_t *f;
    hr_msg_probe pr = {.plan_id = 7}, prd;
    snprintf(pr.to, sizeof pr.to, "tcp://10.0.0.3:41234");
    snprintf(pr.key, sizeof pr.key, "%s", key);
    snprintf(pr.name, sizeof pr.name, "desk");
    CHECK_EQ(hr_msg_probe_encode(&m, &pr, err), 0);
    CHECK_EQ(m.h.type, HR_RING_PROBE);
    CHECK_EQ(m.h.plan_id, 7);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_probe_decode(&h, f + HR_RING_HDR_SIZE, &prd, err), 0);
    CHECK_STR(prd.to, pr.to);
    CHECK_STR(prd.key, key);
    CHECK_STR(prd.name, "desk");
    CHECK_EQ(prd.plan_id, 7);
    free(f);
    hr_msg_link lk = {.plan_id = 3,
                      .rtt_us = 180.5,
                      .rtt_min_us = 120.25,
                      .bw_mbs = 11.75,
                      .msg_bytes = 8192,
                      .burst_bytes = 262144,
                      .samples = 10},
                lkd;
    snprintf(lk.to, sizeof lk.to, "tcp://10.0.0.3:41234");
    CHECK_EQ(hr_msg_link_encode(&m, &lk, err), 0);
    CHECK_EQ(m.h.type, HR_RING_LINK);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_link_decode(&h, f + HR_RING_HDR_SIZE, &lkd, err), 0);
    CHECK_STR(lkd.to, lk.to);
    CHECK_EQ(lkd.plan_id, 3);
    CHECK(lkd.rtt_us == 180.5 && lkd.rtt_min_us == 120.25 && lkd.bw_mbs == 11.75);
    CHECK(lkd.msg_bytes == 8192 && lkd.burst_bytes == 262144 && lkd.samples == 10);
    free(f);
    CHECK(hr_msg_info_of(HR_RING_LINK)->flags & HR_MSG_F_KNOWN);
    /* JOIN carries the responder's endpoint; absent means none */
    hr_msg_join j = {.version = HR_RING_VERSION, .model_hash = 1, .model_size = 2}, jd;
    snprintf(j.name, sizeof j.name, "n");
    snprintf(j.ctrl, sizeof j.ctrl, "tcp://10.0.0.2:7700");
    snprintf(j.data, sizeof j.data, "tcp://10.0.0.2:7701");
    snprintf(j.echo, sizeof j.echo, "tcp://10.0.0.2:40001");
    CHECK_EQ(hr_msg_join_encode(&m, &j, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_join_decode(&h, f + HR_RING_HDR_SIZE, &jd, err), 0);
    CHECK_STR(jd.echo, j.echo);
    hr_msg_join_clear(&jd);
    free(f);
    /* refusals: every bad figure, a stray field, a non-tcp endpoint */
    const char *bad[] = {
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":0,\"rtt_min_us\":1,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":-5,\"rtt_min_us\":1,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":200,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":0,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":2e6,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":7e7,\"rtt_min_us\":50,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":0}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":-1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"ipc://x\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":\"100\",\"rtt_min_us\":50,"
        "\"bw_mbs\":1,\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1,\"extra\":1}",
        "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,\"bw_mbs\":1,"
        "\"msg_bytes\":8,\"samples\":1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h = raw(HR_RING_LINK, bad[i]);
        int rc = hr_msg_link_decode(&h, bad[i], &lkd, err);
        if (rc != HR_EFORMAT)
            fprintf(stderr, "LINK %zu accepted: %s\n", i, bad[i]);
        CHECK_EQ(rc, HR_EFORMAT);
    }
    const char *good = "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"rtt_us\":100,\"rtt_min_us\":50,"
                       "\"bw_mbs\":1,\"msg_bytes\":8,\"burst_bytes\":8,\"samples\":1}";
    h = raw(HR_RING_LINK, good);
    CHECK_EQ(hr_msg_link_decode(&h, good, &lkd, err), 0);
    h = raw(HR_RING_PROBE, good); /* a LINK payload is no PROBE */
    CHECK_EQ(hr_msg_probe_decode(&h, good, &prd, err), HR_EFORMAT);
    const char *pbad[] = {"{\"to\":\"tcp://h:1\"}", "{\"to\":\"h:1\",\"plan_id\":1}",
                          "{\"to\":\"tcp://h:1\",\"plan_id\":1,\"key\":\"short\"}",
                          "{\"to\":\"tcp://h:1\",\"plan_id\":5000000000}"};
    for (size_t i = 0; i < sizeof pbad / sizeof pbad[0]; i++) {
        h = raw(HR_RING_PROBE, pbad[i]);
        CHECK_EQ(hr_msg_probe_decode(&h, pbad[i], &prd, err), HR_EFORMAT);
    }
}

static void test_messages(void) {
    char pub[41], sec[41];
    CHECK_EQ(zmq_curve_keypair(pub, sec), 0);
    CHECK(hr_ring_key_valid(pub));
    test_msg_table();
    test_msg_roundtrip(pub);
    test_msg_refusals(pub);
    test_msg_links(pub);
}

/* A PLAN of hand-written JSON, its "rounds" and index replaced. */
static int plan_json(const char *rounds, int k, int n_active, int index, hr_msg_plan *pd,
                     char *err) {
    char js[1024];
    snprintf(js, sizeof js,
             "{\"plan_id\":7,\"k\":%d,\"n_layer\":10,\"n_active\":%d,\"index\":%d,"
             "\"rounds\":%s,\"n_ctx\":256,\"n_batch\":8,\"dtype\":%d,\"next\":\"\","
             "\"next_key\":\"\",\"prefetch\":true,\"release\":false,\"keys\":[]}",
             k, n_active, index, rounds, HR_RING_F32);
    hr_ring_hdr h = {.type = HR_RING_PLAN, .plan_id = 7, .len = (uint32_t)strlen(js)};
    return hr_msg_plan_decode(&h, js, pd, err);
}

/* Rounds with their own windows: round trip, windows in ring order round
 * after round, and windows that do not cover the layers once refused. */
static void test_plan_rounds(void) {
    char err[HR_ERR_LEN];
    hr_msg_plan p = {.plan_id = 9,
                     .k = 3,
                     .n_layer = 10,
                     .n_active = 3,
                     .index = 2,
                     .win = {{2, 1, 1}, {1, 2, 0}, {0, 1, 2}},
                     .n_ctx = 256,
                     .n_batch = 8,
                     .dtype = HR_RING_F32,
                     .n_gpu = 2};
    hr_msg m;
    hr_ring_hdr h;
    CHECK_EQ(hr_msg_plan_encode(&m, &p, err), 0);
    uint8_t *f = roundtrip(&m, &h);
    hr_msg_plan pd;
    CHECK_EQ(hr_msg_plan_decode(&h, f + HR_RING_HDR_SIZE, &pd, err), 0);
    free(f);
    CHECK(pd.k == 3 && pd.n_layer == 10 && pd.n_active == 3 && pd.index == 2 && pd.n_gpu == 2);
    CHECK_EQ(memcmp(pd.win, p.win, sizeof p.win), 0);
    /* position 2: 3-3 in round 0, none in round 1 (it starts at 7), 8-9 in round 2 */
    const int want_first[3] = {3, 7, 8}, want_count[3] = {1, 0, 2};
    for (int r = 0; r < 3; r++) {
        int first = -1, count = -1;
        CHECK_EQ(hr_msg_plan_window(&pd, 2, r, &first, &count), 0);
        CHECK_EQ(first, want_first[r]);
        CHECK_EQ(count, want_count[r]);
    }
    int first, count;
    CHECK_EQ(hr_msg_plan_window(&pd, 3, 0, &first, &count), HR_EINVAL);
    CHECK_EQ(hr_msg_plan_window(&pd, 0, 3, &first, &count), HR_EINVAL);
    /* a device out of the ring gets the table and no position */
    CHECK_EQ(plan_json("[[4,6]]", 1, 2, -1, &pd, err), 0);
    CHECK_EQ(pd.index, -1);
    /* the same, hand-written, is accepted; each fault is refused */
    CHECK_EQ(plan_json("[[2,1,1],[1,2,0],[0,1,2]]", 3, 3, 2, &pd, err), 0);
    static const struct {
        const char *rounds, *why;
        int k, n_active, index;
    } bad[] = {
        {"[[2,1,1],[1,2,0],[0,1,1]]", "cover 9 layers", 3, 3, 0},  /* a gap: layer 9 left out */
        {"[[2,1,1],[1,2,0],[0,2,2]]", "cover 11 layers", 3, 3, 0}, /* overlap: 11 for 10 */
        {"[[2,1,1],[1,2,0],[0,1,-2],[0,0,4]]", "k = 3", 3, 3, 0},  /* more rows than k */
        {"[[2,1,1],[1,2,0],[0,-1,4]]", "not in 0..10", 3, 3, 0},   /* a negative count */
        {"[[2,1,1],[1,2,0],[0,1,11]]", "not in 0..10", 3, 3, 0},   /* out of range */
        {"[[2,1,1],[1,2,0],[0,1,1.5]]", "not in 0..10", 3, 3, 0},  /* not an integer */
        {"[[2,1,1],[1,2,0]]", "k = 3", 3, 3, 0},                   /* fewer rows than k */
        {"[[2,1,1],[1,2],[0,1,3]]", "list 3 windows", 3, 3, 0},    /* a short row */
        {"[[5,5]]", "position 2", 1, 2, 2},                        /* index past the ring */
        {"{\"r\":1}", "array of k", 1, 2, 0},                      /* not rows */
        {"[[1],[1],[1],[1],[1],[1],[1],[1],[1],[1],[0],[0],[0],[0],[0],[0],[0]]", "k 17", 17, 1,
         0}, /* too many rounds */
        {"[[1,1,1,1,1,1,1,1,1,1,0,0,0,0,0,0,0]]", "17 ring members", 1, 17, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK_EQ(plan_json(bad[i].rounds, bad[i].k, bad[i].n_active, bad[i].index, &pd, err),
                 HR_EFORMAT);
        if (!strstr(err, bad[i].why))
            fprintf(stderr, "bad PLAN %zu: '%s' does not say '%s'\n", i, err, bad[i].why);
        CHECK(strstr(err, bad[i].why) != NULL);
    }
    /* n_gpu beyond the device's largest window */
    p.n_gpu = 3;
    CHECK_EQ(hr_msg_plan_encode(&m, &p, err), 0);
    f = roundtrip(&m, &h);
    CHECK_EQ(hr_msg_plan_decode(&h, f + HR_RING_HDR_SIZE, &pd, err), HR_EFORMAT);
    free(f);
    /* the largest PLAN: every round of every ring member (16 layers each:
     * 4096 in all), every key and the longest endpoints, within the table's
     * limit */
    static hr_msg_plan big;
    big = (hr_msg_plan){.plan_id = 1,
                        .k = HR_MSG_MAX_ROUNDS,
                        .n_layer = HR_MSG_MAX_LAYER,
                        .n_active = HR_MSG_MAX_RING,
                        .index = HR_MSG_MAX_RING - 1,
                        .n_ctx = 1 << 20,
                        .n_batch = 4096,
                        .dtype = HR_RING_F32,
                        .n_keys = HR_MSG_MAX_KEYS,
                        .mem_budget = 1e15,
                        .n_seq = HR_MSG_MAX_SEQ};
    for (int r = 0; r < HR_MSG_MAX_ROUNDS; r++)
        for (int j = 0; j < HR_MSG_MAX_RING; j++)
            big.win[r][j] = HR_MSG_MAX_LAYER / (HR_MSG_MAX_ROUNDS * HR_MSG_MAX_RING);
    memset(big.next, 'n', sizeof big.next - 1);
    memset(big.next_key, 'k', sizeof big.next_key - 1);
    for (int i = 0; i < HR_MSG_MAX_KEYS; i++)
        memset(big.keys[i], 'k', HR_RING_KEY_LEN - 1);
    CHECK_EQ(hr_msg_plan_encode(&m, &big, err), 0);
    CHECK(m.h.len <= hr_msg_info_of(HR_RING_PLAN)->max_len);
    CHECK_EQ(hr_msg_plan_decode(&m.h, m.data, &pd, err), 0);
    CHECK(pd.k == HR_MSG_MAX_ROUNDS && pd.n_active == HR_MSG_MAX_RING);
    hr_msg_clear(&m);
    /* encode refuses what it could not describe */
    p.k = HR_MSG_MAX_ROUNDS + 1;
    CHECK_EQ(hr_msg_plan_encode(&m, &p, err), HR_EINVAL);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    test_header();
    test_batch_frame();
    test_pack();
    test_endpoint();
    test_sockets();
    test_curve();
    test_messages();
    test_plan_rounds();
    return hr_check_finish("ring");
}
