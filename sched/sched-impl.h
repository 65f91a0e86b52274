/* sched-impl.h - scheduler internals shared by cost.c (cost model, brute force)
 * and halda.c (the GLPK programs). Both derive every bound from the same
 * per-k tables here, so the programs and the closed-form cost agree exactly.
 * No other module includes this. */
#ifndef HR_SCHED_SCHED_IMPL_H
#define HR_SCHED_SCHED_IMPL_H

#include "sched/sched.h"

/* Validated inputs, k-independent. */
typedef struct {
    int n, L, head;
    hr_sched_overlap overlap;
    bool use_gpu;
    double b;          /* bytes per layer */
    double ef, er;     /* experts: fraction of b, share of the streamed ones a token reads */
    double kv;         /* KV bytes per layer */
    double out;        /* output head bytes, on the head */
    double out_stream; /* of which the head streams per token (short of memory), bytes */
    struct {
        double t;        /* ms per CPU layer */
        double tr;       /* ms a round's CPU window adds (t_round_ms) */
        double g;        /* ms per GPU layer */
        double h;        /* ms per hop to the next device */
        double f;        /* ms per hidden state at the link's sustained rate */
        double mem_eff;  /* bytes for layers + KV (head: minus output_bytes) */
        double disk;     /* bytes/s, 0 = no streaming */
        double vram;     /* bytes */
        double th;       /* ms per token of embedding + output head (head only, else 0),
                            in a ring (its CPU part throttled as a burst, Q) */
        double th_cpu;   /* of it, unthrottled CPU ms */
        double th_alone; /* th when the head computes alone (no Q on its burst) */
        double qs, qk;   /* throttle_slope (0: none), throttle_save_ms */
        double qw;       /* throttle_wait_ms: a round's wait for the period (0: none) */
        double qp;       /* throttle_period_ms: a gap this long has the share back (0: unknown) */
        double qg;       /* its floor's share of the head's burst: th - qk, >= 0 (0: none) */
        double rc;       /* CPU ms per byte read (under a quota only, else 0) */
        double q0;       /* CPU ms a token besides its windows: th_cpu, the head's reads */
        bool lru;        /* lru reclaim (else pinned) */
        double er;       /* experts: the share of its streamed experts a token reads */
        bool link_assumed;
        double spread; /* the measured spread of its speed, 0 none */
        double rtt_ms, link_bps;
        int prefill_threads, decode_threads;
        char name[HR_SCHED_NAME_LEN];
    } d[HR_SCHED_MAX_DEV];
    int n_k;
    int k_list[HR_SCHED_MAX_K];
} hr_sched_ctx;

/* Per-k tables. wc = w - n_gpu (CPU layers per round). Every wc in
 * [0, cap] is allowed (the memory rules are monotone in wc); what a given
 * wc costs on the disk comes from hr_sched_disk_at(). */
typedef struct {
    int k, W;
    struct {
        int fit;     /* max wc with every layer resident */
        int cap;     /* max wc at all (streaming through one layer of buffer, or fit) */
        int gcap;    /* max n_gpu */
        int ub;      /* max w = min(W, cap + gcap) */
        bool stream; /* may overload: disk > 0 and cap > fit */
    } d[HR_SCHED_MAX_DEV];
} hr_sched_kctx;

/* The disk side of device i computing wc CPU layers per round under kc. */
typedef struct {
    bool overloaded;   /* streams every token */
    double load;       /* ms per round of disk reads */
    double stall;      /* ms per round the reads delay the device's own window (prefetch
                          buffer exhausted, or lru reads on demand), before the ring */
    double read_round; /* bytes read per round */
    double resident;   /* bytes of weights kept resident */
    double buffer;     /* bytes of the sliding stream buffer */
} hr_sched_disk;

/* Validates and fills *c (opts already defaulted). Returns 0, HR_EINVAL or
 * HR_EINFEASIBLE with err. */
int hr_sched_ctx_init(hr_sched_ctx *c, const hr_sched_model *model, const hr_sched_device *devs,
                      int n_dev, const hr_sched_opts *opts, char *err);
void hr_sched_kctx_init(const hr_sched_ctx *c, int k, hr_sched_kctx *kc);
/* Fills *out for device i with wc CPU layers per round (0 <= wc <= cap). */
void hr_sched_disk_at(const hr_sched_ctx *c, const hr_sched_kctx *kc, int i, int wc,
                      hr_sched_disk *out);
/* ms per round device i spends on its window of wc CPU and n accelerator
 * layers: CPU compute or the reads its buffer could not take ahead,
 * whichever is longer (MAX), or both added up (SUM: no overlap with its own
 * compute), then its accelerator layers. The cost model and the program's
 * ring row both use it. */
/* ms of CPU compute for wc layers in one round: wc * t + tr (tr only in a
 * ring of several devices: one alone computes its rounds back to back), at
 * least half of wc * t, throttled by the device's CPU quota (Q, in a ring
 * only); 0 for none. */
double hr_sched_cpu_ms(const hr_sched_ctx *c, int i, int wc, bool ring);
/* Q of the cost model: what a burst of ms unthrottled CPU ms takes on
 * device i under its CPU quota (ms where it has none). */
double hr_sched_throttle_ms(const hr_sched_ctx *c, int i, double ms);
/* Unthrottled CPU ms of wc layers in one round (hr_sched_cpu_ms before Q). */
double hr_sched_cpu_raw_ms(const hr_sched_ctx *c, int i, int wc, bool ring);

/* What a round waits for device i's quota period (ms) after a gap of gap_ms
 * since its last round (the cost model's w_m); 0 without a wait. */
double hr_sched_round_wait(const hr_sched_ctx *c, int i, double gap_ms);
double hr_sched_window_ms(const hr_sched_ctx *c, int i, int wc, int n, const hr_sched_disk *dk,
                          bool ring);
/* Device i's side of a plan with per-round windows: win[r * stride]
 * layers in round r (r < kc->k), at most ng of each on its accelerator. */
typedef struct {
    bool ok;                          /* the memory rules hold */
    bool overloaded;                  /* streams every token */
    int layers, lc;                   /* layers in all rounds; of them on the CPU */
    double resident, buffer;          /* bytes of weights kept; of the stream buffer */
    double cm[HR_SCHED_MAX_ROUNDS];   /* ms of compute in round r */
    double cp[HR_SCHED_MAX_ROUNDS];   /* ms of its window in round r (hr_sched_window_ms) */
    double load[HR_SCHED_MAX_ROUNDS]; /* ms of disk reads in round r */
    double read[HR_SCHED_MAX_ROUNDS]; /* bytes read in round r */
    double cpu; /* unthrottled CPU ms of all rounds, their reads' included (the quota's floor) */
} hr_sched_dev_rounds;
/* A device with one window size in every round is costed by
 * hr_sched_disk_at (kc's caps), any other by the same rules over its
 * windows (sched.h, per-round windows). ring: others compute between its
 * rounds (hr_sched_cpu_ms). */
void hr_sched_dev_at(const hr_sched_ctx *c, const hr_sched_kctx *kc, int i, const int *win,
                     int stride, int ng, bool ring, hr_sched_dev_rounds *out);
/* Closed-form latency (ms per token) of per-round windows win[r * c->n + i]
 * (ng[i] caps each of device i's windows on its accelerator; NULL: none)
 * for kc->k rounds; INFINITY when infeasible or the windows do not sum to
 * L. Fills plan when not NULL and feasible. */
double hr_sched_eval_rounds(const hr_sched_ctx *c, const hr_sched_kctx *kc, const int *win,
                            const int *ng, hr_sched_plan *plan);
/* The same for a uniform plan: w[i] layers in every round. */
double hr_sched_eval(const hr_sched_ctx *c, const hr_sched_kctx *kc, const int *w, const int *ng,
                     hr_sched_plan *plan);
/* Marks plan failed with code and message. Returns code. */
int hr_sched_plan_fail(hr_sched_plan *plan, int code, const char *msg);
/* Explains why no k admits a plan, into err. Returns HR_EINFEASIBLE. */
int hr_sched_explain_infeasible(const hr_sched_ctx *c, char *err);
/* Fills plan->explanation after a search. */
void hr_sched_explain(hr_sched_plan *plan);
double hr_sched_now_ms(void);

#endif
