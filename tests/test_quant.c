/* test_quant.c - type table, fp16/bf16 conversion edge cases, the scalar
 * reference kernels against plain double arithmetic, weight quantizer
 * round-trip error, and every SIMD kernel (AVX2, AVX-512 with and without
 * VNNI, where this CPU runs them) against its scalar reference. The weight
 * types come from the traits table: a type marked supported there is tested
 * here without further edits (only a round-trip limit must be added). */
#include "tests/check.h"
#include "tests/tables.h"

#include "kernels/quant-impl.h"
#include "kernels/quant.h"
#include "kernels/types-impl.h"
#include "kernels/types.h"

#include <ctype.h>

#include <float.h>
#include <stdint.h>
#include <strings.h>

/* ---- deterministic random numbers ---------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rnd_unit(void) { return (float)(rnd_u64() >> 40) / 16777216.0f; } /* [0,1) */

static float rnd_normal(void) { /* Irwin-Hall approximation, mean 0, sd 1 */
    float s = 0.0f;
    for (int k = 0; k < 12; k++)
        s += rnd_unit();
    return s - 6.0f;
}

/* activation-like data: gaussian, per-row scale, a few outliers */
static void fill_floats(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = rnd_normal() * scale;
        if (rnd_u64() % 97 == 0)
            x[i] *= 8.0f;
    }
}

static void fill_bytes(void *p, size_t n) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)rnd_u64();
}

static uint16_t rnd_half(float lo, float hi) {
    return hr_fp32_to_fp16(lo + (hi - lo) * rnd_unit());
}

/* Random weight blocks covering every bit pattern of the quants, with finite
 * sane fp16 scales. A type this does not know the layout of gets gaussian
 * data through its scalar quantizer instead. */
static void random_blocks(int type, void *buf, int64_t n) {
    const hr_type_traits *t = hr_type_get(type);
    const int64_t nb = n / t->block_elems;
    fill_bytes(buf, (size_t)nb * t->block_bytes);
    for (int64_t i = 0; i < nb; i++) {
        switch (type) {
        case HR_TYPE_F32:
            ((float *)buf)[i] = rnd_normal();
            break;
        case HR_TYPE_F16:
            ((uint16_t *)buf)[i] = hr_fp32_to_fp16(rnd_normal());
            break;
        case HR_TYPE_BF16:
            ((uint16_t *)buf)[i] = hr_fp32_to_bf16(rnd_normal());
            break;
        case HR_TYPE_Q4_0:
            ((hr_block_q4_0 *)buf)[i].d = rnd_half(-0.05f, 0.05f);
            break;
        case HR_TYPE_MXFP4: { /* scales 2^-8 .. 2^6, and now and then the subnormal 0-2 */
            hr_block_mxfp4 *b = (hr_block_mxfp4 *)buf + i;
            b->e = (uint8_t)(b->e % 16 == 0 ? b->e % 3 : 120 + b->e % 15);
            break;
        }
        case HR_TYPE_Q4_1: {
            hr_block_q4_1 *b = (hr_block_q4_1 *)buf + i;
            b->d = rnd_half(0.0f, 0.02f);
            b->m = rnd_half(-0.2f, 0.1f);
            break;
        }
        case HR_TYPE_Q5_0:
            ((hr_block_q5_0 *)buf)[i].d = rnd_half(-0.03f, 0.03f);
            break;
        case HR_TYPE_Q5_1: {
            hr_block_q5_1 *b = (hr_block_q5_1 *)buf + i;
            b->d = rnd_half(0.0f, 0.01f);
            b->m = rnd_half(-0.2f, 0.1f);
            break;
        }
        case HR_TYPE_Q8_0:
            ((hr_block_q8_0 *)buf)[i].d = rnd_half(-0.002f, 0.002f);
            break;
        case HR_TYPE_Q4_K: {
            hr_block_q4_k *b = (hr_block_q4_k *)buf + i;
            b->d = rnd_half(0.0f, 0.002f);
            b->dmin = rnd_half(0.0f, 0.002f);
            break;
        }
        case HR_TYPE_Q5_K: {
            hr_block_q5_k *b = (hr_block_q5_k *)buf + i;
            b->d = rnd_half(0.0f, 0.001f);
            b->dmin = rnd_half(0.0f, 0.002f);
            break;
        }
        case HR_TYPE_Q6_K:
            ((hr_block_q6_k *)buf)[i].d = rnd_half(-0.0005f, 0.0005f);
            break;
        default: {
            float *x = malloc((size_t)n * sizeof(float));
            fill_floats(x, n, 0.05f);
            t->quant(x, buf, n);
            free(x);
            return;
        }
        }
    }
}

/* The weight types: every supported row of the traits table, in id order. */
static int g_weight_types[HR_TYPE_COUNT];
static int g_n_weight_types;

static void collect_weight_types(void) {
    g_n_weight_types = 0;
    for (int t = 0; t < HR_TYPE_COUNT; t++)
        if (hr_type_get(t) && hr_type_get(t)->supported)
            g_weight_types[g_n_weight_types++] = t;
}

/* ---- type table ---------------------------------------------------------- */

static void test_table(void) {
    static const struct {
        int type;
        const char *name;
        int elems;
        size_t bytes;
        bool supported;
        int dot;
    } want[] = {
        {HR_TYPE_F32, "f32", 1, 4, true, HR_TYPE_F32},
        {HR_TYPE_F16, "f16", 1, 2, true, HR_TYPE_F32},
        {HR_TYPE_Q4_0, "q4_0", 32, 18, true, HR_TYPE_Q8_0},
        {HR_TYPE_Q4_1, "q4_1", 32, 20, true, HR_TYPE_Q8_1},
        {HR_TYPE_Q5_0, "q5_0", 32, 22, true, HR_TYPE_Q8_0},
        {HR_TYPE_Q5_1, "q5_1", 32, 24, true, HR_TYPE_Q8_1},
        {HR_TYPE_Q8_0, "q8_0", 32, 34, true, HR_TYPE_Q8_0},
        {HR_TYPE_Q8_1, "q8_1", 32, 36, false, HR_TYPE_Q8_1},
        {HR_TYPE_Q2_K, "q2_K", 256, 84, false, HR_TYPE_Q8_K},
        {HR_TYPE_Q3_K, "q3_K", 256, 110, false, HR_TYPE_Q8_K},
        {HR_TYPE_Q4_K, "q4_K", 256, 144, true, HR_TYPE_Q8_K},
        {HR_TYPE_Q5_K, "q5_K", 256, 176, true, HR_TYPE_Q8_K},
        {HR_TYPE_Q6_K, "q6_K", 256, 210, true, HR_TYPE_Q8_K},
        {HR_TYPE_Q8_K, "q8_K", 256, 292, false, HR_TYPE_Q8_K},
        {HR_TYPE_BF16, "bf16", 1, 2, true, HR_TYPE_F32},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const hr_type_traits *t = hr_type_get(want[i].type);
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK_STR(t->name, want[i].name);
        CHECK_STR(hr_type_name(want[i].type), want[i].name);
        CHECK_EQ(t->block_elems, want[i].elems);
        CHECK_EQ(t->block_bytes, want[i].bytes);
        CHECK_EQ(t->supported, want[i].supported);
        CHECK_EQ(t->vec_dot_type, want[i].dot);
        CHECK_EQ(hr_type_row_bytes(want[i].type, 4096), 4096 / want[i].elems * want[i].bytes);
    }
    CHECK(hr_type_get(4) == NULL); /* removed Q4_2 */
    CHECK(hr_type_get(-1) == NULL);
    CHECK(hr_type_get(HR_TYPE_COUNT) == NULL);
    CHECK_STR(hr_type_name(5), "unknown");
    CHECK_EQ(hr_type_row_bytes(HR_TYPE_Q4_0, 48), 0);
    CHECK_EQ(hr_type_row_bytes(HR_TYPE_Q6_K, 128), 0);
    CHECK_EQ(hr_type_row_bytes(HR_TYPE_F16, 3), 6);
    CHECK_EQ(hr_type_row_bytes(HR_TYPE_Q4_0, -32), 0);
    CHECK_EQ(hr_type_row_bytes(99, 32), 0);

    CHECK_EQ(hr_type_by_name("q4_K"), HR_TYPE_Q4_K);
    CHECK_EQ(hr_type_by_name("Q4_k"), HR_TYPE_Q4_K);
    CHECK_EQ(hr_type_by_name("bf16"), HR_TYPE_BF16);
    CHECK_EQ(hr_type_by_name("q4_2"), -1);
    CHECK_EQ(hr_type_by_name("unknown"), -1);
    CHECK_EQ(hr_type_by_name(""), -1);
    CHECK_EQ(hr_type_by_name(NULL), -1);

    const hr_kernels *s = hr_kernels_for_isa(HR_ISA_SCALAR);
    CHECK(s != NULL && hr_kernels_best() != NULL);
    /* every row: a findable name, a sane layout, kernels where it claims
     * them, and the scalar table made of exactly the row's kernels */
    for (int ty = 0; ty < HR_TYPE_COUNT; ty++) {
        const hr_type_traits *t = hr_type_get(ty);
        if (!t) {
            CHECK(s->dequant[ty] == NULL && s->quant[ty] == NULL && s->vec_dot[ty] == NULL);
            continue;
        }
        char upper[16];
        size_t j = 0;
        for (; t->name[j] && j + 1 < sizeof upper; j++)
            upper[j] = (char)toupper((unsigned char)t->name[j]);
        upper[j] = '\0';
        CHECK_EQ(hr_type_by_name(t->name), ty);
        CHECK_EQ(hr_type_by_name(upper), ty);
        CHECK(t->block_elems > 0 && t->block_bytes > 0);
        CHECK(hr_type_get(t->vec_dot_type) != NULL);
        CHECK_EQ(t->vec_dot != NULL, t->supported);
        if (t->supported)
            CHECK(t->dequant && t->quant && hr_type_get(t->vec_dot_type)->quant);
        CHECK(s->dequant[ty] == t->dequant);
        CHECK(s->quant[ty] == t->quant);
        CHECK(s->vec_dot[ty] == t->vec_dot);
    }
    CHECK_STR(hr_isa_name(HR_ISA_SCALAR), "scalar");
    CHECK_STR(hr_isa_name(HR_ISA_AVX2), "avx2");
    CHECK_STR(hr_isa_name(HR_ISA_AVX512), "avx512");
    CHECK_STR(hr_isa_name(HR_ISA_NEON), "neon");
    CHECK_STR(hr_isa_name(HR_ISA_DOTPROD), "dotprod");
    CHECK_STR(hr_isa_name(HR_ISA_I8MM), "i8mm");
    CHECK_STR(hr_isa_name(HR_ISA_COUNT), "unknown");
    CHECK(hr_kernels_for_isa(HR_ISA_COUNT) == NULL);
    CHECK(hr_isa_features() != NULL && hr_isa_features()[0] != '\0');
    for (int k = 0; k < g_n_weight_types; k++) {
        const int ty = g_weight_types[k];
        CHECK(s->dequant[ty] && s->quant[ty] && s->vec_dot[ty]);
        CHECK(s->quant[hr_type_get(ty)->vec_dot_type] != NULL);
    }
}

/* ---- fp16 / bf16 --------------------------------------------------------- */

static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bitsf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_fp16(void) {
    CHECK_EQ(bitsf(hr_fp16_to_fp32(0x0000)), 0);
    CHECK_EQ(bitsf(hr_fp16_to_fp32(0x8000)), 0x80000000u);
    CHECK_EQ(hr_fp16_to_fp32(0x3c00), 1.0f);
    CHECK_EQ(hr_fp16_to_fp32(0xc000), -2.0f);
    CHECK_EQ(hr_fp16_to_fp32(0x7bff), 65504.0f);
    CHECK_EQ(hr_fp16_to_fp32(0x0001), ldexpf(1.0f, -24)); /* smallest subnormal */
    CHECK_EQ(hr_fp16_to_fp32(0x03ff), ldexpf(1023.0f, -24));
    CHECK_EQ(hr_fp16_to_fp32(0x8200), -ldexpf(512.0f, -24));
    CHECK_EQ(hr_fp16_to_fp32(0x0400), ldexpf(1.0f, -14));
    CHECK(isinf(hr_fp16_to_fp32(0x7c00)) && hr_fp16_to_fp32(0x7c00) > 0);
    CHECK(isinf(hr_fp16_to_fp32(0xfc00)) && hr_fp16_to_fp32(0xfc00) < 0);
    CHECK(isnan(hr_fp16_to_fp32(0x7e00)) && isnan(hr_fp16_to_fp32(0x7c01)));

    CHECK_EQ(hr_fp32_to_fp16(0.0f), 0x0000);
    CHECK_EQ(hr_fp32_to_fp16(-0.0f), 0x8000);
    CHECK_EQ(hr_fp32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ(hr_fp32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ(hr_fp32_to_fp16(65519.996f), 0x7bff);
    CHECK_EQ(hr_fp32_to_fp16(65520.0f), 0x7c00); /* tie between 65504 and 2^16: even is inf */
    CHECK_EQ(hr_fp32_to_fp16(1e10f), 0x7c00);
    CHECK_EQ(hr_fp32_to_fp16(-1e10f), 0xfc00);
    CHECK_EQ(hr_fp32_to_fp16(INFINITY), 0x7c00);
    CHECK_EQ(hr_fp32_to_fp16(-INFINITY), 0xfc00);
    const uint16_t hn = hr_fp32_to_fp16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x03ff) != 0);
    const uint16_t hs = hr_fp32_to_fp16(fbits(0x7f800001u)); /* signalling, tiny payload */
    CHECK((hs & 0x7c00) == 0x7c00 && (hs & 0x03ff) != 0);
    CHECK_EQ(hr_fp32_to_fp16(1.0f + ldexpf(1.0f, -11)), 0x3c00);        /* tie -> even */
    CHECK_EQ(hr_fp32_to_fp16(1.0f + 3.0f * ldexpf(1.0f, -11)), 0x3c02); /* tie -> even */
    CHECK_EQ(hr_fp32_to_fp16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(1.0f, -24)), 0x0001);
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(1.0f, -25)), 0x0000); /* tie -> 0 */
    CHECK_EQ(hr_fp32_to_fp16(-ldexpf(1.0f, -25)), 0x8000);
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(1.0f, -25) * 1.0000001f), 0x0001);
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(3.0f, -25)), 0x0002); /* tie -> even */
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(5.0f, -25)), 0x0002);
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(1.0f, -30)), 0x0000);
    CHECK_EQ(hr_fp32_to_fp16(fbits(0x00000001u)), 0x0000);   /* f32 subnormal */
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(2047.0f, -25)), 0x0400); /* rounds up into normals */
    CHECK_EQ(hr_fp32_to_fp16(ldexpf(1.0f, -14)), 0x0400);

    /* every half survives a round trip; nan stays nan */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = hr_fp16_to_fp32((uint16_t)h);
        const uint16_t back = hr_fp32_to_fp16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            bad += !isnan(f) || !((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        } else {
            bad += back != h;
        }
    }
    CHECK_EQ(bad, 0);
    /* midpoints between neighbouring finite halves round to the even one */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        const double lo = hr_fp16_to_fp32((uint16_t)h), hi = hr_fp16_to_fp32((uint16_t)(h + 1));
        const float mid = (float)((lo + hi) / 2); /* exact in f32 */
        const uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += hr_fp32_to_fp16(mid) != want;
        bad += hr_fp32_to_fp16(-mid) != (uint16_t)(want | 0x8000);
    }
    CHECK_EQ(bad, 0);

    CHECK_EQ(hr_fp32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ(hr_bf16_to_fp32(0x3f80), 1.0f);
    CHECK_EQ(hr_bf16_to_fp32(0xc040), -3.0f);
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x3f808000u)), 0x3f80); /* tie -> even */
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x3f818000u)), 0x3f82); /* tie -> even */
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x3f808001u)), 0x3f81);
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x3f807fffu)), 0x3f80);
    CHECK_EQ(hr_fp32_to_bf16(INFINITY), 0x7f80);
    CHECK_EQ(hr_fp32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ(hr_fp32_to_bf16(FLT_MAX), 0x7f80);            /* rounds up to inf */
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x00008000u)), 0x0000); /* subnormal tie -> even */
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x00018000u)), 0x0002);
    CHECK_EQ(hr_fp32_to_bf16(fbits(0x00010000u)), 0x0001);
    CHECK_EQ(bitsf(hr_bf16_to_fp32(0x0001)), 0x00010000u);
    CHECK_EQ(hr_fp32_to_bf16(-0.0f), 0x8000);
    const uint16_t bn = hr_fp32_to_bf16(fbits(0x7f800001u)); /* payload only in low bits */
    CHECK((bn & 0x7f80) == 0x7f80 && (bn & 0x7f) != 0);
    CHECK(isnan(hr_bf16_to_fp32(hr_fp32_to_bf16(NAN))));
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
            continue;
        bad += hr_fp32_to_bf16(hr_bf16_to_fp32((uint16_t)h)) != h;
    }
    CHECK_EQ(bad, 0);
}

/* ---- scale packing ------------------------------------------------------- */

/* independent bytewise reading of the 6-bit scale/min packing */
static void scale_min_ref(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void test_scale_packing(void) {
    int bad = 0;
    for (int it = 0; it < 1000; it++) {
        uint8_t s[12], sc[8], mn[8];
        fill_bytes(s, sizeof(s));
        hr_kq_unpack_scales(s, sc, mn);
        for (int j = 0; j < 8; j++) {
            uint8_t d, m;
            scale_min_ref(j, s, &d, &m);
            bad += d != sc[j] || m != mn[j];
        }
    }
    CHECK_EQ(bad, 0);
}

/* ---- activation quantizer semantics ------------------------------------- */

static void test_activation_semantics(void) {
    const hr_kernels *s = hr_kernels_for_isa(HR_ISA_SCALAR);
    float x[512];
    fill_floats(x, 512, 0.7f);
    for (int j = 32; j < 64; j++)
        x[j] = 0.0f; /* an all-zero block */
    x[70] = 9.0f;    /* extreme */
    x[71] = -9.0f;   /* same magnitude later: the first one sets q8_K's sign */
    hr_block_q8_0 q0[16];
    s->quant[HR_TYPE_Q8_0](x, q0, 512);
    int bad = 0;
    for (int b = 0; b < 16; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        bad += q0[b].d != hr_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++)
            bad += q0[b].qs[j] != (int8_t)roundf(x[32 * b + j] * id);
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(q0[1].d, 0);
    CHECK_EQ(q0[2].qs[70 - 64], 127);

    hr_block_q8_1 q1[16];
    s->quant[HR_TYPE_Q8_1](x, q1, 512);
    bad = 0;
    for (int b = 0; b < 16; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            bad += q1[b].qs[j] != q0[b].qs[j];
            sum += q1[b].qs[j];
        }
        bad += q1[b].d != q0[b].d;
        CHECK_NEAR(hr_fp16_to_fp32(q1[b].s), sum * hr_fp16_to_fp32(q1[b].d),
                   fabsf(sum * hr_fp16_to_fp32(q1[b].d)) * 2e-3 + 1e-6);
    }
    CHECK_EQ(bad, 0);

    hr_block_q8_k qk[2];
    s->quant[HR_TYPE_Q8_K](x, qk, 512);
    CHECK_NEAR(qk[0].d, -9.0f / 127.0f, 1e-7); /* 1 / (-127 / max), max = x[70] */
    CHECK_EQ(qk[0].qs[70], -127);
    CHECK_EQ(qk[0].qs[71], 127);
    bad = 0;
    for (int b = 0; b < 2; b++) {
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += qk[b].qs[16 * g + l];
            bad += sum != qk[b].bsums[g];
        }
        for (int j = 0; j < 256; j++) /* dequantized within half a step */
            bad += fabsf(qk[b].d * qk[b].qs[j] - x[256 * b + j]) > fabsf(qk[b].d) * 0.5001f;
    }
    CHECK_EQ(bad, 0);
    float z[256] = {0};
    s->quant[HR_TYPE_Q8_K](z, qk, 256);
    CHECK_EQ(qk[0].d, 0.0f);
    CHECK_EQ(qk[0].bsums[3], 0);
}

/* MXFP4 blocks decode to the OCP E2M1 values times 2^(e-127): codes 0-7
 * are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and codes 8-15 their negatives, the low
 * nibble of byte j element j and the high one element j + 16. */
static void test_mxfp4_layout(void) {
    static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const hr_kernels *s = hr_kernels_for_isa(HR_ISA_SCALAR);
    uint8_t blk[17];
    float y[32];
    const int exps[4] = {127, 130, 120, 1};
    for (int k = 0; k < 4; k++) {
        blk[0] = (uint8_t)exps[k];
        for (int j = 0; j < 16; j++)
            blk[1 + j] = (uint8_t)(j | ((15 - j) << 4));
        s->dequant[HR_TYPE_MXFP4](blk, y, 32);
        const float scale = ldexpf(1.0f, exps[k] - 127);
        for (int j = 0; j < 16; j++) {
            const int hi = 15 - j;
            CHECK_EQ(y[j], (j < 8 ? e2m1[j] : -e2m1[j - 8]) * scale);
            CHECK_EQ(y[16 + j], (hi < 8 ? e2m1[hi] : -e2m1[hi - 8]) * scale);
        }
    }
    /* the subnormal scales (e 0 and 1) and the smallest normal one in
     * every table's dot product: the same bits as scalar (the kernels build
     * several blocks' scales at once) */
    {
        uint8_t row[8 * 17];
        float act[256];
        uint8_t q8[8 * 34];
        const uint8_t es[8] = {0, 1, 2, 1, 0, 2, 1, 0};
        for (int b = 0; b < 8; b++) {
            row[17 * b] = es[b];
            for (int j = 0; j < 16; j++)
                row[17 * b + 1 + j] = (uint8_t)((b * 37 + j * 11) & 0xff);
        }
        for (int i = 0; i < 256; i++)
            act[i] = (float)((i * 29) % 17 - 8) * 0.25f;
        s->quant[HR_TYPE_Q8_0](act, q8, 256);
        const float want = s->vec_dot[HR_TYPE_MXFP4](256, row, q8);
        CHECK(want != 0.0f && fabsf(want) < 1e-30f);
        for (int isa = HR_ISA_SCALAR + 1; isa < HR_ISA_COUNT; isa++) {
            const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
            if (k)
                CHECK_EQ(hr_f32_bits(k->vec_dot[HR_TYPE_MXFP4](256, row, q8)), hr_f32_bits(want));
        }
    }
    /* a block of exact E2M1 multiples of 2^3 comes back exactly */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (j % 2 ? -1.0f : 1.0f) * e2m1[j % 8] * 8.0f;
    s->quant[HR_TYPE_MXFP4](x, blk, 32);
    s->dequant[HR_TYPE_MXFP4](blk, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK_EQ(y[j], x[j]);
    CHECK_EQ(blk[0], 130);
}

/* ---- weight quantizer round trip ---------------------------------------- */

static void test_roundtrip(void) {
    static const struct {
        int type;
        double max_rel_rmse;
    } lim[] = {
        {HR_TYPE_F32, 0.0},   {HR_TYPE_F16, 3e-4},   {HR_TYPE_BF16, 2.5e-3}, {HR_TYPE_Q8_0, 0.008},
        {HR_TYPE_Q4_0, 0.11}, {HR_TYPE_Q4_1, 0.10},  {HR_TYPE_Q5_0, 0.055},  {HR_TYPE_Q5_1, 0.05},
        {HR_TYPE_Q4_K, 0.09}, {HR_TYPE_Q5_K, 0.045}, {HR_TYPE_Q6_K, 0.023},  {HR_TYPE_MXFP4, 0.125},
    };
    const hr_kernels *s = hr_kernels_for_isa(HR_ISA_SCALAR);
    enum { N = 8192 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    void *q = malloc(N * 4);
    for (int w = 0; w < g_n_weight_types; w++) {
        const int ty = g_weight_types[w];
        size_t k = 0;
        while (k < sizeof(lim) / sizeof(lim[0]) && lim[k].type != ty)
            k++;
        if (k == sizeof(lim) / sizeof(lim[0]))
            fprintf(stderr, "round trip %s: no error limit in test_roundtrip\n", hr_type_name(ty));
        CHECK(k < sizeof(lim) / sizeof(lim[0]));
        if (k == sizeof(lim) / sizeof(lim[0]))
            continue;
        for (int shape = 0; shape < 3; shape++) {
            for (int i = 0; i < N; i++) {
                const float v = rnd_normal();
                /* gaussian; all-positive (min offset); mixed block magnitudes */
                x[i] = shape == 0   ? v * 0.02f
                       : shape == 1 ? fabsf(v) + 0.5f
                                    : v * (float)(1 + (i / 32) % 7) * 0.003f;
            }
            if (shape == 2)
                for (int i = 256; i < 512; i++)
                    x[i] = 0.0f; /* an all-zero super-block */
            s->quant[ty](x, q, N);
            s->dequant[ty](q, y, N);
            double se = 0, sx = 0, maxerr = 0;
            for (int i = 0; i < N; i++) {
                se += (double)(y[i] - x[i]) * (y[i] - x[i]);
                sx += (double)x[i] * x[i];
                maxerr = fmax(maxerr, fabs(y[i] - x[i]));
            }
            const double rel = sqrt(se / sx);
            if (rel > lim[k].max_rel_rmse)
                fprintf(stderr, "round trip %s shape %d: rel rmse %.4g\n", hr_type_name(ty), shape,
                        rel);
            CHECK(rel <= lim[k].max_rel_rmse);
            if (shape == 2)
                for (int i = 256; i < 512; i++)
                    CHECK_NEAR(y[i], 0.0f, 0.0f);
        }
    }
    free(x);
    free(y);
    free(q);
}

/* ---- SIMD vs scalar, scalar vs double ------------------------------------ */

/* dot tolerance relative to sum |w*a|: float summation plus fp16 s in q8_1 */
static double dot_rel_tol(int type) {
    return hr_type_get(type)->vec_dot_type == HR_TYPE_Q8_1 ? 2e-3 : 2e-5;
}

static int64_t lengths_for(int type, int idx) {
    static const int blocks[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 33};
    static const int elems[] = {1, 7, 8, 16, 33, 64, 100, 257, 1000, 4096};
    if (idx >= 10)
        return -1;
    const int be = hr_type_get(type)->block_elems;
    return be == 1 ? elems[idx] : (int64_t)blocks[idx] * be;
}

typedef struct {
    const char *name;
    const hr_kernels *k;
} table_ref;

/* buffers are offset by 2 (4 for q8_K / f32) bytes from malloc alignment */
static void *obuf(void *base, int type) {
    const int off = type == HR_TYPE_Q8_K || type == HR_TYPE_F32 ? 4 : 2;
    return (uint8_t *)base + off;
}

static void check_table(const table_ref *tr, const hr_kernels *s) {
    enum { MAXN = 33 * 256 };
    float *xf = malloc(MAXN * 4), *af = malloc(MAXN * 4);
    float *d1 = malloc(MAXN * 4), *d2 = malloc(MAXN * 4), *ad = malloc(MAXN * 4);
    float *ad2 = malloc(MAXN * 4);
    uint8_t *wb = malloc(MAXN * 4 + 64), *ab = malloc(MAXN * 4 + 64), *ab2 = malloc(MAXN * 4 + 64);
    uint8_t *wb2 = malloc(MAXN * 4 + 64);
    int n_dot = 0, n_deq = 0, n_q = 0;
    for (int k = 0; k < g_n_weight_types; k++) {
        const int ty = g_weight_types[k];
        const int aty = hr_type_get(ty)->vec_dot_type;
        for (int li = 0;; li++) {
            const int64_t n = lengths_for(ty, li);
            if (n < 0)
                break;
            for (int rep = 0; rep < 3; rep++) {
                void *w = obuf(wb, ty), *act = obuf(ab, aty), *act2 = obuf(ab2, aty);
                /* rep 0: random bit patterns; 1-2: quantized gaussian data */
                if (rep == 0) {
                    random_blocks(ty, w, n);
                } else {
                    fill_floats(xf, n, rep == 1 ? 0.05f : 3.0f);
                    s->quant[ty](xf, w, n);
                    /* weight quantizer: bit-exact */
                    void *w2 = obuf(wb2, ty);
                    tr->k->quant[ty](xf, w2, n);
                    const bool same_w = memcmp(w, w2, hr_type_row_bytes(ty, n)) == 0;
                    if (!same_w)
                        fprintf(stderr, "[%s] quant %s n=%lld differs\n", tr->name,
                                hr_type_name(ty), (long long)n);
                    CHECK(same_w);
                    n_q++;
                }
                fill_floats(af, n, rep == 2 ? 0.01f : 1.5f);
                s->quant[aty](af, act, n);

                /* activation quantizer: bit-exact */
                tr->k->quant[aty](af, act2, n);
                const size_t abytes = hr_type_row_bytes(aty, n);
                const bool same_act = memcmp(act, act2, abytes) == 0;
                if (!same_act)
                    fprintf(stderr, "[%s] quant %s n=%lld differs\n", tr->name, hr_type_name(aty),
                            (long long)n);
                CHECK(same_act);
                n_q++;

                /* dequant: bit-exact */
                s->dequant[ty](w, d1, n);
                tr->k->dequant[ty](w, d2, n);
                const bool same_deq = memcmp(d1, d2, (size_t)n * 4) == 0;
                if (!same_deq)
                    fprintf(stderr, "[%s] dequant %s n=%lld differs\n", tr->name, hr_type_name(ty),
                            (long long)n);
                CHECK(same_deq);
                n_deq++;

                /* reference in double from the dequantized operands */
                s->dequant[aty](act, ad, n);
                tr->k->dequant[aty](act, ad2, n); /* activation dequant: bit-exact */
                const bool same_adeq = memcmp(ad, ad2, (size_t)n * 4) == 0;
                if (!same_adeq)
                    fprintf(stderr, "[%s] dequant %s n=%lld differs\n", tr->name, hr_type_name(aty),
                            (long long)n);
                CHECK(same_adeq);
                n_deq++;
                double ref = 0, sabs = 0;
                for (int64_t i = 0; i < n; i++) {
                    ref += (double)d1[i] * ad[i];
                    sabs += fabs((double)d1[i] * ad[i]);
                }
                const double tol = dot_rel_tol(ty) * sabs + 1e-6;
                const float vs = s->vec_dot[ty](n, w, act);
                const float vk = tr->k->vec_dot[ty](n, w, act);
                /* a canonical table (scalar, AVX2, aarch64:
                 * kernels/canon-impl.h) equals scalar bit for bit; the
                 * AVX-512 ones sum in their own order, within 2e-5 of the
                 * sum of |products| */
                const bool dot_ok = tr->k->canonical ? hr_f32_bits(vk) == hr_f32_bits(vs)
                                                     : fabs(vk - vs) <= 2e-5 * sabs + 1e-6;
                if (fabs(vs - ref) > tol || !dot_ok)
                    fprintf(stderr, "[%s] dot %s n=%lld rep=%d: scalar %.9g simd %.9g ref %.9g\n",
                            tr->name, hr_type_name(ty), (long long)n, rep, vs, vk, ref);
                CHECK_NEAR(vs, ref, tol);
                CHECK(dot_ok);
                n_dot++;
            }
        }
    }
    /* exact ties: q8_0/q8_1 round half away from zero (d = 1 here), q8_K
     * half to even (iscale = 1) */
    float tie[256];
    for (int i = 0; i < 256; i++)
        tie[i] = (float)((i % 64) - 32) + 0.5f;
    for (int b = 0; b < 8; b++)
        tie[32 * b] = 127.0f;
    tie[0] = -127.0f;
    s->quant[HR_TYPE_Q8_0](tie, wb, 256);
    tr->k->quant[HR_TYPE_Q8_0](tie, ab, 256);
    CHECK(memcmp(wb, ab, hr_type_row_bytes(HR_TYPE_Q8_0, 256)) == 0);
    CHECK_EQ(((hr_block_q8_0 *)ab)[0].qs[1], -31); /* -30.5 */
    CHECK_EQ(((hr_block_q8_0 *)ab)[0].qs[31], -1); /* -0.5 */
    s->quant[HR_TYPE_Q8_1](tie, wb, 256);
    tr->k->quant[HR_TYPE_Q8_1](tie, ab, 256);
    CHECK(memcmp(wb, ab, hr_type_row_bytes(HR_TYPE_Q8_1, 256)) == 0);
    s->quant[HR_TYPE_Q8_K](tie, wb, 256);
    tr->k->quant[HR_TYPE_Q8_K](tie, ab, 256);
    CHECK(memcmp(wb, ab, hr_type_row_bytes(HR_TYPE_Q8_K, 256)) == 0);
    CHECK_EQ(((hr_block_q8_k *)ab)[0].qs[1], -30); /* -30.5 -> even */
    CHECK_EQ(((hr_block_q8_k *)ab)[0].qs[3], -28); /* -28.5 -> even */
    CHECK_EQ(((hr_block_q8_k *)ab)[0].qs[2], -30); /* -29.5 -> even */

    /* f16 quantizer on arbitrary bit patterns (subnormals, inf, nan) */
    uint32_t *bits = (uint32_t *)xf;
    for (int i = 0; i < MAXN; i++) {
        const uint32_t e = (uint32_t)(rnd_u64() % 48);
        bits[i] = (uint32_t)rnd_u64() & 0x807fffffu;
        bits[i] |= (e < 40 ? 96 + e : e < 44 ? 0 : 255) << 23; /* around the half range */
    }
    s->quant[HR_TYPE_F16](xf, wb, MAXN);
    tr->k->quant[HR_TYPE_F16](xf, ab, MAXN);
    CHECK(memcmp(wb, ab, MAXN * 2) == 0);
    printf("[%s] %d dot (%s), %d dequant, %d quant comparisons\n", tr->name, n_dot,
           tr->k->canonical ? "bit-exact" : "within 2e-5", n_deq, n_q);
    free(xf);
    free(af);
    free(d1);
    free(d2);
    free(ad);
    free(ad2);
    free(wb);
    free(wb2);
    free(ab);
    free(ab2);
}

static void test_simd(void) {
    const hr_kernels *s = hr_kernels_for_isa(HR_ISA_SCALAR);
    table_ref tables[8];
    int nt = 0;
    tables[nt++] = (table_ref){"scalar", s};
    /* every table this CPU can run, whatever HR_ISA picks as the best */
    hr_isa widest = HR_ISA_SCALAR;
    for (int isa = HR_ISA_SCALAR + 1; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        if (!k)
            continue;
        CHECK_EQ(k->isa, isa);
        tables[nt++] = (table_ref){hr_isa_name((hr_isa)isa), k};
        widest = (hr_isa)isa;
    }
    if (nt == 1)
        printf("note: no SIMD table on this CPU (%s), SIMD kernels not exercised\n",
               hr_isa_features());
    for (int i = 0; i < nt; i++)
        check_table(&tables[i], s);
    /* the best table is the widest one unless HR_ISA names another this CPU
     * runs */
    const char *want = getenv("HR_ISA");
    hr_isa expect = widest;
    for (int isa = 0; want && isa < HR_ISA_COUNT; isa++)
        if (strcasecmp(want, hr_isa_name((hr_isa)isa)) == 0 && hr_kernels_for_isa((hr_isa)isa))
            expect = (hr_isa)isa;
    CHECK_EQ(hr_kernels_best()->isa, expect);
    printf("cpu features: %s; best table %s\n", hr_isa_features(),
           hr_isa_name(hr_kernels_best()->isa));
}

/* convenience wrappers */
static void test_wrappers(void) {
    float x[64], y[64];
    uint8_t q[64 * 2];
    fill_floats(x, 64, 1.0f);
    hr_quantize_row(HR_TYPE_F16, x, q, 64);
    hr_dequantize_row(HR_TYPE_F16, q, y, 64);
    int bad = 0;
    for (int i = 0; i < 64; i++)
        bad += y[i] != hr_fp16_to_fp32(hr_fp32_to_fp16(x[i]));
    CHECK_EQ(bad, 0);
}

int main(void) {
    collect_weight_types();
    test_table();
    test_fp16();
    test_scale_packing();
    test_activation_semantics();
    test_mxfp4_layout();
    test_roundtrip();
    test_wrappers();
    test_simd();
    hr_skip_unrunnable_tables("quant kernels");
    return hr_check_finish("test_quant");
}
