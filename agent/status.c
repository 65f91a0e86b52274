/* status.c - the one serialiser of the cluster status (status.h): an
 * hr_status to the JSON document `hearth status`, /v1/cluster and the
 * status page read. Unknown figures (NAN) become null; nothing here reads
 * the head's state. */
#include "agent/status.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An object being built; ok turns false on the first failed allocation. */
typedef struct {
    json_t *o;
    bool *ok;
} hr_jobj;

static hr_jobj hr_jobj_new(bool *ok) {
    hr_jobj j = {json_object(), ok};
    if (!j.o)
        *ok = false;
    return j;
}

/* Sets key to v (a new reference, NULL after a failed allocation). */
static void hr_put(hr_jobj j, const char *key, json_t *v) {
    if (!v || json_object_set_new(j.o, key, v) != 0)
        *j.ok = false;
}

/* A figure: a real, or null when unknown (NAN: jansson has no NaN). */
static json_t *hr_fig(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void hr_put_str(hr_jobj j, const char *key, const char *s) {
    hr_put(j, key, json_string(s));
}
static void hr_put_int(hr_jobj j, const char *key, int64_t v) {
    hr_put(j, key, json_integer((json_int_t)v));
}
static void hr_put_bool(hr_jobj j, const char *key, bool v) { hr_put(j, key, json_boolean(v)); }
static void hr_put_fig(hr_jobj j, const char *key, double v) { hr_put(j, key, hr_fig(v)); }

hr_status_dev hr_status_dev_default(void) {
    hr_status_dev d;
    memset(&d, 0, sizeof d);
    d.ring_pos = -1;
    d.link.rtt_ms = d.link.bps = NAN;
    d.link.plan_rtt_ms = d.link.plan_bps = NAN;
    d.disk.pred_read_bytes_token = d.disk.meas_read_bytes_token = NAN;
    d.disk.stream_bytes_token = d.disk.pinned_bytes = NAN;
    d.disk.plan_bps = d.disk.meas_bps = NAN;
    d.disk.pred_cpu_ms_token = d.disk.meas_cpu_ms_token = d.disk.plan_read_cpu_ms_mb = NAN;
    d.disk.locked = -1;
    d.disk.ex_keep = -1;
    d.fetch_done_bytes = d.fetch_total_bytes = d.fetch_wire_bytes = NAN;
    d.rate_scale = 1;
    return d;
}

double hr_status_overload_bytes(const hr_status_plan *p) {
    double b = isfinite(p->layer_read_bytes) && p->layer_read_bytes > 0 ? p->layer_read_bytes / 4
                                                                        : 1024.0 * 1024.0;
    return b > HR_STATUS_OVERLOAD_MIN_BYTES ? b : HR_STATUS_OVERLOAD_MIN_BYTES;
}

/* Its largest window of the plan's rounds. */
static int hr_dev_wmax(const hr_status_plan *p, const hr_status_dev *d) {
    int w = 0;
    for (int r = 0; r < p->k && r < HR_AGENT_MAX_K; r++)
        w = d->win[r] > w ? d->win[r] : w;
    return w;
}

bool hr_status_overloaded(const hr_status_plan *p, const hr_status_dev *d) {
    double rd = d->disk.meas_read_bytes_token;
    return hr_dev_wmax(p, d) > 0 && d->tokens > 0 && isfinite(rd) &&
           rd >= hr_status_overload_bytes(p);
}

/* The layers of a device's windows, one range per round ("0-3,8-11"; "-"
 * for a round without), "-" when it has none. */
static void hr_layers_str(char *out, size_t cap, const hr_status_plan *p, const hr_status_dev *d) {
    size_t n = 0;
    out[0] = 0;
    for (int r = 0; r < p->k && r < HR_AGENT_MAX_K && n < cap; r++) {
        int b = d->first[r], q = d->win[r] > 0 ? snprintf(out + n, cap - n, "%s%d-%d", r ? "," : "",
                                                          b, b + d->win[r] - 1)
                                               : snprintf(out + n, cap - n, "%s-", r ? "," : "");
        n += q > 0 ? (size_t)q : 0;
    }
    if (hr_dev_wmax(p, d) <= 0)
        snprintf(out, cap, "-");
}

/* The link fields of a device row (assumed until measured). */
static void hr_link_json(hr_jobj o, const hr_status_link *l) {
    hr_put_bool(o, "link_assumed", l->src == HR_STATUS_LINK_ASSUMED);
    if (isfinite(l->rtt_ms) && isfinite(l->bps)) {
        hr_put_fig(o, "link_rtt_ms", l->rtt_ms);
        hr_put_fig(o, "link_bps", l->bps);
    }
    if (l->src == HR_STATUS_LINK_MEASURED) {
        hr_put_str(o, "link_to", l->to);
        hr_put_str(o, "link_endpoint", l->endpoint);
        hr_put_fig(o, "link_age_s", l->age_s);
        hr_put_int(o, "link_plan", l->plan);
        hr_put_int(o, "link_measurements", l->measurements);
    } else if (l->src == HR_STATUS_LINK_REVERSE) { /* measured by its next device */
        hr_put_str(o, "link_to", l->to);
        hr_put_bool(o, "link_reverse", true);
    }
    if (l->probe[0])
        hr_put_str(o, "link_probe", l->probe);
    if (isfinite(l->plan_bps) && l->plan_bps > 0) { /* the figures the current plan ran on */
        hr_put_fig(o, "plan_link_rtt_ms", l->plan_rtt_ms);
        hr_put_fig(o, "plan_link_bps", l->plan_bps);
        hr_put_bool(o, "plan_link_assumed", l->plan_assumed);
    }
}

static json_t *hr_dev_json(const hr_status *st, const hr_status_dev *d, bool *ok) {
    hr_jobj o = hr_jobj_new(ok);
    if (!o.o)
        return NULL;
    int k = st->plan.k > 0 ? st->plan.k : 1;
    char layers[256];
    hr_layers_str(layers, sizeof layers, &st->plan, d);
    hr_put_str(o, "name", d->name);
    hr_put_str(o, "address", d->address);
    hr_put_str(o, "data", d->data);
    hr_put_bool(o, "head", d->head);
    hr_put_bool(o, "lost", d->lost);
    hr_put_bool(o, "ready", d->ready);
    hr_put_int(o, "ring_pos", d->ring_pos);
    hr_put_int(o, "w", hr_dev_wmax(&st->plan, d)); /* its largest window */
    json_t *wins = json_array();                   /* layers of its window in each round */
    for (int r = 0; wins && r < k && r < HR_AGENT_MAX_K; r++)
        json_array_append_new(wins, json_integer(d->win[r]));
    hr_put(o, "windows", wins);
    hr_put_int(o, "k", k);
    hr_put_str(o, "layers", layers);
    hr_put_fig(o, "pred_ms_round", d->pred_ms_round);
    hr_put_fig(o, "meas_ms_round", d->meas_ms_round);
    hr_put_fig(o, "resident", d->resident);
    hr_put_int(o, "tokens", (int64_t)d->tokens);
    /* measured (hr_status_overloaded), and what the plan predicted */
    hr_put_bool(o, "overloaded", hr_status_overloaded(&st->plan, d));
    hr_put_bool(o, "pred_overloaded", d->pred_overloaded);
    /* its JOIN as it sent it, less the profile (ring/msg.c writes the keys) */
    hr_put(o, "info", d->has_info ? hr_msg_join_info_json(&d->info) : json_object());
    hr_put_int(o, "threads", d->has_info ? d->info.threads : 0); /* compute threads in use */
    hr_put_int(o, "gpu_layers", d->gpu_layers);
    hr_put(o, "gpu",
           d->gpu.present ? json_pack("{s:s,s:s,s:I,s:o}", "name", d->gpu.name, "type", d->gpu.type,
                                      "vram_bytes", (json_int_t)d->gpu.vram_bytes, "matvec_gbs",
                                      hr_fig(d->gpu.matvec_gbs))
                          : json_null());
    hr_put_bool(o, "has_profile", d->has_profile);
    hr_link_json(o, &d->link);
    if (d->left_out[0])
        hr_put_str(o, "left_out", d->left_out);
    const hr_status_disk *dk = &d->disk;
    hr_put_fig(o, "pred_read_bytes_token", dk->pred_read_bytes_token);
    hr_put_fig(o, "meas_read_bytes_token", dk->meas_read_bytes_token);
    hr_put_fig(o, "stream_bytes_token", dk->stream_bytes_token);
    hr_put_fig(o, "pinned_bytes", dk->pinned_bytes);
    hr_put_fig(o, "plan_disk_bps", dk->plan_bps);
    if (isfinite(dk->plan_bps))
        hr_put_bool(o, "plan_disk_adapted", dk->plan_adapted);
    hr_put_fig(o, "meas_disk_bps", dk->meas_bps);
    hr_put_fig(o, "meas_disk_bytes", dk->meas_bytes);
    hr_put_fig(o, "pred_cpu_ms_token", dk->pred_cpu_ms_token);
    hr_put_fig(o, "meas_cpu_ms_token", dk->meas_cpu_ms_token);
    hr_put_fig(o, "plan_read_cpu_ms_mb", dk->plan_read_cpu_ms_mb);
    if (isfinite(dk->plan_read_cpu_ms_mb))
        hr_put_bool(o, "plan_read_cpu_adapted", dk->plan_read_cpu_adapted);
    hr_put_str(o, "pinned_by", dk->locked > 0 ? "mlock" : dk->locked == 0 ? "advice" : "unknown");
    if (dk->ex_keep >= 0)
        hr_put(o, "experts",
               json_pack("{s:i,s:i,s:I,s:I,s:I,s:I}", "keep", dk->ex_keep, "of", dk->ex_of,
                         "routed", (json_int_t)dk->ex_routed, "hits", (json_int_t)dk->ex_hits,
                         "fetched_bytes", (json_int_t)dk->ex_fetched, "moved_bytes",
                         (json_int_t)dk->ex_moved));
    hr_put_fig(o, "fetch_done_bytes", d->fetch_done_bytes);
    hr_put_fig(o, "fetch_total_bytes", d->fetch_total_bytes);
    hr_put_fig(o, "fetch_wire_bytes", d->fetch_wire_bytes);
    hr_put_fig(o, "rate_scale", d->rate_scale);
    hr_put_fig(o, "meas_pred_ratio", d->meas_pred_ratio);
    return o.o;
}

static json_t *hr_adapt_json(const hr_status_adapt *ad, bool *ok) {
    hr_jobj o = hr_jobj_new(ok);
    if (!o.o)
        return NULL;
    hr_put_int(o, "replans", ad->replans);
    hr_put_int(o, "rescaled", ad->rescaled);
    hr_put_bool(o, "pending", ad->pending);
    hr_put_str(o, "last", ad->last);
    hr_put_fig(o, "last_age_s", ad->last_age_s);
    hr_put_int(o, "from_plan", ad->from_plan);
    hr_put_int(o, "to_plan", ad->to_plan);
    hr_put_fig(o, "threshold", ad->threshold);
    hr_put_fig(o, "window_s", ad->window_s);
    hr_put_fig(o, "holdoff_s", ad->holdoff_s);
    return o.o;
}

static json_t *hr_api_json(const hr_status_api *api, bool *ok) {
    hr_jobj o = hr_jobj_new(ok);
    if (!o.o)
        return NULL;
    const hr_service_stats *ss = &api->svc;
    hr_put_str(o, "model", api->model);
    hr_put_int(o, "n_ctx", api->n_ctx);
    hr_put_int(o, "queued", ss->queued);
    hr_put_bool(o, "running", ss->running);
    hr_put_int(o, "requests", (int64_t)ss->requests);
    hr_put_int(o, "completed", (int64_t)ss->done);
    hr_put_int(o, "canceled", (int64_t)ss->canceled);
    hr_put_int(o, "failed", (int64_t)ss->failed);
    hr_put_int(o, "tokens", (int64_t)ss->tokens);
    hr_put_fig(o, "last_prompt_tps", ss->last_prompt_tps);
    hr_put_fig(o, "last_gen_tps", ss->last_gen_tps);
    hr_put_int(o, "parallel", ss->parallel);
    hr_put_int(o, "n_running", ss->n_running);
    hr_put_int(o, "cached_tokens", (int64_t)ss->cached_tokens);
    json_t *run = json_array(), *mb = json_array();
    for (int i = 0; run && i < ss->n_shown && i < HR_SERVICE_MAX_SHOWN; i++)
        if (json_array_append_new(
                run, json_pack("{s:I,s:i,s:i,s:o}", "id", (json_int_t)ss->run[i].id,
                               "prompt_tokens", ss->run[i].n_prompt, "completion_tokens",
                               ss->run[i].n_gen, "seconds", hr_fig(ss->run[i].age_s))))
            *ok = false;
    for (int i = 0; mb && i < ss->n_mb && i < HR_SERVICE_MAX_SHOWN; i++)
        if (json_array_append_new(mb, json_integer(ss->mb_rows[i])))
            *ok = false;
    hr_put(o, "running_requests", run);
    hr_put(o, "batches", mb);
    return o.o;
}

char *hr_status_json(const hr_status *st) {
    bool ok = true;
    hr_jobj j = hr_jobj_new(&ok);
    if (!j.o)
        return NULL;
    const hr_status_plan *p = &st->plan;
    hr_put_str(j, "head", st->head);
    hr_put_int(j, "version", st->version);
    hr_put_int(j, "plan_id", p->id);
    hr_put_int(j, "k", p->k > 0 ? p->k : 1);
    hr_put_int(j, "n_layer", p->n_layer);
    hr_put_bool(j, "ready", p->ready);
    hr_put_str(j, "wire", p->wire_f16 ? "f16" : "f32");
    hr_put_str(j, "error", p->error);
    hr_put_int(j, "prefetch", p->prefetch);
    json_t *devs = json_array();
    if (!devs)
        ok = false;
    for (int i = 0; devs && i < st->n_devices && i < HR_AGENT_MAX_DEV; i++)
        if (json_array_append_new(devs, hr_dev_json(st, &st->devices[i], &ok)))
            ok = false;
    hr_put(j, "devices", devs);
    hr_put_bool(j, "secure", st->secure);
    hr_put_str(j, "pubkey", st->pubkey);
    hr_put_int(j, "auth_refused", (int64_t)st->auth_refused);
    hr_put_str(j, "plan_source", p->source);
    hr_put_str(j, "plan_error", p->infeasible ? p->error : "");
    hr_put_int(j, "recoveries", (int64_t)st->recoveries);
    /* the scheduler's prediction for the plan in use (null: no prediction) */
    hr_put_fig(j, "pred_ms_token", p->pred_ms_token);
    hr_put_int(j, "pred_n_past", p->pred_n_past);
    hr_put_fig(j, "pred_compute_ms_token", p->pred_compute_ms_token);
    hr_put_fig(j, "pred_disk_exposed_ms_token", p->pred_disk_exposed_ms_token);
    hr_put_bool(j, "pred_evaluated", isfinite(p->pred_ms_token) && p->pred_evaluated);
    hr_put_fig(j, "pred_noise", p->pred_noise);
    hr_put_fig(j, "pred_fastest_ms_token", p->pred_fastest_ms_token);
    hr_put_int(j, "pred_fastest_k", p->pred_fastest_k);
    hr_put_int(j, "pred_fastest_active", p->pred_fastest_active);
    hr_put_int(j, "kv_slots", p->kv_slots);
    hr_put_int(j, "kv_slot_ctx", p->kv_slot_ctx);
    hr_put(j, "adapt", hr_adapt_json(&st->adapt, &ok));
    if (st->api.present)
        hr_put(j, "api", hr_api_json(&st->api, &ok));
    char *s = ok ? json_dumps(j.o, JSON_COMPACT) : NULL;
    json_decref(j.o);
    return s;
}
