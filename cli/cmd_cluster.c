/* cmd_cluster.c - cluster subcommands: `hearth agent` (the daemon, with
 * the head's HTTP API and its graceful shutdown on SIGTERM / SIGINT),
 * `hearth prompt` (stream an answer from the head) and `hearth status`. */
#include "agent/agent.h"
#include "api/http.h"
#include "cli/cli.h"
#include "ring/beacon.h"
#include "ring/msg.h"
#include "ring/ring.h"

#include "common/log.h"
#include "common/sync.h"

#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define TAG "agent"

const hr_cli_opt hr_cmd_agent_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("listen", 0, STR, listen, "ADDR:PORT", "control port (data on port + 1)"),
    HR_CLI_OPT("head", 0, STR, head, "ADDR:PORT", "join this head"),
    HR_CLI_OPT("peers", 0, STR, peers, "A,B,..", "be the head, invite these agents"),
    HR_CLI_OPT("name", 0, STR, name, "NAME", "device name"),
    HR_CLI_OPT("mem-limit", 0, FLOAT, mem_limit, "GiB", "memory offered for weights"),
    HR_CLI_OPT("threads", 't', COUNT, threads, "N", "compute threads (default: all cores)"),
    HR_CLI_OPT("ctx", 'c', COUNT, ctx, "N", "context size in tokens"),
    HR_CLI_OPT("batch", 'b', COUNT, batch, "N", "prompt batch size (default 64)"),
    HR_CLI_OPT("expect", 0, COUNT, expect, "N", "head: workers to wait for"),
    HR_CLI_OPT("parallel", 0, COUNT, parallel, "N",
               "head: requests generating at once (default: 4 where the KV fits)"),
    HR_CLI_OPT("ring-batches", 0, COUNT, ring_batches, "N",
               "head: micro-batches in flight around the ring (default: one per device)"),
    HR_CLI_OPT("prefill-depth", 0, COUNT, prefill_depth, "N",
               "head: prompt chunks of a request on the ring at once (default: devices x k; "
               "1 = no pipelining)"),
    HR_CLI_OPT("k", 0, COUNT, k, "K", "head: force k rounds around the ring"),
    HR_CLI_OPT("windows", 0, STR, windows, "2,1,1",
               "head: force window sizes (per round: 3,2,2/2,3,2)"),
    HR_CLI_OPT("wire", 0, STR, wire, "f32|f16",
               "head: hidden states on the wire (f32: exact, default)"),
    HR_CLI_OPT("gpu", 0, STR, gpu, "N|auto|any|none",
               "Vulkan device for GPU layers (default $HR_GPU, else auto: never lavapipe)"),
    HR_CLI_OPT("gpu-layers", 0, COUNT, gpu_layers, "N",
               "run the first N layers of each window on the GPU (default: the plan's)"),
    HR_CLI_OPT("no-prefetch", 0, FLAG, no_prefetch, NULL, "no prefetch of the next window"),
    HR_CLI_OPT("release", 0, STR, release, "auto|on|off", "release finished windows"),
    HR_CLI_OPT("no-profile", 0, FLAG, no_profile, NULL, "join without a profile"),
    HR_CLI_OPT("profile-file", 0, STR, profile_file, "FILE",
               "send this profile (hearth profile --json) instead of measuring"),
    HR_CLI_OPT("join", 0, STR, join, "TOKEN", "pair with the head by its join token"),
    HR_CLI_OPTS(hr_cli_opts_security),
    HR_CLI_OPT("cluster", 0, STR, cluster, "NAME",
               "head: the cluster name it beacons (default hearth); worker: join that one"),
    HR_CLI_OPT("no-discovery", 0, FLAG, no_discovery, NULL,
               "head: send no beacon; worker: do not look for one (give --head)"),
    HR_CLI_OPT("discovery-port", 0, COUNT, discovery_port, "PORT", "UDP port of beacons (7707)"),
    HR_CLI_OPT("cache-dir", 0, STR, cache_dir, "DIR",
               "worker without -m: where the model bytes fetched from the head go "
               "(default $HEARTH_CACHE_DIR or ~/.cache/hearth)"),
    HR_CLI_OPT("cache-gb", 0, FLOAT, cache_gb, "GiB",
               "worker without -m: keep at most this much there (whole windows evicted)"),
    HR_CLI_OPT("api-listen", 0, STR, api_listen, "ADDR:PORT", "head: serve the HTTP API"),
    HR_CLI_OPT("api-key", 0, STR, api_key, "KEY", "head: API key (or $HEARTH_API_KEY)"),
    HR_CLI_OPT("api-queue", 0, COUNT, api_queue, "N", "head: API requests waiting (8)"),
    HR_CLI_OPT("api-max-tokens", 0, COUNT, api_max_tokens, "N", "head: tokens per API request"),
    HR_CLI_OPT("api-max-conns", 0, COUNT, api_max_conns, "N", "head: HTTP connections (2048)"),
    HR_CLI_OPT("api-max-conns-per-ip", 0, COUNT, api_max_conns_ip, "N",
               "head: HTTP connections per client address (256)"),
    HR_CLI_OPT("api-read-timeout", 0, COUNT, api_read_timeout, "S",
               "head: seconds for a request to arrive (10)"),
    HR_CLI_OPT("api-grace", 0, COUNT, api_grace, "S",
               "head: seconds running requests get at shutdown (10)"),
    HR_CLI_OPT("api-model-alias", 0, LIST, api_alias, "NAME",
               "head: also accept this \"model\" (repeatable)"),
    HR_CLI_OPT("template", 0, STR, chat_template, "NAME", "head: API chat template"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cmd_prompt_opts[] = {
    HR_CLI_OPT("prompt", 'p', STR, prompt, "TEXT", "the prompt (or as the argument)"),
    HR_CLI_OPT("n-predict", 'n', COUNT, n_predict, "N", "tokens to generate (default 128)"),
    HR_CLI_OPTS(hr_cli_opts_sampling),
    HR_CLI_OPTS(hr_cli_opts_client),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cmd_status_opts[] = {
    HR_CLI_OPT("json", 0, FLAG, json, NULL, "print the head's JSON"),
    HR_CLI_OPTS(hr_cli_opts_client),
    HR_CLI_OPT_END,
};

static hr_agent *volatile hr_sig_agent;
static volatile sig_atomic_t hr_sig_count;
/* With the HTTP API the first signal wakes the drain thread (sem_post is
 * async-signal-safe), which lets requests finish before stopping the
 * agent; a second signal stops at once. */
static sem_t hr_sig_sem;
static volatile sig_atomic_t hr_sig_drain;

static void hr_on_signal(int sig) {
    (void)sig;
    hr_sig_count++;
    if (hr_sig_drain && hr_sig_count == 1) {
        sem_post(&hr_sig_sem);
        return;
    }
    if (hr_sig_agent)
        hr_agent_stop(hr_sig_agent);
}

typedef struct {
    hr_agent *a;
    hr_http *api;
    int grace_ms;
} hr_drain_arg;

static void *hr_drain_main(void *arg) {
    hr_drain_arg *d = arg;
    sem_wait(&hr_sig_sem);
    if (!hr_sig_drain) /* the agent ended first */
        return NULL;
    HR_LOG_INFO(TAG, "signal: finishing the HTTP API's requests, then stopping");
    hr_http_drain(d->api, d->grace_ms);
    hr_agent_stop(d->a);
    return NULL;
}

/* The open-file limit up to its hard limit (each HTTP connection is a
 * descriptor). */
static void hr_raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = was;
    }
    HR_LOG_DEBUG(TAG, "open-file limit %llu (was %llu, hard limit %llu)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)was,
                 (unsigned long long)rl.rlim_max);
}

/* The port of "ADDR:PORT" or "tcp://ADDR:PORT", -1 if none. */
static long hr_port_of(const char *ep) {
    const char *c = ep ? strrchr(ep, ':') : NULL;
    char *end;
    long p = c ? strtol(c + 1, &end, 10) : -1;
    return c && c[1] && !*end ? p : -1;
}

static void hr_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hr_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

HR_CLI_COMMAND(agent) {
    char err[HR_ERR_LEN] = "";
    if (o->head && o->peers)
        return hr_cli_fail("give --head (join a head) or --peers (be the head), not both");
    /* without --head: a head when it has the model (and no join token), else a worker
     * that finds its head by the head's beacon */
    bool discover = !o->head && !o->peers && !o->expect && (!o->model || o->join);
    if (!o->model && !o->head && (o->no_discovery || o->peers))
        return hr_cli_fail("no model given: the head needs -m MODEL.gguf; a worker without it "
                           "needs --head ADDR:PORT or discovery (drop --no-discovery)");
    if (discover && o->no_discovery)
        return hr_cli_fail("a worker without --head finds its head by discovery: drop "
                           "--no-discovery or give --head ADDR:PORT");
    if (o->model && (o->cache_dir || o->cache_gb > 0))
        return hr_cli_fail("--cache-dir / --cache-gb are for a worker without -m");
    if (o->cache_gb < 0)
        return hr_cli_fail("--cache-gb must be >= 0");
    hr_agent_params p = hr_agent_params_default();
    p.discover = discover;
    p.no_discovery = o->no_discovery;
    p.cluster = o->cluster;
    p.discovery_port = o->discovery_port;
    p.cache_dir = o->cache_dir;
    p.cache_gb = o->cache_gb;
    p.model_path = o->model;
    if (o->listen)
        p.listen = o->listen;
    p.head = o->head;
    p.peers = o->peers;
    p.name = o->name;
    p.mem_limit_gib = o->mem_limit;
    p.gpu = o->gpu;
    p.gpu_layers = o->gpu_layers;                  /* -1 unless given */
    p.n_threads = o->threads > 0 ? o->threads : 0; /* 0: every online core */
    p.n_ctx = o->ctx;
    p.n_batch = o->batch;
    p.n_parallel = o->parallel;
    p.ring_batches = o->ring_batches;
    p.prefill_depth = o->prefill_depth;
    p.expect = o->expect;
    p.k = o->k;
    p.windows = o->windows;
    p.prefetch = !o->no_prefetch;
    p.profile = !o->no_profile;
    p.profile_file = o->profile_file;
    p.key_dir = o->key_dir;
    p.head_key = o->head_key;
    p.join = o->join;
    p.insecure = o->insecure;
    if (o->insecure)
        fprintf(stderr, "hearth agent: WARNING: --insecure: traffic is plaintext and anyone on "
                        "the network can join; use for benchmarks only\n");
    if (o->wire) {
        if (strcmp(o->wire, "f16") == 0)
            p.wire_dtype = HR_RING_F16;
        else if (strcmp(o->wire, "f32") == 0)
            p.wire_dtype = HR_RING_F32;
        else
            return hr_cli_fail("--wire must be f16 or f32, not '%s'", o->wire);
    }
    if (o->release) {
        if (strcmp(o->release, "auto") == 0)
            p.release = -1;
        else if (strcmp(o->release, "on") == 0)
            p.release = 1;
        else if (strcmp(o->release, "off") == 0)
            p.release = 0;
        else
            return hr_cli_fail("--release must be auto, on or off, not '%s'", o->release);
    }
    if (hr_log_threshold > HR_LOG_LEVEL_INFO && !o->log_level)
        hr_log_set_level(HR_LOG_LEVEL_INFO);
    if (o->api_listen && p.head)
        return hr_cli_fail("--api-listen is for the head (drop --head)");
    long api_port = o->api_listen ? hr_port_of(o->api_listen) : -1;
    long ctrl_port = hr_port_of(p.listen);
    if (o->api_listen && api_port > 0 && ctrl_port > 0 &&
        (api_port == ctrl_port || api_port == ctrl_port + 1))
        return hr_cli_fail("--api-listen port %ld is the agent's %s port (--listen %s; the data "
                           "port is the control port + 1): pick another port",
                           api_port, api_port == ctrl_port ? "control" : "data", p.listen);
    hr_raise_fd_limit();
    /* the API's port first: a taken one is said before profiling and the join token */
    int api_fd = -1;
    if (o->api_listen && hr_http_listen(o->api_listen, &api_fd, err))
        return hr_cli_fail("%s", err);
    hr_agent *a = NULL;
    if (hr_agent_create(&a, &p, err)) {
        if (api_fd >= 0)
            close(api_fd);
        return hr_cli_fail("agent: %s", err);
    }
    hr_sig_agent = a;
    hr_install_signals();
    fprintf(stderr, "hearth agent %s: listening on %s (%s)\n", hr_agent_name(a),
            hr_agent_endpoint(a), hr_agent_is_head(a) ? "head" : "worker");
    if (hr_agent_is_head(a) && hr_agent_join_token(a)[0])
        fprintf(stderr,
                "hearth agent: new agents pair with: hearth agent --join '%s' [--head ADDR:PORT] "
                "(without --head they find this head on the LAN)\n",
                hr_agent_join_token(a));
    hr_http *api = NULL;
    pthread_t drain;
    bool drain_started = false;
    hr_drain_arg da = {.a = a, .grace_ms = (o->api_grace >= 0 ? o->api_grace : 10) * 1000};
    if (o->api_listen) {
        /* --listen port 0: the ports are known once bound */
        long dport = hr_port_of(hr_agent_data_endpoint(a));
        if (api_port > 0 && (api_port == dport || api_port == hr_port_of(hr_agent_endpoint(a)))) {
            close(api_fd);
            hr_agent_destroy(a);
            return hr_cli_fail("--api-listen port %ld is taken by the agent's own %s port: pick "
                               "another port",
                               api_port, api_port == dport ? "data" : "control");
        }
        hr_http_params hp = hr_http_params_default();
        hp.listen = o->api_listen;
        hp.listen_fd = api_fd; /* taken over */
        hp.api_key = o->api_key ? o->api_key : getenv("HEARTH_API_KEY");
        hp.model_path = o->model;
        hp.chat_template = o->chat_template;
        if (o->api_queue > 0)
            hp.queue_max = o->api_queue;
        hp.max_tokens = o->api_max_tokens > 0 ? o->api_max_tokens : 1 << 30;
        if (o->api_max_conns > 0)
            hp.max_conns = o->api_max_conns;
        if (o->api_max_conns_ip > 0)
            hp.max_conns_per_ip = o->api_max_conns_ip;
        if (o->api_read_timeout > 0)
            hp.read_timeout_s = o->api_read_timeout;
        hp.expect = o->expect;
        hp.aliases = o->api_alias.v;
        hp.n_aliases = o->api_alias.n;
        if (hr_http_start(&api, a, &hp, err)) {
            hr_agent_destroy(a);
            return hr_cli_fail("API: %s", err);
        }
        fprintf(stderr, "hearth agent: HTTP API on http://%s (port %d)\n", o->api_listen,
                hr_http_port(api));
        da.api = api;
        if (sem_init(&hr_sig_sem, 0, 0) == 0 &&
            pthread_create(&drain, NULL, hr_drain_main, &da) == 0) {
            drain_started = true;
            hr_sig_drain = 1;
        }
    }
    int rc = hr_agent_run(a, err);
    if (drain_started) {
        hr_sig_drain = 0;
        hr_http_drain(api, 0); /* a second signal or the agent's end: no more grace */
        sem_post(&hr_sig_sem); /* the drain thread leaves (or has left) */
        pthread_join(drain, NULL);
        sem_destroy(&hr_sig_sem);
    }
    hr_http_stop(api);
    hr_sig_agent = NULL;
    hr_agent_destroy(a);
    if (rc)
        return hr_cli_fail("agent: %s", err);
    return 0;
}

/* Clients give up on a head that does not answer its first message (a
 * STATUS_REQ) within this long; a generation has its own, longer, timeout. */
#define HR_CLIENT_CONNECT_MS 5000

/* Asks the head for its status: HR_ETIMEDOUT with "no head at EP" when
 * nothing answers within tmo_ms. buf holds HR_RING_HDR_SIZE +
 * HR_RING_MAX_CTRL bytes; *h the STATUS frame's header. */
static int hr_client_status(void *s, const char *ep, int tmo_ms, uint8_t *buf, hr_ring_hdr *h,
                            char err[HR_ERR_LEN]) {
    hr_ring_hdr q = {.type = HR_RING_STATUS_REQ, .pos = -1};
    char e2[HR_ERR_LEN] = "";
    if (hr_ring_send_msg(s, NULL, 0, &q, NULL, e2))
        return hr_seterr(err, HR_ENET, "no head at %s: %s", ep, e2);
    double until = hr_now_s() + tmo_ms / 1000.0;
    for (;;) {
        int left = (int)((until - hr_now_s()) * 1000.0);
        long n = left > 0 ? hr_ring_recv(s, NULL, NULL, buf, HR_RING_HDR_SIZE + HR_RING_MAX_CTRL,
                                         left, h, e2)
                          : 0;
        if (n > 0 && h->type == HR_RING_STATUS)
            return 0;
        if (n < 0)
            return hr_seterr(err, HR_EFORMAT, "bad frame from the head at %s: %s", ep, e2);
        if (n == 0 && hr_now_s() >= until)
            return hr_seterr(err, HR_ETIMEDOUT,
                             "no head at %s: nothing answered within %.0f s (is it running, "
                             "and is its key trusted here?)",
                             ep, tmo_ms / 1000.0);
    }
}

/* A DEALER to the head's control port: CURVE with this machine's key, the
 * head's key from --head-key, the trusted peer "head", else our own (a
 * client on the head's machine). */
static void *hr_client_connect(void *zctx, const hr_cli *o, char *ep, size_t cap) {
    const char *head = o->head;
    if (hr_ring_endpoint(head ? head : "127.0.0.1:7700", 0, ep, cap)) {
        hr_cli_fail("bad head address '%s' (want host:port)", head);
        return NULL;
    }
    char err[HR_ERR_LEN] = "";
    void *s = hr_ring_socket(zctx, HR_RING_DEALER, NULL, err);
    if (s && !o->insecure) {
        hr_ring_keys *k = NULL;
        char hk[HR_RING_KEY_LEN];
        int rc = hr_ring_keys_open(&k, o->key_dir, err);
        if (rc == 0 && hr_ring_keys_lookup(k, o->head_key ? o->head_key : "head", hk) != 0) {
            if (o->head_key)
                rc = hr_seterr(err, HR_EINVAL, "--head-key '%s' is not a key or trusted name",
                               o->head_key);
            else
                snprintf(hk, sizeof hk, "%s", hr_ring_keys_public(k));
        }
        if (rc == 0)
            rc = hr_ring_secure_client(s, k, hk, err);
        hr_ring_keys_close(k);
        if (rc) {
            hr_cli_fail("%s", err);
            hr_ring_close(s);
            return NULL;
        }
    }
    if (!s || hr_ring_connect(s, ep, err) != 0) {
        hr_cli_fail("cannot connect to %s: %s", ep, err);
        hr_ring_close(s);
        return NULL;
    }
    return s;
}

HR_CLI_COMMAND(prompt) {
    const char *text = o->n_args > 0 ? o->args[0] : o->prompt;
    if (!text)
        return hr_cli_fail("no prompt given (hearth prompt [--head ADDR] \"text\")");
    hr_msg_prompt pm = {.text = (char *)text,
                        .n_predict = o->n_predict,
                        .temp = o->temp,
                        .top_k = o->top_k,
                        .top_p = o->top_p,
                        .min_p = o->min_p,
                        .repeat_penalty = o->repeat_penalty,
                        .seed = o->seed,
                        .wait_ms = o->timeout_s > 0 ? o->timeout_s * 1000 : 30000};
    hr_msg msg;
    char ep[160], err[HR_ERR_LEN];
    if (hr_msg_prompt_encode(&msg, &pm, err))
        return hr_cli_fail("cannot send the prompt: %s", err);
    void *zctx = hr_ring_context();
    void *s = hr_client_connect(zctx, o, ep, sizeof ep);
    int rc = 1;
    uint8_t *buf = malloc(HR_RING_HDR_SIZE + HR_RING_MAX_CTRL);
    if (!s || !buf)
        goto done;
    hr_install_signals();
    hr_ring_hdr h;
    if (hr_client_status(s, ep, HR_CLIENT_CONNECT_MS, buf, &h, err)) { /* is a head there? */
        hr_cli_fail("%s", err);
        goto done;
    }
    if (hr_msg_send(s, NULL, 0, &msg, err)) {
        hr_cli_fail("cannot send the prompt to %s: %s", ep, err);
        goto done;
    }
    int idle_s = o->timeout_s > 0 ? o->timeout_s : 120;
    double last = hr_now_s();
    bool canceled = false;
    for (;;) {
        if (hr_sig_count && !canceled) {
            hr_ring_hdr c = {.type = HR_RING_CANCEL, .pos = -1};
            hr_ring_send_msg(s, NULL, 0, &c, NULL, err);
            canceled = true;
        }
        long n =
            hr_ring_recv(s, NULL, NULL, buf, HR_RING_HDR_SIZE + HR_RING_MAX_CTRL, 200, &h, err);
        if (n == 0) {
            if (hr_now_s() - last > idle_s) {
                hr_cli_fail("no answer from the head at %s for %d s", ep, idle_s);
                goto done;
            }
            continue;
        }
        if (n < 0) {
            hr_cli_fail("bad frame from the head: %s", err);
            goto done;
        }
        last = hr_now_s();
        const char *pl = (const char *)buf + HR_RING_HDR_SIZE;
        hr_msg_token tk;
        hr_msg_done dn;
        char etext[HR_ERR_LEN];
        if (h.type == HR_RING_TOKEN && hr_msg_token_decode(&h, pl, &tk, err) == 0) {
            fwrite(tk.piece, 1, (size_t)tk.len, stdout);
            fflush(stdout);
        } else if (h.type == HR_RING_DONE) {
            fputc('\n', stdout);
            if (hr_msg_done_decode(&h, pl, &dn, err) == 0)
                fprintf(stderr,
                        "prompt: %d tokens, %.2f tokens/s | generation: %d tokens, "
                        "%.2f tokens/s\n",
                        dn.n_prompt, dn.prompt_tps, dn.n_gen, dn.gen_tps);
            rc = 0;
            goto done;
        } else if (h.type == HR_RING_ERROR) {
            fputc('\n', stdout);
            hr_msg_error_decode(&h, pl, etext, sizeof etext, err);
            hr_cli_fail("head: %s", etext);
            goto done;
        }
    }
done:
    free(buf);
    hr_msg_clear(&msg);
    if (s)
        hr_ring_close(s);
    hr_ring_context_term(zctx);
    return rc;
}

/* A rate in Mbit/s as people write it: 1110, 94.2, 0.512. */
static const char *hr_mbit(double bps, char *buf, size_t cap) {
    double m = bps * 8e-6;
    snprintf(buf, cap, m >= 100 ? "%.0f Mbit/s" : "%.3g Mbit/s", m);
    return buf;
}

/* One device's link line: measured (to whom, when, on which plan),
 * measured the other way (the head before it probed its own next), or
 * assumed (the planner's stand-in; shown only when it planned with it). */
static void hr_print_link(json_t *devs, json_t *d, int has_prof, int assumed, double rtt,
                          double bps) {
    const char *to = "", *probe = "";
    double age = -1;
    json_int_t plan = 0, n = 0;
    int reverse = 0;
    json_unpack(d, "{s?s,s?F,s?I,s?I,s?b,s?s}", "link_to", &to, "link_age_s", &age, "link_plan",
                &plan, "link_measurements", &n, "link_reverse", &reverse, "link_probe", &probe);
    char who[80], mb[32];
    snprintf(who, sizeof who, "%s", to[0] ? to : "next");
    size_t i;
    json_t *o;
    json_array_foreach(devs, i, o) { /* a link to a device that is lost is no link */
        const char *on = "";
        int ol = 0;
        json_unpack(o, "{s?s,s?b}", "name", &on, "lost", &ol);
        if (to[0] && ol && strcmp(on, to) == 0) {
            printf("      link to %s: gone (%s is lost)\n", who, who);
            return;
        }
    }
    if (!assumed && reverse)
        printf("      link to %s: %s, %.3g ms round trip (measured by %s the other way)\n", who,
               hr_mbit(bps, mb, sizeof mb), rtt, who);
    else if (!assumed)
        printf("      link to %s: %s, %.3g ms round trip (measured %.0f s ago, %s, "
               "%lld time%s)\n",
               who, hr_mbit(bps, mb, sizeof mb), rtt, age, plan ? "on its plan" : "at join",
               (long long)n, n == 1 ? "" : "s");
    else if (has_prof)
        printf("      link to next: %s, %.3g ms round trip (assumed: not measured%s%s)\n",
               hr_mbit(bps, mb, sizeof mb), rtt, probe[0] ? ", probe " : "", probe);
}

/* MiB of a status number, or n/a (null / absent). */
static const char *hr_mib(json_t *v, const char *na, char *buf, size_t cap) {
    if (!json_is_number(v))
        return na;
    snprintf(buf, cap, "%.1f MiB", json_number_value(v) / 1048576.0);
    return buf;
}

/* A device's window sizes: "4" when they are equal in every round, else
 * each round's ("3/2/0"); w (its largest) without "windows". */
static const char *hr_windows_text(const json_t *d, int w, char *buf, size_t cap) {
    const json_t *wins = json_object_get(d, "windows"), *v;
    size_t i, n = 0;
    bool same = true;
    snprintf(buf, cap, "%d", w);
    json_array_foreach(wins, i, v) same = same && json_integer_value(v) == w;
    if (same)
        return buf;
    json_array_foreach(wins, i, v) {
        int q = n < cap ? snprintf(buf + n, cap - n, "%s%lld", i ? "/" : "",
                                   (long long)json_integer_value(v))
                        : 0;
        n += q > 0 ? (size_t)q : 0;
    }
    return buf;
}

/* One device's disk line: predicted vs measured bytes read per token, and
 * what its runtime streams and keeps. */
static void hr_print_disk(json_t *d) {
    char a[32], b[32], c[32], e[32];
    const char *by = "unknown";
    json_unpack(d, "{s?s}", "pinned_by", &by);
    printf("      disk per token: read %s predicted, %s measured; streams %s, keeps %s (%s)\n",
           hr_mib(json_object_get(d, "pred_read_bytes_token"), "n/a (no prediction)", a, sizeof a),
           hr_mib(json_object_get(d, "meas_read_bytes_token"), "n/a (no token yet)", b, sizeof b),
           hr_mib(json_object_get(d, "stream_bytes_token"), "n/a", c, sizeof c),
           hr_mib(json_object_get(d, "pinned_bytes"), "n/a", e, sizeof e),
           strcmp(by, "mlock") == 0    ? "pinned by mlock"
           : strcmp(by, "advice") == 0 ? "kept by advice"
                                       : "pinning unknown");
    /* the read rate: the plan's (its profile's) against its pump's while
     * it reads (a disk that lets bursts through after idle spells, as a
     * cgroup's throttle does, shows more than it sustains), and a token's
     * reads at each */
    double plan_bps = json_number_value(json_object_get(d, "plan_disk_bps")),
           meas_bps = json_number_value(json_object_get(d, "meas_disk_bps")),
           meas_b = json_number_value(json_object_get(d, "meas_disk_bytes")),
           pred_rd = json_number_value(json_object_get(d, "pred_read_bytes_token")),
           meas_rd = json_number_value(json_object_get(d, "meas_read_bytes_token"));
    if (meas_b > 0 || (pred_rd > 0 && plan_bps > 0)) {
        char pa[48] = "no rate", ma[96] = "not measured yet (its pump read under 16 MiB)";
        if (plan_bps > 0)
            snprintf(pa, sizeof pa, "%.0f MB/s", plan_bps / 1e6);
        if (meas_bps > 0)
            snprintf(ma, sizeof ma, "%.0f MB/s measured while its pump reads (%.0f MiB this plan)",
                     meas_bps / 1e6, meas_b / 1048576.0);
        bool adapted = json_is_true(json_object_get(d, "plan_disk_adapted"));
        printf("      disk rate: %s planned (%s), %s", pa,
               adapted ? "its pump's, measured" : "its profile's", ma);
        if (pred_rd > 0 && plan_bps > 0)
            printf("; a token's reads: %.0f ms predicted", 1e3 * pred_rd / plan_bps);
        if (meas_rd > 0 && meas_bps > 0)
            printf(", %.0f ms at the measured rate", 1e3 * meas_rd / meas_bps);
        printf("\n");
    }
    /* its CPU a token, predicted and measured: a CPU quota caps compute and
     * reads together, and reads through the page cache cost CPU */
    double pred_cpu = json_number_value(json_object_get(d, "pred_cpu_ms_token")),
           meas_cpu = json_number_value(json_object_get(d, "meas_cpu_ms_token")),
           rcpu = json_number_value(json_object_get(d, "plan_read_cpu_ms_mb"));
    if (pred_cpu > 0 || meas_cpu > 0) {
        char pc[32] = "n/a", mc[32] = "n/a (no token yet)";
        if (pred_cpu > 0)
            snprintf(pc, sizeof pc, "%.0f ms", pred_cpu);
        if (meas_cpu > 0)
            snprintf(mc, sizeof mc, "%.0f ms", meas_cpu);
        printf("      CPU per token: %s predicted, %s measured", pc, mc);
        if (rcpu > 0 && pred_rd > 0)
            printf("; reads at %.2f ms per MB (%s)", rcpu,
                   json_is_true(json_object_get(d, "plan_read_cpu_adapted"))
                       ? "its runtime's, measured"
                       : "its profile's");
        printf("\n");
    }
    json_int_t keep = -1, of = 0, routed = 0, hits = 0, fetched = 0, moved = 0;
    if (json_unpack(json_object_get(d, "experts"), "{s:I,s:I,s:I,s:I,s?I,s?I}", "keep", &keep, "of",
                    &of, "routed", &routed, "hits", &hits, "fetched_bytes", &fetched, "moved_bytes",
                    &moved) == 0)
        printf(
            "      experts: streamed by expert, %lld of %lld kept per layer; %lld routed, %.1f%% "
            "of them kept (%.1f%% if routing were even); asked for %.1f MiB on demand, %.1f MiB to "
            "move the kept ones, since the agent started\n",
            (long long)keep, (long long)of, (long long)routed,
            routed > 0 ? 100.0 * (double)hits / (double)routed : 0.0,
            of > 0 ? 100.0 * (double)keep / (double)of : 0.0, (double)fetched / 1048576.0,
            (double)moved / 1048576.0);
}

static void hr_print_status(json_t *j) {
    const char *head = "", *wire = "", *error = "";
    int k = 0, n_layer = 0, ready = 0;
    json_unpack(j, "{s?s,s?i,s?i,s?b,s?s,s?s}", "head", &head, "k", &k, "n_layer", &n_layer,
                "ready", &ready, "wire", &wire, "error", &error);
    printf("head %s: %s, k %d, %d layers, wire %s%s%s\n", head, ready ? "ready" : "NOT READY", k,
           n_layer, wire, error[0] ? ", " : "", error);
    const char *src = "", *perr = "";
    json_unpack(j, "{s?s,s?s}", "plan_source", &src, "plan_error", &perr);
    if (src[0])
        printf("plan: %s\n", src);
    double pms = 0, pcomp = 0, pdisk = 0;
    int peval = 0;
    json_unpack(j, "{s?b}", "pred_evaluated", &peval); /* apart: a null figure ends an unpack */
    json_unpack(j, "{s?F}", "pred_ms_token", &pms);
    json_unpack(j, "{s?F,s?F}", "pred_compute_ms_token", &pcomp, "pred_disk_exposed_ms_token",
                &pdisk);
    /* the cost model's figure: the scheduler's own, or its evaluation of a forced plan */
    if (pms > 0)
        printf("predicted: %.1f ms/token (compute %.1f, disk exposed %.1f), %s\n", pms, pcomp,
               pdisk > 0 ? pdisk : 0.0,
               peval ? "the cost model's figure for windows it did not choose"
                     : "the scheduler's figure for the plan it chose");
    double pnoise = 0, pfast = 0;
    int fast_k = 0, fast_n = 0;
    json_unpack(j, "{s?F}", "pred_noise", &pnoise);
    json_unpack(j, "{s?F}", "pred_fastest_ms_token", &pfast);
    json_unpack(j, "{s?i,s?i}", "pred_fastest_k", &fast_k, "pred_fastest_active", &fast_n);
    if (pms > 0 && pfast > 0 && fast_k > 0)
        printf("a simpler plan: the fastest found (k %d on %d devices) was predicted %.1f "
               "ms/token, %.1f%% faster, inside the devices' measured spread (+-%.0f%%)\n",
               fast_k, fast_n, pfast, 100.0 * (pms / pfast - 1.0), 100.0 * pnoise);
    else if (pms > 0 && pnoise > 0)
        printf("prediction margin: +-%.0f%% (half the largest engine-probe spread of its "
               "devices)\n",
               100.0 * pnoise);
    int slots = 0, slot_ctx = 0;
    json_unpack(j, "{s?i,s?i}", "kv_slots", &slots, "kv_slot_ctx", &slot_ctx);
    if (slots > 0 && slot_ctx > 0)
        printf("KV slots: %d request%s at once, up to %d positions each\n", slots,
               slots == 1 ? "" : "s", slot_ctx);
    if (perr[0] && strcmp(perr, error) != 0)
        printf("plan error: %s\n", perr);
    int n_adapt = 0, n_resc = 0, pending = 0;
    const char *alast = "";
    double aage = -1;
    json_unpack(json_object_get(j, "adapt"), "{s?i,s?i,s?b,s?s,s?F}", "replans", &n_adapt,
                "rescaled", &n_resc, "pending", &pending, "last", &alast, "last_age_s", &aage);
    if (alast[0] || pending)
        printf("adaptive plans: %d re-plan%s, %d rate update%s%s; last (%.0f s ago): %s\n", n_adapt,
               n_adapt == 1 ? "" : "s", n_resc, n_resc == 1 ? "" : "s",
               pending ? ", one pending" : "", aage, alast);
    json_t *devs = json_object_get(j, "devices");
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d) {
        const char *name = "", *addr = "", *layers = "", *os = "";
        int pos = -1, w = 0, lost = 0, rdy = 0, cores = 0, numa = 0, over = 0, threads = 0;
        double pred = 0, meas = 0, res = 0, disk = 0;
        json_int_t tok = 0, mt = 0, ma = 0, cg = -1;
        int pover = 0; /* over: measured evidence; pover: the plan's prediction */
        json_unpack(d, "{s?s,s?s,s?s,s?i,s?i,s?b,s?b,s?F,s?F,s?F,s?I,s?b,s?b,s?i}", "name", &name,
                    "address", &addr, "layers", &layers, "ring_pos", &pos, "w", &w, "lost", &lost,
                    "ready", &rdy, "pred_ms_round", &pred, "meas_ms_round", &meas, "resident", &res,
                    "tokens", &tok, "overloaded", &over, "pred_overloaded", &pover, "threads",
                    &threads);
        json_t *info = json_object_get(d, "info");
        json_unpack(info, "{s?s,s?i,s?i,s?I,s?I,s?I,s?F}", "os", &os, "cores", &cores, "numa",
                    &numa, "mem_total", &mt, "mem_avail", &ma, "cg_limit", &cg, "disk_mbs", &disk);
        char at[16];
        snprintf(at, sizeof at, pos >= 0 ? "%d" : "-", pos);
        printf("  [%s] %-14s %-22s %s%s%s\n", at, name, addr,
               lost  ? "LOST"
               : rdy ? "ready"
                     : "not ready",
               pos < 0 ? ", not in the ring" : "",
               over    ? ", overloaded (streams weights every token, measured)"
               : pover ? ", predicted to stream weights every token"
                       : "");
        printf("      os %s; %d cores, %d NUMA, %d threads in use; memory %.1f GiB total, %.1f GiB "
               "available, cgroup limit %s",
               os, cores, numa, threads, mt / 1073741824.0, ma / 1073741824.0,
               cg > 0 ? "" : "none");
        if (cg > 0)
            printf("%.2f GiB", cg / 1073741824.0);
        if (disk > 0)
            printf("; disk %.0f MB/s\n", disk);
        else
            printf("; disk unknown\n");
        int has_prof = 0, lassumed = 1;
        double rtt = 0, lbps = 0;
        const char *left = "";
        json_unpack(d, "{s?b,s?b,s?F,s?F,s?s}", "has_profile", &has_prof, "link_assumed", &lassumed,
                    "link_rtt_ms", &rtt, "link_bps", &lbps, "left_out", &left);
        char pbuf[64] = "n/a", mbuf[32] = "n/a (no token yet)";
        if (pred > 0)
            snprintf(pbuf, sizeof pbuf, "%.2f", pred);
        else if (!has_prof)
            snprintf(pbuf, sizeof pbuf, "n/a (no profile)");
        if (meas > 0)
            snprintf(mbuf, sizeof mbuf, "%.2f", meas);
        int gl = 0;
        json_unpack(d, "{s?i}", "gpu_layers", &gl);
        char gbuf[32] = "", wbuf[96];
        if (gl > 0)
            snprintf(gbuf, sizeof gbuf, ", %d on its GPU", gl);
        if (left[0])
            printf("      no layers (left out: %s)\n", left);
        else if (w == 0 && pos >= 0) /* the head with no window: it embeds and samples */
            printf("      no layers (embedding and output head only); tokens %lld\n",
                   (long long)tok);
        else
            printf("      layers %s (w %s%s); ms/round predicted %s, measured %s; resident %.0f%%; "
                   "tokens %lld\n",
                   layers, hr_windows_text(d, w, wbuf, sizeof wbuf), gbuf, pbuf, mbuf, res * 100.0,
                   (long long)tok);
        hr_print_link(devs, d, has_prof, lassumed, rtt, lbps);
        if (!left[0] && w > 0)
            hr_print_disk(d);
        double fd = json_number_value(json_object_get(d, "fetch_done_bytes")),
               ft = json_number_value(json_object_get(d, "fetch_total_bytes")),
               fw = json_number_value(json_object_get(d, "fetch_wire_bytes"));
        if (ft > 0) /* a worker without the model file */
            printf("      model bytes from the head: %.1f / %.1f MiB of its plan here and verified "
                   "(%s), %.1f MiB received\n",
                   fd / 1048576.0, ft / 1048576.0, fd >= ft ? "complete" : "fetching",
                   fw / 1048576.0);
        double scale = 1;
        json_unpack(d, "{s?F}", "rate_scale", &scale);
        if (scale != 1.0)
            printf("      CPU rates planned at x%.3g of its profile (measured rounds)\n", scale);
    }
}

HR_CLI_COMMAND(status) {
    void *zctx = hr_ring_context();
    char ep[160], err[HR_ERR_LEN];
    void *s = hr_client_connect(zctx, o, ep, sizeof ep);
    int rc = 1;
    uint8_t *buf = malloc(HR_RING_HDR_SIZE + HR_RING_MAX_CTRL);
    hr_ring_hdr h;
    if (!s || !buf)
        goto done;
    int tmo = o->timeout_s > 0 ? o->timeout_s * 1000 : HR_CLIENT_CONNECT_MS;
    if (hr_client_status(s, ep, tmo, buf, &h, err)) {
        hr_cli_fail("%s", err);
        goto done;
    }
    const char *pl = (const char *)buf + HR_RING_HDR_SIZE;
    if (o->json) {
        printf("%.*s\n", (int)h.len, pl);
    } else {
        json_t *j = json_loadb(pl, h.len, 0, NULL);
        if (!j) {
            hr_cli_fail("status is not JSON");
            goto done;
        }
        hr_print_status(j);
        json_decref(j);
    }
    rc = 0;
done:
    free(buf);
    if (s)
        hr_ring_close(s);
    hr_ring_context_term(zctx);
    return rc;
}

/* ---- hearth discover ---- */

const hr_cli_opt hr_cmd_discover_opts[] = {
    HR_CLI_OPT("timeout", 0, COUNT, timeout_s, "S", "seconds to listen (default 3)"),
    HR_CLI_OPT("discovery-port", 0, COUNT, discovery_port, "PORT", "UDP port of beacons (7707)"),
    HR_CLI_OPT("json", 0, FLAG, json, NULL, "print JSON"),
    HR_CLI_OPTS(hr_cli_opts_key_dir),
    HR_CLI_OPT_END,
};

/* The trusted name whose key has fingerprint fp, into name ("" none). */
static void hr_trusted_name(const char *key_dir, const uint8_t *fp, char *name, size_t cap) {
    name[0] = 0;
    char dir[512], path[600];
    const char *d = key_dir ? key_dir : getenv("HEARTH_KEY_DIR");
    const char *home = getenv("HOME");
    if (d)
        snprintf(dir, sizeof dir, "%s", d);
    else
        snprintf(dir, sizeof dir, "%s/.config/hearth", home ? home : ".");
    snprintf(path, sizeof path, "%s/trusted", dir);
    FILE *f = fopen(path, "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char nm[128], key[128];
        uint8_t k[HR_BEACON_FP_LEN];
        if (sscanf(line, "%127s %127s", nm, key) != 2 || !hr_ring_key_valid(key))
            continue;
        hr_beacon_fingerprint(key, k);
        if (memcmp(k, fp, HR_BEACON_FP_LEN) == 0) {
            snprintf(name, cap, "%s", nm);
            break;
        }
    }
    if (f)
        fclose(f);
}

HR_CLI_COMMAND(discover) {
    char err[HR_ERR_LEN];
    hr_beacon_listener *l = NULL;
    if (hr_beacon_listen(&l, o->discovery_port, err))
        return hr_cli_fail("discover: %s", err);
    int secs = o->timeout_s > 0 ? o->timeout_s : 3;
    hr_beacon_poll(l, secs * 1000, NULL);
    hr_beacon_head heads[HR_BEACON_MAX_HEADS];
    int n = hr_beacon_heads(l, heads, HR_BEACON_MAX_HEADS);
    hr_beacon_stats st;
    hr_beacon_listener_stats(l, &st);
    hr_beacon_listener_close(l);
    json_t *arr = json_array();
    if (!o->json)
        printf("%-20s %-28s %-34s %-10s %s\n", "CLUSTER", "HEAD", "KEY FINGERPRINT", "MODEL",
               "TRUSTED AS");
    for (int i = 0; i < n; i++) {
        char fp[2 * HR_BEACON_FP_LEN + 1], tn[128];
        hr_beacon_fp_hex(heads[i].b.fp, fp);
        static const uint8_t zero[HR_BEACON_FP_LEN];
        bool insecure = memcmp(heads[i].b.fp, zero, HR_BEACON_FP_LEN) == 0;
        hr_trusted_name(o->key_dir, heads[i].b.fp, tn, sizeof tn);
        if (o->json) {
            json_array_append_new(
                arr,
                json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:i,s:b,s:s?,s:I}", "cluster",
                          heads[i].b.cluster, "endpoint", heads[i].ep, "from", heads[i].from,
                          "fingerprint", fp, "model_size", (json_int_t)heads[i].b.model_size,
                          "model_hash", "", "proto", heads[i].b.proto, "insecure", insecure,
                          "trusted_as", tn[0] ? tn : NULL, "beacons", (json_int_t)heads[i].count));
            char hx[24];
            snprintf(hx, sizeof hx, "%016llx", (unsigned long long)heads[i].b.model_hash);
            json_object_set_new(json_array_get(arr, json_array_size(arr) - 1), "model_hash",
                                json_string(hx));
        } else {
            printf("%-20s %-28s %-34s %7.1f MiB %s\n", heads[i].b.cluster, heads[i].ep,
                   insecure ? "(insecure head)" : fp, heads[i].b.model_size / 1048576.0,
                   tn[0] ? tn : "(not trusted here)");
        }
    }
    if (o->json) {
        json_t *j = json_pack("{s:o,s:I,s:I}", "heads", arr, "datagrams", (json_int_t)st.received,
                              "malformed", (json_int_t)st.malformed);
        char *txt = json_dumps(j, JSON_INDENT(2));
        printf("%s\n", txt ? txt : "{}");
        free(txt);
        json_decref(j);
    } else {
        json_decref(arr);
        printf("%d head%s heard in %d s (%llu datagrams, %llu malformed ignored)\n", n,
               n == 1 ? "" : "s", secs, (unsigned long long)st.received,
               (unsigned long long)st.malformed);
    }
    return 0;
}
