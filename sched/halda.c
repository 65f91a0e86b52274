/* halda.c - Halda on GLPK: one mixed-integer program per candidate k, built
 * from the per-k tables of sched-impl.h, plus the head-alone plan; the best
 * is re-evaluated with the closed-form cost model and returned as the plan. */
#include "sched/sched-impl.h"

#include "common/error.h"
#include "common/log.h"

#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG "sched"

/* The program under construction; triplets are 1-based as GLPK wants. */
typedef struct {
    glp_prob *P;
    int *ia, *ja;
    double *ar;
    int ne, cap;
} hr_lp;

/* Adds one row lb <= sum vals[j] * x[cols[j]] <= ub (type GLP_LO/UP/FX). */
static int lp_row(hr_lp *lp, int type, double lb, double ub, int n, const int *cols,
                  const double *vals) {
    if (lp->ne + n >= lp->cap)
        return HR_EINTERNAL; /* sized up front; cannot happen */
    int r = glp_add_rows(lp->P, 1);
    glp_set_row_bnds(lp->P, r, type, lb, ub);
    for (int j = 0; j < n; j++) {
        if (cols[j] <= 0 || vals[j] == 0.0)
            continue;
        lp->ne++;
        lp->ia[lp->ne] = r;
        lp->ja[lp->ne] = cols[j];
        lp->ar[lp->ne] = vals[j];
    }
    return 0;
}

static void col_int(glp_prob *P, int j, int kind, double lb, double ub) {
    glp_set_col_kind(P, j, kind);
    glp_set_col_bnds(P, j, lb == ub ? GLP_FX : GLP_DB, lb, ub);
}

/* Column indices per device (0 = no such column). */
typedef struct {
    int w, n, y, ld, s, z;
} hr_cols;

/* Appends the ring-time terms sum_{j != skip} c_j + sum_j h_j y_j. */
static int ring_terms(const hr_sched_ctx *c, const hr_cols *col, int skip, int *cols,
                      double *vals) {
    int m = 0;
    for (int j = 0; j < c->n; j++) {
        if (j != skip) {
            cols[m] = col[j].w;
            vals[m++] = c->d[j].t;
            if (col[j].n) {
                cols[m] = col[j].n;
                vals[m++] = c->d[j].g - c->d[j].t;
            }
        }
        cols[m] = col[j].y;
        vals[m++] = c->d[j].h;
    }
    return m;
}

/* Devices i and j (neither the head) are interchangeable in the cost model. */
static bool same_device(const hr_sched_ctx *c, const hr_sched_kctx *kc, int i, int j) {
    if (i == c->head || j == c->head)
        return false;
    return c->d[i].t == c->d[j].t && c->d[i].g == c->d[j].g && c->d[i].h == c->d[j].h &&
           c->d[i].mem_eff == c->d[j].mem_eff && c->d[i].disk == c->d[j].disk &&
           c->d[i].vram == c->d[j].vram && c->d[i].lru == c->d[j].lru &&
           kc->d[i].cap == kc->d[j].cap && kc->d[i].gcap == kc->d[j].gcap;
}

/* Multi-device program for one k. Returns 0 with w/ng/obj filled, 1 when no
 * multi-device plan exists for this k, or a negative code. */
static int solve_k(const hr_sched_ctx *c, const hr_sched_kctx *kc, const hr_sched_opts *o,
                   double cutoff, int *w, int *ng, double *obj, bool *proven, char *err) {
    const int n = c->n;
    hr_cols col[HR_SCHED_MAX_DEV];
    memset(col, 0, sizeof col);
    int nc = 0, cE = 0;
    bool any_stream = false;
    for (int i = 0; i < n; i++) {
        col[i].w = ++nc;
        if (kc->d[i].gcap > 0)
            col[i].n = ++nc;
        col[i].y = ++nc;
        if (kc->d[i].stream) {
            any_stream = true;
            col[i].ld = ++nc;
            if (c->d[i].lru)
                col[i].s = ++nc;
            if (c->overlap == HR_SCHED_OVERLAP_SUM)
                col[i].z = ++nc;
        }
    }
    if (any_stream && c->overlap == HR_SCHED_OVERLAP_MAX)
        cE = ++nc;

    int row_max = 2 * n + 4 * n + 2 * n + 2 * n +
                  4; /* sum, activity, gpu, stream, overlap, symmetry, cutoff */
    int per_row = 4 * n + 4;
    hr_lp lp = {0};
    lp.cap = row_max * per_row + 1;
    lp.ia = malloc(sizeof(int) * (size_t)lp.cap);
    lp.ja = malloc(sizeof(int) * (size_t)lp.cap);
    lp.ar = malloc(sizeof(double) * (size_t)lp.cap);
    int *cols = malloc(sizeof(int) * (size_t)per_row);
    double *vals = malloc(sizeof(double) * (size_t)per_row);
    int rc = 0;
    if (!lp.ia || !lp.ja || !lp.ar || !cols || !vals) {
        rc = hr_seterr(err, HR_ENOMEM, "scheduler: out of memory building the k = %d program",
                       kc->k);
        goto done;
    }
    lp.P = glp_create_prob();
    glp_set_obj_dir(lp.P, GLP_MIN);
    glp_add_cols(lp.P, nc);
    double kk = (double)kc->k;
    /* objective: k * (sum_j c_j + H + E) + t_head, in ms per token */
    glp_set_obj_coef(lp.P, 0, c->d[c->head].th);
    for (int i = 0; i < n; i++) {
        bool head = i == c->head;
        col_int(lp.P, col[i].w, GLP_IV, 0.0, kc->d[i].ub);
        glp_set_obj_coef(lp.P, col[i].w, kk * c->d[i].t);
        if (col[i].n) {
            int hi = kc->d[i].gcap < kc->W ? kc->d[i].gcap : kc->W;
            col_int(lp.P, col[i].n, GLP_IV, 0.0, hi);
            glp_set_obj_coef(lp.P, col[i].n, kk * (c->d[i].g - c->d[i].t));
        }
        double ylo = head ? 1.0 : 0.0, yhi = head || kc->d[i].ub > 0 ? 1.0 : 0.0;
        col_int(lp.P, col[i].y, GLP_BV, ylo, yhi);
        glp_set_obj_coef(lp.P, col[i].y, kk * c->d[i].h);
        if (col[i].ld)
            glp_set_col_bnds(lp.P, col[i].ld, GLP_LO, 0.0, 0.0);
        if (col[i].s)
            col_int(lp.P, col[i].s, GLP_BV, 0.0, 1.0);
        if (col[i].z) {
            glp_set_col_bnds(lp.P, col[i].z, GLP_LO, 0.0, 0.0);
            glp_set_obj_coef(lp.P, col[i].z, kk);
        }
    }
    if (cE) {
        glp_set_col_bnds(lp.P, cE, GLP_LO, 0.0, 0.0);
        glp_set_obj_coef(lp.P, cE, kk);
    }

    /* sum_m w_m = W */
    int m = 0;
    for (int i = 0; i < n; i++) {
        cols[m] = col[i].w;
        vals[m++] = 1.0;
    }
    rc = lp_row(&lp, GLP_FX, kc->W, kc->W, m, cols, vals);
    /* activity: y_m <= w_m <= ub_m * y_m; at least one device besides the head */
    m = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (i == c->head || kc->d[i].ub == 0)
            continue;
        int cc[2] = {col[i].w, col[i].y};
        double up[2] = {1.0, -(double)kc->d[i].ub}, lo[2] = {1.0, -1.0};
        rc = lp_row(&lp, GLP_UP, 0.0, 0.0, 2, cc, up);
        if (!rc)
            rc = lp_row(&lp, GLP_LO, 0.0, 0.0, 2, cc, lo);
        cols[m] = col[i].y;
        vals[m++] = 1.0;
    }
    if (m == 0) {
        rc = 1;
        goto done;
    }
    if (!rc)
        rc = lp_row(&lp, GLP_LO, 1.0, 0.0, m, cols, vals);
    for (int i = 0; i < n && !rc; i++) {
        int cwn[2] = {col[i].w, col[i].n};
        double one_m1[2] = {1.0, -1.0};
        /* accelerator: n_m <= w_m, and wc_m = w_m - n_m <= cap_m */
        if (col[i].n) {
            double m1_one[2] = {-1.0, 1.0};
            rc = lp_row(&lp, GLP_UP, 0.0, 0.0, 2, cwn, m1_one);
            if (!rc)
                rc = lp_row(&lp, GLP_UP, 0.0, kc->d[i].cap, 2, cwn, one_m1);
        }
        if (rc || !col[i].ld)
            continue;
        if (!c->d[i].lru) {
            /* pinned: load_m >= pin_a * wc_m - pin_c (ms per round) */
            int cc[3] = {col[i].ld, col[i].w, col[i].n};
            double vv[3] = {1.0, -kc->d[i].pin_a, kc->d[i].pin_a};
            rc = lp_row(&lp, GLP_LO, -kc->d[i].pin_c, 0.0, 3, cc, vv);
        } else {
            /* lru: wc_m <= fit_m + (cap_m - fit_m) * s_m;
             *      load_m >= lru_a * wc_m - big * (1 - s_m), big = lru_a * cap_m */
            double big = kc->d[i].lru_a * kc->d[i].cap;
            int c3[3] = {col[i].w, col[i].n, col[i].s};
            double v3[3] = {1.0, -1.0, -(double)(kc->d[i].cap - kc->d[i].fit)};
            rc = lp_row(&lp, GLP_UP, 0.0, kc->d[i].fit, 3, c3, v3);
            int c4[4] = {col[i].ld, col[i].w, col[i].n, col[i].s};
            double v4[4] = {1.0, -kc->d[i].lru_a, kc->d[i].lru_a, -big};
            if (!rc)
                rc = lp_row(&lp, GLP_LO, -big, 0.0, 4, c4, v4);
        }
        /* overlap: E (or z_m) >= load_m - rest_m, rest_m = S - c_m */
        if (!rc) {
            cols[0] = cE ? cE : col[i].z;
            vals[0] = 1.0;
            cols[1] = col[i].ld;
            vals[1] = -1.0;
            int mm = 2 + ring_terms(c, col, i, cols + 2, vals + 2);
            rc = lp_row(&lp, GLP_LO, 0.0, 0.0, mm, cols, vals);
        }
    }
    /* symmetry: of two interchangeable devices the earlier takes at least as many layers */
    for (int i = 0; i < n && !rc; i++) {
        for (int j = i + 1; j < n && !rc; j++) {
            if (!same_device(c, kc, i, j))
                continue;
            int cc[2] = {col[i].w, col[j].w};
            double vv[2] = {1.0, -1.0};
            rc = lp_row(&lp, GLP_LO, 0.0, 0.0, 2, cc, vv);
            break; /* chains i >= j >= next twin */
        }
    }
    /* cutoff: only plans better than the best one so far (ms per token) */
    if (!rc && isfinite(cutoff)) {
        m = 0;
        for (int j = 1; j <= nc; j++) {
            double v = glp_get_obj_coef(lp.P, j);
            if (v != 0.0) {
                cols[m] = j;
                vals[m++] = v;
            }
        }
        rc = lp_row(&lp, GLP_UP, 0.0, cutoff - c->d[c->head].th, m, cols, vals);
    }
    if (rc) {
        rc = hr_seterr(err, HR_EINTERNAL, "scheduler: program for k = %d overflowed", kc->k);
        goto done;
    }
    glp_load_matrix(lp.P, lp.ne, lp.ia, lp.ja, lp.ar);

    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.mip_gap = 0.0;
    if (o->time_limit_s > 0.0)
        parm.tm_lim = o->time_limit_s * 1e3 < INT_MAX ? (int)(o->time_limit_s * 1e3) : INT_MAX;
    int ret = glp_intopt(lp.P, &parm);
    int st = glp_mip_status(lp.P);
    if (ret == GLP_ENOPFS || (ret == 0 && st == GLP_NOFEAS)) {
        rc = 1;
        goto done;
    }
    bool ok = (ret == 0 && st == GLP_OPT) ||
              ((ret == GLP_ETMLIM || ret == GLP_EMIPGAP) && (st == GLP_FEAS || st == GLP_OPT));
    if (!ok && ret == GLP_ETMLIM) {
        HR_LOG_WARN(TAG, "k = %d: no solution within the %.1f s limit", kc->k, o->time_limit_s);
        *proven = false;
        rc = 1;
        goto done;
    }
    if (!ok) {
        rc = hr_seterr(err, HR_EINTERNAL,
                       "scheduler: GLPK glp_intopt failed for k = %d (return %d, status %d)", kc->k,
                       ret, st);
        goto done;
    }
    *proven = ret == 0 && st == GLP_OPT;
    for (int i = 0; i < n; i++) {
        w[i] = (int)lround(glp_mip_col_val(lp.P, col[i].w));
        ng[i] = col[i].n ? (int)lround(glp_mip_col_val(lp.P, col[i].n)) : 0;
    }
    *obj = glp_mip_obj_val(lp.P);
    rc = 0;
done:
    if (lp.P)
        glp_delete_prob(lp.P);
    free(lp.ia);
    free(lp.ja);
    free(lp.ar);
    free(cols);
    free(vals);
    return rc;
}

int hr_sched_solve(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                   const hr_sched_opts *opts, hr_sched_plan *out, char err[HR_ERR_LEN]) {
    double t0 = hr_sched_now_ms();
    hr_sched_opts o = opts ? *opts : hr_sched_opts_default();
    char msg[HR_ERR_LEN] = "";
    hr_sched_ctx *c = malloc(sizeof *c);
    int rc = 0;
    if (!c) {
        rc = hr_seterr(msg, HR_ENOMEM, "scheduler: out of memory");
        goto fail;
    }
    if (!out) {
        rc = hr_seterr(msg, HR_EINVAL, "scheduler: plan output is NULL");
        goto fail;
    }
    if ((rc = hr_sched_ctx_init(c, model, devs, n_dev, &o, msg)))
        goto fail;

    double best = INFINITY, k_lat[HR_SCHED_MAX_K];
    int best_j = -1, n_ilp = 0;
    bool all_proven = true;
    int best_w[HR_SCHED_MAX_DEV], best_ng[HR_SCHED_MAX_DEV];
    for (int j = 0; j < c->n_k; j++) {
        hr_sched_kctx kc;
        hr_sched_kctx_init(c, c->k_list[j], &kc);
        int w[HR_SCHED_MAX_DEV] = {0}, ng[HR_SCHED_MAX_DEV] = {0};
        double lat_k = INFINITY;
        int sum_ub = 0;
        for (int i = 0; i < c->n; i++)
            sum_ub += kc.d[i].ub;
        if (sum_ub < kc.W) {
            k_lat[j] = INFINITY;
            continue;
        }
        /* head alone: no hops, closed form over its accelerator share */
        double lat_head = INFINITY;
        w[c->head] = kc.W;
        for (int g = 0; g <= kc.d[c->head].gcap && g <= kc.W; g++) {
            int hng0[HR_SCHED_MAX_DEV] = {0};
            hng0[c->head] = g;
            double v = hr_sched_eval(c, &kc, w, hng0, NULL);
            if (v < lat_head) {
                lat_head = v;
                ng[c->head] = g;
            }
        }
        int hw[HR_SCHED_MAX_DEV] = {0}, hng[HR_SCHED_MAX_DEV] = {0};
        double obj = INFINITY;
        bool proven = true;
        double cutoff = fmin(best, lat_head) * (1.0 + 1e-9);
        int r = c->n >= 2 ? solve_k(c, &kc, &o, cutoff, hw, hng, &obj, &proven, msg) : 1;
        if (r < 0) {
            rc = r;
            goto fail;
        }
        /* Accelerator calibration (prima.cpp) would act here once a GPU backend
         * exists: if hng[] leaves VRAM unused on a device whose CPU layers are
         * slower, fix a lower bound on that n_m and solve this k again. */
        n_ilp += c->n >= 2;
        all_proven = all_proven && proven;
        double lat_ring = INFINITY;
        if (r == 0) {
            lat_ring = hr_sched_eval(c, &kc, hw, hng, NULL);
            if (!isfinite(lat_ring) || fabs(lat_ring - obj) > 1e-6 * fmax(1.0, fabs(lat_ring)))
                HR_LOG_WARN(TAG, "k = %d: program objective %.9g ms, cost model %.9g ms", kc.k, obj,
                            lat_ring);
        }
        if (lat_ring < lat_head) {
            lat_k = lat_ring;
            memcpy(w, hw, sizeof w);
            memcpy(ng, hng, sizeof ng);
        } else {
            lat_k = lat_head;
        }
        if (r == 1 && (best < lat_head || !proven))
            lat_k = NAN; /* pruned (no better than the best so far) or out of time */
        k_lat[j] = lat_k;
        HR_LOG_DEBUG(TAG, "k = %d: %.3f ms per token (head alone %.3f)", kc.k, lat_k, lat_head);
        if (lat_k < best * (1.0 - 1e-12)) {
            best = lat_k;
            best_j = j;
            memcpy(best_w, w, sizeof best_w);
            memcpy(best_ng, ng, sizeof best_ng);
        }
    }
    if (best_j < 0) {
        if (all_proven)
            rc = hr_sched_explain_infeasible(c, msg);
        else
            rc = hr_seterr(msg, HR_ETIMEDOUT,
                           "scheduler: no plan found within the %.1f s limit per program",
                           o.time_limit_s);
        goto fail;
    }
    hr_sched_kctx kc;
    hr_sched_kctx_init(c, c->k_list[best_j], &kc);
    hr_sched_eval(c, &kc, best_w, best_ng, out);
    out->optimal = all_proven;
    out->n_ilp = n_ilp;
    out->n_k = c->n_k;
    memcpy(out->k_list, c->k_list, sizeof out->k_list[0] * (size_t)c->n_k);
    memcpy(out->k_latency_ms, k_lat, sizeof k_lat[0] * (size_t)c->n_k);
    out->solve_ms = hr_sched_now_ms() - t0;
    hr_sched_explain(out);
    HR_LOG_INFO(TAG, "plan: %.3f ms per token, %s (%.1f ms to solve)", out->latency_ms,
                out->explanation, out->solve_ms);
    free(c);
    return 0;
fail:
    free(c);
    if (err)
        snprintf(err, HR_ERR_LEN, "%s", msg);
    return hr_sched_plan_fail(out, rc, msg);
}
