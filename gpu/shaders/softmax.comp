#version 450
// softmax.comp - in-place softmax over rows of n values; one workgroup a
// row. As kernels/ops.c's hr_softmax: e = expf(x - max) (glibc's expf), the
// sum of e in doubles, inv = (float)(1 / sum), x = e * inv. (The 64 partial
// double sums add in another order than the CPU's running sum: the float inv
// moves only when it lies within their last bits of a rounding boundary.)
#include "common.glsl"
#include "exact.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, rows, off, stride; } p;
shared float redm[64];
shared double red[64];
void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.rows)
        return;
    uint a = p.off + r * p.stride;
    float mx = -1.0 / 0.0;
    for (uint i = tid; i < p.n; i += 64u)
        mx = max(mx, xf(a + i));
    redm[tid] = mx;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            redm[tid] = max(redm[tid], redm[tid + s]);
        barrier();
    }
    mx = redm[0];
    precise double sum = 0.0;
    for (uint i = tid; i < p.n; i += 64u) {
        precise float d = xf(a + i) - mx;
        float e = expf_c(d);
        xs(a + i, e);
        sum = sum + double(e);
    }
    red[tid] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] = red[tid] + red[tid + s];
        barrier();
    }
    float inv = float(ddiv(1.0, red[0]));
    for (uint i = tid; i < p.n; i += 64u) {
        precise float y = xf(a + i) * inv;
        xs(a + i, y);
    }
}
