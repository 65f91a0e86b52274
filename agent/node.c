/* node.c - the node core every agent has, head or worker: the JOIN
 * payload describing this device, model, keys and sockets (init / fini),
 * checking and applying this device's part of a plan, the data PUSH and
 * the window statistics. Called by agent.c (create / destroy), worker.c
 * and the head's files; calls none of them. */
#include "agent/agent-impl.h"

#include "common/file.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/sync.h"
#include "kernels/quant.h"
#include "ring/knock.h"
#include "ring/msg.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "agent"

/* ---- JOIN payload: who we are, what we run, our profile ---- */

/* A saved profile instead of a measured one: a profile document (hearth
 * profile --json) or a device alone. */
static int hr_node_profile_file(const char *path, hr_prof_device *d, char err[HR_ERR_LEN]) {
    size_t len = 0;
    char *json = hr_file_read(path, (size_t)64 << 20, &len);
    if (!json)
        return hr_seterr(err, HR_EIO, "cannot read profile %s", path);
    hr_prof_doc *doc = calloc(1, sizeof *doc);
    int rc = doc ? hr_prof_doc_parse(json, len, doc, err) : HR_ENOMEM;
    if (rc == 0 && doc->has_device)
        *d = doc->device;
    else
        rc = hr_prof_device_parse(json, len, d, err);
    if (doc)
        hr_prof_doc_clear(doc);
    free(doc);
    free(json);
    if (rc && err)
        snprintf(err + strlen(err), HR_ERR_LEN - strlen(err), " (%s)", path);
    return rc;
}

static char *hr_node_info(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_prof_device *d = calloc(1, sizeof *d);
    if (!d) {
        hr_seterr(err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    bool measured = false;
    if (a->p.profile_file) {
        if ((measured = hr_node_profile_file(a->p.profile_file, d, err) == 0))
            HR_LOG_INFO(TAG, "%s: sending the profile in %s", a->name, a->p.profile_file);
        else
            HR_LOG_WARN(TAG, "%s: %s; joining without a profile", a->name, err);
    } else if (a->p.profile) {
        hr_prof_params pp = hr_prof_params_default();
        pp.model_path = a->cache ? NULL : a->p.model_path; /* holes read fast: no measure */
        pp.quick = true;
        pp.gpu = a->vk ? a->p.gpu : "none"; /* the device the agent holds, if any */
        int types[HR_PROF_MAX_TYPES];
        hr_prof_model pm = {0};
        bool have_pm = hr_prof_model_build(&pm, a->m, a->g, err) == 0;
        if (have_pm) {
            pp.n_types = hr_prof_model_types(&pm, types, HR_PROF_MAX_TYPES);
            memcpy(pp.types, types, sizeof types);
        }
        pp.threads[0] = a->p.n_threads;
        pp.n_threads = 1;
        hr_progress pr;
        hr_progress_begin(&pr, TAG, "profiling this device", NULL, 0);
        measured = hr_prof_device_measure(d, &pp, err) == 0;
        hr_progress_end(&pr);
        /* real decode steps of the first layers calibrate the rates; not on
         * a fetched cache whose layers are still holes */
        char pe[HR_ERR_LEN] = "";
        if (measured && have_pm && !a->cache) {
            if (hr_prof_engine_probe(d, a->m, &pm, a->p.n_threads, hr_prof_probe_window_s(d), pe))
                HR_LOG_WARN(TAG, "%s: engine probe skipped: %s", a->name, pe);
            else /* pooled with this device's earlier starts */
                hr_prof_engine_history(d, &pm, &pp);
        }
        hr_prof_model_clear(&pm);
        if (!measured)
            HR_LOG_WARN(TAG, "%s: profiling failed (%s); joining without a profile", a->name, err);
    }
    if (!measured)
        hr_prof_device_sysinfo(d, NULL);
    int64_t lim = (int64_t)(a->p.mem_limit_gib * 1073741824.0);
    if (lim > 0 && (d->mem.weights_avail_bytes < 0 || d->mem.weights_avail_bytes > lim))
        d->mem.weights_avail_bytes = lim;
    hr_msg_join jm = {.version = HR_RING_VERSION,
                      .model_size = a->model_size,
                      .model_hash = a->model_hash,
                      .n_layer = hr_model_hparams(a->m)->n_layer,
                      .threads = a->p.n_threads,
                      .cores = d->topo.n_cores,
                      .numa = d->topo.n_numa,
                      .mem_total = d->mem.total_bytes,
                      .mem_avail = d->mem.available_bytes,
                      .cg_limit = d->mem.cg_limit_bytes,
                      .disk_mbs = d->disk.seq_mbs,
                      .disk_mmap_mbs = d->disk.mmap_mbs};
    snprintf(jm.name, sizeof jm.name, "%s", a->name);
    snprintf(jm.ctrl, sizeof jm.ctrl, "%s", a->ctrl_ep);
    snprintf(jm.data, sizeof jm.data, "%s", a->data_ep);
    snprintf(jm.os, sizeof jm.os, "%s", d->os.name);
    snprintf(jm.kernel, sizeof jm.kernel, "%s", d->os.release);
    if (a->keys)
        snprintf(jm.pubkey, sizeof jm.pubkey, "%s", hr_ring_keys_public(a->keys));
    snprintf(jm.echo, sizeof jm.echo, "%s", a->echo_ep);
    if (measured && hr_prof_device_to_json(d, &jm.profile, err) != 0)
        jm.profile = NULL;
    free(d);
    hr_msg m;
    int rc = hr_msg_join_encode(&m, &jm, err);
    free(jm.profile);
    return rc ? NULL : m.data; /* NUL-terminated JSON */
}

/* ---- create / destroy ---- */

/* Fills in defaults for out-of-range parameters. */
static void hr_node_params_fix(hr_agent_params *p) {
    if (p->n_threads < 1) { /* every online core, as `hearth run` */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        p->n_threads = n > 0 ? (int)n : 1;
    }
    if (p->n_batch < 1)
        p->n_batch = 64;
    if (p->hb_interval_ms < 10)
        p->hb_interval_ms = 250;
    if (p->hb_timeout_ms < 4 * p->hb_interval_ms)
        p->hb_timeout_ms = 4 * p->hb_interval_ms;
    if (p->data_timeout_ms < 1000)
        p->data_timeout_ms = 60000;
    if (p->recover_ms < 1000)
        p->recover_ms = 30000;
}

/* Key pair, ZAP handler, join token (head) or the head's key (worker). */
static int hr_node_security(hr_agent *a, const hr_agent_params *p, char err[HR_ERR_LEN]) {
    int rc;
    if (p->insecure) {
        HR_LOG_WARN(TAG, "*** INSECURE MODE: no encryption, no authentication; anyone who can "
                         "reach this agent's ports can join, send frames and read hidden "
                         "states. For benchmarks only. ***");
        return 0;
    }
    if ((rc = hr_ring_keys_open(&a->keys, p->key_dir, err)) ||
        (rc = hr_ring_keys_zap_start(a->keys, a->zctx, p->name ? p->name : "agent", err)))
        return rc;
    char tk_sec[HR_RING_KEY_LEN];
    if (p->join && hr_ring_join_parse(p->join, a->head_key, tk_sec) != 0)
        return hr_seterr(err, HR_EINVAL, "--join: not a join token (want HJ1 + 80 chars)");
    if (p->join && (rc = hr_ring_trust_add(hr_ring_keys_dir(a->keys), "head", a->head_key, err)))
        return rc;
    if (a->is_head)
        return hr_ring_keys_join_token(a->keys, a->join_token, sizeof a->join_token, err);
    if (!p->join &&
        hr_ring_keys_lookup(a->keys, p->head_key ? p->head_key : "head", a->head_key) != 0) {
        if (p->head_key)
            return hr_seterr(err, HR_EINVAL,
                             "--head-key '%s' is neither a public key nor a trusted name",
                             p->head_key);
        snprintf(a->head_key, sizeof a->head_key, "%s", hr_ring_keys_public(a->keys));
    }
    return 0;
}

/* Binds the control ROUTER on listen and the data PULL on the next port. */
static int hr_node_sockets(hr_agent *a, const hr_agent_params *p, char err[HR_ERR_LEN]) {
    char ep[HR_EP_LEN];
    int rc;
    if (hr_ring_endpoint(p->listen, 0, ep, sizeof ep))
        return hr_seterr(err, HR_EINVAL, "bad listen address '%s' (want host:port)", p->listen);
    hr_ring_sockopt so = hr_ring_sockopt_default();
    so.max_msg = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL + 1024;
    so.mandatory = true;
    if (!(a->ctrl = hr_ring_socket(a->zctx, HR_RING_ROUTER, &so, err)))
        return HR_ENET;
    if (a->keys && (rc = a->is_head ? hr_ring_secure_server_pairing(a->ctrl, a->keys, err)
                                    : hr_ring_secure_server(a->ctrl, a->keys, err)))
        return rc;
    if ((rc = hr_ring_bind(a->ctrl, ep, a->ctrl_ep, sizeof a->ctrl_ep, err)))
        return rc;
    char dep[HR_EP_LEN];
    if (strcmp(ep + strlen(ep) - 2, ":0") == 0)
        snprintf(dep, sizeof dep, "%s", ep);
    else
        hr_ring_endpoint(ep, 1, dep, sizeof dep);
    hr_ring_sockopt ds = hr_ring_sockopt_default();
    ds.hwm = 16;
    ds.snd_timeout_ms = 2000;
    if (!(a->pull = hr_ring_socket(a->zctx, HR_RING_PULL, &ds, err)) ||
        !(a->push = hr_ring_socket(a->zctx, HR_RING_PUSH, &ds, err)))
        return HR_ENET;
    if (a->keys && (rc = hr_ring_secure_server(a->pull, a->keys, err)))
        return rc;
    return hr_ring_bind(a->pull, dep, a->data_ep, sizeof a->data_ep, err);
}

/* HR_TEST_SLOW_ROUND="NAME=MS": a test-only slowdown of the agent named
 * NAME (tests/test_adapt.c); read here and nowhere else. */
static double hr_node_test_slow_ms(const char *name) {
    const char *v = getenv("HR_TEST_SLOW_ROUND");
    const char *eq = v ? strchr(v, '=') : NULL;
    if (!eq || (size_t)(eq - v) != strlen(name) || strncmp(v, name, (size_t)(eq - v)) != 0)
        return 0;
    double ms = strtod(eq + 1, NULL);
    if (ms > 0)
        HR_LOG_WARN(TAG, "%s: HR_TEST_SLOW_ROUND adds %.1f ms to every window (test only)", name,
                    ms);
    return ms > 0 && ms < 10000 ? ms : 0;
}

int hr_node_init(hr_agent *a, const hr_agent_params *p, char err[HR_ERR_LEN]) {
    a->p = *p;
    hr_node_params_fix(&a->p);
    /* a fixed threshold (glibc's moves up to 32 MiB after the first large
     * free): buffers of 64 KiB and more, such as a re-prefill's hidden
     * states, get their own mapping and go back to the system when freed,
     * so a long-running agent's RSS does not keep its busiest moment */
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    pthread_mutex_init(&a->plan_mu, NULL);
    pthread_mutex_init(&a->st.mu, NULL);
    int rc;
    if (p->model_path) {
        if ((rc = hr_gguf_open(&a->g, p->model_path, err)) ||
            (rc = hr_model_load(&a->m, a->g, err)) ||
            (a->is_head && (rc = hr_tokenizer_create(&a->tok, a->g, err))))
            return rc;
        a->model_size = hr_gguf_file_size(a->g);
        a->model_hash =
            hr_ring_hash(hr_gguf_base(a->g), (size_t)hr_gguf_data_offset(a->g), a->model_size);
    } else if (a->is_head) {
        return hr_seterr(err, HR_EINVAL, "the head needs the model file");
    }
    a->pool = hr_pool_create(a->p.n_threads);
    a->zctx = hr_ring_context();
    int vk_idx = -1;
    char verr[HR_ERR_LEN] = "";
    if (hr_vk_pick(p->gpu, &vk_idx, verr) != 0)
        return hr_seterr(err, HR_EINVAL, "%s", verr);
    if (vk_idx >= 0 && hr_vk_create(&a->vk, vk_idx, verr) != 0)
        HR_LOG_WARN(TAG, "GPU %d unusable (%s): every layer on the CPU", vk_idx, verr);
    if (a->vk && hr_kernels_exact() && !hr_vk_info(a->vk)->f64) { /* no exact path there */
        HR_LOG_WARN(TAG,
                    "GPU %d (%s) has no 64-bit floats (shaderFloat64), which --exact needs: "
                    "every layer on the CPU",
                    vk_idx, hr_vk_info(a->vk)->name);
        hr_vk_destroy(a->vk);
        a->vk = NULL;
    }
    if (!a->pool || !a->zctx)
        return hr_seterr(err, HR_ENOMEM, "cannot create thread pool or zmq context");
    if ((rc = hr_node_security(a, p, err)) || (rc = hr_node_sockets(a, p, err)))
        return rc;
    if (p->name && *p->name) {
        snprintf(a->name, sizeof a->name, "%s", p->name);
    } else {
        char host[48] = "host";
        gethostname(host, sizeof host - 1);
        const char *port = strrchr(a->ctrl_ep, ':');
        snprintf(a->name, sizeof a->name, "%s%s", host, port ? port : "");
    }
    a->test_slow_ms = hr_node_test_slow_ms(a->name);
    if (p->head && hr_ring_endpoint(p->head, 0, a->head_ep, sizeof a->head_ep))
        return hr_seterr(err, HR_EINVAL, "bad head address '%s' (want host:port)", p->head);
    if (!a->is_head && !p->head) {
        if (a->keys && !p->join && !p->head_key &&
            strcmp(a->head_key, hr_ring_keys_public(a->keys)) == 0)
            return hr_seterr(err, HR_EDENIED,
                             "no head key is trusted here, so no beacon can be believed: pair "
                             "once with --join TOKEN (printed by the head) or `hearth trust add "
                             "head KEY`");
        if ((rc = hr_discover_head(a, a->head_ep, err)))
            return rc;
    }
    if (!p->model_path) {
        if (p->join && a->keys) {
            if ((rc = hr_worker_pair(a, err)))
                return rc;
            a->paired = true;
        }
        if ((rc = hr_fetch_bootstrap(a, err)))
            return rc;
        a->p.model_path = hr_cache_path(a->cache);
    }
    if ((rc = hr_node_streamer_start(a, err)))
        return rc;
    char le[HR_ERR_LEN];
    if (hr_link_start(a, le)) { /* links then stay assumed, and are shown so */
        HR_LOG_WARN(TAG, "%s: no link responder (%s); links to it are not measured", a->name, le);
        hr_link_stop(a);
    }
    if (!(a->info_json = hr_node_info(a, err)))
        return HR_ENOMEM;
    HR_LOG_INFO(TAG, "%s: control %s, data %s, model %s (%.1f MiB, hash %016llx), %d threads, %s",
                a->name, a->ctrl_ep, a->data_ep, a->p.model_path, a->model_size / 1048576.0,
                (unsigned long long)a->model_hash, a->p.n_threads,
                a->keys ? hr_ring_keys_public(a->keys) : "INSECURE (no key)");
    return 0;
}

/* Bytes lp's contexts and frame buffers hold (freed with the plan). */
static int64_t hr_local_plan_held(const hr_local_plan *lp, size_t n_embd) {
    size_t n = 0;
    for (int r = 0; r < HR_AGENT_MAX_K; r++)
        n += lp->ctx[r] ? hr_ctx_memory(lp->ctx[r]) : 0;
    n += lp->out_ctx ? hr_ctx_memory(lp->out_ctx) : 0;
    size_t B = (size_t)hr_local_plan_rows(lp);
    n += lp->frame_cap * (lp->rx ? 2 : 1) + (lp->hid ? B * n_embd * sizeof(float) : 0);
    return (int64_t)n;
}

static void hr_local_plan_free(hr_local_plan *lp) {
    for (int r = 0; r < HR_AGENT_MAX_K; r++)
        hr_ctx_destroy(lp->ctx[r]);
    hr_ctx_destroy(lp->out_ctx);
    free(lp->hid);
    free(lp->frame);
    free(lp->rx);
    free(lp->logits);
    memset(lp, 0, sizeof *lp);
}

void hr_node_fini(hr_agent *a) {
    atomic_store(&a->stop, 1);
    if (a->data_started)
        pthread_join(a->data_thread, NULL);
    a->data_started = false;
    hr_node_streamer_stop(a); /* before the mapping goes */
    hr_local_plan_free(&a->lp);
    hr_link_stop(a); /* its sockets close before the context ends */
    free(a->info_json);
    hr_ring_close(a->ctrl);
    hr_ring_close(a->up);
    hr_knock_sender_close(a->knock);
    hr_ring_close(a->pull);
    hr_ring_close(a->push);
    hr_ring_keys_close(a->keys); /* its ZAP socket lives in zctx */
    hr_ring_context_term(a->zctx);
    hr_pool_destroy(a->pool);
    hr_vk_destroy(a->vk); /* after the plan's contexts */
    hr_tokenizer_destroy(a->tok);
    hr_model_free(a->m);
    hr_gguf_close(a->g);
    hr_fetch_reset(&a->fetch);
    hr_cache_close(a->cache);
    free(a->layer_off);
    free(a->layer_len);
    pthread_mutex_destroy(&a->plan_mu);
    pthread_mutex_destroy(&a->st.mu);
}

/* ---- plan application (both roles) ---- */

/* MemAvailable and MemTotal from /proc/meminfo, bytes (-1 if unknown). */
void hr_node_meminfo(int64_t *avail, int64_t *total) {
    *avail = *total = -1;
    FILE *mf = fopen("/proc/meminfo", "r");
    char line[128];
    while (mf && fgets(line, sizeof line, mf)) {
        long long kb;
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            *avail = kb * 1024;
        else if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
            *total = kb * 1024;
    }
    if (mf)
        fclose(mf);
}

void hr_node_mem_room(int64_t *avail, int64_t *total) {
    hr_prof_mem m;
    hr_prof_read_mem(&m, NULL);
    *total = m.total_bytes;
    /* MemAvailable, bounded by what our memory cgroup still lets in */
    *avail = m.weights_avail_bytes >= 0 ? m.weights_avail_bytes : m.available_bytes;
}

void hr_node_trim_timer(void *ud) {
    (void)ud;
    malloc_trim(0);
}

/* Refuses a plan whose part here would not fit: the same arithmetic as
 * the planner's (profiler.h, plan memory): KV of all k x w layers, one
 * layer of streaming buffer and (head) the output head against
 * MemAvailable now (bounded by the memory cgroup's limit less its non-file
 * usage), capped by --mem-limit, less the reserve for buffers
 * and slack. */
/* Bytes kept out of the budget for work buffers and the runtime: what the
 * planner kept out for this device (hr_prof_mem_reserve at the plan's
 * context and batch, this agent's threads). */
static double hr_node_reserve(const hr_agent *a, const hr_local_plan *lp) {
    return hr_prof_mem_reserve(a->m, lp->n_ctx, lp->n_batch, a->p.n_threads, a->is_head);
}

/* The admission budget of plan lp now: hr_prof_mem_budget of
 * hr_node_mem_room capped by --mem-limit (*budget < 0 when MemAvailable is unknown), and
 * the model's figures at lp's context in *sm. */
static int hr_node_budget(const hr_agent *a, const hr_local_plan *lp, hr_sched_model *sm,
                          double *budget, char err[HR_ERR_LEN]) {
    int64_t avail, total;
    memset(sm, 0, sizeof *sm);
    hr_node_mem_room(&avail, &total);
    /* a plan checked while another is applied here (the head checks its own
     * part when it plans): the one in use frees its contexts and buffers
     * before the new one allocates, as a worker's apply does */
    if (lp != &a->lp && avail >= 0)
        avail += atomic_load(&a->plan_held);
    hr_prof_model pm = {0};
    int rc = hr_prof_model_build(&pm, a->m, a->g, err);
    if (rc == 0) /* every KV slot holds n_ctx positions */
        rc = hr_prof_to_sched_model(&pm, lp->n_ctx * (lp->n_seq > 1 ? lp->n_seq : 1), sm, err);
    hr_prof_model_clear(&pm);
    *budget = avail < 0 || total <= 0
                  ? -1
                  : hr_prof_mem_budget((double)avail, a->p.mem_limit_gib * 1073741824.0,
                                       hr_prof_layer_slack(sm), hr_node_reserve(a, lp));
    return rc;
}

/* Bytes of lp's windows that may stay resident: the admission budget,
 * capped by the budget the scheduler planned this device with (PLAN
 * mem_budget), less KV and output head (hr_prof_stream_room); the model's
 * mean layer in *layer_bytes (the streaming buffer's least). */
static double hr_node_stream_room(const hr_agent *a, const hr_local_plan *lp, double *layer_bytes) {
    hr_sched_model sm;
    double budget;
    char err[HR_ERR_LEN];
    *layer_bytes = 0;
    int layers = hr_local_plan_layers(lp);
    if (layers <= 0 || hr_node_budget(a, lp, &sm, &budget, err) != 0)
        return 1e300; /* nothing to split, or no model figures: keep everything */
    *layer_bytes = sm.layer_bytes;
    if (lp->mem_budget > 0 && (budget < 0 || lp->mem_budget < budget))
        budget = lp->mem_budget;
    if (budget < 0)
        return 1e300;
    return hr_prof_stream_room(&sm, layers, a->is_head, budget);
}

double hr_node_admit_bytes(const hr_agent *a, const hr_local_plan *lp) {
    hr_sched_model sm;
    double budget;
    char err[HR_ERR_LEN];
    return hr_node_budget(a, lp, &sm, &budget, err) == 0 ? budget : -1;
}

static int hr_plan_fits(const hr_agent *a, const hr_local_plan *lp, char err[HR_ERR_LEN]) {
    int layers = hr_local_plan_layers(lp);
    if (layers <= 0)
        return 0;
    hr_sched_model sm;
    double budget;
    int rc = hr_node_budget(a, lp, &sm, &budget, err);
    if (rc)
        return rc;
    if (budget < 0)
        return 0;
    double need = hr_prof_mem_need(&sm, layers, a->is_head);
    if (need > budget * (1.0 + 1e-9) + 1.0)
        return hr_seterr(err, HR_ENOMEM,
                         "device '%s': plan %u needs %.0f bytes (%.1f MiB: KV of %d layers x %d "
                         "positions, one layer of streaming buffer%s) but has %.0f bytes (%.1f "
                         "MiB available%s, less %.1f MiB for buffers and slack)",
                         a->name, lp->plan_id, need, need / 1048576.0, layers, lp->n_ctx,
                         a->is_head ? ", the output head" : "", budget, budget / 1048576.0,
                         a->p.mem_limit_gib > 0 ? " under --mem-limit" : "",
                         hr_node_reserve(a, lp) / 1048576.0);
    return 0;
}

int hr_node_plan_check(const hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    bool ok = np->k >= 1 && np->k <= HR_AGENT_MAX_K;
    /* its windows: inside the model, one after the other in round order */
    for (int r = 0, end = 0; ok && r < np->k; r++) {
        int f = np->first[r], c = np->count[r];
        ok = c >= 0 && f >= 0 && c <= hp->n_layer - f && (c == 0 || f >= end);
        end = c > 0 ? f + c : end;
    }
    if (!ok || np->n_batch < 1 || np->n_ctx < 1 || np->n_batch > 4096 || np->n_seq < 0 ||
        np->n_seq > HR_AGENT_MAX_PARALLEL || hr_ring_dtype_size(np->dtype) == 0)
        return hr_seterr(err, HR_EINVAL,
                         "plan %u does not fit the model: k %d (at most %d), windows outside its "
                         "%d layers or out of order, batch %d, %d KV slots",
                         np->plan_id, np->k, HR_AGENT_MAX_K, hp->n_layer, np->n_batch, np->n_seq);
    return hr_plan_fits(a, np, err);
}

int hr_node_apply_plan(hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    a->plan_epoch++; /* fresh KV: the data thread forgets its request state */
    hr_node_stats_reset(a, np->plan_id);
    atomic_store(&a->plan_held, 0);
    hr_local_plan_free(&a->lp);
    malloc_trim(0); /* give the old plan's freed pages back before the new one allocates */
    hr_local_plan *lp = &a->lp;
    lp->plan_id = np->plan_id;
    lp->k = np->k;
    memcpy(lp->first, np->first, sizeof lp->first);
    memcpy(lp->count, np->count, sizeof lp->count);
    lp->n_active = np->n_active;
    lp->index = np->index;
    lp->n_ctx = np->n_ctx;
    lp->n_batch = np->n_batch;
    lp->n_seq = np->n_seq > 1 ? np->n_seq : 1;
    lp->n_mb = np->n_mb;
    lp->ring_streams = np->ring_streams;
    lp->dtype = np->dtype;
    lp->prefetch = np->prefetch;
    lp->release = np->release;
    lp->mem_budget = np->mem_budget;
    lp->n_gpu = a->p.gpu_layers >= 0 ? a->p.gpu_layers : np->n_gpu;
    int wmax = hr_local_plan_wmax(lp);
    lp->n_gpu = !a->vk || lp->n_gpu < 0 ? 0 : lp->n_gpu > wmax ? wmax : lp->n_gpu;
    if (np->n_gpu > 0 && !a->vk)
        HR_LOG_WARN(TAG,
                    "%s: plan %u puts %d layers per window on a GPU this agent does not "
                    "hold: they run on the CPU",
                    a->name, np->plan_id, np->n_gpu);
    snprintf(lp->next_ep, sizeof lp->next_ep, "%s", np->next_ep);
    snprintf(lp->next_key, sizeof lp->next_key, "%s", np->next_key);
    int rc = hr_node_plan_check(a, lp, err);
    if (rc) {
        memset(lp, 0, sizeof *lp);
        return rc;
    }
    /* the room for weights as the check saw it, before this plan's contexts
     * exist: afterwards MemAvailable would lose the buffers they touch,
     * which the budget takes off again as KV and reserve */
    double layer_bytes, room = hr_node_stream_room(a, lp, &layer_bytes);
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = lp->n_ctx;
    cp.n_batch = hr_local_plan_rows(lp);
    cp.n_seq = lp->n_seq;
    cp.pool = a->pool;
    cp.on_layer = hr_node_on_layer; /* the streamer follows the layers computed */
    cp.on_layer_ud = a;
    cp.on_route = hr_node_on_route; /* experts a layer reads, for streaming by expert */
    cp.vk = lp->n_gpu > 0 ? a->vk : NULL;
    cp.n_gpu = lp->n_gpu;
    hr_ctx *share = NULL; /* one set of work buffers: the windows run in turn */
    for (int r = 0; r < lp->k; r++) {
        if (lp->count[r] <= 0)
            continue; /* no layers this round: the frame is passed on */
        cp.layer_begin = lp->first[r];
        cp.layer_end = cp.layer_begin + lp->count[r];
        cp.n_gpu = lp->n_gpu < lp->count[r] ? lp->n_gpu : lp->count[r];
        cp.share = share;
        if ((rc = hr_ctx_create(&lp->ctx[r], a->m, &cp, err)))
            goto fail;
        for (int s = 0; s < lp->n_seq; s++) /* every slot in use, for BATCH rows */
            hr_ctx_seq_add(lp->ctx[r], s);
        share = share ? share : lp->ctx[r];
    }
    size_t E = (size_t)hp->n_embd, B = (size_t)hr_local_plan_rows(lp);
    if (a->is_head) {
        cp.layer_begin = cp.layer_end = hp->n_layer;
        cp.vk = NULL; /* the output head stays on the CPU */
        cp.n_gpu = 0;
        if ((rc = hr_ctx_create(&lp->out_ctx, a->m, &cp, err)))
            goto fail;
        lp->logits = malloc((size_t)hp->n_vocab * sizeof(float));
        lp->rx = malloc(HR_RING_HDR_SIZE + B * (HR_RING_ROW_SIZE + E * 4));
    }
    lp->hid = malloc(B * E * sizeof(float));
    lp->frame_cap = HR_RING_HDR_SIZE + B * (HR_RING_ROW_SIZE + E * 4);
    lp->frame = malloc(lp->frame_cap);
    if (!lp->hid || !lp->frame || (a->is_head && (!lp->logits || !lp->rx))) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory for plan buffers");
        goto fail;
    }
    hr_node_windows(a, lp);
    hr_node_stream_plan(a, lp, room, layer_bytes); /* pins, warms the first window */
    atomic_store(&a->plan_held, hr_local_plan_held(lp, E));
    char wins[128];
    size_t wn = 0;
    wins[0] = 0;
    for (int r = 0; r < lp->k && wn < sizeof wins; r++) {
        int q = lp->count[r] > 0 ? snprintf(wins + wn, sizeof wins - wn, "%s%d-%d", r ? "," : "",
                                            lp->first[r], lp->first[r] + lp->count[r] - 1)
                                 : snprintf(wins + wn, sizeof wins - wn, "%s-", r ? "," : "");
        wn += q > 0 ? (size_t)q : 0;
    }
    HR_LOG_INFO(TAG,
                "%s: plan %u: k %d, windows %s (at most %d layers of each on the GPU), %d KV "
                "slot%s, next %s",
                a->name, lp->plan_id, lp->k, wins, lp->n_gpu, lp->n_seq, lp->n_seq == 1 ? "" : "s",
                lp->next_ep[0] ? lp->next_ep : "-");
    return 0;
fail:
    hr_local_plan_free(lp);
    return rc;
}

/* ---- data plane ---- */

int hr_local_plan_rows(const hr_local_plan *lp) {
    return lp->n_batch + (lp->n_seq > 1 ? lp->n_seq - 1 : 0);
}

void hr_node_push_connect(hr_agent *a) {
    if (strcmp(a->push_ep, a->lp.next_ep) == 0)
        return;
    if (a->push_ep[0])
        hr_ring_disconnect(a->push, a->push_ep);
    a->push_ep[0] = 0;
    if (!a->lp.next_ep[0])
        return;
    char err[HR_ERR_LEN];
    if (a->keys && hr_ring_secure_client(a->push, a->keys, a->lp.next_key, err)) {
        HR_LOG_ERROR(TAG, "%s: cannot connect to the next device %s: %s", a->name, a->lp.next_ep,
                     err);
        return;
    }
    if (hr_ring_connect(a->push, a->lp.next_ep, err) == 0)
        snprintf(a->push_ep, sizeof a->push_ep, "%s", a->lp.next_ep);
}

void hr_node_stats_round(hr_agent *a, double ms, int n_tok, bool last_round) {
    hr_lock(&a->st.mu, HR_RANK_STATS);
    if (n_tok == 1 && ms >= 0) {
        a->st.ms_round = a->st.ms_round > 0 ? 0.8 * a->st.ms_round + 0.2 * ms : ms;
        a->st.rounds++;
        a->st.ms_total += ms;
    }
    if (last_round)
        a->st.tokens += (uint64_t)n_tok;
    hr_unlock(&a->st.mu, HR_RANK_STATS);
}

void hr_node_stats_reset(hr_agent *a, uint32_t plan_id) {
    hr_lock(&a->st.mu, HR_RANK_STATS);
    a->st.ms_round = 0;
    a->st.rounds = 0;
    a->st.ms_total = 0;
    a->st.plan_id = plan_id;
    hr_unlock(&a->st.mu, HR_RANK_STATS);
}

void hr_node_test_slow(const hr_agent *a) {
    if (a->test_slow_ms <= 0)
        return;
    hr_sleep_s(a->test_slow_ms / 1000.0);
}
