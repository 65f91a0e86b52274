/* vk_host.c - the parts of gpu/vk.h that run on the host alone and build
 * with or without Vulkan: the RoPE angle table and the activation formats'
 * sizes. */
#include "gpu/vk.h"

#include "kernels/types.h"

#include <math.h>

void hr_vk_rope_table(float *tab, int n_tok, int pos, int n_rot, float freq_base,
                      const float *freq_factors) {
    int half = n_rot / 2;
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    for (int t = 0; t < n_tok; t++) {
        float theta_base = (float)(pos + t);
        for (int i = 0; i < half; i++, theta_base *= theta_scale) {
            float theta = theta_base;
            if (freq_factors)
                theta /= freq_factors[i];
            tab[((size_t)t * half + i) * 2] = cosf(theta);
            tab[((size_t)t * half + i) * 2 + 1] = sinf(theta);
        }
    }
}

/* Elements per quantization block of an activation format, 0 if none. */
uint32_t hr_vk_act_block(int act) {
    switch (act) {
    case HR_TYPE_Q8_0:
    case HR_TYPE_Q8_1:
        return 32;
    case HR_TYPE_Q8_K:
        return 256;
    default:
        return 0;
    }
}

size_t hr_vk_act_words(int act, int64_t n_in, int n_tok) {
    if (!hr_vk_act_block(act))
        return 0;
    /* qs (4 per word) + a scale and a sum per 32 values */
    return (size_t)n_tok * ((size_t)n_in / 4 + 2 * ((size_t)n_in / 32));
}
