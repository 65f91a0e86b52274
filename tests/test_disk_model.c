/* test_disk_model.c - the scheduler's disk model against the runtime's
 * streaming, on a generated 12-layer model:
 *  - for windows of a device in a 2-device ring at several k, w and
 *    memory budgets, the bytes per round the cost model says the device
 *    reads (hr_sched_evaluate: read_bytes / k) equal the bytes the runtime
 *    streams per round: the file ranges of its windows
 *    (hr_stream_window_range) split by hr_stream_split under the room
 *    hr_prof_stream_room gives for the same budget, summed. The two share
 *    no arithmetic: one works from the mean layer size, the other from the
 *    tensor table's byte offsets; they agree up to page trimming;
 *  - every plan the cost model calls all-resident keeps every window whole
 *    at run time, and every (k, w, budget) the cost model refuses (a
 *    window does not fit beside the KV) is one the split cannot do;
 *  - hr_stream_split against a brute-force search of the tail length on
 *    random windows: minimal, inside the windows, whole pages, within the
 *    room. */
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

/* Streamed bytes per round of device 1's windows at run time, or -1 when
 * the split cannot be made (HR_ERANGE). */
static double runtime_stream_round(const hr_gguf *g, const hr_sched_model *sm, int k, int w,
                                   double budget, double *window_bytes) {
    int W = N_LAYER / k, off = W - w;
    hr_stream_part part[N_LAYER];
    memset(part, 0, sizeof part);
    *window_bytes = 0;
    for (int r = 0; r < k; r++) {
        int b = r * W + off;
        CHECK_EQ(hr_stream_window_range(g, b, b + w, &part[r].off, &part[r].len), 0);
        *window_bytes += (double)part[r].len / k;
    }
    double room = hr_prof_stream_room(sm, k, w, false, budget);
    int rc = hr_stream_split(part, k, room);
    if (rc == HR_ERANGE)
        return -1;
    CHECK_EQ(rc, 0);
    double total = 0;
    for (int r = 0; r < k; r++) {
        CHECK(part[r].stream_len == 0 || part[r].stream_off % pg == 0);
        CHECK(part[r].stream_len % pg == 0);
        total += (double)part[r].stream_len;
    }
    return total / k;
}

static void test_model_vs_runtime(const char *path) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (hr_gguf_open(&g, path, err) || hr_model_load(&m, g, err) ||
        hr_prof_model_build(&pm, m, g, err) || hr_prof_to_sched_model(&pm, N_CTX, &sm, err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        CHECK(0);
        return;
    }
    CHECK(sm.layer_bytes > 64 * (double)pg); /* layers of many pages: trimming is small */
    int n_stream = 0, n_fit = 0, n_refused = 0;
    const int ks[] = {1, 2, 3, 4, 6};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        int k = ks[ki], W = N_LAYER / k;
        for (int w = 1; w <= W; w++) {
            double kv = (double)k * w * sm.kv_bytes_per_layer, all = k * w * sm.layer_bytes;
            /* budgets from below one window to above all of them */
            const double frac[] = {0.5, 0.95, 1.05, 1.3, 1.7, 2.5, 0.98 * k, 1.02 * k, 2.0 * k};
            for (size_t fi = 0; fi < sizeof frac / sizeof frac[0]; fi++) {
                double budget = kv + frac[fi] * w * sm.layer_bytes;
                hr_sched_device d[2];
                devices(d, budget);
                int wv[2] = {W - w, w};
                hr_sched_plan plan;
                int rc = hr_sched_evaluate(&sm, d, 2, NULL, k, wv, NULL, &plan, err);
                double win, rt = runtime_stream_round(g, &sm, k, w, budget, &win);
                /* a few pages per window of layout (page-rounded starts, padding) */
                double tol = 3.0 * (double)pg + 1e-3 * win;
                if (rc != 0) {
                    /* the model refuses only what cannot be split: clearly short of a window */
                    CHECK_EQ(rc, HR_EINFEASIBLE);
                    if (frac[fi] < 0.99)
                        CHECK(rt < 0);
                    n_refused++;
                    continue;
                }
                double pred = plan.dev[1].read_bytes / k; /* bytes per round */
                if (!plan.dev[1].overloaded) {
                    CHECK(all + kv <= budget * (1 + 1e-9));
                    CHECK_EQ(rt, 0.0);
                    n_fit++;
                    continue;
                }
                if (rt < 0 || fabs(pred - rt) > tol)
                    fprintf(stderr, "k %d w %d budget %.0f: predicted %.0f, runtime %.0f B/round\n",
                            k, w, budget, pred, rt);
                CHECK_NEAR(pred, rt, tol);
                /* the disk time the model charges is that many bytes at disk_bps */
                CHECK_NEAR(plan.dev[1].disk_load_ms / k, rt / d[1].disk_bps * 1e3,
                           tol / d[1].disk_bps * 1e3);
                n_stream++;
            }
        }
    }
    printf("disk model vs runtime: %d streaming, %d all-resident, %d refused cases\n", n_stream,
           n_fit, n_refused);
    CHECK(n_stream >= 20);
    CHECK(n_fit >= 10);
    CHECK(n_refused >= 5);
    hr_prof_model_clear(&pm);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* ---- hr_stream_split against brute force ---- */

static double need_at(const uint64_t *len, int n, uint64_t s) {
    double keep = 0, buf = 0;
    for (int i = 0; i < n; i++) {
        uint64_t t = len[i] < s ? len[i] : s;
        keep += (double)(len[i] - t);
        buf = (double)t > buf ? (double)t : buf;
    }
    return keep + buf;
}

static void test_split_brute(void) {
    srand(7);
    int n_split = 0;
    for (int it = 0; it < 300; it++) {
        int n = 1 + rand() % 5;
        hr_stream_part p[8];
        uint64_t len[8], off = pg * (uint64_t)(rand() % 4), total = 0, max = 0;
        for (int i = 0; i < n; i++) {
            len[i] = pg + (uint64_t)(rand() % (int)(12 * pg));
            p[i] = (hr_stream_part){.off = off, .len = len[i]};
            off = (off + len[i] + pg * (uint64_t)(rand() % 3));
            off -= off % pg; /* next window's range starts on a page */
            total += len[i];
            max = len[i] > max ? len[i] : max;
        }
        double room = (double)(rand() % (int)(total + 2 * pg));
        int rc = hr_stream_split(p, n, room);
        /* brute force: the smallest tail length within the room */
        uint64_t best = UINT64_MAX;
        for (uint64_t s = 0; s <= max; s++)
            if (need_at(len, n, s) <= room) {
                best = s;
                break;
            }
        if ((double)total <= room) {
            CHECK_EQ(rc, 0);
            for (int i = 0; i < n; i++)
                CHECK_INT(p[i].stream_len, ==, 0);
            continue;
        }
        if (n < 2 || best == UINT64_MAX) {
            CHECK_EQ(rc, HR_ERANGE);
            for (int i = 0; i < n; i++) /* whole pages of the whole window */
                CHECK_INT(p[i].stream_off, ==, p[i].off);
            continue;
        }
        CHECK_EQ(rc, 0);
        double keep = 0, buf = 0;
        for (int i = 0; i < n; i++) {
            uint64_t want = len[i] < best ? len[i] : best;
            CHECK_INT(p[i].stream_len, <=, want);
            CHECK_INT(p[i].stream_len + 2 * pg, >=, want);
            if (p[i].stream_len) {
                CHECK_INT(p[i].stream_off % pg, ==, 0);
                CHECK_INT(p[i].stream_off, >=, p[i].off);
                CHECK_INT(p[i].stream_off + p[i].stream_len, <=, p[i].off + p[i].len);
                CHECK_INT(p[i].keep_len, ==, p[i].stream_off - p[i].off);
            }
            keep += (double)(p[i].len - p[i].stream_len);
            buf = (double)p[i].stream_len > buf ? (double)p[i].stream_len : buf;
        }
        CHECK(keep + buf <= room + 2.0 * pg * n);
        n_split++;
    }
    CHECK(n_split >= 50);
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
    if (rc == 0)
        test_model_vs_runtime(path);
    unlink(path);
    rmdir(dir);
    return hr_check_finish("test_disk_model");
}
