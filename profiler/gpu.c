/* gpu.c - the Vulkan part of the device profile: the devices the loader
 * sees with their memory heaps, and on the chosen one the rates of hearth's
 * own matmul kernels per weight type (n_tok 1 and 32), host <-> device copy
 * bandwidth and the cost of one submission; plus the predicted time of a
 * window of GPU layers from those rates. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/quant.h"
#include "kernels/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const hr_prof_gpu *hr_prof_device_gpu(const hr_prof_device *d) {
    if (d->vk_chosen < 0 || d->vk_chosen >= d->n_vk || d->vk[d->vk_chosen].n_rates == 0)
        return NULL;
    return &d->vk[d->vk_chosen];
}

/* Best of reps timings of one recorded batch of kernels, us. */
typedef int (*hr_gpu_rec_fn)(hr_vk *vk, void *ud);

static double hr_gpu_time_us(hr_vk *vk, hr_gpu_rec_fn rec, void *ud, int reps, char *err) {
    double best = -1;
    for (int r = 0; r < reps; r++) {
        double t0 = hr_now_s();
        if (hr_vk_begin(vk, err) || rec(vk, ud) || hr_vk_submit(vk, err))
            return -1;
        double us = (hr_now_s() - t0) * 1e6;
        if (best < 0 || us < best)
            best = us;
    }
    return best;
}

static int hr_gpu_rec_empty(hr_vk *vk, void *ud) {
    (void)vk;
    (void)ud;
    return 0;
}

typedef struct {
    hr_vk_set *set;
    int type, act;
    uint32_t n_in, n_out, row_bytes, n_tok, x, a, y;
} hr_gpu_mm_job;

static int hr_gpu_rec_mm(hr_vk *vk, void *ud) {
    hr_gpu_mm_job *j = ud;
    uint32_t a = j->x;
    if (j->act != HR_TYPE_F32) {
        if (hr_vk_quantize(vk, j->set, j->act, j->n_in, j->n_tok, j->x, j->a))
            return HR_EINVAL;
        a = j->a;
    }
    return hr_vk_matmul(vk, j->set, j->type, j->n_in, j->n_out, j->row_bytes, 0, a, j->y, j->n_tok,
                        j->n_out);
}

/* One weight type: a matrix of about target bytes (rows of row_len), one
 * row timed alone for the per-call cost (less submit_us, the cost of a
 * submission, which a window of layers pays once). */
static int hr_gpu_rate(hr_vk *vk, hr_prof_gpu_rate *r, int type, int64_t row_len, size_t target,
                       int reps, double submit_us, char *err) {
    const hr_type_traits *tt = hr_type_get(type);
    size_t rb = hr_type_row_bytes(type, row_len);
    if (!tt || !tt->supported || !hr_vk_type_supported(type) || rb == 0)
        return HR_EUNSUPPORTED;
    uint32_t n_out = (uint32_t)(target / rb < 1 ? 1 : target / rb), T = 32;
    size_t wbytes = rb * n_out;
    uint32_t n_in = (uint32_t)row_len;
    size_t act = hr_vk_act_words(tt->vec_dot_type, n_in, (int)T);
    uint32_t x = 0, a = n_in * T, y = a + (uint32_t)act;
    size_t xwords = (size_t)y + (size_t)n_out * T;
    hr_vk_buf *w = NULL, *xb = NULL;
    hr_vk_set *set = NULL;
    float *row = malloc((size_t)row_len * sizeof(float));
    char *q = malloc(wbytes);
    int rc = row && q ? 0 : hr_seterr(err, HR_ENOMEM, "out of memory");
    if (rc == 0) {
        uint64_t s = 0x2545f4914f6cdd1dull;
        for (int64_t i = 0; i < row_len; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            row[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23);
        }
        tt->quant(row, q, row_len);
        for (uint32_t i = 1; i < n_out; i++)
            memcpy(q + (size_t)i * rb, q, rb);
        rc = hr_vk_buf_create(vk, &w, wbytes, false, err);
    }
    if (rc == 0)
        rc = hr_vk_buf_create(vk, &xb, xwords * 4, false, err);
    if (rc == 0)
        rc = hr_vk_set_create(vk, &set, w, xb, NULL, err);
    if (rc == 0)
        rc = hr_vk_write(vk, w, 0, q, wbytes, err);
    if (rc == 0) {
        rc = hr_vk_fill0(vk, xb, 0, xwords * 4, err);
        for (uint32_t t = 0; rc == 0 && t < T; t++) /* activations: the row again */
            rc = hr_vk_write(vk, xb, (size_t)t * n_in * 4, row, (size_t)n_in * 4, err);
    }
    if (rc == 0) {
        hr_gpu_mm_job j = {set, type, tt->vec_dot_type, n_in, 1, (uint32_t)rb, 1, x, a, y};
        double t1 = hr_gpu_time_us(vk, hr_gpu_rec_mm, &j, reps, err);
        j.n_out = n_out;
        double tv = hr_gpu_time_us(vk, hr_gpu_rec_mm, &j, reps, err);
        j.n_tok = T;
        double tm = hr_gpu_time_us(vk, hr_gpu_rec_mm, &j, reps, err);
        if (t1 < 0 || tv < 0 || tm < 0) {
            rc = HR_EIO;
        } else {
            r->type = type;
            r->matvec_call_us = t1 > submit_us && submit_us > 0 ? t1 - submit_us : t1;
            r->matvec_gbs = (double)wbytes / ((tv > t1 ? tv - t1 : tv) * 1e-6) / 1e9;
            r->matmat_gflops = 2.0 * n_in * (double)n_out * T / (tm * 1e-6) / 1e9;
        }
    }
    hr_vk_set_destroy(vk, set);
    hr_vk_buf_destroy(vk, w);
    hr_vk_buf_destroy(vk, xb);
    free(row);
    free(q);
    return rc;
}

int hr_prof_gpu_measure(hr_prof_gpu *g, const int *types, int n_types, int64_t row_len, bool quick,
                        char err[HR_ERR_LEN]) {
    hr_vk *vk = NULL;
    int rc = hr_vk_create(&vk, g->index, err);
    if (rc)
        return rc;
    /* the kernels the layers will run: fast, or exact under --exact */
    if (hr_vk_set_exact(vk, hr_kernels_exact()) != 0) {
        hr_vk_destroy(vk);
        return hr_seterr(err, HR_EUNSUPPORTED, "GPU %d: --exact needs shaderFloat64", g->index);
    }
    int reps = quick ? 2 : 4;
    /* a GPU's matrices larger than its last-level cache (up to ~100 MiB on
     * current GPUs; Vulkan does not report it), so that the rate is that of
     * its memory; a software device's as the CPU profile's */
    bool cpu_dev = hr_vk_info(vk)->type == HR_VK_CPU;
    size_t target =
        cpu_dev ? (quick ? (4u << 20) : (16u << 20)) : (quick ? (128u << 20) : (256u << 20));
    size_t cb = quick ? (8u << 20) : (32u << 20);
    g->submit_us = hr_gpu_time_us(vk, hr_gpu_rec_empty, NULL, reps * 2, err);
    hr_vk_buf *b = NULL;
    char *host = malloc(cb);
    if (!host || hr_vk_buf_create(vk, &b, cb, false, err) != 0) {
        g->h2d_gbs = g->d2h_gbs = -1;
    } else {
        memset(host, 1, cb);
        double bw = 0, br = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = hr_now_s();
            if (hr_vk_write(vk, b, 0, host, cb, err))
                break;
            double t1 = hr_now_s();
            if (hr_vk_read(vk, b, 0, host, cb, err))
                break;
            double t2 = hr_now_s();
            bw = fmax(bw, cb / (t1 - t0) / 1e9);
            br = fmax(br, cb / (t2 - t1) / 1e9);
        }
        g->h2d_gbs = bw > 0 ? bw : -1;
        g->d2h_gbs = br > 0 ? br : -1;
    }
    hr_vk_buf_destroy(vk, b);
    free(host);
    g->n_rates = 0;
    /* one type once, unrecorded, so that a GPU that was idle is clocked up.
     * (On an H200 the first profile after start-up still measured low:
     * Q4_0 89 GB/s without this pass, 139 with it, 418 in a profile taken
     * after other work; the cause is not known.) */
    if (!cpu_dev && n_types > 0) {
        hr_prof_gpu_rate r;
        char e2[HR_ERR_LEN] = "";
        (void)hr_gpu_rate(vk, &r, types[0], row_len, target, reps, g->submit_us, e2);
    }
    for (int i = 0; i < n_types && g->n_rates < HR_PROF_MAX_TYPES; i++) {
        hr_prof_gpu_rate r;
        char e2[HR_ERR_LEN] = "";
        int rr = hr_gpu_rate(vk, &r, types[i], row_len, target, reps, g->submit_us, e2);
        if (rr == 0)
            g->rates[g->n_rates++] = r;
        else if (rr != HR_EUNSUPPORTED)
            HR_LOG_WARN(HR_PROF_TAG, "GPU %s rate for %s not measured: %s", g->name,
                        hr_type_name(types[i]), e2[0] ? e2 : hr_strerror(rr));
    }
    HR_LOG_INFO(HR_PROF_TAG, "GPU %s: %d weight types measured", g->name, g->n_rates);
    hr_vk_destroy(vk);
    return g->n_rates > 0 ? 0 : hr_seterr(err, HR_EIO, "no GPU rate could be measured");
}

static const hr_prof_gpu_rate *hr_gpu_rate_of(const hr_prof_gpu *g, int type) {
    for (int i = 0; i < g->n_rates; i++)
        if (g->rates[i].type == type)
            return &g->rates[i];
    return NULL;
}

double hr_prof_gpu_window_ms(const hr_prof_gpu *g, const hr_prof_model *pm, int b, int e) {
    if (!g || !pm || b < 0 || e > pm->n_layers_listed || b > e)
        return -1;
    double ms = 0;
    for (int il = b; il < e; il++) {
        const hr_prof_layer *L = &pm->layers[il];
        for (int t = 0; t < L->n_types; t++) {
            const hr_prof_gpu_rate *r = hr_gpu_rate_of(g, L->types[t].type);
            if (!r || !(r->matvec_gbs > 0))
                return -1;
            ms += (double)L->types[t].bytes / (r->matvec_gbs * 1e9) * 1e3 +
                  L->types[t].n_mats * r->matvec_call_us * 1e-3;
        }
    }
    /* the window's submission and its two hidden-state copies (f32) */
    double copy = 0;
    if (g->h2d_gbs > 0 && g->d2h_gbs > 0)
        copy = pm->n_embd * 4.0 * (1.0 / (g->h2d_gbs * 1e9) + 1.0 / (g->d2h_gbs * 1e9)) * 1e3;
    return ms + (g->submit_us > 0 ? g->submit_us * 1e-3 : 0) + copy;
}
