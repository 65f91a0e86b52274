/* cmd_plan.c - `hearth plan`: plan a ring offline from saved device
 * profiles (`hearth profile --json -o FILE` on each machine), so a user can
 * ask "what if I add this laptop" without starting any agent. */
#include "cli/cli.h"

#include "common/file.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const hr_cli_opt hr_cmd_plan_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("ctx", 'c', COUNT, ctx, "N", "context size (default 4096, at most the model's)"),
    HR_CLI_OPT("k", 0, COUNT, k, "K", "force k rounds around the ring"),
    HR_CLI_OPT("json", 0, FLAG, json, NULL, "print the plan as JSON"),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(plan) {
    char err[HR_ERR_LEN] = "";
    if (!o->model)
        return hr_cli_fail("plan needs --model MODEL.gguf and one profile per device");
    if (o->n_args < 1)
        return hr_cli_fail("plan needs at least one profile (hearth profile -m MODEL --json -o "
                           "FILE on each machine); the first one is the head");
    if (o->n_args > HR_SCHED_MAX_DEV)
        return hr_cli_fail("at most %d devices", HR_SCHED_MAX_DEV);
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_prof_model pm;
    memset(&pm, 0, sizeof pm);
    hr_sched_device devs[HR_SCHED_MAX_DEV];
    int rc = 1;
    if (hr_gguf_open(&g, o->model, err)) {
        hr_cli_fail("cannot open model: %s", err);
        goto done;
    }
    if (hr_model_load(&m, g, err) || hr_prof_model_build(&pm, m, g, err)) {
        hr_cli_fail("%s: %s", o->model, err);
        goto done;
    }
    int n_ctx = hr_hparams_ctx(hr_model_hparams(m), o->ctx); /* as the head plans it */
    hr_sched_model sm;
    if (hr_prof_to_sched_model(&pm, n_ctx, &sm, err)) {
        hr_cli_fail("%s", err);
        goto done;
    }
    for (int i = 0; i < o->n_args; i++) {
        const char *path = o->args[i];
        size_t len = 0;
        char *json = hr_file_read(path, (size_t)64 << 20, &len);
        if (!json) {
            hr_cli_fail("cannot read profile %s", path);
            goto done;
        }
        hr_prof_doc doc;
        int prc = hr_prof_doc_parse(json, len, &doc, err);
        free(json);
        if (prc || !doc.has_device) {
            hr_cli_fail("%s: %s", path, prc ? err : "no device profile in this file");
            hr_prof_doc_clear(&doc);
            goto done;
        }
        if (doc.has_model && doc.model.file_bytes && pm.file_bytes &&
            (doc.model.file_bytes != pm.file_bytes || doc.model.n_layer != pm.n_layer)) {
            hr_cli_fail("%s was profiled with model '%s' (%llu bytes, %d layers), not %s (%llu "
                        "bytes, %d layers): profile each device with the model you plan",
                        path, doc.model.name, (unsigned long long)doc.model.file_bytes,
                        doc.model.n_layer, o->model, (unsigned long long)pm.file_bytes, pm.n_layer);
            hr_prof_doc_clear(&doc);
            goto done;
        }
        hr_prof_sched_params sp = hr_prof_sched_params_default();
        sp.is_head = i == 0;
        sp.n_ctx = n_ctx;
        /* what an agent with the default batch and one thread per core keeps out */
        sp.reserve_bytes =
            (int64_t)hr_prof_mem_reserve(m, n_ctx, 64, doc.device.topo.n_cores, sp.is_head);
        const hr_prof_link *link = doc.n_links > 0 ? &doc.links[0] : NULL;
        prc = hr_prof_to_sched_device(&doc.device, &pm, link, &sp, &devs[i], err);
        hr_prof_doc_clear(&doc);
        if (prc) {
            hr_cli_fail("%s: %s", path, err);
            goto done;
        }
        hr_prof_assume_link(&devs[i]); /* labelled "assumed" in the plan's table */
        if (strlen(devs[i].name) == 0 || o->n_args > 1) {
            /* name devices after their file when several share a hostname */
            char nm[HR_SCHED_NAME_LEN];
            const char *base = strrchr(path, '/');
            snprintf(nm, sizeof nm, "%s", base ? base + 1 : path);
            char *dot = strrchr(nm, '.');
            if (dot && strcmp(dot, ".json") == 0)
                *dot = 0;
            memcpy(devs[i].name, nm, sizeof nm);
        }
    }
    hr_sched_opts so = hr_sched_opts_default();
    if (o->k > 0)
        so.k_fixed = o->k;
    hr_sched_plan plan;
    int src = hr_sched_solve(&sm, devs, o->n_args, &so, &plan, err);
    if (src) {
        hr_cli_fail("no plan: %s", err);
        goto done;
    }
    if (o->json) {
        char *js = NULL;
        if (hr_sched_plan_json(&plan, &js, err)) {
            hr_cli_fail("%s", err);
            goto done;
        }
        printf("%s\n", js);
        free(js);
    } else {
        printf("model: %s (%d layers, %.1f MiB per layer, context %d)\n", o->model, sm.n_layer,
               sm.layer_bytes / 1048576.0, n_ctx);
        if (sm.expert_frac > 0)
            printf("experts: %.1f%% of each layer's bytes; a window that does not fit keeps what "
                   "every token reads and the experts that fit, and a token reads %.1f%% of the "
                   "experts left out (%d of %d per layer, even routing assumed)\n",
                   100.0 * sm.expert_frac, 100.0 * sm.expert_read, pm.n_expert_used, pm.n_expert);
        hr_sched_plan_print(&plan, stdout);
    }
    rc = 0;
done:
    hr_prof_model_clear(&pm);
    hr_model_free(m);
    hr_gguf_close(g);
    return rc;
}
