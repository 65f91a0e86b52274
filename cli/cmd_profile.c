/* cmd_profile.c - `hearth profile`: device, model and link profiles as a
 * table or JSON (schema hearth.profile v1, profiler/SCHEMA.md), with the
 * predicted decode time per layer and per token. */
#include "cli/cli.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/quant.h"
#include "kernels/types.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *hr_fmt_bytes(int64_t b, char *buf, size_t cap) {
    if (b < 0)
        snprintf(buf, cap, "unknown");
    else if (b >= (1ll << 30))
        snprintf(buf, cap, "%.1f GiB", (double)b / (1ll << 30));
    else if (b >= (1ll << 20))
        snprintf(buf, cap, "%.1f MiB", (double)b / (1ll << 20));
    else if (b >= 1024)
        snprintf(buf, cap, "%.1f KiB", (double)b / 1024);
    else
        snprintf(buf, cap, "%lld B", (long long)b);
    return buf;
}

static const char *hr_fmt_num(double v, const char *fmt, char *buf, size_t cap) {
    if (v < 0)
        snprintf(buf, cap, "unknown");
    else
        snprintf(buf, cap, fmt, v);
    return buf;
}

static const char *hr_fmt_int(int v, char *buf, size_t cap) {
    if (v < 0)
        snprintf(buf, cap, "?");
    else
        snprintf(buf, cap, "%d", v);
    return buf;
}

static void hr_print_device(const hr_prof_device *d) {
    char a[32], b[32], c[32], e[32], f[32], g[32];
    const hr_prof_topo *t = &d->topo;
    if (d->from_cache) {
        time_t ct = (time_t)d->created;
        struct tm tm;
        char when[32] = "?";
        if (localtime_r(&ct, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
        printf("device  (from cache %s: measured %s in %.2f s)\n", d->fingerprint, when,
               d->duration_s);
    } else {
        printf("device  (measured in %.2f s%s; cache key %s)\n", d->duration_s,
               d->quick ? ", quick" : "", d->fingerprint);
    }
    if (d->load_1m >= 0)
        printf("  load:        %.2f when measured; %d of %d repetitions waited for a CPU and "
               "were repeated\n",
               d->load_1m, d->reps_contended, d->reps_total);
    printf("  cpu:         %s, kernels %s (cpu features: %s)\n", d->os.cpu_model, d->os.isa,
           hr_isa_features());
    printf("  topology:    %s package(s), %s core(s), %s PU(s), SMT %s, %s L3 of %s  [%s]\n",
           hr_fmt_int(t->n_packages, a, sizeof a), hr_fmt_int(t->n_cores, b, sizeof b),
           hr_fmt_int(t->n_pus, c, sizeof c), hr_fmt_int(t->smt, e, sizeof e),
           hr_fmt_int(t->n_l3, f, sizeof f), hr_fmt_bytes(t->l3_bytes, g, sizeof g), t->source);
    for (int i = 0; i < t->n_numa_listed; i++)
        printf("  numa node %d: %s core(s), %s PU(s), %s\n", t->numa[i].os_index,
               hr_fmt_int(t->numa[i].n_cores, a, sizeof a),
               hr_fmt_int(t->numa[i].n_pus, b, sizeof b),
               hr_fmt_bytes(t->numa[i].mem_bytes, c, sizeof c));
    printf("  os:          %s %s %s (%s), host %s\n", d->os.sysname, d->os.release, d->os.machine,
           d->os.name, d->os.hostname);
    printf("  gpus:        ");
    if (d->n_gpus == 0)
        printf("none found");
    for (int i = 0; i < d->n_gpus; i++)
        printf("%s%s", i ? ", " : "", d->gpus[i]);
    printf(" (PCI / DRM listing)\n");
    for (int i = 0; i < d->n_vk; i++) {
        const hr_prof_gpu *v = &d->vk[i];
        printf("  vulkan %d:    %s (%s), heaps", v->index, v->name, v->kind);
        for (int h = 0; h < v->n_heaps; h++)
            printf("%s %s", h ? "," : "", hr_fmt_bytes(v->heap_bytes[h], a, sizeof a));
        printf("; %s\n", i == d->vk_chosen ? "chosen" : "not chosen (--gpu N or HR_GPU)");
        if (v->n_rates == 0)
            continue;
        printf("    copies:    host->device %.2f GB/s, device->host %.2f GB/s; submit %.0f us\n",
               v->h2d_gbs, v->d2h_gbs, v->submit_us);
        for (int r = 0; r < v->n_rates; r++)
            printf("    %-6s     matvec %7.2f GB/s + %6.1f us per call, matmat %7.2f GFLOP/s\n",
                   hr_type_name(v->rates[r].type), v->rates[r].matvec_gbs,
                   v->rates[r].matvec_call_us, v->rates[r].matmat_gflops);
    }
    const hr_prof_mem *m = &d->mem;
    printf("  memory:      total %s, available %s, page cache %s; swap %s",
           hr_fmt_bytes(m->total_bytes, a, sizeof a), hr_fmt_bytes(m->available_bytes, b, sizeof b),
           hr_fmt_bytes(m->cached_bytes, c, sizeof c),
           hr_fmt_bytes(m->swap_total_bytes, e, sizeof e));
    printf(" (%s free), swappiness %d, reclaim %s\n", hr_fmt_bytes(m->swap_free_bytes, a, sizeof a),
           m->swappiness, m->lru);
    if (m->cg_version > 0)
        printf("  cgroup:      v%d %s: limit %s, usage %s (page cache %s)\n", m->cg_version,
               m->cg_path,
               m->cg_limit_bytes < 0 ? "none" : hr_fmt_bytes(m->cg_limit_bytes, a, sizeof a),
               hr_fmt_bytes(m->cg_usage_bytes, b, sizeof b),
               hr_fmt_bytes(m->cg_file_bytes, c, sizeof c));
    else
        printf("  cgroup:      no memory cgroup found\n");
    if (d->cpu_quota_cores > 0) {
        printf("  cpu quota:   %.2f cores (cgroup, period %.1f ms)", d->cpu_quota_cores,
               d->cpu_period_ms);
        for (int i = 0; i < d->n_sustain; i++)
            printf("%s %d thread(s) %.2fx",
                   i ? "," : "; sustained work measured:", d->sustain[i].n_threads,
                   d->sustain[i].factor);
        if (d->n_sustain == 0)
            printf("; not measured: threads / quota assumed");
        printf("\n");
    }
    if (d->engine_factor > 0) {
        printf("  engine:      measured %.2f ms per decode step of layers 0-%d (%d thread(s), "
               "%.2f s), rates predict %.2f: CPU times x%.2f",
               d->engine_ms, d->engine_layers - 1, d->engine_threads, d->engine_window_s,
               d->engine_pred_ms, d->engine_factor);
        if (d->engine_spread >= 0 && d->engine_starts > 1)
            printf("; the median of the last %d starts (of %d attempts each), spread %.0f%% "
                   "(slowest - fastest over it)",
                   d->engine_starts, d->engine_attempts, 100.0 * d->engine_spread);
        else if (d->engine_spread >= 0)
            printf("; the median of %d attempts, spread %.0f%% (slowest - fastest over it)",
                   d->engine_attempts, 100.0 * d->engine_spread);
        printf("\n");
    }
    printf("  available:   %s for weights%s\n", hr_fmt_bytes(m->weights_avail_bytes, a, sizeof a),
           m->cg_limit_bytes > 0 ? " (bounded by the cgroup limit)" : "");
    const hr_prof_disk *dk = &d->disk;
    if (dk->path[0]) {
        printf("  disk:        %s on %s (%s%s%s, %s, read-ahead %s KiB)\n", dk->path,
               dk->mount[0] ? dk->mount : "?", dk->fs_type[0] ? dk->fs_type : "?",
               dk->device[0] ? ", " : "", dk->device,
               dk->rotational < 0 ? "medium unknown"
               : dk->rotational   ? "rotational"
                                  : "solid state",
               hr_fmt_int(dk->read_ahead_kb, a, sizeof a));
        printf("               sequential %s MB/s, random 4 KiB %s MB/s (%s IOPS), mmap faults %s "
               "MB/s  [%s]\n",
               hr_fmt_num(dk->seq_mbs, "%.0f", a, sizeof a),
               hr_fmt_num(dk->rand_mbs, "%.1f", b, sizeof b),
               hr_fmt_num(dk->rand_iops, "%.0f", c, sizeof c),
               hr_fmt_num(dk->mmap_mbs, "%.0f", e, sizeof e), dk->method);
    }
    printf("  memory bw:   read %s GB/s (1 thread), %s GB/s (%d threads); KV copy %s GB/s\n",
           hr_fmt_num(d->membw_1t_gbs, "%.2f", a, sizeof a),
           hr_fmt_num(d->membw_all_gbs, "%.2f", b, sizeof b), d->membw_threads,
           hr_fmt_num(d->kv_copy_gbs, "%.2f", c, sizeof c));
    printf(
        "  element ops: rmsnorm %.2f, add %.2f, rope %.2f, swiglu %.2f, f16 store %.2f ns/elem\n",
        d->eltwise.norm_ns, d->eltwise.add_ns, d->eltwise.rope_ns, d->eltwise.swiglu_ns,
        d->eltwise.f16_ns);
    for (int i = 0; i < d->n_opcosts; i++)
        printf("  %2d thread(s): attention %.1f us/call + %.3f ns/(head*pos) + %.4f "
               "ns/(head*pos*dim)\n",
               d->opcosts[i].n_threads, d->opcosts[i].attn_call_us, d->opcosts[i].attn_pos_ns,
               d->opcosts[i].attn_dim_ns);
    printf("  hr_matmul (rows of %lld and %lld; decode = call + matrices + rows + bytes):\n",
           (long long)d->row_len, (long long)d->ffn_len);
    printf("    %-6s %7s %12s %9s %10s %8s %15s\n", "type", "threads", "matvec GB/s", "call us",
           "matrix us", "row ns", "matmat GFLOP/s");
    for (int i = 0; i < d->n_rates; i++) {
        const hr_prof_rate *r = &d->rates[i];
        printf("    %-6s %7d %12.2f %9.1f %10.1f %8.2f %15.1f\n", hr_type_name(r->type),
               r->n_threads, r->matvec_gbs, r->matvec_call_us, r->matvec_mat_us, r->matvec_row_ns,
               r->matmat_gflops);
    }
}

static void hr_types_str(const hr_prof_layer *L, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < L->n_types && n < cap; i++) {
        int w = snprintf(buf + n, cap - n, "%s%s %.1f", i ? ", " : "",
                         hr_type_name(L->types[i].type), (double)L->types[i].bytes / 1048576.0);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

static void hr_print_model(const hr_prof_model *m, const hr_prof_prediction *pr, const char *path) {
    char a[32], tb[160];
    printf("model  %s: %s, %d layers, embd %d, ffn %d, heads %d/%d x %d, vocab %d, %s\n", path,
           m->arch, m->n_layer, m->n_embd, m->n_ff, m->n_head, m->n_head_kv, m->head_dim,
           m->n_vocab, hr_fmt_bytes((int64_t)m->file_bytes, a, sizeof a));
    printf("  input:       %s embedding table %s, %" PRIu64 " B read per token\n",
           hr_type_name(m->embd_type), hr_fmt_bytes((int64_t)m->embd_bytes, a, sizeof a),
           m->embd_row_bytes);
    hr_types_str(&m->output, tb, sizeof tb);
    printf("  output:      %s (MiB: %s), %.1f MFLOP per token%s\n",
           hr_fmt_bytes((int64_t)m->output.bytes, a, sizeof a), tb, m->output.flops / 1e6,
           m->tied_output ? ", tied to the embeddings" : "");
    printf("  kv cache:    %" PRIu64 " B per token per layer (f16); hidden state %" PRIu64
           " B per hop\n",
           m->kv_bytes_per_token, m->hidden_bytes);
    printf("  %-5s %9s %9s %6s  %-26s %s\n", "layer", "MiB", "MFLOP", "calls", "types (MiB)",
           "decode ms");
    for (int i = 0; i < m->n_layers_listed; i++) {
        const hr_prof_layer *L = &m->layers[i];
        hr_types_str(L, tb, sizeof tb);
        printf("  %-5d %9.2f %9.1f %6d  %-26s %.3f\n", i, (double)L->bytes / 1048576.0,
               L->flops / 1e6, L->n_calls, tb, pr && i < pr->n_layer_ms ? pr->layer_ms[i] : -1.0);
    }
}

static void hr_print_prediction(const hr_prof_doc *doc) {
    const hr_prof_prediction *p = &doc->prediction;
    const hr_prof_cost *c = &p->token;
    double sum = 0;
    for (int i = 0; i < p->n_layer_ms; i++)
        sum += p->layer_ms[i];
    char a[32], b[32];
    uint64_t wb = hr_prof_model_window_bytes(&doc->model, 0, doc->model.n_layer, true, true);
    printf("prediction  (%d threads, %d positions attended, %s of %s weights resident)\n",
           p->n_threads, p->n_past, hr_fmt_bytes((int64_t)p->resident_bytes, a, sizeof a),
           hr_fmt_bytes((int64_t)wb, b, sizeof b));
    printf("  per layer:   %.3f ms decode (mean of %d, resident)\n",
           p->n_layer_ms ? sum / p->n_layer_ms : 0.0, p->n_layer_ms);
    printf("  per token:   %.1f ms = compute %.1f + memory %.1f + disk %.1f + comm %.1f  "
           "-> %.2f tokens/s\n",
           c->total_ms, c->compute_ms, c->memory_ms, c->disk_ms, c->comm_ms,
           c->total_ms > 0 ? 1000.0 / c->total_ms : 0.0);
    printf("  prefill:     %.2f ms per prompt token -> %.1f tokens/s\n", c->prefill_ms,
           c->prefill_ms > 0 ? 1000.0 / c->prefill_ms : 0.0);
}

/* Fills doc->prediction for a single device holding the whole model. */
static int hr_predict(hr_prof_doc *doc, const hr_cli *o, char *err) {
    const hr_prof_device *d = &doc->device;
    const hr_prof_model *m = &doc->model;
    hr_prof_prediction *p = &doc->prediction;
    hr_prof_cost_params cp = hr_prof_cost_params_default();
    cp.n_threads = o->threads > 0 ? o->threads : 0;
    /* bench's generation runs from position n_prompt to n_prompt + n_gen */
    cp.n_past = (o->n_prompt > 0 ? o->n_prompt : 128) + (o->n_gen > 0 ? o->n_gen : 64) / 2;
    p->n_past = cp.n_past;
    p->layer_ms = calloc((size_t)(m->n_layer > 0 ? m->n_layer : 1), sizeof *p->layer_ms);
    if (!p->layer_ms)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    p->n_layer_ms = m->n_layer;
    hr_prof_cost c;
    int rc;
    for (int il = 0; il < m->n_layer; il++) {
        if ((rc = hr_prof_cost_window(d, m, NULL, il, il + 1, &cp, &c, err)))
            return rc;
        p->layer_ms[il] = c.total_ms;
    }
    cp.input = cp.output = true;
    uint64_t wb = hr_prof_model_window_bytes(m, 0, m->n_layer, true, true);
    /* KV cache and work buffers share the memory the page cache can use */
    int64_t avail = d->mem.weights_avail_bytes;
    if (avail >= 0) {
        int64_t kv =
            (int64_t)(m->kv_bytes_per_token * (uint64_t)m->n_layer * (uint64_t)(cp.n_past + 64));
        avail = avail > kv ? avail - kv : 0;
    }
    cp.resident_bytes = hr_prof_steady_resident(wb, avail);
    p->resident_bytes = cp.resident_bytes;
    if ((rc = hr_prof_cost_window(d, m, NULL, 0, m->n_layer, &cp, &p->token, err)))
        return rc;
    p->n_threads = p->token.n_threads;
    doc->has_prediction = true;
    return 0;
}

const hr_cli_opt hr_cmd_profile_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("threads", 't', COUNT, threads, "N", "measure this thread count only"),
    HR_CLI_OPT("json", 0, FLAG, json, NULL, "print JSON (schema hearth.profile v1)"),
    HR_CLI_OPT("out", 'o', STR, out, "FILE", "write the JSON to this file"),
    HR_CLI_OPT("quick", 0, FLAG, quick, NULL, "quick device profile (under 2 s)"),
    HR_CLI_OPT("no-cache", 0, FLAG, no_cache, NULL, "measure again, refresh the cache"),
    HR_CLI_OPT("cache-dir", 0, STR, cache_dir, "DIR", "cache folder"),
    HR_CLI_OPT("peer", 0, STR, peer, "ENDPOINT", "measure the link to this echo peer"),
    HR_CLI_OPT("gpu", 0, STR, gpu, "N|auto|any|none", "Vulkan device to measure (default $HR_GPU)"),
    HR_CLI_OPT("n-prompt", 'P', COUNT, n_prompt, "N", "prediction: prompt tokens (default 128)"),
    HR_CLI_OPT("n-gen", 'N', COUNT, n_gen, "N", "prediction: generated tokens (default 64)"),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(profile) {
    char err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_model *model = NULL;
    hr_prof_doc *doc = calloc(1, sizeof *doc);
    char *json = NULL;
    int rc = 1;
    if (!doc)
        return hr_cli_fail("out of memory");
    hr_prof_params pp = hr_prof_params_default();
    pp.quick = o->quick;
    pp.force = o->no_cache;
    pp.cache_dir = o->cache_dir;
    pp.gpu = o->gpu;
    if (o->threads > 0) {
        pp.threads[0] = o->threads;
        pp.n_threads = 1;
    }
    if (o->model) {
        if (hr_gguf_open(&g, o->model, err)) {
            hr_cli_fail("cannot open model: %s", err);
            goto done;
        }
        if (hr_model_load(&model, g, err) || hr_prof_model_build(&doc->model, model, g, err)) {
            hr_cli_fail("%s: %s", o->model, err);
            goto done;
        }
        doc->has_model = true;
        pp.model_path = o->model;
        pp.n_types = hr_prof_model_types(&doc->model, pp.types, HR_PROF_MAX_TYPES);
        pp.row_len = doc->model.n_embd;
        pp.ffn_len = doc->model.n_ff;
    }
    /* progress: measuring takes seconds before anything else is printed */
    fprintf(stderr, "hearth profile: profiling this device%s ...\n", o->quick ? " (quick)" : "");
    double t_prof = hr_now_s();
    if (hr_prof_device_measure(&doc->device, &pp, err)) {
        hr_cli_fail("device profile: %s", err);
        goto done;
    }
    fprintf(stderr, "hearth profile: %s in %.1f s\n",
            doc->device.from_cache ? "read from the cache" : "measured", hr_now_s() - t_prof);
    doc->has_device = true;
    if (doc->has_model) {
        /* real decode steps of the first layers calibrate the rates */
        int types[HR_PROF_MAX_TYPES];
        int nt = o->threads > 0 ? o->threads
                                : hr_prof_device_best_threads(
                                      &doc->device, types,
                                      hr_prof_model_types(&doc->model, types, HR_PROF_MAX_TYPES));
        char pe[HR_ERR_LEN] = "";
        if (hr_prof_engine_probe(&doc->device, model, &doc->model, nt,
                                 hr_prof_probe_window_s(&doc->device), pe))
            fprintf(stderr, "hearth profile: engine probe skipped: %s\n", pe);
        else if (!o->no_cache) /* pooled with the device's earlier starts, as an agent does */
            hr_prof_engine_history(&doc->device, &doc->model, &pp);
    }
    if (o->peer) {
        int msg = doc->has_model ? (int)doc->model.hidden_bytes : 8192;
        if (hr_prof_link_measure(&doc->links[0], NULL, o->peer, msg, 50, 2000, err)) {
            hr_cli_fail("link to %s: %s", o->peer, err);
            goto done;
        }
        doc->n_links = 1;
    }
    if (doc->has_model && hr_predict(doc, o, err)) {
        hr_cli_fail("prediction: %s", err);
        goto done;
    }
    if (o->json || o->out) {
        if (hr_prof_doc_to_json(doc, true, &json, err)) {
            hr_cli_fail("%s", err);
            goto done;
        }
    }
    if (o->out) {
        FILE *f = fopen(o->out, "w");
        size_t n = strlen(json);
        bool ok = f && fwrite(json, 1, n, f) == n && fputc('\n', f) != EOF;
        if (f)
            ok = fclose(f) == 0 && ok;
        if (!ok) {
            hr_cli_fail("cannot write %s", o->out);
            goto done;
        }
    }
    if (o->json && o->out) {
        /* the JSON went to the file only */
    } else if (o->json) {
        printf("%s\n", json);
    } else {
        hr_print_device(&doc->device);
        for (int i = 0; i < doc->n_links; i++) {
            const hr_prof_link *l = &doc->links[i];
            printf("link  %s: round trip %.1f us median (min %.1f, %d x %d B), %.1f MB/s\n",
                   l->endpoint, l->rtt_us, l->rtt_min_us, l->n_samples, l->msg_bytes, l->bw_mbs);
        }
        if (doc->has_model) {
            hr_print_model(&doc->model, &doc->prediction, o->model);
            hr_print_prediction(doc);
        }
    }
    rc = 0;
done:
    free(json);
    hr_prof_doc_clear(doc);
    free(doc);
    hr_model_free(model);
    hr_gguf_close(g);
    return rc;
}
