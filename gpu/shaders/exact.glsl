// exact.glsl - the few float operations whose rounding Vulkan leaves to the
// device (division: 2.5 ulp; sqrt and exp: more), done so that each result
// is the CPU path's to the last bit: IEEE correctly rounded float division
// and square root, and glibc's expf. They compute in 64-bit floats (the
// shaderFloat64 feature), whose add, multiply and fma are exact operations
// followed by one rounding, and check their candidate against the exact
// midpoints. Why it matters: one ulp moved in a softmax or a SwiGLU moves the
// next layer's 8-bit activations across a rounding step now and then, and a
// model's logits by ~1e-2.
//
// Every expression here is `precise` (no multiply-add contraction the source
// does not spell out as fma).

// the float one step further from zero (d = 1) or nearer to it (d = -1)
float ex_step(float f, int d) { return uintBitsToFloat(uint(int(floatBitsToUint(f)) + d)); }

// fma(a, b, c) with one rounding, on any device: Vulkan lets fma() be a
// multiply and an add rounded apart (lavapipe does so). Where the device's
// fma() was seen to round once (hr_vk_create probes it), the pipelines are
// built with FMA_NATIVE and use it. a * b is exact in a
// double; t = a * b + c rounds once, and its exact error (two-sum) decides
// the float rounding where t falls on a midpoint between two floats, the
// one case where rounding t again would differ from rounding a * b + c.
layout(constant_id = 0) const bool FMA_NATIVE = false; // set where fma() was seen to round once
float fma_rn(float a, float b, float c) {
    if (FMA_NATIVE)
        return fma(a, b, c);
    precise double pr = double(a) * double(b);
    precise double dc = double(c);
    precise double t = pr + dc;
    precise double bv = t - pr;
    precise double er = (pr - (t - bv)) + (dc - bv);
    float f = float(t);
    precise double df = double(f);
    if (er != 0.0 && df != t && !isinf(f)) {
        // g: the float on t's other side; t on the midpoint of f and g
        // (exact in a double, subnormal floats included) means the true
        // sum t + er lies on er's side of it
        float g = f != 0.0 ? ex_step(f, (t > df) == (f > 0.0) ? 1 : -1)
                           : uintBitsToFloat((t > 0.0 ? 0u : 0x80000000u) | 1u);
        precise double mid = (df + double(g)) * 0.5;
        if (t == mid)
            return (er > 0.0) == (double(g) > df) ? g : f;
    }
    return f;
}

// the canonical reduction of 8 float lanes (ggml's hsum_float_8,
// kernels/canon-impl.h): (k + (k + 4)), then (0 + 2) + (1 + 3)
float hsum8(float l[8]) {
    precise float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    precise float y = (a0 + a2) + (a1 + a3);
    return y;
}

// a / b rounded to nearest even, for finite a and b (b != 0, no subnormal
// quotients): the float of the double quotient or a neighbour, whichever
// leaves the smallest exact remainder |a - q b| (q b is exact in a double).
float div_rn(float a, float b) {
    precise float q = float(double(a) / double(b));
    if (a == 0.0 || isinf(q) || q == 0.0)
        return q;
    precise double da = double(a), db = double(b);
    precise double e0 = abs(da - double(q) * db);
    precise float qu = ex_step(q, 1), qd = ex_step(q, -1);
    precise double eu = abs(da - double(qu) * db), ed = abs(da - double(qd) * db);
    if (eu < e0)
        return qu;
    if (ed < e0)
        return qd;
    return q;
}

// sqrt(v) rounded to nearest even for finite v >= 0: the float of the
// double root moves to a neighbour when v lies beyond the midpoint between
// them (the midpoint's square is exact in a double).
float sqrt_rn(float v) {
    precise float s = float(sqrt(double(v)));
    if (v == 0.0 || isinf(v))
        return s;
    precise double dv = double(v);
    precise float su = ex_step(s, 1), sd = ex_step(s, -1);
    precise double mu = (double(s) + double(su)) * 0.5, md = (double(sd) + double(s)) * 0.5;
    if (dv > mu * mu)
        return su;
    if (dv < md * md)
        return sd;
    return s;
}

// a * b = p + e exactly (Dekker's product: splits, no fma, which a device
// may round twice), for doubles far from overflow
void two_prod(double a, double b, out double p, out double e) {
    const double split = 134217729.0LF; // 2^27 + 1
    precise double ca = split * a, cb = split * b;
    precise double ah = ca - (ca - a), al = a - ah;
    precise double bh = cb - (cb - b), bl = b - bh;
    precise double pp = a * b;
    p = pp;
    e = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
}

// a / b in doubles: the device's quotient corrected by one Newton step on
// its exact remainder (correctly rounded but for near-ties)
double ddiv(double a, double b) {
    precise double q = a / b;
    double p, e;
    two_prod(q, b, p, e);
    precise double r = (a - p) - e;
    precise double qq = q + r / b;
    return qq;
}

// glibc's expf: exp(x) = 2^(k/32) * 2^(r/32), the table T[i] = the bits of
// 2^(i/32) less i << 47, a cubic in r, all in doubles; r = x * 32/ln2 - k
// rounded once, as glibc's x86-64 FMA build computes it. Equal to glibc's
// expf for every float x (checked exhaustively against the library, with
// the cubic's multiply-adds fused or not).
const uvec2 EX_T[32] = uvec2[32](
    uvec2(0x00000000u, 0x3ff00000u), uvec2(0xd3158574u, 0x3fefd9b0u),
    uvec2(0x6cf9890fu, 0x3fefb558u), uvec2(0xd0125b51u, 0x3fef9301u),
    uvec2(0x3c7d517bu, 0x3fef72b8u), uvec2(0x3168b9aau, 0x3fef5487u),
    uvec2(0x6e756238u, 0x3fef387au), uvec2(0xf51fdee1u, 0x3fef1e9du),
    uvec2(0x0a31b715u, 0x3fef06feu), uvec2(0x373aa9cbu, 0x3feef1a7u),
    uvec2(0x4c123422u, 0x3feedea6u), uvec2(0x6061892du, 0x3feece08u),
    uvec2(0xd5362a27u, 0x3feebfdau), uvec2(0x569d4f82u, 0x3feeb42bu),
    uvec2(0xdd485429u, 0x3feeab07u), uvec2(0xb03a5585u, 0x3feea47eu),
    uvec2(0x667f3bcdu, 0x3feea09eu), uvec2(0xe8ec5f74u, 0x3fee9f75u),
    uvec2(0x73eb0187u, 0x3feea114u), uvec2(0x994cce13u, 0x3feea589u),
    uvec2(0x422aa0dbu, 0x3feeace5u), uvec2(0xb0cdc5e5u, 0x3feeb737u),
    uvec2(0x82a3f090u, 0x3feec491u), uvec2(0xb23e255du, 0x3feed503u),
    uvec2(0x995ad3adu, 0x3feee89fu), uvec2(0xf2fb5e47u, 0x3feeff76u),
    uvec2(0xdd85529cu, 0x3fef199bu), uvec2(0xdcef9069u, 0x3fef3720u),
    uvec2(0xdcfba487u, 0x3fef5818u), uvec2(0x337b9b5fu, 0x3fef7c97u),
    uvec2(0xa2a490dau, 0x3fefa4afu), uvec2(0x5b6e4540u, 0x3fefd076u));

float expf_c(float x) {
    uint ux = floatBitsToUint(x), abstop = (ux >> 20) & 0x7ffu;
    if (abstop >= 0x42bu) { // |x| >= 88, inf or nan
        if (ux == 0xff800000u)
            return 0.0;
        if (abstop >= 0x7f8u)
            return x + x;
        if (x > 88.72283172607421875) // 0x1.62e42ep6
            return uintBitsToFloat(0x7f800000u);
        if (x < -103.972076416015625) // -0x1.9fe368p6
            return 0.0;
    }
    // 32/ln2, 1.5 * 2^52, and the cubic's coefficients (glibc's, over 32^3, 32^2, 32)
    const double inv_ln2_n = packDouble2x32(uvec2(0x652b82feu, 0x40471547u));
    // inv_ln2_n split in a 29-bit head and the rest: each times a float is
    // exact in a double, so r = inv_ln2_n * x - kd is rounded once whether
    // or not the device fuses a double fma (lavapipe does not)
    const double inv_hi = packDouble2x32(uvec2(0x65000000u, 0x40471547u));
    const double inv_lo = packDouble2x32(uvec2(0x00000000u, 0x3e55c17fu));
    const double shift = packDouble2x32(uvec2(0x00000000u, 0x43380000u));
    const double c0 = packDouble2x32(uvec2(0x4b912394u, 0x3ebc6af8u));
    const double c1 = packDouble2x32(uvec2(0x50fac4f3u, 0x3f2ebfceu));
    const double c2 = packDouble2x32(uvec2(0xff0c52d6u, 0x3f962e42u));
    precise double xd = double(x);
    precise double z = inv_ln2_n * xd;
    precise double kd = z + shift;
    uvec2 kb = unpackDouble2x32(kd);
    kd = kd - shift;
    precise double rh = inv_hi * xd - kd; // exact: both terms near each other
    precise double r = rh + inv_lo * xd;
    uvec2 t = EX_T[kb.x & 31u];
    t.y += kb.x << 15; // + (k << 47): the low 17 bits of k into the high word
    precise double s = packDouble2x32(t);
    precise double zz = fma(c0, r, c1);
    precise double r2 = r * r;
    precise double y = fma(c2, r, 1.0);
    y = fma(zz, r2, y);
    y = y * s;
    return float(y);
}
