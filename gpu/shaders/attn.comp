#version 450
// attn.comp - causal GQA attention over the F16 KV cache for n_tok tokens at
// pos0..: one workgroup per (head, token). Q is rounded to f16 like the cache
// it meets (kernels/ops.c does the same), scores go to a scratch row of the
// work buffer ([n_tok][n_head][n_ctx] f32), then softmax, then the
// weighted sum of V. q, out: [n_tok][n_head*hd] f32; K, V: [n_ctx][n_kv*hd].
#define HR_COHERENT_WORK
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n_head, n_kv, hd, pos0, q_off, out_off, k_off, v_off, sc_off, n_ctx;
    float scale;
} p;
shared float qh[1024];
shared float red[64];
void main() {
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    uint kvh = h / (p.n_head / p.n_kv), kd = p.n_kv * p.hd, n_pos = p.pos0 + t + 1u;
    uint qo = p.q_off + t * p.n_head * p.hd + h * p.hd;
    for (uint d = tid; d < p.hd; d += 64u)
        qh[d] = f16round(xf(qo + d));
    barrier();
    uint sc = p.sc_off + (t * p.n_head + h) * p.n_ctx;
    float mx = -1.0 / 0.0;
    for (uint q = tid; q < n_pos; q += 64u) {
        uint kw = p.k_off + (q * kd + kvh * p.hd) / 2u;
        float s = 0.0;
        for (uint d = 0u; d < p.hd; d += 2u) {
            uint pr = kv[kw + d / 2u];
            s += h2f(pr & 0xffffu) * qh[d] + h2f(pr >> 16) * qh[d + 1u];
        }
        s *= p.scale;
        xs(sc + q, s);
        mx = max(mx, s);
    }
    red[tid] = mx;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] = max(red[tid], red[tid + s]);
        barrier();
    }
    mx = red[0];
    barrier();
    float sum = 0.0;
    for (uint q = tid; q < n_pos; q += 64u) {
        float e = exp(xf(sc + q) - mx);
        xs(sc + q, e);
        sum += e;
    }
    red[tid] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        barrier();
    }
    float inv = 1.0 / red[0];
    memoryBarrierBuffer();
    barrier();
    uint oo = p.out_off + t * p.n_head * p.hd + h * p.hd;
    for (uint d = tid; d < p.hd; d += 64u) {
        uint e = kvh * p.hd + d;
        float o = 0.0;
        for (uint q = 0u; q < n_pos; q++) {
            uint pr = kv[p.v_off + (q * kd + e) / 2u];
            o += (xf(sc + q) * inv) * h2f((e & 1u) != 0u ? pr >> 16 : pr & 0xffffu);
        }
        xs(oo + d, o);
    }
}
