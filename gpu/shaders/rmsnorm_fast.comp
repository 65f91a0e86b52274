#version 450
// rmsnorm_fast.comp - the fast path's RMSNorm: out[r][i] = in[r][i] * scale
// * g[i], scale = 1 / sqrt(mean(in[r]^2) + eps), in 32-bit floats with a
// workgroup reduction (fast.glsl); one workgroup per row. In place is fine
// (each invocation rewrites only the values it read).
#include "common.glsl"
#define WG 64u
#include "fast.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n, rows, in_off, in_stride, out_off, out_stride, g_off, has_g;
    float eps;
} p;
void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.rows)
        return;
    uint a = p.in_off + r * p.in_stride, b = p.out_off + r * p.out_stride;
    float ss = 0.0;
    for (uint i = tid; i < p.n; i += WG) {
        float v = xf(a + i);
        ss = fma(v, v, ss);
    }
    ss = wg_add(ss);
    float scale = 1.0 / sqrt(ss / float(p.n) + p.eps);
    for (uint i = tid; i < p.n; i += WG) {
        float v = xf(a + i) * scale;
        if (p.has_g != 0u)
            v *= uintBitsToFloat(w[p.g_off + i]);
        xs(b + i, v);
    }
}
