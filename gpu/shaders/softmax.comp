#version 450
// softmax.comp - in-place softmax over rows of n values; one workgroup a row.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, rows, off, stride; } p;
shared float red[64];
void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.rows)
        return;
    uint a = p.off + r * p.stride;
    float mx = -1.0 / 0.0;
    for (uint i = tid; i < p.n; i += 64u)
        mx = max(mx, xf(a + i));
    red[tid] = mx;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] = max(red[tid], red[tid + s]);
        barrier();
    }
    mx = red[0];
    barrier();
    float sum = 0.0;
    for (uint i = tid; i < p.n; i += 64u) {
        float e = exp(xf(a + i) - mx);
        xs(a + i, e);
        sum += e;
    }
    red[tid] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        barrier();
    }
    float inv = 1.0 / red[0];
    for (uint i = tid; i < p.n; i += 64u)
        xs(a + i, xf(a + i) * inv);
}
