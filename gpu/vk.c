/* vk.c - the Vulkan runtime behind gpu/vk.h: instance and device discovery,
 * device choice, buffers and their memory, descriptor sets, pipelines built
 * from the embedded SPIR-V, and one command buffer recorded and submitted at
 * a time. The kernels' dispatch helpers are in vk_ops.c. */
#include "gpu/vk-impl.h"

#include "common/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "vk"
#define HR_VK_STAGING (16u << 20) /* bytes of the staging buffer */

bool hr_vk_built(void) { return true; }

const char *hr_vk_type_name(hr_vk_type t) {
    switch (t) {
    case HR_VK_DISCRETE:
        return "discrete";
    case HR_VK_INTEGRATED:
        return "integrated";
    case HR_VK_VIRTUAL:
        return "virtual";
    case HR_VK_CPU:
        return "cpu";
    default:
        return "other";
    }
}

static int hr_vk_instance(VkInstance *inst, char *err) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "hearth",
                             .apiVersion = VK_API_VERSION_1_1};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkResult r = vkCreateInstance(&ci, NULL, inst);
    if (r != VK_SUCCESS)
        return hr_seterr(err, HR_EUNSUPPORTED, "vkCreateInstance failed (%d): no Vulkan driver",
                         (int)r);
    return 0;
}

static hr_vk_type hr_vk_map_type(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
        return HR_VK_DISCRETE;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
        return HR_VK_INTEGRATED;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
        return HR_VK_VIRTUAL;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
        return HR_VK_CPU;
    default:
        return HR_VK_OTHER;
    }
}

static void hr_vk_describe(VkPhysicalDevice pd, hr_vk_device_info *d) {
    VkPhysicalDeviceProperties pp;
    vkGetPhysicalDeviceProperties(pd, &pp);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", pp.deviceName);
    d->type = hr_vk_map_type(pp.deviceType);
    d->vendor_id = pp.vendorID;
    d->device_id = pp.deviceID;
    d->api_version = pp.apiVersion;
    d->max_storage_range = pp.limits.maxStorageBufferRange;
    d->n_heaps = (int)(mp.memoryHeapCount < HR_VK_MAX_HEAPS ? mp.memoryHeapCount : HR_VK_MAX_HEAPS);
    for (int i = 0; i < d->n_heaps; i++) {
        d->heap_bytes[i] = mp.memoryHeaps[i].size;
        d->heap_device_local[i] = (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    VkPhysicalDeviceFeatures feat;
    vkGetPhysicalDeviceFeatures(pd, &feat);
    const char *no64 = getenv("HR_VK_NO_F64");
    d->f64 = feat.shaderFloat64 == VK_TRUE && !(no64 && strcmp(no64, "1") == 0);
    uint32_t n_ext = 0;
    bool has_ext = false, has_f16 = pp.apiVersion >= VK_API_VERSION_1_2;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = n_ext ? calloc(n_ext, sizeof *ext) : NULL;
    if (ext && vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, ext) == VK_SUCCESS) {
        for (uint32_t i = 0; i < n_ext; i++) {
            const char *e = ext[i].extensionName;
            has_ext = has_ext || strcmp(e, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) == 0;
            d->coop_matrix = d->coop_matrix || strcmp(e, "VK_KHR_cooperative_matrix") == 0;
            has_f16 = has_f16 || strcmp(e, "VK_KHR_shader_float16_int8") == 0;
        }
    }
    free(ext);
    if (pp.apiVersion >= VK_API_VERSION_1_1) { /* subgroups: core in 1.1 */
        VkPhysicalDeviceSubgroupProperties sg = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &sg};
        vkGetPhysicalDeviceProperties2(pd, &p2);
        d->subgroup_size = sg.subgroupSize;
        d->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
                            (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    }
    if (has_f16) {
        VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR};
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &f16};
        vkGetPhysicalDeviceFeatures2(pd, &f2);
        d->fp16 = f16.shaderFloat16 == VK_TRUE;
    }
    if (has_ext) { /* the extension, and its feature switched on */
        VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &dot};
        vkGetPhysicalDeviceFeatures2(pd, &f2);
        d->int_dot = dot.shaderIntegerDotProduct == VK_TRUE;
    }
}

/* The physical devices (at most HR_VK_MAX_DEVICES) of a new instance. */
static int hr_vk_enum(VkInstance inst, VkPhysicalDevice *pd, uint32_t *n, char *err) {
    *n = HR_VK_MAX_DEVICES;
    VkResult r = vkEnumeratePhysicalDevices(inst, n, pd);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return hr_seterr(err, HR_EIO, "vkEnumeratePhysicalDevices failed (%d)", (int)r);
    return 0;
}

int hr_vk_list(hr_vk_device_info *out, int cap, int *n, char err[HR_ERR_LEN]) {
    *n = 0;
    VkInstance inst;
    char e2[HR_ERR_LEN];
    if (hr_vk_instance(&inst, e2) != 0)
        return 0; /* no loader or no driver: no devices */
    VkPhysicalDevice pd[HR_VK_MAX_DEVICES];
    uint32_t np = 0;
    int rc = hr_vk_enum(inst, pd, &np, err);
    for (uint32_t i = 0; rc == 0 && i < np && (int)i < cap; i++)
        hr_vk_describe(pd[i], &out[(*n)++]);
    vkDestroyInstance(inst, NULL);
    return rc;
}

int hr_vk_pick(const char *spec, int *index, char err[HR_ERR_LEN]) {
    *index = -1;
    if (!spec)
        spec = getenv("HR_GPU");
    if (!spec || !*spec)
        spec = "auto";
    if (strcmp(spec, "none") == 0)
        return 0;
    hr_vk_device_info d[HR_VK_MAX_DEVICES];
    int n = 0, rc = hr_vk_list(d, HR_VK_MAX_DEVICES, &n, err);
    if (rc)
        return rc;
    bool any = strcmp(spec, "any") == 0;
    if (any || strcmp(spec, "auto") == 0) {
        static const hr_vk_type order[] = {HR_VK_DISCRETE, HR_VK_INTEGRATED, HR_VK_VIRTUAL,
                                           HR_VK_OTHER, HR_VK_CPU};
        for (int o = 0; o < (any ? 5 : 4) && *index < 0; o++)
            for (int i = 0; i < n && *index < 0; i++)
                if (d[i].type == order[o])
                    *index = i;
        return 0;
    }
    char *end = NULL;
    long v = strtol(spec, &end, 10);
    if (!end || *end || end == spec || v < 0)
        return hr_seterr(err, HR_EINVAL,
                         "GPU choice '%s': expected a device number, none, auto "
                         "or any",
                         spec);
    if (v >= n)
        return hr_seterr(err, HR_ERANGE, "GPU %ld: this machine has %d Vulkan device%s", v, n,
                         n == 1 ? "" : "s");
    *index = (int)v;
    return 0;
}

/* ---- device ---- */

static VkResult hr_vk_build_pipe(hr_vk *vk, int k);

/* Whether the device's fma() rounds once: fma(a, b, -(a * b)) is the exact
 * rounding error of the product, which is 0 when the multiply is rounded
 * apart; 256 pseudo-random pairs, every result equal to the C library's. */
static bool hr_vk_fma_rounds_once(hr_vk *vk) {
    enum { N = 256 };
    hr_vk_buf *b = NULL;
    hr_vk_set *s = NULL;
    char err[HR_ERR_LEN];
    bool once = false;
    if (hr_vk_buf_create(vk, &b, 4 * N * sizeof(float), true, err) == 0 &&
        hr_vk_set_create(vk, &s, b, b, NULL, err) == 0) {
        float *x = hr_vk_buf_map(b);
        uint32_t st = 0x12345678u;
        for (int i = 0; i < N; i++) {
            float ab[2];
            for (int j = 0; j < 2; j++) {
                st = st * 1664525u + 1013904223u;
                ab[j] = 1.0f + (float)(st >> 8) / 16777216.0f; /* [1, 2) */
            }
            x[i] = ab[0], x[N + i] = ab[1], x[2 * N + i] = -(ab[0] * ab[1]);
        }
        if (hr_vk_begin(vk, err) == 0) {
            hr_vk_probe(vk, s, 4, N, 0);
            if (hr_vk_submit(vk, err) == 0) {
                once = true;
                for (int i = 0; i < N; i++) {
                    float want = fmaf(x[i], x[N + i], x[2 * N + i]);
                    once = once && memcmp(&want, &x[3 * N + i], sizeof want) == 0;
                }
            }
        }
    }
    hr_vk_set_destroy(vk, s);
    hr_vk_buf_destroy(vk, b);
    return once;
}

static VkResult hr_vk_pipelines(hr_vk *vk) {
    VkDescriptorSetLayoutBinding b[3];
    for (uint32_t i = 0; i < 3; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dl = {.sType =
                                              VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = 3,
                                          .pBindings = b};
    VkResult r = vkCreateDescriptorSetLayout(vk->dev, &dl, NULL, &vk->dsl);
    if (r != VK_SUCCESS)
        return r;
    VkPushConstantRange pcr = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = HR_VK_PC_BYTES};
    VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1,
                                     .pSetLayouts = &vk->dsl,
                                     .pushConstantRangeCount = 1,
                                     .pPushConstantRanges = &pcr};
    if ((r = vkCreatePipelineLayout(vk->dev, &pl, NULL, &vk->layout)) != VK_SUCCESS)
        return r;
    /* the probe alone: which fma the others are built with is decided with
     * it (hr_vk_create); none without 64-bit floats (no exact path) */
    return vk->info.f64 ? hr_vk_build_pipe(vk, HR_VK_K_PROBE) : VK_SUCCESS;
}

/* kernel k's pipeline, with exact.glsl's FMA_NATIVE = fma_native (again if
 * built before) */
static VkResult hr_vk_build_pipe(hr_vk *vk, int k) {
    VkBool32 fma_native = vk->fma_native ? VK_TRUE : VK_FALSE;
    VkSpecializationMapEntry me = {.constantID = 0, .offset = 0, .size = sizeof fma_native};
    VkSpecializationInfo si = {.mapEntryCount = 1,
                               .pMapEntries = &me,
                               .dataSize = sizeof fma_native,
                               .pData = &fma_native};
    VkShaderModuleCreateInfo sm = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = hr_vk_spv_table[k].bytes,
                                   .pCode = hr_vk_spv_table[k].code};
    VkShaderModule mod;
    VkResult r = vkCreateShaderModule(vk->dev, &sm, NULL, &mod);
    if (r != VK_SUCCESS)
        return r;
    VkComputePipelineCreateInfo cp = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = vk->layout};
    if (vk->pipe[k])
        vkDestroyPipeline(vk->dev, vk->pipe[k], NULL);
    vk->pipe[k] = VK_NULL_HANDLE;
    r = vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &cp, NULL, &vk->pipe[k]);
    vkDestroyShaderModule(vk->dev, mod, NULL);
    return r;
}

/* Whether vk runs kernel k: the exact ones with 64-bit floats, the _DOT
 * ones with packed dot products, the fast ones in the variant of vk's
 * reductions (_SG with subgroup arithmetic). */
static bool hr_vk_wanted(const hr_vk *vk, int k) {
    if (k == HR_VK_K_ADD || k == HR_VK_K_ROPE || k == HR_VK_K_KVSTORE)
        return true; /* no 64-bit floats in them: both paths use them */
    if (k < HR_VK_K_F_RMSNORM)
        return vk->info.f64 && (k < HR_VK_K_MM_Q4_0_DOT || vk->use_dot);
    bool sg;
    if (k <= HR_VK_K_F_ATTN_SG) /* pairs: plain, _SG */
        sg = (k - HR_VK_K_F_RMSNORM) & 1;
    else if (k < HR_VK_K_F_MM_F32)
        return true; /* no reductions: one variant */
    else
        sg = (k >= HR_VK_K_F_MM_F32_SG && k < HR_VK_K_F_MM_Q4_0_DOT) ||
             k >= HR_VK_K_F_MM_Q4_0_SG_DOT;
    return sg == vk->use_sg && (k < HR_VK_K_F_MM_Q4_0_DOT || vk->use_dot);
}

/* every kernel's pipeline hr_vk_wanted names not built yet */
static VkResult hr_vk_build_pipes(hr_vk *vk) {
    for (int k = 0; k < HR_VK_K_COUNT; k++) {
        if (vk->pipe[k] || !hr_vk_wanted(vk, k))
            continue;
        VkResult r = hr_vk_build_pipe(vk, k);
        if (r != VK_SUCCESS)
            return r;
    }
    return VK_SUCCESS;
}

int hr_vk_create(hr_vk **out, int index, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_vk *vk = calloc(1, sizeof *vk);
    if (!vk)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    int rc = hr_vk_instance(&vk->inst, err);
    if (rc) {
        free(vk);
        return rc;
    }
    VkPhysicalDevice pd[HR_VK_MAX_DEVICES];
    uint32_t np = 0;
    if ((rc = hr_vk_enum(vk->inst, pd, &np, err)))
        goto fail;
    if (index < 0 || (uint32_t)index >= np) {
        rc = hr_seterr(err, HR_ERANGE, "no Vulkan device %d (%u found)", index, np);
        goto fail;
    }
    vk->pd = pd[index];
    hr_vk_describe(vk->pd, &vk->info);
    vkGetPhysicalDeviceMemoryProperties(vk->pd, &vk->mem);
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->pd, &nq, NULL);
    VkQueueFamilyProperties qf[16];
    nq = nq > 16 ? 16 : nq;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->pd, &nq, qf);
    vk->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && vk->qfam == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            vk->qfam = i;
    if (vk->qfam == UINT32_MAX) {
        rc = hr_seterr(err, HR_EUNSUPPORTED, "%s has no compute queue", vk->info.name);
        goto fail;
    }
    const char *env = getenv("HR_VK_INT_DOT");
    vk->use_dot = vk->info.int_dot && !(env && strcmp(env, "0") == 0);
    const char *sgenv = getenv("HR_VK_SUBGROUP");
    vk->use_sg = vk->info.subgroup_arith && !(sgenv && strcmp(sgenv, "0") == 0);
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dotf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR,
        .shaderIntegerDotProduct = VK_TRUE};
    const char *dot_ext = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = vk->qfam,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkPhysicalDeviceFeatures want = {.shaderFloat64 = vk->info.f64 ? VK_TRUE : VK_FALSE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pEnabledFeatures = &want,
                              .pNext = vk->use_dot ? &dotf : NULL,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = vk->use_dot ? 1 : 0,
                              .ppEnabledExtensionNames = vk->use_dot ? &dot_ext : NULL};
    VkResult r = vkCreateDevice(vk->pd, &dci, NULL, &vk->dev);
    if (r != VK_SUCCESS) {
        rc = hr_seterr(err, HR_EIO, "vkCreateDevice(%s) failed (%d)", vk->info.name, (int)r);
        goto fail;
    }
    vkGetDeviceQueue(vk->dev, vk->qfam, 0, &vk->queue);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = vk->qfam};
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = 3 * HR_VK_MAX_SETS};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
                                      .maxSets = HR_VK_MAX_SETS,
                                      .poolSizeCount = 1,
                                      .pPoolSizes = &ps};
    if ((r = vkCreateCommandPool(vk->dev, &pci, NULL, &vk->cpool)) != VK_SUCCESS ||
        (cai.commandPool = vk->cpool,
         (r = vkAllocateCommandBuffers(vk->dev, &cai, &vk->cmd)) != VK_SUCCESS) ||
        (r = vkCreateFence(vk->dev, &fci, NULL, &vk->fence)) != VK_SUCCESS ||
        (r = vkCreateDescriptorPool(vk->dev, &dpi, NULL, &vk->dpool)) != VK_SUCCESS ||
        (r = hr_vk_pipelines(vk)) != VK_SUCCESS) {
        rc = hr_seterr(err, HR_EIO, "Vulkan setup on %s failed (%d)", vk->info.name, (int)r);
        goto fail;
    }
    if ((rc = hr_vk_buf_create(vk, &vk->staging, HR_VK_STAGING, true, err)))
        goto fail;
    const char *fenv = getenv("HR_VK_FMA");
    vk->fma_native =
        vk->info.f64 && !(fenv && strcmp(fenv, "emulate") == 0) && hr_vk_fma_rounds_once(vk);
    if ((vk->fma_native && (r = hr_vk_build_pipe(vk, HR_VK_K_PROBE)) != VK_SUCCESS) ||
        (r = hr_vk_build_pipes(vk)) != VK_SUCCESS) {
        rc = hr_seterr(err, HR_EIO, "Vulkan pipelines on %s failed (%d)", vk->info.name, (int)r);
        goto fail;
    }
    HR_LOG_INFO(TAG, "device %d: %s (%s)%s, %s reductions, %s; exact path: %s", index,
                vk->info.name, hr_vk_type_name(vk->info.type),
                vk->use_dot ? ", packed int8 dot products" : "",
                vk->use_sg ? "subgroup" : "shared-memory", hr_vk_path_name(&vk->info),
                !vk->info.f64    ? "none"
                : vk->fma_native ? "fma native (rounds once)"
                                 : "fma from 64-bit floats");
    *out = vk;
    return 0;
fail:
    hr_vk_destroy(vk);
    return rc;
}

void hr_vk_destroy(hr_vk *vk) {
    if (!vk)
        return;
    if (vk->dev) {
        vkDeviceWaitIdle(vk->dev);
        hr_vk_buf_destroy(vk, vk->staging);
        for (int k = 0; k < HR_VK_K_COUNT; k++)
            if (vk->pipe[k])
                vkDestroyPipeline(vk->dev, vk->pipe[k], NULL);
        if (vk->layout)
            vkDestroyPipelineLayout(vk->dev, vk->layout, NULL);
        if (vk->dsl)
            vkDestroyDescriptorSetLayout(vk->dev, vk->dsl, NULL);
        if (vk->dpool)
            vkDestroyDescriptorPool(vk->dev, vk->dpool, NULL);
        if (vk->fence)
            vkDestroyFence(vk->dev, vk->fence, NULL);
        if (vk->cpool)
            vkDestroyCommandPool(vk->dev, vk->cpool, NULL);
        vkDestroyDevice(vk->dev, NULL);
    }
    if (vk->inst)
        vkDestroyInstance(vk->inst, NULL);
    free(vk);
}

const hr_vk_device_info *hr_vk_info(const hr_vk *vk) { return &vk->info; }
bool hr_vk_uses_int_dot(const hr_vk *vk) { return vk->use_dot; }
bool hr_vk_uses_native_fma(const hr_vk *vk) { return vk->fma_native; }
bool hr_vk_uses_subgroups(const hr_vk *vk) { return vk->use_sg; }
bool hr_vk_exact(const hr_vk *vk) { return vk->exact; }

int hr_vk_set_exact(hr_vk *vk, bool exact) {
    if (exact && !vk->info.f64)
        return HR_EUNSUPPORTED;
    vk->exact = exact;
    return 0;
}

const char *hr_vk_path_name(const hr_vk_device_info *d) {
    return d->f64 ? "fast (exact with --exact)" : "fast only (no shaderFloat64: --exact refused)";
}

bool hr_vk_fast_uses_f64(void) {
    for (int k = HR_VK_K_F_RMSNORM; k < HR_VK_K_COUNT; k++) {
        const uint32_t *c = hr_vk_spv_table[k].code;
        size_t n = hr_vk_spv_table[k].bytes / 4;
        for (size_t i = 5; i < n && (c[i] >> 16) > 0; i += c[i] >> 16)
            if ((c[i] & 0xffffu) == 17 && i + 1 < n && c[i + 1] == 10) /* Capability Float64 */
                return true;
    }
    return false;
}

/* ---- buffers ---- */

static int hr_vk_memtype(const hr_vk *vk, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < vk->mem.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (vk->mem.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

int hr_vk_buf_create(hr_vk *vk, hr_vk_buf **out, size_t bytes, bool host, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_vk_buf *b = calloc(1, sizeof *b);
    if (!b)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    b->size = (bytes + 3) & ~(size_t)3;
    if (b->size == 0)
        b->size = 4;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = b->size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(vk->dev, &bi, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return hr_seterr(err, HR_ENOMEM, "vkCreateBuffer(%zu bytes) failed (%d)", bytes, (int)r);
    }
    VkMemoryRequirements mr;
    vkGetBufferMemoryRequirements(vk->dev, b->buf, &mr);
    int mt = host ? hr_vk_memtype(vk, mr.memoryTypeBits,
                                  VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                      VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
                  : hr_vk_memtype(vk, mr.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (mt < 0 && !host)
        mt = hr_vk_memtype(vk, mr.memoryTypeBits, 0);
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = mr.size,
                               .memoryTypeIndex = (uint32_t)mt};
    if (mt < 0 || (r = vkAllocateMemory(vk->dev, &ai, NULL, &b->mem)) != VK_SUCCESS) {
        vkDestroyBuffer(vk->dev, b->buf, NULL);
        free(b);
        return hr_seterr(err, HR_ENOMEM, "cannot allocate %.1f MiB of %s memory on %s",
                         bytes / 1048576.0, host ? "host-visible" : "device", vk->info.name);
    }
    vkBindBufferMemory(vk->dev, b->buf, b->mem, 0);
    if (host && vkMapMemory(vk->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS) {
        hr_vk_buf_destroy(vk, b);
        return hr_seterr(err, HR_EIO, "vkMapMemory failed");
    }
    *out = b;
    return 0;
}

void hr_vk_buf_destroy(hr_vk *vk, hr_vk_buf *b) {
    if (!b)
        return;
    if (b->map)
        vkUnmapMemory(vk->dev, b->mem);
    vkDestroyBuffer(vk->dev, b->buf, NULL);
    vkFreeMemory(vk->dev, b->mem, NULL);
    free(b);
}

size_t hr_vk_buf_size(const hr_vk_buf *b) { return b->size; }
void *hr_vk_buf_map(hr_vk_buf *b) { return b->map; }

/* One staged copy of n <= HR_VK_STAGING bytes. */
static int hr_vk_xfer(hr_vk *vk, hr_vk_buf *b, size_t off, size_t n, bool to_dev, char *err) {
    int rc = hr_vk_begin(vk, err);
    if (rc)
        return rc;
    if (to_dev)
        hr_vk_copy(vk, vk->staging, 0, b, off, n);
    else
        hr_vk_copy(vk, b, off, vk->staging, 0, n);
    return hr_vk_submit(vk, err);
}

int hr_vk_write(hr_vk *vk, hr_vk_buf *b, size_t off, const void *src, size_t n,
                char err[HR_ERR_LEN]) {
    if (off + n > b->size)
        return hr_seterr(err, HR_ERANGE, "write of %zu bytes at %zu past a %zu-byte buffer", n, off,
                         b->size);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < HR_VK_STAGING ? n - done : HR_VK_STAGING;
        memcpy(vk->staging->map, (const char *)src + done, k);
        int rc = hr_vk_xfer(vk, b, off + done, k, true, err);
        if (rc)
            return rc;
        done += k;
    }
    return 0;
}

int hr_vk_read(hr_vk *vk, hr_vk_buf *b, size_t off, void *dst, size_t n, char err[HR_ERR_LEN]) {
    if (off + n > b->size)
        return hr_seterr(err, HR_ERANGE, "read of %zu bytes at %zu past a %zu-byte buffer", n, off,
                         b->size);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < HR_VK_STAGING ? n - done : HR_VK_STAGING;
        int rc = hr_vk_xfer(vk, b, off + done, k, false, err);
        if (rc)
            return rc;
        memcpy((char *)dst + done, vk->staging->map, k);
        done += k;
    }
    return 0;
}

int hr_vk_fill0(hr_vk *vk, hr_vk_buf *b, size_t off, size_t n, char err[HR_ERR_LEN]) {
    if (off + n > b->size || (off | n) & 3)
        return hr_seterr(err, HR_ERANGE, "fill of %zu bytes at %zu in a %zu-byte buffer", n, off,
                         b->size);
    int rc = hr_vk_begin(vk, err);
    if (rc)
        return rc;
    vkCmdFillBuffer(vk->cmd, b->buf, off, n, 0);
    return hr_vk_submit(vk, err);
}

/* ---- descriptor sets ---- */

int hr_vk_set_create(hr_vk *vk, hr_vk_set **out, hr_vk_buf *w, hr_vk_buf *x, hr_vk_buf *kv,
                     char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_vk_set *s = calloc(1, sizeof *s);
    if (!s)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = vk->dpool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &vk->dsl};
    VkResult r = vkAllocateDescriptorSets(vk->dev, &ai, &s->set);
    if (r != VK_SUCCESS) {
        free(s);
        return hr_seterr(err, HR_ENOMEM, "vkAllocateDescriptorSets failed (%d; at most %d sets)",
                         (int)r, HR_VK_MAX_SETS);
    }
    hr_vk_buf *bufs[3] = {w, x, kv ? kv : x};
    VkDescriptorBufferInfo bi[3];
    VkWriteDescriptorSet wr[3];
    for (int i = 0; i < 3; i++) {
        bi[i] =
            (VkDescriptorBufferInfo){.buffer = bufs[i]->buf, .offset = 0, .range = VK_WHOLE_SIZE};
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = s->set,
                                       .dstBinding = (uint32_t)i,
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(vk->dev, 3, wr, 0, NULL);
    *out = s;
    return 0;
}

void hr_vk_set_destroy(hr_vk *vk, hr_vk_set *s) {
    if (!s)
        return;
    vkFreeDescriptorSets(vk->dev, vk->dpool, 1, &s->set);
    free(s);
}

/* ---- recording ---- */

int hr_vk_begin(hr_vk *vk, char err[HR_ERR_LEN]) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vkResetCommandBuffer(vk->cmd, 0);
    vk->grouped = false;
    VkResult r = vkBeginCommandBuffer(vk->cmd, &bi);
    if (r != VK_SUCCESS)
        return hr_seterr(err, HR_EIO, "vkBeginCommandBuffer failed (%d)", (int)r);
    return 0;
}

/* Every earlier transfer or shader write is visible to what follows. */
static void hr_vk_barrier(hr_vk *vk) {
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    vkCmdPipelineBarrier(vk->cmd,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                         1, &mb, 0, NULL, 0, NULL);
}

void hr_vk_group_begin(hr_vk *vk) { vk->grouped = true; }

void hr_vk_group_end(hr_vk *vk) {
    vk->grouped = false;
    hr_vk_barrier(vk);
}

void hr_vk_copy(hr_vk *vk, hr_vk_buf *src, size_t src_off, hr_vk_buf *dst, size_t dst_off,
                size_t n) {
    VkBufferCopy c = {.srcOffset = src_off, .dstOffset = dst_off, .size = n};
    vkCmdCopyBuffer(vk->cmd, src->buf, dst->buf, 1, &c);
    hr_vk_barrier(vk);
}

void hr_vk_dispatch(hr_vk *vk, hr_vk_set *s, hr_vk_kernel k, const void *pc, size_t pc_bytes,
                    uint32_t n_groups, uint32_t gy) {
    if (n_groups == 0 || gy == 0)
        return;
    if (!vk->pipe[k]) { /* a kernel this device does not run: a caller's bug */
        HR_LOG_ERROR(TAG, "kernel %d has no pipeline on %s", (int)k, vk->info.name);
        abort();
    }
    uint32_t gx = n_groups < 65535 ? n_groups : 65535, gz = (n_groups + gx - 1) / gx;
    vkCmdBindPipeline(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk->pipe[k]);
    vkCmdBindDescriptorSets(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk->layout, 0, 1, &s->set, 0,
                            NULL);
    vkCmdPushConstants(vk->cmd, vk->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)pc_bytes, pc);
    vkCmdDispatch(vk->cmd, gx, gy, gz);
    if (!vk->grouped)
        hr_vk_barrier(vk);
}

int hr_vk_submit(hr_vk *vk, char err[HR_ERR_LEN]) {
    VkResult r = vkEndCommandBuffer(vk->cmd);
    if (r != VK_SUCCESS)
        return hr_seterr(err, HR_EIO, "vkEndCommandBuffer failed (%d)", (int)r);
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &vk->cmd};
    vkResetFences(vk->dev, 1, &vk->fence);
    if ((r = vkQueueSubmit(vk->queue, 1, &si, vk->fence)) != VK_SUCCESS)
        return hr_seterr(err, HR_EIO, "vkQueueSubmit failed (%d)", (int)r);
    if ((r = vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, UINT64_MAX)) != VK_SUCCESS)
        return hr_seterr(err, HR_EIO, "vkWaitForFences failed (%d): device lost?", (int)r);
    return 0;
}

/* ---- memory bandwidth ---- */

int hr_vk_membw(hr_vk *vk, size_t bytes, int reps, double *gbs, char err[HR_ERR_LEN]) {
    *gbs = 0;
    bytes &= ~(size_t)15;
    if (bytes == 0 || reps < 1 || bytes / 16 > UINT32_MAX)
        return hr_seterr(err, HR_EINVAL, "bandwidth probe of %zu bytes, %d reps", bytes, reps);
    hr_vk_buf *b = NULL, *o = NULL;
    hr_vk_set *s = NULL;
    int rc;
    if ((rc = hr_vk_buf_create(vk, &b, bytes, false, err)) ||
        (rc = hr_vk_buf_create(vk, &o, 64 * 4, false, err)) ||
        (rc = hr_vk_fill0(vk, b, 0, bytes, err)) ||
        (rc = hr_vk_set_create(vk, &s, b, o, NULL, err)))
        goto done;
    struct {
        uint32_t n4, out_off;
    } pc = {(uint32_t)(bytes / 16), 0};
    uint32_t groups = pc.n4 / 256 / 16; /* ~16 steps an invocation */
    groups = groups < 1 ? 1 : groups > 65535 ? 65535 : groups;
    double t[2] = {0, 0};
    for (int pass = 0; pass < 2 && rc == 0; pass++) { /* untimed, then timed */
        if ((rc = hr_vk_begin(vk, err)))
            break;
        for (int r = 0; r < (pass ? reps : 1); r++)
            hr_vk_dispatch(vk, s, HR_VK_K_BW, &pc, sizeof pc, groups, 1);
        struct timespec a, z;
        clock_gettime(CLOCK_MONOTONIC, &a);
        rc = hr_vk_submit(vk, err);
        clock_gettime(CLOCK_MONOTONIC, &z);
        t[pass] = (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) * 1e-9;
    }
    if (rc == 0)
        *gbs = (double)bytes * reps / (t[1] > 0 ? t[1] : 1e-9) / 1e9;
done:
    hr_vk_set_destroy(vk, s);
    hr_vk_buf_destroy(vk, b);
    hr_vk_buf_destroy(vk, o);
    return rc;
}
