/* head_adapt.c - adaptive plans (control thread, dev_mu held): the head
 * compares every ring member's measured ms per decode round (heartbeats;
 * its own from a->st) with the plan's prediction (pred_ms_round). A device
 * that stays more than HR_ADAPT_OFF off for HR_ADAPT_WINDOW_S (consecutive
 * fresh samples, after a warm-up under each plan) gets its CPU rates
 * scaled by what was measured (rate_scale, shown in the status) and the
 * scheduler plans again. When the new rates change the plan, the head
 * re-plans between tokens: the generating thread leaves the running
 * request's plan, waits for the new one and replays the token history on
 * it (batch.c, as after a lost device), so the answer stays the same. When
 * they do not change it, or the new plan is not predicted HR_ADAPT_GAIN
 * (15%) faster than the plan in use at the same rates, or the running
 * request's remaining tokens would gain less than its replay costs
 * (hr_adapt_replay_ms), only the predictions are updated; in the last case
 * the better plan replaces the old one once no request runs (adapt_idle).
 * A re-plan also waits until the slowdown behind it has lasted
 * HR_ADAPT_HOLD_S (10 s): a noisy neighbour that comes and goes moves no
 * layers. The exception is a device HR_ADAPT_FAST (1.5x) off for the whole
 * window (a game that takes half its CPU is no noise): it re-plans at
 * once, but only once per HR_ADAPT_FAST_EVERY_S (60 s) for that device,
 * so a neighbour on one device skips the hold at most once a minute
 * (hr_head_adapt_hold_s); another device's turn is its own (a warm-up
 * re-plan that moved every layer onto a device held the re-plan away from
 * it when a hog started there 14 s later for the full 10 s). Decisions are at
 * least HR_ADAPT_HOLDOFF_S apart, except that such a device does not wait
 * for one that only updated predictions (hr_head_adapt_gap_s: a warm-up
 * rate update 1-3 s before a hog held its re-plan 8-10 s); after one the device matches its new
 * prediction, and it re-plans back by the same rule when it gets faster
 * again (the hog stops). When every device measured in the ring errs the
 * same way, the devices not yet measured take the mildest of their
 * corrections (hr_head_adapt_bias). Never with --windows, and never on the rounds of
 * a device that streams from disk (its CPU rates would take the blame for
 * the disk). */
#include "agent/head-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "head"

#define HR_ADAPT_OFF 0.30          /* |measured / predicted - 1| above this is off */
#define HR_ADAPT_WINDOW_S 2.0      /* off for at least this long ... */
#define HR_ADAPT_MIN_SAMPLES 2     /* ... in at least this many consecutive fresh samples */
#define HR_ADAPT_WARMUP_TOKENS 3   /* decode tokens under a plan before its rounds count */
#define HR_ADAPT_STALE_S 5.0       /* no fresh round for this long ends a streak (idle) */
#define HR_ADAPT_HOLDOFF_S 10.0    /* at least this long between two adaptive decisions */
#define HR_ADAPT_GAIN 0.15         /* a new plan must be predicted this much faster */
#define HR_ADAPT_HOLD_S 10.0       /* ... with the slowdown behind it lasting this long */
#define HR_ADAPT_FAST 1.5          /* a device this far off its prediction (either way) ... */
#define HR_ADAPT_FAST_EVERY_S 60.0 /* ... is not held, once per this */
#define HR_ADAPT_DISK_OFF 0.15     /* a pump's read rate this far off the plan's ... */
#define HR_ADAPT_DISK_MIN_BYTES (64.0 * 1048576) /* ... over this much read: its disk rate */
#define HR_ADAPT_CPU_TOKENS 4   /* a device's CPU a token: over this many tokens' reads, */
#define HR_ADAPT_CPU_OFF 0.15   /* ... this far off the plan's: its reads' CPU per MB */
#define HR_ADAPT_CPU_MAX 4.0    /* ... at most this x its profile's */
#define HR_ADAPT_SCALE_MIN 0.02 /* bounds of rate_scale */
#define HR_ADAPT_SCALE_MAX 100.0

static double hr_dev_scale(const hr_dev *d) { return d->rate_scale > 0 ? d->rate_scale : 1.0; }

/* s within the bounds of rate_scale. */
static double hr_adapt_clamp_scale(double s) {
    return s < HR_ADAPT_SCALE_MIN   ? HR_ADAPT_SCALE_MIN
           : s > HR_ADAPT_SCALE_MAX ? HR_ADAPT_SCALE_MAX
                                    : s;
}

/* d's profile rates with its CPU times multiplied by scale. */
static void hr_dev_rates_at(const hr_dev *d, double scale, hr_sched_device *out) {
    *out = d->sd;
    out->expert_miss = d->ex_miss;       /* its measured routing, where it streams by expert */
    out->disk_bps = hr_head_disk_bps(d); /* its pump's measured rate, where adapted */
    if (d->read_cpu_ms_mb >= 0)          /* its runtime's CPU per MB read, where adapted */
        out->read_cpu_ms_mb = d->read_cpu_ms_mb;
    if (scale == 1.0)
        return;
    out->t_layer_ms *= scale; /* 0 (take decode_ms) stays 0 */
    out->t_head_ms *= scale;
    out->t_round_ms *= scale;
    for (int t = 0; t < out->n_thread_rates && t < HR_SCHED_MAX_THREADS; t++) {
        out->decode_ms[t] *= scale;
        out->prefill_ms[t] *= scale;
    }
}

double hr_head_expert_miss(const hr_hparams *hp, int keep, uint64_t routed, uint64_t hits) {
    if (hp->n_expert <= 0 || keep < 0 || routed < 512 || hits > routed)
        return 0; /* not streamed by expert, or too few routes to judge */
    double even = 1.0 - (double)keep / hp->n_expert, miss = 1.0 - (double)hits / routed;
    if (even < 0.01)
        return 0;
    double r = miss / even;
    return r < 0.25 ? 0.25 : r > 4.0 ? 4.0 : r;
}

void hr_head_pump_sample(hr_dev *d, uint32_t plan, double bytes, double s) {
    if (!(bytes >= 0 && s >= 0))
        return;
    if (d->pump_plan != plan || bytes < d->pump_bytes || s < d->pump_s) { /* or it restarted */
        d->pump_plan = plan;
        d->pump_base_bytes = bytes;
        d->pump_base_s = s;
    }
    d->pump_bytes = bytes;
    d->pump_s = s;
}

double hr_head_pump_rate(const hr_dev *d, double *bytes) {
    double b = d->pump_bytes - d->pump_base_bytes, s = d->pump_s - d->pump_base_s;
    if (bytes)
        *bytes = b > 0 ? b : 0;
    return b >= HR_PUMP_RATE_MIN && s > 0 ? b / s : NAN;
}

void hr_head_own_experts(hr_head *hd) {
    hr_stream_stats ss;
    hr_node_stream_stats(hd->a, &ss);
    hd->devs[0].ex_miss =
        hr_head_expert_miss(hr_model_hparams(hd->a->m), ss.ex_keep, ss.ex_routed, ss.ex_hits);
}

void hr_head_dev_rates(const hr_dev *d, hr_sched_device *out) {
    hr_dev_rates_at(d, hr_dev_scale(d), out);
}

static void hr_adapt_reset(hr_dev *d) {
    d->adapt_off = 0;
    d->adapt_since = 0;
}

/* d is off in at least n samples of the plan in use (a streak of an
 * earlier plan, or of a device the plan left out, does not count). A
 * device that streams its layers from disk every token is not judged by
 * its CPU rates: its rounds wait for the disk, and scaling its CPU times
 * by them would plan it as a CPU tens of times slower than it is. */
static bool hr_adapt_off(const hr_head *hd, const hr_dev *d, int n) {
    return !d->lost && d->adapt_plan == hd->plan_id && d->ring_pos >= 0 && d->layers > 0 &&
           !d->overloaded && d->pred_ms_round > 0 && d->adapt_off >= n;
}

void hr_head_adapt_sample(hr_head *hd, int di, uint32_t plan_id, double ms, uint64_t rounds,
                          double ms_total) {
    hr_dev *d = &hd->devs[di];
    double now = hr_now_s();
    if (plan_id != hd->plan_id || d->adapt_plan != plan_id) { /* a new plan: start over */
        d->adapt_plan = plan_id;
        d->adapt_rounds = 0;
        d->adapt_ms_total = 0;
        d->adapt_ratio = 0;
        d->adapt_seen = now;
        hr_adapt_reset(d);
        if (plan_id != hd->plan_id)
            return;
    }
    if (d->ring_pos < 0 || d->layers <= 0 || d->pred_ms_round <= 0)
        return;
    if (rounds <= d->adapt_rounds) { /* idle: a streak does not outlive the request */
        if (d->adapt_off && now - d->adapt_seen > HR_ADAPT_STALE_S)
            hr_adapt_reset(d);
        return;
    }
    /* the mean of the rounds since the last sample (no EMA lag), else the EMA */
    double mean = ms_total > d->adapt_ms_total && d->adapt_rounds > 0
                      ? (ms_total - d->adapt_ms_total) / (double)(rounds - d->adapt_rounds)
                      : ms;
    bool warm =
        d->adapt_rounds >= (uint64_t)(HR_ADAPT_WARMUP_TOKENS * (hd->plan_k > 0 ? hd->plan_k : 1));
    /* the rounds of this sample ran since the last one (after an idle
     * gap: count them from now) */
    double prev = now - d->adapt_seen > HR_ADAPT_STALE_S ? now : d->adapt_seen;
    d->adapt_rounds = rounds;
    d->adapt_ms_total = ms_total;
    d->adapt_seen = now;
    if (!warm || mean <= 0)
        return; /* the first tokens of a plan (cold pages, the EMA settling) */
    d->adapt_rated = true;
    d->adapt_ratio = mean / d->pred_ms_round;
    if (fabs(d->adapt_ratio - 1.0) > HR_ADAPT_OFF) {
        if (d->adapt_off++ == 0)
            d->adapt_since = prev; /* off since its rounds began */
    } else {
        if (!(d->adapt_first > 0)) /* matched when first measured */
            d->adapt_first = hr_dev_scale(d);
        hr_adapt_reset(d);
    }
}

/* The unthrottled CPU ms behind a round of ms under d's CPU quota: the
 * inverse of the cost model's Q(x) = max(x, slope x - save), min(ms, (ms +
 * save) / slope); ms where it has none. */
double hr_adapt_unthrottled_ms(const hr_sched_device *sd, double ms) {
    if (!(sd->throttle_slope > 1.0) || !(ms > 0))
        return ms;
    double x = (ms + sd->throttle_save_ms) / sd->throttle_slope;
    return x < ms ? x : ms;
}

/* The scale that makes d's prediction what was measured: only the compute
 * part of the predicted round scales (its exposed disk time stays). Under
 * a CPU quota the scale is of its unthrottled CPU times, which the model
 * throttles again (Q): a round measured 2x its prediction past the
 * period's share is not a CPU 2x slower. */
static double hr_adapt_new_scale(const hr_dev *d) {
    double c = d->pred_compute_ms_round, e = d->pred_ms_round - c;
    double m = d->adapt_ratio * d->pred_ms_round - (e > 0 ? e : 0);
    double cu = hr_adapt_unthrottled_ms(&d->sd, c), mu = hr_adapt_unthrottled_ms(&d->sd, m);
    double f = cu > 0 ? mu / cu : 1.0;
    return hr_adapt_clamp_scale(hr_dev_scale(d) * (f > 0 ? f : HR_ADAPT_SCALE_MIN));
}

/* The cost model's bias on this machine: when the devices measured in a
 * ring since they joined (two at least) all erred the same way when first
 * measured (adapt_first, or scale[] for a device this decision rates for
 * the first time: all slower than their profiles, or all faster), a device
 * never measured is assumed to err as much as the mildest of them: no
 * better than the least-corrected measured device when they are slower (no
 * worse when faster). scale[] in place; why gets a note. Otherwise an
 * unmeasured device keeps its profile's rates while the measured ones were
 * scaled up 2-5x, and the next plan moves layers onto it (seen: all 22
 * layers on the node left out, which then measured 2.6x its prediction).
 * Only first measurements count: a device that matched its prediction
 * before a hog (or any later load) slowed it is evidence of a load, not of
 * the model's bias. Seen with the current scales instead: a hog in one
 * device of two cores slowed the other device too (x4.03 its prediction,
 * the hog's loop sharing its core), the device left out got x2.34, and the
 * re-plan kept the hogged device (0.43 of a fresh plan). A hog on one
 * device leaves the others on their profiles (scale 1), and moves nothing
 * here. */
void hr_head_adapt_bias(const hr_head *hd, double *scale, char *why, size_t cap, size_t *wl) {
    int n_rated = 0;
    double lo = INFINITY, hi = 0; /* the measured devices' scales */
    for (int i = 0; i < hd->n_devs; i++) {
        const hr_dev *d = &hd->devs[i];
        if (d->lost || !d->adapt_rated)
            continue;
        n_rated++;
        double first = d->adapt_first > 0 ? d->adapt_first : scale[i];
        lo = fmin(lo, first);
        hi = fmax(hi, first);
    }
    double f = n_rated < 2 ? 1.0 : lo > 1 ? lo : hi < 1 ? hi : 1.0;
    if (f == 1.0)
        return;
    int n = 0;
    for (int i = 0; i < hd->n_devs; i++) {
        const hr_dev *d = &hd->devs[i];
        if (d->lost || d->adapt_rated)
            continue;
        double s = hr_adapt_clamp_scale(f > 1 ? fmax(scale[i], f) : fmin(scale[i], f));
        if (s != scale[i])
            n++;
        scale[i] = s;
    }
    if (n && *wl < cap)
        *wl += (size_t)snprintf(why + *wl, cap - *wl,
                                "; every device measured in the ring was %s than its profile: "
                                "the %d not yet measured x%.3g too",
                                f > 1 ? "slower" : "faster", n, f);
}

/* The scheduler's plan over the devices not lost (the candidates
 * hr_head_replan takes) at rates scale[] into *out, and the plan in use
 * at the same rates into *cur (cur->status HR_EINVAL when it does not
 * apply to these candidates); HR_E* with err. */
static int hr_adapt_solve(hr_head *hd, const double *scale, int *cand, int *n_out,
                          hr_sched_plan *out, hr_sched_plan *cur, char err[HR_ERR_LEN]) {
    const hr_agent *a = hd->a;
    hr_sched_device sd[HR_AGENT_MAX_DEV];
    int n = 0;
    for (int i = 0; i < hd->n_devs; i++) {
        if (hd->devs[i].lost)
            continue;
        if (!hd->devs[i].has_sched)
            return hr_seterr(err, HR_EINVAL, "no profile from '%.64s'", hd->devs[i].name);
        hr_dev_rates_at(&hd->devs[i], scale[i], &sd[n]);
        sd[n].is_head = n == 0;
        cand[n++] = i;
    }
    *n_out = n;
    hr_sched_model sm;
    hr_sched_opts so = hr_sched_opts_default();
    so.k_fixed = a->p.k;
    so.k_max = HR_AGENT_MAX_K;                                       /* the rounds a device runs */
    so.use_gpu = !hr_hparams_cpu_only(hr_model_hparams(a->m), true); /* experts, gemma3 */
    int rc = hr_prof_to_sched_model(&hd->pm, hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx),
                                    &sm, err);
    if (rc || (rc = hr_sched_solve(&sm, sd, n, &so, out, err)))
        return rc;
    hd->adapt_layer_bytes = sm.layer_bytes;
    int win[HR_AGENT_MAX_K * HR_AGENT_MAX_DEV], ng[HR_AGENT_MAX_DEV];
    char e2[HR_ERR_LEN];
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < hd->plan_k && r < HR_AGENT_MAX_K; r++)
            win[r * n + i] = hd->devs[cand[i]].win[r];
        ng[i] = hd->devs[cand[i]].n_gpu;
    }
    if (hr_sched_evaluate_rounds(&sm, sd, n, &so, hd->plan_k, win, ng, cur, e2) != 0)
        cur->status = HR_EINVAL;
    return 0;
}

int hr_head_windows_computed(const int *win, int k) {
    int n = 0;
    for (int r = 0; r < k; r++)
        n += win[r] > 0;
    return n > 0 ? n : 1;
}

/* Only the rates changed: the plan in use, with predictions at them. */
static void hr_adapt_repredict(hr_head *hd, const hr_sched_plan *np, const int *cand, int n) {
    for (int i = 0; i < n; i++) {
        hr_dev *d = &hd->devs[cand[i]];
        int n_win = hr_head_windows_computed(np->dev[i].win, np->k);
        d->pred_ms_round = (np->dev[i].compute_ms + np->dev[i].disk_exposed_ms) / n_win;
        d->pred_compute_ms_round = np->dev[i].compute_ms / n_win;
        d->pred_cpu_token = np->dev[i].cpu_ms;
        d->adapt_plan = 0; /* samples start over against the new predictions */
    }
    hd->sched = *np;
}

/* np gives every candidate the layers it has now. */
static bool hr_adapt_same(const hr_head *hd, const hr_sched_plan *np, const int *cand, int n) {
    bool same = np->k == hd->plan_k;
    for (int i = 0; i < n && same; i++)
        for (int r = 0; r < np->k && r < HR_AGENT_MAX_K && same; r++)
            same = np->dev[i].win[r] == hd->devs[cand[i]].win[r];
    return same;
}

/* What replaying the running requests on plan np costs (ms): batch.c
 * sends their history again, prompts in chunks of n_batch and generated
 * tokens as decode rows, n_batch a step, which cost about what a prompt
 * chunk of as many rows costs (measured: 32 rows of 4 TinyLlama-shape
 * Q4_0 layers on one thread, 55-64 ms as decode rows in one step, 48-71 ms
 * as a prompt chunk, 358-513 ms one a step). So each step passes the ring
 * once (np's ms per token) and each row costs every device its profile's
 * prefill rate for its layers. Where a device has no prefill rate, or np
 * runs GPU layers (which take generated tokens one a step), each
 * generated token costs np's ms per token. Either way a device that gains
 * layers reads them from its disk first (a mean layer's bytes at its disk
 * rate each; measured in the interference lab: 65 positions replayed in
 * 3.0 s, where 16 new layers of ~28 MB came in at ~150 MB/s). */
static double hr_adapt_replay_ms(const hr_head *hd, const hr_sched_plan *np, const int *cand, int n,
                                 const double *scale) {
    int done = atomic_load(&hd->gen_done), hist = atomic_load(&hd->gen_hist);
    int nb = hd->a->p.n_batch > 0 ? hd->a->p.n_batch : 64;
    double row_ms = 0, load_ms = 0;
    bool rated = hist >= done && done >= 0;
    for (int i = 0; i < n; i++) {
        const hr_sched_dev_plan *dp = &np->dev[i];
        const hr_dev *d = &hd->devs[cand[i]];
        int gained = dp->active ? dp->layers - (d->ring_pos >= 0 ? d->layers : 0) : 0;
        if (gained > 0 && d->sd.disk_bps > 0)
            load_ms += gained * hd->adapt_layer_bytes / d->sd.disk_bps * 1e3;
        if (!rated || !dp->active || dp->layers <= 0)
            continue;
        hr_sched_device sd;
        hr_dev_rates_at(d, scale[cand[i]], &sd);
        int t = dp->prefill_threads > 0 ? dp->prefill_threads : sd.n_thread_rates;
        double pf = t >= 1 && t <= sd.n_thread_rates ? sd.prefill_ms[t - 1] : 0;
        rated = dp->n_gpu == 0 && pf > 0 && isfinite(pf);
        row_ms += dp->layers * pf / HR_PROF_PREFILL_BATCH;
    }
    if (!rated)
        return load_ms + done * np->latency_ms;
    int prompt = hist - done, steps = (prompt + nb - 1) / nb + (done + nb - 1) / nb;
    return load_ms + steps * np->latency_ms + hist * row_ms;
}

/* np weighed against the plan in use (cur: at the same rates). */
typedef struct {
    bool same; /* np gives every candidate the layers it has now */
    bool keep; /* hysteresis: the plan in use stays */
    bool idle; /* ... only because the running requests' replay costs more than it gains */
    int left;  /* tokens still to come */
    double gain_ms, replay_ms;
} hr_adapt_weight;

/* Hysteresis: the plan in use stays when np is the same plan, is not
 * predicted HR_ADAPT_GAIN faster than it, or the replay of the running
 * requests (hr_adapt_replay_ms) costs more than the tokens still to come
 * gain. */
static hr_adapt_weight hr_adapt_weigh(const hr_head *hd, const hr_sched_plan *np,
                                      const hr_sched_plan *cur, const int *cand, int n,
                                      const double *scale) {
    hr_adapt_weight w = {.same = hr_adapt_same(hd, np, cand, n),
                         .left = atomic_load(&hd->gen_left),
                         .replay_ms = hr_adapt_replay_ms(hd, np, cand, n, scale)};
    w.gain_ms = cur->status == 0 ? w.left * (cur->latency_ms - np->latency_ms) : INFINITY;
    bool slower = cur->status == 0 && np->latency_ms > (1.0 - HR_ADAPT_GAIN) * cur->latency_ms;
    bool costly = atomic_load(&hd->gen_done) > 0 && w.gain_ms < w.replay_ms;
    w.keep = w.same || slower || costly;
    w.idle = !w.same && !slower && costly && cur->status == 0;
    return w;
}

/* The adaptive re-plan: the generating thread, if a request runs, leaves
 * the plan in use between tokens and replays on the new one. */
static void hr_adapt_begin(hr_head *hd) {
    hd->n_adapt++;
    hd->adapt_from = hd->plan_id;
    hd->adapt_idle = false;
    hd->replan = true;
    hd->ready = false;
    atomic_store(&hd->adapt, hd->plan_id);
}

/* s since d's last re-plan not held (INFINITY: none). */
static double hr_adapt_since_fast(const hr_dev *d, double now) {
    return d->adapt_fast_at > 0 ? now - d->adapt_fast_at : INFINITY;
}

double hr_head_adapt_hold_s(double off, double since_fast_s) {
    bool far = off >= HR_ADAPT_FAST || (off > 0 && off <= 1.0 / HR_ADAPT_FAST);
    return far && since_fast_s >= HR_ADAPT_FAST_EVERY_S ? 0.0 : HR_ADAPT_HOLD_S;
}

/* d has been off for the whole window (HR_ADAPT_WINDOW_S, in at least
 * HR_ADAPT_MIN_SAMPLES samples): its rates are rescaled by a decision. */
static bool hr_adapt_off_window(const hr_head *hd, const hr_dev *d, double now) {
    return hr_adapt_off(hd, d, HR_ADAPT_MIN_SAMPLES) && now - d->adapt_since >= HR_ADAPT_WINDOW_S;
}

bool hr_head_adapt_due(const hr_head *hd, double now, double *held, double *hold) {
    /* a device off for the whole window decides; every device off for the
     * whole window by then is rescaled with it (one off for less is not:
     * a hog's first second on two cores slowed another device x3.45 for
     * 0.8 s, the re-plan left it out at x2.58 and ran at 0.80 of a fresh
     * plan) */
    bool due = false;
    *held = 0;
    *hold = HR_ADAPT_HOLD_S;
    for (int i = 0; i < hd->n_devs; i++) {
        const hr_dev *d = &hd->devs[i];
        if (hr_adapt_off_window(hd, d, now)) {
            due = true;
            *held = fmax(*held, now - d->adapt_since);
            *hold = fmin(*hold, hr_head_adapt_hold_s(d->adapt_ratio, hr_adapt_since_fast(d, now)));
        }
    }
    return due;
}

double hr_head_adapt_gap_s(bool moved, double hold_s) {
    return moved || !(hold_s <= 0) ? HR_ADAPT_HOLDOFF_S : 0.0;
}

/* The disks of the devices that stream: where a pump has read at least
 * HR_ADAPT_DISK_MIN_BYTES under the plan in use at a rate more than
 * HR_ADAPT_DISK_OFF off the rate the plan took, that measured rate becomes
 * the device's disk rate (disk_scale). It is how the runtime reads (the
 * pump's tails, beside the ring's compute and the other devices' reads),
 * which a profile's disk test, run alone, does not see. Returns how many
 * changed, described in why. */
int hr_head_adapt_disk(hr_head *hd, char *why, size_t cap, size_t *wl) {
    int n = 0;
    for (int i = 0; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        double bytes = 0, r = hr_head_pump_rate(d, &bytes);
        if (d->lost || d->ring_pos < 0 || !d->has_sched || !(d->sd.disk_bps > 0) ||
            d->pump_plan != hd->plan_id || !(bytes >= HR_ADAPT_DISK_MIN_BYTES) || !(r > 0))
            continue;
        double was = hr_head_disk_bps(d);
        if (fabs(r / was - 1.0) <= HR_ADAPT_DISK_OFF)
            continue;
        d->disk_scale = r / d->sd.disk_bps;
        n++;
        if (*wl < cap)
            *wl += (size_t)snprintf(why + *wl, cap - *wl,
                                    "%sdevice '%.40s' read %.0f MiB at %.0f MB/s, planned at %.0f: "
                                    "its disk rate x%.3g of its profile",
                                    *wl ? "; " : "", d->name, bytes / 1048576.0, r / 1e6, was / 1e6,
                                    d->disk_scale);
    }
    return n;
}

double hr_head_read_cpu(const hr_dev *d) {
    return d->read_cpu_ms_mb >= 0 ? d->read_cpu_ms_mb : d->sd.read_cpu_ms_mb;
}

/* The CPU of the devices that stream under a CPU quota: where one has read
 * at least HR_ADAPT_DISK_MIN_BYTES and HR_ADAPT_CPU_TOKENS tokens' reads
 * under the plan in use and its process spent more than HR_ADAPT_CPU_OFF
 * off the CPU a token the plan predicts (its windows' compute, its reads',
 * the head's output head), the difference is put on its reads: its CPU per MB read becomes what
 * makes the two agree. Streaming through the page cache under a memory limit costs the reader more
 * than a profile's read of a cold file (faults, the limit's reclaim, dropping what was computed),
 * and a quota caps compute and reads together. Under one plan a device's figure is taken again only
 * over twice the reads it was last taken over: the figure settles as it accumulates, and noise
 * early on is not chased. Returns how many changed, described in why. */
int hr_head_adapt_read_cpu(hr_head *hd, char *why, size_t cap, size_t *wl) {
    int n = 0;
    int k = hd->plan_k > 0 ? hd->plan_k : 1;
    for (int i = 0; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        double bytes = 0;
        (void)hr_head_pump_rate(d, &bytes);
        if (d->lost || d->ring_pos < 0 || !d->has_sched || !(d->sd.throttle_slope > 0) ||
            d->cpu_plan != hd->plan_id || d->pump_plan != hd->plan_id ||
            (d->cpu_adapt_plan == hd->plan_id && !(bytes >= 2 * d->cpu_adapt_bytes)) ||
            !(bytes >= HR_ADAPT_DISK_MIN_BYTES) ||
            !(bytes >= HR_ADAPT_CPU_TOKENS * d->pred_read_token) || !(d->meas_cpu_round > 0) ||
            !(d->pred_cpu_token > 0) || !(d->pred_read_token >= 1048576))
            continue;
        double meas = d->meas_cpu_round * hr_head_windows_computed(d->win, k);
        if (fabs(meas / d->pred_cpu_token - 1.0) <= HR_ADAPT_CPU_OFF)
            continue;
        /* at most HR_ADAPT_CPU_MAX x its profile's figure (or
         * HR_ADAPT_CPU_MAX ms per MB where it has none): CPU the model
         * misses elsewhere is not put on a few MB of reads */
        double was = hr_head_read_cpu(d), prof = d->sd.read_cpu_ms_mb;
        double most = prof > 0 ? HR_ADAPT_CPU_MAX * prof : HR_ADAPT_CPU_MAX;
        double now = was + (meas - d->pred_cpu_token) / (d->pred_read_token / 1e6);
        now = now < 0 ? 0 : now > most ? most : now;
        if (fabs(now - was) < 1e-3)
            continue;
        d->read_cpu_ms_mb = now;
        d->cpu_adapt_plan = hd->plan_id;
        d->cpu_adapt_bytes = bytes;
        n++;
        if (*wl < cap)
            *wl += (size_t)snprintf(why + *wl, cap - *wl,
                                    "%sdevice '%.40s' spent %.0f ms of CPU a token, planned %.0f: "
                                    "its reads' CPU %.3g ms per MB (was %.3g)",
                                    *wl ? "; " : "", d->name, meas, d->pred_cpu_token, now, was);
    }
    return n;
}

void hr_head_adapt_check(hr_head *hd) {
    hr_agent *a = hd->a;
    double now = hr_now_s();
    if (hd->adapt_idle && hd->ready && !hd->replan && !hd->lost_di && !atomic_load(&hd->adapt) &&
        atomic_load(&hd->gen_hist) == 0) { /* the ring is idle: nothing to replay */
        hr_adapt_begin(hd);
        hd->adapt_at = now;
        hd->adapt_moved = true;
        HR_LOG_WARN(TAG, "adaptive re-plan of plan %u, kept while a request ran: %s", hd->plan_id,
                    hd->adapt_reason);
        size_t l = strlen(hd->adapt_reason);
        snprintf(hd->adapt_reason + l, sizeof hd->adapt_reason - l, "; re-planned when idle");
        return;
    }
    if (now - hd->adapt_head_at >= a->p.hb_interval_ms / 1000.0) { /* the head's own sample */
        hd->adapt_head_at = now;
        hr_lock(&a->st.mu, HR_RANK_STATS);
        double ms = a->st.ms_round;
        uint64_t rounds = a->st.rounds;
        double ms_total = a->st.ms_total;
        uint32_t pid = a->st.plan_id;
        hr_unlock(&a->st.mu, HR_RANK_STATS);
        hr_head_adapt_sample(hd, 0, pid, ms, rounds, ms_total);
        hr_stream_stats ss; /* its own pump and CPU, as a heartbeat brings a worker's */
        hr_node_stream_stats(a, &ss);
        hr_head_pump_sample(&hd->devs[0], hd->plan_id, ss.pump_bytes, ss.pump_s);
        hd->devs[0].meas_cpu_round = ss.cpu_round;
        hd->devs[0].cpu_plan = hd->plan_id;
    }
    if (atomic_load(&hd->adapt) || !hd->have_sched || hd->replan || hd->lost_di || !hd->ready)
        return;
    char why[sizeof hd->adapt_reason] = "";
    size_t wl = 0;
    /* a disk measured off its rate: predictions at once (a plan forced
     * with --windows keeps its windows, its predictions follow) */
    int n_disk = hr_head_adapt_disk(hd, why, sizeof why, &wl);
    /* a device's reads' CPU: predictions only, the plan stays (a re-plan on
     * it alone chose plans that measured slower on five-small) */
    int n_cpu = hr_head_adapt_read_cpu(hd, why, sizeof why, &wl);
    bool cpu_only = n_cpu > 0 && n_disk == 0;
    n_disk += n_cpu;
    if (a->p.windows && !n_disk)
        return;
    double held = 0, hold = 0;
    bool due = !a->p.windows && hr_head_adapt_due(hd, now, &held, &hold);
    if (!due && !n_disk) { /* a streak that ended cancels a pending look */
        hd->adapt_recheck_at = 0;
        return;
    }
    if (n_disk) {
        held = hold; /* a rate measured over this many bytes is no passing noise */
    } else {
        /* decisions HR_ADAPT_HOLDOFF_S apart, except a far-off device after one
         * that only updated predictions (hr_head_adapt_gap_s) */
        if (hd->adapt_at > 0 && now - hd->adapt_at < hr_head_adapt_gap_s(hd->adapt_moved, hold))
            return;
        /* a better plan waits for its hold, unless the device is far off now */
        if (hd->adapt_recheck_at > 0 && now < hd->adapt_recheck_at && held < hold)
            return;
    }
    hd->adapt_recheck_at = 0;
    double scale[HR_AGENT_MAX_DEV];
    int n_off = 0;
    bool far[HR_AGENT_MAX_DEV] = {false}; /* off enough to skip the hold now */
    for (int i = 0; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        scale[i] = hr_dev_scale(d);
        if (!due || !hr_adapt_off_window(hd, d, now))
            continue;
        scale[i] = hr_adapt_new_scale(d);
        far[i] = hr_head_adapt_hold_s(d->adapt_ratio, hr_adapt_since_fast(d, now)) <= 0;
        n_off++;
        if (wl < sizeof why)
            wl += (size_t)snprintf(
                why + wl, sizeof why - wl,
                "%sdevice '%.40s' measured %.2f ms/round, predicted %.2f (x%.2f) for %.1f s: CPU "
                "rates x%.3g of its profile (was x%.3g)",
                wl ? "; " : "", d->name, d->adapt_ratio * d->pred_ms_round, d->pred_ms_round,
                d->adapt_ratio, now - d->adapt_since, scale[i], hr_dev_scale(d));
    }
    if (!n_off && !n_disk)
        return;
    if (n_off)
        hr_head_adapt_bias(hd, scale, why, sizeof why, &wl);
    hr_sched_plan *np = malloc(2 * sizeof *np), *cur = np ? np + 1 : NULL;
    int cand[HR_AGENT_MAX_DEV], n = 0;
    char err[HR_ERR_LEN] = "out of memory";
    double c0 = hr_clock_s(CLOCK_THREAD_CPUTIME_ID);
    int rc = np ? hr_adapt_solve(hd, scale, cand, &n, np, cur, err) : HR_ENOMEM;
    hr_head_cpu_aside(a, c0);
    hr_adapt_weight w =
        rc == 0 ? hr_adapt_weigh(hd, np, cur, cand, n, scale) : (hr_adapt_weight){0};
    if (rc == 0 && (a->p.windows || (cpu_only && !n_off))) { /* the plan in use, new rates */
        w.keep = true;
        w.same = w.idle = false;
        if (cur->status != 0) {
            free(np);
            return;
        }
    }
    if (rc == 0 && !w.keep && held < hold) {
        /* a better plan, but its cause is young (a noisy neighbour comes
         * and goes): look again when it has held long enough; the samples
         * go on, a streak that ends cancels it */
        hd->adapt_recheck_at = now + (hold - held);
        HR_LOG_DEBUG(TAG,
                     "adaptive plan: %s; a plan %.1f ms/token faster is predicted: re-plan if "
                     "that holds for %.0f s",
                     why, cur->latency_ms - np->latency_ms, hold);
        free(np);
        return;
    }
    hd->adapt_at = now;
    for (int i = 0; i < hd->n_devs; i++)
        hr_adapt_reset(&hd->devs[i]);
    if (rc) { /* keep the plan and the rates in use */
        HR_LOG_WARN(TAG, "adaptive plan: %s; no plan at the measured rates (%s): plan %u stays",
                    why, err, hd->plan_id);
        free(np);
        return;
    }
    for (int i = 0; i < hd->n_devs; i++) {
        hd->devs[i].rate_scale = scale[i];
        if (hd->devs[i].adapt_rated && !(hd->devs[i].adapt_first > 0))
            hd->devs[i].adapt_first = scale[i]; /* its first decision */
    }
    char gain[192] = "";
    if (cur->status == 0)
        snprintf(gain, sizeof gain,
                 "; at these rates plan %u predicts %.1f ms/token, the best plan %.1f (%d tokens "
                 "to come gain %.1f s, replaying %d positions costs %.1f s, estimated)",
                 hd->plan_id, cur->latency_ms, np->latency_ms, w.left, w.gain_ms / 1000.0,
                 atomic_load(&hd->gen_hist), w.replay_ms / 1000.0);
    /* kept only because this request's replay costs more than it gains:
     * the better plan replaces it once the ring is idle */
    hd->adapt_idle = w.idle;
    if (w.keep) {
        hr_adapt_repredict(hd, w.same ? np : cur, cand, n);
        hd->n_rescaled++;
        hd->adapt_moved = false;
        HR_LOG_INFO(TAG, "adaptive plan: %s%s; plan %u stays%s", why, gain, hd->plan_id,
                    hd->adapt_idle ? " until the ring is idle" : " (predictions updated)");
        snprintf(hd->adapt_reason, sizeof hd->adapt_reason, "plan %u kept%s: %.500s%.250s",
                 hd->plan_id, hd->adapt_idle ? " until the ring is idle" : ", predictions updated",
                 why, gain);
    } else {
        hr_adapt_begin(hd);
        hd->adapt_moved = true;
        if (held < HR_ADAPT_HOLD_S) /* not held: the far-off devices' one a minute */
            for (int i = 0; i < hd->n_devs; i++)
                if (far[i])
                    hd->devs[i].adapt_fast_at = now;
        HR_LOG_WARN(TAG, "adaptive re-plan of plan %u: %s%s", hd->plan_id, why, gain);
        snprintf(hd->adapt_reason, sizeof hd->adapt_reason, "re-plan of plan %u: %.500s%.250s",
                 hd->plan_id, why, gain);
    }
    free(np);
}

void hr_head_adapt_planned(hr_head *hd, int rc) {
    for (int i = 0; i < hd->n_devs; i++) /* measured against the old plan */
        hr_adapt_reset(&hd->devs[i]);
    hd->adapt_idle = false; /* a new plan, at the rates of now */
    unsigned from = atomic_exchange(&hd->adapt, 0);
    if (!from)
        return;
    if (rc == 0) {
        HR_LOG_INFO(TAG, "adaptive re-plan: plan %u replaces plan %u", hd->plan_id, from);
        hd->adapt_to = hd->plan_id;
    }
}

void hr_head_adapt_dev_status(const hr_dev *d, hr_status_dev *out) {
    out->rate_scale = hr_dev_scale(d);
    out->meas_pred_ratio = d->adapt_ratio;
}

void hr_head_adapt_status(const hr_head *hd, double now, hr_status_adapt *out) {
    out->replans = hd->n_adapt;
    out->rescaled = hd->n_rescaled;
    out->pending = atomic_load(&hd->adapt) != 0;
    snprintf(out->last, sizeof out->last, "%s", hd->adapt_reason);
    out->last_age_s = hd->adapt_at > 0 ? now - hd->adapt_at : -1.0;
    out->from_plan = hd->adapt_from;
    out->to_plan = hd->adapt_to;
    out->threshold = HR_ADAPT_OFF;
    out->window_s = HR_ADAPT_WINDOW_S;
    out->holdoff_s = HR_ADAPT_HOLDOFF_S;
}
