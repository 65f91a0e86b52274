/* log.c - stderr logger behind the HR_LOG_* macros. */
#include "common/log.h"

#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

hr_log_level hr_log_threshold = HR_LOG_LEVEL_WARN;

void hr_log_set_level(hr_log_level level) { hr_log_threshold = level; }

int hr_log_parse_level(const char *s, hr_log_level *out) {
    static const char *names[] = {"debug", "info", "warn", "error", "none"};
    for (int i = 0; i < 5; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (hr_log_level)i;
            return 0;
        }
    }
    return HR_EINVAL;
}

void hr_log_write(hr_log_level level, const char *tag, const char *fmt, ...) {
    static const char *lv[] = {"debug", "info", "warn", "error", "none"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s [%s] %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, lv[level < 5 ? level : 4], tag, msg);
}
