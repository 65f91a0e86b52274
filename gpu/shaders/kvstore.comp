#version 450
// kvstore.comp - K and V rows of n_tok tokens ([n_tok][kd] f32, work buffer)
// into the F16 cache ([n_ctx][kd] halves, two per word) at pos0.. .
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC { uint kd, n_tok, pos0, k_src, v_src, k_dst, v_dst; } p;
void main() {
    uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.z * gl_NumWorkGroups.x * 64u;
    uint hw = p.kd / 2u;
    if (g >= p.n_tok * hw)
        return;
    uint t = g / hw, j = g % hw, src = t * p.kd + 2u * j, dst = (p.pos0 + t) * hw + j;
    kv[p.k_dst + dst] = f2h(xf(p.k_src + src)) | (f2h(xf(p.k_src + src + 1u)) << 16);
    kv[p.v_dst + dst] = f2h(xf(p.v_src + src)) | (f2h(xf(p.v_src + src + 1u)) << 16);
}
