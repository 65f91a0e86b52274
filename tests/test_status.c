/* test_status.c - the status serialiser (agent/status.h): an hr_status
 * built by hand becomes the document `hearth status`, /v1/cluster and the
 * status page read, with every figure where they look for it, unknown
 * figures (NAN) as null or left out (never a number), and the labels that
 * say a figure is assumed. */
#include "tests/check.h"

#include "agent/status.h"

#include <jansson.h>
#include <math.h>

static json_t *get(json_t *o, const char *key) { return json_object_get(o, key); }

/* A two-device cluster: the head (measured, predicted) and a worker that
 * has measured nothing yet, with an assumed link. */
static void build(hr_status *st) {
    memset(st, 0, sizeof *st);
    snprintf(st->head, sizeof st->head, "%s", "kitchen");
    st->version = 7;
    hr_status_plan *p = &st->plan;
    p->id = 3;
    p->k = 2;
    p->n_layer = 8;
    p->ready = true;
    snprintf(p->source, sizeof p->source, "%s", "scheduler: two rounds");
    p->prefetch = 1;
    p->kv_slots = 4;
    p->kv_slot_ctx = 1024;
    p->pred_n_past = 256;
    p->pred_ms_token = 12.5;
    p->pred_compute_ms_token = 10.0;
    p->pred_disk_exposed_ms_token = NAN; /* no prediction of it */
    st->secure = true;
    snprintf(st->pubkey, sizeof st->pubkey, "%s", "KEY");
    st->auth_refused = 2;
    st->recoveries = 1;
    st->adapt.replans = 1;
    st->adapt.last_age_s = -1;
    snprintf(st->adapt.last, sizeof st->adapt.last, "%s", "kept");
    st->adapt.threshold = 0.25;

    hr_status_dev *h = &st->devices[st->n_devices++];
    *h = hr_status_dev_default();
    snprintf(h->name, sizeof h->name, "%s", "kitchen");
    snprintf(h->address, sizeof h->address, "%s", "tcp://10.0.0.1:7700");
    h->head = h->ready = h->has_profile = true;
    h->ring_pos = 0;
    h->win[0] = h->win[1] = 2;
    h->first[0] = 0;
    h->first[1] = 4;
    h->pred_ms_round = 3.0;
    h->meas_ms_round = 3.5;
    h->resident = 1.0;
    h->tokens = 42;
    h->has_info = true;
    h->info.version = 7;
    h->info.threads = 6;
    h->info.cores = 8;
    h->info.mem_total = 16LL << 30;
    h->info.mem_avail = 8LL << 30;
    h->info.cg_limit = -1;
    h->info.model_hash = 0xabcdefULL;
    snprintf(h->info.os, sizeof h->info.os, "%s", "linux");
    h->link.src = HR_STATUS_LINK_MEASURED;
    h->link.rtt_ms = 0.5;
    h->link.bps = 1e8;
    snprintf(h->link.to, sizeof h->link.to, "%s", "attic");
    h->link.age_s = 2.0;
    h->link.measurements = 3;
    h->disk.pred_read_bytes_token = 1024;
    h->disk.meas_read_bytes_token = 2048;
    h->disk.locked = 1;
    h->disk.plan_bps = 2e8;
    h->disk.meas_bps = 1.5e8;
    h->disk.meas_bytes = 64.0 * 1048576;
    h->disk.pred_cpu_ms_token = 200;
    h->disk.meas_cpu_ms_token = 345;
    h->disk.plan_read_cpu_ms_mb = 1.63;
    h->disk.plan_read_cpu_adapted = true;
    h->gpu.present = true;
    snprintf(h->gpu.name, sizeof h->gpu.name, "%s", "iGPU");
    snprintf(h->gpu.type, sizeof h->gpu.type, "%s", "integrated");
    h->gpu.vram_bytes = 1 << 30;
    h->gpu.matvec_gbs = 20;
    h->gpu_layers = 1;

    hr_status_dev *w = &st->devices[st->n_devices++];
    *w = hr_status_dev_default(); /* nothing measured: every figure unknown */
    snprintf(w->name, sizeof w->name, "%s", "attic");
    w->ring_pos = 1;
    w->win[0] = w->win[1] = 2;
    w->first[0] = 2;
    w->first[1] = 6;
    w->meas_ms_round = NAN; /* a measured figure the serialiser must not print as a number */
    w->has_profile = true;
    w->link.rtt_ms = 2.0; /* the profile's default: assumed */
    w->link.bps = 1.25e7;
    w->link.plan_rtt_ms = 2.0;
    w->link.plan_bps = 1.25e7;
    w->link.plan_assumed = true;
    snprintf(w->link.probe, sizeof w->link.probe, "%s", "pending");
}

static void test_document(void) {
    hr_status *st = malloc(sizeof *st);
    build(st);
    char *s = hr_status_json(st);
    CHECK(s != NULL);
    json_error_t je;
    json_t *j = s ? json_loads(s, 0, &je) : NULL;
    CHECK(j != NULL);
    CHECK_STR(json_string_value(get(j, "head")), "kitchen");
    CHECK_EQ(json_integer_value(get(j, "plan_id")), 3);
    CHECK_EQ(json_integer_value(get(j, "k")), 2);
    CHECK_EQ(json_integer_value(get(j, "n_layer")), 8);
    CHECK(json_is_true(get(j, "ready")));
    CHECK_STR(json_string_value(get(j, "wire")), "f32");
    CHECK_STR(json_string_value(get(j, "error")), "");
    CHECK_STR(json_string_value(get(j, "plan_error")), "");
    CHECK_STR(json_string_value(get(j, "plan_source")), "scheduler: two rounds");
    CHECK(json_is_true(get(j, "secure")));
    CHECK_EQ(json_integer_value(get(j, "auth_refused")), 2);
    CHECK_EQ(json_integer_value(get(j, "recoveries")), 1);
    CHECK_EQ(json_real_value(get(j, "pred_ms_token")), 12.5);
    CHECK_EQ(json_real_value(get(j, "pred_compute_ms_token")), 10.0);
    CHECK(json_is_null(get(j, "pred_disk_exposed_ms_token"))); /* NAN: null */
    CHECK(json_is_false(get(j, "pred_evaluated")));            /* the scheduler's own plan */
    CHECK_EQ(json_integer_value(get(j, "kv_slots")), 4);
    CHECK_EQ(json_integer_value(get(j, "kv_slot_ctx")), 1024);
    json_t *ad = get(j, "adapt");
    CHECK_EQ(json_integer_value(get(ad, "replans")), 1);
    CHECK_STR(json_string_value(get(ad, "last")), "kept");
    CHECK_EQ(json_real_value(get(ad, "last_age_s")), -1.0);
    CHECK(get(j, "api") == NULL); /* only /v1/cluster adds it */

    json_t *devs = get(j, "devices");
    CHECK_EQ(json_array_size(devs), 2);
    json_t *h = json_array_get(devs, 0), *w = json_array_get(devs, 1);
    /* the head: measured and predicted side by side */
    CHECK_STR(json_string_value(get(h, "name")), "kitchen");
    CHECK(json_is_true(get(h, "head")));
    CHECK_STR(json_string_value(get(h, "layers")), "0-1,4-5");
    CHECK_EQ(json_integer_value(get(h, "k")), 2);
    CHECK_EQ(json_real_value(get(h, "pred_ms_round")), 3.0);
    CHECK_EQ(json_real_value(get(h, "meas_ms_round")), 3.5);
    CHECK_EQ(json_integer_value(get(h, "tokens")), 42);
    CHECK(json_is_false(get(h, "overloaded"))); /* 2 KiB read per token */
    CHECK_EQ(json_integer_value(get(h, "threads")), 6);
    CHECK_EQ(json_integer_value(get(h, "gpu_layers")), 1);
    CHECK_STR(json_string_value(get(get(h, "gpu"), "type")), "integrated");
    CHECK_EQ(json_integer_value(get(get(h, "gpu"), "vram_bytes")), 1 << 30);
    json_t *info = get(h, "info");
    CHECK_STR(json_string_value(get(info, "os")), "linux");
    CHECK_EQ(json_integer_value(get(info, "cores")), 8);
    CHECK_EQ(json_integer_value(get(info, "mem_total")), 16LL << 30);
    CHECK_EQ(json_integer_value(get(info, "cg_limit")), -1);
    CHECK_STR(json_string_value(get(info, "model_hash")), "0000000000abcdef");
    CHECK(get(info, "profile") == NULL);
    CHECK(json_is_false(get(h, "link_assumed")));
    CHECK_EQ(json_real_value(get(h, "link_rtt_ms")), 0.5);
    CHECK_STR(json_string_value(get(h, "link_to")), "attic");
    CHECK_EQ(json_integer_value(get(h, "link_measurements")), 3);
    CHECK_EQ(json_real_value(get(h, "pred_read_bytes_token")), 1024.0);
    CHECK_EQ(json_real_value(get(h, "meas_read_bytes_token")), 2048.0);
    CHECK_EQ(json_real_value(get(h, "plan_disk_bps")), 2e8);
    CHECK(json_is_false(get(h, "plan_disk_adapted"))); /* its profile's */
    CHECK_EQ(json_real_value(get(h, "meas_disk_bps")), 1.5e8);
    CHECK_EQ(json_real_value(get(h, "meas_disk_bytes")), 64.0 * 1048576);
    CHECK_EQ(json_real_value(get(h, "pred_cpu_ms_token")), 200.0);
    CHECK_EQ(json_real_value(get(h, "meas_cpu_ms_token")), 345.0);
    CHECK_EQ(json_real_value(get(h, "plan_read_cpu_ms_mb")), 1.63);
    CHECK(json_is_true(get(h, "plan_read_cpu_adapted"))); /* its runtime's */
    CHECK(json_is_null(get(h, "stream_bytes_token")));
    CHECK_STR(json_string_value(get(h, "pinned_by")), "mlock");
    CHECK(get(h, "left_out") == NULL);

    /* the worker: nothing measured is a number, the link is labelled assumed */
    CHECK_STR(json_string_value(get(w, "layers")), "2-3,6-7");
    CHECK_EQ(json_array_size(get(w, "windows")), 2); /* per round */
    CHECK_EQ(json_integer_value(json_array_get(get(w, "windows"), 1)), 2);
    CHECK(json_is_null(get(w, "meas_ms_round")));
    CHECK(json_is_null(get(w, "meas_read_bytes_token")));
    CHECK(json_is_null(get(w, "pred_read_bytes_token")));
    CHECK(json_is_null(get(w, "plan_disk_bps")));
    CHECK(get(w, "plan_disk_adapted") == NULL);
    CHECK(json_is_null(get(w, "pred_cpu_ms_token")));
    CHECK(json_is_null(get(w, "meas_cpu_ms_token")));
    CHECK(get(w, "plan_read_cpu_adapted") == NULL);
    CHECK(json_is_null(get(w, "meas_disk_bps")));
    CHECK(json_is_null(get(w, "fetch_total_bytes")));
    CHECK(json_is_null(get(w, "gpu")));
    CHECK_EQ(json_object_size(get(w, "info")), 0);
    CHECK_STR(json_string_value(get(w, "pinned_by")), "unknown");
    CHECK(json_is_true(get(w, "link_assumed")));
    CHECK_EQ(json_real_value(get(w, "link_rtt_ms")), 2.0);
    CHECK(get(w, "link_to") == NULL);
    CHECK(get(w, "link_age_s") == NULL);
    CHECK(json_is_true(get(w, "plan_link_assumed")));
    CHECK_STR(json_string_value(get(w, "link_probe")), "pending");
    CHECK_EQ(json_real_value(get(w, "rate_scale")), 1.0);
    json_decref(j);
    free(s);

    /* unknown link figures are left out; an infeasible plan is plan_error;
     * the API's counters appear when present */
    st->devices[1].link.rtt_ms = st->devices[1].link.bps = NAN;
    st->devices[1].link.plan_bps = NAN;
    snprintf(st->devices[1].left_out, sizeof st->devices[1].left_out, "%s", "too slow");
    st->plan.infeasible = true;
    st->plan.wire_f16 = true;
    snprintf(st->plan.error, sizeof st->plan.error, "%s", "no plan: nothing fits");
    st->api.present = true;
    snprintf(st->api.model, sizeof st->api.model, "%s", "tiny");
    st->api.svc.done = 5;
    st->api.svc.n_shown = 1;
    st->api.svc.run[0].id = 9;
    st->api.svc.run[0].age_s = 1.5;
    st->api.svc.n_mb = 2;
    st->api.svc.mb_rows[1] = 3;
    s = hr_status_json(st);
    j = s ? json_loads(s, 0, &je) : NULL;
    CHECK(j != NULL);
    w = json_array_get(get(j, "devices"), 1);
    CHECK(get(w, "link_rtt_ms") == NULL);
    CHECK(get(w, "plan_link_bps") == NULL);
    CHECK_STR(json_string_value(get(w, "left_out")), "too slow");
    CHECK_STR(json_string_value(get(j, "wire")), "f16");
    CHECK_STR(json_string_value(get(j, "plan_error")), "no plan: nothing fits");
    json_t *api = get(j, "api");
    CHECK_STR(json_string_value(get(api, "model")), "tiny");
    CHECK_EQ(json_integer_value(get(api, "completed")), 5);
    CHECK_EQ(json_integer_value(get(json_array_get(get(api, "running_requests"), 0), "id")), 9);
    CHECK_EQ(json_integer_value(json_array_get(get(api, "batches"), 1)), 3);
    json_decref(j);
    free(s);
    free(st);
}

/* "overloaded" needs measured evidence (a device that has computed tokens
 * and read at least a quarter of a layer's bytes per token); the plan's
 * prediction is "pred_overloaded". The prediction of a forced plan is
 * labelled pred_evaluated. */
static void test_overloaded(void) {
    hr_status *st = malloc(sizeof *st);
    build(st);
    hr_status_dev *h = &st->devices[0], *w = &st->devices[1];
    hr_status_plan *p = &st->plan;
    p->layer_read_bytes = NAN; /* no model profile: 1 MiB */
    CHECK_EQ(hr_status_overload_bytes(p), 1048576.0);
    p->layer_read_bytes = 1024; /* a tiny model: never under the floor */
    CHECK_EQ(hr_status_overload_bytes(p), HR_STATUS_OVERLOAD_MIN_BYTES);
    p->layer_read_bytes = 26.0 * 1048576; /* the 1.1B q4_0 model's layers */
    CHECK_EQ(hr_status_overload_bytes(p), 6.5 * 1048576);
    w->pred_overloaded = true; /* the plan says it streams; no token yet */
    CHECK(!hr_status_overloaded(p, w));
    CHECK(!hr_status_overloaded(p, h)); /* 42 tokens, 2 KiB read per token */
    w->tokens = 3;
    w->disk.meas_read_bytes_token = 1.5 * 1048576; /* a resident device's residue */
    CHECK(!hr_status_overloaded(p, w));
    w->disk.meas_read_bytes_token = 6.5 * 1048576;
    CHECK(hr_status_overloaded(p, w));
    w->tokens = 0; /* reads but no token on record: not evidence */
    CHECK(!hr_status_overloaded(p, w));
    w->tokens = 3;
    w->win[0] = w->win[1] = 0; /* out of the ring */
    CHECK(!hr_status_overloaded(p, w));
    w->win[1] = 2; /* a window in one round only */
    CHECK(hr_status_overloaded(p, w));
    w->win[0] = 2;
    h->disk.meas_read_bytes_token = 30.0 * 1048576; /* not predicted, measured */
    st->plan.pred_evaluated = true;
    char *s = hr_status_json(st);
    json_error_t je;
    json_t *j = s ? json_loads(s, 0, &je) : NULL;
    CHECK(j != NULL);
    json_t *dh = json_array_get(get(j, "devices"), 0), *dw = json_array_get(get(j, "devices"), 1);
    CHECK(json_is_true(get(dh, "overloaded")));
    CHECK(json_is_false(get(dh, "pred_overloaded")));
    CHECK(json_is_true(get(dw, "overloaded")));
    CHECK(json_is_true(get(dw, "pred_overloaded")));
    CHECK(json_is_true(get(j, "pred_evaluated")));
    json_decref(j);
    free(s);

    /* before the first token: predicted, not overloaded; no prediction, not evaluated */
    w->tokens = 0;
    w->disk.meas_read_bytes_token = NAN;
    st->plan.pred_ms_token = NAN;
    s = hr_status_json(st);
    j = s ? json_loads(s, 0, &je) : NULL;
    CHECK(j != NULL);
    dw = json_array_get(get(j, "devices"), 1);
    CHECK(json_is_false(get(dw, "overloaded")));
    CHECK(json_is_true(get(dw, "pred_overloaded")));
    CHECK(json_is_false(get(j, "pred_evaluated")));
    json_decref(j);
    free(s);
    free(st);
}

int main(void) {
    test_document();
    test_overloaded();
    return hr_check_finish("test_status");
}
