/* test_scheduler.c - Halda planner: the GLPK solution against brute force on
 * random instances, hand-computed costs, the prima.cpp home-cluster example,
 * thread plans, plan output, and bad or infeasible inputs. */
#include "tests/check.h"

#include "common/error.h"
#include "sched/sched.h"

#include <jansson.h>
#include <stdint.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_quota = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double urand(double lo, double hi) {
    return lo + (hi - lo) * (double)(rnd() >> 11) / 9007199254740992.0;
}
static int irand(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }
static bool chance(double p) { return urand(0.0, 1.0) < p; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hr_sched_device dev(const char *name, double t_layer_ms, double mem, double disk, double rtt,
                           double link) {
    hr_sched_device d = hr_sched_device_default();
    snprintf(d.name, sizeof d.name, "%s", name);
    d.t_layer_ms = t_layer_ms;
    d.mem_bytes = mem;
    d.disk_bps = disk;
    d.rtt_ms = rtt;
    d.link_bps = link;
    return d;
}

static int plan_sum_layers(const hr_sched_plan *p) {
    int s = 0;
    for (int i = 0; i < p->n_dev; i++)
        s += p->dev[i].layers;
    return s;
}

/* The windows of p cover its layers once: in ring order within a round,
 * round after round. */
static void check_cover(const hr_sched_plan *p) {
    int at = 0;
    for (int r = 0; r < p->k; r++)
        for (int j = 0; j < p->n_active; j++) {
            int first = -1, count = -1;
            CHECK_EQ(hr_sched_plan_window(p, p->order[j], r, &first, &count), 0);
            CHECK_EQ(first, at);
            CHECK(count >= 0);
            at += count;
        }
    CHECK_EQ(at, p->n_layer);
    for (int i = 0; i < p->n_dev; i++) {
        int sum = 0;
        for (int r = 0; r < p->k; r++)
            sum += p->dev[i].win[r];
        CHECK_EQ(sum, p->dev[i].layers);
        CHECK(p->dev[i].active || sum == 0);
    }
}

/* Scenario 0: anything; 1: memory short, fast disks; 2: no disks; 3: one
 * strong device among weak ones with slow links. */
static void gen_instance(hr_sched_model *m, hr_sched_device *d, int *n_dev, int scenario) {
    memset(m, 0, sizeof *m); /* a dense model: no experts */
    int n = irand(2, 5);
    int L = irand(8, 40);
    double b = urand(0.2, 1.0) * GIB;
    m->n_layer = L;
    m->layer_bytes = b;
    m->kv_bytes_per_layer = chance(0.3) ? 0.0 : b * urand(0.0, 0.05);
    m->hidden_bytes = urand(4096, 32768);
    m->output_bytes = chance(0.3) ? 0.0 : b * urand(0.2, 2.0);
    double model = L * b;
    int head = chance(0.3) ? -1 : irand(0, n - 1);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%d", i);
        double t = chance(0.7) ? urand(2, 30) : urand(50, 300);
        double mem = model * (chance(0.5) ? urand(0.0, 0.4) : urand(0.2, 1.3));
        double disk_ms = urand(1, 100); /* ms to read one layer */
        double disk = chance(0.3) ? 0.0 : b * 1e3 / disk_ms;
        double rtt = chance(0.7) ? urand(0.2, 8) : urand(20, 120);
        if (scenario == 1) {
            mem = model * urand(0.05, 0.45);
            disk = b * 1e3 / urand(0.5, 8);
            t = urand(5, 60);
            rtt = urand(0.2, 4);
        } else if (scenario == 2) {
            disk = 0.0;
            mem = model * urand(0.2, 1.0);
        } else if (scenario == 3 && i > 0) {
            t = urand(40, 200);
            rtt = urand(10, 80);
        } else if (scenario == 3) {
            t = urand(2, 10);
            mem = model * 1.5;
        }
        d[i] = dev(name, t, mem, disk, rtt, urand(5e6, 1.25e8));
        if (chance(0.15)) {
            /* a link that passes one message at once but sustains little (a
             * token bucket): its round trip already carries a hidden state */
            d[i].rtt_ms = urand(0.1, 2);
            d[i].rtt_bytes = m->hidden_bytes;
            d[i].link_bps = urand(2e4, 1e6);
        }
        if (chance(0.2))
            d[i].t_round_ms = urand(-0.4, 0.2) * t;
        d[i].is_head = i == head;
        d[i].t_head_ms = urand(0, 20);
        if (chance(0.25))
            d[i].os = HR_SCHED_OS_MACOS;
        /* a CPU quota, from a generator of its own (the instances above
         * stay those the coverage counts were set for) */
        uint64_t keep = rng;
        rng = rng_quota;
        if (chance(0.2)) {
            d[i].throttle_slope = urand(1.2, 4);
            d[i].throttle_save_ms = urand(0, 3) * t;
            d[i].read_cpu_ms_mb = chance(0.5) ? urand(0, 3) : 0;
            d[i].throttle_wait_ms = chance(0.5) ? urand(0, 1) * t : 0;
            d[i].throttle_period_ms = chance(0.5) ? urand(0, 4) * t : 0;
        }
        rng_quota = rng;
        rng = keep;
    }
    *n_dev = n;
}

#define N_RANDOM 1000

static void test_random_optimality(void) {
    int compared = 0, infeasible = 0, k_gt1 = 0, excluded = 0, streaming = 0, sum_model = 0;
    int disk0 = 0, link_bound = 0;
    double t_solve = 0.0, t_enum = 0.0, max_solve = 0.0;
    for (int it = 0; it < N_RANDOM; it++) {
        hr_sched_model m;
        hr_sched_device d[5];
        int n;
        gen_instance(&m, d, &n, it % 4);
        hr_sched_opts o = hr_sched_opts_default();
        o.uneven_rounds = false; /* the brute force searches uniform plans */
        if (it % 3 == 2) {
            o.overlap = HR_SCHED_OVERLAP_SUM;
            sum_model++;
        }
        static hr_sched_plan p, e;
        char err1[HR_ERR_LEN] = "", err2[HR_ERR_LEN] = "";
        double t0 = now_s();
        int rc1 = hr_sched_solve(&m, d, n, &o, &p, err1);
        double t1 = now_s();
        int rc2 = hr_sched_exhaustive(&m, d, n, &o, &e, err2);
        double t2 = now_s();
        t_solve += t1 - t0;
        t_enum += t2 - t1;
        if (t1 - t0 > max_solve)
            max_solve = t1 - t0;
        CHECK_EQ(rc1, rc2);
        if (rc1 != rc2)
            fprintf(stderr, "instance %d: solve '%s' vs brute force '%s'\n", it, err1, err2);
        if (it % 4 == 2)
            disk0++;
        if (rc2 == HR_EINFEASIBLE) {
            infeasible++;
            CHECK_EQ(p.k, 0);
            CHECK(strlen(err1) > 0);
            continue;
        }
        CHECK_EQ(rc2, 0);
        if (rc1 != 0 || rc2 != 0)
            continue;
        compared++;
        double tol = 1e-6 * e.latency_ms;
        CHECK_NEAR(p.latency_ms, e.latency_ms, tol);
        if (fabs(p.latency_ms - e.latency_ms) > tol)
            fprintf(stderr, "instance %d (scenario %d): solve k=%d %.9g, brute k=%d %.9g\n", it,
                    it % 4, p.k, p.latency_ms, e.k, e.latency_ms);
        CHECK(p.optimal);
        CHECK_EQ(plan_sum_layers(&p), m.n_layer);
        /* the plan's latency is the cost model's value for its assignment */
        int w[5];
        for (int i = 0; i < n; i++)
            w[i] = p.dev[i].win[0];
        CHECK_NEAR(hr_sched_cost(&m, d, n, &o, p.k, w, NULL), p.latency_ms, 1e-9 * p.latency_ms);
        k_gt1 += p.k > 1;
        excluded += p.n_active < n;
        link_bound += p.link_floor_dev >= 0 && p.link_floor_ms >= p.latency_ms;
        for (int i = 0; i < n; i++) /* every device left out says why */
            CHECK_EQ(p.dev[i].active, p.dev[i].left_out[0] == '\0');
        for (int i = 0; i < n; i++)
            if (p.dev[i].overloaded) {
                streaming++;
                break;
            }
    }
    printf("random: %d compared (%d with overlap=sum, %d of the no-disk kind), %d infeasible; "
           "k>1 in %d, devices left out in %d, streaming in %d, bound by a link's rate in %d\n",
           compared, sum_model, disk0, infeasible, k_gt1, excluded, streaming, link_bound);
    printf("random: solve %.1f ms mean, %.1f ms max; brute force %.1f ms mean\n",
           1e3 * t_solve / N_RANDOM, 1e3 * max_solve, 1e3 * t_enum / N_RANDOM);
    CHECK(compared >= 600);
    CHECK(k_gt1 >= 100);
    CHECK(excluded >= 100);
    CHECK(streaming >= 100);
    CHECK(link_bound >= 10);
    CHECK(infeasible >= 1);
}

/* The devices' measured spread buys a simpler plan: the head alone, or
 * fewer rounds, where the fastest plan wins by less than half of it. */
static void test_noise_margin(void) {
    /* two 10 ms-per-layer devices whose rounds in a ring save x ms each (a
     * CPU quota): the head alone takes 40 ms at any k, a ring of k = 1
     * 40 - 2x, of k = 2 40 - 4x */
    hr_sched_model m = {.n_layer = 4, .layer_bytes = 1e9, .hidden_bytes = 0};
    hr_sched_device d[2] = {dev("a", 10, 100e9, 0, 0, 1e9), dev("b", 10, 100e9, 0, 0, 1e9)};
    d[0].is_head = true;
    static hr_sched_plan p;
    for (int pass = 0; pass < 2; pass++) {
        double x = pass == 0 ? 0.5 : 1.5; /* the best ring 5% or 15% below the head alone */
        d[0].t_round_ms = d[1].t_round_ms = -x;
        CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, (int[]){4, 0}, NULL), 40, 1e-9);
        CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, (int[]){2, 2}, NULL), 40 - 2 * x, 1e-9);
        CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 2, (int[]){1, 1}, NULL), 40 - 4 * x, 1e-9);
        d[0].spread = d[1].spread = 0;
        CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
        CHECK_EQ(p.n_active, 2); /* no spread: the fastest */
        CHECK_EQ(p.k, 2);
        CHECK_NEAR(p.latency_ms, 40 - 4 * x, 1e-9);
        CHECK_EQ(p.fastest_k, 0);
        CHECK_NEAR(p.noise_margin, 0.0, 0.0);
        CHECK(p.optimal);
        d[1].spread = 0.2; /* +-10% */
        CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
        CHECK_NEAR(p.noise_margin, 0.1, 1e-12);
        CHECK_EQ(p.fastest_k, 2);
        CHECK_EQ(p.fastest_active, 2);
        CHECK_NEAR(p.fastest_ms, 40 - 4 * x, 1e-9);
        CHECK(!p.optimal);
        CHECK(strstr(p.explanation, "measured spread") != NULL);
        if (pass == 0) { /* 38 ms is within 10% of 40: the head alone */
            CHECK_EQ(p.n_active, 1);
            CHECK_NEAR(p.latency_ms, 40, 1e-9);
        } else { /* 34: the head alone is 18% slower, one round (37) 9%: k = 1 */
            CHECK_EQ(p.n_active, 2);
            CHECK_EQ(p.k, 1);
            CHECK_NEAR(p.latency_ms, 37, 1e-9);
        }
        d[1].spread = 5.0; /* a wild spread buys at most HR_SCHED_NOISE_MAX */
        CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
        CHECK_NEAR(p.noise_margin, HR_SCHED_NOISE_MAX, 1e-12);
        CHECK_EQ(p.n_active, pass == 0 ? 1 : 2);
        d[1].spread = NAN; /* not a measurement: no margin */
        CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
        CHECK_EQ(p.k, 2);
        CHECK_EQ(p.fastest_k, 0);
    }
    /* random instances against brute force (the fastest uniform plan): the
     * plan is within its margin of it, and where it is not the fastest it is
     * simpler (fewer devices, or as many and no more rounds) */
    int simpler = 0, compared = 0;
    for (int it = 0; it < 400; it++) {
        hr_sched_model rm;
        hr_sched_device rd[5];
        int n;
        gen_instance(&rm, rd, &n, it % 4);
        double smax = 0;
        for (int i = 0; i < n; i++) {
            rd[i].spread = chance(0.3) ? 0.0 : urand(0.0, 0.4);
            smax = fmax(smax, rd[i].spread);
        }
        hr_sched_opts o = hr_sched_opts_default();
        o.uneven_rounds = false;
        static hr_sched_plan e;
        int rc1 = hr_sched_solve(&rm, rd, n, &o, &p, NULL);
        int rc2 = hr_sched_exhaustive(&rm, rd, n, &o, &e, NULL);
        CHECK_EQ(rc1, rc2);
        if (rc1 || rc2)
            continue;
        compared++;
        double tol = 1e-6 * e.latency_ms;
        CHECK(p.noise_margin >= 0 && p.noise_margin <= fmin(HR_SCHED_NOISE_MAX, smax / 2) + 1e-12);
        CHECK(p.latency_ms <= e.latency_ms * (1 + p.noise_margin) + tol);
        CHECK(p.latency_ms >= e.latency_ms - tol);
        if (p.latency_ms > e.latency_ms + tol) {
            simpler++;
            CHECK(p.fastest_k > 0);
            CHECK_NEAR(p.fastest_ms, e.latency_ms, tol);
            CHECK(p.n_active < p.fastest_active ||
                  (p.n_active == p.fastest_active && p.k < p.fastest_k));
        } else {
            CHECK_EQ(p.fastest_k, 0);
        }
        check_cover(&p);
        CHECK_EQ(plan_sum_layers(&p), rm.n_layer);
    }
    printf("noise margin: %d random instances compared, a simpler plan taken in %d\n", compared,
           simpler);
    CHECK(compared >= 200);
    CHECK(simpler >= 20);
}

static void test_gpu_optimality(void) {
    int compared = 0, used = 0;
    for (int it = 0; it < 40; it++) {
        hr_sched_model m;
        hr_sched_device d[5];
        int n;
        gen_instance(&m, d, &n, it % 4);
        if (n > 3)
            n = 3;
        m.n_layer = irand(4, 12);
        for (int i = 0; i < n; i++) {
            if (chance(0.6)) {
                d[i].vram_bytes = m.layer_bytes * urand(0, m.n_layer);
                d[i].t_layer_gpu_ms = urand(0.5, 40);
            }
        }
        hr_sched_opts o = hr_sched_opts_default();
        o.uneven_rounds = false; /* the brute force searches uniform plans */
        o.use_gpu = true;
        if (it % 2)
            o.overlap = HR_SCHED_OVERLAP_SUM;
        static hr_sched_plan p, e;
        int rc1 = hr_sched_solve(&m, d, n, &o, &p, NULL);
        int rc2 = hr_sched_exhaustive(&m, d, n, &o, &e, NULL);
        CHECK_EQ(rc1, rc2);
        if (rc1 || rc2)
            continue;
        compared++;
        CHECK_NEAR(p.latency_ms, e.latency_ms, 1e-6 * e.latency_ms);
        if (fabs(p.latency_ms - e.latency_ms) > 1e-6 * e.latency_ms) {
            hr_sched_plan_print(&p, stderr);
            hr_sched_plan_print(&e, stderr);
        }
        for (int i = 0; i < n; i++)
            used += p.dev[i].n_gpu > 0;
    }
    printf("gpu: %d compared, accelerator used %d times\n", compared, used);
    CHECK(compared >= 20);
    CHECK(used >= 5);
}

/* The links, by hand: a round trip measured with a hidden state's bytes
 * already carries them; a link that passes one message fast but sustains
 * little bounds a token at k hidden states at its rate. */
static void test_link_costs(void) {
    hr_sched_model m = {.n_layer = 4, .layer_bytes = 1e9, .hidden_bytes = 8192};
    hr_sched_device d[2] = {dev("a", 10, 100e9, 0, 0.2, 1.25e8),
                            dev("b", 10, 100e9, 0, 0.2, 2.5e5)};
    d[0].t_head_ms = 1;
    double h0 = 0.1 + 1e3 * 8192 / 1.25e8; /* no rtt_bytes: the bytes at the rate */
    int w1[2] = {2, 2}, w2[2] = {1, 1};
    /* b's round trip was timed empty: its hop is the hidden state at 2 Mbit/s */
    double hb = 0.1 + 1e3 * 8192 / 2.5e5;
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 1 + 40 + h0 + hb, 1e-9);
    /* ... timed with half a hidden state each way: the other half at the rate */
    d[1].rtt_bytes = 4096;
    hb = 0.1 + 1e3 * 4096 / 2.5e5;
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 1 + 40 + h0 + hb, 1e-9);
    /* ... with a whole one: half the round trip; the rate still bounds the
     * token at k hidden states, 32.768 ms each */
    d[1].rtt_bytes = 8192;
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 1 + 40 + h0 + 0.1, 1e-9);
    static hr_sched_plan p;
    CHECK_EQ(hr_sched_evaluate(&m, d, 2, NULL, 2, w2, NULL, &p, NULL), 0);
    CHECK_NEAR(p.latency_ms, 2 * 32.768, 1e-9); /* 2 * (20 + h0 + 0.1) + 1 is less */
    CHECK_NEAR(p.link_floor_ms, 2 * 32.768, 1e-9);
    CHECK_EQ(p.link_floor_dev, 1);
    CHECK(strstr(p.explanation, "bound by b's link") != NULL);
    CHECK_EQ(hr_sched_evaluate(&m, d, 2, NULL, 1, w1, NULL, &p, NULL), 0);
    CHECK(p.link_floor_ms < p.latency_ms); /* 32.8 ms under 41 + hops: not bound */
    CHECK(strstr(p.explanation, "bound by") == NULL);
    /* the solver sees the bound: k = 1 (or b left out) beats k = 2 */
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
    CHECK(p.latency_ms <= 1 + 40 + h0 + 0.1 + 1e-9);
    CHECK(p.k == 1 || p.n_active == 1);
    /* a head alone has no link bound */
    int w3[2] = {4, 0};
    CHECK_EQ(hr_sched_evaluate(&m, d, 2, NULL, 1, w3, NULL, &p, NULL), 0);
    CHECK_NEAR(p.latency_ms, 41.0, 1e-9);
    CHECK_EQ(p.link_floor_dev, -1);
    /* a negative or NaN rtt_bytes is refused */
    d[1].rtt_bytes = -1;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
    d[1].rtt_bytes = NAN;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
}

/* A round's burst: t_round_ms is added to each non-empty CPU window, with
 * the window kept at half its per-layer cost at least. */
static void test_round_costs(void) {
    hr_sched_model m = {.n_layer = 6, .layer_bytes = 1e9, .hidden_bytes = 0};
    hr_sched_device d[2] = {dev("a", 6, 100e9, 0, 0, 1e9), dev("b", 6, 100e9, 0, 0, 1e9)};
    int w1[2] = {3, 3}, w3[2] = {1, 1}, alone[2] = {6, 0};
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 36.0, 1e-9);
    d[0].t_round_ms = d[1].t_round_ms = -2.5; /* a quota throttles short bursts less */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 2 * (18 - 2.5), 1e-9);
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 3 * 2 * (6 - 2.5), 1e-9);
    /* the head alone runs its rounds back to back: no burst saving, at any k */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, alone, NULL), 36, 1e-9);
    int alone3[6] = {2, 0, 2, 0, 2, 0};
    CHECK_NEAR(hr_sched_cost_rounds(&m, d, 2, NULL, 3, alone3, NULL), 36, 1e-9);
    d[0].t_round_ms = d[1].t_round_ms = -5; /* one layer: 6 - 5 = 1 < 3, held at half */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 3 * 2 * 3.0, 1e-9);
    d[0].t_round_ms = d[1].t_round_ms = 1; /* an overhead per round */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 3 * 2 * 7.0, 1e-9);
    static hr_sched_plan p;
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
    CHECK_EQ(p.k, 1); /* overheads favour few rounds */
    d[0].t_round_ms = d[1].t_round_ms = -2.5;
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
    CHECK(p.k > 1); /* savings favour many */
    CHECK_NEAR(p.latency_ms,
               hr_sched_cost(&m, d, 2, NULL, p.k, (int[]){p.dev[0].win[0], p.dev[1].win[0]}, NULL),
               1e-9);
    d[0].t_round_ms = NAN;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
}

/* A CPU quota: a round of c unthrottled ms takes max(c, slope c - save),
 * the head's output burst likewise, and a token takes at least slope times
 * a device's CPU work; the head alone gets no burst at all. */
static void test_quota_costs(void) {
    hr_sched_model m = {.n_layer = 6, .layer_bytes = 1e9, .hidden_bytes = 0};
    hr_sched_device d[2] = {dev("a", 2, 100e9, 0, 0, 1e9), dev("b", 2, 100e9, 0, 0, 1e9)};
    d[1].throttle_slope = 3;
    d[1].throttle_save_ms = 3;
    int w1[2] = {3, 3}, w3[2] = {1, 1}, alone[2] = {6, 0};
    /* k 1: b's 6 ms round takes 3 * 6 - 3 = 15; its floor 3 * 6 = 18 < 6 + 15 */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 6 + 15, 1e-9);
    /* k 3: b's 2 ms rounds take max(2, 6 - 3) = 3, 3 * (2 + 3) = 15 < the floor 18 */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 18, 1e-9);
    d[1].throttle_save_ms = 5; /* 2 ms rounds fit in the quota's share: 2 each */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 18, 1e-9);
    d[1].throttle_slope = 1.5; /* the floor 9 < 3 * (2 + 2) */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 12, 1e-9);
    /* a round that finds b's share spent waits 0.5 ms for the period:
     * each of the 3 rounds wakes b */
    d[1].throttle_wait_ms = 0.5;
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 3 * (2 + 2 + 0.5), 1e-9);
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 6 + 6 + 0.5, 1e-9); /* floor 9 */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, alone, NULL), 12, 1e-9);       /* b not woken */
    /* with its period known: a round reaches b with its share spent only when
     * no period began in the gap since b's last round (a's 2 ms window) */
    d[1].throttle_period_ms = 4; /* a period began in half of such gaps */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 3 * (2 + 2 + 0.25), 1e-9);
    d[1].throttle_period_ms = 2; /* one always began: the whole share, no wait */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 3 * (2 + 2), 1e-9);
    d[1].throttle_period_ms = 4; /* after a's 6 ms window: none either (the floor 9 < 12) */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 6 + 6, 1e-9);
    d[1].throttle_period_ms = 0;
    d[1].throttle_slope = 0; /* without a quota, no wait */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 3, w3, NULL), 12, 1e-9);
    d[1].throttle_slope = 1.5;
    d[1].throttle_wait_ms = 0;
    /* the head: its output burst of 1 ms is throttled in a ring only */
    d[0].throttle_slope = 2;
    d[0].throttle_save_ms = 0.5;
    d[0].t_head_ms = 1; /* max(1, 2 - 0.5) = 1.5 */
    d[1].throttle_slope = 0;
    d[1].throttle_save_ms = 0;
    /* a's 6 ms round takes 12 - 0.5; floor 2 * (6 + 1) = 14 < 1.5 + 11.5 + 6 */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 1.5 + 11.5 + 6, 1e-9);
    d[0].throttle_wait_ms = 0.25; /* the round wakes the head too; alone, nothing */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL), 1.5 + 11.5 + 6 + 0.25, 1e-9);
    int fwd[2] = {0, 6}; /* the head only forwards: b's 12 ms and the head's 1.5, no wait */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, fwd, NULL), 1.5 + 12, 1e-9);
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, alone, NULL), 26, 1e-9);
    /* alone: back to back, 1 + 12 raw, at least 2 * 13 */
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, alone, NULL), 26, 1e-9);
    int alone3[6] = {2, 0, 2, 0, 2, 0};
    CHECK_NEAR(hr_sched_cost_rounds(&m, d, 2, NULL, 3, alone3, NULL), 26, 1e-9);
    static hr_sched_plan p, e;
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
    CHECK_EQ(hr_sched_exhaustive(&m, d, 2, NULL, &e, NULL), 0);
    CHECK_NEAR(p.latency_ms, e.latency_ms, 1e-9);
    CHECK(p.n_active == 2); /* the quota'd head sheds layers to b */
    CHECK_NEAR(p.head_ms, 1.5, 1e-9);
    CHECK_NEAR(p.dev[0].throttle_slope, 2.0, 0);
    CHECK_NEAR(p.dev[1].throttle_slope, 0.0, 0);
    char *js = NULL;
    CHECK_EQ(hr_sched_plan_json(&p, &js, NULL), 0);
    CHECK(js && strstr(js, "\"throttle_slope\": 2") != NULL);
    CHECK(js && strstr(js, "\"quota_wait_ms\"") != NULL);
    int computes = 0; /* the head's rounds on its CPU: a forwarding round waits for nothing */
    for (int r = 0; r < p.k; r++)
        computes += p.dev[0].win[r] > 0;
    CHECK_NEAR(p.quota_wait_ms, computes * 0.25, 1e-12);
    CHECK_NEAR(p.dev[0].quota_wait_ms, computes * 0.25, 1e-12);
    free(js);
    /* unthrottled, the same devices tie the ring with the head alone */
    d[0].throttle_slope = 0;
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, alone, NULL), 13, 1e-9);
    /* reads: a device streaming under a quota pays their CPU time too */
    hr_sched_model ms = {.n_layer = 4, .layer_bytes = 1e8, .hidden_bytes = 0};
    hr_sched_device e2[2] = {dev("h", 1, 100e9, 0, 0, 1e9), dev("s", 1, 1.5e8, 1e10, 0, 1e9)};
    e2[1].throttle_slope = 2;
    e2[1].read_cpu_ms_mb = 0.5;
    int w22[2] = {2, 2};
    /* s keeps half a layer beside a one-layer buffer and reads 150 MB a
     * token (15 ms at 10 GB/s), 75 ms of CPU: its floor 2 * (2 + 75) = 154 */
    double with = hr_sched_cost(&ms, e2, 2, NULL, 1, w22, NULL);
    CHECK_NEAR(with, 154, 1e-6);
    { /* the plan's CPU a token for s: its 2 ms of compute and its reads' 75 */
        static hr_sched_plan pe;
        CHECK_EQ(hr_sched_evaluate(&ms, e2, 2, NULL, 1, w22, NULL, &pe, NULL), 0);
        CHECK_NEAR(pe.dev[1].cpu_ms, 77, 1e-6);
        CHECK_NEAR(pe.dev[0].cpu_ms, 2, 1e-6); /* h: its 2 layers; no quota, no reads' CPU */
    }
    e2[1].read_cpu_ms_mb = 0; /* unknown: the disk's 15 ms a round set the pace */
    double without = hr_sched_cost(&ms, e2, 2, NULL, 1, w22, NULL);
    CHECK_NEAR(without, 15, 1e-6);
    e2[1].read_cpu_ms_mb = 0.5;
    e2[1].throttle_slope = 0; /* no quota: reads run beside the compute */
    CHECK_NEAR(hr_sched_cost(&ms, e2, 2, NULL, 1, w22, NULL), without, 1e-9);
    e2[1].throttle_slope = 2;
    static hr_sched_plan p2, e2p;
    CHECK_EQ(hr_sched_solve(&ms, e2, 2, NULL, &p2, NULL), 0);
    CHECK_EQ(hr_sched_exhaustive(&ms, e2, 2, NULL, &e2p, NULL), 0);
    CHECK_NEAR(p2.latency_ms, e2p.latency_ms, 1e-9);
    /* the head's burst is an idle spell of b's that refills one share, no
     * more: b's 6 ms of CPU take at least 2 * 6 plus the burst's 10 - 1 */
    hr_sched_device g[2] = {dev("h", 100, 100e9, 0, 0, 1e9), dev("b", 1, 100e9, 0, 0, 1e9)};
    g[0].t_head_ms = 10;
    g[1].throttle_slope = 2;
    g[1].throttle_save_ms = 1;
    int g1[2] = {0, 6}, g3[6] = {0, 2, 0, 2, 0, 2};
    /* k 1: 10 + Q(6) = 10 + 11, its floor 12 + 9 as much */
    CHECK_NEAR(hr_sched_cost(&m, g, 2, NULL, 1, g1, NULL), 21, 1e-9);
    /* k 3: 10 + 3 Q(2) = 19 rounds back to back, short of the floor's 21 */
    CHECK_NEAR(hr_sched_cost_rounds(&m, g, 2, NULL, 3, g3, NULL), 21, 1e-9);
    g[0].t_head_ms = 0.5; /* a burst within the share adds nothing: 0.5 + 9, floor 12 */
    CHECK_NEAR(hr_sched_cost_rounds(&m, g, 2, NULL, 3, g3, NULL), 12, 1e-9);
    g[0].t_head_ms = 10;
    static hr_sched_plan gp, ge;
    CHECK_EQ(hr_sched_solve(&m, g, 2, NULL, &gp, NULL), 0);
    CHECK_EQ(hr_sched_exhaustive(&m, g, 2, NULL, &ge, NULL), 0);
    CHECK_NEAR(gp.latency_ms, ge.latency_ms, 1e-9);
    CHECK_NEAR(gp.latency_ms, 21, 1e-9);
    CHECK_EQ(gp.k, 1); /* a tie at the floor: the fewest rounds */
    /* bad values */
    char err[HR_ERR_LEN] = "";
    d[1].throttle_slope = 0.5;
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, err), HR_EINVAL);
    CHECK(strstr(err, "throttle_slope") != NULL);
    d[1].throttle_slope = NAN;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
    d[1].throttle_slope = 2;
    d[1].throttle_save_ms = -1;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
    d[1].throttle_save_ms = 0;
    d[1].throttle_wait_ms = NAN;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
    d[1].throttle_wait_ms = 0.5;
    d[1].throttle_period_ms = NAN;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
    d[1].throttle_period_ms = -1;
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, w1, NULL)));
}

static void test_hand_costs(void) {
    hr_sched_model m = {.n_layer = 4, .layer_bytes = 1e9, .hidden_bytes = 1e4};
    hr_sched_device d[2] = {dev("a", 10, 100e9, 0, 2, 1e7), dev("b", 20, 100e9, 0, 4, 1e6)};
    d[0].t_head_ms = 5;
    /* k=1, w=(3,1): S = 3*10 + 20 + (1 + 1) + (2 + 10) = 64 ms, + head 5 */
    int w[2] = {3, 1};
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w, NULL), 69.0, 1e-9);
    /* head alone: no hops */
    int w2[2] = {4, 0};
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 1, w2, NULL), 45.0, 1e-9);
    /* k=2, w=(1,1): 2 * (10 + 20 + 14) + 5 */
    int w3[2] = {1, 1};
    CHECK_NEAR(hr_sched_cost(&m, d, 2, NULL, 2, w3, NULL), 93.0, 1e-9);
    int bad[2] = {2, 1};
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 1, bad, NULL)));
    CHECK(isinf(hr_sched_cost(&m, d, 2, NULL, 3, w, NULL)));
    static hr_sched_plan p;
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
    CHECK_EQ(p.k, 1);
    CHECK_EQ(p.dev[0].win[0], 4); /* b only slows the ring */
    CHECK_EQ(p.n_active, 1);
    CHECK_EQ(p.dev[1].ring_pos, -1);
    CHECK_NEAR(p.latency_ms, 45.0, 1e-9);

    /* one pinned device, 4 layers of 1 GB, 2 GB of memory, 1 GB/s disk */
    hr_sched_model m1 = {.n_layer = 4, .layer_bytes = 1e9};
    hr_sched_device s = dev("s", 10, 2e9, 1e9, 0, 0);
    int one[1] = {1}, two[1] = {2}, four[1] = {4};
    /* k=1: the window is twice the memory: 1 GB resident, a 1 GB (one layer)
     * buffer, 3 GB read per token, 2 GB of it while the window computes; the
     * disk (3000 ms) sets the round */
    CHECK_NEAR(hr_sched_cost(&m1, &s, 1, NULL, 1, four, NULL), 3000.0, 1e-6);
    /* k=2: overflow 2 GB, a 2 GB buffer (nothing resident), 2 GB per round = 2000 ms,
     * read while the other round computes (20 ms of compute hides in it) */
    CHECK_NEAR(hr_sched_cost(&m1, &s, 1, NULL, 2, two, NULL), 2 * 2000.0, 1e-6);
    /* k=4: read 2 GB / 3 per round */
    CHECK_NEAR(hr_sched_cost(&m1, &s, 1, NULL, 4, one, NULL), 4 * 2000.0 / 3, 1e-6);
    CHECK_EQ(hr_sched_solve(&m1, &s, 1, NULL, &p, NULL), 0);
    CHECK_EQ(p.k, 4);
    CHECK(p.dev[0].overloaded);
    CHECK_NEAR(p.dev[0].read_bytes, 4 * 2e9 / 3, 1.0);
    /* lru: an overloaded device re-reads its window every round */
    s.os = HR_SCHED_OS_MACOS;
    /* (read on demand while it computes: the 20 / 10 ms of compute hide in the reads) */
    CHECK_NEAR(hr_sched_cost(&m1, &s, 1, NULL, 2, two, NULL), 2 * 2000.0, 1e-6);
    CHECK_NEAR(hr_sched_cost(&m1, &s, 1, NULL, 4, one, NULL), 4 * 1000.0, 1e-6);
    CHECK_EQ(hr_sched_solve(&m1, &s, 1, NULL, &p, NULL), 0);
    CHECK_EQ(p.k, 2); /* tie with k=4: the smaller k wins */

    /* overlap: a fast partner hides the streaming device's disk */
    hr_sched_model m2 = {.n_layer = 4, .layer_bytes = 1e9, .hidden_bytes = 0};
    hr_sched_device r[2] = {dev("h", 10, 1.5e9, 1e9, 0, 1e9), dev("x", 300, 100e9, 0, 0, 1e9)};
    /* k=2, w=(1,1): h overflows 0.5 GB, reads 0.5 GB / (k-1) per round = 500 ms into a
     * 0.5 GB buffer; the ring computes 310 ms per round, so h's disk sets the round */
    int wr[2] = {1, 1};
    CHECK_NEAR(hr_sched_cost(&m2, r, 2, NULL, 2, wr, NULL), 2 * 500.0, 1e-6);
    /* a faster disk hides behind x's 300 ms entirely */
    r[0].disk_bps = 2e9;
    CHECK_NEAR(hr_sched_cost(&m2, r, 2, NULL, 2, wr, NULL), 2 * 310.0, 1e-6);
    /* the buffer cannot hold one streamed part: with 1.2 GB, h computing 2 of 4 layers
     * per round (k = 2) keeps nothing resident and slides a 1.2 GB buffer over each
     * 2 GB window: 2 GB per round (2000 ms), 800 ms of it while h computes */
    r[0].disk_bps = 1e9;
    hr_sched_model m3 = {.n_layer = 4, .layer_bytes = 1e9, .hidden_bytes = 0};
    r[0].mem_bytes = 1.2e9;
    int w31[2] = {2, 0};
    static hr_sched_plan p3;
    CHECK_EQ(hr_sched_evaluate(&m3, r, 2, NULL, 2, w31, NULL, &p3, NULL), 0);
    CHECK_NEAR(p3.latency_ms, 2 * 2000.0, 1e-6);
    CHECK_NEAR(p3.dev[0].read_bytes, 4e9, 1.0);
    CHECK_NEAR(p3.dev[0].disk_exposed_ms, 2 * (2000.0 - 20.0), 1e-6);
    CHECK_NEAR(p3.dev[0].mem_bytes, 1.2e9, 1.0);
    /* below one layer of room it cannot stream at all */
    r[0].mem_bytes = 0.9e9;
    CHECK(isinf(hr_sched_cost(&m3, r, 2, NULL, 2, w31, NULL)));
}

static void test_properties(void) {
    static hr_sched_plan p;
    hr_sched_model m = {.n_layer = 32,
                        .layer_bytes = 0.25 * GIB,
                        .hidden_bytes = 8192,
                        .kv_bytes_per_layer = 0.01 * GIB,
                        .output_bytes = 0.2 * GIB};
    /* memory is plentiful: k = 1, nothing read from disk */
    hr_sched_device d[3] = {dev("a", 8, 16 * GIB, 2e9, 1, 1e8), dev("b", 9, 16 * GIB, 2e9, 1, 1e8),
                            dev("slow", 200, 16 * GIB, 2e9, 90, 1e6)};
    d[0].is_head = true;
    CHECK_EQ(hr_sched_solve(&m, d, 3, NULL, &p, NULL), 0);
    CHECK_EQ(p.k, 1);
    CHECK_NEAR(p.disk_exposed_ms, 0.0, 1e-12);
    CHECK_EQ(p.dev[2].win[0], 0); /* slow compute and a slow link: left out */
    CHECK(!p.dev[2].active);
    /* why, with the hop's figure labelled when the link was not measured */
    CHECK(strstr(p.dev[2].left_out, "predicted faster without it") != NULL);
    CHECK(strstr(p.dev[2].left_out, "assumed") == NULL);
    d[2].link_assumed = true;
    CHECK_EQ(hr_sched_solve(&m, d, 3, NULL, &p, NULL), 0);
    CHECK(!p.dev[2].active);
    CHECK(strstr(p.dev[2].left_out, "hop, assumed: no link measured)") != NULL);
    d[2].link_assumed = false;
    CHECK_EQ(p.order[0], 0);
    CHECK_EQ(plan_sum_layers(&p), 32);

    /* memory short everywhere, fast disks: k > 1 */
    d[0].mem_bytes = d[1].mem_bytes = 2.5 * GIB;
    d[2].mem_bytes = 1 * GIB;
    CHECK_EQ(hr_sched_solve(&m, d, 3, NULL, &p, NULL), 0);
    CHECK(p.k > 1);
    CHECK_EQ(plan_sum_layers(&p), 32);

    /* head short of memory with a slow disk, a roomy partner: k = 1 on the partner */
    hr_sched_device e[2] = {dev("head", 5, 1 * GIB, 0.2e9, 1, 1e8),
                            dev("roomy", 12, 32 * GIB, 0.2e9, 1, 1e8)};
    CHECK_EQ(hr_sched_solve(&m, e, 2, NULL, &p, NULL), 0);
    CHECK_EQ(p.k, 1);
    CHECK(!p.dev[0].overloaded && !p.dev[1].overloaded);
    CHECK(p.dev[1].win[0] > p.dev[0].win[0]);
    /* the same with a fast disk on the head: streaming pays, k > 1 */
    e[0].disk_bps = 30e9;
    CHECK_EQ(hr_sched_solve(&m, e, 2, NULL, &p, NULL), 0);
    CHECK(p.k > 1);
    CHECK(p.dev[0].overloaded);

    /* windows */
    int first = -1, count = -1;
    CHECK_EQ(hr_sched_plan_window(&p, 1, p.k - 1, &first, &count), 0);
    CHECK_EQ(first, (p.k - 1) * (p.n_layer / p.k) + p.dev[1].first[0]);
    CHECK_EQ(count, p.dev[1].win[0]);
    CHECK_EQ(hr_sched_plan_window(&p, 1, p.k, &first, &count), HR_EINVAL);
    CHECK_EQ(hr_sched_plan_window(&p, 2, 0, &first, &count), HR_EINVAL);

    /* k_fixed / k_max */
    hr_sched_opts o = hr_sched_opts_default();
    o.k_fixed = 2;
    CHECK_EQ(hr_sched_solve(&m, e, 2, &o, &p, NULL), 0);
    CHECK_EQ(p.k, 2);
    CHECK_EQ(p.n_k, 1);
    o.k_fixed = 0;
    o.k_max = 1;
    CHECK_EQ(hr_sched_solve(&m, e, 2, &o, &p, NULL), 0);
    CHECK_EQ(p.k, 1);
}

/* The home cluster of the prima.cpp paper, 70B Q4_K (80 layers, ~40 GiB).
 * Memory and disk as in the paper; compute from decode being memory-bound
 * (0.49 GiB per layer over ~45-60 GB/s of usable memory bandwidth, ~20 GB/s
 * on the phone); Wi-Fi ~300 Mbit/s with 6-10 ms RTT, the desktop wired. */
static void test_prima_home_cluster(void) {
    hr_sched_model m = {.n_layer = 80,
                        .layer_bytes = 0.49 * GIB,
                        .hidden_bytes = 8192 * 2,                    /* f16 hidden state */
                        .kv_bytes_per_layer = 2.0 * 1024 * 2 * 1024, /* K+V f16, 8x128, 1024 ctx */
                        .output_bytes = 0.8 * GIB};                  /* Q6_K LM head */
    hr_sched_device d[4] = {
        dev("mac-m1", 10, 2.4 * GIB, 0.72e9, 6, 37.5e6),
        dev("i9-laptop", 12, 4.1 * GIB, 2.98e9, 6, 37.5e6),
        dev("i9-desktop", 9, 9.7 * GIB, 3.17e9, 1, 125e6),
        dev("phone", 25, 1.9 * GIB, 1.37e9, 10, 25e6),
    };
    d[0].os = HR_SCHED_OS_MACOS;
    d[3].os = HR_SCHED_OS_ANDROID;
    d[2].is_head = true;
    d[2].t_head_ms = 20;
    static hr_sched_plan p, e;
    char err[HR_ERR_LEN] = "";
    hr_sched_opts uo = hr_sched_opts_default();
    uo.uneven_rounds = false; /* uniform plans, as the brute force below */
    double t0 = now_s();
    int rc = hr_sched_solve(&m, d, 4, &uo, &p, err);
    double dt = now_s() - t0;
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    hr_sched_plan_print(&p, stdout);
    printf("home cluster solved in %.1f ms\n", dt * 1e3);
    CHECK(p.k > 1);
    CHECK_EQ(plan_sum_layers(&p), 80);
    CHECK(p.optimal);
    double mac = p.dev[0].layers * m.layer_bytes / d[0].mem_bytes;
    double laptop = p.dev[1].layers * m.layer_bytes / d[1].mem_bytes;
    double desktop = p.dev[2].layers * m.layer_bytes / d[2].mem_bytes;
    CHECK(laptop > mac);
    CHECK(desktop > mac);
    CHECK(p.dev[1].overloaded && p.dev[2].overloaded); /* the fast disks stream */
    CHECK(!p.dev[0].overloaded);
    CHECK_EQ(hr_sched_exhaustive(&m, d, 4, NULL, &e, NULL), 0);
    CHECK_NEAR(p.latency_ms, e.latency_ms, 1e-6 * e.latency_ms);
    /* rounds of their own windows: never predicted slower than the best uniform plan */
    CHECK_EQ(hr_sched_solve(&m, d, 4, NULL, &e, NULL), 0);
    CHECK(e.latency_ms <= p.latency_ms);
    check_cover(&e);
    hr_sched_plan_print(&e, stdout);
    /* the pessimistic overlap model agrees that k > 1 pays */
    hr_sched_opts o = uo;
    o.overlap = HR_SCHED_OVERLAP_SUM;
    CHECK_EQ(hr_sched_solve(&m, d, 4, &o, &e, NULL), 0);
    CHECK(e.k > 1);
    CHECK(e.latency_ms >= p.latency_ms);
    /* the same cluster with memory for everything: k = 1 */
    hr_sched_device big[4];
    memcpy(big, d, sizeof big);
    for (int i = 0; i < 4; i++)
        big[i].mem_bytes = 64 * GIB;
    CHECK_EQ(hr_sched_solve(&m, big, 4, NULL, &e, NULL), 0);
    CHECK_EQ(e.k, 1);
}

static void test_threads(void) {
    double ms[6] = {40, 21, 14.6, 11.0, 10.7, 10.5};
    CHECK_EQ(hr_sched_pick_threads(ms, 6, 0.03), 5); /* 10.7 <= 1.03 * 10.5 */
    CHECK_EQ(hr_sched_pick_threads(ms, 6, 0.0), 6);
    CHECK_EQ(hr_sched_pick_threads(ms, 6, 0.06), 4);
    double none[3] = {0, 0, 0};
    CHECK_EQ(hr_sched_pick_threads(none, 3, 0.03), 0);
    CHECK_EQ(hr_sched_pick_threads(NULL, 3, 0.03), 0);
    double gaps[4] = {0, 8, 0, 7.9};
    CHECK_EQ(hr_sched_pick_threads(gaps, 4, 0.03), 2);

    /* in a plan; t_layer_ms = 0 takes decode_ms at the chosen count */
    hr_sched_model m = {.n_layer = 8, .layer_bytes = 0.1 * GIB, .hidden_bytes = 4096};
    hr_sched_device d[2] = {dev("a", 0, 8 * GIB, 0, 1, 1e8), dev("b", 5, 8 * GIB, 0, 1, 1e8)};
    d[0].n_thread_rates = 8;
    for (int t = 0; t < 8; t++) {
        d[0].prefill_ms[t] = 80.0 / (t + 1);                            /* compute-bound: all 8 */
        d[0].decode_ms[t] = t < 3 ? 12.0 - 2 * t : 8.0 + 0.1 * (t - 3); /* bound at 3 */
    }
    static hr_sched_plan p;
    CHECK_EQ(hr_sched_solve(&m, d, 2, NULL, &p, NULL), 0);
    CHECK_EQ(p.dev[0].prefill_threads, 8);
    CHECK_EQ(p.dev[0].decode_threads, 3);
    CHECK_NEAR(p.dev[0].t_layer_ms, 8.0, 1e-12);
    CHECK_EQ(p.dev[1].decode_threads, 0);
}

static void test_output(void) {
    hr_sched_model m = {.n_layer = 12,
                        .layer_bytes = 0.5 * GIB,
                        .hidden_bytes = 8192,
                        .kv_bytes_per_layer = 0.01 * GIB};
    hr_sched_device d[3] = {dev("alpha", 8, 2 * GIB, 3e9, 1, 1e8),
                            dev("beta", 9, 2 * GIB, 3e9, 1, 1e8),
                            dev("gamma", 300, 1 * GIB, 0, 50, 1e6)};
    static hr_sched_plan p;
    CHECK_EQ(hr_sched_solve(&m, d, 3, NULL, &p, NULL), 0);
    char small[16];
    int need = hr_sched_plan_format(&p, small, sizeof small);
    CHECK(need > 100);
    CHECK_EQ(strlen(small), sizeof small - 1);
    char *buf = malloc((size_t)need + 1);
    CHECK_EQ(hr_sched_plan_format(&p, buf, (size_t)need + 1), need);
    CHECK_EQ(strlen(buf), need);
    CHECK(strstr(buf, "alpha") && strstr(buf, "gamma") && strstr(buf, "candidates"));
    CHECK_EQ(hr_sched_plan_format(&p, NULL, 0), need);
    free(buf);
    CHECK_EQ(hr_sched_plan_format(NULL, small, sizeof small), HR_EINVAL);

    char *js = NULL;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_sched_plan_json(&p, &js, err), 0);
    json_error_t jerr;
    json_t *root = js ? json_loads(js, 0, &jerr) : NULL;
    CHECK(root != NULL);
    if (root) {
        CHECK_EQ(json_integer_value(json_object_get(root, "schema_version")),
                 HR_SCHED_SCHEMA_VERSION);
        CHECK_EQ(json_integer_value(json_object_get(root, "k")), p.k);
        json_t *devs = json_object_get(root, "devices");
        CHECK_EQ(json_array_size(devs), 3);
        long long layers = 0;
        for (size_t i = 0; i < json_array_size(devs); i++) {
            json_t *dj = json_array_get(devs, i);
            layers += json_integer_value(json_object_get(dj, "layers"));
            if (json_is_true(json_object_get(dj, "active")) &&
                json_integer_value(json_object_get(dj, "w")) > 0)
                CHECK_EQ(json_array_size(json_object_get(dj, "windows")), p.k);
        }
        CHECK_EQ(layers, 12);
        CHECK(json_is_number(json_object_get(root, "latency_ms")));
        CHECK_EQ(json_array_size(json_object_get(root, "ring")), p.n_active);
        json_decref(root);
    }
    free(js);

    /* a failed plan still prints and serialises */
    m.n_layer = 0;
    CHECK_EQ(hr_sched_solve(&m, d, 3, NULL, &p, NULL), HR_EINVAL);
    char txt[512];
    CHECK(hr_sched_plan_format(&p, txt, sizeof txt) > 0);
    CHECK(strstr(txt, "none") != NULL);
    CHECK_EQ(hr_sched_plan_json(&p, &js, err), 0);
    CHECK(js && strstr(js, "\"status\": -1"));
    free(js);
}

static void expect_fail(const hr_sched_model *m, const hr_sched_device *d, int n, int code,
                        const char *needle) {
    static hr_sched_plan p;
    char err[HR_ERR_LEN] = "";
    memset(&p, 0x5a, sizeof p);
    int rc = hr_sched_solve(m, d, n, NULL, &p, err);
    CHECK_EQ(rc, code);
    CHECK_EQ(p.status, code);
    CHECK_EQ(p.k, 0);
    CHECK(strlen(err) > 0 && strcmp(err, p.explanation) == 0);
    if (needle && !strstr(err, needle))
        fprintf(stderr, "error '%s' lacks '%s'\n", err, needle);
    CHECK(!needle || strstr(err, needle));
    CHECK_EQ(hr_sched_exhaustive(m, d, n, NULL, &p, NULL), code);
}

static void test_bad_inputs(void) {
    hr_sched_model m = {.n_layer = 80,
                        .layer_bytes = 0.5 * GIB,
                        .hidden_bytes = 16384,
                        .kv_bytes_per_layer = 0.004 * GIB,
                        .output_bytes = 0.8 * GIB};
    hr_sched_device d[3] = {dev("a", 9, 8 * GIB, 0, 1, 1e8), dev("b", 9, 8 * GIB, 0, 1, 1e8),
                            dev("c", 9, 8 * GIB, 0, 1, 1e8)};
    /* 40 GiB model, 24 GiB memory, no disks */
    expect_fail(&m, d, 3, HR_EINFEASIBLE, "disk");
    expect_fail(&m, d, 0, HR_EINVAL, "no devices");
    expect_fail(&m, NULL, 3, HR_EINVAL, "NULL");
    expect_fail(NULL, d, 3, HR_EINVAL, "model");
    expect_fail(&m, d, HR_SCHED_MAX_DEV + 1, HR_EINVAL, "devices");
    hr_sched_model z = m;
    z.n_layer = 0;
    expect_fail(&z, d, 3, HR_EINVAL, "n_layer");
    z = m;
    z.layer_bytes = NAN;
    expect_fail(&z, d, 3, HR_EINVAL, "layer_bytes");
    z = m;
    z.kv_bytes_per_layer = -1;
    expect_fail(&z, d, 3, HR_EINVAL, "kv_bytes_per_layer");

    for (int i = 0; i < 3; i++)
        d[i].disk_bps = 2e9; /* feasible from here on */
    hr_sched_device e[3];
    memcpy(e, d, sizeof e);
    e[1].t_layer_ms = NAN;
    expect_fail(&m, e, 3, HR_EINVAL, "'b': t_layer_ms");
    memcpy(e, d, sizeof e);
    e[2].mem_bytes = -5;
    expect_fail(&m, e, 3, HR_EINVAL, "mem_bytes");
    memcpy(e, d, sizeof e);
    e[2].disk_bps = INFINITY;
    expect_fail(&m, e, 3, HR_EINVAL, "disk_bps");
    memcpy(e, d, sizeof e);
    e[0].link_bps = 0;
    expect_fail(&m, e, 3, HR_EINVAL, "link_bps");
    memcpy(e, d, sizeof e);
    e[0].is_head = e[2].is_head = true;
    expect_fail(&m, e, 3, HR_EINVAL, "head");
    memcpy(e, d, sizeof e);
    e[1].t_layer_ms = 0;
    expect_fail(&m, e, 3, HR_EINVAL, "decode_ms");
    memcpy(e, d, sizeof e);
    e[1].n_thread_rates = -2;
    expect_fail(&m, e, 3, HR_EINVAL, "n_thread_rates");
    memcpy(e, d, sizeof e);
    e[1].n_thread_rates = 2;
    e[1].decode_ms[1] = NAN;
    expect_fail(&m, e, 3, HR_EINVAL, "decode_ms[1]");
    memcpy(e, d, sizeof e);
    memset(e[0].name, 'x', sizeof e[0].name);
    expect_fail(&m, e, 3, HR_EINVAL, "NUL");
    memcpy(e, d, sizeof e);
    e[0].os = (hr_sched_os)42;
    expect_fail(&m, e, 3, HR_EINVAL, "os");
    memcpy(e, d, sizeof e);
    e[0].mem_bytes = 0.5 * GIB; /* head cannot hold the output head, nor stream it */
    e[0].disk_bps = 0;
    expect_fail(&m, e, 3, HR_EINFEASIBLE, "output head");
    {
        /* with a disk it streams the missing 0.3 GiB every token and holds no layers */
        static hr_sched_plan ps, pe;
        e[0].disk_bps = 2e9;
        char e1[HR_ERR_LEN] = "";
        CHECK_EQ(hr_sched_solve(&m, e, 3, NULL, &ps, e1), 0);
        CHECK_EQ(hr_sched_exhaustive(&m, e, 3, NULL, &pe, NULL), 0);
        CHECK_NEAR(ps.latency_ms, pe.latency_ms, 1e-6 * pe.latency_ms);
        CHECK_NEAR(ps.out_stream_bytes, 0.3 * GIB, 1.0);
        CHECK_EQ(ps.dev[0].win[0], 0);
        CHECK(ps.dev[0].active);
        CHECK_NEAR(ps.dev[0].read_bytes, 0.3 * GIB, 1.0);
        CHECK_NEAR(ps.head_ms, e[0].t_head_ms + 1e3 * 0.3 * GIB / 2e9, 1e-9);
        CHECK(strstr(ps.explanation, "output head streamed") != NULL);
        char txt[4096];
        CHECK(hr_sched_plan_format(&ps, txt, sizeof txt) > 0);
        CHECK(strstr(txt, "streamed from disk per token") != NULL);
    }
    memcpy(e, d, sizeof e);
    for (int i = 0; i < 3; i++)
        e[i].mem_bytes = 0.2 * GIB; /* not even one layer fits */
    z = m;
    z.output_bytes = 0;
    expect_fail(&z, e, 3, HR_EINFEASIBLE, "one layer");

    static hr_sched_plan p;
    hr_sched_opts o = hr_sched_opts_default();
    o.k_fixed = 3;
    o.uneven_rounds = false;
    char err[HR_ERR_LEN] = "";
    CHECK_EQ(hr_sched_solve(&m, d, 3, &o, &p, err), HR_EINVAL);
    CHECK(strstr(err, "k_fixed") != NULL);
    o.k_fixed = HR_SCHED_MAX_ROUNDS + 1;
    o.uneven_rounds = true;
    CHECK_EQ(hr_sched_solve(&m, d, 3, &o, &p, err), HR_EINVAL);
    CHECK(strstr(err, "k_fixed") != NULL);
    o = hr_sched_opts_default();
    o.thread_tol = -1;
    CHECK_EQ(hr_sched_solve(&m, d, 3, &o, &p, err), HR_EINVAL);
    CHECK_EQ(hr_sched_solve(&m, d, 3, NULL, NULL, err), HR_EINVAL);
    o = hr_sched_opts_default();
    o.max_enum = 10;
    CHECK_EQ(hr_sched_exhaustive(&m, d, 3, &o, &p, err), HR_ERANGE);
    int w[3] = {80, 0, 0};
    CHECK_EQ(hr_sched_evaluate(&m, e, 3, NULL, 1, w, NULL, &p, err), HR_EINFEASIBLE);
    /* memory is a cost: 80 layers on one 8 GiB device stream through it */
    CHECK_EQ(hr_sched_evaluate(&m, d, 3, NULL, 1, w, NULL, &p, err), 0);
    CHECK(p.dev[0].overloaded);
    CHECK(p.dev[0].read_bytes > 30 * GIB);
    CHECK_EQ(hr_sched_evaluate(&m, d, 3, NULL, 7, w, NULL, &p, err), HR_EINVAL);
    CHECK_EQ(hr_sched_evaluate(&m, d, 3, NULL, 1, NULL, NULL, &p, err), HR_EINVAL);
    int w4[3] = {2, 1, 1};
    CHECK_EQ(hr_sched_evaluate(&m, d, 3, NULL, 20, w4, NULL, &p, err), 0);
    CHECK_EQ(p.k, 20);
    CHECK_EQ(plan_sum_layers(&p), 80);
    CHECK(isinf(hr_sched_cost(NULL, d, 3, NULL, 1, w, NULL)));
    char *js = NULL;
    CHECK_EQ(hr_sched_plan_json(NULL, &js, err), HR_EINVAL);
}

/* Extreme but valid figures: no crash, a plan or a clean error, and the
 * plan still matches brute force. */
static double wild(void) {
    static const double v[] = {0.0, 1e-9, 1e-3, 1.0, 1e3, 1e6, 1e9, 1e12, 1e15};
    return v[rnd() % (sizeof v / sizeof v[0])] * urand(0.5, 2.0);
}

static void test_wild_values(void) {
    int ok = 0, failed = 0;
    for (int it = 0; it < 300; it++) {
        hr_sched_model m = {.n_layer = irand(1, 12),
                            .layer_bytes = wild(),
                            .hidden_bytes = wild(),
                            .kv_bytes_per_layer = chance(0.5) ? 0.0 : wild(),
                            .output_bytes = chance(0.5) ? 0.0 : wild()};
        hr_sched_device d[3];
        int n = irand(1, 3);
        for (int i = 0; i < n; i++) {
            d[i] = dev("w", wild(), wild(), chance(0.3) ? 0.0 : wild(), wild(), wild());
            d[i].t_head_ms = wild();
            d[i].os = chance(0.5) ? HR_SCHED_OS_MACOS : HR_SCHED_OS_LINUX;
        }
        static hr_sched_plan p, e;
        char err[HR_ERR_LEN] = "";
        int rc = hr_sched_solve(&m, d, n, NULL, &p, err);
        int rc2 = hr_sched_exhaustive(&m, d, n, NULL, &e, NULL);
        CHECK(rc == 0 || rc == HR_EINVAL || rc == HR_EINFEASIBLE);
        CHECK_EQ(rc, rc2);
        if (rc != 0) {
            failed++;
            CHECK(strlen(err) > 0);
            CHECK_EQ(p.k, 0);
            continue;
        }
        ok++;
        CHECK(isfinite(p.latency_ms));
        CHECK_EQ(plan_sum_layers(&p), m.n_layer);
        if (rc2 == 0)
            CHECK_NEAR(p.latency_ms, e.latency_ms, 1e-6 * e.latency_ms);
    }
    printf("wild values: %d plans, %d clean errors\n", ok, failed);
    CHECK(ok >= 30);
}

/* Streaming by expert (hr_sched_stream_split_experts), figures by hand:
 * one window of 100 bytes, 90% of them experts of which a token reads a
 * quarter, 50 bytes of room and one layer of 10: the buffer holds a
 * layer's always-read 1 byte and its routed 2.25; of the 46.75 resident,
 * 10 are the always-read part, 36.75 experts; a token reads a quarter of
 * the 53.25 left out. A dense model (fraction 0) is the dense split. */
static void test_stream_experts(void) {
    hr_sched_stream a, b;
    CHECK_EQ(hr_sched_stream_split_experts(100, 1, 50, 10, 0.9, 0.25, &a), 0);
    CHECK(a.streams);
    CHECK_NEAR(a.buffer, 3.25, 1e-9);
    CHECK_NEAR(a.resident, 46.75, 1e-9);
    CHECK_NEAR(a.read_round, 53.25 * 0.25, 1e-9);
    /* two windows: the always-read 20 do not all fit 15 of room; the 5 left
     * stream whole and every expert is left out: (5 + 180 * 0.25) / 2 */
    CHECK_EQ(hr_sched_stream_split_experts(100, 2, 18.25, 10, 0.9, 0.25, &a), 0);
    CHECK_NEAR(a.resident, 15.0, 1e-9);
    CHECK_NEAR(a.read_round, (5.0 + 180.0 * 0.25) / 2, 1e-9);
    /* fits: nothing streams */
    CHECK_EQ(hr_sched_stream_split_experts(100, 2, 250, 10, 0.9, 0.25, &a), 0);
    CHECK(!a.streams);
    CHECK_NEAR(a.resident, 200.0, 1e-9);
    /* no room for a layer's reads */
    CHECK_EQ(hr_sched_stream_split_experts(100, 1, 2, 10, 0.9, 0.25, &a), HR_ERANGE);
    /* dense */
    CHECK_EQ(hr_sched_stream_split_experts(100, 3, 120, 10, 0.0, 0.25, &a), 0);
    CHECK_EQ(hr_sched_stream_split(100, 3, 120, 10, &b), 0);
    CHECK_NEAR(a.read_round, b.read_round, 0.0);
    CHECK_NEAR(a.resident, b.resident, 0.0);
    CHECK_EQ(hr_sched_stream_split_experts(100, 1, 50, 10, 0.9, 1.5, &a), HR_EINVAL);
    CHECK_EQ(hr_sched_stream_split_experts(100, 1, 50, 10, NAN, 0.25, &a), HR_EINVAL);
    /* a device's measured routing: with half the misses even routing gives
     * it reads 0.125 of the experts it leaves out instead of 0.25, and its
     * buffer holds a layer's always-read 10 MB and 11.25 MB of experts: of
     * 150 MB, 128.75 stay, 40 of them always-read, so it reads 0.125 x
     * (360 - 88.75) MB instead of 0.25 x (360 - 77.5) */
    hr_sched_model m = {.n_layer = 4,
                        .layer_bytes = 100e6,
                        .hidden_bytes = 4096,
                        .expert_frac = 0.9,
                        .expert_read = 0.25};
    hr_sched_device d = {.name = "one",
                         .is_head = true,
                         .os = HR_SCHED_OS_LINUX,
                         .t_layer_ms = 1.0,
                         .mem_bytes = 150e6,
                         .disk_bps = 1e9};
    hr_sched_opts o = hr_sched_opts_default();
    o.k_fixed = 1;
    hr_sched_plan p1, p2;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_sched_solve(&m, &d, 1, &o, &p1, err), 0);
    d.expert_miss = 0.5;
    CHECK_EQ(hr_sched_solve(&m, &d, 1, &o, &p2, err), 0);
    CHECK_NEAR(p1.dev[0].read_bytes, 0.25 * (360e6 - 77.5e6), 1.0);
    CHECK_NEAR(p2.dev[0].read_bytes, 0.125 * (360e6 - 88.75e6), 1.0);
    /* reading by expert reads less than streaming the windows whole */
    CHECK_EQ(hr_sched_stream_split_experts(100, 1, 50, 10, 0.9, 0.25, &a), 0);
    CHECK_EQ(hr_sched_stream_split(100, 1, 50, 10, &b), 0);
    CHECK(a.read_round < b.read_round);
}

/* Rounds with their own windows: the cost model per round by hand, the
 * streaming split over windows of different sizes, and plans for k that
 * do not divide L. */
static void test_uneven_rounds(void) {
    /* compute and hops: a (10 ms/layer, 2 ms hop, head 5 ms), b (20, 12) */
    hr_sched_model m = {.n_layer = 5, .layer_bytes = 1e9, .hidden_bytes = 1e4};
    hr_sched_device d[2] = {dev("a", 10, 100e9, 0, 2, 1e7), dev("b", 20, 100e9, 0, 4, 1e6)};
    d[0].t_head_ms = 5;
    int w1[4] = {2, 1, 1, 1}; /* round 0: a 2, b 1; round 1: a 1, b 1 */
    CHECK_NEAR(hr_sched_cost_rounds(&m, d, 2, NULL, 2, w1, NULL), 54.0 + 44.0 + 5.0, 1e-9);
    int w2[4] = {3, 0, 1, 1}; /* b has nothing in round 0 but forwards: its hop counts */
    CHECK_NEAR(hr_sched_cost_rounds(&m, d, 2, NULL, 2, w2, NULL), 44.0 + 44.0 + 5.0, 1e-9);
    int w3[4] = {3, 0, 2, 0}; /* b out of the ring: no hops */
    CHECK_NEAR(hr_sched_cost_rounds(&m, d, 2, NULL, 2, w3, NULL), 55.0, 1e-9);
    int six[4] = {3, 0, 2, 1}, neg[4] = {4, -1, 1, 1};
    CHECK(isinf(hr_sched_cost_rounds(&m, d, 2, NULL, 2, six, NULL)));
    CHECK(isinf(hr_sched_cost_rounds(&m, d, 2, NULL, 2, neg, NULL)));
    CHECK(isinf(hr_sched_cost_rounds(&m, d, 2, NULL, 0, w1, NULL)));
    static hr_sched_plan p, q;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_sched_evaluate_rounds(&m, d, 2, NULL, 2, w2, NULL, &p, err), 0);
    CHECK(!p.uniform);
    CHECK_EQ(p.dev[1].win[0], 0);
    CHECK_EQ(p.dev[1].first[1], 4);
    check_cover(&p);
    CHECK_NEAR(p.compute_ms + p.link_ms + p.disk_exposed_ms + p.head_ms, p.latency_ms, 1e-9);
    /* a uniform table costs what the uniform call does */
    hr_sched_model m4 = m;
    m4.n_layer = 4;
    int wu[2] = {1, 1}, tu[4] = {1, 1, 1, 1};
    CHECK_NEAR(hr_sched_cost_rounds(&m4, d, 2, NULL, 2, tu, NULL),
               hr_sched_cost(&m4, d, 2, NULL, 2, wu, NULL), 1e-12);

    /* streaming over windows of 3 and 2 layers (1 GB each, 1 GB/s, 100 ms/layer) */
    hr_sched_device s = dev("s", 100, 2.5e9, 1e9, 0, 0);
    int ws[2] = {3, 2};
    /* room 2.5 GB < the 3 GB window: it keeps a 0.5 GB head, the buffer
     * takes the 2 GB window; round 0 reads 2.5 GB (2500 ms, 500 past the
     * buffer), round 1 2 GB */
    CHECK_EQ(hr_sched_evaluate_rounds(&m, &s, 1, NULL, 2, ws, NULL, &p, err), 0);
    CHECK_NEAR(p.latency_ms, 2500.0 + 2000.0, 1e-6);
    CHECK_NEAR(p.dev[0].read_bytes, 4.5e9, 1.0);
    CHECK_NEAR(p.dev[0].mem_bytes, 2.5e9, 1.0);
    /* at the edge the two rules meet: room = the largest window */
    hr_sched_stream e1, e2;
    double edge[2] = {3e9, 2e9}, r1[2], r2[2];
    CHECK_EQ(hr_sched_stream_split_rounds(edge, 2, 3e9 * (1 - 1e-9), 1e9, 0, 1, &e1, r1), 0);
    CHECK_EQ(hr_sched_stream_split_rounds(edge, 2, 3e9 * (1 + 1e-9), 1e9, 0, 1, &e2, r2), 0);
    CHECK_NEAR(e1.resident, e2.resident, 10.0);
    CHECK_NEAR(e1.buffer, e2.buffer, 10.0);
    CHECK_NEAR(r1[0] + r1[1], r2[0] + r2[1], 10.0);
    s.mem_bytes = 4e9; /* room 4 GB: each window streams 1 GB through a 1 GB buffer */
    CHECK_EQ(hr_sched_evaluate_rounds(&m, &s, 1, NULL, 2, ws, NULL, &p, err), 0);
    CHECK_NEAR(p.latency_ms, 1000.0 + 1000.0, 1e-6);
    CHECK_NEAR(p.dev[0].read_bytes, 2e9, 1.0);
    CHECK_NEAR(p.dev[0].mem_bytes, 4e9, 1.0);
    CHECK(p.dev[0].overloaded);
    hr_sched_stream st, eq;
    double read[3], wb[3] = {3e9, 2e9, 0};
    CHECK_EQ(hr_sched_stream_split_rounds(wb, 3, 4e9, 1e9, 0, 1, &st, read), 0);
    CHECK_NEAR(st.buffer, 1e9, 1.0);
    CHECK_NEAR(st.resident, 3e9, 1.0);
    CHECK(read[0] == 1e9 && read[1] == 1e9 && read[2] == 0.0);
    double we[2] = {2e9, 2e9};
    CHECK_EQ(hr_sched_stream_split_rounds(we, 2, 3e9, 1e9, 0, 1, &st, read), 0);
    CHECK_EQ(hr_sched_stream_split(2e9, 2, 3e9, 1e9, &eq), 0);
    CHECK(st.buffer == eq.buffer && st.resident == eq.resident && st.read_round == eq.read_round);
    CHECK_EQ(hr_sched_stream_split_rounds(wb, 0, 4e9, 1e9, 0, 1, &st, read), HR_EINVAL);

    /* memory short, 22 layers: k = 3 does not divide them */
    hr_sched_model big = {.n_layer = 22,
                          .layer_bytes = 0.5 * GIB,
                          .hidden_bytes = 8192,
                          .kv_bytes_per_layer = 0.01 * GIB,
                          .output_bytes = 0.3 * GIB};
    hr_sched_device r[3] = {dev("head", 8, 4.0 * GIB, 2e9, 1, 1.25e8),
                            dev("mid", 12, 2.0 * GIB, 1e9, 1, 1.25e8),
                            dev("small", 20, 1.2 * GIB, 5e8, 1, 1.25e8)};
    r[0].t_head_ms = 10;
    hr_sched_opts o = hr_sched_opts_default();
    o.k_fixed = 3;
    CHECK_EQ(hr_sched_solve(&big, r, 3, &o, &p, err), 0);
    CHECK_EQ(p.k, 3);
    CHECK(!p.uniform);
    check_cover(&p);
    int t[3 * 3];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 3; i++)
            t[k * 3 + i] = p.dev[i].win[k];
    double direct = hr_sched_cost_rounds(&big, r, 3, NULL, 3, t, NULL);
    CHECK_NEAR(p.latency_ms, direct, 1e-9 * direct);
    CHECK_EQ(hr_sched_evaluate_rounds(&big, r, 3, NULL, 3, t, NULL, &q, err), 0);
    CHECK_NEAR(q.latency_ms, p.latency_ms, 1e-9 * direct);
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(q.dev[i].read_bytes, p.dev[i].read_bytes, 1.0);
        CHECK_NEAR(q.dev[i].compute_ms, p.dev[i].compute_ms, 1e-9);
    }
    /* the windows differ by at most a layer or two from an even share */
    hr_sched_plan_print(&p, stdout);
    /* unrestricted: every k is a candidate, the plan is the best of them */
    CHECK_EQ(hr_sched_solve(&big, r, 3, NULL, &q, err), 0);
    check_cover(&q);
    CHECK(q.latency_ms <= p.latency_ms * (1 + 1e-12));
    bool seen3 = false;
    for (int j = 0; j < q.n_k; j++)
        seen3 = seen3 || (q.k_list[j] == 3 && isfinite(q.k_latency_ms[j]));
    CHECK(seen3);
    char *js = NULL;
    CHECK_EQ(hr_sched_plan_json(&p, &js, err), 0);
    CHECK(js && strstr(js, "\"uniform\": false") != NULL);
    free(js);
}

int main(void) {
    double t0 = now_s();
    test_stream_experts();
    test_hand_costs();
    test_link_costs();
    test_round_costs();
    test_quota_costs();
    test_uneven_rounds();
    test_properties();
    test_threads();
    test_output();
    test_bad_inputs();
    test_prima_home_cluster();
    test_gpu_optimality();
    test_wild_values();
    test_random_optimality();
    test_noise_margin();
    printf("test_scheduler: %.1f s\n", now_s() - t0);
    return hr_check_finish("test_scheduler");
}
