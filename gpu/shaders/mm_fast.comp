#version 450
// mm_fast.comp - the fast path's matrix multiply: y[t][r] = W[r] . a[t] in
// 32-bit floats, summed in whatever order is quickest (no canonical order:
// results are within float rounding of the scalar reference, not equal to
// it). One workgroup of 32 invocations per row and 8 tokens: the row's
// units (a quantized 32-value block's or K-quant super-block's lane k, as
// qunit.glsl loads it; one value of a float row) are dealt round-robin to
// the invocations, dequantized in registers once and dotted with each of
// the 8 tokens (quantized types: with quant.comp's 8-bit activations,
// integer sums per chunk as the reference; float types: with the f32
// activations), then the tokens' partial sums are reduced across the
// workgroup together (subgroup arithmetic with -DHR_SUBGROUP, then the
// subgroups' sums through shared memory; else all through shared memory).
//
// flags: 1 = gate/up with SwiGLU: W2 (w2_off, same type and shape) is the up
// projection and y = silu(W a) * (W2 a); 2 = accumulate: y += the result
// (the residual add of the output and down projections).
// Built per weight type (-DT_Q4_0 ...), with and without -DHR_SUBGROUP and,
// for quantized types, -DINT_DOT.
#include "common.glsl"
#define WG 32u
#include "fast.glsl"
layout(local_size_x = 32) in;
layout(push_constant) uniform PC {
    uint n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride, w2_off, flags;
} p;
#define NC 8u // tokens per workgroup
shared float part[2][NC][WG]; // [W, W2][token][invocation or subgroup]: partial sums
#if defined(T_F32) || defined(T_F16) || defined(T_BF16)
#define FLOAT_W
float wload(uint rb, uint i) {
#if defined(T_F32)
    return uintBitsToFloat(w[(rb >> 2) + i]);
#elif defined(T_F16)
    return h2f(w_u16(rb + 2u * i));
#else
    return bf2f(w_u16(rb + 2u * i));
#endif
}
#else
#include "qunit.glsl"
#endif

void main() {
    uint r = wg_row(), tid = gl_LocalInvocationID.x;
    if (r >= p.n_out)
        return;
    uint t0 = gl_WorkGroupID.y * NC, nt = min(NC, p.n_tok - t0);
    bool glu = (p.flags & 1u) != 0u;
    uint rb = p.w_off + r * p.row_bytes, rb2 = p.w2_off + r * p.row_bytes;
    float acc[NC], acc2[NC];
    for (uint t = 0u; t < NC; t++) {
        acc[t] = 0.0;
        acc2[t] = 0.0;
    }
#ifdef FLOAT_W
    for (uint i = tid; i < p.n_in; i += WG) {
        float wv = wload(rb, i), wv2 = glu ? wload(rb2, i) : 0.0;
        for (uint t = 0u; t < NC; t++) {
            if (t < nt) {
                float a = xf(p.act_off + (t0 + t) * p.n_in + i);
                acc[t] = fma(wv, a, acc[t]);
                acc2[t] = fma(wv2, a, acc2[t]);
            }
        }
    }
#else
    uint nu = unit_count() * 8u;
    for (uint u = tid; u < nu; u += WG) {
        uint b = u / 8u, k = u % 8u;
#if defined(T_Q4_1) || defined(T_Q5_1) || defined(T_Q5_K)
        float mk = k == 0u ? 1.0 : 0.0; // every lane has the unit's min term: lane 0 adds it
#else
        float mk = 1.0; // q4_K: lanes 0..3 hold a part each (0 elsewhere)
#endif
        Unit w1 = unit_load(rb, b, k), w2;
        if (glu)
            w2 = unit_load(rb2, b, k);
        for (uint t = 0u; t < NC; t++) {
            if (t < nt) {
                float a, bv, ma, mb;
                unit_terms(w1, b, k, t0 + t, a, bv, ma, mb);
                acc[t] += a * bv + mk * ma * mb;
                if (glu) {
                    unit_terms(w2, b, k, t0 + t, a, bv, ma, mb);
                    acc2[t] += a * bv + mk * ma * mb;
                }
            }
        }
    }
#endif
    // every token's partial sums reduced at once: one barrier
#ifdef HR_SUBGROUP
    for (uint t = 0u; t < nt; t++) {
        float s = subgroupAdd(acc[t]), s2 = glu ? subgroupAdd(acc2[t]) : 0.0;
        if (subgroupElect()) {
            part[0][t][gl_SubgroupID] = s;
            part[1][t][gl_SubgroupID] = s2;
        }
    }
    uint np = gl_NumSubgroups;
#else
    for (uint t = 0u; t < nt; t++) {
        part[0][t][tid] = acc[t];
        part[1][t][tid] = acc2[t];
    }
    uint np = WG;
#endif
    barrier();
    if (tid < nt) { // invocation t writes token t
        float s = 0.0, s2 = 0.0;
        for (uint i = 0u; i < np; i++) {
            s += part[0][tid][i];
            s2 += part[1][tid][i];
        }
        uint yo = p.y_off + (t0 + tid) * p.y_stride + r;
        float y = glu ? s / (1.0 + exp(-s)) * s2 : s;
        if ((p.flags & 2u) != 0u)
            y += xf(yo);
        xs(yo, y);
    }
}
