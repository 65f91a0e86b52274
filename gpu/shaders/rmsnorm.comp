#version 450
// rmsnorm.comp - out[r][i] = in[r][i] / rms(in[r]) * g[i] for rows r < rows
// of n values (g from the weight buffer, or none); one workgroup per row.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n, rows, in_off, in_stride, out_off, out_stride, g_off, has_g;
    float eps;
} p;
shared float red[64];
void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.rows)
        return;
    uint a = p.in_off + r * p.in_stride, b = p.out_off + r * p.out_stride;
    float ss = 0.0;
    for (uint i = tid; i < p.n; i += 64u) {
        float v = xf(a + i);
        ss += v * v;
    }
    red[tid] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        barrier();
    }
    float scale = 1.0 / sqrt(red[0] / float(p.n) + p.eps);
    for (uint i = tid; i < p.n; i += 64u) {
        float v = xf(a + i) * scale;
        xs(b + i, p.has_g != 0u ? v * uintBitsToFloat(w[p.g_off + i]) : v);
    }
}
