/* profiler.h - device, model and link profiles, and the cost model that turns
 * them into a predicted time for one decode token through a window of layers.
 *
 * Device profile: measured with hearth's own kernels (hr_matmul per weight
 * type at n_tok = 1 and 32, hr_attention, the element-wise ops), memory
 * bandwidth, KV-cache copy speed, disk reads of the model file itself with
 * the page cache bypassed (O_DIRECT) or evicted, memory and cgroup limits
 * from /proc and /sys, topology from hwloc, OS, GPUs. Results are cached on
 * disk so an unchanged machine is not re-measured on every start.
 *
 * Model profile: per layer the weight bytes, parameters and FLOPs per type,
 * hr_matmul calls, element-wise work; embedding and output sizes, KV bytes
 * per token and hidden-state bytes per hop.
 *
 * Link profile: round-trip time and throughput to a peer over ZeroMQ with
 * hidden-state-sized messages, against the echo responder defined here.
 *
 * Units are in the field names: _bytes, _gbs (1e9 B/s), _mbs (1e6 B/s),
 * _gflops (1e9 FLOP/s), _ms, _us, _ns. A measurement that could not be made
 * is -1 (integers) or < 0 (doubles), printed as "unknown" and written to
 * JSON as null. Missing /proc or /sys entries degrade to unknown with a
 * warning; they never fail a profile.
 *
 * The JSON schema (HR_PROF_SCHEMA, version HR_PROF_VERSION) is documented
 * in profiler/SCHEMA.md; hr_prof_doc_to_json / hr_prof_doc_parse are the
 * writer and the parser the scheduler uses.
 *
 * Thread-safety: measuring functions use their own thread pools and must not
 * run concurrently with each other (they would measure each other); the
 * JSON, model-profile and cost functions are reentrant. */
#ifndef HR_PROFILER_PROFILER_H
#define HR_PROFILER_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "gpu/vk.h"
#include "mmap/gguf.h"
#include "mmap/stream.h"
#include "model/model.h"
#include "ring/ring.h"
#include "sched/sched.h"

#define HR_PROF_SCHEMA "hearth.profile"
#define HR_PROF_VERSION 1
#define HR_PROF_MAX_TYPES 8   /* weight types measured per device / used per layer */
#define HR_PROF_MAX_THREADS 4 /* thread counts measured */
#define HR_PROF_MAX_NUMA 16
#define HR_PROF_MAX_GPUS 8
#define HR_PROF_MAX_LINKS 16
#define HR_PROF_MAX_RATES (HR_PROF_MAX_TYPES * HR_PROF_MAX_THREADS)
/* Environment variable naming the cache folder (wins over XDG_CACHE_HOME). */
#define HR_PROF_CACHE_ENV "HEARTH_CACHE_DIR"

/* ---- device profile ---- */

typedef struct {
    const char *model_path;       /* file whose reads give the disk numbers (NULL: no disk test) */
    int types[HR_PROF_MAX_TYPES]; /* weight types to measure (hr_type ids) */
    int n_types;                  /* 0: q4_0, q4_k, q6_k, q8_0 */
    int threads[HR_PROF_MAX_THREADS]; /* thread counts to measure */
    int n_threads;                    /* 0: 1, physical cores, all PUs (deduplicated) */
    int64_t row_len;                  /* n_in of most test matrices: the model's n_embd
                                         (0: 4096; rounded up to 256) */
    int64_t ffn_len;                  /* n_in of the long-row test: the model's n_ff
                                         (0: 2.75 x row_len; rounded up to 256) */
    bool quick;                       /* fewer repetitions, smaller buffers: under 2 s */
    bool use_cache;                   /* read/write the cache (default true) */
    bool force;                       /* measure even on a cache hit (and rewrite it) */
    bool cache_busy;       /* cache a profile measured on a busy machine too (default false: over a
                              quarter of the repetitions waited for a CPU, or the load average was
                              above the PUs; such a profile is returned, not cached, and a cached
                              one is measured again) */
    const char *cache_dir; /* NULL: $HEARTH_CACHE_DIR, $XDG_CACHE_HOME/hearth,
                              ~/.cache/hearth */
    const char *sysroot;   /* prefix for /proc and /sys reads (tests); NULL or "" = real */
    const char *gpu;       /* Vulkan device to measure (gpu/vk.h hr_vk_pick: N, auto, any,
                              none); NULL = $HR_GPU, else auto (never a software device) */
} hr_prof_params;

hr_prof_params hr_prof_params_default(void);

/* Matrix-vector (decode) and matrix-matrix (prefill) rates of hr_matmul for
 * one weight type at one thread count. A call at n_tok = 1 over M matrices
 * with R rows and B weight bytes in all (rows streamed from DRAM) is
 * predicted to take
 *   matvec_call_us + M x matvec_mat_us + R x matvec_row_ns + B / matvec_gbs. */
typedef struct {
    int type; /* hr_type */
    int n_threads;
    double matvec_gbs;     /* weight bytes streamed per second, GB/s */
    double matvec_call_us; /* per call: activation quantization, dispatch, us */
    double matvec_mat_us;  /* per matrix in the call (a new stream), us */
    double matvec_row_ns;  /* per output row (dot set-up, reduction, store), ns */
    double matmat_gflops;  /* n_tok = 32, 2 FLOP per weight per token, GFLOP/s */
} hr_prof_rate;

/* What a CPU quota does to sustained work at one thread count: decode
 * sweeps run back to back for window_s (several quota periods) take
 * `factor` times the time of the repetitions the rates come from (which
 * are short enough to run between throttlings). Measured only when the
 * cgroup has a CPU quota; the cost model multiplies CPU times by it. */
typedef struct {
    int n_threads;
    double factor;   /* >= 1 */
    double window_s; /* wall time measured over */
} hr_prof_sustain;

/* A Vulkan device (gpu/vk.h). Listed with its memory for every device the
 * loader sees; the rates are measured on the chosen one only (n_rates 0
 * elsewhere), with hearth's own kernels: one matmul call at n_tok = 1 over a
 * matrix of B weight bytes is predicted to take matvec_call_us + B /
 * matvec_gbs, a window of GPU layers adds submit_us and two hidden-state
 * copies per token. */
typedef struct {
    int type;              /* hr_type */
    double matvec_gbs;     /* weight bytes streamed per second at n_tok = 1, GB/s */
    double matvec_call_us; /* per matmul: activation quantization + dispatch, us */
    double matmat_gflops;  /* n_tok = 32, 2 FLOP per weight per token, GFLOP/s */
} hr_prof_gpu_rate;

#define HR_PROF_MAX_VK 4
typedef struct {
    int index; /* Vulkan device number (hearth info, --gpu N) */
    char name[128];
    char kind[16]; /* "discrete", "integrated", "virtual", "cpu", "other" */
    int n_heaps;
    int64_t heap_bytes[HR_VK_MAX_HEAPS];
    int64_t vram_bytes;      /* largest device-local heap, bytes */
    double h2d_gbs, d2h_gbs; /* copies host -> device / device -> host (staged), GB/s */
    double submit_us;        /* one submitted and waited-for command buffer, us */
    int n_rates;
    hr_prof_gpu_rate rates[HR_PROF_MAX_TYPES];
} hr_prof_gpu;

/* Per-thread-count costs of the non-matmul work of a layer. hr_attention
 * for one token is predicted to take attn_call_us + n_head x n_pos x
 * (attn_pos_ns + attn_dim_ns x head_dim). */
typedef struct {
    int n_threads;
    double attn_call_us; /* fixed cost of one hr_attention call (dispatch, softmax set-up), us */
    double attn_pos_ns;  /* per head and attended position, ns */
    double attn_dim_ns;  /* per head, position and head_dim element, ns */
} hr_prof_opcost;

/* Single-threaded element-wise ops (run on the calling thread), ns per
 * element. */
typedef struct {
    double norm_ns;   /* hr_rmsnorm */
    double add_ns;    /* hr_add */
    double rope_ns;   /* hr_rope, per rotated element (heads x n_rot) */
    double swiglu_ns; /* hr_swiglu */
    double f16_ns;    /* fp32 -> fp16 KV-cache store */
} hr_prof_eltwise;

/* Element counts of those ops per layer and token. */
typedef struct {
    int64_t norm, add, rope, swiglu, f16;
} hr_prof_elems;

typedef struct {
    int os_index;
    int n_cores, n_pus;
    int64_t mem_bytes; /* local memory of the node, bytes */
} hr_prof_numa;

typedef struct {
    char source[16];                              /* "hwloc", "sysfs" or "unknown" */
    int n_packages, n_numa, n_cores, n_pus, n_l3; /* -1 unknown */
    int smt;                                      /* PUs per core; -1 unknown */
    int64_t l3_bytes;                             /* one L3 domain, bytes; -1 unknown */
    int n_numa_listed;                            /* entries in numa[] */
    hr_prof_numa numa[HR_PROF_MAX_NUMA];
} hr_prof_topo;

typedef struct {
    int64_t total_bytes, available_bytes, free_bytes; /* /proc/meminfo; -1 unknown */
    int64_t cached_bytes;                             /* page cache (Cached) */
    int64_t file_lru_bytes;                           /* Active(file) + Inactive(file) */
    int64_t swap_total_bytes, swap_free_bytes;
    int swappiness; /* /proc/sys/vm/swappiness; -1 unknown */
    char lru[16];   /* page-cache reclaim: "classic" two-list LRU or "mglru" */
    int cg_version; /* memory cgroup: 0 none found, 1 or 2 */
    char cg_path[256];
    int64_t cg_limit_bytes; /* effective limit (smallest over ancestors); -1 none/unknown */
    int64_t cg_usage_bytes; /* -1 unknown */
    int64_t cg_file_bytes;  /* page cache charged to the cgroup; -1 unknown */
    /* What weights can keep in page cache: available, bounded by the cgroup
     * limit minus the cgroup's non-file usage. Bytes; -1 unknown. */
    int64_t weights_avail_bytes;
} hr_prof_mem;

typedef struct {
    char path[256];        /* file read */
    char mount[256];       /* mount point holding it */
    char fs_type[32];      /* "ext4", "tmpfs", ... */
    char device[64];       /* "vda", "nvme0n1" or "" */
    int rotational;        /* 1 spinning, 0 not, -1 unknown */
    int read_ahead_kb;     /* -1 unknown */
    char method[16];       /* "direct" (O_DIRECT), "evicted" (fadvise), "cached" or "none" */
    double seq_mbs;        /* 1 MiB sequential reads, MB/s */
    double rand_mbs;       /* 4 KiB random reads at queue depth 1, MB/s */
    double rand_iops;      /* the same as reads per second */
    double mmap_mbs;       /* faulting an evicted range of a read-only mapping (what a
                              non-resident window costs), MB/s */
    double read_cpu_ms_mb; /* CPU time those faults took, ms per MB (a CPU quota charges it
                              to the device); -1 unknown */
} hr_prof_disk;

typedef struct {
    char sysname[32], release[96], machine[32];
    char name[96]; /* PRETTY_NAME from /etc/os-release */
    char hostname[64];
    char cpu_model[96]; /* /proc/cpuinfo "model name" */
    char isa[16];       /* kernels chosen: "scalar", "avx2", "avx512" */
} hr_prof_os;

typedef struct {
    int version;       /* HR_PROF_VERSION */
    double created;    /* unix time, s */
    double duration_s; /* measuring time (of the original run when from the cache) */
    bool quick;
    bool from_cache;
    char fingerprint[20]; /* hex hash of what invalidates the cache */
    double load_1m;       /* /proc/loadavg when measured: > PUs means contended numbers */
    int reps_total;       /* timed repetitions run */
    int reps_contended;   /* of which set aside: our threads waited for a CPU */
    hr_prof_os os;
    hr_prof_topo topo;
    hr_prof_mem mem;
    hr_prof_disk disk;
    int n_gpus;
    char gpus[HR_PROF_MAX_GPUS][64]; /* "nvidia 10de:2330 card0"; reported, not used */
    int n_vk;                        /* Vulkan devices listed in vk[] */
    hr_prof_gpu vk[HR_PROF_MAX_VK];
    int vk_chosen; /* entry of vk[] measured and planned for (hr_prof_params.gpu); -1 none */
    double cpu_quota_cores; /* cgroup CPU quota / period, smallest over ancestors; -1 none */
    double cpu_period_ms;   /* that quota's period, ms; -1 none */
    int n_sustain;          /* measured under a quota only */
    hr_prof_sustain sustain[HR_PROF_MAX_THREADS];
    /* engine probe (hr_prof_engine_probe): real decode steps of layers
     * [0, engine_layers) against the rates' prediction; -1 / 0 = not run */
    int engine_layers, engine_threads;
    double engine_ms;       /* measured ms per decode step of those layers */
    double engine_round_ms; /* older probes under a CPU quota: ms a burst of steps added to
                               engine_ms per step; read from older caches, else 0 */
    double engine_burst_ms; /* under a CPU quota: unthrottled ms per step, the median of single
                               steps after an idle spell of a period at least (their CPU time
                               where the quota held them back); engine_ms: back to back; else 0 */
    double engine_pred_ms;  /* the rates' prediction, without quota scaling */
    double engine_factor;   /* engine_ms / engine_pred_ms */
    double engine_spread;   /* (slowest - fastest) / median of the attempts' ms per step; -1 none */
    int engine_attempts;    /* attempts run (the median's stands); 0 unknown */
    int engine_starts;      /* starts pooled (hr_prof_engine_history): 1 = this one, 0 = unknown */
    double engine_window_s;
    double membw_1t_gbs;  /* streaming read, one thread, GB/s */
    double membw_all_gbs; /* streaming read, membw_threads threads, GB/s */
    int membw_threads;
    double kv_copy_gbs; /* memcpy of KV-cache-sized blocks, bytes copied per s, GB/s */
    hr_prof_eltwise eltwise;
    int64_t row_len; /* n_in of the matrices measured */
    int64_t ffn_len; /* n_in of the long-row matrices measured */
    int n_opcosts;
    hr_prof_opcost opcosts[HR_PROF_MAX_THREADS];
    int n_rates;
    hr_prof_rate rates[HR_PROF_MAX_RATES];
} hr_prof_device;

/* Measures this machine (or reads the cache when its fingerprint and the
 * request match and free memory has not changed materially; memory and
 * cgroup numbers are always re-read). Fails only on bad parameters or when
 * no CPU rate at all could be measured. */
int hr_prof_device_measure(hr_prof_device *out, const hr_prof_params *p, char err[HR_ERR_LEN]);

/* Memory sizes and the memory cgroup's limit and usage (sysroot NULL: this
 * machine), including weights_avail_bytes; no timing. */
void hr_prof_read_mem(hr_prof_mem *m, const char *sysroot);
/* The cheap part only (OS, topology, memory, cgroup, GPUs): no timing. */
void hr_prof_device_sysinfo(hr_prof_device *out, const char *sysroot);

/* The rate for (type, n_threads): exact, else the same type at the nearest
 * thread count, else NULL. */
const hr_prof_rate *hr_prof_device_rate(const hr_prof_device *d, int type, int n_threads);
const hr_prof_opcost *hr_prof_device_opcost(const hr_prof_device *d, int n_threads);
/* The measured thread count with the best matvec rate for these types (all
 * listed types summed equally); 1 if nothing was measured. */
/* What the cost model multiplies a device's CPU times by at n_threads:
 * the engine probe's factor when it ran at that thread count; else, under
 * a CPU quota, the sustained factor of the nearest measured thread count
 * (assumed nt / quota cores, at least 1, when none was measured); else 1. */
double hr_prof_device_sustain(const hr_prof_device *d, int n_threads);
int hr_prof_device_best_threads(const hr_prof_device *d, const int *types, int n_types);

/* The chosen Vulkan device of d with measured rates, or NULL. */
const hr_prof_gpu *hr_prof_device_gpu(const hr_prof_device *d);
/* Measures rates for types[n_types] (rows of row_len values), copy
 * bandwidth and submission cost on Vulkan device g->index; g's listing
 * fields are kept. */
int hr_prof_gpu_measure(hr_prof_gpu *g, const int *types, int n_types, int64_t row_len, bool quick,
                        char err[HR_ERR_LEN]);

/* Cache file path for parameters p (what hr_prof_device_measure uses). */
int hr_prof_cache_dir(const hr_prof_params *p, char *buf, size_t cap);

/* ---- model profile ---- */

typedef struct {
    int type;        /* hr_type */
    uint64_t bytes;  /* weight bytes read per decode token (routed experts: the share a token's
                        n_expert_used of n_expert read) */
    uint64_t params; /* weights a token multiplies (one FLOP pair each) */
    uint64_t rows;   /* output rows (dot products per token) */
    int n_mats;      /* matrices */
} hr_prof_tbytes;

typedef struct {
    uint64_t bytes; /* weight bytes of the layer (matrices + norms, every expert): what
                       holding or streaming it takes; a dense layer's token reads them all */
    double flops;   /* matmul FLOPs per token: 2 x params (experts: the routed share) */
    int n_calls;    /* hr_matmul calls per token (weights grouped by activation format) */
    int n_types;
    hr_prof_tbytes types[HR_PROF_MAX_TYPES];
} hr_prof_layer;

typedef struct {
    char name[96], arch[32];
    uint64_t file_bytes;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    bool tied_output;
    int embd_type;               /* token_embd type */
    uint64_t embd_bytes;         /* whole embedding table */
    uint64_t embd_row_bytes;     /* read per token (input layer) */
    hr_prof_layer output;        /* output norm + LM head, one call */
    uint64_t kv_bytes_per_token; /* per layer: K + V, F16 */
    uint64_t hidden_bytes;       /* one hidden state on the wire (n_embd x f16) */
    int n_expert, n_expert_used; /* routed experts per layer and per token (0: dense) */
    uint64_t expert_bytes;       /* of all layers' bytes, those of routed experts */
    hr_prof_elems elems;         /* element-wise work per layer and token */
    int n_layers_listed;         /* entries in layers (= n_layer after a successful build) */
    hr_prof_layer *layers;       /* [n_layer], owned: release with hr_prof_model_clear */
} hr_prof_model;

/* Builds the profile of a loaded model (g may be NULL: no name, file size). */
int hr_prof_model_build(hr_prof_model *out, const hr_model *m, const hr_gguf *g,
                        char err[HR_ERR_LEN]);
void hr_prof_model_clear(hr_prof_model *pm); /* frees layers; safe on a zeroed struct */
/* Deep copy (dst is overwritten, not cleared first). */
int hr_prof_model_copy(hr_prof_model *dst, const hr_prof_model *src);
/* Weight bytes of layers [b, e) (+ input row and/or output head). */
uint64_t hr_prof_model_window_bytes(const hr_prof_model *pm, int b, int e, bool input, bool output);
/* Distinct matmul weight types of the model (layers + output), at most max. */
int hr_prof_model_types(const hr_prof_model *pm, int *types, int max);
/* Predicted ms of one decode token through layers [b, e) of pm all on the
 * GPU g (window overheads included); < 0 when a weight type of those layers
 * has no measured rate. */
double hr_prof_gpu_window_ms(const hr_prof_gpu *g, const hr_prof_model *pm, int b, int e);

/* Times real decode steps of the first layers of m (two at least, one
 * where memory is short, more where the cache would hold two) for about
 * window_s (at least a few steps, after two that fault the weights in)
 * with n_threads threads, back to back, and stores them with the rates' own
 * prediction for the same layers in d->engine_* (d needs its rates). The
 * cost model then takes engine_factor instead of the quota's sustained
 * factor. Under a CPU quota single steps after idle spells of a period come
 * first (a ring's pattern), their median in engine_burst_ms. Failures
 * leave engine_factor at -1. */
int hr_prof_engine_probe(hr_prof_device *d, const hr_model *m, const hr_prof_model *pm,
                         int n_threads, double window_s, char err[HR_ERR_LEN]);
/* Pools d's fresh probe (hr_prof_engine_probe over pm) with the device's
 * earlier starts: each result goes to a file in the profile cache folder
 * (p's, keyed by the device fingerprint, the probed layers' shapes and
 * types, threads and quota), which keeps the last HR_PROBE_HISTORY of at
 * most HR_PROBE_HIST_MAX_AGE_S; d's engine figures become their median
 * (engine_ms, engine_round_ms, engine_factor against this start's rates),
 * engine_spread the larger of this start's and the starts' range over the
 * median, engine_starts how many. Without a probe result or a cache
 * folder, d is left as it is (engine_starts 1 or 0). Returns
 * engine_starts. */
#define HR_PROBE_HISTORY 5
#define HR_PROBE_HIST_MAX_AGE_S (7 * 86400.0)
int hr_prof_engine_history(hr_prof_device *d, const hr_prof_model *pm, const hr_prof_params *p);
/* What d's CPU quota does to a ring's rounds at n_threads threads, from its
 * engine probe: *free (<= 1) times its sustained CPU times are its
 * unthrottled ones (engine_burst_ms over engine_ms); a burst of c
 * unthrottled ms after an idle spell that held a period's start takes
 * max(c, *slope * c - *save_ms) (the cost model's Q, hr_sched_device's
 * throttle_*), with *slope the sustained over the unthrottled step and
 * *save_ms = a (slope - 1), a = quota cores / threads * period: the burst
 * starts with the period's whole share, at a random phase (with slope =
 * period / a that is the mean over the phase, within a's fraction of a
 * period either way). *wait_ms = (period - a)^2 / (2 period): what a round
 * that reaches the device at a random phase with the period's share spent
 * waits for the next period, on average (a gap between its rounds shorter
 * than a period; the cost model weighs it by that chance). Returns false, with *free 1
 * and the others 0, without a quota that can throttle n_threads, a probe
 * at them under it, or a throttling it measured (slope below 1.05). */
bool hr_prof_throttle(const hr_prof_device *d, int n_threads, double *free, double *slope,
                      double *save_ms, double *wait_ms);
/* The probe's window for d: ten quota periods, 0.3 to 2 s. */
double hr_prof_probe_window_s(const hr_prof_device *d);

/* ---- link profile ---- */

typedef struct {
    char endpoint[256];
    int msg_bytes; /* hidden-state-sized payload probed, bytes */
    int n_samples; /* round trips timed */
    double rtt_us; /* median round trip of a msg_bytes message, us, the messages spaced so
                      that the link is idle before each (as between a ring's hops) */
    double rtt_min_us;
    double bw_mbs;   /* one-way throughput of back-to-back 1 MiB messages, MB/s */
    int burst_bytes; /* bytes of each throughput message (0: not measured) */
} hr_prof_link;

/* Times n_samples echo round trips of msg_bytes against the responder at
 * endpoint and a burst for throughput. zctx: a zmq context to use, or NULL
 * for a private one. Fails with HR_ETIMEDOUT when nothing answers within
 * timeout_ms per message. Thread-safe (own socket). */
int hr_prof_link_measure(hr_prof_link *out, void *zctx, const char *endpoint, int msg_bytes,
                         int n_samples, int timeout_ms, char err[HR_ERR_LEN]);

/* The probe's parameters: endpoint (borrowed); msg_bytes per timed round
 * trip (a hidden state); n_samples round trips; timeout_ms per answer;
 * burst_bytes per throughput message (0: 1 MiB) and burst_s, the time the
 * burst aims at (a link slower than one message per burst_s is measured on
 * that one message). keys / server_pub: probe as a CURVE client of
 * server_pub (the data plane's security), NULL: plain. */
typedef struct {
    const char *endpoint;
    int msg_bytes, n_samples, timeout_ms, burst_bytes;
    double burst_s;
    const hr_ring_keys *keys;
    const char *server_pub;
} hr_prof_link_params;
hr_prof_link_params hr_prof_link_params_default(void);
/* hr_prof_link_measure with every parameter. Thread-safe (own socket). */
int hr_prof_link_measure_ex(hr_prof_link *out, void *zctx, const hr_prof_link_params *p,
                            char err[HR_ERR_LEN]);

/* Echo responder the agent hosts for peers' link probes: a ROUTER socket
 * that answers each well-formed probe (echo or short ack) and drops anything
 * else. Create binds (endpoint may be "tcp://127.0.0.1:0" for any port);
 * serve loops on the calling thread until stop; the socket moves to the
 * serving thread (create, then serve on exactly one thread). */
typedef struct hr_prof_echo hr_prof_echo;
int hr_prof_echo_create(hr_prof_echo **out, void *zctx, const char *endpoint, char err[HR_ERR_LEN]);
/* A responder that is a CURVE server with keys (keys NULL: plain). */
int hr_prof_echo_create_secure(hr_prof_echo **out, void *zctx, const char *endpoint,
                               const hr_ring_keys *keys, char err[HR_ERR_LEN]);
const char *hr_prof_echo_endpoint(const hr_prof_echo *e); /* bound address */
int hr_prof_echo_serve(hr_prof_echo *e);                  /* returns 0 after stop */
void hr_prof_echo_stop(hr_prof_echo *e);                  /* thread-safe */
uint64_t hr_prof_echo_served(const hr_prof_echo *e);      /* probes answered */
void hr_prof_echo_destroy(hr_prof_echo *e); /* after serve returned; NULL is a no-op */

/* ---- cost model ---- */

typedef struct {
    int n_threads;           /* 0: the best measured for the window's types */
    int n_past;              /* positions attended per token (context filled) */
    uint64_t resident_bytes; /* window weight bytes resident in page cache (UINT64_MAX: all) */
    bool input;              /* window includes the embedding lookup (head) */
    bool output;             /* window includes output norm + LM head */
    int n_hops;              /* hidden-state sends charged to this window per token */
} hr_prof_cost_params;

hr_prof_cost_params hr_prof_cost_params_default(void);

/* Predicted time for one decode token through layers [b, e):
 *   memory  = sum over matrices of bytes / matvec_gbs(type, threads)   (ms)
 *   compute = per layer: matmul calls x matvec_call_us (of the layer's
 *             largest type) + attn_call_us + n_head x n_past x (attn_pos_ns
 *             + attn_dim_ns x head_dim) + sum of elems x eltwise ns    (ms)
 *             (+ output norm, embedding row when input/output are set)
 *   disk    = non-resident bytes / disk mmap_mbs (seq_mbs if unknown) (ms)
 *   comm    = n_hops x (rtt_us / 2 + hidden_bytes / bw_mbs)            (ms)
 *   prefill = per prompt token: 2 x params / matmat_gflops + the per-layer
 *             attention and element-wise work                          (ms)
 * Streaming and arithmetic overlap inside hr_matmul, so "memory" holds the
 * measured matvec time of the resident bytes; "compute" is what does not
 * scale with weight bytes. Non-resident bytes are charged the disk term on
 * top of their memory term. */
typedef struct {
    int n_threads; /* used */
    double compute_ms;
    double memory_ms;
    double disk_ms;
    double comm_ms;
    double total_ms;
    double prefill_ms; /* per prompt token at the matmat rate (batches of 32) */
} hr_prof_cost;

int hr_prof_cost_window(const hr_prof_device *d, const hr_prof_model *m, const hr_prof_link *l,
                        int b, int e, const hr_prof_cost_params *p, hr_prof_cost *out,
                        char err[HR_ERR_LEN]);

/* Steady-state resident bytes when a token cycles through `cycled` bytes of
 * mapped weights with `avail` bytes of page cache: all when they fit, else
 * none (LRU evicts each page before the next pass needs it; measured on
 * this kernel, cgroup v1: a 629 MB file cycled under a 580 MB limit is
 * re-read whole every pass). */
uint64_t hr_prof_steady_resident(uint64_t cycled, int64_t avail);

/* ---- scheduler inputs ---- */

#define HR_PROF_PREFILL_BATCH 64 /* tokens per prompt batch of prefill_ms[] by default */

typedef struct {
    bool is_head;
    int n_ctx;             /* planned context: KV per layer = kv_bytes_per_token x n_ctx */
    int n_past;            /* positions attended in the decode estimate (0: n_ctx / 2) */
    int prefill_batch;     /* tokens per prompt batch for prefill_ms[] (0: HR_PROF_PREFILL_BATCH) */
    int64_t reserve_bytes; /* kept out of mem_bytes for work buffers and slack, bytes:
                              hr_prof_mem_reserve (-1: no model at hand, one mean layer +
                              64 MiB) */
} hr_prof_sched_params;

hr_prof_sched_params hr_prof_sched_params_default(void);

/* The scheduler's per-device coefficients from the profiles: decode_ms[] /
 * prefill_ms[] per layer at every measured thread count (t_layer_ms = 0, so
 * the planner picks the threads), mem_bytes from weights_avail_bytes less
 * the reserve, disk_bps from the mmap fault rate (else sequential reads),
 * rtt_ms / link_bps from `next` (the link to the next device; NULL: 0),
 * t_head_ms from the input + output layers and sampling (head only), the OS
 * from sysname, and for a chosen GPU with rates for every weight type of the
 * model vram_bytes (4/5 of its largest device-local heap) and t_layer_gpu_ms
 * (hr_prof_gpu_window_ms per layer, each charged a submission). Reentrant.
 *
 * hr_prof_to_sched_model: a model with experts gives the scheduler their
 * share of the layers' bytes and of the experts a token reads (even
 * routing), so streamed windows cost what reading by expert reads;
 * HEARTH_EXPERTS=whole in the environment plans them as dense layers
 * (whole windows streamed: the comparison the labs make). */
int hr_prof_to_sched_device(const hr_prof_device *d, const hr_prof_model *m,
                            const hr_prof_link *next, const hr_prof_sched_params *p,
                            hr_sched_device *out, char err[HR_ERR_LEN]);
int hr_prof_to_sched_model(const hr_prof_model *m, int n_ctx, hr_sched_model *out,
                           char err[HR_ERR_LEN]);

/* Link figures assumed where no link to the next device was measured: a
 * wired home LAN, 1 Gbit/s and a 0.5 ms round trip. */
#define HR_PROF_ASSUMED_LINK_BPS 125e6
#define HR_PROF_ASSUMED_RTT_MS 0.5
/* Fills rtt_ms / link_bps of d with the assumed figures where they are not
 * measured (<= 0) and marks d->link_assumed. Reentrant. */
void hr_prof_assume_link(hr_sched_device *d);

/* The read rate a streamed window gets from this disk, MB/s (<= 0 when
 * unknown): the smaller of the mmap fault rate and the sustained sequential
 * rate, since either test alone can be flattered by a throttle's burst or
 * the kernel's read-ahead. */
double hr_prof_disk_stream_mbs(const hr_prof_disk *dk);

/* ---- plan memory: one arithmetic for the planner and a device's admission ----
 *
 * The planner gives the scheduler mem_bytes = hr_prof_mem_budget(profile's
 * weights_avail_bytes, --mem-limit, layer); a device admits its part of a
 * plan iff hr_prof_mem_need(...) <= hr_prof_mem_budget(MemAvailable now,
 * --mem-limit, layer). need is the least the streaming scheme works with
 * (KV + one layer of buffer), the least any plan the scheduler makes asks of
 * the device, so a plan made from a profile is refused for memory only when
 * memory shrank since the profile. */

/* Bytes kept out of available memory besides weights and KV: the work
 * buffers of one context over the model's layers at n_ctx positions,
 * n_batch tokens and n_threads threads (hr_ctx_memory_predict; a device's
 * window contexts share one set, hr_ctx_params.share, and so does the
 * head's output-head context), the plan's hidden-state and frame buffers
 * (+ the receive frame and logits on the head), and HR_PROF_RESERVE_SLACK
 * for the rest of the runtime. The planner (with the device's JOIN thread
 * count) and the device's admission check (with its own) use it alike.
 * Reentrant. */
double hr_prof_mem_reserve(const hr_model *m, int n_ctx, int n_batch, int n_threads, bool is_head);
/* What an agent holds besides weights, KV and the plan's buffers: ZeroMQ
 * context, sockets and queued frames, malloc arenas, thread stacks, the
 * tokenizer. Measured on the 1.1B-shape model with 2 agents at k 2: anonymous
 * RSS less KV less the plan's buffers was 2-5 MiB; the rest is headroom for
 * frames queued on the data sockets. */
#define HR_PROF_RESERVE_SLACK (16.0 * 1048576.0)
/* Bytes a plan may use on a device for weights + KV: avail (bytes; < 0
 * unknown: 0) capped by limit when limit > 0, less reserve_bytes (when
 * >= 0: hr_prof_mem_reserve; < 0, with no model at hand: one layer_bytes +
 * 64 MiB); never negative. Reentrant. */
double hr_prof_mem_budget(double avail, double limit, double layer_bytes, double reserve_bytes);
/* Bytes one layer of streaming takes: a mean layer, of which with experts
 * only the always-read part and the routed share a token reads (the least
 * buffer of hr_sched_stream_split / _experts). Reentrant. */
double hr_prof_layer_slack(const hr_sched_model *m);
/* Bytes a device's part of a plan needs resident: the KV cache of all its
 * layers (every round's window together), one layer of streaming
 * (hr_prof_layer_slack: the rest may stream) and, on the head with layers,
 * the output head; 0 when it has no layers. Reentrant. */
double hr_prof_mem_need(const hr_sched_model *m, int layers, bool is_head);
/* Bytes of a device's windows (layers in all) that may stay resident with
 * budget bytes (hr_prof_mem_budget) for its part of a plan: the budget
 * less the KV of all its layers and, on the head, the output head (the
 * scheduler's mem_eff less the KV, sched.h). The runtime splits its
 * windows with it (hr_prof_stream_parts): what does not fit is
 * streamed every token. Never negative. Reentrant. */
double hr_prof_stream_room(const hr_sched_model *m, int layers, bool is_head, double budget);

/* The runtime's split of a device's n windows (parts[i].off / .len set by
 * the caller, hr_stream_window_range; len 0 for a round without layers)
 * under room bytes for weights, by the scheme the scheduler costs (sched.h
 * hr_sched_stream_split_rounds over the windows' lengths, min_buffer =
 * layer_bytes, the model's mean layer): heads of at most sc->resident bytes stay
 * (hr_stream_split_resident), the rest streams through a buffer of
 * sc->buffer bytes, sc->read_round bytes per round. Returns 0; HR_ERANGE
 * when room is below one layer (every window then streams whole through a
 * buffer of one layer: sc->buffer = layer_bytes); HR_EINVAL. Reentrant. */
int hr_prof_stream_parts(hr_stream_part *parts, int n, double room, double layer_bytes,
                         hr_sched_stream *sc);
/* Bytes a device reads from disk per token for its windows of win[r]
 * layers in rounds r < k (k <= HR_SCHED_MAX_ROUNDS) with budget bytes for
 * weights + KV, from the scheduler's figures: the reads of
 * hr_sched_stream_split_rounds(win[r] x layer_bytes, k, room, layer_bytes)
 * with room = hr_prof_stream_room(m, sum of win, is_head, budget); 0 when
 * everything stays resident or it has no layers. What the runtime's split
 * (hr_prof_stream_parts) streams, up to the windows' real lengths and
 * pages. Reentrant. */
double hr_prof_stream_read(const hr_sched_model *m, const int *win, int k, bool is_head,
                           double budget);

/* ---- documents (JSON) ---- */

typedef struct {
    int n_threads, n_past;
    int n_layer_ms;          /* entries in layer_ms */
    double *layer_ms;        /* [n_layer] resident decode ms per layer, owned */
    hr_prof_cost token;      /* whole model, single device, as profiled */
    uint64_t resident_bytes; /* assumed for `token` */
} hr_prof_prediction;

typedef struct {
    bool has_device, has_model, has_prediction;
    hr_prof_device device;
    hr_prof_model model;
    int n_links;
    hr_prof_link links[HR_PROF_MAX_LINKS];
    hr_prof_prediction prediction;
} hr_prof_doc;

/* Frees what a parsed or built doc owns (model layers, layer_ms). */
void hr_prof_doc_clear(hr_prof_doc *doc);
/* Serializes doc as JSON (indented when pretty). *out is malloc'ed. */
int hr_prof_doc_to_json(const hr_prof_doc *doc, bool pretty, char **out, char err[HR_ERR_LEN]);
/* Parses JSON written by hr_prof_doc_to_json (any version-1 document;
 * unknown keys are ignored, missing optional ones become unknown). doc is
 * zeroed first; clear it after use even on failure. */
int hr_prof_doc_parse(const char *json, size_t len, hr_prof_doc *doc, char err[HR_ERR_LEN]);
/* Device only (what the cache holds), same rules. */
int hr_prof_device_to_json(const hr_prof_device *d, char **out, char err[HR_ERR_LEN]);
int hr_prof_device_parse(const char *json, size_t len, hr_prof_device *d, char err[HR_ERR_LEN]);

#endif
