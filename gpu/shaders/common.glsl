// common.glsl - what every hearth compute shader shares: the three storage
// buffers of a descriptor set (weights, work buffer, KV cache), all viewed as
// 32-bit words, and exact f16 <-> f32 conversions done with integer ops so
// results do not depend on a driver's half-float rounding or denormal
// handling (they match kernels/types.h bit for bit).
#extension GL_GOOGLE_include_directive : require

layout(set = 0, binding = 0) readonly buffer Wbuf { uint w[]; };
#ifdef HR_COHERENT_WORK
layout(set = 0, binding = 1) coherent buffer Xbuf { uint x[]; };
#else
layout(set = 0, binding = 1) buffer Xbuf { uint x[]; };
#endif
layout(set = 0, binding = 2) buffer Kbuf { uint kv[]; };

float xf(uint i) { return uintBitsToFloat(x[i]); }
void xs(uint i, float v) { x[i] = floatBitsToUint(v); }

// byte / half / word loads from the weight buffer at a byte offset
uint w_u8(uint o) { return (w[o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }
int w_i8(uint o) { return int(w[o >> 2] << (24u - (o & 3u) * 8u)) >> 24; }
uint w_u16(uint o) { return (w[o >> 2] >> ((o & 2u) * 8u)) & 0xffffu; } // o even
uint w_u32(uint o) {                                                    // o even
    return (o & 2u) == 0u ? w[o >> 2] : (w[o >> 2] >> 16) | (w[(o >> 2) + 1u] << 16);
}

float h2f(uint h) {
    uint sgn = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu)
        return uintBitsToFloat(sgn | 0x7f800000u | (m << 13));
    if (e == 0u)
        return uintBitsToFloat(sgn | floatBitsToUint(float(m) * 5.9604644775390625e-8));
    return uintBitsToFloat(sgn | ((e + 112u) << 23) | (m << 13));
}

uint f2h(float f) { // round to nearest even, as hr_fp32_to_fp16
    uint u = floatBitsToUint(f), sgn = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sgn | 0x7e00u | ((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u)
        return sgn | 0x7c00u;
    if (a >= 0x38800000u) {
        uint r = a - 0x38000000u;
        return sgn | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    if (a <= 0x33000000u)
        return sgn;
    uint m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
    uint q = m >> shift, rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (q & 1u) != 0u))
        q++;
    return sgn | q;
}

float bf2f(uint h) { return uintBitsToFloat(h << 16); }
float f16round(float f) { return h2f(f2h(f)); }

// a row index from a dispatch that may be split over x and z (x <= 65535)
uint wg_row() { return gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x; }
