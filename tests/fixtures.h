/* fixtures.h - the shared fixtures (../shared/models, ../shared/reference)
 * as the model-level tests read them: the list, llama.cpp's logits files,
 * the reference JSON's token ids (the comparison is check.h's
 * hr_compare_logits). */
#ifndef HR_TESTS_FIXTURES_H
#define HR_TESTS_FIXTURES_H

#include "model/sampler.h"

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

#endif
