#version 450
// probe.comp - exact.glsl's operations one at a time over arrays of the work
// buffer, for the tests (each against the C library on the CPU) and for the
// device check of whether the hardware's fma() rounds once: out[i] = op(a[i],
// b[i], c[i]) with a, b, c, out n words apart from off.
// op: 0 expf_c(a), 1 div_rn(a, b), 2 sqrt_rn(a), 3 fma_rn(a, b, c), 4 the
// device's own fma(a, b, c).
#include "common.glsl"
#include "exact.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, op, off; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.z * gl_NumWorkGroups.x * 64u;
    if (i >= p.n)
        return;
    float a = xf(p.off + i), b = xf(p.off + p.n + i), c = xf(p.off + 2u * p.n + i), y;
    if (p.op == 0u)
        y = expf_c(a);
    else if (p.op == 1u)
        y = div_rn(a, b);
    else if (p.op == 2u)
        y = sqrt_rn(a);
    else if (p.op == 3u)
        y = fma_rn(a, b, c);
    else
        y = fma(a, b, c);
    xs(p.off + 3u * p.n + i, y);
}
