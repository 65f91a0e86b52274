/* sched.c - converts device, model and link profiles into the scheduler's
 * input structs (sched/sched.h): per-layer decode / prefill time per
 * thread count, memory for weights, disk and link rates. */
#include "profiler/profiler-impl.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hr_prof_sched_params hr_prof_sched_params_default(void) {
    return (hr_prof_sched_params){.is_head = false,
                                  .n_ctx = 4096,
                                  .n_past = 0,
                                  .prefill_batch = HR_PROF_PREFILL_BATCH,
                                  .reserve_bytes = -1};
}

double hr_prof_mem_reserve(const hr_model *m, int n_ctx, int n_batch, int n_threads, bool is_head) {
    const hr_hparams *hp = hr_model_hparams(m);
    hr_ctx_params cp = hr_ctx_params_default(); /* every layer: the largest matmul scratch */
    cp.n_ctx = hr_hparams_ctx(hp, n_ctx);
    cp.n_batch = n_batch > 0 ? n_batch : 64;
    cp.n_threads = n_threads > 0 ? n_threads : 1;
    size_t work = 0;
    if (hr_ctx_memory_predict(m, &cp, NULL, &work) != 0)
        work = 0;
    double B = cp.n_batch < cp.n_ctx ? cp.n_batch : cp.n_ctx, E = hp->n_embd;
    double plan = B * E * 4 + HR_RING_HDR_SIZE + B * E * 4; /* hidden states, send frame */
    if (is_head)
        plan += HR_RING_HDR_SIZE + B * E * 4 + (double)hp->n_vocab * 4; /* receive, logits */
    return (double)work + plan + HR_PROF_RESERVE_SLACK;
}

double hr_prof_mem_budget(double avail, double limit, double layer_bytes, double reserve_bytes) {
    double a = avail > 0 ? avail : 0;
    if (limit > 0 && limit < a)
        a = limit;
    /* no model at hand: a rough reserve of one layer + 64 MiB */
    double r =
        reserve_bytes >= 0 ? reserve_bytes : (layer_bytes > 0 ? layer_bytes : 0) + 64.0 * 1048576.0;
    return a > r ? a - r : 0;
}

double hr_prof_layer_slack(const hr_sched_model *m) {
    return m->layer_bytes * (1.0 - m->expert_frac + m->expert_frac * m->expert_read);
}

double hr_prof_mem_need(const hr_sched_model *m, int layers, bool is_head) {
    if (!m || layers <= 0)
        return 0;
    double kv = (double)layers * m->kv_bytes_per_layer; /* every window's KV stays */
    double buf = hr_prof_layer_slack(m);                /* the streaming buffer's least */
    return kv + buf + (is_head ? m->output_bytes : 0);
}

double hr_prof_stream_room(const hr_sched_model *m, int layers, bool is_head, double budget) {
    if (!m || layers < 0)
        return 0;
    double room = budget - (double)layers * m->kv_bytes_per_layer - (is_head ? m->output_bytes : 0);
    return room > 0 ? room : 0;
}

int hr_prof_stream_parts(hr_stream_part *parts, int n, double room, double layer_bytes,
                         hr_sched_stream *sc) {
    if (!parts || !sc || n < 1 || n > HR_SCHED_MAX_ROUNDS)
        return HR_EINVAL;
    double len[HR_SCHED_MAX_ROUNDS], mean = 0;
    for (int i = 0; i < n; i++) {
        len[i] = (double)parts[i].len;
        mean += len[i] / n;
    }
    int rc = hr_sched_stream_split_rounds(len, n, room, layer_bytes, 0.0, 1.0, sc, NULL);
    if (rc != 0 && rc != HR_ERANGE)
        return rc;
    if (rc == HR_ERANGE) { /* not even one layer of room: whole windows through one layer */
        sc->resident = 0;
        sc->buffer = layer_bytes;
        sc->read_round = mean;
    }
    hr_stream_split_resident(parts, n, sc->streams ? sc->resident : 1e300);
    return rc;
}

double hr_prof_stream_read(const hr_sched_model *m, const int *win, int k, bool is_head,
                           double budget) {
    if (!m || !win || k < 1 || k > HR_SCHED_MAX_ROUNDS)
        return 0;
    double bytes[HR_SCHED_MAX_ROUNDS], total = 0;
    int layers = 0;
    for (int r = 0; r < k; r++) {
        bytes[r] = win[r] > 0 ? win[r] * m->layer_bytes : 0;
        total += bytes[r];
        layers += win[r] > 0 ? win[r] : 0;
    }
    if (layers == 0)
        return 0;
    hr_sched_stream sc;
    double room = hr_prof_stream_room(m, layers, is_head, budget);
    int rc = hr_sched_stream_split_rounds(bytes, k, room, m->layer_bytes, m->expert_frac,
                                          m->expert_read, &sc, NULL);
    if (rc == HR_ERANGE)
        return total; /* whole windows (as hr_prof_stream_parts) */
    return rc == 0 ? sc.read_round * k : 0;
}

int hr_prof_to_sched_model(const hr_prof_model *m, int n_ctx, hr_sched_model *out,
                           char err[HR_ERR_LEN]) {
    memset(out, 0, sizeof *out);
    if (!m || m->n_layer <= 0 || m->n_layers_listed != m->n_layer || n_ctx <= 0)
        return hr_seterr(err, HR_EINVAL, "model profile without layers or n_ctx <= 0");
    out->n_layer = m->n_layer;
    out->layer_bytes = (double)hr_prof_model_window_bytes(m, 0, m->n_layer, false, false) /
                       m->n_layer;                                   /* bytes, mean */
    out->hidden_bytes = (double)m->hidden_bytes;                     /* bytes per hop */
    out->kv_bytes_per_layer = (double)m->kv_bytes_per_token * n_ctx; /* bytes */
    out->output_bytes = (double)m->output.bytes;                     /* bytes */
    uint64_t all = hr_prof_model_window_bytes(m, 0, m->n_layer, false, false);
    const char *mode = getenv("HEARTH_EXPERTS"); /* whole: experts stream as dense layers do */
    bool whole = mode && strcmp(mode, "whole") == 0;
    if (m->n_expert > 0 && all > 0 && m->expert_bytes <= all && !whole) {
        out->expert_frac = (double)m->expert_bytes / (double)all;
        out->expert_read = (double)m->n_expert_used / m->n_expert; /* even routing */
    }
    return 0;
}

int hr_prof_to_sched_device(const hr_prof_device *d, const hr_prof_model *m,
                            const hr_prof_link *next, const hr_prof_sched_params *p,
                            hr_sched_device *out, char err[HR_ERR_LEN]) {
    *out = hr_sched_device_default();
    if (!d || !m || !p || m->n_layer <= 0 || m->n_layers_listed != m->n_layer)
        return hr_seterr(err, HR_EINVAL, "need a device profile and a model profile");
    hr_prof_strlcpy(out->name, d->os.hostname[0] ? d->os.hostname : "device", sizeof out->name);
    out->is_head = p->is_head;
    if (strcmp(d->os.sysname, "Linux") == 0)
        out->os = HR_SCHED_OS_LINUX;
    else if (strcmp(d->os.sysname, "Darwin") == 0)
        out->os = HR_SCHED_OS_MACOS;
    else if (strncmp(d->os.sysname, "Windows", 7) == 0)
        out->os = HR_SCHED_OS_WINDOWS;
    else
        out->os = HR_SCHED_OS_OTHER;
    hr_prof_cost_params cp = hr_prof_cost_params_default();
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : 4096;
    cp.n_past = p->n_past > 0 ? p->n_past : n_ctx / 2;
    int batch = p->prefill_batch > 0 ? p->prefill_batch : HR_PROF_PREFILL_BATCH;
    hr_prof_cost c;
    int rc;
    /* per-layer decode and prefill at every measured thread count (ms) */
    out->n_thread_rates = 0;
    for (int i = 0; i < d->n_rates; i++) {
        int nt = d->rates[i].n_threads;
        if (nt < 1 || nt > HR_SCHED_MAX_THREADS || out->decode_ms[nt - 1] > 0)
            continue;
        cp.n_threads = nt;
        if ((rc = hr_prof_cost_window(d, m, NULL, 0, m->n_layer, &cp, &c, err)))
            return rc;
        out->decode_ms[nt - 1] = c.total_ms / m->n_layer;            /* ms per layer */
        out->prefill_ms[nt - 1] = c.prefill_ms / m->n_layer * batch; /* ms per layer-batch */
        if (nt > out->n_thread_rates)
            out->n_thread_rates = nt;
    }
    if (out->n_thread_rates == 0)
        return hr_seterr(err, HR_EINVAL, "device profile has no CPU rates");
    out->t_layer_ms = 0; /* the planner reads decode_ms[] at its thread choice */
    /* a round's burst: the engine probe's intercept (under a CPU quota) */
    out->t_round_ms = d->engine_factor > 0 ? d->engine_round_ms : 0;
    /* how far its attempts disagreed: the planner's margin for a simpler plan */
    out->spread = d->engine_factor > 0 && d->engine_spread > 0 ? d->engine_spread : 0;
    /* memory for weights + KV (bytes) */
    hr_sched_model sm;
    double mean_layer =
        hr_prof_to_sched_model(m, 1, &sm, err) == 0
            ? hr_prof_layer_slack(&sm)
            : (double)hr_prof_model_window_bytes(m, 0, m->n_layer, false, false) / m->n_layer;
    if (d->mem.weights_avail_bytes < 0)
        HR_LOG_WARN(HR_PROF_TAG, "%s: available memory unknown: mem_bytes = 0", out->name);
    out->mem_bytes = hr_prof_mem_budget((double)d->mem.weights_avail_bytes, 0, mean_layer,
                                        (double)p->reserve_bytes);
    /* disk (bytes/s): what faulting a non-resident window achieves */
    double mbs = hr_prof_disk_stream_mbs(&d->disk);
    out->disk_bps = mbs > 0 ? mbs * 1e6 : 0;
    if (next) {
        out->rtt_ms = next->rtt_us > 0 ? next->rtt_us * 1e-3 : 0;
        out->link_bps = next->bw_mbs > 0 ? next->bw_mbs * 1e6 : 0;
        out->rtt_bytes = next->rtt_us > 0 && next->msg_bytes > 0 ? next->msg_bytes : 0;
    }
    /* the chosen GPU: its measured rates (window overheads spread over the
     * layers, as if each layer were a window of its own: an upper bound) and
     * its largest device-local heap, less a fifth for work buffers */
    const hr_prof_gpu *g = hr_prof_device_gpu(d);
    double gms = g ? hr_prof_gpu_window_ms(g, m, 0, m->n_layer) : -1;
    if (g && gms > 0 && g->vram_bytes > 0) {
        double over = g->submit_us > 0 ? g->submit_us * 1e-3 : 0;
        out->t_layer_gpu_ms = gms / m->n_layer + over * (m->n_layer - 1) / m->n_layer;
        out->vram_bytes = 0.8 * (double)g->vram_bytes;
    } else if (g) {
        HR_LOG_WARN(HR_PROF_TAG,
                    "%s: GPU %s lacks a rate for a weight type of the model: CPU "
                    "only",
                    out->name, g->name);
    }
    if (p->is_head) {
        /* embedding row + output norm + LM head + greedy sampling over n_vocab */
        int best = 1;
        for (int t = 1; t <= out->n_thread_rates; t++)
            if (out->decode_ms[t - 1] > 0 &&
                (out->decode_ms[best - 1] <= 0 || out->decode_ms[t - 1] < out->decode_ms[best - 1]))
                best = t;
        cp.n_threads = best;
        cp.input = cp.output = true;
        if ((rc = hr_prof_cost_window(d, m, NULL, 0, 0, &cp, &c, err)))
            return rc;
        double sample_ms = d->eltwise.add_ns > 0 ? m->n_vocab * d->eltwise.add_ns * 1e-6 *
                                                       hr_prof_device_sustain(d, best)
                                                 : 0;
        out->t_head_ms = c.total_ms + sample_ms;
    }
    /* a CPU quota: unthrottled CPU times and the quota's term (the cost
     * model's Q); prefill stays at the sustained rate (a batch is long) */
    double free = 1, slope = 0, save = 0, wait = 0;
    if (hr_prof_throttle(d, d->engine_threads, &free, &slope, &save, &wait)) {
        for (int t = 0; t < out->n_thread_rates; t++)
            out->decode_ms[t] *= free;
        out->t_head_ms *= free;
        out->t_round_ms = 0;
        out->throttle_slope = slope;
        out->throttle_save_ms = save;
        out->throttle_wait_ms = wait;
        out->throttle_period_ms = d->cpu_period_ms;
        /* the page faults of what it streams run on the same share */
        out->read_cpu_ms_mb = d->disk.read_cpu_ms_mb > 0 ? d->disk.read_cpu_ms_mb : 0;
    }
    return 0;
}

void hr_prof_assume_link(hr_sched_device *d) {
    if (d->link_bps <= 0) {
        d->link_bps = HR_PROF_ASSUMED_LINK_BPS;
        d->link_assumed = true;
    }
    if (d->rtt_ms <= 0) {
        d->rtt_ms = HR_PROF_ASSUMED_RTT_MS;
        d->link_assumed = true;
    }
}

double hr_prof_disk_stream_mbs(const hr_prof_disk *dk) {
    double a = dk->mmap_mbs, b = dk->seq_mbs;
    if (a > 0 && b > 0)
        return a < b ? a : b;
    return a > 0 ? a : b;
}
