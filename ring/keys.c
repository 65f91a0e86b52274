/* keys.c - CURVE key pairs, the trusted-key list and the ZAP handler that
 * admits only trusted peers to an agent's sockets (see ring.h). */
#include "ring/knock.h"
#include "ring/ring.h"

#include "common/log.h"
#include "common/sync.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define TAG "trust"
#define HR_PATH_LEN 1024
#define HR_KEYS_LOG_SEEN 64 /* refused keys remembered as logged */
/* New refused keys logged a minute: a household pairs a few devices at a
 * time (assumed, not measured); a flood of made-up keys gets one line. */
#define HR_KEYS_LOG_PER_MIN 8

typedef struct {
    char name[64];
    char z85[HR_RING_KEY_LEN];
    uint8_t bin[32];
} hr_trusted;

struct hr_ring_keys {
    char dir[HR_PATH_LEN];
    char pub[HR_RING_KEY_LEN], sec[HR_RING_KEY_LEN];
    uint8_t pub_bin[32];
    pthread_mutex_t mu; /* guards the lists below */
    hr_trusted trusted[HR_RING_MAX_TRUST];
    int n_trusted;
    struct timespec trusted_mtime;
    uint8_t vouched[HR_RING_MAX_TRUST][32];
    int n_vouched;
    bool pairing; /* join token holders may PAIR on the "hearth-pair" domain */
    uint8_t pair_pub[32];
    long long pair_expires;     /* unix s when the join token stops working; 0 = never */
    struct timespec join_mtime; /* of dir/join when loaded (rotation by another process) */
    /* ZAP */
    void *zap;
    pthread_t th;
    bool zap_started;
    atomic_int zap_stop;
    char who[64];
    atomic_ullong refused;
    double last_log; /* s: the last log of a refusal without a CURVE key */
    /* refusals and knocks logged (mu): once per key, a few new keys a minute */
    uint8_t logged[HR_KEYS_LOG_SEEN][32]; /* keys already logged (a ring) */
    unsigned long long n_logged;          /* keys logged so far */
    double win_s;                         /* s, monotonic: start of the minute being counted */
    int win_n;                            /* keys logged in it */
    unsigned long long win_over;          /* refusals and knocks past the cap in it */
};

int hr_ring_key_dir_default(char *out, size_t cap) {
    const char *env = getenv("HEARTH_KEY_DIR");
    int n;
    if (env && *env) {
        n = snprintf(out, cap, "%s", env);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home)
            home = "/tmp";
        n = snprintf(out, cap, "%s/.config/hearth", home);
    }
    return n < 0 || (size_t)n >= cap ? HR_ERANGE : 0;
}

bool hr_ring_key_valid(const char *s) {
    uint8_t b[32];
    return s && strlen(s) == 40 && zmq_z85_decode(b, s) != NULL;
}

static int hr_mkdirs(const char *dir, char err[HR_ERR_LEN]) {
    char p[HR_PATH_LEN];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return hr_seterr(err, HR_EIO, "cannot create %s: %s", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
        return hr_seterr(err, HR_EIO, "cannot create key folder %s: %s", p, strerror(errno));
    return 0;
}

/* Reads dir/key, or creates it (0600) when missing. */
static int hr_keys_load_pair(hr_ring_keys *k, char err[HR_ERR_LEN]) {
    char path[HR_PATH_LEN + 8];
    snprintf(path, sizeof path, "%s/key", k->dir);
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) {
        int rc = hr_mkdirs(k->dir, err);
        if (rc)
            return rc;
        if (zmq_curve_keypair(k->pub, k->sec) != 0)
            return hr_seterr(err, HR_EUNSUPPORTED, "libzmq has no CURVE support: %s",
                             zmq_strerror(zmq_errno()));
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0)
            return hr_seterr(err, HR_EIO, "cannot create %s: %s", path, strerror(errno));
        char txt[128];
        int n = snprintf(txt, sizeof txt, "public %s\nsecret %s\n", k->pub, k->sec);
        bool ok = write(fd, txt, (size_t)n) == n;
        ok &= fsync(fd) == 0;
        close(fd);
        if (!ok)
            return hr_seterr(err, HR_EIO, "cannot write %s", path);
        HR_LOG_INFO(TAG, "created key pair %s (public key %s)", path, k->pub);
    } else if (!f) {
        return hr_seterr(err, HR_EIO, "cannot read %s: %s", path, strerror(errno));
    } else {
        struct stat st;
        if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
            HR_LOG_WARN(TAG, "%s is readable by others (mode %03o); chmod 600 it", path,
                        (unsigned)(st.st_mode & 0777));
        char line[256];
        k->pub[0] = k->sec[0] = 0;
        while (fgets(line, sizeof line, f)) {
            char w[16], v[64];
            if (sscanf(line, "%15s %63s", w, v) != 2 || strlen(v) != 40)
                continue;
            if (strcmp(w, "public") == 0)
                memcpy(k->pub, v, HR_RING_KEY_LEN);
            else if (strcmp(w, "secret") == 0)
                memcpy(k->sec, v, HR_RING_KEY_LEN);
        }
        fclose(f);
        uint8_t sb[32];
        if (!hr_ring_key_valid(k->pub) || !zmq_z85_decode(sb, k->sec))
            return hr_seterr(err, HR_EFORMAT, "%s: no valid 'public' and 'secret' Z85 keys", path);
    }
    zmq_z85_decode(k->pub_bin, k->pub);
    return 0;
}

/* (Re)reads dir/trusted when its mtime changed; mu held. */
static void hr_keys_load_trusted(hr_ring_keys *k) {
    char path[HR_PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/trusted", k->dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        k->n_trusted = 0;
        return;
    }
    if (st.st_mtim.tv_sec == k->trusted_mtime.tv_sec &&
        st.st_mtim.tv_nsec == k->trusted_mtime.tv_nsec)
        return;
    k->trusted_mtime = st.st_mtim;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    k->n_trusted = 0;
    char line[512];
    while (fgets(line, sizeof line, f) && k->n_trusted < HR_RING_MAX_TRUST) {
        hr_trusted t;
        char key[64];
        if (line[0] == '#' || sscanf(line, "%63s %63s", t.name, key) != 2)
            continue;
        if (!hr_ring_key_valid(key)) {
            HR_LOG_WARN(TAG, "%s: '%s' has no valid key; ignored", path, t.name);
            continue;
        }
        memcpy(t.z85, key, HR_RING_KEY_LEN);
        zmq_z85_decode(t.bin, t.z85);
        k->trusted[k->n_trusted++] = t;
    }
    fclose(f);
}

int hr_ring_keys_open(hr_ring_keys **out, const char *dir, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!zmq_has("curve"))
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "this libzmq has no CURVE security; rebuild it with libsodium or run "
                         "with --insecure");
    hr_ring_keys *k = calloc(1, sizeof *k);
    if (!k)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    int rc = 0;
    if (dir && *dir)
        snprintf(k->dir, sizeof k->dir, "%s", dir);
    else if ((rc = hr_ring_key_dir_default(k->dir, sizeof k->dir))) {
        free(k);
        return hr_seterr(err, rc, "key folder path too long");
    }
    pthread_mutex_init(&k->mu, NULL);
    k->win_s = -1e9;
    if ((rc = hr_keys_load_pair(k, err))) {
        pthread_mutex_destroy(&k->mu);
        free(k);
        return rc;
    }
    hr_keys_load_trusted(k);
    *out = k;
    return 0;
}

const char *hr_ring_keys_public(const hr_ring_keys *k) { return k->pub; }
const char *hr_ring_keys_dir(const hr_ring_keys *k) { return k->dir; }
uint64_t hr_ring_keys_refused(const hr_ring_keys *k) { return atomic_load(&k->refused); }

int hr_ring_keys_lookup(hr_ring_keys *k, const char *name_or_key, char out[HR_RING_KEY_LEN]) {
    if (!name_or_key || !*name_or_key)
        return HR_ENOENT;
    if (hr_ring_key_valid(name_or_key)) {
        memcpy(out, name_or_key, HR_RING_KEY_LEN);
        return 0;
    }
    int rc = HR_ENOENT;
    pthread_mutex_lock(&k->mu);
    hr_keys_load_trusted(k);
    for (int i = 0; i < k->n_trusted && rc; i++)
        if (strcmp(k->trusted[i].name, name_or_key) == 0) {
            memcpy(out, k->trusted[i].z85, HR_RING_KEY_LEN);
            rc = 0;
        }
    pthread_mutex_unlock(&k->mu);
    return rc;
}

/* Rewrites dir/trusted without name's line, then with "name pub" when pub
 * is given; *found whether name was there. */
static int hr_trust_rewrite(const char *dir, const char *name, const char *pub, bool *found,
                            char err[HR_ERR_LEN]) {
    char d[HR_PATH_LEN];
    *found = false;
    if (dir && *dir)
        snprintf(d, sizeof d, "%s", dir);
    else if (hr_ring_key_dir_default(d, sizeof d))
        return hr_seterr(err, HR_ERANGE, "key folder path too long");
    if (!name || !*name || strlen(name) > 63 || strpbrk(name, " \t\n#"))
        return hr_seterr(err, HR_EINVAL, "bad peer name '%s' (1-63 characters, no spaces)",
                         name ? name : "");
    if (pub && !hr_ring_key_valid(pub))
        return hr_seterr(err, HR_EINVAL, "'%s' is not a 40-character Z85 public key", pub);
    int rc = hr_mkdirs(d, err);
    if (rc)
        return rc;
    char path[HR_PATH_LEN + 16], tmp[HR_PATH_LEN + 32];
    snprintf(path, sizeof path, "%s/trusted", d);
    snprintf(tmp, sizeof tmp, "%s/trusted.%d", d, (int)getpid());
    FILE *in = fopen(path, "r");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    FILE *o = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!o) {
        if (in)
            fclose(in);
        if (fd >= 0)
            close(fd);
        return hr_seterr(err, HR_EIO, "cannot write %s: %s", tmp, strerror(errno));
    }
    char line[512];
    while (in && fgets(line, sizeof line, in)) {
        char n[64];
        if (sscanf(line, "%63s", n) == 1 && strcmp(n, name) == 0) {
            *found = true;
            continue;
        }
        fputs(line, o);
    }
    if (in)
        fclose(in);
    if (pub)
        fprintf(o, "%s %s\n", name, pub);
    if (fclose(o) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return hr_seterr(err, HR_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

int hr_ring_trust_add(const char *dir, const char *name, const char *pub, char err[HR_ERR_LEN]) {
    bool found;
    if (!pub)
        return hr_seterr(err, HR_EINVAL, "no public key given");
    return hr_trust_rewrite(dir, name, pub, &found, err);
}

int hr_ring_trust_remove(const char *dir, const char *name, char err[HR_ERR_LEN]) {
    bool found;
    int rc = hr_trust_rewrite(dir, name, NULL, &found, err);
    if (rc == 0 && !found)
        return hr_seterr(err, HR_ENOENT, "no trusted key is named '%s' (see hearth trust list)",
                         name);
    return rc;
}

void hr_ring_keys_vouch(hr_ring_keys *k, const char (*keys)[HR_RING_KEY_LEN], int n) {
    pthread_mutex_lock(&k->mu);
    k->n_vouched = 0;
    for (int i = 0; i < n && k->n_vouched < HR_RING_MAX_TRUST; i++)
        if (hr_ring_key_valid(keys[i]))
            zmq_z85_decode(k->vouched[k->n_vouched++], keys[i]);
    pthread_mutex_unlock(&k->mu);
}

/* Is the 32-byte key ours, trusted or vouched for? Also gives its name. */
static bool hr_keys_admit(hr_ring_keys *k, const uint8_t key[32], char *name, size_t cap) {
    if (memcmp(key, k->pub_bin, 32) == 0) {
        snprintf(name, cap, "self");
        return true;
    }
    bool ok = false;
    pthread_mutex_lock(&k->mu);
    hr_keys_load_trusted(k);
    for (int i = 0; i < k->n_trusted && !ok; i++)
        if (memcmp(key, k->trusted[i].bin, 32) == 0) {
            snprintf(name, cap, "%s", k->trusted[i].name);
            ok = true;
        }
    for (int i = 0; i < k->n_vouched && !ok; i++)
        if (memcmp(key, k->vouched[i], 32) == 0) {
            snprintf(name, cap, "plan member");
            ok = true;
        }
    pthread_mutex_unlock(&k->mu);
    return ok;
}

/* ---- what is logged of refused keys ---- */

/* Whether a line about refusing key may be written now: once per key (of
 * the last HR_KEYS_LOG_SEEN logged), for at most HR_KEYS_LOG_PER_MIN new
 * keys a minute. The first key past that says so in one line, and the next
 * minute's first line says how many went unlogged. Thread-safe. */
static bool hr_keys_log_gate(hr_ring_keys *k, const uint8_t key[32]) {
    double now = hr_now_s();
    bool log = false, cap = false;
    unsigned long long over = 0;
    pthread_mutex_lock(&k->mu);
    bool seen = false;
    unsigned n = k->n_logged < HR_KEYS_LOG_SEEN ? (unsigned)k->n_logged : HR_KEYS_LOG_SEEN;
    for (unsigned i = 0; i < n && !seen; i++)
        seen = memcmp(k->logged[i], key, 32) == 0;
    if (!seen && now - k->win_s >= 60.0) {
        over = k->win_over;
        k->win_s = now;
        k->win_n = 0;
        k->win_over = 0;
    }
    if (!seen && k->win_n < HR_KEYS_LOG_PER_MIN) {
        memcpy(k->logged[k->n_logged++ % HR_KEYS_LOG_SEEN], key, 32);
        k->win_n++;
        log = true;
    } else if (!seen) {
        cap = k->win_over++ == 0;
    }
    pthread_mutex_unlock(&k->mu);
    if (over)
        HR_LOG_WARN(TAG,
                    "%s: %llu more attempts of untrusted keys in the minute before were "
                    "refused without a line each",
                    k->who, over);
    if (cap)
        HR_LOG_WARN(TAG,
                    "%s: more than %d untrusted keys tried to join within a minute: the "
                    "others are still refused, without a line each, until the minute is "
                    "over",
                    k->who, HR_KEYS_LOG_PER_MIN);
    return log;
}

/* A knock's name as hr_knock_parse leaves it: 1..63 of [A-Za-z0-9._:-], no
 * leading '-' (it goes into a command line). */
static bool hr_keys_knock_name_ok(const char *name) {
    size_t n = strnlen(name, HR_KNOCK_NAME_MAX + 1);
    if (n < 1 || n > HR_KNOCK_NAME_MAX || name[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-", name[i]))
            return false;
    return true;
}

void hr_ring_keys_knock(hr_ring_keys *k, const char *name, const char *pub, const uint8_t *head_fp,
                        int proto, const char *from) {
    uint8_t bin[32], own_fp[HR_BEACON_FP_LEN], dev_fp[HR_BEACON_FP_LEN];
    if (!hr_ring_key_valid(pub) || !hr_keys_knock_name_ok(name))
        return;
    zmq_z85_decode(bin, pub);
    hr_beacon_fingerprint(k->pub, own_fp);
    hr_beacon_fingerprint(pub, dev_fp);
    /* a device that trusts this head's key reaches the ZAP handler, which
     * logs its refusal; the knock speaks only for the others */
    if (memcmp(head_fp, own_fp, HR_BEACON_FP_LEN) == 0)
        return;
    char tn[80];
    bool trusted = hr_keys_admit(k, bin, tn, sizeof tn);
    if (!hr_keys_log_gate(k, bin))
        return;
    char dfp[2 * HR_BEACON_FP_LEN + 1], hfp[sizeof dfp], ofp[sizeof dfp];
    char trusts[160], def[HR_PATH_LEN], kd[HR_PATH_LEN + 16] = "", pv[96] = "";
    hr_beacon_fp_hex(dev_fp, dfp);
    hr_beacon_fp_hex(head_fp, hfp);
    hr_beacon_fp_hex(own_fp, ofp);
    if (memcmp(head_fp, dev_fp, HR_BEACON_FP_LEN) == 0) /* its own: it trusts none */
        snprintf(trusts, sizeof trusts, "no head key");
    else
        snprintf(trusts, sizeof trusts, "another head key (fingerprint %s; this head's is %s)", hfp,
                 ofp);
    if (hr_ring_key_dir_default(def, sizeof def) != 0 || strcmp(def, k->dir) != 0)
        snprintf(kd, sizeof kd, " --key-dir '%s'", k->dir);
    if (proto != HR_RING_VERSION)
        snprintf(pv, sizeof pv, " It speaks protocol %d, this head %d: update the older one.",
                 proto, HR_RING_VERSION);
    if (trusted)
        HR_LOG_WARN(TAG,
                    "%s: device '%s' at %s (key %s, fingerprint %s, trusted here as '%s') cannot "
                    "reach this head: it trusts %s. On it run `hearth trust add head '%s'`, or "
                    "restart it with --join TOKEN (`hearth key token%s` here prints it).%s",
                    k->who, name, from, pub, dfp, tn, trusts, k->pub, kd, pv);
    else
        HR_LOG_WARN(TAG,
                    "%s: device '%s' at %s asks to join: its key %s (fingerprint %s) is not "
                    "trusted here, and it trusts %s. If the device is yours, pair it: restart it "
                    "with --join TOKEN (`hearth key token%s` here prints it), or run here "
                    "`hearth trust add %s '%s'%s` and on it `hearth trust add head '%s'`.%s",
                    k->who, name, from, pub, dfp, trusts, kd, name, pub, kd, k->pub, pv);
}

/* ---- ZAP (RFC 27) ---- */

static void hr_keys_load_join(hr_ring_keys *k);

static void hr_zap_reply(void *s, const char *req_id, size_t req_len, const char *code,
                         const char *text, const char *user) {
    zmq_send(s, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(s, req_id, req_len, ZMQ_SNDMORE);
    zmq_send(s, code, strlen(code), ZMQ_SNDMORE);
    zmq_send(s, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(s, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(s, "", 0, 0);
}

static void hr_zap_handle(hr_ring_keys *k) {
    /* version, request id, domain, address, identity, mechanism, credentials */
    char part[7][256];
    int len[7] = {0}, n = 0, more = 1;
    while (more) {
        int r = zmq_recv(k->zap, n < 7 ? part[n] : part[6], 255, 0);
        if (r < 0)
            return;
        if (n < 7)
            len[n] = r > 255 ? 255 : r;
        n++;
        size_t ml = sizeof more;
        zmq_getsockopt(k->zap, ZMQ_RCVMORE, &more, &ml);
    }
    if (n < 6)
        return;
    for (int i = 0; i < 6; i++)
        part[i][len[i]] = 0;
    char name[80] = "", key[HR_RING_KEY_LEN] = "?";
    bool curve = strcmp(part[5], "CURVE") == 0 && n >= 7 && len[6] == 32;
    if (curve)
        zmq_z85_encode(key, (const uint8_t *)part[6], 32);
    bool pair_domain = strcmp(part[2], "hearth-pair") == 0;
    pthread_mutex_lock(&k->mu);
    if (pair_domain && k->pairing)
        hr_keys_load_join(k); /* `hearth key rotate-join` may have replaced it */
    bool pairing = curve && pair_domain && k->pairing && memcmp(part[6], k->pair_pub, 32) == 0;
    bool expired = pairing && k->pair_expires > 0 && (long long)time(NULL) >= k->pair_expires;
    pthread_mutex_unlock(&k->mu);
    if (expired) {
        HR_LOG_WARN(TAG,
                    "%s: refused pairing from %s: the join token expired; `hearth key token` on "
                    "this machine prints a new one",
                    k->who, part[3]);
        atomic_fetch_add(&k->refused, 1);
        hr_zap_reply(k->zap, part[1], (size_t)len[1], "400", "join token expired", "");
        return;
    }
    if (pairing) {
        HR_LOG_INFO(TAG, "%s: join token holder connected from %s (may only pair)", k->who,
                    part[3]);
        hr_zap_reply(k->zap, part[1], (size_t)len[1], "200", "OK", "pairing");
        return;
    }
    if (curve && hr_keys_admit(k, (const uint8_t *)part[6], name, sizeof name)) {
        HR_LOG_DEBUG(TAG, "%s: admitted %s (%s) from %s", k->who, key, name, part[3]);
        hr_zap_reply(k->zap, part[1], (size_t)len[1], "200", "OK", key);
        return;
    }
    atomic_fetch_add(&k->refused, 1);
    /* once per key (a peer retries every few seconds), once a minute without one */
    double now = hr_now_s();
    if (curve && hr_keys_log_gate(k, (const uint8_t *)part[6])) {
        HR_LOG_WARN(TAG,
                    "%s: refused a join attempt from %s: its key %s is not trusted here. If the "
                    "device is yours, pair it: here `hearth trust add NAME '%s'`, or start it with "
                    "--join TOKEN (the join token this head printed)",
                    k->who, part[3], key, key);
    } else if (!curve && now - k->last_log > 60.0) {
        HR_LOG_WARN(TAG, "%s: refused a %s peer from %s: only CURVE peers with trusted keys",
                    k->who, part[5], part[3]);
        k->last_log = now;
    }
    hr_zap_reply(k->zap, part[1], (size_t)len[1], "400", "untrusted key", "");
}

static void *hr_zap_main(void *arg) {
    hr_ring_keys *k = arg;
    while (!atomic_load(&k->zap_stop)) {
        zmq_pollitem_t it = {.socket = k->zap, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 100) > 0 && (it.revents & ZMQ_POLLIN))
            hr_zap_handle(k);
    }
    zmq_close(k->zap);
    k->zap = NULL;
    return NULL;
}

int hr_ring_keys_zap_start(hr_ring_keys *k, void *zctx, const char *who, char err[HR_ERR_LEN]) {
    if (k->zap_started)
        return hr_seterr(err, HR_EINVAL, "ZAP handler already running");
    snprintf(k->who, sizeof k->who, "%s", who ? who : "agent");
    k->zap = zmq_socket(zctx, ZMQ_REP);
    int zero = 0;
    if (!k->zap || zmq_setsockopt(k->zap, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(k->zap, "inproc://zeromq.zap.01") != 0) {
        int rc =
            hr_seterr(err, HR_ENET, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
        if (k->zap)
            zmq_close(k->zap);
        k->zap = NULL;
        return rc;
    }
    if (pthread_create(&k->th, NULL, hr_zap_main, k) != 0) {
        zmq_close(k->zap);
        k->zap = NULL;
        return hr_seterr(err, HR_EINTERNAL, "cannot start the ZAP thread");
    }
    k->zap_started = true;
    return 0;
}

void hr_ring_keys_close(hr_ring_keys *k) {
    if (!k)
        return;
    if (k->zap_started) {
        atomic_store(&k->zap_stop, 1);
        pthread_join(k->th, NULL);
    }
    pthread_mutex_destroy(&k->mu);
    memset(k->sec, 0, sizeof k->sec);
    free(k);
}

int hr_ring_secure_server(void *sock, const hr_ring_keys *k, char err[HR_ERR_LEN]) {
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->sec, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "hearth", 6) != 0)
        return hr_seterr(err, HR_ENET, "cannot make a CURVE server: %s", zmq_strerror(zmq_errno()));
    return 0;
}

int hr_ring_secure_server_pairing(void *sock, const hr_ring_keys *k, char err[HR_ERR_LEN]) {
    int rc = hr_ring_secure_server(sock, k, err);
    if (rc == 0 && zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "hearth-pair", 11) != 0)
        rc = hr_seterr(err, HR_ENET, "ZAP domain: %s", zmq_strerror(zmq_errno()));
    return rc;
}

/* dir/join: "SECRET [EXPIRES]" (Z85 pairing secret, unix seconds; 0 or
 * absent = no expiry, as files written before expiries). 0 when valid. */
static int hr_join_read(const char *dir, char sec[HR_RING_KEY_LEN], long long *expires) {
    char path[HR_PATH_LEN + 8], line[128] = "";
    snprintf(path, sizeof path, "%s/join", dir);
    *expires = 0;
    sec[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return HR_ENOENT;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    char s[64] = "";
    long long e = 0;
    int n = sscanf(line, "%63s %lld", s, &e);
    uint8_t b[32];
    if (n < 1 || strlen(s) != 40 || !zmq_z85_decode(b, s))
        return HR_EFORMAT;
    snprintf(sec, HR_RING_KEY_LEN, "%s", s);
    *expires = n == 2 && e > 0 ? e : 0;
    return 0;
}

/* A new pairing secret in dir/join, valid for ttl_s seconds (0: no expiry). */
static int hr_join_write(const char *dir, long long ttl_s, char err[HR_ERR_LEN]) {
    char path[HR_PATH_LEN + 8], tmp[HR_PATH_LEN + 32], pub[HR_RING_KEY_LEN], sec[HR_RING_KEY_LEN],
        line[128];
    snprintf(path, sizeof path, "%s/join", dir);
    snprintf(tmp, sizeof tmp, "%s/join.%d", dir, (int)getpid());
    if (zmq_curve_keypair(pub, sec) != 0)
        return hr_seterr(err, HR_EUNSUPPORTED, "no CURVE support");
    int n = snprintf(line, sizeof line, "%s %lld\n", sec,
                     ttl_s > 0 ? (long long)time(NULL) + ttl_s : 0LL);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    bool ok = fd >= 0 && write(fd, line, (size_t)n) == n;
    if (fd >= 0)
        ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return hr_seterr(err, HR_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

/* Loads dir/join into k's pairing state when the file changed (k->mu held). */
static void hr_keys_load_join(hr_ring_keys *k) {
    char path[HR_PATH_LEN + 8], sec[HR_RING_KEY_LEN], pub[HR_RING_KEY_LEN];
    snprintf(path, sizeof path, "%s/join", k->dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        k->pairing = false;
        return;
    }
    if (st.st_mtim.tv_sec == k->join_mtime.tv_sec && st.st_mtim.tv_nsec == k->join_mtime.tv_nsec)
        return;
    k->join_mtime = st.st_mtim;
    long long expires = 0;
    if (hr_join_read(k->dir, sec, &expires) != 0 || zmq_curve_public(pub, sec) != 0) {
        k->pairing = false;
        return;
    }
    zmq_z85_decode(k->pair_pub, pub);
    k->pair_expires = expires;
}

int hr_ring_keys_join_token(hr_ring_keys *k, char *out, size_t cap, char err[HR_ERR_LEN]) {
    char sec[HR_RING_KEY_LEN] = "";
    long long expires = 0;
    int rc = hr_join_read(k->dir, sec, &expires);
    if (rc != 0 || (expires > 0 && expires <= (long long)time(NULL))) { /* none, or expired */
        if ((rc = hr_join_write(k->dir, HR_RING_JOIN_TTL_S, err)))
            return rc;
        if (hr_join_read(k->dir, sec, &expires) != 0)
            return hr_seterr(err, HR_EIO, "%s/join: cannot read back the pairing secret", k->dir);
    }
    pthread_mutex_lock(&k->mu);
    k->join_mtime = (struct timespec){0};
    hr_keys_load_join(k);
    k->pairing = true;
    pthread_mutex_unlock(&k->mu);
    int n = snprintf(out, cap, "HJ1%s%s", k->pub, sec);
    return n < 0 || (size_t)n >= cap ? hr_seterr(err, HR_ERANGE, "token buffer too small") : 0;
}

int hr_ring_keys_join_rotate(hr_ring_keys *k, long long ttl_s, char *out, size_t cap,
                             char err[HR_ERR_LEN]) {
    int rc = hr_join_write(k->dir, ttl_s, err);
    return rc ? rc : hr_ring_keys_join_token(k, out, cap, err);
}

long long hr_ring_keys_join_expires(hr_ring_keys *k) {
    pthread_mutex_lock(&k->mu);
    long long e = k->pair_expires;
    pthread_mutex_unlock(&k->mu);
    return e;
}

int hr_ring_join_parse(const char *token, char head_pub[HR_RING_KEY_LEN],
                       char pair_sec[HR_RING_KEY_LEN]) {
    if (!token || strlen(token) != 83 || strncmp(token, "HJ1", 3) != 0)
        return HR_EINVAL;
    memcpy(head_pub, token + 3, 40);
    head_pub[40] = 0;
    memcpy(pair_sec, token + 43, 40);
    pair_sec[40] = 0;
    uint8_t b[32];
    return hr_ring_key_valid(head_pub) && zmq_z85_decode(b, pair_sec) ? 0 : HR_EINVAL;
}

int hr_ring_secure_client_pairing(void *sock, const char *pair_sec, const char *server_pub,
                                  char err[HR_ERR_LEN]) {
    char pub[HR_RING_KEY_LEN];
    if (zmq_curve_public(pub, pair_sec) != 0)
        return hr_seterr(err, HR_EINVAL, "bad join token secret");
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, pair_sec, 40) != 0)
        return hr_seterr(err, HR_ENET, "cannot make a CURVE client: %s", zmq_strerror(zmq_errno()));
    return 0;
}

int hr_ring_secure_client(void *sock, const hr_ring_keys *k, const char *server_pub,
                          char err[HR_ERR_LEN]) {
    if (!hr_ring_key_valid(server_pub))
        return hr_seterr(err, HR_EINVAL, "no valid public key for the server ('%s')",
                         server_pub ? server_pub : "");
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->sec, 40) != 0)
        return hr_seterr(err, HR_ENET, "cannot make a CURVE client: %s", zmq_strerror(zmq_errno()));
    return 0;
}
