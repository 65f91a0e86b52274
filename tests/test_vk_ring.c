/* test_vk_ring.c - a 2-agent ring on loopback where one device runs its
 * window's first layers on a Vulkan device (HR_GPU=any from ctest: lavapipe
 * where there is no GPU): greedy ids equal the single-process CPU run and
 * teacher-forced logits are bit-identical in exact mode and within the
 * float bound (1e-4) in the default mode (the GPU's fast path), with the
 * GPU on the worker and on the head; and the PLAN message carries n_gpu. Equal
 * outputs alone would also pass if the agent silently ran its layers on the
 * CPU, so the GPU layers actually run are counted (below) and checked
 * against what the ring computed. Exits 77 (SKIPPED) without a Vulkan
 * device. */
#include "agent/agent.h"
#include "gpu/vk.h"
#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/gpu-impl.h"
#include "model/model.h"
#include "ring/msg.h"

#include "harness.h"

#include <stdatomic.h>

/* ---- GPU layers run ----
 * tests/CMakeLists.txt links this test with --wrap for the model's calls
 * into its GPU windows (model/gpu-impl.h: model.c creates, runs and
 * destroys them, gpu.c holds them), so every window a context puts on the
 * GPU (its layer count) and every run of one (its rows) is counted here.
 * The agents run in this process; only the one given a GPU has any. */
int __real_hr_gpu_win_create(hr_gpu_win **out, hr_vk *vk, const hr_hparams *hp,
                             const hr_layer_weights *layers, int il0, int n,
                             const float *rope_freqs, int n_ctx, int n_batch, int n_seq,
                             char err[HR_ERR_LEN]);
void __real_hr_gpu_win_destroy(hr_gpu_win *g);
int __real_hr_gpu_win_run(hr_gpu_win *g, float *hidden, int n, int pos, char err[HR_ERR_LEN]);
int __real_hr_gpu_win_run_runs(hr_gpu_win *g, float *hidden, int n, const int *seq, const int *pos,
                               const int *run_len, int n_runs, char err[HR_ERR_LEN]);
int __wrap_hr_gpu_win_create(hr_gpu_win **out, hr_vk *vk, const hr_hparams *hp,
                             const hr_layer_weights *layers, int il0, int n,
                             const float *rope_freqs, int n_ctx, int n_batch, int n_seq,
                             char err[HR_ERR_LEN]);
void __wrap_hr_gpu_win_destroy(hr_gpu_win *g);
int __wrap_hr_gpu_win_run(hr_gpu_win *g, float *hidden, int n, int pos, char err[HR_ERR_LEN]);
int __wrap_hr_gpu_win_run_runs(hr_gpu_win *g, float *hidden, int n, const int *seq, const int *pos,
                               const int *run_len, int n_runs, char err[HR_ERR_LEN]);

#define GPU_WIN_MAX 64
static pthread_mutex_t g_gpu_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const hr_gpu_win *g;
    int n; /* layers */
} g_gpu_win[GPU_WIN_MAX];
static atomic_llong g_gpu_calls;  /* window runs */
static atomic_llong g_gpu_layers; /* layers run: each run's window layers */
static atomic_llong g_gpu_rows;   /* token rows through a window */
static atomic_int g_gpu_win_n;    /* layers of the last window created */

int __wrap_hr_gpu_win_create(hr_gpu_win **out, hr_vk *vk, const hr_hparams *hp,
                             const hr_layer_weights *layers, int il0, int n,
                             const float *rope_freqs, int n_ctx, int n_batch, int n_seq,
                             char err[HR_ERR_LEN]) {
    int rc = __real_hr_gpu_win_create(out, vk, hp, layers, il0, n, rope_freqs, n_ctx, n_batch,
                                      n_seq, err);
    if (rc == 0 && *out) {
        pthread_mutex_lock(&g_gpu_mu);
        for (int i = 0; i < GPU_WIN_MAX; i++)
            if (!g_gpu_win[i].g) {
                g_gpu_win[i].g = *out;
                g_gpu_win[i].n = n;
                break;
            }
        pthread_mutex_unlock(&g_gpu_mu);
        atomic_store(&g_gpu_win_n, n);
    }
    return rc;
}

void __wrap_hr_gpu_win_destroy(hr_gpu_win *g) {
    pthread_mutex_lock(&g_gpu_mu);
    for (int i = 0; g && i < GPU_WIN_MAX; i++)
        if (g_gpu_win[i].g == g)
            g_gpu_win[i].g = NULL;
    pthread_mutex_unlock(&g_gpu_mu);
    __real_hr_gpu_win_destroy(g);
}

static void gpu_count(const hr_gpu_win *g, int rows) {
    int n = 0;
    pthread_mutex_lock(&g_gpu_mu);
    for (int i = 0; i < GPU_WIN_MAX; i++)
        if (g_gpu_win[i].g == g)
            n = g_gpu_win[i].n;
    pthread_mutex_unlock(&g_gpu_mu);
    atomic_fetch_add(&g_gpu_calls, 1);
    atomic_fetch_add(&g_gpu_layers, n);
    atomic_fetch_add(&g_gpu_rows, rows);
}

int __wrap_hr_gpu_win_run(hr_gpu_win *g, float *hidden, int n, int pos, char err[HR_ERR_LEN]) {
    int rc = __real_hr_gpu_win_run(g, hidden, n, pos, err);
    if (rc == 0)
        gpu_count(g, n);
    return rc;
}

int __wrap_hr_gpu_win_run_runs(hr_gpu_win *g, float *hidden, int n, const int *seq, const int *pos,
                               const int *run_len, int n_runs, char err[HR_ERR_LEN]) {
    int rc = __real_hr_gpu_win_run_runs(g, hidden, n, seq, pos, run_len, n_runs, err);
    if (rc == 0)
        gpu_count(g, n);
    return rc;
}

static void gpu_count_reset(void) {
    atomic_store(&g_gpu_calls, 0);
    atomic_store(&g_gpu_layers, 0);
    atomic_store(&g_gpu_rows, 0);
    atomic_store(&g_gpu_win_n, 0);
}

#define N_GEN 16
#define N_CTX 128

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

/* Head + one worker, windows forced to "w0,w1"; gpu_dev (0 head, 1 worker)
 * runs its window's first n_gpu layers on the GPU. exact: every kernel in
 * exact mode (--exact), the ring bit-identical to one CPU process; else the
 * default mode (the GPU's fast path), within the float bound (1e-4). */
static void test_ring(const char *file, const char *windows, int gpu_dev, int n_gpu, bool exact) {
    hr_kernels_set_exact(exact);
    char path[512], err[HR_ERR_LEN];
    /* the device the GPU agent opens ("any") opens here too: an agent that
     * cannot open it runs its layers on the CPU, and the comparison below
     * would hold without testing the GPU */
    int idx = -1;
    hr_vk *probe = NULL;
    CHECK(hr_vk_pick("any", &idx, err) == 0 && idx >= 0 && hr_vk_create(&probe, idx, err) == 0);
    hr_vk_destroy(probe);
    hr_shared_path(file, path, sizeof path);
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (hr_gguf_open(&g, path, err) || hr_model_load(&m, g, err)) {
        fprintf(stderr, "%s: %s\n", file, err);
        CHECK(false);
        hr_gguf_close(g);
        return;
    }
    int nv = hr_model_hparams(m)->n_vocab;
    const int32_t prompt[8] = {1, 450, 4996, 17354, 1701, 29916, 432, 17204};
    int32_t ref[N_GEN + 1];
    CHECK_EQ(ref_greedy(path, N_CTX, prompt, 8, N_GEN, ref), 0);
    int32_t seq[8 + N_GEN];
    int n_seq = 0;
    for (int i = 0; i < 8; i++)
        seq[n_seq++] = prompt[i];
    for (int i = 1; i <= ref[0]; i++)
        seq[n_seq++] = ref[i];
    float *want = malloc((size_t)n_seq * nv * sizeof(float));
    float *got = malloc((size_t)n_seq * nv * sizeof(float));
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_batch = 64;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    CHECK_EQ(hr_ctx_eval(c, seq, n_seq, 0, want, true, err), 0);
    hr_ctx_destroy(c);

    gpu_count_reset(); /* the reference above ran on the CPU */
    agent_th ag[2];
    memset(ag, 0, sizeof ag);
    bool ok = true;
    for (int i = 0; ok && i < 2; i++) {
        hr_agent_params p = agent_params(path, i ? "worker" : "head",
                                         i ? hr_agent_endpoint(ag[0].a) : NULL, N_CTX, 1);
        p.windows = windows;
        p.k = 1;
        p.n_parallel = 1;
        p.gpu = i == gpu_dev ? "any" : "none";
        p.gpu_layers = i == gpu_dev ? n_gpu : 0;
        ok = agent_begin(&ag[i], &p) == 0;
    }
    ok = ok && head_ready(ag[0].a, 1, 30000) == 0;
    CHECK(ok);
    if (ok) {
        hr_sampler_params sp = hr_sampler_params_default();
        sp.temperature = 0;
        gen_out out = {.n = 0};
        CHECK_EQ(hr_head_generate(ag[0].a, prompt, 8, &sp, N_GEN, on_tok, &out, NULL, NULL, err),
                 0);
        bool same = out.n == ref[0];
        for (int i = 0; same && i < out.n; i++)
            same = out.ids[i] == ref[i + 1];
        CHECK_EQ(hr_head_logits(ag[0].a, seq, n_seq, got, err), 0);
        double rel = hr_compare_logits(got, want, n_seq, nv).rel;
        printf("%-24s %s, windows %s, %d GPU layer(s) on the %s: greedy ids %s (%d), logits max "
               "rel %.2e vs the CPU\n",
               file, exact ? "exact" : "default", windows, n_gpu, gpu_dev ? "worker" : "head",
               same ? "identical" : "DIFFER", out.n, rel);
        CHECK(same);
        if (exact) /* bit for bit: the exact kernels round every step as the CPU does */
            CHECK_EQ(memcmp(got, want, (size_t)n_seq * nv * sizeof(float)), 0);
        else /* the fast path: within the float fixtures' bound */
            CHECK(rel <= 1e-4);
        /* ... and the GPU did run them: a window of n_gpu layers, through
         * which the prompt, each token fed back and every teacher-forced
         * position went (k = 1: one pass a token) */
        long long calls = atomic_load(&g_gpu_calls), layers = atomic_load(&g_gpu_layers),
                  rows = atomic_load(&g_gpu_rows);
        int win_layers = atomic_load(&g_gpu_win_n);
        printf("%-24s GPU on the %s: %lld window runs, %lld layers, %lld token rows on the "
               "GPU\n",
               file, gpu_dev ? "worker" : "head", calls, layers, rows);
        CHECK_INT(win_layers, ==, n_gpu);
        CHECK_INT(calls, >=, out.n);
        CHECK_INT(layers, ==, calls * n_gpu);
        CHECK_INT(rows, >=, 8 + (out.n - 1) + n_seq);
    }
    agents_end(ag, 2);
    free(want);
    free(got);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* The plan puts layers on the worker's GPU when its profile says that pays:
 * profiles are given (the worker's GPU rates made 1000 times the CPU's), the
 * worker holds the device, and the ring's results are the CPU's. */
static void test_planned(const char *file, int vk_index) {
    char path[512], dir[256], err[HR_ERR_LEN], files[2][300];
    hr_shared_path(file, path, sizeof path);
    if (tmp_dir_make(dir, sizeof dir, "vkring")) {
        CHECK(false);
        return;
    }
    hr_prof_device *d = calloc(1, sizeof *d);
    /* a slow head (0.02 GB/s: ~10 ms a layer) so the GPU worker is worth
     * its hop even when the measured link is slow: with 1 GB/s a loaded
     * machine measured a 1.5 ms round trip and the plan rightly left the
     * worker out (0.20 ms a layer against a 0.75 ms hop) */
    fake_device(d, "head", 0.02, 0, 4ll << 30);
    snprintf(files[0], sizeof files[0], "%s/head.json", dir);
    CHECK_EQ(write_profile(d, files[0]), 0);
    fake_device(d, "worker", 1.0, 0, 4ll << 30);
    d->n_vk = 1;
    d->vk_chosen = 0;
    hr_prof_gpu *g = &d->vk[0];
    g->index = vk_index;
    snprintf(g->name, sizeof g->name, "test gpu");
    snprintf(g->kind, sizeof g->kind, "discrete");
    g->vram_bytes = 1ll << 30;
    g->h2d_gbs = g->d2h_gbs = 10.0;
    g->submit_us = 1.0;
    for (int i = 0; i < d->n_rates && i < HR_PROF_MAX_TYPES; i++)
        g->rates[g->n_rates++] = (hr_prof_gpu_rate){.type = d->rates[i].type,
                                                    .matvec_gbs = 1000.0,
                                                    .matvec_call_us = 0.01,
                                                    .matmat_gflops = 1e4};
    snprintf(files[1], sizeof files[1], "%s/worker.json", dir);
    CHECK_EQ(write_profile(d, files[1]), 0);
    free(d);
    gpu_count_reset();
    agent_th ag[2];
    memset(ag, 0, sizeof ag);
    bool ok = true;
    for (int i = 0; ok && i < 2; i++) {
        hr_agent_params p = agent_params(path, i ? "worker" : "head",
                                         i ? hr_agent_endpoint(ag[0].a) : NULL, N_CTX, 1);
        p.profile_file = files[i];
        p.n_parallel = 1;
        p.gpu = i ? "any" : "none";
        ok = agent_begin(&ag[i], &p) == 0;
    }
    ok = ok && head_ready(ag[0].a, 1, 30000) == 0;
    CHECK(ok);
    if (ok) {
        json_t *st = head_status(ag[0].a);
        json_t *w = dev_named(st, "worker");
        int gl = (int)json_integer_value(json_object_get(w, "gpu_layers"));
        int wl = (int)json_integer_value(json_object_get(w, "w"));
        if (gl <= 0) { /* the plan left the GPU out: show why */
            char *txt = json_dumps(st, JSON_COMPACT);
            fprintf(stderr, "planned: no GPU layers on the worker; status: %.3000s\n",
                    txt ? txt : "?");
            free(txt);
        }
        const char *gname = json_string_value(json_object_get(json_object_get(w, "gpu"), "name"));
        CHECK_STR(gname, "test gpu"); /* what /v1/cluster shows of its GPU */
        json_decref(st);
        const int32_t prompt[6] = {1, 450, 4996, 17354, 1701, 29916};
        int32_t ref[N_GEN + 1];
        CHECK_EQ(ref_greedy(path, N_CTX, prompt, 6, N_GEN, ref), 0);
        hr_sampler_params sp = hr_sampler_params_default();
        sp.temperature = 0;
        gen_out out = {.n = 0};
        CHECK_EQ(hr_head_generate(ag[0].a, prompt, 6, &sp, N_GEN, on_tok, &out, NULL, NULL, err),
                 0);
        bool same = out.n == ref[0];
        for (int i = 0; same && i < out.n; i++)
            same = out.ids[i] == ref[i + 1];
        long long calls = atomic_load(&g_gpu_calls), layers = atomic_load(&g_gpu_layers);
        int win_layers = atomic_load(&g_gpu_win_n);
        printf("%-24s planned: worker window %d layers, %d on its GPU (ran %lld GPU window runs, "
               "%lld layers); greedy ids %s\n",
               file, wl, gl, calls, layers, same ? "identical" : "DIFFER");
        CHECK(gl > 0 && gl <= wl);
        CHECK(same);
        /* the worker ran the plan's GPU layers there, for every token */
        CHECK_INT(win_layers, ==, gl);
        CHECK_INT(calls, >=, out.n);
        CHECK_INT(layers, ==, calls * gl);
    }
    agents_end(ag, 2);
    tmp_dir_remove(dir);
}

/* PLAN carries n_gpu (absent when 0) and refuses more GPU layers than its window. */
static void test_plan_msg(void) {
    char err[HR_ERR_LEN];
    hr_msg_plan p = {.plan_id = 7,
                     .k = 1,
                     .n_layer = 4,
                     .n_active = 2,
                     .index = 1,
                     .win = {{1, 3}},
                     .n_ctx = 64,
                     .n_batch = 8,
                     .n_seq = 1,
                     .n_gpu = 2};
    snprintf(p.next, sizeof p.next, "tcp://127.0.0.1:9");
    hr_msg msg = {0}, msg0 = {0};
    CHECK_EQ(hr_msg_plan_encode(&msg, &p, err), 0);
    hr_msg_plan q;
    CHECK_EQ(hr_msg_plan_decode(&msg.h, msg.data, &q, err), 0);
    CHECK_EQ(q.n_gpu, 2);
    p.n_gpu = 0;
    CHECK_EQ(hr_msg_plan_encode(&msg0, &p, err), 0);
    CHECK_EQ(hr_msg_plan_decode(&msg0.h, msg0.data, &q, err), 0);
    CHECK_EQ(q.n_gpu, 0);
    CHECK(strstr(msg0.data, "n_gpu") == NULL);
    hr_msg_clear(&msg);
    hr_msg_clear(&msg0);
    p.n_gpu = 4; /* more than w */
    CHECK_EQ(hr_msg_plan_encode(&msg, &p, err), 0);
    CHECK_EQ(hr_msg_plan_decode(&msg.h, msg.data, &q, err), HR_EFORMAT);
    hr_msg_clear(&msg);
}

int main(void) {
    test_plan_msg();
    int idx = -1;
    char err[HR_ERR_LEN] = "";
    if (!hr_vk_built() || hr_vk_pick(NULL, &idx, err) != 0 || idx < 0) {
        hr_check_skip("no Vulkan device (HR_GPU=any needs one, lavapipe will do)");
        return hr_check_finish("test_vk_ring");
    }
    test_ring("models/tiny-llama-f32.gguf", "1,1", 1, 1, true);
    test_ring("models/small-qwen2-f16.gguf", "2,1", 0, 2, true);
    test_ring("models/tiny-llama-f32.gguf", "1,1", 1, 1, false);
    test_ring("models/small-qwen2-f16.gguf", "2,1", 0, 2, false);
    hr_kernels_set_exact(false);
    test_planned("models/tiny-llama-f32.gguf", idx);
    return hr_check_finish("test_vk_ring");
}
