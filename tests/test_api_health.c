/* test_api_health.c - the head never says it serves when it cannot: a
 * 2-agent cluster (HR_BIN) whose forced windows (--windows 2,2) need both
 * devices. A worker killed with SIGKILL leaves no plan that fits: /health
 * turns 503 within 3 s naming the lost device, an API request and
 * `hearth prompt` fail at once (< 1 s) naming it, `hearth status` (table
 * and JSON) says not ready; the worker comes back: /health is 200 again and
 * requests succeed, with no restart of the head. Both agents start without
 * -t: `hearth status` (JSON and table) shows every online core in use.
 * Then a head that runs no layers (--windows 0,4) and a worker, each with a
 * saved profile: `hearth status` says the head embeds and samples, with
 * its tokens, and the status page (headless Chromium) shows each device's
 * OS, cores, threads in use, disk rate and GPU with its measured rate, the
 * values /v1/cluster has from the profiles. */
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

/* A saved profile for an agent (--profile-file DIR/NAME.json, its path into
 * file): its OS, cores, disk rate and a GPU with its measured matvec rate,
 * figures no machine measures, so that what the head shows of them can only
 * come from this profile. */
static int profile_file(const char *name, int cores, double disk_mbs, double gpu_gbs, char *file,
                        size_t cap) {
    hr_prof_device *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    fake_device(d, name, 1.0, disk_mbs, 4ll << 30);
    snprintf(d->os.name, sizeof d->os.name, "OS of %s", name);
    d->topo.n_cores = d->topo.n_pus = cores;
    d->topo.n_numa = 1;
    d->n_vk = 1;
    d->vk_chosen = 0;
    hr_prof_gpu *g = &d->vk[0];
    snprintf(g->name, sizeof g->name, "GPU of %s", name);
    snprintf(g->kind, sizeof g->kind, "discrete");
    g->vram_bytes = 1ll << 30;
    g->h2d_gbs = g->d2h_gbs = 10.0;
    g->submit_us = 1.0;
    for (int i = 0; i < d->n_rates && i < HR_PROF_MAX_TYPES; i++)
        g->rates[g->n_rates++] = (hr_prof_gpu_rate){.type = d->rates[i].type,
                                                    .matvec_gbs = gpu_gbs,
                                                    .matvec_call_us = 0.01,
                                                    .matmat_gflops = 1e3};
    snprintf(file, cap, "%s/%s.json", g_dir, name);
    int rc = write_profile(d, file);
    free(d);
    return rc;
}

/* The device row named name in a dumped status page (its <tr> to its
 * </tr>), into row; false when the page has no such row. */
static bool page_row(const char *dom, const char *name, char *row, size_t cap) {
    char mark[160];
    snprintf(mark, sizeof mark, "data-device=\"%s\"", name);
    const char *r = dom ? strstr(dom, mark) : NULL;
    if (!r)
        return false;
    const char *end = strstr(r, "</tr>");
    size_t n = end ? (size_t)(end - r) : strlen(r);
    snprintf(row, cap, "%.*s", (int)(n < cap ? n : cap - 1), r);
    return true;
}

/* A head that runs no layers (--windows 0,4: it embeds and samples) and a
 * worker, each with a saved profile and its own -t:
 *  - after a completion, `hearth status` says the head embeds and samples
 *    with the tokens it counted (not "measured n/a (no token yet)");
 *  - /v1/cluster carries each device's profile as the agents sent it, and
 *    the status page (headless Chromium) shows it in the device's row:
 *    OS, cores, threads in use, disk rate, GPU with its measured rate. */
static void test_profiles(void) {
    int cport = free_port(), wport = free_port(), aport = free_port();
    CHECK(cport > 0 && wport > 0 && aport > 0);
    char listen[64], wlisten[64], api[64], hlog[300], wlog[300], outf[300], errf[300];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", cport);
    snprintf(g_ctrl, sizeof g_ctrl, "127.0.0.1:%d", cport);
    snprintf(wlisten, sizeof wlisten, "127.0.0.1:%d", wport);
    snprintf(api, sizeof api, "127.0.0.1:%d", aport);
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d", aport);
    snprintf(hlog, sizeof hlog, "%s/head-profiles.log", g_dir);
    snprintf(wlog, sizeof wlog, "%s/worker-profiles.log", g_dir);
    snprintf(outf, sizeof outf, "%s/cmd.out", g_dir);
    snprintf(errf, sizeof errf, "%s/cmd.err", g_dir);
    /* name, cores, -t, disk MB/s, GPU GB/s: whole numbers, as the page
     * rounds them */
    static const struct {
        const char *name;
        int cores, threads;
        double disk_mbs, gpu_gbs;
    } devs[2] = {{"head", 3, 1, 456, 123}, {"profiled", 5, 2, 789, 321}};
    char files[2][300], threads[2][8];
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(profile_file(devs[i].name, devs[i].cores, devs[i].disk_mbs, devs[i].gpu_gbs,
                              files[i], sizeof files[i]),
                 0);
        snprintf(threads[i], sizeof threads[i], "%d", devs[i].threads);
    }
    char *head[] = {g_bin,
                    "agent",
                    "-m",
                    g_model,
                    "--listen",
                    listen,
                    "--name",
                    "head",
                    "--ctx",
                    "512",
                    "--expect",
                    "1",
                    "--gpu",
                    "none",
                    "-t",
                    threads[0],
                    "--profile-file",
                    files[0],
                    "--api-listen",
                    api,
                    "--api-key",
                    KEY,
                    "--windows",
                    "0,4",
                    NULL};
    char *worker[] = {g_bin,    "agent",  "-m",       g_model,    "--listen",
                      wlisten,  "--name", "profiled", "--head",   g_ctrl,
                      "--gpu",  "none",   "-t",       threads[1], "--profile-file",
                      files[1], NULL};
    spawn(head, NULL, hlog);
    spawn(worker, NULL, wlog);
    int st = wait_health(200, 60, NULL);
    CHECK_EQ(st, 200);
    if (st != 200) {
        char *l = slurp(hlog, NULL);
        fprintf(stderr, "head log:\n%s\n", l ? l : "");
        free(l);
        return;
    }
    json_t *j = http_json("POST", "/v1/completions",
                          "{\"prompt\":\"Hi\",\"max_tokens\":8,\"temperature\":0}", &st);
    CHECK_EQ(st, 200);
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")),
             8);
    json_decref(j);

    /* the head with no layers: it embeds and samples, with its tokens */
    char *sa[] = {g_bin, "status", "--head", g_ctrl, NULL};
    CHECK_EQ(run_wait(sa, outf, errf, NULL), 0);
    char *o = slurp(outf, NULL);
    /* the head's block: from its line to the next device's */
    const char *hb = o ? strstr(o, "] head ") : NULL;
    while (hb && hb > o && hb[-1] != '\n')
        hb--;
    const char *he = hb ? strstr(hb, "\n  [") : NULL;
    char block[2048] = "";
    if (hb)
        snprintf(block, sizeof block, "%.*s", (int)(he ? he - hb : (long)strlen(hb)), hb);
    static const char embeds[] = "no layers (embedding and output head only); tokens ";
    const char *line = strstr(block, embeds);
    long long tokens = line ? atoll(line + strlen(embeds)) : 0;
    printf("status of a head with no layers:\n%s\n", block);
    fflush(stdout);
    CHECK(line != NULL);
    CHECK_INT(tokens, >=, 8); /* the 8 it sampled, at least */
    CHECK(!strstr(block, "no token yet"));
    CHECK(!strstr(block, "measured n/a"));
    if (!line)
        fprintf(stderr, "hearth status:\n%s\n", o ? o : "(none)");
    free(o);

    /* each device's profile: in /v1/cluster as sent, and on the page */
    json_t *cl = http_json("GET", "/v1/cluster", NULL, &st);
    CHECK_EQ(st, 200);
    CHECK_EQ(json_array_size(json_object_get(cl, "devices")), 2);
    char dom[300];
    snprintf(dom, sizeof dom, "%s/dom-profiles.html", g_dir);
    CHECK_EQ(chromium_page("--dump-dom", dom), 0);
    char *page = slurp(dom, NULL);
    CHECK(page && strstr(page, "data-loaded=\"1\""));
    for (int i = 0; i < 2; i++) {
        json_t *d = NULL, *x;
        size_t k;
        json_array_foreach(json_object_get(cl, "devices"), k, x) {
            const char *nm = json_string_value(json_object_get(x, "name"));
            if (nm && strcmp(nm, devs[i].name) == 0)
                d = x;
        }
        CHECK(d != NULL);
        json_t *info = json_object_get(d, "info"), *gpu = json_object_get(d, "gpu");
        const char *os = json_string_value(json_object_get(info, "os"));
        const char *gname = json_string_value(json_object_get(gpu, "name"));
        long long cores = json_integer_value(json_object_get(info, "cores"));
        long long thr = json_integer_value(json_object_get(d, "threads"));
        double disk = json_number_value(json_object_get(info, "disk_mbs"));
        double gbs = json_number_value(json_object_get(gpu, "matvec_gbs"));
        char want_os[160], want_gpu[160];
        snprintf(want_os, sizeof want_os, "OS of %s", devs[i].name);
        snprintf(want_gpu, sizeof want_gpu, "GPU of %s", devs[i].name);
        CHECK_STR(os, want_os);
        CHECK_STR(gname, want_gpu);
        CHECK_EQ(cores, devs[i].cores);
        CHECK_EQ(thr, devs[i].threads);
        CHECK_NEAR(disk, devs[i].disk_mbs, 0.5);
        CHECK_NEAR(gbs, devs[i].gpu_gbs, 0.5);
        /* the row shows those figures (the page's words, the status' values) */
        char row[8192] = "", cpu[300], gtxt[300];
        CHECK(page_row(page, devs[i].name, row, sizeof row));
        snprintf(cpu, sizeof cpu, "%s, %lld cores, 1 NUMA, %lld threads in use, disk %.0f MB/s",
                 os ? os : "?", cores, thr, disk);
        snprintf(gtxt, sizeof gtxt, "GPU %s, %.0f GB/s measured", gname ? gname : "?", gbs);
        printf("page, %s: '%s' %s; '%s' %s\n", devs[i].name, cpu,
               strstr(row, cpu) ? "shown" : "MISSING", gtxt,
               strstr(row, gtxt) ? "shown" : "MISSING");
        CHECK(strstr(row, cpu) != NULL);
        CHECK(strstr(row, gtxt) != NULL);
        if (!strstr(row, cpu) || !strstr(row, gtxt))
            fprintf(stderr, "  row of %s: %.2000s\n", devs[i].name, row);
    }
    free(page);
    json_decref(cl);
}

int main(void) {
    if (!harness_init("small-llama-q8_0.gguf", "health and status"))
        return hr_check_finish("test_api_health");
    test_loss();
    stop_all(); /* the next part starts its own agents */
    test_profiles();
    return hr_check_finish("test_api_health");
}
