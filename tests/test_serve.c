/* test_serve.c - several requests at once through the request service
 * (--parallel, agent/batch.c) on a 3-agent loopback ring (in-process
 * agents, F32 wire, CURVE on):
 *  - 8 greedy requests of mixed prompt and answer lengths submitted
 *    together all run at once: each one's ids equal the single-process run
 *    of that request alone, none waits for another to finish before its
 *    first token, the micro-batches and running requests show in the
 *    service's counters;
 *  - one of them canceled midway finishes with HR_ECANCELED at once and a
 *    ninth request takes its KV slot while the others still run;
 *  - a worker that leaves mid-session: the head re-plans on the two that
 *    remain, replays every running request and the answers stay the ones
 *    of a single process;
 *  - a single agent (no ring) serves the same requests batched, equal to
 *    the single process as well;
 *  - the prompt cache: a follow-up request that repeats an earlier one's
 *    prompt and answer keeps its KV (the prompt on quantized weights, the
 *    answer too on F32 ones) and still answers as a single process does. */
#include "agent/agent.h"
#include "agent/service.h"
#include "common/log.h"

#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>

#define N_CTX 256
#define N_REQ 8
#define MAX_GEN 40

typedef struct {
    int32_t prompt[N_CTX];
    int n_prompt, max_tokens;
    int32_t ref[MAX_GEN + 1]; /* ref[0] count, ids from ref[1] */
    /* filled by the callbacks (g_mu) */
    int32_t ids[MAX_GEN + 8];
    int n;
    double t_first, t_done;
    bool done;
    int rc;
    hr_head_stats st;
    uint64_t id;
} req_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    req_t *r = ud;
    pthread_mutex_lock(&g_mu);
    if (id >= 0 && r->n < MAX_GEN + 8) {
        if (r->n == 0)
            r->t_first = now_s();
        r->ids[r->n++] = id;
    }
    pthread_mutex_unlock(&g_mu);
    return 0;
}

static void on_done(void *ud, int rc, const hr_head_stats *st, const char *err) {
    req_t *r = ud;
    pthread_mutex_lock(&g_mu);
    r->rc = rc;
    r->st = *st;
    r->t_done = now_s();
    r->done = true;
    pthread_mutex_unlock(&g_mu);
    if (rc && rc != HR_ECANCELED)
        fprintf(stderr, "  request failed: %s\n", err);
}

static int n_of(req_t *r) {
    pthread_mutex_lock(&g_mu);
    int n = r->n;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static bool all_done(req_t *r, int n, double timeout_s) {
    double t0 = now_s();
    for (;;) {
        bool d = true;
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < n; i++)
            d = d && r[i].done;
        pthread_mutex_unlock(&g_mu);
        if (d)
            return true;
        if (now_s() - t0 > timeout_s)
            return false;
        sleep_ms(10);
    }
}

/* Request i: a prompt of a length from the list (several cross the
 * 64-token prompt chunk), made of ids of the vocabulary, and its answer. */
static void make_req(req_t *r, int i, int n_vocab) {
    static const int len[] = {3, 70, 12, 130, 5, 40, 90, 21, 9, 66};
    static const int gen[] = {12, 20, 30, 16, 24, 10, 14, 36, 18, 11};
    memset(r, 0, sizeof *r);
    r->n_prompt = len[i % 10];
    r->max_tokens = gen[i % 10];
    r->prompt[0] = 1; /* BOS */
    for (int j = 1; j < r->n_prompt; j++)
        r->prompt[j] = 3 + (int32_t)((unsigned)(i * 7919 + j * 104729) % (unsigned)(n_vocab - 3));
}

static int submit(hr_service *s, req_t *r) {
    hr_service_req q = hr_service_req_default();
    q.ids = r->prompt;
    q.n_ids = r->n_prompt;
    q.sp.temperature = 0;
    q.max_tokens = r->max_tokens;
    char err[HR_ERR_LEN];
    int rc = hr_service_submit(s, &q, on_tok, on_done, r, &r->id, err);
    if (rc)
        fprintf(stderr, "  submit: %s\n", err);
    return rc;
}

/* A finished request's ids are the single process's (an end of generation
 * may end it early). */
static bool matches_ref(const hr_agent *head, const req_t *r) {
    if (r->n < 1 || r->n > r->ref[0])
        return false;
    for (int i = 0; i < r->n; i++)
        if (r->ids[i] != r->ref[1 + i])
            return false;
    return r->n == r->max_tokens || hr_tokenizer_is_eog(hr_head_tokenizer(head), r->ids[r->n - 1]);
}

static void refs(const char *model, req_t *r, int n) {
    for (int i = 0; i < n; i++)
        CHECK_EQ(ref_greedy(model, N_CTX, r[i].prompt, r[i].n_prompt, r[i].max_tokens, r[i].ref),
                 0);
}

/* 8 at once, one canceled midway and its slot taken by a ninth. */
static void test_eight(const char *model, hr_agent *head, int n_mb_want) {
    hr_service *s = hr_head_service(head);
    int nv = hr_head_n_vocab(head);
    static req_t r[N_REQ + 1];
    for (int i = 0; i <= N_REQ; i++)
        make_req(&r[i], i, nv);
    r[2].max_tokens = MAX_GEN; /* the one canceled */
    refs(model, r, N_REQ + 1);
    hr_service_stats st0;
    hr_service_stats_get(s, &st0);
    for (int i = 0; i < N_REQ; i++)
        CHECK_EQ(submit(s, &r[i]), 0);
    /* all of them run together, in micro-batches */
    int max_running = 0, max_mb = 0;
    double t0 = now_s();
    while (n_of(&r[2]) < 4 && now_s() - t0 < 60) {
        hr_service_stats st;
        hr_service_stats_get(s, &st);
        max_running = st.n_running > max_running ? st.n_running : max_running;
        max_mb = st.n_mb > max_mb ? st.n_mb : max_mb;
        sleep_ms(2);
    }
    CHECK(n_of(&r[2]) >= 4);
    CHECK(hr_service_cancel(s, r[2].id));
    double t_cancel = now_s();
    CHECK_EQ(submit(s, &r[N_REQ]), 0);
    CHECK(all_done(r, N_REQ + 1, 120));
    hr_service_stats st;
    double t1 = now_s(); /* the session ends just after the last request */
    do
        hr_service_stats_get(s, &st);
    while (st.n_mb != 0 && now_s() - t1 < 5 && (sleep_ms(5), true));
    CHECK_EQ(max_running, N_REQ);
    CHECK_EQ(max_mb, n_mb_want);
    CHECK_EQ(st.parallel, N_REQ);
    CHECK_EQ(st.n_running, 0);
    CHECK_EQ(st.n_mb, 0);
    CHECK_EQ(st.done, st0.done + N_REQ);
    CHECK_EQ(st.canceled, st0.canceled + 1);
    CHECK_EQ(st.failed, st0.failed);
    /* the canceled one: at once, with fewer tokens than asked */
    CHECK_EQ(r[2].rc, HR_ECANCELED);
    CHECK(r[2].t_done - t_cancel < 1.0);
    CHECK(r[2].n < r[2].max_tokens);
    double last_other = 0; /* when the last of the others finished */
    for (int i = 0; i < N_REQ; i++) {
        if (i == 2)
            continue;
        CHECK_EQ(r[i].rc, 0);
        if (!matches_ref(head, &r[i]))
            fprintf(stderr,
                    "  request %d (%d prompt tokens): %d ids differ from the single "
                    "process\n",
                    i, r[i].n_prompt, r[i].n);
        CHECK(matches_ref(head, &r[i]));
        CHECK_EQ(r[i].st.n_prompt, r[i].n_prompt);
        last_other = r[i].t_done > last_other ? r[i].t_done : last_other;
        /* nobody waited for another to finish before its first token */
        for (int j = 0; j < N_REQ; j++)
            if (j != i && j != 2)
                CHECK(r[i].t_first < r[j].t_done);
    }
    /* the ninth took the canceled slot while the others still ran */
    CHECK_EQ(r[N_REQ].rc, 0);
    CHECK(matches_ref(head, &r[N_REQ]));
    CHECK(r[N_REQ].t_first < last_other);
}

typedef struct {
    agent_th *t;
    req_t *r;
} leave_arg;

/* A worker leaves mid-session: every running request is replayed on the
 * new plan and still equals the single process. */
static void test_leave(const char *model, agent_th *ag) {
    hr_agent *head = ag[0].a;
    hr_service *s = hr_head_service(head);
    int nv = hr_head_n_vocab(head);
    static req_t r[4];
    for (int i = 0; i < 4; i++) {
        make_req(&r[i], i + 3, nv);
        r[i].max_tokens = MAX_GEN;
    }
    refs(model, r, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(submit(s, &r[i]), 0);
    double t0 = now_s();
    while (n_of(&r[0]) < 8 && now_s() - t0 < 60)
        sleep_ms(5);
    agent_end(&ag[2]);
    CHECK(all_done(r, 4, 120));
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(r[i].rc, 0);
        CHECK(matches_ref(head, &r[i]));
    }
    CHECK(status_int(head, "recoveries") >= 1);
}

/* A follow-up turn: the second request repeats the first one's prompt and
 * answer and adds new tokens, sent as soon as the first is answered (while
 * its slot refreshes the answer's KV, on quantized weights: it waits for
 * that slot). It keeps the whole first turn's KV (n_cached) and its answer
 * is the single process's for the whole prompt sent cold. */
static void test_prefix(const char *model, hr_agent *head) {
    hr_service *s = hr_head_service(head);
    int nv = hr_head_n_vocab(head);
    static req_t t1, t2;
    make_req(&t1, 5, nv); /* 40 prompt tokens */
    t1.max_tokens = 10;
    refs(model, &t1, 1);
    CHECK_EQ(submit(s, &t1), 0);
    CHECK(all_done(&t1, 1, 60));
    CHECK_EQ(t1.rc, 0);
    CHECK(matches_ref(head, &t1));
    if (t1.n != 10)
        return; /* ended early: nothing to follow up on */
    make_req(&t2, 0, nv);
    t2.max_tokens = 12;
    memcpy(t2.prompt, t1.prompt, (size_t)t1.n_prompt * sizeof t2.prompt[0]);
    memcpy(t2.prompt + t1.n_prompt, t1.ids, 10 * sizeof t2.prompt[0]);
    for (int j = 0; j < 15; j++)
        t2.prompt[t1.n_prompt + 10 + j] = 100 + j * 13;
    t2.n_prompt = t1.n_prompt + 10 + 15; /* 65: a lone row in the last 64-token chunk */
    refs(model, &t2, 1);
    CHECK_EQ(submit(s, &t2), 0);
    CHECK(all_done(&t2, 1, 60));
    CHECK_EQ(t2.rc, 0);
    CHECK(matches_ref(head, &t2));
    /* the whole first turn: its prompt, its answer (computed again as prompt
     * rows after it ended where decode rows are not exact) and the last
     * token, sampled, then fed by that refresh */
    CHECK_EQ(t2.st.n_cached, t1.n_prompt + 10);
    CHECK_EQ(t2.st.n_prompt, t2.n_prompt);
}

/* Every slot wanted while one still refreshes a finished answer (a long
 * request keeps the ring busy, so that refresh waits): a request that
 * finds no free slot takes the refreshing one (at once, or once its rows
 * are home), every answer is the single process's, and the first turn's
 * follow-up then is too, whatever its slot kept. */
static void test_evict(const char *model, hr_agent *head) {
    hr_service *s = hr_head_service(head);
    int nv = hr_head_n_vocab(head);
    static req_t busy, t1, t2, r[N_REQ - 1];
    make_req(&busy, 13, nv); /* 130 prompt tokens */
    busy.max_tokens = MAX_GEN;
    make_req(&t1, 5, nv); /* 40 prompt tokens, 10 generated */
    refs(model, &busy, 1);
    refs(model, &t1, 1);
    for (int i = 0; i < N_REQ - 1; i++)
        make_req(&r[i], 20 + i, nv);
    refs(model, r, N_REQ - 1);
    CHECK_EQ(submit(s, &busy), 0);
    CHECK_EQ(submit(s, &t1), 0);
    CHECK(all_done(&t1, 1, 60));
    CHECK_EQ(t1.rc, 0);
    for (int i = 0; i < N_REQ - 1; i++) /* busy and t1's refresh hold two slots: one more */
        CHECK_EQ(submit(s, &r[i]), 0);
    CHECK(all_done(r, N_REQ - 1, 120));
    CHECK(all_done(&busy, 1, 60));
    CHECK_EQ(busy.rc, 0);
    CHECK(matches_ref(head, &busy));
    for (int i = 0; i < N_REQ - 1; i++) {
        CHECK_EQ(r[i].rc, 0);
        CHECK(matches_ref(head, &r[i]));
    }
    if (t1.n != t1.max_tokens)
        return;
    make_req(&t2, 0, nv);
    t2.max_tokens = 8;
    memcpy(t2.prompt, t1.prompt, (size_t)t1.n_prompt * sizeof t2.prompt[0]);
    memcpy(t2.prompt + t1.n_prompt, t1.ids, (size_t)t1.n * sizeof t2.prompt[0]);
    for (int j = 0; j < 6; j++)
        t2.prompt[t1.n_prompt + t1.n + j] = 200 + j * 7;
    t2.n_prompt = t1.n_prompt + t1.n + 6;
    refs(model, &t2, 1);
    CHECK_EQ(submit(s, &t2), 0);
    CHECK(all_done(&t2, 1, 60));
    CHECK_EQ(t2.rc, 0);
    CHECK(matches_ref(head, &t2));
}

/* Devices with layers in the head's plan: one micro-batch each. */
static int ring_members(hr_agent *head) {
    json_t *st = head_status(head), *d;
    size_t i;
    int n = 0;
    json_array_foreach(json_object_get(st, "devices"), i, d) n +=
        json_integer_value(json_object_get(d, "w")) > 0;
    json_decref(st);
    return n;
}

int main(void) {
    hr_log_set_level(getenv("SERVE_LOG") ? HR_LOG_LEVEL_INFO : HR_LOG_LEVEL_ERROR);
    char model[512];
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
    if (access(model, R_OK) != 0) {
        hr_check_skip("serve: needs the shared small-llama-q4_0.gguf");
        return hr_check_finish("serve");
    }
    /* a 3-agent ring, one thread each */
    agent_th ag[3] = {0};
    int ok = 0;
    for (int i = 0; ok == 0 && i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "dev%d", i);
        hr_agent_params p =
            agent_params(model, name, i ? hr_agent_endpoint(ag[0].a) : NULL, N_CTX, 2);
        p.n_threads = 1;
        p.n_parallel = N_REQ;
        p.ring_batches = 3; /* one micro-batch per device, though they share this machine */
        ok = agent_begin(&ag[i], &p);
    }
    CHECK_EQ(ok, 0);
    if (ok == 0 && head_ready(ag[0].a, 2, 30000) == 0) {
        test_eight(model, ag[0].a, ring_members(ag[0].a));
        test_prefix(model, ag[0].a);
        test_evict(model, ag[0].a);
        test_leave(model, ag);
    } else {
        CHECK(0);
    }
    agents_end(ag, 3);
    /* one agent: the batched session without a ring */
    hr_agent_params p = agent_params(model, "solo", NULL, N_CTX, 0);
    p.n_parallel = N_REQ;
    agent_th solo = {0};
    if (agent_begin(&solo, &p) == 0 && head_ready(solo.a, 0, 20000) == 0) {
        test_eight(model, solo.a, 1);
        test_prefix(model, solo.a);
        test_evict(model, solo.a);
    } else {
        CHECK(0);
    }
    agent_end(&solo);
    /* F32 weights: decode rows equal prefill rows (only the last token is fed after) */
    char f32[512];
    hr_shared_path("models/tiny-llama-f32.gguf", f32, sizeof f32);
    p = agent_params(f32, "solo32", NULL, N_CTX, 0);
    p.n_parallel = 4;
    if (agent_begin(&solo, &p) == 0 && head_ready(solo.a, 0, 20000) == 0)
        test_prefix(f32, solo.a);
    else
        CHECK(0);
    agent_end(&solo);
    return hr_check_finish("serve");
}
