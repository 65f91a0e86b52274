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
#define UB 1u
#else
#define UB 4u
#endif
shared float lanes[RPW][NC][NL];
shared float extra[RPW][NC][4]; // min terms: q4_K's 4 lanes, q4_1 / q5_1 / q5_K's scalar

#if !defined(T_F32) && !defined(T_F16) && !defined(T_BF16)
#include "qunit.glsl"
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
        uint nb = unit_count();
        for (uint b0 = 0u; b0 < nb; b0 += UB) {
            // UB units' weights loaded before the chain of fmas consumes them
            uint nbb = min(UB, nb - b0);
            Unit us[UB];
            for (uint j = 0u; j < nbb; j++)
                us[j] = unit_load(rb, b0 + j, k);
            for (uint t = 0u; t < nt; t++) {
                for (uint j = 0u; j < nbb; j++) {
                    float a, bv, ma, mb;
                    unit_terms(us[j], b0 + j, k, t0 + t, a, bv, ma, mb);
                    acc[t] = fma_rn(a, bv, acc[t]);
#ifdef HAS_MIN
                    acc2[t] = fma_rn(ma, mb, acc2[t]);
#endif
                }
            }
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
    float l[8];
    for (uint i = 0u; i < 8u; i++)
        l[i] = lanes[sub][k][i];
    precise float y = hsum8(l);
#ifdef HAS_MIN
    float m[4];
    for (uint i = 0u; i < 4u; i++)
        m[i] = extra[sub][k][i];
    y = y + min_total(m);
#endif
#endif
    xs(p.y_off + (t0 + k) * p.y_stride + r, y);
}
