/* knock.h - a device that cannot reach its head over CURVE (it trusts no
 * head key yet, or another one than the head's) says who it is in one plain
 * UDP datagram to the head's control port number, so that the head can log
 * the command that pairs it. A knock says nothing secret and grants
 * nothing: the head only logs it (ring.h: hr_ring_keys_knock, once per key
 * and a few new keys a minute), and anyone may send one with any name.
 *
 *   off size field
 *     0    4 magic    "HRKN"
 *     4    2 version  HR_KNOCK_VERSION (u16 LE; others are ignored)
 *     6    2 proto    the device's HR_RING_VERSION
 *     8   16 head_fp  hr_beacon_fingerprint of the head key the device trusts
 *                     (of its own key when it trusts none)
 *    24   40 key      the device's CURVE public key (Z85)
 *    64    1 nl       name bytes (1..HR_KNOCK_NAME_MAX)
 *    65   nl name     the device's name; the datagram ends there
 *
 * A parsed name holds only [A-Za-z0-9._:-] and does not start with '-':
 * every other byte reads as '_', so it can be logged and pasted into a
 * command as it is.
 *
 * Threads: every function is reentrant; a sender or listener belongs to
 * one thread. */
#ifndef HR_RING_KNOCK_H
#define HR_RING_KNOCK_H

#include "common/error.h"
#include "ring/beacon.h"
#include "ring/ring.h"

#include <stddef.h>
#include <stdint.h>

#define HR_KNOCK_VERSION 1
#define HR_KNOCK_HDR 65
#define HR_KNOCK_NAME_MAX 63
#define HR_KNOCK_MAX (HR_KNOCK_HDR + HR_KNOCK_NAME_MAX)

typedef struct {
    int proto;
    uint8_t head_fp[HR_BEACON_FP_LEN];
    char key[HR_RING_KEY_LEN];
    char name[HR_KNOCK_NAME_MAX + 1];
} hr_knock;

/* Writes k into out (cap >= HR_KNOCK_MAX); a longer name is cut to
 * HR_KNOCK_NAME_MAX bytes. Returns the bytes or HR_EINVAL (no valid key,
 * empty name). */
int hr_knock_encode(const hr_knock *k, uint8_t *out, size_t cap);
/* Parses and checks a whole datagram of n bytes (the name cleaned as
 * above); HR_EFORMAT with err otherwise. Never reads past n. */
int hr_knock_parse(const void *buf, size_t n, hr_knock *k, char err[HR_ERR_LEN]);

/* ---- the device ---- */

typedef struct hr_knock_sender hr_knock_sender;
/* A UDP socket aimed at the host and port of head_ep ("tcp://HOST:PORT",
 * HOST an IPv4 address or a name that resolves to one). HR_ENET / HR_EINVAL
 * with err. */
int hr_knock_sender_open(hr_knock_sender **out, const char *head_ep, char err[HR_ERR_LEN]);
/* Sends k once (never blocks). 0, HR_EINVAL (k not encodable) or HR_ENET. */
int hr_knock_send(hr_knock_sender *s, const hr_knock *k);
void hr_knock_sender_close(hr_knock_sender *s); /* NULL is a no-op */

/* ---- the head ---- */

typedef struct hr_knock_listener hr_knock_listener;
/* Binds UDP on the host and port of the head's control endpoint ctrl_ep
 * ("tcp://IPV4:PORT"; 0.0.0.0 or * for every interface). HR_ENET with err. */
int hr_knock_listen(hr_knock_listener **out, const char *ctrl_ep, char err[HR_ERR_LEN]);
/* The socket's file descriptor, to poll for input. */
int hr_knock_fd(const hr_knock_listener *l);
/* Takes the next valid knock that is queued: 1 with *k and its source
 * address in from (IPv4, as text), 0 when none is left. Malformed datagrams
 * are skipped, counted and logged at most once a minute with the count. */
int hr_knock_recv(hr_knock_listener *l, hr_knock *k, char from[64]);
void hr_knock_listener_close(hr_knock_listener *l); /* NULL is a no-op */

#endif
