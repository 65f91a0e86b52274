/* test_planner.c - the head's live planning path with injected profiles
 * (agents send saved device profiles, --profile-file, instead of measuring):
 *  - a generated 12-layer model on three agents whose memory is short and
 *    disks slow: the plan the head runs is hr_sched_solve's for the same
 *    inputs (k and every window), not an even split, k > 1 with all three
 *    devices active, links measured (the plan's figures are the measured
 *    ones); greedy ids on the ring (F32
 *    wire) equal a single-process run;
 *  - one memory arithmetic: a head alone with exactly the memory the model
 *    needs (no disk) plans and accepts its own plan; 1 MiB less and the
 *    planner says which device is short, and no plan is served. */
#include "agent/agent.h"
#include "common/log.h"
#include "kernels/types.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "ring/ring.h"
#include "sched/sched.h"

#include "check.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 24
#define N_CTX 256
#define N_DEV 3

static char g_dir[64];

typedef struct {
    hr_agent *a;
    pthread_t th;
    int rc;
    char err[HR_ERR_LEN];
} agent_th;

static void *agent_main(void *arg) {
    agent_th *t = arg;
    t->rc = hr_agent_run(t->a, t->err);
    return NULL;
}

/* A device profile: matvec at gbs GB/s, disk at disk_mbs MB/s, avail bytes. */
static void fake_device(hr_prof_device *d, const char *host, double gbs, double disk_mbs,
                        int64_t avail) {
    memset(d, 0, sizeof *d);
    d->version = HR_PROF_VERSION;
    int types[] = {HR_TYPE_Q4_0, HR_TYPE_Q8_0, HR_TYPE_Q4_K,
                   HR_TYPE_Q6_K, HR_TYPE_F16,  HR_TYPE_F32};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        d->rates[d->n_rates++] = (hr_prof_rate){.type = types[t],
                                                .n_threads = 1,
                                                .matvec_gbs = gbs,
                                                .matvec_call_us = 5.0,
                                                .matmat_gflops = 10.0 * gbs};
    d->n_opcosts = 1;
    d->opcosts[0] = (hr_prof_opcost){1, 2.0, 1.0, 0.5};
    d->eltwise = (hr_prof_eltwise){1.0, 0.5, 2.0, 3.0, 1.5};
    d->membw_1t_gbs = d->membw_all_gbs = gbs;
    d->disk.mmap_mbs = disk_mbs;
    d->disk.seq_mbs = disk_mbs;
    d->mem.weights_avail_bytes = avail;
    d->mem.available_bytes = avail;
    d->mem.total_bytes = 2 * avail;
    snprintf(d->os.sysname, sizeof d->os.sysname, "Linux");
    snprintf(d->os.hostname, sizeof d->os.hostname, "%s", host);
}

static int write_profile(const hr_prof_device *d, const char *path) {
    char *js = NULL, err[HR_ERR_LEN];
    if (hr_prof_device_to_json(d, &js, err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    FILE *f = fopen(path, "w");
    int rc = f && fputs(js, f) >= 0 ? 0 : -1;
    if (f)
        fclose(f);
    free(js);
    return rc;
}

/* The scheduler inputs the head builds from a profile file. */
static int sched_dev_from_file(const char *path, const hr_prof_model *pm, bool is_head,
                               const char *name, hr_sched_device *out) {
    char *js = NULL, err[HR_ERR_LEN];
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    js = calloc(1, 1 << 20);
    size_t n = fread(js, 1, (1 << 20) - 1, f);
    fclose(f);
    hr_prof_device *d = calloc(1, sizeof *d);
    int rc = hr_prof_device_parse(js, n, d, err);
    free(js);
    if (rc == 0) {
        hr_prof_sched_params sp = hr_prof_sched_params_default();
        sp.is_head = is_head;
        sp.n_ctx = N_CTX;
        rc = hr_prof_to_sched_device(d, pm, NULL, &sp, out, err);
        snprintf(out->name, sizeof out->name, "%s", name);
        hr_prof_assume_link(out);
    }
    if (rc)
        fprintf(stderr, "%s: %s\n", path, err);
    free(d);
    return rc;
}

static json_t *status(hr_agent *head) {
    char *s = hr_head_status_json(head);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    return j;
}

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    int32_t *ids = ud;
    if (id >= 0 && ids[0] < N_GEN)
        ids[1 + ids[0]++] = id;
    return 0;
}

/* Greedy ids of `hearth run --temp 0` (single process). */
static int ref_generate(const char *model, const int32_t *prompt, int n, int32_t *out) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_ctx *ctx = NULL;
    if (hr_gguf_open(&g, model, err) || hr_model_load(&m, g, err))
        return -1;
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_batch = 64;
    if (hr_ctx_create(&ctx, m, &cp, err))
        return -1;
    int nv = hr_model_hparams(m)->n_vocab;
    float *logits = malloc((size_t)nv * sizeof *logits);
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    hr_sampler *s = hr_sampler_create(&sp, nv);
    for (int i = 0; i < n; i++)
        hr_sampler_accept(s, prompt[i]);
    out[0] = 0;
    hr_ctx_eval(ctx, prompt, n, 0, logits, false, err);
    int pos = n;
    for (int i = 0; i < N_GEN; i++) {
        int32_t id = hr_sampler_sample(s, logits);
        hr_sampler_accept(s, id);
        out[1 + out[0]++] = id;
        if (i + 1 == N_GEN)
            break;
        hr_ctx_eval(ctx, &id, 1, pos++, logits, false, err);
    }
    hr_sampler_destroy(s);
    free(logits);
    hr_ctx_destroy(ctx);
    hr_model_free(m);
    hr_gguf_close(g);
    return 0;
}

/* Mean layer bytes, KV per layer, output bytes of model at N_CTX. */
static int model_inputs(const char *model, hr_prof_model *pm, hr_sched_model *sm) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    int rc = hr_gguf_open(&g, model, err);
    if (!rc)
        rc = hr_model_load(&m, g, err);
    if (!rc)
        rc = hr_prof_model_build(pm, m, g, err);
    if (!rc)
        rc = hr_prof_to_sched_model(pm, hr_hparams_ctx(hr_model_hparams(m), N_CTX), sm, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", model, err);
    hr_model_free(m);
    hr_gguf_close(g);
    return rc;
}

static int start(agent_th *t, const char *model, const char *name, const char *head_ep,
                 const char *profile, double mem_limit, int expect) {
    char err[HR_ERR_LEN];
    hr_agent_params p = hr_agent_params_default();
    p.model_path = model;
    p.listen = "127.0.0.1:0";
    p.head = head_ep;
    p.name = name;
    p.n_ctx = N_CTX;
    p.expect = expect;
    p.wire_dtype = HR_RING_F32;
    p.profile_file = profile;
    p.mem_limit_gib = mem_limit;
    memset(t, 0, sizeof *t);
    if (hr_agent_create(&t->a, &p, err)) {
        fprintf(stderr, "%s: %s\n", name, err);
        return -1;
    }
    pthread_create(&t->th, NULL, agent_main, t);
    return 0;
}

static void stop(agent_th *t, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if (!t[i].a)
            continue;
        hr_agent_stop(t[i].a);
        pthread_join(t[i].th, NULL);
        hr_agent_destroy(t[i].a);
        t[i].a = NULL;
    }
}

/* ---- the scheduler's plan on three agents ---- */

static void test_live_plan(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, &pm, &sm)) {
        CHECK(0);
        return;
    }
    CHECK_EQ(sm.n_layer, 12);
    /* each device holds about 2.5 layers: short of memory, slow disks */
    double per = sm.layer_bytes + sm.kv_bytes_per_layer;
    double reserve = hr_prof_mem_reserve(sm.layer_bytes);
    const char *names[N_DEV] = {"head", "w1", "w2"};
    double gbs[N_DEV] = {4.0, 3.0, 2.0};
    char files[N_DEV][128];
    int64_t avail[N_DEV];
    for (int i = 0; i < N_DEV; i++) {
        avail[i] = (int64_t)(reserve + 2.5 * per + (i == 0 ? sm.output_bytes : 0));
        hr_prof_device d;
        fake_device(&d, names[i], gbs[i], 40.0, avail[i]);
        snprintf(files[i], sizeof files[i], "%s/%s.json", g_dir, names[i]);
        CHECK_EQ(write_profile(&d, files[i]), 0);
    }
    agent_th ag[N_DEV];
    memset(ag, 0, sizeof ag);
    char err[HR_ERR_LEN];
    int ok = start(&ag[0], model, names[0], NULL, files[0], avail[0] / 1073741824.0, N_DEV - 1);
    for (int i = 1; ok == 0 && i < N_DEV; i++)
        ok = start(&ag[i], model, names[i], hr_agent_endpoint(ag[0].a), files[i],
                   avail[i] / 1073741824.0, 0);
    CHECK_EQ(ok, 0);
    if (ok == 0 && hr_head_wait_ready(ag[0].a, N_DEV - 1, 30000, err)) {
        fprintf(stderr, "cluster: %s\n", err);
        CHECK(0);
        ok = -1;
    }
    json_t *st = ok == 0 ? status(ag[0].a) : NULL;
    CHECK(st != NULL);
    if (st) {
        /* the same inputs, in the head's device order */
        json_t *devs = json_object_get(st, "devices");
        CHECK_EQ((int)json_array_size(devs), N_DEV);
        hr_sched_device sd[N_DEV];
        int order[N_DEV];
        for (int i = 0; i < N_DEV && i < (int)json_array_size(devs); i++) {
            const char *nm = json_string_value(json_object_get(json_array_get(devs, i), "name"));
            order[i] = -1;
            for (int j = 0; j < N_DEV; j++)
                if (nm && strcmp(nm, names[j]) == 0)
                    order[i] = j;
            CHECK(order[i] >= 0);
            if (order[i] < 0)
                order[i] = i;
            CHECK_EQ(sched_dev_from_file(files[order[i]], &pm, i == 0, names[order[i]], &sd[i]), 0);
            /* the links the plan ran on were measured (each device's link to
             * the head at join; the head's the other way): the same figures */
            json_t *dj = json_array_get(devs, i);
            CHECK(json_is_false(json_object_get(dj, "plan_link_assumed")));
            double prtt = json_real_value(json_object_get(dj, "plan_link_rtt_ms"));
            double pbps = json_real_value(json_object_get(dj, "plan_link_bps"));
            CHECK(prtt > 0 && pbps > 0);
            sd[i].rtt_ms = prtt;
            sd[i].link_bps = pbps;
            sd[i].link_assumed = false;
        }
        static hr_sched_plan want;
        CHECK_EQ(hr_sched_solve(&sm, sd, N_DEV, NULL, &want, err), 0);
        int k = (int)json_integer_value(json_object_get(st, "k"));
        printf("scheduler: %s\nhead: plan %s\n", want.explanation,
               json_string_value(json_object_get(st, "plan_source")));
        CHECK_EQ(k, want.k);
        CHECK(k > 1);
        CHECK_EQ(want.n_active, N_DEV);
        int active = 0, even = 1, W = sm.n_layer / (k > 0 ? k : 1);
        for (int i = 0; i < N_DEV && i < (int)json_array_size(devs); i++) {
            json_t *d = json_array_get(devs, i);
            int w = (int)json_integer_value(json_object_get(d, "w"));
            int pos = (int)json_integer_value(json_object_get(d, "ring_pos"));
            CHECK_EQ(w, want.dev[i].w);
            CHECK_EQ(pos, want.dev[i].ring_pos);
            active += pos >= 0;
            even &= w == W / N_DEV + (i < W % N_DEV);
            CHECK(json_is_true(json_object_get(d, "has_profile")));
            CHECK(json_is_false(json_object_get(d, "link_assumed")));
            CHECK(json_real_value(json_object_get(d, "pred_ms_round")) > 0);
        }
        CHECK_EQ(active, N_DEV);
        if (want.k * N_DEV != sm.n_layer) /* an even split would give every device W / 3 */
            CHECK(!even);
        CHECK(strncmp(json_string_value(json_object_get(st, "plan_source")), "scheduler", 9) == 0);
        CHECK_STR(json_string_value(json_object_get(st, "plan_error")), "");
        json_decref(st);

        /* greedy ids on the ring equal the single process */
        int32_t prompt[] = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278};
        int n_prompt = (int)(sizeof prompt / sizeof prompt[0]);
        int32_t ref[1 + N_GEN], got[1 + N_GEN];
        CHECK_EQ(ref_generate(model, prompt, n_prompt, ref), 0);
        hr_sampler_params sp = hr_sampler_params_default();
        sp.temperature = 0;
        got[0] = 0;
        CHECK_EQ(
            hr_head_generate(ag[0].a, prompt, n_prompt, &sp, N_GEN, on_tok, got, NULL, NULL, err),
            0);
        CHECK_EQ(got[0], ref[0]);
        int same = got[0] == ref[0];
        for (int i = 1; same && i <= ref[0]; i++)
            same = got[i] == ref[i];
        CHECK(same);
        printf("live plan: k %d, %d active devices, %d greedy ids equal the single process\n", k,
               active, ref[0]);
    }
    stop(ag, N_DEV);
    hr_prof_model_clear(&pm);
}

/* ---- memory just enough / just short on a head alone ---- */

static void test_memory_edge(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, &pm, &sm)) {
        CHECK(0);
        return;
    }
    hr_prof_model_clear(&pm);
    /* everything resident (no disk): weights + KV of every layer + output head */
    double need = hr_prof_mem_need(&sm, 1, sm.n_layer, true);
    int64_t enough = (int64_t)(hr_prof_mem_reserve(sm.layer_bytes) + need) + 1;
    for (int short_of = 0; short_of <= 1; short_of++) {
        int64_t avail = enough - (short_of ? 1 << 20 : 0);
        hr_prof_device d;
        fake_device(&d, "edge", 4.0, 0.0, avail);
        char file[128];
        snprintf(file, sizeof file, "%s/edge%d.json", g_dir, short_of);
        CHECK_EQ(write_profile(&d, file), 0);
        agent_th ag;
        char err[HR_ERR_LEN] = "";
        CHECK_EQ(start(&ag, model, "edge", NULL, file, avail / 1073741824.0, 0), 0);
        if (!ag.a)
            continue;
        int rc = hr_head_wait_ready(ag.a, 0, short_of ? 2000 : 20000, err);
        json_t *st = status(ag.a);
        const char *perr = st ? json_string_value(json_object_get(st, "plan_error")) : NULL;
        printf("memory %s: ready %d, plan_error '%s'\n", short_of ? "short" : "enough", rc == 0,
               perr ? perr : "?");
        if (!short_of) {
            CHECK_EQ(rc, 0); /* the head accepted its own plan */
            CHECK_STR(perr ? perr : "?", "");
            json_t *d0 = st ? json_array_get(json_object_get(st, "devices"), 0) : NULL;
            CHECK_EQ((int)json_integer_value(json_object_get(d0, "w")), sm.n_layer);
        } else {
            CHECK(rc != 0);
            CHECK(perr && strstr(perr, "no plan") != NULL);
            CHECK(perr && strstr(perr, "edge") != NULL); /* names the short device */
            CHECK(st && !json_is_true(json_object_get(st, "ready")));
        }
        json_decref(st);
        stop(&ag, 1);
    }
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_WARN);
    const char *bin = getenv("HR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        hr_check_skip("planner test: HR_BIN not set");
        return hr_check_finish("planner");
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/hr-test-planner-XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0);
        return hr_check_finish("planner");
    }
    char model[128], cmd[512];
    snprintf(model, sizeof model, "%s/m12.gguf", g_dir);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --shape small --layers 12 --seed 7 -o '%s' >/dev/null",
             bin, model);
    CHECK_EQ(system(cmd), 0);
    if (access(model, R_OK) == 0) {
        test_live_plan(model);
        test_memory_edge(model);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_dir);
    return hr_check_finish("planner");
}
