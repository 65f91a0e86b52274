/* fixtures.h - the shared fixtures (../shared/models, ../shared/reference)
 * as the model-level tests read them: the list, llama.cpp's logits files,
 * the reference JSON's token ids (the comparison is check.h's
 * hr_compare_logits). */
#ifndef HR_TESTS_FIXTURES_H
#define HR_TESTS_FIXTURES_H

#include "model/model.h"
#include "model/sampler.h"
#include "tests/check.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *name;
    bool quantized;
} hr_fixture;

static const hr_fixture fixtures[] = {
    {"tiny-llama-f32", false},  {"small-qwen2-f16", false},   {"small-llama-q4_0", true},
    {"small-llama-q8_0", true}, {"small-llama-q4_k_m", true}, {"small-llama-q5_k_m", true},
    {"small-llama-q6_k", true}, {"small-qwen2-q4_k_m", true},
};

/* A file of raw floats (llama.cpp's logits); its count in *n (0 on failure). */
static inline float *read_floats(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *buf = len > 0 ? malloc((size_t)len) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        *n = (size_t)len / sizeof(float);
    return buf;
}

/* The token ids under key of a reference JSON, at most cap; their count. */
static inline int read_ids(json_t *root, const char *key, int32_t *ids, int cap) {
    json_t *arr = json_object_get(root, key);
    int n = 0;
    for (size_t i = 0; arr && i < json_array_size(arr) && n < cap; i++)
        ids[n++] = (int32_t)json_integer_value(json_array_get(arr, i));
    return n;
}

/* Greedy continuation: from the logits in last (nv values, overwritten)
 * the context evaluates n argmax ids from position pos, each compared with
 * ref[i]. Returns how many leading ids match; *parted is the first step
 * where they differ (-1: none) and *gap the top-2 gap there, relative to
 * the row's largest magnitude. */
static inline int hr_greedy_compare(hr_ctx *c, float *last, int nv, int pos, const int32_t *ref,
                                    int n, int *parted, double *gap) {
    char err[HR_ERR_LEN];
    int match = 0;
    *parted = -1;
    *gap = 0.0;
    for (int i = 0; i < n; i++) {
        int32_t id = hr_argmax(last, nv);
        if (*parted < 0 && id == ref[i]) {
            match++;
        } else if (*parted < 0) {
            double mx = 0.0;
            for (int v = 0; v < nv; v++)
                mx = fmax(mx, fabs((double)last[v]));
            *parted = i;
            *gap = ((double)last[id] - last[ref[i]]) / (mx > 0 ? mx : 1.0);
        }
        CHECK_EQ(hr_ctx_eval(c, &id, 1, pos + i, last, false, err), 0);
    }
    return match;
}

#endif
