#version 450
// softmax_fast.comp - the fast path's in-place softmax over rows of n
// values, in 32-bit floats with workgroup reductions (fast.glsl); one
// workgroup per row.
#include "common.glsl"
#define WG 64u
#include "fast.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, rows, off, stride; } p;
void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.rows)
        return;
    uint a = p.off + r * p.stride;
    float mx = -1.0 / 0.0;
    for (uint i = tid; i < p.n; i += WG)
        mx = max(mx, xf(a + i));
    mx = wg_max(mx);
    float sum = 0.0;
    for (uint i = tid; i < p.n; i += WG) {
        float e = exp(xf(a + i) - mx);
        xs(a + i, e);
        sum += e;
    }
    float inv = 1.0 / wg_add(sum);
    for (uint i = tid; i < p.n; i += WG)
        xs(a + i, xf(a + i) * inv);
}
