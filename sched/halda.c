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

/* Adds one row lb <= sum vals[j] * x[cols[j]] <= ub (type GLP_LO/UP/FX).
 * Zero coefficients and column 0 are skipped. */
static int lp_row(hr_lp *lp, int type, double lb, double ub, int n, const int *cols,
                  const double *vals) {
    if (lp->ne + n >= lp->cap) {
        int cap = (lp->ne + n) * 2 + 64;
        int *ia = realloc(lp->ia, sizeof(int) * (size_t)cap);
        if (ia)
            lp->ia = ia;
        int *ja = realloc(lp->ja, sizeof(int) * (size_t)cap);
        if (ja)
            lp->ja = ja;
        double *ar = realloc(lp->ar, sizeof(double) * (size_t)cap);
        if (ar)
            lp->ar = ar;
        if (!ia || !ja || !ar)
            return HR_ENOMEM;
        lp->cap = cap;
    }
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

/* Column indices per device (0 = no such column). x0 + v - 1 is the binary
 * "this device computes v CPU layers per round", v = 1..cap. */
typedef struct {
    int x0, cap, n, y;
    int z;          /* its quota's wait a round (continuous), 0: none */
    int r0, r1, rx; /* its entries of the ring row: [r0, r1), the first rx of them its own window */
} hr_cols;

/* Appends the terms of w_i = n_i + sum_v v x_iv, each times f. */
static int w_terms(const hr_cols *cl, double f, int *cols, double *vals) {
    int m = 0;
    for (int v = 1; v <= cl->cap; v++) {
        cols[m] = cl->x0 + v - 1;
        vals[m++] = f * v;
    }
    if (cl->n) {
        cols[m] = cl->n;
        vals[m++] = f;
    }
    return m;
}

/* Devices i and j (neither the head) are interchangeable in the cost model. */
static bool same_device(const hr_sched_ctx *c, const hr_sched_kctx *kc, int i, int j) {
    if (i == c->head || j == c->head)
        return false;
    return c->d[i].t == c->d[j].t && c->d[i].g == c->d[j].g && c->d[i].h == c->d[j].h &&
           c->d[i].f == c->d[j].f && c->d[i].tr == c->d[j].tr && c->d[i].qs == c->d[j].qs &&
           c->d[i].qk == c->d[j].qk && c->d[i].qw == c->d[j].qw && c->d[i].rc == c->d[j].rc &&
           c->d[i].mem_eff == c->d[j].mem_eff && c->d[i].disk == c->d[j].disk &&
           c->d[i].vram == c->d[j].vram && c->d[i].lru == c->d[j].lru &&
           kc->d[i].cap == kc->d[j].cap && kc->d[i].gcap == kc->d[j].gcap;
}

/* Multi-device program for one k: one binary per (device, CPU layers per
 * round), so every per-device cost of the closed-form model (sched-impl.h
 * hr_sched_disk_at, piecewise in wc) enters exactly. Minimises k * P with
 *   P >= sum_i (max(t_i wc_i, stall_i(wc_i)) + g_i n_i + h_i y_i),  P >= load_i(wc_i),
 *   k P + t_head >= k f_i y_i (the links' throughput),
 *   k P + t_head >= qs_i (k (cpu_i(wc_i) + rc_i read_i(wc_i)) + q0_i) + qg_i [wc_i > 0]
 *   (a CPU quota over the token, its reads' CPU included, and the head's
 *   burst beyond what the quota's share saves)
 * (SUM: t_i wc_i + stall_i(wc_i) in place of the max).
 * Returns 0 with w/ng/obj filled, 1 when no multi-device plan exists for
 * this k, or a negative code. */
static int solve_k(const hr_sched_ctx *c, const hr_sched_kctx *kc, const hr_sched_opts *o,
                   double cutoff, int *w, int *ng, double *obj, bool *proven, char *err) {
    const int n = c->n;
    hr_cols col[HR_SCHED_MAX_DEV];
    memset(col, 0, sizeof col);
    int nc = 0;
    for (int i = 0; i < n; i++) {
        col[i].cap = kc->d[i].cap < kc->W ? kc->d[i].cap : kc->W;
        if (col[i].cap > 0) {
            col[i].x0 = nc + 1;
            nc += col[i].cap;
        }
        if (kc->d[i].gcap > 0)
            col[i].n = ++nc;
        col[i].y = ++nc;
        if (c->d[i].qw > 0.0 && col[i].cap > 0)
            col[i].z = ++nc;
    }
    int cP = ++nc;
    hr_lp lp = {0};
    int *cols = malloc(sizeof(int) * (size_t)(nc + 4));
    double *vals = malloc(sizeof(double) * (size_t)(nc + 4));
    int *rcols = malloc(sizeof(int) * (size_t)(nc + 4)); /* the ring row, built per device */
    double *rvals = malloc(sizeof(double) * (size_t)(nc + 4));
    int rm = 0;
    hr_sched_disk *dk = malloc(sizeof *dk * (size_t)(kc->W + 1));
    int rc = 0;
    if (!cols || !vals || !rcols || !rvals || !dk) {
        rc = hr_seterr(err, HR_ENOMEM, "scheduler: out of memory building the k = %d program",
                       kc->k);
        goto done;
    }
    lp.P = glp_create_prob();
    glp_set_obj_dir(lp.P, GLP_MIN);
    glp_add_cols(lp.P, nc);
    double kk = (double)kc->k;
    /* objective: k * P + t_head, in ms per token */
    glp_set_obj_coef(lp.P, 0, c->d[c->head].th);
    glp_set_col_bnds(lp.P, cP, GLP_LO, 0.0, 0.0);
    glp_set_obj_coef(lp.P, cP, kk);
    for (int i = 0; i < n && !rc; i++) {
        bool head = i == c->head;
        for (int v = 1; v <= col[i].cap; v++)
            col_int(lp.P, col[i].x0 + v - 1, GLP_BV, 0.0, 1.0);
        if (col[i].n) {
            int hi = kc->d[i].gcap < kc->W ? kc->d[i].gcap : kc->W;
            col_int(lp.P, col[i].n, GLP_IV, 0.0, hi);
        }
        double ylo = head ? 1.0 : 0.0, yhi = head || kc->d[i].ub > 0 ? 1.0 : 0.0;
        col_int(lp.P, col[i].y, GLP_BV, ylo, yhi);
        if (col[i].z)
            glp_set_col_bnds(lp.P, col[i].z, GLP_LO, 0.0, 0.0);
        /* at most one CPU layer count */
        int m = 0;
        for (int v = 1; v <= col[i].cap; v++) {
            cols[m] = col[i].x0 + v - 1;
            vals[m++] = 1.0;
        }
        if (m)
            rc = lp_row(&lp, GLP_UP, 0.0, 1.0, m, cols, vals);
        /* each wc's disk terms, and its window in the ring row (a constant per
         * (device, wc); the accelerator layers enter through n_i) */
        bool any_load = false;
        if (i == 0) {
            rcols[rm] = cP;
            rvals[rm++] = 1.0;
        }
        col[i].r0 = rm;
        for (int v = 1; v <= col[i].cap; v++) {
            hr_sched_disk_at(c, kc, i, v, &dk[v]);
            any_load = any_load || dk[v].load > 0.0;
            rcols[rm] = col[i].x0 + v - 1;
            /* >= 2 in the ring: its window */
            rvals[rm++] = -hr_sched_window_ms(c, i, v, 0, &dk[v], true);
        }
        if (col[i].n) {
            rcols[rm] = col[i].n;
            rvals[rm++] = -c->d[i].g;
        }
        col[i].rx = rm - col[i].r0;
        rcols[rm] = col[i].y;
        rvals[rm++] = -c->d[i].h;
        col[i].r1 = rm;
        if (col[i].z) { /* and its quota's wait */
            rcols[rm] = col[i].z;
            rvals[rm++] = -1.0;
        }
        /* a disk reads at most one round's bytes per round: P >= load_i */
        if (!rc && any_load) {
            m = 0;
            cols[m] = cP;
            vals[m++] = 1.0;
            for (int v = 1; v <= col[i].cap; v++) {
                cols[m] = col[i].x0 + v - 1;
                vals[m++] = -dk[v].load;
            }
            rc = lp_row(&lp, GLP_LO, 0.0, 0.0, m, cols, vals);
        }
        /* a CPU quota over the token: k P + t_head >= qs_i (k (cpu_i + reads'
         * CPU) + q0_i), with this device's dk[] */
        if (!rc && c->d[i].qs > 1.0 && (col[i].cap > 0 || c->d[i].q0 > 0.0)) {
            m = 0;
            cols[m] = cP;
            vals[m++] = 1.0;
            for (int v = 1; v <= col[i].cap; v++) {
                cols[m] = col[i].x0 + v - 1;
                vals[m++] = -c->d[i].qs * (hr_sched_cpu_raw_ms(c, i, v, true) +
                                           c->d[i].rc * dk[v].read_round) -
                            c->d[i].qg / kk; /* the head's burst past its share, once a token */
            }
            double lo = (c->d[i].qs * c->d[i].q0 - c->d[c->head].th) / kk;
            rc = lp_row(&lp, GLP_LO, lo, 0.0, m, cols, vals);
        }
    }
    /* sum_m w_m = W */
    int m = 0;
    for (int i = 0; i < n; i++)
        m += w_terms(&col[i], 1.0, cols + m, vals + m);
    if (!rc)
        rc = lp_row(&lp, GLP_FX, kc->W, kc->W, m, cols, vals);
    /* activity: y_m <= w_m <= ub_m * y_m; at least one device besides the head */
    int ny = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (i == c->head || kc->d[i].ub == 0)
            continue;
        m = w_terms(&col[i], 1.0, cols, vals);
        cols[m] = col[i].y;
        vals[m] = -(double)kc->d[i].ub;
        rc = lp_row(&lp, GLP_UP, 0.0, 0.0, m + 1, cols, vals);
        vals[m] = -1.0;
        if (!rc)
            rc = lp_row(&lp, GLP_LO, 0.0, 0.0, m + 1, cols, vals);
        ny++;
    }
    if (ny == 0) {
        rc = rc ? rc : 1;
        goto done;
    }
    m = 0;
    for (int i = 0; i < n; i++)
        if (i != c->head && kc->d[i].ub > 0) {
            cols[m] = col[i].y;
            vals[m++] = 1.0;
        }
    if (!rc)
        rc = lp_row(&lp, GLP_LO, 1.0, 0.0, m, cols, vals);
    /* the links' throughput: k P + t_head >= k f_i y_i (cost.c) */
    for (int i = 0; i < n && !rc; i++) {
        if (kc->d[i].ub == 0 && i != c->head)
            continue;
        if (c->d[i].f <= c->d[i].h || kk * c->d[i].f <= c->d[c->head].th)
            continue; /* implied by the ring row (P >= h_i y_i), or never binds */
        cols[0] = cP;
        vals[0] = 1.0;
        cols[1] = col[i].y;
        vals[1] = -c->d[i].f;
        rc = lp_row(&lp, GLP_LO, -c->d[c->head].th / kk, 0.0, 2, cols, vals);
    }
    /* ring: P >= sum_i window_i + sum_i h_i y_i + sum_i z_i (the row built above) */
    if (!rc)
        rc = lp_row(&lp, GLP_LO, 0.0, 0.0, rm, rcols, rvals);
    /* a quota's wait where it computes, less as the gap since its last round
     * (the others' windows and every hop) nears the period (cost.c):
     * z_i >= qw_i sum_v x_iv - qw_i / qp_i * gap_i, z_i >= 0 */
    for (int i = 0; i < n && !rc; i++) {
        if (!col[i].z)
            continue;
        m = 0;
        cols[m] = col[i].z;
        vals[m++] = 1.0;
        for (int v = 1; v <= col[i].cap; v++) {
            cols[m] = col[i].x0 + v - 1;
            vals[m++] = -c->d[i].qw;
        }
        double per = c->d[i].qp > 0.0 ? c->d[i].qw / c->d[i].qp : 0.0;
        for (int j = 0; j < n && per > 0.0; j++)
            for (int e = col[j].r0 + (j == i ? col[j].rx : 0); e < col[j].r1; e++) {
                cols[m] = rcols[e];
                vals[m++] = -per * rvals[e];
            }
        rc = lp_row(&lp, GLP_LO, 0.0, 0.0, m, cols, vals);
    }
    /* symmetry: of two interchangeable devices the earlier takes at least as many layers */
    for (int i = 0; i < n && !rc; i++) {
        for (int j = i + 1; j < n && !rc; j++) {
            if (!same_device(c, kc, i, j))
                continue;
            m = w_terms(&col[i], 1.0, cols, vals);
            m += w_terms(&col[j], -1.0, cols + m, vals + m);
            rc = lp_row(&lp, GLP_LO, 0.0, 0.0, m, cols, vals);
            break; /* chains i >= j >= next twin */
        }
    }
    /* cutoff: only plans better than the best one so far (ms per token) */
    if (!rc && isfinite(cutoff)) {
        cols[0] = cP;
        vals[0] = kk;
        rc = lp_row(&lp, GLP_UP, 0.0, cutoff - c->d[c->head].th, 1, cols, vals);
    }
    if (rc) {
        rc = rc == HR_ENOMEM
                 ? hr_seterr(err, HR_ENOMEM, "scheduler: out of memory building the k = %d program",
                             kc->k)
                 : hr_seterr(err, HR_EINTERNAL, "scheduler: program for k = %d failed to build",
                             kc->k);
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
        int wc = 0;
        for (int v = 1; v <= col[i].cap; v++)
            if (glp_mip_col_val(lp.P, col[i].x0 + v - 1) > 0.5)
                wc = v;
        ng[i] = col[i].n ? (int)lround(glp_mip_col_val(lp.P, col[i].n)) : 0;
        w[i] = wc + ng[i];
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
    free(rcols);
    free(rvals);
    free(dk);
    return rc;
}

/* ---- per-round windows for k not dividing L: a local search ---- */

/* Round r of win (stride n) gets R layers split by share[] (largest
 * remainder), at most cap[i] each. Returns false when they do not fit. */
static bool alloc_round(int R, const double *share, const int *cap, int n, int *row) {
    double tot = 0.0, rem[HR_SCHED_MAX_DEV];
    for (int i = 0; i < n; i++)
        tot += share[i];
    int left = R;
    for (int i = 0; i < n; i++) {
        double q = tot > 0.0 ? R * share[i] / tot : 0.0;
        row[i] = (int)q < cap[i] ? (int)q : cap[i];
        rem[i] = row[i] < cap[i] ? q - row[i] : -1.0;
        left -= row[i];
    }
    while (left > 0) { /* the largest remainder among the shares, then any room */
        int b = -1;
        for (int i = 0; i < n; i++)
            if (row[i] < cap[i] && (b < 0 || (share[i] > 0.0) > (share[b] > 0.0) ||
                                    ((share[i] > 0.0) == (share[b] > 0.0) && rem[i] > rem[b])))
                b = i;
        if (b < 0)
            return false;
        row[b]++;
        rem[b] = -1.0;
        left--;
    }
    return true;
}

/* Moves one layer at a time (between two devices of a round, or between
 * two rounds of a device) while the latency drops; win[k * n] in place. */
static double climb(const hr_sched_ctx *c, const hr_sched_kctx *kc, int *win, const int *ng,
                    double lat, double t_end) {
    const int k = kc->k, n = c->n;
    bool better = true;
    while (better && hr_sched_now_ms() < t_end) {
        better = false;
        for (int a = 0; a < k * n; a++) {
            if (win[a] == 0)
                continue;
            int r = a / n, i = a % n;
            for (int m = 0; m < n + k; m++) {
                int b = m < n ? r * n + m : (m - n) * n + i; /* same round, or same device */
                if (b == a)
                    continue;
                win[a]--;
                win[b]++;
                double v = hr_sched_eval_rounds(c, kc, win, ng, NULL);
                if (v < lat * (1.0 - 1e-12)) {
                    lat = v;
                    better = true;
                    if (win[a] == 0)
                        break;
                } else {
                    win[a]++;
                    win[b]--;
                }
            }
        }
    }
    return lat;
}

/* The best per-round windows found for k rounds (k need not divide L):
 * seeds from share[] (rounds differing by at most one layer; rounds of
 * ceil(L / k) with a shorter last one), each improved by climb(). win[k *
 * n] gets the best; returns its latency or INFINITY. */
static double uneven_search(const hr_sched_ctx *c, const hr_sched_kctx *kc, const double *share,
                            const int *ng, double time_limit_s, int *win) {
    const int k = kc->k, n = c->n, L = c->L;
    int cap[HR_SCHED_MAX_DEV], cap1[HR_SCHED_MAX_DEV], *t = malloc(sizeof(int) * (size_t)(k * n));
    if (!t)
        return INFINITY;
    for (int i = 0; i < n; i++) {
        cap[i] = kc->d[i].ub;      /* what a uniform plan of k rounds lets it hold */
        cap1[i] = kc->d[i].ub + 1; /* a round one layer over it may still fit */
    }
    double best = INFINITY,
           t_end = hr_sched_now_ms() + (time_limit_s > 0 ? time_limit_s * 1e3 : 1e300);
    int up = (L + k - 1) / k;
    for (int seed = 0; seed < 2; seed++) {
        bool ok = true;
        for (int r = 0; r < k && ok; r++) {
            int R = seed == 0 ? L / k + (r < L % k) : r + 1 < k ? up : L - (k - 1) * up;
            ok = R >= 0 && (alloc_round(R, share, cap, n, t + r * n) ||
                            alloc_round(R, share, cap1, n, t + r * n));
        }
        double lat = ok ? hr_sched_eval_rounds(c, kc, t, ng, NULL) : INFINITY;
        if (!isfinite(lat))
            continue;
        lat = climb(c, kc, t, ng, lat, t_end);
        if (lat < best) {
            best = lat;
            memcpy(win, t, sizeof(int) * (size_t)(k * n));
        }
    }
    free(t);
    return best;
}

/* A candidate of hr_sched_solve: the head alone or the program's ring at
 * k_list[j], or per-round windows; win[k * n]. */
typedef struct {
    int j, n_active;
    bool uniform;
    double lat;
    int *win;
    int ng[HR_SCHED_MAX_DEV];
    bool active[HR_SCHED_MAX_DEV];
} hr_sched_cand;

/* Appends a candidate (uniform: w[n] in every round; else win[k * n]);
 * false when out of memory. */
static bool cand_add(hr_sched_cand *cs, int *nc, const hr_sched_ctx *c, int j, int k, bool uniform,
                     double lat, const int *w, const int *ng) {
    hr_sched_cand *x = &cs[*nc];
    int n = c->n;
    if (!(x->win = malloc(sizeof(int) * (size_t)(k * n))))
        return false;
    *x = (hr_sched_cand){.j = j, .uniform = uniform, .lat = lat, .win = x->win};
    for (int r = 0; r < k; r++)
        memcpy(x->win + r * n, uniform ? w : w + r * n, sizeof(int) * (size_t)n);
    memcpy(x->ng, ng, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < k; r++)
            x->active[i] = x->active[i] || x->win[r * n + i] > 0;
        x->active[i] = x->active[i] || i == c->head;
        x->n_active += x->active[i];
    }
    (*nc)++;
    return true;
}

/* The margin inside which a simpler plan is taken over a faster one: half
 * the largest spread of the devices active in either, at most
 * HR_SCHED_NOISE_MAX (a or b NULL: every device). */
static double cand_margin(const hr_sched_ctx *c, const hr_sched_cand *a, const hr_sched_cand *b) {
    double s = 0.0;
    for (int i = 0; i < c->n; i++)
        if (!a || !b || a->active[i] || b->active[i])
            s = fmax(s, c->d[i].spread);
    return fmin(HR_SCHED_NOISE_MAX, 0.5 * s);
}

/* The simplest candidate within the noise of the fastest (fewest active
 * devices, then the earliest in k_list); *fast gets the fastest. */
static int cand_pick(const hr_sched_ctx *c, const hr_sched_cand *cs, int nc, int *fast) {
    int f = 0;
    for (int i = 1; i < nc; i++)
        if (cs[i].lat < cs[f].lat * (1.0 - 1e-12))
            f = i;
    *fast = f;
    int pick = f;
    for (int i = 0; i < nc; i++) {
        double m = cand_margin(c, &cs[i], &cs[f]);
        if (!(cs[i].lat <= cs[f].lat * (1.0 + m + 1e-12)))
            continue;
        if (cs[i].n_active < cs[pick].n_active ||
            (cs[i].n_active == cs[pick].n_active && cs[i].j < cs[pick].j))
            pick = i;
    }
    if (cs[pick].lat <= cs[f].lat * (1.0 + 1e-12))
        *fast = pick; /* a tie (a CPU quota's floor, say): the simpler is as fast */
    return pick;
}

void hr_sched_thread_done(void) { glp_free_env(); }

int hr_sched_solve(const hr_sched_model *model, const hr_sched_device *devs, int n_dev,
                   const hr_sched_opts *opts, hr_sched_plan *out, char err[HR_ERR_LEN]) {
    double t0 = hr_sched_now_ms();
    hr_sched_opts o = opts ? *opts : hr_sched_opts_default();
    char msg[HR_ERR_LEN] = "";
    hr_sched_ctx *c = malloc(sizeof *c);
    int *win = malloc(sizeof(int) * HR_SCHED_MAX_ROUNDS * HR_SCHED_MAX_DEV);
    hr_sched_cand *cs = calloc(2 * HR_SCHED_MAX_K, sizeof *cs);
    int rc = 0, nc = 0;
    if (!c || !win || !cs) {
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
    double m_all = cand_margin(c, NULL, NULL); /* the widest margin any pair can have */
    int n_ilp = 0;
    bool all_proven = true;
    int best_ng[HR_SCHED_MAX_DEV] = {0};
    double share[HR_SCHED_MAX_DEV]; /* the best uniform plan's windows, seeds per-round ones */
    for (int i = 0; i < c->n; i++)
        share[i] = c->d[i].mem_eff > 0.0 ? c->d[i].mem_eff : 0.0;
    for (int j = 0; j < c->n_k; j++) {
        hr_sched_kctx kc;
        hr_sched_kctx_init(c, c->k_list[j], &kc);
        if (c->L % kc.k != 0) {
            /* per-round windows (the divisors came first: share[] holds the
             * best uniform plan, when there is one) */
            double lat_k = uneven_search(c, &kc, share, best_ng, o.time_limit_s, win);
            k_lat[j] = lat_k;
            HR_LOG_DEBUG(TAG, "k = %d (per-round windows): %.3f ms per token", kc.k, lat_k);
            if (isfinite(lat_k) && !cand_add(cs, &nc, c, j, kc.k, false, lat_k, win, best_ng)) {
                rc = hr_seterr(msg, HR_ENOMEM, "scheduler: out of memory");
                goto fail;
            }
            best = fmin(best, lat_k);
            continue;
        }
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
        /* a ring is only taken below the head alone (a simpler plan), and
         * within the widest margin of the best so far */
        double cutoff = fmin(best * (1.0 + m_all), lat_head) * (1.0 + 1e-9);
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
        bool ok = true;
        if (isfinite(lat_head))
            ok = cand_add(cs, &nc, c, j, kc.k, true, lat_head, w, ng);
        if (ok && lat_ring < lat_head)
            ok = cand_add(cs, &nc, c, j, kc.k, true, lat_ring, hw, hng);
        if (!ok) {
            rc = hr_seterr(msg, HR_ENOMEM, "scheduler: out of memory");
            goto fail;
        }
        if (lat_ring < lat_head) {
            lat_k = lat_ring;
            memcpy(w, hw, sizeof w);
            memcpy(ng, hng, sizeof ng);
        } else {
            lat_k = lat_head;
        }
        if (r == 1 && (best * (1.0 + m_all) < lat_head || !proven))
            lat_k = NAN; /* pruned (no better than the best so far) or out of time */
        k_lat[j] = lat_k;
        HR_LOG_DEBUG(TAG, "k = %d: %.3f ms per token (head alone %.3f)", kc.k, lat_k, lat_head);
        if (lat_k < best * (1.0 - 1e-12)) {
            best = lat_k;
            memcpy(best_ng, ng, sizeof best_ng);
            for (int i = 0; i < c->n; i++)
                share[i] = w[i];
        }
    }
    if (nc == 0) {
        if (all_proven)
            rc = hr_sched_explain_infeasible(c, msg);
        else
            rc = hr_seterr(msg, HR_ETIMEDOUT,
                           "scheduler: no plan found within the %.1f s limit per program",
                           o.time_limit_s);
        goto fail;
    }
    int fast, pick = cand_pick(c, cs, nc, &fast);
    const hr_sched_cand *x = &cs[pick];
    hr_sched_kctx kc;
    hr_sched_kctx_init(c, c->k_list[x->j], &kc);
    hr_sched_eval_rounds(c, &kc, x->win, x->ng, out);
    out->optimal = all_proven && x->uniform && pick == fast;
    out->n_ilp = n_ilp;
    out->n_k = c->n_k;
    memcpy(out->k_list, c->k_list, sizeof out->k_list[0] * (size_t)c->n_k);
    memcpy(out->k_latency_ms, k_lat, sizeof k_lat[0] * (size_t)c->n_k);
    out->noise_margin = cand_margin(c, x, &cs[fast]);
    if (pick != fast) {
        out->fastest_k = c->k_list[cs[fast].j];
        out->fastest_active = cs[fast].n_active;
        out->fastest_ms = cs[fast].lat;
    }
    out->solve_ms = hr_sched_now_ms() - t0;
    hr_sched_explain(out);
    /* debug: a caller may solve several variants (KV slot sizes) and says
     * which plan it took */
    HR_LOG_DEBUG(TAG, "plan: %.3f ms per token, %s (%.1f ms to solve)", out->latency_ms,
                 out->explanation, out->solve_ms);
fail:
    for (int i = 0; i < nc; i++)
        free(cs[i].win);
    free(cs);
    free(c);
    free(win);
    if (rc) {
        if (err)
            snprintf(err, HR_ERR_LEN, "%s", msg);
        return hr_sched_plan_fail(out, rc, msg);
    }
    return 0;
}
