/* vk-spv.h - the kernels' SPIR-V, one entry per compiled shader variant
 * (generated at build time from gpu/shaders/ by CMakeLists.txt into
 * vk_spv.c). Internal to gpu/. */
#ifndef HR_GPU_VK_SPV_H
#define HR_GPU_VK_SPV_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    HR_VK_K_RMSNORM,
    HR_VK_K_ADD,
    HR_VK_K_SWIGLU,
    HR_VK_K_SOFTMAX,
    HR_VK_K_ROPE,
    HR_VK_K_KVSTORE,
    HR_VK_K_ATTN,
    HR_VK_K_PROBE,
    HR_VK_K_Q8_0,
    HR_VK_K_Q8_1,
    HR_VK_K_Q8_K,
    HR_VK_K_MM_F32,
    HR_VK_K_MM_F16,
    HR_VK_K_MM_BF16,
    HR_VK_K_MM_Q4_0,
    HR_VK_K_MM_Q4_1,
    HR_VK_K_MM_Q5_0,
    HR_VK_K_MM_Q5_1,
    HR_VK_K_MM_Q8_0,
    HR_VK_K_MM_Q4_K,
    HR_VK_K_MM_Q5_K,
    HR_VK_K_MM_Q6_K,
    /* one token (matvec.comp) */
    HR_VK_K_MV_F16,
    HR_VK_K_MV_BF16,
    HR_VK_K_MV_Q4_0,
    HR_VK_K_MV_Q4_1,
    HR_VK_K_MV_Q5_0,
    HR_VK_K_MV_Q5_1,
    HR_VK_K_MV_Q8_0,
    HR_VK_K_MV_Q4_K,
    HR_VK_K_MV_Q5_K,
    HR_VK_K_MV_Q6_K,
    /* the quantized ones with packed int8 dot products
     * (shaderIntegerDotProduct): each block of 8 in the order above */
    HR_VK_K_MM_Q4_0_DOT,
    HR_VK_K_MM_Q4_1_DOT,
    HR_VK_K_MM_Q5_0_DOT,
    HR_VK_K_MM_Q5_1_DOT,
    HR_VK_K_MM_Q8_0_DOT,
    HR_VK_K_MM_Q4_K_DOT,
    HR_VK_K_MM_Q5_K_DOT,
    HR_VK_K_MM_Q6_K_DOT,
    HR_VK_K_MV_Q4_0_DOT,
    HR_VK_K_MV_Q4_1_DOT,
    HR_VK_K_MV_Q5_0_DOT,
    HR_VK_K_MV_Q5_1_DOT,
    HR_VK_K_MV_Q8_0_DOT,
    HR_VK_K_MV_Q4_K_DOT,
    HR_VK_K_MV_Q5_K_DOT,
    HR_VK_K_MV_Q6_K_DOT,
    /* the fast path (32-bit floats, no canonical order, no 64-bit
     * floats): _SG with subgroup arithmetic, the others reduce through
     * shared memory */
    HR_VK_K_F_RMSNORM,
    HR_VK_K_F_RMSNORM_SG,
    HR_VK_K_F_SOFTMAX,
    HR_VK_K_F_SOFTMAX_SG,
    HR_VK_K_F_ATTN,
    HR_VK_K_F_ATTN_SG,
    HR_VK_K_F_SWIGLU,
    HR_VK_K_F_ROPEKV,
    HR_VK_K_F_Q8_0,
    HR_VK_K_F_Q8_1,
    HR_VK_K_F_Q8_K,
    HR_VK_K_BW,      /* the memory read bandwidth probe (hr_vk_membw) */
    HR_VK_K_F_RQ8_0, /* RMSNorm + quantize (quant.comp -DRMS) */
    HR_VK_K_F_RQ8_1,
    HR_VK_K_F_RQ8_K,
    /* mm_fast.comp: each block of 11 (8 for _DOT) in the order of the MM_ ones */
    HR_VK_K_F_MM_F32,
    HR_VK_K_F_MM_F16,
    HR_VK_K_F_MM_BF16,
    HR_VK_K_F_MM_Q4_0,
    HR_VK_K_F_MM_Q4_1,
    HR_VK_K_F_MM_Q5_0,
    HR_VK_K_F_MM_Q5_1,
    HR_VK_K_F_MM_Q8_0,
    HR_VK_K_F_MM_Q4_K,
    HR_VK_K_F_MM_Q5_K,
    HR_VK_K_F_MM_Q6_K,
    HR_VK_K_F_MM_F32_SG,
    HR_VK_K_F_MM_F16_SG,
    HR_VK_K_F_MM_BF16_SG,
    HR_VK_K_F_MM_Q4_0_SG,
    HR_VK_K_F_MM_Q4_1_SG,
    HR_VK_K_F_MM_Q5_0_SG,
    HR_VK_K_F_MM_Q5_1_SG,
    HR_VK_K_F_MM_Q8_0_SG,
    HR_VK_K_F_MM_Q4_K_SG,
    HR_VK_K_F_MM_Q5_K_SG,
    HR_VK_K_F_MM_Q6_K_SG,
    HR_VK_K_F_MM_Q4_0_DOT,
    HR_VK_K_F_MM_Q4_1_DOT,
    HR_VK_K_F_MM_Q5_0_DOT,
    HR_VK_K_F_MM_Q5_1_DOT,
    HR_VK_K_F_MM_Q8_0_DOT,
    HR_VK_K_F_MM_Q4_K_DOT,
    HR_VK_K_F_MM_Q5_K_DOT,
    HR_VK_K_F_MM_Q6_K_DOT,
    HR_VK_K_F_MM_Q4_0_SG_DOT,
    HR_VK_K_F_MM_Q4_1_SG_DOT,
    HR_VK_K_F_MM_Q5_0_SG_DOT,
    HR_VK_K_F_MM_Q5_1_SG_DOT,
    HR_VK_K_F_MM_Q8_0_SG_DOT,
    HR_VK_K_F_MM_Q4_K_SG_DOT,
    HR_VK_K_F_MM_Q5_K_SG_DOT,
    HR_VK_K_F_MM_Q6_K_SG_DOT,
    HR_VK_K_COUNT
} hr_vk_kernel;

typedef struct {
    const uint32_t *code;
    size_t bytes;
} hr_vk_spv;

extern const hr_vk_spv hr_vk_spv_table[HR_VK_K_COUNT];

#endif
