/* discover.c - a worker without --head finds its head by the beacons heads
 * send on the LAN (ring/beacon.h): it listens, keeps the heads whose key
 * fingerprint is the key it trusts as its head (the trusted "head", --head-key
 * or the join token's; any when insecure) and, when --cluster is given, whose
 * cluster has that name, and joins when exactly one endpoint is left. Other
 * beacons are reported once each (and malformed ones at most every 5 s by
 * the listener); none of them changes what this agent trusts. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "ring/beacon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "discover"
#define HR_DISCOVER_SETTLE_S 1.5 /* listen this long before choosing */
#define HR_DISCOVER_SAID 64      /* endpoints reported as ignored, once each */

int hr_discover_head(hr_agent *a, char ep[HR_EP_LEN], char err[HR_ERR_LEN]) {
    hr_beacon_listener *l = NULL;
    int rc = hr_beacon_listen(&l, a->p.discovery_port, err);
    if (rc)
        return rc;
    uint8_t want[HR_BEACON_FP_LEN];
    char want_hex[2 * HR_BEACON_FP_LEN + 1];
    hr_beacon_fingerprint(a->keys ? a->head_key : NULL, want);
    hr_beacon_fp_hex(want, want_hex);
    const char *cl = a->p.cluster;
    HR_LOG_INFO(TAG, "%s: looking for %s%s%s on UDP port %d (head key fingerprint %s)", a->name,
                cl ? "cluster '" : "a head", cl ? cl : "", cl ? "'" : "",
                a->p.discovery_port > 0 ? a->p.discovery_port : HR_BEACON_PORT,
                a->keys ? want_hex : "any: insecure");
    char said[HR_DISCOVER_SAID][HR_BEACON_EP_MAX + 1];
    int n_said = 0;
    double t0 = hr_now_s(), last_note = t0;
    hr_beacon_head *heads = calloc(HR_BEACON_MAX_HEADS, sizeof *heads);
    rc = heads ? 0 : hr_seterr(err, HR_ENOMEM, "out of memory");
    while (rc == 0) {
        if (atomic_load(&a->stop)) {
            rc = hr_seterr(err, HR_ECANCELED, "stopped while looking for a head");
            break;
        }
        if ((rc = hr_beacon_poll(l, 500, &a->stop)))
            break;
        int n = hr_beacon_heads(l, heads, HR_BEACON_MAX_HEADS), n_ok = 0, pick = -1;
        for (int i = 0; i < n; i++) {
            hr_beacon_head *h = &heads[i];
            char fp[2 * HR_BEACON_FP_LEN + 1];
            hr_beacon_fp_hex(h->b.fp, fp);
            const char *why = NULL;
            if (cl && strcmp(h->b.cluster, cl) != 0)
                why = "another cluster";
            else if (a->keys && memcmp(h->b.fp, want, HR_BEACON_FP_LEN) != 0)
                why = "its key fingerprint is not the head key trusted here";
            else if (h->b.model_size && a->model_size &&
                     (h->b.model_size != a->model_size || h->b.model_hash != a->model_hash))
                why = "it serves another model";
            if (!why) {
                if (pick >= 0 && strcmp(heads[pick].ep, h->ep) == 0)
                    continue;
                n_ok++;
                pick = i;
                continue;
            }
            bool known = false;
            for (int k = 0; k < n_said; k++)
                known |= strcmp(said[k], h->ep) == 0;
            if (!known && n_said < HR_DISCOVER_SAID) {
                snprintf(said[n_said++], HR_BEACON_EP_MAX + 1, "%s", h->ep);
                HR_LOG_WARN(TAG, "%s: ignoring the beacon of '%s' at %s (from %s, key %s): %s",
                            a->name, h->b.cluster, h->ep, h->from, fp, why);
            }
        }
        double now = hr_now_s();
        if (n_ok == 1 && now - t0 >= HR_DISCOVER_SETTLE_S) {
            if (heads[pick].b.proto != HR_RING_VERSION)
                HR_LOG_WARN(TAG, "%s: head '%s' speaks protocol %d, this agent %d", a->name,
                            heads[pick].b.cluster, heads[pick].b.proto, HR_RING_VERSION);
            snprintf(ep, HR_EP_LEN, "%s", heads[pick].ep);
            HR_LOG_INFO(TAG, "%s: found head of cluster '%s' at %s", a->name, heads[pick].b.cluster,
                        ep);
            break;
        }
        if (now - last_note >= 10.0) {
            last_note = now;
            if (n_ok > 1)
                HR_LOG_WARN(TAG,
                            "%s: %d heads with the trusted key answer; name one with "
                            "--cluster or --head",
                            a->name, n_ok);
            else
                HR_LOG_INFO(TAG, "%s: no head heard yet (%.0f s); still listening", a->name,
                            now - t0);
        }
    }
    free(heads);
    hr_beacon_listener_close(l);
    return rc;
}
