/* check.h - tiny assertion helpers for hearth's test executables.
 * Each CHECK prints both values and the location on failure and counts it;
 * a test's main returns hr_check_finish(). */
#ifndef HR_TESTS_CHECK_H
#define HR_TESTS_CHECK_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hr_check_failed_ = 0;
static int hr_check_passed_ = 0;

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

#define CHECK_EQ(a, b) CHECK_INT(a, ==, b)

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

static inline int hr_check_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, hr_check_passed_, hr_check_failed_);
    return hr_check_failed_ ? 1 : 0;
}

/* Path of a fixture under ../shared (HR_SHARED overrides). */
static inline const char *hr_shared_path(const char *rel, char *buf, size_t cap) {
    const char *base = getenv("HR_SHARED");
    snprintf(buf, cap, "%s/%s", base ? base : "../shared", rel);
    return buf;
}

#endif
