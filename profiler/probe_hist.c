/* probe_hist.c - the engine probe over several starts: each start's result
 * is kept in the profile cache folder, and the device's engine figures
 * become the median start's. One probe is a second of decode steps; a
 * machine's speed moves by tens of percent over minutes (other programs,
 * other virtual machines on the same host, clocks), so one start's probe
 * made two starts of the same household plan 40-80% apart where the same
 * plan then ran within 25%. */
#include "profiler/profiler-impl.h"

#include "common/log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HR_PROBE_HIST_VERSION 2 /* 2: burst_ms (1: round_ms, a slope under a quota) */

/* FNV-1a over what the probe's speed depends on besides the device: the
 * probed layers' shapes and types, the thread count, paced or not. */
static uint64_t hr_hist_key(const hr_prof_device *d, const hr_prof_model *pm) {
    uint64_t h = 1469598103934665603ull;
    char buf[256];
    int n = snprintf(
        buf, sizeof buf, "%s|%d|%d|%d|%d|%llu|%d|%.3f", d->fingerprint, pm->n_embd, pm->n_ff,
        pm->n_head, pm->n_head_kv,
        (unsigned long long)hr_prof_model_window_bytes(pm, 0, d->engine_layers, false, false),
        d->engine_threads, d->cpu_quota_cores);
    for (int i = 0; i < n && i < (int)sizeof buf; i++) {
        h ^= (unsigned char)buf[i];
        h *= 1099511628211ull;
    }
    int types[HR_PROF_MAX_TYPES];
    int nt = hr_prof_model_types(pm, types, HR_PROF_MAX_TYPES);
    for (int i = 0; i < nt; i++) {
        h ^= (uint64_t)(types[i] + 1);
        h *= 1099511628211ull;
    }
    return h;
}

typedef struct {
    double ms, burst_ms, at;
} hr_hist_run;

static int hr_hist_cmp(const void *a, const void *b) {
    double x = ((const hr_hist_run *)a)->ms, y = ((const hr_hist_run *)b)->ms;
    return (x > y) - (x < y);
}

/* Reads up to max earlier runs from path (newest last); 0 when absent or
 * unreadable (a bad file is replaced). */
static int hr_hist_read(const char *path, hr_hist_run *runs, int max, double now) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return 0;
    int n = 0;
    json_t *arr = json_object_get(root, "runs");
    json_t *v = json_object_get(root, "version");
    if (json_is_integer(v) && json_integer_value(v) == HR_PROBE_HIST_VERSION &&
        json_is_array(arr)) {
        size_t len = json_array_size(arr);
        for (size_t i = 0; i < len && n < max; i++) {
            json_t *e = json_array_get(arr, i);
            double ms = json_number_value(json_object_get(e, "ms"));
            double rm = json_number_value(json_object_get(e, "burst_ms"));
            double at = json_number_value(json_object_get(e, "at"));
            if (!(ms > 0 && ms < 1e6) || !(rm >= 0 && rm < 1e6) || !(at > 0) ||
                now - at > HR_PROBE_HIST_MAX_AGE_S || at > now + 60)
                continue; /* malformed, stale, or from a clock gone backwards */
            runs[n++] = (hr_hist_run){ms, rm, at};
        }
    }
    json_decref(root);
    return n;
}

static void hr_hist_write(const char *dir, const char *path, const hr_hist_run *runs, int n) {
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) {
        json_decref(root);
        json_decref(arr);
        return;
    }
    json_object_set_new(root, "version", json_integer(HR_PROBE_HIST_VERSION));
    for (int i = 0; i < n; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "ms", json_real(runs[i].ms));
        json_object_set_new(e, "burst_ms", json_real(runs[i].burst_ms));
        json_object_set_new(e, "at", json_real(runs[i].at));
        json_array_append_new(arr, e);
    }
    json_object_set_new(root, "runs", arr);
    char *text = json_dumps(root, JSON_COMPACT);
    if (!text || hr_prof_write_atomic(dir, path, text) != 0)
        HR_LOG_WARN(HR_PROF_TAG, "cannot keep the engine probe's history in %s: %s", path,
                    text ? strerror(errno) : "out of memory");
    free(text);
    json_decref(root);
}

int hr_prof_engine_history(hr_prof_device *d, const hr_prof_model *pm, const hr_prof_params *p) {
    d->engine_starts = d->engine_factor > 0 ? 1 : 0;
    char dir[1024], path[1200];
    if (!(d->engine_factor > 0 && d->engine_pred_ms > 0) || !pm || !p || !p->use_cache ||
        hr_prof_cache_dir(p, dir, sizeof dir) != 0)
        return d->engine_starts;
    snprintf(path, sizeof path, "%s/probe-%016llx.json", dir,
             (unsigned long long)hr_hist_key(d, pm));
    double now = (double)time(NULL);
    hr_hist_run runs[HR_PROBE_HISTORY + 1];
    int n = hr_hist_read(path, runs, HR_PROBE_HISTORY + 1, now);
    if (n >= HR_PROBE_HISTORY) { /* the oldest go */
        memmove(runs, runs + (n - HR_PROBE_HISTORY + 1), sizeof runs[0] * (HR_PROBE_HISTORY - 1));
        n = HR_PROBE_HISTORY - 1;
    }
    runs[n++] = (hr_hist_run){d->engine_ms, d->engine_burst_ms > 0 ? d->engine_burst_ms : 0, now};
    hr_hist_write(dir, path, runs, n);
    if (n == 1)
        return 1;
    double this_ms = d->engine_ms;
    hr_hist_run s[HR_PROBE_HISTORY];
    memcpy(s, runs, sizeof runs[0] * (size_t)n);
    qsort(s, (size_t)n, sizeof s[0], hr_hist_cmp);
    const hr_hist_run *lo = &s[(n - 1) / 2], *hi = &s[n / 2]; /* the median (of two middle) */
    d->engine_ms = 0.5 * (lo->ms + hi->ms);
    double bursts[HR_PROBE_HISTORY];
    for (int i = 0; i < n; i++)
        bursts[i] = s[i].burst_ms;
    d->engine_burst_ms = hr_prof_median(bursts, n); /* the single steps' own median */
    double range = (s[n - 1].ms - s[0].ms) / d->engine_ms;
    d->engine_factor = d->engine_ms / d->engine_pred_ms;
    if (range > d->engine_spread)
        d->engine_spread = range;
    d->engine_starts = n;
    HR_LOG_INFO(HR_PROF_TAG,
                "engine probe: %.2f ms per step this start; the median of the last %d starts "
                "%.2f (%.2f-%.2f), x%.2f",
                this_ms, n, d->engine_ms, s[0].ms, s[n - 1].ms, d->engine_factor);
    return n;
}
