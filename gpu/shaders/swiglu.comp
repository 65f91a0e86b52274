#version 450
// swiglu.comp - g[i] = silu(g[i]) * u[i] for i < n (both in the work buffer).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, g, u; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.z * gl_NumWorkGroups.x * 64u;
    if (i >= p.n)
        return;
    float g = xf(p.g + i);
    xs(p.g + i, g / (1.0 + exp(-g)) * xf(p.u + i));
}
