#version 450
// rmsnorm.comp - out[r][i] = in[r][i] * scale * g[i] for rows r < rows of n
// values (g from the weight buffer, or none); one workgroup per row. As
// kernels/ops.c (ggml's rms_norm): the float squares summed in doubles, the
// mean rounded to float, scale = 1 / sqrtf(mean + eps) with correctly rounded
// sqrt and division. (The partial sums of 64 invocations add in another
// order than the CPU's running sum; the two double sums differ in their last
// bits, which moves the float mean only when it lies that close to a
// rounding boundary.)
#include "common.glsl"
#include "exact.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n, rows, in_off, in_stride, out_off, out_stride, g_off, has_g;
    float eps;
} p;
shared double red[64];
void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.rows)
        return;
    uint a = p.in_off + r * p.in_stride, b = p.out_off + r * p.out_stride;
    precise double ss = 0.0;
    for (uint i = tid; i < p.n; i += 64u) {
        precise float v = xf(a + i);
        precise float sq = v * v;
        ss = ss + double(sq);
    }
    red[tid] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] = red[tid] + red[tid + s];
        barrier();
    }
    precise float mean = float(ddiv(red[0], double(p.n)));
    precise float me = mean + p.eps;
    float scale = div_rn(1.0, sqrt_rn(me));
    for (uint i = tid; i < p.n; i += 64u) {
        precise float v = xf(a + i) * scale;
        if (p.has_g != 0u)
            v = v * uintBitsToFloat(w[p.g_off + i]);
        xs(b + i, v);
    }
}
