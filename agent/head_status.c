/* head_status.c - the head's status snapshot (hr_head_status, status.h):
 * the device table, the plan and its predictions, the links, the disk
 * figures and the adaptive plans copied into a typed hr_status under
 * dev_mu, for the one serialiser (status.c) and the HTTP API. */
#include "agent/head-impl.h"

#include "common/sync.h"
#include "mmap/stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A figure that is < 0 when unknown, as NAN. */
static double hr_known(double v) { return v >= 0 ? v : NAN; }

/* Weight bytes a decode token reads per layer, the mean over the model
 * profile's layers (routed experts: their share); NAN without a profile. */
static double hr_layer_read_bytes(const hr_head *hd) {
    const hr_prof_model *pm = &hd->pm;
    if (!hd->have_pm || pm->n_layers_listed <= 0 || !pm->layers)
        return NAN;
    double sum = 0;
    for (int l = 0; l < pm->n_layers_listed; l++)
        for (int t = 0; t < pm->layers[l].n_types; t++)
            sum += (double)pm->layers[l].types[t].bytes;
    return sum / pm->n_layers_listed;
}

/* Device d's row (dev_mu held); k: the plan's rounds. */
static void hr_head_dev_status(const hr_head *hd, const hr_dev *d, bool is_head, int k, double now,
                               hr_status_dev *o) {
    *o = hr_status_dev_default();
    snprintf(o->name, sizeof o->name, "%s", d->name);
    snprintf(o->address, sizeof o->address, "%s", d->ctrl_ep);
    snprintf(o->data, sizeof o->data, "%s", d->data_ep);
    o->head = is_head;
    o->lost = d->lost;
    o->ready = d->ready && d->ready_plan == hd->plan_id;
    o->pred_overloaded = d->overloaded;
    o->has_info = d->has_join;
    if (d->has_join) {
        o->info = d->join;
        o->info.profile = NULL; /* never kept; the row does not own one */
    }
    o->ring_pos = d->ring_pos;
    memcpy(o->win, d->win, sizeof o->win);
    memcpy(o->first, d->first, sizeof o->first);
    o->gpu_layers = d->n_gpu;
    o->pred_ms_round = d->pred_ms_round;
    o->meas_ms_round = d->meas_ms_round;
    o->resident = d->resident;
    o->tokens = d->tokens;
    o->has_profile = d->has_sched;
    snprintf(o->left_out, sizeof o->left_out, "%s", d->left_out);
    if (d->gpu[0]) {
        o->gpu.present = true;
        snprintf(o->gpu.name, sizeof o->gpu.name, "%s", d->gpu);
        snprintf(o->gpu.type, sizeof o->gpu.type, "%s", d->gpu_kind);
        o->gpu.vram_bytes = d->gpu_vram;
        o->gpu.matvec_gbs = d->gpu_gbs;
    }
    hr_head_link_status(d, is_head, now, &o->link);
    /* disk: what the plan's cost model predicts it reads per token, what it
     * measured over its windows, what its runtime split streams and keeps */
    o->disk.pred_read_bytes_token = hr_known(d->pred_read_token);
    /* measured per window it computed (a round without layers reads nothing) */
    int n_win = hr_head_windows_computed(d->win, k);
    o->disk.meas_read_bytes_token = d->meas_read_round >= 0 ? d->meas_read_round * n_win : NAN;
    o->disk.stream_bytes_token = d->stream_round >= 0 ? d->stream_round * k : NAN;
    o->disk.pinned_bytes = hr_known(d->pinned);
    o->disk.locked = d->locked > 0 ? 1 : d->locked == 0 ? 0 : -1;
    o->disk.ex_keep = d->ex_keep;
    o->disk.ex_of = hr_model_hparams(hd->a->m)->n_expert;
    o->disk.ex_routed = d->ex_routed;
    o->disk.ex_hits = d->ex_hits;
    o->disk.ex_fetched = d->ex_fetched;
    o->disk.ex_moved = d->ex_moved;
    o->disk.plan_bps = d->has_sched && d->sd.disk_bps > 0 ? hr_head_disk_bps(d) : NAN;
    o->disk.plan_adapted = d->disk_scale > 0;
    o->disk.meas_bps = hr_head_pump_rate(d, &o->disk.meas_bytes);
    o->disk.pred_cpu_ms_token = hr_known(d->pred_cpu_token);
    o->disk.meas_cpu_ms_token = d->meas_cpu_round >= 0 ? d->meas_cpu_round * n_win : NAN;
    o->disk.plan_read_cpu_ms_mb = d->has_sched ? hr_head_read_cpu(d) : NAN;
    o->disk.plan_read_cpu_adapted = d->read_cpu_ms_mb >= 0;
    o->fetch_done_bytes = hr_known(d->fetch_done);
    o->fetch_total_bytes = hr_known(d->fetch_total);
    o->fetch_wire_bytes = hr_known(d->fetch_wire);
    hr_head_adapt_dev_status(d, o);
}

int hr_head_status(hr_agent *a, hr_status *st) {
    hr_head *hd = a->head;
    if (!hd)
        return HR_EINVAL;
    memset(st, 0, sizeof *st);
    double now = hr_now_s();
    const hr_hparams *hp = hr_model_hparams(a->m);
    snprintf(st->head, sizeof st->head, "%s", a->name);
    st->version = HR_RING_VERSION;
    st->secure = a->keys != NULL;
    snprintf(st->pubkey, sizeof st->pubkey, "%s", a->keys ? hr_ring_keys_public(a->keys) : "");
    st->auth_refused = a->keys ? hr_ring_keys_refused(a->keys) : 0;
    st->recoveries = atomic_load(&hd->recoveries);
    hr_status_plan *p = &st->plan;
    p->wire_f16 = a->p.wire_dtype != HR_RING_F32;
    p->prefetch = (int)a->p.prefetch;
    p->n_layer = hp->n_layer;
    p->pred_n_past = HR_PLAN_N_PAST;

    hr_lock(&hd->dev_mu, HR_RANK_DEV);
    int k = hd->plan_k > 0 ? hd->plan_k : 1;
    p->id = hd->plan_id;
    p->k = k;
    p->ready = hd->ready;
    snprintf(p->error, sizeof p->error, "%s", hd->plan_err);
    p->infeasible = strncmp(hd->plan_err, "no plan", 7) == 0;
    snprintf(p->source, sizeof p->source, "%s", hd->plan_src);
    p->kv_slots = hd->plan_seq;    /* requests at once */
    p->kv_slot_ctx = hd->plan_ctx; /* positions each */
    /* the scheduler's prediction for the plan in use (NAN: none) */
    bool pred = hd->have_sched && hd->sched.status == 0 && hd->sched.k > 0;
    p->pred_ms_token = pred ? hd->sched.latency_ms : NAN;
    p->pred_compute_ms_token = pred ? hd->sched.compute_ms : NAN;
    p->pred_disk_exposed_ms_token = pred ? hd->sched.disk_exposed_ms : NAN;
    p->pred_evaluated = pred && !hd->plan_chosen;
    p->pred_noise = pred && !p->pred_evaluated ? hd->sched.noise_margin : NAN;
    bool simpler = pred && !p->pred_evaluated && hd->sched.fastest_k > 0;
    p->pred_fastest_ms_token = simpler ? hd->sched.fastest_ms : NAN;
    p->pred_fastest_k = simpler ? hd->sched.fastest_k : 0;
    p->pred_fastest_active = simpler ? hd->sched.fastest_active : 0;
    p->layer_read_bytes = hr_layer_read_bytes(hd);
    for (int i = 0; i < hd->n_devs && i < HR_AGENT_MAX_DEV; i++) {
        if (i == 0) { /* its own pump's reads, sampled here */
            hr_stream_stats ss;
            hr_node_stream_stats(a, &ss);
            hr_head_pump_sample(&hd->devs[0], hd->plan_id, ss.pump_bytes, ss.pump_s);
        }
        hr_dev d = hd->devs[i];
        if (i == 0) { /* the head's own figures */
            hr_lock(&a->st.mu, HR_RANK_STATS);
            d.meas_ms_round = a->st.ms_round;
            d.tokens = a->st.tokens;
            hr_unlock(&a->st.mu, HR_RANK_STATS);
            d.resident = hd->resident;
            hr_stream_stats ss;
            hr_node_stream_stats(a, &ss);
            d.meas_read_round = ss.read_round;
            d.stream_round = ss.stream_round;
            d.pinned = ss.pinned;
            d.locked = ss.locked;
            d.ex_keep = ss.ex_keep;
            d.ex_routed = ss.ex_routed;
            d.ex_hits = ss.ex_hits;
            d.ex_fetched = ss.ex_fetched;
            d.ex_moved = ss.ex_moved;
        }
        hr_head_dev_status(hd, &d, i == 0, k, now, &st->devices[st->n_devices++]);
    }
    hr_head_adapt_status(hd, now, &st->adapt);
    hr_unlock(&hd->dev_mu, HR_RANK_DEV);
    return 0;
}

char *hr_head_status_json(hr_agent *a) {
    hr_status *st = malloc(sizeof *st);
    char *s = st && hr_head_status(a, st) == 0 ? hr_status_json(st) : NULL;
    free(st);
    return s;
}
