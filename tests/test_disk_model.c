/* test_disk_model.c - the scheduler's disk model against the runtime's
 * streaming, on a generated 12-layer model:
 *  - for a device's windows at many k, w and memory budgets (all resident,
 *    the classic split whose tail is read whole, a room short of a whole
 *    tail so the tail slides through the buffer, k = 1 streaming, less room
 *    than one layer), the bytes per round the scheduler's arithmetic says
 *    the device reads (hr_sched_stream_split on the scheduler's inputs: w x
 *    the mean layer, hr_prof_stream_read) equal the bytes the runtime
 *    streams per round: the file ranges of its windows
 *    (hr_stream_window_range) split by hr_prof_stream_parts under the room
 *    hr_prof_stream_room gives for the same budget. One side works from the
 *    mean layer size, the other from the tensor table's byte offsets; they
 *    agree up to page trimming. The cost model (hr_sched_evaluate) reads
 *    the same bytes and accepts every case the runtime streams with a
 *    buffer of at least one layer;
 *  - hr_stream_split_resident against a brute-force search of the tail
 *    length on random windows: minimal, inside the windows, whole pages,
 *    heads within the budget;
 *  - hr_ctx_memory_predict against what hr_ctx_create allocates. */
#include "tests/check.h"

#include "common/log.h"
#include "mmap/gguf.h"
#include "mmap/stream.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "sched/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_LAYER 12
#define N_CTX 256

static uint64_t pg;

static void test_ctx_memory(const hr_model *m);

/* Two devices: the head (room for everything) and device 1 with budget
 * bytes for weights + KV, a 100 MB/s disk. */
static void devices(hr_sched_device *d, double budget) {
    for (int i = 0; i < 2; i++) {
        d[i] = hr_sched_device_default();
        snprintf(d[i].name, sizeof d[i].name, "dev%d", i);
        d[i].t_layer_ms = 1.0;
        d[i].mem_bytes = i == 0 ? 1e12 : budget;
        d[i].disk_bps = 100e6;
        d[i].rtt_ms = 0.5;
        d[i].link_bps = 125e6;
    }
    d[0].is_head = true;
}

/* Streamed bytes per round of device 1's k windows of w layers at run
 * time (hr_prof_stream_parts under the room of budget); *sc the scheme it
 * followed, *window_bytes the windows' mean length, *rc its return. */
static double runtime_stream_round(const hr_gguf *g, const hr_sched_model *sm, int k, int w,
                                   double budget, hr_sched_stream *sc, double *window_bytes,
                                   int *rc) {
    int W = N_LAYER / k, off = W - w;
    hr_stream_part part[N_LAYER];
    memset(part, 0, sizeof part);
    *window_bytes = 0;
    for (int r = 0; r < k; r++) {
        int b = r * W + off;
        CHECK_EQ(hr_stream_window_range(g, b, b + w, &part[r].off, &part[r].len), 0);
        *window_bytes += (double)part[r].len / k;
    }
    double room = hr_prof_stream_room(sm, k * w, false, budget);
    *rc = hr_prof_stream_parts(part, k, room, sm->layer_bytes, sc);
    double total = 0, kept = 0;
    for (int r = 0; r < k; r++) {
        CHECK(part[r].stream_len == 0 || part[r].stream_off % pg == 0);
        CHECK(part[r].stream_len % pg == 0);
        total += (double)part[r].stream_len;
        kept += (double)part[r].keep_len;
    }
    if (sc->streams)
        CHECK(kept <= sc->resident + 1e-6); /* the heads stay within the scheme's budget */
    return total / k;
}

/* Opens and loads path with its profile and scheduler figures at N_CTX:
 * 0, or -1 (a failed check, the reason printed). */
static int open_model(const char *path, hr_gguf **g, hr_model **m, hr_prof_model *pm,
                      hr_sched_model *sm) {
    char err[HR_ERR_LEN];
    if (hr_gguf_open(g, path, err) || hr_model_load(m, *g, err) ||
        hr_prof_model_build(pm, *m, *g, err) || hr_prof_to_sched_model(pm, N_CTX, sm, err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        CHECK(0);
        return -1;
    }
    return 0;
}

static void test_model_vs_runtime(const char *path) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (open_model(path, &g, &m, &pm, &sm) != 0)
        return;
    CHECK(sm.layer_bytes > 64 * (double)pg); /* layers of many pages: trimming is small */
    int n_fit = 0, n_whole = 0, n_slide = 0, n_k1 = 0, n_short = 0, n_cost = 0;
    const int ks[] = {1, 2, 3, 4, 6};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        int k = ks[ki], W = N_LAYER / k;
        for (int w = 1; w <= W; w++) {
            double kv = (double)k * w * sm.kv_bytes_per_layer, all = k * w * sm.layer_bytes;
            /* room from below one layer to above all windows */
            const double frac[] = {0.3 / w, 0.5, 0.95,     1.05,     1.3,
                                   1.7,     2.5, 0.98 * k, 1.02 * k, 2.0 * k};
            for (size_t fi = 0; fi < sizeof frac / sizeof frac[0]; fi++) {
                double budget = kv + frac[fi] * w * sm.layer_bytes;
                int wins[6] = {w, w, w, w, w, w};
                double win, pred = hr_prof_stream_read(&sm, wins, k, false, budget) / k;
                hr_sched_stream sc;
                int rc;
                double rt = runtime_stream_round(g, &sm, k, w, budget, &sc, &win, &rc);
                /* a few pages per window of layout (page-rounded starts, padding) */
                double tol = 3.0 * (double)pg + 2e-3 * win;
                if (!sc.streams) {
                    CHECK(all <= budget - kv + 1.0 || win * k <= budget - kv);
                    CHECK_EQ(rt, 0.0);
                    CHECK_EQ(pred, 0.0);
                    n_fit++;
                    continue;
                }
                if (fabs(pred - rt) > tol)
                    fprintf(stderr, "k %d w %d room %.0f: scheme %.0f, runtime %.0f B/round\n", k,
                            w, budget - kv, pred, rt);
                CHECK_NEAR(pred, rt, tol);
                if (rc == HR_ERANGE) { /* less than a layer of room: whole windows */
                    CHECK(budget - kv < sm.layer_bytes);
                    CHECK_NEAR(rt, win, tol);
                    n_short++;
                    continue;
                }
                CHECK_EQ(rc, 0);
                double tail = win - sc.resident / k; /* mean streamed part of a window */
                if (k == 1)
                    n_k1++;
                else if (tail > sc.buffer + tol)
                    n_slide++;
                else
                    n_whole++;
                /* the cost model reads the same bytes per round */
                hr_sched_device d[2];
                devices(d, budget);
                int wv[2] = {W - w, w};
                hr_sched_plan plan;
                int erc = hr_sched_evaluate(&sm, d, 2, NULL, k, wv, NULL, &plan, err);
                if (erc != 0)
                    fprintf(stderr, "k %d w %d room %.0f: cost model: %s\n", k, w, budget - kv,
                            err);
                CHECK_EQ(erc, 0); /* it refuses nothing the runtime streams with a buffer */
                if (erc != 0)
                    continue;
                CHECK(plan.dev[1].overloaded);
                CHECK_NEAR(plan.dev[1].read_bytes / k, rt, tol);
                CHECK_NEAR(plan.dev[1].disk_load_ms / k, rt / d[1].disk_bps * 1e3,
                           tol / d[1].disk_bps * 1e3);
                n_cost++;
            }
        }
    }
    printf("scheme vs runtime: %d all-resident, %d whole tails, %d sliding, %d k=1 streaming, %d "
           "short of a layer; cost model agreed in %d\n",
           n_fit, n_whole, n_slide, n_k1, n_short, n_cost);
    CHECK(n_fit >= 10);
    CHECK(n_whole >= 10);
    CHECK(n_slide >= 10);
    CHECK(n_k1 >= 5);
    CHECK(n_short >= 5);
    CHECK_EQ(n_cost, n_whole + n_slide + n_k1);
    test_ctx_memory(m);
    hr_prof_model_clear(&pm);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* Rounds with their own windows: device 1 (after the head in the ring)
 * computes win1[r] layers in round r of k, the head the rest of each
 * round (rounds of sizes R[r]). The scheme's bytes per token
 * (hr_prof_stream_read), the runtime split of the windows' real ranges
 * (hr_prof_stream_parts) and the cost model (hr_sched_evaluate_rounds)
 * agree for every room. */
static void test_rounds_vs_runtime(const char *path) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (open_model(path, &g, &m, &pm, &sm) != 0)
        return;
    static const struct {
        int k, R[5], win1[5];
    } cases[] = {
        {3, {4, 4, 4}, {3, 1, 2}},             /* k divides L, windows differ */
        {5, {3, 3, 2, 2, 2}, {2, 0, 1, 2, 1}}, /* k does not, a round without */
        {2, {7, 5}, {5, 1}},
    };
    int n_checked = 0, n_stream = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int k = cases[c].k, layers = 0, table[2 * 5], at = 0;
        hr_stream_part part[5];
        memset(part, 0, sizeof part);
        double all = 0;
        for (int r = 0; r < k; r++) {
            int w1 = cases[c].win1[r], w0 = cases[c].R[r] - w1;
            table[r * 2] = w0;
            table[r * 2 + 1] = w1;
            layers += w1;
            if (w1 > 0)
                CHECK_EQ(
                    hr_stream_window_range(g, at + w0, at + w0 + w1, &part[r].off, &part[r].len),
                    0);
            all += (double)part[r].len;
            at += cases[c].R[r];
        }
        CHECK_EQ(at, N_LAYER);
        double kv = layers * sm.kv_bytes_per_layer;
        /* rooms in layers, off the window sizes: the model's mean layer and
         * the windows' real bytes differ by pages, which must not decide
         * whether a window fits */
        const double frac[] = {0.3, 0.65, 0.95, 1.25, 1.55, 2.05, 2.55, 3.05, 4.05, 6.05, 9.05};
        for (size_t fi = 0; fi < sizeof frac / sizeof frac[0]; fi++) {
            double budget = kv + frac[fi] * sm.layer_bytes;
            double pred = hr_prof_stream_read(&sm, cases[c].win1, k, false, budget);
            hr_stream_part p2[5];
            memcpy(p2, part, sizeof p2);
            hr_sched_stream sc;
            double room = hr_prof_stream_room(&sm, layers, false, budget);
            int rc = hr_prof_stream_parts(p2, k, room, sm.layer_bytes, &sc);
            double rt = 0;
            for (int r = 0; r < k; r++)
                rt += (double)p2[r].stream_len;
            double tol = 3.0 * k * (double)pg + 2e-3 * all;
            if (fabs(pred - rt) > tol)
                fprintf(stderr, "rounds case %zu room %.0f: scheme %.0f, runtime %.0f B/token\n", c,
                        room, pred, rt);
            CHECK_NEAR(pred, rt, tol);
            n_stream += sc.streams;
            if (rc == HR_ERANGE || !sc.streams)
                continue;
            hr_sched_device d[2];
            devices(d, budget);
            hr_sched_plan plan;
            int erc = hr_sched_evaluate_rounds(&sm, d, 2, NULL, k, table, NULL, &plan, err);
            if (erc != 0)
                fprintf(stderr, "rounds case %zu room %.0f: cost model: %s\n", c, room, err);
            CHECK_EQ(erc, 0);
            if (erc != 0)
                continue;
            CHECK(plan.dev[1].overloaded);
            CHECK_NEAR(plan.dev[1].read_bytes, rt, tol);
            n_checked++;
        }
    }
    printf("rounds of their own: %d rooms streamed, cost model agreed in %d\n", n_stream,
           n_checked);
    CHECK(n_checked >= 10);
    hr_prof_model_clear(&pm);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* ---- hr_stream_split_resident against brute force ---- */

static double kept_at(const uint64_t *len, int n, uint64_t s) {
    double keep = 0;
    for (int i = 0; i < n; i++)
        keep += (double)(len[i] - (len[i] < s ? len[i] : s));
    return keep;
}

static void test_split_brute(void) {
    srand(7);
    int n_split = 0;
    for (int it = 0; it < 300; it++) {
        int n = 1 + rand() % 5;
        hr_stream_part p[8];
        memset(p, 0, sizeof p);
        uint64_t len[8], off = pg * (uint64_t)(rand() % 4), total = 0, max = 0;
        for (int i = 0; i < n; i++) {
            len[i] = pg + (uint64_t)(rand() % (int)(12 * pg));
            p[i].off = off;
            p[i].len = len[i];
            off = (off + len[i] + pg * (uint64_t)(rand() % 3));
            off -= off % pg; /* next window's range starts on a page */
            total += len[i];
            max = len[i] > max ? len[i] : max;
        }
        double resident = (double)(rand() % (int)(total + 2 * pg)) - (double)pg;
        CHECK_EQ(hr_stream_split_resident(p, n, resident), 0);
        uint64_t best = 0; /* brute force: the smallest tail length within the budget */
        while (best < max && kept_at(len, n, best) > resident)
            best++;
        CHECK_INT(best, <=, max);
        double keep = 0;
        for (int i = 0; i < n; i++) {
            uint64_t want = len[i] < best ? len[i] : best;
            CHECK_INT(p[i].stream_len, <=, want + pg);
            CHECK_INT(p[i].stream_len + 2 * pg, >=, want);
            if (p[i].stream_len) {
                CHECK_INT(p[i].stream_off % pg, ==, 0);
                CHECK_INT(p[i].stream_off, >=, p[i].off);
                CHECK_INT(p[i].stream_off + p[i].stream_len, <=, p[i].off + p[i].len);
                CHECK_INT(p[i].keep_len, ==, p[i].stream_off - p[i].off);
            } else if (want == 0) {
                CHECK_INT(p[i].keep_len, ==, p[i].len);
            }
            keep += (double)p[i].keep_len;
        }
        if ((double)total <= resident)
            CHECK_EQ(keep, (double)total);
        else
            CHECK(keep <= (resident > 0 ? resident : 0));
        n_split += best > 0 && (double)total > resident;
    }
    CHECK(n_split >= 100);
    CHECK_EQ(hr_stream_split_resident(NULL, 1, 0), HR_EINVAL);
}

/* ---- hr_ctx_memory_predict against hr_ctx_create ---- */

static void test_ctx_memory(const hr_model *m) {
    const hr_hparams *hp = hr_model_hparams(m);
    const int cases[][5] = {/* begin, end, n_batch, n_ctx, n_threads */
                            {0, 0, 64, 256, 2},  {3, 7, 64, 256, 1},  {0, 1, 1, 128, 4},
                            {5, 5, 32, 256, 2},  {2, 9, 7, 100, 3},   {0, 12, 512, 256, 1},
                            {11, 12, 16, 64, 2}, {12, 12, 64, 256, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hr_ctx_params p = hr_ctx_params_default();
        p.layer_begin = cases[i][0];
        p.layer_end = cases[i][1] == 0 && cases[i][0] == 0 ? 0 : cases[i][1];
        if (p.layer_begin == hp->n_layer)
            p.layer_end = hp->n_layer;
        p.n_batch = cases[i][2];
        p.n_ctx = cases[i][3];
        p.n_threads = cases[i][4];
        size_t kv = 0, work = 0;
        CHECK_EQ(hr_ctx_memory_predict(m, &p, &kv, &work), 0);
        hr_ctx *c = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_ctx_create(&c, m, &p, err), 0);
        if (c)
            CHECK_INT(hr_ctx_memory(c), ==, kv + work);
        hr_ctx_destroy(c);
    }
    /* a window context on another's work buffers: it allocates only its KV
     * (and its sequence tables) and computes the same values */
    hr_ctx_params p = hr_ctx_params_default();
    p.n_ctx = 64;
    p.n_batch = 8;
    p.layer_begin = 0;
    p.layer_end = 6;
    hr_ctx *own0 = NULL, *own1 = NULL, *sh1 = NULL;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_ctx_create(&own0, m, &p, err), 0);
    p.layer_begin = 6;
    p.layer_end = 12;
    CHECK_EQ(hr_ctx_create(&own1, m, &p, err), 0);
    p.share = own0;
    CHECK_EQ(hr_ctx_create(&sh1, m, &p, err), 0);
    size_t kv = 0, work = 0;
    CHECK_EQ(hr_ctx_memory_predict(m, &p, &kv, &work), 0);
    if (own0 && own1 && sh1) {
        CHECK_INT(hr_ctx_memory(sh1), <, kv + 4096);
        CHECK_INT(hr_ctx_memory(own1), ==, kv + work);
        int E = hp->n_embd;
        float *a = calloc((size_t)4 * E, sizeof *a), *b = calloc((size_t)4 * E, sizeof *b);
        for (int i = 0; i < 4 * E; i++)
            a[i] = b[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        CHECK_EQ(hr_ctx_layers(own0, a, 4, 0, err), 0); /* the owner runs between */
        CHECK_EQ(hr_ctx_layers(own1, a, 4, 0, err), 0);
        CHECK_EQ(hr_ctx_layers(own0, b, 4, 0, err), 0);
        CHECK_EQ(hr_ctx_layers(sh1, b, 4, 0, err), 0);
        CHECK(memcmp(a, b, (size_t)4 * E * sizeof *a) == 0);
        free(a);
        free(b);
    }
    hr_ctx_destroy(sh1);
    hr_ctx_destroy(own1);
    hr_ctx_destroy(own0);
    /* the reserve covers one context's work buffers and the plan's */
    p = hr_ctx_params_default();
    p.n_ctx = N_CTX;
    p.n_batch = 64;
    p.n_threads = 2;
    CHECK_EQ(hr_ctx_memory_predict(m, &p, NULL, &work), 0);
    double rs = hr_prof_mem_reserve(m, N_CTX, 64, 2, false);
    CHECK(rs >= (double)work + HR_PROF_RESERVE_SLACK);
    CHECK(rs <= (double)work + HR_PROF_RESERVE_SLACK + 2.0 * 64 * hp->n_embd * 4 + 64);
    CHECK(hr_prof_mem_reserve(m, N_CTX, 64, 2, true) > rs);

    hr_ctx_params bad = hr_ctx_params_default();
    bad.layer_begin = 5;
    bad.layer_end = 40;
    CHECK_EQ(hr_ctx_memory_predict(m, &bad, NULL, NULL), HR_EINVAL);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_WARN);
    pg = (uint64_t)sysconf(_SC_PAGESIZE);
    test_split_brute();
    char dir[] = "/tmp/hr_disk_XXXXXX", path[256], err[HR_ERR_LEN];
    if (!mkdtemp(dir)) {
        CHECK(0);
        return hr_check_finish("test_disk_model");
    }
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "small"), 0);
    mp.n_layer = N_LAYER;
    mp.ftype = "f16";
    mp.n_vocab = 512;
    int rc = hr_mkmodel_write(&mp, path, NULL, NULL, err);
    if (rc)
        fprintf(stderr, "mkmodel: %s\n", err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        test_model_vs_runtime(path);
        test_rounds_vs_runtime(path);
    }
    unlink(path);
    rmdir(dir);
    return hr_check_finish("test_disk_model");
}
