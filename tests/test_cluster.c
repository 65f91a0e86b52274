/* test_cluster.c - local clusters of 1-3 agents on loopback:
 *  - exactness: greedy ids on the ring (F32 wire) equal the single-process
 *    run for every shared model, 1/2/3 agents, k = 1 and k > 1; teacher-
 *    forced logits byte-equal (F32 wire) and within 2e-3 (F16) relative;
 *    and on a generated 12-layer model (made here with hr_mkmodel_write),
 *    3 agents with k = 2 and k = 3 and forced windows: the head's plan (its
 *    status) has that k and 3 devices with layers, each of which computed
 *    tokens, and the answers are still the single process's bits;
 *  - robustness: garbage, oversized and forged frames sent to every port
 *    during a generation are rejected without harm; a wrong model or
 *    protocol version is refused at join;
 *  - a killed worker process (hearth agent via HR_BIN, F32 wire): the head
 *    re-plans, replays and the answer equals the one without the kill; the
 *    restarted worker is planned in at the next request;
 *  - comings and goings (HR_BIN): `hearth prompt` / `status` against no
 *    head fail in < 6 s with "no head at"; a worker started before its
 *    head logs its join retries, and the head folds its queued JOINs into
 *    one plan; a head stopped with SIGTERM tells the worker, which joins
 *    again (with its backoff) and is planned in by the next head.
 * Every agent here shares the key folder $HEARTH_KEY_DIR (CURVE on), and
 * the garbage senders use that key so their frames reach the parsers. */
#include "agent/agent.h"
#include "common/log.h"
#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "ring/ring.h"

#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define N_GEN 32
#define N_CTX 256

typedef struct {
    agent_th ag[3];
    int n;
} cluster;

#define WIRE_DEFAULT (-1) /* leave hr_agent_params_default()'s wire type */

/* Starts n agents (the first is the head) and waits until ready; windows
 * (NULL: the scheduler's) forces the window sizes per ring position. */
static int cluster_start(cluster *c, const char *model, int n, int k, int dtype,
                         const char *windows) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "dev%d", i);
        hr_agent_params p =
            agent_params(model, name, i ? hr_agent_endpoint(c->ag[0].a) : NULL, N_CTX, n - 1);
        p.k = k;
        p.windows = windows;
        if (dtype != WIRE_DEFAULT)
            p.wire_dtype = dtype;
        if (agent_begin(&c->ag[i], &p))
            return -1;
        c->n++;
    }
    return head_ready(c->ag[0].a, n - 1, 20000);
}

static void cluster_stop(cluster *c) {
    agents_end(c->ag, c->n);
    memset(c, 0, sizeof *c);
}

/* The plan the head made, from its status: k, the devices with at least
 * one layer in the ring (active), the layers they hold in all (their
 * windows of every round), and "name:first-last,..." per active device. */
typedef struct {
    int k, active, layers, n_layer;
    uint32_t plan_id;
    char desc[256];
} plan_seen;

static plan_seen plan_of(hr_agent *head) {
    plan_seen ps = {.k = -1};
    json_t *st = head_status(head);
    if (!st)
        return ps;
    ps.k = (int)json_integer_value(json_object_get(st, "k"));
    ps.n_layer = (int)json_integer_value(json_object_get(st, "n_layer"));
    ps.plan_id = (uint32_t)json_integer_value(json_object_get(st, "plan_id"));
    json_t *d;
    size_t i, n = 0;
    json_array_foreach(json_object_get(st, "devices"), i, d) {
        int layers = 0; /* its windows of every round */
        json_t *v;
        size_t r;
        json_array_foreach(json_object_get(d, "windows"), r, v) layers +=
            (int)json_integer_value(v);
        if (layers <= 0 || json_is_true(json_object_get(d, "lost")) ||
            json_integer_value(json_object_get(d, "ring_pos")) < 0)
            continue;
        ps.active++;
        ps.layers += layers;
        const char *nm = json_string_value(json_object_get(d, "name"));
        const char *ly = json_string_value(json_object_get(d, "layers"));
        if (n < sizeof ps.desc)
            n += (size_t)snprintf(ps.desc + n, sizeof ps.desc - n, "%s%s:%s", n ? " " : "",
                                  nm ? nm : "?", ly ? ly : "?");
    }
    json_decref(st);
    return ps;
}

/* Devices of the plan with layers that have computed no token yet, as the
 * head's status shows them (workers report in heartbeats): polled for up
 * to timeout_ms until every one of them has. */
static int idle_active_devices(hr_agent *head, int timeout_ms) {
    double t0 = now_s();
    for (;;) {
        int idle = 0;
        json_t *st = head_status(head), *d;
        size_t i;
        json_array_foreach(json_object_get(st, "devices"), i, d) {
            if (json_integer_value(json_object_get(d, "w")) > 0 &&
                json_integer_value(json_object_get(d, "ring_pos")) >= 0 &&
                json_integer_value(json_object_get(d, "tokens")) <= 0)
                idle++;
        }
        json_decref(st);
        if (!st)
            idle = -1;
        if (idle == 0 || (now_s() - t0) * 1000 > timeout_ms)
            return idle;
        sleep_ms(50);
    }
}

typedef struct {
    int32_t ids[N_GEN + 8];
    int n;
} gen_out;

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    gen_out *g = ud;
    if (id >= 0 && g->n < N_GEN + 8)
        g->ids[g->n++] = id;
    return 0;
}

/* Single-process reference: greedy ids and all teacher-forced logits. */
typedef struct {
    hr_gguf *g;
    hr_model *m;
    hr_ctx *ctx;
    int nv;
} ref_t;

static int ref_open(ref_t *r, const char *model) {
    char err[HR_ERR_LEN];
    memset(r, 0, sizeof *r);
    if (hr_gguf_open(&r->g, model, err) || hr_model_load(&r->m, r->g, err))
        return -1;
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_batch = 64;
    if (hr_ctx_create(&r->ctx, r->m, &cp, err))
        return -1;
    r->nv = hr_model_hparams(r->m)->n_vocab;
    return 0;
}

static void ref_close(ref_t *r) {
    hr_ctx_destroy(r->ctx);
    hr_model_free(r->m);
    hr_gguf_close(r->g);
}

/* The same steps as `hearth run --temp 0`. */
static void ref_generate(ref_t *r, const hr_tokenizer *tok, const int32_t *ids, int n,
                         gen_out *out) {
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    ref_sample(r->ctx, r->nv, &sp, tok, ids, n, N_GEN, out->ids, &out->n);
}

static int generate(hr_agent *head, const int32_t *ids, int n, gen_out *out) {
    char err[HR_ERR_LEN];
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    out->n = 0;
    int rc = hr_head_generate(head, ids, n, &sp, N_GEN, on_tok, out, NULL, NULL, err);
    if (rc)
        fprintf(stderr, "generate: %s\n", err);
    return rc;
}

/* One cluster configuration of test_model: n agents, k rounds (forced),
 * wire type, windows (NULL: the scheduler's); active > 0: the devices with
 * layers the head's plan must have; again: a second request on the ring. */
typedef struct {
    int n, k, dtype;
    const char *windows;
    int active;
    bool again;
} cluster_cfg;

/* Every configuration of cfg on the model at path (label: how to name it)
 * against the single-process run. */
static void test_model_cfgs(const char *path, const char *label, const cluster_cfg *cfg,
                            int n_cfg) {
    ref_t r;
    if (ref_open(&r, path)) {
        fprintf(stderr, "cannot open %s\n", path);
        CHECK(0);
        return;
    }
    const hr_weight *wq = &hr_model_layer(r.m, 0)->wq;
    bool quantized = wq->type != HR_TYPE_F32 && wq->type != HR_TYPE_F16;
    hr_tokenizer *tok = NULL;
    char err[HR_ERR_LEN];
    hr_tokenizer_create(&tok, r.g, err);
    int32_t prompt[64];
    int n_prompt = 0;
    const char *text = "The quick brown fox jumps over the lazy dog because";
    hr_tokenizer_encode(tok, text, strlen(text), true, false, prompt, 64, &n_prompt);
    gen_out ref;
    ref_generate(&r, tok, prompt, n_prompt, &ref);
    /* teacher-forced sequence: prompt + reference continuation */
    int32_t seq[64 + N_GEN];
    int n_seq = 0;
    for (int i = 0; i < n_prompt; i++)
        seq[n_seq++] = prompt[i];
    for (int i = 0; i < ref.n && n_seq < 64 + N_GEN; i++)
        seq[n_seq++] = ref.ids[i];
    float *want = malloc((size_t)n_seq * r.nv * sizeof(float));
    float *got = malloc((size_t)n_seq * r.nv * sizeof(float));
    hr_ctx_eval(r.ctx, seq, n_seq, 0, want, true, err);
    for (int c = 0; c < n_cfg; c++) {
        cluster cl;
        if (cluster_start(&cl, path, cfg[c].n, cfg[c].k, cfg[c].dtype, cfg[c].windows)) {
            CHECK(0);
            cluster_stop(&cl);
            continue;
        }
        /* the plan the head made and runs with */
        plan_seen ps = plan_of(cl.ag[0].a);
        gen_out out;
        CHECK_EQ(generate(cl.ag[0].a, prompt, n_prompt, &out), 0);
        int same = out.n == ref.n;
        for (int i = 0; same && i < out.n; i++)
            same = out.ids[i] == ref.ids[i];
        CHECK_EQ(hr_head_logits(cl.ag[0].a, seq, n_seq, got, err), 0);
        double rel = hr_compare_logits(got, want, n_seq, r.nv).rel;
        int first_diff = -1;
        for (int i = 0; i < out.n && i < ref.n && first_diff < 0; i++)
            if (out.ids[i] != ref.ids[i])
                first_diff = i;
        printf("%-24s agents %d k %d wire %s: plan %u: k %d, %d active device(s) [%s]; ids %s "
               "(%d tokens%s%d), logits max rel %.2e\n",
               label, cfg[c].n, cfg[c].k,
               cfg[c].dtype == HR_RING_F16   ? "f16"
               : cfg[c].dtype == HR_RING_F32 ? "f32"
                                             : "default",
               ps.plan_id, ps.k, ps.active, ps.desc, same ? "identical" : "DIFFER", out.n,
               first_diff >= 0 ? ", first diff at " : ", ", first_diff >= 0 ? first_diff : out.n,
               rel);
        /* the head planned the rounds asked for, every layer once */
        CHECK_INT(ps.k, ==, cfg[c].k);
        CHECK_INT(ps.layers, ==, ps.n_layer);
        CHECK_INT(ps.active, >=, 1);
        CHECK_INT(ps.active, <=, cfg[c].n);
        if (cfg[c].active > 0) {
            CHECK_INT(ps.active, ==, cfg[c].active);
            /* and each of them computed: no device stood by */
            CHECK_INT(idle_active_devices(cl.ag[0].a, 3000), ==, 0);
            /* the plan stayed the one it ran */
            CHECK_INT(plan_of(cl.ag[0].a).plan_id, ==, ps.plan_id);
        }
        if (cfg[c].dtype != HR_RING_F16) { /* the exact wire: the bits of one process */
            CHECK(same);
            CHECK(rel == 0.0);
            CHECK_EQ(memcmp(got, want, (size_t)n_seq * r.nv * sizeof(float)), 0);
        } else {
            /* F16 rounding of the hidden state is 2^-11 relative; weights quantized
             * with Q8 activations re-round it, which amplifies it (see README) */
            CHECK(rel <= (quantized ? 3e-2 : 2e-3));
        }
        /* a second request on the same ring reuses the KV slots */
        if (cfg[c].again) {
            gen_out again;
            CHECK_EQ(generate(cl.ag[0].a, prompt, n_prompt, &again), 0);
            CHECK_EQ(again.n, ref.n);
            CHECK(memcmp(again.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n) == 0);
        }
        /* workers stop first: a head with forced windows cannot re-plan
         * without them and would say so at error level */
        if (cfg[c].windows)
            hr_log_set_level(HR_LOG_LEVEL_NONE);
        cluster_stop(&cl);
        hr_log_set_level(HR_LOG_LEVEL_ERROR);
    }
    free(want);
    free(got);
    hr_tokenizer_destroy(tok);
    ref_close(&r);
}

/* A shared model: 1, 2 and 3 agents with k = 1, 2 agents with k > 1 (a
 * divisor of its 2-4 layers: 3 devices cannot all hold layers there, see
 * test_generated), and the F16 wire. */
static void test_model(const char *file) {
    char path[512];
    hr_shared_path(file, path, sizeof path);
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    char err[HR_ERR_LEN];
    if (hr_gguf_open(&g, path, err) || hr_model_load(&m, g, err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        CHECK(0);
        hr_gguf_close(g);
        return;
    }
    int L = hr_model_hparams(m)->n_layer;
    hr_model_free(m);
    hr_gguf_close(g);
    int kk = L % 2 == 0 ? 2 : L;
    const cluster_cfg cfg[] = {{1, 1, HR_RING_F32, NULL, 1, false},
                               {2, 1, WIRE_DEFAULT, NULL, 0, false},
                               {2, kk, HR_RING_F32, NULL, 0, false},
                               {3, 1, HR_RING_F32, NULL, 0, true},
                               {2, 1, HR_RING_F16, NULL, 0, false}};
    /* what users get without --wire must be the exact one */
    CHECK_EQ(hr_agent_params_default().wire_dtype, HR_RING_F32);
    test_model_cfgs(path, file, cfg, (int)(sizeof cfg / sizeof cfg[0]));
}

/* 3 agents, k > 1, every device with layers: a generated 12-layer model
 * (tiny shape, Q4_0, TinyLlama's tokenizer: 4 MiB, made in well under a
 * second) and windows forced so that the scheduler cannot put them all on
 * the head (the devices here are alike and the head saves the ring's
 * hops): k = 2 with windows 2,2,2 (each device two windows of 2 layers)
 * and k = 3 with 2,1,1 (the default wire); and rounds with windows of their
 * own: k = 3 with 2,1,1 / 1,2,1 / 1,1,2, k = 5 (not a divisor of 12) with
 * rounds where the head or the last device has no layers and passes the
 * hidden states on, 2 agents with 5,2 / 3,2 and the head alone with 5 / 7. */
static void test_generated(void) {
    char dir[64], path[128], vocab[512], err[HR_ERR_LEN] = "";
    if (tmp_dir_make(dir, sizeof dir, "cluster")) {
        CHECK(0);
        return;
    }
    snprintf(path, sizeof path, "%s/gen12.gguf", dir);
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "tiny"), 0);
    mp.n_layer = 12;
    mp.ftype = "q4_0";
    mp.seed = 12;
    mp.vocab_from = hr_shared_path("models/tiny-llama-f32.gguf", vocab, sizeof vocab);
    double t0 = now_s();
    int rc = hr_mkmodel_write(&mp, path, NULL, NULL, err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "mkmodel: %s\n", err);
        tmp_dir_remove(dir);
        return;
    }
    printf("generated %s: %d layers, embd %d, %s, in %.2f s\n", path, mp.n_layer, mp.n_embd,
           mp.ftype, now_s() - t0);
    const cluster_cfg cfg[] = {{3, 2, HR_RING_F32, "2,2,2", 3, false},
                               {3, 3, WIRE_DEFAULT, "2,1,1", 3, true},
                               {3, 3, HR_RING_F32, "2,1,1/1,2,1/1,1,2", 3, false},
                               {3, 5, HR_RING_F32, "1,1,1/1,1,0/0,1,1/1,1,1/1,1,0", 3, true},
                               {2, 2, HR_RING_F32, "5,2/3,2", 2, false},
                               {1, 2, HR_RING_F32, "5/7", 1, false}};
    test_model_cfgs(path, "generated 12 layers", cfg, (int)(sizeof cfg / sizeof cfg[0]));
    tmp_dir_remove(dir);
}

/* ---- robustness ---- */

typedef struct {
    const char *eps[8];
    int n_eps;
    atomic_int stop;
    int sent;
    int n_embd;       /* plausible frames: the model's width */
    uint32_t plan_id; /* and the current plan */
} garbage_t;

static void *garbage_main(void *arg) {
    garbage_t *g = arg;
    void *z = zmq_ctx_new();
    void *s[8];
    char err[HR_ERR_LEN];
    hr_ring_keys *keys = NULL;
    if (hr_ring_keys_open(&keys, NULL, err))
        fprintf(stderr, "garbage: %s\n", err);
    for (int i = 0; i < g->n_eps; i++) {
        int type = strstr(g->eps[i], "#data") ? ZMQ_PUSH : ZMQ_DEALER;
        char ep[160];
        snprintf(ep, sizeof ep, "%s", g->eps[i]);
        char *hash = strchr(ep, '#');
        if (hash)
            *hash = 0;
        s[i] = zmq_socket(z, type);
        int zero = 0, tmo = 100;
        zmq_setsockopt(s[i], ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(s[i], ZMQ_SNDTIMEO, &tmo, sizeof tmo);
        if (keys)
            hr_ring_secure_client(s[i], keys, hr_ring_keys_public(keys), err);
        zmq_connect(s[i], ep);
    }
    size_t big = HR_RING_MAX_FRAME + 4096;
    uint8_t *buf = calloc(1, big);
    uint64_t rng = 42;
    int round = 0;
    while (!atomic_load(&g->stop) && round < 40) {
        for (int i = 0; i < g->n_eps; i++) {
            for (int j = 0; j < 64; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                buf[j] = (uint8_t)(rng >> 56);
            }
            zmq_send(s[i], buf, 1 + (rng >> 40) % 64, 0); /* random bytes */
            hr_ring_hdr h = {.type = HR_RING_BATCH,
                             .dtype = HR_RING_F32,
                             .n_tok = 1,
                             .pos = 3,
                             .plan_id = 1,
                             .req_id = 1,
                             .len = 4096};
            hr_ring_hdr_write(buf, &h); /* forged rows and hidden state: wrong dims/plan */
            zmq_send(s[i], buf, HR_RING_HDR_SIZE + 4096, 0);
            h.len = 100; /* header says 100, frame carries 10 */
            hr_ring_hdr_write(buf, &h);
            zmq_send(s[i], buf, HR_RING_HDR_SIZE + 10, 0);
            h.type = HR_RING_PLAN; /* a control frame on the wrong port, or not from the head */
            h.len = 2;
            hr_ring_hdr_write(buf, &h);
            memcpy(buf + HR_RING_HDR_SIZE, "{}", 2);
            zmq_send(s[i], buf, HR_RING_HDR_SIZE + 2, 0);
            buf[4] = 7; /* other version */
            zmq_send(s[i], buf, HR_RING_HDR_SIZE + 2, 0);
            g->sent += 5;
            /* replayed / out-of-order rows that fit the plan: a row of a
             * session older than any (dropped), and a jump ahead in a made-up
             * session, leaving a gap in slot 0 (refused, nothing computed) */
            size_t plen = HR_RING_ROW_SIZE + (size_t)g->n_embd * 4;
            for (int k = 0; k < 2 && HR_RING_HDR_SIZE + plen <= big; k++) {
                h = (hr_ring_hdr){.type = HR_RING_BATCH,
                                  .dtype = HR_RING_F32,
                                  .n_tok = 1,
                                  .pos = 0,
                                  .plan_id = g->plan_id,
                                  .req_id = k ? 1000000 : 0,
                                  .len = (uint32_t)plen};
                memset(buf + HR_RING_HDR_SIZE, 0x3f, plen);
                int32_t slot = 0, pos = k ? 4000 : 2;
                hr_ring_rows_write(buf + HR_RING_HDR_SIZE, &slot, &pos, 1);
                hr_ring_hdr_write(buf, &h);
                zmq_send(s[i], buf, HR_RING_HDR_SIZE + plen, 0);
                g->sent++;
            }
        }
        if (round == 20) /* oversized: zmq drops the connection */
            for (int i = 0; i < g->n_eps; i++)
                zmq_send(s[i], buf, big, ZMQ_DONTWAIT);
        round++;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    free(buf);
    for (int i = 0; i < g->n_eps; i++)
        zmq_close(s[i]);
    zmq_ctx_term(z);
    hr_ring_keys_close(keys);
    return NULL;
}

static void test_garbage(void) {
    char path[512];
    hr_shared_path("models/small-llama-q4_0.gguf", path, sizeof path);
    ref_t r;
    if (ref_open(&r, path)) {
        CHECK(0);
        return;
    }
    char err[HR_ERR_LEN];
    hr_tokenizer *tok = NULL;
    hr_tokenizer_create(&tok, r.g, err);
    int32_t prompt[64];
    int n_prompt = 0;
    hr_tokenizer_encode(tok, "Once upon a time", 16, true, false, prompt, 64, &n_prompt);
    gen_out ref;
    ref_generate(&r, tok, prompt, n_prompt, &ref);
    cluster cl;
    CHECK_EQ(cluster_start(&cl, path, 3, 2, HR_RING_F32, NULL), 0);
    garbage_t g = {.n_eps = 0, .n_embd = hr_model_hparams(r.m)->n_embd};
    {
        char *st = hr_head_status_json(cl.ag[0].a);
        const char *pp = st ? strstr(st, "\"plan_id\":") : NULL;
        g.plan_id = pp ? (uint32_t)atoi(pp + 10) : 1;
        free(st);
    }
    char eps[6][200];
    for (int i = 0; i < 3; i++) {
        snprintf(eps[2 * i], 200, "%s", hr_agent_endpoint(cl.ag[i].a));
        snprintf(eps[2 * i + 1], 200, "%s#data", hr_agent_data_endpoint(cl.ag[i].a));
        g.eps[g.n_eps++] = eps[2 * i];
        g.eps[g.n_eps++] = eps[2 * i + 1];
    }
    pthread_t th;
    pthread_create(&th, NULL, garbage_main, &g);
    int ok = 0;
    for (int rep = 0; rep < 4; rep++) {
        gen_out out;
        if (generate(cl.ag[0].a, prompt, n_prompt, &out) == 0 && out.n == ref.n &&
            memcmp(out.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n) == 0)
            ok++;
    }
    atomic_store(&g.stop, 1);
    pthread_join(th, NULL);
    printf("garbage: %d frames sent to 6 ports during 4 generations; %d/4 exact\n", g.sent, ok);
    CHECK_EQ(ok, 4);
    gen_out out;
    CHECK_EQ(generate(cl.ag[0].a, prompt, n_prompt, &out), 0);
    CHECK_EQ(out.n, ref.n);
    /* a joining agent with another model is refused */
    hr_agent_params p = hr_agent_params_default();
    char other[512];
    hr_shared_path("models/tiny-llama-f32.gguf", other, sizeof other);
    p.model_path = other;
    p.listen = "127.0.0.1:0";
    p.head = hr_agent_endpoint(cl.ag[0].a);
    p.name = "intruder";
    hr_agent *bad = NULL;
    CHECK_EQ(hr_agent_create(&bad, &p, err), 0);
    if (bad) {
        int rc = hr_agent_run(bad, err);
        CHECK_EQ(rc, HR_EDENIED);
        CHECK(strstr(err, "model mismatch") != NULL);
        printf("intruder: %s\n", err);
        hr_agent_destroy(bad);
    }
    /* a JOIN of another protocol version is refused with a REJECT */
    void *z = zmq_ctx_new();
    void *d = hr_ring_socket(z, ZMQ_DEALER, NULL, err);
    hr_ring_keys *keys = NULL;
    if (hr_ring_keys_open(&keys, NULL, err) == 0)
        hr_ring_secure_client(d, keys, hr_ring_keys_public(keys), err);
    hr_ring_keys_close(keys);
    zmq_connect(d, hr_agent_endpoint(cl.ag[0].a));
    uint8_t buf[HR_RING_HDR_SIZE + 512];
    hr_ring_hdr h = {.type = HR_RING_JOIN, .pos = -1, .len = 2};
    hr_ring_hdr_write(buf, &h);
    buf[4] = HR_RING_VERSION + 1;
    memcpy(buf + HR_RING_HDR_SIZE, "{}", 2);
    zmq_send(d, buf, HR_RING_HDR_SIZE + 2, 0);
    long n = hr_ring_recv(d, NULL, NULL, buf, sizeof buf, 3000, &h, err);
    CHECK(n >= HR_RING_HDR_SIZE);
    CHECK_EQ(h.type, HR_RING_REJECT);
    zmq_close(d);
    zmq_ctx_term(z);
    /* still serving exactly */
    CHECK_EQ(generate(cl.ag[0].a, prompt, n_prompt, &out), 0);
    CHECK(out.n == ref.n && memcmp(out.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n) == 0);
    cluster_stop(&cl);
    hr_tokenizer_destroy(tok);
    ref_close(&r);
}

/* ---- a killed worker process ---- */

static pid_t spawn(const char *const argv[], const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void test_kill(void) {
    const char *bin = getenv("HR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        hr_check_skip("kill test: HR_BIN not set");
        return;
    }
    char model[512];
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
    /* every file of this run in its own folder (runs may overlap) */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/hr-test-kill-XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char f_ref[96], f_out[96], f_rc[96], f_head[96], f_cl[96], f_st[96], f_run[96], f_w[3][96];
    snprintf(f_ref, sizeof f_ref, "%s/ref.txt", dir);
    snprintf(f_out, sizeof f_out, "%s/out.txt", dir);
    snprintf(f_rc, sizeof f_rc, "%s/rc", dir);
    snprintf(f_head, sizeof f_head, "%s/head.log", dir);
    snprintf(f_cl, sizeof f_cl, "%s/client.log", dir);
    snprintf(f_st, sizeof f_st, "%s/status.json", dir);
    snprintf(f_run, sizeof f_run, "%s/run.txt", dir);
    for (int i = 0; i < 3; i++)
        snprintf(f_w[i], sizeof f_w[i], "%s/w%d.log", dir, i + 1);
    int base = free_port_block(24);
    char hl[32], w1l[32], w2l[32], hd[32];
    snprintf(hl, sizeof hl, "127.0.0.1:%d", base);
    snprintf(w1l, sizeof w1l, "127.0.0.1:%d", base + 10);
    snprintf(w2l, sizeof w2l, "127.0.0.1:%d", base + 20);
    snprintf(hd, sizeof hd, "127.0.0.1:%d", base);
    const char *ha[] = {bin,    "agent",        "-m",       model, "--listen", hl,     "--name",
                        "head", "--no-profile", "--expect", "2",   "--ctx",    "4096", "--k",
                        "1",    "--wire",       "f32",      NULL};
    const char *w1a[] = {bin,      "agent", "-m",     model,        "--listen",     w1l,
                         "--head", hd,      "--name", "worker-one", "--no-profile", NULL};
    const char *w2a[] = {bin,      "agent", "-m",     model,        "--listen",     w2l,
                         "--head", hd,      "--name", "worker-two", "--no-profile", NULL};
    pid_t h = spawn(ha, f_head);
    pid_t w1 = spawn(w1a, f_w[0]);
    pid_t w2 = spawn(w2a, f_w[1]);
    /* the answer without a kill */
    char cmd[2048], tail[256];
    const char *ask = "%s prompt --head %s --temp 0.8 --seed 5 -n 1500 --timeout 60 "
                      "'Tell me a story' >%s 2>%s";
    snprintf(cmd, sizeof cmd, ask, bin, hd, f_ref, f_cl);
    double tr = now_s();
    int rc0 = system(cmd);
    CHECK_EQ(rc0, 0);
    if (rc0 != 0) { /* say why: the agents' own words */
        const char *logs[] = {f_cl, f_head, f_w[0], f_w[1]};
        for (int i = 0; i < 4; i++) {
            char *lg = slurp(logs[i], NULL);
            size_t n = lg ? strlen(lg) : 0;
            fprintf(stderr, "--- %s (last 2000 bytes)\n%s\n", logs[i],
                    lg ? lg + (n > 2000 ? n - 2000 : 0) : "(none)");
            free(lg);
        }
    }
    tr = now_s() - tr; /* kill about half-way through the same request */
    /* the same request, worker-two killed mid-way */
    snprintf(tail, sizeof tail, "%s; echo $? >%s", f_cl, f_rc);
    snprintf(cmd, sizeof cmd, ask, bin, hd, f_out, tail);
    pid_t cl = fork();
    if (cl == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* kill mid-way: once a third of the answer is out (a time would depend on
     * how busy the machine is), at most after the reference's whole time */
    char *ref0 = slurp(f_ref, NULL);
    size_t third = ref0 ? strlen(ref0) / 3 : 0;
    free(ref0);
    double tk = now_s();
    for (;;) {
        struct stat sb;
        if ((stat(f_out, &sb) == 0 && (size_t)sb.st_size >= third) || now_s() - tk > tr)
            break;
        struct timespec t = {0, 5000000};
        nanosleep(&t, NULL);
    }
    kill(w2, SIGKILL);
    double t0 = now_s();
    int st = 0;
    waitpid(w2, &st, 0);
    pid_t done = 0;
    while ((done = waitpid(cl, &st, WNOHANG)) == 0 && now_s() - t0 < 60) {
        struct timespec t = {0, 20000000};
        nanosleep(&t, NULL);
    }
    printf("kill: client returned %.2f s after the worker was killed\n", now_s() - t0);
    CHECK(done == cl);
    char *ref = slurp(f_ref, NULL), *out = slurp(f_out, NULL);
    char *rcs = slurp(f_rc, NULL), *log = slurp(f_head, NULL);
    /* the independent reference: one process, no ring (F32 wire = same numbers) */
    snprintf(cmd, sizeof cmd,
             "%s run -m %s --temp 0.8 --seed 5 -n 1500 --ctx 4096 -p 'Tell me a story' >%s "
             "2>/dev/null",
             bin, model, f_run);
    CHECK_EQ(system(cmd), 0);
    char *run = slurp(f_run, NULL);
    CHECK(ref && out && strlen(ref) > 20);
    CHECK(run && ref && strcmp(run, ref) == 0);
    CHECK(run && out && strcmp(run, out) == 0);
    free(run);
    CHECK(rcs && atoi(rcs) == 0);
    CHECK(log && strstr(log, "worker-two") && strstr(log, "recovered on plan"));
    printf("kill: answer after recovery %s the one without the kill (%zu bytes)\n",
           ref && out && strcmp(ref, out) == 0 ? "equals" : "DIFFERS from", out ? strlen(out) : 0);
    free(ref);
    free(out);
    free(rcs);
    free(log);
    /* worker-two comes back; the next request uses all three again */
    w2 = spawn(w2a, f_w[2]);
    snprintf(cmd, sizeof cmd, ask, bin, hd, f_out, "/dev/null");
    double t1 = now_s();
    bool three = false;
    while (!three && now_s() - t1 < 20) {
        snprintf(cmd, sizeof cmd, "%s status --head %s --json >%s", bin, hd, f_st);
        if (system(cmd) == 0) {
            char *js = slurp(f_st, NULL);
            three = js && strstr(js, "\"ready\":true") && strstr(js, "worker-two") &&
                    !strstr(js, "\"ring_pos\":-1");
            free(js);
        }
        struct timespec t = {0, 200000000};
        nanosleep(&t, NULL);
    }
    CHECK(three);
    snprintf(cmd, sizeof cmd, ask, bin, hd, f_out, "/dev/null");
    CHECK_EQ(system(cmd), 0);
    char *again = slurp(f_out, NULL), *r2 = slurp(f_ref, NULL);
    CHECK(again && r2 && strcmp(again, r2) == 0);
    free(again);
    free(r2);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    kill(w2, SIGTERM);
    kill(w1, SIGTERM);
    kill(h, SIGTERM);
    waitpid(w2, &st, 0);
    waitpid(w1, &st, 0);
    waitpid(h, &st, 0);
    CHECK(WIFEXITED(st));
}

/* Count of needle in the file at path. */
static int count_in(const char *path, const char *needle) {
    char *s = slurp(path, NULL);
    int n = 0;
    for (const char *p = s ? strstr(s, needle) : NULL; p; p = strstr(p + 1, needle))
        n++;
    free(s);
    return n;
}

/* Polls until the file at path holds needle at least n times. */
static bool wait_count(const char *path, const char *needle, int n, double timeout_s) {
    double t0 = now_s();
    while (count_in(path, needle) < n) {
        if (now_s() - t0 > timeout_s)
            return false;
        struct timespec t = {0, 50000000};
        nanosleep(&t, NULL);
    }
    return true;
}

static void test_comings_and_goings(void) {
    const char *bin = getenv("HR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        hr_check_skip("comings and goings: HR_BIN not set");
        return;
    }
    char model[512], dir[64], f_h[96], f_h2[96], f_w[96], f_err[96], cmd[1024];
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
    snprintf(dir, sizeof dir, "/tmp/hr-test-join-XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    snprintf(f_h, sizeof f_h, "%s/head.log", dir);
    snprintf(f_h2, sizeof f_h2, "%s/head2.log", dir);
    snprintf(f_w, sizeof f_w, "%s/worker.log", dir);
    snprintf(f_err, sizeof f_err, "%s/client.err", dir);
    int base = 20000 + (int)((getpid() + 7) % 20000);
    char hl[32], wl[32];
    snprintf(hl, sizeof hl, "127.0.0.1:%d", base + 30);
    snprintf(wl, sizeof wl, "127.0.0.1:%d", base + 40);
    /* nothing at the head's address: clients say so within the connect timeout */
    const char *verbs[] = {"status", "prompt --timeout 60 -n 4 hi"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s %s --head %s >/dev/null 2>%s", bin, verbs[i], hl, f_err);
        double t0 = now_s();
        int rc = system(cmd);
        double t = now_s() - t0;
        printf("no head: `hearth %s` failed after %.2f s\n", verbs[i], t);
        CHECK(rc != 0);
        CHECK(t < 6.0);
        CHECK_EQ(count_in(f_err, "no head at"), 1);
    }
    fflush(stdout); /* before the next fork */
    /* the worker first: it retries, saying so */
    const char *wa[] = {bin,      "agent", "-m",     model,   "--listen",     wl,
                        "--head", hl,      "--name", "early", "--no-profile", NULL};
    const char *ha[] = {bin,    "agent",        "-m",       model, "--listen", hl,    "--name",
                        "head", "--no-profile", "--expect", "1",   "--ctx",    "512", NULL};
    pid_t w = spawn(wa, f_w);
    CHECK(wait_count(f_w, "no answer from head", 3, 10));
    /* the head: the queued JOINs make one device and one plan */
    pid_t h = spawn(ha, f_h);
    CHECK(wait_count(f_h, "ring ready", 1, 30));
    struct timespec settle = {0, 500000000}; /* repeated JOINs would re-plan by now */
    nanosleep(&settle, NULL);
    CHECK_EQ(count_in(f_h, "early joined from"), 1);
    CHECK_EQ(count_in(f_h, "devices in the ring"), 1); /* one plan made */
    CHECK_EQ(count_in(f_h, "plan 1: 2 devices"), 1);
    /* SIGTERM to the head: the worker hears it at once and joins again */
    int retries = count_in(f_w, "no answer from head");
    double t0 = now_s();
    kill(h, SIGTERM);
    int st = 0;
    waitpid(h, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(wait_count(f_w, "is going away", 1, 2));
    double t_told = now_s() - t0;
    printf("head stopped: the worker knew after %.2f s\n", t_told);
    CHECK(t_told < 2.0); /* the heartbeat silence would take 6 s */
    CHECK(wait_count(f_w, "no answer from head", retries + 1, 5));
    /* a new head: the worker is planned in */
    h = spawn(ha, f_h2);
    CHECK(wait_count(f_h2, "ring ready: plan 1, 1 workers", 1, 30));
    snprintf(cmd, sizeof cmd, "%s prompt --head %s -n 4 hi >/dev/null 2>%s", bin, hl, f_err);
    CHECK_EQ(system(cmd), 0);
    kill(w, SIGTERM);
    kill(h, SIGTERM);
    waitpid(w, &st, 0);
    waitpid(h, &st, 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

int main(int argc, char **argv) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    signal(SIGPIPE, SIG_IGN);
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const char *models[] = {"models/tiny-llama-f32.gguf",     "models/small-llama-q4_0.gguf",
                            "models/small-llama-q8_0.gguf",   "models/small-llama-q4_k_m.gguf",
                            "models/small-llama-q5_k_m.gguf", "models/small-llama-q6_k.gguf",
                            "models/small-qwen2-f16.gguf",    "models/small-qwen2-q4_k_m.gguf"};
    for (size_t i = 0; i < (quick ? 2 : sizeof models / sizeof models[0]); i++)
        test_model(models[i]);
    test_generated();
    test_garbage();
    test_kill();
    test_comings_and_goings();
    return hr_check_finish("cluster");
}
