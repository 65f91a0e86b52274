/* status.h - the cluster status as a typed snapshot (hr_status) and its one
 * serialiser (hr_status_json). The head fills an hr_status once from its
 * state under its locks (hr_head_status); `hearth status` (STATUS over
 * ZeroMQ), /v1/cluster and the status page get hr_status_json's document,
 * and the HTTP API reads the struct itself (/health): nothing in the head
 * parses the document back.
 *
 * Figures: a double that is unknown or not measured yet is NAN and
 * serialises as null (the link figures, which the document has always
 * left out when unknown, are left out). Labels stay with the figures:
 * link_assumed / plan_link_assumed say a link figure is the default and
 * not a measurement, pred_* are the cost model's, meas_* measured. */
#ifndef HR_AGENT_STATUS_H
#define HR_AGENT_STATUS_H

#include "agent/agent.h"
#include "agent/service.h"
#include "ring/msg.h"

#include <stdbool.h>
#include <stdint.h>

#define HR_STATUS_TEXT_LEN 1024 /* bytes of a reason or explanation, with the NUL */

/* A device's Vulkan device, as its profile chose it. */
typedef struct {
    bool present; /* false: none (serialised as null) */
    char name[128], type[16];
    int64_t vram_bytes; /* largest device-local heap */
    double matvec_gbs;  /* best measured matvec rate, GB/s */
} hr_status_gpu;

typedef enum {
    HR_STATUS_LINK_ASSUMED,  /* not measured: the profile's default (link_assumed) */
    HR_STATUS_LINK_MEASURED, /* measured by the device, to its next one */
    HR_STATUS_LINK_REVERSE,  /* the head's: measured by its next device, the other way */
} hr_status_link_src;

/* A device's link to the next device of the ring. */
typedef struct {
    hr_status_link_src src;
    double rtt_ms, bps;           /* round trip of a hidden state, ms; bytes/s; NAN: not shown */
    char to[HR_MSG_NAME_LEN];     /* MEASURED, REVERSE: the device at the other end */
    char endpoint[HR_MSG_EP_LEN]; /* MEASURED: the responder measured */
    double age_s;                 /* MEASURED: since the figures arrived, s */
    uint32_t plan;                /* MEASURED: the plan whose next device was measured */
    int measurements;             /* MEASURED: figures received */
    char probe[8];                /* "" none, "pending", "failed" */
    double plan_rtt_ms, plan_bps; /* the figures the current plan ran on; NAN: none */
    bool plan_assumed;            /* ... and they were assumed, not measured */
} hr_status_link;

/* Disk figures per token: the plan's cost model against the measurement. */
typedef struct {
    double pred_read_bytes_token;  /* predicted bytes read, NAN: no prediction */
    double meas_read_bytes_token;  /* measured (/proc/self/io), NAN: no token yet */
    double stream_bytes_token;     /* what its runtime's split streams, NAN: unknown */
    double pinned_bytes;           /* bytes kept resident, NAN: unknown */
    int locked;                    /* pinned by mlock (1), by advice (0), -1 unknown */
    int ex_keep, ex_of;            /* streams by expert: experts kept per layer of ex_of; -1: not */
    uint64_t ex_routed, ex_hits;   /* experts routed to, and of them resident (kept) */
    uint64_t ex_fetched, ex_moved; /* bytes of experts read on demand, and by reranks */
    double plan_bps;               /* the read rate the plan's cost model took (its profile's
                                      disk test, or its pump's once adapted), bytes/s; NAN: none */
    bool plan_adapted;             /* plan_bps is its pump's measured rate (head_adapt.c) */
    double meas_bps, meas_bytes;   /* its pump's reads of streamed tails under the plan in use:
                                      bytes/s (NAN: fewer than 16 MiB yet) over meas_bytes */
    double pred_cpu_ms_token;      /* CPU ms a token the plan predicts (compute, reads, the
                                      head's output head), NAN: none */
    double meas_cpu_ms_token;      /* its process's CPU ms a token, measured over the same
                                      steps as meas_read_bytes_token; NAN: none yet */
    double plan_read_cpu_ms_mb;    /* CPU ms per MB read the plan took, NAN: none */
    bool plan_read_cpu_adapted;    /* ... from its runtime's CPU (head_adapt.c), not its
                                      profile's */
} hr_status_disk;

typedef struct {
    char name[HR_MSG_NAME_LEN];
    char address[HR_MSG_EP_LEN], data[HR_MSG_EP_LEN]; /* control, data endpoints */
    bool head, lost;
    bool pred_overloaded;      /* the plan's cost model has it stream weights every token */
    bool ready;                /* ready on the plan in use */
    bool has_info;             /* info holds its JOIN */
    hr_msg_join info;          /* its JOIN (profile NULL): os, cores, memory, threads, ... */
    int ring_pos;              /* -1: not in the ring */
    int win[HR_AGENT_MAX_K];   /* layers of its window in round r < plan.k (0: none) */
    int first[HR_AGENT_MAX_K]; /* the first of them */
    int gpu_layers;            /* of each window, at most this many on its GPU */
    double pred_ms_round;      /* ms per round, predicted; 0: no prediction */
    double meas_ms_round;      /* ms per round, measured (EMA); 0: none yet */
    double resident;           /* fraction of its windows resident */
    uint64_t tokens;
    bool has_profile;                  /* the planner had its profile */
    char left_out[HR_STATUS_TEXT_LEN]; /* why it has no layers, "" when it has */
    hr_status_gpu gpu;
    hr_status_link link;
    hr_status_disk disk;
    /* model bytes it fetches from the head (no model file there); NAN: it has the
     * file, or unknown: verified of wanted, received in all */
    double fetch_done_bytes, fetch_total_bytes, fetch_wire_bytes;
    double rate_scale;      /* the profile's CPU times x this when planning */
    double meas_pred_ratio; /* last measured / predicted ms per round, 0: none */
} hr_status_dev;

/* The plan in use and what the scheduler predicted for it. */
typedef struct {
    uint32_t id;
    int k, n_layer;  /* rounds; layers (a round covers n_layer / k of them) */
    bool ready;      /* every device ready on it */
    bool infeasible; /* error says no plan is possible (plan_error) */
    char error[HR_ERR_LEN];
    char source[HR_STATUS_TEXT_LEN]; /* how it was made (forced, scheduler, even split) */
    bool wire_f16;                   /* hidden states on the wire: f16, else f32 */
    int prefetch;
    int kv_slots, kv_slot_ctx; /* requests at once; positions each */
    int pred_n_past;           /* positions attended in the decode prediction */
    double pred_ms_token, pred_compute_ms_token, pred_disk_exposed_ms_token; /* NAN: none */
    /* the plan's noise margin (relative; NAN: none) and, where a simpler
     * plan was taken inside it, the fastest plan's prediction (NAN: none) */
    double pred_noise, pred_fastest_ms_token;
    int pred_fastest_k, pred_fastest_active;
    /* pred_*: the cost model's figures for a plan it did not choose (windows
     * forced by --windows, an even split), not the scheduler's own choice */
    bool pred_evaluated;
    double layer_read_bytes; /* weight bytes a token reads per layer (mean); NAN: unknown */
} hr_status_plan;

/* Adaptive re-plans (measured against predicted rounds). */
typedef struct {
    int replans, rescaled;
    bool pending;
    char last[HR_STATUS_TEXT_LEN]; /* the last decision and why */
    double last_age_s;             /* -1: none yet */
    uint32_t from_plan, to_plan;
    double threshold, window_s, holdoff_s;
} hr_status_adapt;

/* The HTTP API's counters (/v1/cluster only). */
typedef struct {
    bool present; /* false: no "api" object */
    char model[128];
    int n_ctx;
    hr_service_stats svc;
} hr_status_api;

typedef struct {
    char head[HR_MSG_NAME_LEN];
    int version; /* HR_RING_VERSION */
    hr_status_plan plan;
    bool secure;
    char pubkey[HR_RING_KEY_LEN]; /* "" when insecure */
    uint64_t auth_refused;
    uint64_t recoveries; /* requests continued after a lost device */
    hr_status_adapt adapt;
    int n_devices;
    hr_status_dev devices[HR_AGENT_MAX_DEV]; /* [0]: the head */
    hr_status_api api;
} hr_status;

/* A device row with every figure unknown (NAN), not in the ring. */
hr_status_dev hr_status_dev_default(void);

/* Storage reads per token, measured, from which a device counts as streaming
 * its weights every token: a quarter of the weight bytes a token reads per
 * layer (the plan's layer_read_bytes; 1 MiB when unknown), and never less
 * than HR_STATUS_OVERLOAD_MIN_BYTES. Fully resident devices read less: the
 * pages of other files, and what faulted in after the warm-up, spread over
 * the tokens since (~1.5 MiB per token on the 1.1B model's 26 MiB layers). */
#define HR_STATUS_OVERLOAD_MIN_BYTES (64.0 * 1024.0)
double hr_status_overload_bytes(const hr_status_plan *p);

/* Whether device row d of plan p is overloaded on measured evidence: it has
 * windows, has computed tokens, and its measured storage reads per token on
 * the plan in use are at least hr_status_overload_bytes(p). The plan's
 * prediction (pred_overloaded) is not evidence: before its first token a
 * device is never overloaded. This is the document's "overloaded".
 * Reentrant. */
bool hr_status_overloaded(const hr_status_plan *p, const hr_status_dev *d);

/* Fills *out from head a's state under its locks (dev_mu, the statistics'
 * lock): a snapshot. api is left absent. HR_EINVAL when a is not a head.
 * Thread-safe. */
int hr_head_status(hr_agent *a, hr_status *out);

/* The status document of st (borrowed) as compact JSON text: malloc'ed,
 * the caller frees; NULL on OOM. Reentrant. */
char *hr_status_json(const hr_status *st);

#endif
