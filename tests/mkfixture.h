/* mkfixture.h - the generated-model fixtures (tests/fixtures/moe,
 * tests/fixtures/archs): a fixture's model is rebuilt with mkmodel from
 * the options its mkref.sh passed to `hearth mkmodel`, and must hash to
 * the sha256 recorded next to llama.cpp's results. */
#ifndef HR_TESTS_MKFIXTURE_H
#define HR_TESTS_MKFIXTURE_H

#include "mmap/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"
#include "tests/check.h"
#include "tests/fixtures.h"

#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mkmodel's options as mkref.sh passed them to `hearth mkmodel` (the JSON
 * array "mkmodel": option, value, ...); false for an unknown option. */
static inline bool parse_mkmodel(json_t *args, hr_mkmodel_params *p) {
    *p = hr_mkmodel_params_default();
    for (size_t i = 0; i + 1 < json_array_size(args); i += 2) {
        const char *k = json_string_value(json_array_get(args, i));
        const char *v = json_string_value(json_array_get(args, i + 1));
        if (!k || !v)
            return false;
        int n = atoi(v);
        if (strcmp(k, "--shape") == 0) {
            if (hr_mkmodel_shape(p, v) != 0)
                return false;
        } else if (strcmp(k, "--type") == 0) {
            p->ftype = v; /* borrowed from args */
        } else if (strcmp(k, "--embd") == 0) {
            p->n_embd = n;
        } else if (strcmp(k, "--heads") == 0) {
            p->n_head = n;
        } else if (strcmp(k, "--heads-kv") == 0) {
            p->n_head_kv = n;
        } else if (strcmp(k, "--head-dim") == 0) {
            p->head_dim = n;
        } else if (strcmp(k, "--ffn") == 0) {
            p->n_ff = n;
        } else if (strcmp(k, "--window") == 0) {
            p->n_swa = n;
        } else if (strcmp(k, "--window-pattern") == 0) {
            p->swa_pattern = n;
        } else if (strcmp(k, "--experts") == 0) {
            p->n_expert = n;
        } else if (strcmp(k, "--experts-used") == 0) {
            p->n_expert_used = n;
        } else if (strcmp(k, "--expert-ffn") == 0) {
            p->n_ff_exp = n;
        } else if (strcmp(k, "--shared-ffn") == 0) {
            p->n_ff_shexp = n;
        } else if (strcmp(k, "--vocab-size") == 0) {
            p->n_vocab = n;
        } else {
            fprintf(stderr, "unknown mkmodel option %s\n", k);
            return false;
        }
    }
    return true;
}

/* The sha256 of the file at path, in hex (sodium_init() done). */
static inline void sha256_hex(const char *path, char out[65]) {
    size_t len = 0;
    char *data = slurp(path, &len);
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)data, data ? len : 0);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
    free(data);
}

/* Writes the model of mp to path and opens it: true, or false (the
 * failed steps counted as checks, the error printed) with *g and *m NULL. */
static inline bool mkfix_generate(const hr_mkmodel_params *mp, const char *path, hr_gguf **g,
                                  hr_model **m) {
    char err[HR_ERR_LEN] = "";
    *g = NULL;
    *m = NULL;
    CHECK_EQ(hr_mkmodel_write(mp, path, NULL, NULL, err), 0);
    CHECK_EQ(hr_gguf_open(g, path, err), 0);
    CHECK_EQ(*g ? hr_model_load(m, *g, err) : -1, 0);
    if (!*m) {
        fprintf(stderr, "%s: %s\n", path, err);
        hr_gguf_close(*g);
        *g = NULL;
    }
    return *m != NULL;
}

#define MKFIX_MAX_POS 64

/* One fixture: its JSON (root, kept open for fields of a test's own), its
 * model rebuilt and loaded, its prompt, llama.cpp's greedy ids and logits
 * ([n][n_vocab]), and its bounds. */
typedef struct {
    json_t *root;
    hr_gguf *g;
    hr_model *m;
    double bound, share; /* max rel error, share of positions whose argmax agrees */
    bool quantized;
    int32_t ids[MKFIX_MAX_POS], greedy[32];
    int n, n_greedy;
    float *ref;
} mkfix;

/* Opens the fixture of json_path: rebuilds its model at gguf with mkmodel
 * (its sha256 must be the recorded one), loads it and llama.cpp's logits
 * from logits_path. false (checks counted) when it cannot be used. */
static inline bool mkfix_open(mkfix *f, const char *json_path, const char *logits_path,
                              const char *gguf) {
    memset(f, 0, sizeof *f);
    json_error_t jerr;
    f->root = json_load_file(json_path, 0, &jerr);
    CHECK(f->root != NULL);
    if (!f->root)
        return false;
    hr_mkmodel_params mp;
    CHECK(parse_mkmodel(json_object_get(f->root, "mkmodel"), &mp));
    bool ok = mkfix_generate(&mp, gguf, &f->g, &f->m);
    char sum[65];
    sha256_hex(gguf, sum);
    const char *want = json_string_value(json_object_get(f->root, "sha256"));
    CHECK(want && strcmp(sum, want) == 0); /* else mkmodel changed: run mkref.sh again */
    f->bound = json_real_value(json_object_get(f->root, "bound"));
    f->share = json_real_value(json_object_get(f->root, "argmax_share"));
    f->quantized = f->bound > 1e-3;
    f->n = read_ids(f->root, "prompt_ids", f->ids, MKFIX_MAX_POS);
    f->n_greedy = read_ids(f->root, "greedy_ids", f->greedy, 32);
    if (!ok)
        return false;
    size_t n_ref = 0, nv = (size_t)hr_model_hparams(f->m)->n_vocab;
    f->ref = read_floats(logits_path, &n_ref);
    CHECK_EQ(n_ref, (size_t)f->n * nv);
    return f->ref != NULL && n_ref == (size_t)f->n * nv;
}

static inline void mkfix_close(mkfix *f) {
    free(f->ref);
    hr_model_free(f->m);
    hr_gguf_close(f->g);
    if (f->root)
        json_decref(f->root);
    memset(f, 0, sizeof *f);
}

/* The greedy continuation from c (the prompt evaluated; last: its last
 * row's logits, overwritten): 16 ids as llama.cpp's, or for float
 * fixtures, where they part, hearth's top two logits within the bound. */
static inline void mkfix_greedy(const mkfix *f, hr_ctx *c, float *last, const char *name) {
    int nv = hr_model_hparams(f->m)->n_vocab, parted = -1;
    double gap = 0.0;
    int match = c ? hr_greedy_compare(c, last, nv, f->n, f->greedy, f->n_greedy, &parted, &gap) : 0;
    printf("%-16s greedy: %d/%d ids match", name, match, f->n_greedy);
    if (parted >= 0)
        printf(", parted at a top-2 gap of %.2e", gap);
    printf("\n");
    CHECK_EQ(f->n_greedy, 16);
    if (!f->quantized)
        CHECK(parted < 0 || gap <= f->bound);
}

#endif
