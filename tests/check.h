/* check.h - tiny assertion helpers for hearth's test executables.
 * Each CHECK prints both values and the location on failure and counts it;
 * a test's main returns hr_check_finish(): 1 when a check failed, else
 * HR_CHECK_SKIPPED (77, registered as ctest's SKIP_RETURN_CODE) when a part
 * was skipped with hr_check_skip(), else 0. */
#ifndef HR_TESTS_CHECK_H
#define HR_TESTS_CHECK_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define CHECK_INT(a, op, b)                                                                        \
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
            CHECK_INT(a, ==, b);                                                                   \
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

/* Records that a part of the test did not run and why (printed). */
static inline void hr_check_skip(const char *what) {
    hr_check_skipped_++;
    printf("SKIPPED: %s\n", what);
}

static inline int hr_check_finish(const char *name) {
    printf("%s: %d passed, %d failed, %d skipped\n", name, hr_check_passed_, hr_check_failed_,
           hr_check_skipped_);
    if (hr_check_failed_)
        return 1;
    return hr_check_skipped_ ? HR_CHECK_SKIPPED : 0;
}

/* Path of a fixture under ../shared (HR_SHARED overrides). */
static inline const char *hr_shared_path(const char *rel, char *buf, size_t cap) {
    const char *base = getenv("HR_SHARED");
    snprintf(buf, cap, "%s/%s", base ? base : "../shared", rel);
    return buf;
}

#endif
