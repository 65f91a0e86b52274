#version 450
// add.comp - x[dst + i] += src[i % src_n] for i < n: the residual adds (src in
// the work buffer) and the q/k/v biases (src in the weight buffer, repeated
// for every token).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n, dst, src, src_n, src_in_w; } p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.z * gl_NumWorkGroups.x * 64u;
    if (i >= p.n)
        return;
    uint j = p.src + i % p.src_n;
    float b = p.src_in_w != 0u ? uintBitsToFloat(w[j]) : xf(j);
    xs(p.dst + i, xf(p.dst + i) + b);
}
