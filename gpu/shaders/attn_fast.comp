#version 450
// attn_fast.comp - the fast path's causal GQA attention over the F16 KV
// cache, one kernel per layer and run: one workgroup per (head, token)
// walks the positions in tiles of 64 with an online softmax (running max
// and sum, earlier output rescaled when the max grows), so the scores never
// leave the workgroup. Invocation i scores position tile + i (its K row
// against the f16-rounded query, as the CPU rounds it); the tile's
// probabilities go through shared memory to the output pass, where
// invocation i owns dimensions i, i + 64, ... (at most 16: head_dim <=
// 1024). 32-bit floats, reductions of fast.glsl. Push constants as
// attn.comp's (sc_off unused).
#include "common.glsl"
#define WG 64u
#include "fast.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n_head, n_kv, hd, pos0, q_off, out_off, k_off, v_off, sc_off, n_ctx;
    float scale;
} p;
shared float qh[1024];
shared float ps[64];
#define ND 16u // output dimensions per invocation at most

void main() {
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    uint kvh = h / (p.n_head / p.n_kv), kd = p.n_kv * p.hd, n_pos = p.pos0 + t + 1u;
    uint qo = p.q_off + t * p.n_head * p.hd + h * p.hd;
    for (uint d = tid; d < p.hd; d += WG)
        qh[d] = f16round(xf(qo + d));
    barrier();
    float o[ND];
    for (uint j = 0u; j < ND; j++)
        o[j] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;
    for (uint base = 0u; base < n_pos; base += WG) {
        uint q = base + tid;
        float s = -1.0 / 0.0;
        if (q < n_pos) {
            uint kw = p.k_off + (q * kd + kvh * p.hd) / 2u;
            float d0 = 0.0, d1 = 0.0;
            for (uint j = 0u; j < p.hd / 2u; j++) {
                uint pw = kv[kw + j];
                d0 = fma(h2f(pw & 0xffffu), qh[2u * j], d0);
                d1 = fma(h2f(pw >> 16), qh[2u * j + 1u], d1);
            }
            s = (d0 + d1) * p.scale;
        }
        float mn = max(m, wg_max(s));
        float pq = q < n_pos ? exp(s - mn) : 0.0;
        float corr = exp(m - mn); // 0 on the first tile (m = -inf)
        l = l * corr + wg_add(pq);
        m = mn;
        barrier(); // the previous tile's readers of ps are done
        ps[tid] = pq;
        barrier();
        uint nq = min(WG, n_pos - base);
        for (uint j = 0u; j < ND; j++) {
            uint d = tid + WG * j;
            if (d < p.hd) {
                uint e = kvh * p.hd + d;
                float acc = o[j] * corr;
                for (uint i = 0u; i < nq; i++) {
                    uint vw = kv[p.v_off + ((base + i) * kd + e) / 2u];
                    acc = fma(ps[i], h2f((e & 1u) != 0u ? vw >> 16 : vw & 0xffffu), acc);
                }
                o[j] = acc;
            }
        }
    }
    uint oo = p.out_off + t * p.n_head * p.hd + h * p.hd;
    float inv = 1.0 / l;
    for (uint j = 0u; j < ND; j++) {
        uint d = tid + WG * j;
        if (d < p.hd)
            xs(oo + d, o[j] * inv);
    }
}
