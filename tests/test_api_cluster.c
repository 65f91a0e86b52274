/* test_api_cluster.c - the head's OpenAI-compatible HTTP API on a local
 * 2-agent cluster (HR_BIN) with --api-listen on a free loopback port,
 * driven with curl:
 *  - 503 before the worker joins; models, cluster view (same devices and
 *    layers as `hearth status --json`); non-streamed and streamed
 *    completions give the text of `hearth prompt` for the same seed; SSE
 *    framing; chat; stop strings; malformed JSON, wrong types, huge bodies
 *    and bad keys answered while a valid request streams undisturbed; a
 *    client that drops (streamed or not) cancels its generation; 429 (with
 *    Retry-After) when the queue is full; an unknown model is 404; usage in
 *    a stream only when asked for; with --parallel 2 two requests run at
 *    once;
 *  - 1,000 idle and trickling connections: /health and a completion answer
 *    as usual, and the server closes them within the read timeout;
 *  - SIGTERM during a stream: an error event and [DONE], the head exits 0;
 *  - the status page in headless Chromium (no network beyond the head):
 *    every device with its layer range in the DOM, and a screenshot
 *    (status.png in the test's build folder).
 * The request parsing and other unit parts are test_api.c. */
#include "api/http.h"

#include "api_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define READ_TIMEOUT_S 3 /* the head's --api-read-timeout */
#define GRACE_S 1        /* the head's --api-grace */

/* Text of a completion / chat answer. */
static char *answer_text(json_t *j, const char **finish) {
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t)
        t = json_object_get(json_object_get(c, "message"), "content");
    if (finish)
        *finish = json_string_value(json_object_get(c, "finish_reason"));
    return json_is_string(t) ? strdup(json_string_value(t)) : NULL;
}

/* Validates SSE framing (data: {...} events, final data: [DONE]) and joins the
 * streamed text; *finish gets the last finish_reason, *usage the completion tokens. */
static char *sse_text(const char *s, bool chat, char *finish, size_t fcap, int *usage) {
    size_t cap = strlen(s) + 1, n = 0;
    char *text = calloc(1, cap);
    bool done = false, ok = true;
    int events = 0;
    *usage = -1;
    finish[0] = 0;
    const char *p = s;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end) {
            ok = false; /* an unterminated event */
            fprintf(stderr, "  unterminated SSE event: %.200s\n", p);
            break;
        }
        size_t len = (size_t)(end - p);
        if (len > 0 && p[0] == ':') { /* comment (keep-alive) */
            p = end + 2;
            continue;
        }
        if (done || len < 6 || strncmp(p, "data: ", 6) != 0 || memchr(p, '\n', len)) {
            ok = false;
            fprintf(stderr, "  bad SSE event: %.*s\n", (int)(len < 200 ? len : 200), p);
            break;
        }
        events++;
        if (len == 12 && strncmp(p + 6, "[DONE]", 6) == 0) {
            done = true;
            p = end + 2;
            continue;
        }
        json_t *j = json_loadb(p + 6, len - 6, 0, NULL);
        const char *obj = json_string_value(json_object_get(j, "object"));
        if (!j || !obj || strcmp(obj, chat ? "chat.completion.chunk" : "text_completion") != 0) {
            ok = false;
            fprintf(stderr, "  bad SSE chunk: %.*s\n", (int)(len < 300 ? len : 300), p);
            json_decref(j);
            break;
        }
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        json_t *t = chat ? json_object_get(json_object_get(c, "delta"), "content")
                         : json_object_get(c, "text");
        if (json_is_string(t)) {
            memcpy(text + n, json_string_value(t), json_string_length(t));
            n += json_string_length(t);
        }
        const char *f = json_string_value(json_object_get(c, "finish_reason"));
        if (f)
            snprintf(finish, fcap, "%s", f);
        json_t *u = json_object_get(json_object_get(j, "usage"), "completion_tokens");
        if (json_is_integer(u))
            *usage = (int)json_integer_value(u);
        json_decref(j);
        p = end + 2;
    }
    CHECK(ok);
    CHECK(done);
    CHECK(events >= 2);
    return text;
}

static json_t *api_stats(void) {
    int st = 0;
    json_t *j = http_json("GET", "/v1/cluster", NULL, &st);
    json_t *api = json_incref(json_object_get(j, "api"));
    json_decref(j);
    return api;
}

static long long api_count(const char *field) {
    json_t *a = api_stats();
    long long v = json_integer_value(json_object_get(a, field));
    json_decref(a);
    return v;
}

/* Waits until the API has no running or queued request. */
static bool wait_idle(double timeout_s) {
    double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        json_t *a = api_stats();
        bool idle = a && !json_is_true(json_object_get(a, "running")) &&
                    json_integer_value(json_object_get(a, "queued")) == 0;
        json_decref(a);
        if (idle)
            return true;
        sleep_ms(100);
    }
    return false;
}

/* Starts a streamed request in the background, its SSE going to outf. */
static pid_t stream_bg(const char *body, const char *outf) {
    char bodyf[320];
    snprintf(bodyf, sizeof bodyf, "%s.req", outf);
    write_file(bodyf, body, strlen(body));
    char url[200], data[340];
    snprintf(url, sizeof url, "%s/v1/completions", g_url);
    snprintf(data, sizeof data, "@%s", bodyf);
    char *argv[] = {"curl",
                    "-sN",
                    "-H",
                    "Authorization: Bearer " KEY,
                    "-H",
                    "Content-Type: application/json",
                    "--data-binary",
                    data,
                    "-o",
                    (char *)outf,
                    url,
                    NULL};
    return spawn(argv, NULL, NULL);
}

static bool wait_file_has(const char *path, const char *what, double timeout_s) {
    double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        char *s = slurp(path, NULL);
        bool ok = s && strstr(s, what);
        free(s);
        if (ok)
            return true;
        sleep_ms(20);
    }
    return false;
}

/* `hearth prompt` output for the same request, cleaned to UTF-8 like the API does. */
static char *cli_prompt(const char *text, int n, int seed) {
    char outf[300], errf[300], ns[16], ss[16];
    snprintf(outf, sizeof outf, "%s/prompt.out", g_dir);
    snprintf(errf, sizeof errf, "%s/prompt.err", g_dir);
    snprintf(ns, sizeof ns, "%d", n);
    snprintf(ss, sizeof ss, "%d", seed);
    char *argv[] = {g_bin,    "prompt", "--head", g_ctrl, "-n",         ns,
                    "--seed", ss,       "--temp", "0.8",  (char *)text, NULL};
    pid_t pid = spawn(argv, outf, errf);
    int st = -1;
    waitpid(pid, &st, 0);
    g_npids--;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    size_t len = 0;
    char *s = slurp(outf, &len);
    if (!s)
        return NULL;
    if (len && s[len - 1] == '\n')
        s[--len] = 0;
    char *clean = malloc(len * 3 + 1);
    hr_api_utf8_clean(s, len, clean, len * 3 + 1);
    free(s);
    return clean;
}

static void test_completions(void) {
    int st;
    /* the same text as `hearth prompt`, non-streamed and streamed */
    char *want = cli_prompt("The quick brown fox", 24, 7);
    CHECK(want && strlen(want) > 0);
    const char *body = "{\"model\":\"tiny\",\"prompt\":\"The quick brown fox\",\"max_tokens\":24,"
                       "\"seed\":7,\"temperature\":0.8}";
    json_t *j = http_json("POST", "/v1/completions", body, &st);
    CHECK_EQ(st, 200);
    const char *fin = NULL;
    char *got = answer_text(j, &fin);
    CHECK_STR(got, want);
    CHECK_STR(fin, "length");
    json_int_t pt = 0, ct = 0, tt = 0;
    CHECK_EQ(json_unpack(json_object_get(j, "usage"), "{s:I,s:I,s:I}", "prompt_tokens", &pt,
                         "completion_tokens", &ct, "total_tokens", &tt),
             0);
    CHECK(pt >= 5);
    CHECK_EQ(ct, 24);
    CHECK_EQ(tt, pt + ct);
    CHECK_STR(json_string_value(json_object_get(j, "object")), "text_completion");
    /* ids: "cmpl-" + a random tag of this start + a counter */
    const char *id = json_string_value(json_object_get(j, "id"));
    CHECK(id && strncmp(id, "cmpl-", 5) == 0 && strlen(id) >= 5 + 12 + 2 && id[17] == '-');
    char id1[64];
    snprintf(id1, sizeof id1, "%s", id ? id : "");
    json_decref(j);
    free(got);
    /* the served id names the model too; others are 404 model_not_found */
    const char *named = "{\"model\":\"small-llama-q8_0\",\"prompt\":\"The quick brown fox\","
                        "\"max_tokens\":24,\"seed\":7,\"temperature\":0.8}";
    j = http_json("POST", "/v1/completions", named, &st);
    CHECK_EQ(st, 200);
    got = answer_text(j, NULL);
    CHECK_STR(got, want);
    const char *id2 = json_string_value(json_object_get(j, "id"));
    CHECK(id2 && strcmp(id2, id1) != 0 && strncmp(id2, id1, 18) == 0);
    free(got);
    json_decref(j);
    char *s = NULL;
    st = http("POST", "/v1/chat/completions",
              "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", KEY,
              NULL, &s);
    expect_error(st, 404, s, "invalid_request_error", "model");
    CHECK(s && strstr(s, "\"code\":\"model_not_found\""));
    free(s);
    /* "bearer" in lower case is the same scheme */
    st = http("POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2}", NULL,
              "-H 'Authorization: bearer " KEY "'", &s);
    CHECK_EQ(st, 200);
    free(s);
    const char *sbody = "{\"prompt\":\"The quick brown fox\",\"max_tokens\":24,\"seed\":7,"
                        "\"temperature\":0.8,\"stream\":true}";
    st = http("POST", "/v1/completions", sbody, KEY, "-N", &s);
    CHECK_EQ(st, 200);
    char finish[32];
    int usage = 0;
    char *streamed = sse_text(s ? s : "", false, finish, sizeof finish, &usage);
    CHECK_STR(streamed, want);
    CHECK_STR(finish, "length");
    CHECK_EQ(usage, -1); /* not asked for */
    CHECK(s && !strstr(s, "\"usage\""));
    free(streamed);
    free(s);
    const char *ubody = "{\"prompt\":\"The quick brown fox\",\"max_tokens\":24,\"seed\":7,"
                        "\"temperature\":0.8,\"stream\":true,\"stream_options\":{\"include_usage\":"
                        "true}}";
    st = http("POST", "/v1/completions", ubody, KEY, "-N", &s);
    CHECK_EQ(st, 200);
    streamed = sse_text(s ? s : "", false, finish, sizeof finish, &usage);
    CHECK_STR(streamed, want);
    CHECK_EQ(usage, 24);
    /* once, in the last chunk (no choices) before [DONE] */
    const char *u = s ? strstr(s, "\"usage\"") : NULL;
    CHECK(u && !strstr(u + 1, "\"usage\"") && strstr(u, "\"choices\":[]") == NULL &&
          strstr(s, "\"choices\":[]") != NULL && strstr(u, "data: [DONE]") != NULL);
    free(streamed);
    free(s);
    /* stop strings: the reply ends right before the first match */
    const char *mid = want ? want + strlen(want) / 2 : "";
    const char *stop = mid;
    while (*stop && !(stop[0] >= 'a' && stop[0] <= 'z'))
        stop++;
    if (strlen(stop) >= 3) {
        char st3[4] = {stop[0], stop[1], stop[2], 0};
        char b2[512];
        snprintf(b2, sizeof b2,
                 "{\"prompt\":\"The quick brown fox\",\"max_tokens\":24,\"seed\":7,"
                 "\"temperature\":0.8,\"stop\":[\"%s\"]}",
                 st3);
        j = http_json("POST", "/v1/completions", b2, &st);
        got = answer_text(j, &fin);
        size_t cut = (size_t)(strstr(want, st3) - want);
        CHECK(got && strlen(got) == cut && strncmp(got, want, cut) == 0);
        CHECK_STR(fin, "stop");
        free(got);
        json_decref(j);
    }
    free(want);
    /* chat: streamed deltas join to the non-streamed message */
    const char *cbody = "{\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},"
                        "{\"role\":\"user\",\"content\":\"Name a colour.\"}],\"max_tokens\":12,"
                        "\"seed\":3}";
    j = http_json("POST", "/v1/chat/completions", cbody, &st);
    CHECK_EQ(st, 200);
    CHECK_STR(json_string_value(json_object_get(j, "object")), "chat.completion");
    CHECK_STR(
        json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "role")),
        "assistant");
    char *chat = answer_text(j, NULL);
    json_decref(j);
    char csb[512];
    snprintf(csb, sizeof csb, "%.*s,\"stream\":true}", (int)strlen(cbody) - 1, cbody);
    st = http("POST", "/v1/chat/completions", csb, KEY, "-N", &s);
    CHECK_EQ(st, 200);
    streamed = sse_text(s ? s : "", true, finish, sizeof finish, &usage);
    CHECK_STR(streamed, chat);
    CHECK(s && strstr(s, "\"role\":\"assistant\""));
    free(streamed);
    free(s);
    free(chat);
}

/* Bad requests answered correctly while a valid request streams. */
static void test_errors_concurrent(void) {
    char outf[300];
    snprintf(outf, sizeof outf, "%s/bg.sse", g_dir);
    const char *body = "{\"prompt\":\"Tell me a story\",\"max_tokens\":1200,\"seed\":11,"
                       "\"temperature\":0.8,\"stream_options\":{\"include_usage\":true},"
                       "\"stream\":true}";
    pid_t bg = stream_bg(body, outf);
    CHECK(wait_file_has(outf, "data: {", 20));
    char *s = NULL;
    int st = http("POST", "/v1/completions", "{\"prompt\": \"x\", ", KEY, NULL, &s);
    expect_error(st, 400, s, "invalid_request_error", NULL);
    free(s);
    st = http("POST", "/v1/completions", "{\"prompt\":\"x\",\"temperature\":\"hot\"}", KEY, NULL,
              &s);
    expect_error(st, 400, s, "invalid_request_error", "temperature");
    free(s);
    st =
        http("POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"ten\"}", KEY, NULL, &s);
    expect_error(st, 400, s, "invalid_request_error", "max_tokens");
    free(s);
    st = http("POST", "/v1/chat/completions", "{\"messages\":{\"role\":\"user\"}}", KEY, NULL, &s);
    expect_error(st, 400, s, "invalid_request_error", "messages");
    free(s);
    st = http("POST", "/v1/completions", "{\"prompt\":\"x\",\"stop\":5}", KEY, NULL, &s);
    expect_error(st, 400, s, "invalid_request_error", "stop");
    free(s);
    /* huge bodies, with and without a Content-Length */
    size_t big = 3u << 20;
    char *huge = malloc(big + 1);
    memset(huge, 'a', big);
    huge[big] = 0;
    memcpy(huge, "{\"prompt\":\"", 11);
    st = http("POST", "/v1/completions", huge, KEY, NULL, &s);
    expect_error(st, 413, s, "invalid_request_error", NULL);
    free(s);
    st = http("POST", "/v1/completions", huge, KEY, "-H 'Transfer-Encoding: chunked'", &s);
    expect_error(st, 413, s, "invalid_request_error", NULL);
    free(s);
    free(huge);
    /* API key */
    st = http("POST", "/v1/completions", "{\"prompt\":\"x\"}", NULL, NULL, &s);
    expect_error(st, 401, s, "invalid_request_error", NULL);
    free(s);
    st = http("POST", "/v1/completions", "{\"prompt\":\"x\"}", "wrong-key", NULL, &s);
    expect_error(st, 401, s, "invalid_request_error", NULL);
    free(s);
    st = http("GET", "/v1/cluster", NULL, "wrong-key", NULL, &s);
    CHECK_EQ(st, 401);
    free(s);
    st = http("GET", "/v1/nothing", NULL, KEY, NULL, &s);
    expect_error(st, 404, s, "invalid_request_error", NULL);
    free(s);
    st = http("GET", "/v1/completions", NULL, KEY, NULL, &s);
    CHECK_EQ(st, 405);
    free(s);
    /* the valid request went on: it completes, and its text is what it would be alone */
    int wst = -1;
    waitpid(bg, &wst, 0);
    g_npids--;
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    s = slurp(outf, NULL);
    char finish[32];
    int usage = 0;
    char *streamed = sse_text(s ? s : "", false, finish, sizeof finish, &usage);
    free(s);
    CHECK_EQ(usage, 1200);
    char alone[256];
    snprintf(alone, sizeof alone, "%.*s}",
             (int)strlen(body) -
                 (int)strlen(",\"stream_options\":{\"include_usage\":true},\"stream\":true}"),
             body);
    json_t *j = http_json("POST", "/v1/completions", alone, &st);
    char *ref = answer_text(j, NULL);
    CHECK_STR(streamed, ref);
    json_decref(j);
    free(ref);
    free(streamed);
}

/* Clients that hang up cancel their generation; a full queue answers 429. */
static void test_cancel_and_queue(void) {
    long long c0 = api_count("canceled");
    /* streamed: curl gives up after 1 s of a long generation */
    char *s = NULL;
    double t0 = now_s();
    http("POST", "/v1/completions",
         "{\"prompt\":\"Once\",\"max_tokens\":4000,\"stream\":true,\"seed\":1}", KEY,
         "-N --max-time 1", &s);
    free(s);
    CHECK(wait_idle(5));
    CHECK(now_s() - t0 < 6);
    CHECK_EQ(api_count("canceled"), c0 + 1);
    /* non-streamed */
    http("POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4000,\"seed\":1}", KEY,
         "--max-time 1", &s);
    free(s);
    CHECK(wait_idle(5));
    CHECK_EQ(api_count("canceled"), c0 + 2);
    /* the ring is free again at once */
    int st = 0;
    t0 = now_s();
    json_t *j = http_json("POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":4}", &st);
    CHECK_EQ(st, 200);
    CHECK(now_s() - t0 < 3);
    json_decref(j);
    /* --parallel 2 and a queue of 1: two running, one waiting, the fourth is refused */
    char a[300], b[300], c2[300];
    snprintf(a, sizeof a, "%s/qa.sse", g_dir);
    snprintf(b, sizeof b, "%s/qb.sse", g_dir);
    snprintf(c2, sizeof c2, "%s/qc.sse", g_dir);
    const char *longb = "{\"prompt\":\"Once\",\"max_tokens\":4000,\"stream\":true}";
    pid_t pa = stream_bg(longb, a);
    pid_t pc = stream_bg(longb, c2);
    CHECK(wait_file_has(a, "data: {", 20));
    CHECK(wait_file_has(c2, "data: {", 20));
    CHECK_EQ(api_count("n_running"), 2);
    pid_t pb = stream_bg(longb, b);
    double t1 = now_s();
    while (api_count("queued") < 1 && now_s() - t1 < 5)
        sleep_ms(20);
    char hdrs[300], extra[340];
    snprintf(hdrs, sizeof hdrs, "%s/429.headers", g_dir);
    snprintf(extra, sizeof extra, "-D '%s'", hdrs);
    st = http("POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", KEY, extra, &s);
    expect_error(st, 429, s, "rate_limit_error", NULL);
    free(s);
    char *hs = slurp(hdrs, NULL);
    CHECK(hs && strstr(hs, "Retry-After: "));
    free(hs);
    /* the clients leave: the running ones are canceled on the ring, the queued one dropped */
    long long c1 = api_count("canceled");
    stop_pid(pb);
    stop_pid(pc);
    stop_pid(pa);
    g_npids -= 3;
    CHECK(wait_idle(5));
    CHECK_EQ(api_count("canceled"), c1 + 3);
}

/* Seconds one curl request takes (status in *st). */
static double timed(const char *method, const char *path, const char *body, int *st) {
    char *s = NULL;
    double t0 = now_s();
    *st = http(method, path, body, KEY, NULL, &s);
    free(s);
    return now_s() - t0;
}

/* 1,000 connections that send nothing or trickle a request one byte a
 * second: the API still answers at once, and the server closes them all
 * within the read timeout. */
static void test_flood(int port) {
    enum { N = 1000 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < N + 100 && rl.rlim_max >= N + 100) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    CHECK(rl.rlim_cur >= N + 100);
    if (rl.rlim_cur < N + 100) {
        fprintf(stderr, "  open-file limit %llu: cannot open %d connections\n",
                (unsigned long long)rl.rlim_cur, N);
        return;
    }
    /* the usual times, without the flood */
    int st = 0;
    double health0 = timed("GET", "/health", NULL, &st);
    CHECK_EQ(st, 200);
    const char *shortb = "{\"prompt\":\"Hi\",\"max_tokens\":8}";
    double compl0 = timed("POST", "/v1/completions", shortb, &st);
    CHECK_EQ(st, 200);
    static int fds[N];
    int n_open = 0;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    double t0 = now_s();
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0) {
            fcntl(fds[i], F_SETFL, O_NONBLOCK);
            n_open++;
        }
    }
    CHECK_EQ(n_open, N);
    /* half trickle "GET /health HTTP/1.1\r\n..." a byte a second; meanwhile real requests */
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    double worst_health = 0, worst_compl = 0;
    for (int k = 0; k < 3; k++) {
        for (int i = 1; i < N; i += 2)
            if (send(fds[i], req + k, 1, MSG_NOSIGNAL) != 1)
                CHECK(0); /* the server must not close them yet */
        double th = timed("GET", "/health", NULL, &st);
        CHECK_EQ(st, 200);
        double tc = timed("POST", "/v1/completions", shortb, &st);
        CHECK_EQ(st, 200);
        worst_health = th > worst_health ? th : worst_health;
        worst_compl = tc > worst_compl ? tc : worst_compl;
        sleep_ms(900);
    }
    printf("flood of %d connections: /health %.0f ms (alone %.0f ms), completion of 8 tokens "
           "%.0f ms (alone %.0f ms)\n",
           N, worst_health * 1e3, health0 * 1e3, worst_compl * 1e3, compl0 * 1e3);
    fflush(stdout); /* before the next fork */
    CHECK(worst_health < health0 + 1.0);
    CHECK(worst_compl < compl0 + 2.0);
    /* the server closes every one of them within the read timeout (+ the watchdog's tick) */
    int n_closed = 0;
    static bool closed[N];
    while (n_closed < N && now_s() - t0 < READ_TIMEOUT_S + 3) {
        for (int i = 0; i < N; i++) {
            if (closed[i])
                continue;
            char b[64];
            ssize_t r = recv(fds[i], b, sizeof b, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                closed[i] = true;
                n_closed++;
            }
        }
        sleep_ms(50);
    }
    double t_closed = now_s() - t0;
    printf("flood: %d of %d closed by the server after %.1f s (read timeout %d s)\n", n_closed, N,
           t_closed, READ_TIMEOUT_S);
    fflush(stdout);
    CHECK_EQ(n_closed, N);
    CHECK(t_closed >= READ_TIMEOUT_S - 0.5); /* not before the bound either */
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    CHECK_EQ(timed("GET", "/health", NULL, &st) < 2.0, 1);
    CHECK_EQ(st, 200);
}

/* SIGTERM to the head mid-stream: new requests get 503, the stream ends
 * with an error event (the grace is shorter than the answer) and [DONE],
 * and the head exits 0. Runs last: it stops the head. */
static void test_sigterm(const char *hlog) {
    char outf[300];
    snprintf(outf, sizeof outf, "%s/term.sse", g_dir);
    pid_t bg =
        stream_bg("{\"prompt\":\"Once\",\"max_tokens\":4000,\"seed\":5,\"stream\":true}", outf);
    CHECK(wait_file_has(outf, "data: {", 20));
    pid_t head = g_pids[0];
    double t0 = now_s();
    kill(head, SIGTERM);
    sleep_ms(200);
    char *s = NULL;
    int st = http("POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", KEY, NULL, &s);
    expect_error(st, 503, s, "server_error", NULL);
    CHECK(s && strstr(s, "shutting_down"));
    free(s);
    int wst = -1;
    waitpid(bg, &wst, 0);
    g_npids--;                                      /* bg was the last one spawned */
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0); /* curl: the stream ended properly */
    char *sse = slurp(outf, NULL);
    size_t n = sse ? strlen(sse) : 0;
    CHECK(n > 14 && strcmp(sse + n - 14, "data: [DONE]\n\n") == 0);
    CHECK(sse && (strstr(sse, "\"code\":\"shutting_down\"") ||
                  strstr(sse, "\"finish_reason\":\"length\"")));
    free(sse);
    int hst = -1;
    pid_t r = 0;
    while ((r = waitpid(head, &hst, WNOHANG)) == 0 && now_s() - t0 < GRACE_S + 15)
        sleep_ms(50);
    CHECK_EQ(r, head);
    CHECK(WIFEXITED(hst) && WEXITSTATUS(hst) == 0);
    if (r == head)
        g_pids[0] = 0;
    printf("SIGTERM: the head exited after %.1f s (grace %d s)\n", now_s() - t0, GRACE_S);
    /* client hang-ups and the shutdown are not errors in the head's log */
    char *l = slurp(hlog, NULL);
    CHECK(l && !strstr(l, "error ["));
    if (l && strstr(l, "error ["))
        fprintf(stderr, "  head log has errors:\n%s\n", strstr(l, "error ["));
    free(l);
}

static void test_status_page(json_t *cluster) {
    char *s = NULL;
    int st = http("GET", "/", NULL, NULL, NULL, &s);
    CHECK_EQ(st, 200);
    CHECK(s && strstr(s, "<title>hearth cluster</title>"));
    free(s);
    char dom[300], shot[300], cwd[256];
    snprintf(dom, sizeof dom, "%s/dom.html", g_dir);
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, ".");
    snprintf(shot, sizeof shot, "--screenshot=%s/status.png", cwd);
    /* the browser check is part of the acceptance: a missing browser fails */
    CHECK_EQ(chromium_page("--dump-dom", dom), 0);
    char *d = slurp(dom, NULL);
    CHECK(d && strstr(d, "data-loaded=\"1\""));
    size_t i;
    json_t *dev;
    int n_dev = 0;
    json_array_foreach(json_object_get(cluster, "devices"), i, dev) {
        char row[160], cell[160];
        const char *name = json_string_value(json_object_get(dev, "name"));
        const char *layers = json_string_value(json_object_get(dev, "layers"));
        snprintf(row, sizeof row, "data-device=\"%s\"", name ? name : "?");
        snprintf(cell, sizeof cell, "<td class=\"num layers\">%s<", layers ? layers : "?");
        char *r = d ? strstr(d, row) : NULL;
        char *c = r ? strstr(r, cell) : NULL;
        char *next = r ? strstr(r + 1, "data-device=") : NULL;
        CHECK(r != NULL && c != NULL && (!next || c < next));
        if (!c)
            fprintf(stderr, "  device %s with layers %s not on the page\n", name, layers);
        n_dev++;
    }
    CHECK_EQ(n_dev, 2);
    /* links: /v1/cluster gives each device's measured link to its next one
     * (long since measured by now), and the page shows it as measured */
    int sc = 0;
    json_t *now = http_json("GET", "/v1/cluster", NULL, &sc);
    CHECK_EQ(sc, 200);
    json_array_foreach(json_object_get(now, "devices"), i, dev) {
        const char *name = json_string_value(json_object_get(dev, "name"));
        const char *to = json_string_value(json_object_get(dev, "link_to"));
        CHECK(json_is_false(json_object_get(dev, "link_assumed")));
        CHECK(to != NULL);
        CHECK(json_real_value(json_object_get(dev, "link_rtt_ms")) > 0);
        CHECK(json_real_value(json_object_get(dev, "link_bps")) > 0);
        char row[160], link[160];
        snprintf(row, sizeof row, "data-device=\"%s\"", name ? name : "?");
        snprintf(link, sizeof link, "link to %s: ", to ? to : "?");
        char *r = d ? strstr(d, row) : NULL;
        char *c = r ? strstr(r, link) : NULL;
        char *next = r ? strstr(r + 1, "data-device=") : NULL;
        CHECK(c != NULL && (!next || c < next));
        CHECK(c && strstr(c, "measured") && (!next || strstr(c, "measured") < next));
    }
    json_decref(now);
    free(d);
    /* the screenshot */
    CHECK_EQ(chromium_page(shot, NULL), 0);
    char png[300];
    snprintf(png, sizeof png, "%s/status.png", cwd);
    struct stat sb;
    CHECK(stat(png, &sb) == 0 && sb.st_size > 10000);
    printf("status page screenshot: %s\n", png);
}

static void test_cluster(void) {
    if (!harness_init("small-llama-q8_0.gguf", "cluster part"))
        return;
    int cport = free_port(), wport = free_port(), aport = free_port();
    CHECK(cport > 0 && wport > 0 && aport > 0);
    char listen[64], wlisten[64], api[64], hlog[300], wlog[300];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", cport);
    snprintf(g_ctrl, sizeof g_ctrl, "127.0.0.1:%d", cport);
    snprintf(wlisten, sizeof wlisten, "127.0.0.1:%d", wport);
    snprintf(api, sizeof api, "127.0.0.1:%d", aport);
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d", aport);
    snprintf(hlog, sizeof hlog, "%s/head.log", g_dir);
    snprintf(wlog, sizeof wlog, "%s/worker.log", g_dir);
    char rt[16], grace[16];
    snprintf(rt, sizeof rt, "%d", READ_TIMEOUT_S);
    snprintf(grace, sizeof grace, "%d", GRACE_S);
    char *head[] = {g_bin,
                    "agent",
                    "-m",
                    g_model,
                    "--listen",
                    listen,
                    "--name",
                    "head",
                    "--expect",
                    "1",
                    "--no-profile",
                    "--ctx",
                    "4096",
                    "--api-listen",
                    api,
                    "--api-key",
                    KEY,
                    "--api-queue",
                    "1",
                    "--parallel",
                    "2",
                    "--api-model-alias",
                    "tiny",
                    "--api-max-conns-per-ip",
                    "1200",
                    "--api-read-timeout",
                    rt,
                    "--api-grace",
                    grace,
                    NULL};
    spawn(head, NULL, hlog);
    /* up but not ready: 503 */
    int st = 0;
    char *s = NULL;
    double t0 = now_s();
    while ((st = http("GET", "/health", NULL, NULL, NULL, &s)) == 0 && now_s() - t0 < 20) {
        free(s);
        s = NULL;
        sleep_ms(100);
    }
    CHECK_EQ(st, 503);
    CHECK(s && strstr(s, "waiting for 1 worker (0 joined)"));
    if (!s || !strstr(s, "waiting for 1 worker"))
        fprintf(stderr, "  /health before the worker: %s\n", s ? s : "");
    free(s);
    st = http("POST", "/v1/completions", "{\"prompt\":\"x\"}", KEY, NULL, &s);
    expect_error(st, 503, s, "server_error", NULL);
    free(s);
    char *worker[] = {g_bin,    "agent",  "-m",     g_model, "--listen",     wlisten,
                      "--name", "worker", "--head", g_ctrl,  "--no-profile", NULL};
    spawn(worker, NULL, wlog);
    t0 = now_s();
    while ((st = http("GET", "/health", NULL, NULL, NULL, NULL)) != 200 && now_s() - t0 < 60)
        sleep_ms(100);
    CHECK_EQ(st, 200);
    if (st != 200) {
        char *l = slurp(hlog, NULL);
        fprintf(stderr, "head log:\n%s\n", l ? l : "");
        free(l);
        return;
    }
    /* models and the cluster view */
    json_t *j = http_json("GET", "/v1/models", NULL, &st);
    CHECK_EQ(st, 200);
    CHECK_STR(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
        "small-llama-q8_0");
    json_decref(j);
    j = http_json("GET", "/v1/models/small-llama-q8_0", NULL, &st);
    CHECK_EQ(st, 200);
    CHECK_STR(json_string_value(json_object_get(j, "id")), "small-llama-q8_0");
    CHECK_STR(json_string_value(json_object_get(j, "object")), "model");
    json_decref(j);
    j = http_json("GET", "/v1/models/tiny", NULL, &st); /* an alias */
    CHECK_EQ(st, 200);
    CHECK_STR(json_string_value(json_object_get(j, "id")), "small-llama-q8_0");
    json_decref(j);
    s = NULL;
    st = http("GET", "/v1/models/gpt-4o", NULL, KEY, NULL, &s);
    expect_error(st, 404, s, "invalid_request_error", "model");
    CHECK(s && strstr(s, "model_not_found"));
    free(s);
    json_t *cl = http_json("GET", "/v1/cluster", NULL, &st);
    CHECK_EQ(st, 200);
    CHECK(json_is_true(json_object_get(cl, "ready")));
    CHECK_EQ(json_array_size(json_object_get(cl, "devices")), 2);
    char outf[300], errf[300];
    snprintf(outf, sizeof outf, "%s/status.json", g_dir);
    snprintf(errf, sizeof errf, "%s/status.err", g_dir);
    char *stat_argv[] = {g_bin, "status", "--head", g_ctrl, "--json", NULL};
    pid_t pid = spawn(stat_argv, outf, errf);
    waitpid(pid, NULL, 0);
    g_npids--;
    char *sj = slurp(outf, NULL);
    json_t *cli = sj ? json_loads(sj, 0, NULL) : NULL;
    free(sj);
    CHECK(cli != NULL);
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(cli, "devices"), i, d) {
        json_t *o = json_array_get(json_object_get(cl, "devices"), i);
        CHECK_STR(json_string_value(json_object_get(o, "name")),
                  json_string_value(json_object_get(d, "name")));
        CHECK_STR(json_string_value(json_object_get(o, "layers")),
                  json_string_value(json_object_get(d, "layers")));
        CHECK_EQ(json_integer_value(json_object_get(o, "ring_pos")),
                 json_integer_value(json_object_get(d, "ring_pos")));
        CHECK(strcmp(json_string_value(json_object_get(o, "layers")), "-") != 0);
    }
    CHECK_EQ(json_array_size(json_object_get(cli, "devices")), 2);
    json_decref(cli);
    test_completions();
    test_errors_concurrent();
    test_cancel_and_queue();
    test_flood(aport);
    test_status_page(cl);
    json_decref(cl);
    /* the agents were fine throughout */
    CHECK_EQ(waitpid(g_pids[0], NULL, WNOHANG), 0);
    CHECK_EQ(waitpid(g_pids[1], NULL, WNOHANG), 0);
    test_sigterm(hlog);
}

int main(void) {
    test_cluster();
    return hr_check_finish("test_api_cluster");
}
