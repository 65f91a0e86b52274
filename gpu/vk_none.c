/* vk_none.c - gpu/vk.h in a build without Vulkan (no loader or no glslc at
 * configure time): no devices, hr_vk_create fails with HR_EUNSUPPORTED, so
 * callers keep every layer on the CPU. The recording calls cannot be reached
 * without a device; they do nothing. */
#include "gpu/vk.h"

#include <stdlib.h>
#include <string.h>

bool hr_vk_built(void) { return false; }

const char *hr_vk_type_name(hr_vk_type t) {
    static const char *names[] = {"other", "integrated", "discrete", "virtual", "cpu"};
    return (unsigned)t < 5 ? names[t] : "other";
}

int hr_vk_list(hr_vk_device_info *out, int cap, int *n, char err[HR_ERR_LEN]) {
    (void)out;
    (void)cap;
    (void)err;
    *n = 0;
    return 0;
}

int hr_vk_pick(const char *spec, int *index, char err[HR_ERR_LEN]) {
    *index = -1;
    if (!spec)
        spec = getenv("HR_GPU");
    if (!spec || !*spec || strcmp(spec, "none") == 0 || strcmp(spec, "auto") == 0 ||
        strcmp(spec, "any") == 0)
        return 0;
    return hr_seterr(err, HR_EUNSUPPORTED, "GPU '%s': this hearth was built without Vulkan", spec);
}

int hr_vk_create(hr_vk **out, int index, char err[HR_ERR_LEN]) {
    (void)index;
    *out = NULL;
    return hr_seterr(err, HR_EUNSUPPORTED, "this hearth was built without Vulkan");
}

void hr_vk_destroy(hr_vk *vk) { (void)vk; }
const hr_vk_device_info *hr_vk_info(const hr_vk *vk) {
    (void)vk;
    return NULL;
}

int hr_vk_buf_create(hr_vk *vk, hr_vk_buf **out, size_t bytes, bool host, char err[HR_ERR_LEN]) {
    (void)vk;
    (void)bytes;
    (void)host;
    *out = NULL;
    return hr_seterr(err, HR_EUNSUPPORTED, "built without Vulkan");
}

void hr_vk_buf_destroy(hr_vk *vk, hr_vk_buf *b) {
    (void)vk;
    (void)b;
}

size_t hr_vk_buf_size(const hr_vk_buf *b) {
    (void)b;
    return 0;
}

void *hr_vk_buf_map(hr_vk_buf *b) {
    (void)b;
    return NULL;
}

static int hr_vk_none(char *err) { return hr_seterr(err, HR_EUNSUPPORTED, "built without Vulkan"); }

int hr_vk_write(hr_vk *vk, hr_vk_buf *b, size_t off, const void *src, size_t n,
                char err[HR_ERR_LEN]) {
    (void)vk, (void)b, (void)off, (void)src, (void)n;
    return hr_vk_none(err);
}

int hr_vk_read(hr_vk *vk, hr_vk_buf *b, size_t off, void *dst, size_t n, char err[HR_ERR_LEN]) {
    (void)vk, (void)b, (void)off, (void)dst, (void)n;
    return hr_vk_none(err);
}

int hr_vk_fill0(hr_vk *vk, hr_vk_buf *b, size_t off, size_t n, char err[HR_ERR_LEN]) {
    (void)vk, (void)b, (void)off, (void)n;
    return hr_vk_none(err);
}

int hr_vk_set_create(hr_vk *vk, hr_vk_set **out, hr_vk_buf *w, hr_vk_buf *x, hr_vk_buf *kv,
                     char err[HR_ERR_LEN]) {
    (void)vk, (void)w, (void)x, (void)kv;
    *out = NULL;
    return hr_vk_none(err);
}

void hr_vk_set_destroy(hr_vk *vk, hr_vk_set *s) { (void)vk, (void)s; }

int hr_vk_begin(hr_vk *vk, char err[HR_ERR_LEN]) {
    (void)vk;
    return hr_vk_none(err);
}

void hr_vk_copy(hr_vk *vk, hr_vk_buf *src, size_t src_off, hr_vk_buf *dst, size_t dst_off,
                size_t n) {
    (void)vk, (void)src, (void)src_off, (void)dst, (void)dst_off, (void)n;
}

int hr_vk_submit(hr_vk *vk, char err[HR_ERR_LEN]) {
    (void)vk;
    return hr_vk_none(err);
}

void hr_vk_rmsnorm(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t rows, uint32_t in_off,
                   uint32_t in_stride, uint32_t out_off, uint32_t out_stride, uint32_t g_off,
                   float eps) {
    (void)vk, (void)s, (void)n, (void)rows, (void)in_off, (void)in_stride, (void)out_off;
    (void)out_stride, (void)g_off, (void)eps;
}

void hr_vk_add(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t dst, uint32_t src, uint32_t src_n,
               bool src_in_w) {
    (void)vk, (void)s, (void)n, (void)dst, (void)src, (void)src_n, (void)src_in_w;
}

void hr_vk_swiglu(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t g, uint32_t u) {
    (void)vk, (void)s, (void)n, (void)g, (void)u;
}

void hr_vk_softmax(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t rows, uint32_t off,
                   uint32_t stride) {
    (void)vk, (void)s, (void)n, (void)rows, (void)off, (void)stride;
}

void hr_vk_rope(hr_vk *vk, hr_vk_set *s, uint32_t n_tok, uint32_t n_heads, uint32_t head_dim,
                uint32_t n_rot, bool neox, uint32_t off, uint32_t stride, uint32_t tab) {
    (void)vk, (void)s, (void)n_tok, (void)n_heads, (void)head_dim, (void)n_rot, (void)neox;
    (void)off, (void)stride, (void)tab;
}

void hr_vk_kv_store(hr_vk *vk, hr_vk_set *s, uint32_t kd, uint32_t n_tok, uint32_t pos0,
                    uint32_t k_src, uint32_t v_src, uint32_t k_dst, uint32_t v_dst) {
    (void)vk, (void)s, (void)kd, (void)n_tok, (void)pos0, (void)k_src, (void)v_src;
    (void)k_dst, (void)v_dst;
}

void hr_vk_attention(hr_vk *vk, hr_vk_set *s, const hr_vk_attn *a) { (void)vk, (void)s, (void)a; }

int hr_vk_quantize(hr_vk *vk, hr_vk_set *s, int act, uint32_t n_in, uint32_t n_tok, uint32_t in_off,
                   uint32_t out_off) {
    (void)vk, (void)s, (void)act, (void)n_in, (void)n_tok, (void)in_off, (void)out_off;
    return HR_EUNSUPPORTED;
}

int hr_vk_matmul(hr_vk *vk, hr_vk_set *s, int type, uint32_t n_in, uint32_t n_out,
                 uint32_t row_bytes, uint32_t w_off, uint32_t act_off, uint32_t y_off,
                 uint32_t n_tok, uint32_t y_stride) {
    (void)vk, (void)s, (void)type, (void)n_in, (void)n_out, (void)row_bytes, (void)w_off;
    (void)act_off, (void)y_off, (void)n_tok, (void)y_stride;
    return HR_EUNSUPPORTED;
}

bool hr_vk_uses_int_dot(const hr_vk *vk) {
    (void)vk;
    return false;
}

void hr_vk_group_begin(hr_vk *vk) { (void)vk; }
void hr_vk_group_end(hr_vk *vk) { (void)vk; }

bool hr_vk_uses_native_fma(const hr_vk *vk) {
    (void)vk;
    return false;
}

void hr_vk_probe(hr_vk *vk, hr_vk_set *s, int op, uint32_t n, uint32_t off) {
    (void)vk, (void)s, (void)op, (void)n, (void)off;
}

bool hr_vk_type_supported(int type) {
    (void)type;
    return false;
}

int hr_vk_set_exact(hr_vk *vk, bool exact) {
    (void)vk, (void)exact;
    return HR_EUNSUPPORTED;
}
bool hr_vk_exact(const hr_vk *vk) {
    (void)vk;
    return false;
}
bool hr_vk_uses_subgroups(const hr_vk *vk) {
    (void)vk;
    return false;
}
const char *hr_vk_path_name(const hr_vk_device_info *d) {
    (void)d;
    return "none (built without Vulkan)";
}
bool hr_vk_fast_uses_f64(void) { return false; }
int hr_vk_matmul_ex(hr_vk *vk, hr_vk_set *s, const hr_vk_mm *m) {
    (void)vk, (void)s, (void)m;
    return HR_EUNSUPPORTED;
}
void hr_vk_rope_kv(hr_vk *vk, hr_vk_set *s, uint32_t n_tok, uint32_t n_kv, uint32_t head_dim,
                   uint32_t n_rot, bool neox, uint32_t k_src, uint32_t v_src, uint32_t stride,
                   uint32_t tab, uint32_t pos0, uint32_t k_dst, uint32_t v_dst) {
    (void)vk, (void)s, (void)n_tok, (void)n_kv, (void)head_dim, (void)n_rot, (void)neox;
    (void)k_src, (void)v_src, (void)stride, (void)tab, (void)pos0, (void)k_dst, (void)v_dst;
}
int hr_vk_membw(hr_vk *vk, size_t bytes, int reps, double *gbs, char err[HR_ERR_LEN]) {
    (void)vk, (void)bytes, (void)reps;
    *gbs = 0;
    return hr_vk_none(err);
}
int hr_vk_rmsnorm_quantize(hr_vk *vk, hr_vk_set *s, int act, uint32_t n_in, uint32_t n_tok,
                           uint32_t in_off, uint32_t xb_off, uint32_t g_off, float eps,
                           uint32_t act_off) {
    (void)vk, (void)s, (void)act, (void)n_in, (void)n_tok, (void)in_off, (void)xb_off;
    (void)g_off, (void)eps, (void)act_off;
    return HR_EUNSUPPORTED;
}
