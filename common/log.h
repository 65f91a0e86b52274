/* log.h - level-gated logging with a module tag, written to stderr.
 *
 * The level is checked before any formatting. Thread-safe (each message is
 * written with one fprintf call). Library code logs only through these. */
#ifndef HR_COMMON_LOG_H
#define HR_COMMON_LOG_H

typedef enum {
    HR_LOG_LEVEL_DEBUG = 0,
    HR_LOG_LEVEL_INFO = 1,
    HR_LOG_LEVEL_WARN = 2,
    HR_LOG_LEVEL_ERROR = 3,
    HR_LOG_LEVEL_NONE = 4,
} hr_log_level;

extern hr_log_level hr_log_threshold;

void hr_log_set_level(hr_log_level level);
/* Parses "debug", "info", "warn", "error", "none"; returns 0 or HR_EINVAL. */
int hr_log_parse_level(const char *s, hr_log_level *out);
void hr_log_write(hr_log_level level, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define HR_LOG_(lvl, tag, ...)                                                                     \
    do {                                                                                           \
        if ((lvl) >= hr_log_threshold)                                                             \
            hr_log_write((lvl), (tag), __VA_ARGS__);                                               \
    } while (0)
#define HR_LOG_DEBUG(tag, ...) HR_LOG_(HR_LOG_LEVEL_DEBUG, tag, __VA_ARGS__)
#define HR_LOG_INFO(tag, ...) HR_LOG_(HR_LOG_LEVEL_INFO, tag, __VA_ARGS__)
#define HR_LOG_WARN(tag, ...) HR_LOG_(HR_LOG_LEVEL_WARN, tag, __VA_ARGS__)
#define HR_LOG_ERROR(tag, ...) HR_LOG_(HR_LOG_LEVEL_ERROR, tag, __VA_ARGS__)

#endif
