/* msg.h - the control-plane message catalogue: one table row per message
 * type (who sends it to whom, what payload it carries, how large it may be,
 * what the receiver requires of the sender) and the typed encode / decode
 * of every control payload, so the JSON of the wire lives in ring/msg.c
 * alone. ring.h's frame header check takes its length limits from here.
 *
 * Payload kinds: NONE (len 0), JSON (one UTF-8 JSON object), TEXT (UTF-8,
 * no NUL), BINARY (layout in the row's comment). Encoders build an hr_msg
 * (header + malloc'ed payload, NUL-terminated past h.len for JSON and
 * TEXT) that hr_msg_send() sends and frees; decoders
 * take a received header and its payload, check the type, the length
 * against the table and every field, and fill a plain struct (HR_EFORMAT
 * with err otherwise). All functions are reentrant and thread-safe. */
#ifndef HR_RING_MSG_H
#define HR_RING_MSG_H

#include "ring/ring.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_MSG_EP_LEN 160   /* bytes of an endpoint, with the NUL */
#define HR_MSG_MAX_SEQ 64   /* KV slots a PLAN may ask for (concurrent requests) */
#define HR_MSG_NAME_LEN 64  /* bytes of a device name, with the NUL */
#define HR_MSG_TEXT_LEN 256 /* bytes of an error or reason text, with the NUL */
#define HR_MSG_MAX_KEYS 16  /* ring member keys a PLAN vouches for */
#define HR_MSG_MAX_PIECE 512
#define HR_MSG_MAX_ROUNDS 16 /* rounds (k) a PLAN may carry */
#define HR_MSG_MAX_RING 16   /* ring members a PLAN's windows may name */
#define HR_MSG_MAX_LAYER 4096

/* Directions (bits): who may send a message to whom. */
enum {
    HR_MSG_H2W = 1 << 0,  /* head -> worker (or any agent) */
    HR_MSG_W2H = 1 << 1,  /* worker -> head */
    HR_MSG_C2H = 1 << 2,  /* client -> head */
    HR_MSG_H2C = 1 << 3,  /* head -> client */
    HR_MSG_PEER = 1 << 4, /* device -> next device (data plane) */
};

typedef enum { HR_MSG_NONE, HR_MSG_JSON, HR_MSG_TEXT, HR_MSG_BINARY } hr_msg_kind;

/* Flags: what a receiver requires before it acts on a message. */
enum {
    HR_MSG_F_KNOWN = 1 << 0,    /* sender must be a device in the head's table */
    HR_MSG_F_PAIRING = 1 << 1,  /* allowed from a join-token holder before pairing */
    HR_MSG_F_EMPTY_OK = 1 << 2, /* may also be sent empty (the head's echo or ack) */
};

typedef struct {
    const char *name;
    unsigned dir;     /* HR_MSG_H2W | ... */
    hr_msg_kind kind; /* payload */
    uint32_t max_len; /* payload bytes */
    unsigned flags;   /* HR_MSG_F_* */
} hr_msg_info;

/* The row of type, NULL for an unknown type. */
const hr_msg_info *hr_msg_info_of(int type);

/* ---- encoded messages ---- */

typedef struct {
    hr_ring_hdr h; /* type, pos -1 and len set by the encoder; req_id, plan_id by the caller */
    char *data;    /* payload of h.len bytes (malloc'ed; NULL when empty) */
} hr_msg;

/* A message without payload (WELCOME, START, CANCEL, LEAVE, STATUS_REQ,
 * the head's HEARTBEAT echo). */
hr_msg hr_msg_empty(int type, uint64_t req_id, uint32_t plan_id);
/* Sends m (ROUTER: id first) and frees its payload. Returns 0 or HR_E*. */
int hr_msg_send(void *sock, const void *id, size_t id_len, hr_msg *m, char err[HR_ERR_LEN]);
void hr_msg_clear(hr_msg *m); /* frees the payload; NULL-safe */

/* ---- JOIN: worker -> head ---- */
typedef struct {
    int version; /* HR_RING_VERSION of the sender */
    char name[HR_MSG_NAME_LEN];
    char ctrl[HR_MSG_EP_LEN], data[HR_MSG_EP_LEN]; /* its endpoints */
    uint64_t model_size, model_hash;               /* bytes, fingerprint */
    char pubkey[HR_RING_KEY_LEN];                  /* "" when insecure */
    int n_layer, threads, cores, numa;
    char os[96], kernel[96];
    int64_t mem_total, mem_avail, cg_limit; /* bytes, -1 unknown */
    double disk_mbs, disk_mmap_mbs;
    char *profile;            /* device profile JSON (encode: borrowed, may be NULL; decode:
                                 malloc'ed or NULL, freed by hr_msg_join_clear) */
    char echo[HR_MSG_EP_LEN]; /* its link probe responder, "" when it hosts none */
} hr_msg_join;
int hr_msg_join_encode(hr_msg *out, const hr_msg_join *m, char err[HR_ERR_LEN]);
int hr_msg_join_decode(const hr_ring_hdr *h, const void *pl, hr_msg_join *m, char err[HR_ERR_LEN]);
void hr_msg_join_clear(hr_msg_join *m);
/* m's fields as the JOIN carries them, less the profile: a JSON object (new
 * reference; NULL on OOM) for the status document's "info". */
struct json_t;
struct json_t *hr_msg_join_info_json(const hr_msg_join *m);

/* ---- PLAN: head -> worker (plan id also in the header) ----
 * Every device gets the whole ring's windows: win[r][j] layers of ring
 * position j in round r, positions in ring order and rounds one after the
 * other, so round r's window of position j starts where the one before it
 * ends and the k rounds cover the n_layer layers once (a uniform plan has
 * the same row k times). Decode refuses k or n_active out of range, a row
 * that does not name every ring member, a negative count and windows that
 * leave a layer out or run past the last (counts not summing to n_layer). */
typedef struct {
    uint32_t plan_id;
    int k, n_layer, n_active;
    int index; /* this device's ring position, -1: not in the ring */
    int win[HR_MSG_MAX_ROUNDS][HR_MSG_MAX_RING];
    int n_ctx, n_batch, dtype;
    bool prefetch, release;
    char next[HR_MSG_EP_LEN];                    /* data endpoint of the next device, "" alone */
    char next_key[HR_RING_KEY_LEN];              /* its public key, "" when insecure */
    char keys[HR_MSG_MAX_KEYS][HR_RING_KEY_LEN]; /* ring members vouched for */
    int n_keys;                                  /* invalid keys are skipped */
    double mem_budget; /* bytes for weights + KV the scheduler planned this device with
                          (hr_prof_mem_budget); <= 0 unknown (absent on the wire) */
    int n_seq;         /* KV slots per window: requests in flight at once (1..HR_MSG_MAX_SEQ;
                          absent on the wire when 1) */
    int n_gpu;         /* of each of its windows, at most the first n_gpu layers on the
                          device's GPU (0..its largest window; absent on the wire when 0) */
} hr_msg_plan;
int hr_msg_plan_encode(hr_msg *out, const hr_msg_plan *m, char err[HR_ERR_LEN]);
int hr_msg_plan_decode(const hr_ring_hdr *h, const void *pl, hr_msg_plan *m, char err[HR_ERR_LEN]);
/* The layers of ring position pos in round r: [*first, *first + *count)
 * (count 0: none). Returns 0, HR_EINVAL for a position or round outside m. */
int hr_msg_plan_window(const hr_msg_plan *m, int pos, int r, int *first, int *count);

/* ---- READY: worker -> head, for the plan id in the header ---- */
typedef struct {
    bool ok;
    char error[HR_MSG_TEXT_LEN]; /* why not, when !ok */
} hr_msg_ready;
int hr_msg_ready_encode(hr_msg *out, const hr_msg_ready *m, char err[HR_ERR_LEN]);
int hr_msg_ready_decode(const hr_ring_hdr *h, const void *pl, hr_msg_ready *m,
                        char err[HR_ERR_LEN]);

/* ---- REJECT: head -> worker / client ---- */
typedef struct {
    bool fatal; /* model or version mismatch, malformed JOIN: do not retry */
    char reason[HR_MSG_TEXT_LEN];
} hr_msg_reject;
int hr_msg_reject_encode(hr_msg *out, const hr_msg_reject *m, char err[HR_ERR_LEN]);
int hr_msg_reject_decode(const hr_ring_hdr *h, const void *pl, hr_msg_reject *m,
                         char err[HR_ERR_LEN]);

/* ---- HEARTBEAT: worker -> head (the head echoes it empty) ---- */
typedef struct {
    double ms_round; /* EMA of the decode window time, ms */
    double resident; /* fraction of own windows resident, -1 unknown */
    uint64_t tokens, rejected;
    int64_t mem_avail; /* bytes, -1 unknown */
    double t;          /* sender's monotonic clock, s */
    /* streaming (all optional on the wire: -1 = unknown / absent) */
    double read_round;   /* bytes read from storage per window computed, measured (/proc/self/io) */
    double cpu_round;    /* the process's CPU ms per window computed, over the same steps */
    double stream_round; /* bytes per round the runtime's split streams (mmap/stream.h) */
    double pinned;       /* bytes of the windows kept resident */
    int locked;          /* 1: the resident part is mlock'ed, 0: kept by advice, -1 unknown */
    uint64_t rounds;     /* decode rounds (one token, one window) timed under the
                            plan in the header's plan_id; ms_round is their EMA */
    double ms_total;     /* ms those rounds took in all (0 = not sent) */
    /* model bytes fetched from the head (worker without the model file; -1 absent):
     * verified bytes of the windows wanted, of fetch_total, and bytes received in all */
    double fetch_done, fetch_total, fetch_wire;
    /* streaming by expert (-1 / absent: the plan does not): experts kept per
     * layer, experts routed to so far and of them resident, bytes of experts
     * read on demand and by reranks (0 / absent: none or not sent) */
    int ex_keep;
    uint64_t ex_routed, ex_hits, ex_fetched, ex_moved;
    /* the disk as its pump gets it: bytes its reads of streamed tails took
     * from storage and the seconds those reads took, since it started
     * (-1 / absent: none) */
    double pump_bytes, pump_s;
} hr_msg_heartbeat;
int hr_msg_heartbeat_encode(hr_msg *out, const hr_msg_heartbeat *m, char err[HR_ERR_LEN]);
int hr_msg_heartbeat_decode(const hr_ring_hdr *h, const void *pl, hr_msg_heartbeat *m,
                            char err[HR_ERR_LEN]);

/* ---- INVITE: head -> agent (--peers): join me ---- */
typedef struct {
    char head[HR_MSG_EP_LEN]; /* the head's control endpoint */
} hr_msg_invite;
int hr_msg_invite_encode(hr_msg *out, const hr_msg_invite *m, char err[HR_ERR_LEN]);
int hr_msg_invite_decode(const hr_ring_hdr *h, const void *pl, hr_msg_invite *m,
                         char err[HR_ERR_LEN]);

/* ---- PAIR: join-token holder -> head: trust my key (the head echoes it
 * empty when it did) ---- */
typedef struct {
    char name[HR_MSG_NAME_LEN];
    char pubkey[HR_RING_KEY_LEN];
} hr_msg_pair;
int hr_msg_pair_encode(hr_msg *out, const hr_msg_pair *m, char err[HR_ERR_LEN]);
int hr_msg_pair_decode(const hr_ring_hdr *h, const void *pl, hr_msg_pair *m, char err[HR_ERR_LEN]);

/* ---- STATUS: head -> client, the cluster status document ---- */
/* json: one JSON object (hr_status_json, agent/status.h). */
int hr_msg_status_encode(hr_msg *out, const char *json, char err[HR_ERR_LEN]);
/* *json: a NUL-terminated malloc'ed copy after checking it is a JSON object. */
int hr_msg_status_decode(const hr_ring_hdr *h, const void *pl, char **json, char err[HR_ERR_LEN]);

/* ---- PROMPT: client -> head ---- */
typedef struct {
    char *text; /* encode: borrowed; decode: malloc'ed, freed by hr_msg_prompt_clear */
    int n_predict, top_k, wait_ms;
    double temp, top_p, min_p, repeat_penalty;
    int64_t seed; /* -1: the head picks one */
} hr_msg_prompt;
int hr_msg_prompt_encode(hr_msg *out, const hr_msg_prompt *m, char err[HR_ERR_LEN]);
/* Fields other than text are optional: an absent one keeps the value *m
 * has on entry (the receiver's defaults, e.g. hr_sampler_params_default()). */
int hr_msg_prompt_decode(const hr_ring_hdr *h, const void *pl, hr_msg_prompt *m,
                         char err[HR_ERR_LEN]);
void hr_msg_prompt_clear(hr_msg_prompt *m);

/* ---- TOKEN: head -> client, binary: i32 LE token id, then the piece ---- */
typedef struct {
    int32_t id;                       /* -1: held-back text flushed at the end */
    int len;                          /* piece bytes */
    char piece[HR_MSG_MAX_PIECE + 1]; /* NUL-terminated */
} hr_msg_token;
int hr_msg_token_encode(hr_msg *out, int32_t id, const char *piece, int len, char err[HR_ERR_LEN]);
int hr_msg_token_decode(const hr_ring_hdr *h, const void *pl, hr_msg_token *m,
                        char err[HR_ERR_LEN]);

/* ---- DONE: head -> client, generation statistics ---- */
typedef struct {
    int n_prompt, n_gen;
    double prompt_s, gen_s;     /* wall time, s */
    double prompt_tps, gen_tps; /* tokens/s */
} hr_msg_done;
int hr_msg_done_encode(hr_msg *out, const hr_msg_done *m, char err[HR_ERR_LEN]);
int hr_msg_done_decode(const hr_ring_hdr *h, const void *pl, hr_msg_done *m, char err[HR_ERR_LEN]);

/* ---- ERROR: head -> client, text ---- */
int hr_msg_error_encode(hr_msg *out, const char *text, char err[HR_ERR_LEN]);
/* text: cap bytes, NUL-terminated, truncated when longer. */
int hr_msg_error_decode(const hr_ring_hdr *h, const void *pl, char *text, size_t cap,
                        char err[HR_ERR_LEN]);

/* ---- PROBE: head -> worker: measure the link to the echo responder at
 * `to` (the next device of plan_id, or the head itself at join) ---- */
typedef struct {
    char to[HR_MSG_EP_LEN];    /* tcp:// endpoint of the responder */
    char key[HR_RING_KEY_LEN]; /* its CURVE public key, "" when insecure */
    char name[HR_MSG_NAME_LEN];
    uint32_t plan_id; /* 0: at join, before any plan */
} hr_msg_probe;
int hr_msg_probe_encode(hr_msg *out, const hr_msg_probe *m, char err[HR_ERR_LEN]);
int hr_msg_probe_decode(const hr_ring_hdr *h, const void *pl, hr_msg_probe *m,
                        char err[HR_ERR_LEN]);

/* ---- LINK: worker -> head: the link measured for a PROBE. Decode refuses
 * figures no link gives (rtt_us in (0, 60 s], rtt_min_us in (0, rtt_us],
 * bw_mbs in (0, 1e6], byte counts within the probe's limits) and unknown
 * fields. ---- */
typedef struct {
    char to[HR_MSG_EP_LEN]; /* the endpoint probed */
    uint32_t plan_id;       /* the PROBE's */
    double rtt_us;          /* median round trip of a msg_bytes message, us */
    double rtt_min_us;      /* fastest round trip, us */
    double bw_mbs;          /* one-way throughput, MB/s */
    int msg_bytes, burst_bytes, samples;
} hr_msg_link;
int hr_msg_link_encode(hr_msg *out, const hr_msg_link *m, char err[HR_ERR_LEN]);
int hr_msg_link_decode(const hr_ring_hdr *h, const void *pl, hr_msg_link *m, char err[HR_ERR_LEN]);

/* ---- FETCH: worker -> head, binary: u64 off, u32 len, u32 0 (reserved).
 * len 0: the model's facts only (size, fingerprint, data offset). Allowed
 * from any authenticated peer, before JOIN: a worker without the model
 * learns its fingerprint this way. ---- */
#define HR_MSG_FETCH_SIZE 16
#define HR_MSG_CHUNK_MAX (1u << 20) /* model bytes in one CHUNK */
#define HR_MSG_CHUNK_HDR 64
#define HR_MSG_HASH_LEN 32 /* BLAKE2b-256 (libsodium crypto_generichash) */
typedef struct {
    uint64_t off;
    uint32_t len; /* <= HR_MSG_CHUNK_MAX */
} hr_msg_fetch;
int hr_msg_fetch_encode(hr_msg *out, const hr_msg_fetch *m, char err[HR_ERR_LEN]);
int hr_msg_fetch_decode(const hr_ring_hdr *h, const void *pl, hr_msg_fetch *m,
                        char err[HR_ERR_LEN]);

/* ---- CHUNK: head -> worker, binary: u64 model_size, u64 model_hash, u64
 * off, u32 len, u32 data_offset, 32-byte BLAKE2b-256 of the data, then len
 * data bytes (len 0: the facts only). Decode checks the layout and that the
 * bytes lie inside the model; the receiver checks the hash. ---- */
typedef struct {
    uint64_t model_size, model_hash, off;
    uint32_t len, data_offset;
    uint8_t hash[HR_MSG_HASH_LEN];
    const uint8_t *data; /* encode: borrowed; decode: points into the payload */
} hr_msg_chunk;
int hr_msg_chunk_encode(hr_msg *out, const hr_msg_chunk *m, char err[HR_ERR_LEN]);
int hr_msg_chunk_decode(const hr_ring_hdr *h, const void *pl, hr_msg_chunk *m,
                        char err[HR_ERR_LEN]);

#endif
