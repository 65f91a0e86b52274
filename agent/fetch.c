/* fetch.c - a worker without the model file fetches the bytes it needs
 * from the head: the model's facts (size, fingerprint, header length), the
 * header and tensor table, then the windows of each plan, as FETCH / CHUNK
 * messages over the encrypted control link, several chunks in flight, each
 * checked against its BLAKE2b-256 before it lands in the cache (cache.c).
 * A chunk whose bytes do not match is fetched again. The same pump serves
 * the start (hr_fetch_sync, before JOIN) and the control loop (worker.c,
 * between heartbeats). The head's side (hr_fetch_serve) answers FETCH. */
#include "agent/agent-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "mmap/stream.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "fetch"
#define HR_FETCH_STALL_S 5.0  /* no chunk for this long: ask again for those in flight */
#define HR_FETCH_GIVE_UP_S 60 /* no chunk for this long: the fetch fails */
#define HR_FETCH_TRIES 5      /* corrupt copies of one chunk before giving up */

void hr_fetch_reset(hr_fetch *f) {
    free(f->chunks);
    hr_cache *c = f->cache;
    uint64_t size = f->size, hash = f->hash, tb = f->tot_bytes, tw = f->tot_wire;
    double ts = f->tot_s;
    if (f->active) /* given up or replaced half way */
        ts += hr_now_s() - f->t0;
    memset(f, 0, sizeof *f);
    f->cache = c;
    f->size = size;
    f->hash = hash;
    f->tot_bytes = tb;
    f->tot_wire = tw;
    f->tot_s = ts;
}

void hr_fetch_begin(hr_fetch *f, uint64_t *chunks, long n, uint64_t want_bytes,
                    uint64_t miss_bytes) {
    hr_fetch_reset(f);
    f->chunks = chunks;
    f->n = n;
    f->active = n > 0;
    f->want_bytes = want_bytes;
    f->miss_bytes = miss_bytes;
    f->done_bytes = want_bytes - miss_bytes;
    f->t0 = f->last_progress_s = f->last_log_s = hr_now_s();
}

/* Asks for the chunk at off (f->chunks and f->inflight hold offsets). */
static int hr_fetch_ask(const hr_fetch *f, void *sock, uint64_t off, char err[HR_ERR_LEN]) {
    hr_msg m;
    hr_msg_fetch fm = {.off = off, .len = (uint32_t)hr_cache_chunk_len(f->cache, off)};
    int rc = hr_msg_fetch_encode(&m, &fm, err);
    return rc ? rc : hr_msg_send(sock, NULL, 0, &m, err);
}

/* Asks for chunks until HR_FETCH_DEPTH are in flight. */
static void hr_fetch_pump(hr_fetch *f, void *sock) {
    char err[HR_ERR_LEN];
    while (f->n_inflight < HR_FETCH_DEPTH && f->next < f->n) {
        uint64_t idx = f->chunks[f->next];
        if (hr_fetch_ask(f, sock, idx, err) != 0) {
            HR_LOG_DEBUG(TAG, "FETCH of the chunk at %llu: %s", (unsigned long long)idx, err);
            return; /* the stall timer asks again */
        }
        f->inflight[f->n_inflight] = idx;
        f->tries[f->n_inflight++] = 0;
        f->next++;
    }
}

void hr_fetch_start(hr_fetch *f, void *sock) { hr_fetch_pump(f, sock); }

static void hr_fetch_log(hr_fetch *f, const char *who, bool last) {
    double now = hr_now_s(), dt = now - f->t0;
    HR_LOG_INFO(
        TAG, "%s: %s model bytes: %.1f / %.1f MiB verified, %.1f MiB received, %.1f MiB/s%s", who,
        last ? "fetched" : "fetching", f->done_bytes / 1048576.0, f->want_bytes / 1048576.0,
        f->wire_bytes / 1048576.0, dt > 0 ? f->wire_bytes / 1048576.0 / dt : 0.0,
        f->corrupt ? " (corrupt chunks fetched again)" : "");
    f->last_log_s = now;
}

int hr_fetch_on_chunk(hr_fetch *f, void *sock, const hr_ring_hdr *h, const void *pl,
                      const char *who, char err[HR_ERR_LEN]) {
    hr_msg_chunk ch;
    int rc = hr_msg_chunk_decode(h, pl, &ch, err);
    if (rc)
        return rc;
    if (!f->active || ch.len == 0)
        return 0; /* a late duplicate or a facts answer: nothing to do */
    if (ch.model_size != f->size || ch.model_hash != f->hash)
        return hr_seterr(err, HR_EDENIED,
                         "the head now serves another model (%llu bytes, hash %016llx)",
                         (unsigned long long)ch.model_size, (unsigned long long)ch.model_hash);
    f->wire_bytes += ch.len;
    f->tot_wire += ch.len;
    uint64_t idx = ch.off;
    int slot = -1;
    for (int i = 0; i < f->n_inflight; i++)
        if (f->inflight[i] == idx)
            slot = i;
    if (slot < 0)
        return 0; /* not asked for (a duplicate after a resend) */
    char e2[HR_ERR_LEN];
    rc = hr_cache_put(f->cache, ch.off, ch.data, ch.len, ch.hash, e2);
    if (rc == HR_EFORMAT) { /* corrupt in transit: ask again */
        f->corrupt++;
        HR_LOG_WARN(TAG, "%s: %s; fetching it again", who, e2);
        if (++f->tries[slot] >= HR_FETCH_TRIES)
            return hr_seterr(err, HR_EIO, "chunk at %llu arrived corrupt %d times",
                             (unsigned long long)idx, HR_FETCH_TRIES);
        if ((rc = hr_fetch_ask(f, sock, idx, e2)))
            HR_LOG_DEBUG(TAG, "FETCH again: %s", e2);
        return 0;
    }
    if (rc)
        return hr_seterr(err, rc, "%s", e2);
    f->inflight[slot] = f->inflight[--f->n_inflight];
    f->tries[slot] = f->tries[f->n_inflight];
    f->done_bytes += ch.len;
    f->tot_bytes += ch.len;
    f->n_done++;
    f->last_progress_s = hr_now_s();
    hr_fetch_pump(f, sock);
    if (f->n_inflight == 0 && f->next == f->n) {
        f->active = false;
        f->done_s = hr_now_s() - f->t0;
        f->tot_s += f->done_s;
        hr_fetch_log(f, who, true);
        return 1;
    }
    if (f->last_progress_s - f->last_log_s >= 2.0)
        hr_fetch_log(f, who, false);
    return 0;
}

int hr_fetch_tick(hr_fetch *f, void *sock, char err[HR_ERR_LEN]) {
    if (!f->active)
        return 0;
    double now = hr_now_s();
    if (now - f->last_progress_s > HR_FETCH_GIVE_UP_S)
        return hr_seterr(err, HR_ETIMEDOUT, "no model bytes from the head for %d s",
                         HR_FETCH_GIVE_UP_S);
    if (now - f->last_progress_s > HR_FETCH_STALL_S && now - f->last_ask_s > HR_FETCH_STALL_S) {
        char e2[HR_ERR_LEN];
        for (int i = 0; i < f->n_inflight; i++)
            if (hr_fetch_ask(f, sock, f->inflight[i], e2))
                HR_LOG_DEBUG(TAG, "FETCH again: %s", e2);
        f->last_ask_s = now;
        hr_fetch_pump(f, sock);
    }
    return 0;
}

int hr_fetch_sync(hr_fetch *f, void *sock, const atomic_int *stop, const char *who,
                  char err[HR_ERR_LEN]) {
    size_t cap = HR_RING_HDR_SIZE + HR_MSG_CHUNK_HDR + HR_MSG_CHUNK_MAX;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    hr_fetch_pump(f, sock);
    int rc = 0;
    while (f->active && rc == 0) {
        if (atomic_load(stop)) {
            rc = hr_seterr(err, HR_ECANCELED, "stopped while fetching");
            break;
        }
        hr_ring_hdr h;
        char e2[HR_ERR_LEN] = "";
        long n = hr_ring_recv(sock, NULL, NULL, buf, cap, 200, &h, e2);
        if (n > 0 && h.type == HR_RING_CHUNK)
            rc = hr_fetch_on_chunk(f, sock, &h, buf + HR_RING_HDR_SIZE, who, err);
        else if (n < 0)
            HR_LOG_WARN(TAG, "%s: bad frame from the head: %s", who, e2);
        if (rc == 0)
            rc = hr_fetch_tick(f, sock, err);
    }
    free(buf);
    return rc < 0 ? rc : 0;
}

int hr_fetch_facts(void *sock, uint64_t *size, uint64_t *hash, uint32_t *data_off,
                   const atomic_int *stop, int timeout_ms, char err[HR_ERR_LEN]) {
    hr_msg m;
    hr_msg_fetch fm = {0};
    int rc = hr_msg_fetch_encode(&m, &fm, err);
    if (rc || (rc = hr_msg_send(sock, NULL, 0, &m, err)))
        return rc;
    uint8_t buf[HR_RING_HDR_SIZE + 4096];
    double until = hr_now_s() + timeout_ms / 1000.0, resend = hr_now_s() + 1.0;
    while (hr_now_s() < until && !atomic_load(stop)) {
        hr_ring_hdr h;
        char e2[HR_ERR_LEN];
        long n = hr_ring_recv(sock, NULL, NULL, buf, sizeof buf, 200, &h, e2);
        hr_msg_chunk ch;
        if (n > 0 && h.type == HR_RING_CHUNK &&
            hr_msg_chunk_decode(&h, buf + HR_RING_HDR_SIZE, &ch, e2) == 0 && ch.len == 0) {
            *size = ch.model_size;
            *hash = ch.model_hash;
            *data_off = ch.data_offset;
            return 0;
        }
        hr_msg_reject rj;
        if (n > 0 && h.type == HR_RING_REJECT &&
            hr_msg_reject_decode(&h, buf + HR_RING_HDR_SIZE, &rj, e2) == 0)
            return hr_seterr(err, HR_EDENIED, "head refused: %s", rj.reason);
        if (hr_now_s() > resend) { /* CURVE may have taken the first one's place */
            if (hr_msg_fetch_encode(&m, &fm, e2) == 0)
                hr_msg_send(sock, NULL, 0, &m, e2);
            resend = hr_now_s() + 2.0;
        }
    }
    return hr_seterr(err, HR_ETIMEDOUT, "no answer about the model from the head within %d s",
                     timeout_ms / 1000);
}

/* ---- the head's side ---- */

/* HR_TEST_CORRUPT_CHUNK=N: TEST ONLY: the head flips one byte of the Nth
 * chunk it sends (after hashing it), so the worker must fetch it again. */
static long hr_fetch_test_corrupt(void) {
    const char *v = getenv("HR_TEST_CORRUPT_CHUNK");
    return v ? strtol(v, NULL, 10) : 0;
}

void hr_fetch_serve(hr_agent *a, const uint8_t *id, size_t idl, const char *user,
                    const hr_ring_hdr *h, const char *pl, hr_fetch_served *sv) {
    hr_msg_fetch fm;
    char err[HR_ERR_LEN];
    if (hr_msg_fetch_decode(h, pl, &fm, err)) {
        HR_LOG_WARN(TAG, "bad FETCH ignored: %s", err);
        return;
    }
    uint64_t size = a->model_size;
    hr_msg_chunk ch = {.model_size = size,
                       .model_hash = a->model_hash,
                       .data_offset = (uint32_t)hr_gguf_data_offset(a->g)};
    uint8_t *copy = NULL;
    if (fm.len) {
        if (fm.off >= size) {
            HR_LOG_WARN(TAG, "FETCH beyond the model (%llu of %llu bytes) ignored",
                        (unsigned long long)fm.off, (unsigned long long)size);
            return;
        }
        ch.off = fm.off;
        ch.len = fm.len < size - fm.off ? fm.len : (uint32_t)(size - fm.off);
        ch.data = (const uint8_t *)hr_gguf_base(a->g) + ch.off;
        crypto_generichash(ch.hash, HR_MSG_HASH_LEN, ch.data, ch.len, NULL, 0);
        static long corrupt_at = -1;
        if (corrupt_at < 0)
            corrupt_at = hr_fetch_test_corrupt();
        if (corrupt_at > 0 && ++sv->test_count == (uint64_t)corrupt_at && (copy = malloc(ch.len))) {
            memcpy(copy, ch.data, ch.len);
            copy[ch.len / 2] ^= 0x40;
            ch.data = copy;
            HR_LOG_WARN(TAG, "HR_TEST_CORRUPT_CHUNK: chunk at %llu sent corrupt (test only)",
                        (unsigned long long)ch.off);
        }
    }
    hr_msg m;
    int rc = hr_msg_chunk_encode(&m, &ch, err);
    free(copy);
    if (rc == 0)
        rc = hr_msg_send(a->ctrl, id, idl, &m, err);
    if (rc) {
        HR_LOG_DEBUG(TAG, "CHUNK to a fetching peer: %s", err);
        return;
    }
    /* progress per fetching key */
    double now = hr_now_s();
    int k = -1;
    for (int i = 0; i < sv->n; i++)
        if (strcmp(sv->peer[i].key, user) == 0)
            k = i;
    if (k < 0) {
        k = sv->n < HR_FETCH_PEERS ? sv->n++ : 0;
        memset(&sv->peer[k], 0, sizeof sv->peer[k]);
        snprintf(sv->peer[k].key, sizeof sv->peer[k].key, "%s", user);
        sv->peer[k].t0 = sv->peer[k].log_s = now;
    }
    hr_fetch_peer *p = &sv->peer[k];
    p->bytes += ch.len;
    p->last_s = now;
    if (ch.len && (now - p->log_s >= 2.0)) {
        HR_LOG_INFO(TAG, "serving model bytes to %.8s...: %.1f MiB sent, %.1f MiB/s",
                    p->key[0] ? p->key : "(insecure)", p->bytes / 1048576.0,
                    p->bytes / 1048576.0 / (now - p->t0 > 1e-3 ? now - p->t0 : 1e-3));
        p->log_s = now;
    }
}

/* ---- start of a worker without the model file ---- */

/* The cache folder: --cache-dir, $HEARTH_CACHE_DIR, ~/.cache/hearth. */
static void hr_fetch_cache_dir(const hr_agent *a, char *out, size_t cap) {
    const char *d = a->p.cache_dir ? a->p.cache_dir : getenv("HEARTH_CACHE_DIR");
    const char *home = getenv("HOME");
    if (d && *d)
        snprintf(out, cap, "%s", d);
    else
        snprintf(out, cap, "%s/.cache/hearth", home && *home ? home : "/tmp");
}

/* The exact bytes of each layer's tensors (not widened to pages, unlike
 * hr_stream_window_range): a->layer_off/len[n_layer]. HR_EFORMAT when two
 * layers' ranges overlap (tensors not stored layer by layer). */
static int hr_fetch_layer_ranges(hr_agent *a, char err[HR_ERR_LEN]) {
    int nl = hr_model_hparams(a->m)->n_layer;
    a->layer_off = calloc((size_t)nl, sizeof *a->layer_off);
    a->layer_len = calloc((size_t)nl, sizeof *a->layer_len);
    uint64_t *hi = calloc((size_t)nl, sizeof *hi);
    if (!a->layer_off || !a->layer_len || !hi) {
        free(hi);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    for (int il = 0; il < nl; il++)
        a->layer_off[il] = UINT64_MAX;
    for (int64_t i = 0; i < hr_gguf_n_tensors(a->g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(a->g, i);
        int il;
        if (sscanf(t->name, "blk.%d.", &il) != 1 || il < 0 || il >= nl)
            continue;
        if (t->offset < a->layer_off[il])
            a->layer_off[il] = t->offset;
        if (t->offset + t->size > hi[il])
            hi[il] = t->offset + t->size;
    }
    int rc = 0;
    for (int il = 0; il < nl && rc == 0; il++) {
        if (a->layer_off[il] == UINT64_MAX)
            rc = hr_seterr(err, HR_EFORMAT, "layer %d has no tensors", il);
        else
            a->layer_len[il] = hi[il] - a->layer_off[il];
        for (int j = 0; j < il && rc == 0; j++)
            if (a->layer_off[il] < a->layer_off[j] + a->layer_len[j] &&
                a->layer_off[j] < a->layer_off[il] + a->layer_len[il])
                rc = hr_seterr(err, HR_EFORMAT, "layers %d and %d overlap", j, il);
    }
    free(hi);
    return rc;
}

/* The chunk layout once the header is here: the header, rope_freqs and each
 * layer's bytes (a window is whole layers, so whole chunks); a plain grid
 * over the file when those ranges overlap (an unusual tensor order). */
static int hr_fetch_layout(hr_agent *a, uint64_t data_off, char err[HR_ERR_LEN]) {
    int nl = hr_model_hparams(a->m)->n_layer;
    uint64_t *off = calloc((size_t)nl + 2, sizeof *off), *len = calloc((size_t)nl + 2, sizeof *len);
    if (!off || !len) {
        free(off);
        free(len);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    int n = 0;
    off[n] = 0;
    len[n++] = data_off;
    if (a->rope_len) {
        off[n] = a->rope_off;
        len[n++] = a->rope_len;
    }
    char e2[HR_ERR_LEN];
    int rc = hr_fetch_layer_ranges(a, e2);
    for (int il = 0; il < nl && rc == 0; il++, n++) {
        off[n] = a->layer_off[il];
        len[n] = a->layer_len[il];
    }
    if (rc == 0)
        rc = hr_cache_set_layout(a->cache, off, len, n, true, e2);
    if (rc) {
        HR_LOG_WARN(TAG, "%s: %s; fetching whole %u-byte chunks of the file instead", a->name, e2,
                    HR_MSG_CHUNK_MAX);
        free(a->layer_off);
        free(a->layer_len);
        a->layer_off = a->layer_len = NULL;
        off[0] = 0;
        len[0] = a->model_size;
        rc = hr_cache_set_layout(a->cache, off, len, 1, true, err);
    }
    free(off);
    free(len);
    return rc;
}

/* Fetches ranges off[n]/len[n] now, on this thread. */
static int hr_fetch_now(hr_agent *a, void *sock, const uint64_t *off, const uint64_t *len, int n,
                        char err[HR_ERR_LEN]) {
    uint64_t *chunks = NULL, want = 0, miss = 0;
    long nc = 0;
    int rc = hr_cache_want(a->cache, off, len, n, &chunks, &nc, &want, &miss, err);
    if (rc)
        return rc;
    hr_fetch_begin(&a->fetch, chunks, nc, want, miss);
    rc = a->fetch.active ? hr_fetch_sync(&a->fetch, sock, &a->stop, a->name, err) : 0;
    if (rc == 0)
        HR_LOG_INFO(TAG, "%s: at start: %llu bytes wanted, %llu of them fetched", a->name,
                    (unsigned long long)want, (unsigned long long)miss);
    hr_fetch_reset(&a->fetch);
    return rc;
}

int hr_fetch_bootstrap(hr_agent *a, char err[HR_ERR_LEN]) {
    hr_ring_sockopt so = hr_ring_sockopt_default();
    so.max_msg = HR_RING_HDR_SIZE + HR_MSG_CHUNK_HDR + HR_MSG_CHUNK_MAX + 1024;
    so.snd_timeout_ms = 1000;
    void *s = hr_ring_socket(a->zctx, HR_RING_DEALER, &so, err);
    if (!s)
        return HR_ENET;
    int rc = a->keys ? hr_ring_secure_client(s, a->keys, a->head_key, err) : 0;
    if (rc == 0)
        rc = hr_ring_connect(s, a->head_ep, err);
    uint64_t size = 0, hash = 0;
    uint32_t data_off = 0;
    double t0 = hr_now_s();
    bool said = false;
    while (rc == 0) {
        if (said || hr_worker_no_head_key(a)) /* as a JOIN does (worker.c) */
            hr_worker_knock(a);
        rc = hr_fetch_facts(s, &size, &hash, &data_off, &a->stop, 10000, err);
        if (rc != HR_ETIMEDOUT || atomic_load(&a->stop))
            break;
        if (!said)
            hr_worker_warn_unpaired(a, hr_now_s() - t0);
        said = true;
        HR_LOG_INFO(TAG, "%s: %s; asking again", a->name, err);
        rc = 0;
    }
    char dir[400];
    hr_fetch_cache_dir(a, dir, sizeof dir);
    if (rc == 0 && (data_off == 0 || data_off > size))
        rc = hr_seterr(err, HR_EFORMAT, "the head reports a model of %llu bytes with data at %u",
                       (unsigned long long)size, data_off);
    if (rc == 0)
        rc = hr_cache_open(&a->cache, dir, size, hash, (uint64_t)(a->p.cache_gb * 1073741824.0),
                           err);
    if (rc == 0) {
        HR_LOG_INFO(TAG,
                    "%s: no model file here: fetching from head %s into %s (%.1f MiB model, "
                    "hash %016llx)",
                    a->name, a->head_ep, hr_cache_path(a->cache), size / 1048576.0,
                    (unsigned long long)hash);
        a->fetch.cache = a->cache;
        a->fetch.size = size;
        a->fetch.hash = hash;
        uint64_t off = 0, len = data_off;
        rc = hr_cache_set_layout(a->cache, &off, &len, 1, false, err);
        if (rc == 0)
            rc = hr_fetch_now(a, s, &off, &len, 1, err);
    }
    if (rc == 0 && ((rc = hr_gguf_open(&a->g, hr_cache_path(a->cache), err)) == 0)) {
        a->model_size = hr_gguf_file_size(a->g);
        a->model_hash =
            hr_ring_hash(hr_gguf_base(a->g), (size_t)hr_gguf_data_offset(a->g), a->model_size);
        if (a->model_size != size || a->model_hash != hash)
            rc = hr_seterr(err, HR_EFORMAT,
                           "the fetched header does not give the head's "
                           "fingerprint (%016llx, want %016llx)",
                           (unsigned long long)a->model_hash, (unsigned long long)hash);
    }
    const hr_gguf_tensor *rf = rc == 0 ? hr_gguf_find_tensor(a->g, "rope_freqs.weight") : NULL;
    if (rf) {
        a->rope_off = rf->offset;
        a->rope_len = rf->size;
    }
    if (rc == 0 && rf) /* the model copies it at load: it must be here first */
        rc = hr_fetch_now(a, s, &a->rope_off, &a->rope_len, 1, err);
    if (rc == 0)
        rc = hr_model_load(&a->m, a->g, err);
    if (rc == 0)
        rc = hr_fetch_layout(a, data_off, err);
    hr_ring_close(s);
    return rc;
}

int hr_fetch_plan_ranges(const hr_agent *a, const hr_local_plan *np, uint64_t *off, uint64_t *len) {
    int n = 0;
    off[n] = 0;
    len[n++] = hr_gguf_data_offset(a->g);
    if (a->rope_len) {
        off[n] = a->rope_off;
        len[n++] = a->rope_len;
    }
    for (int r = 0; r < np->k && r < HR_AGENT_MAX_K; r++) {
        int b = np->first[r], e = b + np->count[r];
        if (np->count[r] <= 0)
            continue;
        if (a->layer_off && e <= hr_model_hparams(a->m)->n_layer) { /* its tensors, exactly */
            uint64_t lo = UINT64_MAX, hi = 0;
            for (int il = b; il < e; il++) {
                lo = a->layer_off[il] < lo ? a->layer_off[il] : lo;
                hi = a->layer_off[il] + a->layer_len[il] > hi ? a->layer_off[il] + a->layer_len[il]
                                                              : hi;
            }
            off[n] = lo;
            len[n++] = hi - lo;
        } else if (np->win_len[r]) {
            off[n] = np->win_off[r];
            len[n++] = np->win_len[r];
        }
    }
    return n;
}
