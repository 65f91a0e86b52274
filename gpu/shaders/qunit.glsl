// qunit.glsl - a quantized weight row as lane k of the canonical float order
// (kernels/canon-impl.h) sees it, one unit at a time: a 32-value block, or a
// K-quant super-block of 8 such chunks. unit_load reads lane k's share of a
// unit (its four weights of each chunk as packed int8, the chunk scales and
// mins); unit_terms dots it with token t's activations (quant.comp's layout)
// and gives the lane's next steps: acc = fma(a, b, acc) for the dot product
// and m = fma(ma, mb, m) for the min term (q4_1, q5_1, q4_K lanes 0..3, q5_K;
// ma = mb = 0 elsewhere). Needs common.glsl and exact.glsl and a push-constant
// block p with n_in, n_tok, act_off; built per weight type (-DT_Q4_0 ...).

// the packed int8 dot product: OpSDotKHR with -DINT_DOT
// (shaderIntegerDotProduct), else unpacked
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

#if defined(T_Q4_1) || defined(T_Q5_1) || defined(T_Q4_K) || defined(T_Q5_K)
#define HAS_MIN
#endif

#if defined(T_Q4_K) || defined(T_Q5_K) || defined(T_Q6_K)
#define UNIT_CHUNKS 8u
#else
#define UNIT_CHUNKS 1u
#endif

// packed int8 bytes v - off for bytes v in 0..127, without borrows
uint sub_bytes(uint v, uint off) { return ((v | 0x80808080u) - off) ^ 0x80808080u; }
// bits 0..3 of h moved to bit 4 of bytes 0..3
uint hbits(uint h) {
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

// activations (quant.comp): word k of 32-value chunk c of token t, its
// scale d, its sum s
uint act_q(uint t, uint c, uint k) { return x[p.act_off + t * (p.n_in / 4u) + c * 8u + k]; }
float act_d(uint t, uint c) { return xf(p.act_off + p.n_tok * (p.n_in / 4u) + t * (p.n_in / 32u) + c); }
float act_s(uint t, uint c) {
    uint chunks = p.n_in / 32u;
    return xf(p.act_off + p.n_tok * (p.n_in / 4u) + p.n_tok * chunks + t * chunks + c);
}

#ifdef HAS_MIN
// the min term a row's dot product ends with, from its lanes' min chains:
// q4_K's 4 lanes reduced (0 + 2) + (1 + 3), else lane 0's scalar
float min_total(float m[4]) {
#if defined(T_Q4_K)
    precise float t = (m[0] + m[2]) + (m[1] + m[3]);
    return t;
#else
    return m[0];
#endif
}
#endif

struct Unit {
    uint wp[UNIT_CHUNKS]; // lane k's four weights of each chunk
    int sc[UNIT_CHUNKS];  // chunk scales (K-quants)
    int mn[UNIT_CHUNKS];  // chunk mins (q4_K, q5_K)
    float wd, wm;         // the unit's scale; its min (q4_1 / q5_1 m, K-quants dmin)
};

// byte j (< 12) of three words
uint sbyte(uint sw[3], uint j) { return (sw[j / 4u] >> (8u * (j % 4u))) & 0xffu; }

// units in a row of n_in values
uint unit_count() { return p.n_in / (32u * UNIT_CHUNKS); }

Unit unit_load(uint rb, uint b, uint k) {
    Unit u;
    u.wm = 0.0;
#if defined(T_Q4_0) || defined(T_Q4_1) || defined(T_Q5_0) || defined(T_Q5_1) || defined(T_Q8_0)
#if defined(T_Q4_0)
    uint o = rb + b * 18u, qs = o + 2u;
#elif defined(T_Q4_1)
    uint o = rb + b * 20u, qs = o + 4u;
    u.wm = h2f(w_u16(o + 2u));
#elif defined(T_Q5_0)
    uint o = rb + b * 22u, qs = o + 6u, qh = w_u32(o + 2u);
#elif defined(T_Q5_1)
    uint o = rb + b * 24u, qs = o + 8u, qh = w_u32(o + 4u);
    u.wm = h2f(w_u16(o + 2u));
#else
    uint o = rb + b * 34u;
#endif
    u.wd = h2f(w_u16(o));
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
    u.wp[0] = v;
    u.sc[0] = 1;
    u.mn[0] = 0;
#elif defined(T_Q4_K) || defined(T_Q5_K)
#if defined(T_Q4_K)
    uint o = rb + b * 144u, qs = o + 16u;
#else
    uint o = rb + b * 176u, qh = o + 16u, qs = o + 48u;
    uint hb = w_u32(qh + 4u * k);
#endif
    u.wd = h2f(w_u16(o));
    u.wm = h2f(w_u16(o + 2u));
    // the 12 scale bytes as three words (o is even), byte j of them by sbyte
    uint sw[3] = uint[3](w_u32(o + 4u), w_u32(o + 8u), w_u32(o + 12u));
    for (uint m = 0u; m < 8u; m++) {
        if (m < 4u) {
            u.sc[m] = int(sbyte(sw, m) & 63u);
            u.mn[m] = int(sbyte(sw, m + 4u) & 63u);
        } else {
            u.sc[m] = int((sbyte(sw, m + 4u) & 15u) | ((sbyte(sw, m - 4u) >> 6) << 4));
            u.mn[m] = int((sbyte(sw, m + 4u) >> 4) | ((sbyte(sw, m) >> 6) << 4));
        }
        u.wp[m] = (w_u32(qs + 32u * (m / 2u) + 4u * k) >> (4u * (m & 1u))) & 0x0f0f0f0fu;
#if defined(T_Q5_K)
        u.wp[m] |= ((hb >> m) & 0x01010101u) << 4;
#endif
    }
#elif defined(T_Q6_K)
    uint o = rb + b * 210u;
    u.wd = h2f(w_u16(o + 208u));
    for (uint m = 0u; m < 8u; m++) { // chunk m: half h, quarter q
        uint h = m / 4u, q = m % 4u;
        uint ql = w_u32(o + 64u * h + 32u * (q & 1u) + 4u * k);
        uint qh = w_u32(o + 128u + 32u * h + 4u * k);
        uint v = ((ql >> (4u * (q / 2u))) & 0x0f0f0f0fu) | (((qh >> (2u * q)) & 0x03030303u) << 4);
        u.wp[m] = sub_bytes(v, 0x20202020u);
        u.sc[m] = w_i8(o + 192u + 8u * h + 2u * q + k / 4u);
        u.mn[m] = 0;
    }
#endif
    return u;
}

void unit_terms(Unit u, uint b, uint k, uint t, out float a, out float bv, out float ma,
                out float mb) {
    uint c0 = b * UNIT_CHUNKS;
    int is = 0;
    for (uint m = 0u; m < UNIT_CHUNKS; m++)
        is += u.sc[m] * dot4(u.wp[m], act_q(t, c0 + m, k));
    float ad = act_d(t, c0);
    precise float d = u.wd * ad; // the float product of the two scales
    a = d;
    bv = float(is);
    ma = 0.0;
    mb = 0.0;
#if defined(T_Q4_1) || defined(T_Q5_1)
    ma = u.wm;
    mb = act_s(t, c0);
#elif defined(T_Q4_K)
    if (k < 4u) { // min lane k: chunks 2k and 2k + 1
        precise float dmin = -ad * u.wm;
        ma = dmin;
        mb = float(u.mn[2u * k] * int(act_s(t, c0 + 2u * k)) +
                   u.mn[2u * k + 1u] * int(act_s(t, c0 + 2u * k + 1u)));
    }
#elif defined(T_Q5_K)
    int ms = 0;
    for (uint m = 0u; m < 8u; m++)
        ms += u.mn[m] * int(act_s(t, c0 + m));
    precise float dmin = -ad * u.wm;
    ma = dmin;
    mb = float(ms);
#endif
}
