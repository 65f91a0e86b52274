/* vk-impl.h - the structs behind gpu/vk.h's handles, shared by vk.c (the
 * runtime) and vk_ops.c (the kernels' dispatch helpers). Internal to gpu/. */
#ifndef HR_GPU_VK_IMPL_H
#define HR_GPU_VK_IMPL_H

#include "gpu/vk-spv.h"
#include "gpu/vk.h"

#include <vulkan/vulkan.h>

#define HR_VK_PC_BYTES 128 /* push-constant bytes every kernel may use */
#define HR_VK_MAX_SETS 1024

struct hr_vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t size;
    void *map; /* host buffers only */
};

struct hr_vk_set {
    VkDescriptorSet set;
};

struct hr_vk {
    VkInstance inst;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties mem;
    hr_vk_device_info info;
    VkCommandPool cpool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkDescriptorPool dpool;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe[HR_VK_K_COUNT]; /* those hr_vk_wanted() names */
    bool use_dot;    /* shaderIntegerDotProduct enabled: quantized matmuls use the _DOT kernels */
    bool use_sg;     /* subgroup arithmetic: the fast kernels' _SG variants */
    bool exact;      /* hr_vk_set_exact: the exact kernels (needs info.f64) */
    bool fma_native; /* the pipelines' FMA_NATIVE: the device's fma() rounds once */
    bool grouped;    /* hr_vk_group_begin: no barrier after each dispatch */
    hr_vk_buf *staging; /* host-visible, HR_VK_STAGING bytes */
};

/* Records kernel k over n_groups workgroups (split over x and z when above
 * 65535; shaders rebuild the index with wg_row()) times gy, then a barrier. */
void hr_vk_dispatch(hr_vk *vk, hr_vk_set *s, hr_vk_kernel k, const void *pc, size_t pc_bytes,
                    uint32_t n_groups, uint32_t gy);

#endif
