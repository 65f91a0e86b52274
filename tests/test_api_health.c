/* test_api_health.c - the head never says it serves when it cannot: a
 * 2-agent cluster (HR_BIN) whose forced windows (--windows 2,2) need both
 * devices. A worker killed with SIGKILL leaves no plan that fits: /health
 * turns 503 within 3 s naming the lost device, an API request and
 * `hearth prompt` fail at once (< 1 s) naming it, `hearth status` (table
 * and JSON) says not ready; the worker comes back: /health is 200 again and
 * requests succeed, with no restart of the head. Both agents start without
 * -t: `hearth status` (JSON and table) shows every online core in use. */
#include "api_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* Runs argv to the end, stdout to out, stderr to errf; the exit status (-1
 * when it did not exit), *secs the time it took. */
static int run_wait(char *const argv[], const char *out, const char *errf, double *secs) {
    double t0 = now_s();
    pid_t pid = spawn(argv, out, errf);
    int st = -1;
    waitpid(pid, &st, 0);
    g_npids--;
    if (secs)
        *secs = now_s() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Polls /health until it answers want (or timeout_s passes); the status. */
static int wait_health(int want, double timeout_s, char **body) {
    double t0 = now_s();
    int st = 0;
    for (;;) {
        char *s = NULL;
        st = http("GET", "/health", NULL, NULL, NULL, &s);
        if (st == want || now_s() - t0 > timeout_s) {
            if (body)
                *body = s;
            else
                free(s);
            return st;
        }
        free(s);
        sleep_ms(50);
    }
}

/* A max_tokens above the context is no error: the reply fills the context
 * (--ctx 512) and finishes with "length", or ends at EOS with "stop". */
static void test_max_tokens(void) {
    int st = 0;
    json_t *j = http_json("POST", "/v1/completions",
                          "{\"prompt\":\"Hi\",\"max_tokens\":100000,\"temperature\":0}", &st);
    CHECK_EQ(st, 200);
    json_t *u = json_object_get(j, "usage");
    const char *fin = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason"));
    long long total = json_integer_value(json_object_get(u, "total_tokens"));
    printf("max_tokens 100000: finish %s, %lld tokens in all\n", fin ? fin : "(none)", total);
    fflush(stdout);
    CHECK(fin && (strcmp(fin, "length") == 0 || strcmp(fin, "stop") == 0));
    if (fin && strcmp(fin, "length") == 0)
        CHECK_EQ(total, 512);
    else
        CHECK(total > 0 && total < 512);
    json_decref(j);
}

/* Past --api-max-conns-per-ip (4) from one address: 503 with Retry-After
 * and a reason, logged once; when they close, served again. */
static void test_per_address(int aport, const char *hlog) {
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)aport),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        CHECK_EQ(connect(fds[i], (struct sockaddr *)&sa, sizeof sa), 0);
    }
    sleep_ms(200); /* MHD has accepted them */
    for (int rep = 0; rep < 2; rep++) {
        char *s = NULL;
        int st = http("GET", "/health", NULL, NULL, "-i", &s);
        CHECK_EQ(st, 503);
        CHECK(s && strcasestr(s, "\r\nRetry-After: "));
        CHECK(s && strstr(s, "too many connections from 127.0.0.1 (at most 4 at once)"));
        if (st != 503)
            fprintf(stderr, "over the per-address limit: %d %s\n", st, s ? s : "");
        free(s);
    }
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    int st = 0;
    for (int t = 0; t < 40 && st != 200; t++) {
        sleep_ms(50);
        st = http("GET", "/health", NULL, NULL, NULL, NULL);
    }
    CHECK_EQ(st, 200);
    char *l = slurp(hlog, NULL);
    int n = 0;
    for (const char *q = l; q && (q = strstr(q, "more than 4 connections from 127.0.0.1")); q++)
        n++;
    CHECK_EQ(n, 1); /* two refused, logged once */
    free(l);
}

static void test_loss(void) {
    if (!harness_init("small-llama-q8_0.gguf", "health after a loss"))
        return;
    int cport = free_port(), wport = free_port(), aport = free_port();
    CHECK(cport > 0 && wport > 0 && aport > 0);
    char listen[64], wlisten[64], api[64], hlog[300], wlog[300], outf[300], errf[300];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", cport);
    snprintf(g_ctrl, sizeof g_ctrl, "127.0.0.1:%d", cport);
    snprintf(wlisten, sizeof wlisten, "127.0.0.1:%d", wport);
    snprintf(api, sizeof api, "127.0.0.1:%d", aport);
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d", aport);
    snprintf(hlog, sizeof hlog, "%s/head.log", g_dir);
    snprintf(wlog, sizeof wlog, "%s/worker.log", g_dir);
    snprintf(outf, sizeof outf, "%s/cmd.out", g_dir);
    snprintf(errf, sizeof errf, "%s/cmd.err", g_dir);
    char *head[] = {g_bin,
                    "agent",
                    "-m",
                    g_model,
                    "--listen",
                    listen,
                    "--name",
                    "head",
                    "--no-profile",
                    "--ctx",
                    "512",
                    "--expect",
                    "1",
                    "--windows",
                    "2,2",
                    "--api-listen",
                    api,
                    "--api-key",
                    KEY,
                    "--api-max-conns-per-ip",
                    "4",
                    NULL};
    char *worker[] = {g_bin,    "agent",      "-m",     g_model, "--listen",     wlisten,
                      "--name", "lostworker", "--head", g_ctrl,  "--no-profile", NULL};
    spawn(head, NULL, hlog);
    pid_t w = spawn(worker, NULL, wlog);
    int st = wait_health(200, 60, NULL);
    CHECK_EQ(st, 200);
    if (st != 200) {
        char *l = slurp(hlog, NULL);
        fprintf(stderr, "head log:\n%s\n", l ? l : "");
        free(l);
        return;
    }
    /* started without -t: every device computes with every online core */
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    char *sj[] = {g_bin, "status", "--head", g_ctrl, "--json", NULL};
    CHECK_EQ(run_wait(sj, outf, errf, NULL), 0);
    char *o = slurp(outf, NULL);
    json_t *j = o ? json_loads(o, 0, NULL) : NULL;
    free(o);
    size_t di;
    json_t *d;
    CHECK_EQ(json_array_size(json_object_get(j, "devices")), 2);
    json_array_foreach(json_object_get(j, "devices"), di, d) {
        CHECK_EQ(json_integer_value(json_object_get(d, "threads")), nproc);
    }
    json_decref(j);
    char *sa[] = {g_bin, "status", "--head", g_ctrl, NULL};
    CHECK_EQ(run_wait(sa, outf, errf, NULL), 0);
    o = slurp(outf, NULL);
    char want[64];
    snprintf(want, sizeof want, "%ld threads in use", nproc);
    CHECK(o && strstr(o, want));
    free(o);
    const char *req = "{\"prompt\":\"Hi\",\"max_tokens\":4}";
    char *s = NULL;
    st = http("POST", "/v1/completions", req, KEY, NULL, &s);
    CHECK_EQ(st, 200);
    free(s);
    test_max_tokens();
    test_per_address(aport, hlog);

    /* the worker dies: no plan fits the head alone (the windows need two) */
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
    for (int i = 0; i < g_npids; i++)
        if (g_pids[i] == w)
            g_pids[i] = 0;
    double t0 = now_s();
    s = NULL;
    st = wait_health(503, 10, &s);
    double t_health = now_s() - t0;
    printf("loss: /health %d after %.2f s: %s\n", st, t_health, s ? s : "");
    fflush(stdout); /* before the next fork */
    CHECK_EQ(st, 503);
    CHECK(t_health < 3.0);
    CHECK(s && strstr(s, "lostworker"));
    CHECK(s && strstr(s, "\"status\":\"unavailable\"")); /* not "loading": it failed */
    free(s);
    s = NULL;
    t0 = now_s();
    st = http("POST", "/v1/completions", req, KEY, NULL, &s);
    double t_req = now_s() - t0;
    printf("loss: a request failed with %d after %.3f s\n", st, t_req);
    fflush(stdout);
    expect_error(st, 503, s, "server_error", NULL);
    CHECK(t_req < 1.0);
    CHECK(s && strstr(s, "lostworker"));
    free(s);
    /* `hearth prompt` fails at once too, naming the device */
    double t_cli = 0;
    char *pa[] = {g_bin, "prompt", "--head", g_ctrl, "-n", "4", "Hi", NULL};
    CHECK(run_wait(pa, outf, errf, &t_cli) != 0);
    CHECK(t_cli < 1.0);
    char *e = slurp(errf, NULL);
    CHECK(e && strstr(e, "lostworker"));
    free(e);
    /* `hearth status` agrees: not ready, and why */
    CHECK_EQ(run_wait(sa, outf, errf, NULL), 0);
    o = slurp(outf, NULL);
    CHECK(o && strstr(o, "NOT READY") && strstr(o, "lostworker"));
    CHECK(o && !strstr(o, "[-1]")); /* a device out of the ring has no position */
    if (o && strstr(o, "[-1]"))
        fprintf(stderr, "status after the loss:\n%s\n", o);
    free(o);
    CHECK_EQ(run_wait(sj, outf, errf, NULL), 0);
    o = slurp(outf, NULL);
    j = o ? json_loads(o, 0, NULL) : NULL;
    free(o);
    CHECK(json_is_false(json_object_get(j, "ready")));
    const char *perr = json_string_value(json_object_get(j, "error"));
    CHECK(perr && strstr(perr, "lostworker"));
    json_decref(j);

    /* the worker comes back: serving resumes by itself */
    spawn(worker, NULL, wlog);
    t0 = now_s();
    st = wait_health(200, 30, NULL);
    printf("loss: /health %d %.2f s after the worker came back\n", st, now_s() - t0);
    CHECK_EQ(st, 200);
    s = NULL;
    st = http("POST", "/v1/completions", req, KEY, NULL, &s);
    CHECK_EQ(st, 200);
    j = s ? json_loads(s, 0, NULL) : NULL;
    CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")) ==
          4);
    json_decref(j);
    free(s);
}

int main(void) {
    test_loss();
    return hr_check_finish("test_api_health");
}
