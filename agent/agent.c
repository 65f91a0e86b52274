/* agent.c - the agent daemon: sockets, the control plane (join, plan,
 * ready, heartbeat, cancel, leave) for workers and the head, and the
 * worker's data thread that computes its windows as hidden states come
 * around the ring. Plan making and generation live in head.c. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/progress.h"
#include "common/sync.h"
#include "ring/msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define TAG "agent"

hr_agent_params hr_agent_params_default(void) {
    return (hr_agent_params){.listen = "127.0.0.1:7700",
                             .n_threads = 1,
                             .n_batch = 64,
                             .wire_dtype = HR_RING_F16,
                             .prefetch = true,
                             .release = -1,
                             .profile = false,
                             .hb_interval_ms = 250,
                             .hb_timeout_ms = 2000,
                             .data_timeout_ms = 60000,
                             .recover_ms = 30000};
}

const char *hr_agent_endpoint(const hr_agent *a) { return a->ctrl_ep; }
const char *hr_agent_data_endpoint(const hr_agent *a) { return a->data_ep; }
bool hr_agent_is_head(const hr_agent *a) { return a->is_head; }
const char *hr_agent_join_token(const hr_agent *a) { return a->join_token; }
void hr_agent_stop(hr_agent *a) { atomic_store(&a->stop, 1); }

/* ---- JOIN payload: who we are, what we run, our profile ---- */

static char *hr_agent_info(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_prof_device *d = calloc(1, sizeof *d);
    if (!d) {
        hr_seterr(err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    bool measured = false;
    if (a->p.profile) {
        hr_prof_params pp = hr_prof_params_default();
        pp.model_path = a->p.model_path;
        pp.quick = true;
        int types[HR_PROF_MAX_TYPES];
        hr_prof_model pm = {0};
        if (hr_prof_model_build(&pm, a->m, a->g, err) == 0) {
            pp.n_types = hr_prof_model_types(&pm, types, HR_PROF_MAX_TYPES);
            memcpy(pp.types, types, sizeof types);
            hr_prof_model_clear(&pm);
        }
        pp.threads[0] = a->p.n_threads;
        pp.n_threads = 1;
        hr_progress pr;
        hr_progress_begin(&pr, TAG, "profiling this device", NULL, 0);
        measured = hr_prof_device_measure(d, &pp, err) == 0;
        hr_progress_end(&pr);
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
    if (measured && hr_prof_device_to_json(d, &jm.profile, err) != 0)
        jm.profile = NULL;
    free(d);
    hr_msg m;
    int rc = hr_msg_join_encode(&m, &jm, err);
    free(jm.profile);
    return rc ? NULL : m.data; /* NUL-terminated JSON */
}

/* ---- create / destroy ---- */

int hr_agent_create(hr_agent **out, const hr_agent_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!p->model_path)
        return hr_seterr(err, HR_EINVAL, "no model given");
    hr_agent *a = calloc(1, sizeof *a);
    if (!a)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    a->p = *p;
    if (a->p.n_threads < 1)
        a->p.n_threads = 1;
    if (a->p.n_batch < 1)
        a->p.n_batch = 64;
    if (a->p.hb_interval_ms < 10)
        a->p.hb_interval_ms = 250;
    if (a->p.hb_timeout_ms < 4 * a->p.hb_interval_ms)
        a->p.hb_timeout_ms = 4 * a->p.hb_interval_ms;
    if (a->p.data_timeout_ms < 1000)
        a->p.data_timeout_ms = 60000;
    if (a->p.recover_ms < 1000)
        a->p.recover_ms = 30000;
    a->is_head = !p->head;
    pthread_mutex_init(&a->plan_mu, NULL);
    pthread_mutex_init(&a->st.mu, NULL);
    pthread_mutex_init(&a->dev_mu, NULL);
    pthread_cond_init(&a->dev_cv, NULL);
    pthread_mutex_init(&a->gen_mu, NULL);
    pthread_mutex_init(&a->job_mu, NULL);
    pthread_cond_init(&a->job_cv, NULL);
    a->next_req = 1;
    int rc;
    if ((rc = hr_gguf_open(&a->g, p->model_path, err)))
        goto fail;
    if ((rc = hr_model_load(&a->m, a->g, err)))
        goto fail;
    if (a->is_head && (rc = hr_tokenizer_create(&a->tok, a->g, err)))
        goto fail;
    a->model_size = hr_gguf_file_size(a->g);
    a->model_hash =
        hr_ring_hash(hr_gguf_base(a->g), (size_t)hr_gguf_data_offset(a->g), a->model_size);
    a->pool = hr_pool_create(a->p.n_threads);
    a->zctx = zmq_ctx_new();
    if (!a->pool || !a->zctx) {
        rc = hr_seterr(err, HR_ENOMEM, "cannot create thread pool or zmq context");
        goto fail;
    }
    if (p->insecure) {
        HR_LOG_WARN(TAG, "*** INSECURE MODE: no encryption, no authentication; anyone who can "
                         "reach this agent's ports can join, send frames and read hidden "
                         "states. For benchmarks only. ***");
    } else {
        if ((rc = hr_ring_keys_open(&a->keys, p->key_dir, err)) ||
            (rc = hr_ring_keys_zap_start(a->keys, a->zctx, p->name ? p->name : "agent", err)))
            goto fail;
        char tk_sec[HR_RING_KEY_LEN];
        if (p->join &&
            (hr_ring_join_parse(p->join, a->head_key, tk_sec) != 0 ||
             (rc = hr_ring_trust_add(hr_ring_keys_dir(a->keys), "head", a->head_key, err)) != 0)) {
            if (!rc)
                rc = hr_seterr(err, HR_EINVAL, "--join: not a join token (want HJ1 + 80 chars)");
            goto fail;
        }
        if (a->is_head &&
            (rc = hr_ring_keys_join_token(a->keys, a->join_token, sizeof a->join_token, err)))
            goto fail;
        if (!a->is_head && !p->join &&
            hr_ring_keys_lookup(a->keys, p->head_key ? p->head_key : "head", a->head_key) != 0) {
            if (p->head_key) {
                rc = hr_seterr(err, HR_EINVAL,
                               "--head-key '%s' is neither a public key nor a trusted name",
                               p->head_key);
                goto fail;
            }
            snprintf(a->head_key, sizeof a->head_key, "%s", hr_ring_keys_public(a->keys));
        }
    }
    char ep[HR_EP_LEN];
    if ((rc = hr_ring_endpoint(p->listen, 0, ep, sizeof ep))) {
        rc = hr_seterr(err, HR_EINVAL, "bad listen address '%s' (want host:port)", p->listen);
        goto fail;
    }
    hr_ring_sockopt so = hr_ring_sockopt_default();
    so.max_msg = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL + 1024;
    if (!(a->ctrl = hr_ring_socket(a->zctx, ZMQ_ROUTER, &so, err))) {
        rc = HR_ENET;
        goto fail;
    }
    int one = 1;
    zmq_setsockopt(a->ctrl, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (a->keys && (rc = a->is_head ? hr_ring_secure_server_pairing(a->ctrl, a->keys, err)
                                    : hr_ring_secure_server(a->ctrl, a->keys, err)))
        goto fail;
    if ((rc = hr_ring_bind(a->ctrl, ep, a->ctrl_ep, sizeof a->ctrl_ep, err)))
        goto fail;
    char dep[HR_EP_LEN];
    if (strcmp(ep + strlen(ep) - 2, ":0") == 0)
        snprintf(dep, sizeof dep, "%s", ep);
    else
        hr_ring_endpoint(ep, 1, dep, sizeof dep);
    hr_ring_sockopt ds = hr_ring_sockopt_default();
    ds.hwm = 16;
    ds.snd_timeout_ms = 2000;
    if (!(a->pull = hr_ring_socket(a->zctx, ZMQ_PULL, &ds, err)) ||
        !(a->push = hr_ring_socket(a->zctx, ZMQ_PUSH, &ds, err))) {
        rc = HR_ENET;
        goto fail;
    }
    if (a->keys && (rc = hr_ring_secure_server(a->pull, a->keys, err)))
        goto fail;
    if ((rc = hr_ring_bind(a->pull, dep, a->data_ep, sizeof a->data_ep, err)))
        goto fail;
    if (p->name && *p->name) {
        snprintf(a->name, sizeof a->name, "%s", p->name);
    } else {
        char host[48] = "host";
        gethostname(host, sizeof host - 1);
        const char *port = strrchr(a->ctrl_ep, ':');
        snprintf(a->name, sizeof a->name, "%s%s", host, port ? port : "");
    }
    if (p->head && (rc = hr_ring_endpoint(p->head, 0, a->head_ep, sizeof a->head_ep))) {
        rc = hr_seterr(err, HR_EINVAL, "bad head address '%s' (want host:port)", p->head);
        goto fail;
    }
    if (!(a->info_json = hr_agent_info(a, err))) {
        rc = HR_ENOMEM;
        goto fail;
    }
    HR_LOG_INFO(TAG, "%s: control %s, data %s, model %s (%.1f MiB, hash %016llx), %s", a->name,
                a->ctrl_ep, a->data_ep, p->model_path, a->model_size / 1048576.0,
                (unsigned long long)a->model_hash,
                a->keys ? hr_ring_keys_public(a->keys) : "INSECURE (no key)");
    *out = a;
    return 0;
fail:
    hr_agent_destroy(a);
    return rc;
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

void hr_agent_destroy(hr_agent *a) {
    if (!a)
        return;
    atomic_store(&a->stop, 1);
    if (a->data_started)
        pthread_join(a->data_thread, NULL);
    if (a->job_started) {
        pthread_mutex_lock(&a->job_mu);
        pthread_cond_broadcast(&a->job_cv);
        pthread_mutex_unlock(&a->job_mu);
        pthread_join(a->job_thread, NULL);
    }
    hr_local_plan_free(&a->lp);
    hr_prof_model_clear(&a->pm);
    for (int i = 0; i < a->n_devs; i++)
        free(a->devs[i].info);
    free(a->job_json);
    free(a->info_json);
    if (a->ctrl)
        zmq_close(a->ctrl);
    if (a->up)
        zmq_close(a->up);
    if (a->pull)
        zmq_close(a->pull);
    if (a->push)
        zmq_close(a->push);
    if (a->ev_push)
        zmq_close(a->ev_push);
    if (a->ev_pull)
        zmq_close(a->ev_pull);
    hr_ring_keys_close(a->keys); /* its ZAP socket lives in zctx */
    if (a->zctx)
        zmq_ctx_term(a->zctx);
    hr_pool_destroy(a->pool);
    hr_tokenizer_destroy(a->tok);
    hr_model_free(a->m);
    hr_gguf_close(a->g);
    pthread_mutex_destroy(&a->plan_mu);
    pthread_mutex_destroy(&a->st.mu);
    pthread_mutex_destroy(&a->dev_mu);
    pthread_cond_destroy(&a->dev_cv);
    pthread_mutex_destroy(&a->gen_mu);
    pthread_mutex_destroy(&a->job_mu);
    pthread_cond_destroy(&a->job_cv);
    free(a);
}

/* ---- plan application (both roles) ---- */

/* MemAvailable and MemTotal from /proc/meminfo, bytes (-1 if unknown). */
static void hr_meminfo(int64_t *avail, int64_t *total) {
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

/* Refuses a plan whose KV cache and buffers (anonymous memory) would not
 * fit in what this machine has available without swapping, keeping a
 * reserve of 5% of RAM (at least 64 MiB) for everything else. */
static int hr_plan_fits(const hr_agent *a, const hr_local_plan *lp, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    uint64_t kv = 2ull * (uint64_t)lp->w * (uint64_t)lp->k * (uint64_t)lp->n_ctx *
                  (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * sizeof(float);
    uint64_t bufs = (uint64_t)lp->n_batch * (uint64_t)hp->n_embd * 4 * 4 +
                    (a->is_head ? (uint64_t)hp->n_vocab * 4 * 2 : 0);
    int64_t avail, total;
    hr_meminfo(&avail, &total);
    if (avail < 0 || total <= 0)
        return 0;
    int64_t reserve = total / 20 > (64 << 20) ? total / 20 : (64 << 20);
    int64_t lim = (int64_t)(a->p.mem_limit_gib * 1073741824.0);
    if (lim > 0 && lim < avail) /* --mem-limit caps what we may use */
        avail = lim;
    if ((int64_t)(kv + bufs) > avail - reserve)
        return hr_seterr(err, HR_ENOMEM,
                         "plan %u needs %.1f MiB of KV cache (%d layers x %d positions) and "
                         "buffers, but only %.1f MiB are available without swapping",
                         lp->plan_id, (kv + bufs) / 1048576.0, lp->w * lp->k, lp->n_ctx,
                         (avail - reserve) / 1048576.0);
    return 0;
}

int hr_agent_apply_plan(hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = hr_model_hparams(a->m);
    a->plan_epoch++; /* fresh KV: the data thread forgets its request state */
    hr_local_plan_free(&a->lp);
    hr_local_plan *lp = &a->lp;
    lp->plan_id = np->plan_id;
    lp->k = np->k;
    lp->W = np->W;
    lp->w = np->w;
    lp->offset = np->offset;
    lp->n_active = np->n_active;
    lp->index = np->index;
    lp->n_ctx = np->n_ctx;
    lp->n_batch = np->n_batch;
    lp->dtype = np->dtype;
    lp->prefetch = np->prefetch;
    lp->release = np->release;
    snprintf(lp->next_ep, sizeof lp->next_ep, "%s", np->next_ep);
    snprintf(lp->next_key, sizeof lp->next_key, "%s", np->next_key);
    if (lp->k < 1 || lp->k > HR_AGENT_MAX_K || lp->W * lp->k != hp->n_layer || lp->w < 0 ||
        lp->offset < 0 || lp->offset + lp->w > lp->W || lp->n_batch < 1 || lp->n_ctx < 1 ||
        lp->n_batch > 4096 || hr_ring_dtype_size(lp->dtype) == 0) {
        int rc = hr_seterr(err, HR_EINVAL,
                           "plan %u does not fit the model: k %d, W %d, w %d, offset %d, "
                           "n_layer %d, batch %d",
                           np->plan_id, lp->k, lp->W, lp->w, lp->offset, hp->n_layer, lp->n_batch);
        memset(lp, 0, sizeof *lp);
        return rc;
    }
    int rc = hr_plan_fits(a, lp, err);
    if (rc) {
        memset(lp, 0, sizeof *lp);
        return rc;
    }
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = lp->n_ctx;
    cp.n_batch = lp->n_batch;
    cp.pool = a->pool;
    for (int r = 0; lp->w > 0 && r < lp->k; r++) {
        cp.layer_begin = r * lp->W + lp->offset;
        cp.layer_end = cp.layer_begin + lp->w;
        if ((rc = hr_ctx_create(&lp->ctx[r], a->m, &cp, err)))
            goto fail;
    }
    size_t E = (size_t)hp->n_embd, B = (size_t)lp->n_batch;
    if (a->is_head) {
        cp.layer_begin = cp.layer_end = hp->n_layer;
        if ((rc = hr_ctx_create(&lp->out_ctx, a->m, &cp, err)))
            goto fail;
        lp->logits = malloc((size_t)hp->n_vocab * sizeof(float));
        lp->rx = malloc(HR_RING_HDR_SIZE + B * E * 4);
    }
    lp->hid = malloc(B * E * sizeof(float));
    lp->frame_cap = HR_RING_HDR_SIZE + B * E * 4;
    lp->frame = malloc(lp->frame_cap);
    if (!lp->hid || !lp->frame || (a->is_head && (!lp->logits || !lp->rx))) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory for plan buffers");
        goto fail;
    }
    hr_stream_windows(a);
    if (lp->prefetch)
        hr_stream_after(a, lp->k - 1); /* warm the first window */
    HR_LOG_INFO(TAG, "%s: plan %u: k %d, window %d layers at offset %d of %d per round, next %s",
                a->name, lp->plan_id, lp->k, lp->w, lp->offset, lp->W,
                lp->next_ep[0] ? lp->next_ep : "-");
    return 0;
fail:
    hr_local_plan_free(lp);
    return rc;
}

/* ---- worker data thread ---- */

void hr_agent_push_connect(hr_agent *a) {
    if (strcmp(a->push_ep, a->lp.next_ep) == 0)
        return;
    if (a->push_ep[0])
        zmq_disconnect(a->push, a->push_ep);
    a->push_ep[0] = 0;
    if (!a->lp.next_ep[0])
        return;
    char err[HR_ERR_LEN];
    if (a->keys && hr_ring_secure_client(a->push, a->keys, a->lp.next_key, err)) {
        HR_LOG_ERROR(TAG, "%s: cannot connect to the next device %s: %s", a->name, a->lp.next_ep,
                     err);
        return;
    }
    if (zmq_connect(a->push, a->lp.next_ep) == 0)
        snprintf(a->push_ep, sizeof a->push_ep, "%s", a->lp.next_ep);
}

static void hr_stats_round(hr_agent *a, double ms, int n_tok, bool last_round) {
    pthread_mutex_lock(&a->st.mu);
    if (n_tok == 1)
        a->st.ms_round = a->st.ms_round > 0 ? 0.8 * a->st.ms_round + 0.2 * ms : ms;
    if (last_round)
        a->st.tokens += (uint64_t)n_tok;
    pthread_mutex_unlock(&a->st.mu);
}

static void hr_reject_frame(hr_agent *a, const char *where, const char *why) {
    pthread_mutex_lock(&a->st.mu);
    a->st.frames_rejected++;
    pthread_mutex_unlock(&a->st.mu);
    HR_LOG_WARN(TAG, "%s: rejected frame on %s: %s", a->name, where, why);
}

/* Checks a HIDDEN frame against the plan; returns 0 if it is ours. */
static int hr_check_hidden(const hr_agent *a, const hr_ring_hdr *h, char err[HR_ERR_LEN]) {
    const hr_local_plan *lp = &a->lp;
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    if (h->type != HR_RING_HIDDEN)
        return hr_seterr(err, HR_EFORMAT, "%s frame on the data port", hr_ring_type_name(h->type));
    if (h->plan_id != lp->plan_id)
        return hr_seterr(err, HR_EINVAL, "frame of plan %u, current plan %u", h->plan_id,
                         lp->plan_id);
    if (h->dtype != lp->dtype || h->n_tok > lp->n_batch || h->round >= lp->k || h->pos < 0 ||
        (int64_t)h->pos + h->n_tok > lp->n_ctx ||
        (size_t)h->len != (size_t)h->n_tok * E * hr_ring_dtype_size(h->dtype))
        return hr_seterr(err, HR_EFORMAT,
                         "HIDDEN frame does not fit the plan: dtype %u, n_tok %u (batch %d), "
                         "round %u (k %d), pos %d (ctx %d), %u bytes for n_embd %zu",
                         h->dtype, h->n_tok, lp->n_batch, h->round, lp->k, h->pos, lp->n_ctx,
                         h->len, E);
    return 0;
}

static void *hr_data_main(void *arg) {
    hr_agent *a = arg;
    char err[HR_ERR_LEN];
    size_t cap = HR_RING_HDR_SIZE + (size_t)4096 * hr_model_hparams(a->m)->n_embd * 4;
    uint8_t *rx = malloc(cap); /* largest legal frame: allocated once */
    if (!rx) {
        HR_LOG_ERROR(TAG, "%s: out of memory for the data thread", a->name);
        return NULL;
    }
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    /* replay / reorder guard: frames of the current request must arrive in
     * position order per round; a newer request starts at position 0 */
    uint64_t cur_req = 0, cur_epoch = 0;
    int32_t next_pos[HR_AGENT_MAX_K] = {0};
    while (!atomic_load(&a->stop)) {
        hr_ring_hdr h;
        err[0] = 0;
        long n = hr_ring_recv(a->pull, NULL, NULL, rx, cap, 200, &h, err);
        if (n == 0)
            continue;
        if (n < 0) {
            hr_reject_frame(a, "data port", err);
            continue;
        }
        pthread_mutex_lock(&a->plan_mu);
        hr_local_plan *lp = &a->lp;
        if (hr_check_hidden(a, &h, err)) {
            pthread_mutex_unlock(&a->plan_mu);
            hr_reject_frame(a, "data port", err);
            continue;
        }
        if (h.req_id <= atomic_load(&a->canceled_req) || lp->w <= 0) {
            pthread_mutex_unlock(&a->plan_mu);
            HR_LOG_DEBUG(TAG, "%s: dropped frame of canceled request %llu", a->name,
                         (unsigned long long)h.req_id);
            continue;
        }
        if (a->plan_epoch != cur_epoch || (h.req_id > cur_req && h.pos == 0)) {
            cur_epoch = a->plan_epoch;
            cur_req = h.req_id;
            memset(next_pos, 0, sizeof next_pos);
        }
        if (h.req_id != cur_req || h.pos != next_pos[h.round]) {
            snprintf(err, HR_ERR_LEN,
                     "HIDDEN frame of request %llu at pos %d round %u out of order or replayed "
                     "(current request %llu expects pos %d)",
                     (unsigned long long)h.req_id, h.pos, h.round, (unsigned long long)cur_req,
                     next_pos[h.round]);
            pthread_mutex_unlock(&a->plan_mu);
            hr_reject_frame(a, "data port", err);
            continue;
        }
        next_pos[h.round] = h.pos + h.n_tok;
        hr_agent_push_connect(a);
        int nt = h.n_tok;
        hr_ring_unpack(lp->hid, (size_t)nt * E, rx + HR_RING_HDR_SIZE, h.len, h.dtype);
        double t0 = hr_now_s();
        int rc = hr_ctx_layers(lp->ctx[h.round], lp->hid, nt, h.pos, err);
        hr_stream_after(a, h.round);
        double ms = (hr_now_s() - t0) * 1000.0;
        if (rc) {
            pthread_mutex_unlock(&a->plan_mu);
            HR_LOG_ERROR(TAG, "%s: window failed: %s", a->name, err);
            continue;
        }
        long len = hr_ring_pack(lp->frame + HR_RING_HDR_SIZE, lp->frame_cap - HR_RING_HDR_SIZE,
                                lp->hid, (size_t)nt * E, lp->dtype);
        h.len = (uint32_t)len;
        rc = hr_ring_send(a->push, NULL, 0, lp->frame, &h, err);
        pthread_mutex_unlock(&a->plan_mu);
        hr_stats_round(a, ms, nt, h.round + 1 == lp->k);
        if (rc)
            HR_LOG_WARN(TAG, "%s: cannot pass the hidden state on to %s: %s", a->name, a->push_ep,
                        err);
    }
    free(rx);
    return NULL;
}

/* ---- worker control plane ---- */

/* PLAN payload -> this device's part, with our own prefetch / release
 * settings; the ring members the head vouches for may send us hidden states. */
static int hr_plan_from_msg(hr_agent *a, const hr_ring_hdr *h, const void *pl, hr_local_plan *np,
                            char err[HR_ERR_LEN]) {
    hr_msg_plan m;
    memset(np, 0, sizeof *np);
    int rc = hr_msg_plan_decode(h, pl, &m, err);
    if (rc)
        return rc;
    np->plan_id = m.plan_id;
    np->k = m.k;
    np->W = m.W;
    np->w = m.w;
    np->offset = m.offset;
    np->n_active = m.n_active;
    np->n_ctx = m.n_ctx;
    np->n_batch = m.n_batch;
    np->dtype = m.dtype;
    np->prefetch = m.prefetch && a->p.prefetch;
    np->release = a->p.release >= 0 ? a->p.release == 1 : m.release;
    snprintf(np->next_ep, sizeof np->next_ep, "%s", m.next);
    snprintf(np->next_key, sizeof np->next_key, "%s", m.next_key);
    if (a->keys)
        hr_ring_keys_vouch(a->keys, (const char(*)[HR_RING_KEY_LEN])m.keys, m.n_keys);
    return 0;
}

/* Sends m to the head (frees its payload). */
static void hr_worker_send(hr_agent *a, hr_msg *m) {
    char err[HR_ERR_LEN];
    if (hr_msg_send(a->up, NULL, 0, m, err))
        HR_LOG_DEBUG(TAG, "%s: %s to head: %s", a->name, hr_ring_type_name(m->h.type), err);
}

static void hr_worker_heartbeat(hr_agent *a, double t_sent) {
    double ms, res;
    uint64_t tok, rej;
    pthread_mutex_lock(&a->st.mu);
    ms = a->st.ms_round;
    tok = a->st.tokens;
    rej = a->st.frames_rejected;
    pthread_mutex_unlock(&a->st.mu);
    pthread_mutex_lock(&a->plan_mu);
    res = hr_stream_resident(a);
    uint32_t pid = a->lp.plan_id;
    pthread_mutex_unlock(&a->plan_mu);
    int64_t avail, total; /* MemAvailable, bytes (cheap: no full sysinfo per heartbeat) */
    hr_meminfo(&avail, &total);
    hr_msg_heartbeat hb = {.ms_round = ms,
                           .resident = res,
                           .tokens = tok,
                           .rejected = rej,
                           .mem_avail = avail,
                           .t = t_sent};
    hr_msg m;
    char err[HR_ERR_LEN];
    if (hr_msg_heartbeat_encode(&m, &hb, err) == 0) {
        m.h.plan_id = pid;
        hr_worker_send(a, &m);
    }
}

static int hr_worker_connect(hr_agent *a, char err[HR_ERR_LEN]) {
    if (a->up)
        zmq_close(a->up);
    hr_ring_sockopt so = hr_ring_sockopt_default();
    so.max_msg = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL + 1024;
    so.snd_timeout_ms = 100;
    if (!(a->up = hr_ring_socket(a->zctx, ZMQ_DEALER, &so, err)))
        return HR_ENET;
    int rc;
    if (a->keys && (rc = hr_ring_secure_client(a->up, a->keys, a->head_key, err)))
        return rc;
    if (zmq_connect(a->up, a->head_ep) != 0)
        return hr_seterr(err, HR_ENET, "cannot connect to head %s: %s", a->head_ep,
                         zmq_strerror(zmq_errno()));
    return 0;
}

/* --join: asks the head (as a join token holder) to trust our key. */
static int hr_worker_pair(hr_agent *a, char err[HR_ERR_LEN]) {
    char hk[HR_RING_KEY_LEN], sec[HR_RING_KEY_LEN];
    if (hr_ring_join_parse(a->p.join, hk, sec) != 0)
        return hr_seterr(err, HR_EINVAL, "--join: not a join token");
    void *s = hr_ring_socket(a->zctx, ZMQ_DEALER, NULL, err);
    if (!s)
        return HR_ENET;
    int rc = hr_ring_secure_client_pairing(s, sec, hk, err);
    if (rc == 0 && zmq_connect(s, a->head_ep) != 0)
        rc = hr_seterr(err, HR_ENET, "cannot connect to head %s", a->head_ep);
    hr_msg_pair pm;
    snprintf(pm.name, sizeof pm.name, "%s", a->name);
    snprintf(pm.pubkey, sizeof pm.pubkey, "%s", hr_ring_keys_public(a->keys));
    hr_msg m;
    if (rc == 0)
        rc = hr_msg_pair_encode(&m, &pm, err);
    if (rc == 0 && (rc = hr_msg_send(s, NULL, 0, &m, err)) == 0) {
        hr_ring_hdr h;
        uint8_t buf[HR_RING_HDR_SIZE + 512];
        double until = hr_now_s() + 10.0;
        rc = hr_seterr(err, HR_ETIMEDOUT,
                       "no pairing answer from head %s within 10 s (wrong token or address?)",
                       a->head_ep);
        while (hr_now_s() < until && !atomic_load(&a->stop)) {
            char e2[HR_ERR_LEN];
            long n = hr_ring_recv(s, NULL, NULL, buf, sizeof buf, 200, &h, e2);
            if (n > 0 && h.type == HR_RING_PAIR) {
                HR_LOG_INFO(TAG, "%s: paired with head %s by join token", a->name, a->head_ep);
                rc = 0;
                break;
            }
            hr_msg_reject rj;
            if (n > 0 && h.type == HR_RING_REJECT &&
                hr_msg_reject_decode(&h, buf + HR_RING_HDR_SIZE, &rj, e2) == 0) {
                rc = hr_seterr(err, HR_EDENIED, "head refused pairing: %s", rj.reason);
                break;
            }
        }
    }
    zmq_close(s);
    return rc;
}

/* Worker control loop: join, apply plans, heartbeat, follow cancels. */
static int hr_worker_run(hr_agent *a, char err[HR_ERR_LEN]) {
    int rc;
    if (a->p.join && a->keys && (rc = hr_worker_pair(a, err)))
        return rc;
    if ((rc = hr_worker_connect(a, err)))
        return rc;
    if (pthread_create(&a->data_thread, NULL, hr_data_main, a) != 0)
        return hr_seterr(err, HR_EINTERNAL, "cannot start the data thread");
    a->data_started = true;
    bool joined = false;
    double last_join = 0, last_hb = 0, last_head = hr_now_s();
    size_t cap = HR_RING_HDR_SIZE + HR_RING_MAX_CTRL;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    rc = 0;
    while (!atomic_load(&a->stop)) {
        double now = hr_now_s();
        if (!joined && now - last_join > 1.0) {
            hr_msg m = hr_msg_empty(HR_RING_JOIN, 0, 0);
            m.h.len = (uint32_t)strlen(a->info_json);
            if ((m.data = strdup(a->info_json)))
                hr_worker_send(a, &m);
            last_join = now;
        }
        if (joined && now - last_hb > a->p.hb_interval_ms / 1000.0) {
            hr_worker_heartbeat(a, now);
            last_hb = now;
        }
        if (joined && now - last_head > 3.0 * a->p.hb_timeout_ms / 1000.0) {
            HR_LOG_WARN(TAG, "%s: no word from head %s for %.1f s; joining again", a->name,
                        a->head_ep, now - last_head);
            joined = false;
            last_head = now;
        }
        zmq_pollitem_t it[2] = {{.socket = a->up, .events = ZMQ_POLLIN},
                                {.socket = a->ctrl, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 2, 50) <= 0)
            continue;
        hr_ring_hdr h;
        char e2[HR_ERR_LEN] = "";
        if (it[1].revents & ZMQ_POLLIN) { /* our own control port: invites, strays */
            uint8_t id[HR_RING_MAX_ID];
            size_t idl = 0;
            long n = hr_ring_recv(a->ctrl, id, &idl, buf, cap, 0, &h, e2);
            if (n < 0)
                hr_reject_frame(a, "control port", e2);
            else if (n > 0 && h.type == HR_RING_INVITE)
                HR_LOG_INFO(TAG, "%s: already joined to %s; invite ignored", a->name, a->head_ep);
            else if (n > 0)
                hr_reject_frame(a, "control port", hr_ring_type_name(h.type));
        }
        if (!(it[0].revents & ZMQ_POLLIN))
            continue;
        long n = hr_ring_recv(a->up, NULL, NULL, buf, cap, 0, &h, e2);
        if (n == HR_EUNSUPPORTED) { /* only the head reaches this link */
            rc = hr_seterr(err, HR_EUNSUPPORTED, "head %s speaks another protocol: %s", a->head_ep,
                           e2);
            atomic_store(&a->stop, 1);
            break;
        }
        if (n <= 0) {
            if (n < 0)
                hr_reject_frame(a, "head link", e2);
            continue;
        }
        last_head = hr_now_s();
        const char *pl = (const char *)buf + HR_RING_HDR_SIZE;
        switch (h.type) {
        case HR_RING_WELCOME:
            if (!joined)
                HR_LOG_INFO(TAG, "%s: joined head %s", a->name, a->head_ep);
            joined = true;
            break;
        case HR_RING_REJECT: {
            hr_msg_reject rj;
            if (hr_msg_reject_decode(&h, pl, &rj, e2)) {
                hr_reject_frame(a, "head link", e2);
            } else if (rj.fatal) { /* model or version mismatch */
                rc = hr_seterr(err, HR_EDENIED, "head %s refused us: %s", a->head_ep, rj.reason);
                atomic_store(&a->stop, 1);
            } else {
                HR_LOG_WARN(TAG, "%s: head says: %s", a->name, rj.reason);
                joined = false;
                last_join = 0;
            }
            break;
        }
        case HR_RING_PLAN: {
            hr_local_plan np;
            hr_msg_ready rd = {.ok = true};
            int prc = hr_plan_from_msg(a, &h, pl, &np, e2);
            if (prc == 0) {
                pthread_mutex_lock(&a->plan_mu);
                prc = hr_agent_apply_plan(a, &np, e2);
                pthread_mutex_unlock(&a->plan_mu);
            }
            if (prc) {
                rd.ok = false;
                snprintf(rd.error, sizeof rd.error, "%s", e2);
                HR_LOG_ERROR(TAG, "%s: cannot apply plan: %s", a->name, e2);
            }
            hr_msg m;
            if (hr_msg_ready_encode(&m, &rd, e2) == 0) {
                m.h.plan_id = np.plan_id ? np.plan_id : h.plan_id;
                hr_worker_send(a, &m);
            }
            break;
        }
        case HR_RING_CANCEL: {
            unsigned long long cur = atomic_load(&a->canceled_req);
            if (h.req_id > cur)
                atomic_store(&a->canceled_req, h.req_id);
            HR_LOG_INFO(TAG, "%s: request %llu canceled", a->name, (unsigned long long)h.req_id);
            break;
        }
        case HR_RING_START:
            HR_LOG_DEBUG(TAG, "%s: request %llu starts", a->name, (unsigned long long)h.req_id);
            break;
        case HR_RING_HEARTBEAT:
            break;
        default:
            hr_reject_frame(a, "head link", hr_ring_type_name(h.type));
        }
    }
    if (joined) {
        hr_msg m = hr_msg_empty(HR_RING_LEAVE, 0, 0);
        hr_worker_send(a, &m);
    }
    free(buf);
    return rc;
}

/* An agent without --head waits for an invitation when it has no workers
 * of its own and no expectation set; it is a head otherwise. */
int hr_agent_run(hr_agent *a, char err[HR_ERR_LEN]) {
    if (!a->is_head)
        return hr_worker_run(a, err);
    int rc = hr_head_run(a, err);
    if (rc == 1) { /* invited: become a worker */
        a->is_head = false;
        return hr_worker_run(a, err);
    }
    return rc;
}
