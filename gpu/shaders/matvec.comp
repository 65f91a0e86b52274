#version 450
// matvec.comp - y[r] = W[r] . a for one token (decode), each value bit for
// bit matmul.comp's (and the scalar reference's): the same 8 lanes per row,
// the same fma chain through a row's units in order. What differs is who
// does the work around the chain. A row has 32 invocations: 4 helpers for
// each of its 8 lanes. Per round, the helpers load and dot 4 * UH units of
// the row (consecutive units to consecutive helpers, each helper's UH units
// loaded before they are used), leave each lane's step operands in shared
// memory, and helper 0 of the lane runs them through the chain. So a row
// keeps 4 * UH units of loads in flight instead of one lane's worth, which
// is what decode on a GPU with thousands of cores waits on: one token has
// only as many rows as the matrix.
// A workgroup is 8 rows (wg_row() * 8 + gl_LocalInvocationID.x / 32).
// Quantized types (qunit.glsl) and F16 / BF16 (a unit: 8 values, value i in
// lane i % 8); F32 goes through matmul.comp. Built per weight type.
#include "common.glsl"
#include "exact.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride;
} p;
#define RPW 8u // rows per workgroup
#define H 4u   // helpers per lane
#if defined(T_F16) || defined(T_BF16)
#define FLOAT_W
#define UH 8u // units per helper per round
#else
#include "qunit.glsl"
#if defined(T_Q4_K) || defined(T_Q5_K) || defined(T_Q6_K)
#define UH 1u
#else
#define UH 4u
#endif
#endif
#define R (H * UH) // units per round
shared float sa[RPW][R][8], sb[RPW][R][8];
#ifdef HAS_MIN
shared float sma[RPW][R][8], smb[RPW][R][8];
#endif
shared float fin[RPW][8], finm[RPW][8];

void main() {
    uint sub = gl_LocalInvocationID.x / 32u, h = (gl_LocalInvocationID.x / 8u) % 4u;
    uint k = gl_LocalInvocationID.x % 8u;
    uint r = wg_row() * RPW + sub;
    bool live = r < p.n_out; // rows past the end still join the barriers
    uint rb = p.w_off + r * p.row_bytes;
#ifdef FLOAT_W
    uint nb = (p.n_in + 7u) / 8u;
#else
    uint nb = unit_count();
#endif
    precise float acc = 0.0, acc2 = 0.0;
    for (uint b0 = 0u; b0 < nb; b0 += R) {
#ifdef FLOAT_W
        float wv[UH];
        for (uint j = 0u; j < UH; j++) {
            uint i = 8u * (b0 + j * H + h) + k;
            bool in_row = live && i < p.n_in;
#if defined(T_F16)
            wv[j] = in_row ? h2f(w_u16(rb + 2u * i)) : 0.0;
#else
            wv[j] = in_row ? bf2f(w_u16(rb + 2u * i)) : 0.0;
#endif
        }
        for (uint j = 0u; j < UH; j++) {
            uint i = 8u * (b0 + j * H + h) + k;
            sa[sub][j * H + h][k] = wv[j];
            sb[sub][j * H + h][k] = live && i < p.n_in ? xf(p.act_off + i) : 0.0;
        }
#else
        Unit us[UH];
        for (uint j = 0u; j < UH; j++)
            if (live && b0 + j * H + h < nb)
                us[j] = unit_load(rb, b0 + j * H + h, k);
        for (uint j = 0u; j < UH; j++) {
            uint u = b0 + j * H + h;
            float a = 0.0, bv = 0.0, ma = 0.0, mb = 0.0;
            if (live && u < nb)
                unit_terms(us[j], u, k, 0u, a, bv, ma, mb);
            sa[sub][j * H + h][k] = a;
            sb[sub][j * H + h][k] = bv;
#ifdef HAS_MIN
            sma[sub][j * H + h][k] = ma;
            smb[sub][j * H + h][k] = mb;
#endif
        }
#endif
        barrier();
        if (h == 0u && live) {
            uint n = min(R, nb - b0);
#ifdef FLOAT_W
            // the last unit may be short: lanes past n_in take no step
            for (uint i = 0u; i < n; i++)
                if (8u * (b0 + i) + k < p.n_in)
                    acc = fma_rn(sa[sub][i][k], sb[sub][i][k], acc);
#else
            for (uint i = 0u; i < n; i++) {
                acc = fma_rn(sa[sub][i][k], sb[sub][i][k], acc);
#ifdef HAS_MIN
                acc2 = fma_rn(sma[sub][i][k], smb[sub][i][k], acc2);
#endif
            }
#endif
        }
        barrier();
    }
    if (h == 0u) {
        fin[sub][k] = acc;
        finm[sub][k] = acc2;
    }
    barrier();
    if (!live || gl_LocalInvocationID.x % 32u != 0u)
        return;
    float l[8];
    for (uint i = 0u; i < 8u; i++)
        l[i] = fin[sub][i];
    precise float y = hsum8(l);
#ifdef HAS_MIN
    float m[4];
    for (uint i = 0u; i < 4u; i++)
        m[i] = finm[sub][i];
    y = y + min_total(m);
#endif
    xs(p.y_off + r, y);
}
