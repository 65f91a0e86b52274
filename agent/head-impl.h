/* head-impl.h - the head's own state (struct hr_head, a->head), which a
 * worker never has: the device table and the plan the control thread
 * makes, and the small interface through which the control thread and the
 * generating thread meet. Included by head.c (control loop), head_plan.c
 * (planning), head_status.c (the status snapshot), head_state.c (the
 * shared interface), gen.c and batch.c (generation), prompt.c and
 * service.c; never by worker.c or node.c.
 *
 * Lock order (outer first; the ranks are agent-impl.h's HR_RANK_*, and
 * hr_lock aborts on a violation in debug and sanitizer builds):
 *
 *   gen_mu  >  plan_mu  >  dev_mu  >  mu  >  service mu  >  ev_mu
 *           >  link mu  >  stream mu  >  st.mu  >  solve_mu
 *
 *   - gen_mu is held by the generating thread for a whole session; it
 *     takes plan_mu to apply the head's part of a plan (hr_head_gen_begin)
 *     and keeps it while steps run.
 *   - dev_mu is the control thread's, over the device table, while it
 *     plans and reads messages; it publishes under it (mu) and reads
 *     statistics (st.mu). Readers of the status take only dev_mu and then
 *     inner locks (hr_head_status).
 *   - mu guards the snapshot both threads share; waits on cv hold it.
 *   - the service's mu is taken by the engine's feed callbacks (take,
 *     done, batches) under gen_mu and plan_mu, never the other way round:
 *     the service calls no engine function with its mu held.
 *   - ev_mu, the link measurer's, the streamer's, the statistics' and the
 *     solver's (solve_mu) locks are leaves: nothing is taken while they
 *     are held (the solver thread posts its event after letting go).
 *
 * The scheduler's integer programs run on a thread of their own
 * (head_solve.c): the control thread hands a plan's inputs over and goes
 * on serving messages; the result comes back as a PLAN event on ev_pull.
 *
 * Threads and ownership: what each block of struct hr_head below belongs
 * to is written at the block. In short:
 *   - the control thread (hr_head_run) owns the device table and the plan
 *     state (the "control" block). It writes them under dev_mu, which only
 *     hr_head_status (head_status.c) takes from other threads to read
 *     them; the generating thread never takes dev_mu.
 *   - the generating thread (whoever holds gen_mu: the service thread, or
 *     a caller of hr_head_generate / hr_head_logits) owns a->lp under
 *     plan_mu, the data sockets and the "generating" block. It tells the
 *     control thread what it does with events on the inproc socket
 *     ev_push -> ev_pull (START, CANCEL for the workers, TOKEN/DONE/ERROR
 *     for `hearth prompt` clients).
 *   - readers (the HTTP API, `hearth status`) see the head through
 *     snapshots only: hr_head_snap (mu) and hr_status (head_status.c).
 *   - the two threads share only the "shared" block, under mu / cv: the
 *     control thread publishes a snapshot of its state and the head's own
 *     part of the current plan (hr_head_publish); the generating thread
 *     waits on the snapshot, marks itself busy for a request (the control
 *     thread does not re-plan then, except while the request recovers
 *     from a lost device) and applies the pending plan itself
 *     (hr_head_begin, hr_head_recover_wait). lost and recoveries are
 *     atomics. */
#ifndef HR_AGENT_HEAD_IMPL_H
/* Positions attended in the planner's decode prediction (fewer when the
 * context window is shorter than twice this): a chat turn's depth. */
#define HR_PLAN_N_PAST 256
#define HR_AGENT_HEAD_IMPL_H

#include "agent/agent-impl.h"
#include "agent/status.h"
#include "common/sync.h"

/* A device as the head sees it (index 0 is the head itself). */
typedef struct {
    char name[HR_NAME_LEN];
    char ctrl_ep[HR_EP_LEN], data_ep[HR_EP_LEN];
    uint8_t id[HR_RING_MAX_ID]; /* ROUTER identity of its DEALER */
    size_t id_len;
    hr_msg_join join; /* its JOIN, decoded once when it arrived (profile NULL: the
                       * scheduler's view below is what the head keeps of it) */
    bool has_join;
    bool has_sched;
    hr_sched_device sd;           /* from its profile */
    char pubkey[HR_RING_KEY_LEN]; /* its CURVE public key (from JOIN) */
    double last_seen;             /* s, monotonic */
    bool lost, ready;
    uint32_t ready_plan;
    char ready_err[HR_ERR_LEN];
    /* plan */
    int ring_pos;
    int layers;                /* in all rounds of the plan (hd->plan_k) */
    int win[HR_AGENT_MAX_K];   /* layers of its window in round r (0: none) */
    int first[HR_AGENT_MAX_K]; /* its first layer in round r */
    int n_gpu;                 /* of each window, at most the first n_gpu on its GPU (n_m) */
    /* its profile's chosen Vulkan device (gpu[0] == 0: none): name, type,
     * largest device-local heap, best measured matvec rate */
    char gpu[128], gpu_kind[16];
    int64_t gpu_vram;
    double gpu_gbs;
    bool overloaded;
    double pred_ms_round;
    char left_out[HR_SCHED_LEFT_OUT_LEN]; /* why a device without layers was left out (head_plan.c)
                                           */
    /* heartbeat stats */
    double meas_ms_round, resident;
    uint64_t tokens;
    int64_t mem_avail;
    /* its link to the next device, measured (head_link.c) */
    char echo_ep[HR_EP_LEN]; /* its link responder (JOIN), "" when none */
    bool link_measured;
    double link_rtt_ms, link_bps; /* round trip of a hidden state, ms; throughput, bytes/s */
    double link_rtt_bytes;        /* bytes each way in the round trip's messages */
    double link_t;                /* s, monotonic, when the figures arrived */
    uint32_t link_plan;           /* the plan whose next device was measured; 0: the head */
    int link_n;                   /* measurements received */
    char link_to[HR_EP_LEN];      /* the responder measured */
    char link_to_name[HR_NAME_LEN];
    char probe_to[HR_EP_LEN]; /* a PROBE asked and not answered yet, "" none */
    double probe_t;           /* s, monotonic, when it was asked (or failed) */
    bool probe_failed;        /* the last probe to probe_to failed: retried later */
    unsigned probe_traffic;   /* hr_head.traffic when it was asked */
    /* the link figures the current plan used */
    double plan_rtt_ms, plan_bps, plan_rtt_bytes;
    bool plan_link_measured, plan_link_reverse; /* reverse: the head's, from its next's probe */
    char plan_link_to[HR_NAME_LEN];
    /* disk: predicted (plan) and measured / done (heartbeat) */
    double pred_read_token;        /* bytes per token the cost model says it reads; -1 n/a */
    double meas_read_round;        /* bytes per window computed, measured; -1 unknown */
    double pred_cpu_token;         /* CPU ms per token the cost model says it spends; -1 n/a */
    double meas_cpu_round;         /* CPU ms per window computed, measured; -1 unknown */
    uint32_t cpu_plan;             /* the plan meas_cpu_round was measured under */
    uint32_t cpu_adapt_plan;       /* the plan read_cpu_ms_mb was last adapted under; 0 none */
    double cpu_adapt_bytes;        /* ... over this many bytes its pump read under it */
    double stream_round, pinned;   /* the runtime's split: bytes per round, bytes kept */
    int locked;                    /* pinned by mlock (1), by advice (0), -1 unknown */
    int ex_keep;                   /* streaming by expert: experts kept per layer, -1: not */
    uint64_t ex_routed, ex_hits;   /* ... experts routed to, and of them resident */
    uint64_t ex_fetched, ex_moved; /* ... bytes of experts read on demand, by reranks */
    double ex_miss;                /* measured misses over even routing's (sched expert_miss); 0:
                                      too few routes yet */
    /* the disk as its pump gets it (heartbeat pump_bytes / pump_s, since it
     * started), and the same at its first sample under pump_plan */
    double pump_bytes, pump_s, pump_base_bytes, pump_base_s;
    uint32_t pump_plan;
    /* model bytes it fetches from us (no model file there; heartbeat): verified of
     * wanted, received in all; -1 unknown / has the file */
    double fetch_done, fetch_total, fetch_wire;
    /* adaptive plans (head_adapt.c) */
    double pred_compute_ms_round; /* compute part of pred_ms_round, ms */
    double rate_scale;            /* the profile's CPU times x this when planning; 0 = 1 */
    double disk_scale;            /* its profile's disk rate x this when planning (its pump's
                                     measured rate over the profile's); 0 = 1 */
    double read_cpu_ms_mb;        /* CPU ms per MB read when planning, where its runtime's CPU
                                     replaced the profile's figure; < 0 = the profile's */
    double adapt_ratio;           /* last measured / predicted ms per round, 0 = none */
    uint64_t adapt_rounds;        /* decode rounds at its last sample */
    double adapt_ms_total;        /* ... and the ms they took in all */
    uint32_t adapt_plan;          /* plan of those rounds */
    int adapt_off;                /* consecutive fresh samples off by more than the threshold */
    double adapt_since;           /* s, monotonic: the first of them */
    double adapt_seen;            /* s, monotonic: the last fresh sample */
    bool adapt_rated;             /* measured in a ring since it joined (a warm sample) */
    double adapt_first;           /* its rate scale once first measured (matched, or the first
                                     decision's): the model's bias; 0 = not yet */
    double adapt_fast_at;         /* s, monotonic: its last re-plan not held (0 = none) */
} hr_dev;

/* A KV slot's content once its request is over (batch.c). Positions
 * [0, n_exact) hold the KV a cold prefill of tok[0..n_exact) in n_batch
 * chunks computes, bit for bit, on every device of the plan. */
typedef struct {
    int32_t *tok; /* [cache_ctx] (owned) */
    int n_exact;
    double used; /* s, monotonic: when it last served (LRU); 0 = never */
} hr_slot_cache;

/* A plan's integer programs, handed to the solver thread (head_solve.c).
 * Filled by the control thread while no job is out (hd->solving false),
 * the solver's while it solves, read back by the control thread once the
 * solver's PLAN event with its gen arrived. */
typedef struct {
    uint64_t gen; /* which hand-over this is */
    /* in: the candidates at their current rates and links */
    int n;
    hr_sched_device sd[HR_AGENT_MAX_DEV];
    hr_sched_opts so;
    int n_parallel;     /* KV slots asked for (--parallel or its default) */
    bool parallel_auto; /* --parallel not given: fewer slots when they do not fit */
    int ctx0;           /* positions per slot asked for */
    bool ctx_auto;      /* --ctx not given: shorter slots may be tried */
    /* out */
    int rc; /* 0, or HR_E* with err */
    char err[HR_ERR_LEN];
    int plan_seq, plan_ctx; /* the slots and positions the plan was made with */
    hr_sched_plan plan;
} hr_solve_job;

/* What the control thread publishes for the other threads. */
typedef struct {
    uint32_t plan_id;
    bool ready;   /* every device ready on plan_id */
    bool planned; /* a first plan was made */
    bool replan;  /* a re-plan is due */
    int expect;   /* workers to wait for before the first plan */
    int n_ready;  /* workers not lost and ready on plan_id */
    char plan_err[HR_ERR_LEN];
    char lost_msg[HR_ERR_LEN];
} hr_head_snap;

struct hr_head {
    hr_agent *a;
    struct hr_service *svc; /* the request queue (service.h); set at create */

    /* ---- shared: mu / cv ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hr_head_snap snap;        /* written by hr_head_publish (control thread) */
    hr_local_plan pending;    /* the head's part of plan snap.plan_id (parameters only) */
    bool busy;                /* the generating thread runs a request (not recovering) */
    unsigned traffic;         /* times busy was set: a link probe across a change saw traffic */
    atomic_int lost;          /* 1 + index of a lost ring device, 0 = none */
    atomic_ullong recoveries; /* requests continued after a lost device */

    /* ---- control thread (written under dev_mu) ---- */
    pthread_mutex_t dev_mu;
    hr_dev devs[HR_AGENT_MAX_DEV];
    int n_devs;
    uint32_t plan_id;
    bool replan, ready, planned;
    int own_short; /* plans in a row whose head part did not fit (head_plan.c) */
    int lost_di;   /* 1 + index of a lost ring device, 0 = none */
    int plan_k;
    int plan_seq;       /* KV slots per window of the plan being made (requests at once) */
    bool parallel_auto; /* --parallel not given: fewer slots when the KV does not fit */
    int plan_ctx;       /* positions per KV slot of the plan being made (--ctx, or shorter
                         * when --ctx is not given and the KV of plan_seq slots does not fit) */
    int expect;
    char plan_err[HR_ERR_LEN];
    char lost_msg[HR_ERR_LEN];
    hr_sched_plan sched;
    bool have_sched;
    bool plan_chosen; /* the scheduler chose the windows in use (not --windows, not an even
                       * split): sched is its own prediction, not only its evaluation */
    /* how the current plan was made (head_plan.c) */
    char plan_src[256];
    hr_local_plan own; /* the head's part of plan_id (parameters and windows) */
    double resident;   /* of own's windows */
    hr_prof_model pm;  /* model profile for the scheduler */
    bool have_pm;
    void *ev_pull; /* events from the generating thread */

    /* link-driven re-plans (head_link.c, control thread) */
    bool link_replan_due;
    double link_replan_t; /* s, monotonic, of the last one */
    char link_replan_why[HR_ERR_LEN];

    /* events to the control thread (ev_mu: the service thread posts them
     * inside and outside of gen_mu) */
    pthread_mutex_t ev_mu;
    void *ev_push;

    /* ---- generating thread (gen_mu) ---- */
    pthread_mutex_t gen_mu;
    uint64_t next_req;
    /* the prompt cache (batch.c): what each KV slot of plan cache_plan
     * holds once its request is over, for the next request that starts
     * with the same tokens */
    hr_slot_cache cache[HR_AGENT_MAX_PARALLEL];
    uint32_t cache_plan;
    int cache_ctx;     /* tokens each cache[].tok holds */
    bool decode_exact; /* a decode row's KV equals a prefill row's (the kernels' one float
                          order, or F32 weights): generated tokens are reusable too */
    bool plan_gpu;     /* the plan puts layers on a GPU, whose decode and prompt shaders
                          may sum in different orders: decode rows are not reused */

    /* ---- adaptive plans (head_adapt.c) ---- */
    /* shared: the plan an adaptive re-plan replaces, 0 = none. Set by the
     * control thread with replan; the generating thread then leaves the
     * running request's plan between tokens (hr_head_adapt_wait) */
    atomic_uint adapt;
    /* shared: the running requests' tokens generated so far, still to come,
     * and positions in all (prompt and generated; 0 when none): what a
     * re-plan's replay costs and gains */
    atomic_int gen_done, gen_left, gen_hist;
    /* control thread (dev_mu) */
    int n_adapt;              /* adaptive re-plans decided */
    int n_rescaled;           /* rate updates that kept the plan */
    double adapt_at;          /* s, monotonic: the last decision, 0 = none */
    double adapt_recheck_at;  /* s, monotonic: a re-plan waits until its cause has held
                                 HR_ADAPT_HOLD_S; 0 = none pending */
    double adapt_head_at;     /* s, monotonic: the head's own last sample */
    double adapt_layer_bytes; /* a mean layer's bytes (the last adaptive plan's model) */
    bool adapt_moved;         /* the last adaptive decision moved layers (a re-plan) */
    bool adapt_idle;          /* a better plan waits for the ring to be idle (the running
                                 request's replay cost more than it gained) */
    uint32_t adapt_from;      /* plan replaced by the last adaptive re-plan */
    uint32_t adapt_to;        /* ... and the plan that replaced it */
    char adapt_reason[1024];  /* the last decision and why (device, predicted, measured) */

    /* control thread: model bytes served to workers without the file (fetch.c) */
    hr_fetch_served served;
    /* control thread: beacons on the LAN (discovery), NULL with --no-discovery */
    struct hr_beacon_sender *beacon;
    /* control thread: knocks of devices that cannot reach us over CURVE
     * (UDP on the control port's number); NULL when insecure or not bound */
    struct hr_knock_listener *knock;

    /* ---- the solver thread (head_solve.c) ---- */
    /* control thread: a job is out, its number, the candidates it was made for */
    bool solving;
    uint64_t solve_gen;
    int solve_cand[HR_AGENT_MAX_DEV], solve_n;
    /* solve_mu / solve_cv: the hand-over */
    pthread_mutex_t solve_mu;
    pthread_cond_t solve_cv;
    bool solve_pending, solve_stop; /* a job waits for the solver; the solver stops */
    uint64_t solve_done;            /* gen of the last job solved */
    hr_solve_job solve_job;
    pthread_t solver;
    bool solver_started;
};

/* ---- head_state.c: the shared interface ---- */

/* Control thread: publishes its state (snapshot, own plan as pending,
 * lost) and wakes the waiters. */
void hr_head_publish(hr_head *hd);
/* Control thread: true when it may re-plan now (no request generating);
 * the published ring is then not ready until the next hr_head_publish. */
bool hr_head_claim(hr_head *hd);
/* The number of requests (and recoveries) the generating thread began so
 * far; *busy: one runs now. Any thread. */
unsigned hr_head_traffic(hr_head *hd, bool *busy);
/* Generating thread: waits (bounded by recover_ms) for a ready ring when a
 * re-plan is pending, marks the head busy and copies the plan to apply
 * into *np. HR_EAGAIN with err when the ring is not ready. */
int hr_head_begin(hr_head *hd, hr_local_plan *np, char err[HR_ERR_LEN]);
/* Generating thread, between tokens when hd->adapt names its plan old_plan:
 * leaves busy, waits until the control thread made and readied the new
 * plan (or gave the re-plan up: *np is then the plan in use), marks busy
 * again and copies it into *np. HR_EINFEASIBLE, HR_ETIMEDOUT,
 * HR_ECANCELED with err. */
int hr_head_adapt_wait(hr_head *hd, uint32_t old_plan, hr_local_plan *np, char err[HR_ERR_LEN]);
/* Generating thread: the request is over. */
void hr_head_end(hr_head *hd);
/* Generating thread, after a lost device: leaves busy, waits until the
 * control thread made and readied a plan newer than old_plan, then marks
 * busy again and copies it into *np. HR_EINFEASIBLE, HR_ETIMEDOUT,
 * HR_ECANCELED with err. */
int hr_head_recover_wait(hr_head *hd, uint32_t old_plan, hr_local_plan *np, char err[HR_ERR_LEN]);
/* Any thread: HR_ENET with the lost device's message in err. */
int hr_head_lost_err(hr_head *hd, char err[HR_ERR_LEN]);
/* Any thread: a copy of the snapshot. */
void hr_head_snap_get(hr_head *hd, hr_head_snap *out);

/* head_plan.c: micro-batches a batched session keeps on the ring of ring[0..n)
 * (device indices): --ring-batches, else one when a device streams its
 * weights from disk (so that it reads them once per step for all
 * requests), else one per ring device, but when every ring device runs on
 * the head's machine they share its cores: one per n_threads of them
 * (control thread). */
int hr_head_ring_batches(const hr_head *hd, const int *ring, int n);
/* head_plan.c: true when a device of ring[0..n) streams its weights
 * (control thread). */
bool hr_head_ring_streams(const hr_head *hd, const int *ring, int n);

/* head_plan.c: KV positions a device holds per layer for the planner's memory
 * arithmetic: the context times the KV slots of the plan being made
 * (hd->plan_seq). Control thread. */
int hr_head_kv_ctx(const hr_agent *a);

/* ---- head_plan.c: planning (control thread, dev_mu held) ---- */

/* The scheduler's view of device d from its profile (JSON text, may be NULL). */
void hr_head_dev_sched(hr_head *hd, hr_dev *d, const char *profile, bool is_head);
/* Makes a plan over the devices not lost, sends it to the workers and
 * keeps the head's own part in hd->own: 0 or HR_E* with err; or
 * HR_PLAN_SOLVING: the scheduler's programs run on the solver thread and
 * hr_head_replan_solved finishes the plan. */
int hr_head_replan(hr_head *hd, char err[HR_ERR_LEN]);
/* Sets ready from the devices' READY reports. */
void hr_head_update_ready(hr_head *hd);
int hr_head_n_workers(const hr_head *hd);
/* head_adapt.c: rounds of k in which a device with windows win[k] computes
 * (at least 1, for a device without layers); its predicted and measured
 * ms per round are per such window. */
int hr_head_windows_computed(const int *win, int k);
/* head_state.c: sends m to the peer with ROUTER identity id (frees its
 * payload). Control thread. */
void hr_head_send(hr_head *hd, const uint8_t *id, size_t idl, hr_msg *m);

/* hr_head_replan's answers besides 0 and HR_E*: its integer programs went
 * to the solver thread (the plan is finished by hr_head_replan_solved when
 * they come back); and, from hr_head_replan_solved, the devices changed
 * while they were solved (hd->replan is set: plan again). */
#define HR_PLAN_SOLVING 1
#define HR_PLAN_STALE 2
/* The solver's result for job gen came back (its PLAN event): finishes
 * the plan hr_head_replan began, as hr_head_replan would have; 0,
 * HR_PLAN_STALE, or HR_E* with err. Control thread, dev_mu held. */
int hr_head_replan_solved(hr_head *hd, uint64_t gen, char err[HR_ERR_LEN]);

/* ---- head_solve.c: the solver thread ---- */

/* Starts / stops (joins) it; start: 0 or HR_ENOMEM with err. Control
 * thread (before and after its loop). */
int hr_head_solve_start(hr_head *hd, char err[HR_ERR_LEN]);
void hr_head_solve_stop(hr_head *hd);
/* The KV slot size a plan takes, for the scheduler's own windows and for
 * forced ones alike, of the sizes ctx0 >> t tried (t < n_try; lat[t] the
 * predicted ms per token with slots that long, <= 0 where they do not
 * fit; streams[t] a device of that plan streams weights from disk): the
 * longest at which no device streams, within HR_SOLVE_SLOT_TOL of the
 * fastest; when every size that fits streams, the shortest (KV takes the
 * room of weights, so on a streaming device every byte of it is read from
 * disk again each token, or taken from the buffer that hides the reads:
 * measured on five-small, the same windows ran at 0.37-0.45 tok/s with 4
 * slots of 2048 positions and 0.58-0.80 with 4 of 512, where the cost
 * model put the two within 5%); -1 when none fits. Reentrant. */
#define HR_SOLVE_SLOT_TOL 0.05
int hr_solve_slot_pick(const double *lat, const bool *streams, int n_try);
/* True when an active device of plan p streams weights from disk. */
bool hr_solve_plan_streams(const hr_sched_plan *p);
/* True when a slot of ctx positions may be halved once more: --ctx not
 * given, several slots, and the half not below HR_AGENT_SLOT_CTX_MIN. */
static inline bool hr_solve_slot_shorter(bool ctx_auto, int n_seq, int ctx) {
    return ctx_auto && n_seq > 1 && ctx / 2 >= HR_AGENT_SLOT_CTX_MIN;
}
/* Hands hd->solve_job (filled, with a new gen) to the solver. */
void hr_head_solve_submit(hr_head *hd);
/* The job of number gen once solved, else NULL. */
hr_solve_job *hr_head_solve_result(hr_head *hd, uint64_t gen);

/* ---- head_link.c: measured links (control thread, dev_mu held) ---- */

/* A device joined: it measures its link to the head (PROBE). */
void hr_head_link_join(hr_head *hd, hr_dev *d);
/* A LINK message from device di. */
void hr_head_link_msg(hr_head *hd, int di, const hr_ring_hdr *h, const char *pl);
/* Every turn: the head's own measurement, PROBEs for ring members whose
 * next device changed (once the ring is ready), pending probes that timed
 * out, and a due link re-plan (rate-limited). */
void hr_head_link_timer(hr_head *hd);
/* True while a device that just joined is measuring its link (the plan
 * waits for the figures, a few seconds at most; never while recovering). */
bool hr_head_link_wait(const hr_head *hd);
/* The planner's link figures for candidates cand[0..n) (sd[i] of
 * devs[cand[i]]): measured where measured, else as they are (assumed);
 * remembered as the plan's. */
void hr_head_link_inputs(hr_head *hd, const int *cand, int n, hr_sched_device *sd);
/* The link figures of device d's status row (now: s, monotonic). */
void hr_head_link_status(const hr_dev *d, bool is_head, double now, hr_status_link *out);
/* ---- head_adapt.c: adaptive plans (control thread, dev_mu held) ---- */

/* head_adapt.c: a device's measured misses of routed experts (1 - hits / routed)
 * over those even routing gives its `keep` of n_expert kept experts,
 * clamped to [0.25, 4]; 0 below 512 routes or when it does not stream by
 * expert. The planner's hr_sched_device.expert_miss. */
double hr_head_expert_miss(const hr_hparams *hp, int keep, uint64_t routed, uint64_t hits);
/* head_adapt.c: the head's own measured routing into devs[0].ex_miss (dev_mu held). */
void hr_head_own_experts(hr_head *hd);
/* A sample of d's pump totals (bytes, s since it started; negative: none)
 * under plan; hr_head_pump_rate: bytes/s of its reads under the plan of
 * the samples, NAN until they read HR_PUMP_RATE_MIN bytes (*bytes: what
 * they read, may be NULL). */
#define HR_PUMP_RATE_MIN (16.0 * 1048576.0)
void hr_head_pump_sample(hr_dev *d, uint32_t plan, double bytes, double s);
double hr_head_pump_rate(const hr_dev *d, double *bytes);
/* The streaming devices' disk rates from their pumps (head_adapt.c): where
 * a pump read at least 64 MiB under the plan in use at a rate more than 15%
 * off the one the plan took, d->disk_scale makes it the device's rate (what
 * hr_head_dev_rates gives the scheduler). Returns how many changed; each is
 * described in why (cap bytes, *wl used so far). Control thread. */
int hr_head_adapt_disk(hr_head *hd, char *why, size_t cap, size_t *wl);
/* A streaming device under a CPU quota whose process spends more than 15%
 * off the CPU a token its plan predicts gets the difference on its reads
 * (read_cpu_ms_mb), over at least 64 MiB and four tokens' reads (again
 * under the same plan: over twice the reads of the last time). Returns
 * how many changed, described in why. */
int hr_head_adapt_read_cpu(hr_head *hd, char *why, size_t cap, size_t *wl);
/* d's CPU ms per MB read as plans take it: its runtime's where adapted, else
 * its profile's */
double hr_head_read_cpu(const hr_dev *d);

/* Adds this thread's CPU since c0 (hr_clock_s(CLOCK_THREAD_CPUTIME_ID)) to
 * a->cpu_aside_ns: planning, which the CPU a window measures leaves out. */
static inline void hr_head_cpu_aside(hr_agent *a, double c0) {
    double c1 = hr_clock_s(CLOCK_THREAD_CPUTIME_ID);
    if (c0 >= 0 && c1 > c0)
        atomic_fetch_add(&a->cpu_aside_ns, (unsigned long long)((c1 - c0) * 1e9));
}
/* d's disk rate as plans take it (bytes/s): its profile's, times disk_scale
 * where its pump's measured rate replaced it. */
static inline double hr_head_disk_bps(const hr_dev *d) {
    return d->sd.disk_bps * (d->disk_scale > 0 ? d->disk_scale : 1.0);
}
/* The scheduler's view of d at its current rate_scale (what plans use). */
void hr_head_dev_rates(const hr_dev *d, hr_sched_device *out);
/* A measurement of device di: rounds decode rounds of plan plan_id took
 * ms_total ms in all (ms: their EMA, used when ms_total is 0); from a
 * heartbeat, or the head's own statistics. */
void hr_head_adapt_sample(hr_head *hd, int di, uint32_t plan_id, double ms, uint64_t rounds,
                          double ms_total);
/* How long (s) a device measured off times its prediction (measured /
 * predicted ms per round) must stay so before a re-plan: 0 when it is 1.5x
 * off either way and this device's last re-plan that was not held is
 * since_fast_s (INFINITY: none) or more than a minute ago, else 10 s.
 * NaN: 10 s. */
double hr_head_adapt_hold_s(double off, double since_fast_s);
/* Seconds an adaptive decision waits after the last one: HR_ADAPT_HOLDOFF_S
 * (10), or 0 when the last one moved no layers (moved false) and the
 * device behind this one skips the hold (hold_s 0, hr_head_adapt_hold_s). */
double hr_head_adapt_gap_s(bool moved, double hold_s);
/* Whether an adaptive decision is due at now (a device off for the whole
 * window), with *held the longest such streak (s) and *hold the hold it
 * must have lasted: hr_head_adapt_hold_s of each such device, each with
 * the time since its own last re-plan not held. dev_mu held. */
bool hr_head_adapt_due(const hr_head *hd, double now, double *held, double *hold);
/* With scale[] the rates an adaptive check would plan with: when every
 * device measured in the ring since it joined (adapt_rated; two at least)
 * had a first scale (adapt_first; scale[] for one this check measures
 * first) on the same side of 1, the devices not yet measured get at least
 * the mildest of them when those are above 1 (at most, below), and why
 * (*wl of cap used) a note; else nothing changes. dev_mu held. */
void hr_head_adapt_bias(const hr_head *hd, double *scale, char *why, size_t cap, size_t *wl);
/* The unthrottled CPU ms of a round of ms under sd's CPU quota (the
 * inverse of the cost model's Q): min(ms, (ms + throttle_save_ms) /
 * throttle_slope); ms without one. An adaptive rate scale is a ratio of
 * these, so a round throttled past the period's share does not read as a
 * slower CPU, which the model would throttle once more. */
double hr_adapt_unthrottled_ms(const hr_sched_device *sd, double ms);
/* Every turn of the plan timer: the head's own sample; decides an adaptive
 * re-plan (sets replan and hd->adapt) or only new predictions. */
void hr_head_adapt_check(hr_head *hd);
/* After hr_head_replan returned rc: an adaptive re-plan is over. */
void hr_head_adapt_planned(hr_head *hd, int rc);
/* Status: per device (rate_scale, meas_pred_ratio) and the head's adaptive
 * plans (counts, the last decision and why; now: s, monotonic). */
void hr_head_adapt_dev_status(const hr_dev *d, hr_status_dev *out);
void hr_head_adapt_status(const hr_head *hd, double now, hr_status_adapt *out);

/* ---- gen.c ---- */

/* Posts an event to the control thread. Thread-safe (ev_mu). */
int hr_head_post(hr_agent *a, const hr_ring_hdr *h, const void *payload);
/* The same for a header-only event (START, CANCEL) of request req. */
void hr_head_post_simple(hr_agent *a, int type, uint64_t req);
/* Locks gen_mu and plan_mu once the ring is ready, marks the head busy and
 * applies the head's part of the current plan; HR_EAGAIN (not ready) or the
 * plan's failure with err, nothing held then. end: unlocks both, not busy. */
int hr_head_gen_begin(hr_agent *a, char err[HR_ERR_LEN]);
void hr_head_gen_end(hr_agent *a);
/* Applies the head's part of plan np unless it is the one in use (plan_mu
 * held). */
int hr_head_gen_apply(hr_agent *a, const hr_local_plan *np, char err[HR_ERR_LEN]);

/* ---- batch.c: the generation engine ----
 *
 * Every request runs in a session: one request is a session with one
 * slot (--parallel 1), several share one (--parallel N). A session holds
 * gen_mu while any of its requests runs. Each request has a KV slot on
 * every device; the running requests are spread over micro-batches that
 * travel the ring one after another, so that every device has work when
 * there are enough of them. hr_head_generate and hr_head_logits (agent.h)
 * are sessions of one request. */

/* One request of a session. The service owns it; the session reads the
 * inputs and fills the outputs until it hands it back with done(). */
typedef struct {
    const int32_t *ids; /* [n_ids] prompt tokens */
    int n_ids;
    hr_sampler_params sp;
    int max_tokens; /* < 0 or past the context: until the context is full;
                       0: the prompt only (nothing sampled) */
    float *logits;  /* NULL, or [n_ids][n_vocab]: teacher-forced logits of every
                       prompt position, computed from position 0 (no prompt cache);
                       nothing is sampled */
    hr_head_token_fn on_token;
    void *ud;
    const atomic_int *cancel;
    /* out */
    atomic_int n_gen; /* tokens generated so far (any thread may read) */
    hr_head_stats st;
    int rc;
    char err[HR_ERR_LEN];
} hr_gen_req;

/* How a session meets its service; the callbacks run on the session's
 * thread. */
typedef struct {
    /* the next request waiting to run, or NULL; never blocks */
    hr_gen_req *(*take)(void *ud);
    /* r finished (rc, err, st set); the session no longer touches r */
    void (*done)(void *ud, hr_gen_req *r);
    /* rows of each micro-batch's latest step, [n_mb] (for the status) */
    void (*batches)(void *ud, const int *rows, int n_mb);
    void *ud;
} hr_gen_feed;

/* Forgets what KV slot `slot` caches (the single-request path reuses
 * slot 0); slot < 0: every slot. gen_mu held. */
void hr_head_cache_forget(hr_head *hd, int slot);

/* Runs requests taken from feed, admitting new ones between steps, until
 * none runs and none waits. Returns 0 when the session ran (every request
 * it took was handed back with done, failures included), or the failure of
 * hr_head_gen_begin (nothing was taken). */
int hr_head_serve(hr_agent *a, const hr_gen_feed *feed, char err[HR_ERR_LEN]);

/* ---- prompt.c: `hearth prompt` clients on the control thread: PROMPT
 * (queued on the service), CANCEL (that client's requests), and the
 * TOKEN/DONE/ERROR events the service thread posts, forwarded to their
 * client. ---- */
void hr_prompt_submit(hr_agent *a, const uint8_t *id, size_t idl, const char *pl, size_t len);
void hr_prompt_cancel(hr_agent *a, const uint8_t *id, size_t idl);
void hr_prompt_forward(hr_agent *a, const hr_ring_hdr *h, uint8_t *buf, size_t n);

#endif
