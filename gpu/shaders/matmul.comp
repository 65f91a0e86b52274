#version 450
// matmul.comp - y[t][r] = W[r] . a[t] for up to 8 tokens per workgroup
// (gl_WorkGroupID.y picks the group of 8) and 4 weight rows per workgroup
// (wg_row() * 4 + one row per 32 invocations): each invocation takes 32-value
// chunks of its row, unpacks the chunk's weights once and dots them with
// every token's activations, then the row's 32 invocations sum their
// partials. Built once per weight type (-DT_Q4_0 ...).
// Quantized types dot integer weights with the 8-bit activations of
// quant.comp (the Q8_0 / Q8_1 / Q8_K pairing of kernels/types.h), so the
// integer sums are those of the scalar reference kernels; F32 / F16 / BF16
// dot f32 activations ([n_tok][n_in]). W rows start at w_off bytes, row_bytes
// apart (byte layouts: kernels/types-impl.h). With -DINT_DOT (devices with
// shaderIntegerDotProduct) the integer sums use packed 4 x int8 dot
// products (OpSDotKHR); the sums are the same integers either way.
#include "common.glsl"
#ifdef INT_DOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4x8(uint a, uint b, spirv_literal int packed_format);
#endif
layout(local_size_x = 128) in;
layout(push_constant) uniform PC {
    uint n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride;
} p;
#define NC 8u
#define RPW 4u // rows per workgroup
shared float red[RPW][NC][32];

#if defined(T_F32) || defined(T_F16) || defined(T_BF16)
#define FLOAT_W
#endif

#ifdef FLOAT_W
float wf[32];
uint nval;
void load_chunk(uint rb, uint c) {
    uint i0 = c * 32u;
    nval = min(32u, p.n_in - i0);
    for (uint l = 0u; l < nval; l++) {
#if defined(T_F32)
        wf[l] = uintBitsToFloat(w[(rb >> 2) + i0 + l]);
#elif defined(T_F16)
        wf[l] = h2f(w_u16(rb + 2u * (i0 + l)));
#else
        wf[l] = bf2f(w_u16(rb + 2u * (i0 + l)));
#endif
    }
}
float dot_col(uint t, uint c) {
    uint a = p.act_off + t * p.n_in + c * 32u;
    float s = 0.0;
    for (uint l = 0u; l < nval; l++)
        s += wf[l] * xf(a + l);
    return s;
}
#else
int wq[32];
float ws0, ws1, wm; // chunk scales (ws1: second 16 of Q6_K) and min term
#ifdef INT_DOT
uint ap[8]; // activations: 4 int8 a word, as quant.comp stores them
uint wp[8]; // the chunk's weights packed the same way (all fit int8)
void load_act(uint t, uint c) {
    uint a = p.act_off + t * (p.n_in / 4u) + c * 8u;
    for (uint k = 0u; k < 8u; k++)
        ap[k] = x[a + k];
}
void pack_w() {
    for (uint k = 0u; k < 8u; k++)
        wp[k] = (uint(wq[4u * k]) & 0xffu) | ((uint(wq[4u * k + 1u]) & 0xffu) << 8) |
                ((uint(wq[4u * k + 2u]) & 0xffu) << 16) | (uint(wq[4u * k + 3u]) << 24);
}
int isum(uint l0, uint l1) {
    int s = 0;
    for (uint k = l0 / 4u; k < l1 / 4u; k++)
        s += sdot4x8(wp[k], ap[k], 0);
    return s;
}
#else
int aq[32];
void load_act(uint t, uint c) {
    uint a = p.act_off + t * (p.n_in / 4u) + c * 8u;
    for (uint k = 0u; k < 8u; k++) {
        uint v = x[a + k];
        for (uint j = 0u; j < 4u; j++)
            aq[4u * k + j] = int(v << (24u - 8u * j)) >> 24;
    }
}
void pack_w() {}
#endif
float act_d(uint t, uint c) {
    uint chunks = p.n_in / 32u;
    return xf(p.act_off + p.n_tok * (p.n_in / 4u) + t * chunks + c);
}
float act_s(uint t, uint c) {
    uint chunks = p.n_in / 32u;
    return xf(p.act_off + p.n_tok * (p.n_in / 4u) + p.n_tok * chunks + t * chunks + c);
}
#ifndef INT_DOT
int isum(uint l0, uint l1) {
    int s = 0;
    for (uint l = l0; l < l1; l++)
        s += wq[l] * aq[l];
    return s;
}
#endif
#if defined(T_Q4_K) || defined(T_Q5_K)
void kq_scale(uint sb, uint j, out uint sc, out uint mn) {
    if (j < 4u) {
        sc = w_u8(sb + j) & 63u;
        mn = w_u8(sb + j + 4u) & 63u;
    } else {
        sc = (w_u8(sb + j + 4u) & 15u) | ((w_u8(sb + j - 4u) >> 6) << 4);
        mn = (w_u8(sb + j + 4u) >> 4) | ((w_u8(sb + j) >> 6) << 4);
    }
}
#endif
void load_chunk(uint rb, uint c) {
#if defined(T_Q4_0) || defined(T_Q4_1) || defined(T_Q5_0) || defined(T_Q5_1)
#if defined(T_Q4_0)
    uint o = rb + c * 18u, qs = o + 2u;
#elif defined(T_Q4_1)
    uint o = rb + c * 20u, qs = o + 4u;
    wm = h2f(w_u16(o + 2u));
#elif defined(T_Q5_0)
    uint o = rb + c * 22u, qs = o + 6u, qh = w_u32(o + 2u);
#else
    uint o = rb + c * 24u, qs = o + 8u, qh = w_u32(o + 4u);
    wm = h2f(w_u16(o + 2u));
#endif
    ws0 = h2f(w_u16(o));
    for (uint j = 0u; j < 16u; j += 2u) {
        uint b2 = w_u16(qs + j);
        for (uint k = 0u; k < 2u; k++) {
            uint b = (b2 >> (8u * k)) & 0xffu;
            int lo = int(b & 15u), hi = int(b >> 4);
#if defined(T_Q5_0) || defined(T_Q5_1)
            lo |= int((qh >> (j + k)) & 1u) << 4;
            hi |= int((qh >> (j + k + 16u)) & 1u) << 4;
#endif
#if defined(T_Q4_0)
            lo -= 8;
            hi -= 8;
#elif defined(T_Q5_0)
            lo -= 16;
            hi -= 16;
#endif
            wq[j + k] = lo;
            wq[j + k + 16u] = hi;
        }
    }
#elif defined(T_Q8_0)
    uint o = rb + c * 34u;
    ws0 = h2f(w_u16(o));
    for (uint l = 0u; l < 32u; l += 2u) {
        uint b2 = w_u16(o + 2u + l);
        wq[l] = int(b2 << 24) >> 24;
        wq[l + 1u] = int(b2 << 16) >> 24;
    }
#elif defined(T_Q4_K) || defined(T_Q5_K)
    uint j = c % 8u;
#if defined(T_Q4_K)
    uint o = rb + (c / 8u) * 144u, qs = o + 16u + 32u * (j / 2u);
#else
    uint o = rb + (c / 8u) * 176u, qh = o + 16u, qs = o + 48u + 32u * (j / 2u);
#endif
    uint sc, mn;
    kq_scale(o + 4u, j, sc, mn);
    ws0 = h2f(w_u16(o)) * float(sc);
    wm = h2f(w_u16(o + 2u)) * float(mn);
    uint sh = (j & 1u) * 4u;
    for (uint l = 0u; l < 32u; l += 2u) {
        uint b2 = w_u16(qs + l);
        wq[l] = int(((b2 & 0xffu) >> sh) & 15u);
        wq[l + 1u] = int(((b2 >> 8) >> sh) & 15u);
#if defined(T_Q5_K)
        uint h2 = w_u16(qh + l);
        wq[l] |= int(((h2 & 0xffu) >> j) & 1u) << 4;
        wq[l + 1u] |= int(((h2 >> 8) >> j) & 1u) << 4;
#endif
    }
#elif defined(T_Q6_K)
    uint o = rb + (c / 8u) * 210u, j = c % 8u, h = j / 4u, k = j % 4u;
    uint ql = o + 64u * h + 32u * (k & 1u), qh = o + 128u + 32u * h, sh = (k / 2u) * 4u;
    float d = h2f(w_u16(o + 208u));
    ws0 = d * float(w_i8(o + 192u + 8u * h + 2u * k));
    ws1 = d * float(w_i8(o + 192u + 8u * h + 2u * k + 1u));
    for (uint l = 0u; l < 32u; l += 2u) {
        uint b2 = w_u16(ql + l), h2 = w_u16(qh + l);
        wq[l] = int((((b2 & 0xffu) >> sh) & 15u) | ((((h2 & 0xffu) >> (2u * k)) & 3u) << 4)) - 32;
        wq[l + 1u] = int((((b2 >> 8) >> sh) & 15u) | ((((h2 >> 8) >> (2u * k)) & 3u) << 4)) - 32;
    }
#endif
}
float dot_col(uint t, uint c) {
    load_act(t, c);
    float da = act_d(t, c);
#if defined(T_Q4_0) || defined(T_Q5_0) || defined(T_Q8_0)
    return float(isum(0u, 32u)) * (ws0 * da);
#elif defined(T_Q4_1) || defined(T_Q5_1)
    return float(isum(0u, 32u)) * (ws0 * da) + wm * act_s(t, c);
#elif defined(T_Q4_K) || defined(T_Q5_K)
    return da * ws0 * float(isum(0u, 32u)) - da * wm * act_s(t, c);
#else
    return da * (ws0 * float(isum(0u, 16u)) + ws1 * float(isum(16u, 32u)));
#endif
}
#endif

void main() {
    uint sub = gl_LocalInvocationID.x / 32u, tid = gl_LocalInvocationID.x % 32u;
    uint r = wg_row() * RPW + sub;
    bool live = r < p.n_out; // rows past the end still join the barriers
    uint t0 = gl_WorkGroupID.y * NC, nt = min(NC, p.n_tok - t0);
    uint rb = p.w_off + r * p.row_bytes, chunks = live ? (p.n_in + 31u) / 32u : 0u;
    float acc[NC];
    for (uint t = 0u; t < NC; t++)
        acc[t] = 0.0;
    for (uint c = tid; c < chunks; c += 32u) {
        load_chunk(rb, c);
#ifndef FLOAT_W
        pack_w();
#endif
        for (uint t = 0u; t < nt; t++)
            acc[t] += dot_col(t0 + t, c);
    }
    for (uint t = 0u; t < NC; t++)
        red[sub][t][tid] = acc[t];
    barrier();
    for (uint s = 16u; s > 0u; s >>= 1) {
        if (tid < s)
            for (uint t = 0u; t < NC; t++)
                red[sub][t][tid] += red[sub][t][tid + s];
        barrier();
    }
    if (live && tid < nt)
        xs(p.y_off + (t0 + tid) * p.y_stride + r, red[sub][tid][0]);
}
