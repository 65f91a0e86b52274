/* test_stream.c - mmap/stream.h: layer-window byte ranges checked against
 * the tensor table (a generated file with out-of-order layers and a gap,
 * and the shared model fixtures against the first/last-layer formula the
 * agent used), residency after touching pages, prefetch / release round
 * trips, clamped and refused ranges, in-memory files refused, calls
 * from several threads at once, and the 2 MiB pages a kept range is read
 * in (where the kernel keeps the file system's page cache in such folios). */
#include "tests/check.h"

#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "mmap/stream.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[512];
static char model_path[1024];
static uint64_t pg;

/* ---- a generated model ---- */

typedef struct {
    const char *name;
    int64_t n; /* f32 elements */
} tdef;

/* Written in this order: layer 1 is split around layer 2 (so a window's
 * first and last layer alone do not bound it), layer 3 has no tensors,
 * the non-layer tensors sit at both ends. */
static const tdef model_tensors[] = {
    {"token_embd.weight", 3000},   {"blk.0.attn_q.weight", 1500}, {"blk.0.ffn_up.weight", 2500},
    {"blk.1.attn_q.weight", 1000}, {"blk.2.attn_q.weight", 3000}, {"blk.2.ffn_up.weight", 700},
    {"blk.1.ffn_up.weight", 2000}, {"blk.4.attn_q.weight", 100},  {"output.weight", 4000},
};
#define N_MODEL_TENSORS (sizeof model_tensors / sizeof model_tensors[0])
#define N_LAYERS 5 /* 0..4, layer 3 empty */

static int write_model(const char *path) {
    hr_gguf_writer *w = hr_gguf_writer_create();
    CHECK(w != NULL);
    if (!w)
        return -1;
    CHECK_EQ(hr_gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    for (size_t i = 0; i < N_MODEL_TENSORS; i++) {
        const tdef *t = &model_tensors[i];
        float *data = malloc((size_t)t->n * sizeof *data);
        for (int64_t k = 0; k < t->n; k++)
            data[k] = (float)(i * 100000 + (size_t)k);
        int64_t ne[1] = {t->n};
        CHECK_EQ(hr_gguf_writer_add_tensor(w, t->name, HR_TYPE_F32, 1, ne, data,
                                           (uint64_t)t->n * sizeof *data),
                 0);
        free(data);
    }
    char err[HR_ERR_LEN];
    int rc = hr_gguf_writer_write(w, path, err);
    if (rc)
        fprintf(stderr, "write %s: %s\n", path, err);
    CHECK_EQ(rc, 0);
    hr_gguf_writer_destroy(w);
    return rc;
}

/* The window range computed straight from the tensor table: the hull of
 * the "blk.N." tensors with b <= N < e, start rounded down to a page. */
static int expected_range(const hr_gguf *g, int b, int e, uint64_t *off, uint64_t *len) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        int l = -1;
        if (sscanf(t->name, "blk.%d.", &l) != 1 || l < b || l >= e)
            continue;
        if (t->offset < lo)
            lo = t->offset;
        if (t->offset + t->size > hi)
            hi = t->offset + t->size;
    }
    if (hi == 0)
        return HR_ENOENT;
    *off = lo / pg * pg;
    *len = hi - *off;
    return 0;
}

/* Every window [b, e) over and past the layers, against expected_range. */
static void check_windows(const hr_gguf *g, int n_layers, const char *label) {
    int bad = 0, found = 0;
    for (int b = 0; b <= n_layers + 1; b++) {
        for (int e = b + 1; e <= n_layers + 2; e++) {
            uint64_t off = 1, len = 1, xo = 0, xl = 0;
            int rc = hr_stream_window_range(g, b, e, &off, &len);
            int xrc = expected_range(g, b, e, &xo, &xl);
            if (rc != xrc || (rc == 0 && (off != xo || len != xl)) ||
                (rc != 0 && (off != 0 || len != 0)) || off % pg != 0 ||
                off + len > hr_gguf_file_size(g)) {
                if (bad++ < 5)
                    fprintf(stderr,
                            "%s: window [%d, %d): rc %d [%" PRIu64 ", +%" PRIu64
                            ") want rc %d [%" PRIu64 ", +%" PRIu64 ")\n",
                            label, b, e, rc, off, len, xrc, xo, xl);
            }
            found += rc == 0;
        }
    }
    CHECK_EQ(bad, 0);
    CHECK(found > 0);
}

/* Reads one byte of every page of [off, off + len) through the mapping. */
static uint64_t touch(const hr_gguf *g, uint64_t off, uint64_t len) {
    const volatile uint8_t *p = hr_gguf_base(g);
    uint64_t sum = 0, end = off + len;
    for (uint64_t a = off - off % pg; a < end; a += pg)
        sum += p[a];
    sum += p[end - 1];
    return sum;
}

static void test_window_range(void) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, model_path, err);
    CHECK_EQ(rc, 0);
    if (rc)
        return;
    CHECK_EQ(hr_gguf_n_layers_seen(g), N_LAYERS);
    check_windows(g, N_LAYERS, "generated");

    /* spot checks written out: layer 1 lies around layer 2's first tensor */
    uint64_t off = 0, len = 0;
    const hr_gguf_tensor *q1 = hr_gguf_find_tensor(g, "blk.1.attn_q.weight");
    const hr_gguf_tensor *u1 = hr_gguf_find_tensor(g, "blk.1.ffn_up.weight");
    const hr_gguf_tensor *q2 = hr_gguf_find_tensor(g, "blk.2.attn_q.weight");
    CHECK(q1 && u1 && q2);
    CHECK_EQ(hr_stream_window_range(g, 1, 2, &off, &len), 0);
    CHECK_EQ(off, q1->offset / pg * pg);
    CHECK_EQ(off + len, u1->offset + u1->size);
    CHECK(off <= q2->offset && q2->offset + q2->size <= off + len);
    CHECK_EQ(hr_stream_window_range(g, 0, 3, &off, &len), 0);
    CHECK_EQ(off + len, u1->offset + u1->size); /* past layer 2's end */
    uint64_t b2, e2;
    CHECK_EQ(hr_gguf_layer_range(g, 2, &b2, &e2), 0);
    CHECK(e2 < off + len);
    /* a window whose last layer is empty still covers the layers it has */
    uint64_t off2 = 0, len2 = 0;
    CHECK_EQ(hr_stream_window_range(g, 1, 4, &off2, &len2), 0);
    CHECK_EQ(hr_stream_window_range(g, 1, 3, &off, &len), 0);
    CHECK_EQ(off2, off);
    CHECK_EQ(len2, len);
    CHECK_EQ(hr_stream_window_range(g, 3, 4, &off, &len), HR_ENOENT);
    CHECK_EQ(off, 0);
    CHECK_EQ(len, 0);

    /* refused arguments */
    CHECK_EQ(hr_stream_window_range(NULL, 0, 1, &off, &len), HR_EINVAL);
    CHECK_EQ(hr_stream_window_range(g, -1, 1, &off, &len), HR_EINVAL);
    CHECK_EQ(hr_stream_window_range(g, 2, 2, &off, &len), HR_EINVAL);
    CHECK_EQ(hr_stream_window_range(g, 2, 1, &off, &len), HR_EINVAL);
    CHECK_EQ(hr_stream_window_range(g, 0, 1, NULL, &len), HR_EINVAL);
    CHECK_EQ(hr_stream_window_range(g, 0, 1, &off, NULL), HR_EINVAL);
    CHECK_EQ(hr_stream_window_range(g, INT32_MAX - 1, INT32_MAX, &off, &len), HR_ENOENT);
    CHECK_EQ(hr_stream_window_range(g, 0, INT32_MAX, &off, &len), 0);
    CHECK_EQ(off, hr_gguf_find_tensor(g, "blk.0.attn_q.weight")->offset / pg * pg);
    hr_gguf_close(g);
}

/* The shared fixtures (layers in order): the range also equals what the
 * agent computed from the first and last layer of the window alone. */
static void test_fixtures(void) {
    static const char *files[] = {"models/tiny-llama-f32.gguf", "models/small-llama-q4_0.gguf",
                                  "models/small-qwen2-q4_k_m.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[1024], err[HR_ERR_LEN];
        hr_gguf *g = NULL;
        int rc = hr_gguf_open(&g, hr_shared_path(files[f], path, sizeof path), err);
        if (rc)
            fprintf(stderr, "%s\n", err);
        CHECK_EQ(rc, 0);
        if (rc)
            continue;
        int n = hr_gguf_n_layers_seen(g);
        CHECK(n >= 2);
        check_windows(g, n, files[f]);
        int bad = 0;
        for (int b = 0; b < n; b++) {
            for (int e = b + 1; e <= n; e++) {
                uint64_t b0, e0, b1, e1, off = 0, len = 0;
                CHECK_EQ(hr_gguf_layer_range(g, b, &b0, &e0), 0);
                CHECK_EQ(hr_gguf_layer_range(g, e - 1, &b1, &e1), 0);
                uint64_t lo = b0 < b1 ? b0 : b1, hi = e0 > e1 ? e0 : e1;
                lo = lo / pg * pg;
                bad +=
                    hr_stream_window_range(g, b, e, &off, &len) != 0 || off != lo || len != hi - lo;
            }
        }
        CHECK_EQ(bad, 0);
        /* residency of pages this process has touched: all of them */
        uint64_t off = 0, len = 0;
        CHECK_EQ(hr_stream_window_range(g, 0, n, &off, &len), 0);
        CHECK_EQ(hr_stream_prefetch(g, off, len), 0);
        touch(g, off, len);
        CHECK_NEAR(hr_stream_residency(g, &off, &len, 1), 1.0, 0.0);
        hr_gguf_close(g);
    }
}

static void test_residency(void) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, model_path, err);
    CHECK_EQ(rc, 0);
    if (rc)
        return;
    uint64_t size = hr_gguf_file_size(g);
    CHECK(size > 8 * pg); /* the ranges below span several pages */
    uint64_t all_off = 0, all_len = size;

    /* read the whole file through the mapping: every page resident */
    touch(g, 0, size);
    CHECK_NEAR(hr_stream_residency(g, &all_off, &all_len, 1), 1.0, 0.0);
    uint64_t offs[N_LAYERS], lens[N_LAYERS];
    int nw = 0;
    for (int l = 0; l < N_LAYERS; l++)
        if (hr_stream_window_range(g, l, l + 1, &offs[nw], &lens[nw]) == 0)
            nw++;
    CHECK_EQ(nw, N_LAYERS - 1);
    CHECK_NEAR(hr_stream_residency(g, offs, lens, nw), 1.0, 0.0);

    /* release each window, then prefetch and touch it again */
    for (int w = 0; w < nw; w++) {
        CHECK_EQ(hr_stream_release(g, offs[w], lens[w]), 0);
        double r = hr_stream_residency(g, &offs[w], &lens[w], 1);
        CHECK(r >= 0.0 && r <= 1.0);
        CHECK_EQ(hr_stream_prefetch(g, offs[w], lens[w]), 0);
        touch(g, offs[w], lens[w]);
        CHECK_NEAR(hr_stream_residency(g, &offs[w], &lens[w], 1), 1.0, 0.0);
    }
    CHECK_EQ(hr_stream_release(g, 0, size), 0);
    double r = hr_stream_residency(g, &all_off, &all_len, 1);
    CHECK(r >= 0.0 && r <= 1.0);
    touch(g, 0, size);
    CHECK_NEAR(hr_stream_residency(g, &all_off, &all_len, 1), 1.0, 0.0);

    /* the data reads back unchanged after release */
    const hr_gguf_tensor *t = hr_gguf_find_tensor(g, "blk.2.attn_q.weight");
    CHECK(t != NULL);
    CHECK_EQ(hr_stream_release(g, t->offset, t->size), 0);
    float v;
    memcpy(&v, (const uint8_t *)t->data + 7 * sizeof v, sizeof v);
    CHECK_EQ(v, 4 * 100000 + 7);

    /* ranges clamped to the file, or refused */
    CHECK_EQ(hr_stream_prefetch(g, 0, 0), 0);
    CHECK_EQ(hr_stream_prefetch(g, size, 0), 0);
    CHECK_EQ(hr_stream_prefetch(g, size, 1), HR_ERANGE);
    CHECK_EQ(hr_stream_prefetch(g, size + 100, 10), HR_ERANGE);
    CHECK_EQ(hr_stream_prefetch(g, UINT64_MAX, UINT64_MAX), HR_ERANGE);
    CHECK_EQ(hr_stream_release(g, size - 1, 2), 0);
    CHECK_EQ(hr_stream_prefetch(g, 1, UINT64_MAX), 0); /* off + len overflows */
    CHECK_EQ(hr_stream_prefetch(g, pg + 3, 10), 0);    /* unaligned start */
    CHECK_EQ(hr_stream_release(g, 5, UINT64_MAX - 2), 0);
    CHECK_EQ(hr_stream_release(g, size + 1, 1), HR_ERANGE);
    CHECK_EQ(hr_stream_prefetch(NULL, 0, 1), HR_EINVAL);
    CHECK_EQ(hr_stream_release(NULL, 0, 1), HR_EINVAL);
    touch(g, 0, size);
    uint64_t o2[3] = {0, size + 10, 3}, l2[3] = {UINT64_MAX, 100, 0};
    CHECK_NEAR(hr_stream_residency(g, o2, l2, 3), 1.0, 0.0);
    CHECK_NEAR(hr_stream_residency(g, &o2[1], &l2[1], 2), 1.0, 0.0); /* no pages */
    CHECK_NEAR(hr_stream_residency(g, NULL, NULL, 0), 1.0, 0.0);
    CHECK_NEAR(hr_stream_residency(g, o2, l2, -1), -1.0, 0.0);
    CHECK_NEAR(hr_stream_residency(g, NULL, l2, 1), -1.0, 0.0);
    CHECK_NEAR(hr_stream_residency(g, o2, NULL, 1), -1.0, 0.0);
    CHECK_NEAR(hr_stream_residency(NULL, o2, l2, 1), -1.0, 0.0);
    hr_gguf_close(g);
}

/* A hr_gguf over a caller buffer: no advice on memory it does not own. */
static void test_memory(void) {
    FILE *f = fopen(model_path, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n), *copy = malloc((size_t)n);
    CHECK_EQ(fread(buf, 1, (size_t)n, f), n);
    fclose(f);
    memcpy(copy, buf, (size_t)n);
    hr_gguf *g = NULL;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_gguf_open_memory(&g, buf, (size_t)n, err), 0);
    if (g) {
        uint64_t off = 0, len = 0;
        CHECK_EQ(hr_stream_window_range(g, 0, 2, &off, &len), 0); /* works on any hr_gguf */
        CHECK_EQ(hr_stream_prefetch(g, off, len), HR_EINVAL);
        CHECK_EQ(hr_stream_release(g, 0, (uint64_t)n), HR_EINVAL);
        CHECK_NEAR(hr_stream_residency(g, &off, &len, 1), -1.0, 0.0);
        CHECK(memcmp(buf, copy, (size_t)n) == 0);
        hr_gguf_close(g);
    }
    free(buf);
    free(copy);
}

/* ---- threads ---- */

typedef struct {
    const hr_gguf *g;
    int id, bad;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int it = 0; it < 200; it++) {
        int l = (it + w->id) % N_LAYERS;
        uint64_t off = 0, len = 0;
        if (hr_stream_window_range(w->g, l, l + 2, &off, &len) != 0) {
            w->bad++;
            continue;
        }
        w->bad += hr_stream_prefetch(w->g, off, len) != 0;
        touch(w->g, off, len);
        double r = hr_stream_residency(w->g, &off, &len, 1);
        w->bad += r < 0.0 || r > 1.0;
        if (it % 3 == 0)
            w->bad += hr_stream_release(w->g, off, len) != 0;
    }
    return NULL;
}

static void test_threads(void) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, model_path, err);
    CHECK_EQ(rc, 0);
    if (rc)
        return;
    enum { NT = 4 };
    pthread_t th[NT];
    worker ws[NT];
    for (int i = 0; i < NT; i++) {
        ws[i] = (worker){g, i, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, work, &ws[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        bad += ws[i].bad;
    }
    CHECK_EQ(bad, 0);
    hr_gguf_close(g);
}

/* ---- the pump: a sliding buffer over a generated many-layer file ---- */

/* AddressSanitizer makes mlock a no-op that succeeds: locked heads are
 * then not read in */
#if defined(__SANITIZE_ADDRESS__)
#define HR_NO_MLOCK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HR_NO_MLOCK 1
#endif
#endif
#ifndef HR_NO_MLOCK
#define HR_NO_MLOCK 0
#endif

#define PUMP_LAYERS 9
#define FAULT_AROUND ((int64_t)64 << 10)
static char pump_path[1100];

/* 9 layers of two tensors each, about 36 pages per layer, laid out in
 * layer order with unaligned tensor sizes. */
static int write_pump_model(const char *path) {
    hr_gguf_writer *w = hr_gguf_writer_create();
    CHECK(w != NULL);
    if (!w)
        return -1;
    CHECK_EQ(hr_gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    int64_t n_max = 31001;
    float *data = calloc((size_t)n_max, sizeof *data);
    const int64_t sizes[2] = {7003, 31001};
    const char *names[2] = {"attn_q.weight", "ffn_up.weight"};
    int64_t ne[1] = {64};
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "token_embd.weight", HR_TYPE_F32, 1, ne, data, 256), 0);
    for (int l = 0; l < PUMP_LAYERS; l++)
        for (int t = 0; t < 2; t++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, names[t]);
            ne[0] = sizes[t];
            CHECK_EQ(hr_gguf_writer_add_tensor(w, name, HR_TYPE_F32, 1, ne, data,
                                               (uint64_t)sizes[t] * sizeof *data),
                     0);
        }
    ne[0] = 64;
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "output.weight", HR_TYPE_F32, 1, ne, data, 256), 0);
    free(data);
    char err[HR_ERR_LEN];
    int rc = hr_gguf_writer_write(w, path, err);
    if (rc)
        fprintf(stderr, "write %s: %s\n", path, err);
    CHECK_EQ(rc, 0);
    hr_gguf_writer_destroy(w);
    return rc;
}

/* Streamed bytes of the n parts mapped now. */
static int64_t tails_mapped(const hr_gguf *g, const hr_stream_part *p, int n) {
    uint64_t off[HR_STREAM_MAX_WINDOWS], len[HR_STREAM_MAX_WINDOWS];
    for (int i = 0; i < n; i++) {
        off[i] = p[i].stream_off;
        len[i] = p[i].stream_len;
    }
    return hr_stream_mapped(g, off, len, n);
}

/* One device's k windows of w layers (round r: layers r * W + offset ..),
 * resident heads of `resident` bytes, tails through `buffer` bytes, run
 * for `tokens` tokens with a simulated compute that reads every layer and
 * posts it; after every step the pump is waited for and the mapped tail
 * bytes checked against the buffer (+ a page per window), what it passed
 * checked dropped. Returns the bytes the pump read per round. */
static double pump_run(int k, int w, double resident, uint64_t buffer, unsigned flags, int tokens,
                       const char *label) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_stream_pump *pp = NULL;
    if (hr_gguf_open(&g, pump_path, err) || hr_stream_pump_create(&pp, g, err)) {
        fprintf(stderr, "%s: %s\n", label, err);
        CHECK(0);
        hr_gguf_close(g);
        return -1;
    }
    int W = PUMP_LAYERS / k, offset = W - w;
    int64_t io0 = hr_stream_io_read_bytes();
    hr_stream_part part[HR_STREAM_MAX_WINDOWS];
    memset(part, 0, sizeof part);
    for (int r = 0; r < k; r++) {
        part[r].layer_begin = r * W + offset;
        part[r].n_layers = w;
        CHECK_EQ(hr_stream_window_range(g, part[r].layer_begin, part[r].layer_begin + w,
                                        &part[r].off, &part[r].len),
                 0);
        hr_stream_evict(g, part[r].off, part[r].len); /* start cold */
    }
    CHECK_EQ(hr_stream_split_resident(part, k, resident), 0);
    uint64_t kept = 0, max_tail = 0;
    for (int r = 0; r < k; r++) {
        kept += part[r].keep_len;
        max_tail = part[r].stream_len > max_tail ? part[r].stream_len : max_tail;
    }
    CHECK((double)kept <= resident + 1e-9 || resident >= 1e300);
    CHECK(max_tail > 0);
    CHECK_EQ(hr_stream_pump_plan(pp, part, k, buffer, flags), 0);
    CHECK_EQ(hr_stream_pump_wait(pp, 60000), 0);
    /* a page per window of page rounding, and the kernel's fault-around at
     * both ends of the buffer: a fault on a file mapping also maps the
     * cached pages of its aligned 64 KiB block (fault_around_bytes) */
    int64_t slack = (int64_t)(pg * (uint64_t)k) + 2 * FAULT_AROUND, lim = (int64_t)buffer + slack;
    /* the warm-up read the first tail up to the buffer, and the heads */
    int64_t m0 = tails_mapped(g, part, k);
    uint64_t want0 = part[0].stream_len < buffer ? part[0].stream_len : buffer;
    CHECK_INT(m0, <=, lim);
    if (flags & HR_STREAM_PREFETCH)
        CHECK_INT(m0 + (int64_t)pg, >=, (int64_t)want0);
    static bool lock_skip_said;
    if (HR_NO_MLOCK && (flags & HR_STREAM_LOCK) && !lock_skip_said) {
        lock_skip_said = true;
        hr_check_skip("pump: locked heads resident (AddressSanitizer makes mlock a no-op)");
    }
    for (int r = 0; r < k && !(HR_NO_MLOCK && (flags & HR_STREAM_LOCK)); r++) {
        uint64_t ko = part[r].off, kl = part[r].keep_len;
        if (kl)
            CHECK_INT(hr_stream_mapped(g, &ko, &kl, 1), ==, (int64_t)(kl + pg - 1) / pg * pg);
    }
    hr_stream_pump_stats st0;
    hr_stream_pump_get_stats(pp, &st0);
    int64_t worst = 0;
    int bad_drop = 0, bad_ahead = 0;
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < k; r++) {
            hr_stream_part *P = &part[r];
            uint64_t tend = P->stream_off + P->stream_len;
            for (int j = 0; j < w; j++) {
                int l = P->layer_begin + j;
                uint64_t lo, ll;
                CHECK_EQ(hr_stream_window_range(g, l, l + 1, &lo, &ll), 0);
                /* the layer about to be computed is read ahead as far as the buffer goes */
                uint64_t a = lo > P->stream_off ? lo : P->stream_off;
                uint64_t b = a + buffer < lo + ll ? a + buffer : lo + ll;
                b = b < tend ? b : tend;
                if (a < b && (flags & HR_STREAM_PREFETCH)) {
                    uint64_t len = b - a;
                    int64_t got = hr_stream_mapped(g, &a, &len, 1); /* whole pages */
                    if (got < (int64_t)len)
                        fprintf(stderr, "%s: t %d r %d layer %d: [%llu, +%llu) mapped %lld\n",
                                label, t, r, l, (unsigned long long)a, (unsigned long long)len,
                                (long long)got);
                    bad_ahead += got < (int64_t)len;
                }
                touch(g, lo, ll); /* compute */
                int64_t m = tails_mapped(g, part, k);
                worst = m > worst ? m : worst;
                hr_stream_pump_layer_done(pp, l);
                CHECK_EQ(hr_stream_pump_wait(pp, 60000), 0);
                m = tails_mapped(g, part, k);
                worst = m > worst ? m : worst;
                /* what the compute passed is dropped when the tail slides */
                uint64_t next = lo + ll;
                next -= next % pg;
                if (P->stream_len > buffer && next > P->stream_off) {
                    uint64_t s0 = P->stream_off, sl = (next < tend ? next : tend) - s0;
                    bad_drop += hr_stream_mapped(g, &s0, &sl, 1) != 0;
                }
            }
            hr_stream_pump_window_done(pp, r);
            CHECK_EQ(hr_stream_pump_wait(pp, 60000), 0);
            int64_t m = tails_mapped(g, part, k);
            worst = m > worst ? m : worst;
            if (k > 1) { /* its tail is gone, the next one's start is in */
                bad_drop += hr_stream_mapped(g, &P->stream_off, &P->stream_len, 1) != 0;
            }
        }
    hr_stream_pump_stats st;
    hr_stream_pump_get_stats(pp, &st);
    printf("%s: k %d w %d, kept %.0f KiB, tail %.0f KiB, buffer %.0f KiB: most tail mapped "
           "%.0f KiB, read %.0f KiB per round\n",
           label, k, w, kept / 1024.0, max_tail / 1024.0, buffer / 1024.0, worst / 1024.0,
           (double)(st.fetched - st0.fetched) / (tokens * k) / 1024.0);
    CHECK_INT(worst, <=, lim);
    CHECK_INT(st.max_span, <=, buffer);
    /* the disk as the pump got it: its own reads from storage, of tails it
     * read ahead (each dropped before it comes round again), and a time
     * for them; none where it reads nothing ahead */
    printf("%s: the pump's reads took %.0f KiB from storage in %.1f ms\n", label,
           (double)st.disk_bytes / 1024.0, 1e3 * st.disk_s);
    if (hr_advice_honoured()) /* tails are MADV_RANDOM: a read brings its range alone */
        CHECK_INT(st.disk_bytes, <=, st.fetched + pg);
    if (flags & HR_STREAM_PREFETCH)
        CHECK(st.fetched > 0);
    if (!(flags & HR_STREAM_PREFETCH))
        CHECK_INT(st.disk_bytes, ==, 0);
    else if (hr_stream_thread_io_read_bytes() >= 0 && hr_stream_io_read_bytes() > io0)
        CHECK(st.disk_bytes > 0 && st.disk_s > 0 && isfinite(st.disk_s));
    else /* a file in memory (tmpfs) reads nothing from storage */
        hr_check_skip("the pump's reads from storage (no /proc/thread-self/io, or a file "
                      "system without storage)");
    CHECK_EQ(bad_drop, 0);
    if (flags & HR_STREAM_PREFETCH)
        CHECK_EQ(bad_ahead, 0);
    if (flags & HR_STREAM_LOCK)
        CHECK_EQ(st.locked, kept > 0 ? 1 : 0);
    double per_round = (double)(st.fetched - st0.fetched) / (tokens * k);
    hr_stream_pump_destroy(pp);
    hr_gguf_close(g);
    return per_round;
}

/* The same, free-running: a compute thread reads the layers (about 3 ms
 * each) and posts them without waiting for the pump while this thread
 * samples the mapped tail bytes. On a busy machine the pump can wake a
 * layer or two late, the compute then faults pages in itself (the pump
 * drops them when it catches up), so the bound is the buffer + two layers
 * (+ pages, fault-around); once the pump caught up, only the next tail's
 * buffer is left. */
typedef struct {
    const hr_gguf *g;
    hr_stream_pump *pp;
    const hr_stream_part *part;
    int k, w, tokens;
    atomic_int done;
} race_arg;

static void *race_compute(void *arg) {
    race_arg *ra = arg;
    for (int t = 0; t < ra->tokens; t++)
        for (int r = 0; r < ra->k; r++) {
            for (int j = 0; j < ra->w; j++) {
                int l = ra->part[r].layer_begin + j;
                uint64_t lo, ll;
                if (hr_stream_window_range(ra->g, l, l + 1, &lo, &ll) == 0)
                    touch(ra->g, lo, ll);
                struct timespec ts = {0, 3000000}; /* a layer's compute: about 3 ms */
                nanosleep(&ts, NULL);
                hr_stream_pump_layer_done(ra->pp, l);
            }
            hr_stream_pump_window_done(ra->pp, r);
        }
    atomic_store(&ra->done, 1);
    return NULL;
}

static void pump_race(int k, int w, double resident, uint64_t buffer, uint64_t layer) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_stream_pump *pp = NULL;
    if (hr_gguf_open(&g, pump_path, err) || hr_stream_pump_create(&pp, g, err)) {
        CHECK(0);
        hr_gguf_close(g);
        return;
    }
    int W = PUMP_LAYERS / k, offset = W - w;
    hr_stream_part part[HR_STREAM_MAX_WINDOWS];
    memset(part, 0, sizeof part);
    for (int r = 0; r < k; r++) {
        part[r].layer_begin = r * W + offset;
        part[r].n_layers = w;
        CHECK_EQ(hr_stream_window_range(g, part[r].layer_begin, part[r].layer_begin + w,
                                        &part[r].off, &part[r].len),
                 0);
        hr_stream_evict(g, part[r].off, part[r].len);
    }
    CHECK_EQ(hr_stream_split_resident(part, k, resident), 0);
    CHECK_EQ(hr_stream_pump_plan(pp, part, k, buffer, HR_STREAM_PREFETCH | HR_STREAM_DROP), 0);
    CHECK_EQ(hr_stream_pump_wait(pp, 60000), 0);
    /* tails fault page by page, heads as by default (pump.c hr_pump_warm) */
    const char *base = hr_gguf_base(g);
    if (!hr_advice_honoured())
        hr_check_skip("pump: random-read advice of the tails (madvise advice does not reach "
                      "the kernel here)");
    for (int r = 0; r < k && hr_advice_honoured(); r++) {
        if (part[r].stream_len > 0)
            CHECK_EQ(hr_vma_flag(base + part[r].stream_off + part[r].stream_len / 2, "rr"), 1);
        if (part[r].keep_len > pg)
            CHECK_EQ(hr_vma_flag(base + part[r].off, "rr"), 0);
    }
    race_arg ra = {.g = g, .pp = pp, .part = part, .k = k, .w = w, .tokens = 20};
    atomic_init(&ra.done, 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, race_compute, &ra), 0);
    int64_t worst = 0;
    int samples = 0;
    while (!atomic_load(&ra.done)) {
        int64_t m = tails_mapped(g, part, k);
        worst = m > worst ? m : worst;
        samples++;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    pthread_join(th, NULL);
    CHECK_EQ(hr_stream_pump_wait(pp, 60000), 0);
    hr_stream_pump_stats st;
    hr_stream_pump_get_stats(pp, &st);
    int64_t lim = (int64_t)(buffer + 2 * layer + pg * (uint64_t)k) + 2 * FAULT_AROUND;
    CHECK_INT(tails_mapped(g, part, k), <=, (int64_t)(buffer + pg * (uint64_t)k) + FAULT_AROUND);
    printf("race k %d w %d, buffer %.0f KiB: most tail mapped %.0f KiB over %d samples\n", k, w,
           buffer / 1024.0, worst / 1024.0, samples);
    CHECK_INT(worst, <=, lim);
    CHECK_INT(st.max_span, <=, buffer);
    CHECK(samples > 10);
    hr_stream_pump_destroy(pp);
    hr_gguf_close(g);
}

static void uncache_file(const char *path);

static void test_pump(void) {
    if (write_pump_model(pump_path) != 0)
        return;
    uncache_file(pump_path); /* written pages are dirty: no eviction would drop them */
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    if (hr_gguf_open(&g, pump_path, err)) {
        CHECK(0);
        return;
    }
    uint64_t o1, l1, o2, l2;
    CHECK_EQ(hr_stream_window_range(g, 1, 2, &o1, &l1), 0);
    CHECK_EQ(hr_stream_window_range(g, 2, 3, &o2, &l2), 0);
    CHECK(o2 >= o1 + l1 - pg); /* layers follow each other in layer order */
    uint64_t layer = l1;
    int64_t none = 0;
    uint64_t z = 0;
    CHECK_EQ(hr_stream_mapped(g, &z, &z, 1), none);
    CHECK_EQ(hr_stream_mapped(g, NULL, NULL, 0), none);
    CHECK_EQ(hr_stream_mapped(NULL, &z, &z, 1), -1);
    hr_gguf_close(g);
    unsigned all = HR_STREAM_PREFETCH | HR_STREAM_DROP;
    uint64_t b15 = (layer + layer / 2) / pg * pg;
    /* tail larger than the buffer, nothing resident: slides layer by layer */
    double rd = pump_run(3, 3, 0, b15, all, 2, "sliding k 3");
    CHECK(rd > 2.5 * (double)layer);
    /* k = 1 with a resident head of two layers and a one-layer buffer */
    pump_run(1, 9, 2.0 * (double)layer, layer / pg * pg, all | HR_STREAM_LOCK, 2, "sliding k 1");
    /* the classic case: the tail fits the buffer, read whole after the window before */
    pump_run(3, 2, 3.0 * (double)layer, 2 * layer, all | HR_STREAM_LOCK, 2, "whole tails");
    /* no read-ahead: the compute faults, the pump only drops */
    pump_run(2, 4, 0, 2 * layer, HR_STREAM_DROP, 1, "drop only");
    pump_race(3, 3, 0, b15, layer);
    pump_race(1, 9, 2.0 * (double)layer, layer / pg * pg, layer);
}

/* ---- huge pages ---- */

/* KiB that file-backed 2 MiB entries map in this process in the mappings
 * (smaps blocks) that overlap [lo, hi), or -1 without smaps. */
static long pmd_mapped_kib(const void *lo, const void *hi) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long kib = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        long v;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = a < (uintptr_t)hi && b > (uintptr_t)lo;
        else if (in && sscanf(line, "FilePmdMapped: %ld kB", &v) == 1)
            kib += v;
    }
    fclose(f);
    return kib;
}

/* Drops the file's pages from the page cache (no process maps it). */
static void uncache_file(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

#define HUGE_MIB (2u << 20)

/* What this machine gives a plain reader of a fresh file, without hearth:
 * a mapping advised MADV_HUGEPAGE, every page touched. NULL when some
 * 2 MiB entry maps it; else why not (written to why). */
static const char *probe_huge(char *why, size_t cap) {
    char path[1100];
    snprintf(path, sizeof path, "%s/probe.bin", tmpdir);
    size_t n = 4 * HUGE_MIB;
    uint8_t *buf = malloc(n);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    bool wrote = buf && fd >= 0;
    for (size_t k = 0; wrote && k < n; k++)
        buf[k] = (uint8_t)(k * 7 + 1);
    wrote = wrote && write(fd, buf, n) == (ssize_t)n;
    free(buf);
    if (fd >= 0)
        close(fd);
    const char *r = NULL;
    if (!wrote) {
        snprintf(why, cap, "the probe file could not be written in %.80s", tmpdir);
        r = why;
    }
    uncache_file(path);
    fd = r ? -1 : open(path, O_RDONLY);
    uint8_t *m = fd >= 0 ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (!r && m == MAP_FAILED) {
        snprintf(why, cap, "the probe file could not be mapped");
        r = why;
    } else if (!r && madvise(m, n, MADV_HUGEPAGE) != 0) {
        snprintf(why, cap, "the kernel refuses MADV_HUGEPAGE (no transparent huge pages)");
        r = why;
    } else if (!r) {
        volatile uint8_t sum = 0;
        for (size_t k = 0; k < n; k += 4096)
            sum ^= m[k];
        (void)sum;
        long kib = pmd_mapped_kib(m, m + n);
        if (kib <= 0) {
            snprintf(why, cap,
                     "a plain reader of a fresh file in %.80s gets no 2 MiB entries either (%s): "
                     "a file system without large folios, tmpfs, or no free 2 MiB blocks",
                     tmpdir,
                     kib < 0                        ? "no smaps"
                     : (uintptr_t)m % HUGE_MIB != 0 ? "mapping not 2 MiB aligned"
                                                    : "none mapped");
            r = why;
        }
    }
    if (m != MAP_FAILED)
        munmap(m, n);
    if (fd >= 0)
        close(fd);
    unlink(path);
    return r;
}

/* A 12 MiB tensor: opened, the mapping is advised huge (VmFlags hg); a
 * kept range (its first 6 MiB) is read in 2 MiB folios and mapped whole,
 * and reads back what was written; a range made random (from 2 MiB past
 * the aligned end of the kept one's read-ahead) is advised small (nh) and
 * mapped by no 2 MiB entry; HEARTH_NO_HUGEPAGE set leaves the advice out
 * (no hg, no nh).
 * The 2 MiB entries are required where a plain reader gets them
 * (probe_huge) and skipped, with the probe's reason, where it does not. */
static void test_huge(void) {
    char why[400];
    const char *no_huge = probe_huge(why, sizeof why);
    bool advice = hr_advice_honoured();
    char path[1100];
    snprintf(path, sizeof path, "%s/huge.gguf", tmpdir);
    hr_gguf_writer *w = hr_gguf_writer_create();
    CHECK(w != NULL);
    if (!w)
        return;
    const int64_t n = 3 << 20; /* f32: 12 MiB */
    float *data = malloc((size_t)n * sizeof *data);
    CHECK(data != NULL);
    if (!data) {
        hr_gguf_writer_destroy(w);
        return;
    }
    for (int64_t k = 0; k < n; k++)
        data[k] = (float)(k % 1000003);
    int64_t ne[1] = {n};
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", HR_TYPE_F32, 1, ne, data,
                                       (uint64_t)n * sizeof *data),
             0);
    int rc = hr_gguf_writer_write(w, path, err);
    hr_gguf_writer_destroy(w);
    CHECK_EQ(rc, 0);
    const char *user = getenv("HEARTH_NO_HUGEPAGE"); /* the caller's, put back at the end */
    char saved[64] = "";
    if (user)
        snprintf(saved, sizeof saved, "%s", user);
    for (int pass = 0; pass < 2 && rc == 0; pass++) { /* 0: by default, 1: HEARTH_NO_HUGEPAGE */
        if (pass)
            setenv("HEARTH_NO_HUGEPAGE", "1", 1);
        else
            unsetenv("HEARTH_NO_HUGEPAGE");
        uncache_file(path);
        hr_gguf *g = NULL;
        rc = hr_gguf_open(&g, path, err);
        CHECK_EQ(rc, 0);
        if (rc)
            break;
        bool thp = !no_huge || strstr(no_huge, "MADV_HUGEPAGE") == NULL;
        if (thp)
            CHECK_EQ(hr_stream_huge(g), pass == 0);
        const hr_gguf_tensor *t = hr_gguf_find_tensor(g, "blk.0.ffn_up.weight");
        CHECK(t != NULL);
        const uint8_t *base = hr_gguf_base(g);
        uint64_t size = hr_gguf_file_size(g);
        if (t) {
            uint64_t keep = 6ull << 20, end = t->offset + t->size;
            uint64_t rnd = (t->offset + keep + HUGE_MIB - 1) / HUGE_MIB * HUGE_MIB + HUGE_MIB;
            CHECK(rnd < end);
            CHECK_EQ(hr_stream_random(g, rnd, end - rnd, true), 0);
            CHECK_EQ(hr_stream_keep(g, t->offset, keep), 0);
            uint64_t o = t->offset, l = keep;
            CHECK_NEAR(hr_stream_residency(g, &o, &l, 1), 1.0, 0.0);
            if (advice && thp) { /* the advice as the kernel holds it (VmFlags) */
                CHECK_EQ(hr_vma_flag(base + t->offset + keep / 2, "hg"), pass == 0);
                CHECK_EQ(hr_vma_flag(base + rnd, "nh"), pass == 0);
                CHECK_EQ(hr_vma_flag(base + rnd, "hg"), 0);
            }
            long kept = pmd_mapped_kib(base + t->offset, base + rnd);
            (void)touch(g, rnd, end - rnd);
            long random = pmd_mapped_kib(base + rnd, base + size);
            const float *f = (const float *)(const void *)(base + t->offset);
            int wrong = 0;
            for (int64_t k = 0; k < n; k += 4093)
                wrong += f[k] != data[k];
            CHECK_EQ(wrong, 0);
            if (pass == 1) {
                /* no advice (VmFlags above); the folios' sizes are then the
                 * kernel's read-ahead's */
            } else if (!no_huge) { /* 6 MiB kept hold two whole aligned 2 MiB blocks */
                CHECK(kept >= 2048);
                CHECK_EQ(random, 0);
            } else {
                char msg[480];
                snprintf(msg, sizeof msg, "2 MiB mappings of a kept range (%s)",
                         advice ? no_huge : "madvise advice does not reach the kernel here");
                hr_check_skip(msg);
            }
        }
        hr_gguf_close(g);
    }
    if (user)
        setenv("HEARTH_NO_HUGEPAGE", saved, 1);
    else
        unsetenv("HEARTH_NO_HUGEPAGE");
    free(data);
    unlink(path);
}

int main(void) {
    long p = sysconf(_SC_PAGESIZE);
    pg = p > 0 ? (uint64_t)p : 4096;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/hr_test_stream_XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create temp dir %s\n", tmpdir);
        return 1;
    }
    snprintf(model_path, sizeof model_path, "%s/stream.gguf", tmpdir);
    if (write_model(model_path) == 0) {
        test_window_range();
        test_residency();
        test_memory();
        test_threads();
        test_huge();
    }
    snprintf(pump_path, sizeof pump_path, "%s/pump.gguf", tmpdir);
    test_pump();
    unlink(pump_path);
    test_fixtures();
    unlink(model_path);
    rmdir(tmpdir);
    return hr_check_finish("test_stream");
}
