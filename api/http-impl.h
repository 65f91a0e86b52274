/* http-impl.h - the HTTP server's internal state, shared by http.c (server,
 * routing, requests handed to the head's request service) and respond.c
 * (JSON answers, errors, Server-Sent Events). Not for other modules. */
#ifndef HR_API_HTTP_IMPL_H
#define HR_API_HTTP_IMPL_H

#include "agent/service.h"
#include "api/http.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* One generation request of a client. References (srv->mu): the
 * connection's, the service's (until on_done) and, when streamed, the SSE
 * response's; the last one frees. */
typedef struct hr_job hr_job;
struct hr_job {
    hr_http *srv;
    int refs;
    hr_api_req req;
    uint64_t rid; /* the service's request id */
    int fd;       /* the client's socket, watched for a hang-up */
    char id[48];
    long long created;
    /* srv->mu */
    bool done;     /* on_done ran */
    bool shutdown; /* ended by hr_http_drain after the grace period */
    char *text;    /* released reply bytes */
    size_t text_len, text_cap;
    int rc;
    char err[HR_ERR_LEN];
    hr_finish finish;
    hr_head_stats st;
    /* service thread only (while it generates) */
    hr_gen *gen;
    /* streaming reader only */
    size_t sent; /* bytes of text already sent */
    int stage;   /* 0 role chunk (chat), 1 deltas, 2 finished */
    char *ev;    /* pending event bytes */
    size_t ev_len, ev_off, ev_cap;
    double last_write;
};

/* One open connection (guard.c; srv->cmu). */
typedef struct hr_slot hr_slot;
struct hr_slot {
    int fd;
    double deadline; /* seconds (hr_now_s) by which a request must have arrived; 0 = serving */
    bool cut;        /* the watchdog shut it down */
    bool over;       /* past max_conns_per_ip from its address: answered 503 */
    struct sockaddr_storage addr; /* the client's (family 0: unknown) */
    hr_slot *prev, *next;
};

/* The connection c's slot says it is one past max_conns_per_ip from its
 * address: counts it, logs it at most once a minute; true when it is. */
bool hr_guard_over(hr_http *h, struct MHD_Connection *c, char *addr, size_t cap);

#define HR_HTTP_HEALTH_RESERVE 16 /* connections past max_conns kept for /health */

struct hr_http {
    hr_agent *a;
    hr_service *svc; /* the head's request queue (borrowed) */
    hr_http_params p;
    char *api_key;
    char model_id[128];
    int n_ctx; /* the service's */
    hr_chat_template tmpl;
    struct MHD_Daemon *d;
    int port;
    long long started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char id_tag[24]; /* random per start: completion ids stay unique across restarts */
    /* mu */
    bool stop;
    bool draining;    /* hr_http_drain: new requests refused */
    bool shutdown;    /* hr_http_drain's grace is over: requests canceled end with an error */
    double drain_end; /* hr_now_s() when the grace is over */
    int n_live;       /* jobs submitted whose on_done has not run */
    int n_jobs;       /* jobs allocated (answers not yet sent) */
    unsigned long long next_id;
    /* guard.c: cmu */
    pthread_mutex_t cmu;
    pthread_cond_t wcv;
    hr_slot *slots;
    int n_conns;
    unsigned long long n_over; /* connections answered 503 for their address's limit */
    double over_logged;        /* s (hr_now_s): when that was last logged; 0 = never */
    bool wd_started, wd_stop;
    pthread_t wd;
};

/* job.c: drops a reference to j, freeing it with the last one (the
 * _locked form with srv->mu held) */
void hr_job_unref(hr_job *j); /* takes srv->mu */
void hr_job_unref_locked(hr_job *j);

/* guard.c: MHD's connection notifications (open / closed); the deadline of
 * c's next request (serving = false: now + read_timeout_s; true: none);
 * the open connections; the watchdog that shuts down connections past
 * their deadline (start: 0 or HR_ENOMEM; stop joins it). */
void hr_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
void hr_guard_serving(hr_http *h, struct MHD_Connection *c, bool serving);
int hr_guard_count(hr_http *h);
int hr_guard_start(hr_http *h);
void hr_guard_stop(hr_http *h);

/* respond.c: answers (each queues a response on c and consumes s) */
bool hr_client_gone(int fd);
void hr_add_common_headers(struct MHD_Response *r, const char *type);
/* Queues s (malloc'ed; taken) with status; NULL s answers 500. */
enum MHD_Result hr_send_json(struct MHD_Connection *c, unsigned status, char *s);
/* An error body; 429 and 503 carry Retry-After. */
enum MHD_Result hr_send_err(struct MHD_Connection *c, const hr_api_err *e);
enum MHD_Result hr_fail(struct MHD_Connection *c, int status, const char *type, const char *code,
                        const char *msg);
json_t *hr_jstr(const char *s, size_t n); /* a string of s[n] cleaned to valid UTF-8 */
/* The full (non-streamed) answer of a finished job. */
enum MHD_Result hr_send_answer(hr_http *h, struct MHD_Connection *c, hr_job *j);
/* The HTTP error for a failed generation. */
void hr_job_error(const hr_job *j, hr_api_err *e);
/* Starts the SSE response of a queued streamed job (takes one reference,
 * dropped when the response is freed). MHD_NO on failure. */
enum MHD_Result hr_sse_start(struct MHD_Connection *c, hr_job *j);

#endif
