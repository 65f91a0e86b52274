/* types.c - the type traits table (one row per GGUF type hearth knows) and
 * the scalar reference kernels of each row: dequantize, quantize, dot
 * product. Depends on libc/libm only.
 *
 * The scalar kernels define the semantics: the SIMD files must agree with
 * them exactly for dequant and activation quantizers, and for dot products
 * on the paths that follow the float order of kernels/canon-impl.h (AVX2
 * and the aarch64 ones; AVX-512 up to float summation order). Activation
 * quantizers follow ggml's reference ones so logits stay comparable with
 * llama.cpp. A new weight type is a row at the end of this file plus its
 * kernels above it. */
#include "kernels/canon-impl.h"
#include "kernels/types-impl.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#define FP16(h) hr_fp16_to_fp32(h)

/* ---- scalar dequantizers ------------------------------------------------- */

static void dequant_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = hr_fp16_to_fp32(s[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = hr_bf16_to_fp32(s[i]);
}

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const hr_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK4_0; i++, dst += HR_QK4_0) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            dst[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const void *src, float *dst, int64_t n) {
    const hr_block_q4_1 *x = src;
    for (int64_t i = 0; i < n / HR_QK4_1; i++, dst += HR_QK4_1) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(x[i].qs[j] & 15) * d + m;
            dst[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void dequant_q5_0(const void *src, float *dst, int64_t n) {
    const hr_block_q5_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK5_0; i++, dst += HR_QK5_0) {
        const float d = FP16(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1u) << 4, h1 = (int)((qh >> (j + 16)) & 1u) << 4;
            dst[j] = (float)(((x[i].qs[j] & 15) | h0) - 16) * d;
            dst[j + 16] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void dequant_q5_1(const void *src, float *dst, int64_t n) {
    const hr_block_q5_1 *x = src;
    for (int64_t i = 0; i < n / HR_QK5_1; i++, dst += HR_QK5_1) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1u) << 4, h1 = (int)((qh >> (j + 16)) & 1u) << 4;
            dst[j] = (float)((x[i].qs[j] & 15) | h0) * d + m;
            dst[j + 16] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const hr_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK8_0; i++, dst += HR_QK8_0) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < HR_QK8_0; j++)
            dst[j] = (float)x[i].qs[j] * d;
    }
}

static void dequant_mxfp4(const void *src, float *dst, int64_t n) {
    const hr_block_mxfp4 *x = src;
    for (int64_t i = 0; i < n / HR_QK_MXFP4; i++, dst += HR_QK_MXFP4) {
        const float d = hr_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)hr_mxfp4_values[x[i].qs[j] & 15] * d;
            dst[j + 16] = (float)hr_mxfp4_values[x[i].qs[j] >> 4] * d;
        }
    }
}

static void dequant_q8_1(const void *src, float *dst, int64_t n) {
    const hr_block_q8_1 *x = src;
    for (int64_t i = 0; i < n / HR_QK8_1; i++, dst += HR_QK8_1) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < HR_QK8_1; j++)
            dst[j] = (float)x[i].qs[j] * d;
    }
}

static void dequant_q4_k(const void *src, float *dst, int64_t n) {
    const hr_block_q4_k *x = src;
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        const float d = FP16(x[i].d), dmin = FP16(x[i].dmin);
        uint8_t sc[8], mn[8];
        hr_kq_unpack_scales(x[i].scales, sc, mn);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32, dst += 64) {
            const float d1 = d * (float)sc[2 * c], m1 = dmin * (float)mn[2 * c];
            const float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)mn[2 * c + 1];
            for (int l = 0; l < 32; l++) {
                dst[l] = d1 * (float)(q[l] & 15) - m1;
                dst[l + 32] = d2 * (float)(q[l] >> 4) - m2;
            }
        }
    }
}

static void dequant_q5_k(const void *src, float *dst, int64_t n) {
    const hr_block_q5_k *x = src;
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        const float d = FP16(x[i].d), dmin = FP16(x[i].dmin);
        uint8_t sc[8], mn[8];
        hr_kq_unpack_scales(x[i].scales, sc, mn);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < 4; c++, q += 32, dst += 64) {
            const float d1 = d * (float)sc[2 * c], m1 = dmin * (float)mn[2 * c];
            const float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)mn[2 * c + 1];
            for (int l = 0; l < 32; l++) {
                const int h0 = ((qh[l] >> (2 * c)) & 1) << 4;
                const int h1 = ((qh[l] >> (2 * c + 1)) & 1) << 4;
                dst[l] = d1 * (float)((q[l] & 15) | h0) - m1;
                dst[l + 32] = d2 * (float)((q[l] >> 4) | h1) - m2;
            }
        }
    }
}

static void dequant_q6_k(const void *src, float *dst, int64_t n) {
    const hr_block_q6_k *x = src;
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        const float d = FP16(x[i].d);
        for (int h = 0; h < 2; h++, dst += 128) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                const int is = l / 16;
                dst[l] = d * (float)sc[is] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void dequant_q8_k(const void *src, float *dst, int64_t n) {
    const hr_block_q8_k *x = src;
    for (int64_t i = 0; i < n / HR_QK_K; i++, dst += HR_QK_K)
        for (int j = 0; j < HR_QK_K; j++)
            dst[j] = x[i].d * (float)x[i].qs[j];
}

/* ---- scalar quantizers: activations (ggml semantics) --------------------- */

static void quant_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void quant_f16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = hr_fp32_to_fp16(src[i]);
}

static void quant_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = hr_fp32_to_bf16(src[i]);
}

/* The code of hr_mxfp4_values nearest to v (in units of the block scale). */
static int mxfp4_nearest(float v) {
    int best = 0;
    float err = fabsf(v);
    for (int c = 1; c < 16; c++) {
        const float e = fabsf(v - (float)hr_mxfp4_values[c]);
        if (e < err) {
            err = e;
            best = c;
        }
    }
    return best;
}

/* Squared error of block x coded with exponent e (codes into q when not NULL). */
static float mxfp4_code(const float *x, uint8_t e, uint8_t *q) {
    const float d = hr_e8m0_half(e), id = 1.0f / d;
    float err = 0.0f;
    for (int j = 0; j < 16; j++) {
        const int c0 = mxfp4_nearest(x[j] * id), c1 = mxfp4_nearest(x[j + 16] * id);
        const float e0 = x[j] - (float)hr_mxfp4_values[c0] * d;
        const float e1 = x[j + 16] - (float)hr_mxfp4_values[c1] * d;
        err += e0 * e0 + e1 * e1;
        if (q)
            q[j] = (uint8_t)(c0 | (c1 << 4));
    }
    return err;
}

/* The shared exponent puts the block's largest magnitude near the top code
 * (12 half-scales: E2M1's 6); of that exponent and the next one up the one
 * with the smaller squared error is kept. */
static void quant_mxfp4(const float *src, void *dst, int64_t n) {
    hr_block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / HR_QK_MXFP4; i++, src += HR_QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < HR_QK_MXFP4; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        if (!(amax > 0.0f) || !isfinite(amax)) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int ex;
        frexpf(amax / 12.0f, &ex); /* amax / 12 in [2^(ex-1), 2^ex) */
        int e = ex + 127;          /* hr_e8m0_half(e) = 2^(ex-1) */
        e = e < 2 ? 2 : e > 253 ? 253 : e;
        const float lo = mxfp4_code(src, (uint8_t)e, NULL);
        const float hi = mxfp4_code(src, (uint8_t)(e + 1), NULL);
        y[i].e = (uint8_t)(hi < lo ? e + 1 : e);
        mxfp4_code(src, y[i].e, y[i].qs);
    }
}

/* d = amax/127, q = roundf(x/d) (ties away from zero), as ggml's reference */
static void quant_q8_0(const float *src, void *dst, int64_t n) {
    hr_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / HR_QK8_0; i++, src += HR_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < HR_QK8_0; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = hr_fp32_to_fp16(d);
        for (int j = 0; j < HR_QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(src[j] * id);
    }
}

static void quant_q8_1(const float *src, void *dst, int64_t n) {
    hr_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / HR_QK8_1; i++, src += HR_QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < HR_QK8_1; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < HR_QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(src[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = hr_fp32_to_fp16(d);
        y[i].s = hr_fp32_to_fp16((float)sum * d);
    }
}

/* The value of largest magnitude (first one on ties) maps to -127. */
static void quant_q8_k(const float *src, void *dst, int64_t n) {
    hr_block_q8_k *y = dst;
    for (int64_t i = 0; i < n / HR_QK_K; i++, src += HR_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < HR_QK_K; j++) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < HR_QK_K; j++) {
            const int v = hr_nearest_int(iscale * src[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < HR_QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---- scalar quantizers: weights (round to nearest with a scale search) --- */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Signed value of largest magnitude in x[0..n). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void quant_q4_0(const float *src, void *dst, int64_t n) {
    hr_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / HR_QK4_0; i++, src += HR_QK4_0) {
        const float d = signed_absmax(src, HR_QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = hr_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = clampi(hr_nearest_int(src[j] * id) + 8, 0, 15);
            const int q1 = clampi(hr_nearest_int(src[j + 16] * id) + 8, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q5_0(const float *src, void *dst, int64_t n) {
    hr_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / HR_QK5_0; i++, src += HR_QK5_0) {
        const float d = signed_absmax(src, HR_QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = hr_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = clampi(hr_nearest_int(src[j] * id) + 16, 0, 31);
            const int q1 = clampi(hr_nearest_int(src[j + 16] * id) + 16, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* min/max affine fit for q4_1 / q5_1: x = d*q + m, q in 0..qmax. */
static void affine_minmax(const float *x, int n, int qmax, float *d, float *m) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    *d = (hi - lo) / (float)qmax;
    *m = lo;
}

static void quant_q4_1(const float *src, void *dst, int64_t n) {
    hr_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / HR_QK4_1; i++, src += HR_QK4_1) {
        float d, m;
        affine_minmax(src, HR_QK4_1, 15, &d, &m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = hr_fp32_to_fp16(d);
        y[i].m = hr_fp32_to_fp16(m);
        for (int j = 0; j < 16; j++) {
            const int q0 = clampi(hr_nearest_int((src[j] - m) * id), 0, 15);
            const int q1 = clampi(hr_nearest_int((src[j + 16] - m) * id), 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q5_1(const float *src, void *dst, int64_t n) {
    hr_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / HR_QK5_1; i++, src += HR_QK5_1) {
        float d, m;
        affine_minmax(src, HR_QK5_1, 31, &d, &m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = hr_fp32_to_fp16(d);
        y[i].m = hr_fp32_to_fp16(m);
        for (int j = 0; j < 16; j++) {
            const int q0 = clampi(hr_nearest_int((src[j] - m) * id), 0, 31);
            const int q1 = clampi(hr_nearest_int((src[j + 16] - m) * id), 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* Fits x[0..n) ~= s*q - m with q in 0..qmax, s >= 0, m >= 0: tries scales
 * around (max - min)/qmax and refits s, m by least squares for each, keeping
 * the smallest squared error. Returns s; writes m. */
static float fit_scale_min(const float *x, int n, int qmax, float *m_out) {
    float lo = x[0], hi = x[0];
    double sx = 0, sxx = 0;
    for (int j = 0; j < n; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
        sx += x[j];
        sxx += (double)x[j] * x[j];
    }
    if (lo > 0.0f)
        lo = 0.0f;
    if (hi == lo) {
        *m_out = -lo;
        return 0.0f;
    }
    float best_s = (hi - lo) / (float)qmax, best_b = lo;
    double best_err = DBL_MAX;
    for (int step = -4; step <= 4; step++) {
        const float iscale = ((float)qmax + 0.125f * (float)step) / (hi - lo);
        double sq = 0, sqq = 0, sxq = 0;
        for (int j = 0; j < n; j++) {
            const int q = clampi(hr_nearest_int((x[j] - lo) * iscale), 0, qmax);
            sq += q;
            sqq += q * q;
            sxq += (double)x[j] * q;
        }
        const double det = n * sqq - sq * sq;
        if (det <= 0)
            continue;
        double s = (n * sxq - sq * sx) / det, b = (sqq * sx - sq * sxq) / det;
        if (b > 0) { /* the offset can only pull values down */
            b = 0;
            s = sxq / sqq;
        }
        if (s <= 0)
            continue;
        /* sum (s*q + b - x)^2 from the sums above */
        const double err =
            s * s * sqq + 2 * s * b * sq + n * b * b - 2 * s * sxq - 2 * b * sx + sxx;
        if (err < best_err) {
            best_err = err;
            best_s = (float)s;
            best_b = (float)b;
        }
    }
    *m_out = -best_b;
    return best_s;
}

/* Packs 8 six-bit scales and mins into the 12-byte K-quant scale field
 * (inverse of hr_kq_unpack_scales). */
static void kq_pack_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t s[12]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

/* Shared by q4_K (qmax 15) and q5_K (qmax 31): per sub-block scale and min,
 * quantized to 6 bits against fp16 super-block scales; writes the 256 levels
 * to L and the header fields. */
static void quant_kx_block(const float *x, int qmax, uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t scales[12], uint8_t L[HR_QK_K]) {
    float s[8], m[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        s[j] = fit_scale_min(x + 32 * j, 32, qmax, &m[j]);
        smax = fmaxf(smax, s[j]);
        mmax = fmaxf(mmax, m[j]);
    }
    *d_out = hr_fp32_to_fp16(smax / 63.0f);
    *dmin_out = hr_fp32_to_fp16(mmax / 63.0f);
    const float d = FP16(*d_out), dmin = FP16(*dmin_out);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0.0f ? clampi(hr_nearest_int(s[j] / d), 0, 63) : 0);
        mn[j] = (uint8_t)(dmin > 0.0f ? clampi(hr_nearest_int(m[j] / dmin), 0, 63) : 0);
    }
    kq_pack_scales(sc, mn, scales);
    for (int j = 0; j < 8; j++) {
        const float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
        for (int l = 0; l < 32; l++) {
            const float v = x[32 * j + l];
            L[32 * j + l] =
                (uint8_t)(ds > 0.0f ? clampi(hr_nearest_int((v + dm) / ds), 0, qmax) : 0);
        }
    }
}

static void quant_q4_k(const float *src, void *dst, int64_t n) {
    hr_block_q4_k *y = dst;
    uint8_t L[HR_QK_K];
    for (int64_t i = 0; i < n / HR_QK_K; i++, src += HR_QK_K) {
        quant_kx_block(src, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void quant_q5_k(const float *src, void *dst, int64_t n) {
    hr_block_q5_k *y = dst;
    uint8_t L[HR_QK_K];
    for (int64_t i = 0; i < n / HR_QK_K; i++, src += HR_QK_K) {
        quant_kx_block(src, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

/* Symmetric fit for a q6_K group of 16: x ~= s*q, q in -32..31; tries a few
 * scales and refits by least squares. Returns s (may be negative). */
static float fit_scale_sym(const float *x, int n) {
    const float max = signed_absmax(x, n);
    if (max == 0.0f)
        return 0.0f;
    float best_s = max / -32.0f;
    double best_gain = -1;
    for (int step = -4; step <= 4; step++) {
        const float iscale = -(32.0f + 0.125f * (float)step) / max;
        double sxq = 0, sqq = 0;
        for (int j = 0; j < n; j++) {
            const int q = clampi(hr_nearest_int(x[j] * iscale), -32, 31);
            sxq += (double)x[j] * q;
            sqq += q * q;
        }
        /* with s = sxq/sqq the squared error is sum x^2 - sxq^2/sqq */
        if (sqq > 0 && sxq * sxq / sqq > best_gain) {
            best_gain = sxq * sxq / sqq;
            best_s = (float)(sxq / sqq);
        }
    }
    return best_s;
}

static void quant_q6_k(const float *src, void *dst, int64_t n) {
    hr_block_q6_k *y = dst;
    for (int64_t i = 0; i < n / HR_QK_K; i++, src += HR_QK_K) {
        float s[16];
        for (int g = 0; g < 16; g++)
            s[g] = fit_scale_sym(src + 16 * g, 16);
        const float smax = signed_absmax(s, 16);
        uint8_t L[HR_QK_K];
        if (smax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            memset(L, 32, sizeof(L));
        } else {
            y[i].d = hr_fp32_to_fp16(smax / -128.0f);
            const float d = FP16(y[i].d);
            for (int g = 0; g < 16; g++) {
                const int sc = clampi(hr_nearest_int(s[g] / d), -128, 127);
                y[i].scales[g] = (int8_t)sc;
                const float ds = d * (float)sc;
                for (int l = 0; l < 16; l++) {
                    const float v = src[16 * g + l];
                    const int q = ds != 0.0f ? clampi(hr_nearest_int(v / ds), -32, 31) : 0;
                    L[16 * g + l] = (uint8_t)(q + 32);
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const uint8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                ql[l] = (uint8_t)((q1 & 15) | ((q3 & 15) << 4));
                ql[l + 32] = (uint8_t)((q2 & 15) | ((q4 & 15) << 4));
                qh[l] =
                    (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* ---- scalar dot products ------------------------------------------------- */

/* The reference for every ISA: integer sums per block, then the float order
 * of llama.cpp's x86 (AVX2) kernels, so the scalar table's logits match
 * llama.cpp's CPU logits bit for bit where the activation quantizers see the
 * same values (a last-bit difference in a dot product can move an activation
 * across a q8 rounding step and grow to 1e-2 in the logits):
 *  - 8 float lanes; lane k of a 32-element chunk holds the integer sum of the
 *    products of elements 4k..4k+3 (vpmaddubsw + vpmaddwd), all chunks of a
 *    block (super-block) in the same lanes;
 *  - per block lane[k] = fmaf(d, (float)isum[k], lane[k]), d = the float
 *    product of the two block scales;
 *  - at the end lanes reduce as hsum_float_8: (k + (k+4)), then
 *    (0 + 2), (1 + 3), then the two sums.
 * This is the canonical order of kernels/canon-impl.h (its helpers do steps
 * 2 and 3), which the AVX2 and aarch64 kernels reproduce bit for bit.
 * Sources (ggml-cpu): arch/x86/quants.c ggml_vec_dot_{q4_0_q8_0,q8_0_q8_0,
 * q4_1_q8_1,q5_1_q8_1,q4_K_q8_K,q5_K_q8_K,q6_K_q8_K} (AVX2 branches), llamafile/sgemm.cpp
 * tinyBLAS_Q0_AVX (prompt batches of q4_0/q5_0/q8_0: the same order) and
 * tinyBLAS<8, __m256, ..., ggml_fp16_t> (f16: 8 lanes of fmaf, hsum). */

/* tinyBLAS<8, __m256> order: element i into lane i % 8 by fmaf, hsum8 (a
 * tail shorter than 8 goes to the lanes as if zero-padded) */
#define DOT_FLOAT(NAME, CONV)                                                                      \
    static float NAME(int64_t n, const void *w, const void *a) {                                   \
        const uint16_t *x = w;                                                                     \
        const float *y = a;                                                                        \
        float acc[8] = {0};                                                                        \
        for (int64_t i = 0; i < n; i++)                                                            \
            acc[i % 8] = fmaf(CONV(x[i]), y[i], acc[i % 8]);                                       \
        return hr_canon_hsum8(acc);                                                                \
    }

/* f32: the older canonical order (16 lanes, separate multiply and add) */
static float dot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float acc[HR_CANON_LANES];
    hr_canon_zero(acc);
    for (int64_t i = 0; i < n; i++)
        acc[i % HR_CANON_LANES] += x[i] * y[i];
    return hr_canon_reduce(acc);
}

DOT_FLOAT(dot_f16, hr_fp16_to_fp32)
DOT_FLOAT(dot_bf16, hr_bf16_to_fp32)

static float dot_q4_0(int64_t n, const void *w, const void *a) {
    const hr_block_q4_0 *x = w;
    const hr_block_q8_0 *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / HR_QK4_0; i++) {
        int32_t isum[8] = {0}; /* element j (low nibble) and 16 + j (high) */
        for (int j = 0; j < 16; j++) {
            isum[j / 4] += ((x[i].qs[j] & 15) - 8) * y[i].qs[j];
            isum[4 + j / 4] += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        hr_canon_acc8(acc, FP16(x[i].d) * FP16(y[i].d), isum);
    }
    return hr_canon_hsum8(acc);
}

/* mxfp4: the lanes of q4_0, the codes' doubled E2M1 values as the weights'
 * integers, d = 2^(e-128) times the activation block's scale */
static float dot_mxfp4(int64_t n, const void *w, const void *a) {
    const hr_block_mxfp4 *x = w;
    const hr_block_q8_0 *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / HR_QK_MXFP4; i++) {
        int32_t isum[8] = {0};
        for (int j = 0; j < 16; j++) {
            isum[j / 4] += hr_mxfp4_values[x[i].qs[j] & 15] * y[i].qs[j];
            isum[4 + j / 4] += hr_mxfp4_values[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        }
        hr_canon_acc8(acc, hr_e8m0_half(x[i].e) * FP16(y[i].d), isum);
    }
    return hr_canon_hsum8(acc);
}

/* q4_1 / q5_1: the lanes as q4_0, the min term m * s in one scalar by fmaf
 * (ggml's `summs += m * s`, contracted), added after hsum8 */
static float dot_q4_1(int64_t n, const void *w, const void *a) {
    const hr_block_q4_1 *x = w;
    const hr_block_q8_1 *y = a;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t i = 0; i < n / HR_QK4_1; i++) {
        int32_t isum[8] = {0};
        for (int j = 0; j < 16; j++) {
            isum[j / 4] += (x[i].qs[j] & 15) * y[i].qs[j];
            isum[4 + j / 4] += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        summs = fmaf(FP16(x[i].m), FP16(y[i].s), summs);
        hr_canon_acc8(acc, FP16(x[i].d) * FP16(y[i].d), isum);
    }
    return hr_canon_hsum8(acc) + summs;
}

static float dot_q5_0(int64_t n, const void *w, const void *a) {
    const hr_block_q5_0 *x = w;
    const hr_block_q8_0 *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / HR_QK5_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int32_t isum[8] = {0};
        for (int j = 0; j < 16; j++) {
            const int q0 = ((x[i].qs[j] & 15) | (int)(((qh >> j) & 1u) << 4)) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
            isum[j / 4] += q0 * y[i].qs[j];
            isum[4 + j / 4] += q1 * y[i].qs[j + 16];
        }
        hr_canon_acc8(acc, FP16(x[i].d) * FP16(y[i].d), isum);
    }
    return hr_canon_hsum8(acc);
}

static float dot_q5_1(int64_t n, const void *w, const void *a) {
    const hr_block_q5_1 *x = w;
    const hr_block_q8_1 *y = a;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t i = 0; i < n / HR_QK5_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int32_t isum[8] = {0};
        for (int j = 0; j < 16; j++) {
            const int q0 = (x[i].qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            isum[j / 4] += q0 * y[i].qs[j];
            isum[4 + j / 4] += q1 * y[i].qs[j + 16];
        }
        summs = fmaf(FP16(x[i].m), FP16(y[i].s), summs);
        hr_canon_acc8(acc, FP16(x[i].d) * FP16(y[i].d), isum);
    }
    return hr_canon_hsum8(acc) + summs;
}

static float dot_q8_0(int64_t n, const void *w, const void *a) {
    const hr_block_q8_0 *x = w;
    const hr_block_q8_0 *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / HR_QK8_0; i++) {
        int32_t isum[8] = {0};
        for (int j = 0; j < HR_QK8_0; j++)
            isum[j / 4] += x[i].qs[j] * y[i].qs[j];
        hr_canon_acc8(acc, FP16(x[i].d) * FP16(y[i].d), isum);
    }
    return hr_canon_hsum8(acc);
}

/* q4_K: the min term in 4 lanes, lane j = mn[2j] * s(2j) + mn[2j+1] * s(2j+1)
 * (s = sub-block sums of the activations), acc_m[j] = fmaf(-dy * dmin, .),
 * reduced (0 + 2) + (1 + 3) and added after hsum8 */
static float dot_q4_k(int64_t n, const void *w, const void *a) {
    const hr_block_q4_k *x = w;
    const hr_block_q8_k *y = a;
    float acc[8] = {0}, accm[4] = {0};
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        uint8_t sc[8], mn[8];
        hr_kq_unpack_scales(x[i].scales, sc, mn);
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int32_t isum[8] = {0};
        for (int c = 0; c < 4; c++, q += 32, q8 += 64)
            for (int l = 0; l < 32; l++)
                isum[l / 4] +=
                    sc[2 * c] * ((q[l] & 15) * q8[l]) + sc[2 * c + 1] * ((q[l] >> 4) * q8[l + 32]);
        const float d = y[i].d * FP16(x[i].d), dmin = -y[i].d * FP16(x[i].dmin);
        for (int j = 0; j < 4; j++) {
            const int s0 = y[i].bsums[4 * j] + y[i].bsums[4 * j + 1];
            const int s1 = y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3];
            accm[j] = fmaf(dmin, (float)(mn[2 * j] * s0 + mn[2 * j + 1] * s1), accm[j]);
        }
        hr_canon_acc8(acc, d, isum);
    }
    return hr_canon_hsum8(acc) + hr_canon_hsum4(accm);
}

/* q5_K: as q4_K, but the min term is one scalar, summs = fmaf(-dy * dmin,
 * (float)(integer sum), summs) (gcc contracts ggml's `summs += dmin * x`) */
static float dot_q5_k(int64_t n, const void *w, const void *a) {
    const hr_block_q5_k *x = w;
    const hr_block_q8_k *y = a;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        uint8_t sc[8], mn[8];
        hr_kq_unpack_scales(x[i].scales, sc, mn);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        int32_t isum[8] = {0};
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            for (int l = 0; l < 32; l++) {
                const int v0 = (q[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4);
                const int v1 = (q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
                isum[l / 4] += sc[2 * c] * (v0 * q8[l]) + sc[2 * c + 1] * (v1 * q8[l + 32]);
            }
        }
        int msum = 0;
        for (int j = 0; j < 8; j++)
            msum += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        const float d = y[i].d * FP16(x[i].d), dmin = -y[i].d * FP16(x[i].dmin);
        summs = fmaf(dmin, (float)msum, summs);
        hr_canon_acc8(acc, d, isum);
    }
    return hr_canon_hsum8(acc) + summs;
}

/* q6_K: the -32 offset per element (not through bsums), so lane k holds
 * sc * (q - 32) * q8 of the elements 4k..4k+3 of every 32-element chunk */
static float dot_q6_k(int64_t n, const void *w, const void *a) {
    const hr_block_q6_k *x = w;
    const hr_block_q8_k *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        int32_t isum[8] = {0};
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h, *q8 = y[i].qs + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                isum[l / 4] += sc[is] * (q1 * q8[l]) + sc[is + 2] * (q2 * q8[l + 32]) +
                               sc[is + 4] * (q3 * q8[l + 64]) + sc[is + 6] * (q4 * q8[l + 96]);
            }
        }
        hr_canon_acc8(acc, y[i].d * FP16(x[i].d), isum);
    }
    return hr_canon_hsum8(acc);
}

/* ---- the table ---------------------------------------------------------- */

/* name, block elems, block bytes, supported, vec_dot type, then the scalar
 * dequantize, quantize and dot kernels (NULL where the type has none) */
static const hr_type_traits g_traits[HR_TYPE_COUNT] = {
    [HR_TYPE_F32] = {"f32", 1, 4, true, HR_TYPE_F32, dequant_f32, quant_f32, dot_f32},
    [HR_TYPE_F16] = {"f16", 1, 2, true, HR_TYPE_F32, dequant_f16, quant_f16, dot_f16},
    [HR_TYPE_Q4_0] = {"q4_0", HR_QK4_0, sizeof(hr_block_q4_0), true, HR_TYPE_Q8_0, dequant_q4_0,
                      quant_q4_0, dot_q4_0},
    [HR_TYPE_Q4_1] = {"q4_1", HR_QK4_1, sizeof(hr_block_q4_1), true, HR_TYPE_Q8_1, dequant_q4_1,
                      quant_q4_1, dot_q4_1},
    [HR_TYPE_Q5_0] = {"q5_0", HR_QK5_0, sizeof(hr_block_q5_0), true, HR_TYPE_Q8_0, dequant_q5_0,
                      quant_q5_0, dot_q5_0},
    [HR_TYPE_Q5_1] = {"q5_1", HR_QK5_1, sizeof(hr_block_q5_1), true, HR_TYPE_Q8_1, dequant_q5_1,
                      quant_q5_1, dot_q5_1},
    [HR_TYPE_Q8_0] = {"q8_0", HR_QK8_0, sizeof(hr_block_q8_0), true, HR_TYPE_Q8_0, dequant_q8_0,
                      quant_q8_0, dot_q8_0},
    [HR_TYPE_Q8_1] = {"q8_1", HR_QK8_1, sizeof(hr_block_q8_1), false, HR_TYPE_Q8_1, dequant_q8_1,
                      quant_q8_1, NULL},
    [HR_TYPE_Q2_K] = {"q2_K", HR_QK_K, sizeof(hr_block_q2_k), false, HR_TYPE_Q8_K, NULL, NULL,
                      NULL},
    [HR_TYPE_Q3_K] = {"q3_K", HR_QK_K, sizeof(hr_block_q3_k), false, HR_TYPE_Q8_K, NULL, NULL,
                      NULL},
    [HR_TYPE_Q4_K] = {"q4_K", HR_QK_K, sizeof(hr_block_q4_k), true, HR_TYPE_Q8_K, dequant_q4_k,
                      quant_q4_k, dot_q4_k},
    [HR_TYPE_Q5_K] = {"q5_K", HR_QK_K, sizeof(hr_block_q5_k), true, HR_TYPE_Q8_K, dequant_q5_k,
                      quant_q5_k, dot_q5_k},
    [HR_TYPE_Q6_K] = {"q6_K", HR_QK_K, sizeof(hr_block_q6_k), true, HR_TYPE_Q8_K, dequant_q6_k,
                      quant_q6_k, dot_q6_k},
    [HR_TYPE_Q8_K] = {"q8_K", HR_QK_K, sizeof(hr_block_q8_k), false, HR_TYPE_Q8_K, dequant_q8_k,
                      quant_q8_k, NULL},
    [HR_TYPE_BF16] = {"bf16", 1, 2, true, HR_TYPE_F32, dequant_bf16, quant_bf16, dot_bf16},
    [HR_TYPE_MXFP4] = {"mxfp4", HR_QK_MXFP4, sizeof(hr_block_mxfp4), true, HR_TYPE_Q8_0,
                       dequant_mxfp4, quant_mxfp4, dot_mxfp4},
};

const hr_type_traits *hr_type_get(int type) {
    if (type < 0 || type >= HR_TYPE_COUNT || !g_traits[type].name)
        return NULL;
    return &g_traits[type];
}

const char *hr_type_name(int type) {
    const hr_type_traits *t = hr_type_get(type);
    return t ? t->name : "unknown";
}

size_t hr_type_row_bytes(int type, int64_t n) {
    const hr_type_traits *t = hr_type_get(type);
    if (!t || n < 0 || n % t->block_elems)
        return 0;
    return (size_t)(n / t->block_elems) * t->block_bytes;
}

int hr_type_by_name(const char *name) {
    for (int t = 0; name && t < HR_TYPE_COUNT; t++)
        if (g_traits[t].name && strcasecmp(g_traits[t].name, name) == 0)
            return t;
    return -1;
}
