/* cost.c - the per-token cost model: device x model x link profiles ->
 * predicted time of one decode token through a window of layers, split into
 * compute, memory, disk and communication terms (see profiler.h). */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "kernels/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hr_prof_cost_params hr_prof_cost_params_default(void) {
    return (hr_prof_cost_params){.n_threads = 0,
                                 .n_past = 256,
                                 .resident_bytes = UINT64_MAX,
                                 .input = false,
                                 .output = false,
                                 .n_hops = 0};
}

const hr_prof_rate *hr_prof_device_rate(const hr_prof_device *d, int type, int n_threads) {
    const hr_prof_rate *best = NULL;
    int best_diff = 0;
    for (int i = 0; i < d->n_rates; i++) {
        const hr_prof_rate *r = &d->rates[i];
        if (r->type != type || !(r->matvec_gbs > 0))
            continue;
        int diff = abs(r->n_threads - n_threads);
        if (!best || diff < best_diff || (diff == best_diff && r->n_threads < best->n_threads)) {
            best = r;
            best_diff = diff;
        }
    }
    return best;
}

const hr_prof_opcost *hr_prof_device_opcost(const hr_prof_device *d, int n_threads) {
    const hr_prof_opcost *best = NULL;
    for (int i = 0; i < d->n_opcosts; i++) {
        const hr_prof_opcost *o = &d->opcosts[i];
        if (!best || abs(o->n_threads - n_threads) < abs(best->n_threads - n_threads))
            best = o;
    }
    return best;
}

double hr_prof_device_sustain(const hr_prof_device *d, int n_threads) {
    /* the engine probe measured the real thing at the agent's thread count */
    if (d->engine_factor > 0 && d->engine_threads == n_threads)
        return d->engine_factor;
    const hr_prof_sustain *best = NULL;
    for (int i = 0; i < d->n_sustain; i++) {
        const hr_prof_sustain *s = &d->sustain[i];
        if (s->factor >= 1.0 &&
            (!best || abs(s->n_threads - n_threads) < abs(best->n_threads - n_threads)))
            best = s;
    }
    if (best)
        return best->factor;
    if (d->cpu_quota_cores > 0 && n_threads > d->cpu_quota_cores)
        return n_threads / d->cpu_quota_cores; /* assumed: no measurement */
    return 1.0;
}

bool hr_prof_throttle(const hr_prof_device *d, int n_threads, double *free, double *slope,
                      double *save_ms, double *wait_ms) {
    *free = 1.0;
    *slope = *save_ms = *wait_ms = 0.0;
    double q = d->cpu_quota_cores, P = d->cpu_period_ms, s = d->engine_ms, b = d->engine_burst_ms;
    if (!(q > 0 && q < n_threads && P > 0 && d->engine_factor > 0 &&
          d->engine_threads == n_threads && s > 0 && b > 0))
        return false;
    double a = q / n_threads * P; /* unthrottled ms a period's share allows */
    if (!(s / b >= 1.05))
        return false; /* no throttling measured */
    *free = b / s;
    *slope = s / b;
    *wait_ms = (P - a) * (P - a) / (2 * P);
    *save_ms = a * (*slope - 1);
    return true;
}

int hr_prof_device_best_threads(const hr_prof_device *d, const int *types, int n_types) {
    int best = 1;
    double best_t = -1.0;
    for (int i = 0; i < d->n_rates; i++) {
        int nt = d->rates[i].n_threads;
        double t = 0.0;
        bool ok = true;
        for (int k = 0; k < n_types && ok; k++) {
            bool found = false;
            for (int j = 0; j < d->n_rates && !found; j++) {
                if (d->rates[j].type == types[k] && d->rates[j].n_threads == nt &&
                    d->rates[j].matvec_gbs > 0) {
                    t += 1.0 / d->rates[j].matvec_gbs;
                    found = true;
                }
            }
            ok = found;
        }
        if (ok && n_types > 0 && (best_t < 0 || t < best_t * 0.999)) {
            best_t = t;
            best = nt;
        }
    }
    return best;
}

uint64_t hr_prof_steady_resident(uint64_t cycled, int64_t avail) {
    if (avail < 0)
        return cycled; /* unknown: assume it fits */
    return cycled <= (uint64_t)avail ? cycled : 0;
}

/* Rate for a type; when the type was not measured, the slowest measured
 * type at that thread count stands in (hr_prof_cost_window warns). */
static const hr_prof_rate *hr_rate_or_fallback(const hr_prof_device *d, int type, int nt) {
    const hr_prof_rate *r = hr_prof_device_rate(d, type, nt);
    if (r)
        return r;
    const hr_prof_rate *slow = NULL;
    for (int i = 0; i < d->n_rates; i++) {
        const hr_prof_rate *c = &d->rates[i];
        if (c->matvec_gbs > 0 &&
            (!slow || abs(c->n_threads - nt) < abs(slow->n_threads - nt) ||
             (c->n_threads == slow->n_threads && c->matvec_gbs < slow->matvec_gbs)))
            slow = c;
    }
    return slow;
}

static double hr_nonneg(double x) { return x > 0 ? x : 0.0; }

/* Memory (weight streaming), per-call/matrix/row overhead and prefill time
 * of one set of matrices, ms. */
static int hr_matrices_cost(const hr_prof_device *d, const hr_prof_layer *L, int nt, double *mem_ms,
                            double *call_ms, double *pre_ms, char *err) {
    const hr_prof_rate *dom = NULL;
    uint64_t dom_bytes = 0;
    for (int i = 0; i < L->n_types; i++) {
        const hr_prof_tbytes *tb = &L->types[i];
        const hr_prof_rate *r = hr_rate_or_fallback(d, tb->type, nt);
        if (!r)
            return hr_seterr(err, HR_EINVAL, "device profile has no CPU rates");
        *mem_ms += (double)tb->bytes / (r->matvec_gbs * 1e9) * 1e3;
        *call_ms += ((double)tb->rows * hr_nonneg(r->matvec_row_ns) * 1e-6 +
                     tb->n_mats * hr_nonneg(r->matvec_mat_us) * 1e-3);
        if (r->matmat_gflops > 0)
            *pre_ms += 2.0 * (double)tb->params / (r->matmat_gflops * 1e9) * 1e3;
        if (!dom || tb->bytes > dom_bytes) {
            dom = r;
            dom_bytes = tb->bytes;
        }
    }
    if (dom && dom->matvec_call_us > 0)
        *call_ms += L->n_calls * dom->matvec_call_us * 1e-3;
    return 0;
}

int hr_prof_cost_window(const hr_prof_device *d, const hr_prof_model *m, const hr_prof_link *l,
                        int b, int e, const hr_prof_cost_params *p, hr_prof_cost *out,
                        char err[HR_ERR_LEN]) {
    memset(out, 0, sizeof *out);
    if (!d || !m || !p)
        return hr_seterr(err, HR_EINVAL, "cost model needs a device and a model profile");
    if (b < 0 || e < b || e > m->n_layers_listed)
        return hr_seterr(err, HR_EINVAL, "window [%d, %d) outside the model's %d layers", b, e,
                         m->n_layers_listed);
    if (d->n_rates == 0)
        return hr_seterr(err, HR_EINVAL, "device profile has no CPU rates");
    int nt = p->n_threads;
    if (nt <= 0) {
        int types[HR_PROF_MAX_TYPES * 2];
        int n = 0;
        for (int il = b; il < e; il++)
            for (int i = 0; i < m->layers[il].n_types; i++) {
                int t = m->layers[il].types[i].type, k = 0;
                while (k < n && types[k] != t)
                    k++;
                if (k == n && n < (int)(sizeof types / sizeof types[0]))
                    types[n++] = t;
            }
        nt = hr_prof_device_best_threads(d, types, n);
    }
    out->n_threads = nt;
    /* one warning per type the device profile lacks */
    int missing[HR_PROF_MAX_TYPES], n_missing = 0;
    for (int il = b; il <= e; il++) {
        const hr_prof_layer *L = il < e ? &m->layers[il] : p->output ? &m->output : NULL;
        for (int i = 0; L && i < L->n_types; i++) {
            int t = L->types[i].type, k = 0;
            while (k < n_missing && missing[k] != t)
                k++;
            if (k == n_missing && !hr_prof_device_rate(d, t, nt) && n_missing < HR_PROF_MAX_TYPES) {
                missing[n_missing++] = t;
                HR_LOG_WARN(HR_PROF_TAG,
                            "no measured rate for %s: the slowest measured type "
                            "stands in",
                            hr_type_name(t));
            }
        }
    }
    const hr_prof_opcost *oc = hr_prof_device_opcost(d, nt);
    const hr_prof_eltwise *ew = &d->eltwise;
    double mem = 0, call = 0, pre = 0;
    int rc;
    /* per-layer work that does not scale with weight bytes, us */
    double n_pos = p->n_past > 0 ? p->n_past : 1;
    double attn_us = 0, elt_us = 0;
    if (oc) {
        attn_us = hr_nonneg(oc->attn_call_us) +
                  m->n_head * n_pos *
                      (hr_nonneg(oc->attn_pos_ns) + hr_nonneg(oc->attn_dim_ns) * m->head_dim) *
                      1e-3;
    }
    elt_us = ((double)m->elems.norm * hr_nonneg(ew->norm_ns) +
              (double)m->elems.add * hr_nonneg(ew->add_ns) +
              (double)m->elems.rope * hr_nonneg(ew->rope_ns) +
              (double)m->elems.swiglu * hr_nonneg(ew->swiglu_ns) +
              (double)m->elems.f16 * hr_nonneg(ew->f16_ns)) *
             1e-3;
    for (int il = b; il < e; il++) {
        if ((rc = hr_matrices_cost(d, &m->layers[il], nt, &mem, &call, &pre, err)))
            return rc;
    }
    double per_layer_us = attn_us + elt_us;
    double compute = call + (e - b) * per_layer_us * 1e-3;
    /* prefill: matmat FLOPs, plus the same per-layer work amortized over a
     * 32-token batch for the calls */
    pre += (e - b) * (elt_us + attn_us) * 1e-3;
    if (p->output) {
        if ((rc = hr_matrices_cost(d, &m->output, nt, &mem, &compute, &pre, err)))
            return rc;
        compute += (double)m->n_embd * hr_nonneg(ew->norm_ns) * 1e-6;
    }
    if (p->input) {
        double bw = d->membw_1t_gbs > 0 ? d->membw_1t_gbs : 1.0;
        mem += (double)m->embd_row_bytes / (bw * 1e9) * 1e3;
        compute += (double)m->n_embd * hr_nonneg(ew->add_ns) * 1e-6; /* dequantize the row */
    }
    /* disk: bytes of the window not in page cache are faulted in */
    uint64_t wbytes = hr_prof_model_window_bytes(m, b, e, p->input, p->output);
    uint64_t resident = p->resident_bytes < wbytes ? p->resident_bytes : wbytes;
    double disk = 0;
    if (resident < wbytes) {
        double mbs = hr_prof_disk_stream_mbs(&d->disk);
        if (!(mbs > 0)) {
            mbs = 100.0;
            HR_LOG_WARN(HR_PROF_TAG, "disk speed unknown: assuming %.0f MB/s", mbs);
        }
        disk = (double)(wbytes - resident) / (mbs * 1e6) * 1e3;
    }
    double comm = 0;
    if (p->n_hops > 0 && l) {
        double bw = l->bw_mbs > 0 ? l->bw_mbs : 0;
        comm = p->n_hops * (hr_nonneg(l->rtt_us) * 0.5e-3 +
                            (bw > 0 ? (double)m->hidden_bytes / (bw * 1e6) * 1e3 : 0));
    }
    /* a CPU quota stretches everything the CPU does, streaming included */
    double slow = hr_prof_device_sustain(d, nt);
    mem *= slow;
    compute *= slow;
    pre *= slow;
    out->memory_ms = mem;
    out->compute_ms = compute;
    out->disk_ms = disk;
    out->comm_ms = comm;
    out->total_ms = mem + compute + disk + comm;
    out->prefill_ms = pre; /* the matmat rate already includes its calls' overhead */
    return 0;
}
