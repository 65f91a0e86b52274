#version 450
// matmul.comp - y[t][r] = W[r] . a[t], each value bit for bit the scalar
// reference's (kernels/types.c, in the canonical float order of
// kernels/canon-impl.h): 8 float lanes per (row, token), lane k holding the
// exact integer sum of elements 4k..4k+3 of every 32-value chunk of a block
// (K-quant sub-block scales applied in integers), added per block in block
// order by fma(d, float(isum), lane) (fma_rn: one rounding), the lanes reduced as hsum_float_8, then
// the min terms. F16 / BF16 put element i into lane i % 8 by fma; F32 uses
// 16 lanes of separate multiply and add and a halving tree.
//
// A workgroup is 8 rows (wg_row() * 8 + gl_LocalInvocationID.x / 8) by 8
// tokens (gl_WorkGroupID.y picks the group); invocation k of a row owns lane
// k (F32: lanes k and k + 8) of every token, so a block's weights are loaded
// and unpacked once for all 8 tokens. The chain of fmas along a row is what
// fixes the float order: it runs through a row's blocks in sequence, one
// invocation per lane, and is the price of CPU-identical results. So that
// the chain does not wait on memory block by block, each invocation loads
// UB blocks' weights (U steps of float weights) before it consumes them.
// Quantized types dot packed int8 weights with the 8-bit activations of
// quant.comp; with -DINT_DOT (shaderIntegerDotProduct) four at a time
// (OpSDotKHR), else unpacked; the sums are the same integers either way.
// Built once per weight type (-DT_Q4_0 ...).
#include "common.glsl"
#include "exact.glsl"
#ifdef INT_DOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4x8(uint a, uint b, spirv_literal int packed_format);
int dot4(uint a, uint b) { return sdot4x8(a, b, 0); }
#else
int dot4(uint a, uint b) {
    return (int(a << 24) >> 24) * (int(b << 24) >> 24) + (int(a << 16) >> 24) * (int(b << 16) >> 24) +
           (int(a << 8) >> 24) * (int(b << 8) >> 24) + (int(a) >> 24) * (int(b) >> 24);
}
#endif
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride;
} p;
#define NC 8u  // tokens per workgroup
#define RPW 8u // rows per workgroup
#if defined(T_F32)
#define NL 16u
#else
#define NL 8u
#endif
// loads issued together before their values are consumed: U steps of a
// float lane, UB blocks (super-blocks of the K-quants) of a quantized one
#define U 8u
#if defined(T_Q4_K) || defined(T_Q5_K) || defined(T_Q6_K)
#define UB 2u
#else
#define UB 16u
#endif
shared float lanes[RPW][NC][NL];
shared float extra[RPW][NC][4]; // min terms: q4_K's 4 lanes, q4_1 / q5_1 / q5_K's scalar

// packed int8 bytes v - off for bytes v in 0..127, without borrows
uint sub_bytes(uint v, uint off) { return ((v | 0x80808080u) - off) ^ 0x80808080u; }
// bits 0..3 of h moved to bit 4 of bytes 0..3
uint hbits(uint h) {
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

#if !defined(T_F32) && !defined(T_F16) && !defined(T_BF16)
// activations (quant.comp): word k of 32-value chunk c of token t, its
// scale d, its sum s
uint act_q(uint t, uint c, uint k) { return x[p.act_off + t * (p.n_in / 4u) + c * 8u + k]; }
float act_d(uint t, uint c) { return xf(p.act_off + p.n_tok * (p.n_in / 4u) + t * (p.n_in / 32u) + c); }
float act_s(uint t, uint c) {
    uint chunks = p.n_in / 32u;
    return xf(p.act_off + p.n_tok * (p.n_in / 4u) + p.n_tok * chunks + t * chunks + c);
}
#endif

void main() {
    uint sub = gl_LocalInvocationID.x / 8u, k = gl_LocalInvocationID.x % 8u;
    uint r = wg_row() * RPW + sub;
    bool live = r < p.n_out; // rows past the end still join the barrier
    uint t0 = gl_WorkGroupID.y * NC, nt = min(NC, p.n_tok - t0);
    uint rb = p.w_off + r * p.row_bytes;
    precise float acc[NC];
    precise float acc2[NC]; // F32: lane k + 8; quantized: the min term
    for (uint t = 0u; t < NC; t++) {
        acc[t] = 0.0;
        acc2[t] = 0.0;
    }
    if (live) {
#if defined(T_F32)
        for (uint i0 = k; i0 < p.n_in; i0 += 16u * U) {
            // U steps of the lane's two values loaded first (memory-level
            // parallelism: the sums below are a chain), then consumed
            float w0[U], w1[U];
            for (uint j = 0u; j < U; j++) {
                uint i = i0 + 16u * j;
                w0[j] = i < p.n_in ? uintBitsToFloat(w[(rb >> 2) + i]) : 0.0;
                w1[j] = i + 8u < p.n_in ? uintBitsToFloat(w[(rb >> 2) + i + 8u]) : 0.0;
            }
            for (uint t = 0u; t < nt; t++) {
                uint a = p.act_off + (t0 + t) * p.n_in;
                for (uint j = 0u; j < U; j++) {
                    uint i = i0 + 16u * j;
                    if (i < p.n_in) {
                        precise float m0 = w0[j] * xf(a + i);
                        acc[t] = acc[t] + m0;
                    }
                    if (i + 8u < p.n_in) {
                        precise float m1 = w1[j] * xf(a + i + 8u);
                        acc2[t] = acc2[t] + m1;
                    }
                }
            }
        }
#elif defined(T_F16) || defined(T_BF16)
        for (uint i0 = k; i0 < p.n_in; i0 += 8u * U) {
            float wv[U];
            for (uint j = 0u; j < U; j++) {
                uint i = i0 + 8u * j;
#if defined(T_F16)
                wv[j] = i < p.n_in ? h2f(w_u16(rb + 2u * i)) : 0.0;
#else
                wv[j] = i < p.n_in ? bf2f(w_u16(rb + 2u * i)) : 0.0;
#endif
            }
            for (uint t = 0u; t < nt; t++) {
                uint a = p.act_off + (t0 + t) * p.n_in;
                for (uint j = 0u; j < U && i0 + 8u * j < p.n_in; j++)
                    acc[t] = fma_rn(wv[j], xf(a + i0 + 8u * j), acc[t]);
            }
        }
#else
        uint nb = p.n_in / 32u; // 32-value chunks
#if defined(T_Q4_K) || defined(T_Q5_K) || defined(T_Q6_K)
        nb /= 8u;
#endif
        for (uint b0 = 0u; b0 < nb; b0 += UB) {
            uint nbb = min(UB, nb - b0);
#if defined(T_Q4_0) || defined(T_Q4_1) || defined(T_Q5_0) || defined(T_Q5_1) || defined(T_Q8_0)
            // UB blocks of 32 values: lane k's four weights of each as packed
            // int8, all loaded before the chain of fmas consumes them
            uint wp[UB];
            float wd[UB];
#if defined(T_Q4_1) || defined(T_Q5_1)
            float wmin[UB];
#endif
            for (uint j = 0u; j < nbb; j++) {
                uint b = b0 + j;
#if defined(T_Q4_0)
                uint o = rb + b * 18u, qs = o + 2u;
#elif defined(T_Q4_1)
                uint o = rb + b * 20u, qs = o + 4u;
                wmin[j] = h2f(w_u16(o + 2u));
#elif defined(T_Q5_0)
                uint o = rb + b * 22u, qs = o + 6u, qh = w_u32(o + 2u);
#elif defined(T_Q5_1)
                uint o = rb + b * 24u, qs = o + 8u, qh = w_u32(o + 4u);
                wmin[j] = h2f(w_u16(o + 2u));
#else
                uint o = rb + b * 34u;
#endif
                wd[j] = h2f(w_u16(o));
#if defined(T_Q8_0)
                uint v = w_u32(o + 2u + 4u * k);
#else
                uint v = (w_u32(qs + 4u * (k & 3u)) >> (k < 4u ? 0u : 4u)) & 0x0f0f0f0fu;
#endif
#if defined(T_Q5_0) || defined(T_Q5_1)
                v |= hbits(qh >> (4u * (k & 3u) + (k < 4u ? 0u : 16u)));
#endif
#if defined(T_Q4_0)
                v = sub_bytes(v, 0x08080808u);
#elif defined(T_Q5_0)
                v = sub_bytes(v, 0x10101010u);
#endif
                wp[j] = v;
            }
            for (uint t = 0u; t < nt; t++) {
                for (uint j = 0u; j < nbb; j++) {
                    int is = dot4(wp[j], act_q(t0 + t, b0 + j, k));
                    precise float d = wd[j] * act_d(t0 + t, b0 + j);
                    acc[t] = fma_rn(d, float(is), acc[t]);
#if defined(T_Q4_1) || defined(T_Q5_1)
                    acc2[t] = fma_rn(wmin[j], act_s(t0 + t, b0 + j), acc2[t]);
#endif
                }
            }
#elif defined(T_Q4_K) || defined(T_Q5_K)
            // UB super-blocks of 8 sub-blocks of 32: scales in 12 bytes
            uint wp[UB][8];
            int sc[UB][8], mn[UB][8];
            float wd[UB], wdm[UB];
            for (uint j = 0u; j < nbb; j++) {
#if defined(T_Q4_K)
                uint o = rb + (b0 + j) * 144u, qs = o + 16u;
#else
                uint o = rb + (b0 + j) * 176u, qh = o + 16u, qs = o + 48u;
                uint hb = w_u32(qh + 4u * k);
#endif
                wd[j] = h2f(w_u16(o));
                wdm[j] = h2f(w_u16(o + 2u));
                uint sb = o + 4u;
                for (uint m = 0u; m < 8u; m++) {
                    if (m < 4u) {
                        sc[j][m] = int(w_u8(sb + m) & 63u);
                        mn[j][m] = int(w_u8(sb + m + 4u) & 63u);
                    } else {
                        sc[j][m] = int((w_u8(sb + m + 4u) & 15u) | ((w_u8(sb + m - 4u) >> 6) << 4));
                        mn[j][m] = int((w_u8(sb + m + 4u) >> 4) | ((w_u8(sb + m) >> 6) << 4));
                    }
                    wp[j][m] = (w_u32(qs + 32u * (m / 2u) + 4u * k) >> (4u * (m & 1u))) & 0x0f0f0f0fu;
#if defined(T_Q5_K)
                    wp[j][m] |= ((hb >> m) & 0x01010101u) << 4;
#endif
                }
            }
            for (uint t = 0u; t < nt; t++) {
                for (uint j = 0u; j < nbb; j++) {
                    uint c0 = 8u * (b0 + j);
                    int is = 0;
                    for (uint m = 0u; m < 8u; m++)
                        is += sc[j][m] * dot4(wp[j][m], act_q(t0 + t, c0 + m, k));
                    float ad = act_d(t0 + t, c0);
                    precise float d = ad * wd[j];
                    precise float dmin = -ad * wdm[j];
                    acc[t] = fma_rn(d, float(is), acc[t]);
#if defined(T_Q4_K)
                    if (k < 4u) { // min lane k: sub-blocks 2k and 2k + 1
                        int ms = mn[j][2u * k] * int(act_s(t0 + t, c0 + 2u * k)) +
                                 mn[j][2u * k + 1u] * int(act_s(t0 + t, c0 + 2u * k + 1u));
                        acc2[t] = fma_rn(dmin, float(ms), acc2[t]);
                    }
#else
                    int ms = 0;
                    for (uint m = 0u; m < 8u; m++)
                        ms += mn[j][m] * int(act_s(t0 + t, c0 + m));
                    acc2[t] = fma_rn(dmin, float(ms), acc2[t]);
#endif
                }
            }
#elif defined(T_Q6_K)
            uint wp[UB][8];
            int sc[UB][8];
            float wd[UB];
            for (uint j = 0u; j < nbb; j++) {
                uint o = rb + (b0 + j) * 210u;
                wd[j] = h2f(w_u16(o + 208u));
                for (uint m = 0u; m < 8u; m++) { // sub-block m: half h, quarter q
                    uint h = m / 4u, q = m % 4u;
                    uint ql = w_u32(o + 64u * h + 32u * (q & 1u) + 4u * k);
                    uint qh = w_u32(o + 128u + 32u * h + 4u * k);
                    uint v = ((ql >> (4u * (q / 2u))) & 0x0f0f0f0fu) | (((qh >> (2u * q)) & 0x03030303u) << 4);
                    wp[j][m] = sub_bytes(v, 0x20202020u);
                    sc[j][m] = w_i8(o + 192u + 8u * h + 2u * q + k / 4u);
                }
            }
            for (uint t = 0u; t < nt; t++) {
                for (uint j = 0u; j < nbb; j++) {
                    uint c0 = 8u * (b0 + j);
                    int is = 0;
                    for (uint m = 0u; m < 8u; m++)
                        is += sc[j][m] * dot4(wp[j][m], act_q(t0 + t, c0 + m, k));
                    precise float d = act_d(t0 + t, c0) * wd[j];
                    acc[t] = fma_rn(d, float(is), acc[t]);
                }
            }
#endif
        }
#endif
    }
    for (uint t = 0u; t < NC; t++) {
        lanes[sub][t][k] = acc[t];
#if defined(T_F32)
        lanes[sub][t][k + 8u] = acc2[t];
#elif defined(T_Q4_K)
        if (k < 4u)
            extra[sub][t][k] = acc2[t];
#else
        if (k == 0u)
            extra[sub][t][0] = acc2[t];
#endif
    }
    barrier();
    if (!live || k >= nt)
        return;
    // invocation k of the row reduces token k
#if defined(T_F32)
    precise float l[16];
    for (uint i = 0u; i < 16u; i++)
        l[i] = lanes[sub][k][i];
    for (uint h = 8u; h >= 1u; h /= 2u)
        for (uint i = 0u; i < h; i++)
            l[i] = l[i] + l[i + h];
    precise float y = l[0];
#else
    precise float a0 = lanes[sub][k][0] + lanes[sub][k][4], a1 = lanes[sub][k][1] + lanes[sub][k][5];
    precise float a2 = lanes[sub][k][2] + lanes[sub][k][6], a3 = lanes[sub][k][3] + lanes[sub][k][7];
    precise float y = (a0 + a2) + (a1 + a3);
#if defined(T_Q4_K)
    precise float m = (extra[sub][k][0] + extra[sub][k][2]) + (extra[sub][k][1] + extra[sub][k][3]);
    y = y + m;
#elif defined(T_Q4_1) || defined(T_Q5_1) || defined(T_Q5_K)
    y = y + extra[sub][k][0];
#endif
#endif
    xs(p.y_off + (t0 + k) * p.y_stride + r, y);
}
