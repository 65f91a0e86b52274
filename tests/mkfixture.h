/* mkfixture.h - the generated-model fixtures (tests/fixtures/moe,
 * tests/fixtures/archs): a fixture's model is rebuilt with mkmodel from
 * the options its mkref.sh passed to `hearth mkmodel`, and must hash to
 * the sha256 recorded next to llama.cpp's results. */
#ifndef HR_TESTS_MKFIXTURE_H
#define HR_TESTS_MKFIXTURE_H

#include "model/mkmodel.h"
#include "tests/check.h"

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

#endif
