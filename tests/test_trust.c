/* test_trust.c - security and recovery of a local cluster:
 *  - keys: made on first use with mode 0600, stable, trust add / lookup;
 *  - a worker that trusts no head key knocks: the head logs its name, key
 *    fingerprint and the commands that pair it once, never admits it, and
 *    limits what made-up and malformed knocks get logged;
 *  - a rogue with an untrusted key (knowing the head's public key) cannot
 *    join, gets no answer on the control port, and its forged hidden states
 *    on the data ports are never processed; plaintext peers neither; the
 *    head counts (and logs) the refusals; generation stays exact meanwhile;
 *  - recovery: a worker leaves in the middle of a seeded sampled generation
 *    (F32 wire); the head re-plans over the remaining devices, replays the
 *    token history and the tokens equal the single-process run; the worker
 *    comes back and is planned in at the next request;
 *  - no feasible plan after a loss (forced windows): a clear error. */
#include "agent/agent.h"
#include "common/log.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "ring/knock.h"
#include "ring/ring.h"

#include "harness.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define N_GEN 40
#define N_CTX 256

static char g_tmp[256];

static int agent_start(agent_th *t, const char *model, const char *name, const char *key_dir,
                       const char *head, const char *head_key, int expect, const char *windows) {
    hr_agent_params p = agent_params(model, name, head, N_CTX, expect);
    p.head_key = head_key;
    p.key_dir = key_dir;
    p.k = 1;
    p.windows = windows;
    p.wire_dtype = HR_RING_F32;
    p.hb_interval_ms = 100;
    p.hb_timeout_ms = 1000;
    return agent_begin(t, &p);
}

static void key_dir(char *out, size_t cap, const char *who) {
    snprintf(out, cap, "%s/%s", g_tmp, who);
}

static void pubkey_of(const char *dir, char out[HR_RING_KEY_LEN]) {
    char err[HR_ERR_LEN];
    hr_ring_keys *k = NULL;
    out[0] = 0;
    if (hr_ring_keys_open(&k, dir, err) == 0)
        snprintf(out, HR_RING_KEY_LEN, "%s", hr_ring_keys_public(k));
    hr_ring_keys_close(k);
}

static int status_n_devices(hr_agent *head, int *n_ring) {
    json_t *j = head_status(head);
    json_t *devs = json_object_get(j, "devices"), *d;
    size_t i;
    int n = 0;
    *n_ring = 0;
    json_array_foreach(devs, i, d) {
        if (json_is_true(json_object_get(d, "lost")))
            continue;
        n++;
        *n_ring += json_integer_value(json_object_get(d, "ring_pos")) >= 0;
    }
    json_decref(j);
    return n;
}

/* ---- keys ---- */

static void test_keys(void) {
    char dir[300], err[HR_ERR_LEN];
    key_dir(dir, sizeof dir, "k1");
    hr_ring_keys *k = NULL;
    CHECK_EQ(hr_ring_keys_open(&k, dir, err), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/key", dir);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    char pub[HR_RING_KEY_LEN];
    snprintf(pub, sizeof pub, "%s", hr_ring_keys_public(k));
    CHECK(hr_ring_key_valid(pub));
    hr_ring_keys_close(k);
    CHECK_EQ(hr_ring_keys_open(&k, dir, err), 0); /* same key again */
    CHECK(strcmp(pub, hr_ring_keys_public(k)) == 0);
    char other[300], opub[HR_RING_KEY_LEN], got[HR_RING_KEY_LEN];
    key_dir(other, sizeof other, "k2");
    pubkey_of(other, opub);
    CHECK(strcmp(pub, opub) != 0);
    CHECK_EQ(hr_ring_keys_lookup(k, "friend", got), HR_ENOENT);
    CHECK_EQ(hr_ring_trust_add(dir, "friend", opub, err), 0);
    CHECK_EQ(hr_ring_keys_lookup(k, "friend", got), 0);
    CHECK(strcmp(got, opub) == 0);
    CHECK_EQ(hr_ring_trust_add(dir, "friend", pub, err), 0); /* replaced by name */
    CHECK_EQ(hr_ring_keys_lookup(k, "friend", got), 0);
    CHECK(strcmp(got, pub) == 0);
    CHECK_EQ(hr_ring_trust_add(dir, "bad", "not-a-key", err), HR_EINVAL);
    CHECK_EQ(hr_ring_trust_add(dir, "has space", opub, err), HR_EINVAL);
    hr_ring_keys_close(k);
}

/* ---- a worker that trusts no head key (knock) ---- */

/* Bytes of path (up to cap - 1, NUL-terminated). */
static size_t read_text(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    return n;
}

static int count_of(const char *s, const char *what) {
    int n = 0;
    for (const char *q = s; (q = strstr(q, what)); q++)
        n++;
    return n;
}

/* Sends one knock to 127.0.0.1:port: a made-up key when key is NULL. */
static void knock_send(int fd, int port, const char *name, const char *key) {
    hr_knock k = {.proto = HR_RING_VERSION};
    char pub[HR_RING_KEY_LEN], sec[HR_RING_KEY_LEN];
    if (!key && zmq_curve_keypair(pub, sec) == 0)
        key = pub;
    snprintf(k.key, sizeof k.key, "%s", key ? key : "");
    snprintf(k.name, sizeof k.name, "%s", name);
    hr_beacon_fingerprint(k.key, k.head_fp); /* it trusts no head key */
    uint8_t buf[HR_KNOCK_MAX];
    int n = hr_knock_encode(&k, buf, sizeof buf);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(n > 0);
    if (n > 0)
        CHECK_EQ(sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&to, sizeof to), n);
}

/* A worker started with the head's address but no head key cannot finish a
 * CURVE handshake, so the head never saw its key: it knocks, and the head
 * logs its name, key fingerprint and the commands that pair it once, while
 * the worker says after 10 s that the head did not accept it; it is never
 * admitted. Made-up knocks get a few lines a minute and one that says so;
 * malformed ones are counted; a name is cleaned before it is logged. */
static void test_knock(const char *model) {
    int failed = hr_check_failed_;
    char hd[300], wd[300], wpub[HR_RING_KEY_LEN], log[400];
    key_dir(hd, sizeof hd, "knock-head");
    key_dir(wd, sizeof wd, "knock-worker");
    pubkey_of(wd, wpub);
    uint8_t fp[HR_BEACON_FP_LEN];
    char fph[2 * HR_BEACON_FP_LEN + 1], want_cmd[400], want_dev[64] = "device 'kn-w1' at ";
    hr_beacon_fingerprint(wpub, fp);
    hr_beacon_fp_hex(fp, fph);
    snprintf(want_cmd, sizeof want_cmd, "hearth trust add kn-w1 '%s' --key-dir '%s'", wpub, hd);
    /* the agents' log lines go to a file for the time of this test */
    snprintf(log, sizeof log, "%s/knock.log", g_tmp);
    fflush(stderr);
    int saved = dup(2), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && lf >= 0);
    dup2(lf, 2);
    close(lf);
    hr_log_set_level(HR_LOG_LEVEL_WARN);
    agent_th h = {0}, w = {0};
    hr_agent_params hp = agent_params(model, "kn-head", NULL, N_CTX, 0);
    hp.key_dir = hd;
    hp.no_discovery = true;
    int rc = agent_begin(&h, &hp);
    if (rc == 0)
        rc = head_ready(h.a, 0, 20000);
    const char *hep = rc == 0 ? hr_agent_endpoint(h.a) : NULL;
    hr_agent_params wp = agent_params(model, "kn-w1", hep, N_CTX, 0);
    wp.key_dir = wd;
    double t0 = now_s();
    if (rc == 0)
        rc = agent_begin(&w, &wp);
    /* the head's line comes with the first JOIN's knock */
    static char text[1 << 16];
    double t_line = -1;
    while (rc == 0 && now_s() - t0 < 5.0 && t_line < 0) {
        read_text(log, text, sizeof text);
        if (strstr(text, want_dev) && strstr(text, want_cmd))
            t_line = now_s() - t0;
        sleep_ms(50);
    }
    /* the worker's 10 s message, after four more JOINs and knocks */
    while (rc == 0 && now_s() - t0 < 20.0 &&
           !strstr(read_text(log, text, sizeof text) ? text : "", "has not accepted this device"))
        sleep_ms(100);
    json_t *st = rc == 0 ? head_status(h.a) : NULL;
    bool admitted = dev_named(st, "kn-w1") != NULL;
    json_decref(st);
    /* made-up knocks: a name with a terminal escape and a newline, twenty
     * random keys, and malformed datagrams */
    int fd = socket(AF_INET, SOCK_DGRAM, 0), port = 0;
    const char *colon = hep ? strrchr(hep, ':') : NULL;
    if (colon)
        port = atoi(colon + 1);
    CHECK(fd >= 0 && port > 0);
    knock_send(fd, port, "\x1b[31mevil\nname", NULL);
    for (int i = 0; i < 20; i++)
        knock_send(fd, port, "flood", NULL);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char *junk[] = {"HRKN", "HRKN\x01\x00\x01\x00garbage\x1b[2J", "not a knock at all"};
    for (int i = 0; i < 3; i++)
        sendto(fd, junk[i], strlen(junk[i]), 0, (struct sockaddr *)&to, sizeof to);
    close(fd);
    sleep_ms(1000);
    st = rc == 0 ? head_status(h.a) : NULL;
    admitted |= dev_named(st, "kn-w1") != NULL;
    json_decref(st);
    agent_end(&w);
    agent_end(&h);
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    read_text(log, text, sizeof text);
    printf("knock: head line after %.2f s\n", t_line);
    CHECK_EQ(rc, 0);
    CHECK(t_line >= 0 && t_line < 5.0);
    CHECK_EQ(count_of(text, want_dev), 1); /* once, though it knocked with each of 5 JOINs */
    CHECK(strstr(text, fph) != NULL);
    CHECK(strstr(text, "it trusts no head key") != NULL);
    CHECK(strstr(text, "--join TOKEN") != NULL);
    CHECK(strstr(text, "has not accepted this device in 1") != NULL);
    CHECK(!admitted);
    /* the escape and the newline are gone; 8 keys a minute get their line */
    CHECK(strstr(text, "device '__31mevil_name' at ") != NULL);
    CHECK(strchr(text, '\x1b') == NULL);
    CHECK_EQ(count_of(text, "asks to join"), 8);
    CHECK_EQ(count_of(text, "more than 8 untrusted keys tried to join within a minute"), 1);
    CHECK(strstr(text, "malformed knocks") != NULL);
    if (hr_check_failed_ > failed)
        fprintf(stderr, "knock log:\n%s\n", text);
}

/* ---- generation helpers ---- */

typedef struct {
    int32_t ids[N_GEN + 8];
    int n;
    agent_th *victim; /* stopped after stop_at tokens (NULL: none) */
    int stop_at;
} gen_out;

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    gen_out *g = ud;
    if (id >= 0 && g->n < N_GEN + 8)
        g->ids[g->n++] = id;
    if (g->victim && g->n == g->stop_at)
        agent_end(g->victim); /* leaves mid-request (its next frame never comes) */
    return 0;
}

static hr_sampler_params sampling(void) {
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0.8f;
    sp.seed = 1234;
    return sp;
}

/* The same steps as `hearth run` with the same sampler on one process. */
static int ref_generate(const char *model, const int32_t *ids, int n, gen_out *out) {
    hr_sampler_params sp = sampling();
    return ref_generate_ids(model, N_CTX, &sp, true, ids, n, N_GEN, out->ids, &out->n);
}

static int generate(hr_agent *head, const int32_t *ids, int n, gen_out *out, char *err) {
    hr_sampler_params sp = sampling();
    out->n = 0;
    return hr_head_generate(head, ids, n, &sp, N_GEN, on_tok, out, NULL, NULL, err);
}

static bool same(const gen_out *a, const gen_out *b) {
    return a->n == b->n && memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n) == 0;
}

/* ---- rogue peers ---- */

typedef struct {
    const char *eps[4];
    const char *keys[4]; /* server keys the rogue uses (the real ones: public) */
    int n;
    const char *dir; /* rogue's own key folder */
    atomic_int stop;
    int sent, answers;
} rogue_t;

static void *rogue_main(void *arg) {
    rogue_t *r = arg;
    char err[HR_ERR_LEN];
    hr_ring_keys *k = NULL;
    if (hr_ring_keys_open(&k, r->dir, err))
        return NULL;
    void *z = zmq_ctx_new();
    void *s[8];
    int ns = 0;
    for (int i = 0; i < r->n; i++) {
        bool data = strstr(r->eps[i], "#data") != NULL;
        char ep[160];
        snprintf(ep, sizeof ep, "%s", r->eps[i]);
        char *hash = strchr(ep, '#');
        if (hash)
            *hash = 0;
        for (int sec = 0; sec < 2; sec++) { /* CURVE with an untrusted key, and plaintext */
            void *so = hr_ring_socket(z, data ? ZMQ_PUSH : ZMQ_DEALER, NULL, err);
            int tmo = 0;
            zmq_setsockopt(so, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
            if (sec == 0)
                hr_ring_secure_client(so, k, r->keys[i], err);
            zmq_connect(so, ep);
            s[ns++] = so;
        }
    }
    uint8_t buf[HR_RING_HDR_SIZE + 4096];
    while (!atomic_load(&r->stop)) {
        for (int i = 0; i < ns; i++) {
            hr_ring_hdr h = {.type = HR_RING_STATUS_REQ, .pos = -1};
            hr_ring_hdr_write(buf, &h);
            zmq_send(s[i], buf, HR_RING_HDR_SIZE, ZMQ_DONTWAIT);
            h = (hr_ring_hdr){.type = HR_RING_JOIN, .pos = -1, .len = 2};
            hr_ring_hdr_write(buf, &h);
            memcpy(buf + HR_RING_HDR_SIZE, "{}", 2);
            zmq_send(s[i], buf, HR_RING_HDR_SIZE + 2, ZMQ_DONTWAIT);
            for (uint32_t plan = 0; plan < 4; plan++) { /* plausible data frames */
                h = (hr_ring_hdr){.type = HR_RING_BATCH,
                                  .dtype = HR_RING_F32,
                                  .n_tok = 1,
                                  .pos = 1,
                                  .plan_id = plan,
                                  .req_id = 1 + plan,
                                  .len = 4096};
                hr_ring_hdr_write(buf, &h);
                zmq_send(s[i], buf, HR_RING_HDR_SIZE + 4096, ZMQ_DONTWAIT);
            }
            r->sent += 6;
            zmq_pollitem_t it = {.socket = s[i], .events = ZMQ_POLLIN};
            if (zmq_poll(&it, 1, 0) > 0 && (it.revents & ZMQ_POLLIN)) {
                zmq_recv(s[i], buf, sizeof buf, ZMQ_DONTWAIT);
                r->answers++;
            }
        }
        sleep_ms(20);
    }
    for (int i = 0; i < ns; i++)
        zmq_close(s[i]);
    zmq_ctx_term(z);
    hr_ring_keys_close(k);
    return NULL;
}

static void test_rogue(const char *model, const int32_t *prompt, int n_prompt, const gen_out *ref) {
    char hd[300], wd[300], rd[300], hpub[HR_RING_KEY_LEN], wpub[HR_RING_KEY_LEN], err[HR_ERR_LEN];
    key_dir(hd, sizeof hd, "head");
    key_dir(wd, sizeof wd, "worker");
    key_dir(rd, sizeof rd, "rogue");
    pubkey_of(hd, hpub);
    pubkey_of(wd, wpub);
    CHECK_EQ(hr_ring_trust_add(hd, "worker", wpub, err), 0); /* pairing */
    CHECK_EQ(hr_ring_trust_add(wd, "head", hpub, err), 0);
    agent_th h, w, rogue;
    CHECK_EQ(agent_start(&h, model, "head", hd, NULL, NULL, 1, NULL), 0);
    CHECK_EQ(agent_start(&w, model, "worker", wd, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(hr_head_wait_ready(h.a, 1, 20000, err), 0);
    /* a rogue agent that knows the head's public key tries to join */
    CHECK_EQ(agent_start(&rogue, model, "rogue", rd, hr_agent_endpoint(h.a), hpub, 0, NULL), 0);
    rogue_t r = {.n = 0, .dir = rd};
    char eps[4][200];
    snprintf(eps[0], 200, "%s", hr_agent_endpoint(h.a));
    snprintf(eps[1], 200, "%s#data", hr_agent_data_endpoint(h.a));
    snprintf(eps[2], 200, "%s", hr_agent_endpoint(w.a));
    snprintf(eps[3], 200, "%s#data", hr_agent_data_endpoint(w.a));
    const char *keys[4] = {hpub, hpub, wpub, wpub};
    for (int i = 0; i < 4; i++) {
        r.eps[i] = eps[i];
        r.keys[i] = keys[i];
        r.n++;
    }
    pthread_t th;
    pthread_create(&th, NULL, rogue_main, &r);
    int ok = 0;
    for (int rep = 0; rep < 3; rep++) {
        gen_out out = {0};
        if (generate(h.a, prompt, n_prompt, &out, err) == 0 && same(&out, ref))
            ok++;
    }
    sleep_ms(1500);
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    int n_ring = 0;
    int n_dev = status_n_devices(h.a, &n_ring);
    int refused = status_int(h.a, "auth_refused");
    printf("rogue: %d frames sent, %d answers; head refused %d handshakes; %d devices (%d in "
           "ring); %d/3 exact generations meanwhile\n",
           r.sent, r.answers, refused, n_dev, n_ring, ok);
    CHECK_EQ(r.answers, 0);
    CHECK_EQ(n_dev, 2);
    CHECK_EQ(n_ring, 2);
    CHECK(refused > 0);
    CHECK_EQ(ok, 3);
    agent_end(&rogue);
    /* once trusted, the same agent joins */
    char rpub[HR_RING_KEY_LEN];
    pubkey_of(rd, rpub);
    CHECK_EQ(hr_ring_trust_add(hd, "guest", rpub, err), 0);
    CHECK_EQ(agent_start(&rogue, model, "guest", rd, hr_agent_endpoint(h.a), hpub, 0, NULL), 0);
    CHECK_EQ(hr_head_wait_ready(h.a, 2, 20000, err), 0);
    n_dev = status_n_devices(h.a, &n_ring);
    CHECK_EQ(n_dev, 3);
    gen_out out = {0};
    CHECK_EQ(generate(h.a, prompt, n_prompt, &out, err), 0);
    CHECK(same(&out, ref)); /* worker and guest never trusted each other: the head vouches */
    agent_end(&rogue);
    /* first pairing by the head's join token: a new agent with a new key.
     * The token is rotated first (`hearth key rotate-join` on the head's
     * machine, another process's handle): the old one no longer pairs with
     * the running head, the new one does. */
    const char *old_tok = hr_agent_join_token(h.a);
    CHECK_EQ(strlen(old_tok), 83);
    char tok[96] = "";
    {
        hr_ring_keys *rk = NULL;
        CHECK_EQ(hr_ring_keys_open(&rk, hd, err), 0);
        CHECK_EQ(hr_ring_keys_join_rotate(rk, 3600, tok, sizeof tok, err), 0);
        long long exp = hr_ring_keys_join_expires(rk);
        CHECK(exp > (long long)time(NULL) + 3500 && exp <= (long long)time(NULL) + 3600);
        hr_ring_keys_close(rk);
    }
    CHECK_EQ(strlen(tok), 83);
    CHECK(strcmp(tok, old_tok) != 0);
    CHECK(strncmp(tok, old_tok, 43) == 0); /* the same head key, a new pairing secret */
    {
        agent_th stale;
        char sd[300];
        key_dir(sd, sizeof sd, "stale");
        memset(&stale, 0, sizeof stale);
        hr_agent_params sp = hr_agent_params_default();
        sp.model_path = model;
        sp.listen = "127.0.0.1:0";
        sp.head = hr_agent_endpoint(h.a);
        sp.key_dir = sd;
        sp.join = old_tok;
        sp.name = "stale";
        CHECK_EQ(agent_begin(&stale, &sp), 0);
        pthread_join(stale.th, NULL); /* pairing gives up after 10 s */
        stale.running = false;
        printf("old join token after rotation: %s\n", stale.err);
        CHECK(stale.rc != 0);
        CHECK(strstr(stale.err, "no pairing answer") != NULL);
        hr_agent_destroy(stale.a);
        n_dev = status_n_devices(h.a, &n_ring);
        CHECK_EQ(n_dev, 2);
    }
    agent_th nw;
    char nd[300];
    key_dir(nd, sizeof nd, "newcomer");
    memset(&nw, 0, sizeof nw);
    hr_agent_params p = hr_agent_params_default();
    p.model_path = model;
    p.listen = "127.0.0.1:0";
    p.head = hr_agent_endpoint(h.a);
    p.key_dir = nd;
    p.join = tok;
    p.name = "newcomer";
    p.hb_interval_ms = 100;
    p.hb_timeout_ms = 1000;
    CHECK_EQ(agent_begin(&nw, &p), 0);
    CHECK_EQ(hr_head_wait_ready(h.a, 2, 20000, err), 0);
    n_dev = status_n_devices(h.a, &n_ring);
    printf("join token: newcomer paired and joined; %d devices\n", n_dev);
    CHECK_EQ(n_dev, 3);
    char npub[HR_RING_KEY_LEN], got[HR_RING_KEY_LEN];
    pubkey_of(nd, npub);
    hr_ring_keys *hk = NULL;
    CHECK_EQ(hr_ring_keys_open(&hk, hd, err), 0);
    CHECK(hk && hr_ring_keys_lookup(hk, "newcomer", got) == 0 && strcmp(got, npub) == 0);
    hr_ring_keys_close(hk);
    CHECK_EQ(generate(h.a, prompt, n_prompt, &out, err), 0);
    CHECK(same(&out, ref));
    agent_end(&nw);
    agent_end(&w);
    agent_end(&h);
}

/* ---- recovery ---- */

static void test_recovery(const char *model, const int32_t *prompt, int n_prompt,
                          const gen_out *ref) {
    char dir[300], err[HR_ERR_LEN];
    key_dir(dir, sizeof dir, "shared"); /* one folder: every agent is itself */
    agent_th h, w1, w2;
    CHECK_EQ(agent_start(&h, model, "head", dir, NULL, NULL, 2, NULL), 0);
    CHECK_EQ(agent_start(&w1, model, "w1", dir, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(agent_start(&w2, model, "w2", dir, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(hr_head_wait_ready(h.a, 2, 20000, err), 0);
    gen_out out = {0};
    CHECK_EQ(generate(h.a, prompt, n_prompt, &out, err), 0);
    CHECK(same(&out, ref));
    for (int victim = 0; victim < 2; victim++) {
        agent_th *v = victim ? &w1 : &w2;
        gen_out o2 = {.victim = v, .stop_at = 10 + 5 * victim};
        int rc = generate(h.a, prompt, n_prompt, &o2, err);
        if (rc)
            fprintf(stderr, "recovery: %s\n", err);
        CHECK_EQ(rc, 0);
        printf("recovery: %s left after %d tokens; %d tokens, %s the single-process run\n",
               victim ? "w1" : "w2", o2.stop_at, o2.n, same(&o2, ref) ? "equal to" : "DIFFER from");
        CHECK(same(&o2, ref));
    }
    CHECK(status_int(h.a, "recoveries") >= 2);
    /* both come back: planned in at the next request */
    CHECK_EQ(agent_start(&w2, model, "w2", dir, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(agent_start(&w1, model, "w1", dir, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(hr_head_wait_ready(h.a, 2, 20000, err), 0);
    int n_ring = 0;
    CHECK_EQ(status_n_devices(h.a, &n_ring), 3);
    CHECK_EQ(n_ring, 3);
    CHECK_EQ(generate(h.a, prompt, n_prompt, &out, err), 0);
    CHECK(same(&out, ref));
    agent_end(&w1);
    agent_end(&w2);
    agent_end(&h);
    /* forced windows for 3 devices: after a loss no plan fits */
    CHECK_EQ(agent_start(&h, model, "head", dir, NULL, NULL, 2, "2,1,1"), 0);
    CHECK_EQ(agent_start(&w1, model, "w1", dir, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(agent_start(&w2, model, "w2", dir, hr_agent_endpoint(h.a), NULL, 0, NULL), 0);
    CHECK_EQ(hr_head_wait_ready(h.a, 2, 20000, err), 0);
    gen_out o3 = {.victim = &w2, .stop_at = 5};
    int rc = generate(h.a, prompt, n_prompt, &o3, err);
    printf("infeasible: rc %d: %s\n", rc, err);
    CHECK_EQ(rc, HR_EINFEASIBLE);
    CHECK(strstr(err, "w2") != NULL);
    CHECK(strstr(err, "no feasible plan") != NULL);
    agent_end(&w1);
    agent_end(&h);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hr_test_trust_%d", (int)getpid());
    test_keys();
    char model[512];
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
    test_knock(model);
    hr_gguf *g = NULL;
    hr_tokenizer *tok = NULL;
    char err[HR_ERR_LEN];
    int32_t prompt[64];
    int n_prompt = 0;
    if (hr_gguf_open(&g, model, err) || hr_tokenizer_create(&tok, g, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    hr_tokenizer_encode(tok, "Once upon a time", 16, true, false, prompt, 64, &n_prompt);
    hr_tokenizer_destroy(tok);
    hr_gguf_close(g);
    gen_out ref = {0};
    CHECK_EQ(ref_generate(model, prompt, n_prompt, &ref), 0);
    test_rogue(model, prompt, n_prompt, &ref);
    test_recovery(model, prompt, n_prompt, &ref);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_tmp);
    return hr_check_finish("trust");
}
