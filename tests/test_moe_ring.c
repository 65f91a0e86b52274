/* test_moe_ring.c - a ring of 3 agents over mixture-of-experts models gives
 * the greedy ids of the single process (`hearth run --temp 0`). The models
 * are made here with `hearth mkmodel` (6 layers each): qwen3moe-tiny in
 * Q4_K_M (16 experts, 4 used) and qwen2moe-tiny in Q4_0 (with its gated
 * shared expert). For each:
 *  - forced windows: the head (`--windows 2,2,2`) and two workers, one
 *    without the model file (its windows, experts included, fetched from
 *    the head) and one with it; every device holds 2 layers and computes;
 *  - the README's steps (qwen3moe only: each agent measures its profile
 *    for seconds): separate key folders, workers without the model
 *    file that find the head by its beacon and pair by its join token,
 *    profiles measured, the plan the scheduler's. On one machine the
 *    scheduler rightly keeps a model that fits on the head alone, so the
 *    head offers almost no memory (`--mem-limit`, as test_default_path does)
 *    and the layers go to the workers (to one of them here: the scheduler
 *    judges a second hop not worth it), which fetch them from the head.
 * Each time the ids of 24 greedy tokens after a prompt of 25 tokens equal
 * the single process's (harness.h ref_greedy, `hearth run`'s steps), the
 * text equals what `hearth run -m MODEL --temp 0` prints, and `hearth
 * status` shows each device in the ring with the layers the plan gave it.
 * The two models' answers differ, so the comparison tells them apart. */
#include "common/log.h"
#include "model/tokenizer.h"

#include "harness.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define N_CTX 256
#define N_GEN 24
#define N_LAYER 6
#define PROMPT "Embers glow in a hearth" /* 25 tokens: BOS, a space, 23 characters */
#define HEAD_MEM_GIB 0.004               /* the head's offer in the README case */

static char g_dir[128];
static const char *g_bin;

typedef struct {
    const char *shape, *type, *file;
    int32_t prompt[64];
    int n_prompt;
    int32_t ref[N_GEN + 1]; /* ref_greedy's: count, then ids */
    char run_text[1024];    /* `hearth run`'s stdout */
    char path[256];
} moe_model;

/* What the head generated: counted ids and their text. */
typedef struct {
    int32_t ids[N_GEN + 1];
    char text[1024];
} ring_out;

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    ring_out *o = ud;
    if (o->ids[0] < N_GEN)
        o->ids[++o->ids[0]] = id;
    size_t n = strlen(o->text);
    if (piece && len > 0 && n + (size_t)len < sizeof o->text) {
        memcpy(o->text + n, piece, (size_t)len);
        o->text[n + (size_t)len] = 0;
    }
    return 0;
}

static int ring_greedy(hr_agent *head, const moe_model *m, ring_out *out) {
    char err[HR_ERR_LEN];
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = 0;
    memset(out, 0, sizeof *out);
    int rc =
        hr_head_generate(head, m->prompt, m->n_prompt, &sp, N_GEN, on_tok, out, NULL, NULL, err);
    if (rc)
        fprintf(stderr, "generate: %s\n", err);
    return rc;
}

static void print_ids(const char *what, const int32_t *ids) {
    printf("  %-12s", what);
    for (int i = 1; i <= ids[0]; i++)
        printf(" %d", ids[i]);
    printf("\n");
}

/* The model made by `hearth mkmodel`, its prompt, the reference ids and
 * `hearth run`'s text; false when one of them is missing. */
static bool model_prepare(moe_model *m) {
    char cmd[1024], out[256], err[HR_ERR_LEN];
    snprintf(m->path, sizeof m->path, "%s/%s", g_dir, m->file);
    snprintf(cmd, sizeof cmd,
             "'%s' mkmodel -o '%s' --shape %s --type %s --layers %d >/dev/null 2>&1", g_bin,
             m->path, m->shape, m->type, N_LAYER);
    CHECK_EQ(system(cmd), 0);
    hr_gguf *g = NULL;
    hr_tokenizer *tok = NULL;
    if (hr_gguf_open(&g, m->path, err) || hr_tokenizer_create(&tok, g, err)) {
        fprintf(stderr, "%s: %s\n", m->path, err);
        CHECK(0);
        hr_gguf_close(g);
        return false;
    }
    /* as `hearth run` encodes it */
    CHECK_EQ(hr_tokenizer_encode(tok, PROMPT, strlen(PROMPT), hr_tokenizer_add_bos(tok), false,
                                 m->prompt, 64, &m->n_prompt),
             0);
    hr_tokenizer_destroy(tok);
    hr_gguf_close(g);
    CHECK_INT(m->n_prompt, >=, 20);
    CHECK_EQ(ref_greedy(m->path, N_CTX, m->prompt, m->n_prompt, N_GEN, m->ref), 0);
    CHECK_EQ(m->ref[0], N_GEN);
    snprintf(out, sizeof out, "%s/%s.run", g_dir, m->file);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p '%s' -n %d --temp 0 >'%s' 2>/dev/null", g_bin,
             m->path, PROMPT, N_GEN, out);
    CHECK_EQ(system(cmd), 0);
    char *s = slurp(out, NULL);
    snprintf(m->run_text, sizeof m->run_text, "%s", s ? s : "");
    free(s);
    printf("%s (%s, %d layers): prompt of %d tokens\n", m->shape, m->type, N_LAYER, m->n_prompt);
    print_ids("hearth run", m->ref);
    return m->ref[0] == N_GEN && m->run_text[0];
}

/* The ring's answer against the single process's. */
static void check_answer(const moe_model *m, const ring_out *o, const char *label) {
    print_ids(label, o->ids);
    bool same = counted_ids_equal(o->ids, m->ref);
    CHECK(same);
    char text[sizeof o->text + 1];
    snprintf(text, sizeof text, "%s\n", o->text); /* `hearth run` ends with a newline */
    CHECK_STR(text, m->run_text);
}

/* `hearth status` (text) of the head at control endpoint ep with key folder
 * keys, malloc'ed; NULL when it failed. */
static char *status_text(const char *ep, const char *keys) {
    char cmd[1024], out[256];
    const char *addr = strncmp(ep, "tcp://", 6) == 0 ? ep + 6 : ep;
    snprintf(out, sizeof out, "%s/status.txt", g_dir);
    snprintf(cmd, sizeof cmd, "'%s' status --head %s --key-dir '%s' --timeout 5 >'%s' 2>&1", g_bin,
             addr, keys, out);
    int rc = system(cmd);
    CHECK_EQ(rc, 0);
    char *s = slurp(out, NULL);
    if (rc != 0 && s)
        fprintf(stderr, "%s\n", s);
    return s;
}

/* True when the status text shows device name with "layers LAYERS (w W"
 * in its block (up to the next device). */
static bool shows_layers(const char *text, const char *name, const char *layers, int w) {
    char at[96], want[96];
    snprintf(at, sizeof at, "] %s ", name);
    snprintf(want, sizeof want, "      layers %s (w %d", layers, w);
    const char *p = text ? strstr(text, at) : NULL;
    if (!p)
        return false;
    const char *next = strstr(p + strlen(at), "\n  [");
    const char *q = strstr(p, want);
    return q && (!next || q < next);
}

/* Every device with layers in the head's plan, as `hearth status` prints
 * it; the number of such devices (-1 when there is no status). */
static int status_shows_plan(hr_agent *head, const char *keys) {
    json_t *st = head_status(head), *d;
    char *text = status_text(hr_agent_endpoint(head), keys);
    int n = st && text ? 0 : -1;
    size_t i;
    json_array_foreach(json_object_get(st, "devices"), i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        const char *layers = json_string_value(json_object_get(d, "layers"));
        int w = (int)json_integer_value(json_object_get(d, "w"));
        if (w <= 0 || json_integer_value(json_object_get(d, "ring_pos")) < 0)
            continue;
        bool shown = name && layers && shows_layers(text, name, layers, w);
        if (!shown)
            fprintf(stderr, "hearth status: no 'layers %s (w %d' for %s\n", layers ? layers : "?",
                    w, name ? name : "?");
        CHECK(shown);
        n += n >= 0;
    }
    if (text)
        printf("%s", text);
    free(text);
    json_decref(st);
    return n;
}

/* Devices with layers in the head's plan that have computed no token yet
 * (workers report in heartbeats), polled up to timeout_s until none. */
static int idle_devices(hr_agent *head, double timeout_s) {
    int idle = -1;
    for (double t0 = now_s(); idle != 0 && now_s() - t0 < timeout_s; sleep_ms(100)) {
        json_t *st = head_status(head), *d;
        size_t i;
        idle = st ? 0 : -1;
        json_array_foreach(json_object_get(st, "devices"), i, d) {
            idle += json_integer_value(json_object_get(d, "w")) > 0 &&
                    json_integer_value(json_object_get(d, "ring_pos")) >= 0 &&
                    json_integer_value(json_object_get(d, "tokens")) <= 0;
        }
        json_decref(st);
    }
    return idle;
}

/* The head with --windows 2,2,2 and two workers (one fetches its windows,
 * one has the file), all with one key folder. */
static void test_forced(const moe_model *m) {
    char keys[256], cache[256];
    snprintf(keys, sizeof keys, "%s/keys", g_dir);
    snprintf(cache, sizeof cache, "%s/cache-forced-%s", g_dir, m->file);
    agent_th ag[3] = {0};
    hr_agent_params hp = agent_params(m->path, "moe-head", NULL, N_CTX, 2);
    hp.key_dir = keys;
    hp.windows = "2,2,2";
    int ok = agent_begin(&ag[0], &hp);
    const char *ep = ok == 0 ? hr_agent_endpoint(ag[0].a) : NULL;
    hr_agent_params w1 = agent_params(NULL, "moe-fetch", ep, N_CTX, 0);
    w1.key_dir = keys;
    w1.cache_dir = cache;
    hr_agent_params w2 = agent_params(m->path, "moe-file", ep, N_CTX, 0);
    w2.key_dir = keys;
    int n = ok == 0;
    if (ok == 0 && (ok = agent_begin(&ag[1], &w1)) == 0)
        n++;
    if (ok == 0 && (ok = agent_begin(&ag[2], &w2)) == 0)
        n++;
    CHECK_EQ(ok, 0);
    if (ok == 0 && head_ready(ag[0].a, 2, 30000) == 0) {
        ring_out o;
        CHECK_EQ(ring_greedy(ag[0].a, m, &o), 0);
        check_answer(m, &o, "windows 2,2");
        /* every device held its two layers and computed tokens */
        json_t *st = head_status(ag[0].a);
        const char *src = json_string_value(json_object_get(st, "plan_source"));
        printf("  plan: %s\n", src ? src : "?");
        const char *names[] = {"moe-head", "moe-fetch", "moe-file"};
        const char *layers[] = {"0-1", "2-3", "4-5"};
        for (int i = 0; i < 3; i++) {
            json_t *d = dev_named(st, names[i]);
            CHECK(d != NULL);
            CHECK_STR(json_string_value(json_object_get(d, "layers")), layers[i]);
            CHECK_EQ((int)json_integer_value(json_object_get(d, "w")), 2);
        }
        json_decref(st);
        /* workers report tokens and fetched bytes in heartbeats */
        bool computed = false, fetched = false;
        for (double t0 = now_s(); !(computed && fetched) && now_s() - t0 < 5; sleep_ms(100)) {
            st = head_status(ag[0].a);
            computed = true;
            for (int i = 0; i < 3; i++)
                computed &=
                    json_integer_value(json_object_get(dev_named(st, names[i]), "tokens")) > 0;
            json_t *fd = dev_named(st, "moe-fetch");
            double done = json_number_value(json_object_get(fd, "fetch_done_bytes"));
            fetched =
                done > 0 && done == json_number_value(json_object_get(fd, "fetch_total_bytes"));
            json_decref(st);
        }
        CHECK(fetched); /* its windows, experts included, came from the head */
        CHECK(computed);
        CHECK_EQ(status_shows_plan(ag[0].a, keys), 3);
    } else {
        CHECK(0);
    }
    /* a head with forced windows says at error level that it cannot re-plan
     * once its workers stop */
    hr_log_set_level(HR_LOG_LEVEL_NONE);
    agents_end(ag, n);
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
}

/* The README's steps, in-process (what `hearth agent -m MODEL --listen ADDR`
 * and `hearth agent --listen ADDR --join TOKEN` set up): a head with the model and its own keys,
 * workers with their own keys and caches that find it by its beacon and
 * pair by its join token; profiles measured; nothing forced but the head's
 * memory offer. */
static void test_readme(const moe_model *m, int disc_port) {
    char kh[256], kw[2][256], cache[2][256], cluster[48];
    snprintf(kh, sizeof kh, "%s/keys-head-%s", g_dir, m->file);
    snprintf(cluster, sizeof cluster, "moe-ring-%d", (int)getpid());
    agent_th ag[3] = {0};
    hr_agent_params hp = hr_agent_params_default();
    hp.model_path = m->path;
    hp.listen = "127.0.0.1:0";
    hp.name = "moe-head";
    hp.key_dir = kh;
    hp.cluster = cluster;
    hp.discovery_port = disc_port;
    hp.profile = true;
    hp.mem_limit_gib = HEAD_MEM_GIB;
    /* alone it has no plan, and once its workers stop none again: the head
     * says so at error level */
    hr_log_set_level(HR_LOG_LEVEL_NONE);
    double t0 = now_s();
    int ok = agent_begin(&ag[0], &hp);
    int n = ok == 0;
    const char *token = ok == 0 ? hr_agent_join_token(ag[0].a) : "";
    CHECK(token[0] != 0);
    const char *names[] = {"moe-w1", "moe-w2"};
    for (int i = 0; ok == 0 && i < 2; i++) {
        const char *name = names[i];
        snprintf(kw[i], sizeof kw[i], "%s/keys-%s-%s", g_dir, name, m->file);
        snprintf(cache[i], sizeof cache[i], "%s/cache-%s-%s", g_dir, name, m->file);
        hr_agent_params wp = hr_agent_params_default();
        wp.listen = "127.0.0.1:0";
        wp.name = name;
        wp.key_dir = kw[i];
        wp.cache_dir = cache[i];
        wp.join = token;
        wp.discover = true;
        wp.cluster = cluster;
        wp.discovery_port = disc_port;
        wp.profile = true;
        if ((ok = agent_begin(&ag[i + 1], &wp)) == 0) /* finds the head, pairs */
            n++;
    }
    CHECK_EQ(ok, 0);
    bool ready = ok == 0 && head_ready(ag[0].a, 2, 60000) == 0;
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    if (ready) {
        json_t *st = head_status(ag[0].a), *d;
        const char *src = json_string_value(json_object_get(st, "plan_source"));
        printf("  ring formed in %.1f s; plan: %s\n", now_s() - t0, src ? src : "?");
        CHECK(src && strstr(src, "scheduler") != NULL);
        int held = 0, worker_w = 0;
        size_t i;
        json_array_foreach(json_object_get(st, "devices"), i, d) {
            int w = 0; /* its windows of every round */
            json_t *v;
            size_t r;
            json_array_foreach(json_object_get(d, "windows"), r, v) w += (int)json_integer_value(v);
            if (json_integer_value(json_object_get(d, "ring_pos")) < 0)
                continue;
            held += w;
            if (!json_is_true(json_object_get(d, "head")))
                worker_w += w;
        }
        json_decref(st);
        CHECK_EQ(held, N_LAYER);
        CHECK(worker_w > 0); /* the experts' layers on a worker that fetched them */
        ring_out o;
        CHECK_EQ(ring_greedy(ag[0].a, m, &o), 0);
        check_answer(m, &o, "scheduler");
        CHECK_EQ(idle_devices(ag[0].a, 5), 0);
        CHECK(status_shows_plan(ag[0].a, kh) >= 1);
    } else {
        CHECK(0);
    }
    hr_log_set_level(HR_LOG_LEVEL_NONE);
    agents_end(ag, n);
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    signal(SIGPIPE, SIG_IGN);
    g_bin = test_bin();
    if (!g_bin) {
        hr_check_skip("moe ring: HR_BIN not set");
        return hr_check_finish("moe_ring");
    }
    if (tmp_dir_make(g_dir, sizeof g_dir, "moe-ring")) {
        CHECK(0);
        return hr_check_finish("moe_ring");
    }
    double t_start = now_s();
    int disc_port = free_port_block(4);
    moe_model models[] = {{.shape = "qwen3moe-tiny", .type = "q4_k_m", .file = "qwen3moe.gguf"},
                          {.shape = "qwen2moe-tiny", .type = "q4_0", .file = "qwen2moe.gguf"}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        double t0 = now_s();
        if (!model_prepare(&models[i]))
            continue;
        test_forced(&models[i]);
        if (i == 0) /* profiles take seconds per agent: one model is enough */
            test_readme(&models[i], disc_port);
        printf("  %.1f s\n", now_s() - t0);
    }
    /* the answers tell the models apart */
    CHECK(!counted_ids_equal(models[0].ref, models[1].ref));
    tmp_dir_remove(g_dir);
    printf("moe ring: %.1f s in all\n", now_s() - t_start);
    return hr_check_finish("moe_ring");
}
