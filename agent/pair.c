/* pair.c - pairing a new device with a head by its join token (--join):
 * the device proves it holds the token's secret over a CURVE connection
 * and asks the head to trust its key; the head answers PAIR or REJECT.
 * Used when an agent starts (node.c) and when a worker joins (worker.c). */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/knock.h"
#include "ring/msg.h"

#include <stdio.h>
#include <string.h>

#define TAG "agent"

/* --join: asks the head (as a join token holder) to trust our key. */
int hr_worker_pair(hr_agent *a, char err[HR_ERR_LEN]) {
    char hk[HR_RING_KEY_LEN], sec[HR_RING_KEY_LEN];
    if (hr_ring_join_parse(a->p.join, hk, sec) != 0)
        return hr_seterr(err, HR_EINVAL, "--join: not a join token");
    void *s = hr_ring_socket(a->zctx, HR_RING_DEALER, NULL, err);
    if (!s)
        return HR_ENET;
    int rc = hr_ring_secure_client_pairing(s, sec, hk, err);
    if (rc == 0)
        rc = hr_ring_connect(s, a->head_ep, err);
    hr_msg_pair pm;
    snprintf(pm.name, sizeof pm.name, "%s", a->name);
    snprintf(pm.pubkey, sizeof pm.pubkey, "%s", hr_ring_keys_public(a->keys));
    hr_msg m;
    if (rc == 0)
        rc = hr_msg_pair_encode(&m, &pm, err);
    if (rc == 0 && (rc = hr_msg_send(s, NULL, 0, &m, err)) == 0) {
        hr_ring_hdr h;
        uint8_t buf[HR_RING_HDR_SIZE + 4096]; /* PAIR echo or a REJECT */
        double until = hr_now_s() + 10.0;
        rc = hr_seterr(err, HR_ETIMEDOUT,
                       "no pairing answer from head %s within 10 s (wrong token or address?)",
                       a->head_ep);
        while (hr_now_s() < until && !atomic_load(&a->stop)) {
            char e2[HR_ERR_LEN];
            long n = hr_ring_recv(s, NULL, NULL, buf, sizeof buf, 200, &h, e2);
            if (n > 0 && h.type == HR_RING_PAIR) {
                HR_LOG_INFO(TAG, "%s: paired with head %s by join token", a->name, a->head_ep);
                rc = 0;
                break;
            }
            hr_msg_reject rj;
            if (n > 0 && h.type == HR_RING_REJECT &&
                hr_msg_reject_decode(&h, buf + HR_RING_HDR_SIZE, &rj, e2) == 0) {
                rc = hr_seterr(err, HR_EDENIED, "head refused pairing: %s", rj.reason);
                break;
            }
        }
    }
    hr_ring_close(s);
    return rc;
}

bool hr_worker_no_head_key(const hr_agent *a) {
    return a->keys && strcmp(a->head_key, hr_ring_keys_public(a->keys)) == 0;
}

/* The advice when the head has not answered a JOIN for secs: it is not
 * running there, or it does not trust this device's key, and how to pair. */
void hr_worker_warn_unpaired(const hr_agent *a, double secs) {
    const char *pub = a->keys ? hr_ring_keys_public(a->keys) : NULL;
    if (!pub) {
        HR_LOG_WARN(TAG, "%s: the head at %s has not answered in %.0f s: is it running there?",
                    a->name, a->head_ep, secs);
        return;
    }
    uint8_t fp[HR_BEACON_FP_LEN];
    char fph[2 * HR_BEACON_FP_LEN + 1];
    hr_beacon_fingerprint(pub, fp);
    hr_beacon_fp_hex(fp, fph);
    HR_LOG_WARN(TAG,
                "%s: the head at %s has not accepted this device in %.0f s: it is not running "
                "there, or it does not trust this device's key (fingerprint %s%s). Pair once: "
                "restart this agent with --join TOKEN (the token the head prints when it starts), "
                "or on the head run `hearth trust add %s '%s'` (and here `hearth trust add head "
                "HEAD_KEY`)",
                a->name, a->head_ep, secs, fph,
                hr_worker_no_head_key(a) ? "; and no head key is trusted here" : "", a->name, pub);
}

void hr_worker_knock(hr_agent *a) {
    char e2[HR_ERR_LEN];
    if (!a->keys || a->knock_failed)
        return;
    if (!a->knock && hr_knock_sender_open(&a->knock, a->head_ep, e2) != 0) {
        HR_LOG_DEBUG(TAG, "%s: no knock: %s", a->name, e2);
        a->knock_failed = true;
        return;
    }
    hr_knock k = {.proto = HR_RING_VERSION};
    hr_beacon_fingerprint(a->head_key, k.head_fp); /* our own key's when we trust no head's */
    memcpy(k.key, hr_ring_keys_public(a->keys), HR_RING_KEY_LEN);
    size_t nl = strnlen(a->name, HR_KNOCK_NAME_MAX);
    memcpy(k.name, a->name, nl);
    k.name[nl] = 0;
    if (hr_knock_send(a->knock, &k) != 0)
        HR_LOG_DEBUG(TAG, "%s: knock to %s not sent", a->name, a->head_ep);
}
