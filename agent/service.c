/* service.c - the head's request service (see service.h): request records,
 * the bounded FIFO queue, the service thread that hands queued requests to
 * the generation engine (hr_head_serve, batch.c) as it takes them,
 * cancellation and counters. Tokenization (the
 * model's BOS rule), the default context and the context check live here
 * so that every front end refuses and generates alike. */
#include "agent/service.h"

#include "agent/head-impl.h"
#include "common/log.h"
#include "common/sync.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "service"

/* A request record: owned by the queue while queued, by the service
 * thread while running, by whoever removed it from the queue when it is
 * canceled there. */
typedef struct hr_service_job hr_service_job;
struct hr_service_job {
    uint64_t id;
    hr_service_job *next; /* queue link (s->mu) */
    int32_t *ids;         /* [n_ids] prompt tokens (owned) */
    int n_ids;
    hr_sampler_params sp;
    int max_tokens; /* < 0 = until the context is full */
    int wait_ms;
    uint8_t client[HR_SERVICE_MAX_CLIENT];
    size_t client_len;
    hr_head_token_fn on_token;
    hr_service_done_fn on_done;
    void *ud;
    atomic_int cancel;
    double submitted_s; /* monotonic */
    hr_gen_req gr;      /* what the engine reads and fills while it runs */
};

struct hr_service {
    hr_agent *a;
    int n_ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* s->mu */
    hr_service_job *q_head, *q_tail;
    hr_service_job *running; /* the running requests, linked by next */
    int n_queued, queue_max, n_running, parallel;
    int n_mb, mb_rows[HR_SERVICE_MAX_SHOWN]; /* the batched session's micro-batches */
    bool stop;
    uint64_t next_id;
    hr_service_stats st;
    /* create/destroy */
    pthread_t th;
    bool started;
};

hr_service_req hr_service_req_default(void) {
    return (hr_service_req){.sp = hr_sampler_params_default(), .max_tokens = -1, .wait_ms = -1};
}

hr_service *hr_head_service(hr_agent *a) { return a && a->head ? a->head->svc : NULL; }

int hr_service_n_ctx(const hr_service *s) { return s->n_ctx; }

/* The default context of a head: --ctx, else min(n_ctx_train, 4096). The
 * plan sizes its KV cache the same way. */
static int hr_service_default_ctx(const hr_agent *a) {
    return hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx);
}

void hr_service_set_queue_max(hr_service *s, int n) {
    hr_lock(&s->mu, HR_RANK_SERVICE);
    s->queue_max = n < 0 ? 0 : n;
    s->st.queue_max = s->queue_max;
    hr_unlock(&s->mu, HR_RANK_SERVICE);
}

void hr_service_stats_get(hr_service *s, hr_service_stats *out) {
    hr_lock(&s->mu, HR_RANK_SERVICE);
    *out = s->st;
    out->queued = s->n_queued;
    out->running = s->running != NULL;
    out->n_running = s->n_running;
    out->parallel = s->parallel;
    out->n_shown = 0;
    double now = hr_now_s();
    for (const hr_service_job *j = s->running; j && out->n_shown < HR_SERVICE_MAX_SHOWN;
         j = j->next)
        out->run[out->n_shown++] = (hr_service_inflight){.id = j->id,
                                                         .n_prompt = j->n_ids,
                                                         .n_gen = atomic_load(&j->gr.n_gen),
                                                         .age_s = now - j->submitted_s};
    out->n_mb = s->n_mb;
    memcpy(out->mb_rows, s->mb_rows, sizeof out->mb_rows);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
}

static void hr_job_free(hr_service_job *j) {
    if (j) {
        free(j->ids);
        free(j);
    }
}

/* ---- tokenization and the context check ---- */

/* Token ids of text into j->ids: plain text gets BOS by the model's rule;
 * special text (a rendered chat template) has its control tokens parsed
 * and gets BOS unless it already starts with it. */
static int hr_service_tokenize(hr_service *s, hr_service_job *j, const char *text, size_t len,
                               bool special, char err[HR_ERR_LEN]) {
    const hr_tokenizer *tok = hr_head_tokenizer(s->a);
    int32_t bos = hr_tokenizer_bos(tok);
    bool add_bos = hr_tokenizer_add_bos(tok) && bos >= 0;
    int cap = (int)(len < (size_t)1 << 28 ? len : (size_t)1 << 28) + 8, n = 0;
    for (int tries = 0; tries < 2; tries++) {
        free(j->ids);
        /* one spare slot in front for the BOS of special text */
        if (!(j->ids = malloc((size_t)(cap + 1) * sizeof *j->ids)))
            return hr_seterr(err, HR_ENOMEM, "out of memory");
        if (hr_tokenizer_encode(tok, text, len, special ? false : add_bos, special, j->ids + 1, cap,
                                &n))
            return hr_seterr(err, HR_EINVAL, "cannot tokenize the prompt");
        if (n <= cap)
            break;
        cap = n;
    }
    if (n > cap)
        return hr_seterr(err, HR_EINVAL, "cannot tokenize the prompt");
    if (special && add_bos && (n == 0 || j->ids[1] != bos)) {
        j->ids[0] = bos;
        n++;
    } else {
        memmove(j->ids, j->ids + 1, (size_t)n * sizeof *j->ids);
    }
    j->n_ids = n;
    return 0;
}

/* The prompt (plus max_tokens unless fit) must fit the context. */
static int hr_service_check_ctx(const hr_service *s, int n, int max_tokens, bool fit,
                                char err[HR_ERR_LEN]) {
    if (n < 1)
        return hr_seterr(err, HR_EINVAL, "the prompt is empty");
    if (!fit && max_tokens >= 0 && (int64_t)n + max_tokens > s->n_ctx)
        return hr_seterr(err, HR_ERANGE,
                         "prompt of %d tokens + n_predict %d exceeds the context of %d tokens (the "
                         "KV cache the plan holds); ask for fewer tokens or start the head with a "
                         "larger --ctx",
                         n, max_tokens, s->n_ctx);
    if (n >= s->n_ctx)
        return hr_seterr(err, HR_ERANGE, "the prompt has %d tokens but the context holds %d", n,
                         s->n_ctx);
    return 0;
}

/* A request record for r: prompt tokens, parameters, client key. */
static int hr_job_make(hr_service *s, const hr_service_req *r, hr_service_job **out,
                       char err[HR_ERR_LEN]) {
    *out = NULL;
    if ((!r->ids && !r->text) || (r->ids && r->n_ids < 0) ||
        r->client_len > HR_SERVICE_MAX_CLIENT || (r->client_len && !r->client))
        return hr_seterr(err, HR_EINVAL, "bad request");
    hr_service_job *j = calloc(1, sizeof *j);
    if (!j)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    int rc = 0;
    if (r->ids) {
        j->n_ids = r->n_ids;
        if (!(j->ids = malloc(((size_t)r->n_ids + 1) * sizeof *j->ids)))
            rc = hr_seterr(err, HR_ENOMEM, "out of memory");
        else if (r->n_ids)
            memcpy(j->ids, r->ids, (size_t)r->n_ids * sizeof *j->ids);
    } else {
        rc = hr_service_tokenize(s, j, r->text, r->text_len, r->special, err);
    }
    if (rc == 0)
        rc = hr_service_check_ctx(s, j->n_ids, r->max_tokens, r->fit, err);
    if (rc) {
        hr_job_free(j);
        return rc;
    }
    j->sp = r->sp;
    j->max_tokens = r->max_tokens;
    j->wait_ms = r->wait_ms;
    if (r->client_len)
        memcpy(j->client, r->client, r->client_len);
    j->client_len = r->client_len;
    j->submitted_s = hr_now_s();
    *out = j;
    return 0;
}

/* ---- submit / cancel ---- */

int hr_service_submit(hr_service *s, const hr_service_req *r, hr_head_token_fn on_token,
                      hr_service_done_fn on_done, void *ud, uint64_t *id, char err[HR_ERR_LEN]) {
    if (!s || !r || !on_done)
        return hr_seterr(err, HR_EINVAL, "no service, request or on_done");
    hr_service_job *j;
    int rc = hr_job_make(s, r, &j, err);
    if (rc)
        return rc;
    j->on_token = on_token;
    j->on_done = on_done;
    j->ud = ud;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    if (s->stop) {
        rc = hr_seterr(err, HR_ECANCELED, "the head is stopping");
    } else {
        s->st.requests++;
        /* queued requests that a free slot is about to take (the service
         * thread has not popped them yet) are not waiting */
        int slots = s->parallel > 1 ? s->parallel : 1, free_slots = slots - s->n_running;
        if (s->n_queued >= s->queue_max + (free_slots > 0 ? free_slots : 0)) {
            s->st.refused++;
            rc = hr_seterr(err, HR_EAGAIN, "head is busy: %d requests are waiting; try again later",
                           s->n_queued);
        }
    }
    if (rc) {
        hr_unlock(&s->mu, HR_RANK_SERVICE);
        hr_job_free(j);
        return rc;
    }
    j->id = s->next_id++;
    if (id)
        *id = j->id;
    if (s->q_tail)
        s->q_tail->next = j;
    else
        s->q_head = j;
    s->q_tail = j;
    s->n_queued++;
    pthread_cond_broadcast(&s->cv);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    HR_LOG_DEBUG(TAG, "request %llu queued: %d prompt tokens, up to %d new",
                 (unsigned long long)j->id, j->n_ids, j->max_tokens);
    return 0;
}

/* Moves queued requests matching (id, or client when client != NULL) in
 * order onto the list *out (s->mu held); flags a matching running one.
 * Returns the matches. */
static int hr_service_take(hr_service *s, uint64_t id, const void *client, size_t len,
                           hr_service_job **out) {
    int n = 0;
    hr_service_job **tail = out;
    hr_service_job **pp = &s->q_head, *prev = NULL;
    while (*pp) {
        hr_service_job *j = *pp;
        bool hit =
            client ? j->client_len == len && memcmp(j->client, client, len) == 0 : j->id == id;
        if (!hit) {
            prev = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (s->q_tail == j)
            s->q_tail = prev;
        s->n_queued--;
        s->st.canceled++;
        j->next = NULL;
        *tail = j;
        tail = &j->next;
        n++;
    }
    for (hr_service_job *r = s->running; r; r = r->next)
        if (client ? r->client_len == len && memcmp(r->client, client, len) == 0 : r->id == id) {
            atomic_store(&r->cancel, 1);
            n++;
        }
    return n;
}

/* on_done(HR_ECANCELED) for requests taken off the queue (no lock held). */
static void hr_service_drop(hr_service_job *list, const char *why) {
    hr_head_stats st = {0};
    while (list) {
        hr_service_job *j = list;
        list = j->next;
        j->on_done(j->ud, HR_ECANCELED, &st, why);
        hr_job_free(j);
    }
}

bool hr_service_cancel(hr_service *s, uint64_t id) {
    hr_service_job *taken = NULL;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    int n = hr_service_take(s, id, NULL, 0, &taken);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    hr_service_drop(taken, "canceled");
    return n > 0;
}

int hr_service_cancel_client(hr_service *s, const void *client, size_t len) {
    if (!client)
        return 0;
    hr_service_job *taken = NULL;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    int n = hr_service_take(s, 0, client, len, &taken);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    hr_service_drop(taken, "canceled");
    return n;
}

/* ---- the service thread ---- */

/* Waits for the ring: the first plan waits for the --expect workers,
 * later a lost device means a re-plan with the devices that remain. */
static int hr_service_wait_ready(hr_service *s, int wait_ms, char err[HR_ERR_LEN]) {
    hr_agent *a = s->a;
    hr_head_snap snap;
    hr_head_snap_get(a->head, &snap);
    int want = snap.planned ? 0 : snap.expect;
    return hr_head_wait_ready(a, want, wait_ms, err);
}

/* A request ended with rc (s->mu held): the counters, and it leaves the
 * running list. */
static void hr_service_count(hr_service *s, hr_service_job *j, int rc, const hr_head_stats *st) {
    if (rc == 0) {
        s->st.done++;
        s->st.tokens += (uint64_t)st->n_gen;
        s->st.cached_tokens += (uint64_t)st->n_cached;
        s->st.last_prompt_tps = st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0;
        s->st.last_gen_tps = st->gen_s > 0 ? st->n_gen / st->gen_s : 0;
    } else if (rc == HR_ECANCELED) {
        s->st.canceled++;
    } else {
        s->st.failed++;
    }
    for (hr_service_job **pp = &s->running; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            s->n_running--;
            break;
        }
    j->next = NULL;
}

/* ---- sessions: the engine takes requests from the queue ---- */

/* Takes the first queued request (s->mu held) into the running list. */
static hr_service_job *hr_service_pop(hr_service *s) {
    hr_service_job *j = s->q_head;
    if (!j)
        return NULL;
    s->q_head = j->next;
    if (!s->q_head)
        s->q_tail = NULL;
    s->n_queued--;
    j->next = s->running;
    s->running = j;
    s->n_running++;
    return j;
}

static hr_gen_req *hr_service_feed_take(void *ud) {
    hr_service *s = ud;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    hr_service_job *j = s->stop ? NULL : hr_service_pop(s);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    if (!j)
        return NULL;
    HR_LOG_DEBUG(TAG, "request %llu joins the batch after %.3f s in the queue",
                 (unsigned long long)j->id, hr_now_s() - j->submitted_s);
    hr_gen_req *r = &j->gr;
    r->ids = j->ids;
    r->n_ids = j->n_ids;
    r->sp = j->sp;
    r->max_tokens = j->max_tokens;
    r->on_token = j->on_token;
    r->ud = j->ud;
    r->cancel = &j->cancel;
    return r;
}

static void hr_service_feed_done(void *ud, hr_gen_req *r) {
    hr_service *s = ud;
    hr_service_job *j = (hr_service_job *)((char *)r - offsetof(hr_service_job, gr));
    hr_lock(&s->mu, HR_RANK_SERVICE);
    hr_service_count(s, j, r->rc, &r->st);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    j->on_done(j->ud, r->rc, &r->st, r->rc ? r->err : "");
    hr_job_free(j);
}

static void hr_service_feed_batches(void *ud, const int *rows, int n_mb) {
    hr_service *s = ud;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    s->n_mb = n_mb < HR_SERVICE_MAX_SHOWN ? n_mb : HR_SERVICE_MAX_SHOWN;
    memcpy(s->mb_rows, rows, (size_t)s->n_mb * sizeof *rows);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
}

/* Runs queued requests together until none waits (s->mu not held); the
 * first one's wait for the ring is wait_ms. */
static void hr_service_batch(hr_service *s, int wait_ms) {
    char err[HR_ERR_LEN] = "";
    int rc = wait_ms >= 0 ? hr_service_wait_ready(s, wait_ms, err) : 0;
    if (rc == 0) {
        hr_gen_feed f = {.take = hr_service_feed_take,
                         .done = hr_service_feed_done,
                         .batches = hr_service_feed_batches,
                         .ud = s};
        rc = hr_head_serve(s->a, &f, err);
    }
    hr_lock(&s->mu, HR_RANK_SERVICE);
    s->n_mb = 0;
    hr_service_job *j = rc ? hr_service_pop(s) : NULL; /* the ring was not ready: the first fails */
    if (j)
        hr_service_count(s, j, rc, &(hr_head_stats){0});
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    if (j) {
        hr_head_stats st = {0};
        j->on_done(j->ud, rc, &st, err);
        hr_job_free(j);
    }
}

static void *hr_service_main(void *arg) {
    hr_service *s = arg;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    for (;;) {
        while (!s->stop && !s->q_head)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop)
            break;
        int wait_ms = s->q_head->wait_ms;
        hr_unlock(&s->mu, HR_RANK_SERVICE);
        hr_service_batch(s, wait_ms);
        hr_lock(&s->mu, HR_RANK_SERVICE);
    }
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    return NULL;
}

/* ---- create / destroy ---- */

int hr_service_create(hr_service **out, hr_agent *a, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_service *s = calloc(1, sizeof *s);
    if (!s)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    s->a = a;
    s->n_ctx = hr_service_default_ctx(a);
    s->queue_max = s->st.queue_max = HR_SERVICE_QUEUE_DEFAULT;
    s->parallel = a->p.n_parallel > 1 ? a->p.n_parallel : 1;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, hr_service_main, s) != 0) {
        hr_service_destroy(s);
        return hr_seterr(err, HR_ENOMEM, "cannot start the request service thread");
    }
    s->started = true;
    *out = s;
    return 0;
}

void hr_service_destroy(hr_service *s) {
    if (!s)
        return;
    hr_lock(&s->mu, HR_RANK_SERVICE);
    s->stop = true;
    for (hr_service_job *r = s->running; r; r = r->next)
        atomic_store(&r->cancel, 1);
    pthread_cond_broadcast(&s->cv);
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    if (s->started)
        pthread_join(s->th, NULL);
    hr_lock(&s->mu, HR_RANK_SERVICE);
    hr_service_job *taken = s->q_head;
    s->st.canceled += (uint64_t)s->n_queued;
    s->q_head = s->q_tail = NULL;
    s->n_queued = 0;
    hr_unlock(&s->mu, HR_RANK_SERVICE);
    hr_service_drop(taken, "the head is stopping");
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
