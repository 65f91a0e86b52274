/* quant.c - the dispatcher: builds the scalar kernel table from the type
 * traits rows (kernels/types.c), lets the SIMD files overwrite what their ISA
 * specialises in copies of it, and picks between the tables by what the CPU
 * reports (cpuid on x86, getauxval on aarch64 Linux). The SIMD files are
 * called from here, never the reverse. */
#include "kernels/quant-impl.h"

#include "common/log.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TAG "quant"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

#define HR_X86 1
#else
#define HR_X86 0
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

#define HR_ARM64 1
/* AT_HWCAP / AT_HWCAP2 bits (arch/arm64/include/uapi/asm/hwcap.h), for C
 * libraries whose headers predate them */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_FPHP
#define HWCAP_FPHP (1ul << 9)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1ul << 22)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
#else
#define HR_ARM64 0
#endif

/* ---- dispatch ------------------------------------------------------------ */

static hr_kernels g_tables[HR_ISA_COUNT]; /* canonical (--exact) */
static hr_kernels g_fast[HR_ISA_COUNT];   /* default: g_tables[i] with free-order kernels */
static bool g_have[HR_ISA_COUNT];
static const hr_kernels *g_best;
static hr_isa g_best_isa;
static bool g_exact;
#if HR_X86
static bool g_avxvnni; /* AVX-VNNI (vpdpbusd on ymm, VEX), and not switched off */
#endif
static char g_features[96] = "unknown";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* the C library's expf, one call per value */
static void expf_scalar(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++)
        y[i] = expf(x[i]);
}

/* The scalar table is the reference kernels of the traits rows. */
static void fill_scalar(hr_kernels *k) {
    memset(k, 0, sizeof(*k));
    k->expf_n = expf_scalar;
    k->isa = HR_ISA_SCALAR;
    k->canonical = true; /* the reference order itself */
    for (int t = 0; t < HR_TYPE_COUNT; t++) {
        const hr_type_traits *tt = hr_type_get(t);
        if (!tt)
            continue;
        k->dequant[t] = tt->dequant;
        k->quant[t] = tt->quant;
        k->vec_dot[t] = tt->vec_dot;
    }
}

static void feature(bool on, const char *name) {
    if (!on)
        return;
    const size_t len = strlen(g_features);
    snprintf(g_features + len, sizeof g_features - len, "%s%s", len ? " " : "", name);
}

#if HR_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* x86: sets *avx2 (AVX2+FMA+F16C+BMI2 with OS support for ymm state), *avx512
 * (F+BW+VL+DQ with zmm/opmask state) and the HR_AVX512_* flags. */
static void detect_x86(bool *avx2, bool *avx512, unsigned *flags512) {
    *avx2 = *avx512 = false;
    *flags512 = 0;
#if HR_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    const bool fma = c & (1u << 12), f16c = c & (1u << 29);
    g_features[0] = '\0';
    feature(fma, "fma");
    feature(f16c, "f16c");
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
    feature(avx2_f, "avx2");
    feature(bmi2, "bmi2");
    feature(*avx512, "avx512");
    feature(*flags512 & HR_AVX512_VNNI, "vnni");
    /* AVX-VNNI: leaf 7 sub-leaf 1, EAX bit 4; HR_NO_AVXVNNI=1 ignores it
     * (tests, and comparing the two AVX2 panel sets) */
    const char *no = getenv("HR_NO_AVXVNNI");
    if (*avx2 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)))
        g_avxvnni = !(no && *no && strcmp(no, "0") != 0);
    feature(g_avxvnni, "avxvnni");
#endif
}

/* aarch64 Linux: what the kernel reports in the auxiliary vector (the only
 * source user space may trust; the ID registers trap on some kernels). */
static void detect_arm64(bool *neon, bool *dotprod, bool *i8mm) {
    *neon = *dotprod = *i8mm = false;
#if HR_ARM64
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    *neon = (hw & HWCAP_ASIMD) != 0;
    *dotprod = *neon && (hw & HWCAP_ASIMDDP) != 0;
    *i8mm = *dotprod && (hw2 & HWCAP2_I8MM) != 0;
    g_features[0] = '\0';
    feature(*neon, "asimd");
    feature(hw & HWCAP_FPHP, "fphp");
    feature(hw & HWCAP_ASIMDDP, "asimddp");
    feature(hw2 & HWCAP2_I8MM, "i8mm");
    feature(hw & HWCAP_SVE, "sve");
#endif
}

static unsigned g_flags512;

/* vec_dot_n entries must reproduce their table's vec_dot: one inherited
 * from the narrower table is dropped where the wider one replaced vec_dot
 * (hr_vec_dot_n then loops the new vec_dot). */
static void drop_stale_dotn(hr_kernels *k, const hr_kernels *narrower) {
    for (int t = 0; t < HR_TYPE_COUNT; t++)
        if (k->vec_dot[t] != narrower->vec_dot[t] && k->vec_dot_n[t] == narrower->vec_dot_n[t]) {
            k->vec_dot_n[t] = NULL;
            k->dotn_one[t] = false;
        }
}

/* Table isa as a copy of table from with the ISA's fills applied. */
static void derive(hr_isa isa, hr_isa from) {
    g_tables[isa] = g_tables[from];
    g_tables[isa].isa = isa;
    g_have[isa] = true;
    g_best = &g_tables[isa];
}

static void init_tables(void) {
    fill_scalar(&g_tables[HR_ISA_SCALAR]);
    g_have[HR_ISA_SCALAR] = true;
    g_best = &g_tables[HR_ISA_SCALAR];
    bool avx2, avx512, neon, dotprod, i8mm;
    detect_x86(&avx2, &avx512, &g_flags512);
    detect_arm64(&neon, &dotprod, &i8mm);
    if (!g_features[0]) { /* detection ran and found nothing it knows */
        strcpy(g_features, "unknown");
    }
    /* Each SIMD table starts from the narrower one, so entries it does not
     * specialise use the best kernel below it. */
#if HR_X86
    if (avx2) {
        derive(HR_ISA_AVX2, HR_ISA_SCALAR);
        /* the AVX2 kernels follow the canonical order (canon-impl.h) */
        g_tables[HR_ISA_AVX2].canonical = true;
        hr_quant_fill_avx2(&g_tables[HR_ISA_AVX2]);
        hr_gemm_fill_avx2(&g_tables[HR_ISA_AVX2]);
        hr_dotc_fill_avx2(&g_tables[HR_ISA_AVX2]);
        hr_vexp_fill_avx2(&g_tables[HR_ISA_AVX2]);
        drop_stale_dotn(&g_tables[HR_ISA_AVX2], &g_tables[HR_ISA_SCALAR]);
    }
    if (avx512) {
        derive(HR_ISA_AVX512, HR_ISA_AVX2);
        hr_gemm_fill_avx512(&g_tables[HR_ISA_AVX512], g_flags512);
        drop_stale_dotn(&g_tables[HR_ISA_AVX512], &g_tables[HR_ISA_AVX2]);
        hr_dotc_fill_avx512(&g_tables[HR_ISA_AVX512], g_flags512, &g_tables[HR_ISA_AVX2]);
        hr_vexp_fill_avx512(&g_tables[HR_ISA_AVX512]);
    }
#endif
#if HR_ARM64
    if (neon) {
        derive(HR_ISA_NEON, HR_ISA_SCALAR);
        hr_quant_fill_neon(&g_tables[HR_ISA_NEON]);
        drop_stale_dotn(&g_tables[HR_ISA_NEON], &g_tables[HR_ISA_SCALAR]);
    }
    if (dotprod) {
        derive(HR_ISA_DOTPROD, HR_ISA_NEON);
        hr_quant_fill_dotprod(&g_tables[HR_ISA_DOTPROD]);
        drop_stale_dotn(&g_tables[HR_ISA_DOTPROD], &g_tables[HR_ISA_NEON]);
    }
    if (i8mm) {
        derive(HR_ISA_I8MM, HR_ISA_DOTPROD);
        hr_gemm_fill_i8mm(&g_tables[HR_ISA_I8MM]);
    }
#endif
    (void)avx2, (void)avx512, (void)neon, (void)dotprod, (void)i8mm;
    /* the fast tables: each canonical one, with free-order kernels where
     * this build has them */
    for (int i = 0; i < HR_ISA_COUNT; i++)
        g_fast[i] = g_tables[i];
#if HR_X86
    if (avx2 && hr_gemm_fill_avx2_fast(&g_fast[HR_ISA_AVX2], g_avxvnni))
        g_fast[HR_ISA_AVX2].canonical = false;
    if (avx512) {
        if (hr_gemm_fill_avx512_fast(&g_fast[HR_ISA_AVX512], g_flags512))
            g_fast[HR_ISA_AVX512].canonical = false;
        /* types without AVX-512 panels (all without VNNI; Q5_K with it)
         * run the AVX2 ones: 8 rows per ymm with sums in integers beat the
         * canonical tiles (Q5_K: about 2x the VNNI tiles on an Emerald
         * Rapids core, 128 rows x 64 tokens) */
        for (int t = 0; avx2 && t < HR_TYPE_COUNT; t++)
            if (g_fast[HR_ISA_AVX512].gemm[t] == g_tables[HR_ISA_AVX512].gemm[t] &&
                g_fast[HR_ISA_AVX2].gemm[t] != g_tables[HR_ISA_AVX2].gemm[t]) {
                g_fast[HR_ISA_AVX512].gemm[t] = g_fast[HR_ISA_AVX2].gemm[t];
                g_fast[HR_ISA_AVX512].canonical = false;
            }
    }
#endif
    const char *ex = getenv("HEARTH_EXACT");
    g_exact = ex && *ex && strcmp(ex, "0") != 0 && strcasecmp(ex, "no") != 0 &&
              strcasecmp(ex, "off") != 0 && strcasecmp(ex, "false") != 0;
    const char *want = getenv("HR_ISA"); /* debugging / benchmarking / tests */
    if (want && *want) {
        const int found = hr_isa_by_name(want);
        if (found >= 0 && g_have[found])
            g_best = &g_tables[found];
        else
            HR_LOG_WARN(TAG, "HR_ISA=%s: %s; using %s", want,
                        found < 0 ? "no such kernel table" : "this CPU cannot run it",
                        hr_isa_name(g_best->isa));
    }
    g_best_isa = g_best->isa;
    g_best = g_exact ? &g_tables[g_best_isa] : &g_fast[g_best_isa];
    HR_LOG_DEBUG(TAG, "kernels: %s%s%s (cpu: %s)", hr_isa_name(g_best->isa),
                 g_best->isa == HR_ISA_AVX512 && (g_flags512 & HR_AVX512_VNNI) ? " vnni" : "",
                 g_best->canonical ? "" : ", free order", g_features);
}

const char *hr_isa_features(void) {
    pthread_once(&g_once, init_tables);
    return g_features;
}

unsigned hr_quant_avx512_flags(void) {
    pthread_once(&g_once, init_tables);
    return g_have[HR_ISA_AVX512] ? g_flags512 : 0;
}

/* glibc's expf table (vexp_avx2.c, vexp_avx512.c): the bits of 2^(i / 32)
 * less i << 47 */
const uint64_t hr_vexp_table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

const hr_kernels *hr_kernels_best(void) {
    pthread_once(&g_once, init_tables);
    return g_best;
}

int hr_isa_by_name(const char *name) {
    for (int i = 0; i < HR_ISA_COUNT; i++)
        if (strcasecmp(name, hr_isa_name((hr_isa)i)) == 0)
            return i;
    return -1;
}

int hr_kernels_use(hr_isa isa) {
    if (!hr_kernels_for_isa(isa))
        return -1;
    g_best_isa = isa;
    g_best = g_exact ? &g_tables[isa] : &g_fast[isa];
    return 0;
}

void hr_kernels_set_exact(bool exact) {
    pthread_once(&g_once, init_tables);
    g_exact = exact;
    g_best = g_exact ? &g_tables[g_best_isa] : &g_fast[g_best_isa];
}

bool hr_kernels_exact(void) {
    pthread_once(&g_once, init_tables);
    return g_exact;
}

const hr_kernels *hr_kernels_fast_for_isa(hr_isa isa) {
    pthread_once(&g_once, init_tables);
    if ((int)isa < 0 || isa >= HR_ISA_COUNT || !g_have[isa])
        return NULL;
    return &g_fast[isa];
}

const hr_kernels *hr_kernels_for_isa(hr_isa isa) {
    pthread_once(&g_once, init_tables);
    if ((int)isa < 0 || isa >= HR_ISA_COUNT || !g_have[isa])
        return NULL;
    return &g_tables[isa];
}

bool hr_isa_built(hr_isa isa) {
    switch (isa) {
    case HR_ISA_SCALAR:
        return true;
    case HR_ISA_AVX2:
    case HR_ISA_AVX512:
        return HR_X86;
    case HR_ISA_NEON:
    case HR_ISA_DOTPROD:
    case HR_ISA_I8MM:
        return HR_ARM64;
    case HR_ISA_COUNT:
        break;
    }
    return false;
}

const char *hr_isa_name(hr_isa isa) {
    switch (isa) {
    case HR_ISA_SCALAR:
        return "scalar";
    case HR_ISA_AVX2:
        return "avx2";
    case HR_ISA_AVX512:
        return "avx512";
    case HR_ISA_NEON:
        return "neon";
    case HR_ISA_DOTPROD:
        return "dotprod";
    case HR_ISA_I8MM:
        return "i8mm";
    case HR_ISA_COUNT:
        break;
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
    if (k->vec_dot_n[type]) { /* several tokens per pass over the rows (equal to vec_dot) */
        for (int t0 = 0; t0 < nt; t0 += HR_DOT_N_MAX) {
            const int tn = nt - t0 < HR_DOT_N_MAX ? nt - t0 : HR_DOT_N_MAX;
            const void *col[HR_DOT_N_MAX];
            for (int t = 0; t < tn; t++)
                col[t] = ab + (size_t)(t0 + t) * a_stride;
            k->vec_dot_n[type](n, nr, w, w_stride, col, tn, y + (size_t)t0 * y_stride, y_stride);
        }
        return;
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            y[(size_t)t * y_stride + (size_t)r] =
                k->vec_dot[type](n, wb + (size_t)r * w_stride, ab + (size_t)t * a_stride);
}

void hr_vec_dot_n(const hr_kernels *k, int type, int64_t n, int nr, const void *w, size_t w_stride,
                  const void *const *a, int nt, float *y, size_t y_stride) {
    if (type < 0 || type >= HR_TYPE_COUNT || !k->vec_dot[type])
        return;
    /* one column: vec_dot's own loop is faster unless the table says otherwise */
    if (k->vec_dot_n[type] && (nt > 1 || k->dotn_one[type])) {
        k->vec_dot_n[type](n, nr, w, w_stride, a, nt, y, y_stride);
        return;
    }
    const char *wb = w;
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            y[(size_t)t * y_stride + (size_t)r] =
                k->vec_dot[type](n, wb + (size_t)r * w_stride, a[t]);
}
