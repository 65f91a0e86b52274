/* ring.h - hearth's wire format and ZeroMQ socket helpers.
 *
 * Every message is ONE ZeroMQ frame (ROUTER sockets add the usual identity
 * frame in front): a fixed 32-byte little-endian header followed by
 * `len` payload bytes.
 *
 *   off size field
 *     0    4 magic    "HRTH" (0x48545248 read as u32 LE)
 *     4    2 version  HR_RING_VERSION; other versions are rejected
 *     6    1 type     hr_ring_type
 *     7    1 dtype    hidden-state element type (HR_RING_F16 / HR_RING_F32)
 *     8    8 req_id   request id (0 on control frames that have none)
 *    16    4 pos      position of the first token (data), or -1
 *    20    2 n_tok    tokens in the frame (data)
 *    22    2 round    ring round 0..k-1 (data)
 *    24    4 plan_id  plan epoch the frame belongs to
 *    28    4 len      payload bytes; must equal frame size - 32
 *
 * Control payloads and their limits are listed in ring/msg.h (the message
 * table; none exceeds HR_RING_MAX_CTRL bytes), which also encodes and
 * decodes them. A BATCH data payload is n_tok row entries (HR_RING_ROW_SIZE
 * bytes each: KV slot, with HR_RING_ROW_DECODE set for a decode row
 * (hr_seq_pos.decode), and position) followed by n_tok x n_embd elements of
 * dtype, row-major. Receivers check the
 * header (magic, version, type, exact length, limits) before touching the
 * payload, and dimensions against their plan before any copy.
 *
 * Sockets are created with LINGER 0, send/receive timeouts, a maximum
 * message size and bounded queues (HWM). A socket belongs to one thread.
 * All functions here are reentrant; each socket argument is used by the
 * calling thread only. */
#ifndef HR_RING_RING_H
#define HR_RING_RING_H

#include "common/error.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_RING_MAGIC 0x48545248u
#define HR_RING_VERSION                                                                            \
    7 /* 2: typed REJECT, READY, INVITE, PAIR; 3: PROBE, LINK (msg.h);                             \
       4: BATCH frames, PLAN n_seq; 5: FETCH, CHUNK (model bytes from the head);                   \
       6: every data frame is a BATCH frame (type 11 retired);                                     \
       7: PLAN carries every round's windows (rounds of their own) */
#define HR_RING_HDR_SIZE 32
#define HR_RING_MAX_CTRL (256u * 1024u) /* bytes of a control payload */
#define HR_RING_MAX_FRAME (64u << 20)   /* bytes; larger frames are dropped by zmq */
#define HR_RING_MAX_ID 256              /* bytes of a ROUTER identity */

typedef enum {
    HR_RING_JOIN = 1,   /* worker -> head: hello, profile, model fingerprint */
    HR_RING_WELCOME,    /* head -> worker: accepted */
    HR_RING_REJECT,     /* head -> worker/client: refused, payload says why */
    HR_RING_PLAN,       /* head -> worker: ring, k, windows */
    HR_RING_READY,      /* worker -> head: plan applied (or failed) */
    HR_RING_START,      /* head -> worker: a request begins */
    HR_RING_CANCEL,     /* head -> worker, client -> head: stop request req_id */
    HR_RING_HEARTBEAT,  /* worker -> head: alive + stats */
    HR_RING_LEAVE,      /* worker -> head: going away; head -> worker: the head stops */
    HR_RING_INVITE,     /* head -> agent (--peers): join me at payload address */
    HR_RING_RETIRED,    /* 11: protocol 5's single-request data frame; no longer sent or accepted */
    HR_RING_PROMPT,     /* client -> head: generate */
    HR_RING_TOKEN,      /* head -> client: i32 id + text piece */
    HR_RING_DONE,       /* head -> client: finished, JSON stats */
    HR_RING_ERROR,      /* any -> client: failure, payload says why */
    HR_RING_STATUS_REQ, /* client -> head */
    HR_RING_STATUS,     /* head -> client: JSON */
    HR_RING_PAIR,       /* new agent -> head (join token): trust my key; head -> agent: ok */
    HR_RING_PROBE,      /* head -> worker: measure your link to this echo endpoint */
    HR_RING_LINK,       /* worker -> head: a measured link (round trip, throughput) */
    HR_RING_BATCH,      /* data plane: a micro-batch of rows of several sequences */
    HR_RING_FETCH,      /* worker -> head: send me these model bytes (or the model's facts) */
    HR_RING_CHUNK,      /* head -> worker: model bytes with their hash */
    HR_RING_TYPE_END
} hr_ring_type;

typedef enum { HR_RING_F16 = 0, HR_RING_F32 = 1 } hr_ring_dtype;

#define HR_RING_ROW_SIZE 8            /* bytes of one BATCH row entry: u32 slot, i32 pos */
#define HR_RING_ROW_DECODE 0x40000000 /* in a row's slot: computed as a decode row */

typedef struct {
    uint8_t type;  /* hr_ring_type */
    uint8_t dtype; /* hr_ring_dtype */
    uint16_t round;
    uint16_t n_tok;
    int32_t pos;
    uint32_t plan_id;
    uint64_t req_id;
    uint32_t len; /* payload bytes */
} hr_ring_hdr;

const char *hr_ring_type_name(int type); /* "BATCH", ...; "?" for unknown */
size_t hr_ring_dtype_size(int dtype);    /* 2, 4, or 0 for unknown */

/* Writes h as 32 bytes at out. */
void hr_ring_hdr_write(void *out, const hr_ring_hdr *h);
/* Parses and checks a whole frame of n bytes: n >= 32, magic, version
 * (HR_EUNSUPPORTED), known type, len == n - 32, the type's payload limit
 * from the message table (msg.h).
 * HR_EFORMAT otherwise, err says what. */
int hr_ring_hdr_read(const void *frame, size_t n, hr_ring_hdr *h, char err[HR_ERR_LEN]);

/* Packs n floats as dtype into dst (cap bytes). Returns bytes written or a
 * negative HR_E* code. */
long hr_ring_pack(void *dst, size_t cap, const float *src, size_t n, int dtype);
/* Unpacks exactly n elements; len must be n x dtype size (HR_EFORMAT). */
int hr_ring_unpack(float *dst, size_t n, const void *src, size_t len, int dtype);
/* BATCH row table: writes / reads n entries (slot, pos) at p
 * (n x HR_RING_ROW_SIZE bytes). */
void hr_ring_rows_write(void *p, const int32_t *slot, const int32_t *pos, int n);
void hr_ring_rows_read(const void *p, int32_t *slot, int32_t *pos, int n);

/* Socket types for hr_ring_socket (their values are ZeroMQ's). */
enum { HR_RING_DEALER = 5, HR_RING_ROUTER = 6, HR_RING_PULL = 7, HR_RING_PUSH = 8 };

/* A messaging context (one per agent or client; sockets are made from it).
 * NULL on failure. term: after every socket of it is closed; NULL no-op. */
void *hr_ring_context(void);
void hr_ring_context_term(void *zctx);

typedef struct {
    int rcv_timeout_ms; /* ZMQ_RCVTIMEO */
    int snd_timeout_ms; /* ZMQ_SNDTIMEO */
    int hwm;            /* ZMQ_SNDHWM and ZMQ_RCVHWM, messages */
    int64_t max_msg;    /* ZMQ_MAXMSGSIZE, bytes */
    bool mandatory;     /* ROUTER: fail sends to unknown peers (ZMQ_ROUTER_MANDATORY) */
} hr_ring_sockopt;

hr_ring_sockopt hr_ring_sockopt_default(void);

/* A socket of zmq type `type` with the options set; NULL on failure (err). */
void *hr_ring_socket(void *zctx, int type, const hr_ring_sockopt *o, char err[HR_ERR_LEN]);
void hr_ring_close(void *sock); /* NULL is a no-op */
/* Connects to endpoint (tcp:// or inproc://); HR_ENET with err. */
int hr_ring_connect(void *sock, const char *endpoint, char err[HR_ERR_LEN]);
void hr_ring_disconnect(void *sock, const char *endpoint);
/* Binds to endpoint ("tcp://host:port", port 0 = any) and writes the
 * resolved endpoint into out (cap bytes). */
int hr_ring_bind(void *sock, const char *endpoint, char *out, size_t cap, char err[HR_ERR_LEN]);
/* "host:port" or "tcp://host:port" -> "tcp://host:port" (port+delta). */
int hr_ring_endpoint(const char *addr, int port_delta, char *out, size_t cap);

/* Sends a frame whose first 32 bytes are reserved for the header: writes h
 * (h->len = payload bytes at frame + 32) there and sends 32 + len bytes.
 * With id (ROUTER) the identity frame goes first. Returns 0, HR_ETIMEDOUT
 * (queue full past the send timeout) or HR_ENET. */
int hr_ring_send(void *sock, const void *id, size_t id_len, void *frame, const hr_ring_hdr *h,
                 char err[HR_ERR_LEN]);
/* Passes a received frame (n bytes, header included) on unchanged without
 * waiting (ROUTER: to id). Returns 0, HR_ETIMEDOUT (queue full) or HR_ENET. */
int hr_ring_forward(void *sock, const void *id, size_t id_len, const void *frame, size_t n);
/* Header-plus-payload convenience for small control messages (copies into
 * a stack buffer when len <= 4096, else allocates; not for the hot path). */
int hr_ring_send_msg(void *sock, const void *id, size_t id_len, const hr_ring_hdr *h,
                     const void *payload, char err[HR_ERR_LEN]);

/* Waits up to timeout_ms (-1 forever) for one message and receives it into
 * buf (cap bytes). With id != NULL (ROUTER) the identity goes to id
 * (HR_RING_MAX_ID bytes) and *id_len. Returns the frame size (> 0) with *h
 * filled and checked, 0 on timeout, or a negative code for a frame that was
 * read and rejected (HR_EFORMAT, HR_EUNSUPPORTED, HR_ERANGE when larger than
 * cap) or HR_ENET; rejected frames are consumed, err says why. */
long hr_ring_recv(void *sock, void *id, size_t *id_len, void *buf, size_t cap, int timeout_ms,
                  hr_ring_hdr *h, char err[HR_ERR_LEN]);
/* hr_ring_recv that also gives the sender's authenticated identity (the ZAP
 * user id: its Z85 key, "pairing" for a join-token holder, "" without
 * CURVE) in user (HR_RING_KEY_LEN bytes). */
long hr_ring_recv_user(void *sock, void *id, size_t *id_len, void *buf, size_t cap, int timeout_ms,
                       hr_ring_hdr *h, char *user, char err[HR_ERR_LEN]);

/* ---- event loop (loop.c) ----
 *
 * A small loop over zmq_poll for one thread's sockets (and plain file
 * descriptors): each socket has a callback run when a message is waiting
 * (it receives what it wants; the loop polls again), each timer a callback
 * run every period_ms (0: on every turn). Between turns the loop sleeps
 * until a message arrives, the next periodic timer is due, or a callback's
 * hr_ring_loop_wake_at, and at most HR_RING_LOOP_IDLE_MS (so the stop flag
 * and every-turn timers are seen that often on an idle loop). Not
 * thread-safe: one loop per thread, and its sockets belong to that thread. */
#define HR_RING_LOOP_MAX 8
#define HR_RING_LOOP_IDLE_MS 200

typedef void (*hr_ring_loop_fn)(void *ud);
typedef struct hr_ring_loop hr_ring_loop;

/* NULL on out of memory. stop (may be NULL) is polled every turn. */
hr_ring_loop *hr_ring_loop_create(const atomic_int *stop);
void hr_ring_loop_destroy(hr_ring_loop *l); /* NULL is a no-op; closes no socket */
/* HR_ERANGE past HR_RING_LOOP_MAX sockets or timers. */
int hr_ring_loop_socket(hr_ring_loop *l, void *sock, hr_ring_loop_fn fn, void *ud);
/* Like hr_ring_loop_socket for a plain file descriptor (a UDP socket):
 * fn runs when it is readable and must read what is there. */
int hr_ring_loop_fd(hr_ring_loop *l, int fd, hr_ring_loop_fn fn, void *ud);
int hr_ring_loop_timer(hr_ring_loop *l, int period_ms, hr_ring_loop_fn fn, void *ud);
/* Turns until *stop or hr_ring_loop_break(); returns 0, or HR_ENET when
 * polling fails. Timers run first on each turn, then ready sockets. */
int hr_ring_loop_run(hr_ring_loop *l, char err[HR_ERR_LEN]);
void hr_ring_loop_break(hr_ring_loop *l); /* from a callback: return after this turn */
/* From a callback: the loop's next sleep ends at t_s (hr_now_s() time) at
 * the latest; the earliest of several asks wins. */
void hr_ring_loop_wake_at(hr_ring_loop *l, double t_s);

/* ---- link probes (echo.c) ----
 *
 * The transport of the profiler's link measurement. A probe frame is a
 * 16-byte little-endian header (magic "HRPE", version u16, flags u16, seq
 * u32, payload length u32) and the payload; the responder answers a probe
 * with the frame itself, or with the header alone (payload length 0) when
 * flags has HR_RING_ECHO_ACK, and drops anything malformed. */
#define HR_RING_ECHO_HDR 16
#define HR_RING_ECHO_ACK 1u
#define HR_RING_ECHO_MAX_PAYLOAD (16u << 20)

void hr_ring_echo_hdr_write(unsigned char *p, uint16_t flags, uint32_t seq, uint32_t len);
/* Checks a probe frame of n bytes: magic, version, length. */
bool hr_ring_echo_hdr_check(const unsigned char *p, size_t n, uint16_t *flags, uint32_t *seq,
                            uint32_t *len);
/* A bound responder socket (its address in out); NULL with err (HR_ENET). */
void *hr_ring_echo_bind(void *zctx, const char *endpoint, char *out, size_t cap,
                        char err[HR_ERR_LEN]);
/* Answers probes on sock until *stop, counting answered and dropped ones;
 * the socket belongs to the calling thread from then on. */
int hr_ring_echo_serve(void *sock, const atomic_int *stop, atomic_ullong *served,
                       atomic_ullong *dropped);
/* A connected probing socket with send / receive timeouts; NULL with err. */
void *hr_ring_probe_open(void *zctx, const char *endpoint, int timeout_ms, char err[HR_ERR_LEN]);
/* Writes the header into frame[0..16) and sends it with payload bytes of
 * payload after it. HR_ETIMEDOUT or HR_ENET. */
int hr_ring_probe_send(void *sock, unsigned char *frame, uint32_t payload, uint16_t flags,
                       uint32_t seq, char err[HR_ERR_LEN]);
/* Receives one answer into rbuf (rcap bytes) and checks it: seq and the
 * payload length it carries. HR_ETIMEDOUT, HR_ENET or HR_EFORMAT. */
int hr_ring_probe_recv(void *sock, unsigned char *rbuf, size_t rcap, uint32_t *seq, uint32_t *len,
                       char err[HR_ERR_LEN]);

/* 64-bit FNV-1a over n bytes (model fingerprints). */
uint64_t hr_ring_hash(const void *data, size_t n, uint64_t seed);

/* ---- keys and trust (keys.c) ----
 *
 * Every agent (and CLI client) has a CURVE key pair kept in a key folder
 * (--key-dir, else $HEARTH_KEY_DIR, else ~/.config/hearth), created on first
 * use: `key` holds "public Z85\nsecret Z85\n" with mode 0600 (folder 0700).
 * `trusted` holds one "NAME PUBKEY" line per trusted peer. Servers (ROUTER,
 * PULL) run CURVE with a ZAP handler that accepts only this agent's own key,
 * the trusted keys (re-read when the file changes) and keys vouched for by
 * the head's plan; every refusal is counted and logged with the peer's
 * address and key (once per key, a few new keys a minute). Clients
 * (DEALER, PUSH) must know the server's public key. Keys are Z85 text of
 * 40 characters (HR_RING_KEY_LEN with the NUL). Thread-safe: every
 * function may be called from any thread. */
#define HR_RING_KEY_LEN 41
#define HR_RING_MAX_TRUST 64

typedef struct hr_ring_keys hr_ring_keys;

/* The default key folder ($HEARTH_KEY_DIR or $HOME/.config/hearth). */
int hr_ring_key_dir_default(char *out, size_t cap);
/* Loads the key pair in dir (NULL = default), creating it on first use, and
 * the trusted list. HR_EIO / HR_EFORMAT with err naming the file. */
int hr_ring_keys_open(hr_ring_keys **out, const char *dir, char err[HR_ERR_LEN]);
/* Stops the ZAP handler (before zmq_ctx_term of its context). NULL: no-op. */
void hr_ring_keys_close(hr_ring_keys *k);
const char *hr_ring_keys_public(const hr_ring_keys *k);
const char *hr_ring_keys_dir(const hr_ring_keys *k);
/* A Z85 key given as itself or as the name of a trusted peer -> out.
 * HR_ENOENT when it is neither. */
int hr_ring_keys_lookup(hr_ring_keys *k, const char *name_or_key, char out[HR_RING_KEY_LEN]);
/* True when s is a valid 40-character Z85 public key. */
bool hr_ring_key_valid(const char *s);
/* Adds (or replaces, by name) NAME PUBKEY in dir's trusted file. */
int hr_ring_trust_add(const char *dir, const char *name, const char *pub, char err[HR_ERR_LEN]);
/* Removes name from dir/trusted (a running agent re-reads the file: the
 * key is refused from its next handshake). HR_ENOENT when not there. */
int hr_ring_trust_remove(const char *dir, const char *name, char err[HR_ERR_LEN]);
/* Replaces the set of keys vouched for by the head (plan members). */
void hr_ring_keys_vouch(hr_ring_keys *k, const char (*keys)[HR_RING_KEY_LEN], int n);
/* Starts the ZAP handler on zctx (one per context); who names this agent in
 * the refusal logs. */
int hr_ring_keys_zap_start(hr_ring_keys *k, void *zctx, const char *who, char err[HR_ERR_LEN]);
/* Handshakes refused so far. */
uint64_t hr_ring_keys_refused(const hr_ring_keys *k);
/* Head: a knock (ring/knock.h) from a device at from (IPv4 text) that
 * cannot reach this head over CURVE: name (as hr_knock_parse leaves it),
 * its public key, head_fp (HR_BEACON_FP_LEN bytes) the fingerprint of the
 * head key it trusts, proto its HR_RING_VERSION. Logs, under the same
 * limits as refused handshakes (once per key, a few new keys a minute),
 * the device, its key and fingerprint and the commands that pair it;
 * nothing when it trusts this head's key (its handshake is then refused
 * and logged by the ZAP handler). Grants nothing. */
void hr_ring_keys_knock(hr_ring_keys *k, const char *name, const char *pub, const uint8_t *head_fp,
                        int proto, const char *from);
/* Makes sock a CURVE server with this key pair (before bind). */
int hr_ring_secure_server(void *sock, const hr_ring_keys *k, char err[HR_ERR_LEN]);
/* Head: like hr_ring_secure_server, and the control socket also admits the
 * holders of this head's join token (for HR_RING_PAIR only). */
int hr_ring_secure_server_pairing(void *sock, const hr_ring_keys *k, char err[HR_ERR_LEN]);
/* Head: the join token for first pairing, "HJ1" + head public key + the
 * pairing secret (83 characters, Z85); the secret is made on first use and
 * kept in dir/join (0600). Enables pairing in the ZAP handler. */
int hr_ring_keys_join_token(hr_ring_keys *k, char *out, size_t cap, char err[HR_ERR_LEN]);
/* A join token is valid this long from when it is made (assumed default,
 * not measured: a day, long enough to pair a household's devices). An
 * expired one is replaced by the next hr_ring_keys_join_token. */
#define HR_RING_JOIN_TTL_S (24LL * 3600)
/* Head: a new pairing secret valid for ttl_s seconds (0: no expiry); the
 * old token stops working, also for a head already running with this key
 * folder (its ZAP handler re-reads dir/join). The new token into out. */
int hr_ring_keys_join_rotate(hr_ring_keys *k, long long ttl_s, char *out, size_t cap,
                             char err[HR_ERR_LEN]);
/* Unix seconds when the current join token expires (0: never). */
long long hr_ring_keys_join_expires(hr_ring_keys *k);
/* Splits a join token; HR_EINVAL when malformed. */
int hr_ring_join_parse(const char *token, char head_pub[HR_RING_KEY_LEN],
                       char pair_sec[HR_RING_KEY_LEN]);
/* Makes sock a CURVE client with the join token's pairing key pair. */
int hr_ring_secure_client_pairing(void *sock, const char *pair_sec, const char *server_pub,
                                  char err[HR_ERR_LEN]);
/* Makes sock a CURVE client expecting server_pub (before connect). */
int hr_ring_secure_client(void *sock, const hr_ring_keys *k, const char *server_pub,
                          char err[HR_ERR_LEN]);

/* Link probes over CURVE, as the data plane runs (echo.c): the responder is
 * a CURVE server with keys (its ZAP handler admits whom the data port
 * admits), the probing side a CURVE client of server_pub. keys NULL: the
 * plain hr_ring_echo_bind / hr_ring_probe_open. */
void *hr_ring_echo_bind_secure(void *zctx, const char *endpoint, const hr_ring_keys *keys,
                               char *out, size_t cap, char err[HR_ERR_LEN]);
void *hr_ring_probe_open_secure(void *zctx, const char *endpoint, const hr_ring_keys *keys,
                                const char *server_pub, int timeout_ms, char err[HR_ERR_LEN]);

#endif
