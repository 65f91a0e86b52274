/* http.c - the head's HTTP server (libmicrohttpd, one thread per
 * connection): routing, API key and size limits, the request queue served
 * in order by one generation thread, OpenAI-style responses, Server-Sent
 * Events for streamed answers, and cancellation when a client hangs up.
 *
 * A request's life: the connection thread parses and tokenizes it, puts a
 * job on the queue (429 when full) and then either waits for the job to
 * finish (non-streamed) or returns a callback response whose reader blocks
 * until the generation thread releases text (streamed). Both watch the
 * client's socket for a hang-up and set the job's cancel flag, which
 * hr_head_generate() turns into a CANCEL for every device of the ring. */
#include "api/http.h"

#include "common/log.h"
#include "common/sync.h"
#include "mmap/gguf.h"
#include "model/tokenizer.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define TAG "http"

enum { HR_JOB_QUEUED, HR_JOB_RUNNING, HR_JOB_DONE };

enum {
    HR_ROUTE_NONE,
    HR_ROUTE_PAGE,
    HR_ROUTE_HEALTH,
    HR_ROUTE_MODELS,
    HR_ROUTE_CLUSTER,
    HR_ROUTE_COMPLETIONS,
    HR_ROUTE_CHAT,
};

typedef struct hr_job hr_job;
struct hr_job {
    hr_http *srv;
    int refs;     /* srv->mu */
    hr_job *next; /* queue link, srv->mu */
    hr_api_req req;
    int32_t *ids;
    int n_ids;
    atomic_int cancel;
    int fd; /* the client's socket, watched for a hang-up */
    char id[48];
    long long created;
    /* srv->mu */
    int state;
    char *text; /* released reply bytes */
    size_t text_len, text_cap;
    int rc;
    char err[HR_ERR_LEN];
    hr_finish finish;
    hr_head_stats st;
    /* generation thread only */
    hr_gen *gen;
    /* streaming reader only */
    size_t sent; /* bytes of text already sent */
    int stage;   /* 0 role chunk (chat), 1 deltas, 2 finished */
    char *ev;    /* pending event bytes */
    size_t ev_len, ev_off, ev_cap;
    double last_write;
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
} hr_conn;

struct hr_http {
    hr_agent *a;
    hr_http_params p;
    char *api_key;
    char model_id[128];
    int n_ctx;
    hr_chat_template tmpl;
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hr_job *q_head, *q_tail, *running;
    int n_queued;
    bool stop;
    pthread_t gen_thread;
    bool gen_started;
    long long started;
    /* figures for /v1/cluster (mu) */
    unsigned long long next_id, n_requests, n_done, n_canceled, n_failed, n_tokens;
    double last_prompt_tps, last_gen_tps;
};

hr_http_params hr_http_params_default(void) {
    return (hr_http_params){.listen = "127.0.0.1:8080",
                            .max_body = 1u << 20,
                            .max_tokens = 4096,
                            .queue_max = 8,
                            .max_conns = 64};
}

/* ---- jobs ---- */

static void hr_job_unref_locked(hr_job *j) {
    if (--j->refs > 0)
        return;
    hr_api_req_free(&j->req);
    hr_gen_destroy(j->gen);
    free(j->ids);
    free(j->text);
    free(j->ev);
    free(j);
}

static void hr_job_unref(hr_job *j) {
    hr_http *h = j->srv;
    pthread_mutex_lock(&h->mu);
    hr_job_unref_locked(j);
    pthread_mutex_unlock(&h->mu);
}

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

static void hr_job_run(hr_http *h, hr_job *j) {
    char err[HR_ERR_LEN] = "";
    hr_head_stats st;
    hr_gen_begin(j->gen);
    HR_LOG_INFO(TAG, "%s: %d prompt tokens, up to %d new", j->id, j->n_ids, j->req.max_tokens);
    int rc = hr_head_generate(h->a, j->ids, j->n_ids, &j->req.sp, j->req.max_tokens, hr_job_token,
                              j, &j->cancel, &st, err);
    if (rc == 0 && hr_gen_finish_reason(j->gen) == HR_FINISH_NONE)
        hr_gen_finish(j->gen, HR_FINISH_LENGTH); /* the context ran out */
    if (rc == 0)
        hr_job_flush_delta(j);
    pthread_mutex_lock(&h->mu);
    j->rc = rc;
    snprintf(j->err, sizeof j->err, "%s", err);
    j->finish = hr_gen_finish_reason(j->gen);
    j->st = st;
    j->state = HR_JOB_DONE;
    if (rc == 0) {
        h->n_done++;
        h->n_tokens += (unsigned long long)st.n_gen;
        h->last_prompt_tps = st.prompt_s > 0 ? st.n_prompt / st.prompt_s : 0;
        h->last_gen_tps = st.gen_s > 0 ? st.n_gen / st.gen_s : 0;
    } else if (rc == HR_ECANCELED) {
        h->n_canceled++;
    } else {
        h->n_failed++;
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (rc == HR_ECANCELED)
        HR_LOG_INFO(TAG, "%s: canceled after %d tokens (client gone)", j->id, st.n_gen);
    else if (rc)
        HR_LOG_WARN(TAG, "%s failed: %s", j->id, err);
    else
        HR_LOG_INFO(TAG, "%s: %d tokens, %.1f tokens/s, finish %s", j->id, st.n_gen,
                    st.gen_s > 0 ? st.n_gen / st.gen_s : 0.0, hr_finish_name(j->finish));
}

static void *hr_gen_main(void *arg) {
    hr_http *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && !h->q_head)
            pthread_cond_wait(&h->cv, &h->mu);
        hr_job *j = h->q_head;
        if (!j)
            break;
        h->q_head = j->next;
        if (!h->q_head)
            h->q_tail = NULL;
        h->n_queued--;
        if (h->stop || atomic_load(&j->cancel)) {
            j->state = HR_JOB_DONE;
            j->rc = HR_ECANCELED;
            snprintf(j->err, sizeof j->err, "%s", h->stop ? "server stopping" : "canceled");
            h->n_canceled++;
            pthread_cond_broadcast(&h->cv);
            hr_job_unref_locked(j);
            continue;
        }
        j->state = HR_JOB_RUNNING;
        h->running = j;
        pthread_mutex_unlock(&h->mu);
        hr_job_run(h, j);
        pthread_mutex_lock(&h->mu);
        h->running = NULL;
        hr_job_unref_locked(j);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- responses ---- */

static bool hr_client_gone(int fd) {
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void hr_add_common_headers(struct MHD_Response *r, const char *type) {
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
}

/* Queues s (malloc'ed; taken) with status; NULL s answers 500. */
static enum MHD_Result hr_send_json(struct MHD_Connection *c, unsigned status, char *s) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":null}}";
    struct MHD_Response *r;
    if (s) {
        r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    } else {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        free(s);
        return MHD_NO;
    }
    hr_add_common_headers(r, "application/json");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result hr_send_err(struct MHD_Connection *c, const hr_api_err *e) {
    return hr_send_json(c, (unsigned)e->status, hr_api_error_json(e));
}

static enum MHD_Result hr_fail(struct MHD_Connection *c, int status, const char *type,
                               const char *code, const char *msg) {
    hr_api_err e;
    hr_api_fail(&e, status, type, code, NULL, "%s", msg);
    return hr_send_err(c, &e);
}

/* A jansson string of s[n] cleaned to valid UTF-8. */
static json_t *hr_jstr(const char *s, size_t n) {
    size_t cap = n * 3 + 1;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    size_t m = hr_api_utf8_clean(s, n, buf, cap);
    json_t *j = json_stringn(buf, m);
    free(buf);
    return j;
}

static json_t *hr_usage_json(const hr_job *j) {
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", j->st.n_prompt, "completion_tokens",
                     j->st.n_gen, "total_tokens", j->st.n_prompt + j->st.n_gen);
}

static json_t *hr_timings_json(const hr_job *j) {
    return json_pack("{s:f,s:f,s:f,s:f}", "prompt_ms", j->st.prompt_s * 1e3, "predicted_ms",
                     j->st.gen_s * 1e3, "prompt_per_second",
                     j->st.prompt_s > 0 ? j->st.n_prompt / j->st.prompt_s : 0.0,
                     "predicted_per_second", j->st.gen_s > 0 ? j->st.n_gen / j->st.gen_s : 0.0);
}

/* One object of the answer: the full reply (non-streamed) or a chunk. */
static json_t *hr_answer_json(hr_http *h, const hr_job *j, bool chunk, json_t *choice) {
    const char *object = j->req.kind == HR_API_CHAT
                             ? (chunk ? "chat.completion.chunk" : "chat.completion")
                             : "text_completion";
    json_t *choices = json_array();
    if (choice)
        json_array_append_new(choices, choice);
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", j->id, "object", object, "created",
                     (json_int_t)j->created, "model", h->model_id, "system_fingerprint", "hearth",
                     "choices", choices);
}

static enum MHD_Result hr_send_answer(hr_http *h, struct MHD_Connection *c, hr_job *j) {
    json_t *text = hr_jstr(j->text ? j->text : "", j->text_len);
    const char *fr = hr_api_finish_reason(j->finish);
    json_t *choice = j->req.kind == HR_API_CHAT
                         ? json_pack("{s:i,s:{s:s,s:o},s:n,s:s}", "index", 0, "message", "role",
                                     "assistant", "content", text, "logprobs", "finish_reason", fr)
                         : json_pack("{s:i,s:o,s:n,s:s}", "index", 0, "text", text, "logprobs",
                                     "finish_reason", fr);
    json_t *o = hr_answer_json(h, j, false, choice);
    if (o) {
        json_object_set_new(o, "usage", hr_usage_json(j));
        json_object_set_new(o, "timings", hr_timings_json(j));
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return hr_send_json(c, MHD_HTTP_OK, s);
}

/* The HTTP error for a failed generation. */
static void hr_gen_error(const hr_job *j, hr_api_err *e) {
    switch (j->rc) {
    case HR_EAGAIN:
    case HR_ENET:
    case HR_ETIMEDOUT:
        hr_api_fail(e, 503, "server_error", "cluster_not_ready", NULL, "%s", j->err);
        break;
    case HR_ERANGE:
        hr_api_fail(e, 400, "invalid_request_error", "context_length_exceeded", NULL, "%s", j->err);
        break;
    case HR_EINVAL:
        hr_api_fail(e, 400, "invalid_request_error", NULL, NULL, "%s", j->err);
        break;
    case HR_ECANCELED:
        hr_api_fail(e, 503, "server_error", "canceled", NULL, "%s", j->err);
        break;
    default:
        hr_api_fail(e, 500, "server_error", NULL, NULL, "%s", j->err[0] ? j->err : "failed");
    }
}

/* ---- Server-Sent Events ---- */

static int hr_ev_add(hr_job *j, const char *s, size_t n) {
    if (j->ev_len + n > j->ev_cap) {
        size_t cap = j->ev_cap ? j->ev_cap : 1024;
        while (cap < j->ev_len + n)
            cap *= 2;
        char *t = realloc(j->ev, cap);
        if (!t)
            return HR_ENOMEM;
        j->ev = t;
        j->ev_cap = cap;
    }
    memcpy(j->ev + j->ev_len, s, n);
    j->ev_len += n;
    return 0;
}

/* Appends "data: <o>\n\n" (o is consumed). */
static int hr_ev_json(hr_job *j, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return HR_ENOMEM;
    int rc = hr_ev_add(j, "data: ", 6);
    rc = rc ? rc : hr_ev_add(j, s, strlen(s));
    rc = rc ? rc : hr_ev_add(j, "\n\n", 2);
    free(s);
    return rc;
}

/* A chunk with delta text (NULL = none) and a finish reason (NULL = none). */
static json_t *hr_chunk(hr_http *h, const hr_job *j, const char *text, size_t n, const char *fr,
                        bool role) {
    json_t *choice;
    json_t *fin = fr ? json_string(fr) : json_null();
    if (j->req.kind == HR_API_CHAT) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (text || role)
            json_object_set_new(delta, "content", text ? hr_jstr(text, n) : json_string(""));
        choice = json_pack("{s:i,s:o,s:n,s:o}", "index", 0, "delta", delta, "logprobs",
                           "finish_reason", fin);
    } else {
        choice =
            json_pack("{s:i,s:o,s:n,s:o}", "index", 0, "text",
                      text ? hr_jstr(text, n) : json_string(""), "logprobs", "finish_reason", fin);
    }
    return hr_answer_json(h, j, true, choice);
}

/* Fills j->ev with the next events, waiting for text. Returns 0, or -1
 * when the client hung up or the server stops. */
static int hr_sse_next(hr_job *j) {
    hr_http *h = j->srv;
    if (j->stage == 0) {
        j->stage = 1;
        if (j->req.kind == HR_API_CHAT)
            return hr_ev_json(j, hr_chunk(h, j, NULL, 0, NULL, true)) ? -1 : 0;
    }
    pthread_mutex_lock(&h->mu);
    while (j->sent == j->text_len && j->state != HR_JOB_DONE && !h->stop) {
        hr_cond_wait_ms(&h->cv, &h->mu, 100);
        if (j->sent != j->text_len || j->state == HR_JOB_DONE)
            break;
        pthread_mutex_unlock(&h->mu);
        if (hr_client_gone(j->fd))
            return -1;
        if (hr_now_s() - j->last_write > 5.0) { /* keeps proxies and idle timers quiet */
            j->last_write = hr_now_s();
            return hr_ev_add(j, ": keep-alive\n\n", 14) ? -1 : 0;
        }
        pthread_mutex_lock(&h->mu);
    }
    if (j->sent < j->text_len) {
        size_t n = j->text_len - j->sent;
        char *d = malloc(n);
        if (d)
            memcpy(d, j->text + j->sent, n);
        j->sent = j->text_len;
        pthread_mutex_unlock(&h->mu);
        int rc = d ? hr_ev_json(j, hr_chunk(h, j, d, n, NULL, false)) : HR_ENOMEM;
        free(d);
        return rc ? -1 : 0;
    }
    bool done = j->state == HR_JOB_DONE;
    pthread_mutex_unlock(&h->mu);
    if (!done)
        return -1; /* stopping */
    j->stage = 2;
    int rc;
    if (j->rc == 0) {
        json_t *o = hr_chunk(h, j, NULL, 0, hr_api_finish_reason(j->finish), false);
        if (o) {
            json_object_set_new(o, "usage", hr_usage_json(j));
            json_object_set_new(o, "timings", hr_timings_json(j));
        }
        rc = hr_ev_json(j, o);
        if (rc == 0 && j->req.include_usage) {
            o = hr_answer_json(h, j, true, NULL);
            if (o)
                json_object_set_new(o, "usage", hr_usage_json(j));
            rc = hr_ev_json(j, o);
        }
    } else {
        hr_api_err e;
        hr_gen_error(j, &e);
        char *s = hr_api_error_json(&e);
        rc = s ? hr_ev_add(j, "data: ", 6) : HR_ENOMEM;
        rc = rc ? rc : hr_ev_add(j, s, strlen(s));
        rc = rc ? rc : hr_ev_add(j, "\n\n", 2);
        free(s);
    }
    rc = rc ? rc : hr_ev_add(j, "data: [DONE]\n\n", 14);
    return rc ? -1 : 0;
}

static ssize_t hr_sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    hr_job *j = cls;
    (void)pos;
    for (;;) {
        if (j->ev_off < j->ev_len) {
            size_t n = j->ev_len - j->ev_off;
            if (n > max)
                n = max;
            memcpy(buf, j->ev + j->ev_off, n);
            j->ev_off += n;
            j->last_write = hr_now_s();
            return (ssize_t)n;
        }
        j->ev_len = j->ev_off = 0;
        if (j->stage == 2)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (hr_sse_next(j)) {
            atomic_store(&j->cancel, 1);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void hr_sse_free(void *cls) { hr_job_unref(cls); }

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

static enum MHD_Result hr_serve_health(hr_http *h, struct MHD_Connection *c) {
    char err[HR_ERR_LEN] = "";
    bool ok = hr_ready(h, err);
    json_t *j =
        ok ? json_pack("{s:s}", "status", "ok")
           : json_pack("{s:s,s:o}", "status", "loading", "error", hr_jstr(err, strlen(err)));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return hr_send_json(c, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, s);
}

static enum MHD_Result hr_serve_models(hr_http *h, struct MHD_Connection *c) {
    json_t *j = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:i}]}", "object", "list", "data", "id",
                          h->model_id, "object", "model", "created", (json_int_t)h->started,
                          "owned_by", "hearth", "context_length", h->n_ctx);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return hr_send_json(c, MHD_HTTP_OK, s);
}

static enum MHD_Result hr_serve_cluster(hr_http *h, struct MHD_Connection *c) {
    char *st = hr_head_status_json(h->a);
    json_t *j = st ? json_loads(st, 0, NULL) : NULL;
    free(st);
    if (!j)
        return hr_send_json(c, 500, NULL);
    pthread_mutex_lock(&h->mu);
    json_t *api = json_pack("{s:s,s:i,s:i,s:b,s:I,s:I,s:I,s:I,s:I,s:f,s:f}", "model", h->model_id,
                            "n_ctx", h->n_ctx, "queued", h->n_queued, "running", h->running != NULL,
                            "requests", (json_int_t)h->n_requests, "completed",
                            (json_int_t)h->n_done, "canceled", (json_int_t)h->n_canceled, "failed",
                            (json_int_t)h->n_failed, "tokens", (json_int_t)h->n_tokens,
                            "last_prompt_tps", h->last_prompt_tps, "last_gen_tps", h->last_gen_tps);
    pthread_mutex_unlock(&h->mu);
    json_object_set_new(j, "api", api);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return hr_send_json(c, MHD_HTTP_OK, s);
}

/* Token ids of the request's prompt into j->ids. */
static int hr_tokenize(hr_http *h, hr_job *j, hr_api_err *e) {
    const hr_tokenizer *tok = hr_head_tokenizer(h->a);
    char *text = NULL;
    const char *src = j->req.prompt;
    bool chat = j->req.kind == HR_API_CHAT;
    if (chat) {
        char err[HR_ERR_LEN] = "";
        int n = hr_chat_render(&h->tmpl, j->req.msgs, j->req.n_msgs, true, NULL, 0, err);
        if (n < 0)
            return hr_api_fail(e, 400, "invalid_request_error", NULL, "messages", "%s", err);
        if (!(text = malloc((size_t)n + 1)))
            return hr_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        hr_chat_render(&h->tmpl, j->req.msgs, j->req.n_msgs, true, text, (size_t)n + 1, err);
        src = text;
    }
    size_t len = strlen(src);
    int32_t bos = hr_tokenizer_bos(tok);
    bool add_bos = hr_tokenizer_add_bos(tok) && bos >= 0;
    int cap = (int)(len < (size_t)1 << 28 ? len : (size_t)1 << 28) + 8, n = 0, rc = 0;
    for (int tries = 0; tries < 2; tries++) {
        free(j->ids);
        j->ids = malloc((size_t)(cap + 1) * sizeof *j->ids);
        if (!j->ids) {
            rc = hr_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            break;
        }
        /* chat text holds its own control tokens (and maybe BOS); completions encode like
         * `hearth prompt` */
        if (hr_tokenizer_encode(tok, src, len, chat ? false : add_bos, chat, j->ids + 1, cap, &n)) {
            rc = hr_api_fail(e, 400, "invalid_request_error", NULL, chat ? "messages" : "prompt",
                             "cannot tokenize the prompt");
            break;
        }
        if (n <= cap)
            break;
        cap = n;
    }
    free(text);
    if (rc)
        return rc;
    if (chat && add_bos && (n == 0 || j->ids[1] != bos)) {
        j->ids[0] = bos;
        n++;
    } else {
        memmove(j->ids, j->ids + 1, (size_t)n * sizeof *j->ids);
    }
    j->n_ids = n;
    if (n < 1)
        return hr_api_fail(e, 400, "invalid_request_error", NULL, chat ? "messages" : "prompt",
                           "the prompt is empty");
    if (n >= h->n_ctx)
        return hr_api_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                           chat ? "messages" : "prompt",
                           "the prompt has %d tokens but the context holds %d", n, h->n_ctx);
    return 0;
}

/* Parses, tokenizes and queues a generation request. */
static enum MHD_Result hr_serve_generate(hr_http *h, struct MHD_Connection *c, hr_conn *cc) {
    hr_api_err e;
    char err[HR_ERR_LEN] = "";
    hr_job *j = calloc(1, sizeof *j);
    if (!j)
        return hr_fail(c, 500, "server_error", NULL, "out of memory");
    j->srv = h;
    j->refs = 1;
    j->fd = -1;
    cc->job = j;
    hr_api_kind kind = cc->route == HR_ROUTE_CHAT ? HR_API_CHAT : HR_API_COMPLETIONS;
    if (hr_api_parse(&j->req, kind, cc->body ? cc->body : "", cc->len, h->p.max_tokens, &e))
        return hr_send_err(c, &e);
    if (!hr_ready(h, err))
        return hr_fail(c, 503, "server_error", "cluster_not_ready", err);
    if (hr_tokenize(h, j, &e))
        return hr_send_err(c, &e);
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
    /* queue it */
    pthread_mutex_lock(&h->mu);
    h->n_requests++;
    if (h->n_queued >= h->p.queue_max) {
        pthread_mutex_unlock(&h->mu);
        return hr_fail(c, 429, "rate_limit_error", "queue_full",
                       "too many requests are waiting; try again later");
    }
    snprintf(j->id, sizeof j->id, "%s-%llu", kind == HR_API_CHAT ? "chatcmpl" : "cmpl",
             ++h->next_id);
    j->state = HR_JOB_QUEUED;
    j->refs++; /* the queue's */
    if (h->q_tail)
        h->q_tail->next = j;
    else
        h->q_head = j;
    h->q_tail = j;
    h->n_queued++;
    pthread_cond_broadcast(&h->cv);
    if (j->req.stream) {
        j->refs++; /* the response's */
        pthread_mutex_unlock(&h->mu);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, hr_sse_read, j, hr_sse_free);
        if (!r) {
            atomic_store(&j->cancel, 1);
            hr_job_unref(j);
            return MHD_NO;
        }
        hr_add_common_headers(r, "text/event-stream");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return rc;
    }
    /* non-streamed: wait here, watching the client */
    while (j->state != HR_JOB_DONE) {
        hr_cond_wait_ms(&h->cv, &h->mu, 100);
        if (j->state == HR_JOB_DONE)
            break;
        pthread_mutex_unlock(&h->mu);
        bool gone = hr_client_gone(j->fd);
        pthread_mutex_lock(&h->mu);
        if (gone) {
            atomic_store(&j->cancel, 1);
            pthread_mutex_unlock(&h->mu);
            HR_LOG_INFO(TAG, "%s: client hung up", j->id);
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (j->rc) {
        hr_gen_error(j, &e);
        return hr_send_err(c, &e);
    }
    return hr_send_answer(h, c, j);
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
        return hr_serve_models(h, c);
    case HR_ROUTE_CLUSTER:
        return hr_serve_cluster(h, c);
    default:
        return hr_serve_generate(h, c, cc);
    }
}

static void hr_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                            enum MHD_RequestTerminationCode toe) {
    hr_conn *cc = *con_cls;
    (void)cls;
    (void)c;
    if (!cc)
        return;
    if (cc->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
            atomic_store(&cc->job->cancel, 1);
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

static bool hr_is_loopback(const struct sockaddr_storage *ss) {
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* Model id and context size from the GGUF; the chat template for it. */
static int hr_http_model(hr_http *h, char err[HR_ERR_LEN]) {
    const char *path = h->p.model_path ? h->p.model_path : "model";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(h->model_id, sizeof h->model_id, "%s", base);
    size_t n = strlen(h->model_id);
    if (n > 5 && strcmp(h->model_id + n - 5, ".gguf") == 0)
        h->model_id[n - 5] = 0;
    hr_gguf *g = NULL;
    int train = 2048;
    if (h->p.model_path && hr_gguf_open(&g, h->p.model_path, err) == 0) {
        const char *arch = NULL;
        uint32_t v = 0;
        char key[96];
        if (hr_gguf_get_str(g, "general.architecture", &arch) == 0) {
            snprintf(key, sizeof key, "%s.context_length", arch);
            if (hr_gguf_get_u32(g, key, &v) == 0 && v > 0)
                train = v > (1u << 24) ? 1 << 24 : (int)v;
        }
    }
    h->n_ctx = h->p.n_ctx > 0 ? h->p.n_ctx : (train < 4096 ? train : 4096);
    int rc = hr_chat_template_pick(&h->tmpl, g, hr_head_tokenizer(h->a), h->p.chat_template, err);
    hr_gguf_close(g);
    return rc;
}

int hr_http_start(hr_http **out, hr_agent *a, const hr_http_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!a || !p || !p->listen)
        return hr_seterr(err, HR_EINVAL, "no agent or listen address");
    if (!hr_agent_is_head(a) || !hr_head_tokenizer(a))
        return hr_seterr(err, HR_EINVAL, "the HTTP API runs on the head only");
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    if (hr_parse_listen(p->listen, &ss, &sl))
        return hr_seterr(err, HR_EINVAL, "bad API address '%s' (want ADDR:PORT, numeric)",
                         p->listen);
    hr_http *h = calloc(1, sizeof *h);
    if (!h)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    h->a = a;
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
    h->api_key = p->api_key && *p->api_key ? strdup(p->api_key) : NULL;
    h->started = (long long)time(NULL);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    int rc = hr_http_model(h, err);
    if (rc)
        goto fail;
    if (h->p.max_tokens > h->n_ctx)
        h->p.max_tokens = h->n_ctx;
    if (pthread_create(&h->gen_thread, NULL, hr_gen_main, h) != 0) {
        rc = hr_seterr(err, HR_ENOMEM, "cannot start the generation thread");
        goto fail;
    }
    h->gen_started = true;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, hr_on_request, h, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)h->p.max_conns, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
                            MHD_OPTION_NOTIFY_COMPLETED, hr_on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, hr_mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        rc = hr_seterr(err, HR_ENET, "cannot listen on %s for the HTTP API", p->listen);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : 0;
    if (!hr_is_loopback(&ss) && !h->api_key)
        HR_LOG_WARN(TAG, "HTTP API on %s without an API key: anyone on the network can use it",
                    p->listen);
    HR_LOG_INFO(TAG, "HTTP API on port %d (model %s, context %d, queue %d)", h->port, h->model_id,
                h->n_ctx, h->p.queue_max);
    (void)sl;
    *out = h;
    return 0;
fail:
    hr_http_stop(h);
    return rc;
}

int hr_http_port(const hr_http *h) { return h ? h->port : 0; }

void hr_http_stop(hr_http *h) {
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    if (h->running)
        atomic_store(&h->running->cancel, 1);
    for (hr_job *j = h->q_head; j; j = j->next)
        atomic_store(&j->cancel, 1);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->gen_started)
        pthread_join(h->gen_thread, NULL);
    if (h->d)
        MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->api_key);
    free(h);
}
