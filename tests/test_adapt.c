/* test_adapt.c - adaptive plans: one device of three is slower than its
 * profile says (a profile claiming a fast CPU, and the test-only
 * HR_TEST_SLOW_ROUND adding a sleep to each of its windows). While a long
 * greedy request runs, the head must notice the measured rounds stay off
 * the plan's prediction (far off: without the 10 s hold, after the 2 s
 * window), give that device fewer layers, and finish the request with
 * exactly the ids of a single-process run (the request is replayed on the
 * new plan, not failed), its replay a fraction of what generating those
 * tokens took. The hold's rule itself (hr_head_adapt_hold_s): 10 s unless
 * 1.5x off, and skipped at most once a minute.
 * And the converse: three undisturbed devices whose profiles predict them
 * (the engine probe's real decode steps calibrate the rates, as an agent's
 * own profile does) run requests for several seconds, the adaptive check
 * armed all along (no hold-off), and the head never re-plans. */
#include "agent/agent.h"
#include "agent/head-impl.h"
#include "common/log.h"
#include "common/sync.h"
#include "kernels/types.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "ring/ring.h"
#include "sched/sched.h"

#include "harness.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define N_GEN 900 /* long enough that a re-plan decided late, on a busy machine, still pays */
#define N_CTX 1024
#define N_DEV 3
#define SLOW_MS 25          /* added to every window of w2 */
#define REPLAN_BOUND_S 6.0  /* first decode token -> adaptive re-plan decided (w2 is far off) */
#define REPLAN_WINDOW_S 2.0 /* ... not before the slowdown has lasted this long */

static char g_dir[64];

/* ---- the request, on its own thread; the main thread watches ---- */

typedef struct {
    hr_agent *head;
    const int32_t *prompt;
    int n_prompt;
    int32_t ids[1 + N_GEN];
    atomic_int n_tok;
    _Atomic double t_first;  /* s, monotonic: first generated token */
    double t_tok[1 + N_GEN]; /* s, monotonic: each token's arrival */
    atomic_int done;
    int rc;
    char err[HR_ERR_LEN];
    pthread_t th;
} request;

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    request *r = ud;
    if (id < 0 || r->ids[0] >= N_GEN)
        return 0;
    if (r->ids[0] == 0)
        atomic_store(&r->t_first, hr_now_s());
    r->t_tok[r->ids[0]] = hr_now_s();
    r->ids[1 + r->ids[0]++] = id;
    atomic_store(&r->n_tok, r->ids[0]);
    return 0;
}

static void *request_main(void *arg) {
    request *r = arg;
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    r->ids[0] = 0;
    r->rc = hr_head_generate(r->head, r->prompt, r->n_prompt, &sp, N_GEN, on_tok, r, NULL, NULL,
                             r->err);
    atomic_store(&r->done, 1);
    return NULL;
}

/* The layers of device `name` in a status (its windows of every round);
 * -1 unknown. */
static int dev_layers(json_t *st, const char *name) {
    json_t *d, *w;
    size_t i, r;
    json_array_foreach(json_object_get(st, "devices"), i, d) {
        const char *nm = json_string_value(json_object_get(d, "name"));
        int n = 0;
        if (!nm || strcmp(nm, name) != 0)
            continue;
        json_array_foreach(json_object_get(d, "windows"), r, w) n += (int)json_integer_value(w);
        return n;
    }
    return -1;
}

static void test_adapt(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    int rc = model_inputs(model, N_CTX, &pm, &sm);
    hr_prof_model_clear(&pm);
    if (rc) {
        CHECK(0);
        return;
    }
    CHECK_EQ(sm.n_layer, 12);
    /* memory for 5, 5 and 6 layers and no disk: every device must hold
     * some; w2 claims the fastest CPU, so the plan gives it the most */
    double per = sm.layer_bytes + sm.kv_bytes_per_layer;
    const char *names[N_DEV] = {"head", "w1", "w2"};
    double gbs[N_DEV] = {2.0, 2.0, 8.0};
    double hold[N_DEV] = {5.5, 5.5, 6.5};
    char files[N_DEV][128];
    int64_t avail[N_DEV];
    for (int i = 0; i < N_DEV; i++) {
        double reserve = model_reserve(model, N_CTX, i == 0);
        avail[i] = (int64_t)(reserve + hold[i] * per + (i == 0 ? sm.output_bytes : 0));
        CHECK_EQ(save_profile(g_dir, names[i], gbs[i], 0.0, avail[i], files[i], sizeof files[i]),
                 0);
    }
    agent_th ag[N_DEV];
    memset(ag, 0, sizeof ag);
    json_t *st = profiled_agents_planned(ag, N_DEV, model, N_CTX, names, files, avail, 1);
    if (!st)
        return;
    int plan0 = (int)json_integer_value(json_object_get(st, "plan_id"));
    int before = dev_layers(st, "w2");
    printf("plan %d: %s; w2 holds %d layers\n", plan0,
           json_string_value(json_object_get(st, "plan_source")), before);
    CHECK(strncmp(json_string_value(json_object_get(st, "plan_source")), "scheduler", 9) == 0);
    CHECK_INT(before, >, 2); /* 12 layers, at most 5 + 5 elsewhere */
    CHECK_INT(json_integer_value(json_object_get(json_object_get(st, "adapt"), "replans")), ==, 0);
    json_decref(st);

    int32_t prompt[] = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278};
    int n_prompt = (int)(sizeof prompt / sizeof prompt[0]);
    int32_t ref[1 + N_GEN];
    CHECK_EQ(ref_greedy(model, N_CTX, prompt, n_prompt, N_GEN, ref), 0);

    request *r = calloc(1, sizeof *r);
    r->head = ag[0].a;
    r->prompt = prompt;
    r->n_prompt = n_prompt;
    pthread_create(&r->th, NULL, request_main, r);
    double t_decide = 0, t_ready = 0;
    int tok_decide = 0, after = -1, plan1 = 0;
    char reason[1024] = "";
    while (!atomic_load(&r->done)) {
        usleep(20000);
        if (t_ready > 0)
            continue;
        json_t *s = head_status(ag[0].a);
        json_t *ad = json_object_get(s, "adapt");
        if (t_decide == 0 && json_integer_value(json_object_get(ad, "replans")) > 0) {
            t_decide = hr_now_s();
            tok_decide = atomic_load(&r->n_tok);
            snprintf(reason, sizeof reason, "%s", json_string_value(json_object_get(ad, "last")));
        }
        int pid = (int)json_integer_value(json_object_get(s, "plan_id"));
        if (t_decide > 0 && pid != plan0 && json_is_true(json_object_get(s, "ready"))) {
            t_ready = hr_now_s();
            plan1 = pid;
            after = dev_layers(s, "w2");
        }
        json_decref(s);
    }
    pthread_join(r->th, NULL);
    double t_first = atomic_load(&r->t_first);
    if (r->rc)
        fprintf(stderr, "request: %s\n", r->err);
    CHECK_EQ(r->rc, 0);
    printf("adaptive re-plan decided %.2f s after the first token (at token %d), plan %d ready "
           "%.2f s later; w2 holds %d layers (was %d)\nreason: %s\n",
           t_decide - t_first, tok_decide, plan1, t_ready - t_decide, after, before, reason);
    CHECK(t_decide > 0);
    CHECK_DBL_(t_decide - t_first, <, REPLAN_BOUND_S);
    CHECK_DBL_(t_decide - t_first, >=, REPLAN_WINDOW_S);
    CHECK(t_ready > 0);
    CHECK_INT(after, >=, 0);
    CHECK_INT(after, <, before); /* the slow device got fewer layers */
    CHECK(strstr(reason, "'w2'") != NULL && strstr(reason, "predicted") != NULL);
    /* the replay: the request's history goes again in chunks (generated
     * tokens as decode rows, n_batch a step), so the pause it makes is a
     * fraction of what generating those tokens one a step on the new plan
     * takes; the longest gap between two tokens is the re-plan's pause */
    int n_got = r->ids[0], at = 0;
    double gap = 0;
    for (int i = 1; i < n_got; i++)
        if (r->t_tok[i] - r->t_tok[i - 1] > gap) {
            gap = r->t_tok[i] - r->t_tok[i - 1];
            at = i;
        }
    int tail = n_got - at - 1; /* tokens on the new plan after the first */
    double per_tok = tail > 10 ? (r->t_tok[n_got - 1] - r->t_tok[at]) / tail : 0;
    printf("the re-plan's pause: %.2f s before token %d; %d tokens after it at %.1f ms each: "
           "replaying %d tokens one a step would take %.2f s\n",
           gap, at, tail, per_tok * 1000.0, at, at * per_tok);
    CHECK_INT(tail, >, 10);
    CHECK_DBL_(gap, <, 0.5 * at * per_tok);
    /* the same answer as the single process, every token */
    CHECK_EQ(r->ids[0], ref[0]);
    CHECK(counted_ids_equal(r->ids, ref));
    /* no flapping: at most one more decision in the rest of the request */
    st = head_status(ag[0].a);
    json_t *ad = json_object_get(st, "adapt");
    CHECK_INT(json_integer_value(json_object_get(ad, "replans")), <=, 2);
    json_t *d;
    size_t i;
    json_array_foreach(json_object_get(st, "devices"), i, d) {
        const char *nm = json_string_value(json_object_get(d, "name"));
        double sc = json_real_value(json_object_get(d, "rate_scale"));
        printf("  %s: rate_scale %.3g, w %lld\n", nm ? nm : "?", sc,
               (long long)json_integer_value(json_object_get(d, "w")));
        if (nm && strcmp(nm, "w2") == 0)
            CHECK_DBL_(sc, >, 1.3); /* planned slower than its profile now */
    }
    json_decref(st);
    printf("%d greedy ids equal the single process across the re-plan\n", ref[0]);
    free(r);
    agents_end(ag, N_DEV);
}

/* ---- the undisturbed cluster ---- */

#define QUIET_S 4.5 /* decoding: warm-up + the HR_ADAPT_WINDOW_S (2 s) a re-plan needs, twice */
#define QUIET_MAX_REQ 40

/* A profile of this machine at one thread saved as g_dir/NAME.json:
 * fake_device's rates calibrated by the engine probe probed made (real
 * decode steps of the model's first layers), so that the plan's
 * predictions are what the agents measure. */
static int calibrated_profile(const char *name, int64_t avail, const hr_prof_device *probed,
                              hr_prof_device *d, char *file, size_t cap) {
    fake_device(d, name, 2.0, 0.0, avail);
    d->engine_layers = probed->engine_layers;
    d->engine_threads = probed->engine_threads;
    d->engine_ms = probed->engine_ms;
    d->engine_pred_ms = probed->engine_pred_ms;
    d->engine_factor = probed->engine_factor;
    d->engine_window_s = probed->engine_window_s;
    snprintf(file, cap, "%s/%s.json", g_dir, name);
    return write_profile(d, file);
}

static void test_quiet(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, N_CTX, &pm, &sm)) {
        CHECK(0);
        return;
    }
    /* the probe: the model's first layers, one thread, as the agents run */
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_prof_device *probed = calloc(2, sizeof *probed), *d = probed + 1;
    int rc = hr_gguf_open(&g, model, err);
    if (!rc)
        rc = hr_model_load(&m, g, err);
    if (!rc) {
        fake_device(probed, "probe", 2.0, 0.0, 1ll << 30);
        rc = hr_prof_engine_probe(probed, m, &pm, 1, 0.5, err);
    }
    hr_model_free(m);
    hr_gguf_close(g);
    hr_prof_model_clear(&pm);
    if (rc)
        fprintf(stderr, "engine probe: %s\n", err);
    CHECK_EQ(rc, 0);
    printf("quiet: engine probe %d layers: %.3f ms per step, the rates predict %.3f (x%.2f)\n",
           probed->engine_layers, probed->engine_ms, probed->engine_pred_ms, probed->engine_factor);
    /* memory for 5.5 layers each: all three hold some, and the plan could
     * still move layers between them */
    double per = sm.layer_bytes + sm.kv_bytes_per_layer;
    const char *names[N_DEV] = {"head", "q1", "q2"}; /* not w2: nobody is slowed */
    char files[N_DEV][128];
    int64_t avail[N_DEV];
    for (int i = 0; rc == 0 && i < N_DEV; i++) {
        double reserve = model_reserve(model, N_CTX, i == 0);
        avail[i] = (int64_t)(reserve + 5.5 * per + (i == 0 ? sm.output_bytes : 0));
        CHECK_EQ(calibrated_profile(names[i], avail[i], probed, d, files[i], sizeof files[i]), 0);
    }
    free(probed);
    if (rc)
        return;
    agent_th ag[N_DEV];
    memset(ag, 0, sizeof ag);
    json_t *st = profiled_agents_planned(ag, N_DEV, model, N_CTX, names, files, avail, 1);
    if (!st)
        return;
    int plan0 = (int)json_integer_value(json_object_get(st, "plan_id"));
    printf("quiet plan %d: %s\n", plan0, json_string_value(json_object_get(st, "plan_source")));
    /* each device's layers at the start (printed with the end's) */
    int w0[N_DEV];
    for (int k = 0; k < N_DEV; k++)
        w0[k] = dev_layers(st, names[k]);
    json_decref(st);
    int32_t prompt[] = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278};
    int n_prompt = (int)(sizeof prompt / sizeof prompt[0]);
    int32_t ref[1 + N_GEN];
    CHECK_EQ(ref_greedy(model, N_CTX, prompt, n_prompt, N_GEN, ref), 0);
    /* requests back to back (a streak outlives the gap between two) until
     * QUIET_S s of decoding; the status watched meanwhile */
    double t_first = 0, ratio_min[N_DEV], ratio_max[N_DEV];
    for (int i = 0; i < N_DEV; i++) {
        ratio_min[i] = 1e9;
        ratio_max[i] = 0;
    }
    int n_req = 0, n_tok = 0, exact = 0, replans = 0, rescaled = 0, plan = plan0;
    while (n_req < QUIET_MAX_REQ && (t_first == 0 || hr_now_s() - t_first < QUIET_S)) {
        request *r = calloc(1, sizeof *r);
        r->head = ag[0].a;
        r->prompt = prompt;
        r->n_prompt = n_prompt;
        pthread_create(&r->th, NULL, request_main, r);
        while (!atomic_load(&r->done)) {
            usleep(20000);
            json_t *s = head_status(ag[0].a), *dv;
            size_t i;
            json_array_foreach(json_object_get(s, "devices"), i, dv) {
                double q = json_real_value(json_object_get(dv, "meas_pred_ratio"));
                if (i < N_DEV && q > 0) {
                    ratio_min[i] = q < ratio_min[i] ? q : ratio_min[i];
                    ratio_max[i] = q > ratio_max[i] ? q : ratio_max[i];
                }
            }
            json_decref(s);
        }
        pthread_join(r->th, NULL);
        if (r->rc)
            fprintf(stderr, "quiet request %d: %s\n", n_req, r->err);
        CHECK_EQ(r->rc, 0);
        if (t_first == 0)
            t_first = atomic_load(&r->t_first);
        exact += counted_ids_equal(r->ids, ref);
        n_tok += r->ids[0];
        n_req++;
        free(r);
    }
    st = head_status(ag[0].a);
    json_t *ad = json_object_get(st, "adapt");
    replans = (int)json_integer_value(json_object_get(ad, "replans"));
    rescaled = (int)json_integer_value(json_object_get(ad, "rescaled"));
    plan = (int)json_integer_value(json_object_get(st, "plan_id"));
    printf("quiet: %d requests, %d tokens in %.1f s of decoding: %d re-plans, %d rescales, plan "
           "%d (was %d)%s%s\n",
           n_req, n_tok, hr_now_s() - t_first, replans, rescaled, plan, plan0,
           json_string_value(json_object_get(ad, "last"))[0] ? "; last: " : "",
           json_string_value(json_object_get(ad, "last")));
    json_t *dv;
    size_t i;
    json_array_foreach(json_object_get(st, "devices"), i, dv) {
        printf("  %s: w %lld, measured / predicted %.2f .. %.2f, rate_scale %.3g\n",
               json_string_value(json_object_get(dv, "name")),
               (long long)json_integer_value(json_object_get(dv, "w")),
               i < N_DEV ? ratio_min[i] : 0.0, i < N_DEV ? ratio_max[i] : 0.0,
               json_real_value(json_object_get(dv, "rate_scale")));
    }
    json_decref(st);
    /* the check was armed (decoding longer than a re-plan needs) and
     * nothing moved */
    CHECK_DBL_(hr_now_s() - t_first, >=, QUIET_S);
    for (int k = 0; k < N_DEV; k++) /* each device's rounds were compared with the plan's */
        CHECK_DBL_(ratio_max[k], >, 0.0);
    /* no adaptive re-plan. The layers are not compared: the head also
     * re-plans once its links are measured (seen: plan 1 -> 2 moving a
     * layer, with 0 adaptive re-plans), which is not the adaptive loop */
    CHECK_INT(replans, ==, 0);
    st = head_status(ag[0].a);
    for (int k = 0; k < N_DEV; k++) {
        CHECK(w0[k] > 0);
        printf("  %s: %d layers at the start, %d at the end\n", names[k], w0[k],
               dev_layers(st, names[k]));
    }
    json_decref(st);
    CHECK_INT(exact, ==, n_req);
    agents_end(ag, N_DEV);
}

/* The hold before a re-plan: a noisy neighbour (below 1.5x) waits 10 s; a
 * device 1.5x off either way goes at once, once a minute. */
static void test_hold_rule(void) {
    CHECK_DBL_(hr_head_adapt_hold_s(1.3, INFINITY), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_hold_s(1.49, INFINITY), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_hold_s(0.7, INFINITY), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_hold_s(1.5, INFINITY), ==, 0.0);
    CHECK_DBL_(hr_head_adapt_hold_s(2.0, INFINITY), ==, 0.0);
    CHECK_DBL_(hr_head_adapt_hold_s(37.0, INFINITY), ==, 0.0);
    CHECK_DBL_(hr_head_adapt_hold_s(0.45, INFINITY), ==, 0.0); /* the game ended */
    CHECK_DBL_(hr_head_adapt_hold_s(37.0, 59.0), ==, 10.0);    /* one a minute */
    CHECK_DBL_(hr_head_adapt_hold_s(37.0, 61.0), ==, 0.0);
    CHECK_DBL_(hr_head_adapt_hold_s(NAN, INFINITY), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_hold_s(0.0, INFINITY), ==, 10.0); /* no measurement */
    CHECK_DBL_(hr_head_adapt_hold_s(37.0, NAN), ==, 10.0);
    /* decisions 10 s apart, except a far-off device after a mere update */
    CHECK_DBL_(hr_head_adapt_gap_s(true, 0.0), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_gap_s(true, 10.0), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_gap_s(false, 10.0), ==, 10.0);
    CHECK_DBL_(hr_head_adapt_gap_s(false, 0.0), ==, 0.0);
    CHECK_DBL_(hr_head_adapt_gap_s(false, NAN), ==, 10.0);
}

/* Under a CPU quota, a measured round is brought back through the cost
 * model's Q before it scales the CPU rates. */
static void test_unthrottle(void) {
    hr_sched_device sd = {0};
    CHECK_DBL_(hr_adapt_unthrottled_ms(&sd, 7.0), ==, 7.0); /* no quota */
    sd.throttle_slope = 2.5;
    sd.throttle_save_ms = 4.0; /* Q(x) = max(x, 2.5 x - 4): x beyond 8/3 ms is throttled */
    CHECK_DBL_(hr_adapt_unthrottled_ms(&sd, 2.0), ==, 2.0);     /* within the share */
    CHECK_NEAR(hr_adapt_unthrottled_ms(&sd, 11.0), 6.0, 1e-12); /* Q(6) = 15 - 4 */
    for (double x = 0.25; x < 40; x *= 1.7) {                   /* the inverse of Q */
        double q = fmax(x, 2.5 * x - 4.0);
        CHECK_NEAR(hr_adapt_unthrottled_ms(&sd, q), x, 1e-9 * x);
    }
    /* a plan predicted 6 ms (Q(4)) and measured 11 (Q(6)): rates x1.5, not x1.83 */
    CHECK_NEAR(hr_adapt_unthrottled_ms(&sd, 11.0) / hr_adapt_unthrottled_ms(&sd, 6.0), 1.5, 1e-12);
    CHECK(isnan(hr_adapt_unthrottled_ms(&sd, NAN)));
}

/* A device's pump rate: over the samples of one plan only (a new plan or a
 * restarted agent starts over), none before HR_PUMP_RATE_MIN bytes, none
 * from a heartbeat without the figures. */
static void test_pump_rate(void) {
    hr_dev d;
    memset(&d, 0, sizeof d);
    double b = -1;
    CHECK(isnan(hr_head_pump_rate(&d, &b)));
    CHECK_DBL_(b, ==, 0.0);
    const double mib = 1048576.0;
    hr_head_pump_sample(&d, 3, 100 * mib, 2.0); /* before plan 3: 100 MiB in 2 s */
    hr_head_pump_sample(&d, 3, 110 * mib, 2.1);
    CHECK(isnan(hr_head_pump_rate(&d, &b))); /* 10 MiB: too few */
    CHECK_DBL_(b, ==, 10 * mib);
    hr_head_pump_sample(&d, 3, 140 * mib, 2.4);
    CHECK_NEAR(hr_head_pump_rate(&d, &b), 40 * mib / 0.4, 1.0); /* not 140 MiB / 2.4 s */
    hr_head_pump_sample(&d, 3, -1, -1);                         /* a heartbeat without them: kept */
    CHECK_NEAR(hr_head_pump_rate(&d, NULL), 40 * mib / 0.4, 1.0);
    hr_head_pump_sample(&d, 4, 150 * mib, 2.5); /* plan 4: over again */
    CHECK(isnan(hr_head_pump_rate(&d, &b)));
    CHECK_DBL_(b, ==, 0.0);
    hr_head_pump_sample(&d, 4, 182 * mib, 3.5);
    CHECK_NEAR(hr_head_pump_rate(&d, NULL), 32 * mib, 1.0);
    hr_head_pump_sample(&d, 4, 20 * mib, 0.5); /* restarted: its totals went back */
    CHECK(isnan(hr_head_pump_rate(&d, NULL)));
    hr_head_pump_sample(&d, 4, 60 * mib, 1.5);
    CHECK_NEAR(hr_head_pump_rate(&d, NULL), 40 * mib, 1.0);
    hr_head_pump_sample(&d, 4, NAN, 2.0); /* not a figure: kept */
    CHECK_NEAR(hr_head_pump_rate(&d, NULL), 40 * mib, 1.0);
    hr_dev z;
    memset(&z, 0, sizeof z);
    hr_head_pump_sample(&z, 1, 10 * mib, 1.0);
    hr_head_pump_sample(&z, 1, 50 * mib, 1.0); /* bytes without time: no rate */
    CHECK(isnan(hr_head_pump_rate(&z, NULL)));
}

/* A streaming device's disk rate follows its pump: 64 MiB or more under
 * the plan in use, more than 15% off the rate the plan took. */
static void test_disk_rate(void) {
    hr_head *hd = calloc(1, sizeof *hd);
    CHECK(hd != NULL);
    if (!hd)
        return;
    const double mib = 1048576.0;
    hd->plan_id = 7;
    hd->n_devs = 5;
    for (int i = 0; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        snprintf(d->name, sizeof d->name, "d%d", i);
        d->has_sched = true;
        d->ring_pos = i;
        d->sd.disk_bps = 300e6;
        hr_head_pump_sample(d, 7, 0, 0);
    }
    hr_head_pump_sample(&hd->devs[0], 7, 100 * mib, 0.5); /* 210 MB/s: 30% off */
    hr_head_pump_sample(&hd->devs[1], 7, 32 * mib, 0.16); /* as slow, over too few bytes */
    hr_head_pump_sample(&hd->devs[2], 6, 0, 0);           /* under an older plan */
    hr_head_pump_sample(&hd->devs[2], 6, 100 * mib, 0.5);
    hr_head_pump_sample(&hd->devs[3], 7, 100 * mib, 0.38); /* 276 MB/s: within 15% */
    hd->devs[4].ring_pos = -1;                             /* out of the ring */
    hr_head_pump_sample(&hd->devs[4], 7, 100 * mib, 0.5);
    char why[512] = "";
    size_t wl = 0;
    CHECK_EQ(hr_head_adapt_disk(hd, why, sizeof why, &wl), 1);
    CHECK(strstr(why, "device 'd0' read 100 MiB at 210 MB/s, planned at 300") != NULL);
    CHECK_NEAR(hd->devs[0].disk_scale, 100 * mib / 0.5 / 300e6, 1e-9);
    for (int i = 1; i < hd->n_devs; i++)
        CHECK_DBL_(hd->devs[i].disk_scale, ==, 0.0);
    hr_sched_device sd;
    hr_head_dev_rates(&hd->devs[0], &sd);
    CHECK_NEAR(sd.disk_bps, 100 * mib / 0.5, 1.0);
    hr_head_dev_rates(&hd->devs[3], &sd);
    CHECK_DBL_(sd.disk_bps, ==, 300e6);
    /* the same rate again: the plan took it already */
    wl = 0;
    CHECK_EQ(hr_head_adapt_disk(hd, why, sizeof why, &wl), 0);
    /* faster later (255 MB/s over the plan's 200 MiB, 21% above): follows */
    hr_head_pump_sample(&hd->devs[0], 7, 200 * mib, 200 * mib / 255e6);
    CHECK_EQ(hr_head_adapt_disk(hd, why, sizeof why, &wl), 1);
    CHECK_NEAR(hd->devs[0].disk_scale, 0.85, 1e-9);
    free(hd);
}

/* A streaming device under a CPU quota whose process spends more CPU a
 * token than its plan predicts gets the difference on its reads: its CPU
 * per MB read then makes the two agree. Same evidence floor as the disk. */
static void test_read_cpu(void) {
    hr_head *hd = calloc(1, sizeof *hd);
    CHECK(hd != NULL);
    if (!hd)
        return;
    const double mib = 1048576.0;
    hd->plan_id = 3;
    hd->plan_k = 4;
    hd->n_devs = 6;
    for (int i = 0; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        snprintf(d->name, sizeof d->name, "d%d", i);
        d->has_sched = true;
        d->ring_pos = i;
        d->sd.disk_bps = 200e6;
        d->sd.throttle_slope = 2.86; /* a 0.35-core quota */
        d->sd.read_cpu_ms_mb = 0.8;
        d->read_cpu_ms_mb = -1;
        d->win[0] = 2, d->win[1] = 2, d->win[2] = 1, d->win[3] = 1; /* 4 windows computed */
        d->pred_cpu_token = 200;                                    /* ms */
        d->pred_read_token = 175e6;                                 /* bytes */
        d->meas_cpu_round = 345.0 / 4;                              /* 345 ms a token */
        d->cpu_plan = 3;
        hr_head_pump_sample(d, 3, 0, 0);
        hr_head_pump_sample(d, 3, 800 * mib, 4.0); /* over four tokens' 175 MB */
    }
    hd->devs[1].sd.throttle_slope = 0;          /* no quota: its CPU caps nothing */
    hr_head_pump_sample(&hd->devs[2], 3, 0, 0); /* three tokens' reads only */
    hr_head_pump_sample(&hd->devs[2], 3, 525e6, 2.6);
    hd->devs[3].cpu_plan = 2;               /* measured under an older plan */
    hd->devs[4].meas_cpu_round = 220.0 / 4; /* within 15% */
    hd->devs[5].win[0] = 0;                 /* 3 windows: 258.75 ms, +29% */
    char why[1024] = "";
    size_t wl = 0;
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 2);
    CHECK(strstr(why, "device 'd0' spent 345 ms of CPU a token, planned 200") != NULL);
    CHECK_NEAR(hd->devs[0].read_cpu_ms_mb, 0.8 + 145.0 / 175.0, 1e-9);
    CHECK_NEAR(hd->devs[5].read_cpu_ms_mb, 0.8 + 58.75 / 175.0, 1e-9);
    for (int i = 1; i < 5; i++)
        CHECK_DBL_(hd->devs[i].read_cpu_ms_mb, ==, -1.0);
    hr_sched_device sd;
    hr_head_dev_rates(&hd->devs[0], &sd);
    CHECK_NEAR(sd.read_cpu_ms_mb, 0.8 + 145.0 / 175.0, 1e-9);
    CHECK_NEAR(hr_head_read_cpu(&hd->devs[0]), sd.read_cpu_ms_mb, 0.0);
    hr_head_dev_rates(&hd->devs[4], &sd);
    CHECK_DBL_(sd.read_cpu_ms_mb, ==, 0.8); /* its profile's */
    /* a later figure under the same plan: taken over twice the reads only */
    hd->devs[0].pred_cpu_token = 345;
    hd->devs[0].meas_cpu_round = 600.0 / 4;
    wl = 0;
    hr_head_pump_sample(&hd->devs[0], 3, 1500 * mib, 7.5);
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 0);
    CHECK_NEAR(hd->devs[0].read_cpu_ms_mb, 0.8 + 145.0 / 175.0, 1e-9);
    hd->devs[0].meas_cpu_round = 390.0 / 4; /* over 1600 MiB */
    hr_head_pump_sample(&hd->devs[0], 3, 1600 * mib, 8.0);
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 0); /* within 15% of 345 */
    hd->devs[0].meas_cpu_round = 280.0 / 4;
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 1);
    CHECK_NEAR(hd->devs[0].read_cpu_ms_mb, 0.8 + 145.0 / 175.0 - 65.0 / 175.0, 1e-9);
    hd->devs[0].pred_cpu_token = 345;
    hd->devs[0].read_cpu_ms_mb = 0.8 + 145.0 / 175.0; /* as before, for what follows */
    /* the next plan, re-predicted at it, agrees: nothing more */
    hd->plan_id = 4;
    for (int i = 0; i < hd->n_devs; i++) {
        hd->devs[i].cpu_plan = 4;
        hr_head_pump_sample(&hd->devs[i], 4, 0, 0);
        hr_head_pump_sample(&hd->devs[i], 4, 800 * mib, 4.0);
    }
    hd->devs[0].meas_cpu_round = 345.0 / 4;
    hd->devs[5].pred_cpu_token = 258.75;
    hd->devs[2].meas_cpu_round = hd->devs[3].meas_cpu_round = 200.0 / 4; /* as planned */
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 0);
    /* less CPU under it (its page cache warmed): follows down, never below 0 */
    hd->devs[0].meas_cpu_round = 20.0 / 4;
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 1);
    CHECK_DBL_(hd->devs[0].read_cpu_ms_mb, ==, 0.0);
    hd->plan_id = 5; /* and the next plan: */
    /* a figure that is not a number changes nothing */
    hd->devs[0].cpu_plan = 5;
    hr_head_pump_sample(&hd->devs[0], 5, 0, 0);
    hr_head_pump_sample(&hd->devs[0], 5, 800 * mib, 4.0);
    hd->devs[0].meas_cpu_round = NAN;
    hd->devs[0].read_cpu_ms_mb = 1.5;
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 0);
    CHECK_DBL_(hd->devs[0].read_cpu_ms_mb, ==, 1.5);
    /* 145 ms more than planned over 2 MB of reads a token: not 73 ms per MB,
     * at most 4x its profile's 0.8 */
    hd->plan_id = 6;
    hd->devs[0].cpu_plan = 6;
    hr_head_pump_sample(&hd->devs[0], 6, 0, 0);
    hr_head_pump_sample(&hd->devs[0], 6, 100 * mib, 0.5);
    hd->devs[0].meas_cpu_round = 345.0 / 4;
    hd->devs[0].pred_cpu_token = 200;
    hd->devs[0].pred_read_token = 2e6;
    CHECK_EQ(hr_head_adapt_read_cpu(hd, why, sizeof why, &wl), 1);
    CHECK_NEAR(hd->devs[0].read_cpu_ms_mb, 3.2, 1e-12);
    free(hd);
}

/* The model's bias on this machine: every device with layers off the same
 * way passes its mildest correction to the devices without layers; one
 * device off alone (a neighbour) passes nothing. */
static void test_bias_rule(void) {
    hr_head *hd = calloc(1, sizeof *hd);
    if (!hd)
        return;
    hd->plan_id = 5;
    hd->n_devs = 4;
    for (int i = 0; i < 4; i++) {
        hr_dev *d = &hd->devs[i];
        d->ring_pos = i < 2 ? i : -1; /* devices 2 and 3 left out */
        d->layers = i < 2 ? 11 : 0;
        d->adapt_plan = 5;
        d->pred_ms_round = 10;
        d->pred_compute_ms_round = 10;
        d->adapt_off = 3;
        d->rate_scale = 1;
        d->adapt_rated = i < 2; /* ... and never measured */
    }
    char why[256];
    size_t wl;
#define BIAS(s0, s1, s2, s3)                                                                       \
    do {                                                                                           \
        scale[0] = (s0);                                                                           \
        scale[1] = (s1);                                                                           \
        scale[2] = (s2);                                                                           \
        scale[3] = (s3);                                                                           \
        why[0] = 0;                                                                                \
        wl = 0;                                                                                    \
        hr_head_adapt_bias(hd, scale, why, sizeof why, &wl);                                       \
    } while (0)
    double scale[4];
    BIAS(1.4, 1.6, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.4); /* both slower: no better than the least corrected */
    CHECK_DBL_(scale[3], ==, 1.4);
    CHECK_DBL_(scale[0], ==, 1.4); /* the measured keep theirs */
    CHECK_DBL_(scale[1], ==, 1.6);
    CHECK(strstr(why, "the 2 not yet measured x1.4") != NULL);
    CHECK_INT((int)wl, ==, (int)strlen(why));
    BIAS(0.5, 0.7, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 0.7); /* both faster: no worse than the least corrected */
    BIAS(1.4, 0.7, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.0); /* either way: no common bias */
    CHECK_INT((int)wl, ==, 0);
    BIAS(1.4, 1.0, 1.0, 1.0); /* one on its profile (a hog on the other): nothing */
    CHECK_DBL_(scale[2], ==, 1.0);
    CHECK_INT((int)wl, ==, 0);
    BIAS(1.5, 1.5, 2.0, 1.2); /* an own larger scale stays; a milder one is raised */
    CHECK_DBL_(scale[2], ==, 2.0);
    CHECK_DBL_(scale[3], ==, 1.5);
    CHECK(strstr(why, "the 1 not yet measured") != NULL);
    BIAS(1.5, 1.5, 1.5, 1.5); /* again at the same rates: idempotent, no note */
    CHECK_DBL_(scale[2], ==, 1.5);
    CHECK_INT((int)wl, ==, 0);
    /* a measured device the plan left out counts: its last measurement */
    hd->devs[1].ring_pos = -1;
    hd->devs[1].layers = 0;
    hd->devs[1].adapt_off = 0;
    BIAS(2.0, 3.0, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 2.0);
    hd->devs[1].adapt_rated = false; /* one measured device is no evidence of a bias */
    BIAS(2.0, 1.0, 1.0, 1.0);
    CHECK_DBL_(scale[1], ==, 1.0);
    CHECK_DBL_(scale[2], ==, 1.0);
    hd->devs[1].adapt_rated = true;
    hd->devs[1].lost = true; /* a lost device neither counts nor is planned */
    BIAS(2.0, 3.0, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.0);
    hd->devs[1].lost = false;
    hd->devs[2].lost = true;
    BIAS(2.0, 3.0, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.0);
    CHECK_DBL_(scale[3], ==, 2.0);
    hd->devs[2].lost = false;
    /* only first measurements are the model's bias: both measured devices
     * matched (x1, x1.27 after a warm-up update) before a hog slowed them */
    hd->devs[0].adapt_first = 1.27;
    hd->devs[1].adapt_first = 1.0;
    BIAS(2.34, 2.43, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.0);
    CHECK_DBL_(scale[3], ==, 1.0);
    CHECK_INT((int)wl, ==, 0);
    hd->devs[1].adapt_first = 1.6; /* both slower when first measured: their bias */
    BIAS(2.34, 2.43, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.27);
    CHECK_DBL_(scale[3], ==, 1.27);
    hd->devs[1].adapt_first = 0; /* this decision is its first: its new scale counts */
    BIAS(2.34, 0.8, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.0);
    BIAS(2.34, 1.9, 1.0, 1.0);
    CHECK_DBL_(scale[2], ==, 1.27);
    hd->devs[0].adapt_first = hd->devs[1].adapt_first = 0;
#undef BIAS
    /* the hold-skipping re-plan a minute is each device's own: a device
     * far off that skipped the hold 20 s ago waits; another does not */
    for (int i = 0; i < 4; i++) {
        hr_dev *e = &hd->devs[i];
        e->lost = false;
        e->ring_pos = i;
        e->layers = 5;
        e->adapt_plan = 5;
        e->adapt_off = 0;
        e->adapt_ratio = 1.0;
        e->adapt_fast_at = 0;
    }
    double t = 1000.0, held, hold;
    CHECK(!hr_head_adapt_due(hd, t, &held, &hold)); /* nobody off */
    hd->devs[1].adapt_off = 3;
    hd->devs[1].adapt_ratio = 3.0;
    hd->devs[1].adapt_since = t - 2.5;
    hd->devs[1].adapt_fast_at = t - 20;
    CHECK(hr_head_adapt_due(hd, t, &held, &hold));
    CHECK_DBL_(held, ==, 2.5);
    CHECK_DBL_(hold, ==, 10.0); /* its minute is not over */
    hd->devs[1].adapt_fast_at = t - 61;
    CHECK(hr_head_adapt_due(hd, t, &held, &hold));
    CHECK_DBL_(hold, ==, 0.0);
    hd->devs[1].adapt_fast_at = t - 20;
    hd->devs[2].adapt_off = 2; /* device 2 far off, its own minute unused */
    hd->devs[2].adapt_ratio = 2.0;
    hd->devs[2].adapt_since = t - 2.0;
    CHECK(hr_head_adapt_due(hd, t, &held, &hold));
    CHECK_DBL_(hold, ==, 0.0);
    CHECK_DBL_(held, ==, 2.5);
    hd->devs[2].adapt_since = t - 1.0; /* not yet off for the whole window */
    CHECK(hr_head_adapt_due(hd, t, &held, &hold));
    CHECK_DBL_(hold, ==, 10.0);
    hd->devs[1].adapt_off = 0;
    CHECK(!hr_head_adapt_due(hd, t, &held, &hold));
    /* a warm sample marks a device measured; the first tokens of a plan do not */
    hr_dev *d = &hd->devs[3];
    d->lost = false;
    d->adapt_rated = false;
    d->ring_pos = 2;
    d->layers = 4;
    d->adapt_plan = 0;
    d->pred_ms_round = 10;
    hd->plan_k = 1;
    hr_head_adapt_sample(hd, 3, 5, 10, 1, 10); /* a new plan: starts over */
    CHECK(!d->adapt_rated);
    hr_head_adapt_sample(hd, 3, 5, 10, 2, 20); /* 2 rounds: still warming up */
    CHECK(!d->adapt_rated);
    hr_head_adapt_sample(hd, 3, 5, 10, 3, 30); /* warm from the 3rd token on */
    CHECK(!d->adapt_rated);
    d->rate_scale = 1.3;
    hr_head_adapt_sample(hd, 3, 5, 10, 5, 50);
    CHECK(d->adapt_rated);
    CHECK_DBL_(d->adapt_first, ==, 1.3); /* matched when first measured: its scale then */
    d->rate_scale = 2.0;
    hr_head_adapt_sample(hd, 3, 5, 10, 6, 60);
    CHECK_DBL_(d->adapt_first, ==, 1.3); /* later samples do not move it */
    d->adapt_first = 0;
    hr_head_adapt_sample(hd, 3, 5, 30, 7, 90); /* off: the decision sets it, not the sample */
    CHECK_DBL_(d->adapt_first, ==, 0.0);
    free(hd);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_WARN);
    test_hold_rule();
    test_unthrottle();
    test_pump_rate();
    test_disk_rate();
    test_read_cpu();
    test_bias_rule();
    /* test only: every window of the agent named w2 takes SLOW_MS longer */
    char slow[32];
    snprintf(slow, sizeof slow, "w2=%d", SLOW_MS);
    setenv("HR_TEST_SLOW_ROUND", slow, 1);
    char model[128];
    const char *bin =
        generated_model("adapt", 12, 7, "m12.gguf", g_dir, sizeof g_dir, model, sizeof model);
    if (bin) {
        test_adapt(model);
        test_quiet(model);
    }
    tmp_dir_remove(g_dir);
    return hr_check_finish("adapt");
}
