/* agent-impl.h - the agent's node core: what every agent has, head or
 * worker (parameters, keys, sockets, model, tokenizer, thread pool, this
 * device's part of the plan, statistics). Shared by agent.c (the public
 * entry), node.c (create / destroy, plan application, data PUSH), stream.c
 * (prefetch / release / residency of this device's windows), worker.c and
 * the head's files, which keep their own state in head-impl.h. Not for
 * other modules.
 *
 * Threads and ownership:
 *   - the control thread (hr_agent_run) owns ctrl, up and the head's state;
 *   - lp (this device's plan) is guarded by plan_mu: on a worker the control
 *     thread applies plans and the data thread computes with lp; on a head
 *     only the generating thread (hr_head_generate / hr_head_logits, under
 *     the head's gen_mu) applies and uses it;
 *   - pull and push belong to the data thread (worker) or the generating
 *     thread (head); st is guarded by st.mu; stop and canceled_req are
 *     atomics; everything else is set at create and read-only afterwards
 *     (head_ep: control thread only). */
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
_Static_assert(HR_AGENT_MAX_K <= HR_MSG_MAX_ROUNDS && HR_AGENT_MAX_DEV <= HR_MSG_MAX_RING,
               "a PLAN carries every round of every ring member");

/* This device's part of a plan. As a parameter (a plan to apply) only the
 * fields up to next_key are set; the buffers belong to the applied plan. */
typedef struct {
    uint32_t plan_id;
    int k, n_active, index;
    int first[HR_AGENT_MAX_K], count[HR_AGENT_MAX_K]; /* its window of round r (count 0: none;
                                                         the frame is passed on) */
    int n_ctx, n_batch, dtype;
    int n_seq;         /* KV slots per window (requests in flight); 0 = 1 */
    int n_mb;          /* head: micro-batches a batched session keeps on the ring; 0 = n_active */
    bool ring_streams; /* head: a ring device streams weights from disk every round */
    bool prefetch, release;
    char next_ep[HR_EP_LEN];
    char next_key[HR_RING_KEY_LEN]; /* CURVE public key of the next device */
    hr_ctx *ctx[HR_AGENT_MAX_K];    /* window of round r */
    hr_ctx *out_ctx;                /* head: output norm + LM head */
    uint64_t win_off[HR_AGENT_MAX_K], win_len[HR_AGENT_MAX_K]; /* file bytes per window */
    float *hid;     /* [n_rows][n_embd] f32, n_rows = hr_local_plan_rows() */
    uint8_t *frame; /* 32 + n_rows x (8 + n_embd x 4) bytes, sends */
    uint8_t *rx;    /* head: same size, receives */
    size_t frame_cap;
    float *logits;     /* head: [n_vocab] */
    double mem_budget; /* parameter: the scheduler's budget for this device, bytes; <= 0 unknown */
    int n_gpu;         /* parameter: of each window, at most the first n_gpu layers on the GPU */
} hr_local_plan;

/* stream.c: layers of lp's windows in all rounds; the largest window. */
int hr_local_plan_layers(const hr_local_plan *lp);
int hr_local_plan_wmax(const hr_local_plan *lp);

/* The agent's locks in the one order a thread may take them (outer
 * first; hr_lock checks it in debug builds, common/sync.h). Why each
 * nests where it does: head-impl.h, at the top. */
enum {
    HR_RANK_GEN = 1,     /* hr_head.gen_mu: the generating session (head) */
    HR_RANK_PLAN = 2,    /* hr_agent.plan_mu: the applied plan, a->lp */
    HR_RANK_DEV = 3,     /* hr_head.dev_mu: the device table and plan state (head) */
    HR_RANK_SHARED = 4,  /* hr_head.mu: the published snapshot, busy (head) */
    HR_RANK_SERVICE = 5, /* hr_service.mu: the request queue (head) */
    HR_RANK_EV = 6,      /* hr_head.ev_mu: the event socket to the control thread (head) */
    HR_RANK_LINK = 7,    /* link.c: the link measurer's state */
    HR_RANK_STREAM = 8,  /* stream.c: the streamer's state */
    HR_RANK_STATS = 9,   /* hr_agent.st.mu: statistics */
    HR_RANK_SOLVE = 10,  /* hr_head.solve_mu: the job handed to the solver thread (head) */
};

typedef struct hr_streamer hr_streamer; /* stream.c */

/* What the streamer does and measures (stream.c). */
typedef struct {
    double read_round;   /* bytes read from storage per window computed, measured over steps
                            of one row where there were any (a prompt's step reads the union
                            of its rows' experts); -1 unknown */
    double cpu_round;    /* the process's CPU ms per window computed (every thread: compute,
                            the pump's reads, the kernel's page cache work for them), over
                            the same steps as read_round; -1 unknown */
    double stream_round; /* bytes the split streams per round (mean over the k windows) */
    double pinned;       /* bytes of the windows kept resident */
    int locked;          /* 1 mlock'ed, 0 kept by advice, -1 not yet known */
    /* streaming by expert (mmap/experts.h): experts kept per layer (-1: the
     * plan does not stream by expert), routed experts and of them resident,
     * bytes of experts read on demand and by reranks (moving the resident
     * set), since the agent started */
    int ex_keep;
    uint64_t ex_routed, ex_hits, ex_fetched, ex_moved;
    /* the pump's own reads of tails (mmap/stream.h hr_stream_pump_stats
     * disk_bytes, disk_s): bytes from storage and the seconds they took,
     * since the agent started; 0 none */
    double pump_bytes, pump_s;
} hr_stream_stats;

typedef struct {
    pthread_mutex_t mu;
    double ms_round; /* EMA of decode window time, ms */
    uint64_t tokens;
    uint64_t frames_rejected;
    /* decode rounds (one token through one window) timed under plan_id:
     * both start over when a plan is applied, so ms_round never mixes the
     * windows of two plans (the head compares it with the plan's
     * prediction, head_adapt.c) */
    uint64_t rounds;
    double ms_total; /* ms of those rounds in all */
    uint32_t plan_id;
} hr_stats;

typedef struct hr_head hr_head; /* head-impl.h */

/* cache.c: a worker's sparse local copy of the head's model (see there).
 * One thread (the worker's control thread, or the start). */
typedef struct hr_cache hr_cache;
/* Opens (makes) DIR/<size>-<hash>.gguf of size bytes; limit: bytes held at
 * most (0 none). No chunks until hr_cache_set_layout. */
int hr_cache_open(hr_cache **out, const char *dir, uint64_t size, uint64_t hash, uint64_t limit,
                  char err[HR_ERR_LEN]);
void hr_cache_close(hr_cache *c); /* NULL is a no-op */
/* The chunks: ranges off[n]/len[n] (disjoint) cut in pieces of at most
 * HR_MSG_CHUNK_MAX; re-reads the sidecar and keeps the chunks of this
 * layout whose bytes match their hash. rewrite: the sidecar is rewritten
 * with them alone (false for a partial layout, which keeps the rest listed). */
int hr_cache_set_layout(hr_cache *c, const uint64_t *off, const uint64_t *len, int n, bool rewrite,
                        char err[HR_ERR_LEN]);
const char *hr_cache_path(const hr_cache *c);
uint64_t hr_cache_held(const hr_cache *c);                    /* bytes of verified chunks */
uint64_t hr_cache_chunk_len(const hr_cache *c, uint64_t off); /* 0: no chunk starts there */
/* Checks data against hash (HR_EFORMAT when it differs), writes it at off
 * and lists it in the sidecar. HR_EINVAL: not a chunk of the layout. */
int hr_cache_put(hr_cache *c, uint64_t off, const void *data, uint32_t len,
                 const uint8_t hash[HR_MSG_HASH_LEN], char err[HR_ERR_LEN]);
/* The ranges off[n]/len[n] are wanted: evicts whole windows wanted before
 * (oldest first) while the limit would be passed, then returns the offsets
 * of the chunks still missing (*chunks malloc'ed), the bytes wanted and
 * missing. HR_ERANGE when the limit is below what is wanted. */
int hr_cache_want(hr_cache *c, const uint64_t *off, const uint64_t *len, int n, uint64_t **chunks,
                  long *n_chunks, uint64_t *want_bytes, uint64_t *miss_bytes, char err[HR_ERR_LEN]);

/* fetch.c: fetching chunks from the head (several in flight). */
#define HR_FETCH_DEPTH 16
typedef struct {
    hr_cache *cache;     /* borrowed */
    uint64_t size, hash; /* the model's fingerprint */
    uint64_t *chunks;    /* offsets to fetch (owned) */
    long n, next, n_done;
    uint64_t inflight[HR_FETCH_DEPTH]; /* offsets asked for */
    int tries[HR_FETCH_DEPTH];
    int n_inflight;
    bool active;
    uint64_t want_bytes, miss_bytes, done_bytes, wire_bytes, corrupt;
    double t0, last_progress_s, last_log_s, last_ask_s, done_s;
    /* since the agent started, over every plan (kept by reset): bytes verified and
     * written, bytes received, s spent fetching */
    uint64_t tot_bytes, tot_wire;
    double tot_s;
} hr_fetch;
void hr_fetch_reset(hr_fetch *f); /* frees the list; keeps cache, size, hash */
/* Takes chunks[n] (malloc'ed offsets). */
void hr_fetch_begin(hr_fetch *f, uint64_t *chunks, long n, uint64_t want_bytes,
                    uint64_t miss_bytes);
void hr_fetch_start(hr_fetch *f, void *sock); /* sends the first FETCHes */
/* A CHUNK arrived: 1 = all fetched and verified, 0 = more to come, or a
 * negative HR_E* code with err (the fetch failed). */
int hr_fetch_on_chunk(hr_fetch *f, void *sock, const hr_ring_hdr *h, const void *pl,
                      const char *who, char err[HR_ERR_LEN]);
/* Timer: asks again for chunks in flight after a stall; HR_ETIMEDOUT after
 * a minute without any. */
int hr_fetch_tick(hr_fetch *f, void *sock, char err[HR_ERR_LEN]);
/* Fetches everything begun on sock (a DEALER to the head) on this thread. */
int hr_fetch_sync(hr_fetch *f, void *sock, const atomic_int *stop, const char *who,
                  char err[HR_ERR_LEN]);
/* Asks the head for the model's facts. */
int hr_fetch_facts(void *sock, uint64_t *size, uint64_t *hash, uint32_t *data_off,
                   const atomic_int *stop, int timeout_ms, char err[HR_ERR_LEN]);
/* A worker without model_path, at start: asks the head for the model's
 * facts, opens the cache, fetches the header (and rope_freqs), opens the
 * cache file as the model (a->g, a->m, fingerprint) and sets the chunk
 * layout. HR_E* with err. */
int hr_fetch_bootstrap(hr_agent *a, char err[HR_ERR_LEN]);
/* The ranges a plan needs here: header, rope_freqs, its windows (np's
 * win_off/len filled). off/len: 2 + HR_AGENT_MAX_K entries. Returns n. */
int hr_fetch_plan_ranges(const hr_agent *a, const hr_local_plan *np, uint64_t *off, uint64_t *len);
/* discover.c: listens for beacons until exactly one trusted head (of
 * a->p.cluster, if set) is heard; its control endpoint into ep. */
int hr_discover_head(hr_agent *a, char ep[HR_EP_LEN], char err[HR_ERR_LEN]);
/* pair.c: --join: pairs with the head at a->head_ep by its join token */
int hr_worker_pair(hr_agent *a, char err[HR_ERR_LEN]);
/* pair.c: warns (once per call site's choice) that the head at a->head_ep has not
 * answered for secs: it is not running there or does not accept this
 * device's key, and how to pair (--join TOKEN, or `hearth trust add` of
 * this device's key on the head). */
void hr_worker_warn_unpaired(const hr_agent *a, double secs);
/* pair.c: knocks at the head's control port (ring/knock.h) with this
 * device's name and key and the fingerprint of the head key trusted here,
 * so that a head this device cannot reach over CURVE logs how to pair it.
 * Does nothing when insecure; best effort otherwise. */
void hr_worker_knock(hr_agent *a);
/* Whether this device trusts no head key (it then stands in its own). */
bool hr_worker_no_head_key(const hr_agent *a);
/* The head's side: what it served, per fetching key. */
#define HR_FETCH_PEERS 16
typedef struct {
    char key[HR_RING_KEY_LEN];
    uint64_t bytes;
    double t0, last_s, log_s;
} hr_fetch_peer;
typedef struct {
    hr_fetch_peer peer[HR_FETCH_PEERS];
    int n;
    uint64_t test_count; /* chunks sent (HR_TEST_CORRUPT_CHUNK) */
} hr_fetch_served;
/* Answers a FETCH from id (CURVE key user) on a->ctrl (control thread). */
void hr_fetch_serve(hr_agent *a, const uint8_t *id, size_t idl, const char *user,
                    const hr_ring_hdr *h, const char *pl, hr_fetch_served *sv);

/* The node: one per agent. */
struct hr_agent {
    hr_agent_params p;
    char name[HR_NAME_LEN];
    char ctrl_ep[HR_EP_LEN], data_ep[HR_EP_LEN], head_ep[HR_EP_LEN];
    bool is_head;
    void *zctx;
    void *ctrl; /* ROUTER on listen: control thread */
    void *up;   /* worker: DEALER to the head: control thread */
    void *pull; /* data in: data thread (worker) / generating thread (head) */
    void *push; /* data out: same owner as pull */
    char push_ep[HR_EP_LEN];
    hr_ring_keys *keys;             /* NULL when insecure */
    char head_key[HR_RING_KEY_LEN]; /* worker: the head's public key */
    char join_token[96];            /* head: for first pairing */
    hr_gguf *g;
    hr_model *m;
    hr_tokenizer *tok; /* head only */
    hr_pool *pool;
    hr_vk *vk; /* the GPU of hr_agent_params.gpu, or NULL: every layer on the CPU */
    uint64_t model_size, model_hash;
    char *info_json; /* this device's JOIN payload */
    atomic_int stop;

    pthread_mutex_t plan_mu;
    hr_local_plan lp;
    hr_stats st;
    /* CPU ns its planning took (the head's GLPK solves, on any thread):
     * left out of the CPU a window measures (hr_stream_stats cpu_round) */
    atomic_ullong cpu_aside_ns;

    /* worker */
    pthread_t data_thread;
    bool data_started;
    atomic_ullong canceled_req; /* frames of requests <= this are dropped */
    uint64_t plan_epoch;        /* plans applied so far (plan_mu) */
    _Atomic int64_t plan_held;  /* bytes the applied plan's contexts and buffers hold */

    hr_head *head; /* a head's own state (owned); NULL on a worker */

    /* a worker without the model file: its cache of the head's (NULL with
     * -m) and the fetch of the bytes its plans need (control thread) */
    hr_cache *cache;
    hr_fetch fetch;
    bool paired;                     /* --join done at start */
    struct hr_knock_sender *knock;   /* worker: to the head's control port (pair.c); NULL until
                                        the first knock, or when it cannot be made */
    bool knock_failed;               /* it could not: no more tries */
    uint64_t rope_off, rope_len;     /* bytes of rope_freqs (0: none), kept like the header */
    uint64_t *layer_off, *layer_len; /* [n_layer] exact bytes of each layer (fetch.c); NULL:
                                        the file is fetched in a plain grid of chunks */

    /* link.c: the echo responder peers probe and the prober (own threads) */
    struct hr_link *link;
    char echo_ep[HR_EP_LEN]; /* the responder's endpoint, "" without one */
    hr_streamer *streamer;   /* reads ahead / drops the streamed parts (stream.c; owned) */
    /* TEST ONLY: ms of sleep added to every window this agent computes,
     * from HR_TEST_SLOW_ROUND="NAME=MS" (read once, at hr_node_init, for
     * the agent named NAME); 0 = none. Makes one device slower than its
     * profile says, for the adaptive-plan test. */
    double test_slow_ms;
};

/* node.c: the node's model, keys and sockets; a->is_head decides the
 * tokenizer and the pairing socket. HR_E* with err. */
int hr_node_init(hr_agent *a, const hr_agent_params *p, char err[HR_ERR_LEN]);
/* node.c: joins the data thread, frees everything hr_node_init made (not a). */
void hr_node_fini(hr_agent *a);
/* node.c: checks that plan np fits the model and this machine's memory
 * without applying it. Thread-safe (reads only what create set). */
int hr_node_plan_check(const hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]);
/* The bytes for weights + KV this device admits now for a plan like lp
 * (what hr_node_plan_check holds its need against; the planner's
 * mem_bytes), -1 when unknown. */
double hr_node_admit_bytes(const hr_agent *a, const hr_local_plan *lp);
/* node.c: applies this device's plan np into a->lp (plan_mu held) */
int hr_node_apply_plan(hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]);
/* node.c: rows a step of plan lp may carry: a prompt chunk of n_batch plus
 * one decode row per other KV slot */
int hr_local_plan_rows(const hr_local_plan *lp);
/* node.c: points the data PUSH at lp.next_ep (CURVE with lp.next_key);
 * the push socket's owner, plan_mu held */
void hr_node_push_connect(hr_agent *a);
/* node.c: MemAvailable and MemTotal from /proc/meminfo, bytes (-1 unknown) */
void hr_node_meminfo(int64_t *avail, int64_t *total);
/* Memory a plan may take now: MemAvailable bounded by the memory cgroup's
 * limit less its non-file usage (the profile's weights_available), and
 * MemTotal; bytes, -1 unknown. */
void hr_node_mem_room(int64_t *avail, int64_t *total);
/* Loop timer (both roles, every HR_NODE_TRIM_MS): hands memory freed by
 * requests and plans back to the system, so a long-running agent's RSS is
 * what it uses, not what its busiest moment left in malloc's arenas. */
#define HR_NODE_TRIM_MS 10000
void hr_node_trim_timer(void *ud);
/* node.c: one window of n_tok tokens took ms; the last round counts tokens.
 * A decode window (n_tok 1) feeds the ms_round EMA and counts a round; ms
 * < 0: a round without layers here (nothing computed, nothing timed). */
void hr_node_stats_round(hr_agent *a, double ms, int n_tok, bool last_round);
/* node.c: the round statistics start over for plan plan_id (apply_plan). */
void hr_node_stats_reset(hr_agent *a, uint32_t plan_id);
/* node.c: TEST ONLY: sleeps a->test_slow_ms (HR_TEST_SLOW_ROUND), if set. */
void hr_node_test_slow(const hr_agent *a);

/* stream.c: which file bytes this device's windows are and when to read
 * them ahead or release them (the mmap/stream.h calls). Every function
 * works on the plan lp it is given; the caller owns lp. */
void hr_node_windows(const hr_agent *a, hr_local_plan *lp); /* fills lp->win_off/len */
/* window `round` of lp was computed, for a step of `rows` rows (the bytes
 * read per token are measured on one-row steps where there are any, see
 * hr_node_io_sample): the streamer drops its streamed part
 * and reads the next window's ahead, on its own thread. Call it after the
 * hidden state went on, without plan_mu. Thread-safe. */
void hr_node_after_window(const hr_agent *a, const hr_local_plan *lp, int round, int rows);
/* A window of a step of `rows` rows starts computing (see above). */
void hr_node_window_start(const hr_agent *a, int rows);
double hr_node_resident(const hr_agent *a, const hr_local_plan *lp); /* fraction resident */
/* stream.c: starts / stops the streamer thread (hr_node_init / hr_node_fini) */
int hr_node_streamer_start(hr_agent *a, char err[HR_ERR_LEN]);
void hr_node_streamer_stop(hr_agent *a);
/* stream.c: splits lp's windows (hr_node_windows done) under room bytes for
 * weights (hr_prof_stream_room) by the scheduler's streaming scheme
 * (hr_prof_stream_parts, min_buffer = layer_bytes, the model's mean layer)
 * and hands the parts to the streamer, which pins the resident parts and
 * warms the first window. Returns the streamed bytes per round. Thread-safe
 * (the streamer's own lock, not plan_mu). */
double hr_node_stream_plan(hr_agent *a, const hr_local_plan *lp, double room, double layer_bytes);
/* stream.c: hr_ctx_params.on_layer of this device's window contexts (ud =
 * the agent): posts the finished layer to the streamer when a tail slides
 * through its buffer. Cheap, on the computing thread. */
void hr_node_on_layer(void *ud, int layer);
/* stream.c: hr_ctx_params.on_route of this device's window contexts (ud =
 * the agent): the experts a layer's router chose, for the expert cache
 * when the plan streams by expert. */
void hr_node_on_route(void *ud, int layer, const int *experts, int n);
/* stream.c: the measured bytes per round, the split (any thread) */
void hr_node_stream_stats(const hr_agent *a, hr_stream_stats *out);
/* stream.c: one measurement tick (one thread: the control loop's timer) */
void hr_node_io_sample(hr_agent *a);

/* link.c: this agent's links (thread-safe unless said otherwise).
 * start: binds the echo responder next to the data port (CURVE like it)
 * and starts the responder and prober threads; sets a->echo_ep. stop: joins
 * them (before the context ends); a->link NULL is a no-op. request: asks
 * the prober to measure the link to rq->to (the latest request wins; never
 * blocks). take: 1 and *out when a measurement finished since the last
 * take, 0 when none did, a negative HR_E* code with err (and out->to,
 * out->plan_id) when it failed. */
typedef struct hr_link hr_link;
int hr_link_start(hr_agent *a, char err[HR_ERR_LEN]);
void hr_link_stop(hr_agent *a);
void hr_link_request(hr_agent *a, const hr_msg_probe *rq);
int hr_link_take(hr_agent *a, hr_msg_link *out, char err[HR_ERR_LEN]);

/* worker.c: the worker's control loop (and its data thread) until stop or a
 * fatal refusal by the head */
int hr_worker_run(hr_agent *a, char err[HR_ERR_LEN]);

/* head.c: the head's state of a (a->head) with its request service; the
 * node must be initialised. HR_E* with err. */
int hr_head_create(hr_agent *a, char err[HR_ERR_LEN]);
/* head.c: stops the service, frees a->head. NULL head is a no-op. */
void hr_head_destroy(hr_agent *a);
/* head.c: the head's control loop; 1 = invited: become a worker */
int hr_head_run(hr_agent *a, char err[HR_ERR_LEN]);

#endif
