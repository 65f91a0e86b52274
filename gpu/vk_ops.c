/* vk_ops.c - one recording helper per kernel of gpu/shaders/: the push
 * constants each shader declares (same field order), the workgroup counts,
 * the checks that refuse shapes a kernel cannot run, and the choice between
 * the exact kernel and the fast one (vk->exact). */
#include "gpu/vk-impl.h"

#include "kernels/types.h"

#include <math.h>

static uint32_t hr_div_up(uint64_t a, uint32_t b) { return (uint32_t)((a + b - 1) / b); }

/* the fast kernel with a reduction: its _SG twin where vk uses subgroups */
static hr_vk_kernel hr_fast(const hr_vk *vk, hr_vk_kernel plain) {
    return vk->use_sg ? (hr_vk_kernel)(plain + 1) : plain;
}

void hr_vk_rmsnorm(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t rows, uint32_t in_off,
                   uint32_t in_stride, uint32_t out_off, uint32_t out_stride, uint32_t g_off,
                   float eps) {
    struct {
        uint32_t n, rows, in_off, in_stride, out_off, out_stride, g_off, has_g;
        float eps;
    } pc = {n,
            rows,
            in_off,
            in_stride,
            out_off,
            out_stride,
            g_off == UINT32_MAX ? 0 : g_off,
            g_off != UINT32_MAX,
            eps};
    hr_vk_dispatch(vk, s, vk->exact ? HR_VK_K_RMSNORM : hr_fast(vk, HR_VK_K_F_RMSNORM), &pc,
                   sizeof pc, rows, 1);
}

void hr_vk_add(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t dst, uint32_t src, uint32_t src_n,
               bool src_in_w) {
    struct {
        uint32_t n, dst, src, src_n, src_in_w;
    } pc = {n, dst, src, src_n, src_in_w};
    hr_vk_dispatch(vk, s, HR_VK_K_ADD, &pc, sizeof pc, hr_div_up(n, 64), 1);
}

void hr_vk_swiglu(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t g, uint32_t u) {
    struct {
        uint32_t n, g, u;
    } pc = {n, g, u};
    hr_vk_dispatch(vk, s, vk->exact ? HR_VK_K_SWIGLU : HR_VK_K_F_SWIGLU, &pc, sizeof pc,
                   hr_div_up(n, 64), 1);
}

void hr_vk_softmax(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t rows, uint32_t off,
                   uint32_t stride) {
    struct {
        uint32_t n, rows, off, stride;
    } pc = {n, rows, off, stride};
    hr_vk_dispatch(vk, s, vk->exact ? HR_VK_K_SOFTMAX : hr_fast(vk, HR_VK_K_F_SOFTMAX), &pc,
                   sizeof pc, rows, 1);
}

void hr_vk_rope(hr_vk *vk, hr_vk_set *s, uint32_t n_tok, uint32_t n_heads, uint32_t head_dim,
                uint32_t n_rot, bool neox, uint32_t off, uint32_t stride, uint32_t tab) {
    struct {
        uint32_t n_tok, n_heads, head_dim, n_rot, neox, off, stride, tab;
    } pc = {n_tok, n_heads, head_dim, n_rot, neox, off, stride, tab};
    hr_vk_dispatch(vk, s, HR_VK_K_ROPE, &pc, sizeof pc,
                   hr_div_up((uint64_t)n_tok * n_heads * (n_rot / 2), 64), 1);
}

void hr_vk_kv_store(hr_vk *vk, hr_vk_set *s, uint32_t kd, uint32_t n_tok, uint32_t pos0,
                    uint32_t k_src, uint32_t v_src, uint32_t k_dst, uint32_t v_dst) {
    struct {
        uint32_t kd, n_tok, pos0, k_src, v_src, k_dst, v_dst;
    } pc = {kd, n_tok, pos0, k_src, v_src, k_dst, v_dst};
    hr_vk_dispatch(vk, s, HR_VK_K_KVSTORE, &pc, sizeof pc, hr_div_up((uint64_t)n_tok * kd / 2, 64),
                   1);
}

void hr_vk_attention(hr_vk *vk, hr_vk_set *s, const hr_vk_attn *a) {
    struct {
        uint32_t n_head, n_kv, hd, pos0, q_off, out_off, k_off, v_off, sc_off, n_ctx;
        float scale;
    } pc = {a->n_head,
            a->n_kv,
            a->head_dim,
            a->pos0,
            a->q,
            a->out,
            a->k,
            a->v,
            a->sc,
            a->n_ctx,
            1.0f / sqrtf((float)a->head_dim)};
    hr_vk_dispatch(vk, s, vk->exact ? HR_VK_K_ATTN : hr_fast(vk, HR_VK_K_F_ATTN), &pc, sizeof pc,
                   a->n_head, a->n_tok);
}

int hr_vk_quantize(hr_vk *vk, hr_vk_set *s, int act, uint32_t n_in, uint32_t n_tok, uint32_t in_off,
                   uint32_t out_off) {
    uint32_t qb = hr_vk_act_block(act);
    if (!qb || n_in % qb || n_tok == 0)
        return HR_EINVAL;
    struct {
        uint32_t n_in, n_tok, in_off, out_off;
    } pc = {n_in, n_tok, in_off, out_off};
    hr_vk_kernel k = act == HR_TYPE_Q8_0   ? HR_VK_K_Q8_0
                     : act == HR_TYPE_Q8_1 ? HR_VK_K_Q8_1
                                           : HR_VK_K_Q8_K;
    if (!vk->exact)
        k += HR_VK_K_F_Q8_0 - HR_VK_K_Q8_0;
    hr_vk_dispatch(vk, s, k, &pc, sizeof pc, n_in / qb, n_tok);
    return 0;
}

int hr_vk_rmsnorm_quantize(hr_vk *vk, hr_vk_set *s, int act, uint32_t n_in, uint32_t n_tok,
                           uint32_t in_off, uint32_t xb_off, uint32_t g_off, float eps,
                           uint32_t act_off) {
    uint32_t qb = hr_vk_act_block(act);
    if (!qb || n_in % qb || n_tok == 0)
        return HR_EINVAL;
    if (vk->exact)
        return HR_EUNSUPPORTED;
    struct {
        uint32_t n_in, n_tok, in_off, out_off, xb_off, g_off, has_g;
        float eps;
    } pc = {
        n_in, n_tok, in_off, act_off, xb_off, g_off == UINT32_MAX ? 0 : g_off, g_off != UINT32_MAX,
        eps};
    hr_vk_kernel k = act == HR_TYPE_Q8_0   ? HR_VK_K_F_RQ8_0
                     : act == HR_TYPE_Q8_1 ? HR_VK_K_F_RQ8_1
                                           : HR_VK_K_F_RQ8_K;
    hr_vk_dispatch(vk, s, k, &pc, sizeof pc, n_tok, 1);
    return 0;
}

void hr_vk_probe(hr_vk *vk, hr_vk_set *s, int op, uint32_t n, uint32_t off) {
    struct {
        uint32_t n, op, off;
    } pc = {n, (uint32_t)op, off};
    if (!vk->info.f64) /* exact.glsl's: no 64-bit floats, no probe */
        return;
    hr_vk_dispatch(vk, s, HR_VK_K_PROBE, &pc, sizeof pc, hr_div_up(n, 64), 1);
}

static int hr_vk_mm_kernel(int type) {
    switch (type) {
    case HR_TYPE_F32:
        return HR_VK_K_MM_F32;
    case HR_TYPE_F16:
        return HR_VK_K_MM_F16;
    case HR_TYPE_BF16:
        return HR_VK_K_MM_BF16;
    case HR_TYPE_Q4_0:
        return HR_VK_K_MM_Q4_0;
    case HR_TYPE_Q4_1:
        return HR_VK_K_MM_Q4_1;
    case HR_TYPE_Q5_0:
        return HR_VK_K_MM_Q5_0;
    case HR_TYPE_Q5_1:
        return HR_VK_K_MM_Q5_1;
    case HR_TYPE_Q8_0:
        return HR_VK_K_MM_Q8_0;
    case HR_TYPE_Q4_K:
        return HR_VK_K_MM_Q4_K;
    case HR_TYPE_Q5_K:
        return HR_VK_K_MM_Q5_K;
    case HR_TYPE_Q6_K:
        return HR_VK_K_MM_Q6_K;
    default:
        return -1;
    }
}

bool hr_vk_type_supported(int type) { return hr_vk_mm_kernel(type) >= 0; }

int hr_vk_matmul(hr_vk *vk, hr_vk_set *s, int type, uint32_t n_in, uint32_t n_out,
                 uint32_t row_bytes, uint32_t w_off, uint32_t act_off, uint32_t y_off,
                 uint32_t n_tok, uint32_t y_stride) {
    if (!vk->exact) {
        hr_vk_mm m = {.type = type,
                      .n_in = n_in,
                      .n_out = n_out,
                      .row_bytes = row_bytes,
                      .w_off = w_off,
                      .act_off = act_off,
                      .y_off = y_off,
                      .n_tok = n_tok,
                      .y_stride = y_stride};
        return hr_vk_matmul_ex(vk, s, &m);
    }
    int k = hr_vk_mm_kernel(type);
    const hr_type_traits *tt = hr_type_get(type);
    bool quant = k >= HR_VK_K_MM_Q4_0;
    bool mv = n_tok == 1 && k >= HR_VK_K_MM_F16; /* one token: matvec.comp */
    if (mv)
        k += HR_VK_K_MV_F16 - HR_VK_K_MM_F16;
    if (quant && vk->use_dot) /* its packed-dot twin */
        k += mv ? HR_VK_K_MV_Q4_0_DOT - HR_VK_K_MV_Q4_0 : HR_VK_K_MM_Q4_0_DOT - HR_VK_K_MM_Q4_0;
    if (k < 0 || !tt || n_in == 0 || n_in % (uint32_t)tt->block_elems || n_tok == 0 ||
        row_bytes != hr_type_row_bytes(type, n_in) || (type == HR_TYPE_F32 && (w_off & 3)) ||
        (w_off & 1) || (row_bytes & 1))
        return HR_EINVAL;
    struct {
        uint32_t n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride;
    } pc = {n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride};
    /* matmul.comp: 8 rows, 8 tokens a workgroup; matvec.comp: 8 rows */
    hr_vk_dispatch(vk, s, (hr_vk_kernel)k, &pc, sizeof pc, hr_div_up(n_out, 8),
                   hr_div_up(n_tok, 8));
    return 0;
}

int hr_vk_matmul_ex(hr_vk *vk, hr_vk_set *s, const hr_vk_mm *m) {
    if (vk->exact) {
        if (m->glu || m->accum)
            return HR_EUNSUPPORTED;
        return hr_vk_matmul(vk, s, m->type, m->n_in, m->n_out, m->row_bytes, m->w_off, m->act_off,
                            m->y_off, m->n_tok, m->y_stride);
    }
    int k = hr_vk_mm_kernel(m->type);
    const hr_type_traits *tt = hr_type_get(m->type);
    uint32_t w2 = m->glu ? m->w2_off : m->w_off;
    if (k < 0 || !tt || m->n_in == 0 || m->n_in % (uint32_t)tt->block_elems || m->n_tok == 0 ||
        m->row_bytes != hr_type_row_bytes(m->type, m->n_in) ||
        (m->type == HR_TYPE_F32 && ((m->w_off | w2) & 3)) || ((m->w_off | w2) & 1) ||
        (m->row_bytes & 1))
        return HR_EINVAL;
    int ti = k - HR_VK_K_MM_F32; /* the type's place in the MM_ order */
    bool quant = k >= HR_VK_K_MM_Q4_0;
    hr_vk_kernel fk;
    if (quant && vk->use_dot)
        fk = (hr_vk_kernel)((vk->use_sg ? HR_VK_K_F_MM_Q4_0_SG_DOT : HR_VK_K_F_MM_Q4_0_DOT) +
                            (k - HR_VK_K_MM_Q4_0));
    else
        fk = (hr_vk_kernel)((vk->use_sg ? HR_VK_K_F_MM_F32_SG : HR_VK_K_F_MM_F32) + ti);
    struct {
        uint32_t n_in, n_out, row_bytes, w_off, act_off, y_off, n_tok, y_stride, w2_off, flags;
    } pc = {m->n_in,  m->n_out, m->row_bytes, m->w_off, m->act_off,
            m->y_off, m->n_tok, m->y_stride,  w2,       (m->glu ? 1u : 0u) | (m->accum ? 2u : 0u)};
    /* mm_fast.comp: one row, 8 tokens a workgroup */
    hr_vk_dispatch(vk, s, fk, &pc, sizeof pc, m->n_out, hr_div_up(m->n_tok, 8));
    return 0;
}

void hr_vk_rope_kv(hr_vk *vk, hr_vk_set *s, uint32_t n_tok, uint32_t n_kv, uint32_t head_dim,
                   uint32_t n_rot, bool neox, uint32_t k_src, uint32_t v_src, uint32_t stride,
                   uint32_t tab, uint32_t pos0, uint32_t k_dst, uint32_t v_dst) {
    struct {
        uint32_t n_tok, n_kv, hd, n_rot, neox, k_src, v_src, stride, tab, pos0, k_dst, v_dst;
    } pc = {n_tok, n_kv, head_dim, n_rot, neox, k_src, v_src, stride, tab, pos0, k_dst, v_dst};
    hr_vk_dispatch(vk, s, HR_VK_K_F_ROPEKV, &pc, sizeof pc, n_kv, n_tok);
}
