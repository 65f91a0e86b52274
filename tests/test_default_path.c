/* test_default_path.c - the README's "A cluster at home in three steps", end
 * to end, with nothing forced: separate `hearth agent` processes on
 * loopback, a head with the model (`-m MODEL --listen ADDR`) and a worker
 * with no model file and no --head that finds the head by its beacon and
 * pairs by the join token the head printed (each with its own key folder
 * and cache, as on two machines). Profiles are measured, links measured,
 * and the head plans by itself (no --windows, --k or --no-profile).
 *
 * Two agents on one machine share its cores, so a hop can only add time:
 * with the whole model in memory the planner rightly leaves the worker out.
 * The case where a household cluster pays is a head that cannot hold the
 * model; here the head offers 64 MiB (`--mem-limit 0.0625`) for a generated
 * 92 MiB model (8 layers of 6 MiB, the shared fixture's tokenizer), so that
 * keeping layers on the head means streaming them from disk every token and
 * the plan puts layers on the worker, which fetches them from the head.
 *
 * Checks: the join token printed equals `hearth key token`; the head's
 * status (`hearth status --json`) shows 2 devices in the ring, both with
 * profiles and measured links, the worker with layers; `hearth prompt
 * --temp 0` answers what `hearth run --temp 0` answers on the same file.
 * Every agent is killed at the end, also on failure. */
#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define N_GEN 24
#define PROMPT "Once upon a time"
#define MEM_LIMIT "0.0625" /* GiB the head offers for weights */
#define MAX_PIDS 4

static char g_dir[128];
static pid_t g_pids[MAX_PIDS];
static int g_npids;

/* Starts argv with stdout and stderr into log (appended), HEARTH_CACHE_DIR
 * = cache when given; the child dies with the test. */
static pid_t spawn(const char *const argv[], const char *log, const char *cache) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        close(fd);
        if (cache)
            setenv("HEARTH_CACHE_DIR", cache, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid > 0 && g_npids < MAX_PIDS)
        g_pids[g_npids++] = pid;
    return pid;
}

/* SIGTERM, then SIGKILL after 5 s. */
static void stop_pid(pid_t pid) {
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) != 0)
            return;
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Stops every agent (the last started first) and removes the folder. */
static void cleanup(void) {
    for (int i = g_npids - 1; i >= 0; i--)
        stop_pid(g_pids[i]);
    g_npids = 0;
    tmp_dir_remove(g_dir);
    g_dir[0] = 0;
}

/* Stopped from outside: the agents killed and the folder removed with
 * async-signal-safe calls only, then the signal's own end. */
static void on_signal(int sig) {
    for (int i = 0; i < g_npids; i++)
        kill(g_pids[i], SIGKILL);
    for (int i = 0; i < g_npids; i++)
        waitpid(g_pids[i], NULL, 0);
    pid_t rm = g_dir[0] ? fork() : -1;
    if (rm == 0) {
        execl("/bin/rm", "rm", "-rf", g_dir, (char *)NULL);
        _exit(127);
    }
    if (rm > 0)
        waitpid(rm, NULL, 0);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Runs argv to completion within timeout_s, stdout into out, stderr into
 * errf; its exit status, -1 when it did not finish. */
static int run_cmd(const char *const argv[], const char *out, const char *errf, double timeout_s) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (!freopen(out, "w", stdout) || !freopen(errf, "w", stderr))
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    double t0 = now_s();
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fprintf(stderr, "%s %s: no end after %.0f s\n", argv[0], argv[1], timeout_s);
            return -1;
        }
        sleep_ms(20);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The last bytes of a log on stderr (what the agents said, on a failure). */
static void show_tail(const char *path, size_t bytes) {
    char *s = slurp(path, NULL);
    size_t n = s ? strlen(s) : 0;
    fprintf(stderr, "--- %s (last %zu bytes)\n%s\n", path, bytes,
            s ? s + (n > bytes ? n - bytes : 0) : "(none)");
    free(s);
}

/* The join token from the head's line "new agents pair with: hearth agent
 * --join 'TOKEN'", waiting up to timeout_s; false when none came. */
static bool wait_token(const char *log, char *tok, size_t cap, double timeout_s) {
    const char *mark = "pair with: hearth agent --join '";
    double t0 = now_s();
    do {
        char *s = slurp(log, NULL);
        const char *p = s ? strstr(s, mark) : NULL;
        const char *e = p ? strchr(p + strlen(mark), '\'') : NULL;
        if (e) {
            p += strlen(mark);
            snprintf(tok, cap, "%.*s", (int)(e - p), p);
            free(s);
            return tok[0] != 0;
        }
        free(s);
        sleep_ms(100);
    } while (now_s() - t0 < timeout_s);
    return false;
}

typedef struct {
    int n_dev, n_ring, n_ready, worker_w, head_w, n_layer, k;
    bool profiles, links_measured;
    double fetch_done, fetch_total; /* the worker's model bytes from the head */
    char split[256], source[512];
} ring_view;

/* The head's status as `hearth status --json` prints it, summed up; false
 * when no status came or it is not JSON. */
static bool read_status(const char *bin, const char *head, const char *keys, ring_view *v) {
    char out[256], errf[256];
    snprintf(out, sizeof out, "%s/status.json", g_dir);
    snprintf(errf, sizeof errf, "%s/status.err", g_dir);
    const char *argv[] = {bin,  "status", "--head",    head, "--key-dir",
                          keys, "--json", "--timeout", "5",  NULL};
    memset(v, 0, sizeof *v);
    if (run_cmd(argv, out, errf, 20) != 0)
        return false;
    char *s = slurp(out, NULL);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    if (!j)
        return false;
    bool ready = json_is_true(json_object_get(j, "ready"));
    v->n_layer = (int)json_integer_value(json_object_get(j, "n_layer"));
    v->k = (int)json_integer_value(json_object_get(j, "k"));
    const char *src = json_string_value(json_object_get(j, "plan_source"));
    snprintf(v->source, sizeof v->source, "%s", src ? src : "");
    v->profiles = v->links_measured = true;
    json_t *devs = json_object_get(j, "devices"), *d;
    size_t i;
    json_array_foreach(devs, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        const char *layers = json_string_value(json_object_get(d, "layers"));
        bool is_head = json_is_true(json_object_get(d, "head"));
        int pos = (int)json_integer_value(json_object_get(d, "ring_pos"));
        int w = 0; /* its layers: its windows of every round */
        json_t *wv;
        size_t r;
        json_array_foreach(json_object_get(d, "windows"), r, wv) w += (int)json_integer_value(wv);
        v->n_dev++;
        v->n_ready += ready && json_is_true(json_object_get(d, "ready"));
        v->profiles &= json_is_true(json_object_get(d, "has_profile"));
        if (is_head) {
            v->head_w = w;
        } else {
            v->worker_w += w;
            v->fetch_done += json_number_value(json_object_get(d, "fetch_done_bytes"));
            v->fetch_total += json_number_value(json_object_get(d, "fetch_total_bytes"));
        }
        if (pos >= 0 && (is_head || w > 0)) {
            v->n_ring++;
            /* a ring of one has no link to measure */
            v->links_measured &= json_is_false(json_object_get(d, "link_assumed"));
        }
        size_t len = strlen(v->split);
        snprintf(v->split + len, sizeof v->split - len, "%s%s (%s): %d layers [%s]",
                 len ? ", " : "", name ? name : "?", is_head ? "head" : "worker", w,
                 layers ? layers : "?");
    }
    json_decref(j);
    if (v->n_ring < 2)
        v->links_measured = false;
    return true;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const char *bin = test_bin();
    char vocab[512];
    hr_shared_path("models/small-llama-q4_0.gguf", vocab, sizeof vocab);
    if (!bin || access(vocab, R_OK) != 0) {
        hr_check_skip("default path: needs HR_BIN and the shared small-llama-q4_0.gguf");
        return hr_check_finish("default_path");
    }
    if (tmp_dir_make(g_dir, sizeof g_dir, "default-path")) {
        CHECK(0);
        return hr_check_finish("default_path");
    }
    atexit(cleanup);
    char model[256], kh[256], kw[256], ch[256], cw[256], cc[256], f_h[256], f_w[256];
    char f_ref[256], f_out[256], f_err[256], f_tok[256];
    snprintf(model, sizeof model, "%s/model.gguf", g_dir);
    snprintf(kh, sizeof kh, "%s/keys-head", g_dir);
    snprintf(kw, sizeof kw, "%s/keys-worker", g_dir);
    snprintf(ch, sizeof ch, "%s/cache-head", g_dir);
    snprintf(cw, sizeof cw, "%s/cache-worker", g_dir);
    snprintf(cc, sizeof cc, "%s/cache-client", g_dir);
    snprintf(f_h, sizeof f_h, "%s/head.log", g_dir);
    snprintf(f_w, sizeof f_w, "%s/worker.log", g_dir);
    snprintf(f_ref, sizeof f_ref, "%s/run.txt", g_dir);
    snprintf(f_out, sizeof f_out, "%s/prompt.txt", g_dir);
    snprintf(f_err, sizeof f_err, "%s/client.err", g_dir);
    snprintf(f_tok, sizeof f_tok, "%s/token.txt", g_dir);
    setenv("HEARTH_CACHE_DIR", cc, 1); /* the clients' (nothing of $HOME's) */
    double t_start = now_s();

    /* the model: 8 layers of 6 MiB, 92 MiB in all, a real tokenizer */
    const char *mk[] = {bin,          "mkmodel", "-o",       model,  "--shape", "small",
                        "--embd",     "1024",    "--layers", "8",    "--heads", "16",
                        "--heads-kv", "4",       "--ffn",    "2816", "--type",  "q4_0",
                        "--vocab",    vocab,     "--seed",   "3",    NULL};
    CHECK_EQ(run_cmd(mk, f_out, f_err, 120), 0);
    if (access(model, R_OK) != 0) {
        show_tail(f_err, 2000);
        return hr_check_finish("default_path");
    }
    printf("model made in %.1f s\n", now_s() - t_start);
    double t_h = now_s();

    /* step 2: the head, on free loopback ports (data on port + 1) */
    int base = free_port_block(16);
    char head[32], wlisten[32], disc[16], cluster[48];
    snprintf(head, sizeof head, "127.0.0.1:%d", base);
    snprintf(wlisten, sizeof wlisten, "127.0.0.1:%d", base + 10);
    snprintf(disc, sizeof disc, "%d", base + 7);
    snprintf(cluster, sizeof cluster, "dp-%d", (int)getpid());
    const char *ha[] = {bin,           "agent",   "-m",        model,   "--listen",         head,
                        "--mem-limit", MEM_LIMIT, "--cluster", cluster, "--discovery-port", disc,
                        "--key-dir",   kh,        NULL};
    CHECK(spawn(ha, f_h, ch) > 0);
    char tok[512] = "", tok2[600] = "";
    bool have_tok = wait_token(f_h, tok, sizeof tok, 90);
    CHECK(have_tok);
    if (!have_tok) {
        show_tail(f_h, 3000);
        return hr_check_finish("default_path");
    }
    /* the same token as `hearth key token` on the head's machine */
    const char *kt[] = {bin, "key", "token", "--key-dir", kh, NULL};
    CHECK_EQ(run_cmd(kt, f_tok, f_err, 20), 0);
    char *t = slurp(f_tok, NULL);
    if (t)
        snprintf(tok2, sizeof tok2, "%s", t);
    free(t);
    tok2[strcspn(tok2, "\r\n")] = 0;
    CHECK_STR(tok2, tok);
    printf("head %s up after %.1f s (profiled; cluster '%s', beacons on UDP %s)\n", head,
           now_s() - t_h, cluster, disc);

    /* step 3: a worker with no model and no --head: discovery and the token */
    const char *wa[] = {bin,         "agent", "--listen",         wlisten, "--join",    tok,
                        "--cluster", cluster, "--discovery-port", disc,    "--key-dir", kw,
                        NULL};
    double t_w = now_s();
    pid_t wpid = spawn(wa, f_w, cw);
    CHECK(wpid > 0);

    /* the head plans the two by itself: wait for a ready plan with both */
    ring_view v = {0};
    bool formed = false;
    while (!formed && now_s() - t_w < 120) {
        formed = read_status(bin, head, kh, &v) && v.n_dev >= 2 && v.n_ready == v.n_dev &&
                 v.n_ring >= 2 && v.links_measured;
        if (!formed)
            sleep_ms(300);
    }
    printf("plan with the worker %.1f s after it started: %s\n  %s\n  worker fetched "
           "%.0f of %.0f model bytes from the head\n",
           now_s() - t_w, v.source, v.split, v.fetch_done, v.fetch_total);
    CHECK(formed);
    CHECK_EQ(v.n_dev, 2);
    CHECK_EQ(v.n_ring, 2);
    CHECK(v.worker_w > 0);
    CHECK_EQ(v.head_w + v.worker_w, v.n_layer);
    CHECK_EQ(v.n_layer, 8);
    CHECK(v.profiles);
    CHECK(v.links_measured);
    /* it had no model file: its layers came from the head (the total may
     * still count windows of an earlier plan it no longer needs) */
    CHECK(v.fetch_done > 0 && v.fetch_done <= v.fetch_total);
    CHECK(strstr(v.source, "scheduler") != NULL); /* planned, not forced or split evenly */
    if (!formed) {
        show_tail(f_h, 4000);
        show_tail(f_w, 4000);
    }

    /* the answer: `hearth prompt --temp 0` equals `hearth run --temp 0` */
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    const char *ra[] = {bin, "run", "-m", model, "-p", PROMPT, "-n", n_gen, "--temp", "0", NULL};
    CHECK_EQ(run_cmd(ra, f_ref, f_err, 120), 0);
    char *ref = slurp(f_ref, NULL);
    const char *pa[] = {bin,   "prompt", "--head", head,        "--key-dir", kh,     "-n",
                        n_gen, "--temp", "0",      "--timeout", "60",        PROMPT, NULL};
    int prc = run_cmd(pa, f_out, f_err, 120);
    CHECK_EQ(prc, 0);
    char *out = slurp(f_out, NULL);
    CHECK(ref && strlen(ref) > 10);
    CHECK_STR(out, ref);
    printf("hearth run:    %s\ncluster reply: %s\n", ref ? ref : "(none)", out ? out : "(none)");
    if (prc != 0 || !out || !ref || strcmp(out, ref) != 0) {
        show_tail(f_err, 2000);
        show_tail(f_h, 4000);
        show_tail(f_w, 4000);
    }
    free(ref);
    free(out);

    /* still both after answering (the head may re-plan on measured rates) */
    ring_view after = {0};
    bool again = false;
    for (double t1 = now_s(); !again && now_s() - t1 < 30; sleep_ms(300))
        again = read_status(bin, head, kh, &after) && after.n_dev >= 2 &&
                after.n_ready == after.n_dev; /* not in the middle of a re-plan */
    CHECK(again);
    printf("plan after the answer: %s\n  %s\n", after.source, after.split);
    CHECK_EQ(after.n_ring, 2);
    CHECK(after.worker_w > 0);

    /* the worker is lost: `hearth status` marks it LOST and the head's link
     * to it as gone, not as a measured link */
    for (int i = 0; wpid > 0 && i < g_npids; i++)
        if (g_pids[i] == wpid) {
            kill(wpid, SIGKILL);
            waitpid(wpid, NULL, 0);
            g_pids[i] = g_pids[--g_npids];
            break;
        }
    char f_st[256];
    snprintf(f_st, sizeof f_st, "%s/status.txt", g_dir);
    const char *sa[] = {bin, "status", "--head", head, "--key-dir", kh, "--timeout", "5", NULL};
    bool gone = false;
    for (double t2 = now_s(); !gone && now_s() - t2 < 30; sleep_ms(500)) {
        if (run_cmd(sa, f_st, f_err, 30) != 0)
            continue;
        char *st = slurp(f_st, NULL);
        gone = st && strstr(st, "LOST") && strstr(st, ": gone (") && strstr(st, " is lost)");
        free(st);
    }
    CHECK(gone);
    if (!gone)
        show_tail(f_st, 3000);

    /* each plan the scheduler made is logged once, as the one chosen (the
     * scheduler's line per KV-slot variant tried is debug) */
    char *hl = slurp(f_h, NULL);
    int chosen = 0, variants = 0;
    for (const char *q = hl; q && (q = strstr(q, "to solve the chosen variant")); q++)
        chosen++;
    for (const char *q = hl; q && (q = strstr(q, "[sched] plan:")); q++)
        variants++;
    printf("head log: %d chosen plan line%s, %d per-variant lines\n", chosen,
           chosen == 1 ? "" : "s", variants);
    CHECK(chosen >= 1);
    CHECK_EQ(variants, 0);
    free(hl);
    cleanup();
    printf("default path: %.1f s in all\n", now_s() - t_start);
    return hr_check_finish("default_path");
}
