#version 450
// attn.comp - causal GQA attention over the F16 KV cache for n_tok tokens at
// pos0..: one workgroup per (head, token), each value bit for bit that of
// kernels/ops.c's hr_attention. Q is rounded to f16 like the cache it meets;
// a score is the F16 dot product of the canonical order (element i into
// lane i % 8 by fma, then hsum_float_8), times scale; the scores (a scratch
// row of the work buffer, [n_tok][n_head][n_ctx] f32) go through
// softmax.comp's math; each output value is again an F16 dot product of
// that order, of its V column with the probabilities. q, out: [n_tok][n_head
// * hd] f32; K, V: [n_ctx][n_kv * hd].
#define HR_COHERENT_WORK
#include "common.glsl"
#include "exact.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n_head, n_kv, hd, pos0, q_off, out_off, k_off, v_off, sc_off, n_ctx;
    float scale;
} p;
shared float qh[1024];
shared float redm[64];
shared double red[64];

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
        precise float l[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (uint d0 = 0u; d0 < p.hd; d0 += 16u) { // 8 words loaded, then used
            uint pw[8];
            for (uint j = 0u; j < 8u; j++)
                pw[j] = d0 + 2u * j < p.hd ? kv[kw + d0 / 2u + j] : 0u;
            for (uint j = 0u; j < 8u && d0 + 2u * j < p.hd; j++) {
                uint d = d0 + 2u * j, li = d & 7u;
                l[li] = fma_rn(h2f(pw[j] & 0xffffu), qh[d], l[li]);
                l[li + 1u] = fma_rn(h2f(pw[j] >> 16), qh[d + 1u], l[li + 1u]);
            }
        }
        precise float s = hsum8(l) * p.scale;
        xs(sc + q, s);
        mx = max(mx, s);
    }
    redm[tid] = mx;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s)
            redm[tid] = max(redm[tid], redm[tid + s]);
        barrier();
    }
    mx = redm[0];
    precise double sum = 0.0;
    for (uint q = tid; q < n_pos; q += 64u) {
        precise float d = xf(sc + q) - mx;
        float e = expf_c(d);
        xs(sc + q, e);
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
    for (uint q = tid; q < n_pos; q += 64u) {
        precise float pr = xf(sc + q) * inv;
        xs(sc + q, pr);
    }
    memoryBarrierBuffer();
    barrier();
    uint oo = p.out_off + t * p.n_head * p.hd + h * p.hd;
    for (uint d = tid; d < p.hd; d += 64u) {
        uint e = kvh * p.hd + d;
        precise float l[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (uint q0 = 0u; q0 < n_pos; q0 += 8u) { // 8 positions loaded, then used
            uint vw[8];
            float pq[8];
            for (uint j = 0u; j < 8u; j++) {
                vw[j] = q0 + j < n_pos ? kv[p.v_off + ((q0 + j) * kd + e) / 2u] : 0u;
                pq[j] = q0 + j < n_pos ? xf(sc + q0 + j) : 0.0;
            }
            for (uint j = 0u; j < 8u && q0 + j < n_pos; j++) {
                float v = h2f((e & 1u) != 0u ? vw[j] >> 16 : vw[j] & 0xffffu);
                l[j] = fma_rn(v, pq[j], l[j]); // position q0 + j: lane (q0 + j) % 8 = j
            }
        }
        xs(oo + d, hsum8(l));
    }
}
