// fast.glsl - what the fast kernels share in place of exact.glsl: the same
// function names in plain 32-bit float math (the device's division, sqrt,
// exp and fma, whatever their rounding), and workgroup reductions. No 64-bit
// float anywhere: these kernels run on devices without shaderFloat64.
//
// The reductions: with -DHR_SUBGROUP (the device has subgroup arithmetic)
// subgroupAdd / subgroupMax, then the subgroups' partials through shared
// memory when a workgroup has more than one; else a halving tree in shared
// memory. WG (a power of two) is the workgroup size. Every invocation of the
// workgroup must call them (uniform control flow); all get the result.
#ifdef HR_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#ifndef WG
#define WG 64u
#endif

float div_rn(float a, float b) { return a / b; }
float sqrt_rn(float v) { return sqrt(v); }
float expf_c(float x) { return exp(x); }
float fma_rn(float a, float b, float c) { return fma(a, b, c); }
float hsum8(float l[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

shared float hr_red[WG];

float wg_add(float v) {
#ifdef HR_SUBGROUP
    v = subgroupAdd(v);
    if (gl_NumSubgroups == 1u)
        return v;
    barrier(); // an earlier reduction's readers are done with hr_red
    if (subgroupElect())
        hr_red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++)
        s += hr_red[i];
    return s;
#else
    uint tid = gl_LocalInvocationIndex;
    barrier();
    hr_red[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s)
            hr_red[tid] += hr_red[tid + s];
        barrier();
    }
    return hr_red[0];
#endif
}

float wg_max(float v) {
#ifdef HR_SUBGROUP
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1u)
        return v;
    barrier();
    if (subgroupElect())
        hr_red[gl_SubgroupID] = v;
    barrier();
    float s = hr_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++)
        s = max(s, hr_red[i]);
    return s;
#else
    uint tid = gl_LocalInvocationIndex;
    barrier();
    hr_red[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s)
            hr_red[tid] = max(hr_red[tid], hr_red[tid + s]);
        barrier();
    }
    return hr_red[0];
#endif
}
