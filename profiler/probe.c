/* probe.c - the engine probe: real decode steps of the model's first
 * layers, timed over several CPU-quota periods, against what the device
 * profile's rates predict for the same layers. The ratio (engine_factor)
 * carries what the kernel sweeps do not see: the engine's own work between
 * matrices, the weights' layout in the page cache, and how a CPU quota
 * throttles a long computation. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HR_PROBE_CTX 64        /* KV positions; the probe wraps around */
#define HR_PROBE_WARM 2        /* steps that fault the weights in, untimed */
#define HR_PROBE_MIN_STEPS 4   /* timed steps at least */
#define HR_PROBE_MAX_BURSTS 48 /* single-step bursts at most (under a CPU quota) */
#define HR_PROBE_MIN_BURSTS 8  /* ... and at least */
#define HR_PROBE_MAX_STEPS 512 /* single-step samples kept at most */
#define HR_PROBE_ATTEMPTS 3    /* attempts; the median rate's stands */
#define HR_PROBE_PAUSE_S 0.2   /* s before attempt n + 1, times n */

/* Layers [0, n): two at least, and more while their weights are within
 * HR_PROBE_L3_TIMES the last-level cache, so that the probe's steps read
 * them from memory as a plan's windows do, not from the cache (on a KVM
 * guest reporting 532 MB of L3, two 1.1B-shape Q4_0 layers ran at 1.02 ms
 * each, a whole 22-layer model at 1.35-1.56 ms a layer; with 32 MB of L3
 * this stays at two 1.1B layers). All of them within HR_PROBE_MEM_FRAC of
 * the memory left for weights; two only where twice their bytes fit, else
 * one (0: not even one fits twice over). max_ms > 0 (paced steps, a CPU
 * quota): only while a step would read its weights in max_ms at the
 * measured one-thread memory bandwidth (none grown where that is unknown),
 * which keeps a probe under a quota to a few seconds. */
#define HR_PROBE_L3_TIMES 3
#define HR_PROBE_MEM_FRAC 0.75
#define HR_PROBE_PACED_PERIODS 4 /* max_ms of a paced step, in quota periods */
static int hr_probe_layers(const hr_prof_device *d, const hr_prof_model *pm, double max_ms) {
    int n = pm->n_layer < 2 ? pm->n_layer : 2;
    int64_t avail = d->mem.weights_avail_bytes;
    while (n > 0 && avail >= 0 &&
           (int64_t)(2 * hr_prof_model_window_bytes(pm, 0, n, false, false)) > avail)
        n--;
    double l3 = d->topo.l3_bytes > 0 ? (double)d->topo.l3_bytes : 0;
    while (n >= 2 && n < pm->n_layer) {
        double next = (double)hr_prof_model_window_bytes(pm, 0, n + 1, false, false);
        if ((double)hr_prof_model_window_bytes(pm, 0, n, false, false) >= HR_PROBE_L3_TIMES * l3 ||
            (avail >= 0 && next > HR_PROBE_MEM_FRAC * (double)avail))
            break;
        if (max_ms > 0 && !(d->membw_1t_gbs > 0 && next / (d->membw_1t_gbs * 1e6) <= max_ms))
            break;
        n++;
    }
    return n;
}

/* One attempt's result. */
typedef struct {
    int steps;
    double dt, past; /* s of timed compute; sum of the positions attended */
    double ms;       /* ms per step, back to back */
    double burst_ms; /* ms per step of single steps after an idle spell (paced), else 0 */
    double spread;   /* interquartile range / median of the single-step samples */
} hr_probe_run;

static int hr_probe_run_cmp(const void *a, const void *b) {
    double x = ((const hr_probe_run *)a)->ms, y = ((const hr_probe_run *)b)->ms;
    return (x > y) - (x < y);
}

/* (p75 - p25) / median of v[0..n) (sorted in place); INFINITY below 4. */
static double hr_probe_spread(double *v, int n) {
    if (n < 4)
        return INFINITY;
    double med = hr_prof_median(v, n); /* sorts */
    return med > 0 ? (v[(3 * n) / 4] - v[n / 4]) / med : INFINITY;
}

/* One decode step of the probe's layers at position *pos (wrapping). */
static int hr_probe_step(hr_ctx *c, float *h, const float *h0, int E, int *pos,
                         char err[HR_ERR_LEN]) {
    if (*pos == HR_PROBE_CTX)
        *pos = 0; /* the cache is overwritten from the start */
    memcpy(h, h0, (size_t)E * sizeof *h);
    int rc = hr_ctx_layers(c, h, 1, *pos, err);
    (*pos)++;
    return rc;
}

/* CPU seconds of the threads that compute c's steps: its pool's (not the
 * process's other threads: a link measurement or a heartbeat while the
 * probe runs is not the step's work); the process's where c runs in
 * thread groups. */
static double hr_probe_cpu_s(hr_ctx *c) {
    hr_pool *p = hr_ctx_n_groups(c) == 1 ? hr_ctx_pool(c) : NULL;
    return p ? hr_pool_cpu_s(p) : hr_prof_cpu_s(false);
}

/* One attempt of the probe over context c (its window's layers) from
 * hidden state h0 (h: scratch), as hr_prof_engine_probe describes; period_s
 * > 0: paced (a CPU quota of that period). */
static int hr_probe_attempt(hr_ctx *c, float *h, const float *h0, int E, int n_threads,
                            double period_s, double window_s, hr_probe_run *out,
                            char err[HR_ERR_LEN]) {
    int pos = 0, steps = 0, n1 = 0, rc;
    double dt = 0, past = 0, b1[HR_PROBE_MAX_STEPS];
    for (int i = 0; i < HR_PROBE_WARM; i++)
        if ((rc = hr_probe_step(c, h, h0, E, &pos, err)))
            return rc;
    /* paced: single steps, each after an idle spell of at least a period
     * and twice the step, so that each starts with the quota's whole share;
     * each one's CPU time where that is shorter (it was throttled) */
    double idle = period_s, bt = 0;
    while (period_s > 0 && n1 < HR_PROBE_MAX_BURSTS &&
           (n1 < HR_PROBE_MIN_BURSTS || bt < 0.5 * window_s)) {
        hr_sleep_s(idle);
        double t0 = hr_now_s(), c0 = hr_probe_cpu_s(c);
        if ((rc = hr_probe_step(c, h, h0, E, &pos, err)))
            return rc;
        double c1 = hr_probe_cpu_s(c);
        double b = hr_now_s() - t0, cpu = c0 >= 0 && c1 >= 0 ? (c1 - c0) / n_threads : -1;
        /* its unthrottled time: the CPU time it ran where the quota held
         * it back (a step longer than the period's share) */
        b1[n1++] = cpu > 0 && cpu < b ? cpu : b;
        bt += b;
        idle = 2 * b > period_s ? 2 * b : period_s;
    }
    /* steps back to back for window_s (twice that paced: throttled steps
     * vary more): the sustained rate */
    int n0 = n1;
    double win = period_s > 0 ? 2 * window_s : window_s;
    while (steps < HR_PROBE_MIN_STEPS || dt < win) {
        double t0 = hr_now_s();
        past += pos == HR_PROBE_CTX ? 0 : pos;
        if ((rc = hr_probe_step(c, h, h0, E, &pos, err)))
            return rc;
        double b = hr_now_s() - t0;
        if (period_s <= 0 && n1 < HR_PROBE_MAX_STEPS)
            b1[n1++] = b;
        dt += b;
        steps++;
    }
    *out = (hr_probe_run){.steps = steps, .dt = dt, .past = past, .ms = dt / steps * 1e3};
    if (n0 > 0)
        out->burst_ms = hr_prof_median(b1, n0) * 1e3; /* sorts b1[0, n0) */
    out->spread = hr_probe_spread(b1, n1);
    return 0;
}

int hr_prof_engine_probe(hr_prof_device *d, const hr_model *m, const hr_prof_model *pm,
                         int n_threads, double window_s, char err[HR_ERR_LEN]) {
    d->engine_factor = -1.0;
    d->engine_ms = d->engine_pred_ms = d->engine_window_s = d->engine_spread = -1.0;
    d->engine_attempts = d->engine_starts = 0;
    d->engine_layers = d->engine_threads = 0;
    if (!m || !pm || pm->n_layer <= 0 || d->n_rates == 0)
        return hr_seterr(err, HR_EINVAL, "the engine probe needs a model and measured rates");
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = HR_PROBE_CTX;
    cp.n_batch = 1;
    cp.n_threads = n_threads > 0 ? n_threads : 1;
    /* Without a CPU quota (or one of at least the probe's threads, which
     * cannot throttle them): steps back to back for window_s. Under one,
     * first single steps, each after an idle spell of at least a quota
     * period (a device in a ring waits while the others compute, and the
     * quota's share of a period is whole again when its round comes), then
     * steps back to back for window_s: a quota throttles the two very
     * differently (at half a core in 5 ms periods, a 64-token decode took
     * 2.3-2.4x its unthrottled time back to back; single steps within the
     * share of a period are not throttled at all). engine_burst_ms keeps
     * the single steps' median, engine_ms the sustained rate; the cost
     * model (hr_prof_throttle) makes its quota term of the two. */
    bool paced = d->cpu_quota_cores > 0 && d->cpu_quota_cores < cp.n_threads; /* it can throttle */
    double period_s = paced ? (d->cpu_period_ms > 0 ? d->cpu_period_ms : 100.0) * 1e-3 : 0;
    int nl = hr_probe_layers(d, pm, paced ? HR_PROBE_PACED_PERIODS * period_s * 1e3 : 0);
    if (nl == 0)
        return hr_seterr(err, HR_ENOMEM, "too little memory for the engine probe");
    cp.layer_begin = 0;
    cp.layer_end = nl;
    hr_ctx *c = NULL;
    int rc = hr_ctx_create(&c, m, &cp, err);
    if (rc)
        return rc;
    int E = hr_model_hparams(m)->n_embd;
    float *h = malloc((size_t)E * sizeof *h), *h0 = malloc((size_t)E * sizeof *h0);
    int32_t id = 1;
    if (!h || !h0 || (rc = hr_model_embed(m, &id, 1, h0, err))) {
        rc = rc ? rc : hr_seterr(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    /* HR_PROBE_ATTEMPTS attempts, a short pause apart, and the one with the
     * median rate stands: a machine's speed moves over seconds (on the
     * mixed lab's big device, single attempts of 4.25, 6.37, 9.48 and
     * 13.27 ms per step in fresh labs, each with its steps within 10-15% of
     * each other), which the steps' spread inside one attempt does not
     * show. The attempts' range over the median is the profile's
     * engine_spread; each attempt's own spread (interquartile range over
     * the median of its single steps or single-step bursts) is logged. */
    hr_probe_run runs[HR_PROBE_ATTEMPTS];
    int attempts = 0;
    for (; attempts < HR_PROBE_ATTEMPTS; attempts++) {
        if (attempts > 0)
            hr_sleep_s(HR_PROBE_PAUSE_S * attempts);
        if ((rc = hr_probe_attempt(c, h, h0, E, cp.n_threads, period_s, window_s, &runs[attempts],
                                   err)))
            goto done;
    }
    double bursts[HR_PROBE_ATTEMPTS];
    for (int i = 0; i < attempts; i++)
        bursts[i] = runs[i].burst_ms;
    qsort(runs, (size_t)attempts, sizeof runs[0], hr_probe_run_cmp);
    hr_probe_run best = runs[attempts / 2];                       /* the median rate */
    best.burst_ms = paced ? hr_prof_median(bursts, attempts) : 0; /* the attempts' median */
    double lo = runs[0].ms, hi = runs[attempts - 1].ms;
    int steps = best.steps;
    double dt = best.dt, past = best.past;
    /* the rates' prediction for the same work, without any quota scaling */
    hr_prof_device *raw = malloc(sizeof *raw);
    if (!raw) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    *raw = *d;
    raw->n_sustain = 0;
    raw->cpu_quota_cores = -1.0;
    hr_prof_cost_params pp = hr_prof_cost_params_default();
    pp.n_threads = cp.n_threads;
    pp.n_past = (int)(past / steps + 0.5);
    hr_prof_cost cost;
    rc = hr_prof_cost_window(raw, pm, NULL, 0, nl, &pp, &cost, err);
    free(raw);
    if (rc)
        goto done;
    d->engine_layers = nl;
    d->engine_threads = cp.n_threads;
    d->engine_window_s = dt;
    d->engine_ms = best.ms;
    d->engine_round_ms = 0; /* no longer measured: engine_burst_ms */
    d->engine_burst_ms = best.burst_ms;
    d->engine_spread = best.ms > 0 ? (hi - lo) / best.ms : -1.0;
    d->engine_attempts = attempts;
    d->engine_starts = 1;
    d->engine_pred_ms = cost.total_ms;
    d->engine_factor = cost.total_ms > 0 ? d->engine_ms / cost.total_ms : -1.0;
    char note[96] = "", tries[96] = "";
    if (paced)
        snprintf(note, sizeof note, " (single steps' CPU time after an idle spell: %.2f)",
                 d->engine_burst_ms);
    snprintf(tries, sizeof tries, ", the median of %d attempts at %.2f-%.2f", attempts, lo, hi);
    HR_LOG_INFO(HR_PROF_TAG,
                "engine probe: %d layer%s, %d thread%s, %d steps%s in %.2f s: %.2f ms per step%s "
                "(its steps' spread %.0f%%%s), rates predict %.2f (x%.2f)",
                nl, nl > 1 ? "s" : "", cp.n_threads, cp.n_threads > 1 ? "s" : "", steps,
                paced ? " back to back (a CPU quota)" : "", dt, d->engine_ms, note,
                100.0 * best.spread, tries, cost.total_ms, d->engine_factor);
done:
    free(h);
    free(h0);
    hr_ctx_destroy(c);
    return rc;
}

double hr_prof_probe_window_s(const hr_prof_device *d) {
    double w = d->cpu_period_ms > 0 ? 10 * d->cpu_period_ms * 1e-3 : 0.3;
    return w < 0.3 ? 0.3 : w > 2.0 ? 2.0 : w;
}
