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

#include "mmap/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"

#include <unistd.h>

#define MAX_POS 64
#define MAX_LAYERS 8
#define MAX_K 16

static const char *fixture_names[] = {"qwen3moe-f32",    "qwen3moe-q4_k_m", "qwen2moe-f32",
                                      "qwen2moe-q4_k_m", "mixtral-f32",     "mixtral-q4_k_m"};

static char tmpdir[] = "/tmp/hr_moe_XXXXXX";

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
    char path[512], gguf[512], err[HR_ERR_LEN];
    json_error_t jerr;
    json_t *root = json_load_file(fixture_path(name, ".json", path, sizeof path), 0, &jerr);
    CHECK(root != NULL);
    if (!root)
        return;
    hr_mkmodel_params mp;
    CHECK(parse_mkmodel(json_object_get(root, "mkmodel"), &mp));
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmpdir, name);
    CHECK_EQ(hr_mkmodel_write(&mp, gguf, NULL, NULL, err), 0);
    char sum[65];
    sha256_hex(gguf, sum);
    const char *want = json_string_value(json_object_get(root, "sha256"));
    CHECK(want && strcmp(sum, want) == 0); /* else mkmodel changed: run mkref.sh again */
    double bound = json_real_value(json_object_get(root, "bound"));
    double share = json_real_value(json_object_get(root, "argmax_share"));
    bool quantized = bound > 1e-3;
    int32_t ids[MAX_POS], greedy[32];
    int n = read_ids(root, "prompt_ids", ids, MAX_POS);
    int n_greedy = read_ids(root, "greedy_ids", greedy, 32);
    static int ref_route[MAX_LAYERS][MAX_POS][MAX_K], route[MAX_LAYERS][MAX_POS][MAX_K];
    json_t *jr = json_object_get(root, "route");
    int n_rl = (int)json_array_size(jr);
    for (int il = 0; il < n_rl && il < MAX_LAYERS; il++)
        for (int p = 0; p < n; p++) {
            json_t *sel = json_array_get(json_array_get(jr, (size_t)il), (size_t)p);
            for (size_t j = 0; j < json_array_size(sel) && j < MAX_K; j++)
                ref_route[il][p][j] = (int)json_integer_value(json_array_get(sel, j));
            qsort(ref_route[il][p], json_array_size(sel), sizeof(int), cmp_int);
        }
    json_decref(root);

    hr_gguf *g = NULL;
    hr_model *m = NULL;
    CHECK_EQ(hr_gguf_open(&g, gguf, err), 0);
    CHECK_EQ(g ? hr_model_load(&m, g, err) : -1, 0);
    if (!m) {
        fprintf(stderr, "%s: %s\n", name, err);
        hr_gguf_close(g);
        return;
    }
    const hr_hparams *hp = hr_model_hparams(m);
    int nv = hp->n_vocab;
    CHECK(hp->n_expert > 0);
    CHECK_EQ(n_rl, hp->n_layer);
    size_t n_ref = 0;
    float *ref = read_floats(fixture_path(name, ".logits", path, sizeof path), &n_ref);
    CHECK_EQ(n_ref, (size_t)n * nv);

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
    CHECK(agree >= share * n);
    if (!quantized) { /* float: the same experts everywhere, within the bound */
        CHECK_EQ(differ, 0);
        CHECK(worst_all <= bound);
    } else { /* quantized: a near-tie may route one position differently */
        CHECK(differ * 10 <= n);
        CHECK(worst_same <= bound);
    }
    /* one token at a time computes what the chunks did, within float noise */
    hr_logits_cmp l1 = hr_compare_logits(lg1, lg, n, nv);
    CHECK(l1.rel <= 1e-5);

    /* greedy: float fixtures equal llama.cpp's 16 ids, or where they part,
     * hearth's top two logits lie within the bound */
    float *last = malloc((size_t)nv * sizeof(float));
    memcpy(last, lg + (size_t)(n - 1) * nv, (size_t)nv * sizeof(float));
    int match = 0, parted = -1;
    double gap = 0.0;
    for (int i = 0; i < n_greedy && c; i++) {
        int32_t id = hr_argmax(last, nv);
        if (parted < 0 && id == greedy[i]) {
            match++;
        } else if (parted < 0) {
            double mx = 0.0;
            for (int v = 0; v < nv; v++)
                mx = fmax(mx, fabs((double)last[v]));
            parted = i;
            gap = ((double)last[id] - last[greedy[i]]) / (mx > 0 ? mx : 1.0);
        }
        CHECK_EQ(hr_ctx_eval(c, &id, 1, n + i, last, false, err), 0);
    }
    printf("%-16s greedy: %d/%d ids match", name, match, n_greedy);
    if (parted >= 0)
        printf(", parted at a top-2 gap of %.2e", gap);
    printf("\n");
    CHECK_EQ(n_greedy, 16);
    if (!quantized)
        CHECK(parted < 0 || gap <= bound);
    free(last);
    free(lg);
    free(lg1);
    free(ref);
    hr_ctx_destroy(c);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* Two sequences in one step (prompts of 7 and 5 rows, then one decode row
 * each): each gets the bits it gets alone, although their rows share the
 * experts' products; the routing counts of the step are the sum of theirs. */
static void test_batch_invariance(void) {
    char gguf[512], err[HR_ERR_LEN];
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "qwen3moe-tiny"), 0);
    mp.ftype = "q4_k_m";
    mp.n_vocab = 512;
    snprintf(gguf, sizeof gguf, "%s/batch.gguf", tmpdir);
    CHECK_EQ(hr_mkmodel_write(&mp, gguf, NULL, NULL, err), 0);
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    CHECK_EQ(hr_gguf_open(&g, gguf, err), 0);
    CHECK_EQ(g ? hr_model_load(&m, g, err) : -1, 0);
    if (!m) {
        hr_gguf_close(g);
        return;
    }
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
            rows[i] = (hr_seq_pos){0, i};
        }
        for (int i = 0; i < 5; i++) {
            ids[7 + i] = b[i];
            rows[7 + i] = (hr_seq_pos){1, i};
        }
        int nl = 0;
        float *out = malloc((size_t)2 * nv * sizeof(float));
        CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 12, out, &nl, err), 0);
        CHECK_EQ(nl, 2);
        memcpy(both, out, (size_t)nv * 4);                               /* a's prompt */
        memcpy(both + (size_t)2 * nv, out + (size_t)nv, (size_t)nv * 4); /* b's prompt */
        int32_t dec[2] = {123, 123};
        hr_seq_pos drows[2] = {{0, 7}, {1, 5}};
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
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    if (sodium_init() < 0)
        return 1;
    for (size_t i = 0; i < sizeof fixture_names / sizeof fixture_names[0]; i++)
        test_fixture(fixture_names[i]);
    test_batch_invariance();
    test_refusals();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return hr_check_finish("test_moe");
}
