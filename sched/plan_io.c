/* plan_io.c - a plan as a human-readable table and as JSON (jansson). */
#include "sched/sched.h"

#include "common/error.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Appends to a caller buffer (snprintf semantics) or to a FILE. */
typedef struct {
    char *buf;
    size_t cap, len;
    FILE *fp;
    bool io_error;
} hr_sink;

static void put(hr_sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(hr_sink *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (s->fp) {
        if (vfprintf(s->fp, fmt, ap) < 0)
            s->io_error = true;
    } else {
        char *dst = s->len < s->cap ? s->buf + s->len : NULL;
        size_t room = s->len < s->cap ? s->cap - s->len : 0;
        int n = vsnprintf(dst, room, fmt, ap);
        if (n > 0)
            s->len += (size_t)n;
    }
    va_end(ap);
}

static const char *overlap_name(hr_sched_overlap o) {
    return o == HR_SCHED_OVERLAP_SUM ? "sum" : "max";
}

/* A device's windows: "0-3 (+W per round)" in a uniform plan, else each
 * round's range ("0-3,8-9,-"); its window sizes, "4" or "4/2/0". */
static void window_text(const hr_sched_plan *p, const hr_sched_dev_plan *d, char *win, size_t cap,
                        char *sizes, size_t scap) {
    size_t n = 0, m = 0;
    win[0] = sizes[0] = 0;
    if (!d->active || d->layers == 0) {
        snprintf(win, cap, "-");
        snprintf(sizes, scap, "0");
        return;
    }
    if (p->uniform) {
        snprintf(win, cap, "%d-%d%s", d->first[0], d->first[0] + d->win[0] - 1,
                 p->k > 1 ? " (+W per round)" : "");
        snprintf(sizes, scap, "%d", d->win[0]);
        return;
    }
    for (int r = 0; r < p->k && r < HR_SCHED_MAX_ROUNDS; r++) {
        const char *sep = r ? "," : "";
        int a = n >= cap         ? 0
                : d->win[r] == 0 ? snprintf(win + n, cap - n, "%s-", sep)
                                 : snprintf(win + n, cap - n, "%s%d-%d", sep, d->first[r],
                                            d->first[r] + d->win[r] - 1);
        n += a > 0 ? (size_t)a : 0;
        int b = m < scap ? snprintf(sizes + m, scap - m, r ? "/%d" : "%d", d->win[r]) : 0;
        m += b > 0 ? (size_t)b : 0;
    }
}

static void format_plan(const hr_sched_plan *p, hr_sink *s) {
    if (p->status != 0 || p->k < 1) {
        put(s, "hearth plan: none (%s): %s\n", hr_strerror(p->status), p->explanation);
        return;
    }
    char shape[64];
    if (p->uniform)
        snprintf(shape, sizeof shape, "x %d layers", p->n_layer / p->k);
    else
        snprintf(shape, sizeof shape, "of their own windows (%d layers)", p->n_layer);
    put(s, "hearth plan: k = %d rounds %s, %d of %d devices, %.2f ms/token (%.2f tok/s)%s\n", p->k,
        shape, p->n_active, p->n_dev, p->latency_ms, p->tokens_per_s,
        p->optimal ? ", optimal" : ", not proven optimal");
    char qw[64] = "";
    if (p->quota_wait_ms > 0)
        snprintf(qw, sizeof qw, " + quota waits %.2f ms", p->quota_wait_ms);
    put(s,
        "  compute %.2f ms + links %.2f ms%s + disk exposed %.2f ms + head %.2f ms "
        "(overlap model %s, solved in %.1f ms, %d programs)\n",
        p->compute_ms, p->link_ms, qw, p->disk_exposed_ms, p->head_ms, overlap_name(p->overlap),
        p->solve_ms, p->n_ilp);
    put(s, "  %3s  %-20s %4s %4s %6s %10s %8s %9s %9s %8s %8s %7s  %s\n", "pos", "device", "w",
        "gpu", "layers", "compute_ms", "link_ms", "disk_ms", "exposed", "read_GiB", "mem_GiB",
        "thr p/d", "windows");
    for (int step = 0; step < p->n_dev + p->n_active; step++) {
        /* active devices in ring order, then the others */
        int i;
        if (step < p->n_active) {
            i = p->order[step];
        } else {
            i = step - p->n_active;
            if (p->dev[i].active)
                continue;
        }
        const hr_sched_dev_plan *d = &p->dev[i];
        char pos[8], win[96], sizes[64];
        if (d->active)
            snprintf(pos, sizeof pos, "%d", d->ring_pos);
        else
            snprintf(pos, sizeof pos, "-");
        window_text(p, d, win, sizeof win, sizes, sizeof sizes);
        put(s, "  %3s  %-20.20s %4s %4d %6d %10.2f %8.2f %9.2f %9.2f %8.2f %8.2f %3d/%-3d  %s%s\n",
            pos, d->name[0] ? d->name : "?", sizes, d->n_gpu, d->layers, d->compute_ms, d->link_ms,
            d->disk_load_ms, d->disk_exposed_ms, d->read_bytes / GIB, d->mem_bytes / GIB,
            d->prefill_threads, d->decode_threads, win,
            d->is_head ? " head" : (d->bottleneck ? " bottleneck" : ""));
    }
    for (int j = 0; j < p->n_active && p->n_active > 1; j++) {
        const hr_sched_dev_plan *d = &p->dev[p->order[j]];
        if (d->link_assumed)
            put(s, "  %s: link_ms %.2f (assumed %.3g Gbit/s, %.2g ms: no link measured)\n",
                d->name[0] ? d->name : "?", d->link_ms, d->link_bps * 8e-9, d->rtt_ms);
    }
    for (int i = 0; i < p->n_dev; i++)
        if (!p->dev[i].active)
            put(s, "  %s: left out: %s\n", p->dev[i].name[0] ? p->dev[i].name : "?",
                p->dev[i].left_out);
    if (p->out_stream_bytes > 0.0)
        put(s, "  output head: %.1f MiB streamed from disk per token (head short of memory)\n",
            p->out_stream_bytes / 1048576.0);
    if (p->fastest_k > 0)
        put(s,
            "  simpler than the fastest found (k=%d on %d devices, %.2f ms): within the devices' "
            "measured spread (+-%.0f%%)\n",
            p->fastest_k, p->fastest_active, p->fastest_ms, 100.0 * p->noise_margin);
    put(s, "  candidates:");
    for (int j = 0; j < p->n_k; j++) {
        const char *sep = j + 1 < p->n_k ? "," : "";
        if (isfinite(p->k_latency_ms[j]))
            put(s, " k=%d %.2f ms%s", p->k_list[j], p->k_latency_ms[j], sep);
        else if (isnan(p->k_latency_ms[j]))
            put(s, " k=%d worse%s", p->k_list[j], sep);
        else
            put(s, " k=%d none%s", p->k_list[j], sep);
    }
    put(s, "\n");
}

int hr_sched_plan_format(const hr_sched_plan *plan, char *buf, size_t cap) {
    if (!plan || (!buf && cap > 0))
        return HR_EINVAL;
    hr_sink s = {buf, cap, 0, NULL, false};
    if (cap > 0)
        buf[0] = '\0';
    format_plan(plan, &s);
    return s.len > (size_t)INT_MAX ? HR_ERANGE : (int)s.len;
}

int hr_sched_plan_print(const hr_sched_plan *plan, FILE *fp) {
    if (!plan || !fp)
        return HR_EINVAL;
    hr_sink s = {NULL, 0, 0, fp, false};
    format_plan(plan, &s);
    return s.io_error ? HR_EIO : 0;
}

/* ---------------------------------------------------------------- JSON */

/* Sets key to v (stolen); records allocation failure in *bad. */
static void jset(json_t *o, const char *key, json_t *v, bool *bad) {
    if (!v) {
        *bad = true;
    } else if (!o) {
        json_decref(v);
        *bad = true;
    } else if (json_object_set_new(o, key, v) != 0) {
        *bad = true;
    }
}

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *dev_json(const hr_sched_plan *p, int i, bool *bad) {
    const hr_sched_dev_plan *d = &p->dev[i];
    json_t *o = json_object();
    jset(o, "index", json_integer(i), bad);
    jset(o, "name", json_string(d->name), bad);
    jset(o, "active", json_boolean(d->active), bad);
    jset(o, "is_head", json_boolean(d->is_head), bad);
    jset(o, "ring_pos", json_integer(d->ring_pos), bad);
    if (p->uniform) /* layers per round (per-round windows: "windows" alone) */
        jset(o, "w", json_integer(d->win[0]), bad);
    jset(o, "n_gpu", json_integer(d->n_gpu), bad);
    jset(o, "layers", json_integer(d->layers), bad);
    json_t *win = json_array();
    for (int r = 0; d->active && d->layers > 0 && r < p->k && r < HR_SCHED_MAX_ROUNDS; r++) {
        json_t *pair = json_array();
        if (!pair || json_array_append_new(pair, json_integer(d->first[r])) ||
            json_array_append_new(pair, json_integer(d->win[r])) ||
            json_array_append_new(win, pair))
            *bad = true;
    }
    jset(o, "windows", win, bad); /* [[first layer, count], ...] per round (count may be 0) */
    jset(o, "overloaded", json_boolean(d->overloaded), bad);
    jset(o, "bottleneck", json_boolean(d->bottleneck), bad);
    jset(o, "compute_ms", jnum(d->compute_ms), bad);
    jset(o, "link_ms", jnum(d->link_ms), bad);
    jset(o, "disk_load_ms", jnum(d->disk_load_ms), bad);
    jset(o, "disk_exposed_ms", jnum(d->disk_exposed_ms), bad);
    jset(o, "read_bytes", jnum(d->read_bytes), bad);
    jset(o, "mem_bytes", jnum(d->mem_bytes), bad);
    jset(o, "t_layer_ms", jnum(d->t_layer_ms), bad);
    if (d->throttle_slope > 0) { /* a CPU quota's term in its rounds */
        jset(o, "throttle_slope", jnum(d->throttle_slope), bad);
        jset(o, "quota_wait_ms", jnum(d->quota_wait_ms), bad);
    }
    jset(o, "prefill_threads", json_integer(d->prefill_threads), bad);
    jset(o, "decode_threads", json_integer(d->decode_threads), bad);
    jset(o, "rtt_ms", jnum(d->rtt_ms), bad);
    jset(o, "link_bps", jnum(d->link_bps), bad);
    jset(o, "link_assumed", json_boolean(d->link_assumed), bad);
    if (!d->active)
        jset(o, "left_out", json_string(d->left_out), bad);
    return o;
}

int hr_sched_plan_json(const hr_sched_plan *p, char **json, char err[HR_ERR_LEN]) {
    if (!p || !json)
        return hr_seterr(err, HR_EINVAL, "scheduler: plan or json output is NULL");
    *json = NULL;
    if (p->n_dev < 0 || p->n_dev > HR_SCHED_MAX_DEV || p->n_k < 0 || p->n_k > HR_SCHED_MAX_K ||
        p->n_active < 0 || p->n_active > p->n_dev)
        return hr_seterr(err, HR_EINVAL, "scheduler: plan is corrupt (n_dev %d, n_k %d)", p->n_dev,
                         p->n_k);
    bool bad = false;
    json_t *root = json_object();
    jset(root, "schema_version", json_integer(HR_SCHED_SCHEMA_VERSION), &bad);
    jset(root, "status", json_integer(p->status), &bad);
    jset(root, "explanation", json_string(p->explanation), &bad);
    if (p->status == 0 && p->k >= 1) {
        jset(root, "k", json_integer(p->k), &bad);
        jset(root, "n_layer", json_integer(p->n_layer), &bad);
        jset(root, "uniform", json_boolean(p->uniform), &bad);
        if (p->uniform)
            jset(root, "layers_per_round", json_integer(p->n_layer / p->k), &bad);
        jset(root, "head", json_integer(p->head), &bad);
        jset(root, "latency_ms", jnum(p->latency_ms), &bad);
        jset(root, "tokens_per_s", jnum(p->tokens_per_s), &bad);
        json_t *br = json_object();
        jset(br, "compute_ms", jnum(p->compute_ms), &bad);
        jset(br, "link_ms", jnum(p->link_ms), &bad);
        jset(br, "quota_wait_ms", jnum(p->quota_wait_ms), &bad);
        jset(br, "disk_exposed_ms", jnum(p->disk_exposed_ms), &bad);
        jset(br, "head_ms", jnum(p->head_ms), &bad);
        jset(br, "round_ms", jnum(p->round_ms), &bad);
        jset(br, "out_stream_bytes", jnum(p->out_stream_bytes), &bad);
        jset(root, "breakdown", br, &bad);
        jset(root, "overlap", json_string(overlap_name(p->overlap)), &bad);
        jset(root, "optimal", json_boolean(p->optimal), &bad);
        jset(root, "solve_ms", jnum(p->solve_ms), &bad);
        jset(root, "noise_margin", jnum(p->noise_margin), &bad);
        if (p->fastest_k > 0) {
            json_t *f = json_object();
            jset(f, "k", json_integer(p->fastest_k), &bad);
            jset(f, "active", json_integer(p->fastest_active), &bad);
            jset(f, "latency_ms", jnum(p->fastest_ms), &bad);
            jset(root, "fastest", f, &bad);
        }
        json_t *ring = json_array();
        for (int j = 0; j < p->n_active; j++)
            if (!ring || json_array_append_new(ring, json_integer(p->order[j])))
                bad = true;
        jset(root, "ring", ring, &bad);
        json_t *devs = json_array();
        for (int i = 0; i < p->n_dev; i++)
            if (!devs || json_array_append_new(devs, dev_json(p, i, &bad)))
                bad = true;
        jset(root, "devices", devs, &bad);
        json_t *cand = json_array();
        for (int j = 0; j < p->n_k; j++) {
            json_t *e = json_object();
            jset(e, "k", json_integer(p->k_list[j]), &bad);
            double v = p->k_latency_ms[j];
            jset(e, "latency_ms", jnum(v), &bad);
            jset(e, "result",
                 json_string(isfinite(v) ? "feasible"
                             : isnan(v)  ? "pruned"
                                         : "infeasible"),
                 &bad);
            if (!cand || json_array_append_new(cand, e))
                bad = true;
        }
        jset(root, "k_candidates", cand, &bad);
    }
    char *s = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (!s)
        return hr_seterr(err, HR_ENOMEM, "scheduler: out of memory writing the plan as JSON");
    *json = s;
    return 0;
}
