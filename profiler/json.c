/* json.c - profile documents <-> JSON (jansson), schema "hearth.profile"
 * version 1 (profiler/SCHEMA.md). Unknown measurements (-1) are written as
 * null and read back as -1; unknown keys are ignored so later versions can
 * add fields. Reentrant. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "kernels/types.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ---- */

typedef struct {
    int bad; /* allocation failures */
} hr_jw;

static void jset(hr_jw *w, json_t *o, const char *k, json_t *v) {
    if (!o || !v || json_object_set_new(o, k, v) != 0)
        w->bad++;
}

static void jpush(hr_jw *w, json_t *a, json_t *v) {
    if (!a || !v || json_array_append_new(a, v) != 0)
        w->bad++;
}

static json_t *jnum(double v) { return v < 0 || v != v ? json_null() : json_real(v); }
static json_t *jint(int64_t v) { return v < 0 ? json_null() : json_integer((json_int_t)v); }
static json_t *ju64(uint64_t v) {
    return v > (uint64_t)INT64_MAX ? json_null() : json_integer((json_int_t)v);
}
static json_t *jstr(const char *s) { return json_string(s ? s : ""); }

static json_t *hr_type_json(int type) {
    const hr_type_traits *tt = hr_type_get(type);
    return tt ? json_string(tt->name) : json_integer(type);
}

static json_t *hr_device_json(hr_jw *w, const hr_prof_device *d) {
    json_t *o = json_object();
    jset(w, o, "created", json_real(d->created));
    jset(w, o, "duration_s", jnum(d->duration_s));
    jset(w, o, "quick", json_boolean(d->quick));
    jset(w, o, "from_cache", json_boolean(d->from_cache));
    jset(w, o, "fingerprint", jstr(d->fingerprint));
    jset(w, o, "load_1m", jnum(d->load_1m));
    json_t *rp = json_object();
    jset(w, rp, "total", json_integer(d->reps_total));
    jset(w, rp, "contended", json_integer(d->reps_contended));
    jset(w, o, "repetitions", rp);
    json_t *os = json_object();
    jset(w, os, "sysname", jstr(d->os.sysname));
    jset(w, os, "release", jstr(d->os.release));
    jset(w, os, "machine", jstr(d->os.machine));
    jset(w, os, "name", jstr(d->os.name));
    jset(w, os, "hostname", jstr(d->os.hostname));
    jset(w, os, "cpu_model", jstr(d->os.cpu_model));
    jset(w, os, "isa", jstr(d->os.isa));
    jset(w, o, "os", os);
    const hr_prof_topo *t = &d->topo;
    json_t *to = json_object();
    jset(w, to, "source", jstr(t->source));
    jset(w, to, "packages", jint(t->n_packages));
    jset(w, to, "numa_nodes", jint(t->n_numa));
    jset(w, to, "cores", jint(t->n_cores));
    jset(w, to, "pus", jint(t->n_pus));
    jset(w, to, "smt", jint(t->smt));
    jset(w, to, "l3_domains", jint(t->n_l3));
    jset(w, to, "l3_bytes", jint(t->l3_bytes));
    json_t *na = json_array();
    for (int i = 0; i < t->n_numa_listed && i < HR_PROF_MAX_NUMA; i++) {
        json_t *n = json_object();
        jset(w, n, "os_index", jint(t->numa[i].os_index));
        jset(w, n, "cores", jint(t->numa[i].n_cores));
        jset(w, n, "pus", jint(t->numa[i].n_pus));
        jset(w, n, "memory_bytes", jint(t->numa[i].mem_bytes));
        jpush(w, na, n);
    }
    jset(w, to, "numa", na);
    jset(w, o, "topology", to);
    const hr_prof_mem *m = &d->mem;
    json_t *mo = json_object();
    jset(w, mo, "total_bytes", jint(m->total_bytes));
    jset(w, mo, "available_bytes", jint(m->available_bytes));
    jset(w, mo, "free_bytes", jint(m->free_bytes));
    jset(w, mo, "cached_bytes", jint(m->cached_bytes));
    jset(w, mo, "file_lru_bytes", jint(m->file_lru_bytes));
    jset(w, mo, "swap_total_bytes", jint(m->swap_total_bytes));
    jset(w, mo, "swap_free_bytes", jint(m->swap_free_bytes));
    jset(w, mo, "swappiness", jint(m->swappiness));
    jset(w, mo, "lru", jstr(m->lru));
    json_t *cg = json_object();
    jset(w, cg, "version", json_integer(m->cg_version));
    jset(w, cg, "path", jstr(m->cg_path));
    jset(w, cg, "limit_bytes", jint(m->cg_limit_bytes));
    jset(w, cg, "usage_bytes", jint(m->cg_usage_bytes));
    jset(w, cg, "file_bytes", jint(m->cg_file_bytes));
    jset(w, mo, "cgroup", cg);
    jset(w, mo, "weights_available_bytes", jint(m->weights_avail_bytes));
    jset(w, o, "memory", mo);
    const hr_prof_disk *dk = &d->disk;
    json_t *dd = json_object();
    jset(w, dd, "path", jstr(dk->path));
    jset(w, dd, "mount", jstr(dk->mount));
    jset(w, dd, "fs_type", jstr(dk->fs_type));
    jset(w, dd, "device", jstr(dk->device));
    jset(w, dd, "rotational", jint(dk->rotational));
    jset(w, dd, "read_ahead_kb", jint(dk->read_ahead_kb));
    jset(w, dd, "method", jstr(dk->method));
    jset(w, dd, "seq_read_mbs", jnum(dk->seq_mbs));
    jset(w, dd, "rand_4k_read_mbs", jnum(dk->rand_mbs));
    jset(w, dd, "rand_4k_iops", jnum(dk->rand_iops));
    jset(w, dd, "mmap_read_mbs", jnum(dk->mmap_mbs));
    jset(w, dd, "read_cpu_ms_per_mb", jnum(dk->read_cpu_ms_mb));
    jset(w, o, "disk", dd);
    json_t *ga = json_array();
    for (int i = 0; i < d->n_gpus && i < HR_PROF_MAX_GPUS; i++)
        jpush(w, ga, jstr(d->gpus[i]));
    jset(w, o, "gpus", ga);
    json_t *va = json_array();
    for (int i = 0; i < d->n_vk && i < HR_PROF_MAX_VK; i++) {
        const hr_prof_gpu *g = &d->vk[i];
        json_t *x = json_object();
        jset(w, x, "index", json_integer(g->index));
        jset(w, x, "name", jstr(g->name));
        jset(w, x, "type", jstr(g->kind));
        jset(w, x, "vram_bytes", jint(g->vram_bytes));
        json_t *ha = json_array();
        for (int h = 0; h < g->n_heaps && h < HR_VK_MAX_HEAPS; h++)
            jpush(w, ha, jint(g->heap_bytes[h]));
        jset(w, x, "heap_bytes", ha);
        jset(w, x, "h2d_gbs", jnum(g->h2d_gbs));
        jset(w, x, "d2h_gbs", jnum(g->d2h_gbs));
        jset(w, x, "submit_us", jnum(g->submit_us));
        json_t *ra = json_array();
        for (int r = 0; r < g->n_rates && r < HR_PROF_MAX_TYPES; r++) {
            json_t *y = json_object();
            jset(w, y, "type", hr_type_json(g->rates[r].type));
            jset(w, y, "matvec_gbs", jnum(g->rates[r].matvec_gbs));
            jset(w, y, "matvec_call_us", jnum(g->rates[r].matvec_call_us));
            jset(w, y, "matmat_gflops", jnum(g->rates[r].matmat_gflops));
            jpush(w, ra, y);
        }
        jset(w, x, "rates", ra);
        jpush(w, va, x);
    }
    jset(w, o, "vulkan", va);
    jset(w, o, "vulkan_chosen", json_integer(d->vk_chosen));
    json_t *bw = json_object();
    jset(w, bw, "read_1t_gbs", jnum(d->membw_1t_gbs));
    jset(w, bw, "read_all_gbs", jnum(d->membw_all_gbs));
    jset(w, bw, "threads", jint(d->membw_threads));
    jset(w, bw, "kv_copy_gbs", jnum(d->kv_copy_gbs));
    jset(w, o, "memory_bandwidth", bw);
    json_t *ew = json_object();
    jset(w, ew, "rmsnorm", jnum(d->eltwise.norm_ns));
    jset(w, ew, "add", jnum(d->eltwise.add_ns));
    jset(w, ew, "rope", jnum(d->eltwise.rope_ns));
    jset(w, ew, "swiglu", jnum(d->eltwise.swiglu_ns));
    jset(w, ew, "f16_store", jnum(d->eltwise.f16_ns));
    jset(w, o, "eltwise_ns", ew);
    json_t *ops = json_array();
    for (int i = 0; i < d->n_opcosts && i < HR_PROF_MAX_THREADS; i++) {
        json_t *x = json_object();
        jset(w, x, "threads", json_integer(d->opcosts[i].n_threads));
        jset(w, x, "attn_call_us", jnum(d->opcosts[i].attn_call_us));
        jset(w, x, "attn_pos_ns", jnum(d->opcosts[i].attn_pos_ns));
        jset(w, x, "attn_dim_ns", jnum(d->opcosts[i].attn_dim_ns));
        jpush(w, ops, x);
    }
    jset(w, o, "ops", ops);
    json_t *cl = json_object();
    jset(w, cl, "quota_cores", jnum(d->cpu_quota_cores));
    jset(w, cl, "period_ms", jnum(d->cpu_period_ms));
    json_t *su = json_array();
    for (int i = 0; i < d->n_sustain && i < HR_PROF_MAX_THREADS; i++) {
        json_t *x = json_object();
        jset(w, x, "threads", json_integer(d->sustain[i].n_threads));
        jset(w, x, "factor", jnum(d->sustain[i].factor));
        jset(w, x, "window_s", jnum(d->sustain[i].window_s));
        jpush(w, su, x);
    }
    jset(w, cl, "sustained", su);
    jset(w, o, "cpu_limit", cl);
    json_t *ep = json_object();
    jset(w, ep, "layers", json_integer(d->engine_layers));
    jset(w, ep, "threads", json_integer(d->engine_threads));
    jset(w, ep, "ms_per_step", jnum(d->engine_ms));
    jset(w, ep, "predicted_ms", jnum(d->engine_pred_ms));
    jset(w, ep, "factor", jnum(d->engine_factor));
    jset(w, ep, "round_ms", /* signed */
         isfinite(d->engine_round_ms) ? json_real(d->engine_round_ms) : json_null());
    jset(w, ep, "burst_ms", jnum(d->engine_burst_ms));
    jset(w, ep, "window_s", jnum(d->engine_window_s));
    jset(w, ep, "spread", jnum(d->engine_spread));
    jset(w, ep, "attempts", json_integer(d->engine_attempts));
    jset(w, ep, "starts", json_integer(d->engine_starts));
    jset(w, o, "engine_probe", ep);
    json_t *cpu = json_object();
    jset(w, cpu, "row_len", jint(d->row_len));
    jset(w, cpu, "ffn_len", jint(d->ffn_len));
    json_t *ra = json_array();
    for (int i = 0; i < d->n_rates && i < HR_PROF_MAX_RATES; i++) {
        const hr_prof_rate *r = &d->rates[i];
        json_t *x = json_object();
        jset(w, x, "type", hr_type_json(r->type));
        jset(w, x, "threads", json_integer(r->n_threads));
        jset(w, x, "matvec_gbs", jnum(r->matvec_gbs));
        jset(w, x, "matvec_call_us", jnum(r->matvec_call_us));
        jset(w, x, "matvec_mat_us", jnum(r->matvec_mat_us));
        jset(w, x, "matvec_row_ns", jnum(r->matvec_row_ns));
        jset(w, x, "matmat_gflops", jnum(r->matmat_gflops));
        jpush(w, ra, x);
    }
    jset(w, cpu, "rates", ra);
    jset(w, o, "cpu", cpu);
    return o;
}

static json_t *hr_layer_json(hr_jw *w, const hr_prof_layer *L) {
    json_t *o = json_object();
    jset(w, o, "bytes", ju64(L->bytes));
    jset(w, o, "flops", json_real(L->flops));
    jset(w, o, "matmul_calls", json_integer(L->n_calls));
    json_t *ta = json_array();
    for (int i = 0; i < L->n_types && i < HR_PROF_MAX_TYPES; i++) {
        json_t *x = json_object();
        jset(w, x, "type", hr_type_json(L->types[i].type));
        jset(w, x, "bytes", ju64(L->types[i].bytes));
        jset(w, x, "params", ju64(L->types[i].params));
        jset(w, x, "rows", ju64(L->types[i].rows));
        jset(w, x, "matrices", json_integer(L->types[i].n_mats));
        jpush(w, ta, x);
    }
    jset(w, o, "types", ta);
    return o;
}

static json_t *hr_model_json(hr_jw *w, const hr_prof_model *m) {
    json_t *o = json_object();
    jset(w, o, "name", jstr(m->name));
    jset(w, o, "arch", jstr(m->arch));
    jset(w, o, "file_bytes", ju64(m->file_bytes));
    jset(w, o, "n_layer", json_integer(m->n_layer));
    jset(w, o, "n_embd", json_integer(m->n_embd));
    jset(w, o, "n_ff", json_integer(m->n_ff));
    jset(w, o, "n_head", json_integer(m->n_head));
    jset(w, o, "n_head_kv", json_integer(m->n_head_kv));
    jset(w, o, "head_dim", json_integer(m->head_dim));
    jset(w, o, "n_vocab", json_integer(m->n_vocab));
    jset(w, o, "tied_output", json_boolean(m->tied_output));
    json_t *in = json_object();
    jset(w, in, "type", hr_type_json(m->embd_type));
    jset(w, in, "table_bytes", ju64(m->embd_bytes));
    jset(w, in, "row_bytes", ju64(m->embd_row_bytes));
    jset(w, o, "input", in);
    jset(w, o, "output", hr_layer_json(w, &m->output));
    jset(w, o, "kv_bytes_per_token_layer", ju64(m->kv_bytes_per_token));
    jset(w, o, "hidden_bytes_per_hop", ju64(m->hidden_bytes));
    if (m->n_expert > 0) {
        jset(w, o, "n_expert", json_integer(m->n_expert));
        jset(w, o, "n_expert_used", json_integer(m->n_expert_used));
        jset(w, o, "expert_bytes", ju64(m->expert_bytes));
    }
    json_t *el = json_object();
    jset(w, el, "rmsnorm", json_integer(m->elems.norm));
    jset(w, el, "add", json_integer(m->elems.add));
    jset(w, el, "rope", json_integer(m->elems.rope));
    jset(w, el, "swiglu", json_integer(m->elems.swiglu));
    jset(w, el, "f16_store", json_integer(m->elems.f16));
    jset(w, o, "eltwise_elems", el);
    json_t *la = json_array();
    for (int i = 0; i < m->n_layers_listed && m->layers; i++)
        jpush(w, la, hr_layer_json(w, &m->layers[i]));
    jset(w, o, "layers", la);
    return o;
}

static json_t *hr_link_json(hr_jw *w, const hr_prof_link *l) {
    json_t *o = json_object();
    jset(w, o, "endpoint", jstr(l->endpoint));
    jset(w, o, "msg_bytes", json_integer(l->msg_bytes));
    jset(w, o, "samples", json_integer(l->n_samples));
    jset(w, o, "rtt_us", jnum(l->rtt_us));
    jset(w, o, "rtt_min_us", jnum(l->rtt_min_us));
    jset(w, o, "bw_mbs", jnum(l->bw_mbs));
    return o;
}

static json_t *hr_cost_json(hr_jw *w, const hr_prof_cost *c) {
    json_t *o = json_object();
    jset(w, o, "threads", json_integer(c->n_threads));
    jset(w, o, "compute_ms", json_real(c->compute_ms));
    jset(w, o, "memory_ms", json_real(c->memory_ms));
    jset(w, o, "disk_ms", json_real(c->disk_ms));
    jset(w, o, "comm_ms", json_real(c->comm_ms));
    jset(w, o, "total_ms", json_real(c->total_ms));
    jset(w, o, "prefill_ms", json_real(c->prefill_ms));
    return o;
}

static json_t *hr_prediction_json(hr_jw *w, const hr_prof_prediction *p) {
    json_t *o = json_object();
    jset(w, o, "threads", json_integer(p->n_threads));
    jset(w, o, "n_past", json_integer(p->n_past));
    jset(w, o, "resident_bytes", ju64(p->resident_bytes));
    json_t *la = json_array();
    for (int i = 0; i < p->n_layer_ms && p->layer_ms; i++)
        jpush(w, la, json_real(p->layer_ms[i]));
    jset(w, o, "layer_decode_ms", la);
    jset(w, o, "token", hr_cost_json(w, &p->token));
    return o;
}

static int hr_dump(json_t *root, hr_jw *w, bool pretty, char **out, char *err) {
    *out = NULL;
    if (!root || w->bad) {
        json_decref(root);
        return hr_seterr(err, HR_ENOMEM, "out of memory building the profile JSON");
    }
    *out = json_dumps(root, pretty ? JSON_INDENT(2) : JSON_COMPACT);
    json_decref(root);
    if (!*out)
        return hr_seterr(err, HR_ENOMEM, "out of memory writing the profile JSON");
    return 0;
}

int hr_prof_doc_to_json(const hr_prof_doc *doc, bool pretty, char **out, char err[HR_ERR_LEN]) {
    hr_jw w = {0};
    json_t *root = json_object();
    jset(&w, root, "schema", json_string(HR_PROF_SCHEMA));
    jset(&w, root, "version", json_integer(HR_PROF_VERSION));
    if (doc->has_device)
        jset(&w, root, "device", hr_device_json(&w, &doc->device));
    if (doc->has_model)
        jset(&w, root, "model", hr_model_json(&w, &doc->model));
    json_t *la = json_array();
    for (int i = 0; i < doc->n_links && i < HR_PROF_MAX_LINKS; i++)
        jpush(&w, la, hr_link_json(&w, &doc->links[i]));
    jset(&w, root, "links", la);
    if (doc->has_prediction)
        jset(&w, root, "prediction", hr_prediction_json(&w, &doc->prediction));
    return hr_dump(root, &w, pretty, out, err);
}

int hr_prof_device_to_json(const hr_prof_device *d, char **out, char err[HR_ERR_LEN]) {
    hr_jw w = {0};
    json_t *root = json_object();
    jset(&w, root, "schema", json_string(HR_PROF_SCHEMA));
    jset(&w, root, "version", json_integer(HR_PROF_VERSION));
    jset(&w, root, "device", hr_device_json(&w, d));
    return hr_dump(root, &w, true, out, err);
}

/* ---- reading ---- */

static double gnum(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : -1.0;
}

static int64_t gint(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v)) { /* only a value int64 holds converts (else UB): the rest is "none" */
        const double r = json_real_value(v);
        return r >= -9.2233720368547748e18 && r < 9.2233720368547758e18 ? (int64_t)r : -1;
    }
    return -1;
}

static uint64_t gu64(const json_t *o, const char *k, uint64_t dflt) {
    int64_t v = gint(o, k);
    return v < 0 ? dflt : (uint64_t)v;
}

static int gint32(const json_t *o, const char *k) {
    int64_t v = gint(o, k);
    return v < -1 || v > 0x7fffffff ? -1 : (int)v;
}

static bool gbool(const json_t *o, const char *k) { return json_is_true(json_object_get(o, k)); }

static void gstr(const json_t *o, const char *k, char *dst, size_t cap) {
    const json_t *v = json_object_get(o, k);
    hr_prof_strlcpy(dst, json_is_string(v) ? json_string_value(v) : "", cap);
}

static int gtype(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    if (json_is_integer(v))
        return (int)json_integer_value(v);
    if (!json_is_string(v))
        return -1;
    const char *s = json_string_value(v);
    for (int t = 0; t < HR_TYPE_COUNT; t++) {
        const hr_type_traits *tt = hr_type_get(t);
        if (tt && strcmp(tt->name, s) == 0)
            return t;
    }
    return -1;
}

static void hr_device_read(const json_t *o, hr_prof_device *d) {
    memset(d, 0, sizeof *d);
    d->version = HR_PROF_VERSION;
    d->created = gnum(o, "created");
    d->duration_s = gnum(o, "duration_s");
    d->quick = gbool(o, "quick");
    d->from_cache = gbool(o, "from_cache");
    gstr(o, "fingerprint", d->fingerprint, sizeof d->fingerprint);
    d->load_1m = gnum(o, "load_1m");
    const json_t *rp = json_object_get(o, "repetitions");
    d->reps_total = gint32(rp, "total") < 0 ? 0 : gint32(rp, "total");
    d->reps_contended = gint32(rp, "contended") < 0 ? 0 : gint32(rp, "contended");
    const json_t *os = json_object_get(o, "os");
    gstr(os, "sysname", d->os.sysname, sizeof d->os.sysname);
    gstr(os, "release", d->os.release, sizeof d->os.release);
    gstr(os, "machine", d->os.machine, sizeof d->os.machine);
    gstr(os, "name", d->os.name, sizeof d->os.name);
    gstr(os, "hostname", d->os.hostname, sizeof d->os.hostname);
    gstr(os, "cpu_model", d->os.cpu_model, sizeof d->os.cpu_model);
    gstr(os, "isa", d->os.isa, sizeof d->os.isa);
    const json_t *to = json_object_get(o, "topology");
    hr_prof_topo *t = &d->topo;
    gstr(to, "source", t->source, sizeof t->source);
    t->n_packages = gint32(to, "packages");
    t->n_numa = gint32(to, "numa_nodes");
    t->n_cores = gint32(to, "cores");
    t->n_pus = gint32(to, "pus");
    t->smt = gint32(to, "smt");
    t->n_l3 = gint32(to, "l3_domains");
    t->l3_bytes = gint(to, "l3_bytes");
    const json_t *na = json_object_get(to, "numa");
    size_t i;
    const json_t *x;
    json_array_foreach(na, i, x) {
        if (t->n_numa_listed >= HR_PROF_MAX_NUMA)
            break;
        hr_prof_numa *n = &t->numa[t->n_numa_listed++];
        n->os_index = gint32(x, "os_index");
        n->n_cores = gint32(x, "cores");
        n->n_pus = gint32(x, "pus");
        n->mem_bytes = gint(x, "memory_bytes");
    }
    const json_t *mo = json_object_get(o, "memory");
    hr_prof_mem *m = &d->mem;
    m->total_bytes = gint(mo, "total_bytes");
    m->available_bytes = gint(mo, "available_bytes");
    m->free_bytes = gint(mo, "free_bytes");
    m->cached_bytes = gint(mo, "cached_bytes");
    m->file_lru_bytes = gint(mo, "file_lru_bytes");
    m->swap_total_bytes = gint(mo, "swap_total_bytes");
    m->swap_free_bytes = gint(mo, "swap_free_bytes");
    m->swappiness = gint32(mo, "swappiness");
    gstr(mo, "lru", m->lru, sizeof m->lru);
    const json_t *cg = json_object_get(mo, "cgroup");
    m->cg_version = gint32(cg, "version") < 0 ? 0 : gint32(cg, "version");
    gstr(cg, "path", m->cg_path, sizeof m->cg_path);
    m->cg_limit_bytes = gint(cg, "limit_bytes");
    m->cg_usage_bytes = gint(cg, "usage_bytes");
    m->cg_file_bytes = gint(cg, "file_bytes");
    m->weights_avail_bytes = gint(mo, "weights_available_bytes");
    const json_t *dd = json_object_get(o, "disk");
    hr_prof_disk *dk = &d->disk;
    gstr(dd, "path", dk->path, sizeof dk->path);
    gstr(dd, "mount", dk->mount, sizeof dk->mount);
    gstr(dd, "fs_type", dk->fs_type, sizeof dk->fs_type);
    gstr(dd, "device", dk->device, sizeof dk->device);
    dk->rotational = gint32(dd, "rotational");
    dk->read_ahead_kb = gint32(dd, "read_ahead_kb");
    gstr(dd, "method", dk->method, sizeof dk->method);
    dk->seq_mbs = gnum(dd, "seq_read_mbs");
    dk->rand_mbs = gnum(dd, "rand_4k_read_mbs");
    dk->rand_iops = gnum(dd, "rand_4k_iops");
    dk->mmap_mbs = gnum(dd, "mmap_read_mbs");
    dk->read_cpu_ms_mb = gnum(dd, "read_cpu_ms_per_mb"); /* -1 when absent (older) */
    if (!(dk->read_cpu_ms_mb > 0 && dk->read_cpu_ms_mb < 1e4))
        dk->read_cpu_ms_mb = -1.0;
    json_array_foreach(json_object_get(o, "gpus"), i, x) {
        if (d->n_gpus >= HR_PROF_MAX_GPUS)
            break;
        hr_prof_strlcpy(d->gpus[d->n_gpus++], json_is_string(x) ? json_string_value(x) : "",
                        sizeof d->gpus[0]);
    }
    d->vk_chosen = -1;
    json_array_foreach(json_object_get(o, "vulkan"), i, x) {
        if (d->n_vk >= HR_PROF_MAX_VK)
            break;
        hr_prof_gpu *g = &d->vk[d->n_vk++];
        g->index = gint32(x, "index");
        gstr(x, "name", g->name, sizeof g->name);
        gstr(x, "type", g->kind, sizeof g->kind);
        g->vram_bytes = gint(x, "vram_bytes");
        size_t h;
        const json_t *y;
        json_array_foreach(json_object_get(x, "heap_bytes"), h, y) {
            if (g->n_heaps >= HR_VK_MAX_HEAPS)
                break;
            g->heap_bytes[g->n_heaps++] = json_is_integer(y) ? json_integer_value(y) : -1;
        }
        g->h2d_gbs = gnum(x, "h2d_gbs");
        g->d2h_gbs = gnum(x, "d2h_gbs");
        g->submit_us = gnum(x, "submit_us");
        json_array_foreach(json_object_get(x, "rates"), h, y) {
            int type = gtype(y, "type");
            if (type < 0 || g->n_rates >= HR_PROF_MAX_TYPES)
                continue;
            hr_prof_gpu_rate *r = &g->rates[g->n_rates++];
            r->type = type;
            r->matvec_gbs = gnum(y, "matvec_gbs");
            r->matvec_call_us = gnum(y, "matvec_call_us");
            r->matmat_gflops = gnum(y, "matmat_gflops");
        }
    }
    int chosen = gint32(o, "vulkan_chosen");
    d->vk_chosen = chosen >= 0 && chosen < d->n_vk ? chosen : -1;
    const json_t *bw = json_object_get(o, "memory_bandwidth");
    d->membw_1t_gbs = gnum(bw, "read_1t_gbs");
    d->membw_all_gbs = gnum(bw, "read_all_gbs");
    d->membw_threads = gint32(bw, "threads");
    d->kv_copy_gbs = gnum(bw, "kv_copy_gbs");
    const json_t *ew = json_object_get(o, "eltwise_ns");
    d->eltwise.norm_ns = gnum(ew, "rmsnorm");
    d->eltwise.add_ns = gnum(ew, "add");
    d->eltwise.rope_ns = gnum(ew, "rope");
    d->eltwise.swiglu_ns = gnum(ew, "swiglu");
    d->eltwise.f16_ns = gnum(ew, "f16_store");
    json_array_foreach(json_object_get(o, "ops"), i, x) {
        if (d->n_opcosts >= HR_PROF_MAX_THREADS)
            break;
        hr_prof_opcost *oc = &d->opcosts[d->n_opcosts++];
        oc->n_threads = gint32(x, "threads");
        oc->attn_call_us = gnum(x, "attn_call_us");
        oc->attn_pos_ns = gnum(x, "attn_pos_ns");
        oc->attn_dim_ns = gnum(x, "attn_dim_ns");
    }
    const json_t *cl = json_object_get(o, "cpu_limit");
    d->cpu_quota_cores = gnum(cl, "quota_cores");
    d->cpu_period_ms = gnum(cl, "period_ms");
    json_array_foreach(json_object_get(cl, "sustained"), i, x) {
        if (d->n_sustain >= HR_PROF_MAX_THREADS)
            break;
        double f = gnum(x, "factor");
        if (!(f >= 1.0))
            continue; /* malformed: a slowdown is at least 1 */
        hr_prof_sustain *su = &d->sustain[d->n_sustain++];
        su->n_threads = gint32(x, "threads");
        su->factor = f;
        su->window_s = gnum(x, "window_s");
    }
    const json_t *ep = json_object_get(o, "engine_probe");
    d->engine_layers = gint32(ep, "layers") > 0 ? gint32(ep, "layers") : 0;
    d->engine_threads = gint32(ep, "threads") > 0 ? gint32(ep, "threads") : 0;
    d->engine_ms = gnum(ep, "ms_per_step");
    d->engine_pred_ms = gnum(ep, "predicted_ms");
    d->engine_factor = gnum(ep, "factor");
    d->engine_window_s = gnum(ep, "window_s");
    d->engine_spread = gnum(ep, "spread"); /* -1 when absent (older) */
    if (!(d->engine_spread >= 0 && d->engine_spread < 1e3))
        d->engine_spread = -1.0;
    d->engine_attempts = gint32(ep, "attempts") > 0 ? gint32(ep, "attempts") : 0;
    d->engine_starts = gint32(ep, "starts") > 0 ? gint32(ep, "starts") : 0;
    const json_t *rm = json_object_get(ep, "round_ms");
    d->engine_round_ms = json_is_number(rm) ? json_number_value(rm) : 0; /* absent: older */
    if (!isfinite(d->engine_round_ms) || fabs(d->engine_round_ms) > 1e4)
        d->engine_round_ms = 0;                /* malformed */
    d->engine_burst_ms = gnum(ep, "burst_ms"); /* -1 when absent (older) */
    if (!(d->engine_burst_ms > 0 && d->engine_burst_ms < 1e6))
        d->engine_burst_ms = 0;
    if (!(d->engine_factor > 0 && d->engine_factor < 1e3) || d->engine_threads == 0)
        d->engine_factor = -1.0; /* malformed or absent: not used */
    const json_t *cpu = json_object_get(o, "cpu");
    d->row_len = gint(cpu, "row_len");
    d->ffn_len = gint(cpu, "ffn_len");
    json_array_foreach(json_object_get(cpu, "rates"), i, x) {
        if (d->n_rates >= HR_PROF_MAX_RATES)
            break;
        int type = gtype(x, "type");
        if (type < 0) {
            HR_LOG_WARN(HR_PROF_TAG, "profile JSON: rate %zu has an unknown type; skipped", i);
            continue;
        }
        hr_prof_rate *r = &d->rates[d->n_rates++];
        r->type = type;
        r->n_threads = gint32(x, "threads");
        r->matvec_gbs = gnum(x, "matvec_gbs");
        r->matvec_call_us = gnum(x, "matvec_call_us");
        r->matvec_mat_us = gnum(x, "matvec_mat_us");
        r->matvec_row_ns = gnum(x, "matvec_row_ns");
        r->matmat_gflops = gnum(x, "matmat_gflops");
    }
}

static void hr_layer_read(const json_t *o, hr_prof_layer *L) {
    memset(L, 0, sizeof *L);
    L->bytes = gu64(o, "bytes", 0);
    L->flops = gnum(o, "flops") < 0 ? 0 : gnum(o, "flops");
    L->n_calls = gint32(o, "matmul_calls") < 0 ? 0 : gint32(o, "matmul_calls");
    size_t i;
    const json_t *x;
    json_array_foreach(json_object_get(o, "types"), i, x) {
        if (L->n_types >= HR_PROF_MAX_TYPES)
            break;
        int type = gtype(x, "type");
        if (type < 0)
            continue;
        hr_prof_tbytes *tb = &L->types[L->n_types++];
        tb->type = type;
        tb->bytes = gu64(x, "bytes", 0);
        tb->params = gu64(x, "params", 0);
        tb->rows = gu64(x, "rows", 0);
        tb->n_mats = gint32(x, "matrices") < 0 ? 0 : gint32(x, "matrices");
    }
}

static int hr_model_read(const json_t *o, hr_prof_model *m, char *err) {
    memset(m, 0, sizeof *m);
    gstr(o, "name", m->name, sizeof m->name);
    gstr(o, "arch", m->arch, sizeof m->arch);
    m->file_bytes = gu64(o, "file_bytes", 0);
    m->n_layer = gint32(o, "n_layer");
    m->n_embd = gint32(o, "n_embd");
    m->n_ff = gint32(o, "n_ff");
    m->n_head = gint32(o, "n_head");
    m->n_head_kv = gint32(o, "n_head_kv");
    m->head_dim = gint32(o, "head_dim");
    m->n_vocab = gint32(o, "n_vocab");
    m->tied_output = gbool(o, "tied_output");
    const json_t *in = json_object_get(o, "input");
    m->embd_type = gtype(in, "type");
    m->embd_bytes = gu64(in, "table_bytes", 0);
    m->embd_row_bytes = gu64(in, "row_bytes", 0);
    hr_layer_read(json_object_get(o, "output"), &m->output);
    m->kv_bytes_per_token = gu64(o, "kv_bytes_per_token_layer", 0);
    m->hidden_bytes = gu64(o, "hidden_bytes_per_hop", 0);
    m->n_expert = gint(o, "n_expert") > 0 ? gint(o, "n_expert") : 0;
    m->n_expert_used = gint(o, "n_expert_used") > 0 ? gint(o, "n_expert_used") : 0;
    m->expert_bytes = gu64(o, "expert_bytes", 0);
    if (m->n_expert_used > m->n_expert)
        m->n_expert = m->n_expert_used = 0;
    const json_t *el = json_object_get(o, "eltwise_elems");
    m->elems.norm = gint(el, "rmsnorm") < 0 ? 0 : gint(el, "rmsnorm");
    m->elems.add = gint(el, "add") < 0 ? 0 : gint(el, "add");
    m->elems.rope = gint(el, "rope") < 0 ? 0 : gint(el, "rope");
    m->elems.swiglu = gint(el, "swiglu") < 0 ? 0 : gint(el, "swiglu");
    m->elems.f16 = gint(el, "f16_store") < 0 ? 0 : gint(el, "f16_store");
    const json_t *la = json_object_get(o, "layers");
    size_t n = json_array_size(la);
    if (m->n_layer < 0 || m->n_embd <= 0 || m->n_head <= 0 || m->head_dim <= 0 ||
        n != (size_t)m->n_layer || n > 65536)
        return hr_seterr(err, HR_EFORMAT,
                         "profile JSON: model needs n_layer, n_embd, n_head, head_dim and one "
                         "layers[] entry per layer (n_layer %d, %zu entries)",
                         m->n_layer, n);
    if (n) {
        m->layers = calloc(n, sizeof *m->layers);
        if (!m->layers)
            return hr_seterr(err, HR_ENOMEM, "out of memory for %zu layers", n);
    }
    m->n_layers_listed = (int)n;
    for (size_t i = 0; i < n; i++)
        hr_layer_read(json_array_get(la, i), &m->layers[i]);
    return 0;
}

static void hr_link_read(const json_t *o, hr_prof_link *l) {
    memset(l, 0, sizeof *l);
    gstr(o, "endpoint", l->endpoint, sizeof l->endpoint);
    l->msg_bytes = gint32(o, "msg_bytes");
    l->n_samples = gint32(o, "samples");
    l->rtt_us = gnum(o, "rtt_us");
    l->rtt_min_us = gnum(o, "rtt_min_us");
    l->bw_mbs = gnum(o, "bw_mbs");
}

static int hr_prediction_read(const json_t *o, hr_prof_prediction *p, char *err) {
    memset(p, 0, sizeof *p);
    p->n_threads = gint32(o, "threads");
    p->n_past = gint32(o, "n_past");
    p->resident_bytes = gu64(o, "resident_bytes", UINT64_MAX);
    const json_t *la = json_object_get(o, "layer_decode_ms");
    size_t n = json_array_size(la);
    if (n > 65536)
        return hr_seterr(err, HR_EFORMAT, "profile JSON: %zu layer predictions", n);
    if (n) {
        p->layer_ms = calloc(n, sizeof *p->layer_ms);
        if (!p->layer_ms)
            return hr_seterr(err, HR_ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(la, i);
            p->layer_ms[i] = json_is_number(v) ? json_number_value(v) : -1.0;
        }
    }
    p->n_layer_ms = (int)n;
    const json_t *t = json_object_get(o, "token");
    p->token.n_threads = gint32(t, "threads");
    p->token.compute_ms = gnum(t, "compute_ms");
    p->token.memory_ms = gnum(t, "memory_ms");
    p->token.disk_ms = gnum(t, "disk_ms");
    p->token.comm_ms = gnum(t, "comm_ms");
    p->token.total_ms = gnum(t, "total_ms");
    p->token.prefill_ms = gnum(t, "prefill_ms");
    return 0;
}

/* Parses text and checks schema and version; *root to json_decref. */
static int hr_load(const char *text, size_t len, json_t **root, char *err) {
    json_error_t je;
    *root = json_loadb(text, len, 0, &je);
    if (!*root)
        return hr_seterr(err, HR_EFORMAT, "profile JSON: %s at line %d, column %d", je.text,
                         je.line, je.column);
    if (!json_is_object(*root))
        return hr_seterr(err, HR_EFORMAT, "profile JSON: top level is not an object");
    const json_t *s = json_object_get(*root, "schema");
    if (!json_is_string(s) || strcmp(json_string_value(s), HR_PROF_SCHEMA) != 0)
        return hr_seterr(err, HR_EFORMAT, "profile JSON: schema is not \"%s\"", HR_PROF_SCHEMA);
    int64_t v = gint(*root, "version");
    if (v != HR_PROF_VERSION)
        return hr_seterr(err, HR_EUNSUPPORTED, "profile JSON: version %lld, expected %d",
                         (long long)v, HR_PROF_VERSION);
    return 0;
}

int hr_prof_doc_parse(const char *json, size_t len, hr_prof_doc *doc, char err[HR_ERR_LEN]) {
    memset(doc, 0, sizeof *doc);
    json_t *root = NULL;
    int rc = hr_load(json, len, &root, err);
    if (rc == 0) {
        const json_t *d = json_object_get(root, "device");
        if (json_is_object(d)) {
            hr_device_read(d, &doc->device);
            doc->has_device = true;
        }
        const json_t *m = json_object_get(root, "model");
        if (json_is_object(m)) {
            rc = hr_model_read(m, &doc->model, err);
            doc->has_model = rc == 0;
        }
        size_t i;
        const json_t *x;
        json_array_foreach(json_object_get(root, "links"), i, x) {
            if (doc->n_links >= HR_PROF_MAX_LINKS)
                break;
            hr_link_read(x, &doc->links[doc->n_links++]);
        }
        const json_t *p = json_object_get(root, "prediction");
        if (rc == 0 && json_is_object(p)) {
            rc = hr_prediction_read(p, &doc->prediction, err);
            doc->has_prediction = rc == 0;
        }
    }
    json_decref(root);
    return rc;
}

int hr_prof_device_parse(const char *json, size_t len, hr_prof_device *d, char err[HR_ERR_LEN]) {
    memset(d, 0, sizeof *d);
    json_t *root = NULL;
    int rc = hr_load(json, len, &root, err);
    if (rc == 0) {
        const json_t *o = json_object_get(root, "device");
        if (json_is_object(o))
            hr_device_read(o, d);
        else
            rc = hr_seterr(err, HR_EFORMAT, "profile JSON: no device object");
    }
    json_decref(root);
    return rc;
}

void hr_prof_doc_clear(hr_prof_doc *doc) {
    if (!doc)
        return;
    hr_prof_model_clear(&doc->model);
    free(doc->prediction.layer_ms);
    doc->prediction.layer_ms = NULL;
    doc->prediction.n_layer_ms = 0;
}
