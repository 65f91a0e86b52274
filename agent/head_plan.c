/* head_plan.c - the head's plans (control thread, dev_mu held): the
 * scheduler's view of each device, picking k and the windows (forced k /
 * windows, the Halda scheduler over the devices' profiles, or an even
 * split), the ring layout, sending every worker its PLAN and keeping the
 * head's own part for the generating thread (hd->own, published by
 * head_state.c); readiness. The status snapshot is head_status.c's. */
#include "agent/head-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "mmap/stream.h"
#include "ring/msg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG "head"

/* ---- what the ring's shape asks of a plan ---- */

/* The host part of "tcp://HOST:PORT" into out. */
static void hr_head_ep_host(const char *ep, char *out, size_t cap) {
    const char *h = strncmp(ep, "tcp://", 6) == 0 ? ep + 6 : ep;
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : strlen(h);
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), h);
}

bool hr_head_ring_streams(const hr_head *hd, const int *ring, int n) {
    for (int r = 0; r < n; r++)
        if (hd->devs[ring[r]].overloaded)
            return true;
    return false;
}

int hr_head_ring_batches(const hr_head *hd, const int *ring, int n) {
    const hr_agent *a = hd->a;
    if (a->p.ring_batches > 0)
        return a->p.ring_batches;
    if (hr_head_ring_streams(hd, ring, n))
        return 1; /* a device streams its weights: once per step for every request */
    char mine[HR_EP_LEN], theirs[HR_EP_LEN];
    hr_head_ep_host(a->data_ep, mine, sizeof mine);
    if (strcmp(mine, "0.0.0.0") == 0 || strcmp(mine, "*") == 0 || strcmp(mine, "[::]") == 0)
        return n; /* every interface: the address says nothing of the machine */
    for (int r = 0; r < n; r++) {
        hr_head_ep_host(hd->devs[ring[r]].data_ep, theirs, sizeof theirs);
        if (strcmp(mine, theirs) != 0)
            return n; /* devices of their own: one micro-batch each */
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int m = cores > 0 ? (int)(cores / (a->p.n_threads > 0 ? a->p.n_threads : 1)) : n;
    return m < 1 ? 1 : m > n ? n : m;
}

int hr_head_kv_ctx(const hr_agent *a) {
    int n_seq = a->head && a->head->plan_seq > 1 ? a->head->plan_seq : 1;
    int ctx = a->head && a->head->plan_ctx > 0 ? a->head->plan_ctx
                                               : hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx);
    return ctx * n_seq;
}

/* The scheduler's view of d from its profile (JSON text, may be NULL). */
void hr_head_dev_sched(hr_head *hd, hr_dev *d, const char *profile, bool is_head) {
    const hr_agent *a = hd->a;
    d->has_sched = false;
    d->gpu[0] = 0;
    if (!hd->have_pm)
        return;
    if (profile) {
        hr_prof_device *pd = calloc(1, sizeof *pd);
        char err[HR_ERR_LEN];
        int prc = pd ? hr_prof_device_parse(profile, strlen(profile), pd, err) : HR_ENOMEM;
        if (prc)
            HR_LOG_WARN(TAG, "device '%s': unusable profile (%s); no predictions for it", d->name,
                        prc == HR_ENOMEM ? "out of memory" : err);
        const hr_prof_gpu *gp = prc == 0 ? hr_prof_device_gpu(pd) : NULL;
        if (gp) {
            snprintf(d->gpu, sizeof d->gpu, "%s", gp->name);
            snprintf(d->gpu_kind, sizeof d->gpu_kind, "%s", gp->kind);
            d->gpu_vram = gp->vram_bytes;
            d->gpu_gbs = 0;
            for (int r = 0; r < gp->n_rates; r++)
                d->gpu_gbs = fmax(d->gpu_gbs, gp->rates[r].matvec_gbs);
        }
        if (prc == 0) {
            hr_prof_sched_params sp = hr_prof_sched_params_default();
            sp.is_head = is_head;
            sp.n_ctx = hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx);
            /* decode is predicted at a chat turn's depth, not half the window */
            sp.n_past = sp.n_ctx / 2 < HR_PLAN_N_PAST ? sp.n_ctx / 2 : HR_PLAN_N_PAST;
            /* the reserve its admission check keeps out: its JOIN's thread count */
            int threads = d->has_join ? d->join.threads : 0;
            sp.reserve_bytes = (int64_t)hr_prof_mem_reserve(
                a->m, sp.n_ctx, a->p.n_batch, threads > 0 ? threads : pd->topo.n_cores, is_head);
            if (hr_prof_to_sched_device(pd, &hd->pm, NULL, &sp, &d->sd, err) == 0) {
                snprintf(d->sd.name, sizeof d->sd.name, "%s", d->name);
                hr_prof_assume_link(&d->sd); /* no link is measured yet: labelled assumed */
                d->has_sched = true;
            } else {
                HR_LOG_WARN(TAG, "device '%s': profile not usable for planning: %s", d->name, err);
            }
        }
        free(pd);
    }
}

/* ---- planning ---- */

/* --windows: "a,b,c" (one size per device, every round) or rounds of
 * their own separated by '/' ("3,2,2/2,3,2"). Fills win[r * n + i] for the
 * rows given and returns how many (0 or less: not n sizes in every row). */
static int hr_parse_windows(const char *s, int n, int *win) {
    int rows = 0, col = 0;
    while (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 100000 || col >= n || rows >= HR_AGENT_MAX_K)
            return -1;
        win[rows * n + col++] = (int)v;
        s = end;
        while (*s == ' ')
            s++;
        if (*s == ',') {
            s++;
        } else if (*s == '/' || *s == 0) {
            if (col != n)
                return -1;
            rows++;
            col = 0;
            s += *s == '/';
        } else {
            return -1;
        }
        while (*s == ' ')
            s++;
    }
    return col == 0 ? rows : -1;
}

/* The layers split evenly over n devices in k rounds (--k, else 1), with
 * why in the plan's source. */
static int hr_head_even_split(hr_head *hd, int n, int *k_out, int *win, const char *why,
                              char err[HR_ERR_LEN]) {
    const hr_agent *a = hd->a;
    int L = hr_model_hparams(a->m)->n_layer;
    int k = a->p.k > 0 ? a->p.k : 1;
    if (L % k != 0)
        return hr_seterr(err, HR_EINVAL, "k = %d does not divide %d layers", k, L);
    if (k > HR_AGENT_MAX_K)
        return hr_seterr(err, HR_EINVAL, "k = %d: at most %d rounds", k, HR_AGENT_MAX_K);
    int W = L / k;
    for (int r = 0; r < k; r++)
        for (int i = 0; i < n; i++)
            win[r * n + i] = W / n + (i < W % n);
    *k_out = k;
    snprintf(hd->plan_src, sizeof hd->plan_src, "even split%s (%.150s)",
             a->p.k > 0 ? " at --k" : "", why);
    HR_LOG_INFO(TAG, "plan: %s", hd->plan_src);
    return 0;
}

/* The KV slots of forced windows win (k rounds) over cand[0..n): the size
 * the scheduler would give the same windows (hr_solve_slot_pick over the
 * cost model's figures for every size it tries), so that forced windows
 * and the scheduler's own hold the same KV and run alike; without a
 * profile from every device, or when no size fits by the cost model, the
 * slots keep sharing one context (hd->plan_ctx as hr_head_assign set it). */
static void hr_head_forced_slots(hr_head *hd, const int *cand, int n, int k, const int *win,
                                 int ctx0) {
    if (!hd->have_pm || !hr_solve_slot_shorter(hd->a->p.n_ctx <= 0, hd->plan_seq, ctx0))
        return;
    hr_sched_device sd[HR_AGENT_MAX_DEV];
    hr_head_own_experts(hd);
    for (int i = 0; i < n; i++) {
        if (!hd->devs[cand[i]].has_sched)
            return;
        hr_head_dev_rates(&hd->devs[cand[i]], &sd[i]);
        sd[i].is_head = i == 0;
    }
    hr_head_link_inputs(hd, cand, n, sd);
    hr_sched_plan *sp = malloc(sizeof *sp);
    if (!sp)
        return;
    double lat[16];
    bool streams[16];
    int n_try = 0;
    for (int ctx = ctx0; n_try < 16; ctx /= 2) {
        hr_sched_model sm;
        char e2[HR_ERR_LEN];
        bool ok = hr_prof_to_sched_model(&hd->pm, ctx * hd->plan_seq, &sm, e2) == 0 &&
                  hr_sched_evaluate_rounds(&sm, sd, n, NULL, k, win, NULL, sp, e2) == 0;
        lat[n_try] = ok ? sp->latency_ms : -1;
        streams[n_try++] = ok && hr_solve_plan_streams(sp);
        if (!hr_solve_slot_shorter(true, hd->plan_seq, ctx))
            break;
    }
    free(sp);
    int pick = hr_solve_slot_pick(lat, streams, n_try);
    if (pick >= 0)
        hd->plan_ctx = ctx0 >> pick;
}

/* Picks k and the windows win[r * n + i] for devices cand[0..n) (cand[0] =
 * head) and says how in
 * hd->plan_src: --windows as given; else the scheduler over the devices'
 * profiles (k fixed by --k when given); a device without a profile leaves
 * the scheduler nothing to plan with, so the layers are split evenly (and
 * the status says so). The scheduler's programs run on the solver thread:
 * HR_PLAN_SOLVING, and hr_head_assign_solved takes their answer. When the scheduler finds no plan
 * there is no plan: the reason goes to err (and the status), unless --k forced the rounds, which
 * then split evenly as forced. */
static int hr_head_assign(hr_head *hd, const int *cand, int n, int *k_out, int *win, int *ng,
                          char err[HR_ERR_LEN]) {
    const hr_agent *a = hd->a;
    int L = hr_model_hparams(a->m)->n_layer;
    hd->plan_chosen = false;
    for (int i = 0; i < n; i++)
        ng[i] = 0;                  /* GPU layers only where the scheduler puts them */
    hd->plan_seq = a->p.n_parallel; /* KV slots: --parallel, fewer below if they do not fit */
    int ctx0 = hr_hparams_ctx(hr_model_hparams(a->m), a->p.n_ctx);
    bool ctx_auto = a->p.n_ctx <= 0;
    /* positions per slot: --ctx; without it, and without profiles to
     * judge longer ones by, the slots share one context's worth of KV (at
     * least HR_AGENT_SLOT_CTX_MIN each); the scheduler below, and forced
     * windows with profiles (hr_head_forced_slots), try longer ones */
    hd->plan_ctx = ctx0;
    if (ctx_auto && hd->plan_seq > 1) {
        int lo = ctx0 < HR_AGENT_SLOT_CTX_MIN ? ctx0 : HR_AGENT_SLOT_CTX_MIN;
        hd->plan_ctx = ctx0 / hd->plan_seq > lo ? ctx0 / hd->plan_seq : lo;
    }
    if (a->p.windows) {
        int rows = hr_parse_windows(a->p.windows, n, win);
        if (rows < 1)
            return hr_seterr(err, HR_EINVAL,
                             "--windows '%.60s': every round must list %d sizes (at most %d "
                             "rounds, separated by '/')",
                             a->p.windows, n, HR_AGENT_MAX_K);
        int sum = 0;
        for (int i = 0; i < rows * n; i++)
            sum += win[i];
        int k = rows;
        if (rows == 1) { /* one size per device, in every round */
            k = a->p.k > 0 ? a->p.k : (sum > 0 ? L / sum : 0);
            if (sum <= 0 || sum * k != L || k > HR_AGENT_MAX_K)
                return hr_seterr(err, HR_EINVAL,
                                 "windows sum to %d; k x sum must be %d layers (k at most %d)", sum,
                                 L, HR_AGENT_MAX_K);
            for (int r = 1; r < k; r++)
                memcpy(win + r * n, win, sizeof *win * (size_t)n);
        } else if ((a->p.k > 0 && a->p.k != rows) || sum != L) {
            return hr_seterr(err, HR_EINVAL,
                             "--windows lists %d rounds summing to %d layers; they must cover "
                             "the %d layers%s",
                             rows, sum, L, a->p.k > 0 ? " in --k rounds" : "");
        }
        *k_out = k;
        hr_head_forced_slots(hd, cand, n, k, win, ctx0);
        snprintf(hd->plan_src, sizeof hd->plan_src, "forced by --windows %s", a->p.windows);
        return 0;
    }
    const char *no_prof = NULL;
    for (int i = 0; i < n && !no_prof; i++)
        if (!hd->devs[cand[i]].has_sched)
            no_prof = hd->devs[cand[i]].name;
    char why[HR_ERR_LEN] = "";
    if (!hd->have_pm) {
        snprintf(why, sizeof why, "no model profile");
    } else if (no_prof) {
        snprintf(why, sizeof why, "no profile from '%.64s'", no_prof);
    } else {
        hr_sched_device sd[HR_AGENT_MAX_DEV];
        hr_head_own_experts(hd);
        for (int i = 0; i < n; i++) {
            hr_head_dev_rates(&hd->devs[cand[i]], &sd[i]); /* profile x measured scale */
            sd[i].is_head = i == 0;
        }
        hr_head_link_inputs(hd, cand, n, sd); /* measured links where there are */
        /* the programs run on the solver thread; hr_head_assign_solved
         * takes their answer */
        hr_solve_job *j = &hd->solve_job;
        j->gen = ++hd->solve_gen;
        j->n = n;
        memcpy(j->sd, sd, (size_t)n * sizeof *sd);
        j->so = hr_sched_opts_default();
        j->so.k_fixed = a->p.k;
        j->so.k_max = HR_AGENT_MAX_K; /* the rounds a device runs */
        j->so.use_gpu = !hr_hparams_cpu_only(hr_model_hparams(a->m), true); /* experts, gemma3 */
        j->n_parallel = a->p.n_parallel;
        j->parallel_auto = hd->parallel_auto;
        j->ctx0 = ctx0;
        j->ctx_auto = ctx_auto;
        hr_head_solve_submit(hd);
        return HR_PLAN_SOLVING;
    }
    return hr_head_even_split(hd, n, k_out, win, why, err);
}

/* The solver's answer j for hr_head_assign's candidates (n of them): the
 * scheduler's k and windows; when it found no plan, the reason in err,
 * unless --k forced the rounds, which then split evenly as forced. */
static int hr_head_assign_solved(hr_head *hd, const hr_solve_job *j, int n, int *k_out, int *win,
                                 int *ng, char err[HR_ERR_LEN]) {
    const hr_agent *a = hd->a;
    hd->plan_seq = j->plan_seq;
    hd->plan_ctx = j->plan_ctx;
    hd->plan_chosen = j->rc == 0;
    if (j->rc == 0) {
        if (hd->plan_seq < a->p.n_parallel || hd->plan_ctx < j->ctx0)
            HR_LOG_WARN(TAG,
                        "plan: %d requests at once with %d positions each (the KV of %d with %d "
                        "each does not fit, or is slower where it takes the room of weights)",
                        hd->plan_seq, hd->plan_ctx, a->p.n_parallel, j->ctx0);
        hd->sched = j->plan;
        HR_LOG_INFO(TAG, "plan: %.3f ms per token, %s (%.1f ms to solve the chosen variant)",
                    hd->sched.latency_ms, hd->sched.explanation, hd->sched.solve_ms);
        *k_out = hd->sched.k;
        for (int i = 0; i < n; i++) {
            for (int r = 0; r < hd->sched.k && r < HR_AGENT_MAX_K; r++)
                win[r * n + i] = hd->sched.dev[i].win[r];
            ng[i] = hd->sched.dev[i].n_gpu;
        }
        snprintf(hd->plan_src, sizeof hd->plan_src, "scheduler%s: %.170s",
                 a->p.k > 0 ? " (k forced by --k)" : "", hd->sched.explanation);
        return 0;
    }
    snprintf(err, HR_ERR_LEN, "%s", j->err);
    if (a->p.k <= 0) {
        snprintf(hd->plan_src, sizeof hd->plan_src, "none: %.180s", err);
        return j->rc;
    }
    char why[HR_ERR_LEN];
    snprintf(why, sizeof why, "%.200s", err);
    return hr_head_even_split(hd, n, k_out, win, why, err);
}

int hr_head_n_workers(const hr_head *hd) {
    int n = 0;
    for (int i = 1; i < hd->n_devs; i++)
        n += !hd->devs[i].lost;
    return n;
}

/* Predicted figures (hd->sched) when every device has a profile. */
static void hr_head_predict(hr_head *hd, const int *cand, int n, int k, const int *win,
                            const int *ng) {
    const hr_agent *a = hd->a;
    bool all_sched = hd->have_pm;
    hr_sched_device sd[HR_AGENT_MAX_DEV];
    hr_head_own_experts(hd);
    for (int i = 0; i < n; i++) {
        all_sched &= hd->devs[cand[i]].has_sched;
        hr_head_dev_rates(&hd->devs[cand[i]], &sd[i]);
        sd[i].is_head = i == 0;
    }
    hr_head_link_inputs(hd, cand, n, sd);
    hr_sched_model sm;
    char e2[HR_ERR_LEN];
    /* the scheduler's own account of its choice survives the evaluation
     * (the same windows, with the links measured since) */
    int fast_k = hd->plan_chosen ? hd->sched.fastest_k : 0;
    int fast_n = hd->sched.fastest_active;
    double fast_ms = hd->sched.fastest_ms, noise = hd->sched.noise_margin;
    if (all_sched && hr_prof_to_sched_model(&hd->pm, hr_head_kv_ctx(a), &sm, e2) == 0 &&
        hr_sched_evaluate_rounds(&sm, sd, n, NULL, k, win, ng, &hd->sched, e2) == 0) {
        hd->have_sched = true;
        if (fast_k > 0) {
            hd->sched.fastest_k = fast_k;
            hd->sched.fastest_active = fast_n;
            hd->sched.fastest_ms = fast_ms;
            hd->sched.noise_margin = fmax(hd->sched.noise_margin, noise);
        }
    } else if (all_sched)
        HR_LOG_WARN(TAG, "no predicted times for plan: %s", e2);
    else
        HR_LOG_INFO(TAG, "no predicted times: not every device sent a profile");
}

static bool a_windows(const hr_head *hd) { return hd->a->p.windows != NULL; }

/* Windows and ring positions for the candidates; ring[] gets the device
 * indexes in ring order (the head first, devices without layers left out). */
static void hr_head_layout(hr_head *hd, const int *cand, int n, int k, const int *win,
                           const int *ng, int *ring, int *n_active) {
    *n_active = 0;
    /* the model's figures for the streaming scheme (hr_prof_stream_read) */
    hr_sched_model sm;
    char e2[HR_ERR_LEN];
    bool have_sm =
        hd->have_pm && hr_prof_to_sched_model(&hd->pm, hr_head_kv_ctx(hd->a), &sm, e2) == 0;
    for (int i = 0; i < hd->n_devs; i++) {
        hd->devs[i].ring_pos = -1;
        hd->devs[i].layers = 0;
        memset(hd->devs[i].win, 0, sizeof hd->devs[i].win);
    }
    bool plan_gpu = false;
    for (int i = 0; i < n; i++) {
        hr_dev *d = &hd->devs[cand[i]];
        int wmax = 0;
        for (int r = 0; r < k; r++) {
            d->win[r] = win[r * n + i];
            d->layers += d->win[r];
            wmax = d->win[r] > wmax ? d->win[r] : wmax;
        }
        d->overloaded = hd->have_sched && hd->sched.dev[i].overloaded;
        d->n_gpu = ng[i] > wmax ? wmax : ng[i];
        plan_gpu = plan_gpu || d->n_gpu > 0;
        d->pred_read_token = hd->have_sched ? hd->sched.dev[i].read_bytes : -1;
        d->pred_cpu_token = hd->have_sched ? hd->sched.dev[i].cpu_ms : -1;
        if (have_sm && d->has_sched && d->layers > 0 &&
            (d->sd.os == HR_SCHED_OS_LINUX || d->sd.os == HR_SCHED_OS_ANDROID))
        /* what its runtime streams: the same hr_sched_stream_split_rounds, on the budget the
         * device is planned with (the PLAN's mem_budget) */
        {
            hr_sched_model dm = sm; /* its measured routing, where it has one */
            if (d->ex_miss > 0 && dm.expert_read * d->ex_miss <= 1.0)
                dm.expert_read *= d->ex_miss;
            d->pred_read_token = hr_prof_stream_read(&dm, d->win, k, i == 0, d->sd.mem_bytes);
        }
        d->left_out[0] = 0;
        if (i > 0 && d->layers == 0)
            snprintf(d->left_out, sizeof d->left_out, "%s",
                     hd->have_sched && hd->sched.dev[i].left_out[0] ? hd->sched.dev[i].left_out
                     : a_windows(hd)                                ? "forced by --windows"
                                                                    : "no layer left for it");
        /* per window it computes, as its rounds are measured */
        int n_win = hr_head_windows_computed(d->win, k);
        d->pred_ms_round =
            hd->have_sched
                ? (hd->sched.dev[i].compute_ms + hd->sched.dev[i].disk_exposed_ms) / n_win
                : 0;
        d->pred_compute_ms_round = hd->have_sched ? hd->sched.dev[i].compute_ms / n_win : 0;
        d->ready = false;
        if (i == 0 || d->layers > 0) {
            d->ring_pos = *n_active;
            ring[(*n_active)++] = cand[i];
        }
    }
    /* first layers: ring order within a round, round after round */
    for (int r = 0, at = 0; r < k; r++)
        for (int j = 0; j < *n_active; j++) {
            hr_dev *d = &hd->devs[ring[j]];
            d->first[r] = at;
            at += d->win[r];
        }
    hd->plan_gpu = plan_gpu;
}

/* The head's own part did not fit (rc, err): its memory now is less than
 * its profile said (the output head and the mapping took their share since).
 * The planner takes what the head admits now and plans again on the next
 * turn (HR_PLAN_STALE), at most HR_HEAD_OWN_RETRIES times in a row. */
#define HR_HEAD_OWN_RETRIES 3
static int hr_head_own_short(hr_head *hd, hr_dev *me, const hr_local_plan *np, int rc,
                             char err[HR_ERR_LEN]) {
    double have = rc == HR_ENOMEM ? hr_node_admit_bytes(hd->a, np) : -1;
    if (have < 0 || !me->has_sched || have >= me->sd.mem_bytes ||
        hd->own_short >= HR_HEAD_OWN_RETRIES)
        return rc;
    HR_LOG_WARN(TAG, "%s; planning again with the %.1f MiB it admits now (its profile said %.1f)",
                err, have / 1048576.0, me->sd.mem_bytes / 1048576.0);
    me->sd.mem_bytes = have;
    hd->own_short++;
    hd->replan = true;
    return HR_PLAN_STALE;
}

/* Keeps the head's own part (checked, applied later by the generating
 * thread) and sends every other device its PLAN
 * (devices left out of the ring get an empty window). */
static int hr_head_send_plans(hr_head *hd, int k, const int *ring, int n_active,
                              char err[HR_ERR_LEN]) {
    const hr_agent *a = hd->a;
    const hr_hparams *hp = hr_model_hparams(a->m);
    int rc;
    int n_ctx = hd->plan_ctx > 0 ? hd->plan_ctx : hr_hparams_ctx(hp, a->p.n_ctx);
    /* what every device's PLAN shares; ring members add their window */
    hr_msg_plan base = {.plan_id = hd->plan_id,
                        .k = k,
                        .n_layer = hp->n_layer,
                        .n_active = n_active,
                        .index = -1,
                        .n_ctx = n_ctx,
                        .n_batch = a->p.n_batch,
                        .dtype = a->p.wire_dtype,
                        .n_seq = hd->plan_seq};
    for (int r = 0; r < k && r < HR_MSG_MAX_ROUNDS; r++)
        for (int j = 0; j < n_active && j < HR_MSG_MAX_RING; j++)
            base.win[r][j] = hd->devs[ring[j]].win[r];
    hr_msg_plan pm = base;
    for (int r = 0; r < n_active; r++) /* ring members vouched for to each other */
        if (hd->devs[ring[r]].pubkey[0])
            snprintf(pm.keys[pm.n_keys++], HR_RING_KEY_LEN, "%s", hd->devs[ring[r]].pubkey);
    for (int r = 0; r < n_active; r++) {
        hr_dev *d = &hd->devs[ring[r]];
        const char *next = n_active > 1 ? hd->devs[ring[(r + 1) % n_active]].data_ep : "";
        const char *next_key = n_active > 1 ? hd->devs[ring[(r + 1) % n_active]].pubkey : "";
        pm.index = r;
        pm.prefetch = a->p.prefetch;
        pm.release = a->p.release >= 0 ? a->p.release == 1 : d->overloaded;
        pm.mem_budget = d->has_sched ? d->sd.mem_bytes : 0; /* what it was planned with */
        pm.n_gpu = d->n_gpu;
        snprintf(pm.next, sizeof pm.next, "%s", next);
        snprintf(pm.next_key, sizeof pm.next_key, "%s", next_key);
        if (r == 0) {
            hr_local_plan np = {.plan_id = hd->plan_id,
                                .k = k,
                                .n_active = n_active,
                                .index = r,
                                .n_ctx = n_ctx,
                                .n_batch = a->p.n_batch,
                                .n_seq = hd->plan_seq,
                                .n_mb = hr_head_ring_batches(hd, ring, n_active),
                                .ring_streams = hr_head_ring_streams(hd, ring, n_active),
                                .dtype = a->p.wire_dtype,
                                .prefetch = pm.prefetch,
                                .release = pm.release,
                                .mem_budget = pm.mem_budget,
                                .n_gpu = d->n_gpu};
            for (int q = 0; q < k && q < HR_AGENT_MAX_K; q++) {
                np.first[q] = d->first[q];
                np.count[q] = d->win[q];
            }
            snprintf(np.next_ep, sizeof np.next_ep, "%s", next);
            snprintf(np.next_key, sizeof np.next_key, "%s", next_key);
            if ((rc = hr_node_plan_check(a, &np, err)))
                return hr_head_own_short(hd, d, &np, rc, err);
            hd->own_short = 0;
            hr_node_windows(a, &np);
            hd->own = np;
            for (int q = 0; np.prefetch && q < k && q < HR_AGENT_MAX_K; q++)
                if (np.win_len[q]) { /* warm the first window */
                    hr_stream_prefetch(a->g, np.win_off[q], np.win_len[q]);
                    break;
                }
            d->ready = true;
            d->ready_plan = hd->plan_id;
            continue;
        }
        hr_msg m;
        if ((rc = hr_msg_plan_encode(&m, &pm, err)))
            return rc;
        hr_head_send(hd, d->id, d->id_len, &m);
    }
    hd->planned = true;
    /* devices left out of the ring get an empty window: the shared part only */
    for (int i = 1; i < hd->n_devs; i++) {
        hr_dev *d = &hd->devs[i];
        if (d->lost || d->ring_pos >= 0)
            continue;
        hr_msg m;
        if ((rc = hr_msg_plan_encode(&m, &base, err)))
            return rc;
        hr_head_send(hd, d->id, d->id_len, &m);
    }
    return 0;
}

/* The plan of k rounds and windows win[r * n + i] (ng on GPUs) over
 * cand[0..n): predictions, ring positions, and every device's PLAN. */
static int hr_head_replan_finish(hr_head *hd, const int *cand, int n, int k, const int *win,
                                 const int *ng, char err[HR_ERR_LEN]) {
    int rc;
    if (k < 1 || k > HR_AGENT_MAX_K)
        return hr_seterr(err, HR_EINVAL, "plan of %d rounds: at most %d", k, HR_AGENT_MAX_K);
    hr_head_predict(hd, cand, n, k, win, ng);
    hd->plan_id++;
    hd->plan_k = k;
    int n_active = 0, ring[HR_AGENT_MAX_DEV];
    hr_head_layout(hd, cand, n, k, win, ng, ring, &n_active);
    if ((rc = hr_head_send_plans(hd, k, ring, n_active, err)))
        return rc;
    HR_LOG_INFO(TAG, "plan %u: %d devices in the ring, k %d, %s", hd->plan_id, n_active, k,
                hd->have_sched && !hd->sched.uniform ? "rounds of their own windows"
                                                     : "the same windows every round");
    return 0;
}

/* The devices not lost, in table order (the head first). */
static int hr_head_candidates(const hr_head *hd, int *cand) {
    int n = 0;
    for (int i = 0; i < hd->n_devs; i++)
        if (!hd->devs[i].lost)
            cand[n++] = i;
    return n;
}

/* Makes and sends a plan over the devices not lost (control thread,
 * dev_mu held, after hr_head_claim), or hands its programs to the solver
 * thread (HR_PLAN_SOLVING). */
int hr_head_replan(hr_head *hd, char err[HR_ERR_LEN]) {
    int cand[HR_AGENT_MAX_DEV], win[HR_AGENT_MAX_K * HR_AGENT_MAX_DEV], ng[HR_AGENT_MAX_DEV], k = 1;
    int n = hr_head_candidates(hd, cand);
    hd->ready = false;
    hd->have_sched = false;
    int rc = hr_head_assign(hd, cand, n, &k, win, ng, err);
    if (rc == HR_PLAN_SOLVING) {
        memcpy(hd->solve_cand, cand, (size_t)n * sizeof *cand);
        hd->solve_n = n;
        hd->solving = true;
        return rc;
    }
    return rc ? rc : hr_head_replan_finish(hd, cand, n, k, win, ng, err);
}

int hr_head_replan_solved(hr_head *hd, uint64_t gen, char err[HR_ERR_LEN]) {
    const hr_solve_job *j =
        hd->solving && gen == hd->solve_gen ? hr_head_solve_result(hd, gen) : NULL;
    if (!j)
        return HR_PLAN_STALE; /* not the job out (a stray event) */
    hd->solving = false;
    int cand[HR_AGENT_MAX_DEV], win[HR_AGENT_MAX_K * HR_AGENT_MAX_DEV], ng[HR_AGENT_MAX_DEV], k = 1;
    int n = hr_head_candidates(hd, cand);
    if (n != hd->solve_n || memcmp(cand, hd->solve_cand, (size_t)n * sizeof *cand) != 0) {
        HR_LOG_INFO(TAG, "plan job %llu: the devices changed while it was solved; planning again",
                    (unsigned long long)gen);
        hd->replan = true;
        return HR_PLAN_STALE;
    }
    for (int i = 0; i < n; i++)
        ng[i] = 0;
    int rc = hr_head_assign_solved(hd, j, n, &k, win, ng, err);
    return rc ? rc : hr_head_replan_finish(hd, cand, n, k, win, ng, err);
}

void hr_head_update_ready(hr_head *hd) {
    bool ok = hd->plan_id > 0 && !hd->replan;
    for (int i = 0; i < hd->n_devs; i++) {
        const hr_dev *d = &hd->devs[i];
        if (d->lost) { /* a lost ring member: the plan in use cannot serve */
            ok &= d->ring_pos < 0;
            continue;
        }
        if (!d->ready || d->ready_plan != hd->plan_id)
            ok = false;
    }
    if (ok && !hd->ready) {
        HR_LOG_INFO(TAG, "ring ready: plan %u, %d workers", hd->plan_id, hr_head_n_workers(hd));
        hd->lost_di = 0;
    }
    hd->ready = ok;
}
