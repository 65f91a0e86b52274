/* quant.c - the dispatcher: builds the scalar kernel table from the type
 * traits rows (kernels/types.c), lets the SIMD files overwrite what their ISA
 * specialises in copies of it, and picks between the scalar, AVX2 and AVX-512
 * tables by cpuid. The SIMD files are called from here, never the reverse. */
#include "kernels/quant-impl.h"

#include "common/log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

#define TAG "quant"
#define HR_X86 1
#else
#define HR_X86 0
#endif

/* ---- dispatch ------------------------------------------------------------ */

static hr_kernels g_scalar, g_avx2, g_avx512;
static bool g_have_avx2, g_have_avx512;
static const hr_kernels *g_best;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The scalar table is the reference kernels of the traits rows. */
static void fill_scalar(hr_kernels *k) {
    memset(k, 0, sizeof(*k));
    k->isa = HR_ISA_SCALAR;
    for (int t = 0; t < HR_TYPE_COUNT; t++) {
        const hr_type_traits *tt = hr_type_get(t);
        if (!tt)
            continue;
        k->dequant[t] = tt->dequant;
        k->quant[t] = tt->quant;
        k->vec_dot[t] = tt->vec_dot;
    }
}

#if HR_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* Sets *avx2 (AVX2+FMA+F16C+BMI2 with OS support for ymm state), *avx512
 * (F+BW+VL+DQ with zmm/opmask state) and the HR_AVX512_* flags. */
static void detect_cpu(bool *avx2, bool *avx512, unsigned *flags512) {
    *avx2 = *avx512 = false;
    *flags512 = 0;
#if HR_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* AuthenticAMD */
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    const unsigned family = ((a >> 8) & 0xf) == 0xf ? 0xf + ((a >> 20) & 0xff) : (a >> 8) & 0xf;
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    const bool fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6)
        return;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    const bool avx2_f = b & (1u << 5), bmi2 = b & (1u << 8);
    const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    *avx2 = avx2_f && fma && f16c && bmi2;
    *avx512 = *avx2 && f && dq && bw && vl && (xcr0 & 0xe6) == 0xe6;
    if (*avx512 && (c & (1u << 11)))
        *flags512 |= HR_AVX512_VNNI;
    /* Zen 4 (family 19h) executes 512-bit operations as two 256-bit halves */
    if (*avx512 && amd && family == 0x19)
        *flags512 |= HR_AVX512_PREFER_YMM;
#endif
}

static unsigned g_flags512;

/* vec_dot_n entries must reproduce their table's vec_dot: one inherited
 * from the narrower table is dropped where the wider one replaced vec_dot
 * (hr_vec_dot_n then loops the new vec_dot). */
static void drop_stale_dotn(hr_kernels *k, const hr_kernels *narrower) {
    for (int t = 0; t < HR_TYPE_COUNT; t++)
        if (k->vec_dot[t] != narrower->vec_dot[t] && k->vec_dot_n[t] == narrower->vec_dot_n[t])
            k->vec_dot_n[t] = NULL;
}

static void init_tables(void) {
    detect_cpu(&g_have_avx2, &g_have_avx512, &g_flags512);
    fill_scalar(&g_scalar);
    g_best = &g_scalar;
    /* Each SIMD table starts from the narrower one, so entries it does not
     * specialise use the best kernel below it. */
    if (g_have_avx2) {
        g_avx2 = g_scalar;
        g_avx2.isa = HR_ISA_AVX2;
        hr_quant_fill_avx2(&g_avx2);
        hr_gemm_fill_avx2(&g_avx2);
        drop_stale_dotn(&g_avx2, &g_scalar);
        g_best = &g_avx2;
    }
    if (g_have_avx512) {
        g_avx512 = g_avx2;
        g_avx512.isa = HR_ISA_AVX512;
        hr_quant_fill_avx512(&g_avx512, g_flags512);
        hr_gemm_fill_avx512(&g_avx512, g_flags512);
        drop_stale_dotn(&g_avx512, &g_avx2);
        hr_dotn_fill_avx512(&g_avx512, g_flags512);
        g_best = &g_avx512;
    }
    const char *want = getenv("HR_ISA"); /* debugging / benchmarking cap */
    if (want) {
        if (strcasecmp(want, "scalar") == 0)
            g_best = &g_scalar;
        else if (strcasecmp(want, "avx2") == 0 && g_have_avx2)
            g_best = &g_avx2;
    }
    HR_LOG_DEBUG(TAG, "kernels: %s%s%s", hr_isa_name(g_best->isa),
                 g_best->isa == HR_ISA_AVX512 && (g_flags512 & HR_AVX512_VNNI) ? " vnni" : "",
                 g_best->isa == HR_ISA_AVX512 && (g_flags512 & HR_AVX512_PREFER_YMM) ? " ymm" : "");
}

unsigned hr_quant_avx512_flags(void) {
    pthread_once(&g_once, init_tables);
    return g_have_avx512 ? g_flags512 : 0;
}

const hr_kernels *hr_kernels_best(void) {
    pthread_once(&g_once, init_tables);
    return g_best;
}

const hr_kernels *hr_kernels_for_isa(hr_isa isa) {
    pthread_once(&g_once, init_tables);
    switch (isa) {
    case HR_ISA_SCALAR:
        return &g_scalar;
    case HR_ISA_AVX2:
        return g_have_avx2 ? &g_avx2 : NULL;
    case HR_ISA_AVX512:
        return g_have_avx512 ? &g_avx512 : NULL;
    }
    return NULL;
}

const char *hr_isa_name(hr_isa isa) {
    switch (isa) {
    case HR_ISA_SCALAR:
        return "scalar";
    case HR_ISA_AVX2:
        return "avx2";
    case HR_ISA_AVX512:
        return "avx512";
    }
    return "unknown";
}

void hr_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const hr_kernels *k = hr_kernels_best();
    if (type >= 0 && type < HR_TYPE_COUNT && k->dequant[type])
        k->dequant[type](src, dst, n);
}

void hr_quantize_row(int type, const float *src, void *dst, int64_t n) {
    const hr_kernels *k = hr_kernels_best();
    if (type >= 0 && type < HR_TYPE_COUNT && k->quant[type])
        k->quant[type](src, dst, n);
}

void hr_gemm_tile(const hr_kernels *k, int type, int64_t n, int nr, int nt, const void *w,
                  size_t w_stride, const void *a, size_t a_stride, float *y, size_t y_stride) {
    if (type < 0 || type >= HR_TYPE_COUNT || !k->vec_dot[type])
        return;
    if (k->gemm[type]) {
        k->gemm[type](n, nr, nt, w, w_stride, a, a_stride, y, y_stride);
        return;
    }
    const char *wb = w, *ab = a;
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            y[(size_t)t * y_stride + (size_t)r] =
                k->vec_dot[type](n, wb + (size_t)r * w_stride, ab + (size_t)t * a_stride);
}

void hr_vec_dot_n(const hr_kernels *k, int type, int64_t n, int nr, const void *w, size_t w_stride,
                  const void *const *a, int nt, float *y, size_t y_stride) {
    if (type < 0 || type >= HR_TYPE_COUNT || !k->vec_dot[type])
        return;
    if (k->vec_dot_n[type]) {
        k->vec_dot_n[type](n, nr, w, w_stride, a, nt, y, y_stride);
        return;
    }
    const char *wb = w;
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            y[(size_t)t * y_stride + (size_t)r] =
                k->vec_dot[type](n, wb + (size_t)r * w_stride, a[t]);
}
