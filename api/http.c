/* http.c - the head's HTTP server (libmicrohttpd, one thread per
 * connection, poll()): routing, API key, size and connection limits, the
 * endpoints, generation requests handed to the head's request service
 * (service.h), which queues them (429 when full) and runs them in order,
 * and the graceful shutdown (hr_http_drain).
 *
 * A request's life: the connection thread parses it (and renders a chat),
 * submits it to the service (which tokenizes and checks the context) and
 * then either waits for it to finish (non-streamed) or returns an SSE
 * response (respond.c) whose reader blocks until the service thread
 * releases text. Both watch the client's socket for a hang-up and cancel
 * the request, which the service turns into a CANCEL for every device of
 * the ring (or drops from the queue). */
#include "api/http-impl.h"

#include "agent/status.h"
#include "common/log.h"
#include "common/sync.h"
#include "mmap/gguf.h"
#include "model/tokenizer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TAG "http"

#define HR_HTTP_SEND_TIMEOUT_S 30u           /* an answer the client reads nothing of */
#define HR_HTTP_THREAD_STACK (1024u * 1024u) /* bytes per connection thread */

enum {
    HR_ROUTE_NONE,
    HR_ROUTE_PAGE,
    HR_ROUTE_HEALTH,
    HR_ROUTE_MODELS,
    HR_ROUTE_MODEL, /* /v1/models/{id} */
    HR_ROUTE_CLUSTER,
    HR_ROUTE_COMPLETIONS,
    HR_ROUTE_CHAT,
};

/* Per request (MHD's con_cls). */
typedef struct {
    int route;
    bool refused; /* an early response was queued */
    bool too_big; /* the body outgrew max_body: the rest is dropped, then 413 */
    size_t dropped;
    char *body;
    size_t len, cap;
    hr_job *job;
    char model[160]; /* HR_ROUTE_MODEL: the id asked for */
} hr_conn;

hr_http_params hr_http_params_default(void) {
    return (hr_http_params){.listen = "127.0.0.1:8080",
                            .max_body = 1u << 20,
                            .max_tokens = 4096,
                            .queue_max = 8,
                            .max_conns = 2048,
                            .max_conns_per_ip = 256,
                            .read_timeout_s = 10,
                            .listen_fd = -1};
}

/* ---- jobs ---- */

/* Appends released text (srv->mu held). */
static int hr_job_append(hr_job *j, const char *s, size_t n) {
    if (j->text_len + n + 1 > j->text_cap) {
        size_t cap = j->text_cap ? j->text_cap * 2 : 1024;
        while (cap < j->text_len + n + 1)
            cap *= 2;
        char *t = realloc(j->text, cap);
        if (!t)
            return HR_ENOMEM;
        j->text = t;
        j->text_cap = cap;
    }
    memcpy(j->text + j->text_len, s, n);
    j->text_len += n;
    j->text[j->text_len] = 0;
    return 0;
}

static void hr_job_flush_delta(hr_job *j) {
    size_t n = 0;
    const char *d = hr_gen_delta(j->gen, &n);
    if (n == 0)
        return;
    pthread_mutex_lock(&j->srv->mu);
    hr_job_append(j, d, n);
    pthread_cond_broadcast(&j->srv->cv);
    pthread_mutex_unlock(&j->srv->mu);
}

static int hr_job_token(void *ud, int32_t id, const char *piece, int len) {
    hr_job *j = ud;
    (void)piece;
    (void)len;
    if (id < 0) /* the head's final detokenizer flush: hr_gen decodes for itself */
        return 0;
    hr_finish fin = HR_FINISH_NONE;
    if (hr_gen_push(j->gen, id, &fin))
        return 1;
    hr_job_flush_delta(j);
    return fin != HR_FINISH_NONE;
}

/* on_done: the service finished (or dropped) the request. */
static void hr_job_done(void *ud, int rc, const hr_head_stats *st, const char *err) {
    hr_job *j = ud;
    hr_http *h = j->srv;
    if (rc == 0 && hr_gen_finish_reason(j->gen) == HR_FINISH_NONE)
        hr_gen_finish(j->gen, HR_FINISH_LENGTH); /* the context ran out */
    if (rc == 0)
        hr_job_flush_delta(j);
    pthread_mutex_lock(&h->mu);
    bool shutdown = h->shutdown;
    pthread_mutex_unlock(&h->mu);
    if (rc == HR_ECANCELED)
        HR_LOG_INFO(TAG, "%s: canceled after %d tokens (%s)", j->id, st->n_gen,
                    shutdown ? "server shutting down" : "client gone");
    else if (rc)
        HR_LOG_WARN(TAG, "%s failed: %s", j->id, err);
    else
        HR_LOG_INFO(TAG, "%s: %d tokens, %.1f tokens/s, finish %s", j->id, st->n_gen,
                    st->gen_s > 0 ? st->n_gen / st->gen_s : 0.0,
                    hr_finish_name(hr_gen_finish_reason(j->gen)));
    pthread_mutex_lock(&h->mu);
    j->rc = rc;
    j->shutdown = rc == HR_ECANCELED && shutdown;
    snprintf(j->err, sizeof j->err, "%s",
             j->shutdown ? "the server is shutting down; the request was stopped" : err);
    j->finish = hr_gen_finish_reason(j->gen);
    j->st = *st;
    j->done = true;
    h->n_live--;
    pthread_cond_broadcast(&h->cv);
    hr_job_unref_locked(j); /* the service's */
    pthread_mutex_unlock(&h->mu);
}

/* ---- endpoints ---- */

static enum MHD_Result hr_serve_page(struct MHD_Connection *c) {
    const char *page = hr_http_status_page();
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(page), (void *)page, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    hr_add_common_headers(r, "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static bool hr_ready(hr_http *h, char err[HR_ERR_LEN]) {
    return hr_head_wait_ready(h->a, 0, 0, err) == 0;
}

/* The head's status snapshot (malloc'ed, the caller frees); NULL on OOM. */
static hr_status *hr_status_snap(hr_http *h) {
    hr_status *st = malloc(sizeof *st);
    if (st && hr_head_status(h->a, st) != 0) {
        free(st);
        st = NULL;
    }
    return st;
}

/* Why the cluster is not ready, in words: the workers still awaited (from
 * the head's status), else the head's own reason. True when it failed (no
 * plan: a lost device) rather than still starting. */
static bool hr_not_ready_text(hr_http *h, const char *why, char out[HR_ERR_LEN]) {
    hr_status *st = hr_status_snap(h);
    int joined = 0, ready = 0;
    for (int i = 0; st && i < st->n_devices; i++) {
        const hr_status_dev *d = &st->devices[i];
        if (d->head || d->lost)
            continue;
        joined++;
        ready += d->ready;
    }
    bool failed = st && st->plan.error[0];
    if (failed) /* a plan failed (a lost device): that, not the workers awaited */
        snprintf(out, HR_ERR_LEN, "cluster not ready: %.200s", st->plan.error);
    else if (h->p.expect > joined)
        snprintf(out, HR_ERR_LEN, "waiting for %d worker%s (%d joined)", h->p.expect,
                 h->p.expect == 1 ? "" : "s", joined);
    else if (joined > ready)
        snprintf(out, HR_ERR_LEN, "waiting for the plan: %d of %d workers ready", ready, joined);
    else
        snprintf(out, HR_ERR_LEN, "%s", why);
    free(st);
    return failed;
}

static enum MHD_Result hr_serve_health(hr_http *h, struct MHD_Connection *c) {
    char err[HR_ERR_LEN] = "", msg[HR_ERR_LEN];
    pthread_mutex_lock(&h->mu);
    bool draining = h->draining;
    pthread_mutex_unlock(&h->mu);
    bool ok = !draining && hr_ready(h, err), failed = false;
    if (draining)
        snprintf(msg, sizeof msg, "the server is shutting down");
    else if (!ok)
        failed = hr_not_ready_text(h, err, msg);
    /* "loading" while starting; "unavailable" when a lost device left no plan */
    const char *what = draining ? "shutting down" : failed ? "unavailable" : "loading";
    json_t *j = ok ? json_pack("{s:s}", "status", "ok")
                   : json_pack("{s:s,s:o}", "status", what, "error", hr_jstr(msg, strlen(msg)));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return hr_send_json(c, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, s);
}

/* Whether a request's "model" names the served model (its id or an alias);
 * no model given is fine too. */
static bool hr_model_known(const hr_http *h, const char *model) {
    if (!model || strcmp(model, h->model_id) == 0)
        return true;
    for (int i = 0; i < h->p.n_aliases; i++)
        if (h->p.aliases[i] && strcmp(model, h->p.aliases[i]) == 0)
            return true;
    return false;
}

static json_t *hr_model_json(const hr_http *h) {
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", h->model_id, "object", "model", "created",
                     (json_int_t)h->started, "owned_by", "hearth", "context_length", h->n_ctx);
}

static enum MHD_Result hr_model_404(struct MHD_Connection *c, const char *model) {
    hr_api_err e;
    hr_api_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                "the model '%.120s' does not exist (this server serves one model: see "
                "/v1/models)",
                model);
    return hr_send_err(c, &e);
}

static enum MHD_Result hr_serve_models(hr_http *h, struct MHD_Connection *c, const char *id) {
    json_t *j;
    if (id) {
        if (!hr_model_known(h, id))
            return hr_model_404(c, id);
        j = hr_model_json(h);
    } else {
        j = json_pack("{s:s,s:[o]}", "object", "list", "data", hr_model_json(h));
    }
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return hr_send_json(c, MHD_HTTP_OK, s);
}

/* The status document with the API's counters (the status page reads it). */
static enum MHD_Result hr_serve_cluster(hr_http *h, struct MHD_Connection *c) {
    hr_status *st = hr_status_snap(h);
    if (!st)
        return hr_send_json(c, 500, NULL);
    st->api.present = true;
    snprintf(st->api.model, sizeof st->api.model, "%s", h->model_id);
    st->api.n_ctx = h->n_ctx;
    hr_service_stats_get(h->svc, &st->api.svc);
    char *s = hr_status_json(st);
    free(st);
    return hr_send_json(c, s ? MHD_HTTP_OK : 500, s);
}

/* The prompt text of r: a completion's prompt, or the chat rendered with
 * the model's template (*owned is set when allocated). */
static int hr_prompt_text(hr_http *h, const hr_api_req *r, const char **text, char **owned,
                          hr_api_err *e) {
    *owned = NULL;
    *text = r->prompt;
    if (r->kind != HR_API_CHAT)
        return 0;
    char err[HR_ERR_LEN] = "";
    int n = hr_chat_render(&h->tmpl, r->msgs, r->n_msgs, true, NULL, 0, err);
    if (n < 0)
        return hr_api_fail(e, 400, "invalid_request_error", NULL, "messages", "%s", err);
    if (!(*owned = malloc((size_t)n + 1)))
        return hr_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    hr_chat_render(&h->tmpl, r->msgs, r->n_msgs, true, *owned, (size_t)n + 1, err);
    *text = *owned;
    return 0;
}

/* Submits j to the service (tokenized there, special tokens parsed in a
 * rendered chat; the context checked; queued). 0 or e filled. */
static int hr_job_submit(hr_http *h, hr_job *j, hr_api_err *e) {
    const char *text;
    char *owned, err[HR_ERR_LEN] = "";
    int rc = hr_prompt_text(h, &j->req, &text, &owned, e);
    if (rc)
        return rc;
    bool chat = j->req.kind == HR_API_CHAT;
    hr_service_req r = hr_service_req_default();
    r.text = text;
    r.text_len = strlen(text);
    r.special = chat;
    r.sp = j->req.sp;
    r.max_tokens = j->req.max_tokens;
    r.fit = true; /* stops where the context ends: finish "length" */
    r.client = "http";
    r.client_len = 4;
    pthread_mutex_lock(&h->mu);
    snprintf(j->id, sizeof j->id, "%s-%s%llu", chat ? "chatcmpl" : "cmpl", h->id_tag, ++h->next_id);
    j->refs++; /* the service's, until on_done */
    h->n_live++;
    pthread_mutex_unlock(&h->mu);
    rc = hr_service_submit(h->svc, &r, hr_job_token, hr_job_done, j, &j->rid, err);
    free(owned);
    if (rc) {
        pthread_mutex_lock(&h->mu);
        j->refs--;
        h->n_live--;
        pthread_mutex_unlock(&h->mu);
    }
    const char *param = chat ? "messages" : "prompt";
    switch (rc) {
    case 0:
        return 0;
    case HR_EAGAIN:
        return hr_api_fail(e, 429, "rate_limit_error", "queue_full", NULL,
                           "too many requests are waiting; try again later");
    case HR_EINVAL:
        return hr_api_fail(e, 400, "invalid_request_error", NULL, param, "%s", err);
    case HR_ERANGE:
        return hr_api_fail(e, 400, "invalid_request_error", "context_length_exceeded", param, "%s",
                           err);
    case HR_ECANCELED:
        return hr_api_fail(e, 503, "server_error", NULL, NULL, "%s", err);
    default:
        return hr_api_fail(e, 500, "server_error", NULL, NULL, "%s", err);
    }
}

/* Non-streamed: waits for j, watching the client; then answers. MHD's
 * idle timer is off while it waits (a long generation is no idle client)
 * and starts afresh for sending the answer. */
static enum MHD_Result hr_job_wait(hr_http *h, struct MHD_Connection *c, hr_job *j) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    pthread_mutex_lock(&h->mu);
    while (!j->done) {
        hr_cond_wait_ms(&h->cv, &h->mu, 100);
        if (j->done)
            break;
        bool stop = h->stop;
        pthread_mutex_unlock(&h->mu);
        if (stop || hr_client_gone(j->fd)) {
            hr_service_cancel(h->svc, j->rid);
            HR_LOG_INFO(TAG, "%s: %s", j->id, stop ? "server stopping" : "client hung up");
            return MHD_NO;
        }
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, HR_HTTP_SEND_TIMEOUT_S);
    if (j->rc) {
        hr_api_err e;
        hr_job_error(j, &e);
        return hr_send_err(c, &e);
    }
    return hr_send_answer(h, c, j);
}

/* Parses a generation request and hands it to the service. */
static enum MHD_Result hr_serve_generate(hr_http *h, struct MHD_Connection *c, hr_conn *cc) {
    hr_api_err e;
    char err[HR_ERR_LEN] = "";
    hr_job *j = calloc(1, sizeof *j);
    if (!j)
        return hr_fail(c, 500, "server_error", NULL, "out of memory");
    j->srv = h;
    j->refs = 1;
    pthread_mutex_lock(&h->mu);
    h->n_jobs++;
    pthread_mutex_unlock(&h->mu);
    j->fd = -1;
    cc->job = j;
    hr_api_kind kind = cc->route == HR_ROUTE_CHAT ? HR_API_CHAT : HR_API_COMPLETIONS;
    if (hr_api_parse(&j->req, kind, cc->body ? cc->body : "", cc->len, h->p.max_tokens, &e))
        return hr_send_err(c, &e);
    if (!hr_model_known(h, j->req.model))
        return hr_model_404(c, j->req.model);
    if (!hr_ready(h, err))
        return hr_fail(c, 503, "server_error", "cluster_not_ready", err);
    hr_gen_params gp = hr_gen_params_default();
    gp.stop = j->req.stop;
    gp.n_stop = j->req.n_stop;
    gp.max_tokens = j->req.max_tokens;
    gp.strip_leading_space = kind == HR_API_CHAT;
    if (hr_gen_create(&j->gen, hr_head_tokenizer(h->a), &gp, err))
        return hr_fail(c, 500, "server_error", NULL, err);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->created = (long long)time(NULL);
    j->last_write = hr_now_s();
    if (hr_job_submit(h, j, &e))
        return hr_send_err(c, &e);
    pthread_mutex_lock(&h->mu);
    bool stop = h->stop; /* hr_http_stop may have canceled before this was queued */
    pthread_mutex_unlock(&h->mu);
    if (stop)
        hr_service_cancel(h->svc, j->rid);
    return j->req.stream ? hr_sse_start(c, j) : hr_job_wait(h, c, j);
}

/* ---- MHD callbacks ---- */

static int hr_route(const char *url, const char *method, bool *bad_method) {
    static const struct {
        const char *url, *method;
        int route;
    } routes[] = {
        {"/", "GET", HR_ROUTE_PAGE},
        {"/index.html", "GET", HR_ROUTE_PAGE},
        {"/health", "GET", HR_ROUTE_HEALTH},
        {"/v1/health", "GET", HR_ROUTE_HEALTH},
        {"/v1/models", "GET", HR_ROUTE_MODELS},
        {"/v1/cluster", "GET", HR_ROUTE_CLUSTER},
        {"/v1/completions", "POST", HR_ROUTE_COMPLETIONS},
        {"/v1/chat/completions", "POST", HR_ROUTE_CHAT},
    };
    *bad_method = false;
    if (strncmp(url, "/v1/models/", 11) == 0 && url[11]) {
        bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        *bad_method = !get;
        return get ? HR_ROUTE_MODEL : HR_ROUTE_NONE;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].url) != 0)
            continue;
        bool ok = strcmp(method, routes[i].method) == 0 ||
                  (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0);
        if (ok)
            return routes[i].route;
        *bad_method = true;
        return HR_ROUTE_NONE;
    }
    return HR_ROUTE_NONE;
}

static enum MHD_Result hr_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version, const char *upload,
                                     size_t *upload_size, void **con_cls) {
    hr_http *h = cls;
    hr_conn *cc = *con_cls;
    (void)version;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc)))
            return MHD_NO;
        *con_cls = cc;
        char ip[64];
        if (hr_guard_over(h, c, ip, sizeof ip)) {
            cc->refused = true;
            char msg[160];
            snprintf(msg, sizeof msg,
                     "too many connections from %s (at most %d at once); try again shortly", ip,
                     h->p.max_conns_per_ip);
            return hr_fail(c, 503, "server_error", "too_many_connections", msg);
        }
        bool bad_method = false;
        cc->route = hr_route(url, method, &bad_method);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        cc->refused = true;
        if (cc->route == HR_ROUTE_NONE && bad_method)
            return hr_fail(c, 405, "invalid_request_error", "method_not_allowed",
                           "method not allowed for this path");
        if (cc->route == HR_ROUTE_NONE)
            return hr_fail(c, 404, "invalid_request_error", "not_found", "no such endpoint");
        if (strncmp(url, "/v1/", 4) == 0 &&
            !hr_api_auth_ok(
                MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                h->api_key))
            return hr_fail(c, 401, "invalid_request_error", "invalid_api_key",
                           "missing or incorrect API key (send Authorization: Bearer KEY)");
        if (cl && strtoull(cl, NULL, 10) > h->p.max_body) {
            hr_api_err e;
            hr_api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                        "request body larger than %zu bytes", h->p.max_body);
            return hr_send_err(c, &e);
        }
        bool gen = cc->route == HR_ROUTE_COMPLETIONS || cc->route == HR_ROUTE_CHAT;
        pthread_mutex_lock(&h->mu);
        bool draining = h->draining;
        pthread_mutex_unlock(&h->mu);
        if (draining && gen)
            return hr_fail(c, 503, "server_error", "shutting_down",
                           "the server is shutting down; try again later");
        /* past max_conns only /health is served (the reserve keeps it answering) */
        if (cc->route != HR_ROUTE_HEALTH && hr_guard_count(h) > h->p.max_conns)
            return hr_fail(c, 503, "server_error", "too_many_connections",
                           "too many open connections; try again later");
        if (cc->route == HR_ROUTE_MODEL)
            snprintf(cc->model, sizeof cc->model, "%s", url + 11);
        cc->refused = false;
        return MHD_YES;
    }
    if (cc->refused) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        /* a body without Content-Length that grows too large: MHD answers only after the
         * upload, so drop the rest (closing the connection when it goes on and on) */
        if (cc->too_big || cc->len + n > h->p.max_body) {
            cc->too_big = true;
            cc->dropped += n;
            return cc->dropped > 64 * h->p.max_body ? MHD_NO : MHD_YES;
        }
        if (cc->len + n + 1 > cc->cap) {
            size_t cap = cc->cap ? cc->cap : 4096;
            while (cap < cc->len + n + 1)
                cap *= 2;
            char *b = realloc(cc->body, cap);
            if (!b)
                return MHD_NO;
            cc->body = b;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload, n);
        cc->len += n;
        cc->body[cc->len] = 0;
        return MHD_YES;
    }
    cc->refused = true; /* answered below */
    hr_guard_serving(h, c, true);
    if (cc->too_big) {
        hr_api_err e;
        hr_api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                    "request body larger than %zu bytes", h->p.max_body);
        return hr_send_err(c, &e);
    }
    switch (cc->route) {
    case HR_ROUTE_PAGE:
        return hr_serve_page(c);
    case HR_ROUTE_HEALTH:
        return hr_serve_health(h, c);
    case HR_ROUTE_MODELS:
        return hr_serve_models(h, c, NULL);
    case HR_ROUTE_MODEL:
        return hr_serve_models(h, c, cc->model);
    case HR_ROUTE_CLUSTER:
        return hr_serve_cluster(h, c);
    default:
        return hr_serve_generate(h, c, cc);
    }
}

static void hr_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                            enum MHD_RequestTerminationCode toe) {
    hr_conn *cc = *con_cls;
    hr_http *h = cls;
    hr_guard_serving(h, c, false); /* a kept-alive connection waits for its next request */
    if (!cc)
        return;
    if (cc->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && cc->job->rid)
            hr_service_cancel(cc->job->srv->svc, cc->job->rid);
        hr_job_unref(cc->job);
    }
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

static void hr_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    HR_LOG_DEBUG(TAG, "microhttpd: %s", msg);
}

/* ---- start / stop ---- */

static int hr_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sl) {
    char host[128];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof host)
        return HR_EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535)
        return HR_EINVAL;
    memset(ss, 0, sizeof *ss);
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
        host[hl - 1] = 0;
        if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1)
            return HR_EINVAL;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *sl = sizeof *a6;
        return 0;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
        return HR_EINVAL;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    *sl = sizeof *a4;
    return 0;
}

int hr_http_listen(const char *addr, int *fd, char err[HR_ERR_LEN]) {
    *fd = -1;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    if (!addr || hr_parse_listen(addr, &ss, &sl))
        return hr_seterr(err, HR_EINVAL, "bad API address '%s' (want ADDR:PORT, numeric)",
                         addr ? addr : "");
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return hr_seterr(err, HR_ENET, "cannot listen on %s for the HTTP API: socket: %s", addr,
                         strerror(errno));
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6)
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&ss, sl) != 0 || listen(s, SOMAXCONN) != 0) {
        int e = errno;
        close(s);
        return hr_seterr(err, HR_ENET, "cannot listen on %s for the HTTP API: %s%s", addr,
                         strerror(e),
                         e == EADDRINUSE ? " (another program, or another hearth, has the port)"
                         : e == EADDRNOTAVAIL ? " (no interface of this machine has the address)"
                         : e == EACCES        ? " (ports below 1024 need privileges)"
                                              : "");
    }
    *fd = s;
    return 0;
}

static bool hr_is_loopback(const struct sockaddr_storage *ss) {
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* The model id from its file name; the chat template from the GGUF. */
static int hr_http_model(hr_http *h, char err[HR_ERR_LEN]) {
    const char *path = h->p.model_path ? h->p.model_path : "model";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(h->model_id, sizeof h->model_id, "%s", base);
    size_t n = strlen(h->model_id);
    if (n > 5 && strcmp(h->model_id + n - 5, ".gguf") == 0)
        h->model_id[n - 5] = 0;
    hr_gguf *g = NULL;
    if (h->p.model_path)
        hr_gguf_open(&g, h->p.model_path, err);
    int rc = hr_chat_template_pick(&h->tmpl, g, hr_head_tokenizer(h->a), h->p.chat_template, err);
    hr_gguf_close(g);
    return rc;
}

/* A random tag for this start's completion ids (the clock and pid when
 * /dev/urandom cannot be read). */
static void hr_http_id_tag(hr_http *h) {
    unsigned char b[6] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && read(fd, b, sizeof b) == (ssize_t)sizeof b;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        unsigned long long x =
            (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
        memcpy(b, &x, sizeof b);
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(h->id_tag + 2 * i, 3, "%02x", b[i]);
    h->id_tag[2 * sizeof b] = '-';
    h->id_tag[2 * sizeof b + 1] = 0;
}

/* Lowers max_conns to what the open-file limit allows (each connection is
 * a descriptor; 128 stay for the model, the ring and the rest). */
static void hr_http_fit_fds(hr_http *h) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    long room = (long)rl.rlim_cur - 128 - HR_HTTP_HEALTH_RESERVE;
    if (room < 16)
        room = 16;
    if (h->p.max_conns > room) {
        HR_LOG_WARN(TAG,
                    "HTTP API: %d connections at most (the open-file limit is %llu; raise it "
                    "with ulimit -n for more)",
                    (int)room, (unsigned long long)rl.rlim_cur);
        h->p.max_conns = (int)room;
    }
}

int hr_http_start(hr_http **out, hr_agent *a, const hr_http_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    int lfd = p ? p->listen_fd : -1;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    int rc0 = 0;
    if (!a || !p || !p->listen)
        rc0 = hr_seterr(err, HR_EINVAL, "no agent or listen address");
    else if (!hr_agent_is_head(a) || !hr_head_tokenizer(a) || !hr_head_service(a))
        rc0 = hr_seterr(err, HR_EINVAL, "the HTTP API runs on the head only");
    else if (hr_parse_listen(p->listen, &ss, &sl))
        rc0 =
            hr_seterr(err, HR_EINVAL, "bad API address '%s' (want ADDR:PORT, numeric)", p->listen);
    else if (lfd < 0)
        rc0 = hr_http_listen(p->listen, &lfd, err); /* bound here: a failure has its reason */
    if (rc0) {
        if (lfd >= 0)
            close(lfd);
        return rc0;
    }
    /* Each connection's buffers (libmicrohttpd's per-connection pool, tens
     * of KiB) come from its own thread's malloc arena; after a flood of
     * concurrent connections those arenas stay fragmented and the process
     * keeps megabytes it does not use. Buffers from 16 KiB up are mapped
     * instead and go back to the system when the connection closes
     * (process-wide; the engine's large buffers are mapped anyway). */
    mallopt(M_MMAP_THRESHOLD, 16 * 1024);
    hr_http *h = calloc(1, sizeof *h);
    if (!h) {
        close(lfd);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    h->a = a;
    h->svc = hr_head_service(a);
    h->n_ctx = hr_service_n_ctx(h->svc);
    h->p = *p;
    hr_http_params def = hr_http_params_default();
    if (h->p.max_body == 0)
        h->p.max_body = def.max_body;
    if (h->p.max_tokens <= 0)
        h->p.max_tokens = def.max_tokens;
    if (h->p.queue_max < 0)
        h->p.queue_max = def.queue_max;
    if (h->p.max_conns <= 0)
        h->p.max_conns = def.max_conns;
    if (h->p.max_conns_per_ip <= 0)
        h->p.max_conns_per_ip = def.max_conns_per_ip;
    if (h->p.read_timeout_s <= 0)
        h->p.read_timeout_s = def.read_timeout_s;
    hr_http_fit_fds(h);
    h->api_key = p->api_key && *p->api_key ? strdup(p->api_key) : NULL;
    h->started = (long long)time(NULL);
    hr_http_id_tag(h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_mutex_init(&h->cmu, NULL);
    pthread_cond_init(&h->wcv, NULL);
    int rc = hr_http_model(h, err);
    if (rc) {
        close(lfd);
        goto fail;
    }
    if ((rc = hr_guard_start(h))) {
        close(lfd);
        hr_seterr(err, rc, "cannot start the HTTP API's watchdog thread");
        goto fail;
    }
    if (h->p.max_tokens > h->n_ctx)
        h->p.max_tokens = h->n_ctx;
    hr_service_set_queue_max(h->svc, h->p.queue_max);
    /* poll(), not select(): descriptors past FD_SETSIZE; MHD's idle timer
     * bounds answers the client does not read, the watchdog (guard.c)
     * bounds reading a request */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, hr_on_request, h, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lfd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->p.max_conns + HR_HTTP_HEALTH_RESERVE),
        MHD_OPTION_CONNECTION_TIMEOUT, HR_HTTP_SEND_TIMEOUT_S, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)HR_HTTP_THREAD_STACK, MHD_OPTION_NOTIFY_CONNECTION, hr_guard_notify, h,
        MHD_OPTION_NOTIFY_COMPLETED, hr_on_completed, h, MHD_OPTION_EXTERNAL_LOGGER, hr_mhd_log, h,
        MHD_OPTION_END);
    if (!h->d) {
        close(lfd);
        rc = hr_seterr(err, HR_ENET, "cannot serve the HTTP API on %s (microhttpd did not start)",
                       p->listen);
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(lfd, (struct sockaddr *)&bound, &bl) == 0)
        h->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    if (!hr_is_loopback(&ss) && !h->api_key)
        HR_LOG_WARN(TAG, "HTTP API on %s without an API key: anyone on the network can use it",
                    p->listen);
    HR_LOG_INFO(TAG,
                "HTTP API on port %d (model %s, context %d, queue %d, %d connections, %d per "
                "address, requests within %d s)",
                h->port, h->model_id, h->n_ctx, h->p.queue_max, h->p.max_conns,
                h->p.max_conns_per_ip, h->p.read_timeout_s);
    (void)sl;
    *out = h;
    return 0;
fail:
    hr_http_stop(h);
    return rc;
}

int hr_http_port(const hr_http *h) { return h ? h->port : 0; }

void hr_http_drain(hr_http *h, int grace_ms) {
    if (!h)
        return;
    double t_end = hr_now_s() + (grace_ms > 0 ? grace_ms : 0) / 1e3;
    pthread_mutex_lock(&h->mu);
    bool first = !h->draining;
    h->draining = true;
    if (first || t_end < h->drain_end)
        h->drain_end = t_end; /* a second call (grace 0) cuts the first one's short */
    pthread_cond_broadcast(&h->cv);
    int n = h->n_live;
    pthread_mutex_unlock(&h->mu);
    if (first)
        HR_LOG_INFO(TAG,
                    "shutting down: new requests refused; %d running or queued (%d ms to "
                    "finish)",
                    n, grace_ms);
    pthread_mutex_lock(&h->mu);
    while (h->n_live > 0 && hr_now_s() < h->drain_end)
        hr_cond_wait_ms(&h->cv, &h->mu, 100);
    n = h->n_live;
    if (n > 0)
        h->shutdown = true;
    pthread_mutex_unlock(&h->mu);
    if (n > 0) {
        HR_LOG_INFO(TAG, "shutting down: stopping %d request%s", n, n == 1 ? "" : "s");
        hr_service_cancel_client(h->svc, "http", 4);
    }
    /* the answers (error events, [DONE], 503 bodies) go out */
    t_end = hr_now_s() + 5;
    pthread_mutex_lock(&h->mu);
    while ((h->n_live > 0 || h->n_jobs > 0) && hr_now_s() < t_end)
        hr_cond_wait_ms(&h->cv, &h->mu, 50);
    pthread_mutex_unlock(&h->mu);
}

void hr_http_stop(hr_http *h) {
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->svc)
        hr_service_cancel_client(h->svc, "http", 4);
    if (h->d)
        MHD_stop_daemon(h->d);
    hr_guard_stop(h);
    pthread_mutex_lock(&h->mu); /* the running request's on_done */
    while (h->n_live > 0)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->cmu);
    pthread_cond_destroy(&h->wcv);
    free(h->api_key);
    free(h);
}
