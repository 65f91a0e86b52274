/* agent-impl.h - the agent's internal state, shared by agent.c (create,
 * plan application), worker.c (worker control loop, data thread), head.c
 * (the head's control loop, plans), gen.c (generation) and stream.c (mmap
 * prefetch / release / residency). Not for other modules. */
#ifndef HR_AGENT_AGENT_IMPL_H
#define HR_AGENT_AGENT_IMPL_H

#include "agent/agent.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "ring/msg.h"
#include "ring/ring.h"
#include "sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>

#define HR_EP_LEN HR_MSG_EP_LEN
#define HR_NAME_LEN HR_MSG_NAME_LEN
_Static_assert(HR_AGENT_MAX_DEV <= HR_MSG_MAX_KEYS, "a PLAN vouches for every ring member");

/* A device as the head sees it (index 0 is the head itself). */
typedef struct {
    char name[HR_NAME_LEN];
    char ctrl_ep[HR_EP_LEN], data_ep[HR_EP_LEN];
    uint8_t id[HR_RING_MAX_ID]; /* ROUTER identity of its DEALER */
    size_t id_len;
    char *info; /* JOIN JSON (owned) */
    bool has_sched;
    hr_sched_device sd;           /* from its profile */
    char pubkey[HR_RING_KEY_LEN]; /* its CURVE public key (from JOIN) */
    double last_seen;             /* s, monotonic */
    bool lost, ready;
    uint32_t ready_plan;
    char ready_err[HR_ERR_LEN];
    /* plan */
    int ring_pos, w, offset;
    bool overloaded;
    double pred_ms_round;
    /* heartbeat stats */
    double meas_ms_round, resident, hb_rtt_us;
    uint64_t tokens;
    int64_t mem_avail;
} hr_dev;

/* This device's part of the current plan; guarded by plan_mu. */
typedef struct {
    uint32_t plan_id;
    int k, W, w, offset, n_active, index;
    int n_ctx, n_batch, dtype;
    bool prefetch, release;
    char next_ep[HR_EP_LEN];
    char next_key[HR_RING_KEY_LEN]; /* CURVE public key of the next device */
    hr_ctx *ctx[HR_AGENT_MAX_K];    /* window of round r */
    hr_ctx *out_ctx;                /* head: output norm + LM head */
    uint64_t win_off[HR_AGENT_MAX_K], win_len[HR_AGENT_MAX_K]; /* file bytes per window */
    float *hid;                                                /* [n_batch][n_embd] f32 */
    uint8_t *frame; /* 32 + n_batch x n_embd x 4 bytes, sends */
    uint8_t *rx;    /* head: same size, receives */
    size_t frame_cap;
    float *logits; /* head: [n_vocab] */
} hr_local_plan;

typedef struct {
    pthread_mutex_t mu;
    double ms_round; /* EMA of decode window time, ms */
    uint64_t tokens;
    uint64_t frames_rejected;
} hr_stats;

struct hr_agent {
    hr_agent_params p;
    char name[HR_NAME_LEN];
    char ctrl_ep[HR_EP_LEN], data_ep[HR_EP_LEN], head_ep[HR_EP_LEN];
    bool is_head;
    void *zctx;
    void *ctrl; /* ROUTER on listen: control thread */
    void *up;   /* worker: DEALER to the head: control thread */
    void *pull; /* data in: data thread (worker) / generation (head) */
    void *push; /* data out: same owner as pull */
    char push_ep[HR_EP_LEN];
    hr_ring_keys *keys;             /* NULL when insecure */
    char head_key[HR_RING_KEY_LEN]; /* worker: the head's public key */
    char join_token[96];            /* head: for first pairing */
    hr_gguf *g;
    hr_model *m;
    hr_tokenizer *tok;
    hr_pool *pool;
    uint64_t model_size, model_hash;
    char *info_json; /* this device's JOIN payload */
    atomic_int stop;

    pthread_mutex_t plan_mu;
    hr_local_plan lp;
    hr_stats st;

    /* worker */
    pthread_t data_thread;
    bool data_started;
    atomic_ullong canceled_req; /* frames of requests <= this are dropped */
    uint64_t plan_epoch;        /* plans applied so far (plan_mu) */

    /* head; devs, plan and flags guarded by dev_mu */
    pthread_mutex_t dev_mu;
    pthread_cond_t dev_cv;
    hr_dev devs[HR_AGENT_MAX_DEV];
    int n_devs;
    uint32_t plan_id;
    bool replan, ready, planned; /* planned: a first plan was made */
    uint64_t recoveries;         /* requests continued after a lost device */
    int plan_k;
    char plan_err[HR_ERR_LEN];
    hr_sched_plan sched;
    bool have_sched;
    atomic_int lost; /* 1 + index of a lost device, 0 = none */
    char lost_msg[HR_ERR_LEN];
    pthread_mutex_t gen_mu;
    uint64_t next_req;
    void *ev_push;          /* inproc events from the generating thread (under gen_mu) */
    void *ev_pull;          /* control thread */
    struct hr_service *svc; /* head: the request queue (service.h) */
    double head_resident;
    hr_prof_model pm; /* head: model profile for the scheduler */
    bool have_pm;
};

/* head.c */
int hr_head_run(hr_agent *a, char err[HR_ERR_LEN]); /* 1 = invited: become a worker */
int hr_head_post(hr_agent *a, const hr_ring_hdr *h, const void *payload);

/* agent.c: applies this device's plan (plan_mu held) */
int hr_agent_apply_plan(hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]);
/* agent.c: points the data PUSH at lp.next_ep (CURVE with lp.next_key) */
void hr_agent_push_connect(hr_agent *a);
/* agent.c: MemAvailable and MemTotal from /proc/meminfo, bytes (-1 unknown) */
void hr_agent_meminfo(int64_t *avail, int64_t *total);

/* worker.c: the worker's control loop (and its data thread) until stop or a
 * fatal refusal by the head */
int hr_worker_run(hr_agent *a, char err[HR_ERR_LEN]);

/* prompt.c: `hearth prompt` clients on the control thread: PROMPT (queued
 * on the service), CANCEL (that client's requests), and the TOKEN/DONE/ERROR
 * events the service thread posts, forwarded to their client. */
void hr_prompt_submit(hr_agent *a, const uint8_t *id, size_t idl, const char *pl, size_t len);
void hr_prompt_cancel(hr_agent *a, const uint8_t *id, size_t idl);
void hr_prompt_forward(hr_agent *a, const hr_ring_hdr *h, uint8_t *buf, size_t n);

/* stream.c */
void hr_stream_windows(hr_agent *a);          /* fills lp.win_off/len */
void hr_stream_after(hr_agent *a, int round); /* prefetch next, release this */
double hr_stream_resident(hr_agent *a);       /* fraction of own windows resident */

#endif
