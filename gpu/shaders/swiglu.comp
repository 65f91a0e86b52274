#version 450
// swiglu.comp - g[i] = silu(g[i]) * u[i] for i < n (both in the work buffer),
// as kernels/ops.c: g / (1 + expf(-g)) * u, each step rounded as there.
// With -DHR_FAST (the fast path): the device's own exp and division.
#include "common.glsl"
#ifdef HR_FAST
#include "fast.glsl"
#else
#include "exact.glsl"
#endif
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, g, u; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.z * gl_NumWorkGroups.x * 64u;
    if (i >= p.n)
        return;
    float g = xf(p.g + i);
    precise float den = 1.0 + expf_c(-g);
    precise float y = div_rn(g, den) * xf(p.u + i);
    xs(p.g + i, y);
}
