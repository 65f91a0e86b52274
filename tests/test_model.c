/* test_model.c - forward pass against llama.cpp reference logits for every
 * model in ../shared/models, greedy continuation, layer-window hand-over
 * equivalence, and the per-layer tensor / architecture tables against the
 * GGUF files. */
#include "tests/check.h"
#include "tests/fixtures.h"

#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/layer-impl.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"

#include <jansson.h>
#include <unistd.h>

/* The tensor table against the file's own tensor list, read directly from
 * the GGUF: per layer, the table-driven hr_model_layer_bytes equals the
 * stored size of every tensor named blk.<il>.*, and the tensors the table
 * bound are all of them. */
static void check_layer_tensors(const char *name, const hr_gguf *g, const hr_model *m) {
    const hr_hparams *hp = hr_model_hparams(m);
    uint64_t all_file = 0, all_table = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        char prefix[32];
        size_t len = (size_t)snprintf(prefix, sizeof prefix, "blk.%d.", il);
        uint64_t file = 0;
        int n_file = 0, n_bound = 0;
        for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
            const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
            if (strncmp(t->name, prefix, len) == 0) {
                file += t->size;
                n_file++;
            }
        }
        for (int i = 0; i < hr_layer_tensor_count(); i++)
            n_bound += hr_layer_weight(hr_model_layer(m, il), hr_layer_tensor_get(i))->data != NULL;
        for (int i = 0; i < hr_layer_fused_count(); i++) /* one tensor, several views */
            if (hp->sets & hr_layer_fused_get(i)->set)
                n_bound -= hr_layer_fused_get(i)->n_parts - 1;
        CHECK(file > 0);
        CHECK_EQ(hr_model_layer_bytes(m, il), file);
        CHECK_EQ(n_bound, n_file);
        all_file += file;
        all_table += hr_model_layer_bytes(m, il);
    }
    CHECK_EQ(all_table, all_file);
    printf("%-20s %d layers: %llu tensor bytes, table and file agree\n", name, hp->n_layer,
           (unsigned long long)all_file);
}

/* The architecture table: rows found by GGUF name, defaults as documented. */
static void test_arch_table(void) {
    const hr_arch_info *llama = hr_arch_find("llama"), *qwen2 = hr_arch_find("qwen2");
    const hr_arch_info *qwen3 = hr_arch_find("qwen3");
    CHECK(llama && qwen2 && qwen3);
    if (!llama || !qwen2 || !qwen3)
        return;
    CHECK(hr_arch_find("gpt2") == NULL);
    CHECK(hr_arch_find("llam") == NULL);
    CHECK(!llama->rope_neox && qwen2->rope_neox && qwen3->rope_neox);
    CHECK(llama->rms_eps == 1e-5f && qwen3->rms_eps == 1e-6f);
    CHECK(llama->rope_base == 10000.0f && qwen2->rope_base == 1000000.0f);
    CHECK_EQ(qwen3->needs, HR_LT_QK_NORM);
    CHECK_EQ(qwen2->sets, HR_LT_QKV_BIAS);
    char names[128];
    const char *all = "llama, qwen2, qwen3, qwen3moe, qwen2moe, phi3, gemma3, gpt-oss";
    CHECK_EQ(hr_arch_names(names, sizeof names), strlen(all));
    CHECK_STR(names, all);
    /* experts: the *moe rows always, llama by the file; qwen2moe's shared
     * expert; dense files keep the dense feed-forward */
    const hr_arch_info *q3m = hr_arch_find("qwen3moe"), *q2m = hr_arch_find("qwen2moe");
    CHECK(q3m && q2m && q3m->moe && q2m->moe && !llama->moe && llama->moe_norm_w &&
          q3m->moe_norm_w && !q2m->moe_norm_w);
    unsigned sets, needs;
    hr_arch_layer_sets(llama, 0, &sets, &needs);
    CHECK_EQ(needs & (HR_LT_FFN | HR_LT_MOE), HR_LT_FFN);
    hr_arch_layer_sets(llama, 8, &sets, &needs);
    CHECK_EQ(needs & (HR_LT_FFN | HR_LT_MOE | HR_LT_SHEXP), HR_LT_MOE);
    hr_arch_layer_sets(q2m, 60, &sets, &needs);
    CHECK_EQ(needs & (HR_LT_FFN | HR_LT_MOE | HR_LT_SHEXP), HR_LT_MOE | HR_LT_SHEXP);
    /* every table row names a distinct field inside hr_layer_weights */
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        const hr_layer_tensor *t = hr_layer_tensor_get(i);
        CHECK(t->offset + sizeof(hr_weight) <= sizeof(hr_layer_weights));
        for (int j = 0; j < i; j++)
            CHECK(hr_layer_tensor_get(j)->offset != t->offset);
    }
    CHECK(hr_layer_tensor_get(hr_layer_tensor_count()) == NULL);
    /* a fused tensor's parts are rows of the table of one width, each in
     * one fused tensor at most */
    for (int i = 0; i < hr_layer_fused_count(); i++) {
        const hr_layer_fused *f = hr_layer_fused_get(i);
        int found = 0, part = -1;
        for (int r = 0; r < hr_layer_tensor_count(); r++) {
            const hr_layer_tensor *t = hr_layer_tensor_get(r);
            const hr_layer_fused *g = hr_layer_fused_of(t, ~0u, &part);
            if (g == f) {
                CHECK_EQ(t->offset, f->part[part]);
                CHECK(t->n_in == hr_layer_fused_in(f) && t->n_out != HR_DIM_1);
                found++;
            }
        }
        CHECK_EQ(found, f->n_parts);
    }
    CHECK(hr_layer_fused_get(hr_layer_fused_count()) == NULL);
}

static void test_fixture(const hr_fixture *fx, int n_threads) {
    char path[512], err[HR_ERR_LEN] = "";
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.gguf", fx->name);
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, hr_shared_path(rel, path, sizeof path), err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "%s: %s\n", fx->name, err);
        return;
    }
    hr_model *m = NULL;
    rc = hr_model_load(&m, g, err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "%s: %s\n", fx->name, err);
        hr_gguf_close(g);
        return;
    }
    check_layer_tensors(fx->name, g, m);
    snprintf(rel, sizeof rel, "reference/%s.json", fx->name);
    json_error_t jerr;
    json_t *root = json_load_file(hr_shared_path(rel, path, sizeof path), 0, &jerr);
    CHECK(root != NULL);
    int32_t ids[256], greedy[64];
    int n = read_ids(root, "prompt_ids", ids, 256);
    int n_greedy = read_ids(root, "greedy_ids", greedy, 64);
    json_decref(root);
    snprintf(rel, sizeof rel, "reference/%s.logits", fx->name);
    size_t n_ref = 0;
    float *ref = read_floats(hr_shared_path(rel, path, sizeof path), &n_ref);
    const hr_hparams *hp = hr_model_hparams(m);
    int nv = hp->n_vocab;
    CHECK_EQ(n_ref, (size_t)n * nv);

    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 128;
    cp.n_batch = 8; /* several prefill chunks */
    cp.n_threads = n_threads;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    float *lg = malloc((size_t)n * nv * sizeof(float));
    CHECK_EQ(hr_ctx_eval(c, ids, n, 0, lg, true, err), 0);
    const hr_logits_cmp lc = hr_compare_logits(lg, ref, n, nv);
    const double worst = lc.rel;
    const int agree = lc.agree;
    const bool canon = hr_kernels_best()->canonical;
    printf("%-20s threads %d (%s): max rel err %.3e, argmax agree %d/%d\n", fx->name, n_threads,
           canon ? "exact" : "default", worst, agree, n);
    /* a token's logits do not depend on how the prompt is cut into chunks
     * of two or more (the prompt cache and batched steps rely on it; a lone
     * token goes through the decode kernel, which may differ) */
    for (int nb = 5; nb <= 16; nb += 11) {
        hr_ctx_params cq = cp;
        cq.n_batch = nb;
        hr_ctx *c2 = NULL;
        float *lg2 = malloc((size_t)n * nv * sizeof(float));
        CHECK_EQ(hr_ctx_create(&c2, m, &cq, err), 0);
        CHECK_EQ(c2 && lg2 ? hr_ctx_eval(c2, ids, n, 0, lg2, true, err) : -1, 0);
        int same = 0, cmp = 0;
        for (int p = 0; lg2 && p < n; p++) {
            int e8 = (p / 8 + 1) * 8 < n ? (p / 8 + 1) * 8 : n,
                eb = (p / nb + 1) * nb < n ? (p / nb + 1) * nb : n;
            if (e8 - p / 8 * 8 < 2 || eb - p / nb * nb < 2)
                continue; /* a one-token chunk in either cut */
            cmp++;
            same +=
                memcmp(lg + (size_t)p * nv, lg2 + (size_t)p * nv, (size_t)nv * sizeof(float)) == 0;
        }
        printf("%-20s chunks of 8 vs %d: %d/%d positions bit-identical\n", fx->name, nb, same, cmp);
        CHECK(cmp > 0);
        CHECK_EQ(same, cmp);
        free(lg2);
        hr_ctx_destroy(c2);
    }
    if (fx->quantized && canon) { /* every table follows llama.cpp's x86 float order */
        CHECK(worst <= 1e-2);
        CHECK_EQ(agree, n);
    } else if (fx->quantized) { /* a free order's bound (kernels/quant.h) */
        CHECK(worst <= 3e-2);
        CHECK(agree * 100 >= 95 * n);
    } else {
        CHECK(worst <= 1e-4); /* measured: 1.9e-5 at most */
        CHECK_EQ(agree, n);
    }

    /* Greedy continuation: must equal the reference for float weights. */
    float *last = malloc((size_t)nv * sizeof(float));
    memcpy(last, lg + (size_t)(n - 1) * nv, (size_t)nv * sizeof(float));
    /* Quantized fixtures: llama.cpp made its greedy ids with an F16 KV
     * cache (hearth keeps F32), and on these random-weight models the
     * difference grows over the 32 steps while their top logits have
     * near-ties. The ids must agree up to the first step where hearth's top
     * two logits lie within 2e-2 of the row's largest magnitude (the gaps
     * where they part, measured: 9.0e-4, 1.3e-3, 1.0e-2); after it the
     * sequences differ and are not compared. Float fixtures agree at every
     * step. */
    int parted = -1;
    double gap_rel = 0.0;
    const int match = hr_greedy_compare(c, last, nv, n, greedy, n_greedy, &parted, &gap_rel);
    printf("%-20s greedy: %d/%d leading tokens match", fx->name, match, n_greedy);
    if (parted >= 0)
        printf(" (parted at a top-2 gap of %.2e of the largest logit)", gap_rel);
    printf("\n");
    CHECK(n_greedy > 0);
    if (!fx->quantized)
        CHECK_EQ(match, n_greedy);
    else if (parted >= 0)
        CHECK(gap_rel <= 2e-2);

    /* Window hand-over: layers [0,a) then [a,L) equals [0,L). */
    for (int a = 1; a < hp->n_layer; a++) {
        hr_ctx_params p1 = cp, p2 = cp;
        p1.layer_end = a;
        p2.layer_begin = a;
        p2.layer_end = hp->n_layer;
        hr_ctx *c1 = NULL, *c2 = NULL;
        CHECK_EQ(hr_ctx_create(&c1, m, &p1, err), 0);
        CHECK_EQ(hr_ctx_create(&c2, m, &p2, err), 0);
        float *h = malloc((size_t)n * hp->n_embd * sizeof(float));
        float *lw = malloc((size_t)n * nv * sizeof(float));
        CHECK_EQ(hr_model_embed(m, ids, n, h, err), 0);
        for (int done = 0; done < n; done += cp.n_batch) {
            int nb = n - done < cp.n_batch ? n - done : cp.n_batch;
            float *hh = h + (size_t)done * hp->n_embd;
            CHECK_EQ(hr_ctx_layers(c1, hh, nb, done, err), 0);
            CHECK_EQ(hr_ctx_layers(c2, hh, nb, done, err), 0);
            CHECK_EQ(hr_ctx_output(c2, hh, 0, nb, lw + (size_t)done * nv), 0);
        }
        const hr_logits_cmp hc = hr_compare_logits(lw, lg, n, nv);
        CHECK(hc.rel == 0.0);
        CHECK_EQ(hc.agree, n);
        free(h);
        free(lw);
        hr_ctx_destroy(c1);
        hr_ctx_destroy(c2);
    }
    free(last);
    free(lg);
    free(ref);
    hr_ctx_destroy(c);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* Generated models of each architecture: load, run finite, windows chain
 * exactly, qwen3 carries its per-head q/k norms; unknown archs refused. */
static void test_generated(const char *arch, const char *ftype) {
    char path[128], err[HR_ERR_LEN] = "";
    snprintf(path, sizeof path, "/tmp/hearth-test-model-%d-%s.gguf", (int)getpid(), arch);
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    hr_mkmodel_shape(&mp, "tiny");
    mp.arch = arch;
    mp.ftype = ftype;
    mp.n_vocab = 512;
    int rc = hr_mkmodel_write(&mp, path, NULL, NULL, err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "mkmodel %s: %s\n", arch, err);
        return;
    }
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    CHECK_EQ(hr_gguf_open(&g, path, err), 0);
    CHECK_EQ(hr_model_load(&m, g, err), 0);
    const hr_hparams *hp = hr_model_hparams(m);
    CHECK_STR(hp->arch_name, arch);
    CHECK(hp->arch == hr_arch_find(arch));
    check_layer_tensors(arch, g, m);
    CHECK_EQ(hr_model_layer(m, 0)->q_norm.data != NULL, strcmp(arch, "qwen3") == 0);
    CHECK_EQ(hr_model_layer(m, 0)->bq.data != NULL, strcmp(arch, "qwen2") == 0);
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 4;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    int32_t ids[6] = {1, 17, 300, 42, 5, 99};
    float *lg = malloc(sizeof(float) * 6 * hp->n_vocab);
    CHECK_EQ(hr_ctx_eval(c, ids, 6, 0, lg, true, err), 0);
    int finite = 1;
    for (int i = 0; i < 6 * hp->n_vocab; i++)
        finite &= isfinite(lg[i]) != 0;
    CHECK(finite);
    int32_t bad = hp->n_vocab;
    CHECK_EQ(hr_ctx_eval(c, &bad, 1, 6, lg, false, err), HR_ERANGE);
    CHECK(strstr(err, "out of range") != NULL);
    CHECK_EQ(hr_ctx_eval(c, ids, 1, 40, lg, false, err), HR_ERANGE);
    free(lg);
    hr_ctx_destroy(c);
    hr_model_free(m);
    hr_gguf_close(g);
    unlink(path);
}

int main(void) {
    test_arch_table();
    test_generated("llama", "q8_0");
    test_generated("qwen2", "f16");
    test_generated("qwen3", "q4_0");
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        test_fixture(&fixtures[i], i % 2 ? 2 : 1);
    /* threads must not change results */
    test_fixture(&fixtures[0], 2);
    /* exact mode, where the default table sums in a free order */
    if (!hr_kernels_best()->canonical) {
        hr_kernels_set_exact(true);
        for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
            if (fixtures[i].quantized)
                test_fixture(&fixtures[i], i % 2 ? 2 : 1);
        hr_kernels_set_exact(false);
    }
    return hr_check_finish("test_model");
}
