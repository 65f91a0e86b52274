/* harness.h - what the cluster tests share (test_cluster.c, test_trust.c,
 * test_service.c, test_planner.c, test_links.c, test_adapt.c, and through
 * api_harness.h the HTTP API's): monotonic time, in-process agents on their
 * own threads (started from hr_agent_params, stopped in reverse order), the
 * head's status as JSON, saved device profiles, the scheduler's model
 * inputs, a per-test temporary folder with a generated model, and the
 * single-process reference generation (`hearth run`'s steps) that cluster
 * answers are compared with. One test executable includes it once;
 * everything is static. */
#ifndef HR_TESTS_HARNESS_H
#define HR_TESTS_HARNESS_H

#include "agent/agent.h"
#include "kernels/types.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "ring/ring.h"
#include "sched/sched.h"

#include "check.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- time ---- */

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- in-process agents ---- */

typedef struct {
    hr_agent *a;
    pthread_t th;
    int rc; /* hr_agent_run's, once stopped */
    char err[HR_ERR_LEN];
    bool running;
    char keys[128]; /* key folder, where a test gives each agent its own */
} agent_th;

static inline void *agent_main(void *arg) {
    agent_th *t = arg;
    t->rc = hr_agent_run(t->a, t->err);
    return NULL;
}

/* The parameters every test agent starts from: model, loopback port chosen
 * by the system, name, head endpoint (NULL: this one is the head). */
static inline hr_agent_params agent_params(const char *model, const char *name, const char *head_ep,
                                           int n_ctx, int expect) {
    hr_agent_params p = hr_agent_params_default();
    p.model_path = model;
    p.listen = "127.0.0.1:0";
    p.head = head_ep;
    p.name = name;
    p.n_ctx = n_ctx;
    p.expect = expect;
    return p;
}

/* Creates the agent of p and runs it on its own thread; t->keys is kept. */
static inline int agent_begin(agent_th *t, const hr_agent_params *p) {
    t->a = NULL;
    t->rc = 0;
    t->err[0] = 0;
    t->running = false;
    if (hr_agent_create(&t->a, p, t->err)) {
        fprintf(stderr, "agent %s: %s\n", p->name ? p->name : "?", t->err);
        t->a = NULL;
        return -1;
    }
    pthread_create(&t->th, NULL, agent_main, t);
    t->running = true;
    return 0;
}

/* An agent that sends the saved profile file instead of measuring, with
 * memory limit mem_limit_gib, F32 wire; n_threads 0 keeps the default. */
static inline int agent_begin_profiled(agent_th *t, const char *model, const char *name,
                                       const char *head_ep, int n_ctx, int expect,
                                       const char *profile, double mem_limit_gib, int n_threads) {
    hr_agent_params p = agent_params(model, name, head_ep, n_ctx, expect);
    if (n_threads > 0)
        p.n_threads = n_threads;
    p.wire_dtype = HR_RING_F32;
    p.profile_file = profile;
    p.mem_limit_gib = mem_limit_gib;
    p.n_parallel = 1; /* the plans these tests expect hold one KV slot per layer */
    return agent_begin(t, &p);
}

/* Starts n profiled agents, files[i] and avail[i] bytes for names[i]: the
 * first is the head expecting n - 1 workers. 0 when all were created. */
static inline int profiled_agents_begin(agent_th *ag, int n, const char *model, int n_ctx,
                                        const char *const *names, char (*files)[128],
                                        const int64_t *avail, int n_threads) {
    int ok = 0;
    for (int i = 0; ok == 0 && i < n; i++)
        ok = agent_begin_profiled(&ag[i], model, names[i], i ? hr_agent_endpoint(ag[0].a) : NULL,
                                  n_ctx, i ? 0 : n - 1, files[i], avail[i] / 1073741824.0,
                                  n_threads);
    return ok;
}

/* Stops, joins and destroys a running agent (t->rc is kept). */
static inline void agent_end(agent_th *t) {
    if (!t->running)
        return;
    hr_agent_stop(t->a);
    pthread_join(t->th, NULL);
    hr_agent_destroy(t->a);
    t->a = NULL;
    t->running = false;
}

/* Ends agents t[n-1] .. t[0] (workers before their head). */
static inline void agents_end(agent_th *t, int n) {
    for (int i = n - 1; i >= 0; i--)
        agent_end(&t[i]);
}

/* 0 when the head planned with n_workers workers within timeout_ms; else
 * says why on stderr and returns -1. */
static inline int head_ready(hr_agent *head, int n_workers, int timeout_ms) {
    char err[HR_ERR_LEN];
    if (hr_head_wait_ready(head, n_workers, timeout_ms, err) == 0)
        return 0;
    fprintf(stderr, "cluster: %s\n", err);
    return -1;
}

/* ---- the head's status ---- */

static inline json_t *head_status(hr_agent *head) {
    char *s = hr_head_status_json(head);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    return j;
}

/* profiled_agents_begin, then waits for the head's plan with every worker:
 * the head's status, or NULL (a check failed; the agents are ended). */
static inline json_t *profiled_agents_planned(agent_th *ag, int n, const char *model, int n_ctx,
                                              const char *const *names, char (*files)[128],
                                              const int64_t *avail, int n_threads) {
    int ok = profiled_agents_begin(ag, n, model, n_ctx, names, files, avail, n_threads);
    CHECK_EQ(ok, 0);
    if (ok == 0 && head_ready(ag[0].a, n - 1, 30000)) {
        CHECK(0);
        ok = -1;
    }
    json_t *st = ok == 0 ? head_status(ag[0].a) : NULL;
    CHECK(st != NULL);
    if (!st)
        agents_end(ag, n);
    return st;
}

static inline int status_int(hr_agent *head, const char *key) {
    json_t *j = head_status(head);
    int v = (int)json_integer_value(json_object_get(j, key));
    json_decref(j);
    return v;
}

/* The device called name in a status's "devices" (NULL: none). */
static inline json_t *dev_named(json_t *st, const char *name) {
    json_t *devs = json_object_get(st, "devices"), *d;
    size_t i;
    json_array_foreach(devs, i, d) {
        const char *n = json_string_value(json_object_get(d, "name"));
        if (n && strcmp(n, name) == 0)
            return d;
    }
    return NULL;
}

/* ---- device profiles and the scheduler's model ---- */

/* A device profile: matvec at gbs GB/s, disk at disk_mbs MB/s (0: none,
 * everything resident), avail bytes. */
static inline void fake_device(hr_prof_device *d, const char *host, double gbs, double disk_mbs,
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

static inline int write_profile(const hr_prof_device *d, const char *path) {
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

/* fake_device(name, gbs, disk_mbs, avail) saved as DIR/NAME.json, its path
 * in file; write_profile's status. */
static inline int save_profile(const char *dir, const char *name, double gbs, double disk_mbs,
                               int64_t avail, char *file, size_t cap) {
    hr_prof_device d;
    fake_device(&d, name, gbs, disk_mbs, avail);
    snprintf(file, cap, "%s/%s.json", dir, name);
    return write_profile(&d, file);
}

/* Mean layer bytes, KV per layer, output bytes of model at n_ctx (pm is the
 * caller's to clear). */
static inline int model_inputs(const char *model, int n_ctx, hr_prof_model *pm,
                               hr_sched_model *sm) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    int rc = hr_gguf_open(&g, model, err);
    if (!rc)
        rc = hr_model_load(&m, g, err);
    if (!rc)
        rc = hr_prof_model_build(pm, m, g, err);
    if (!rc)
        rc = hr_prof_to_sched_model(pm, hr_hparams_ctx(hr_model_hparams(m), n_ctx), sm, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", model, err);
    hr_model_free(m);
    hr_gguf_close(g);
    return rc;
}

/* The bytes an agent of model at n_ctx keeps out of its memory for work
 * buffers and the runtime (hr_prof_mem_reserve at the default batch of 64
 * and threads, one per online core, as the test agents run); -1 when the
 * model does not load. */
static inline double model_reserve(const char *model, int n_ctx, bool is_head) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    double r = -1;
    if (hr_gguf_open(&g, model, err) == 0 && hr_model_load(&m, g, err) == 0) {
        long nt = sysconf(_SC_NPROCESSORS_ONLN);
        r = hr_prof_mem_reserve(m, n_ctx, 64, nt > 0 ? (int)nt : 1, is_head);
    }
    hr_model_free(m);
    hr_gguf_close(g);
    return r;
}

/* ---- temporary folder and generated model ---- */

/* HR_BIN when it is an executable, else NULL. */
static inline const char *test_bin(void) {
    const char *bin = getenv("HR_BIN");
    return bin && access(bin, X_OK) == 0 ? bin : NULL;
}

/* Makes /tmp/hr-test-TAG-XXXXXX in dir; -1 (dir emptied) when it cannot. */
static inline int tmp_dir_make(char *dir, size_t cap, const char *tag) {
    snprintf(dir, cap, "/tmp/hr-test-%s-XXXXXX", tag);
    if (mkdtemp(dir))
        return 0;
    dir[0] = 0;
    return -1;
}

static inline void tmp_dir_remove(const char *dir) {
    char cmd[512];
    if (!dir[0])
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

/* `hearth mkmodel --shape small` with n_layers and seed into path; the
 * command's status. */
static inline int make_model(const char *bin, int n_layers, int seed, const char *path) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --shape small --layers %d --seed %d -o '%s' >/dev/null",
             bin, n_layers, seed, path);
    return system(cmd);
}

/* The start of a test on a generated model: HR_BIN (else the test is
 * skipped), a fresh folder dir for tag, and `hearth mkmodel` with n_layers
 * and seed as dir/NAME; HR_BIN when the model is there, else NULL. */
static inline const char *generated_model(const char *tag, int n_layers, int seed, const char *name,
                                          char *dir, size_t dir_cap, char *model,
                                          size_t model_cap) {
    const char *bin = test_bin();
    if (!bin) {
        char why[128];
        snprintf(why, sizeof why, "%s test: HR_BIN not set", tag);
        hr_check_skip(why);
        return NULL;
    }
    if (tmp_dir_make(dir, dir_cap, tag)) {
        CHECK(0);
        return NULL;
    }
    snprintf(model, model_cap, "%s/%s", dir, name);
    CHECK_EQ(make_model(bin, n_layers, seed, model), 0);
    return access(model, R_OK) == 0 ? bin : NULL;
}

/* ---- the single-process reference ---- */

/* `hearth run`'s steps on an open context with sampler sp: the prompt in
 * one batch, then one token at a time, n_gen tokens or up to an end of
 * generation (when tok is given) into ids[0 .. *n_ids). */
static inline void ref_sample(hr_ctx *ctx, int nv, const hr_sampler_params *sp,
                              const hr_tokenizer *tok, const int32_t *prompt, int n, int n_gen,
                              int32_t *ids, int *n_ids) {
    char err[HR_ERR_LEN];
    float *logits = malloc((size_t)nv * sizeof *logits);
    hr_sampler *s = hr_sampler_create(sp, nv);
    for (int i = 0; i < n; i++)
        hr_sampler_accept(s, prompt[i]);
    *n_ids = 0;
    hr_ctx_eval(ctx, prompt, n, 0, logits, false, err);
    int pos = n;
    for (int i = 0; i < n_gen; i++) {
        int32_t id = hr_sampler_sample(s, logits);
        hr_sampler_accept(s, id);
        ids[(*n_ids)++] = id;
        if ((tok && hr_tokenizer_is_eog(tok, id)) || i + 1 == n_gen)
            break;
        hr_ctx_eval(ctx, &id, 1, pos++, logits, false, err);
    }
    hr_sampler_destroy(s);
    free(logits);
}

/* ref_sample on model opened at n_ctx (batch 64); stop_eog: stop at an end
 * of generation like `hearth run`. -1 when the model does not load. */
static inline int ref_generate_ids(const char *model, int n_ctx, const hr_sampler_params *sp,
                                   bool stop_eog, const int32_t *prompt, int n, int n_gen,
                                   int32_t *ids, int *n_ids) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_ctx *ctx = NULL;
    hr_tokenizer *tok = NULL;
    if (hr_gguf_open(&g, model, err) || hr_model_load(&m, g, err) ||
        (stop_eog && hr_tokenizer_create(&tok, g, err)))
        return -1;
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = n_ctx;
    cp.n_batch = 64;
    if (hr_ctx_create(&ctx, m, &cp, err))
        return -1;
    ref_sample(ctx, hr_model_hparams(m)->n_vocab, sp, tok, prompt, n, n_gen, ids, n_ids);
    hr_ctx_destroy(ctx);
    hr_tokenizer_destroy(tok);
    hr_model_free(m);
    hr_gguf_close(g);
    return 0;
}

/* Greedy ids of `hearth run --temp 0` for exactly n_gen tokens: out[0] the
 * count, the ids from out[1]. */
static inline int ref_greedy(const char *model, int n_ctx, const int32_t *prompt, int n, int n_gen,
                             int32_t *out) {
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    int n_out = 0;
    out[0] = 0;
    int rc = ref_generate_ids(model, n_ctx, &sp, false, prompt, n, n_gen, out + 1, &n_out);
    out[0] = n_out;
    return rc;
}

/* True when counted id lists (a[0] ids from a[1]) are the same. */
static inline bool counted_ids_equal(const int32_t *a, const int32_t *b) {
    if (a[0] != b[0])
        return false;
    for (int i = 1; i <= b[0]; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* Can a socket of `type` bind 127.0.0.1:port right now? */
static inline bool port_free(int type, int port) {
    int fd = socket(AF_INET, type, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* The first port of `span` consecutive loopback ports that are free for TCP
 * and UDP, below the kernel's ephemeral range (32768 and up), where the
 * outgoing connections of other tests running at the same time cannot take
 * one between this check and the agents' bind; the search starts at a place
 * drawn from the process id, so concurrent tests start far apart. */
static inline int free_port_block(int span) {
    const int lo = 20000, n = 12000;
    for (int t = 0; t < n; t += span) {
        int base = lo + (int)((getpid() * 37 + t) % (n - span));
        bool ok = true;
        for (int p = base; ok && p < base + span; p++)
            ok = port_free(SOCK_STREAM, p) && port_free(SOCK_DGRAM, p);
        if (ok)
            return base;
    }
    return lo + (int)(getpid() % (n - span));
}

#endif
