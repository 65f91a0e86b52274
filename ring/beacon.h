/* beacon.h - LAN discovery: the head's UDP beacon (wire format, parse,
 * send) and a listener that collects the heads it hears.
 *
 * A head broadcasts one beacon a second (HR_BEACON_INTERVAL_MS) on UDP port
 * HR_BEACON_PORT, on the interfaces its control port is reachable on: the
 * interface of its listen address (loopback: 127.255.255.255), every IPv4
 * interface when it listens on 0.0.0.0. A beacon says nothing secret:
 *
 *   off size field
 *     0    4 magic    "HRBC"
 *     4    2 version  HR_BEACON_VERSION (u16 LE; others are ignored)
 *     6    2 proto    the head's HR_RING_VERSION
 *     8    4 seq      beacons sent by this head so far
 *    12    8 model_size  bytes of the head's model file
 *    20    8 model_hash  its fingerprint (hr_ring_hash of header + tensor table)
 *    28   16 fp       BLAKE2b-128 of the head's Z85 public key (all zero: insecure head)
 *    44    1 cl       cluster name bytes (1..HR_BEACON_NAME_MAX, [A-Za-z0-9._-])
 *    45    1 el       control endpoint bytes (1..HR_BEACON_EP_MAX, "tcp://HOST:PORT")
 *    46   cl cluster name, then el bytes of endpoint; the datagram ends there
 *
 * A beacon never makes anyone trust a key: a listener reports the heads it
 * heard; the agent joins one only when its fingerprint is that of a key it
 * already trusts (or the join token's), and CURVE then proves the key.
 *
 * Threads: every function is reentrant; a listener belongs to one thread. */
#ifndef HR_RING_BEACON_H
#define HR_RING_BEACON_H

#include "common/error.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_BEACON_PORT 7707
#define HR_BEACON_VERSION 1
#define HR_BEACON_INTERVAL_MS 1000
#define HR_BEACON_HDR 46
#define HR_BEACON_NAME_MAX 63
#define HR_BEACON_EP_MAX 159
#define HR_BEACON_MAX (HR_BEACON_HDR + HR_BEACON_NAME_MAX + HR_BEACON_EP_MAX)
#define HR_BEACON_FP_LEN 16
#define HR_BEACON_MAX_HEADS 32  /* heads a listener keeps (the newest beacon of each) */
#define HR_BEACON_MAX_AGE_S 5.0 /* a head not heard for this long is forgotten */

typedef struct {
    int proto;
    uint32_t seq;
    uint64_t model_size, model_hash;
    uint8_t fp[HR_BEACON_FP_LEN];
    char cluster[HR_BEACON_NAME_MAX + 1];
    char ctrl[HR_BEACON_EP_MAX + 1];
} hr_beacon;

/* BLAKE2b-128 of a Z85 public key (40 characters); NULL or "" gives zeros. */
void hr_beacon_fingerprint(const char *pubkey, uint8_t fp[HR_BEACON_FP_LEN]);
/* fp as 32 lower-case hex digits. */
void hr_beacon_fp_hex(const uint8_t fp[HR_BEACON_FP_LEN], char out[2 * HR_BEACON_FP_LEN + 1]);
/* True when the cluster name is 1..63 characters of [A-Za-z0-9._-]. */
bool hr_beacon_name_valid(const char *name);

/* Writes b into out (cap >= HR_BEACON_MAX). Returns the bytes or HR_EINVAL
 * (bad name or endpoint). */
int hr_beacon_encode(const hr_beacon *b, uint8_t *out, size_t cap);
/* Parses and checks a whole datagram of n bytes; HR_EFORMAT with err
 * otherwise. Never reads past n. */
int hr_beacon_parse(const void *buf, size_t n, hr_beacon *b, char err[HR_ERR_LEN]);

/* ---- sending (the head) ---- */

/* A UDP socket for beacons; listen_host is the head's control host (its
 * interfaces are the ones beaconed on: "0.0.0.0"/"*" all). NULL + err. */
typedef struct hr_beacon_sender hr_beacon_sender;
int hr_beacon_sender_open(hr_beacon_sender **out, const char *listen_host, int port,
                          char err[HR_ERR_LEN]);
/* Sends b on each interface (at most once per HR_BEACON_INTERVAL_MS / 2:
 * calls in between return 0 and send nothing). Returns the datagrams sent
 * or a negative HR_E* code. */
int hr_beacon_send(hr_beacon_sender *s, const hr_beacon *b);
void hr_beacon_sender_close(hr_beacon_sender *s); /* NULL is a no-op */

/* ---- listening (workers, `hearth discover`) ---- */

typedef struct {
    hr_beacon b;
    char ep[HR_BEACON_EP_MAX + 1]; /* endpoint to join: b.ctrl, a wildcard host replaced by the
                                      datagram's source address */
    char from[64];                 /* source address of the last beacon */
    double first_s, last_s;        /* monotonic, s */
    uint64_t count;                /* beacons heard */
} hr_beacon_head;

typedef struct {
    uint64_t received, malformed, table_full; /* datagrams: all, unparsable; heads forgotten
                                                 for a newer one (table full) */
} hr_beacon_stats;

typedef struct hr_beacon_listener hr_beacon_listener;
/* Binds UDP port (0.0.0.0, SO_REUSEADDR: several listeners on one machine
 * all hear broadcasts). HR_ENET with err. */
int hr_beacon_listen(hr_beacon_listener **out, int port, char err[HR_ERR_LEN]);
/* Receives for up to timeout_ms (returns earlier only when stop is set):
 * every datagram is parsed, malformed ones counted and logged (one line per
 * 5 s at most, with the count since), valid ones kept per (cluster,
 * endpoint, fingerprint) in a table of HR_BEACON_MAX_HEADS whose entries
 * expire after HR_BEACON_MAX_AGE_S; when it is full the head heard least
 * often gives way. Returns 0 or HR_ENET. */
int hr_beacon_poll(hr_beacon_listener *l, int timeout_ms, const atomic_int *stop);
/* The heads heard within HR_BEACON_MAX_AGE_S, up to max, oldest first. */
int hr_beacon_heads(hr_beacon_listener *l, hr_beacon_head *out, int max);
void hr_beacon_listener_stats(const hr_beacon_listener *l, hr_beacon_stats *out);
void hr_beacon_listener_close(hr_beacon_listener *l); /* NULL is a no-op */

#endif
