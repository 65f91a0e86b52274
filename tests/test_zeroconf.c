/* test_zeroconf.c - a home cluster without typed addresses or copies of the
 * model:
 *  - beacons: encode / parse round trip; every malformed variant (short,
 *    magic, version, lengths, names, endpoints, a trailing byte) refused;
 *  - discovery: a worker without --head joins the one head whose key it
 *    trusts while 10,000 forged beacons (garbage, another key's fingerprint,
 *    another cluster) arrive; its trust list is unchanged and the listener
 *    counted the garbage;
 *  - the cache: chunks put and verified, reopened after a "kill" (closed
 *    without a clean end) without fetching them again; a byte flipped on
 *    disk drops its chunk; the limit evicts whole old windows, refuses
 *    windows larger than itself;
 *  - fetching: a worker without the model file fetches exactly its windows
 *    (and the header) from the head, a chunk corrupted in transit
 *    (HR_TEST_CORRUPT_CHUNK) is fetched again, and the ring answers what the
 *    single process answers; a restarted worker fetches nothing. */
#include "agent/agent-impl.h"
#include "common/log.h"
#include "ring/beacon.h"

#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define N_CTX 256
#define N_GEN 24

static char g_tmp[128];
static int g_port; /* UDP port of this test's beacons */

/* ---- beacons ---- */

static void test_beacon_format(void) {
    hr_beacon b = {.proto = HR_RING_VERSION, .model_size = 123456789, .model_hash = 0xabcdefull};
    snprintf(b.cluster, sizeof b.cluster, "home-1");
    snprintf(b.ctrl, sizeof b.ctrl, "tcp://192.168.1.20:7700");
    hr_beacon_fingerprint("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", b.fp);
    uint8_t buf[HR_BEACON_MAX + 8], bad[HR_BEACON_MAX + 8];
    int n = hr_beacon_encode(&b, buf, sizeof buf);
    CHECK_EQ(n, HR_BEACON_HDR + 6 + 23);
    hr_beacon d;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_beacon_parse(buf, (size_t)n, &d, err), 0);
    CHECK_STR(d.cluster, "home-1");
    CHECK_STR(d.ctrl, "tcp://192.168.1.20:7700");
    CHECK(d.model_size == 123456789 && d.model_hash == 0xabcdefull && d.proto == HR_RING_VERSION);
    CHECK(memcmp(d.fp, b.fp, HR_BEACON_FP_LEN) == 0);
    uint8_t zero[HR_BEACON_FP_LEN] = {0};
    CHECK(memcmp(b.fp, zero, sizeof zero) != 0);
    /* every prefix is refused, and a longer datagram too */
    for (int k = 0; k < n; k++)
        CHECK_EQ(hr_beacon_parse(buf, (size_t)k, &d, err), HR_EFORMAT);
    memcpy(bad, buf, (size_t)n);
    bad[n] = 'x';
    CHECK_EQ(hr_beacon_parse(bad, (size_t)n + 1, &d, err), HR_EFORMAT);
    /* single-byte corruptions of the checked fields */
    const int at[] = {0,
                      3,
                      4,
                      5,
                      44,
                      45,
                      HR_BEACON_HDR,
                      HR_BEACON_HDR + 2,
                      HR_BEACON_HDR + 6,
                      HR_BEACON_HDR + 9,
                      n - 1};
    const uint8_t to[] = {'X', 'X', 2, 1, 0, 200, ' ', '/', 'u', '#', 'z'};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        memcpy(bad, buf, (size_t)n);
        bad[at[i]] = to[i];
        CHECK_EQ(hr_beacon_parse(bad, (size_t)n, &d, err), HR_EFORMAT);
    }
    /* encode refuses what parse would refuse */
    hr_beacon e = b;
    snprintf(e.cluster, sizeof e.cluster, "bad name");
    CHECK(hr_beacon_encode(&e, buf, sizeof buf) < 0);
    e = b;
    snprintf(e.ctrl, sizeof e.ctrl, "tcp://host:99999");
    CHECK(hr_beacon_encode(&e, buf, sizeof buf) < 0);
    CHECK(!hr_beacon_name_valid(""));
    CHECK(hr_beacon_name_valid("a.b_c-D9"));
    /* random bytes never parse as a beacon without the magic */
    srand(7);
    int parsed = 0;
    for (int t = 0; t < 20000; t++) {
        size_t len = (size_t)(rand() % (int)sizeof bad);
        for (size_t i = 0; i < len; i++)
            bad[i] = (uint8_t)rand();
        if (len >= 4 && t % 2)
            memcpy(bad, "HRBC\x01\x00", len < 6 ? len : 6);
        parsed += hr_beacon_parse(bad, len, &d, err) == 0;
    }
    CHECK_EQ(parsed, 0);
}

/* ---- forged beacons ---- */

typedef struct {
    int port, n;
    char ep[64];
    atomic_int done;
} forger;

/* Sends n forged datagrams to 127.255.255.255:port: garbage, a beacon with
 * another key's fingerprint, one of another cluster, a truncated one. */
static void *forger_main(void *arg) {
    forger *f = arg;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof one);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
    to.sin_addr.s_addr = htonl(0x7fffffffu);
    hr_beacon b = {.proto = HR_RING_VERSION, .model_size = 1};
    snprintf(b.ctrl, sizeof b.ctrl, "%s", f->ep);
    uint8_t buf[HR_BEACON_MAX];
    for (int i = 0; i < f->n; i++) {
        size_t len;
        snprintf(b.cluster, sizeof b.cluster, i % 4 == 2 ? "other" : "hearth");
        snprintf(b.ctrl, sizeof b.ctrl, "tcp://127.0.0.1:%d", 20000 + i % 1000);
        hr_beacon_fingerprint(i % 4 == 1 ? "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7" : NULL, b.fp);
        int n = hr_beacon_encode(&b, buf, sizeof buf);
        if (i % 4 == 0) { /* garbage */
            len = 1 + (size_t)(i % 200);
            for (size_t k = 0; k < len; k++)
                buf[k] = (uint8_t)(i * 31 + k);
        } else if (i % 4 == 3) {
            len = (size_t)n - 1;
        } else {
            len = (size_t)n;
        }
        if (sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof to) < 0)
            sleep_ms(1);
        if (i % 500 == 0)
            sleep_ms(2); /* spread over the discovery window */
    }
    close(fd);
    atomic_store(&f->done, 1);
    return NULL;
}

/* A listener under a flood of 10,000 forged datagrams keeps hearing the one
 * head that beacons every second, counts the garbage, bounds its table. */
static void test_listener_flood(void) {
    char err[HR_ERR_LEN];
    int port = g_port + 1;
    hr_beacon_listener *l = NULL;
    hr_beacon_sender *s = NULL;
    CHECK_EQ(hr_beacon_listen(&l, port, err), 0);
    CHECK_EQ(hr_beacon_sender_open(&s, "127.0.0.1", port, err), 0);
    if (!l || !s) {
        hr_beacon_listener_close(l);
        hr_beacon_sender_close(s);
        return;
    }
    hr_beacon real = {.proto = HR_RING_VERSION, .model_size = 42, .model_hash = 7};
    snprintf(real.cluster, sizeof real.cluster, "hearth");
    snprintf(real.ctrl, sizeof real.ctrl, "tcp://127.0.0.1:7999");
    hr_beacon_fingerprint("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", real.fp);
    CHECK_EQ(hr_beacon_send(s, &real), 1); /* loopback only: the listen address's interface */
    CHECK_EQ(hr_beacon_send(s, &real), 0); /* rate limit: nothing before half an interval */
    forger fg = {.port = port, .n = 10000};
    pthread_t ft;
    pthread_create(&ft, NULL, forger_main, &fg);
    for (int i = 0; i < 8; i++) { /* 4 s: the head beacons, the flood goes on */
        hr_beacon_poll(l, 500, NULL);
        hr_beacon_send(s, &real);
    }
    pthread_join(ft, NULL);
    hr_beacon_poll(l, 600, NULL);
    hr_beacon_head heads[HR_BEACON_MAX_HEADS];
    int n = hr_beacon_heads(l, heads, HR_BEACON_MAX_HEADS), found = 0;
    for (int i = 0; i < n; i++)
        found += strcmp(heads[i].ep, "tcp://127.0.0.1:7999") == 0 && heads[i].count >= 3 &&
                 memcmp(heads[i].b.fp, real.fp, HR_BEACON_FP_LEN) == 0;
    hr_beacon_stats st;
    hr_beacon_listener_stats(l, &st);
    fprintf(stderr,
            "listener under flood: %llu datagrams, %llu malformed, %llu forgotten, %d heads\n",
            (unsigned long long)st.received, (unsigned long long)st.malformed,
            (unsigned long long)st.table_full, n);
    CHECK_EQ(found, 1);
    CHECK(n <= HR_BEACON_MAX_HEADS);
    CHECK(st.received > 1000 && st.malformed > 500);
    hr_beacon_listener_close(l);
    hr_beacon_sender_close(s);
}

static void read_file(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
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

/* Greedy ids through the head: out[0] the count. */
static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    int32_t *out = ud;
    if (out[0] < N_GEN)
        out[++out[0]] = id;
    return 0;
}

static int head_greedy(hr_agent *head, const int32_t *ids, int n, int32_t *out) {
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    char err[HR_ERR_LEN];
    out[0] = 0;
    int rc = hr_head_generate(head, ids, n, &sp, N_GEN, on_tok, out, NULL, NULL, err);
    if (rc)
        fprintf(stderr, "generate: %s\n", err);
    return rc;
}

/* True when the cache file holds the model's bytes [off, off + len). */
static bool same_bytes(const char *a, const char *b, uint64_t off, uint64_t len) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same =
        fa && fb && fseeko(fa, (off_t)off, SEEK_SET) == 0 && fseeko(fb, (off_t)off, SEEK_SET) == 0;
    char x[65536], y[65536];
    while (same && len) {
        size_t k = len < sizeof x ? (size_t)len : sizeof x;
        same = fread(x, 1, k, fa) == k && fread(y, 1, k, fb) == k && memcmp(x, y, k) == 0;
        len -= k;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* A head with the model, trusted by a worker (key folders paired by hand),
 * and forged beacons: the worker finds the head by discovery, without the
 * model file, fetches its windows (one chunk corrupted in transit) and the
 * ring answers as the single process does. */
static void test_discover_fetch(const char *model, const int32_t *prompt, int n_prompt,
                                const int32_t *ref) {
    char hk[256], wk[256], hpub[HR_RING_KEY_LEN], wpub[HR_RING_KEY_LEN], err[HR_ERR_LEN];
    char cache[300], trusted[300], before[4096], after[4096];
    key_dir(hk, sizeof hk, "head");
    key_dir(wk, sizeof wk, "worker");
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    pubkey_of(hk, hpub);
    pubkey_of(wk, wpub);
    CHECK_EQ(hr_ring_trust_add(hk, "worker", wpub, err), 0);
    CHECK_EQ(hr_ring_trust_add(wk, "head", hpub, err), 0);
    snprintf(trusted, sizeof trusted, "%s/trusted", wk);
    read_file(trusted, before, sizeof before);

    setenv("HR_TEST_CORRUPT_CHUNK", "2", 1);
    agent_th ag[2] = {0};
    hr_agent_params hp = agent_params(model, "head", NULL, N_CTX, 1);
    hp.key_dir = hk;
    hp.k = 1;
    hp.windows = "2,2";
    hp.discovery_port = g_port;
    hp.hb_interval_ms = 100;
    CHECK_EQ(agent_begin(&ag[0], &hp), 0);
    if (!ag[0].a)
        return;
    forger fg = {.port = g_port, .n = 10000};
    snprintf(fg.ep, sizeof fg.ep, "tcp://127.0.0.1:1");
    pthread_t ft;
    pthread_create(&ft, NULL, forger_main, &fg);

    hr_agent_params wp = agent_params(NULL, "worker", NULL, N_CTX, 0);
    wp.key_dir = wk;
    wp.discover = true;
    wp.discovery_port = g_port;
    wp.cache_dir = cache;
    wp.hb_interval_ms = 100;
    double t0 = now_s();
    CHECK_EQ(agent_begin(&ag[1], &wp), 0); /* discovery and the header fetch happen here */
    pthread_join(ft, NULL);
    fprintf(stderr, "discovered and started in %.2f s under 10,000 forged beacons\n", now_s() - t0);
    if (!ag[1].a) {
        agents_end(ag, 1);
        return;
    }
    CHECK_STR(ag[1].a->head_ep, hr_agent_endpoint(ag[0].a));
    CHECK_EQ(head_ready(ag[0].a, 1, 30000), 0);
    read_file(trusted, after, sizeof after);
    CHECK_STR(after, before); /* no beacon made it trust anything */

    /* exactly the header and its windows were fetched, all verified, one chunk twice */
    hr_agent *w = ag[1].a;
    hr_local_plan lp = w->lp;
    uint64_t win = 0;
    for (int r = 0; r < lp.k; r++) {
        if (lp.count[r] <= 0)
            continue;
        int b = lp.first[r], e = b + lp.count[r] - 1;
        uint64_t len = w->layer_off[e] + w->layer_len[e] - w->layer_off[b];
        CHECK(same_bytes(hr_cache_path(w->cache), model, w->layer_off[b], len));
        win += len;
    }
    uint64_t hdr = hr_gguf_data_offset(w->g);
    CHECK(same_bytes(hr_cache_path(w->cache), model, 0, hdr));
    CHECK_EQ((long long)hr_cache_held(w->cache), (long long)(hdr + win + w->rope_len));
    CHECK(w->fetch.corrupt >= 1);
    CHECK_EQ((long long)w->fetch.done_bytes, (long long)w->fetch.want_bytes);
    CHECK(w->fetch.wire_bytes > w->fetch.miss_bytes); /* the corrupt chunk came twice */
    fprintf(stderr, "fetched %llu window bytes (+%llu header), %llu corrupt chunk(s) refetched\n",
            (unsigned long long)win, (unsigned long long)hdr, (unsigned long long)w->fetch.corrupt);
    sleep_ms(400); /* a heartbeat after READY */
    json_t *st = head_status(ag[0].a);
    json_t *wd = dev_named(st, "worker");
    CHECK(wd && json_number_value(json_object_get(wd, "fetch_total_bytes")) > 0);
    CHECK(json_number_value(json_object_get(wd, "fetch_done_bytes")) ==
          json_number_value(json_object_get(wd, "fetch_total_bytes")));
    json_decref(st);

    int32_t got[N_GEN + 1];
    CHECK_EQ(head_greedy(ag[0].a, prompt, n_prompt, got), 0);
    CHECK(counted_ids_equal(got, ref));

    /* a restart finds everything in its cache: nothing fetched */
    agent_end(&ag[1]);
    unsetenv("HR_TEST_CORRUPT_CHUNK");
    wp.discover = false;
    wp.head = hr_agent_endpoint(ag[0].a);
    CHECK_EQ(agent_begin(&ag[1], &wp), 0);
    if (ag[1].a) {
        char e2[HR_ERR_LEN];
        int ok = -1;
        for (double t1 = now_s(); ok != 0 && now_s() - t1 < 30;) {
            ok = hr_head_wait_ready(ag[0].a, 1, 1000, e2);
            if (ok)
                sleep_ms(200); /* planned again once the lost worker is back */
        }
        CHECK_EQ(ok, 0);
        sleep_ms(300);
        CHECK_EQ((long long)ag[1].a->fetch.miss_bytes, 0LL);
        CHECK_EQ((long long)ag[1].a->fetch.wire_bytes, 0LL);
        CHECK_EQ(head_greedy(ag[0].a, prompt, n_prompt, got), 0);
        CHECK(counted_ids_equal(got, ref));
    }
    agents_end(ag, 2);
}

/* ---- the cache ---- */

static void fill(uint8_t *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + (size_t)seed * 13 + (i >> 9));
}

static void put_range(hr_cache *c, uint64_t off, uint64_t len, int seed) {
    char err[HR_ERR_LEN];
    uint8_t *buf = malloc(HR_MSG_CHUNK_MAX);
    for (uint64_t o = off; o < off + len; o += HR_MSG_CHUNK_MAX) {
        uint32_t n =
            (uint32_t)(off + len - o < HR_MSG_CHUNK_MAX ? off + len - o : HR_MSG_CHUNK_MAX);
        fill(buf, n, seed + (int)(o >> 20));
        uint8_t h[HR_MSG_HASH_LEN];
        crypto_generichash(h, sizeof h, buf, n, NULL, 0);
        CHECK_EQ(hr_cache_put(c, o, buf, n, h, err), 0);
    }
    free(buf);
}

static long want(hr_cache *c, uint64_t off, uint64_t len, uint64_t *miss, int *rc) {
    char err[HR_ERR_LEN];
    uint64_t *chunks = NULL, all = 0;
    long n = 0;
    *rc = hr_cache_want(c, &off, &len, 1, &chunks, &n, &all, miss, err);
    free(chunks);
    return n;
}

static void test_cache(void) {
    char dir[300], err[HR_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/unit-cache", g_tmp);
    const uint64_t MB = HR_MSG_CHUNK_MAX, size = 40 * MB + 1000;
    /* "layers": 4 ranges of 5.5 MiB after a 0.5 MiB header */
    uint64_t off[5] = {0, MB / 2, 6 * MB, 11 * MB + MB / 2, 17 * MB},
             len[5] = {MB / 2, 5 * MB + MB / 2, 5 * MB + MB / 2, 5 * MB + MB / 2, 5 * MB + MB / 2};
    hr_cache *c = NULL;
    CHECK_EQ(hr_cache_open(&c, dir, size, 0x1234, 0, err), 0);
    if (!c)
        return;
    CHECK_EQ(hr_cache_set_layout(c, off, len, 5, true, err), 0);
    uint64_t miss;
    int rc;
    CHECK_EQ(want(c, off[1], len[1], &miss, &rc), 6);
    CHECK_EQ((long long)miss, (long long)len[1]);
    /* half of layer 1 arrives, then the worker is killed (no clean close
     * of anything but the descriptors) */
    put_range(c, off[1], 3 * MB, 1);
    CHECK_EQ(hr_cache_put(c, off[1] + 3 * MB, "x", 1, (uint8_t[HR_MSG_HASH_LEN]){0}, err),
             HR_EINVAL); /* not a chunk */
    uint8_t junk[HR_MSG_HASH_LEN] = {1};
    uint8_t *buf = malloc(MB);
    fill(buf, MB, 9);
    CHECK_EQ(hr_cache_put(c, off[1] + 3 * MB, buf, (uint32_t)MB, junk, err), HR_EFORMAT);
    hr_cache_close(c);
    c = NULL;
    CHECK_EQ(hr_cache_open(&c, dir, size, 0x1234, 0, err), 0);
    CHECK_EQ(hr_cache_set_layout(c, off, len, 5, true, err), 0);
    CHECK_EQ((long long)hr_cache_held(c), (long long)(3 * MB));
    CHECK_EQ(want(c, off[1], len[1], &miss, &rc), 3); /* resumes: only the rest */
    CHECK_EQ((long long)miss, (long long)(len[1] - 3 * MB));
    put_range(c, off[1] + 3 * MB, len[1] - 3 * MB, 1 + 3);
    CHECK_EQ(want(c, off[1], len[1], &miss, &rc), 0);
    /* a byte flipped on disk: that chunk is fetched again after a restart */
    hr_cache_close(c);
    char path[400];
    snprintf(path, sizeof path, "%s/%llu-%016llx.gguf", dir, (unsigned long long)size, 0x1234ull);
    int fd = open(path, O_RDWR);
    uint8_t byte = 0;
    CHECK(fd >= 0 && pread(fd, &byte, 1, (off_t)(off[1] + MB + 77)) == 1);
    byte ^= 0x10;
    CHECK(pwrite(fd, &byte, 1, (off_t)(off[1] + MB + 77)) == 1);
    if (fd >= 0)
        close(fd);
    CHECK_EQ(hr_cache_open(&c, dir, size, 0x1234, 0, err), 0);
    CHECK_EQ(hr_cache_set_layout(c, off, len, 5, true, err), 0);
    CHECK_EQ(want(c, off[1], len[1], &miss, &rc), 1);
    CHECK_EQ((long long)miss, (long long)MB);
    put_range(c, off[1] + MB, MB, 1 + 1);
    hr_cache_close(c);
    /* a limit of 12 MiB: windows 1 and 2 fit, window 3 evicts window 1 (the
     * oldest), a window larger than the limit is refused */
    CHECK_EQ(hr_cache_open(&c, dir, size, 0x1234, 12 * MB, err), 0);
    CHECK_EQ(hr_cache_set_layout(c, off, len, 5, true, err), 0);
    CHECK_EQ(want(c, off[1], len[1], &miss, &rc), 0);
    CHECK_EQ(want(c, off[2], len[2], &miss, &rc), 6);
    put_range(c, off[2], len[2], 2);
    CHECK_EQ(want(c, off[3], len[3], &miss, &rc), 6);
    CHECK_EQ(rc, 0);
    CHECK(hr_cache_held(c) + miss <= 12 * MB);
    CHECK_EQ((long long)hr_cache_held(c), (long long)len[2]); /* window 1 went, whole */
    CHECK_EQ(want(c, off[2], len[2], &miss, &rc), 0);         /* window 2 stayed */
    uint64_t big_off = off[1], big_len = off[4] + len[4] - off[1];
    uint64_t *chunks = NULL, all;
    long n;
    CHECK_EQ(hr_cache_want(c, &big_off, &big_len, 1, &chunks, &n, &all, &miss, err), HR_ERANGE);
    free(chunks);
    /* the evicted bytes are holes again */
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, buf, 4096, (off_t)off[1]) == 4096);
    bool zero = true;
    for (int i = 0; i < 4096; i++)
        zero &= buf[i] == 0;
    CHECK(zero);
    if (fd >= 0)
        close(fd);
    free(buf);
    hr_cache_close(c);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    signal(SIGPIPE, SIG_IGN);
    if (sodium_init() < 0)
        return 1;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hr_test_zeroconf_%d", (int)getpid());
    mkdir(g_tmp, 0700);
    g_port = free_port_block(4);
    test_beacon_format();
    test_listener_flood();
    test_cache();
    char model[512];
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
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
    int32_t ref[N_GEN + 1];
    CHECK_EQ(ref_greedy(model, N_CTX, prompt, n_prompt, N_GEN, ref), 0);
    test_discover_fetch(model, prompt, n_prompt, ref);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_tmp);
    return hr_check_finish("zeroconf");
}
