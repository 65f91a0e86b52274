/* api_harness.h - what the HTTP API's cluster tests share (test_api_cluster.c,
 * test_api_health.c, test_api_serve.c): hearth agents started from HR_BIN
 * as child processes (killed with the test), free loopback ports, files,
 * curl requests against the head's API with OpenAI error bodies checked,
 * and the status page in headless Chromium (time helpers from harness.h). One test executable
 * includes it once; everything is static. */
#ifndef HR_TESTS_API_HARNESS_H
#define HR_TESTS_API_HARNESS_H

#include "harness.h"

#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEY "test-key-123"

static char g_dir[256], g_bin[512], g_model[512], g_url[128], g_ctrl[64];
static pid_t g_pids[8];
static int g_npids;

static inline pid_t spawn(char *const argv[], const char *out, const char *errf) {
    fflush(stdout); /* nothing buffered is written twice (a child's freopen flushes) */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the test */
        if (out && !freopen(out, "w", stdout))
            _exit(126);
        if (errf && !freopen(errf, "w", stderr))
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (pid > 0 && g_npids < 8)
        g_pids[g_npids++] = pid;
    return pid;
}

static inline void stop_pid(pid_t pid) {
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Stops every agent started (the last first). */
static inline void stop_all(void) {
    for (int i = g_npids - 1; i >= 0; i--)
        stop_pid(g_pids[i]);
    g_npids = 0;
}

static inline void teardown(void) {
    stop_all();
    if (g_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", g_dir);
    }
}

static inline void on_signal(int sig) {
    (void)sig;
    for (int i = 0; i < g_npids; i++)
        kill(g_pids[i], SIGKILL);
    _exit(1);
}

/* A free loopback port p with p + 1 free too (agents use port + 1 for data). */
static inline int free_port(void) {
    for (int tries = 0; tries < 50; tries++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
        socklen_t l = sizeof a;
        if (bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &l)) {
            close(s);
            continue;
        }
        int p = ntohs(a.sin_port);
        int s2 = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in b = a;
        b.sin_port = htons((uint16_t)(p + 1));
        int ok = p < 65535 && bind(s2, (struct sockaddr *)&b, sizeof b) == 0;
        close(s2);
        close(s);
        if (ok)
            return p;
    }
    return -1;
}

static inline void write_file(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(s, 1, n, f);
        fclose(f);
    }
}

/* curl METHOD path [body] -> status (0 = no answer); *out = body (malloc'ed). extra is added to
 * the command line as is (trusted, from this file). */
static inline int http(const char *method, const char *path, const char *body, const char *key,
                       const char *extra, char **out) {
    char bodyf[300], outf[300], cmd[2048];
    snprintf(bodyf, sizeof bodyf, "%s/req.json", g_dir);
    snprintf(outf, sizeof outf, "%s/resp.out", g_dir);
    unlink(outf);
    if (body)
        write_file(bodyf, body, strlen(body));
    snprintf(cmd, sizeof cmd,
             "curl -s -o '%s' -w '%%{http_code}' --max-time 60 -X %s %s%s%s %s %s%s%s '%s%s'", outf,
             method, key ? "-H 'Authorization: Bearer " : "", key ? key : "", key ? "'" : "",
             extra ? extra : "", body ? "-H 'Content-Type: application/json' --data-binary @'" : "",
             body ? bodyf : "", body ? "'" : "", g_url, path);
    FILE *p = popen(cmd, "r");
    char code[16] = "";
    if (p) {
        if (!fgets(code, sizeof code, p))
            code[0] = 0;
        pclose(p);
    }
    if (out)
        *out = slurp(outf, NULL);
    return atoi(code);
}

static inline json_t *http_json(const char *method, const char *path, const char *body,
                                int *status) {
    char *s = NULL;
    *status = http(method, path, body, KEY, NULL, &s);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    if (!j)
        fprintf(stderr, "  %s %s -> %d, not JSON: %.300s\n", method, path, *status, s ? s : "");
    free(s);
    return j;
}

/* Checks an OpenAI error body with status. */
static inline void expect_error(int status, int want, const char *s, const char *type,
                                const char *param) {
    CHECK_EQ(status, want);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    const char *t = NULL, *msg = NULL;
    json_t *pj = NULL;
    int rc =
        j ? json_unpack(j, "{s:{s:s,s:s,s:o}}", "error", "type", &t, "message", &msg, "param", &pj)
          : -1;
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        CHECK_STR(t, type);
        if (param)
            CHECK_STR(json_string_value(pj), param);
    } else {
        fprintf(stderr, "  not an error body: %.300s\n", s ? s : "(none)");
    }
    json_decref(j);
}

/* The status page at g_url (the API key in its #key=) in headless Chromium,
 * with nothing but the head reachable (every other host fails to resolve):
 * arg is "--dump-dom" (the DOM once its scripts ran, into out) or
 * "--screenshot=PATH". Chromium's exit status; -1 when there is no browser
 * (a failure: deploy/install-deps.sh installs Debian's chromium). */
static inline int chromium_page(const char *arg, const char *out) {
    const char *chromium = NULL;
    static const char *const cands[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                                        "/usr/bin/google-chrome"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        if (access(cands[i], X_OK) == 0)
            chromium = cands[i];
    if (!chromium) {
        fprintf(stderr, "no chromium found: run deploy/install-deps.sh\n");
        return -1;
    }
    char url[256], prof[300], errf[300];
    snprintf(url, sizeof url, "%s/#key=%s", g_url, KEY);
    snprintf(prof, sizeof prof, "--user-data-dir=%s/chromium", g_dir);
    snprintf(errf, sizeof errf, "%s/chromium.err", g_dir);
    const char *argv[] = {chromium,
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--disable-dev-shm-usage",
                          "--disable-quic",
                          "--no-first-run",
                          "--disable-background-networking",
                          "--disable-component-update",
                          "--disable-sync",
                          "--disable-extensions",
                          "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                          "--window-size=1280,760",
                          "--virtual-time-budget=4000",
                          prof,
                          arg,
                          url,
                          NULL};
    pid_t pid = spawn((char *const *)argv, out, errf);
    int st = -1;
    waitpid(pid, &st, 0);
    g_npids--;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The test's folder, HR_BIN and the shared model (models/NAME); registers
 * the clean-up. false (a part skipped or failed) when something is missing. */
static inline bool harness_init(const char *model, const char *tag) {
    const char *bin = getenv("HR_BIN");
    char path[512], rel[128];
    snprintf(rel, sizeof rel, "models/%s", model);
    hr_shared_path(rel, path, sizeof path);
    if (!bin || access(bin, X_OK) != 0 || access(path, R_OK) != 0 ||
        system("curl --version >/dev/null 2>&1") != 0) {
        char why[200];
        snprintf(why, sizeof why, "%s: needs HR_BIN, the shared %s and curl", tag, model);
        hr_check_skip(why);
        return false;
    }
    snprintf(g_bin, sizeof g_bin, "%s", bin);
    snprintf(g_model, sizeof g_model, "%s", path);
    snprintf(g_dir, sizeof g_dir, "/tmp/hr-test-api-XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0);
        g_dir[0] = 0;
        return false;
    }
    atexit(teardown);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    return true;
}

#endif
