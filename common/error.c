/* error.c - error strings and the error-buffer helper. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>

const char *hr_strerror(int code) {
    switch (code) {
#define HR_ERR_CASE_(name, val, msg)                                                               \
    case (val):                                                                                    \
        return (msg);
        HR_ERRNO_MAP(HR_ERR_CASE_)
#undef HR_ERR_CASE_
    default:
        return "unknown error";
    }
}

int hr_seterr(char *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, HR_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}
