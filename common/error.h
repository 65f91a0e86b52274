/* error.h - hearth's error codes, error buffers and small shared helpers.
 *
 * Every fallible function returns int: 0 on success, a negative HR_E* code
 * on failure. Calls that fail on input, network or hardware also fill a
 * caller-provided char err[HR_ERR_LEN] with what went wrong and where.
 * Thread-safe: everything here is reentrant. */
#ifndef HR_COMMON_ERROR_H
#define HR_COMMON_ERROR_H

#include <stddef.h>

#define HR_ERR_LEN 256

/* X-macro table: name, value, message. */
#define HR_ERRNO_MAP(X)                                                                            \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(ENOENT, -4, "no such file or entry")                                                         \
    X(EFORMAT, -5, "malformed file or message")                                                    \
    X(EUNSUPPORTED, -6, "unsupported feature")                                                     \
    X(ERANGE, -7, "value out of range")                                                            \
    X(ETIMEDOUT, -8, "timed out")                                                                  \
    X(ENET, -9, "network error")                                                                   \
    X(EAGAIN, -10, "resource temporarily unavailable")                                             \
    X(ECANCELED, -11, "operation canceled")                                                        \
    X(EINTERNAL, -12, "internal error")                                                            \
    X(EINFEASIBLE, -13, "no feasible solution")                                                    \
    X(EDENIED, -14, "permission denied")

enum {
#define HR_ERR_ENUM_(name, val, msg) HR_##name = (val),
    HR_ERRNO_MAP(HR_ERR_ENUM_)
#undef HR_ERR_ENUM_
};

/* Returns a static string for an HR_E* code ("unknown error" otherwise). */
const char *hr_strerror(int code);

/* Formats into err (if not NULL) and returns code, so callers can write
 * `return hr_seterr(err, HR_EFORMAT, "bad magic at %s", path);`. */
int hr_seterr(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
