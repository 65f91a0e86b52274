/* cache.c - a worker's local copy of the head's model, for workers started
 * without the model file.
 *
 * Layout: a sparse file of the model's full size, each byte at its offset
 * in the original (DIR/<size>-<hash>.gguf), so hr_gguf_open, the windows'
 * byte ranges, prefetch and release work on it unchanged; bytes never
 * fetched are holes. Next to it a sidecar (.chunks) lists the chunks held:
 * a text line per chunk ("c OFF LEN HASH", the BLAKE2b-256 the head sent;
 * chunks are the header and each layer's bytes cut in pieces of at most
 * HR_MSG_CHUNK_MAX, so a window is whole chunks and fetching it fetches
 * exactly its bytes) and per window wanted ("w OFF LEN", oldest
 * first; eviction takes whole windows, oldest first). Lines are appended as
 * chunks are written, so a killed worker resumes with what it had; at open
 * every chunk listed is hashed again and dropped when its bytes differ (a
 * torn write, a corrupted disk), and the sidecar is rewritten clean. */
#include "agent/agent-impl.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "cache"
#define HR_CACHE_MAX_WIN 256

typedef struct {
    uint64_t off, len;
} hr_range;

struct hr_cache {
    int fd, side; /* the sparse copy, the sidecar (O_APPEND) */
    char path[512], side_path[520];
    uint64_t size, hash, n_chunks, limit; /* limit: bytes held at most, 0 = no limit */
    hr_range *unit;                       /* [n_chunks] the chunks, by offset */
    uint8_t *have;                        /* [n_chunks] 1 = verified */
    uint8_t (*sum)[HR_MSG_HASH_LEN];      /* [n_chunks] hash of each chunk held */
    uint64_t held;                        /* bytes of the chunks held */
    hr_range win[HR_CACHE_MAX_WIN];       /* windows wanted, oldest first */
    int n_win;
};

static uint64_t hr_chunk_len(const hr_cache *c, uint64_t i) { return c->unit[i].len; }
static uint64_t hr_chunk_off(const hr_cache *c, uint64_t i) { return c->unit[i].off; }

/* The chunk starting at off, or -1. */
static long hr_chunk_at(const hr_cache *c, uint64_t off) {
    long lo = 0, hi = (long)c->n_chunks - 1;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        if (c->unit[mid].off == off)
            return mid;
        if (c->unit[mid].off < off)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static void hr_hex(const uint8_t *p, int n, char *out) {
    for (int i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static int hr_unhex(const char *s, uint8_t *p, int n) {
    for (int i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        p[i] = (uint8_t)v;
    }
    return s[2 * n] == 0 || s[2 * n] == '\n' ? 0 : -1;
}

/* Rewrites the sidecar from what is held now (tmp + rename). */
static int hr_cache_rewrite(hr_cache *c, char err[HR_ERR_LEN]) {
    char tmp[540];
    snprintf(tmp, sizeof tmp, "%s.tmp", c->side_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return hr_seterr(err, HR_EIO, "%s: %s", tmp, strerror(errno));
    fprintf(f, "hearth-cache 1 %llu %016llx %u\n", (unsigned long long)c->size,
            (unsigned long long)c->hash, HR_MSG_CHUNK_MAX);
    for (int i = 0; i < c->n_win; i++)
        fprintf(f, "w %llu %llu\n", (unsigned long long)c->win[i].off,
                (unsigned long long)c->win[i].len);
    char hx[2 * HR_MSG_HASH_LEN + 1];
    for (uint64_t i = 0; i < c->n_chunks; i++)
        if (c->have[i]) {
            hr_hex(c->sum[i], HR_MSG_HASH_LEN, hx);
            fprintf(f, "c %llu %llu %s\n", (unsigned long long)hr_chunk_off(c, i),
                    (unsigned long long)hr_chunk_len(c, i), hx);
        }
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, c->side_path) != 0)
        return hr_seterr(err, HR_EIO, "cannot write %s: %s", c->side_path, strerror(errno));
    if (c->side >= 0)
        close(c->side);
    c->side = open(c->side_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    return c->side < 0 ? hr_seterr(err, HR_EIO, "%s: %s", c->side_path, strerror(errno)) : 0;
}

/* Hashes chunk i as it is on disk into out. */
static int hr_cache_hash_chunk(hr_cache *c, uint64_t i, uint8_t *buf,
                               uint8_t out[HR_MSG_HASH_LEN]) {
    uint64_t len = hr_chunk_len(c, i);
    ssize_t n = pread(c->fd, buf, len, (off_t)hr_chunk_off(c, i));
    if (n != (ssize_t)len)
        return -1;
    crypto_generichash(out, HR_MSG_HASH_LEN, buf, len, NULL, 0);
    return 0;
}

/* Reads the sidecar and keeps the chunks whose bytes still hash as listed. */
static void hr_cache_load(hr_cache *c) {
    FILE *f = fopen(c->side_path, "r");
    if (!f)
        return;
    char line[256];
    unsigned long long size = 0, hash = 0;
    unsigned chunk = 0;
    if (!fgets(line, sizeof line, f) ||
        sscanf(line, "hearth-cache 1 %llu %llx %u", &size, &hash, &chunk) != 3 || size != c->size ||
        hash != c->hash || chunk != HR_MSG_CHUNK_MAX) {
        HR_LOG_WARN(TAG, "%s: not this model's sidecar; starting empty", c->side_path);
        fclose(f);
        return;
    }
    uint8_t *buf = malloc(HR_MSG_CHUNK_MAX);
    uint64_t listed = 0, bad = 0, junk = 0;
    while (buf && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        long ci;
        char hx[2 * HR_MSG_HASH_LEN + 2];
        uint8_t want[HR_MSG_HASH_LEN], got[HR_MSG_HASH_LEN];
        if (sscanf(line, "w %llu %llu", &a, &b) == 2 && a <= c->size && b <= c->size - a) {
            if (c->n_win == HR_CACHE_MAX_WIN)
                memmove(c->win, c->win + 1, (HR_CACHE_MAX_WIN - 1) * sizeof c->win[0]), c->n_win--;
            c->win[c->n_win++] = (hr_range){a, b};
        } else if (sscanf(line, "c %llu %llu %65s", &a, &b, hx) == 3 &&
                   strlen(hx) == 2 * HR_MSG_HASH_LEN && hr_unhex(hx, want, HR_MSG_HASH_LEN) == 0) {
            if ((ci = hr_chunk_at(c, a)) < 0 || hr_chunk_len(c, (uint64_t)ci) != b)
                continue; /* a chunk of a finer or other table: not used now */
            listed++;
            if (c->have[ci])
                continue;
            if (hr_cache_hash_chunk(c, (uint64_t)ci, buf, got) == 0 &&
                sodium_memcmp(got, want, HR_MSG_HASH_LEN) == 0) {
                c->have[ci] = 1;
                memcpy(c->sum[ci], want, HR_MSG_HASH_LEN);
                c->held += b;
            } else {
                bad++;
                HR_LOG_WARN(TAG, "%s: chunk at %llu does not match its hash; fetching it again",
                            c->path, a);
            }
        } else if (sscanf(line, "x %llu", &a) == 1) {
            if ((ci = hr_chunk_at(c, a)) >= 0 && c->have[ci]) {
                c->held -= hr_chunk_len(c, (uint64_t)ci);
                c->have[ci] = 0;
            }
        } else {
            junk++;
        }
    }
    free(buf);
    fclose(f);
    if (junk)
        HR_LOG_WARN(TAG, "%s: %llu unreadable lines ignored", c->side_path,
                    (unsigned long long)junk);
    HR_LOG_INFO(TAG, "%s: %.1f MiB held in %llu verified chunks (%llu listed, %llu corrupt)",
                c->path, c->held / 1048576.0, (unsigned long long)(listed - bad),
                (unsigned long long)listed, (unsigned long long)bad);
}

/* mkdir -p of dir (mode 0700). */
static int hr_mkdirs(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0700) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(p, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

int hr_cache_open(hr_cache **out, const char *dir, uint64_t size, uint64_t hash, uint64_t limit,
                  char err[HR_ERR_LEN]) {
    *out = NULL;
    if (size == 0 || size > ((uint64_t)1 << 46))
        return hr_seterr(err, HR_EINVAL, "implausible model size %llu", (unsigned long long)size);
    if (hr_mkdirs(dir) != 0)
        return hr_seterr(err, HR_EIO, "cannot make cache folder %s: %s", dir, strerror(errno));
    hr_cache *c = calloc(1, sizeof *c);
    if (!c)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    c->fd = c->side = -1;
    c->size = size;
    c->hash = hash;
    c->limit = limit;
    snprintf(c->path, sizeof c->path, "%s/%llu-%016llx.gguf", dir, (unsigned long long)size,
             (unsigned long long)hash);
    snprintf(c->side_path, sizeof c->side_path, "%s.chunks", c->path);
    int rc = 0;
    struct stat st;
    if ((c->fd = open(c->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 || fstat(c->fd, &st) != 0 ||
        ((uint64_t)st.st_size != size && ftruncate(c->fd, (off_t)size) != 0))
        rc = hr_seterr(err, HR_EIO, "%s: %s", c->path, strerror(errno));
    if (rc) {
        hr_cache_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void hr_cache_close(hr_cache *c) {
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (c->side >= 0)
        close(c->side);
    free(c->unit);
    free(c->have);
    free(c->sum);
    free(c);
}

/* Appends [off, off + len) cut in pieces of HR_MSG_CHUNK_MAX to u. */
static size_t hr_cut(hr_range *u, size_t n, uint64_t off, uint64_t len) {
    for (uint64_t o = 0; o < len; o += HR_MSG_CHUNK_MAX)
        u[n++] = (hr_range){off + o, len - o < HR_MSG_CHUNK_MAX ? len - o : HR_MSG_CHUNK_MAX};
    return n;
}

static int hr_range_cmp(const void *x, const void *y) {
    const hr_range *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

int hr_cache_set_layout(hr_cache *c, const uint64_t *off, const uint64_t *len, int n, bool rewrite,
                        char err[HR_ERR_LEN]) {
    size_t cap = 0;
    for (int k = 0; k < n; k++) {
        if (off[k] > c->size || len[k] > c->size - off[k])
            return hr_seterr(err, HR_EFORMAT, "range %llu+%llu outside the model",
                             (unsigned long long)off[k], (unsigned long long)len[k]);
        cap += (size_t)((len[k] + HR_MSG_CHUNK_MAX - 1) / HR_MSG_CHUNK_MAX);
    }
    hr_range *u = malloc((cap ? cap : 1) * sizeof *u);
    uint8_t *have = calloc(cap ? cap : 1, 1);
    uint8_t(*sum)[HR_MSG_HASH_LEN] = calloc(cap ? cap : 1, sizeof *sum);
    if (!u || !have || !sum) {
        free(u);
        free(have);
        free(sum);
        return hr_seterr(err, HR_ENOMEM, "out of memory for %zu chunks", cap);
    }
    size_t m = 0;
    for (int k = 0; k < n; k++)
        m = hr_cut(u, m, off[k], len[k]);
    qsort(u, m, sizeof *u, hr_range_cmp);
    for (size_t i = 1; i < m; i++)
        if (u[i].off < u[i - 1].off + u[i - 1].len) {
            unsigned long long at = (unsigned long long)u[i].off;
            free(u);
            free(have);
            free(sum);
            return hr_seterr(err, HR_EFORMAT, "overlapping ranges at %llu", at);
        }
    free(c->unit);
    free(c->have);
    free(c->sum);
    c->unit = u;
    c->have = have;
    c->sum = sum;
    c->n_chunks = m;
    c->held = 0;
    c->n_win = 0;
    hr_cache_load(c);
    struct stat st;
    if (!rewrite && stat(c->side_path, &st) == 0 && st.st_size > 0) { /* append to it */
        if (c->side < 0 && (c->side = open(c->side_path, O_WRONLY | O_APPEND | O_CLOEXEC)) < 0)
            return hr_seterr(err, HR_EIO, "%s: %s", c->side_path, strerror(errno));
        return 0;
    }
    return hr_cache_rewrite(c, err);
}

const char *hr_cache_path(const hr_cache *c) { return c->path; }
uint64_t hr_cache_held(const hr_cache *c) { return c->held; }

int hr_cache_put(hr_cache *c, uint64_t off, const void *data, uint32_t len,
                 const uint8_t hash[HR_MSG_HASH_LEN], char err[HR_ERR_LEN]) {
    long ci = hr_chunk_at(c, off);
    if (ci < 0 || len != hr_chunk_len(c, (uint64_t)ci))
        return hr_seterr(err, HR_EINVAL, "chunk of %u bytes at %llu is not one of ours", len,
                         (unsigned long long)off);
    uint8_t got[HR_MSG_HASH_LEN];
    crypto_generichash(got, HR_MSG_HASH_LEN, data, len, NULL, 0);
    if (sodium_memcmp(got, hash, HR_MSG_HASH_LEN) != 0)
        return hr_seterr(err, HR_EFORMAT, "chunk at %llu (%u bytes) does not match its hash",
                         (unsigned long long)off, len);
    uint64_t i = (uint64_t)ci;
    if (c->have[i])
        return 0;
    if (pwrite(c->fd, data, len, (off_t)off) != (ssize_t)len)
        return hr_seterr(err, HR_EIO, "%s: write at %llu: %s", c->path, (unsigned long long)off,
                         strerror(errno));
    char line[48 + 2 * HR_MSG_HASH_LEN];
    int n = snprintf(line, sizeof line, "c %llu %u ", (unsigned long long)off, len);
    hr_hex(hash, HR_MSG_HASH_LEN, line + n);
    n += 2 * HR_MSG_HASH_LEN;
    line[n++] = '\n';
    if (write(c->side, line, (size_t)n) != n) /* after the data: a line means bytes written */
        return hr_seterr(err, HR_EIO, "%s: %s", c->side_path, strerror(errno));
    c->have[i] = 1;
    memcpy(c->sum[i], hash, HR_MSG_HASH_LEN);
    c->held += len;
    return 0;
}

static bool hr_overlaps(uint64_t a0, uint64_t a1, const hr_range *r, int n) {
    for (int k = 0; k < n; k++)
        if (r[k].len && a0 < r[k].off + r[k].len && r[k].off < a1)
            return true;
    return false;
}

/* Chunk indices covering ranges r[n] that are not held: appended to out
 * (cap), returns how many (or -1 when cap is short); *bytes their sum. */
static long hr_cache_missing(const hr_cache *c, const hr_range *r, int n, uint64_t *out, size_t cap,
                             uint64_t *bytes, uint64_t *all) {
    size_t m = 0;
    *bytes = *all = 0;
    for (uint64_t i = 0; i < c->n_chunks; i++) {
        uint64_t a0 = hr_chunk_off(c, i), a1 = a0 + hr_chunk_len(c, i);
        if (!hr_overlaps(a0, a1, r, n))
            continue;
        *all += a1 - a0;
        if (c->have[i])
            continue;
        if (out) {
            if (m == cap)
                return -1;
            out[m] = i;
        }
        m++;
        *bytes += a1 - a0;
    }
    return (long)m;
}

/* Drops chunk i (a hole again). */
static void hr_cache_drop(hr_cache *c, uint64_t i) {
    if (!c->have[i])
        return;
    uint64_t len = hr_chunk_len(c, i);
    if (fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)hr_chunk_off(c, i),
                  (off_t)len) != 0)
        HR_LOG_DEBUG(TAG, "%s: cannot punch chunk %llu: %s", c->path, (unsigned long long)i,
                     strerror(errno));
    char line[32];
    int n = snprintf(line, sizeof line, "x %llu\n", (unsigned long long)hr_chunk_off(c, i));
    if (write(c->side, line, (size_t)n) != n)
        HR_LOG_DEBUG(TAG, "%s: %s", c->side_path, strerror(errno));
    c->have[i] = 0;
    c->held -= len;
}

int hr_cache_want(hr_cache *c, const uint64_t *off, const uint64_t *len, int n, uint64_t **chunks,
                  long *n_chunks, uint64_t *want_bytes, uint64_t *miss_bytes,
                  char err[HR_ERR_LEN]) {
    hr_range r[2 * HR_AGENT_MAX_K + 2];
    int nr = 0;
    *want_bytes = 0;
    for (int k = 0; k < n && nr < (int)(sizeof r / sizeof r[0]); k++)
        if (len[k] && off[k] < c->size) {
            r[nr] = (hr_range){off[k], len[k] < c->size - off[k] ? len[k] : c->size - off[k]};
            *want_bytes += r[nr++].len;
        }
    /* remember the windows (most recent last) */
    for (int k = 0; k < nr; k++) {
        for (int j = 0; j < c->n_win; j++)
            if (c->win[j].off == r[k].off && c->win[j].len == r[k].len) {
                memmove(c->win + j, c->win + j + 1, (size_t)(c->n_win - j - 1) * sizeof c->win[0]);
                c->n_win--;
                break;
            }
        if (c->n_win == HR_CACHE_MAX_WIN) {
            memmove(c->win, c->win + 1, (HR_CACHE_MAX_WIN - 1) * sizeof c->win[0]);
            c->n_win--;
        }
        c->win[c->n_win++] = r[k];
        char line[64];
        int ln = snprintf(line, sizeof line, "w %llu %llu\n", (unsigned long long)r[k].off,
                          (unsigned long long)r[k].len);
        if (write(c->side, line, (size_t)ln) != ln)
            HR_LOG_DEBUG(TAG, "%s: %s", c->side_path, strerror(errno));
    }
    uint64_t miss, all;
    long m = hr_cache_missing(c, r, nr, NULL, 0, &miss, &all);
    /* evict whole windows, oldest first, until what is wanted fits */
    for (int j = 0; c->limit && c->held + miss > c->limit && j < c->n_win; j++) {
        hr_range w = c->win[j];
        if (hr_overlaps(w.off, w.off + w.len, r, nr))
            continue;
        uint64_t before = c->held;
        for (uint64_t i = 0; i < c->n_chunks; i++) {
            uint64_t a0 = hr_chunk_off(c, i), a1 = a0 + hr_chunk_len(c, i);
            if (a0 >= w.off && a1 <= w.off + w.len && !hr_overlaps(a0, a1, r, nr))
                hr_cache_drop(c, i);
        }
        if (before != c->held)
            HR_LOG_INFO(TAG, "evicted the window at %llu (%.1f MiB) to stay within %.2f GiB",
                        (unsigned long long)w.off, (before - c->held) / 1048576.0,
                        c->limit / 1073741824.0);
        memmove(c->win + j, c->win + j + 1, (size_t)(c->n_win - j - 1) * sizeof c->win[0]);
        c->n_win--;
        j--;
    }
    if (c->limit && c->held + miss > c->limit)
        return hr_seterr(err, HR_ERANGE,
                         "the cache limit (%.2f GiB) is below this device's windows: %.2f GiB "
                         "held and %.2f GiB more wanted",
                         c->limit / 1073741824.0, c->held / 1073741824.0, miss / 1073741824.0);
    *miss_bytes = miss;
    *n_chunks = m;
    (void)all;
    *chunks = malloc((size_t)(m > 0 ? m : 1) * sizeof **chunks);
    if (!*chunks)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    hr_cache_missing(c, r, nr, *chunks, (size_t)m, &miss, &all);
    *want_bytes = all;           /* whole chunks: the ranges' bytes when they are whole chunks */
    for (long i = 0; i < m; i++) /* offsets, for FETCH */
        (*chunks)[i] = hr_chunk_off(c, (*chunks)[i]);
    return 0;
}

uint64_t hr_cache_chunk_len(const hr_cache *c, uint64_t off) {
    long ci = hr_chunk_at(c, off);
    return ci < 0 ? 0 : hr_chunk_len(c, (uint64_t)ci);
}
