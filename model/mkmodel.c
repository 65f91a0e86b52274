/* mkmodel.c - random-weight GGUF model generator: the architecture's
 * layer tensors as model.h's tables list them. */
#include "model/mkmodel.h"

#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/layer-impl.h"
#include "model/model.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hr_mkmodel_params hr_mkmodel_params_default(void) {
    hr_mkmodel_params p = {.arch = "llama", .ftype = "q4_0", .n_ctx = 2048, .seed = 42};
    hr_mkmodel_shape(&p, "tinyllama");
    return p;
}

static const struct {
    const char *name, *arch;
    int e, l, h, kv, ff, v;
    int ne, nu, ffe, ffs; /* experts, used, expert rows, shared rows */
} hr_mk_shapes[] = {
    {"tinyllama", NULL, 2048, 22, 32, 4, 5632, 32000, 0, 0, 0, 0},
    {"small", NULL, 256, 4, 8, 4, 768, 32000, 0, 0, 0, 0},
    {"tiny", NULL, 64, 2, 4, 2, 160, 32000, 0, 0, 0, 0},
    {"llama7b", NULL, 4096, 32, 32, 32, 11008, 32000, 0, 0, 0, 0},
    {"qwen3moe-small", "qwen3moe", 1024, 12, 16, 4, 6144, 32000, 128, 8, 768, 0},
    {"qwen3moe-tiny", "qwen3moe", 256, 2, 8, 4, 768, 32000, 16, 4, 256, 0},
    {"qwen2moe-tiny", "qwen2moe", 256, 2, 8, 4, 768, 32000, 8, 4, 256, 512},
    {"mixtral-tiny", "llama", 256, 2, 8, 4, 512, 32000, 8, 2, 512, 0},
    {"phi3-mini", "phi3", 3072, 32, 32, 32, 8192, 32064, 0, 0, 0, 0},
    {"phi3-small", "phi3", 1024, 8, 16, 16, 2816, 32064, 0, 0, 0, 0},
    {"phi3-tiny", "phi3", 256, 2, 8, 4, 512, 32000, 0, 0, 0, 0},
    {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 0, 0, 0, 0},
    {"gemma3-270m", "gemma3", 640, 18, 4, 1, 2048, 262144, 0, 0, 0, 0},
    {"gemma3-tiny", "gemma3", 256, 4, 4, 2, 512, 32000, 0, 0, 0, 0},
    {"gpt-oss-20b", "gpt-oss", 2880, 24, 64, 8, 2880, 201088, 32, 4, 2880, 0},
    {"gpt-oss-small", "gpt-oss", 1024, 12, 16, 4, 1024, 32000, 32, 4, 1024, 0},
    {"gpt-oss-tiny", "gpt-oss", 256, 2, 8, 4, 256, 32000, 8, 2, 256, 0},
};

/* What the other architectures' shapes add: head width, window and
 * pattern, RoPE base and scaling (linear, or YaRN over yarn_ctx), training
 * context, tied output. */
static const struct {
    const char *name;
    int hd, swa, pattern;
    float rope_base, rope_factor;
    int yarn_ctx, ctx;
    bool tied;
} hr_mk_extras[] = {
    {"phi3-mini", 0, 0, 0, 10000.0f, 0.0f, 0, 4096, false},
    {"phi3-small", 0, 0, 0, 10000.0f, 0.0f, 0, 4096, false},
    {"phi3-tiny", 0, 0, 0, 10000.0f, 0.0f, 0, 4096, false},
    {"gemma3-1b", 256, 512, 0, 1000000.0f, 0.0f, 0, 32768, true},
    {"gemma3-270m", 256, 512, 0, 1000000.0f, 0.0f, 0, 32768, true},
    {"gemma3-tiny", 128, 8, 3, 1000000.0f, 8.0f, 0, 4096, true},
    {"gpt-oss-20b", 64, 128, 0, 150000.0f, 32.0f, 4096, 131072, false},
    {"gpt-oss-small", 64, 128, 0, 150000.0f, 32.0f, 4096, 131072, false},
    {"gpt-oss-tiny", 64, 8, 0, 150000.0f, 32.0f, 4096, 131072, false},
};

const char *hr_mkmodel_shape_names(void) {
    static char names[512]; /* the table's names, written the same on every call */
    size_t len = 0;
    for (size_t i = 0; i < sizeof hr_mk_shapes / sizeof hr_mk_shapes[0] && len < sizeof names; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                hr_mk_shapes[i].name);
    return names;
}

int hr_mkmodel_shape(hr_mkmodel_params *p, const char *name) {
    for (size_t i = 0; i < sizeof hr_mk_shapes / sizeof hr_mk_shapes[0]; i++) {
        if (strcmp(hr_mk_shapes[i].name, name) == 0) {
            p->n_embd = hr_mk_shapes[i].e;
            p->n_layer = hr_mk_shapes[i].l;
            p->n_head = hr_mk_shapes[i].h;
            p->n_head_kv = hr_mk_shapes[i].kv;
            p->n_ff = hr_mk_shapes[i].ff;
            p->n_vocab = hr_mk_shapes[i].v;
            p->n_expert = hr_mk_shapes[i].ne;
            p->n_expert_used = hr_mk_shapes[i].nu;
            p->n_ff_exp = hr_mk_shapes[i].ffe;
            p->n_ff_shexp = hr_mk_shapes[i].ffs;
            if (hr_mk_shapes[i].arch)
                p->arch = hr_mk_shapes[i].arch;
            for (size_t j = 0; j < sizeof hr_mk_extras / sizeof hr_mk_extras[0]; j++) {
                if (strcmp(hr_mk_extras[j].name, name) != 0)
                    continue;
                p->head_dim = hr_mk_extras[j].hd;
                p->n_swa = hr_mk_extras[j].swa;
                p->swa_pattern = hr_mk_extras[j].pattern;
                p->rope_base = hr_mk_extras[j].rope_base;
                p->rope_factor = hr_mk_extras[j].rope_factor;
                p->yarn_ctx = hr_mk_extras[j].yarn_ctx;
                p->n_ctx = hr_mk_extras[j].ctx;
                p->tied = hr_mk_extras[j].tied;
                p->norm_std = 0.1f;
            }
            return 0;
        }
    }
    return HR_ENOENT;
}

/* Which type each tensor gets under a file type ("mostly" type + mix). */
typedef struct {
    const char *name;
    int base;      /* matrices */
    int more_bits; /* attn_v / ffn_down on "more bits" layers (K_M mixes) */
    int output;    /* output.weight */
    int embd;      /* token_embd.weight */
    int experts;   /* the routed experts' stacks (0: as the other matrices) */
} hr_ftype;

/* The mixes; every supported type of the traits table is also a file type
 * of its own (hr_ftype_find). */
static const hr_ftype hr_ftype_mixes[] = {
    {"q4_k_m", HR_TYPE_Q4_K, HR_TYPE_Q6_K, HR_TYPE_Q6_K, HR_TYPE_Q4_K, 0},
    {"q5_k_m", HR_TYPE_Q5_K, HR_TYPE_Q6_K, HR_TYPE_Q6_K, HR_TYPE_Q5_K, 0},
    /* as gpt-oss ships: MXFP4 experts, everything else q8_0 */
    {"mxfp4_moe", HR_TYPE_Q8_0, HR_TYPE_Q8_0, HR_TYPE_Q8_0, HR_TYPE_Q8_0, HR_TYPE_MXFP4},
};

static double hr_bits_per_weight(int type) {
    const hr_type_traits *t = hr_type_get(type);
    return 8.0 * (double)t->block_bytes / (double)t->block_elems;
}

/* A mix by name, else a supported type by name (case ignored: "q4_k") with
 * every tensor in that type but output.weight, which gets at least q6_K's
 * bits. false when name is neither. */
static bool hr_ftype_find(const char *name, hr_ftype *out) {
    for (size_t i = 0; i < sizeof hr_ftype_mixes / sizeof hr_ftype_mixes[0]; i++) {
        if (strcmp(hr_ftype_mixes[i].name, name) == 0) {
            *out = hr_ftype_mixes[i];
            return true;
        }
    }
    const int t = hr_type_by_name(name);
    if (t < 0 || !hr_type_get(t)->supported)
        return false;
    const bool small = hr_bits_per_weight(t) < hr_bits_per_weight(HR_TYPE_Q6_K);
    *out = (hr_ftype){name, t, t, small ? HR_TYPE_Q6_K : t, t, 0};
    return true;
}

/* "f32 f16 ... q4_k_m q5_k_m": the names hr_ftype_find accepts. */
static void hr_ftype_names(char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int t = 0; t < HR_TYPE_COUNT; t++) {
        const hr_type_traits *tt = hr_type_get(t);
        if (tt && tt->supported && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "", tt->name);
    }
    for (size_t i = 0; i < sizeof hr_ftype_mixes / sizeof hr_ftype_mixes[0] && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, " %s", hr_ftype_mixes[i].name);
    for (char *c = buf; *c; c++)
        *c = (char)tolower((unsigned char)*c);
}

static bool hr_use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static uint64_t hr_mk_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Approximately normal values (sum of 4 uniforms) with standard deviation std. */
static void hr_mk_fill(float *x, int64_t n, float std, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = hr_mk_rng(s);
        float u = 0.0f;
        for (int k = 0; k < 4; k++)
            u += (float)((r >> (16 * k)) & 0xFFFF) / 65535.0f;
        x[i] = (u - 2.0f) * 1.7320508f * std; /* var of sum of 4 U(0,1) = 1/3 */
    }
}

/* A tensor of n_mat matrices of n_out rows (n_mat 1: a matrix, or a
 * vector when n_out is 1). */
static int hr_mk_tensor(hr_gguf_writer *w, const char *name, int type, int64_t n_in, int64_t rows,
                        int64_t n_mat, float std, float constant, uint64_t *rng, char *err) {
    int64_t n_out = rows * n_mat;
    size_t rb = hr_type_row_bytes(type, n_in);
    if (rb == 0 && hr_type_get(type) && hr_type_get(type)->block_elems == 256) {
        /* rows shorter than a K-quant super-block: fall back as the usual
         * converters do (Q8_0 when 32 divides the row, else F16) */
        type = n_in % 32 == 0 ? HR_TYPE_Q8_0 : HR_TYPE_F16;
        rb = hr_type_row_bytes(type, n_in);
    }
    if (rb == 0)
        return hr_seterr(err, HR_EINVAL, "tensor %s: %lld columns do not fit type %s", name,
                         (long long)n_in, hr_type_name(type));
    void *buf = malloc(rb * (size_t)n_out);
    if (!buf)
        return hr_seterr(err, HR_ENOMEM, "out of memory for tensor %s", name);
    /* each row has its own RNG stream, so rows quantize in parallel and the
     * file does not depend on the thread count */
    uint64_t base = hr_mk_rng(rng);
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        float *row = malloc((size_t)n_in * sizeof(float));
        if (!row)
            oom = 1;
#pragma omp for schedule(dynamic, 16)
        for (int64_t r = 0; r < n_out; r++) {
            if (!row)
                continue;
            uint64_t st = base ^ ((uint64_t)r * 0xD1B54A32D192ED03ull);
            if (std > 0.0f)
                hr_mk_fill(row, n_in, std, &st);
            for (int64_t i = 0; (std <= 0.0f || constant != 0.0f) && i < n_in; i++)
                row[i] = std > 0.0f ? row[i] + constant : constant;
            hr_quantize_row(type, row, (char *)buf + (size_t)r * rb, n_in);
        }
        free(row);
    }
    if (oom) {
        free(buf);
        return hr_seterr(err, HR_ENOMEM, "out of memory for tensor %s", name);
    }
    int64_t ne[3] = {n_in, rows, n_mat};
    int rc = hr_gguf_writer_add_tensor(w, name, type,
                                       n_mat > 1    ? 3
                                       : n_out == 1 ? 1
                                                    : 2,
                                       ne, buf, rb * (size_t)n_out);
    free(buf);
    if (rc)
        return hr_seterr(err, rc, "cannot add tensor %s", name);
    return 0;
}

/* A byte-fallback SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte
 * tokens, single printable ASCII pieces, then filler pieces. */
static int hr_mk_vocab(hr_gguf_writer *w, int n_vocab, char *err) {
    if (n_vocab < 3 + 256 + 95)
        return hr_seterr(err, HR_EINVAL, "synthetic vocabulary needs >= 354 tokens, got %d",
                         n_vocab);
    char **toks = calloc((size_t)n_vocab, sizeof *toks);
    float *scores = malloc((size_t)n_vocab * sizeof *scores);
    int32_t *types = malloc((size_t)n_vocab * sizeof *types);
    int rc = 0;
    if (!toks || !scores || !types) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory for vocabulary");
        goto done;
    }
    for (int i = 0; i < n_vocab; i++) {
        char buf[32];
        if (i == 0)
            snprintf(buf, sizeof buf, "<unk>");
        else if (i == 1)
            snprintf(buf, sizeof buf, "<s>");
        else if (i == 2)
            snprintf(buf, sizeof buf, "</s>");
        else if (i < 259)
            snprintf(buf, sizeof buf, "<0x%02X>", i - 3);
        else if (i < 259 + 95)
            snprintf(buf, sizeof buf, "%c", (char)(' ' + (i - 259)));
        else
            snprintf(buf, sizeof buf, "\xe2\x96\x81w%d", i);
        if (i == 259)
            snprintf(buf, sizeof buf, "\xe2\x96\x81"); /* the space piece */
        toks[i] = strdup(buf);
        if (!toks[i]) {
            rc = hr_seterr(err, HR_ENOMEM, "out of memory for vocabulary");
            goto done;
        }
        scores[i] = i < 259 ? 0.0f : -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    if ((rc = hr_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (rc = hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks,
                                         (uint64_t)n_vocab)) ||
        (rc = hr_gguf_writer_set_arr(w, "tokenizer.ggml.scores", HR_GGUF_FLOAT32, scores,
                                     (uint64_t)n_vocab)) ||
        (rc = hr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HR_GGUF_INT32, types,
                                     (uint64_t)n_vocab)) ||
        (rc = hr_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (rc = hr_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (rc = hr_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)))
        hr_seterr(err, rc, "cannot write vocabulary");
done:
    for (int i = 0; toks && i < n_vocab; i++)
        free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return rc;
}

/* How layer il's tensor t (n_in columns) is made: vectors are f32, norms
 * 1 (1 + N(0, norm_std)) and biases small; matrices ~ N(0, 1/n_in) in the
 * file type, with attn_v / ffn_down on the "more bits" layers as
 * llama.cpp's K_M mixes. */
static void hr_mk_layer_fill(const hr_layer_tensor *t, const hr_ftype *ft, int il, int n_layer,
                             int64_t n_in, float norm_std, bool oai, int *type, float *std,
                             float *c) {
    bool bias = strstr(t->name, ".bias") != NULL;
    if (t->set & (HR_LT_OUT_BIAS | HR_LT_MOE_BIAS | HR_LT_SINKS)) {
        /* gpt-oss's biases and sinks: large enough to move routes and
         * attention (the experts' biases are a matrix of one row each) */
        *type = HR_TYPE_F32;
        *std = bias ? 0.2f : 1.0f;
        *c = 0.0f;
        return;
    }
    if (t->n_out == HR_DIM_1) {
        bool gate = strstr(t->name, "gate_inp") != NULL; /* the shared expert's gate */
        *type = HR_TYPE_F32;
        *std = bias ? 0.02f : gate ? 1.0f / sqrtf((float)n_in) : norm_std;
        *c = bias || gate ? 0.0f : 1.0f;
        return;
    }
    if (strcmp(t->name, "ffn_gate_inp.weight") ==
        0) { /* routers stay f32, as converters keep them */
        *type = HR_TYPE_F32;
        *std = 1.0f / sqrtf((float)n_in);
        *c = 0.0f;
        return;
    }
    bool mixed = strcmp(t->name, "attn_v.weight") == 0 || strncmp(t->name, "ffn_down", 8) == 0;
    *type = mixed && hr_use_more_bits(il, n_layer) ? ft->more_bits : ft->base;
    if (t->experts && ft->experts)
        *type = ft->experts;
    *std = 1.0f / sqrtf((float)n_in);
    /* gpt-oss's experts: gate and up wide enough that its clamp at 7 acts */
    if (oai && t->experts && t->n_in == HR_DIM_EMBD)
        *std *= 3.0f;
    *c = 0.0f;
}

static bool hr_mk_has(unsigned sets, const hr_layer_tensor *t) {
    return t->set == 0 || (sets & t->set) != 0;
}

int hr_mkmodel_write(const hr_mkmodel_params *p, const char *path, hr_mkmodel_progress cb, void *ud,
                     char err[HR_ERR_LEN]) {
    hr_ftype ftype;
    if (!p->ftype || !hr_ftype_find(p->ftype, &ftype)) {
        char names[256];
        hr_ftype_names(names, sizeof names);
        return hr_seterr(err, HR_EINVAL, "unknown type '%s' (%s)", p->ftype ? p->ftype : "", names);
    }
    const hr_ftype *ft = &ftype;
    const hr_arch_info *arch = hr_arch_find(p->arch);
    if (!arch) {
        char names[128];
        hr_arch_names(names, sizeof names);
        return hr_seterr(err, HR_EUNSUPPORTED, "mkmodel writes %s, not '%s'", names, p->arch);
    }
    if (arch->moe && p->n_expert <= 0)
        return hr_seterr(err, HR_EINVAL, "%s needs experts (--experts N --experts-used K)",
                         p->arch);
    if ((arch->flags & HR_ARCH_DENSE) && p->n_expert > 0)
        return hr_seterr(err, HR_EINVAL, "%s has no experts", p->arch);
    if (p->n_expert > 0 &&
        (p->n_expert_used < 1 || p->n_expert_used > p->n_expert ||
         (arch->moe && p->n_ff_exp <= 0) || ((arch->sets & HR_LT_SHEXP) && p->n_ff_shexp <= 0)))
        return hr_seterr(err, HR_EINVAL, "invalid experts: %d, %d used, expert ffn %d, shared %d",
                         p->n_expert, p->n_expert_used, p->n_ff_exp, p->n_ff_shexp);
    if (p->n_embd <= 0 || p->n_layer <= 0 || p->n_head <= 0 || p->n_head_kv <= 0 || p->n_ff <= 0 ||
        p->n_vocab <= 0 || (p->head_dim <= 0 && p->n_embd % p->n_head) ||
        p->n_head % p->n_head_kv || p->head_dim < 0 || p->head_dim % 2 || p->n_swa < 0 ||
        p->swa_pattern < 0)
        return hr_seterr(err, HR_EINVAL,
                         "invalid shape: embd %d layers %d heads %d/%d of %d ffn %d vocab %d "
                         "window %d pattern %d",
                         p->n_embd, p->n_layer, p->n_head, p->n_head_kv, p->head_dim, p->n_ff,
                         p->n_vocab, p->n_swa, p->swa_pattern);
    const char *A = p->arch;
    int E = p->n_embd, D = p->head_dim > 0 ? p->head_dim : E / p->n_head;
    hr_gguf_writer *w = hr_gguf_writer_create();
    if (!w)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    int rc = 0;
    char key[128];
#define HR_KEY(s) (snprintf(key, sizeof key, "%s.%s", A, s), key)
    hr_gguf_writer_set_str(w, "general.architecture", A);
    hr_gguf_writer_set_str(w, "general.name", "hearth random-weight model");
    hr_gguf_writer_set_u32(w, HR_KEY("context_length"), (uint32_t)(p->n_ctx > 0 ? p->n_ctx : 2048));
    hr_gguf_writer_set_u32(w, HR_KEY("embedding_length"), (uint32_t)E);
    hr_gguf_writer_set_u32(w, HR_KEY("block_count"), (uint32_t)p->n_layer);
    /* llama's experts are feed_forward_length rows each */
    int n_ff_exp = p->n_expert > 0 && !arch->moe ? p->n_ff : p->n_ff_exp;
    hr_gguf_writer_set_u32(w, HR_KEY("feed_forward_length"), (uint32_t)p->n_ff);
    if (p->n_expert > 0) {
        hr_gguf_writer_set_u32(w, HR_KEY("expert_count"), (uint32_t)p->n_expert);
        hr_gguf_writer_set_u32(w, HR_KEY("expert_used_count"), (uint32_t)p->n_expert_used);
        if (arch->moe)
            hr_gguf_writer_set_u32(w, HR_KEY("expert_feed_forward_length"), (uint32_t)n_ff_exp);
        if (arch->sets & HR_LT_SHEXP)
            hr_gguf_writer_set_u32(w, HR_KEY("expert_shared_feed_forward_length"),
                                   (uint32_t)p->n_ff_shexp);
    }
    hr_gguf_writer_set_u32(w, HR_KEY("attention.head_count"), (uint32_t)p->n_head);
    hr_gguf_writer_set_u32(w, HR_KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    if (D * p->n_head != E) {
        hr_gguf_writer_set_u32(w, HR_KEY("attention.key_length"), (uint32_t)D);
        hr_gguf_writer_set_u32(w, HR_KEY("attention.value_length"), (uint32_t)D);
    }
    hr_gguf_writer_set_u32(w, HR_KEY("rope.dimension_count"), (uint32_t)D);
    hr_gguf_writer_set_f32(w, HR_KEY("attention.layer_norm_rms_epsilon"), arch->rms_eps);
    hr_gguf_writer_set_f32(w, HR_KEY("rope.freq_base"),
                           p->rope_base > 0 ? p->rope_base : arch->rope_base);
    if (p->rope_factor > 0) {
        hr_gguf_writer_set_str(w, HR_KEY("rope.scaling.type"), p->yarn_ctx > 0 ? "yarn" : "linear");
        hr_gguf_writer_set_f32(w, HR_KEY("rope.scaling.factor"), p->rope_factor);
        if (p->yarn_ctx > 0)
            hr_gguf_writer_set_u32(w, HR_KEY("rope.scaling.original_context_length"),
                                   (uint32_t)p->yarn_ctx);
    }
    if ((arch->flags & HR_ARCH_SWA) && p->n_swa > 0) {
        hr_gguf_writer_set_u32(w, HR_KEY("attention.sliding_window"), (uint32_t)p->n_swa);
        if (p->swa_pattern > 0)
            hr_gguf_writer_set_u32(w, HR_KEY("attention.sliding_window_pattern"),
                                   (uint32_t)p->swa_pattern);
    }
#undef HR_KEY
    if (p->vocab_from) {
        hr_gguf *src = NULL;
        rc = hr_gguf_open(&src, p->vocab_from, err);
        if (rc)
            goto done;
        int64_t kv = hr_gguf_find_key(src, "tokenizer.ggml.tokens");
        if (kv < 0 || (int64_t)hr_gguf_arr_len(src, kv) != p->n_vocab) {
            rc = hr_seterr(err, HR_EINVAL, "%s: vocabulary has %lld tokens, model wants %d",
                           p->vocab_from, kv < 0 ? 0LL : (long long)hr_gguf_arr_len(src, kv),
                           p->n_vocab);
            hr_gguf_close(src);
            goto done;
        }
        rc = hr_gguf_writer_copy_kv(w, src, "tokenizer.");
        hr_gguf_close(src);
        if (rc) {
            hr_seterr(err, rc, "cannot copy tokenizer from %s", p->vocab_from);
            goto done;
        }
    } else if ((rc = hr_mk_vocab(w, p->n_vocab, err))) {
        goto done;
    }
    uint64_t rng = p->seed * 0x2545F4914F6CDD1Dull + 1;
    hr_hparams hp = {.arch = arch,
                     .n_embd = E,
                     .n_head = p->n_head,
                     .n_head_kv = p->n_head_kv,
                     .head_dim = D,
                     .n_ff = p->n_ff,
                     .n_expert = p->n_expert,
                     .n_expert_used = p->n_expert_used,
                     .n_ff_exp = n_ff_exp,
                     .n_ff_shexp = p->n_ff_shexp};
    unsigned sets, needs;
    hr_arch_layer_sets(arch, p->n_expert, &sets, &needs);
    int per_layer = 0, part;
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        const hr_layer_tensor *t = hr_layer_tensor_get(i);
        per_layer += hr_mk_has(sets, t) && (!hr_layer_fused_of(t, sets, &part) || part == 0);
    }
    int total = (p->tied ? 2 : 3) + p->n_layer * per_layer, done_n = 0;
#define HR_T(name, type, nin, nout, nmat, std, c)                                                  \
    do {                                                                                           \
        if ((rc = hr_mk_tensor(w, name, type, nin, nout, nmat, std, c, &rng, err)))                \
            goto done;                                                                             \
        if (cb)                                                                                    \
            cb(++done_n, total, ud);                                                               \
    } while (0)
    HR_T("token_embd.weight", ft->embd, E, p->n_vocab, 1, 1.0f, 0.0f);
    for (int il = 0; il < p->n_layer; il++) {
        for (int i = 0; i < hr_layer_tensor_count(); i++) {
            const hr_layer_tensor *t = hr_layer_tensor_get(i);
            /* a fused tensor in place of its first part */
            const hr_layer_fused *f = hr_layer_fused_of(t, sets, &part);
            if (!hr_mk_has(sets, t) || (f && part > 0))
                continue;
            int64_t n_in = hr_dim_size(&hp, t->n_in);
            int64_t n_out = f ? hr_layer_fused_rows(f, &hp) : hr_dim_size(&hp, t->n_out);
            int64_t n_mat = t->experts ? p->n_expert : 1;
            int type;
            float std, c;
            hr_mk_layer_fill(t, ft, il, p->n_layer, n_in, p->norm_std,
                             (arch->flags & HR_ARCH_OAI) != 0, &type, &std, &c);
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.%s", il, f ? f->name : hr_layer_tensor_name(t, &hp));
            HR_T(nm, type, n_in, n_out, n_mat, std, c);
        }
    }
    float s_in = 1.0f / sqrtf((float)E);
    HR_T("output_norm.weight", HR_TYPE_F32, E, 1, 1, p->norm_std, 1.0f);
    if (!p->tied)
        HR_T("output.weight", ft->output, E, p->n_vocab, 1, s_in, 0.0f);
#undef HR_T
    rc = hr_gguf_writer_write(w, path, err);
done:
    hr_gguf_writer_destroy(w);
    return rc;
}
