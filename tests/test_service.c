/* test_service.c - the head's request service (agent/service.h) on a
 * one-agent head:
 *  - requests finish in submission order, each with the tokens a direct
 *    hr_head_generate() gives; text is tokenized with the model's BOS rule;
 *  - the context check (strict and fit), empty prompts;
 *  - a full queue refuses with HR_EAGAIN; cancel while queued finishes the
 *    request at once (on_done inside the cancel call), cancel while running
 *    stops it; cancel by client key; the counters follow;
 *  - `hearth prompt` clients over ZeroMQ: a PROMPT while another request
 *    runs is queued (not refused), CANCEL of a queued PROMPT answers
 *    "canceled" at once, a full queue answers an error, malformed and too
 *    long requests are refused, and the tokens equal a direct generation
 *    with hr_sampler_params_default() and the seed. */
#include "agent/agent.h"
#include "agent/service.h"
#include "common/log.h"
#include "model/tokenizer.h"
#include "ring/ring.h"

#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <zmq.h>

#define N_CTX 256
#define MAX_IDS 300

/* Finished requests in the order on_done ran. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_order[64], g_n_order;

typedef struct {
    int tag;
    int sleep_ms; /* per token: keeps the ring busy */
    int32_t ids[MAX_IDS];
    int n;
    atomic_int n_tok;
    bool done; /* g_mu */
    int rc;
    char err[HR_ERR_LEN];
    hr_head_stats st;
} req_t;

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    req_t *r = ud;
    if (id >= 0 && r->n < MAX_IDS)
        r->ids[r->n++] = id;
    atomic_fetch_add(&r->n_tok, 1);
    if (r->sleep_ms)
        sleep_ms(r->sleep_ms);
    return 0;
}

static void on_done(void *ud, int rc, const hr_head_stats *st, const char *err) {
    req_t *r = ud;
    pthread_mutex_lock(&g_mu);
    r->rc = rc;
    r->st = *st;
    snprintf(r->err, sizeof r->err, "%s", err);
    r->done = true;
    if (g_n_order < 64)
        g_order[g_n_order++] = r->tag;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static bool is_done(req_t *r) {
    pthread_mutex_lock(&g_mu);
    bool d = r->done;
    pthread_mutex_unlock(&g_mu);
    return d;
}

static bool wait_done(req_t *r, double timeout_s) {
    double t0 = now_s();
    while (!is_done(r) && now_s() - t0 < timeout_s)
        sleep_ms(10);
    return is_done(r);
}

static hr_service_stats stats(hr_service *s) {
    hr_service_stats st;
    hr_service_stats_get(s, &st);
    return st;
}

static bool wait_running(hr_service *s, double timeout_s) {
    double t0 = now_s();
    while (!stats(s).running && now_s() - t0 < timeout_s)
        sleep_ms(5);
    return stats(s).running;
}

/* The tokens of text as `hearth prompt` encodes it. */
static int encode(hr_agent *a, const char *text, int32_t *ids, int cap) {
    const hr_tokenizer *tok = hr_head_tokenizer(a);
    int n = 0;
    hr_tokenizer_encode(tok, text, strlen(text), hr_tokenizer_add_bos(tok), false, ids, cap, &n);
    return n;
}

/* A direct generation, bypassing the service (which must be idle). */
static int direct(hr_agent *a, const int32_t *ids, int n, uint64_t seed, int max_tokens,
                  req_t *out) {
    char err[HR_ERR_LEN];
    hr_sampler_params sp = hr_sampler_params_default();
    sp.seed = seed;
    memset(out, 0, sizeof *out);
    return hr_head_generate(a, ids, n, &sp, max_tokens, on_tok, out, NULL, NULL, err);
}

static int submit(hr_service *s, const char *text, const int32_t *ids, int n, uint64_t seed,
                  int max_tokens, bool fit, const char *client, req_t *r, uint64_t *id) {
    char err[HR_ERR_LEN] = "";
    hr_service_req q = hr_service_req_default();
    q.text = text;
    q.text_len = text ? strlen(text) : 0;
    q.ids = ids;
    q.n_ids = n;
    q.sp.seed = seed;
    q.max_tokens = max_tokens;
    q.fit = fit;
    q.client = client;
    q.client_len = client ? strlen(client) : 0;
    return hr_service_submit(s, &q, on_tok, on_done, r, id, err);
}

static bool same_ids(const req_t *a, const req_t *b) {
    return a->n == b->n && a->n > 0 && memcmp(a->ids, b->ids, (size_t)a->n * sizeof a->ids[0]) == 0;
}

/* In order, equal to direct generation; text and ids submit alike. */
static void test_order(hr_agent *a, hr_service *s) {
    const char *texts[3] = {"Once upon a time", "The cat sat", "Hello"};
    static req_t ref[3], got[3], by_ids;
    int32_t ids[64];
    for (int i = 0; i < 3; i++) {
        int n = encode(a, texts[i], ids, 64);
        CHECK_EQ(direct(a, ids, n, 10 + i, 6 + i, &ref[i]), 0);
        CHECK(ref[i].n > 0);
    }
    hr_service_stats st0 = stats(s);
    g_n_order = 0;
    for (int i = 0; i < 3; i++) {
        memset(&got[i], 0, sizeof got[i]);
        got[i].tag = i + 1;
        CHECK_EQ(submit(s, texts[i], NULL, 0, 10 + i, 6 + i, false, "t", &got[i], NULL), 0);
    }
    int n = encode(a, texts[0], ids, 64);
    memset(&by_ids, 0, sizeof by_ids);
    by_ids.tag = 4;
    CHECK_EQ(submit(s, NULL, ids, n, 10, 6, false, "t", &by_ids, NULL), 0);
    CHECK(wait_done(&by_ids, 30));
    pthread_mutex_lock(&g_mu);
    CHECK_EQ(g_n_order, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(g_order[i], i + 1);
    pthread_mutex_unlock(&g_mu);
    int tokens = 0;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(got[i].rc, 0);
        CHECK(same_ids(&got[i], &ref[i]));
        CHECK_EQ(got[i].st.n_prompt, encode(a, texts[i], ids, 64));
        tokens += got[i].st.n_gen;
    }
    CHECK(same_ids(&by_ids, &ref[0]));
    hr_service_stats st = stats(s);
    CHECK_EQ(st.done, st0.done + 4);
    CHECK_EQ(st.requests, st0.requests + 4);
    CHECK_EQ(st.tokens, st0.tokens + (uint64_t)(tokens + by_ids.st.n_gen));
    CHECK(st.last_gen_tps > 0);
    CHECK_EQ(st.queued, 0);
    CHECK(!st.running);
}

/* The context check: strict refuses prompt + max_tokens beyond it, fit
 * refuses only a prompt that fills it. */
static void test_context(hr_service *s) {
    char err[HR_ERR_LEN] = "";
    CHECK_EQ(hr_service_n_ctx(s), N_CTX);
    static int32_t ids[N_CTX];
    for (int i = 0; i < N_CTX; i++)
        ids[i] = 1 + i % 50;
    req_t r;
    memset(&r, 0, sizeof r);
    hr_service_stats st0 = stats(s);
    CHECK_EQ(submit(s, NULL, ids, 10, 1, N_CTX - 9, false, NULL, &r, NULL), HR_ERANGE);
    CHECK_EQ(submit(s, NULL, ids, N_CTX, 1, 1, true, NULL, &r, NULL), HR_ERANGE);
    CHECK_EQ(submit(s, NULL, ids, 0, 1, 1, true, NULL, &r, NULL), HR_EINVAL);
    hr_service_req q = hr_service_req_default(); /* neither ids nor text */
    CHECK_EQ(hr_service_submit(s, &q, on_tok, on_done, &r, NULL, err), HR_EINVAL);
    CHECK(!is_done(&r));
    CHECK_EQ(stats(s).requests, st0.requests); /* refused before the queue */
    /* fit: max_tokens past the context is a bound; the answer stops at the end */
    CHECK_EQ(submit(s, NULL, ids, N_CTX - 4, 1, 100, true, NULL, &r, NULL), 0);
    CHECK(wait_done(&r, 30));
    CHECK_EQ(r.rc, 0);
    CHECK(r.st.n_gen >= 1 && r.st.n_gen <= 4);
}

/* Queue full, cancel while queued / running, cancel by client. */
static void test_queue_cancel(hr_service *s) {
    static req_t run, q1, q2, q3;
    int32_t ids[4] = {1, 100, 200, 300};
    memset(&run, 0, sizeof run);
    memset(&q1, 0, sizeof q1);
    memset(&q2, 0, sizeof q2);
    memset(&q3, 0, sizeof q3);
    run.sleep_ms = 20;
    hr_service_set_queue_max(s, 2);
    hr_service_stats st0 = stats(s);
    uint64_t id_run = 0, id1 = 0, id2 = 0, id3 = 0;
    CHECK_EQ(submit(s, NULL, ids, 4, 1, -1, true, "blocker", &run, &id_run), 0);
    CHECK(wait_running(s, 10));
    CHECK_EQ(submit(s, NULL, ids, 4, 2, 4, true, "x", &q1, &id1), 0);
    CHECK_EQ(submit(s, NULL, ids, 4, 3, 4, true, "x", &q2, &id2), 0);
    CHECK_EQ(stats(s).queued, 2);
    CHECK_EQ(submit(s, NULL, ids, 4, 4, 4, true, "y", &q3, &id3), HR_EAGAIN);
    hr_service_stats st = stats(s);
    CHECK_EQ(st.refused, st0.refused + 1);
    CHECK_EQ(st.requests, st0.requests + 4);
    CHECK_EQ(st.queue_max, 2);
    CHECK(id_run > 0 && id1 > id_run && id2 > id1);
    /* canceled while queued: finished inside the call, the slot is free */
    CHECK(hr_service_cancel(s, id1));
    CHECK(is_done(&q1));
    CHECK_EQ(q1.rc, HR_ECANCELED);
    CHECK_EQ(q1.n, 0);
    CHECK_EQ(stats(s).queued, 1);
    CHECK(!hr_service_cancel(s, id1)); /* already finished */
    CHECK_EQ(submit(s, NULL, ids, 4, 4, 4, true, "x", &q3, &id3), 0);
    /* by client: both queued "x" requests */
    CHECK_EQ(hr_service_cancel_client(s, "x", 1), 2);
    CHECK(is_done(&q2) && is_done(&q3));
    CHECK_EQ(q2.rc, HR_ECANCELED);
    CHECK_EQ(q3.rc, HR_ECANCELED);
    CHECK(!is_done(&run)); /* still generating, slowly */
    CHECK_EQ(stats(s).queued, 0);
    /* canceled while running */
    int seen = atomic_load(&run.n_tok);
    CHECK(hr_service_cancel_client(s, "blocker", 7) == 1);
    CHECK(wait_done(&run, 10));
    CHECK_EQ(run.rc, HR_ECANCELED);
    CHECK(run.n < N_CTX - 4 - 1 && run.n >= seen);
    st = stats(s);
    CHECK_EQ(st.canceled, st0.canceled + 4);
    CHECK_EQ(st.failed, st0.failed);
    CHECK_EQ(st.done, st0.done);
    CHECK(!st.running);
    hr_service_set_queue_max(s, HR_SERVICE_QUEUE_DEFAULT);
}

/* ---- `hearth prompt` over ZeroMQ ---- */

static void *client(void *zctx, hr_agent *a) {
    char err[HR_ERR_LEN];
    void *c = hr_ring_socket(zctx, ZMQ_DEALER, NULL, err);
    if (c && zmq_connect(c, hr_agent_endpoint(a)) != 0) {
        zmq_close(c);
        c = NULL;
    }
    return c;
}

static void send_type(void *c, int type, const char *payload) {
    char err[HR_ERR_LEN];
    hr_ring_hdr h = {.type = (uint8_t)type, .pos = -1, .len = payload ? strlen(payload) : 0};
    CHECK_EQ(hr_ring_send_msg(c, NULL, 0, &h, payload, err), 0);
}

static void send_prompt(void *c, const char *text, int n_predict, int seed) {
    char js[256];
    snprintf(js, sizeof js, "{\"text\":\"%s\",\"n_predict\":%d,\"seed\":%d,\"wait_ms\":5000}", text,
             n_predict, seed);
    send_type(c, HR_RING_PROMPT, js);
}

/* Reads until DONE or ERROR (returned; 0 on timeout): TOKEN ids into r,
 * the final payload into msg. */
static int collect(void *c, req_t *r, char *msg, size_t cap, double timeout_s) {
    static uint8_t buf[HR_RING_HDR_SIZE + HR_RING_MAX_CTRL];
    char err[HR_ERR_LEN];
    double t0 = now_s();
    msg[0] = 0;
    while (now_s() - t0 < timeout_s) {
        hr_ring_hdr h;
        long n = hr_ring_recv(c, NULL, NULL, buf, sizeof buf, 100, &h, err);
        if (n <= 0)
            continue;
        const char *pl = (const char *)buf + HR_RING_HDR_SIZE;
        if (h.type == HR_RING_TOKEN && h.len >= 4) {
            int32_t id = (int32_t)((uint32_t)buf[HR_RING_HDR_SIZE] |
                                   (uint32_t)buf[HR_RING_HDR_SIZE + 1] << 8 |
                                   (uint32_t)buf[HR_RING_HDR_SIZE + 2] << 16 |
                                   (uint32_t)buf[HR_RING_HDR_SIZE + 3] << 24);
            if (id >= 0 && r->n < MAX_IDS)
                r->ids[r->n++] = id;
        } else if (h.type == HR_RING_DONE || h.type == HR_RING_ERROR) {
            snprintf(msg, cap, "%.*s", (int)h.len, pl);
            return h.type;
        }
    }
    return 0;
}

static void test_prompt(hr_agent *a, hr_service *s) {
    void *zctx = zmq_ctx_new();
    void *c1 = client(zctx, a), *c2 = client(zctx, a), *c3 = client(zctx, a);
    CHECK(c1 && c2 && c3);
    if (!c1 || !c2 || !c3)
        return;
    static req_t ref, blk, got1, got2, got3;
    int32_t ids[64];
    int n = encode(a, "Once upon a time", ids, 64);
    CHECK_EQ(direct(a, ids, n, 7, 8, &ref), 0);
    /* keep the ring busy; both prompts wait in the queue */
    memset(&blk, 0, sizeof blk);
    blk.sleep_ms = 20;
    uint64_t id_blk = 0;
    CHECK_EQ(submit(s, NULL, ids, n, 1, -1, true, "blocker", &blk, &id_blk), 0);
    CHECK(wait_running(s, 10));
    hr_service_set_queue_max(s, 2);
    send_prompt(c1, "Once upon a time", 8, 7);
    double t0 = now_s();
    while (stats(s).queued < 1 && now_s() - t0 < 5)
        sleep_ms(5);
    send_prompt(c2, "Once upon a time", 8, 8);
    while (stats(s).queued < 2 && now_s() - t0 < 5)
        sleep_ms(5);
    CHECK_EQ(stats(s).queued, 2);
    char msg[HR_ERR_LEN];
    memset(&got3, 0, sizeof got3);
    send_prompt(c3, "Once upon a time", 8, 9); /* the queue is full */
    CHECK_EQ(collect(c3, &got3, msg, sizeof msg, 5), HR_RING_ERROR);
    CHECK(strstr(msg, "busy") != NULL);
    /* CANCEL of a queued prompt answers at once, the blocker still running */
    memset(&got2, 0, sizeof got2);
    send_type(c2, HR_RING_CANCEL, NULL);
    CHECK_EQ(collect(c2, &got2, msg, sizeof msg, 5), HR_RING_ERROR);
    CHECK(strcmp(msg, "canceled") == 0);
    CHECK_EQ(got2.n, 0);
    CHECK(!is_done(&blk));
    CHECK(hr_service_cancel(s, id_blk));
    CHECK(wait_done(&blk, 10));
    /* the first prompt runs after the blocker: the same tokens as alone */
    memset(&got1, 0, sizeof got1);
    CHECK_EQ(collect(c1, &got1, msg, sizeof msg, 30), HR_RING_DONE);
    CHECK(strstr(msg, "\"n_gen\":8") != NULL);
    CHECK(same_ids(&got1, &ref));
    /* refused up front */
    send_type(c3, HR_RING_PROMPT, "{\"n_predict\":3}");
    CHECK_EQ(collect(c3, &got3, msg, sizeof msg, 5), HR_RING_ERROR);
    CHECK(strncmp(msg, "malformed PROMPT", 16) == 0);
    send_prompt(c3, "Once upon a time", N_CTX, 1);
    CHECK_EQ(collect(c3, &got3, msg, sizeof msg, 5), HR_RING_ERROR);
    CHECK(strstr(msg, "exceeds the context of 256 tokens") != NULL);
    CHECK_EQ(got3.n, 0);
    hr_service_set_queue_max(s, HR_SERVICE_QUEUE_DEFAULT);
    zmq_close(c1);
    zmq_close(c2);
    zmq_close(c3);
    zmq_ctx_term(zctx);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    char model[512], err[HR_ERR_LEN] = "";
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
    hr_agent_params p = agent_params(model, "head", NULL, N_CTX, 0);
    p.n_parallel = 1; /* one request at a time, in order (batched sessions: test_serve.c) */
    p.insecure = true;
    agent_th t = {0};
    if (agent_begin(&t, &p)) {
        CHECK(0);
        return hr_check_finish("service");
    }
    CHECK_EQ(hr_head_wait_ready(t.a, 0, 20000, err), 0);
    hr_service *s = hr_head_service(t.a);
    CHECK(s != NULL);
    if (s) {
        test_order(t.a, s);
        test_context(s);
        test_queue_cancel(s);
        test_prompt(t.a, s);
    }
    agent_end(&t);
    CHECK_EQ(t.rc, 0);
    return hr_check_finish("service");
}
