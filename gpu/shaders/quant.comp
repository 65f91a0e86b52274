#version 450
// quant.comp - activations [n_tok][n_in] f32 into the 8-bit formats the
// quantized weights dot with, with ggml's reference rounding (as
// kernels/types.c): Q8_0 and Q8_1 per 32 values, Q8_K per 256. Built once per
// format (-DQ8_0, -DQ8_1, -DQ8_K). Layout at out_off, for n_tok rows:
//   qs: [n_tok][n_in/4] words of four int8;
//   d:  [n_tok][n_in/32] f32 scale of each 32-value chunk (Q8_0/Q8_1: the
//       f16-rounded d; Q8_K: the block's d, repeated for its 8 chunks);
//   s:  [n_tok][n_in/32] f32: Q8_1 the f16-rounded d * sum(q), Q8_K the
//       integer sum(q) of the chunk (two of ggml's bsums).
// One workgroup per block and token. With -DHR_FAST (the fast path) the
// divisions are the device's own (fast.glsl): no 64-bit floats; with
// -DRMS as well, one workgroup per token normalizes its row (RMSNorm, also
// written out in f32) and quantizes it: the fast path's RMSNorm feeding a
// quantized matmul in one kernel.
#include "common.glsl"
#ifdef HR_FAST
#define WG 32u
#include "fast.glsl"
#else
#include "exact.glsl"
#endif
layout(local_size_x = 32) in;
#ifdef RMS
layout(push_constant) uniform PC {
    uint n_in, n_tok, in_off, out_off, xb_off, g_off, has_g;
    float eps;
} p;
#else
layout(push_constant) uniform PC { uint n_in, n_tok, in_off, out_off; } p;
#endif
#ifdef Q8_K
#define QB 256u
#else
#define QB 32u
#endif
#define PER (QB / 32u)
shared float amx[32];
shared uint aix[32];
shared int qv[QB];
shared float vs[QB]; // the block's values

// block b of token t's row, whose values are v[k] = element tid + 32k
void quant_block(uint b, uint t, float v[PER]) {
    uint tid = gl_LocalInvocationID.x;
    float am = 0.0;
    uint ai = 0u;
    for (uint k = 0u; k < PER; k++) {
        vs[tid + 32u * k] = v[k];
        float a = abs(v[k]);
        if (a > am) {
            am = a;
            ai = tid + 32u * k;
        }
    }
    amx[tid] = am;
    aix[tid] = ai;
    barrier();
    for (uint s = 16u; s > 0u; s >>= 1) {
        if (tid < s) {
            float o = amx[tid + s];
            uint oi = aix[tid + s];
            if (o > amx[tid] || (o == amx[tid] && oi < aix[tid] && o > 0.0)) {
                amx[tid] = o;
                aix[tid] = oi;
            }
        }
        barrier();
    }
    uint chunks = p.n_in / 32u, nq = p.n_tok * (p.n_in / 4u);
    uint dbase = p.out_off + nq + t * chunks, sbase = dbase + p.n_tok * chunks;
#ifdef Q8_K
    float amax = amx[0];
    float mxv = vs[aix[0]];
    float iscale = amax != 0.0 ? div_rn(-127.0, mxv) : 0.0;
    for (uint k = 0u; k < PER; k++) {
        precise float sv = iscale * v[k];
        qv[tid + 32u * k] = min(int(roundEven(sv)), 127);
    }
    barrier();
    float d = amax != 0.0 ? div_rn(1.0, iscale) : 0.0;
    if (tid < 8u) {
        int sum = 0;
        for (uint l = 0u; l < 32u; l++)
            sum += qv[32u * tid + l];
        xs(dbase + b * 8u + tid, d);
        xs(sbase + b * 8u + tid, float(sum));
    }
#else
    float d = div_rn(amx[0], 127.0), id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    precise float y = v[0] * id, r = trunc(y);
    if (abs(y - r) >= 0.5)
        r += sign(y); // roundf: ties away from zero
    qv[tid] = int(r);
    barrier();
    if (tid == 0u) {
        xs(dbase + b, f16round(d));
#ifdef Q8_1
        int sum = 0;
        for (uint l = 0u; l < 32u; l++)
            sum += qv[l];
        precise float sd = float(sum) * d;
        xs(sbase + b, f16round(sd));
#endif
    }
#endif
    for (uint k = tid; k < QB / 4u; k += 32u)
        x[p.out_off + t * (p.n_in / 4u) + b * (QB / 4u) + k] =
            (uint(qv[4u * k]) & 0xffu) | ((uint(qv[4u * k + 1u]) & 0xffu) << 8) |
            ((uint(qv[4u * k + 2u]) & 0xffu) << 16) | (uint(qv[4u * k + 3u]) << 24);
}

#ifdef RMS
// one workgroup per token: the row's RMSNorm (rmsnorm_fast.comp's math,
// written to xb_off as well), quantized block by block
void main() {
    uint t = wg_row(), tid = gl_LocalInvocationID.x;
    if (t >= p.n_tok)
        return;
    uint a = p.in_off + t * p.n_in, o = p.xb_off + t * p.n_in;
    float ss = 0.0;
    for (uint i = tid; i < p.n_in; i += 32u) {
        float xv = xf(a + i);
        ss = fma(xv, xv, ss);
    }
    ss = wg_add(ss);
    float scale = 1.0 / sqrt(ss / float(p.n_in) + p.eps);
    for (uint b = 0u; b < p.n_in / QB; b++) {
        float v[PER];
        for (uint k = 0u; k < PER; k++) {
            uint i = b * QB + tid + 32u * k;
            float y = xf(a + i) * scale;
            if (p.has_g != 0u)
                y *= uintBitsToFloat(w[p.g_off + i]);
            v[k] = y;
            xs(o + i, y);
        }
        barrier(); // the previous block's readers of the shared arrays are done
        quant_block(b, t, v);
    }
}
#else
void main() {
    uint b = wg_row(), t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    if (b * QB >= p.n_in)
        return;
    uint src = p.in_off + t * p.n_in + b * QB;
    float v[PER];
    for (uint k = 0u; k < PER; k++) // element tid + 32k
        v[k] = xf(src + tid + 32u * k);
    quant_block(b, t, v);
}
#endif
