/* head_solve.c - the scheduler's integer programs off the control thread.
 * The control thread fills hd->solve_job with a plan's inputs (the devices
 * at their current rates, links, options) and hands it over
 * (hr_head_solve_submit); the solver thread runs every KV-slot count and
 * size the plan may take (hr_solve_run, the programs on GLPK) and posts a
 * PLAN event, tagged with the job's number, on the head's event socket;
 * the control thread then takes the result (hr_head_solve_result) and
 * finishes the plan (head_plan.c). Meanwhile it keeps serving heartbeats,
 * joins and clients. One job at a time: hd->solving (control thread)
 * says one is out. */
#include "agent/head-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <stdio.h>

#define TAG "head"

/* The scheduler's plan for j's devices with the KV of j->plan_seq slots
 * of j->plan_ctx positions each. */
static int hr_solve_slots(const hr_prof_model *pm, hr_solve_job *j, char err[HR_ERR_LEN]) {
    hr_sched_model sm;
    int kv_ctx = j->plan_ctx * (j->plan_seq > 1 ? j->plan_seq : 1);
    int rc = hr_prof_to_sched_model(pm, kv_ctx, &sm, err);
    return rc ? rc : hr_sched_solve(&sm, j->sd, j->n, &j->so, &j->plan, err);
}

bool hr_solve_plan_streams(const hr_sched_plan *p) {
    for (int i = 0; i < p->n_dev; i++)
        if (p->dev[i].active && p->dev[i].overloaded)
            return true;
    return false;
}

int hr_solve_slot_pick(const double *lat, const bool *streams, int n_try) {
    double best = -1;
    int last = -1;
    for (int t = 0; t < n_try; t++)
        if (lat[t] > 0) {
            last = t;
            if (best < 0 || lat[t] < best)
                best = lat[t];
        }
    for (int t = 0; t < n_try; t++)
        if (lat[t] > 0 && !streams[t] && lat[t] <= (1.0 + HR_SOLVE_SLOT_TOL) * best)
            return t;
    return last;
}

/* When the KV of that many requests at once does not fit beside the
 * weights: --ctx not given, shorter slots first (as many requests at
 * once, each with fewer positions, down to HR_AGENT_SLOT_CTX_MIN: a
 * household's requests are short chats); --parallel not given, then fewer
 * slots. One request keeps the whole context. Every slot size that fits is
 * tried, down to the least, and hr_solve_slot_pick chooses. Reads only j and pm (immutable). */
static void hr_solve_run(const hr_prof_model *pm, hr_solve_job *j) {
    int rc = HR_EINFEASIBLE;
    j->err[0] = 0;
    for (j->plan_seq = j->n_parallel;; j->plan_seq /= 2) {
        int n_try = 0; /* slot sizes tried: ctx0 >> t */
        double lat[16];
        bool streams[16];
        for (j->plan_ctx = j->ctx0; n_try < 16; j->plan_ctx /= 2) {
            rc = hr_solve_slots(pm, j, j->err);
            streams[n_try] = rc == 0 && hr_solve_plan_streams(&j->plan);
            lat[n_try++] = rc == 0 ? j->plan.latency_ms : -1;
            if (!hr_solve_slot_shorter(j->ctx_auto, j->plan_seq, j->plan_ctx))
                break;
        }
        int pick = hr_solve_slot_pick(lat, streams, n_try);
        if (pick >= 0 && (j->ctx0 >> pick) != j->plan_ctx) { /* solve the pick again */
            j->plan_ctx = j->ctx0 >> pick;
            rc = hr_solve_slots(pm, j, j->err);
        } else if (pick >= 0) {
            rc = 0;
        }
        if (rc == 0 || j->plan_seq <= 1 || !j->parallel_auto)
            break;
    }
    j->rc = rc;
}

static void *hr_solver_main(void *arg) {
    hr_head *hd = arg;
    hr_lock(&hd->solve_mu, HR_RANK_SOLVE);
    for (;;) {
        while (!hd->solve_stop && !hd->solve_pending)
            pthread_cond_wait(&hd->solve_cv, &hd->solve_mu);
        if (hd->solve_stop)
            break;
        hd->solve_pending = false;
        hr_unlock(&hd->solve_mu, HR_RANK_SOLVE);
        double t0 = hr_now_s();
        double c0 = hr_clock_s(CLOCK_THREAD_CPUTIME_ID);
        hr_solve_run(&hd->pm, &hd->solve_job); /* the job is the solver's until done */
        hr_head_cpu_aside(hd->a, c0);
        uint64_t gen = hd->solve_job.gen;
        HR_LOG_DEBUG(TAG, "plan job %llu solved in %.1f ms off the control thread",
                     (unsigned long long)gen, (hr_now_s() - t0) * 1000.0);
        hr_lock(&hd->solve_mu, HR_RANK_SOLVE);
        hd->solve_done = gen;
        hr_unlock(&hd->solve_mu, HR_RANK_SOLVE);
        hr_head_post_simple(hd->a, HR_RING_PLAN, gen); /* wakes the control loop */
        hr_lock(&hd->solve_mu, HR_RANK_SOLVE);
    }
    hr_unlock(&hd->solve_mu, HR_RANK_SOLVE);
    hr_sched_thread_done(); /* GLPK's environment of this thread */
    return NULL;
}

int hr_head_solve_start(hr_head *hd, char err[HR_ERR_LEN]) {
    if (hd->solver_started)
        return 0;
    hd->solve_stop = false;
    if (pthread_create(&hd->solver, NULL, hr_solver_main, hd) != 0)
        return hr_seterr(err, HR_ENOMEM, "cannot start the planner's solver thread");
    hd->solver_started = true;
    return 0;
}

void hr_head_solve_stop(hr_head *hd) {
    if (!hd->solver_started)
        return;
    hr_lock(&hd->solve_mu, HR_RANK_SOLVE);
    hd->solve_stop = true;
    pthread_cond_signal(&hd->solve_cv);
    hr_unlock(&hd->solve_mu, HR_RANK_SOLVE);
    pthread_join(hd->solver, NULL);
    hd->solver_started = false;
}

void hr_head_solve_submit(hr_head *hd) {
    hr_lock(&hd->solve_mu, HR_RANK_SOLVE);
    hd->solve_pending = true;
    pthread_cond_signal(&hd->solve_cv);
    hr_unlock(&hd->solve_mu, HR_RANK_SOLVE);
}

hr_solve_job *hr_head_solve_result(hr_head *hd, uint64_t gen) {
    hr_lock(&hd->solve_mu, HR_RANK_SOLVE);
    bool done = hd->solve_done == gen && hd->solve_job.gen == gen;
    hr_unlock(&hd->solve_mu, HR_RANK_SOLVE);
    return done ? &hd->solve_job : NULL;
}
