/* check.h - tiny assertion helpers for hearth's test executables.
 * Each CHECK prints both values and the location on failure and counts it;
 * a test's main returns hr_check_finish(): 1 when a check failed, else
 * HR_CHECK_SKIPPED (77, registered as ctest's SKIP_RETURN_CODE) when a part
 * was skipped with hr_check_skip(), else 0. */
#ifndef HR_TESTS_CHECK_H
#define HR_TESTS_CHECK_H

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int hr_check_failed_ = 0;
static int hr_check_passed_ = 0;
static int hr_check_skipped_ = 0;

#define HR_CHECK_SKIPPED 77

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            hr_check_passed_++;                                                                    \
        } else {                                                                                   \
            hr_check_failed_++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

/* 1 for the integer types (enums are compatible with one), 0 for floating
 * types, pointers and the rest: CHECK_INT refuses those at compile time. */
#define HR_CHECK_IS_INT_(x)                                                                        \
    _Generic((x), _Bool : 1, char : 1, signed char : 1, unsigned char : 1, short : 1,              \
             unsigned short : 1, int : 1, unsigned : 1, long : 1, unsigned long : 1,               \
             long long : 1, unsigned long long : 1, default : 0)

#define CHECK_INT(a, op, b)                                                                        \
    do {                                                                                           \
        _Static_assert(HR_CHECK_IS_INT_(a) && HR_CHECK_IS_INT_(b),                                 \
                       "CHECK_INT takes integer operands (CHECK_NEAR / CHECK for others)");        \
        CHECK_INT_(a, op, b);                                                                      \
    } while (0)

/* CHECK_INT without the operand check (CHECK_EQ's integer branch) */
#define CHECK_INT_(a, op, b)                                                                       \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ op vb_) {                                                                          \
            hr_check_passed_++;                                                                    \
        } else {                                                                                   \
            hr_check_failed_++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK %s %s %s failed: %lld vs %lld\n", __FILE__, __LINE__,    \
                    #a, #op, #b, va_, vb_);                                                        \
        }                                                                                          \
    } while (0)

#define CHECK_DBL_(a, op, b)                                                                       \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        if (va_ op vb_) {                                                                          \
            hr_check_passed_++;                                                                    \
        } else {                                                                                   \
            hr_check_failed_++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK %s %s %s failed: %.9g vs %.9g\n", __FILE__, __LINE__,    \
                    #a, #op, #b, va_, vb_);                                                        \
        }                                                                                          \
    } while (0)

/* Compares as doubles when either side is floating, else as integers (so
 * CHECK_EQ(0.25f, 0.5f) fails instead of comparing 0 with 0). */
#define HR_CHECK_IS_FLOAT_(x) _Generic((x), float : 1, double : 1, long double : 1, default : 0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        if (HR_CHECK_IS_FLOAT_(a) || HR_CHECK_IS_FLOAT_(b))                                        \
            CHECK_DBL_(a, ==, b);                                                                  \
        else                                                                                       \
            CHECK_INT_(a, ==, b);                                                                  \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b), vt_ = (double)(tol);                          \
        if (fabs(va_ - vb_) <= vt_) {                                                              \
            hr_check_passed_++;                                                                    \
        } else {                                                                                   \
            hr_check_failed_++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK_NEAR(%s, %s) failed: %.9g vs %.9g (tol %.3g)\n",         \
                    __FILE__, __LINE__, #a, #b, va_, vb_, vt_);                                    \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        if (sa_ && sb_ && strcmp(sa_, sb_) == 0) {                                                 \
            hr_check_passed_++;                                                                    \
        } else {                                                                                   \
            hr_check_failed_++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK_STR(%s, %s) failed: \"%s\" vs \"%s\"\n", __FILE__,       \
                    __LINE__, #a, #b, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                 \
        }                                                                                          \
    } while (0)

/* Records that a part of the test did not run and why: printed, counted in
 * the summary, and appended to the file HR_SKIP_LOG names (deploy/test.sh
 * lists them all at its end). */
static inline void hr_check_skip(const char *what) {
    hr_check_skipped_++;
    printf("SKIPPED: %s\n", what);
    fflush(stdout);
    const char *log = getenv("HR_SKIP_LOG");
    FILE *f = log && *log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%s: %s\n", program_invocation_short_name, what);
        fclose(f);
    }
}

/* 1 when a check failed; HR_CHECK_SKIPPED (77, ctest's SKIP_RETURN_CODE)
 * when nothing was checked and something was skipped; else 0 (parts
 * skipped beside passing checks are in the summary and the skip log). */
static inline int hr_check_finish(const char *name) {
    printf("%s: %d passed, %d failed, %d skipped\n", name, hr_check_passed_, hr_check_failed_,
           hr_check_skipped_);
    if (hr_check_failed_)
        return 1;
    return hr_check_skipped_ && !hr_check_passed_ ? HR_CHECK_SKIPPED : 0;
}

/* Logits compared row by row: the worst over rows of max |a - b| / max |b|
 * (max |b| of 0 counts as 1), and the rows whose argmax agrees. A NaN or an
 * infinity on either side is counted and makes rel infinite, so no bound
 * accepts it (fmax alone would skip NaNs). */
typedef struct {
    double rel;
    int agree;
    long nonfinite;
} hr_logits_cmp;

static inline int hr_check_argmax_(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static inline hr_logits_cmp hr_compare_logits(const float *a, const float *b, int n_rows, int nv) {
    hr_logits_cmp c = {0.0, 0, 0};
    for (int p = 0; p < n_rows; p++) {
        const float *x = a + (size_t)p * nv, *y = b + (size_t)p * nv;
        double md = 0.0, mr = 0.0;
        for (int i = 0; i < nv; i++) {
            if (!isfinite(x[i]) || !isfinite(y[i])) {
                c.nonfinite++;
                continue;
            }
            const double d = fabs((double)x[i] - y[i]), m = fabs((double)y[i]);
            md = d > md ? d : md;
            mr = m > mr ? m : mr;
        }
        const double rel = md / (mr > 0 ? mr : 1.0);
        c.rel = rel > c.rel ? rel : c.rel;
        c.agree += hr_check_argmax_(x, nv) == hr_check_argmax_(y, nv);
    }
    if (c.nonfinite) {
        fprintf(stderr, "logits compare: %ld NaN or infinite values in %d rows of %d\n",
                c.nonfinite, n_rows, nv);
        c.rel = INFINITY;
    }
    return c;
}

/* A whole file, NUL-terminated (malloc), its length in *len when len is not
 * NULL; NULL when it cannot be opened or read in full. */
static inline char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) {
        s[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return s;
}

/* 1 when the mapping holding addr has VmFlags flag in /proc/self/smaps
 * ("rr": random-read advice), 0 when not, -1 when not found. */
static inline int hr_vma_flag(const void *addr, const char *flag) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    int found = -1;
    uintptr_t a = (uintptr_t)addr;
    while (found < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a >= lo && a < hi;
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            char want[8];
            snprintf(want, sizeof want, " %s", flag);
            const char *p = strstr(line + 8, want);
            found = p && (p[strlen(want)] == ' ' || p[strlen(want)] == '\n');
        }
    }
    fclose(f);
    return found;
}

/* Whether madvise advice reaches the kernel here: MADV_RANDOM on a fresh
 * anonymous mapping shows as "rr" (an emulator such as qemu-user takes
 * the call and drops it). */
static inline bool hr_advice_honoured(void) {
    size_t n = 2 * 4096;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    bool ok = madvise(p, n, MADV_RANDOM) == 0 && hr_vma_flag(p, "rr") == 1;
    munmap(p, n);
    return ok;
}

/* Path of a fixture under ../shared (HR_SHARED overrides). */
static inline const char *hr_shared_path(const char *rel, char *buf, size_t cap) {
    const char *base = getenv("HR_SHARED");
    snprintf(buf, cap, "%s/%s", base ? base : "../shared", rel);
    return buf;
}

#endif
