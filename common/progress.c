/* progress.c - progress lines on stderr (see progress.h). */
#include "common/progress.h"

#include "common/log.h"
#include "common/sync.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HR_PROGRESS_MIN_S 0.5

void hr_progress_begin(hr_progress *p, const char *tag, const char *label, const char *unit,
                       int64_t total) {
    memset(p, 0, sizeof *p);
    snprintf(p->tag, sizeof p->tag, "%s", tag ? tag : "");
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total > 0 ? total : 0;
    p->t0 = p->last = hr_now_s();
    p->on = hr_log_threshold <= HR_LOG_LEVEL_INFO;
    p->tty = isatty(STDERR_FILENO) != 0;
    if (!p->on || p->total)
        return;
    /* no steps to count: say what runs now, finish the line at the end */
    if (p->tty)
        fprintf(stderr, "%s ...", p->label);
    else
        HR_LOG_INFO(p->tag, "%s ...", p->label);
    p->drawn = true;
}

static void hr_progress_draw(hr_progress *p, double now) {
    char bar[31];
    int w = 30, fill = (int)(w * p->done / p->total);
    for (int i = 0; i < w; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[w] = 0;
    fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %s, %.1f s\033[K", p->label, bar,
            (int)(100 * p->done / p->total), (long long)p->done, (long long)p->total, p->unit,
            now - p->t0);
}

void hr_progress_update(hr_progress *p, int64_t done) {
    if (!p->on || !p->total)
        return;
    p->done = done < p->total ? done : p->total;
    double now = hr_now_s();
    if (now - p->t0 < HR_PROGRESS_MIN_S) /* short work stays quiet */
        return;
    if (p->tty) {
        if (now - p->last >= 0.1 || !p->drawn) {
            hr_progress_draw(p, now);
            p->last = now;
            p->drawn = true;
        }
        return;
    }
    int q = (int)(4 * p->done / p->total);
    if (!p->drawn || (q > p->quarter && q < 4)) {
        p->quarter = q;
        p->drawn = true;
        HR_LOG_INFO(p->tag, "%s: %d%% (%lld/%lld %s, %.1f s)", p->label,
                    (int)(100 * p->done / p->total), (long long)p->done, (long long)p->total,
                    p->unit, now - p->t0);
    }
}

void hr_progress_end(hr_progress *p) {
    if (!p->on || !p->drawn)
        return;
    double now = hr_now_s();
    if (p->tty && p->total) {
        p->done = p->total;
        hr_progress_draw(p, now);
        fprintf(stderr, "\n");
    } else if (p->tty) {
        fprintf(stderr, " done in %.2f s\n", now - p->t0);
    } else {
        HR_LOG_INFO(p->tag, "%s: done in %.2f s", p->label, now - p->t0);
    }
}
