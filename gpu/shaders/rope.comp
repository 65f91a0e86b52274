#version 450
// rope.comp - rotates n_heads heads of head_dim values for each of n_tok
// tokens by the angles of a table the host computed ([n_tok][n_rot/2] of
// (cos, sin), the same f32 angles as kernels/ops.c's hr_rope, Llama-3 factors
// included): pairs (2i, 2i+1), or (i, i + n_rot/2) with neox.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint n_tok, n_heads, head_dim, n_rot, neox, off, stride, tab; } p;
void main() {
    uint half_ = p.n_rot / 2u;
    uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.z * gl_NumWorkGroups.x * 64u;
    if (g >= p.n_tok * p.n_heads * half_)
        return;
    uint i = g % half_, h = (g / half_) % p.n_heads, t = g / (half_ * p.n_heads);
    float c = xf(p.tab + (t * half_ + i) * 2u), s = xf(p.tab + (t * half_ + i) * 2u + 1u);
    uint base = p.off + t * p.stride + h * p.head_dim;
    uint i0 = base + (p.neox != 0u ? i : 2u * i), i1 = base + (p.neox != 0u ? i + half_ : 2u * i + 1u);
    float a = xf(i0), b = xf(i1);
    precise float y0 = a * c - b * s, y1 = a * s + b * c; // no fused multiply-add: as the CPU
    xs(i0, y0);
    xs(i1, y1);
}
