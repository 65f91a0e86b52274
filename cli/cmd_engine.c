/* cmd_engine.c - single-process subcommands: run, logits, info, mkmodel,
 * bench. */
#include "cli/cli.h"

#include "common/file.h"
#include "common/log.h"
#include "common/sync.h"
#include "gpu/vk.h"
#include "kernels/pool.h"
#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/generate.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "model/tp.h"
#include "profiler/membw.h"
#include "profiler/profiler.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "run"

int hr_cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hearth: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

bool hr_cli_is_tty(void) { return isatty(STDERR_FILENO) != 0; }

static int hr_default_threads(const hr_cli *o) {
    if (o->threads > 0)
        return o->threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 64 ? 64 : n) : 1;
}

/* Everything a single-process command holds. */
typedef struct {
    hr_gguf *g;
    hr_model *m;
    hr_tokenizer *tok;
    hr_ctx *ctx;
    hr_vk *vk; /* the device of --gpu-layers, or NULL */
} hr_engine;

static void hr_engine_close(hr_engine *e) {
    hr_ctx_destroy(e->ctx);
    hr_vk_destroy(e->vk);
    hr_tokenizer_destroy(e->tok);
    hr_model_free(e->m);
    hr_gguf_close(e->g);
    memset(e, 0, sizeof *e);
}

static int hr_engine_open(hr_engine *e, const hr_cli *o, bool need_tok) {
    char err[HR_ERR_LEN] = "";
    memset(e, 0, sizeof *e);
    if (!o->model)
        return hr_cli_fail("no model given (use -m MODEL.gguf)");
    int rc = hr_gguf_open(&e->g, o->model, err);
    if (rc)
        return hr_cli_fail("cannot open model: %s", err);
    if ((rc = hr_model_load(&e->m, e->g, err))) {
        hr_engine_close(e);
        return hr_cli_fail("%s: %s", o->model, err);
    }
    if (need_tok && (rc = hr_tokenizer_create(&e->tok, e->g, err))) {
        hr_engine_close(e);
        return hr_cli_fail("%s: tokenizer: %s", o->model, err);
    }
    return 0;
}

/* The context of e with n_seq KV slots (hr_ctx_step). */
static int hr_engine_ctx_seq(hr_engine *e, const hr_cli *o, int n_ctx, int n_batch, int n_seq) {
    char err[HR_ERR_LEN] = "";
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.n_batch = n_batch;
    cp.n_threads = hr_default_threads(o);
    cp.n_threads_decode = o->threads_decode;
    cp.n_groups = o->numa ? -1 : o->groups;
    cp.tp_reduce = o->tp_reduce;
    if (o->gpu_layers > 0) {
        int idx = -1, n_layer = hr_model_hparams(e->m)->n_layer;
        if (!hr_vk_built())
            return hr_cli_fail("--gpu-layers: this hearth was built without Vulkan");
        if (hr_vk_pick(o->gpu, &idx, err))
            return hr_cli_fail("%s", err);
        if (idx < 0)
            return hr_cli_fail("--gpu-layers %d: no GPU chosen (a software device such as "
                               "lavapipe needs --gpu N or --gpu any)",
                               o->gpu_layers);
        if (!e->vk && hr_vk_create(&e->vk, idx, err))
            return hr_cli_fail("GPU %d: %s", idx, err);
        cp.vk = e->vk;
        cp.n_gpu = o->gpu_layers < n_layer ? o->gpu_layers : n_layer;
    }
    int rc = hr_ctx_create(&e->ctx, e->m, &cp, err);
    if (rc)
        return hr_cli_fail("%s", err);
    HR_LOG_INFO(TAG, "context %d tokens (the model was trained on %d), %d thread%s%s", n_ctx,
                hr_model_hparams(e->m)->n_ctx_train, cp.n_threads, cp.n_threads == 1 ? "" : "s",
                o->threads > 0 ? "" : " (every online core, at most 64)");
    return 0;
}

static int hr_engine_ctx(hr_engine *e, const hr_cli *o, int n_ctx, int n_batch) {
    return hr_engine_ctx_seq(e, o, n_ctx, n_batch, 1);
}

/* Prompt files and reference logits: up to 1 GiB. */
static char *hr_read_file(const char *path, size_t *len) {
    return hr_file_read(path, (size_t)1 << 30, len);
}

/* Encodes text into a malloc'ed array (*ids, *n), growing it as needed. */
static int hr_encode_alloc(const hr_tokenizer *tok, const char *text, size_t len, bool bos,
                           bool special, int32_t **ids, int *n) {
    int cap = (int)(len < 1000000 ? len : 1000000) + 8;
    *ids = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *buf = realloc(*ids, (size_t)cap * sizeof *buf);
        if (!buf)
            return HR_ENOMEM;
        *ids = buf;
        int rc = hr_tokenizer_encode(tok, text, len, bos, special, buf, cap, n);
        if (rc)
            return rc;
        if (*n <= cap)
            return 0;
        cap = *n;
    }
    return HR_EINTERNAL;
}

const hr_cli_opt hr_cmd_run_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("prompt", 'p', STR, prompt, "TEXT", "prompt text"),
    HR_CLI_OPT("file", 'f', STR, prompt_file, "FILE", "read the prompt from a file"),
    HR_CLI_OPT("n-predict", 'n', COUNT, n_predict, "N", "tokens to generate (default 128)"),
    HR_CLI_OPT("ctx", 'c', COUNT, ctx, "N", "context size in tokens (default min(train, 4096))"),
    HR_CLI_OPT("batch", 'b', COUNT, batch, "N", "prompt batch size (default 64)"),
    HR_CLI_OPTS(hr_cli_opts_engine),
    HR_CLI_OPTS(hr_cli_opts_sampling),
    HR_CLI_OPTS(hr_cli_opts_penalties),
    HR_CLI_OPTS(hr_cli_opts_reply),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(run) {
    char err[HR_ERR_LEN] = "";
    char *file_text = NULL;
    size_t text_len = 0;
    const char *text = o->prompt;
    if (o->prompt_file) {
        file_text = hr_read_file(o->prompt_file, &text_len);
        if (!file_text)
            return hr_cli_fail("cannot read prompt file %s", o->prompt_file);
        text = file_text;
    } else if (text) {
        text_len = strlen(text);
    } else {
        return hr_cli_fail("no prompt given (use -p TEXT or -f FILE)");
    }
    hr_engine e;
    if (hr_engine_open(&e, o, true)) {
        free(file_text);
        return 1;
    }
    int rc = 1;
    int32_t *ids = NULL;
    float *logits = NULL;
    hr_sampler *smp = NULL;
    hr_gen *gen = NULL;
    char **stops = NULL;
    int n_stops = 0;
    const hr_hparams *hp = hr_model_hparams(e.m);
    int n_ids = 0;
    if (hr_cli_stop_list(o, &stops, &n_stops))
        goto done;
    if (hr_encode_alloc(e.tok, text, text_len, hr_tokenizer_add_bos(e.tok), false, &ids, &n_ids) !=
        0) {
        hr_cli_fail("cannot tokenize the prompt");
        goto done;
    }
    if (n_ids == 0) {
        hr_cli_fail("the prompt is empty");
        goto done;
    }
    int n_ctx = hr_hparams_ctx(hp, o->ctx);
    if (n_ids >= n_ctx) {
        hr_cli_fail("prompt has %d tokens but the context holds %d (raise --ctx)", n_ids, n_ctx);
        goto done;
    }
    int n_want = o->max_tokens > 0 ? o->max_tokens : o->n_predict;
    int n_predict = n_want < 0 ? n_ctx - n_ids : n_want;
    if (n_ids + n_predict > n_ctx) {
        HR_LOG_WARN(TAG, "generation limited to %d tokens by the context size %d", n_ctx - n_ids,
                    n_ctx);
        n_predict = n_ctx - n_ids;
    }
    if (hr_engine_ctx(&e, o, n_ctx, o->batch))
        goto done;
    hr_sampler_params sp = hr_cli_sampler(o);
    smp = hr_sampler_create(&sp, hp->n_vocab);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    if (!smp || !logits) {
        hr_cli_fail("out of memory");
        goto done;
    }
    hr_gen_params gp = hr_gen_params_default();
    gp.stop = (const char *const *)stops;
    gp.n_stop = n_stops;
    gp.max_tokens = n_predict;
    if (hr_gen_create(&gen, e.tok, &gp, err)) {
        hr_cli_fail("%s", err);
        goto done;
    }
    for (int i = 0; i < n_ids; i++)
        hr_sampler_accept(smp, ids[i]);
    double t0 = hr_now_s();
    if (hr_ctx_eval(e.ctx, ids, n_ids, 0, logits, false, err)) {
        hr_cli_fail("prompt evaluation failed: %s", err);
        goto done;
    }
    double t_prompt = hr_now_s() - t0;
    int n_gen = 0, pos = n_ids;
    size_t nb;
    const char *delta;
    double t1 = hr_now_s();
    for (int i = 0; i < n_predict; i++) {
        int32_t id = hr_sampler_sample(smp, logits);
        hr_sampler_accept(smp, id);
        n_gen++;
        hr_finish fin = HR_FINISH_NONE;
        if (hr_gen_push(gen, id, &fin)) {
            hr_cli_fail("cannot decode token %d", (int)id);
            goto done;
        }
        delta = hr_gen_delta(gen, &nb);
        if (nb > 0) {
            fwrite(delta, 1, nb, stdout);
            fflush(stdout);
        }
        if (fin != HR_FINISH_NONE)
            break;
        if (hr_ctx_eval(e.ctx, &id, 1, pos++, logits, false, err)) {
            hr_cli_fail("generation failed: %s", err);
            goto done;
        }
    }
    hr_gen_finish(gen, HR_FINISH_LENGTH);
    delta = hr_gen_delta(gen, &nb);
    if (nb > 0)
        fwrite(delta, 1, nb, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    double t_gen = hr_now_s() - t1;
    fprintf(stderr,
            "prompt: %d tokens in %.3f s, %.2f tokens/s | generation: %d tokens in %.3f s, "
            "%.2f tokens/s\n",
            n_ids, t_prompt, n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
            n_gen / (t_gen > 0 ? t_gen : 1e-9));
    HR_LOG_INFO(TAG, "finish reason: %s", hr_finish_name(hr_gen_finish_reason(gen)));
    rc = 0;
done:
    hr_gen_destroy(gen);
    hr_cli_stop_free(stops, n_stops);
    hr_sampler_destroy(smp);
    free(logits);
    free(ids);
    free(file_text);
    hr_engine_close(&e);
    return rc;
}

const hr_cli_opt hr_cmd_tokenize_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("prompt", 'p', STR, prompt, "TEXT", "the text (or as the argument)"),
    HR_CLI_OPT("file", 'f', STR, prompt_file, "FILE", "read the text from a file"),
    HR_CLI_OPT("bos", 0, FLAG, bos, NULL, "prepend BOS"),
    HR_CLI_OPT("special", 0, FLAG, special, NULL, "parse control tokens in the text"),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(tokenize) {
    char *file_text = NULL;
    size_t len = 0;
    const char *text = o->n_args > 0 ? o->args[0] : o->prompt;
    if (o->prompt_file) {
        file_text = hr_read_file(o->prompt_file, &len);
        if (!file_text)
            return hr_cli_fail("cannot read %s", o->prompt_file);
        text = file_text;
    } else if (text) {
        len = strlen(text);
    } else {
        return hr_cli_fail("no text given (hearth tokenize -m MODEL TEXT, or -f FILE)");
    }
    char err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int rc = 1, n = 0;
    if (!o->model) {
        hr_cli_fail("no model given (use -m MODEL.gguf)");
        goto done;
    }
    if (hr_gguf_open(&g, o->model, err)) {
        hr_cli_fail("cannot open model: %s", err);
        goto done;
    }
    if (hr_tokenizer_create(&tok, g, err)) {
        hr_cli_fail("%s: tokenizer: %s", o->model, err);
        goto done;
    }
    if (hr_encode_alloc(tok, text, len, o->bos, o->special, &ids, &n) != 0) {
        hr_cli_fail("cannot tokenize the text");
        goto done;
    }
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    rc = 0;
done:
    free(ids);
    free(file_text);
    hr_tokenizer_destroy(tok);
    hr_gguf_close(g);
    return rc;
}

static int hr_parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    while (v && *s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > 0x7fffffff) {
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)cap * 2 * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
            cap *= 2;
        }
        v[k++] = (int32_t)x;
        s = end;
        while (*s == ',' || *s == ' ')
            s++;
    }
    if (!v || k == 0) {
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

const hr_cli_opt hr_cmd_logits_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("ids", 0, STR, ids, "1,2,3", "token ids"),
    HR_CLI_OPT("out", 'o', STR, out, "FILE", "write the logits to this file"),
    HR_CLI_OPT("compare", 0, STR, compare, "FILE", "reference logits to compare with"),
    HR_CLI_OPT("batch", 'b', COUNT, batch, "N", "prompt batch size (default 64)"),
    HR_CLI_OPTS(hr_cli_opts_engine),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(logits) {
    char err[HR_ERR_LEN] = "";
    int32_t *ids = NULL;
    int n = 0;
    if (!o->ids || hr_parse_ids(o->ids, &ids, &n))
        return hr_cli_fail("--ids needs a comma-separated list of token ids");
    if (!o->out && !o->compare) {
        free(ids);
        return hr_cli_fail("give -o OUT and/or --compare REF");
    }
    hr_engine e;
    if (hr_engine_open(&e, o, false)) {
        free(ids);
        return 1;
    }
    int rc = 1;
    float *logits = NULL, *ref = NULL;
    const hr_hparams *hp = hr_model_hparams(e.m);
    size_t nv = (size_t)hp->n_vocab;
    if (hr_engine_ctx(&e, o, n + 1, o->batch))
        goto done;
    logits = malloc((size_t)n * nv * sizeof *logits);
    if (!logits) {
        hr_cli_fail("out of memory");
        goto done;
    }
    if (hr_ctx_eval(e.ctx, ids, n, 0, logits, true, err)) {
        hr_cli_fail("evaluation failed: %s", err);
        goto done;
    }
    if (o->out) {
        FILE *f = fopen(o->out, "wb");
        if (!f || fwrite(logits, sizeof(float), (size_t)n * nv, f) != (size_t)n * nv) {
            if (f)
                fclose(f);
            hr_cli_fail("cannot write %s", o->out);
            goto done;
        }
        if (fclose(f) != 0) {
            hr_cli_fail("cannot write %s", o->out);
            goto done;
        }
    }
    if (o->compare) {
        size_t len = 0;
        ref = (float *)hr_read_file(o->compare, &len);
        if (!ref || len != (size_t)n * nv * sizeof(float)) {
            hr_cli_fail("%s: expected %zu bytes (%d rows of %zu floats), got %zu", o->compare,
                        (size_t)n * nv * sizeof(float), n, nv, ref ? len : 0);
            goto done;
        }
        double worst = 0.0;
        int worst_pos = 0, agree = 0;
        size_t nonfinite = 0; /* a NaN or infinity on either side: the error is infinite */
        for (int p = 0; p < n; p++) {
            const float *a = logits + (size_t)p * nv, *b = ref + (size_t)p * nv;
            double md = 0.0, mr = 0.0;
            for (size_t i = 0; i < nv; i++) {
                if (!isfinite(a[i]) || !isfinite(b[i])) {
                    nonfinite++;
                    md = INFINITY;
                    continue;
                }
                double d = a[i] - b[i];
                md = d < 0 ? (-d > md ? -d : md) : (d > md ? d : md);
                double r = b[i] < 0 ? -b[i] : b[i];
                mr = r > mr ? r : mr;
            }
            double rel = md / (mr > 0 ? mr : 1.0);
            if (rel > worst) {
                worst = rel;
                worst_pos = p;
            }
            agree += hr_argmax(a, (int)nv) == hr_argmax(b, (int)nv);
        }
        printf("compare: %d positions, max rel error %.3e (position %d), argmax agree %d/%d", n,
               worst, worst_pos, agree, n);
        if (nonfinite)
            printf(", %zu NaN or infinite values", nonfinite);
        printf("\n");
    }
    rc = 0;
done:
    free(ids);
    free(logits);
    free(ref);
    hr_engine_close(&e);
    return rc;
}

const hr_cli_opt hr_cmd_info_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("kv", 0, FLAG, kv, NULL, "print every metadata key"),
    HR_CLI_OPT_END,
};

/* The compute devices this build can use: the CPU always, Vulkan devices
 * when built with Vulkan. */
static void hr_info_gpus(void) {
    char err[HR_ERR_LEN] = "";
    if (!hr_vk_built()) {
        printf("gpu:         none (built CPU-only: no Vulkan backend)\n");
        return;
    }
    hr_vk_device_info d[HR_VK_MAX_DEVICES];
    int n = 0;
    if (hr_vk_list(d, HR_VK_MAX_DEVICES, &n, err) != 0) {
        printf("gpu:         Vulkan backend; device list failed: %s\n", err);
        return;
    }
    int pick = -1;
    char perr[HR_ERR_LEN] = "";
    int prc = hr_vk_pick(NULL, &pick, perr);
    printf("gpu:         Vulkan backend, %d device%s", n, n == 1 ? "" : "s");
    if (prc)
        printf(" (HR_GPU: %s)\n", perr);
    else if (pick < 0)
        printf(" (none chosen: CPU only)\n");
    else
        printf(" (device %d chosen)\n", pick);
    for (int i = 0; i < n; i++) {
        printf("  [%d] %s: %s, Vulkan %u.%u, heaps", i, d[i].name, hr_vk_type_name(d[i].type),
               (d[i].api_version >> 22) & 0x7fu, (d[i].api_version >> 12) & 0x3ffu);
        for (int h = 0; h < d[i].n_heaps; h++)
            printf("%s %.1f GiB%s", h ? "," : "", d[i].heap_bytes[h] / 1073741824.0,
                   d[i].heap_device_local[h] ? " (device)" : "");
        printf("%s\n", d[i].type == HR_VK_CPU ? "; software, used only when named" : "");
        printf("      offers: subgroup size %u%s, int8 dot product %s, cooperative matrix %s, "
               "fp16 %s, f64 %s\n",
               d[i].subgroup_size, d[i].subgroup_arith ? " with arithmetic" : " (no arithmetic)",
               d[i].int_dot ? "yes" : "no", d[i].coop_matrix ? "yes" : "no",
               d[i].fp16 ? "yes" : "no", d[i].f64 ? "yes" : "no");
        printf("      path: %s; %s reductions%s%s\n", hr_vk_path_name(&d[i]),
               d[i].subgroup_arith ? "subgroup" : "shared-memory",
               d[i].int_dot ? ", packed int8 dot products" : "",
               hr_kernels_exact() && d[i].f64 ? "; --exact: the exact kernels" : "");
    }
}

/* The CPU line(s) of `hearth info`: model, cores, kernels, memory. */
static void hr_info_cpu(void) {
    hr_prof_device *d = calloc(1, sizeof *d);
    if (!d) {
        printf("cpu:         (out of memory)\n");
        return;
    }
    hr_prof_device_sysinfo(d, NULL);
    printf("cpu:         %s, ", d->os.cpu_model[0] ? d->os.cpu_model : "unknown model");
    if (d->topo.n_cores > 0)
        printf("%d cores, ", d->topo.n_cores);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    printf("%ld threads online; kernels %s, %s (%s)\n", online, hr_isa_name(hr_kernels_best()->isa),
           hr_kernels_best()->canonical ? "canonical order" : "free order (--exact: canonical)",
           hr_isa_features());
    if (d->mem.total_bytes > 0)
        printf("memory:      %.1f GiB, %.1f GiB available\n", d->mem.total_bytes / 1073741824.0,
               d->mem.available_bytes / 1073741824.0);
    free(d);
}

HR_CLI_COMMAND(info) {
    char err[HR_ERR_LEN] = "";
    hr_info_cpu();
    hr_info_gpus();
    if (!o->model)
        return 0;
    hr_gguf *g = NULL;
    if (hr_gguf_open(&g, o->model, err))
        return hr_cli_fail("cannot open model: %s", err);
    printf("file:        %s (%.1f MiB, GGUF v%u, %lld metadata keys, %lld tensors)\n", o->model,
           hr_gguf_file_size(g) / 1048576.0, hr_gguf_version(g), (long long)hr_gguf_n_kv(g),
           (long long)hr_gguf_n_tensors(g));
    const char *name = NULL;
    if (hr_gguf_get_str(g, "general.name", &name) == 0)
        printf("name:        %s\n", name);
    hr_model *m = NULL;
    int rc = hr_model_load(&m, g, err);
    if (rc == 0) {
        const hr_hparams *hp = hr_model_hparams(m);
        printf("arch:        %s\n", hp->arch_name);
        printf("shape:       embd %d, layers %d, heads %d (kv %d, dim %d), ffn %d, vocab %d\n",
               hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff,
               hp->n_vocab);
        if (hp->n_expert > 0)
            printf("experts:     %d per layer, %d used per token, %d rows each%s\n", hp->n_expert,
                   hp->n_expert_used, hp->n_ff_exp,
                   hp->n_ff_shexp > 0 && (hp->sets & HR_LT_SHEXP) ? " + a shared expert" : "");
        printf("rope:        %s, base %g, %d dims; rms eps %g; train ctx %d; output %s\n",
               hp->rope_neox ? "neox" : "normal", hp->rope_base, hp->n_rot, hp->rms_eps,
               hp->n_ctx_train, hp->tied_output ? "tied to embeddings" : "separate");
        if (hp->rope_scale != 1.0f && hp->yarn_ext != 0.0f)
            printf("rope scale:  YaRN, factor %g, dims %g-%g ramped, magnitude x%.4f%s\n",
                   1.0 / hp->rope_scale, hp->yarn_corr[0], hp->yarn_corr[1], hp->yarn_mscale,
                   hp->n_swa > 0 && !hp->rope_swa_global ? " (global layers)" : "");
        else if (hp->rope_scale != 1.0f)
            printf("rope scale:  linear, factor %g%s\n", 1.0 / hp->rope_scale,
                   hp->n_swa > 0 && !hp->rope_swa_global ? " (global layers)" : "");
        if (hp->n_swa > 0) {
            int local = 0;
            for (int il = 0; il < hp->n_layer; il++)
                local += hr_hparams_layer_swa(hp, il);
            printf("window:      %d positions on %d of %d layers (rope base %g), the others "
                   "global\n",
                   hp->n_swa, local, hp->n_layer, hp->rope_base_swa);
        }
        uint64_t lb = 0;
        for (int il = 0; il < hp->n_layer; il++)
            lb += hr_model_layer_bytes(m, il);
        printf("weights:     %.1f MiB in layers (%.2f MiB per layer avg), %.1f MiB output head\n",
               lb / 1048576.0, lb / 1048576.0 / hp->n_layer, hr_model_output_bytes(m) / 1048576.0);
        if (hp->n_expert > 0) {
            uint64_t eb = 0;
            for (int il = 0; il < hp->n_layer; il++)
                eb += hr_model_layer_expert_bytes(m, il);
            printf("per token:   %.1f MiB of layers read (%.1f MiB always, %d of %d experts)\n",
                   (lb - eb + eb * (double)hp->n_expert_used / hp->n_expert) / 1048576.0,
                   (lb - eb) / 1048576.0, hp->n_expert_used, hp->n_expert);
        }
        hr_model_free(m);
    } else {
        printf("model:       not loadable: %s\n", err);
    }
    /* per-type summary */
    int64_t count[HR_TYPE_COUNT] = {0};
    uint64_t bytes[HR_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        if (t->type >= 0 && t->type < HR_TYPE_COUNT) {
            count[t->type]++;
            bytes[t->type] += t->size;
        }
    }
    printf("tensor types:\n");
    for (int t = 0; t < HR_TYPE_COUNT; t++)
        if (count[t])
            printf("  %-6s %5lld tensors %10.2f MiB\n", hr_type_name(t), (long long)count[t],
                   bytes[t] / 1048576.0);
    if (o->kv) {
        printf("metadata:\n");
        char buf[256];
        for (int64_t i = 0; i < hr_gguf_n_kv(g); i++) {
            hr_gguf_value_format(hr_gguf_kv_value(g, i), buf, sizeof buf, 8);
            printf("  %s = %s\n", hr_gguf_key(g, i), buf);
        }
    }
    hr_gguf_close(g);
    return rc == 0 ? 0 : 1;
}

static void hr_mk_progress(int done, int total, void *ud) {
    (void)ud;
    if (hr_cli_is_tty()) {
        fprintf(stderr, "\rwriting tensors: %d/%d", done, total);
        if (done == total)
            fprintf(stderr, "\n");
    } else if (done == total || done % 50 == 0) {
        fprintf(stderr, "writing tensors: %d/%d\n", done, total);
    }
}

const hr_cli_opt hr_cmd_mkmodel_opts[] = {
    HR_CLI_OPT("out", 'o', STR, out, "FILE", "the model file to write"),
    HR_CLI_OPT("shape", 0, STR, shape, "NAME",
               "tinyllama, small, tiny, llama7b, qwen3moe-small, qwen3moe-tiny, qwen2moe-tiny, "
               "mixtral-tiny, phi3-mini, phi3-small, phi3-tiny, gemma3-1b, gemma3-270m, "
               "gemma3-tiny"),
    HR_CLI_OPT("type", 0, STR, type, "TYPE", "weight type, e.g. q4_0, q4_k_m, f16"),
    HR_CLI_OPT("arch", 0, STR, arch, "NAME",
               "llama, qwen2, qwen3, qwen3moe, qwen2moe, phi3 or gemma3 (default llama; a shape "
               "may set it)"),
    HR_CLI_OPT("vocab", 0, STR, vocab, "FILE", "copy the tokenizer from this GGUF"),
    HR_CLI_OPT("embd", 0, COUNT, embd, "N", "embedding width"),
    HR_CLI_OPT("layers", 0, COUNT, layers, "N", "layer count"),
    HR_CLI_OPT("heads", 0, COUNT, heads, "N", "attention heads"),
    HR_CLI_OPT("heads-kv", 0, COUNT, heads_kv, "N", "KV heads"),
    HR_CLI_OPT("ffn", 0, COUNT, ffn, "N", "feed-forward width"),
    HR_CLI_OPT("head-dim", 0, COUNT, head_dim, "N", "width of an attention head (embd / heads)"),
    HR_CLI_OPT("window", 0, COUNT, window, "N", "sliding window of the local layers (gemma3)"),
    HR_CLI_OPT("window-pattern", 0, COUNT, window_pattern, "N",
               "every N-th layer is global, the others local (gemma3; default 6)"),
    HR_CLI_OPT("experts", 0, COUNT, experts, "N", "routed experts per layer (0: dense)"),
    HR_CLI_OPT("experts-used", 0, COUNT, experts_used, "K", "experts each token is routed to"),
    HR_CLI_OPT("expert-ffn", 0, COUNT, expert_ffn, "N", "rows of each expert"),
    HR_CLI_OPT("shared-ffn", 0, COUNT, shared_ffn, "N", "rows of the shared expert (qwen2moe)"),
    HR_CLI_OPT("vocab-size", 0, COUNT, vocab_size, "N", "vocabulary size"),
    HR_CLI_OPT("ctx", 'c', COUNT, ctx, "N", "training context length written to the model"),
    HR_CLI_OPT("seed", 's', I64, seed, "S", "weight RNG seed"),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(mkmodel) {
    char err[HR_ERR_LEN] = "";
    if (!o->out)
        return hr_cli_fail("mkmodel needs -o OUT.gguf");
    hr_mkmodel_params p = hr_mkmodel_params_default();
    if (o->shape && hr_mkmodel_shape(&p, o->shape))
        return hr_cli_fail("unknown shape '%s' (%s)", o->shape, hr_mkmodel_shape_names());
    if (o->arch)
        p.arch = o->arch;
    if (o->type)
        p.ftype = o->type;
    if (o->embd > 0)
        p.n_embd = o->embd;
    if (o->layers > 0)
        p.n_layer = o->layers;
    if (o->heads > 0)
        p.n_head = o->heads;
    if (o->heads_kv > 0)
        p.n_head_kv = o->heads_kv;
    if (o->ffn > 0)
        p.n_ff = o->ffn;
    if (o->head_dim > 0)
        p.head_dim = o->head_dim;
    if (o->window > 0)
        p.n_swa = o->window;
    if (o->window_pattern > 0)
        p.swa_pattern = o->window_pattern;
    if (o->experts > 0)
        p.n_expert = o->experts;
    if (o->experts_used > 0)
        p.n_expert_used = o->experts_used;
    if (o->expert_ffn > 0)
        p.n_ff_exp = o->expert_ffn;
    if (o->shared_ffn > 0)
        p.n_ff_shexp = o->shared_ffn;
    if (o->vocab_size > 0)
        p.n_vocab = o->vocab_size;
    if (o->ctx > 0)
        p.n_ctx = o->ctx;
    if (o->seed >= 0)
        p.seed = (uint64_t)o->seed;
    p.vocab_from = o->vocab;
    double t0 = hr_now_s();
    int rc = hr_mkmodel_write(&p, o->out, hr_mk_progress, NULL, err);
    if (rc)
        return hr_cli_fail("mkmodel: %s", err);
    fprintf(stderr, "wrote %s (%s, embd %d x %d layers, %s) in %.1f s\n", o->out, p.arch, p.n_embd,
            p.n_layer, p.ftype, hr_now_s() - t0);
    return 0;
}

#define HR_BENCH_MAX_PAR 64

static int hr_dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Per-group timings of the last decode run (tensor-parallel contexts). */
static void hr_bench_groups(const hr_ctx *c) {
    hr_tp_stats st;
    if (hr_ctx_tp_stats(c, &st) != 0 || st.tokens[HR_PHASE_DECODE] == 0)
        return;
    double nt = (double)st.tokens[HR_PHASE_DECODE];
    printf("groups: %d (%s split, %s slices%s), %.0f global barriers per token\n", st.n_groups,
           st.reduce ? "reduce" : "exact", st.copies ? "copied" : "mapped",
           st.membind ? ", memory bound per node" : "", st.barriers[HR_PHASE_DECODE] / nt);
    for (int g = 0; g < st.n_groups; g++) {
        const hr_tp_group_stats *s = &st.group[g];
        printf("  group %d: node %d, threads %d prefill / %d decode, %.1f MiB of weights, "
               "compute %.3f ms/token, barrier wait %.3f ms/token\n",
               g, s->node, s->n_threads, s->n_threads_decode, s->weight_bytes / 1048576.0,
               1e3 * s->compute_s[HR_PHASE_DECODE] / nt, 1e3 * s->barrier_s[HR_PHASE_DECODE] / nt);
    }
}

const hr_cli_opt hr_cmd_bench_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("n-prompt", 'P', COUNT, n_prompt, "N", "prompt tokens (default 128)"),
    HR_CLI_OPT("n-gen", 'N', COUNT, n_gen, "N", "generated tokens (default 64)"),
    HR_CLI_OPT("reps", 'r', COUNT, reps, "N", "repetitions (default 3, at most 20)"),
    HR_CLI_OPT("parallel", 0, COUNT, parallel, "N",
               "generation of 1, 2, 4, .. N concurrent sequences (batched decode)"),
    HR_CLI_OPT("isa", 0, STR, isa, "LIST",
               "kernel tables to run one after another, e.g. avx2,avx512 or all "
               "(default: the best this CPU runs)"),
    HR_CLI_OPTS(hr_cli_opts_engine),
    HR_CLI_OPT_END,
};

/* Random prompt ids (every stream its own). */
static void hr_bench_ids(int32_t *ids, int n, int n_vocab, uint64_t *rng) {
    for (int i = 0; i < n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((*rng >> 33) % (uint64_t)n_vocab);
    }
}

/* One measurement of s concurrent streams: each gets a prompt of np
 * tokens (prefilled one stream at a time, not timed), then ng batched
 * decode steps of s rows are timed. rows: n_batch entries. s = 0: one stream through the
 * single-sequence API (hr_ctx_eval), the baseline. Returns seconds of
 * decode, or < 0. */
static double hr_bench_streams(hr_ctx *c, const hr_hparams *hp, int s, int np, int ng, int32_t *ids,
                               hr_seq_pos *rows, float *logits, uint64_t *rng) {
    char err[HR_ERR_LEN] = "";
    int B = hr_ctx_get_params(c)->n_batch, S = s > 0 ? s : 1, nl = 0, rc = 0;
    int32_t tok[HR_BENCH_MAX_PAR];
    for (int i = 0; i < S && rc == 0; i++) {
        hr_bench_ids(ids, np, hp->n_vocab, rng);
        if (s == 0) {
            rc = hr_ctx_eval(c, ids, np, 0, logits, false, err);
        } else if ((rc = hr_ctx_seq_add(c, i)) == i) {
            rc = 0;
            for (int done = 0; done < np && rc == 0; done += B) {
                int nb = np - done < B ? np - done : B;
                for (int t = 0; t < nb; t++)
                    rows[t] = (hr_seq_pos){.seq = i, .pos = done + t};
                rc = hr_ctx_eval_batch(c, ids + done, rows, nb, logits, &nl, err);
            }
        }
        tok[i] = hr_argmax(logits, hp->n_vocab);
    }
    double t0 = hr_now_s();
    for (int g = 0; g < ng && rc == 0; g++) {
        if (s == 0) {
            rc = hr_ctx_eval(c, &tok[0], 1, np + g, logits, false, err);
            tok[0] = hr_argmax(logits, hp->n_vocab);
            continue;
        }
        for (int i = 0; i < s; i++)
            rows[i] = (hr_seq_pos){.seq = i, .pos = np + g};
        if ((rc = hr_ctx_eval_batch(c, tok, rows, s, logits, &nl, err)))
            break;
        for (int i = 0; i < s; i++)
            tok[i] = hr_argmax(logits + (size_t)i * hp->n_vocab, hp->n_vocab);
    }
    double dt = hr_now_s() - t0;
    for (int i = 0; i < s; i++)
        hr_ctx_seq_remove(c, i);
    if (rc) {
        hr_cli_fail("%s", err[0] ? err : hr_strerror(rc));
        return -1.0;
    }
    return dt;
}

/* bench --parallel N: generation throughput of 1, 2, 4, .. N concurrent
 * sequences against one sequence through the single-sequence API, each
 * measured reps times (median, with min..max). */
static int hr_bench_parallel(hr_engine *e, const hr_cli *o, int np, int ng, int reps) {
    const hr_hparams *hp = hr_model_hparams(e->m);
    int N = o->parallel > HR_BENCH_MAX_PAR ? HR_BENCH_MAX_PAR : o->parallel;
    int counts[16], nc = 0;
    counts[nc++] = 0; /* the single-sequence baseline */
    for (int s = 1; s < N; s *= 2)
        counts[nc++] = s;
    counts[nc++] = N;
    int B = np < 256 ? np : 256;
    if (hr_engine_ctx_seq(e, o, np + ng + 1, B > N ? B : N, N))
        return 1;
    float *logits = malloc((size_t)N * hp->n_vocab * sizeof *logits);
    int32_t *ids = malloc((size_t)np * sizeof *ids);
    hr_seq_pos *rows = malloc((size_t)(B > N ? B : N) * sizeof *rows);
    double(*tps)[20] = calloc((size_t)nc, sizeof *tps);
    if (!logits || !ids || !rows || !tps) {
        free(logits);
        free(ids);
        free(rows);
        free(tps);
        return hr_cli_fail("out of memory");
    }
    printf("model: %s, %s, %d threads, isa %s%s; %d prompt tokens, %d generated per stream\n",
           o->model, hp->arch_name, hr_default_threads(o), hr_isa_name(hr_kernels_best()->isa),
           hr_kernels_best()->canonical ? "" : " (free order)", np, ng);
    uint64_t rng = 12345;
    int rc = 0;
    for (int r = 0; r < reps && rc == 0; r++)
        for (int k = 0; k < nc && rc == 0; k++) {
            double dt = hr_bench_streams(e->ctx, hp, counts[k], np, ng, ids, rows, logits, &rng);
            if (dt <= 0) {
                rc = 1;
                break;
            }
            int s = counts[k] > 0 ? counts[k] : 1;
            tps[k][r] = (double)s * ng / dt;
            fprintf(stderr, "rep %d: %d stream%s%s: %.2f tokens/s\n", r + 1, s, s > 1 ? "s" : "",
                    counts[k] == 0 ? " (single-sequence API)" : "", tps[k][r]);
        }
    if (rc == 0) {
        /* ratios to the solo run of the same repetition (the machine's load
         * drifts between repetitions), median with min..max */
        printf("%-10s %24s %12s %20s %20s\n", "streams", "aggregate tok/s", "per-stream", "x solo",
               "latency x solo");
        double agg_x[16], lat_x[16];
        for (int k = 0; k < nc; k++) {
            int s = counts[k] > 0 ? counts[k] : 1;
            double v[20], ax[20], lx[20];
            for (int r = 0; r < reps; r++) {
                v[r] = tps[k][r];
                ax[r] = tps[k][r] / tps[0][r];
                lx[r] = tps[0][r] / (tps[k][r] / s);
            }
            qsort(v, (size_t)reps, sizeof v[0], hr_dbl_cmp);
            qsort(ax, (size_t)reps, sizeof ax[0], hr_dbl_cmp);
            qsort(lx, (size_t)reps, sizeof lx[0], hr_dbl_cmp);
            agg_x[k] = ax[reps / 2];
            lat_x[k] = lx[reps / 2];
            char lab[32], c1[48], c2[48], c3[48];
            snprintf(lab, sizeof lab, "%d%s", s, counts[k] == 0 ? " (solo)" : "");
            snprintf(c1, sizeof c1, "%.2f (%.2f..%.2f)", v[reps / 2], v[0], v[reps - 1]);
            snprintf(c2, sizeof c2, "%.2fx (%.2f..%.2f)", ax[reps / 2], ax[0], ax[reps - 1]);
            snprintf(c3, sizeof c3, "%.2fx (%.2f..%.2f)", lx[reps / 2], lx[0], lx[reps - 1]);
            printf("%-10s %24s %12.2f %20s %20s\n", lab, c1, v[reps / 2] / s, c2, c3);
        }
        for (int k = 1; k < nc; k++)
            if (counts[k] == 4 || counts[k] == 8)
                printf("acceptance: %d streams aggregate %.2fx solo (target >= %dx)\n", counts[k],
                       agg_x[k], counts[k] == 4 ? 3 : 5);
        for (int k = 1; k < nc; k++)
            if (counts[k] == 4)
                printf("acceptance: 4 streams per-stream latency %.2fx solo (target <= 1.4x)\n",
                       lat_x[k]);
    }
    free(logits);
    free(ids);
    free(rows);
    free(tps);
    return rc;
}

/* The kernel tables --isa names, in order ("all": every table this CPU
 * runs; no list: the best). Their count, or 0 after saying what is wrong. */
static int hr_bench_isas(const char *list, hr_isa *out) {
    if (!list || !*list) {
        out[0] = hr_kernels_best()->isa;
        return 1;
    }
    int n = 0;
    if (strcmp(list, "all") == 0) {
        for (int i = 0; i < HR_ISA_COUNT; i++)
            if (hr_kernels_for_isa((hr_isa)i))
                out[n++] = (hr_isa)i;
        return n;
    }
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int found = hr_isa_by_name(t);
        if (found < 0) {
            hr_cli_fail("--isa: no kernel table '%s' (scalar, avx2, avx512, neon, dotprod, i8mm)",
                        t);
            return 0;
        }
        if (!hr_kernels_for_isa((hr_isa)found)) {
            hr_cli_fail("--isa: this CPU cannot run the %s kernels (it has: %s)", t,
                        hr_isa_features());
            return 0;
        }
        if (n < HR_ISA_COUNT)
            out[n++] = (hr_isa)found;
    }
    return n;
}

/* Bytes for the bandwidth probe: at least 1 GiB and four times the
 * last-level cache (one L3 per domain, every domain), so the probe reads
 * memory rather than cache, but at most HR_BENCH_PROBE_MAX (a virtual
 * machine may report its host's whole L3 for each virtual CPU: 508 MB
 * each on a 2-CPU guest, and a 4 GiB probe took a minute of page faults
 * there; above that the note says part of it may come from cache); at
 * most a quarter of what this machine (or its memory cgroup) can still
 * hold, so bench runs in small cgroups. */
#define HR_BENCH_PROBE_MAX ((size_t)2 << 30)
static size_t hr_bench_probe_bytes(const hr_prof_device *dev, int64_t *l3_total) {
    int64_t l3 = dev->topo.l3_bytes > 0
                     ? dev->topo.l3_bytes * (dev->topo.n_l3 > 0 ? dev->topo.n_l3 : 1)
                     : -1;
    *l3_total = l3;
    size_t probe = (size_t)1 << 30;
    if (l3 > 0 && (size_t)l3 * 4 > probe)
        probe = (size_t)l3 * 4 < HR_BENCH_PROBE_MAX ? (size_t)l3 * 4 : HR_BENCH_PROBE_MAX;
    int64_t avail = dev->mem.weights_avail_bytes;
    if (avail > 0 && (uint64_t)avail / 4 < probe)
        probe = (size_t)avail / 4 > ((size_t)64 << 20) ? (size_t)avail / 4 : (size_t)64 << 20;
    return probe;
}

HR_CLI_COMMAND(bench) {
    char err[HR_ERR_LEN] = "";
    hr_engine e;
    hr_isa isas[HR_ISA_COUNT];
    int n_isa = hr_bench_isas(o->isa, isas);
    if (n_isa == 0)
        return 1;
    if (hr_engine_open(&e, o, false))
        return 1;
    int rc = 1;
    float *logits = NULL;
    int32_t *ids = NULL;
    hr_prof_device *dev = NULL;
    const hr_hparams *hp = hr_model_hparams(e.m);
    int np = o->n_prompt > 0 ? o->n_prompt : 1, ng = o->n_gen > 0 ? o->n_gen : 1;
    int reps = o->reps > 0 ? (o->reps > 20 ? 20 : o->reps) : 1;
    int nt = hr_default_threads(o);
    const hr_isa isa0 = hr_kernels_best()->isa;
    if (o->parallel > 0) {
        if (n_isa > 1 || isas[0] != isa0) {
            hr_cli_fail("--isa with --parallel: run one table at a time (HR_ISA=NAME)");
            goto done;
        }
        rc = hr_bench_parallel(&e, o, np, ng, reps);
        goto done;
    }
    if (hr_engine_ctx(&e, o, np + ng + 1, np < 256 ? np : 256))
        goto done;
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    ids = malloc((size_t)np * sizeof *ids);
    dev = calloc(1, sizeof *dev);
    if (!logits || !ids || !dev) {
        hr_cli_fail("out of memory");
        goto done;
    }
    hr_prof_device_sysinfo(dev, NULL);
    /* what a decode token reads: of routed experts, the share it is routed to */
    uint64_t wbytes = hr_model_output_bytes(e.m) + hr_model_tok_embd(e.m)->row_bytes;
    for (int il = 0; il < hp->n_layer; il++) {
        uint64_t ex = hr_model_layer_expert_bytes(e.m, il);
        wbytes += hr_model_layer_bytes(e.m, il) - ex;
        if (hp->n_expert > 0)
            wbytes += ex * (uint64_t)hp->n_expert_used / (uint64_t)hp->n_expert;
    }
    int64_t l3 = -1;
    size_t probe = hr_bench_probe_bytes(dev, &l3);
    printf("cpu: %s (%s)", dev->os.cpu_model[0] ? dev->os.cpu_model : "unknown model",
           hr_isa_features());
    if (l3 > 0)
        printf(", last-level cache %.1f MiB", l3 / 1048576.0);
    else
        printf(", last-level cache unknown");
    printf("\n");
    printf("model: %s, %s, %d layers, %.1f MiB of weights read per token%s, %d threads\n", o->model,
           hp->arch_name, hp->n_layer, wbytes / 1048576.0,
           hp->n_expert > 0 ? " (the routed experts' share)" : "", nt);
    if (e.vk) {
        const hr_vk_device_info *gi = hr_vk_info(e.vk);
        int gl = o->gpu_layers < hp->n_layer ? o->gpu_layers : hp->n_layer;
        printf("gpu: %s (%s), layers 0..%d of %d on it; %s path%s%s\n", gi->name,
               hr_vk_type_name(gi->type), gl - 1, hp->n_layer,
               hr_kernels_exact() ? "exact" : "fast",
               hr_kernels_exact()
                   ? (hr_vk_uses_native_fma(e.vk) ? ", fma native" : ", fma from 64-bit floats")
               : hr_vk_uses_subgroups(e.vk) ? ", subgroup reductions"
                                            : ", shared-memory reductions",
               hr_vk_uses_int_dot(e.vk) ? ", packed int8 dot products" : "");
    }
    if (l3 > 0 && probe < (size_t)l3 * 2)
        printf("note: the bandwidth probe (%.0f MiB) is less than twice the last-level cache: "
               "part of it may come from cache\n",
               probe / 1048576.0);
    fflush(stdout);
    fprintf(stderr, "bench: measuring memory bandwidth (%.0f MiB read 5 times) ...\n",
            probe / 1048576.0);
    double bw0 = hr_membw_read(nt, probe, 5);
    double pp_isa[HR_ISA_COUNT], tg_isa[HR_ISA_COUNT];
    for (int k = 0; k < n_isa; k++) {
        hr_kernels_use(isas[k]);
        double pp[20], tg[20];
        uint64_t rng = 12345;
        fprintf(stderr,
                "bench: %s: %d repetition%s of a %d-token prompt and %d generated tokens ...\n",
                hr_isa_name(isas[k]), reps, reps == 1 ? "" : "s", np, ng);
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < np; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                ids[i] = (int32_t)((rng >> 33) % (uint64_t)hp->n_vocab);
            }
            double t0 = hr_now_s();
            if (hr_ctx_eval(e.ctx, ids, np, 0, logits, false, err)) {
                hr_cli_fail("%s", err);
                goto done;
            }
            double t1 = hr_now_s();
            if (r == reps - 1)
                hr_ctx_tp_stats_reset(e.ctx); /* per-group report: the last decode run */
            int32_t id = hr_argmax(logits, hp->n_vocab);
            for (int i = 0; i < ng; i++) {
                if (hr_ctx_eval(e.ctx, &id, 1, np + i, logits, false, err)) {
                    hr_cli_fail("%s", err);
                    goto done;
                }
                id = hr_argmax(logits, hp->n_vocab);
            }
            double t2 = hr_now_s();
            pp[r] = np / (t1 - t0);
            tg[r] = ng / (t2 - t1);
            fprintf(stderr, "%s rep %d: prompt %.2f tokens/s, generation %.2f tokens/s\n",
                    hr_isa_name(isas[k]), r + 1, pp[r], tg[r]);
        }
        qsort(pp, (size_t)reps, sizeof pp[0], hr_dbl_cmp);
        qsort(tg, (size_t)reps, sizeof tg[0], hr_dbl_cmp);
        pp_isa[k] = pp[reps / 2];
        tg_isa[k] = tg[reps / 2];
    }
    hr_kernels_use(isa0);
    double bw1 = hr_membw_read(nt, probe, 5);
    double bw = (bw0 + bw1) / 2;
    for (int k = 0; k < n_isa; k++) {
        double eff = tg_isa[k] * (double)wbytes / 1e9;
        const char *tag = n_isa > 1 ? hr_isa_name(isas[k]) : NULL;
        if (tag)
            printf("[%s]\n", tag);
        else
            printf("isa: %s\n", hr_isa_name(isas[k]));
        printf("prompt processing: %.2f tokens/s (%d tokens, median of %d)\n", pp_isa[k], np, reps);
        printf("generation:        %.2f tokens/s (%d tokens, median of %d)\n", tg_isa[k], ng, reps);
        printf("effective bandwidth: %.2f GB/s; bandwidth ratio: %.1f%%\n", eff, 100.0 * eff / bw);
    }
    printf("weights per token: %.1f MiB\n", wbytes / 1048576.0);
    printf("measured memory read bandwidth: %.2f GB/s (%.2f before, %.2f after; probe %.0f MiB)\n",
           bw, bw0, bw1, probe / 1048576.0);
    if (e.vk) { /* the GPU's own read bandwidth, and decode's share of it */
        const hr_vk_device_info *gi = hr_vk_info(e.vk);
        size_t gprobe = gi->type == HR_VK_CPU ? (size_t)256 << 20 : (size_t)1 << 30;
        int gl = o->gpu_layers < hp->n_layer ? o->gpu_layers : hp->n_layer, greps = 20;
        uint64_t gbytes = 0; /* the GPU layers' weights */
        for (int il = 0; il < gl; il++)
            gbytes += hr_model_layer_bytes(e.m, il);
        double gbw = 0;
        if (gprobe > gi->max_storage_range)
            gprobe = (size_t)gi->max_storage_range;
        if (hr_vk_membw(e.vk, gprobe, greps, &gbw, err) != 0)
            printf("gpu memory read bandwidth: not measured (%s)\n", err);
        else {
            printf("gpu memory read bandwidth: %.1f GB/s (read kernel, %.0f MiB x %d)\n", gbw,
                   gprobe / 1048576.0, greps);
            for (int k = 0; k < n_isa; k++)
                printf("gpu decode%s%s: %.2f GB/s of all weights per token = %.1f%% of the GPU's "
                       "read bandwidth; the %d GPU layers' %.1f MiB: %.2f GB/s = %.1f%%\n",
                       n_isa > 1 ? " " : "", n_isa > 1 ? hr_isa_name(isas[k]) : "",
                       tg_isa[k] * (double)wbytes / 1e9,
                       100.0 * tg_isa[k] * (double)wbytes / 1e9 / gbw, gl, gbytes / 1048576.0,
                       tg_isa[k] * (double)gbytes / 1e9,
                       100.0 * tg_isa[k] * (double)gbytes / 1e9 / gbw);
        }
    }
    hr_bench_groups(e.ctx);
    unsigned long long backoffs = hr_pool_backoffs(hr_ctx_pool(e.ctx));
    if (backoffs > 0) /* the workers kept the kernels waiting: a busy machine */
        printf("threads: the pool ran on one thread for a second %llu time%s (its workers lost "
               "their cores to other programs)\n",
               backoffs, backoffs == 1 ? "" : "s");
    rc = 0;
done:
    free(logits);
    free(ids);
    free(dev);
    hr_engine_close(&e);
    return rc;
}
