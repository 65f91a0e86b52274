/* agent.h - the hearth agent daemon and the head's generation API.
 *
 * Every machine runs one agent. An agent started without a head address is
 * a head: workers join it (or it invites the agents listed in peers), send
 * their profile and model fingerprint, receive the plan (ring order, k,
 * window sizes), map their layers and report ready. The head embeds tokens,
 * runs its own windows, drives hidden states around the ring k times per
 * token, applies the output head, samples and streams tokens.
 *
 * Security (unless insecure): every socket runs CURVE with this agent's key
 * pair; only trusted keys (and ring members the head vouches for) get past
 * the ZAP handler, see ring.h. A lost device (silent for hb_timeout_ms,
 * restarted or gone) makes the head re-plan with the rest and replay the
 * in-flight request (hr_head_generate).
 *
 * Threads: hr_agent_run() runs the control loop on the calling thread; a
 * worker also runs a data thread (the ring), a head the request service
 * thread (service.h) that runs `hearth prompt` and HTTP requests in order.
 * hr_agent_stop() is thread-safe. hr_head_generate() and
 * hr_head_logits() are thread-safe (one generation at a time; a second
 * caller waits) and may be called from any thread while hr_agent_run()
 * runs, e.g. from an HTTP server. */
#ifndef HR_AGENT_AGENT_H
#define HR_AGENT_AGENT_H

#include "common/error.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HR_AGENT_MAX_DEV 16
#define HR_AGENT_MAX_K 16
#define HR_AGENT_MAX_PARALLEL 64    /* requests in flight at once (KV slots) */
#define HR_AGENT_PARALLEL_DEFAULT 4 /* when the KV of that many fits (hr_agent_params) */
#define HR_AGENT_SLOT_CTX_MIN 512   /* --ctx not given: a KV slot is not cut below this */

typedef struct {
    const char *model_path; /* GGUF file (every device with one has the same); NULL on a
                               worker: fetched from the head (cache_dir) */
    const char *listen;     /* control "host:port" (data on port + 1); port 0 = any */
    const char *head;       /* join this head's control "host:port"; NULL = be a head */
    const char *peers;      /* head: invite these agents, "host:port,host:port" */
    const char *name;       /* device name (default: hostname:port) */
    double mem_limit_gib;   /* caps the memory reported in the profile; 0 = none */
    int n_threads;          /* compute threads; 0 = every online core (the default) */
    int n_ctx;              /* head: KV positions planned (0 = min(train, 4096)) */
    int n_batch;            /* head: prompt tokens per ring pass (default 64) */
    int n_parallel;         /* head: requests generating at once, each in its own KV slot on
                               every device, travelling the ring in micro-batches (0 = chosen
                               from memory: HR_AGENT_PARALLEL_DEFAULT where the KV fits) */
    int ring_batches;       /* head: micro-batches in flight around the ring (0 = one per
                               ring device) */
    int prefill_depth;      /* head: prompt chunks (n_batch tokens) of one request on the ring
                               at once, so that device 2 computes chunk 1 while device 1
                               computes chunk 2 (0 = ring devices x k; 1 = one at a time) */
    int expect;             /* head: workers to wait for before serving (0 = peers given) */
    int k;                  /* head: force k rounds (0 = scheduler) */
    const char *windows;    /* head: force window sizes per ring position, "2,1,1" (every
                               round) or "3,2,2/2,3,2" (rounds of their own) */
    int wire_dtype;         /* head: HR_RING_F32 (default, exact) or HR_RING_F16 */
    const char *gpu;        /* Vulkan device (gpu/vk.h hr_vk_pick: N, auto, any, none); NULL =
                               $HR_GPU, else auto (a real GPU, never a software one) */
    int gpu_layers;         /* -1 (default): the plan's GPU layers per window; N >= 0: this
                               many of each window's first layers on the GPU instead */
    bool prefetch;          /* madvise(WILLNEED) the next window after each window */
    int release;            /* release finished windows: -1 plan's overloaded devices, 0, 1 */
    bool profile;           /* measure a quick device profile to send (cached) */
    int hb_interval_ms;     /* heartbeat period (default 250) */
    int hb_timeout_ms;      /* silence after which a device is lost (default 2000) */
    int data_timeout_ms;    /* longest wait for a hidden state (default 60000) */
    int recover_ms;         /* head: longest wait for a new plan after a device is lost
                               (default 30000) */
    /* security: CURVE on every socket unless insecure (see ring.h) */
    const char *key_dir;  /* key folder; NULL = $HEARTH_KEY_DIR or ~/.config/hearth */
    const char *head_key; /* worker: the head's public key or trusted name (default
                             the trusted peer named "head", else this agent's own key) */
    const char *join;     /* worker: a head's join token (first pairing: the head trusts
                             our key, we trust the head's as "head") */
    bool insecure;        /* plaintext, anyone may connect: benchmarks only */
    /* send this device profile (JSON: a profile document or a device) instead of
     * measuring; NULL = measure */
    const char *profile_file;
    /* discovery (ring/beacon.h): a head beacons its cluster name, control
     * endpoint and key fingerprint on the LAN unless no_discovery; a worker
     * with discover set (and no head) joins the one head it hears whose key
     * it trusts (named by cluster when several) */
    bool discover;       /* worker: find the head by its beacon */
    bool no_discovery;   /* head: send no beacon */
    const char *cluster; /* head: the name beaconed; worker: the head to join (NULL any) */
    int discovery_port;  /* UDP port of beacons (0 = HR_BEACON_PORT) */
    /* a worker without model_path fetches what its plans need from the head
     * into cache_dir (NULL = $HEARTH_CACHE_DIR or ~/.cache/hearth), keeping at
     * most cache_gb GiB there (0 = no limit) */
    const char *cache_dir;
    double cache_gb;
} hr_agent_params;

hr_agent_params hr_agent_params_default(void);

typedef struct hr_agent hr_agent;

/* Opens the model, binds the sockets. Returns 0 or HR_E* with err. */
int hr_agent_create(hr_agent **out, const hr_agent_params *p, char err[HR_ERR_LEN]);
/* Control loop until hr_agent_stop() (returns 0) or a fatal refusal by the
 * head (HR_EDENIED, HR_EUNSUPPORTED; err says why). */
int hr_agent_run(hr_agent *a, char err[HR_ERR_LEN]);
void hr_agent_stop(hr_agent *a); /* thread-safe */
/* After hr_agent_run returned. NULL is a no-op. */
void hr_agent_destroy(hr_agent *a);
const char *hr_agent_endpoint(const hr_agent *a);      /* bound control endpoint */
const char *hr_agent_data_endpoint(const hr_agent *a); /* bound data endpoint */
bool hr_agent_is_head(const hr_agent *a);
/* Head: the join token new agents pair with ("" when insecure). */
const char *hr_agent_join_token(const hr_agent *a);
const char *hr_agent_name(const hr_agent *a); /* --name, else host:port */

/* ---- head API ---- */

/* Waits until the ring is planned with at least n_workers workers and every
 * device reported ready. HR_ETIMEDOUT after timeout_ms. Thread-safe. */
int hr_head_wait_ready(hr_agent *a, int n_workers, int timeout_ms, char err[HR_ERR_LEN]);
const hr_tokenizer *hr_head_tokenizer(const hr_agent *a);
int hr_head_n_vocab(const hr_agent *a);

/* Called per generated token (the end-of-generation token too, after which
 * generation stops); piece holds its text (may be empty). Return non-zero
 * to stop. */
typedef int (*hr_head_token_fn)(void *ud, int32_t id, const char *piece, int len);

typedef struct {
    int n_prompt, n_gen;
    int n_cached;           /* prompt tokens whose KV an earlier request left (not computed) */
    double prompt_s, gen_s; /* wall time of prefill / generation, s */
} hr_head_stats;

/* Prefills ids[n_ids] around the ring in batches, then samples up to
 * max_tokens tokens with sp, calling on_token for each. cancel (may be NULL)
 * is polled; setting it stops every device (HR_ECANCELED). When a device is
 * lost mid-request the head waits for a plan over the remaining devices,
 * replays the request's token history (same batches, so the same numbers)
 * and continues with the same sampler state; HR_EINFEASIBLE (or HR_ENET)
 * naming the device when no plan is possible. A context longer than the
 * plan's KV budget is refused up front (HR_ERANGE). Thread-safe. */
int hr_head_generate(hr_agent *a, const int32_t *ids, int n_ids, const hr_sampler_params *sp,
                     int max_tokens, hr_head_token_fn on_token, void *ud, const atomic_int *cancel,
                     hr_head_stats *stats, char err[HR_ERR_LEN]);
/* Teacher-forced logits for every position: logits [n][n_vocab]. */
int hr_head_logits(hr_agent *a, const int32_t *ids, int n, float *logits, char err[HR_ERR_LEN]);
/* Cluster status as JSON: hr_status_json of hr_head_status's snapshot
 * (agent/status.h); malloc'ed, caller frees; NULL on OOM or not a head.
 * Thread-safe. */
char *hr_head_status_json(hr_agent *a);

#endif
