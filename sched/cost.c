/* cost.c - input validation, the closed-form cost model of sched.h, the
 * brute-force search used to verify the solver, and thread-count choice. */
#include "sched/sched-impl.h"

#include "common/error.h"
#include "common/sync.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

double hr_sched_now_ms(void) { return hr_now_s() * 1e3; }

hr_sched_opts hr_sched_opts_default(void) {
    hr_sched_opts o;
    memset(&o, 0, sizeof o);
    o.overlap = HR_SCHED_OVERLAP_MAX;
    o.use_gpu = true;
    o.thread_tol = 0.03;
    o.time_limit_s = 10.0;
    o.max_enum = 5e7;
    o.uneven_rounds = true;
    return o;
}

hr_sched_device hr_sched_device_default(void) {
    hr_sched_device d;
    memset(&d, 0, sizeof d);
    d.os = HR_SCHED_OS_LINUX;
    return d;
}

int hr_sched_plan_fail(hr_sched_plan *plan, int code, const char *msg) {
    if (plan) {
        memset(plan, 0, sizeof *plan);
        plan->status = code;
        plan->latency_ms = INFINITY;
        snprintf(plan->explanation, sizeof plan->explanation, "%s", msg ? msg : hr_strerror(code));
    }
    return code;
}

double hr_sched_hop_ms(double rtt_ms, double link_bps, double rtt_bytes, double hidden_bytes) {
    /* the round trip carried rtt_bytes of the hidden state each way already */
    double extra = hidden_bytes > rtt_bytes ? hidden_bytes - rtt_bytes : 0.0;
    return rtt_ms / 2.0 + (link_bps > 0.0 ? 1e3 * extra / link_bps : 0.0);
}

int hr_sched_pick_threads(const double *ms, int n, double tol) {
    if (!ms || n <= 0)
        return 0;
    if (n > HR_SCHED_MAX_THREADS)
        n = HR_SCHED_MAX_THREADS;
    if (!(tol >= 0.0) || !isfinite(tol))
        tol = 0.0;
    double best = INFINITY;
    for (int t = 0; t < n; t++)
        if (ms[t] > 0.0 && isfinite(ms[t]) && ms[t] < best)
            best = ms[t];
    if (!isfinite(best))
        return 0;
    for (int t = 0; t < n; t++)
        if (ms[t] > 0.0 && ms[t] <= best * (1.0 + tol))
            return t + 1;
    return 0;
}

/* ---------------------------------------------------------------- validation */

static const char *dev_label(const hr_sched_device *d, int i, char *buf, size_t cap) {
    if (d->name[0])
        snprintf(buf, cap, "device %d '%s'", i, d->name);
    else
        snprintf(buf, cap, "device %d", i);
    return buf;
}

static bool finite_ge0(double v) { return isfinite(v) && v >= 0.0; }

/* Both schemes: whole windows (expert_frac 0) and by expert (sched.h). */
static int stream_split(double window_bytes, int k, double room, double min_buffer, double ef,
                        double er, hr_sched_stream *out) {
    if (!out)
        return HR_EINVAL;
    memset(out, 0, sizeof *out);
    if (k < 1 || !finite_ge0(window_bytes) || !isfinite(room) || !finite_ge0(min_buffer) ||
        !(ef >= 0.0 && ef <= 1.0) || !finite_ge0(er) || er > 1.0)
        return HR_EINVAL;
    if (room < 0.0)
        room = 0.0;
    double T = k * window_bytes;
    if (T <= room) {
        out->resident = T;
        return 0;
    }
    out->streams = true;
    double buf, need;
    if (ef > 0.0) {
        /* the buffer holds one layer's always-read part and its routed
         * experts; the always-read part stays first, then experts */
        need = min_buffer * (1.0 - ef) + min_buffer * ef * er;
        buf = need < room ? need : room;
        out->resident = room - buf;
        double A = T * (1.0 - ef), X = T * ef;
        double a_read = A > out->resident ? A - out->resident : 0.0;
        double x_kept = out->resident > A ? out->resident - A : 0.0;
        out->read_round = (a_read + (X - x_kept) * er) / k;
    } else {
        /* k >= 2: one whole streamed part when it fits, else all the room
         * (nothing resident); k = 1: the smallest buffer, as every byte
         * beyond the room is read while the window is computed whatever
         * the buffer */
        buf = k >= 2 ? (T - room) / (k - 1) : min_buffer;
        if (buf > room)
            buf = room;
        out->resident = room - buf;
        out->read_round = (T - out->resident) / k;
        /* a buffer smaller than a window's streamed part slides over it,
         * and must hold the layer being computed */
        need = out->read_round < min_buffer ? out->read_round : min_buffer;
    }
    out->buffer = buf;
    return buf + 1e-9 * T < need ? HR_ERANGE : 0;
}

/* Windows of different sizes (sched.h hr_sched_stream_split_rounds); equal
 * ones take the closed form above. Experts: the closed form over the mean
 * window, each window reading in proportion to its bytes. */
static int split_rounds(const double *s, int n, double room, double mb, double ef, double er,
                        hr_sched_stream *out, double *read) {
    if (!out || !s || n < 1 || n > HR_SCHED_MAX_ROUNDS)
        return HR_EINVAL;
    memset(out, 0, sizeof *out);
    double T = 0.0, v[HR_SCHED_MAX_ROUNDS];
    int nz = 0;
    bool eq = true;
    for (int r = 0; r < n; r++) {
        if (!finite_ge0(s[r]))
            return HR_EINVAL;
        T += s[r];
        eq = eq && s[r] == s[0];
        if (s[r] > 0.0)
            v[nz++] = s[r];
    }
    int rc;
    if (eq || nz <= 1 || ef > 0.0) {
        /* equal windows, one window, or experts: the closed form over the
         * nz windows with bytes (all n when equal) */
        int m = eq ? n : nz > 0 ? nz : 1;
        rc = stream_split(eq ? s[0] : T / m, m, room, mb, ef, er, out);
        if (rc != 0 && rc != HR_ERANGE)
            return rc;
        double total = out->read_round * m;
        for (int r = 0; read && r < n; r++)
            read[r] = T > 0.0 ? total * s[r] / T : 0.0;
        out->read_round = total / n;
        return rc;
    }
    if (!isfinite(room))
        return HR_EINVAL;
    if (room < 0.0)
        room = 0.0;
    if (T <= room) {
        out->resident = T;
        for (int r = 0; read && r < n; r++)
            read[r] = 0.0;
        return 0;
    }
    out->streams = true;
    for (int a = 1; a < nz; a++) /* largest first (nz <= 64) */
        for (int b = a; b > 0 && v[b] > v[b - 1]; b--) {
            double t = v[b];
            v[b] = v[b - 1];
            v[b - 1] = t;
        }
    double cut;
    if (v[0] <= room) {
        /* cut + sum_r max(0, s_r - cut) = room: with the j largest above
         * the cut, cut = (sum of them - room) / (j - 1) */
        double top = v[0];
        for (int j = 2; j <= nz; j++) {
            top += v[j - 1];
            double c = (top - room) / (j - 1), next = j < nz ? v[j] : 0.0;
            cut = c;
            if (c >= next)
                break;
        }
        if (cut < 0.0)
            cut = 0.0;
        out->buffer = cut;
        out->resident = room - cut;
    } else {
        /* the largest window does not fit: it alone keeps a head, the
         * buffer takes the second largest (at most the room) and the
         * largest's tail slides through it; equal windows keep nothing */
        out->buffer = nz >= 2 && v[1] < room ? v[1] : room;
        out->resident = room - out->buffer;
        cut = v[0] - out->resident;
    }
    double total = 0.0;
    for (int r = 0; r < n; r++) {
        double t = s[r] < cut ? s[r] : cut;
        total += t;
        if (read)
            read[r] = t;
    }
    out->read_round = total / n;
    double need = cut < mb ? cut : mb; /* the layer being computed */
    return out->buffer + 1e-9 * T < need ? HR_ERANGE : 0;
}

int hr_sched_stream_split_rounds(const double *window_bytes, int n, double room, double min_buffer,
                                 double expert_frac, double expert_read, hr_sched_stream *out,
                                 double *read) {
    if (!finite_ge0(min_buffer) || !(expert_frac >= 0.0 && expert_frac <= 1.0) ||
        !finite_ge0(expert_read) || expert_read > 1.0)
        return HR_EINVAL;
    return split_rounds(window_bytes, n, room, min_buffer, expert_frac, expert_read, out, read);
}

int hr_sched_stream_split(double window_bytes, int k, double room, double min_buffer,
                          hr_sched_stream *out) {
    return stream_split(window_bytes, k, room, min_buffer, 0.0, 1.0, out);
}

int hr_sched_stream_split_experts(double window_bytes, int k, double room, double min_buffer,
                                  double expert_frac, double expert_read, hr_sched_stream *out) {
    return stream_split(window_bytes, k, room, min_buffer, expert_frac, expert_read, out);
}

static int check_rates(const double *r, int n, const char *what, const char *who, char *err) {
    for (int t = 0; t < n; t++)
        if (!finite_ge0(r[t]))
            return hr_seterr(err, HR_EINVAL, "%s: %s[%d] = %g must be a finite ms value >= 0", who,
                             what, t, r[t]);
    return 0;
}

static int check_device(hr_sched_ctx *c, const hr_sched_device *d, int i, int n_dev,
                        const hr_sched_opts *o, double hidden, char *err) {
    char who[HR_SCHED_NAME_LEN + 32];
    if (!memchr(d->name, '\0', sizeof d->name))
        return hr_seterr(err, HR_EINVAL, "device %d: name is not NUL-terminated", i);
    dev_label(d, i, who, sizeof who);
    if ((int)d->os < HR_SCHED_OS_LINUX || (int)d->os > HR_SCHED_OS_OTHER)
        return hr_seterr(err, HR_EINVAL, "%s: unknown os %d", who, (int)d->os);
    if (d->n_thread_rates < 0 || d->n_thread_rates > HR_SCHED_MAX_THREADS)
        return hr_seterr(err, HR_EINVAL, "%s: n_thread_rates = %d not in 0..%d", who,
                         d->n_thread_rates, HR_SCHED_MAX_THREADS);
    int rc = check_rates(d->prefill_ms, d->n_thread_rates, "prefill_ms", who, err);
    if (rc)
        return rc;
    if ((rc = check_rates(d->decode_ms, d->n_thread_rates, "decode_ms", who, err)))
        return rc;
    int pt = hr_sched_pick_threads(d->prefill_ms, d->n_thread_rates, o->thread_tol);
    int dt = hr_sched_pick_threads(d->decode_ms, d->n_thread_rates, o->thread_tol);
    double t = d->t_layer_ms;
    if (!finite_ge0(t))
        return hr_seterr(err, HR_EINVAL, "%s: t_layer_ms = %g must be finite and > 0", who, t);
    if (t == 0.0) {
        if (dt == 0)
            return hr_seterr(err, HR_EINVAL, "%s: t_layer_ms is 0 and no decode_ms is measured",
                             who);
        t = d->decode_ms[dt - 1];
    }
    struct {
        const char *name;
        double v;
    } nums[] = {{"mem_bytes", d->mem_bytes},   {"disk_bps", d->disk_bps},
                {"rtt_ms", d->rtt_ms},         {"link_bps", d->link_bps},
                {"rtt_bytes", d->rtt_bytes},   {"t_head_ms", d->t_head_ms},
                {"vram_bytes", d->vram_bytes}, {"t_layer_gpu_ms", d->t_layer_gpu_ms}};
    for (size_t j = 0; j < sizeof nums / sizeof nums[0]; j++)
        if (!finite_ge0(nums[j].v))
            return hr_seterr(err, HR_EINVAL, "%s: %s = %g must be finite and >= 0", who,
                             nums[j].name, nums[j].v);
    if (n_dev > 1 && d->link_bps <= 0.0)
        return hr_seterr(err, HR_EINVAL, "%s: link_bps must be > 0 in a ring of %d devices", who,
                         n_dev);
    bool gpu = o->use_gpu && d->vram_bytes > 0.0;
    if (gpu && d->t_layer_gpu_ms <= 0.0)
        return hr_seterr(err, HR_EINVAL, "%s: vram_bytes > 0 needs t_layer_gpu_ms > 0", who);
    c->d[i].t = t;
    if (!isfinite(d->t_round_ms) || fabs(d->t_round_ms) > 1e6)
        return hr_seterr(err, HR_EINVAL, "%s: t_round_ms = %g must be finite", who, d->t_round_ms);
    c->d[i].tr = d->t_round_ms;
    if (!finite_ge0(d->throttle_slope) || !finite_ge0(d->throttle_save_ms) ||
        (d->throttle_slope > 0.0 && d->throttle_slope < 1.0) || d->throttle_slope > 1e3)
        return hr_seterr(err, HR_EINVAL,
                         "%s: throttle_slope = %g (0 or 1..1000) and throttle_save_ms = %g (>= 0) "
                         "must be finite",
                         who, d->throttle_slope, d->throttle_save_ms);
    c->d[i].qs = d->throttle_slope > 1.0 ? d->throttle_slope : 0.0;
    c->d[i].qk = c->d[i].qs > 0.0 ? d->throttle_save_ms : 0.0;
    if (!finite_ge0(d->throttle_wait_ms) || d->throttle_wait_ms > 1e4)
        return hr_seterr(err, HR_EINVAL, "%s: throttle_wait_ms = %g must be finite, 0..10000", who,
                         d->throttle_wait_ms);
    c->d[i].qw = c->d[i].qs > 0.0 && n_dev > 1 ? d->throttle_wait_ms : 0.0;
    if (!finite_ge0(d->throttle_period_ms) || d->throttle_period_ms > 1e4)
        return hr_seterr(err, HR_EINVAL, "%s: throttle_period_ms = %g must be finite, 0..10000",
                         who, d->throttle_period_ms);
    c->d[i].qp = c->d[i].qw > 0.0 ? d->throttle_period_ms : 0.0;
    if (!finite_ge0(d->read_cpu_ms_mb) || d->read_cpu_ms_mb > 1e4)
        return hr_seterr(err, HR_EINVAL, "%s: read_cpu_ms_mb = %g must be finite, 0..10000", who,
                         d->read_cpu_ms_mb);
    c->d[i].rc = c->d[i].qs > 0.0 ? d->read_cpu_ms_mb * 1e-6 : 0.0;
    c->d[i].g = gpu ? d->t_layer_gpu_ms : 0.0;
    c->d[i].vram = gpu ? d->vram_bytes : 0.0;
    c->d[i].h = n_dev > 1 ? hr_sched_hop_ms(d->rtt_ms, d->link_bps, d->rtt_bytes, hidden) : 0.0;
    c->d[i].f = n_dev > 1 ? 1e3 * hidden / d->link_bps : 0.0;
    c->d[i].mem_eff = d->mem_bytes;
    c->d[i].disk = d->disk_bps;
    c->d[i].lru = d->os != HR_SCHED_OS_LINUX && d->os != HR_SCHED_OS_ANDROID;
    double miss = isfinite(d->expert_miss) && d->expert_miss > 0.0 ? d->expert_miss : 1.0;
    c->d[i].er = c->er * miss < 1.0 ? c->er * miss : 1.0;
    c->d[i].th_cpu = i == c->head ? d->t_head_ms : 0.0;
    c->d[i].th_alone = c->d[i].th_cpu;
    c->d[i].th = hr_sched_throttle_ms(c, i, c->d[i].th_cpu); /* a burst of its own in a ring */
    c->d[i].q0 = c->d[i].th_cpu;
    c->d[i].link_assumed = d->link_assumed;
    c->d[i].spread = isfinite(d->spread) && d->spread > 0.0 ? d->spread : 0.0;
    c->d[i].rtt_ms = d->rtt_ms;
    c->d[i].link_bps = d->link_bps;
    memcpy(c->d[i].name, d->name, sizeof c->d[i].name);
    c->d[i].prefill_threads = pt;
    c->d[i].decode_threads = dt;
    return 0;
}

int hr_sched_ctx_init(hr_sched_ctx *c, const hr_sched_model *m, const hr_sched_device *devs,
                      int n_dev, const hr_sched_opts *o, char *err) {
    memset(c, 0, sizeof *c);
    if (!m)
        return hr_seterr(err, HR_EINVAL, "scheduler: model is NULL");
    if (n_dev < 1)
        return hr_seterr(err, HR_EINVAL, "scheduler: no devices (n_dev = %d)", n_dev);
    if (n_dev > HR_SCHED_MAX_DEV)
        return hr_seterr(err, HR_EINVAL, "scheduler: %d devices, at most %d supported", n_dev,
                         HR_SCHED_MAX_DEV);
    if (!devs)
        return hr_seterr(err, HR_EINVAL, "scheduler: devices array is NULL");
    if (m->n_layer < 1 || m->n_layer > HR_SCHED_MAX_LAYER)
        return hr_seterr(err, HR_EINVAL, "scheduler: n_layer = %d not in 1..%d", m->n_layer,
                         HR_SCHED_MAX_LAYER);
    if (!(isfinite(m->layer_bytes) && m->layer_bytes > 0.0))
        return hr_seterr(err, HR_EINVAL, "scheduler: layer_bytes = %g must be finite and > 0",
                         m->layer_bytes);
    if (!finite_ge0(m->hidden_bytes) || !finite_ge0(m->kv_bytes_per_layer) ||
        !finite_ge0(m->output_bytes))
        return hr_seterr(err, HR_EINVAL,
                         "scheduler: hidden_bytes = %g, kv_bytes_per_layer = %g, output_bytes = "
                         "%g must be finite and >= 0",
                         m->hidden_bytes, m->kv_bytes_per_layer, m->output_bytes);
    if ((int)o->overlap != HR_SCHED_OVERLAP_MAX && (int)o->overlap != HR_SCHED_OVERLAP_SUM)
        return hr_seterr(err, HR_EINVAL, "scheduler: unknown overlap model %d", (int)o->overlap);
    if (!(o->thread_tol >= 0.0 && o->thread_tol <= 1.0) || !finite_ge0(o->time_limit_s) ||
        !(o->max_enum >= 0.0) || o->k_fixed < 0 || o->k_max < 0)
        return hr_seterr(err, HR_EINVAL,
                         "scheduler: bad options (thread_tol %g, time_limit_s %g, max_enum %g, "
                         "k_fixed %d, k_max %d)",
                         o->thread_tol, o->time_limit_s, o->max_enum, o->k_fixed, o->k_max);
    c->n = n_dev;
    c->L = m->n_layer;
    c->overlap = o->overlap;
    c->use_gpu = o->use_gpu;
    c->b = m->layer_bytes;
    c->ef = m->expert_frac > 0.0 && m->expert_frac <= 1.0 ? m->expert_frac : 0.0;
    c->er = m->expert_read > 0.0 && m->expert_read <= 1.0 ? m->expert_read : 1.0;
    c->kv = m->kv_bytes_per_layer;
    c->out = m->output_bytes;
    c->head = -1;
    for (int i = 0; i < n_dev; i++) {
        if (!devs[i].is_head)
            continue;
        if (c->head >= 0)
            return hr_seterr(err, HR_EINVAL, "scheduler: devices %d and %d are both marked head",
                             c->head, i);
        c->head = i;
    }
    if (c->head < 0)
        c->head = 0;
    for (int i = 0; i < n_dev; i++) {
        int rc = check_device(c, &devs[i], i, n_dev, o, m->hidden_bytes, err);
        if (rc)
            return rc;
    }
    char who[HR_SCHED_NAME_LEN + 32];
    c->d[c->head].mem_eff -= c->out;
    if (c->d[c->head].mem_eff < 0.0) {
        /* the output head's shortfall is streamed from the mapping every token */
        double short_b = -c->d[c->head].mem_eff;
        if (c->d[c->head].disk <= 0.0)
            return hr_seterr(err, HR_EINFEASIBLE,
                             "scheduler: head %s has %.3f GiB (%.0f bytes) but the output head "
                             "needs %.3f GiB (%.0f bytes) and it cannot stream the other %.0f "
                             "bytes from disk (disk_bps = 0)",
                             dev_label(&devs[c->head], c->head, who, sizeof who),
                             devs[c->head].mem_bytes / GIB, devs[c->head].mem_bytes, c->out / GIB,
                             c->out, short_b);
        c->out_stream = short_b;
        c->d[c->head].mem_eff = 0.0;
        c->d[c->head].th += 1e3 * short_b / c->d[c->head].disk; /* ms per token */
        c->d[c->head].th_alone += 1e3 * short_b / c->d[c->head].disk;
        c->d[c->head].q0 += c->d[c->head].rc * short_b;
    }
    /* the head's burst in a ring is one idle spell a token of every other
     * device: a quota refills one period's share in it (what qk saves), no
     * more, so the rest of it adds to that device's floor */
    for (int i = 0; i < c->n; i++)
        if (i != c->head && c->d[i].qs > 0.0 && c->d[c->head].th > c->d[i].qk)
            c->d[i].qg = c->d[c->head].th - c->d[i].qk;
    bool uneven = o->uneven_rounds;
    if (o->k_fixed > 0 &&
        (o->k_fixed > c->L || o->k_fixed > HR_SCHED_MAX_ROUNDS || (!uneven && c->L % o->k_fixed)))
        return hr_seterr(err, HR_EINVAL,
                         "scheduler: k_fixed = %d %s n_layer = %d (at most %d rounds)", o->k_fixed,
                         uneven ? "exceeds" : "does not divide", c->L, HR_SCHED_MAX_ROUNDS);
    /* the divisors first (uniform plans), then the others (per-round windows) */
    for (int pass = 0; pass < 2; pass++)
        for (int k = 1; k <= c->L && k <= HR_SCHED_MAX_ROUNDS; k++) {
            bool divides = c->L % k == 0;
            if (divides != (pass == 0) || (o->k_fixed > 0 && k != o->k_fixed) ||
                (o->k_max > 0 && k > o->k_max))
                continue;
            if (!divides && (!uneven || (o->k_fixed == 0 && k > HR_SCHED_UNEVEN_K_MAX)))
                continue;
            if (c->n_k == HR_SCHED_MAX_K)
                break;
            c->k_list[c->n_k++] = k;
        }
    return 0;
}

/* floor(x) as an int clamped to [0, hi]; x may be huge. */
static int floor_clamp(double x, int hi) {
    if (!(x >= 0.0))
        return 0;
    x = floor(x + 1e-9);
    return x >= (double)hi ? hi : (int)x;
}

void hr_sched_kctx_init(const hr_sched_ctx *c, int k, hr_sched_kctx *kc) {
    memset(kc, 0, sizeof *kc);
    kc->k = k;
    kc->W = c->L / k;
    double kk = (double)k;
    for (int i = 0; i < c->n; i++) {
        double me = c->d[i].mem_eff;
        int fit = floor_clamp(me / (kk * (c->b + c->kv)), kc->W);
        int cap = fit;
        if (c->d[i].disk > 0.0) {
            /* pinned: the KV of all k * wc layers and one layer of buffer;
             * lru: one whole window beside the KV (the page cache holds it) */
            int s = cap;
            if (c->d[i].lru) {
                s = floor_clamp(me / (c->b + kk * c->kv), kc->W);
            } else {
                hr_sched_stream st;
                while (s < kc->W &&
                       hr_sched_stream_split_experts((s + 1) * c->b, k, me - kk * (s + 1) * c->kv,
                                                     c->b, c->ef, c->d[i].er, &st) == 0)
                    s++;
            }
            if (s > cap)
                cap = s;
        }
        int gcap =
            c->d[i].vram > 0.0 ? floor_clamp(c->d[i].vram / (kk * (c->b + c->kv)), kc->W) : 0;
        kc->d[i].fit = fit;
        kc->d[i].cap = cap;
        kc->d[i].gcap = gcap;
        kc->d[i].ub = cap + gcap < kc->W ? cap + gcap : kc->W;
        kc->d[i].stream = cap > fit;
    }
}

/* ---------------------------------------------------------------- cost model */

void hr_sched_disk_at(const hr_sched_ctx *c, const hr_sched_kctx *kc, int i, int wc,
                      hr_sched_disk *out) {
    memset(out, 0, sizeof *out);
    double kk = (double)kc->k, me = c->d[i].mem_eff;
    if (wc <= kc->d[i].fit || !kc->d[i].stream) {
        out->resident = kk * wc * c->b;
        return;
    }
    out->overloaded = true;
    if (c->d[i].lru) {
        /* a cyclic pattern larger than the cache misses every time: the whole
         * window is read on demand while it is computed */
        out->read_round = wc * c->b;
        out->load = 1e3 * out->read_round / c->d[i].disk;
        out->stall = out->load;
        out->resident = 0.0;
        return;
    }
    hr_sched_stream st;
    hr_sched_stream_split_experts(wc * c->b, kc->k, me - kk * wc * c->kv, c->b, c->ef, c->d[i].er,
                                  &st);
    out->read_round = st.read_round;
    out->resident = st.resident;
    out->buffer = st.buffer;
    out->load = 1e3 * st.read_round / c->d[i].disk;
    if (c->ef > 0.0) { /* routed experts are read once the router chose them: no reading ahead */
        out->stall = out->load;
        return;
    }
    /* the buffer is filled while the rest of the ring computes; what it
     * cannot hold is read while this device computes the window */
    double pre = 1e3 * st.buffer / c->d[i].disk;
    out->stall = out->load > pre ? out->load - pre : 0.0;
}

double hr_sched_throttle_ms(const hr_sched_ctx *c, int i, double ms) {
    if (!(c->d[i].qs > 1.0) || ms <= 0.0)
        return ms;
    double v = c->d[i].qs * ms - c->d[i].qk;
    return v > ms ? v : ms;
}

double hr_sched_cpu_raw_ms(const hr_sched_ctx *c, int i, int wc, bool ring) {
    if (wc <= 0)
        return 0.0;
    double v = c->d[i].t * wc + (ring ? c->d[i].tr : 0.0), lo = 0.5 * c->d[i].t * wc;
    return v > lo ? v : lo;
}

double hr_sched_cpu_ms(const hr_sched_ctx *c, int i, int wc, bool ring) {
    double v = hr_sched_cpu_raw_ms(c, i, wc, ring);
    return ring ? hr_sched_throttle_ms(c, i, v) : v;
}

double hr_sched_window_ms(const hr_sched_ctx *c, int i, int wc, int n, const hr_sched_disk *dk,
                          bool ring) {
    double cpu = hr_sched_cpu_ms(c, i, wc, ring);
    if (c->overlap == HR_SCHED_OVERLAP_SUM)
        cpu += dk->stall;
    else if (dk->stall > cpu)
        cpu = dk->stall;
    return cpu + c->d[i].g * n;
}

void hr_sched_dev_at(const hr_sched_ctx *c, const hr_sched_kctx *kc, int i, const int *win,
                     int stride, int ng, bool ring, hr_sched_dev_rounds *out) {
    int k = kc->k;
    out->ok = false;
    out->overloaded = false;
    out->resident = out->buffer = 0.0;
    out->layers = out->lc = 0;
    out->cpu = 0.0;
    bool eq = true;
    for (int r = 0; r < k; r++) {
        int cnt = win[r * stride];
        if (cnt < 0)
            return;
        eq = eq && cnt == win[0];
        out->layers += cnt;
    }
    if (ng < 0)
        return;
    if (eq) { /* one window size: the uniform plan's terms (kc's caps) */
        int n = ng < win[0] ? ng : win[0], wc = win[0] - n;
        if (wc > kc->d[i].cap || n > kc->d[i].gcap)
            return;
        hr_sched_disk dk;
        hr_sched_disk_at(c, kc, i, wc, &dk);
        out->cpu = k * (hr_sched_cpu_raw_ms(c, i, wc, ring) + c->d[i].rc * dk.read_round);
        for (int r = 0; r < k; r++) {
            out->cm[r] = hr_sched_cpu_ms(c, i, wc, ring) + c->d[i].g * n;
            out->cp[r] = hr_sched_window_ms(c, i, wc, n, &dk, ring);
            out->load[r] = dk.load;
            out->read[r] = dk.read_round;
        }
        out->overloaded = dk.overloaded;
        out->resident = dk.resident;
        out->buffer = dk.buffer;
        out->lc = k * wc;
        out->ok = true;
        return;
    }
    double me = c->d[i].mem_eff, bytes[HR_SCHED_MAX_ROUNDS];
    int lg = 0, wmax = 0;
    for (int r = 0; r < k; r++) {
        int cnt = win[r * stride], n = ng < cnt ? ng : cnt, wc = cnt - n;
        lg += n;
        out->lc += wc;
        wmax = wc > wmax ? wc : wmax;
        bytes[r] = wc * c->b;
    }
    if (lg > floor_clamp(c->d[i].vram / (c->b + c->kv), INT_MAX))
        return;
    hr_sched_disk dk[HR_SCHED_MAX_ROUNDS];
    memset(dk, 0, sizeof dk[0] * (size_t)k);
    if (out->lc <= floor_clamp(me / (c->b + c->kv), INT_MAX)) {
        out->resident = out->lc * c->b;
    } else if (c->d[i].disk <= 0.0) {
        return; /* memory short and no disk to stream from */
    } else if (c->d[i].lru) {
        /* the page cache holds one window beside the KV; each is read whole */
        if (wmax * c->b + out->lc * c->kv > me)
            return;
        for (int r = 0; r < k; r++) {
            dk[r].read_round = bytes[r];
            dk[r].load = dk[r].stall = 1e3 * bytes[r] / c->d[i].disk;
        }
        out->overloaded = true;
    } else {
        hr_sched_stream st;
        double read[HR_SCHED_MAX_ROUNDS];
        if (split_rounds(bytes, k, me - out->lc * c->kv, c->b, c->ef, c->d[i].er, &st, read) != 0)
            return;
        double pre = c->ef > 0.0 ? 0.0 : 1e3 * st.buffer / c->d[i].disk;
        for (int r = 0; r < k; r++) {
            dk[r].read_round = read[r];
            dk[r].load = 1e3 * read[r] / c->d[i].disk;
            dk[r].stall = dk[r].load > pre ? dk[r].load - pre : 0.0;
        }
        out->overloaded = st.streams;
        out->resident = st.resident;
        out->buffer = st.buffer;
    }
    for (int r = 0; r < k; r++) {
        int cnt = win[r * stride], n = ng < cnt ? ng : cnt, wc = cnt - n;
        out->cpu += hr_sched_cpu_raw_ms(c, i, wc, ring) + c->d[i].rc * dk[r].read_round;
        out->cm[r] = hr_sched_cpu_ms(c, i, wc, ring) + c->d[i].g * n;
        out->cp[r] = hr_sched_window_ms(c, i, wc, n, &dk[r], ring);
        out->load[r] = dk[r].load;
        out->read[r] = dk[r].read_round;
    }
    out->ok = true;
}

/* True when a device besides the head has a layer in some round: then
 * each device idles while the others compute, and t_round_ms applies. */
static bool many_in_ring(const hr_sched_ctx *c, int k, const int *win) {
    for (int r = 0; r < k; r++)
        for (int i = 0; i < c->n; i++)
            if (i != c->head && win[r * c->n + i] > 0)
                return true;
    return false;
}

/* The head's ms per token besides its windows: its output burst is
 * throttled on its own in a ring, part of one long run when it is alone. */
static double head_ms(const hr_sched_ctx *c, bool ring) {
    return ring ? c->d[c->head].th : c->d[c->head].th_alone;
}

double hr_sched_round_wait(const hr_sched_ctx *c, int i, double gap_ms) {
    const double qw = c->d[i].qw, qp = c->d[i].qp;
    if (qw <= 0.0)
        return 0.0;
    if (qp <= 0.0)
        return qw;
    double f = 1.0 - gap_ms / qp;
    return f > 0.0 ? qw * f : 0.0;
}

/* The ring's rounds: P_r per round and which device sets each round's
 * exposed time (-1: none). Returns ms per token, INFINITY when a device
 * breaks a memory rule or the windows do not cover n_layer once. */
static double eval_rounds(const hr_sched_ctx *c, const hr_sched_kctx *kc, const int *win,
                          const int *ng, double *P, double *S, int *bneck, double *H_out,
                          double *W_out) {
    const int k = kc->k, n = c->n;
    int sum = 0, n_active = 0;
    double Hs = 0.0, Ws = 0.0, Wr[HR_SCHED_MAX_ROUNDS], fmax = 0.0, worst_load[HR_SCHED_MAX_ROUNDS],
           worst_stall[HR_SCHED_MAX_ROUNDS];
    int who_load[HR_SCHED_MAX_ROUNDS], who_stall[HR_SCHED_MAX_ROUNDS];
    for (int r = 0; r < k; r++) {
        S[r] = Wr[r] = worst_load[r] = worst_stall[r] = 0.0;
        who_load[r] = who_stall[r] = -1;
    }
    hr_sched_dev_rounds dr;
    bool ring = many_in_ring(c, k, win);
    double qfloor = 0.0; /* a CPU quota's cap over the whole token */
    /* windows (ms) of the devices that wait for a quota's period, by round */
    double qcp[HR_SCHED_MAX_DEV][HR_SCHED_MAX_ROUNDS];
    int qdev[HR_SCHED_MAX_DEV], nq = 0;
    for (int i = 0; i < n; i++) {
        hr_sched_dev_at(c, kc, i, win + i, n, ng ? ng[i] : 0, ring, &dr);
        if (!dr.ok)
            return INFINITY;
        sum += dr.layers;
        bool active = i == c->head || dr.layers > 0;
        if (active) {
            n_active++;
            Hs += c->d[i].h;
            fmax = c->d[i].f > fmax ? c->d[i].f : fmax;
            double q = c->d[i].qs * (dr.cpu + c->d[i].q0) + (dr.lc > 0 ? c->d[i].qg : 0.0);
            qfloor = q > qfloor ? q : qfloor;
        }
        int cap = ng ? ng[i] : 0;
        bool waits = active && c->d[i].qw > 0.0;
        for (int r = 0; r < k; r++) {
            if (active)
                S[r] += dr.cp[r];
            /* -1: it does not compute on its CPU this round */
            if (waits)
                qcp[nq][r] = win[r * n + i] > cap ? dr.cp[r] : -1.0;
            if (dr.load[r] > worst_load[r]) {
                worst_load[r] = dr.load[r];
                who_load[r] = i;
            }
            if (dr.cp[r] - dr.cm[r] > worst_stall[r]) {
                worst_stall[r] = dr.cp[r] - dr.cm[r];
                who_stall[r] = i;
            }
        }
        if (waits)
            qdev[nq++] = i;
    }
    if (sum != c->L)
        return INFINITY;
    /* hops, and a quota's wait where a round has a device compute (none
     * alone), by the gap since its last round: the round's other windows
     * and the hops */
    double H = n_active >= 2 ? Hs : 0.0, lat = head_ms(c, ring);
    for (int q = 0; q < nq && n_active >= 2; q++)
        for (int r = 0; r < k; r++)
            if (qcp[q][r] >= 0.0)
                Wr[r] += hr_sched_round_wait(c, qdev[q], S[r] - qcp[q][r] + H);
    for (int r = 0; r < k; r++) {
        Ws += n_active >= 2 ? Wr[r] : 0.0;
        S[r] += H + (n_active >= 2 ? Wr[r] : 0.0);
        /* a device's disk reads at most one round's bytes per round */
        P[r] = worst_load[r] > S[r] ? worst_load[r] : S[r];
        bneck[r] = worst_load[r] > S[r] ? who_load[r] : who_stall[r];
        lat += P[r];
    }
    *H_out = H;
    *W_out = Ws; /* per token, all rounds */
    /* the links' throughput: k hidden states per token over each link */
    double floor_ms = n_active >= 2 ? k * fmax : 0.0;
    floor_ms = qfloor > floor_ms ? qfloor : floor_ms;
    return lat > floor_ms ? lat : floor_ms;
}

static void fill_plan(const hr_sched_ctx *c, const hr_sched_kctx *kc, const int *win, const int *ng,
                      const double *P, const double *S, const int *bneck, double H, double W,
                      double lat, hr_sched_plan *p) {
    int k = kc->k, n_active = 0;
    memset(p, 0, sizeof *p);
    p->k = k;
    p->n_layer = c->L;
    p->n_dev = c->n;
    p->head = c->head;
    p->overlap = c->overlap;
    p->latency_ms = lat;
    p->tokens_per_s = lat > 0.0 ? 1e3 / lat : 0.0;
    p->head_ms = head_ms(c, many_in_ring(c, k, win));
    p->round_ms = (lat - p->head_ms) / k;
    p->link_ms = k * H;
    p->quota_wait_ms = W;
    p->optimal = true;
    p->uniform = true;
    double C = 0.0, Psum = 0.0;
    for (int r = 0; r < k; r++)
        Psum += P[r];
    hr_sched_dev_rounds dr;
    bool ring = many_in_ring(c, k, win);
    /* each round's windows, for the gaps a quota's wait depends on */
    double Sw[HR_SCHED_MAX_ROUNDS] = {0};
    for (int i = 0; W > 0.0 && i < c->n; i++) {
        hr_sched_dev_at(c, kc, i, win + i, c->n, ng ? ng[i] : 0, ring, &dr);
        for (int r = 0; r < k && (i == c->head || dr.layers > 0); r++)
            Sw[r] += dr.cp[r];
    }
    for (int step = 0; step < c->n; step++) {
        /* ring order: head first, then the others in input order */
        int i = step == 0 ? c->head : (step <= c->head ? step - 1 : step);
        hr_sched_dev_plan *d = &p->dev[i];
        hr_sched_dev_at(c, kc, i, win + i, c->n, ng ? ng[i] : 0, ring, &dr);
        d->is_head = i == c->head;
        d->active = d->is_head || dr.layers > 0;
        d->ring_pos = -1;
        d->n_gpu = ng ? ng[i] : 0;
        d->layers = dr.layers;
        for (int r = 0; r < k; r++) {
            d->win[r] = win[r * c->n + i];
            p->uniform = p->uniform && d->win[r] == d->win[0];
        }
        d->t_layer_ms = c->d[i].t;
        d->throttle_slope = c->d[i].qs;
        d->prefill_threads = c->d[i].prefill_threads;
        d->decode_threads = c->d[i].decode_threads;
        if (!d->active)
            continue;
        /* half the largest measured spread of its devices (hr_sched_solve
         * widens it over the fastest plan's where it took a simpler one) */
        p->noise_margin = fmax(p->noise_margin, fmin(HR_SCHED_NOISE_MAX, 0.5 * c->d[i].spread));
        d->ring_pos = n_active;
        p->order[n_active++] = i;
        d->link_ms = H > 0.0 ? k * c->d[i].h : 0.0;
        for (int r = 0; W > 0.0 && r < k; r++)
            d->quota_wait_ms +=
                d->win[r] > d->n_gpu ? hr_sched_round_wait(c, i, Sw[r] - dr.cp[r] + H) : 0.0;
        d->overloaded = dr.overloaded;
        d->cpu_ms = dr.cpu + c->d[i].q0;
        double kv = dr.lc * c->kv, out = d->is_head ? c->out : 0.0;
        d->mem_bytes =
            d->overloaded ? dr.resident + dr.buffer + kv + out : dr.lc * (c->b + c->kv) + out;
        for (int r = 0; r < k; r++) {
            d->compute_ms += dr.cm[r];
            d->disk_load_ms += dr.load[r];
            d->read_bytes += dr.read[r];
            d->disk_exposed_ms += dr.cp[r] - dr.cm[r] + (bneck[r] == i ? P[r] - S[r] : 0.0);
            d->bottleneck = d->bottleneck || bneck[r] == i;
        }
        C += d->compute_ms;
    }
    /* windows in ring order, round after round; a device out of the ring
     * would start where the round ends */
    int at = 0;
    for (int r = 0; r < k; r++) {
        for (int j = 0; j < n_active; j++) {
            p->dev[p->order[j]].first[r] = at;
            at += p->dev[p->order[j]].win[r];
        }
        for (int i = 0; i < c->n; i++)
            if (!p->dev[i].active)
                p->dev[i].first[r] = at;
    }
    p->compute_ms = C;
    p->disk_exposed_ms = Psum - C - k * H - W;
    p->link_floor_dev = -1;
    for (int j = 0; n_active >= 2 && j < n_active; j++) {
        int i = p->order[j];
        if (k * c->d[i].f > p->link_floor_ms) {
            p->link_floor_ms = k * c->d[i].f;
            p->link_floor_dev = i;
        }
    }
    for (int i = 0; i < c->n; i++) {
        hr_sched_dev_plan *d = &p->dev[i];
        memcpy(d->name, c->d[i].name, sizeof d->name);
        d->rtt_ms = c->d[i].rtt_ms;
        d->link_bps = c->d[i].link_bps;
        d->link_assumed = c->d[i].link_assumed;
        if (d->active)
            continue;
        if (kc->d[i].ub == 0)
            snprintf(d->left_out, sizeof d->left_out,
                     "no room for one layer: %.0f MiB for %.0f MiB of weights + KV",
                     c->d[i].mem_eff / 1048576.0, (c->b + kc->k * c->kv) / 1048576.0);
        else
            snprintf(d->left_out, sizeof d->left_out,
                     "the ring is predicted faster without it (%.2f ms per layer, %.2f ms hop%s)",
                     c->d[i].t, c->d[i].h,
                     c->d[i].link_assumed ? ", assumed: no link measured" : "");
    }
    p->n_active = n_active;
    p->out_stream_bytes = c->out_stream;
    if (p->out_stream_bytes > 0.0) {
        hr_sched_dev_plan *h = &p->dev[c->head];
        h->read_bytes += c->out_stream;
        h->mem_bytes -= c->out_stream; /* only the resident part of the output head */
    }
}

double hr_sched_eval_rounds(const hr_sched_ctx *c, const hr_sched_kctx *kc, const int *win,
                            const int *ng, hr_sched_plan *plan) {
    double P[HR_SCHED_MAX_ROUNDS], S[HR_SCHED_MAX_ROUNDS], H = 0.0, W = 0.0;
    int bneck[HR_SCHED_MAX_ROUNDS];
    if (kc->k < 1 || kc->k > HR_SCHED_MAX_ROUNDS)
        return INFINITY;
    double lat = eval_rounds(c, kc, win, ng, P, S, bneck, &H, &W);
    if (plan && isfinite(lat))
        fill_plan(c, kc, win, ng, P, S, bneck, H, W, lat, plan);
    return lat;
}

double hr_sched_eval(const hr_sched_ctx *c, const hr_sched_kctx *kc, const int *w, const int *ng,
                     hr_sched_plan *plan) {
    int win[HR_SCHED_MAX_ROUNDS * HR_SCHED_MAX_DEV];
    if (kc->k < 1 || kc->k > HR_SCHED_MAX_ROUNDS)
        return INFINITY;
    for (int r = 0; r < kc->k; r++)
        memcpy(win + r * c->n, w, sizeof *w * (size_t)c->n);
    return hr_sched_eval_rounds(c, kc, win, ng, plan);
}

int hr_sched_explain_infeasible(const hr_sched_ctx *c, char *err) {
    double need = c->L * (c->b + c->kv) + c->out, have = c->out - c->out_stream;
    bool disk = false, gpu = false;
    for (int i = 0; i < c->n; i++) {
        have += c->d[i].mem_eff;
        disk = disk || c->d[i].disk > 0.0;
        gpu = gpu || c->d[i].vram > 0.0;
    }
    if (!disk && !gpu) {
        char per[256] = "";
        size_t len = 0;
        for (int i = 0; i < c->n && len < sizeof per; i++) {
            int n_ = snprintf(per + len, sizeof per - len, "%s%s %.0f bytes", i ? ", " : "",
                              c->d[i].name[0] ? c->d[i].name : "?", c->d[i].mem_eff);
            len += n_ > 0 ? (size_t)n_ : 0;
        }
        return hr_seterr(err, HR_EINFEASIBLE,
                         "scheduler: memory short (room for layers + KV: %s) and no disk to "
                         "stream from (disk_bps = 0 everywhere): the model needs %.3f GiB (%d "
                         "layers x %.3f GiB weights + KV, output head), the devices hold %.3f GiB",
                         per, need / GIB, c->L, (c->b + c->kv) / GIB, have / GIB);
    }
    int best_k = 0, best_sum = -1, best_w = 0;
    for (int j = 0; j < c->n_k; j++) {
        hr_sched_kctx kc;
        hr_sched_kctx_init(c, c->k_list[j], &kc);
        int sum = 0;
        for (int i = 0; i < c->n; i++)
            sum += kc.d[i].ub;
        if (best_k == 0 || (double)sum / kc.W > (double)best_sum / best_w) {
            best_k = kc.k;
            best_sum = sum;
            best_w = kc.W;
        }
    }
    return hr_seterr(err, HR_EINFEASIBLE,
                     "scheduler: no plan for any allowed k: at best (k = %d) the devices take %d "
                     "of %d layers per round; model %.3f GiB, devices %.3f GiB; a device that "
                     "streams from disk must hold one layer (%.3f GiB) beside the KV of all its "
                     "layers",
                     best_k, best_sum, best_w, need / GIB, have / GIB, c->b / GIB);
}

void hr_sched_explain(hr_sched_plan *p) {
    char *s = p->explanation;
    size_t cap = sizeof p->explanation, len = 0;
#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (len < cap) {                                                                           \
            int n_ = snprintf(s + len, cap - len, __VA_ARGS__);                                    \
            len += n_ > 0 ? (size_t)n_ : 0;                                                        \
        }                                                                                          \
    } while (0)
    if (p->uniform)
        APPEND("k=%d x %d layers, %d of %d devices in the ring", p->k, p->n_layer / p->k,
               p->n_active, p->n_dev);
    else
        APPEND("k=%d rounds of their own windows over %d layers, %d of %d devices in the ring",
               p->k, p->n_layer, p->n_active, p->n_dev);
    const char *sep = "; left out:";
    for (int i = 0; i < p->n_dev; i++)
        if (!p->dev[i].active) {
            APPEND("%s %s", sep, p->dev[i].name[0] ? p->dev[i].name : "?");
            sep = ",";
        }
    sep = "; streaming from disk:";
    for (int i = 0; i < p->n_dev; i++)
        if (p->dev[i].overloaded) {
            APPEND("%s %s%s", sep, p->dev[i].name[0] ? p->dev[i].name : "?",
                   p->dev[i].bottleneck ? " (bottleneck)" : "");
            sep = ",";
        }
    if (p->link_floor_dev >= 0 && p->link_floor_ms >= p->latency_ms)
        APPEND("; bound by %s's link: %d hidden states per token at its measured rate",
               p->dev[p->link_floor_dev].name[0] ? p->dev[p->link_floor_dev].name : "?", p->k);
    if (p->out_stream_bytes > 0.0)
        APPEND("; output head streamed from disk: %.1f MiB per token",
               p->out_stream_bytes / 1048576.0);
    if (p->fastest_k > 0 && p->fastest_ms > 0.0)
        APPEND("; taken over k=%d on %d devices (%.1f ms, %.1f%% faster): inside the devices' "
               "measured spread (+-%.0f%%)",
               p->fastest_k, p->fastest_active, p->fastest_ms,
               100.0 * (p->latency_ms / p->fastest_ms - 1.0), 100.0 * p->noise_margin);
    sep = "; per k:";
    for (int j = 0; j < p->n_k; j++) {
        if (isfinite(p->k_latency_ms[j]))
            APPEND("%s %d=%.1fms", sep, p->k_list[j], p->k_latency_ms[j]);
        else if (isnan(p->k_latency_ms[j]))
            APPEND("%s %d=worse", sep, p->k_list[j]);
        else
            APPEND("%s %d=none", sep, p->k_list[j]);
        sep = ",";
    }
#undef APPEND
    if (len >= cap && cap > 4)
        memcpy(s + cap - 4, "...", 4);
}

/* Evaluates k rounds of windows win[k][n_dev] (round-major). */
static int evaluate_rounds(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                           const hr_sched_opts *opts, int k, const int *win, const int *n_gpu,
                           hr_sched_plan *out, char *err) {
    hr_sched_opts o = opts ? *opts : hr_sched_opts_default();
    hr_sched_ctx c;
    char msg[HR_ERR_LEN];
    int rc = hr_sched_ctx_init(&c, model, devs, n_dev, &o, msg);
    if (rc)
        goto fail;
    if (!win) {
        rc = hr_seterr(msg, HR_EINVAL, "scheduler: windows are NULL");
        goto fail;
    }
    if (k < 1 || k > HR_SCHED_MAX_ROUNDS || k > c.L) {
        rc = hr_seterr(msg, HR_EINVAL, "scheduler: k = %d not in 1..%d", k,
                       c.L < HR_SCHED_MAX_ROUNDS ? c.L : HR_SCHED_MAX_ROUNDS);
        goto fail;
    }
    hr_sched_kctx kc;
    hr_sched_kctx_init(&c, k, &kc);
    hr_sched_plan tmp, *p = out ? out : &tmp;
    double lat = hr_sched_eval_rounds(&c, &kc, win, n_gpu, p);
    if (!isfinite(lat)) {
        rc = hr_seterr(msg, HR_EINFEASIBLE,
                       "scheduler: assignment breaks a memory rule or its %d rounds do not "
                       "cover the %d layers once",
                       k, c.L);
        goto fail;
    }
    p->n_k = 1;
    p->k_list[0] = k;
    p->k_latency_ms[0] = lat;
    p->optimal = false;
    hr_sched_explain(p);
    return 0;
fail:
    if (err)
        snprintf(err, HR_ERR_LEN, "%s", msg);
    return hr_sched_plan_fail(out, rc, msg);
}

/* w[n_dev] in each of k rounds into win; HR_EINVAL when k does not divide L. */
static int uniform_table(const hr_sched_model *model, int n_dev, int k, const int *w, int *win,
                         char *err) {
    if (!model || !w || n_dev < 1 || n_dev > HR_SCHED_MAX_DEV)
        return hr_seterr(err, HR_EINVAL, "scheduler: model or w is NULL, or n_dev = %d", n_dev);
    if (k < 1 || k > HR_SCHED_MAX_ROUNDS || model->n_layer % k != 0)
        return hr_seterr(err, HR_EINVAL, "scheduler: k = %d does not divide n_layer = %d", k,
                         model->n_layer);
    for (int r = 0; r < k; r++)
        memcpy(win + r * n_dev, w, sizeof *w * (size_t)n_dev);
    return 0;
}

int hr_sched_evaluate(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                      const hr_sched_opts *opts, int k, const int *w, const int *n_gpu,
                      hr_sched_plan *out, char err[HR_ERR_LEN]) {
    int win[HR_SCHED_MAX_ROUNDS * HR_SCHED_MAX_DEV];
    char msg[HR_ERR_LEN];
    int rc = uniform_table(model, n_dev, k, w, win, msg);
    if (rc == 0)
        return evaluate_rounds(model, devs, n_dev, opts, k, win, n_gpu, out, err);
    if (err)
        snprintf(err, HR_ERR_LEN, "%s", msg);
    return hr_sched_plan_fail(out, rc, msg);
}

int hr_sched_evaluate_rounds(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                             const hr_sched_opts *opts, int k, const int *win, const int *n_gpu,
                             hr_sched_plan *out, char err[HR_ERR_LEN]) {
    return evaluate_rounds(model, devs, n_dev, opts, k, win, n_gpu, out, err);
}

double hr_sched_cost_rounds(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                            const hr_sched_opts *opts, int k, const int *win, const int *n_gpu) {
    hr_sched_opts o = opts ? *opts : hr_sched_opts_default();
    hr_sched_ctx c;
    if (hr_sched_ctx_init(&c, model, devs, n_dev, &o, NULL) || !win || k < 1 ||
        k > HR_SCHED_MAX_ROUNDS || k > c.L)
        return INFINITY;
    hr_sched_kctx kc;
    hr_sched_kctx_init(&c, k, &kc);
    return hr_sched_eval_rounds(&c, &kc, win, n_gpu, NULL);
}

double hr_sched_cost(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                     const hr_sched_opts *opts, int k, const int *w, const int *n_gpu) {
    int win[HR_SCHED_MAX_ROUNDS * HR_SCHED_MAX_DEV];
    if (uniform_table(model, n_dev, k, w, win, NULL) != 0)
        return INFINITY;
    return hr_sched_cost_rounds(model, devs, n_dev, opts, k, win, n_gpu);
}

/* ---------------------------------------------------------------- brute force */

typedef struct {
    const hr_sched_ctx *c;
    const hr_sched_kctx *kc;
    int w[HR_SCHED_MAX_DEV], ng[HR_SCHED_MAX_DEV];
    int suffix_ub[HR_SCHED_MAX_DEV + 1];
    double best;
    int best_w[HR_SCHED_MAX_DEV], best_ng[HR_SCHED_MAX_DEV];
} hr_sched_enum;

static void enum_leaf(hr_sched_enum *e) {
    double lat = hr_sched_eval(e->c, e->kc, e->w, e->ng, NULL);
    if (lat < e->best) {
        e->best = lat;
        memcpy(e->best_w, e->w, sizeof e->w);
        memcpy(e->best_ng, e->ng, sizeof e->ng);
    }
}

static void enum_gpu(hr_sched_enum *e, int i) {
    if (i == e->c->n) {
        enum_leaf(e);
        return;
    }
    int lo = e->w[i] - e->kc->d[i].cap, hi = e->kc->d[i].gcap;
    if (lo < 0)
        lo = 0;
    if (hi > e->w[i])
        hi = e->w[i];
    for (int v = lo; v <= hi; v++) {
        e->ng[i] = v;
        enum_gpu(e, i + 1);
    }
    e->ng[i] = 0;
}

static void enum_w(hr_sched_enum *e, int i, int left) {
    if (left > e->suffix_ub[i])
        return;
    if (i == e->c->n - 1) {
        e->w[i] = left;
        enum_gpu(e, 0);
        return;
    }
    int hi = left < e->kc->d[i].ub ? left : e->kc->d[i].ub;
    for (int v = 0; v <= hi; v++) {
        e->w[i] = v;
        enum_w(e, i + 1, left - v);
    }
}

static double binom(int n, int r) {
    double v = 1.0;
    for (int j = 1; j <= r; j++)
        v = v * (n - r + j) / j;
    return v;
}

int hr_sched_exhaustive(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                        const hr_sched_opts *opts, hr_sched_plan *out, char err[HR_ERR_LEN]) {
    double t0 = hr_sched_now_ms();
    hr_sched_opts o = opts ? *opts : hr_sched_opts_default();
    o.uneven_rounds = false; /* uniform plans only */
    hr_sched_ctx c;
    char msg[HR_ERR_LEN];
    int rc = hr_sched_ctx_init(&c, model, devs, n_dev, &o, msg);
    if (rc)
        goto fail;
    double count = 0.0;
    for (int j = 0; j < c.n_k; j++) {
        hr_sched_kctx kc;
        hr_sched_kctx_init(&c, c.k_list[j], &kc);
        double pts = binom(kc.W + c.n - 1, c.n - 1);
        for (int i = 0; i < c.n; i++)
            pts *= kc.d[i].gcap + 1.0;
        count += pts;
    }
    if (count > o.max_enum) {
        rc = hr_seterr(msg, HR_ERANGE, "scheduler: brute force would visit %.3g assignments (> %g)",
                       count, o.max_enum);
        goto fail;
    }
    static hr_sched_enum zero_enum;
    hr_sched_enum e = zero_enum;
    hr_sched_kctx best_kc;
    double best = INFINITY;
    int best_w[HR_SCHED_MAX_DEV], best_ng[HR_SCHED_MAX_DEV];
    double k_lat[HR_SCHED_MAX_K];
    for (int j = 0; j < c.n_k; j++) {
        hr_sched_kctx kc;
        hr_sched_kctx_init(&c, c.k_list[j], &kc);
        e.c = &c;
        e.kc = &kc;
        e.best = INFINITY;
        e.suffix_ub[c.n] = 0;
        for (int i = c.n - 1; i >= 0; i--)
            e.suffix_ub[i] = e.suffix_ub[i + 1] + kc.d[i].ub;
        enum_w(&e, 0, kc.W);
        k_lat[j] = e.best;
        if (e.best < best * (1.0 - 1e-12)) {
            best = e.best;
            best_kc = kc;
            memcpy(best_w, e.best_w, sizeof best_w);
            memcpy(best_ng, e.best_ng, sizeof best_ng);
        }
    }
    if (!isfinite(best)) {
        rc = hr_sched_explain_infeasible(&c, msg);
        goto fail;
    }
    if (out) {
        hr_sched_eval(&c, &best_kc, best_w, best_ng, out);
        out->n_k = c.n_k;
        memcpy(out->k_list, c.k_list, sizeof out->k_list);
        memcpy(out->k_latency_ms, k_lat, sizeof k_lat[0] * (size_t)c.n_k);
        out->solve_ms = hr_sched_now_ms() - t0;
        hr_sched_explain(out);
    }
    return 0;
fail:
    if (err)
        snprintf(err, HR_ERR_LEN, "%s", msg);
    return hr_sched_plan_fail(out, rc, msg);
}

int hr_sched_plan_window(const hr_sched_plan *p, int dev, int round, int *first, int *count) {
    if (!p || p->k < 1 || p->k > HR_SCHED_MAX_ROUNDS || dev < 0 || dev >= p->n_dev || round < 0 ||
        round >= p->k || !first || !count)
        return HR_EINVAL;
    *first = p->dev[dev].first[round];
    *count = p->dev[dev].active ? p->dev[dev].win[round] : 0;
    return 0;
}
