/* http.h - the head as a service: an OpenAI-compatible HTTP API on the
 * head (libmicrohttpd, JSON with jansson) and the pieces it is made of.
 *
 * Endpoints (see README.md, "HTTP API"):
 *   POST /v1/chat/completions, POST /v1/completions (stream true/false;
 *        Server-Sent Events when streaming), GET /v1/models,
 *   GET /v1/cluster (the `hearth status --json` view plus an "api" object),
 *   GET /health, GET / (a live status page, no external assets).
 * /v1/ paths need "Authorization: Bearer KEY" when an API key is set.
 *
 * Requests go to the head's request service (agent/service.h): they
 * queue there with `hearth prompt` requests and are served one at a time,
 * in order; a client that disconnects (while queued or while its answer
 * streams) cancels its generation on every device of the ring. Errors are OpenAI-style JSON
 * bodies: {"error":{"message","type","param","code"}} with 400 (bad JSON
 * or parameters), 401 (API key), 404, 405, 413 (body too large), 429
 * (queue full), 503 (cluster not ready or a device lost), 500.
 *
 * Limits (see README.md, "Limits and timeouts"): a request's headers and
 * body must arrive within read_timeout_s of the connection opening (or of
 * the previous answer on a kept-alive connection), else the server closes
 * it; max_conns connections in all (a few more are kept for /health),
 * max_conns_per_ip from one address. Answers are not timed: a stream runs
 * as long as it generates (keep-alive comments every few seconds).
 *
 * Threads: one thread per connection (libmicrohttpd, poll(), small stacks)
 * plus a watchdog thread for the read deadlines; generation runs on the
 * service thread; hr_http_start/stop are called from one thread,
 * hr_http_drain from any. The request parsing (hr_api_*) is pure and
 * thread-safe. */
#ifndef HR_API_HTTP_H
#define HR_API_HTTP_H

#include "agent/agent.h"
#include "common/error.h"
#include "model/chat.h"
#include "model/generate.h"
#include "model/sampler.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- server ---- */

typedef struct {
    const char *listen;         /* "ADDR:PORT", numeric IPv4 or [IPv6]; port 0 = any */
    const char *api_key;        /* NULL or "" = no key */
    const char *model_path;     /* the GGUF (for the chat template and the model id) */
    const char *chat_template;  /* template name; NULL = from the model */
    size_t max_body;            /* largest request body, bytes (default 1 MiB) */
    int max_tokens;             /* most tokens a reply may have (default 4096; a request
                                   asking more gets this many, finish "length") */
    int queue_max;              /* requests waiting behind the running one (default 8; sets
                                   the head's service queue, `hearth prompt` included) */
    int max_conns;              /* simultaneous connections (default 2048; lowered to fit
                                   the open-file limit) */
    int max_conns_per_ip;       /* from one client address (default 256) */
    int read_timeout_s;         /* headers + body must arrive within this (default 10 s) */
    int expect;                 /* workers the head waits for (for /health's message) */
    const char *const *aliases; /* more accepted "model" names (n_aliases; borrowed) */
    int n_aliases;
    int listen_fd; /* a socket from hr_http_listen (the server takes ownership, also when it
                      fails to start), or -1 (default): bind listen itself */
} hr_http_params;

hr_http_params hr_http_params_default(void);

typedef struct hr_http hr_http;

/* Binds and listens on addr ("ADDR:PORT", as hr_http_params.listen) for the
 * HTTP API, so that a taken port is reported before anything slow starts;
 * *fd the listening socket (close-on-exec) for hr_http_params.listen_fd.
 * Returns 0, HR_EINVAL (bad address) or HR_ENET with err naming the
 * address and the reason. Thread-safe. */
int hr_http_listen(const char *addr, int *fd, char err[HR_ERR_LEN]);

/* Starts serving a (a head; borrowed, must outlive the server); the context
 * is the service's (hr_service_n_ctx). Returns 0,
 * HR_EINVAL (bad address or parameters) or HR_ENET (cannot listen). */
int hr_http_start(hr_http **out, hr_agent *a, const hr_http_params *p, char err[HR_ERR_LEN]);
/* The bound TCP port. */
int hr_http_port(const hr_http *h);
/* Graceful shutdown, step one: new generation requests are refused (503,
 * "shutting down"; /health answers 503), running and queued ones may
 * finish for grace_ms; then the rest end: a stream with an error event and
 * "data: [DONE]", a non-streamed request with a 503 error body. Returns
 * once their answers are sent (at most a few seconds after the grace).
 * Thread-safe; NULL is a no-op. */
void hr_http_drain(hr_http *h, int grace_ms);
/* Cancels this server's requests (running or queued), stops listening,
 * waits for the service to let go of them and frees. NULL is a no-op. */
void hr_http_stop(hr_http *h);

/* The status page (static HTML + JS, NUL-terminated). */
const char *hr_http_status_page(void);

/* ---- requests (pure) ---- */

typedef enum { HR_API_COMPLETIONS = 0, HR_API_CHAT = 1 } hr_api_kind;

#define HR_API_MAX_MSGS 256

/* A parsed, validated request. Strings point into the parsed JSON, which
 * the request owns (free with hr_api_req_free). */
typedef struct {
    hr_api_kind kind;
    const char *prompt; /* completions */
    hr_chat_msg msgs[HR_API_MAX_MSGS];
    int n_msgs; /* chat */
    bool stream, include_usage;
    int max_tokens; /* 1..limit (a larger ask is cut to the limit); default: the limit */
    hr_sampler_params sp;
    bool seed_given;
    const char *stop[HR_GEN_MAX_STOP];
    int n_stop;
    const char *model; /* as asked (informational) */
    void *json_;       /* the parsed body (json_t *) */
} hr_api_req;

/* Why a request was refused: HTTP status, OpenAI error type, the
 * offending parameter ("" if none) and a message. */
typedef struct {
    int status;
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    const char *code; /* NULL or e.g. "invalid_api_key", "context_length_exceeded" */
    char param[48];
    char msg[HR_ERR_LEN];
} hr_api_err;

/* Fills e and returns HR_EINVAL (for `return hr_api_fail(...)`). */
int hr_api_fail(hr_api_err *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Parses and validates body[len] for kind. max_tokens_limit bounds
 * max_tokens (and is its default). Returns 0, or HR_EINVAL with e filled
 * (status 400). The seed defaults to the clock when not given. */
int hr_api_parse(hr_api_req *r, hr_api_kind kind, const char *body, size_t len,
                 int max_tokens_limit, hr_api_err *e);
void hr_api_req_free(hr_api_req *r); /* NULL-safe; the request may be zeroed */

/* {"error":{...}} for e (malloc'ed; NULL on OOM). */
char *hr_api_error_json(const hr_api_err *e);

/* Copies s[n] into out (cap bytes, NUL-terminated) with each invalid UTF-8
 * sequence replaced by U+FFFD; returns the length written (truncates on a
 * character boundary when out is too small). JSON strings must be UTF-8. */
size_t hr_api_utf8_clean(const char *s, size_t n, char *out, size_t cap);

/* Checks "Bearer KEY" (the scheme in any case) against key in constant
 * time (for the key's length). */
bool hr_api_auth_ok(const char *authorization, const char *key);

/* "stop" or "length" (OpenAI's finish_reason) for a finish. */
const char *hr_api_finish_reason(hr_finish f);

#endif
