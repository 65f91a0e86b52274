/* test_moe.c - mixture-of-experts models (qwen3moe, qwen2moe, Mixtral)
 * against llama.cpp on the fixtures of tests/fixtures/moe: each GGUF is
 * rebuilt with mkmodel exactly as mkref.sh made it (its sha256 must match),
 * then every position's logits, the experts each layer chose at each
 * position, and the greedy continuation are compared with what llama.cpp
 * computed. Also: a step of several sequences gives each the bits it gets
 * alone (experts grouped across sequences), and routing counts add up. */
#include "tests/check.h"
#include "tests/fixtures.h"
#include "tests/mkfixture.h"

#include "kernels/quant.h"
#include "mmap/experts.h"
#include "mmap/gguf.h"
#include "mmap/stream.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"

#include <fcntl.h>
#include <unistd.h>

#define MAX_POS MKFIX_MAX_POS
#define MAX_LAYERS 8
#define MAX_K 16

static const char *fixture_names[] = {"qwen3moe-f32",    "qwen3moe-q4_k_m", "qwen2moe-f32",
                                      "qwen2moe-q4_k_m", "mixtral-f32",     "mixtral-q4_k_m",
                                      "gpt-oss-f32",     "gpt-oss-mxfp4"};

static char tmpdir[384];

static const char *fixture_path(const char *name, const char *ext, char *buf, size_t cap) {
    const char *dir = getenv("HR_FIXTURES");
    snprintf(buf, cap, "%s/moe/%s%s", dir ? dir : "tests/fixtures", name, ext);
    return buf;
}

/* The experts each layer chose at each prompt position, token by token
 * (the growth of the routing counts of a one-token step); their logits in
 * lg1 ([n][nv]). */
static void route_by_token(const hr_model *m, const int32_t *ids, int n, float *lg1,
                           int route[MAX_LAYERS][MAX_POS][MAX_K]) {
    const hr_hparams *hp = hr_model_hparams(m);
    char err[HR_ERR_LEN];
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (!c)
        return;
    uint64_t before[MAX_LAYERS][256], after[256];
    for (int il = 0; il < hp->n_layer; il++)
        CHECK_EQ(hr_ctx_expert_hits(c, il, before[il]), 0);
    for (int p = 0; p < n; p++) {
        CHECK_EQ(hr_ctx_eval(c, &ids[p], 1, p, lg1 + (size_t)p * hp->n_vocab, false, err), 0);
        for (int il = 0; il < hp->n_layer; il++) {
            hr_ctx_expert_hits(c, il, after);
            int k = 0;
            for (int x = 0; x < hp->n_expert; x++) {
                for (uint64_t d = before[il][x]; d < after[x] && k < MAX_K; d++)
                    route[il][p][k++] = x; /* ascending: compared as sets */
                before[il][x] = after[x];
            }
            CHECK_EQ(k, hp->n_expert_used);
        }
    }
    hr_ctx_destroy(c);
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void test_fixture(const char *name) {
    char js[512], lf[512], gguf[512], err[HR_ERR_LEN];
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmpdir, name);
    mkfix f;
    bool ok = mkfix_open(&f, fixture_path(name, ".json", js, sizeof js),
                         fixture_path(name, ".logits", lf, sizeof lf), gguf);
    int n = f.n;
    /* llama.cpp's routing: per layer and position, the chosen experts */
    static int ref_route[MAX_LAYERS][MAX_POS][MAX_K], route[MAX_LAYERS][MAX_POS][MAX_K];
    json_t *jr = json_object_get(f.root, "route");
    int n_rl = (int)json_array_size(jr);
    for (int il = 0; il < n_rl && il < MAX_LAYERS; il++)
        for (int p = 0; p < n; p++) {
            json_t *sel = json_array_get(json_array_get(jr, (size_t)il), (size_t)p);
            for (size_t j = 0; j < json_array_size(sel) && j < MAX_K; j++)
                ref_route[il][p][j] = (int)json_integer_value(json_array_get(sel, j));
            qsort(ref_route[il][p], json_array_size(sel), sizeof(int), cmp_int);
        }
    if (!ok) {
        mkfix_close(&f);
        return;
    }
    const hr_model *m = f.m;
    const int32_t *ids = f.ids;
    const float *ref = f.ref;
    double bound = f.bound;
    const hr_hparams *hp = hr_model_hparams(m);
    int nv = hp->n_vocab;
    CHECK(hp->n_expert > 0);
    CHECK_EQ(n_rl, hp->n_layer);

    /* the prompt in chunks of 8 (prefill: experts over several rows) */
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    cp.n_threads = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    float *lg = malloc((size_t)n * nv * sizeof(float)), *lg1 = malloc((size_t)n * nv * 4);
    CHECK_EQ(c ? hr_ctx_eval(c, ids, n, 0, lg, true, err) : -1, 0);
    route_by_token(m, ids, n, lg1, route);

    /* per position: the error, and whether every layer chose the experts
     * llama.cpp chose */
    double worst_same = 0.0, worst_all = 0.0;
    int agree = 0, differ = 0, differ_pos[MAX_POS];
    for (int p = 0; p < n; p++) {
        hr_logits_cmp lc = hr_compare_logits(lg + (size_t)p * nv, ref + (size_t)p * nv, 1, nv);
        bool same = true;
        for (int il = 0; il < hp->n_layer; il++)
            same = same && memcmp(route[il][p], ref_route[il][p],
                                  (size_t)hp->n_expert_used * sizeof(int)) == 0;
        agree += lc.agree;
        worst_all = lc.rel > worst_all || isnan(lc.rel) ? lc.rel : worst_all;
        if (same)
            worst_same = lc.rel > worst_same || isnan(lc.rel) ? lc.rel : worst_same;
        else
            differ_pos[differ++] = p;
    }
    printf("%-16s max rel err %.3e (%.3e where the routing agrees), argmax %d/%d, routing "
           "differs at %d of %d positions",
           name, worst_all, worst_same, agree, n, differ, n);
    for (int i = 0; i < differ; i++)
        printf("%s%d", i ? "," : " (", differ_pos[i]);
    printf("%s\n", differ ? ")" : "");
    CHECK(agree >= f.share * n);
    if (!f.quantized) { /* float: the same experts everywhere, within the bound */
        CHECK_EQ(differ, 0);
        CHECK(worst_all <= bound);
    } else { /* quantized: a near-tie may route one position differently */
        CHECK(differ * 10 <= n);
        CHECK(worst_same <= bound);
    }
    /* one token at a time computes what the chunks did, within float noise
     * (exact mode), or within the fixture's bound where the prompt kernels
     * sum in a free order (the default on AVX-512) */
    hr_logits_cmp l1 = hr_compare_logits(lg1, lg, n, nv);
    CHECK(l1.rel <= (hr_kernels_best()->canonical ? 1e-5 : bound));

    float *last = malloc((size_t)nv * sizeof(float));
    memcpy(last, lg + (size_t)(n - 1) * nv, (size_t)nv * sizeof(float));
    mkfix_greedy(&f, c, last, name);
    free(last);
    free(lg);
    free(lg1);
    hr_ctx_destroy(c);
    mkfix_close(&f);
}

/* A qwen3moe-tiny model of weight type ftype with a 512-token vocabulary,
 * written to tmpdir/name.gguf (its path in path) and loaded: 0, or -1 with
 * *g and *m left NULL. */
static int tiny_model(const char *name, const char *ftype, char path[512], hr_gguf **g,
                      hr_model **m) {
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "qwen3moe-tiny"), 0);
    mp.ftype = ftype;
    mp.n_vocab = 512;
    snprintf(path, 512, "%s/%s.gguf", tmpdir, name);
    return mkfix_generate(&mp, path, g, m) ? 0 : -1;
}

/* Two sequences in one step (prompts of 7 and 5 rows, then one decode row
 * each): each gets the bits it gets alone, although their rows share the
 * experts' products; the routing counts of the step are the sum of theirs. */
static void test_batch_invariance(void) {
    char gguf[512], err[HR_ERR_LEN];
    hr_gguf *g;
    hr_model *m;
    if (tiny_model("batch", "q4_k_m", gguf, &g, &m))
        return;
    const hr_hparams *hp = hr_model_hparams(m);
    int nv = hp->n_vocab, NE = hp->n_expert;
    int32_t a[7] = {1, 40, 300, 12, 9, 77, 401}, b[5] = {1, 5, 200, 3, 99};
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 16;
    cp.n_threads = 2;
    float *alone = malloc((size_t)4 * nv * sizeof(float)), *both = malloc((size_t)4 * nv * 4);
    uint64_t hits_alone[2][64] = {{0}}, hits_both[2][64];
    for (int s = 0; s < 2; s++) { /* each alone: its prompt, then one token */
        hr_ctx *c = NULL;
        CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
        const int32_t *ids = s ? b : a;
        int n = s ? 5 : 7;
        int32_t next = 123;
        CHECK_EQ(c ? hr_ctx_eval(c, ids, n, 0, alone + (size_t)(2 * s) * nv, false, err) : -1, 0);
        CHECK_EQ(c ? hr_ctx_eval(c, &next, 1, n, alone + (size_t)(2 * s + 1) * nv, false, err) : -1,
                 0);
        uint64_t h[64];
        for (int il = 0; c && il < hp->n_layer; il++) {
            CHECK_EQ(hr_ctx_expert_hits(c, il, h), 0);
            for (int x = 0; x < NE; x++)
                hits_alone[il][x] += h[x];
        }
        hr_ctx_destroy(c);
    }
    cp.n_seq = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (c) {
        CHECK_EQ(hr_ctx_seq_add(c, 0), 0);
        CHECK_EQ(hr_ctx_seq_add(c, 1), 1);
        int32_t ids[12];
        hr_seq_pos rows[12];
        for (int i = 0; i < 7; i++) {
            ids[i] = a[i];
            rows[i] = (hr_seq_pos){.seq = 0, .pos = i};
        }
        for (int i = 0; i < 5; i++) {
            ids[7 + i] = b[i];
            rows[7 + i] = (hr_seq_pos){.seq = 1, .pos = i};
        }
        int nl = 0;
        float *out = malloc((size_t)2 * nv * sizeof(float));
        CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 12, out, &nl, err), 0);
        CHECK_EQ(nl, 2);
        memcpy(both, out, (size_t)nv * 4);                               /* a's prompt */
        memcpy(both + (size_t)2 * nv, out + (size_t)nv, (size_t)nv * 4); /* b's prompt */
        int32_t dec[2] = {123, 123};
        hr_seq_pos drows[2] = {{.seq = 0, .pos = 7}, {.seq = 1, .pos = 5}};
        CHECK_EQ(hr_ctx_eval_batch(c, dec, drows, 2, out, &nl, err), 0);
        memcpy(both + (size_t)nv, out, (size_t)nv * 4);
        memcpy(both + (size_t)3 * nv, out + (size_t)nv, (size_t)nv * 4);
        free(out);
        int same = 0;
        for (int r = 0; r < 4; r++)
            same += memcmp(alone + (size_t)r * nv, both + (size_t)r * nv, (size_t)nv * 4) == 0;
        printf("batched experts: %d/4 rows bit-identical to each sequence alone\n", same);
        CHECK_EQ(same, 4);
        uint64_t total = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            CHECK_EQ(hr_ctx_expert_hits(c, il, hits_both[il]), 0);
            for (int x = 0; x < NE; x++) {
                CHECK_EQ(hits_both[il][x], hits_alone[il][x]);
                total += hits_both[il][x];
            }
        }
        CHECK_EQ(total, (uint64_t)hp->n_layer * 14 * hp->n_expert_used);
        hr_ctx_destroy(c);
    }
    free(alone);
    free(both);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* Bytes of expert e's gate slice of layer il that this process has mapped. */
static int64_t mapped_gate(const hr_gguf *g, const hr_expert_layer *L, int e) {
    uint64_t off = L->off[0] + (uint64_t)e * L->stride[0], len = L->stride[0];
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t b = (off + pg - 1) / pg * pg, end = (off + len) / pg * pg; /* its own pages */
    return end > b ? hr_stream_mapped(g, &b, &(uint64_t){end - b}, 1) : 0;
}

/* Streaming by expert (mmap/experts.h) on a 2-layer file of 16 experts:
 * after the plan the kept experts are mapped and the others are not; a
 * routed expert that is not kept is read, counted as fetched, and dropped
 * once its layer is done; experts routed often enough become the kept
 * ones (rerank). */
static void test_expert_cache(void) {
    char gguf[512], err[HR_ERR_LEN];
    hr_gguf *g;
    hr_model *m;
    if (tiny_model("cache", "q8_0", gguf, &g, &m))
        return;
    const hr_hparams *hp = hr_model_hparams(m);
    hr_expert_layer L[2];
    const char *base = hr_gguf_base(g);
    for (int il = 0; il < 2; il++) {
        const hr_layer_weights *W = hr_model_layer(m, il);
        const hr_weight *st[3] = {&W->gate_exps, &W->up_exps, &W->down_exps};
        for (int p = 0; p < 3; p++) {
            L[il].off[p] = (uint64_t)((const char *)st[p]->data - base);
            L[il].stride[p] = st[p]->row_bytes * (uint64_t)(st[p]->n_out / hp->n_expert);
        }
    }
    uint64_t one = L[0].stride[0] + L[0].stride[1] + L[0].stride[2];
    hr_expert_cache *c = NULL;
    CHECK_EQ(hr_expert_cache_create(&c, g, 2, hp->n_expert, L, err), 0);
    if (!c) {
        hr_model_free(m);
        hr_gguf_close(g);
        return;
    }
    uint64_t off, len;
    CHECK_EQ(hr_stream_window_range(g, 0, 2, &off, &len), 0);
    int lb = 0, nl = 2;
    /* touch everything first: the plan must drop what it does not keep */
    CHECK_EQ(hr_stream_fetch(g, off, len), 0);
    CHECK_EQ(hr_expert_cache_plan(c, &off, &len, &lb, &nl, 1, 4, 3, false), 0);
    CHECK_EQ(hr_expert_cache_wait(c, 5000), 0);
    int kept = 0, dropped = 0;
    for (int e = 0; e < hp->n_expert; e++) {
        int64_t mb = mapped_gate(g, &L[0], e);
        kept += e < 4 && mb > 0;
        dropped += e >= 4 && mb == 0;
    }
    /* no counts yet: the lowest indices. Dropping expert 4 reclaims its
     * pages; where the page cache holds them in a large folio that also
     * spans expert 3's last pages, the kernel unmaps that folio whole
     * (expert 3 faults back in from the page cache when next read), so one
     * kept expert may show unmapped */
    CHECK(kept >= 3);
    CHECK_EQ(dropped, hp->n_expert - 4);
    /* route layer 0 to a kept and a dropped expert */
    int ex[2] = {1, 9};
    hr_expert_cache_route(c, 0, ex, 2);
    CHECK_EQ(hr_expert_cache_wait(c, 5000), 0);
    CHECK(mapped_gate(g, &L[0], 9) > 0);
    hr_expert_cache_layer_done(c, 0);
    CHECK_EQ(hr_expert_cache_wait(c, 5000), 0);
    CHECK_EQ(mapped_gate(g, &L[0], 9), 0); /* read for the step, dropped after it */
    CHECK(mapped_gate(g, &L[0], 1) > 0);
    hr_expert_cache_stats st;
    hr_expert_cache_get_stats(c, &st);
    CHECK_EQ(st.routed, 2);
    CHECK_EQ(st.hits, 1);
    CHECK_EQ(st.fetched, one);
    CHECK_EQ(st.keep, 4);
    CHECK_EQ(st.locked, 0);        /* kept by advice: the plan asked for no mlock */
    CHECK_EQ(st.plans_applied, 1); /* the measurement of bytes read starts after it */
    /* expert 9 routed in three steps: the rerank (every 3 routes) keeps it */
    for (int r = 0; r < 2; r++) {
        hr_expert_cache_route(c, 0, &ex[1], 1);
        hr_expert_cache_layer_done(c, 0);
    }
    CHECK_EQ(hr_expert_cache_wait(c, 5000), 0);
    hr_expert_cache_get_stats(c, &st);
    CHECK(st.reranks >= 1);
    CHECK_EQ(st.rerank_bytes, st.reranks * one);
    CHECK(mapped_gate(g, &L[0], 9) > 0);
    hr_expert_cache_route(c, 0, &ex[1], 1);
    hr_expert_cache_get_stats(c, &st);
    CHECK_EQ(st.hits, 2); /* now a kept expert */
    /* layer 1 untouched by layer 0's routes: its dropped experts stay dropped */
    CHECK_EQ(mapped_gate(g, &L[1], 9), 0);
    /* the plan's expert stacks fault page by page (no read-around); a plan
     * without windows gives the default back */
    const char *in_stack = base + L[1].off[2] + L[1].stride[2] * 12;
    if (hr_advice_honoured()) {
        CHECK_EQ(hr_vma_flag(in_stack, "rr"), 1);
        /* attention weights are neither a stack nor the embedding table */
        CHECK_EQ(hr_vma_flag(hr_model_layer(m, 0)->wo.data, "rr"), 0);
        /* the token embedding table (not the output head here) is looked up at random */
        const hr_weight *te = hr_model_tok_embd(m);
        CHECK(te != hr_model_output(m));
        CHECK_EQ(hr_vma_flag((const char *)te->data + te->row_bytes * 100, "rr"), 1);
        CHECK_EQ(hr_expert_cache_plan(c, NULL, NULL, NULL, NULL, 0, 0, 0, false), 0);
        CHECK_EQ(hr_expert_cache_wait(c, 5000), 0);
        CHECK_EQ(hr_vma_flag(in_stack, "rr"), 0);
    } else {
        hr_check_skip("expert cache: random-read advice of the stacks (madvise advice does not "
                      "reach the kernel here)");
    }
    hr_expert_cache_destroy(c);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* A fault in a range advised random (hr_stream_random) reads that page,
 * not the device's read-around window (read_ahead_kb, 128 KiB to several
 * MiB): one page of an expert stack touched with nothing of the file in
 * the page cache reads a few KiB, counted in /proc/self/io. */
static void test_random_faults(void) {
    char gguf[512];
    hr_gguf *g;
    hr_model *m;
    if (!hr_advice_honoured()) {
        hr_check_skip("random faults (madvise advice does not reach the kernel here)");
        return;
    }
    if (tiny_model("random", "q8_0", gguf, &g, &m))
        return;
    /* layer 1's down stack advised random; layer 0's, the control, not */
    const char *base = hr_gguf_base(g);
    uint64_t off[2], len[2], pg = (uint64_t)sysconf(_SC_PAGESIZE);
    for (int il = 0; il < 2; il++) {
        const hr_weight *w = &hr_model_layer(m, il)->down_exps;
        off[il] = (uint64_t)((const char *)w->data - base) + w->row_bytes * w->n_out / 2;
        off[il] -= off[il] % pg;
        len[il] = w->row_bytes * w->n_out;
    }
    const hr_weight *w1 = &hr_model_layer(m, 1)->down_exps;
    CHECK_EQ(hr_stream_random(g, (uint64_t)((const char *)w1->data - base), len[1], true), 0);
    int fd = open(gguf, O_RDONLY);
    CHECK(fd >= 0);
    if (fd >= 0) { /* nothing of it mapped yet: the whole file leaves the cache */
        CHECK_EQ(fdatasync(fd), 0);
        CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        close(fd);
    }
    int64_t rd[2] = {-1, -1};
    bool cold = true;
    for (int i = 0; i < 2; i++) { /* the advised page first, then the control */
        int il = 1 - i;
        cold = cold && hr_stream_residency(g, &off[il], &pg, 1) == 0.0;
        int64_t r0 = hr_stream_io_read_bytes();
        volatile const char *p = base + off[il];
        char x = *p;
        (void)x;
        int64_t r1 = hr_stream_io_read_bytes();
        rd[il] = r0 >= 0 && r1 >= 0 ? r1 - r0 : -1;
    }
    if (rd[0] < 0 || rd[1] < 0) {
        hr_check_skip("random faults: /proc/self/io is not readable here");
    } else if (!cold) {
        hr_check_skip("random faults: the file's pages stay cached here (tmpfs, a network "
                      "file system): no read to count");
    } else {
        printf("random faults: one page touched, %lld bytes read advised random, %lld with the "
               "default advice\n",
               (long long)rd[1], (long long)rd[0]);
        CHECK(rd[1] > 0); /* it was read from the file, not found in the cache */
        CHECK(rd[1] <= 64 * 1024);
        if (rd[0] > 64 * 1024)
            CHECK(rd[0] > 4 * rd[1]); /* the control read its read-around window */
        else
            hr_check_skip("random faults: the device reads ahead 64 KiB or less, the control "
                          "cannot tell the advice apart");
    }
    hr_model_free(m);
    hr_gguf_close(g);
}

/* src rewritten to dst with key set to v (a uint32), every tensor kept:
 * a file whose metadata and tensors disagree. */
static int rewrite_u32(const char *src, const char *dst, const char *key, uint32_t v) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    if (hr_gguf_open(&g, src, err))
        return -1;
    hr_gguf_writer *w = hr_gguf_writer_create();
    int rc = w ? hr_gguf_writer_copy_kv(w, g, NULL) : -1;
    if (rc == 0)
        rc = hr_gguf_writer_set_u32(w, key, v);
    for (int64_t i = 0; rc == 0 && i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        rc = hr_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size);
    }
    if (rc == 0)
        rc = hr_gguf_writer_write(w, dst, err);
    hr_gguf_writer_destroy(w);
    hr_gguf_close(g);
    return rc;
}

/* Files whose experts' metadata contradict their tensors, or are out of
 * any plausible range, are refused with a message naming the problem (no
 * crash, no model). */
static void test_bad_files(void) {
    char good[512], bad[512], err[HR_ERR_LEN];
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "qwen3moe-tiny"), 0);
    mp.ftype = "q4_k_m";
    mp.n_vocab = 512;
    snprintf(good, sizeof good, "%s/good.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", tmpdir);
    CHECK_EQ(hr_mkmodel_write(&mp, good, NULL, NULL, err), 0);
    static const struct {
        const char *key;
        uint32_t v;
        const char *says;
    } cases[] = {
        {"qwen3moe.expert_count", 0, "expert_count"},          /* qwen3moe without experts */
        {"qwen3moe.expert_count", 32, "shape"},                /* 16 experts in the file */
        {"qwen3moe.expert_count", 100000, "implausible"},      /* out of range */
        {"qwen3moe.expert_used_count", 0, "implausible"},      /* routes to none */
        {"qwen3moe.expert_used_count", 17, "implausible"},     /* more than there are */
        {"qwen3moe.expert_feed_forward_length", 128, "shape"}, /* 256 rows in the file */
        {"qwen3moe.expert_feed_forward_length", 1u << 30, "implausible"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ(rewrite_u32(good, bad, cases[i].key, cases[i].v), 0);
        hr_gguf *g = NULL;
        hr_model *m = NULL;
        err[0] = '\0';
        CHECK_EQ(hr_gguf_open(&g, bad, err), 0);
        int rc = g ? hr_model_load(&m, g, err) : -1;
        CHECK(rc != 0 && m == NULL);
        CHECK(strstr(err, cases[i].says) != NULL);
        printf("%s = %u: %s\n", cases[i].key, cases[i].v, err);
        hr_model_free(m);
        hr_gguf_close(g);
    }
}

/* Every kernel table this CPU runs gives a model with experts the same
 * bits in exact mode (the canonical float order carries through the
 * grouped products). */
static void test_tables(void) {
    char gguf[512], err[HR_ERR_LEN];
    hr_gguf *g;
    hr_model *m;
    if (tiny_model("tables", "q4_k_m", gguf, &g, &m))
        return;
    const bool was_exact = hr_kernels_exact();
    hr_kernels_set_exact(true);
    const hr_hparams *hp = hr_model_hparams(m);
    enum { N = 40 }; /* one step of 40 rows: ~10 rows per expert, the grouped products */
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 97 + 13) % hp->n_vocab);
    size_t nv = (size_t)hp->n_vocab;
    float *ref = malloc(N * nv * sizeof(float)), *lg = malloc(N * nv * sizeof(float));
    const hr_kernels *best = hr_kernels_best();
    int tables = 0, same = 0;
    uint64_t most = 0;
    for (int isa = HR_ISA_SCALAR; isa < HR_ISA_COUNT && ref && lg; isa++) {
        if (hr_kernels_use((hr_isa)isa) != 0)
            continue;
        hr_ctx_params cp = hr_ctx_params_default();
        cp.n_ctx = 64;
        cp.n_batch = N;
        cp.n_threads = 2;
        hr_ctx *c = NULL;
        CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
        CHECK_EQ(c ? hr_ctx_eval(c, ids, N, 0, tables ? lg : ref, true, err) : -1, 0);
        uint64_t h[64];
        for (int x = 0; c && hr_ctx_expert_hits(c, 0, h) == 0 && x < hp->n_expert; x++)
            most = h[x] > most ? h[x] : most;
        hr_ctx_destroy(c);
        same += tables > 0 && memcmp(ref, lg, N * nv * sizeof(float)) == 0;
        tables++;
    }
    hr_kernels_use(best->isa);
    hr_kernels_set_exact(was_exact);
    printf("kernel tables (exact mode): %d run, %d of the %d after the first give the first's bits "
           "(up to %llu "
           "rows of the step on one expert)\n",
           tables, same, tables - 1, (unsigned long long)most);
    CHECK(tables >= 1);
    CHECK(most > HR_DOT_N_MAX); /* an expert's rows went through the tiles */
    CHECK_EQ(same, tables - 1);
    free(ref);
    free(lg);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* What a file with experts must have, and what is refused. */
static void test_refusals(void) {
    char gguf[512], err[HR_ERR_LEN];
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "qwen3moe-tiny"), 0);
    mp.n_expert = 0; /* qwen3moe without experts */
    snprintf(gguf, sizeof gguf, "%s/bad.gguf", tmpdir);
    CHECK(hr_mkmodel_write(&mp, gguf, NULL, NULL, err) != 0);
    CHECK(strstr(err, "experts") != NULL);
    mp.n_expert = 4;
    mp.n_expert_used = 5; /* more used than there are */
    CHECK(hr_mkmodel_write(&mp, gguf, NULL, NULL, err) != 0);
}

int main(void) {
    const char *td = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/hr_moe_XXXXXX", td && td[0] ? td : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    if (sodium_init() < 0)
        return 1;
    for (size_t i = 0; i < sizeof fixture_names / sizeof fixture_names[0]; i++)
        test_fixture(fixture_names[i]);
    test_batch_invariance();
    test_expert_cache();
    test_random_faults();
    test_tables();
    test_refusals();
    test_bad_files();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return hr_check_finish("test_moe");
}
