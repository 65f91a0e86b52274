/* respond.c - the HTTP API's answers: OpenAI-style JSON bodies (full
 * answers with usage and timings, errors), and Server-Sent Events for
 * streamed answers: a callback response whose reader blocks until the
 * service thread releases text, sends keep-alives, and cancels the request
 * when the client hangs up. */
#include "api/http-impl.h"

#include "common/sync.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

bool hr_client_gone(int fd) {
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

void hr_add_common_headers(struct MHD_Response *r, const char *type) {
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
}

/* Queues s; retry_after > 0 adds a Retry-After header (seconds). */
static enum MHD_Result hr_send_json_ra(struct MHD_Connection *c, unsigned status, char *s,
                                       int retry_after) {
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
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result hr_send_json(struct MHD_Connection *c, unsigned status, char *s) {
    return hr_send_json_ra(c, status, s, 0);
}

enum MHD_Result hr_send_err(struct MHD_Connection *c, const hr_api_err *e) {
    int ra = e->status == 429 ? 2 : e->status == 503 ? 5 : 0;
    return hr_send_json_ra(c, (unsigned)e->status, hr_api_error_json(e), ra);
}

enum MHD_Result hr_fail(struct MHD_Connection *c, int status, const char *type, const char *code,
                        const char *msg) {
    hr_api_err e;
    hr_api_fail(&e, status, type, code, NULL, "%s", msg);
    return hr_send_err(c, &e);
}

json_t *hr_jstr(const char *s, size_t n) {
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
    /* cached_tokens: prompt tokens whose KV an earlier request left (prompt cache) */
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", j->st.n_prompt, "completion_tokens",
                     j->st.n_gen, "total_tokens", j->st.n_prompt + j->st.n_gen,
                     "prompt_tokens_details", "cached_tokens", j->st.n_cached);
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

enum MHD_Result hr_send_answer(hr_http *h, struct MHD_Connection *c, hr_job *j) {
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

void hr_job_error(const hr_job *j, hr_api_err *e) {
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
        hr_api_fail(e, 503, "server_error", j->shutdown ? "shutting_down" : "canceled", NULL, "%s",
                    j->err);
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
    while (j->sent == j->text_len && !j->done && !h->stop) {
        hr_cond_wait_ms(&h->cv, &h->mu, 100);
        if (j->sent != j->text_len || j->done)
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
    bool done = j->done;
    pthread_mutex_unlock(&h->mu);
    if (!done)
        return -1; /* stopping */
    j->stage = 2;
    int rc;
    if (j->rc == 0) {
        /* usage only when asked for, in a last chunk without choices (OpenAI's
         * stream_options.include_usage) */
        json_t *o = hr_chunk(h, j, NULL, 0, hr_api_finish_reason(j->finish), false);
        if (o)
            json_object_set_new(o, "timings", hr_timings_json(j));
        rc = hr_ev_json(j, o);
        if (rc == 0 && j->req.include_usage) {
            o = hr_answer_json(h, j, true, NULL);
            if (o)
                json_object_set_new(o, "usage", hr_usage_json(j));
            rc = hr_ev_json(j, o);
        }
    } else {
        hr_api_err e;
        hr_job_error(j, &e);
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
            hr_service_cancel(j->srv->svc, j->rid);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void hr_sse_free(void *cls) { hr_job_unref(cls); }

enum MHD_Result hr_sse_start(struct MHD_Connection *c, hr_job *j) {
    pthread_mutex_lock(&j->srv->mu);
    j->refs++; /* the response's */
    pthread_mutex_unlock(&j->srv->mu);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, hr_sse_read, j, hr_sse_free);
    if (!r) {
        hr_service_cancel(j->srv->svc, j->rid);
        hr_job_unref(j);
        return MHD_NO;
    }
    hr_add_common_headers(r, "text/event-stream");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}
