#version 450
// ropekv.comp - the fast path's RoPE + KV store in one kernel: K rows of
// n_tok tokens ([n_tok][stride] f32, n_kv heads of hd values each) rotated
// by the host's angle table (rope.comp's math and table) and written, with
// the V rows, to the F16 cache at positions pos0.. (two halves a word). One
// workgroup per (head, token); invocation i owns words i, i + 64, ... of the
// head. The f32 K rows are left as they were.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n_tok, n_kv, hd, n_rot, neox, k_src, v_src, stride, tab, pos0, k_dst, v_dst;
} p;

// value e of head row x (at word base) after rotation for token t
float rotated(uint base, uint e, uint t) {
    uint half_ = p.n_rot / 2u;
    if (e >= p.n_rot)
        return xf(base + e);
    uint i, i0, i1;
    if (p.neox != 0u) {
        i = e < half_ ? e : e - half_;
        i0 = i;
        i1 = i + half_;
    } else {
        i = e / 2u;
        i0 = 2u * i;
        i1 = i0 + 1u;
    }
    float c = xf(p.tab + (t * half_ + i) * 2u), s = xf(p.tab + (t * half_ + i) * 2u + 1u);
    float a = xf(base + i0), b = xf(base + i1);
    return e == i0 ? a * c - b * s : a * s + b * c;
}

void main() {
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    uint kd = p.n_kv * p.hd, src = t * p.stride + h * p.hd;
    uint dst = ((p.pos0 + t) * kd + h * p.hd) / 2u;
    for (uint j = tid; j < p.hd / 2u; j += 64u) {
        float k0 = rotated(p.k_src + src, 2u * j, t), k1 = rotated(p.k_src + src, 2u * j + 1u, t);
        kv[p.k_dst + dst + j] = f2h(k0) | (f2h(k1) << 16);
        kv[p.v_dst + dst + j] =
            f2h(xf(p.v_src + src + 2u * j)) | (f2h(xf(p.v_src + src + 2u * j + 1u)) << 16);
    }
}
