/* sched.h - the layer-assignment planner: cost model, Halda ILP on GLPK, plan output.
 *
 * Devices form a ring with the head first. The model's L layers are cut into
 * k rounds; in round r device m computes a window of w_rm consecutive layers
 * (possibly none), the windows of a round follow the ring order and the
 * rounds follow each other, so every layer is computed once and a token's
 * hidden state goes around the ring k times. A uniform plan gives every
 * device one window size w_m in all rounds (k divides L, W = L / k =
 * sum_m w_m layers per round); others give a device different windows in
 * different rounds, and k need not divide L. hr_sched_solve() picks k and the
 * windows that minimise the predicted decode latency of one token, leaving
 * out (no layers) devices that would only slow the ring.
 *
 * COST MODEL (all times in ms, bytes in bytes, rates in bytes/s)
 *
 * Written for a uniform plan below (w_m in every round). For a k-round plan,
 * device m runs wc_m = w_m - n_m layers of its window on
 * the CPU and n_m on its accelerator (a Vulkan device, gpu/vk.h; n_m = 0 for a
 * device with vram_bytes 0 or with hr_sched_opts.use_gpu off). Per round:
 *
 *   c_m   = cpu(wc_m) + n_m * t_layer_gpu_ms                compute, ms/round
 *   cpu(wc) = Q(max(wc * t_layer_ms + t_round_ms, wc * t_layer_ms / 2)) for
 *           wc > 0, 0 for wc = 0 (t_round_ms: what a round's burst of
 *           compute adds, measured; Q and t_round_ms only where another
 *           device computes between a device's rounds: the head alone runs
 *           its rounds back to back, t_round_ms 0, Q(x) = x)
 *   Q(x)  = max(x, throttle_slope * x - throttle_save_ms) under a CPU quota
 *           (x without): convex, x while a round fits in the quota's share of
 *           a period, the throttled rate beyond it
 *   h_m   = rtt_ms / 2 + 1000 * max(0, hidden_bytes - rtt_bytes) / link_bps
 *                                                            one hop m -> next, ms
 *           (a round trip measured with messages of rtt_bytes already carries
 *           that much of a hidden state each way; 0 for an assumed rtt)
 *   H     = sum over active m of h_m, or 0 with one active   hops, ms/round
 *   W     = sum over m computing on its CPU this round of w_m, or 0 with
 *           one active: w_m = throttle_wait_ms * max(0, 1 - g_m /
 *           throttle_period_ms) under a CPU quota (0 without; the factor 1
 *           where the period is unknown): a round that reaches the device
 *           when its period's share is spent waits for the next period,
 *           (P - a)^2 / (2 P) on average for periods of P ms of which a run
 *           unthrottled, and it reaches it so only when no period began in
 *           the gap since its last round, g_m = the round's other windows
 *           and H (a round after a gap holding a period's start has the
 *           whole share, which Q counts; a device that only forwards spends
 *           none of it)
 *   f_m   = 1000 * hidden_bytes / link_bps                   a hidden state at the
 *                                                            link's sustained rate, ms
 *   (the disk terms below add to these)
 *
 * The head is always active (it embeds tokens and runs the output head); any
 * other device is active iff w_m > 0. Memory of device m, with
 * mem_eff_m = mem_bytes - (output_bytes if head):
 *
 *   KV of all k * wc_m CPU layers stays resident (kv_bytes_per_layer each);
 *   all resident iff:   k * wc_m * (layer_bytes + kv_bytes_per_layer) <= mem_eff_m
 *   disk_bps == 0:      all resident is a hard constraint (no streaming)
 *   GPU layers:         k * n_m * (layer_bytes + kv_bytes_per_layer) <= vram_bytes
 *
 * Memory is a cost, not a wall: a device whose layers do not all stay
 * resident ("overloaded") streams from disk every token. How many bytes
 * depends on how the OS reclaims pages (hr_sched_os):
 *
 *   pinned (Linux, Android): hearth keeps a resident part and streams the
 *     rest through a sliding buffer, hr_sched_stream_split() below with
 *     room = mem_eff_m - k * wc_m * kv and min_buffer = layer_bytes; the
 *     device needs room for the buffer (at most one layer), nothing more.
 *     Per round it reads read_round bytes: load_m = 1000 * read_round /
 *     disk_bps ms, of which the buffer takes 1000 * buffer / disk_bps ms
 *     ahead while the rest of the ring computes; the rest is read while it
 *     computes its window: stall_m = max(0, load_m - 1000 * buffer / disk_bps).
 *   lru (macOS, Windows, other): the page cache evicts least-recently-used
 *     pages; a cyclic access pattern larger than the cache misses every time,
 *     so an overloaded device re-reads its whole window every round, on
 *     demand while it computes: load_m = stall_m = 1000 * wc_m * layer_bytes /
 *     disk_bps; the window must fit beside the KV (the cache holds it).
 *
 * Round time:
 *   window_m = max(c_m, stall_m)  (HR_SCHED_OVERLAP_MAX, default: reads and
 *              compute of one device overlap) or c_m + stall_m
 *              (HR_SCHED_OVERLAP_SUM, pessimistic)
 *   S = sum over active m of window_m + H + W
 *   P = max(S, max_m load_m)       (a disk reads one round's bytes per round)
 *
 *   latency (ms per token) = k * P + t_head_ms(head)
 *
 * Under a CPU quota the head's t_head_ms is a burst of its own (Q(t_head_ms)
 * in a ring), and the quota caps a device over a whole token: latency >=
 * throttle_slope * (its unthrottled CPU ms per token, t_head_ms included on
 * the head, and read_cpu_ms_mb for every MB it reads from disk a token: the
 * page faults of streamed windows run on its CPU share too), plus, for a
 * device other than the head with CPU layers, max(0, Q(t_head_ms) -
 * throttle_save_ms): the head's burst is an idle spell of that device once
 * a token, in which its quota refills one period's share and no more (an
 * idle spell of g ms saves a throttled device at most min(g,
 * throttle_save_ms) of its throttled time, so a token takes at least
 * throttle_slope times its CPU work plus every spell's excess). The head
 * alone has no idle spells at all: its latency is at least throttle_slope
 * times all of its CPU work.
 *
 * So k > 1 pays only when memory is short: with k = 1 every streamed byte is
 * read while the device computes; larger k lets the buffer fill while the
 * rest of the ring computes, but adds k * H of hops.
 *
 * Per-round windows: every term above is taken per round r with that
 * round's windows (n_rm = min(n_m, w_rm) on the accelerator, wc_rm = w_rm -
 * n_rm), memory over the device's windows of all rounds together:
 *
 *   S_r = sum over active m of window_rm + H + W_r,  P_r = max(S_r, max_m load_rm)
 *   latency = max(sum_r P_r + t_head_ms(head), k * max_m f_m)
 *   resident: sum_r wc_rm * (layer_bytes + kv) <= mem_eff_m; GPU likewise
 *   pinned streaming: hr_sched_stream_split_rounds() over the window bytes
 *     wc_rm * layer_bytes (the buffer holds the largest window's streamed
 *     part), load_rm = 1000 * read_rm / disk_bps, stall_rm = max(0, load_rm
 *     - 1000 * buffer / disk_bps)
 *   lru: a window of the largest wc_rm must fit beside the KV; an
 *     overloaded device reads each window whole while computing it
 *
 * A device whose windows are equal in every round is costed exactly as in a
 * uniform plan, so a uniform plan costs the same either way. An active
 * device with no layers in some round still forwards the hidden state
 * (its hop counts in every round).
 *
 * t_head_ms covers the embedding lookup, output norm, LM head and sampling,
 * once per token on the head. Embedding rows are read one per token and are
 * not charged memory; the output matrix (output_bytes) takes the head's
 * memory first. A head with less memory than output_bytes streams the
 * shortfall from the mapping every token (it is bytes like any layer's):
 *
 *   out_stream = max(0, output_bytes - mem_bytes(head))      bytes per token
 *   t_head_ms += 1000 * out_stream / disk_bps(head)           ms per token
 *
 * and then holds no layers (mem_eff = 0); only a head with disk_bps = 0
 * and too little memory for the output head makes the model infeasible.
 * The ring order is the head, then the active devices in input
 * order: every term above uses the sending device's own link figures, so the
 * order does not change the cost.
 *
 * SOLVER. For every divisor k of L one mixed-integer program (GLPK
 * glp_intopt) with one binary per (device, CPU layers per round) (the disk
 * terms are piecewise in wc_m, so each allowed wc_m is a column with its
 * window and load constants), integer n_m, binary activity y_m and the
 * period P >= S, P >= load_m. The program is exact for this cost model and
 * no M1..M4 set iteration is needed; the head-alone plan is evaluated
 * directly.
 * Interchangeable devices get w_i >= w_j rows (symmetry), and each program
 * carries the best latency found so far as a cutoff row, so a k that cannot
 * win is dismissed early (reported as NAN in k_latency_ms).
 * Then, with hr_sched_opts.uneven_rounds, every k up to HR_SCHED_UNEVEN_K_MAX
 * that does not divide L gets per-round windows by a local search over the
 * cost model: it starts from the best uniform plan's shares laid over
 * rounds that differ by at most one layer (and over rounds of ceil(L / k)
 * with a shorter last one), and moves one layer at a time (between two
 * devices of a round, or between two rounds of a device) while that lowers
 * the predicted latency. Not proven optimal; such a plan wins only where it
 * predicts a lower latency than every uniform one.
 * NOISE. The head alone at each k and the program's ring at each k are the
 * candidates. Where the devices measured a spread (hr_sched_device.spread),
 * a prediction is only good to about half of it, so the plan taken is the
 * simplest candidate (fewest active devices, then the earliest k: fewer
 * rounds, uniform before per-round windows) predicting within
 * 1 + min(HR_SCHED_NOISE_MAX, max spread / 2) of the fastest, the spread
 * taken over the devices active in either plan. A ring's program then
 * only needs to find rings below the head alone's latency and below the
 * best so far times 1 + the largest margin. Without spreads the fastest
 * candidate is taken, as before.
 * Accelerator calibration (prima.cpp raises n_m on devices whose VRAM the
 * solution leaves unused) is not needed here: n_m are integer variables of
 * the same program, priced by the measured t_layer_gpu_ms, so a GPU gets
 * layers exactly when that lowers the predicted latency.
 *
 * Thread-safety: everything here is reentrant except hr_sched_solve(), which
 * drives GLPK: call it from one thread at a time.
 */
#ifndef HR_SCHED_SCHED_H
#define HR_SCHED_SCHED_H

#include "common/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define HR_SCHED_MAX_DEV 64
#define HR_SCHED_MAX_LAYER 4096
#define HR_SCHED_MAX_THREADS 256
#define HR_SCHED_MAX_K 64        /* k candidates of one search */
#define HR_SCHED_MAX_ROUNDS 64   /* k of any plan */
#define HR_SCHED_NOISE_MAX 0.10  /* the largest margin the devices' spread buys a simpler plan */
#define HR_SCHED_UNEVEN_K_MAX 16 /* largest k tried that does not divide L */
#define HR_SCHED_NAME_LEN 64
#define HR_SCHED_LEFT_OUT_LEN 160 /* a left-out device's reason */
#define HR_SCHED_SCHEMA_VERSION 2 /* 2: per-round "windows", "uniform"; "w" only when uniform */

typedef enum {
    HR_SCHED_OS_LINUX = 0, /* pinned reclaim */
    HR_SCHED_OS_ANDROID,   /* pinned reclaim */
    HR_SCHED_OS_MACOS,     /* lru reclaim */
    HR_SCHED_OS_WINDOWS,   /* lru reclaim */
    HR_SCHED_OS_OTHER,     /* lru reclaim */
} hr_sched_os;

typedef enum {
    HR_SCHED_OVERLAP_MAX = 0, /* a device's reads overlap its own compute */
    HR_SCHED_OVERLAP_SUM,     /* they do not (pessimistic) */
} hr_sched_overlap;

/* One device, as measured by the profiler. Zero-initialise (or use
 * hr_sched_device_default()) and fill; names are NUL-terminated. */
typedef struct {
    char name[HR_SCHED_NAME_LEN];
    bool is_head;      /* exactly one device, or none: device 0 is then the head */
    hr_sched_os os;    /* page reclaim behaviour, see the cost model */
    double t_layer_ms; /* ms: compute + memory time of one resident layer, one decode token;
                          0 = take decode_ms[] at the chosen thread count */
    double t_round_ms; /* ms a round's burst of CPU layers adds to wc * t_layer_ms (the
                          engine probe's intercept under a CPU quota; may be < 0), 0 none */
    /* A CPU quota that throttles the device's threads (0 / 0: none, or not
     * modelled): t_layer_ms / decode_ms and t_head_ms are then its
     * unthrottled times, and a burst of c ms of them, begun after an idle
     * spell, takes max(c, throttle_slope * c - throttle_save_ms) ms (short
     * bursts run within the quota's share of a period, long ones at the
     * throttled rate); over a token it cannot compute faster than
     * throttle_slope times its CPU work (see the cost model). */
    double throttle_slope;     /* >= 1: sustained over unthrottled time, measured; 0 none */
    double throttle_save_ms;   /* >= 0: what the first period's share saves a long burst */
    double throttle_wait_ms;   /* >= 0: what a round waits for the next period, on average, when
                                  it reaches the device with the period's share spent (with
                                  throttle_slope; none alone) */
    double throttle_period_ms; /* > 0: the quota's period, ms (a gap between its rounds this
                                  long holds a period's start); 0 unknown: every round waits */
    double read_cpu_ms_mb;     /* CPU ms its reads from disk take per MB (10^6 bytes), 0 unknown;
                                  counted with its CPU work under a quota (throttle_slope) */
    double mem_bytes;          /* bytes available to hearth for weights + KV (after OS, other
                                  programs, work buffers and ~1 layer of streaming slack) */
    double disk_bps;           /* bytes/s sequential read of the model file; 0 = never stream */
    double rtt_ms;             /* ms round trip to the next device */
    double link_bps;           /* bytes/s to the next device (> 0 when n_dev > 1) */
    double rtt_bytes;          /* bytes each way in the messages rtt_ms was measured with (0: an
                                  empty or assumed round trip); see h_m */
    double t_head_ms;          /* ms per token for embedding + output head + sampling (head only) */
    double vram_bytes;         /* accelerator memory for layers; 0 = none */
    double t_layer_gpu_ms;     /* ms per layer on the accelerator (> 0 when vram is used) */
    bool link_assumed;         /* rtt_ms / link_bps are assumed, not measured (reported) */
    /* experts (hr_sched_model.expert_frac > 0): the share of routed experts
     * this device measured not resident, over the share even routing gives
     * for the experts it kept; its streamed experts cost expert_read times
     * this. 0 = not measured (taken as 1). */
    double expert_miss;
    /* How far this device's own speed measurements disagree: the engine
     * probe's attempts' range over their median (0.12 = 12%), 0 = not
     * measured. Half the largest spread among the devices of two candidate
     * plans (at most HR_SCHED_NOISE_MAX) is the margin inside which the
     * solver takes the simpler plan (see hr_sched_solve). */
    double spread;
    /* Thread plans (Sandwich): ms per layer with t = 1..n_thread_rates threads,
     * lower is better, 0 = not measured. Prefill: one prompt batch; decode: one
     * token. The plan takes the smallest t within opts.thread_tol of the best. */
    int n_thread_rates;
    double prefill_ms[HR_SCHED_MAX_THREADS];
    double decode_ms[HR_SCHED_MAX_THREADS];
} hr_sched_device;

/* The model, as the profiler sees it. */
typedef struct {
    int n_layer;               /* L, 1..HR_SCHED_MAX_LAYER */
    double layer_bytes;        /* bytes of one layer's weights (mean over layers) */
    double hidden_bytes;       /* bytes sent per hop per token (n_embd * 2 for f16) */
    double kv_bytes_per_layer; /* bytes of one layer's KV cache at the planned context */
    double output_bytes;       /* bytes of output norm + LM head, resident on the head */
    /* mixture of experts (0 for a dense model): the fraction of layer_bytes in
     * routed experts, and the fraction of a window's experts not kept resident
     * that a token reads (n_expert_used / n_expert when routing is even; a
     * measured miss share where there is one) */
    double expert_frac;
    double expert_read;
} hr_sched_model;

typedef struct {
    hr_sched_overlap overlap;
    bool use_gpu;        /* default true; false: n_m fixed to 0 (every layer on CPUs) */
    int k_fixed;         /* 0 = search every divisor of L; else only this k */
    int k_max;           /* 0 = no limit; else only k <= k_max */
    double thread_tol;   /* relative slack for thread counts, default 0.03 */
    double time_limit_s; /* per ILP; 0 = none. Hitting it marks the plan not optimal */
    double max_enum;     /* hr_sched_exhaustive: refuse above this many (k, w) points */
    bool uneven_rounds;  /* default true: also k not dividing L, with per-round windows
                            (hr_sched_exhaustive searches uniform plans only) */
} hr_sched_opts;

/* Per device in a plan, indexed like the input devices. Per token = all k rounds. */
typedef struct {
    char name[HR_SCHED_NAME_LEN];
    bool active; /* in the ring */
    bool is_head;
    bool overloaded;                /* streams weights from disk every token */
    bool bottleneck;                /* its disk (or its stall) sets the exposed time */
    int ring_pos;                   /* 0 = head, -1 = left out */
    int win[HR_SCHED_MAX_ROUNDS];   /* layers of its window in round r (0: none that round) */
    int first[HR_SCHED_MAX_ROUNDS]; /* the first of them (where it would start when none) */
    int n_gpu;                      /* of each window, at most this many on the accelerator */
    int layers;                     /* sum of win[] */
    double compute_ms;              /* k * c_m, ms per token */
    double link_ms;                 /* k * h_m, ms per token */
    double quota_wait_ms;           /* k * throttle_wait_ms, ms per token (0: none) */
    double disk_load_ms;            /* k * load_m, ms per token, before overlap */
    double disk_exposed_ms;         /* ms per token of it not hidden behind the ring */
    double read_bytes;              /* bytes read from disk per token */
    double cpu_ms;     /* CPU ms per token, unthrottled: its windows' compute, its reads' and (the
                          head) its output head's (a CPU quota's floor is about cpu_ms / cores) */
    double mem_bytes;  /* resident demand: weights kept + stream buffer + KV (+output) */
    double t_layer_ms; /* ms per CPU layer used by the model */
    double throttle_slope; /* its CPU quota's throttled over unthrottled time, 0 none */
    int prefill_threads;   /* 0 = not measured, runtime default */
    int decode_threads;
    double rtt_ms, link_bps;              /* the link figures used (copied from the input) */
    bool link_assumed;                    /* ... and they were assumed, not measured */
    char left_out[HR_SCHED_LEFT_OUT_LEN]; /* why an inactive device was left out ("" when active) */
} hr_sched_dev_plan;

typedef struct {
    int status; /* 0, or the negative HR_E* code when no plan was made */
    int k;      /* rounds; 0 in a failed plan */
    int n_layer;
    bool uniform; /* every device has one window size in all rounds (then k divides n_layer) */
    int n_dev;
    int n_active;
    int head;
    int order[HR_SCHED_MAX_DEV]; /* ring order: input indices of the n_active devices */
    hr_sched_dev_plan dev[HR_SCHED_MAX_DEV];
    hr_sched_overlap overlap;
    double latency_ms;       /* predicted ms per token (the objective) */
    double tokens_per_s;     /* 1000 / latency_ms */
    double compute_ms;       /* per token: k * sum c_m */
    double link_ms;          /* per token: k * H */
    double quota_wait_ms;    /* per token: k * the active devices' throttle_wait_ms */
    double link_floor_ms;    /* per token: k * max f_m, the links' throughput bound (0 alone) */
    int link_floor_dev;      /* whose link sets it (-1: none); it binds when it equals latency_ms */
    double disk_exposed_ms;  /* per token: k * (P - compute - links) */
    double head_ms;          /* t_head_ms of the head */
    double round_ms;         /* mean over the rounds of P_r (S + E) */
    double out_stream_bytes; /* output head bytes the head streams per token (short of memory) */
    bool optimal;            /* proven optimal for the model (no time limit hit) */
    int n_ilp;               /* programs solved */
    double solve_ms;         /* wall time of hr_sched_solve / hr_sched_exhaustive */
    int n_k;                 /* candidates considered */
    int k_list[HR_SCHED_MAX_K];
    double k_latency_ms[HR_SCHED_MAX_K]; /* best per k; INFINITY = infeasible, NAN = pruned
                                            (proven no better than the chosen plan) */
    /* The fastest plan found, where a simpler one was taken instead (fewer
     * devices, then fewer rounds) because it predicted within noise_margin
     * of it; fastest_k = 0 when the plan is the fastest found. */
    int fastest_k, fastest_active;
    double fastest_ms;
    double noise_margin; /* relative; 0 when no device measured a spread */
    char explanation[512];
} hr_sched_plan;

/* h_m of the cost model above: ms for one hidden state of hidden_bytes
 * over a link of rtt_ms round trip (measured with rtt_bytes each way) and
 * link_bps bytes/s (<= 0: the bytes are not charged). Reentrant. */
double hr_sched_hop_ms(double rtt_ms, double link_bps, double rtt_bytes, double hidden_bytes);

hr_sched_opts hr_sched_opts_default(void);
hr_sched_device hr_sched_device_default(void);

/* Plans the ring. Borrows all inputs; fills *out (also on failure: status,
 * k = 0 and the reason in explanation). Returns 0, HR_EINVAL on bad input,
 * HR_EINFEASIBLE when no k admits a plan, HR_ETIMEDOUT when no program found
 * a plan within opts->time_limit_s, HR_EINTERNAL when GLPK fails, HR_ENOMEM;
 * err (may be NULL) says why. opts may be NULL (defaults). Takes ~1-20 ms
 * for 8 devices x 80 layers. Not thread-safe (GLPK). */
int hr_sched_solve(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                   const hr_sched_opts *opts, hr_sched_plan *out, char err[HR_ERR_LEN]);

/* Frees the calling thread's GLPK environment (GLPK keeps one per thread).
 * A thread that called hr_sched_solve calls this before it exits; the next
 * hr_sched_solve on the same thread makes a new one. */
void hr_sched_thread_done(void);

/* The cost model for one assignment: k rounds, w[n_dev] layers per round,
 * n_gpu[n_dev] of them on the accelerator (NULL = none). Returns ms per token,
 * or INFINITY when the inputs are invalid or the assignment breaks a memory
 * rule or sum(w) != n_layer / k. Reentrant. */
double hr_sched_cost(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                     const hr_sched_opts *opts, int k, const int *w, const int *n_gpu);

/* Like hr_sched_cost, but fills a whole plan with the breakdown. Returns 0,
 * HR_EINVAL or HR_EINFEASIBLE (with err). Reentrant. */
int hr_sched_evaluate(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                      const hr_sched_opts *opts, int k, const int *w, const int *n_gpu,
                      hr_sched_plan *out, char err[HR_ERR_LEN]);

/* The same for per-round windows: win[r * n_dev + m] layers of device m in
 * round r (k rows, 1 <= k <= HR_SCHED_MAX_ROUNDS, all rows together summing
 * to n_layer; k need not divide it); n_gpu[m] (NULL = none) caps each of
 * m's windows' accelerator layers. A device is in the ring when it is the
 * head or has a layer in some round. Returns ms per token, or INFINITY.
 * Reentrant. */
double hr_sched_cost_rounds(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                            const hr_sched_opts *opts, int k, const int *win, const int *n_gpu);
int hr_sched_evaluate_rounds(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                             const hr_sched_opts *opts, int k, const int *win, const int *n_gpu,
                             hr_sched_plan *out, char err[HR_ERR_LEN]);

/* Brute force over every allowed k and every w (and n_gpu when use_gpu), for
 * verification on small inputs. HR_ERANGE when the search would visit more
 * than opts->max_enum assignments. Same results and errors as hr_sched_solve
 * otherwise (ties: smallest k, then first found). Reentrant. */
int hr_sched_exhaustive(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                        const hr_sched_opts *opts, hr_sched_plan *out, char err[HR_ERR_LEN]);

/* The streaming scheme of a pinned-reclaim device (Linux, Android), shared by
 * the cost model and the runtime (agent/stream.c) so both do the same
 * arithmetic. A device computes k windows of window_bytes each (T = k *
 * window_bytes) and has room bytes for weights (its budget less KV and, on
 * the head, the output head). When T <= room everything stays resident.
 * Otherwise it keeps `resident` bytes (the heads of its windows, spread
 * evenly) and streams the rest through a sliding buffer of `buffer` bytes:
 * after a window is computed its streamed part is dropped and the next
 * window's streamed part is read ahead up to `buffer` bytes; while that
 * window is computed, each finished layer's streamed bytes are dropped and
 * reading goes on, never more than `buffer` bytes ahead of the layer being
 * computed. The buffer is
 *
 *   buffer = min((T - room) / (k - 1), room)   (k >= 2)
 *   buffer = min_buffer                        (k = 1)
 *
 * i.e. one whole streamed part (read entirely while the rest of the ring
 * computes, the classic prefetch) when that fits, else all the room with
 * nothing resident; with k = 1 every byte beyond the room is read while
 * the window is computed whatever the buffer, so it is the smallest.
 * resident = room - buffer, read_round = (T - resident) / k bytes per
 * round. A buffer smaller than a window's streamed part must hold the
 * layer being computed: buffer >= min(read_round, min_buffer), with
 * min_buffer one (mean) layer. */
typedef struct {
    bool streams;      /* false: T <= room, everything stays */
    double resident;   /* bytes kept resident, all windows together */
    double buffer;     /* bytes of the sliding buffer (0 when not streaming) */
    double read_round; /* bytes read from disk per round (window; the mean over them) */
} hr_sched_stream;

/* Fills *out for k windows of window_bytes under room bytes. Returns 0,
 * HR_ERANGE when the windows do not fit and the buffer is below
 * min(read_round, min_buffer) (the device cannot even stream; *out is
 * filled all the same), HR_EINVAL
 * for k < 1 or negative / non-finite sizes. Reentrant. */
int hr_sched_stream_split(double window_bytes, int k, double room, double min_buffer,
                          hr_sched_stream *out);

/* The same for windows of which expert_frac are routed experts (mixture of
 * experts) that stream by expert: what is always read (attention, router,
 * norms, shared experts) stays resident first, then as many experts as fit
 * beside a buffer of one layer (min_buffer) as a token reads it: its
 * always-read part and its routed experts; a token reads, of the experts
 * left out, the share expert_read, right after the router chose them:
 *
 *   A = k * window_bytes * (1 - expert_frac), X = k * window_bytes * expert_frac
 *   resident = room - buffer
 *   read_round = ((A - resident)+ + (X - (resident - A)+) * expert_read) / k
 *
 * expert_frac 0 is hr_sched_stream_split. Same returns. */
int hr_sched_stream_split_experts(double window_bytes, int k, double room, double min_buffer,
                                  double expert_frac, double expert_read, hr_sched_stream *out);

/* The same scheme over n windows of different sizes (window_bytes[n], 1 <=
 * n <= HR_SCHED_MAX_ROUNDS; a window of 0 bytes is a round without layers):
 * T = their sum. When T <= room all stays. With two or more windows the
 * resident part is cut so that every window streams min(its bytes, cut)
 * and the buffer holds the largest streamed part: buffer = cut, the
 * smallest with buffer + sum_r max(0, bytes_r - cut) = room. When the
 * largest window does not fit the room, it alone keeps a head: buffer =
 * min(second largest window, room), resident = room - buffer, and its tail
 * (larger than the buffer) slides through it while the other windows
 * stream whole (equal windows then keep nothing, buffer = room); this
 * meets the first case where the largest window equals the room. With one
 * window, buffer = min_buffer as for k = 1. Equal windows give exactly hr_sched_stream_split. With
 * experts (expert_frac > 0): hr_sched_stream_split_experts over the mean
 * of the windows with bytes, each reading in proportion to its bytes.
 * read[n] (may be NULL) gets the bytes each window reads; out->read_round
 * is their mean. Same returns. */
int hr_sched_stream_split_rounds(const double *window_bytes, int n, double room, double min_buffer,
                                 double expert_frac, double expert_read, hr_sched_stream *out,
                                 double *read);

/* Smallest thread count t (1-based) with ms[t-1] <= (1 + tol) * min ms, over
 * the entries > 0 among the first n; 0 when none is measured. Reentrant. */
int hr_sched_pick_threads(const double *ms, int n, double tol);

/* Layers of device dev in round r (0-based): [*first, *first + *count)
 * (count 0: none that round). Returns 0 or HR_EINVAL (bad plan, dev or
 * round). */
int hr_sched_plan_window(const hr_sched_plan *plan, int dev, int round, int *first, int *count);

/* Human-readable table. Writes at most cap bytes (NUL-terminated when cap > 0)
 * and returns the length the full text needs, like snprintf; HR_EINVAL on a
 * NULL plan. Reentrant. */
int hr_sched_plan_format(const hr_sched_plan *plan, char *buf, size_t cap);
/* The same table written to fp. Returns 0, HR_EINVAL or HR_EIO. */
int hr_sched_plan_print(const hr_sched_plan *plan, FILE *fp);

/* JSON of the plan ("schema_version": HR_SCHED_SCHEMA_VERSION). On success
 * *json is a NUL-terminated string the caller frees with free(). Returns 0,
 * HR_EINVAL or HR_ENOMEM. Reentrant. */
int hr_sched_plan_json(const hr_sched_plan *plan, char **json, char err[HR_ERR_LEN]);

#endif
