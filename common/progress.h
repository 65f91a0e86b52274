/* progress.h - a progress line for long work (profiling, warm-up,
 * prefill) on stderr.
 *
 * On a terminal the line is redrawn in place ("prefill [=====>    ] 45%
 * 120/264 tokens, 1.2 s"), at most 10 times a second; when stderr is not a
 * terminal it becomes plain INFO log lines at the start, at every quarter
 * and at the end. Nothing is printed when the log level is above INFO.
 * Work shorter than min_s (0.5 s) draws nothing on a terminal.
 *
 * A hr_progress is used by one thread; writes are single fprintf calls,
 * like the logger's. */
#ifndef HR_COMMON_PROGRESS_H
#define HR_COMMON_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char tag[16], label[48], unit[16];
    int64_t total, done;
    double t0, last;
    int quarter;
    bool tty, drawn, on;
} hr_progress;

/* Starts work of total units (0 = unknown, shows a count only). */
void hr_progress_begin(hr_progress *p, const char *tag, const char *label, const char *unit,
                       int64_t total);
void hr_progress_update(hr_progress *p, int64_t done);
/* Finishes the line (a final "done in X s"). */
void hr_progress_end(hr_progress *p);

#endif
