/* test_api_serve.c - several requests at once through the head's HTTP API
 * on a 3-agent loopback ring (HR_BIN agents, one thread each, CURVE on,
 * --parallel 8), driven with curl:
 *  - 8 streamed completions of mixed prompt and answer lengths sent
 *    together: every one that completes has the text of `hearth run
 *    --temp 0` (a single process) for its prompt, none waits for another
 *    to finish before its first token, and /v1/cluster shows 8 running
 *    requests and their micro-batches (one per core: the agents share
 *    this machine) while they run;
 *  - one of them is canceled midway (its client hangs up): the API counts
 *    it canceled, and a ninth stream sent then gets its slot and its first
 *    token while the others still run;
 *  - a follow-up chat turn keeps the first turn's KV (usage:
 *    prompt_tokens_details.cached_tokens) and answers as the same
 *    conversation sent cold. */
#include "common/log.h"

#include "api_harness.h"

#include <fcntl.h>

#define N_STREAM 8

typedef struct {
    char prompt[1024];
    int max_tokens;
    char *want; /* `hearth run` text */
    /* the stream */
    pid_t pid;
    int fd;
    pthread_t th;
    char *text;
    size_t len;
    int chunks; /* events with text */
    bool done_event;
    double t_first, t_done;
} stream_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* The text `hearth run --temp 0` prints for prompt (without its final newline). */
static char *run_text(const char *prompt, int n) {
    char pf[300], out[300], cmd[2048], nb[16];
    snprintf(pf, sizeof pf, "%s/run-prompt.txt", g_dir);
    snprintf(out, sizeof out, "%s/run-out.txt", g_dir);
    snprintf(nb, sizeof nb, "%d", n);
    write_file(pf, prompt, strlen(prompt));
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --temp 0 --ctx 256 -n %s -f '%s' >'%s' 2>/dev/null",
             g_bin, g_model, nb, pf, out);
    if (system(cmd) != 0)
        return NULL;
    size_t len = 0;
    char *s = slurp(out, &len);
    if (s && len > 0 && s[len - 1] == '\n')
        s[len - 1] = 0;
    return s;
}

/* Reads a stream's SSE events as they come, noting when text first came
 * and when it ended. */
static void *stream_reader(void *arg) {
    stream_t *st = arg;
    char buf[4096], ev[65536];
    size_t n_ev = 0;
    for (;;) {
        ssize_t n = read(st->fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (n_ev < sizeof ev - 1)
                ev[n_ev++] = buf[i];
            if (n_ev < 2 || ev[n_ev - 1] != '\n' || ev[n_ev - 2] != '\n')
                continue;
            ev[n_ev - 2] = 0;
            n_ev = 0;
            if (strncmp(ev, "data: ", 6) != 0)
                continue;
            pthread_mutex_lock(&g_mu);
            if (strcmp(ev + 6, "[DONE]") == 0) {
                st->done_event = true;
                pthread_mutex_unlock(&g_mu);
                continue;
            }
            json_t *j = json_loads(ev + 6, 0, NULL);
            json_t *t = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text");
            size_t tl = json_string_length(t);
            if (json_is_string(t) && tl > 0) {
                if (st->chunks++ == 0)
                    st->t_first = now_s();
                char *nt = realloc(st->text, st->len + tl + 1);
                if (nt) {
                    memcpy(nt + st->len, json_string_value(t), tl);
                    st->len += tl;
                    nt[st->len] = 0;
                    st->text = nt;
                }
            }
            pthread_mutex_unlock(&g_mu);
            json_decref(j);
        }
    }
    pthread_mutex_lock(&g_mu);
    st->t_done = now_s();
    pthread_mutex_unlock(&g_mu);
    close(st->fd);
    return NULL;
}

/* Starts a streamed completion with curl, read by its own thread. */
static int stream_start(stream_t *st, int i) {
    char body[2048], bodyf[300], auth[128];
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"stream\":true}", st->prompt,
             st->max_tokens);
    snprintf(bodyf, sizeof bodyf, "%s/stream%d.json", g_dir, i);
    write_file(bodyf, body, strlen(body));
    char data[320], url[200];
    snprintf(data, sizeof data, "@%s", bodyf);
    snprintf(url, sizeof url, "%s/v1/completions", g_url);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", KEY);
    int p[2];
    if (pipe(p))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execlp("curl", "curl", "-sN", "--max-time", "120", "-H", auth, "-H",
               "Content-Type: application/json", "--data-binary", data, url, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    st->pid = pid;
    st->fd = p[0];
    st->text = NULL;
    st->len = 0;
    st->chunks = 0;
    st->done_event = false;
    st->t_first = st->t_done = 0;
    return pthread_create(&st->th, NULL, stream_reader, st);
}

static int chunks_of(stream_t *st) {
    pthread_mutex_lock(&g_mu);
    int n = st->chunks;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static long long api_field(const char *field, json_t **out) {
    int code = 0;
    json_t *j = http_json("GET", "/v1/cluster", NULL, &code);
    json_t *api = json_object_get(j, "api");
    long long v = json_integer_value(json_object_get(api, field));
    if (out)
        *out = json_incref(api);
    json_decref(j);
    return v;
}

static void test_streams(void) {
    static const int words[N_STREAM + 1] = {2, 60, 9, 110, 4, 35, 80, 15, 20};
    static const int gen[N_STREAM + 1] = {14, 20, 48, 12, 24, 10, 16, 120, 12};
    static const char *vocab[] = {"river",  "stone",  "lantern", "orchard", "harbor", "meadow",
                                  "copper", "winter", "garden",  "thunder", "violet", "falcon"};
    static stream_t s[N_STREAM + 1];
    for (int i = 0; i <= N_STREAM; i++) {
        memset(&s[i], 0, sizeof s[i]);
        size_t n = 0;
        for (int w = 0; w < words[i]; w++)
            n += (size_t)snprintf(s[i].prompt + n, sizeof s[i].prompt - n, "%s%s", w ? " " : "",
                                  vocab[(i * 5 + w * 7) % 12]);
        s[i].max_tokens = gen[i];
        s[i].want = run_text(s[i].prompt, gen[i]);
        CHECK(s[i].want != NULL);
    }
    long long c0 = api_field("canceled", NULL), d0 = api_field("completed", NULL);
    for (int i = 0; i < N_STREAM; i++)
        CHECK_EQ(stream_start(&s[i], i), 0);
    /* all run together, one micro-batch per ring device */
    long long max_running = 0;
    size_t max_mb = 0;
    double t0 = now_s();
    while (chunks_of(&s[2]) < 6 && now_s() - t0 < 60) {
        json_t *api = NULL;
        long long r = api_field("n_running", &api);
        max_running = r > max_running ? r : max_running;
        size_t mb = json_array_size(json_object_get(api, "batches"));
        max_mb = mb > max_mb ? mb : max_mb;
        json_decref(api);
        sleep_ms(20);
    }
    CHECK(chunks_of(&s[2]) >= 6);
    CHECK_EQ(max_running, N_STREAM);
    long cores = sysconf(_SC_NPROCESSORS_ONLN); /* agents of one thread sharing this machine */
    CHECK_EQ((long)max_mb, cores < 3 ? cores : 3);
    /* stream 2's client hangs up midway; a ninth takes its slot */
    kill(s[2].pid, SIGKILL);
    CHECK_EQ(stream_start(&s[N_STREAM], N_STREAM), 0);
    for (int i = 0; i <= N_STREAM; i++) {
        pthread_join(s[i].th, NULL);
        waitpid(s[i].pid, NULL, 0);
    }
    double t1 = now_s();
    while (api_field("canceled", NULL) < c0 + 1 && now_s() - t1 < 10)
        sleep_ms(50);
    CHECK_EQ(api_field("canceled", NULL), c0 + 1);
    CHECK_EQ(api_field("completed", NULL), d0 + N_STREAM);
    CHECK(!s[2].done_event);
    double last_other = 0;
    for (int i = 0; i <= N_STREAM; i++) {
        if (i == 2)
            continue;
        CHECK(s[i].done_event);
        bool same = s[i].text && s[i].want && strcmp(s[i].text, s[i].want) == 0;
        if (!same)
            fprintf(stderr, "  stream %d: '%s'\n  hearth run: '%s'\n", i,
                    s[i].text ? s[i].text : "", s[i].want ? s[i].want : "");
        CHECK(same);
        if (i < N_STREAM) {
            last_other = s[i].t_done > last_other ? s[i].t_done : last_other;
            for (int j = 0; j < N_STREAM; j++) /* no one waited for another to finish */
                if (j != i && j != 2)
                    CHECK(s[i].t_first < s[j].t_done);
        }
    }
    CHECK(s[N_STREAM].t_first < last_other); /* the freed slot, while the others ran */
    for (int i = 0; i <= N_STREAM; i++) {
        free(s[i].text);
        free(s[i].want);
    }
}

/* A chat answer's text and usage (prompt, cached, completion); NULL on
 * failure. */
static char *chat(const char *body, int *prompt, int *cached, int *completion) {
    int st = 0;
    json_t *j = http_json("POST", "/v1/chat/completions", body, &st);
    CHECK_EQ(st, 200);
    json_t *c = json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content");
    json_t *u = json_object_get(j, "usage");
    *prompt = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
    *completion = (int)json_integer_value(json_object_get(u, "completion_tokens"));
    *cached = (int)json_integer_value(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    char *t = json_is_string(c) ? strdup(json_string_value(c)) : NULL;
    json_decref(j);
    return t;
}

/* A follow-up chat turn evaluates only what is new: usage counts the
 * first turn's prompt as cached, and the answer is the one of the same
 * conversation sent cold (once every KV slot served something else). */
static void test_followup(void) {
    const char *q1 = "Tell me about the river, the stone and the lantern in the old orchard";
    int p1 = 0, c1 = 0, g1 = 0, p2 = 0, c2 = 0, g2 = 0, p3 = 0, c3 = 0, g3 = 0;
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":6,"
             "\"temperature\":0}",
             q1);
    char *a1 = chat(body, &p1, &c1, &g1);
    CHECK(a1 != NULL);
    if (!a1)
        return;
    json_t *conv =
        json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}],s:i,s:f}", "messages", "role", "user",
                  "content", q1, "role", "assistant", "content", a1, "role", "user", "content",
                  "And what about the harbor in winter?", "max_tokens", 16, "temperature", 0.0);
    char *b2 = json_dumps(conv, JSON_COMPACT);
    char *warm = chat(b2, &p2, &c2, &g2);
    int added = p2 - p1 - g1; /* the new turn's tokens: the answer's end, the question */
    fprintf(stderr,
            "  follow-up: first turn %d prompt + %d answer tokens; second %d, %d of them cached: "
            "%d evaluated, %d new\n",
            p1, g1, p2, c2, p2 - c2, added);
    /* the first turn's prompt and its answer are not evaluated again (the
     * kernels' one float order makes the answer's decode rows what a cold
     * prefill computes); one token of slack where the texts join. The
     * answer is kept short (6 tokens) so that its text tokenizes back to
     * the ids generated: the 12-token answer of this prompt does not (tokenized
     * again, its text differs from the generated ids from the 8th token on),
     * and the cache can only match what tokenizes the same. */
    CHECK(c2 >= p1 + g1 - 1);
    CHECK(p2 - c2 <= added + 1);
    CHECK(c2 < p2);
    /* every slot serves something else, then the same conversation again: cold */
    for (int i = 0; i < N_STREAM; i++) {
        static const char *first[] = {"River",  "Stone",  "Lantern", "Orchard",
                                      "Harbor", "Meadow", "Copper",  "Winter"};
        snprintf(body, sizeof body,
                 "{\"prompt\":\"%s evictions\",\"max_tokens\":2,\"temperature\":0}", first[i % 8]);
        int st = 0;
        json_decref(http_json("POST", "/v1/completions", body, &st));
        CHECK_EQ(st, 200);
    }
    char *cold = chat(b2, &p3, &c3, &g3);
    CHECK_EQ(p3, p2);
    CHECK(c3 <= 1); /* at most the BOS every prompt starts with */
    if (c3 > 1)
        fprintf(stderr, "  sent again: %d of %d cached\n", c3, p3);
    CHECK(warm && cold && strcmp(warm, cold) == 0);
    if (warm && cold && strcmp(warm, cold) != 0)
        fprintf(stderr, "  warm '%s'\n  cold '%s'\n", warm, cold);
    free(a1);
    free(b2);
    free(warm);
    free(cold);
    json_decref(conv);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    if (!harness_init("small-llama-q4_0.gguf", "api_serve"))
        return hr_check_finish("api_serve");
    int port = free_port(), wport1 = free_port(), wport2 = free_port(), aport = free_port();
    char listen[64], w1[64], w2[64], api[64], hlog[300], wlog1[300], wlog2[300];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(w1, sizeof w1, "127.0.0.1:%d", wport1);
    snprintf(w2, sizeof w2, "127.0.0.1:%d", wport2);
    snprintf(api, sizeof api, "127.0.0.1:%d", aport);
    snprintf(g_url, sizeof g_url, "http://%s", api);
    snprintf(g_ctrl, sizeof g_ctrl, "%s", listen);
    snprintf(hlog, sizeof hlog, "%s/head.log", g_dir);
    snprintf(wlog1, sizeof wlog1, "%s/w1.log", g_dir);
    snprintf(wlog2, sizeof wlog2, "%s/w2.log", g_dir);
    char *head[] = {g_bin,          "agent",        "-m",  g_model,      "--listen", listen,
                    "--name",       "head",         "-t",  "1",          "--expect", "2",
                    "--no-profile", "--ctx",        "256", "--parallel", "8",        "--windows",
                    "2,1,1",        "--api-listen", api,   "--api-key",  KEY,        NULL};
    spawn(head, NULL, hlog);
    char *wa[] = {g_bin, "agent", "-m",     g_model, "--listen",     w1,  "--name", "w1",
                  "-t",  "1",     "--head", listen,  "--no-profile", NULL};
    char *wb[] = {g_bin, "agent", "-m",     g_model, "--listen",     w2,  "--name", "w2",
                  "-t",  "1",     "--head", listen,  "--no-profile", NULL};
    spawn(wa, NULL, wlog1);
    spawn(wb, NULL, wlog2);
    int st = 0;
    double t0 = now_s();
    while ((st = http("GET", "/health", NULL, NULL, NULL, NULL)) != 200 && now_s() - t0 < 60)
        sleep_ms(100);
    CHECK_EQ(st, 200);
    if (st == 200) {
        test_streams();
        test_followup();
    } else {
        char *l = slurp(hlog, NULL);
        fprintf(stderr, "head log:\n%s\n", l ? l : "");
        free(l);
    }
    return hr_check_finish("api_serve");
}
