/* vk.h - the Vulkan compute backend: device discovery and selection, device
 * buffers, one command buffer of recorded kernel dispatches at a time, and
 * the kernels themselves (GLSL in gpu/shaders/, compiled to SPIR-V at build
 * time and embedded in the binary).
 *
 * Every kernel binds one descriptor set of three storage buffers: W (weights
 * and f32 vectors, read only), X (the work buffer: activations, scratch) and
 * KV (an F16 cache). Offsets into X and KV count 32-bit words, offsets into
 * W bytes (matrices) or words (vectors). The kernels reproduce the scalar
 * reference math of kernels/ (types.c, ops.c): quantized weights dot 8-bit
 * activations (Q8_0 / Q8_1 / Q8_K, quantized on the device with ggml's
 * rounding) with integer sums; F32 / F16 / BF16 weights dot f32 values.
 *
 * Built without Vulkan (libvulkan or glslc missing at configure time),
 * hr_vk_built() is false, the device list is empty and hr_vk_create fails
 * with HR_EUNSUPPORTED.
 *
 * Two paths. The fast path (the default) runs 32-bit float kernels with
 * no canonical order: subgroup reductions where the device has subgroup
 * arithmetic (shared memory otherwise), weights dequantized in registers,
 * gate/up fused with SwiGLU, RoPE fused with the KV store, the residual
 * adds folded into the output and down projections, attention with an
 * online softmax in one kernel. It needs no 64-bit floats, and its results
 * are within float rounding of the CPU's (docs/COMMANDS.md "GPU paths" has
 * the bounds). The exact path (hr_vk_set_exact; hearth's --exact /
 * HEARTH_EXACT=1) reproduces the CPU's canonical float order bit for bit,
 * rounding division, square root and expf as the CPU does with 64-bit
 * floats: it needs shaderFloat64, and hr_vk_set_exact refuses a device
 * without it. HR_VK_NO_F64=1 in the environment makes every device look as
 * if it had no shaderFloat64 (tests force the fast path's reach with it);
 * HR_VK_SUBGROUP=0 makes the fast kernels reduce through shared memory.
 *
 * Device choice (hr_vk_pick): a CPU-type device (Mesa's lavapipe) is never
 * chosen by "auto"; it is used only when named by index or with "any" (the
 * tests set HR_GPU=any).
 *
 * Thread-safety: discovery functions are reentrant; a hr_vk and everything
 * made from it are used by one thread at a time. */
#ifndef HR_GPU_VK_H
#define HR_GPU_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define HR_VK_MAX_DEVICES 8
#define HR_VK_MAX_HEAPS 8

typedef enum {
    HR_VK_OTHER = 0,
    HR_VK_INTEGRATED = 1,
    HR_VK_DISCRETE = 2,
    HR_VK_VIRTUAL = 3,
    HR_VK_CPU = 4, /* a software device (lavapipe) */
} hr_vk_type;

typedef struct {
    char name[256];
    hr_vk_type type;
    uint32_t vendor_id, device_id;
    uint32_t api_version; /* VK_MAKE_API_VERSION packing */
    int n_heaps;
    uint64_t heap_bytes[HR_VK_MAX_HEAPS];
    bool heap_device_local[HR_VK_MAX_HEAPS];
    uint64_t max_storage_range; /* bytes one storage-buffer binding may cover */
    bool f64;     /* shaderFloat64 (false under HR_VK_NO_F64=1): the exact path needs it */
    bool int_dot; /* shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product):
                     quantized matmuls then use packed int8 dot products */
    uint32_t subgroup_size; /* 0 when the device reports none */
    bool subgroup_arith;    /* subgroup arithmetic in compute shaders: the fast
                               kernels' reductions use it */
    bool coop_matrix;       /* VK_KHR_cooperative_matrix offered (not used yet) */
    bool fp16;              /* shaderFloat16 (not used yet) */
} hr_vk_device_info;

/* Whether this binary has the Vulkan backend. */
bool hr_vk_built(void);
/* "discrete", "integrated", "virtual", "cpu", "other". */
const char *hr_vk_type_name(hr_vk_type t);
/* Fills out[0..cap) with the devices the Vulkan loader sees; *n = how many
 * (0 without a loader, a driver, or the backend). 0, or an error with err
 * filled when the loader fails in a way worth reporting. */
int hr_vk_list(hr_vk_device_info *out, int cap, int *n, char err[HR_ERR_LEN]);
/* Resolves a device choice: spec NULL takes the environment's HR_GPU, and
 * none there means "auto". "none" -> *index = -1; "auto" -> the first
 * discrete, then integrated, then virtual/other GPU, else
 * -1 (never a CPU device); "any" -> as auto, then a CPU device; "N" -> device N (HR_ERANGE
 * when there is no such device). Anything else is HR_EINVAL. */
int hr_vk_pick(const char *spec, int *index, char err[HR_ERR_LEN]);

typedef struct hr_vk hr_vk;
typedef struct hr_vk_buf hr_vk_buf;
typedef struct hr_vk_set hr_vk_set;

/* Opens device index (hr_vk_list order) with one compute queue and builds
 * every kernel's pipeline; packed int8 dot products are used where the
 * device has them, unless the environment sets HR_VK_INT_DOT=0. */
int hr_vk_create(hr_vk **out, int index, char err[HR_ERR_LEN]);
void hr_vk_destroy(hr_vk *vk);
const hr_vk_device_info *hr_vk_info(const hr_vk *vk);
/* Selects the kernels that follow: exact (the CPU's canonical order, bit
 * for bit) or fast (the default). HR_EUNSUPPORTED for exact on a device
 * without shaderFloat64. */
int hr_vk_set_exact(hr_vk *vk, bool exact);
bool hr_vk_exact(const hr_vk *vk);
/* The device's memory read bandwidth: a kernel reading a device buffer of
 * bytes (rounded down to 16) reps times in one submission, after one
 * untimed pass; *gbs in GB/s (1e9 bytes). Not while recording. */
int hr_vk_membw(hr_vk *vk, size_t bytes, int reps, double *gbs, char err[HR_ERR_LEN]);
/* Whether vk's fast kernels reduce with subgroup arithmetic. */
bool hr_vk_uses_subgroups(const hr_vk *vk);
/* The path a device's info says hearth will run on it, in words for
 * `hearth info`: "fast (exact with --exact)" or "fast only (no
 * shaderFloat64: --exact refused)". */
const char *hr_vk_path_name(const hr_vk_device_info *d);
/* Whether any fast-path kernel's SPIR-V declares the Float64 capability
 * (it must not; for tests). */
bool hr_vk_fast_uses_f64(void);

/* A storage buffer of bytes (rounded up to 4) in device-local memory, or,
 * with host, in host-visible coherent memory mapped for the buffer's life
 * (hr_vk_buf_map). */
int hr_vk_buf_create(hr_vk *vk, hr_vk_buf **out, size_t bytes, bool host, char err[HR_ERR_LEN]);
void hr_vk_buf_destroy(hr_vk *vk, hr_vk_buf *b);
size_t hr_vk_buf_size(const hr_vk_buf *b);
/* The mapping of a host buffer, NULL for a device one. */
void *hr_vk_buf_map(hr_vk_buf *b);
/* Synchronous copies between host memory and a buffer (through a staging
 * buffer in chunks; not while a command buffer is being recorded). */
int hr_vk_write(hr_vk *vk, hr_vk_buf *b, size_t off, const void *src, size_t n,
                char err[HR_ERR_LEN]);
int hr_vk_read(hr_vk *vk, hr_vk_buf *b, size_t off, void *dst, size_t n, char err[HR_ERR_LEN]);
/* Zeroes n bytes at off (both multiples of 4). */
int hr_vk_fill0(hr_vk *vk, hr_vk_buf *b, size_t off, size_t n, char err[HR_ERR_LEN]);

/* A descriptor set over (W, X, KV); kv NULL binds x in its place. The
 * buffers are borrowed and must outlive the set. */
int hr_vk_set_create(hr_vk *vk, hr_vk_set **out, hr_vk_buf *w, hr_vk_buf *x, hr_vk_buf *kv,
                     char err[HR_ERR_LEN]);
void hr_vk_set_destroy(hr_vk *vk, hr_vk_set *s);

/* ---- recording: begin, copies and kernels (each kernel waits for every
 * earlier one: a barrier follows each dispatch), submit (waits). The
 * kernels below run on the path hr_vk_set_exact chose: "as the CPU" is bit
 * for bit on the exact path, within float rounding on the fast one. ---- */
int hr_vk_begin(hr_vk *vk, char err[HR_ERR_LEN]);
void hr_vk_copy(hr_vk *vk, hr_vk_buf *src, size_t src_off, hr_vk_buf *dst, size_t dst_off,
                size_t n);
int hr_vk_submit(hr_vk *vk, char err[HR_ERR_LEN]);
/* Between hr_vk_group_begin and hr_vk_group_end the kernels recorded may run
 * at the same time (no barrier between them; they must not read what
 * another of them writes); hr_vk_group_end records the barrier that makes
 * all of them visible to what follows. */
void hr_vk_group_begin(hr_vk *vk);
void hr_vk_group_end(hr_vk *vk);

/* out[r] = in[r] / rms(in[r]) * g (g: n words at g_off in W; g_off
 * UINT32_MAX = none) for rows r < rows of n values. */
void hr_vk_rmsnorm(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t rows, uint32_t in_off,
                   uint32_t in_stride, uint32_t out_off, uint32_t out_stride, uint32_t g_off,
                   float eps);
/* X[dst + i] += src[i % src_n] for i < n, src in W (src_in_w) or X. */
void hr_vk_add(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t dst, uint32_t src, uint32_t src_n,
               bool src_in_w);
/* X[g + i] = silu(X[g + i]) * X[u + i] for i < n. */
void hr_vk_swiglu(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t g, uint32_t u);
/* In-place softmax over rows of n values at off, stride apart. */
void hr_vk_softmax(hr_vk *vk, hr_vk_set *s, uint32_t n, uint32_t rows, uint32_t off,
                   uint32_t stride);
/* RoPE over n_tok tokens of n_heads heads (token t at off + t * stride) with
 * the angle table at tab ([n_tok][n_rot/2] (cos, sin) f32, hr_vk_rope_table). */
void hr_vk_rope(hr_vk *vk, hr_vk_set *s, uint32_t n_tok, uint32_t n_heads, uint32_t head_dim,
                uint32_t n_rot, bool neox, uint32_t off, uint32_t stride, uint32_t tab);
/* The angle table of hr_rope (kernels/ops.c) for positions pos..pos+n_tok-1:
 * tab: [n_tok][n_rot/2][2] f32 (cos, sin); freq_factors NULL or [n_rot/2]. */
void hr_vk_rope_table(float *tab, int n_tok, int pos, int n_rot, float freq_base,
                      const float *freq_factors);
/* K, V rows [n_tok][kd] f32 in X into the F16 cache in KV ([n_ctx][kd]
 * halves from word k_dst / v_dst) at positions pos0.. (kd even). */
void hr_vk_kv_store(hr_vk *vk, hr_vk_set *s, uint32_t kd, uint32_t n_tok, uint32_t pos0,
                    uint32_t k_src, uint32_t v_src, uint32_t k_dst, uint32_t v_dst);

/* Causal GQA attention (hr_attention's math) for n_tok tokens at pos0..:
 * q / out in X ([n_tok][n_head*head_dim]), the cache in KV, scores scratch
 * of n_tok * n_head * n_ctx words in X at sc. head_dim <= 1024, even. */
typedef struct {
    uint32_t n_head, n_kv, head_dim, n_ctx, n_tok, pos0;
    uint32_t q, out, sc; /* X */
    uint32_t k, v;       /* KV */
} hr_vk_attn;
void hr_vk_attention(hr_vk *vk, hr_vk_set *s, const hr_vk_attn *a);

/* Words of 8-bit activations (quant.comp's layout) for n_tok rows of n_in
 * values in format act (HR_TYPE_Q8_0, _Q8_1, _Q8_K); 0 for HR_TYPE_F32 or a
 * format with no kernel. */
size_t hr_vk_act_words(int act, int64_t n_in, int n_tok);
/* Values per block of activation format act (32 or 256), 0 for none. */
uint32_t hr_vk_act_block(int act);
/* Quantizes [n_tok][n_in] f32 at in_off in X to format act at out_off.
 * HR_EINVAL when n_in is not a multiple of the format's block. */
int hr_vk_quantize(hr_vk *vk, hr_vk_set *s, int act, uint32_t n_in, uint32_t n_tok, uint32_t in_off,
                   uint32_t out_off);

/* The fast path's RMSNorm feeding a quantized matmul, in one kernel:
 * hr_vk_rmsnorm of rows r < n_tok of n_in values at in_off (stride n_in)
 * into xb_off (stride n_in; g as there), and the same values quantized to
 * format act at act_off as hr_vk_quantize would. HR_EINVAL as
 * hr_vk_quantize; HR_EUNSUPPORTED in exact mode. */
int hr_vk_rmsnorm_quantize(hr_vk *vk, hr_vk_set *s, int act, uint32_t n_in, uint32_t n_tok,
                           uint32_t in_off, uint32_t xb_off, uint32_t g_off, float eps,
                           uint32_t act_off);
/* y[t * y_stride + r] = W[r] . a[t] for r < n_out, t < n_tok: W of weight
 * type (any type kernels/types.h supports) with n_out rows of row_bytes at
 * byte w_off of W; a at act_off in X, f32 [n_tok][n_in] for F32/F16/BF16,
 * else hr_vk_quantize's output in the type's vec_dot_type. HR_EINVAL for a
 * type without a kernel or an n_in its blocks cannot hold. */
int hr_vk_matmul(hr_vk *vk, hr_vk_set *s, int type, uint32_t n_in, uint32_t n_out,
                 uint32_t row_bytes, uint32_t w_off, uint32_t act_off, uint32_t y_off,
                 uint32_t n_tok, uint32_t y_stride);
/* A matrix multiply of the fast path with its fusions: y = W a as
 * hr_vk_matmul, or with glu y = silu(W a) * (W2 a) (W2: w2_off, the same
 * type and shape: gate and up), and with accum y += the result (a residual
 * add). HR_EINVAL as hr_vk_matmul; HR_EUNSUPPORTED for glu or accum in exact
 * mode. */
typedef struct {
    int type;
    uint32_t n_in, n_out, row_bytes;
    uint32_t w_off, w2_off; /* bytes in W */
    uint32_t act_off, y_off, n_tok, y_stride;
    bool glu, accum;
} hr_vk_mm;
int hr_vk_matmul_ex(hr_vk *vk, hr_vk_set *s, const hr_vk_mm *m);
/* The fast path's RoPE + KV store: K rows of n_tok tokens at k_src
 * ([n_tok][stride] f32 in X, n_kv heads of head_dim) rotated by the angle
 * table at tab (hr_vk_rope_table's, n_tok rows) and stored with the V rows
 * at v_src into the F16 cache at positions pos0.. (k_dst / v_dst as
 * hr_vk_kv_store's). The f32 K rows are left unrotated. */
void hr_vk_rope_kv(hr_vk *vk, hr_vk_set *s, uint32_t n_tok, uint32_t n_kv, uint32_t head_dim,
                   uint32_t n_rot, bool neox, uint32_t k_src, uint32_t v_src, uint32_t stride,
                   uint32_t tab, uint32_t pos0, uint32_t k_dst, uint32_t v_dst);
/* exact.glsl's operations over arrays in X: out[i] = op(a[i], b[i], c[i]),
 * with a, b, c and out n words apart from word off. op: 0 expf (glibc's),
 * 1 a / b, 2 sqrt(a), 3 fma(a, b, c), each rounded as IEEE / the C library
 * on the CPU; 4 the device's own fma(a, b, c) (which Vulkan lets round
 * twice). For tests and hr_vk_create's check; nothing without shaderFloat64. */
void hr_vk_probe(hr_vk *vk, hr_vk_set *s, int op, uint32_t n, uint32_t off);
/* Whether the kernels use the device's fma(): hr_vk_create saw it round
 * once on inputs where a multiply and an add rounded apart differ, and the
 * environment does not set HR_VK_FMA=emulate. Otherwise fma is computed
 * from 64-bit floats (slower, the same bits). */
bool hr_vk_uses_native_fma(const hr_vk *vk);
/* Whether vk's quantized matmuls use packed int8 dot products. */
bool hr_vk_uses_int_dot(const hr_vk *vk);
/* Whether hr_vk_matmul has a kernel for weight type. */
bool hr_vk_type_supported(int type);

#endif
