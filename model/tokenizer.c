/* tokenizer.c - vocabulary loading from GGUF metadata, special-token
 * splitting, encode dispatch (SPM in tokenizer_spm.c, BPE in
 * tokenizer_bpe.c) and decoding, including the streaming detokenizer.
 * Behaviour follows llama.cpp's llama-vocab.cpp so that ids match it. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/tokenizer-impl.h"

#define TAG "tokenizer"

/* ---- small helpers ---- */

int hr_tok_ids_push(hr_tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof(*v));
        if (!v)
            return HR_ENOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

static uint32_t str_hash(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return (uint32_t)(h ^ (h >> 32));
}

int32_t hr_tok_lookup(const hr_tokenizer *t, const char *s, size_t len) {
    for (uint32_t i = str_hash(s, len) & t->tok_hash_mask;; i = (i + 1) & t->tok_hash_mask) {
        int32_t id = t->tok_hash[i];
        if (id < 0)
            return -1;
        const hr_tok_entry *e = &t->tok[id];
        if (e->len == len && memcmp(t->text + e->off, s, len) == 0)
            return id;
    }
}

static const char *tok_str(const hr_tokenizer *t, int32_t id) { return t->text + t->tok[id].off; }

/* ---- loading ---- */

/* Reads an optional token-id key; out of range ids are an error. */
static int read_id(const hr_gguf *g, const char *key, int32_t n_vocab, int32_t *id,
                   char err[HR_ERR_LEN]) {
    int64_t v;
    int rc = hr_gguf_get_i64(g, key, &v);
    if (rc == HR_ENOENT)
        return 0;
    if (rc)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s is not an integer", key);
    if (v < 0 || v >= n_vocab)
        return hr_seterr(err, HR_ERANGE,
                         "tokenizer: %s = %lld is not a token id (the vocabulary has %d tokens)",
                         key, (long long)v, (int)n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int read_bool(const hr_gguf *g, const char *key, bool *out, char err[HR_ERR_LEN]) {
    int rc = hr_gguf_get_bool(g, key, out);
    if (rc == HR_ENOENT)
        return 0;
    if (rc)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s is not a bool", key);
    return 0;
}

/* Finds an array key; HR_ENOENT if absent, else checks its element type
 * class (strings or numbers) and length. */
static int find_array(const hr_gguf *g, const char *key, bool strings, int64_t *kv, uint64_t *len,
                      char err[HR_ERR_LEN]) {
    *kv = hr_gguf_find_key(g, key);
    if (*kv < 0)
        return HR_ENOENT;
    if (hr_gguf_kv_type(g, *kv) != HR_GGUF_ARRAY)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s is not an array", key);
    hr_gguf_vtype et = hr_gguf_arr_type(g, *kv);
    bool is_str = et == HR_GGUF_STRING;
    bool is_num = et != HR_GGUF_STRING && et != HR_GGUF_ARRAY;
    if (strings ? !is_str : !is_num)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s is not an array of %s", key,
                         strings ? "strings" : "numbers");
    *len = hr_gguf_arr_len(g, *kv);
    return 0;
}

static int load_tokens(hr_tokenizer *t, const hr_gguf *g, char err[HR_ERR_LEN]) {
    static const char *key = "tokenizer.ggml.tokens";
    int64_t kv;
    uint64_t n;
    int rc = find_array(g, key, true, &kv, &n, err);
    if (rc == HR_ENOENT)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: missing %s", key);
    if (rc)
        return rc;
    if (n == 0)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s is empty", key);
    if (n > (uint64_t)INT32_MAX / 4)
        return hr_seterr(err, HR_ERANGE, "tokenizer: %s has too many entries (%llu)", key,
                         (unsigned long long)n);
    t->n_vocab = (int32_t)n;
    t->tok = calloc(n, sizeof(*t->tok));
    if (!t->tok)
        return hr_seterr(err, HR_ENOMEM, "tokenizer: no memory for %llu tokens",
                         (unsigned long long)n);

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        rc = hr_gguf_arr_str(g, kv, i, &s, &len);
        if (rc)
            return hr_seterr(err, rc, "tokenizer: cannot read %s[%llu]", key,
                             (unsigned long long)i);
        if (len > (size_t)INT32_MAX / 4 || total + len + 1 > UINT32_MAX)
            return hr_seterr(err, HR_ERANGE, "tokenizer: %s[%llu] makes the vocabulary too large",
                             key, (unsigned long long)i);
        if (!hr_utf8_valid(s, len))
            return hr_seterr(err, HR_EFORMAT, "tokenizer: %s[%llu] is not valid UTF-8", key,
                             (unsigned long long)i);
        t->tok[i].off = (uint32_t)total;
        t->tok[i].len = (uint32_t)len;
        t->tok[i].type = HR_TOKEN_NORMAL;
        total += len + 1;
    }
    t->text = malloc(total);
    if (!t->text)
        return hr_seterr(err, HR_ENOMEM, "tokenizer: no memory for %zu bytes of tokens", total);
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        hr_gguf_arr_str(g, kv, i, &s, &len);
        memcpy(t->text + t->tok[i].off, s, len);
        t->text[t->tok[i].off + len] = '\0';
    }

    /* token text -> id; a duplicate string maps to its last id (llama.cpp). */
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap *= 2;
    t->tok_hash = malloc((size_t)cap * sizeof(*t->tok_hash));
    if (!t->tok_hash)
        return hr_seterr(err, HR_ENOMEM, "tokenizer: no memory for the token hash");
    memset(t->tok_hash, 0xff, (size_t)cap * sizeof(*t->tok_hash));
    t->tok_hash_mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const hr_tok_entry *e = &t->tok[id];
        if (e->len == 0)
            continue; /* never produced by encoding */
        uint32_t i = str_hash(t->text + e->off, e->len) & t->tok_hash_mask;
        for (;; i = (i + 1) & t->tok_hash_mask) {
            int32_t o = t->tok_hash[i];
            if (o < 0 || (t->tok[o].len == e->len &&
                          memcmp(t->text + t->tok[o].off, t->text + e->off, e->len) == 0))
                break;
        }
        t->tok_hash[i] = id;
    }
    return 0;
}

static int load_scores_types(hr_tokenizer *t, const hr_gguf *g, char err[HR_ERR_LEN]) {
    int64_t kv;
    uint64_t n;
    const char *key = "tokenizer.ggml.scores";
    int rc = find_array(g, key, false, &kv, &n, err);
    if (rc == 0) {
        if (n != (uint64_t)t->n_vocab)
            return hr_seterr(err, HR_EFORMAT, "tokenizer: %s has %llu entries for %d tokens", key,
                             (unsigned long long)n, (int)t->n_vocab);
        for (uint64_t i = 0; i < n; i++) {
            double v;
            if (hr_gguf_arr_f64(g, kv, i, &v))
                return hr_seterr(err, HR_EFORMAT, "tokenizer: cannot read %s[%llu]", key,
                                 (unsigned long long)i);
            t->tok[i].score = (float)v;
        }
    } else if (rc != HR_ENOENT) {
        return rc;
    } else if (t->kind == HR_TOK_SPM) {
        HR_LOG_WARN(TAG, "no %s: all SPM merges score 0", key);
    }

    key = "tokenizer.ggml.token_type";
    rc = find_array(g, key, false, &kv, &n, err);
    if (rc == HR_ENOENT)
        return 0;
    if (rc)
        return rc;
    if (n != (uint64_t)t->n_vocab)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s has %llu entries for %d tokens", key,
                         (unsigned long long)n, (int)t->n_vocab);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if (hr_gguf_arr_i64(g, kv, i, &v))
            return hr_seterr(err, HR_EFORMAT, "tokenizer: cannot read %s[%llu]", key,
                             (unsigned long long)i);
        if (v < HR_TOKEN_UNDEFINED || v > HR_TOKEN_BYTE)
            return hr_seterr(err, HR_EFORMAT, "tokenizer: %s[%llu] = %lld is not a token type", key,
                             (unsigned long long)i, (long long)v);
        t->tok[i].type = (uint8_t)v;
    }
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int setup_bytes(hr_tokenizer *t, char err[HR_ERR_LEN]) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t n;
        if (t->kind == HR_TOK_SPM) {
            snprintf(s, sizeof(s), "<0x%02X>", b);
            n = 6;
        } else {
            n = (size_t)hr_utf8_put(hr_bytelevel_cpt((unsigned char)b), s);
        }
        t->byte_tok[b] = hr_tok_lookup(t, s, n);
    }
    if (t->kind != HR_TOK_SPM)
        return 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->tok[id].type != HR_TOKEN_BYTE)
            continue;
        const char *s = tok_str(t, id);
        int hi = t->tok[id].len == 6 ? hexval(s[3]) : -1, lo = hi >= 0 ? hexval(s[4]) : -1;
        if (hi < 0 || lo < 0 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
            return hr_seterr(err, HR_EFORMAT,
                             "tokenizer: token %d has type BYTE but its text \"%.32s\" is not "
                             "<0xNN>",
                             (int)id, s);
        t->tok[id].byte = (uint8_t)(hi * 16 + lo);
    }
    return 0;
}

/* Token texts that end generation; they are treated as control tokens
 * (llama.cpp detects them by text the same way). */
static const char *const k_eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    /* "<｜end▁of▁sentence｜>" (split so the hex escape stops before "e") */
    ("<\xEF\xBD\x9C"
     "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
};
/* Infill markers: control, not end of generation. */
static const char *const k_control_texts[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"};
/* EOT candidates in order of preference when no eot_token_id key exists. */
static const char *const k_eot_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    /* "<｜end▁of▁sentence｜>" (split so the hex escape stops before "e") */
    ("<\xEF\xBD\x9C"
     "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),
    "<end_of_utterance>",
};

static void setup_eog(hr_tokenizer *t) {
    if (t->eot < 0) {
        for (size_t i = 0; i < sizeof(k_eot_texts) / sizeof(k_eot_texts[0]) && t->eot < 0; i++)
            t->eot = hr_tok_lookup(t, k_eot_texts[i], strlen(k_eot_texts[i]));
    }
    for (size_t i = 0; i < sizeof(k_eog_texts) / sizeof(k_eog_texts[0]); i++) {
        int32_t id = hr_tok_lookup(t, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (id < 0)
            continue;
        t->tok[id].flags |= HR_TOKF_EOG;
        if (t->tok[id].type != HR_TOKEN_CONTROL) {
            HR_LOG_DEBUG(TAG, "token %d '%s' treated as control", (int)id, k_eog_texts[i]);
            t->tok[id].type = HR_TOKEN_CONTROL;
        }
    }
    for (size_t i = 0; i < sizeof(k_control_texts) / sizeof(k_control_texts[0]); i++) {
        int32_t id = hr_tok_lookup(t, k_control_texts[i], strlen(k_control_texts[i]));
        if (id >= 0)
            t->tok[id].type = HR_TOKEN_CONTROL;
    }
    if (t->eos >= 0)
        t->tok[t->eos].flags |= HR_TOKF_EOG;
    if (t->eot >= 0)
        t->tok[t->eot].flags |= HR_TOKF_EOG;
    if (t->eom >= 0)
        t->tok[t->eom].flags |= HR_TOKF_EOG;
    /* gpt-oss (harmony): <|end|> closes the analysis channel in the middle
     * of a reply, which ends at <|return|> (or <|call|> for a tool) */
    int32_t end = hr_tok_lookup(t, "<|end|>", 7);
    if (end >= 0 && hr_tok_lookup(t, "<|return|>", 10) >= 0 && hr_tok_lookup(t, "<|call|>", 8) >= 0)
        t->tok[end].flags &= ~HR_TOKF_EOG;
}

static bool is_special_type(int type) {
    return type == HR_TOKEN_CONTROL || type == HR_TOKEN_USER_DEFINED || type == HR_TOKEN_UNKNOWN;
}

/* Indexes special tokens by first byte and length, and sets the strip
 * flags llama.cpp gives Phi-3's special tokens. */
static int setup_special(hr_tokenizer *t, const hr_gguf *g, char err[HR_ERR_LEN]) {
    memset(t->special_lens, 0, sizeof(t->special_lens));
    t->n_special = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const hr_tok_entry *e = &t->tok[id];
        if (!is_special_type(e->type) || e->len == 0 ||
            hr_tok_lookup(t, tok_str(t, id), e->len) != id)
            continue; /* (a duplicate string is only found as its last id) */
        t->n_special++;
        unsigned char c = (unsigned char)t->text[e->off];
        uint64_t bit = e->len < 64 ? (uint64_t)1 << e->len : 1;
        t->special_lens[1][c] |= bit;
        if (e->type == HR_TOKEN_USER_DEFINED)
            t->special_lens[0][c] |= bit;
        if (e->len < 64)
            continue;
        int32_t k = 0;
        while (k < t->n_long_lens && t->long_lens[k] != e->len)
            k++;
        if (k == t->n_long_lens) {
            uint32_t *v = realloc(t->long_lens, (size_t)(k + 1) * sizeof(*v));
            if (!v)
                return hr_seterr(err, HR_ENOMEM, "tokenizer: no memory");
            t->long_lens = v;
            t->long_lens[t->n_long_lens++] = e->len;
        }
    }

    const char *name = NULL;
    if (hr_gguf_get_str(g, "general.name", &name) == 0 && name) {
        char low[64];
        size_t i = 0;
        for (; name[i] && i + 1 < sizeof(low); i++)
            low[i] = (char)tolower((unsigned char)name[i]);
        low[i] = '\0';
        if (strstr(low, "phi-3") || strstr(low, "phi3")) {
            for (int32_t id = 0; id < t->n_vocab; id++) {
                const char *s = tok_str(t, id);
                if (is_special_type(t->tok[id].type) && strcmp(s, "<unk>") && strcmp(s, "<s>") &&
                    strcmp(s, "<|endoftext|>"))
                    t->tok[id].flags |= HR_TOKF_RSTRIP;
            }
        }
    }
    return 0;
}

int hr_tokenizer_create(hr_tokenizer **out, const hr_gguf *g, char err[HR_ERR_LEN]) {
    if (!out || !g)
        return hr_seterr(err, HR_EINVAL, "tokenizer: NULL argument");
    *out = NULL;

    const char *model = NULL;
    int rc = hr_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc == HR_ENOENT)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: missing tokenizer.ggml.model");
    if (rc)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: tokenizer.ggml.model is not a string");

    hr_tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return hr_seterr(err, HR_ENOMEM, "tokenizer: no memory");
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = -1;

    if (strcmp(model, "llama") == 0) {
        t->kind = HR_TOK_SPM;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else if (strcmp(model, "gpt2") == 0) {
        t->kind = HR_TOK_BPE;
        const char *pre = NULL;
        rc = hr_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        if (rc == HR_ENOENT) {
            HR_LOG_WARN(TAG, "no tokenizer.ggml.pre: using the \"default\" pre-tokenizer");
            pre = "default";
        } else if (rc) {
            rc = hr_seterr(err, HR_EFORMAT, "tokenizer: tokenizer.ggml.pre is not a string");
            goto fail;
        }
        if (hr_tok_bpe_pre_from_name(pre, &t->pre)) {
            rc = hr_seterr(err, HR_EUNSUPPORTED,
                           "tokenizer: unknown pre-tokenizer tokenizer.ggml.pre = \"%.64s\" "
                           "(supported: default, gpt-2, llama-bpe, qwen2, deepseek-llm, falcon "
                           "and aliases)",
                           pre);
            goto fail;
        }
        t->ignore_merges = t->add_bos = t->pre == HR_PRE_LLAMA3;
    } else {
        rc = hr_seterr(err, HR_EUNSUPPORTED,
                       "tokenizer: unsupported tokenizer.ggml.model \"%.64s\" (need \"llama\" "
                       "or \"gpt2\")",
                       model);
        goto fail;
    }

    if ((rc = load_tokens(t, g, err)) || (rc = load_scores_types(t, g, err)) ||
        (rc = setup_bytes(t, err)))
        goto fail;
    if (t->kind == HR_TOK_BPE &&
        ((rc = hr_tok_bpe_load_merges(t, g, err)) || (rc = hr_tok_bpe_compile(t, err))))
        goto fail;

    if (t->kind == HR_TOK_SPM) { /* llama.cpp's defaults, where they exist */
        t->bos = t->n_vocab > 1 ? 1 : -1;
        t->eos = t->n_vocab > 2 ? 2 : -1;
        t->unk = 0;
    }
    static const struct {
        const char *key;
        size_t field;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(hr_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(hr_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(hr_tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(hr_tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(hr_tokenizer, unk)},
        {"tokenizer.ggml.padding_token_id", offsetof(hr_tokenizer, pad)},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if ((rc = read_id(g, ids[i].key, t->n_vocab, (int32_t *)((char *)t + ids[i].field), err)))
            goto fail;
    if ((rc = read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) ||
        (rc = read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) ||
        (rc = read_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)))
        goto fail;

    setup_eog(t);
    if ((rc = setup_special(t, g, err)))
        goto fail;

    HR_LOG_DEBUG(TAG, "%s vocabulary: %d tokens, %d merges, %d special, bos %d eos %d eot %d",
                 t->kind == HR_TOK_SPM ? "SPM" : "BPE", (int)t->n_vocab, (int)t->n_merges,
                 (int)t->n_special, (int)t->bos, (int)t->eos, (int)t->eot);
    *out = t;
    return 0;

fail:
    hr_tokenizer_destroy(t);
    return rc;
}

void hr_tokenizer_destroy(hr_tokenizer *t) {
    if (!t)
        return;
    hr_tok_bpe_free(t);
    free(t->long_lens);
    free(t->merges);
    free(t->tok_hash);
    free(t->text);
    free(t->tok);
    free(t);
}

/* ---- accessors ---- */

int32_t hr_tokenizer_n_vocab(const hr_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t hr_tokenizer_bos(const hr_tokenizer *t) { return t ? t->bos : -1; }
int32_t hr_tokenizer_eos(const hr_tokenizer *t) { return t ? t->eos : -1; }
int32_t hr_tokenizer_eot(const hr_tokenizer *t) { return t ? t->eot : -1; }
int32_t hr_tokenizer_unk(const hr_tokenizer *t) { return t ? t->unk : -1; }
bool hr_tokenizer_add_bos(const hr_tokenizer *t) { return t && t->add_bos; }
bool hr_tokenizer_add_space_prefix(const hr_tokenizer *t) {
    return t && t->kind == HR_TOK_SPM && t->add_space_prefix;
}

bool hr_tokenizer_is_eog(const hr_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && (t->tok[id].flags & HR_TOKF_EOG);
}

int hr_tokenizer_token_type(const hr_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab)
        return HR_EINVAL;
    return t->tok[id].type;
}

const char *hr_tokenizer_token_text(const hr_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab)
        return NULL;
    return tok_str(t, id);
}

int32_t hr_tokenizer_find(const hr_tokenizer *t, const char *text) {
    if (!t || !text)
        return -1;
    return hr_tok_lookup(t, text, strlen(text));
}

/* ---- special-token splitting ---- */

typedef struct {
    size_t off, len;
    int32_t id; /* >= 0: a special token; -1: raw text [off, off + len) */
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} frags;

static int frags_push(frags *f, size_t off, size_t len, int32_t id) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag *v = realloc(f->v, cap * sizeof(*v));
        if (!v)
            return HR_ENOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (frag){off, len, id};
    return 0;
}

typedef struct {
    size_t pos;
    int32_t id;
    uint32_t len;
} occurrence;

typedef struct {
    occurrence *v;
    size_t n, cap;
} occurrences;

/* Records an occurrence if text[p .. p + l) is a special token that may be
 * matched under parse_special. */
static int try_special(const hr_tokenizer *t, const char *text, size_t len, size_t p, size_t l,
                       bool parse_special, occurrences *occ) {
    if (l > len - p)
        return 0;
    int32_t id = hr_tok_lookup(t, text + p, l);
    if (id < 0 || !is_special_type(t->tok[id].type) ||
        (!parse_special && t->tok[id].type != HR_TOKEN_USER_DEFINED))
        return 0;
    if (occ->n == occ->cap) {
        size_t nc = occ->cap ? occ->cap * 2 : 16;
        occurrence *v = realloc(occ->v, nc * sizeof(*v));
        if (!v)
            return HR_ENOMEM;
        occ->v = v;
        occ->cap = nc;
    }
    occ->v[occ->n++] = (occurrence){p, id, (uint32_t)l};
    return 0;
}

/* llama.cpp's priority: longer tokens first, then lower id, then leftmost. */
static int cmp_occ_priority(const void *a, const void *b) {
    const occurrence *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : (x->pos > y->pos);
}

static int cmp_occ_pos(const void *a, const void *b) {
    const occurrence *x = a, *y = b;
    return x->pos < y->pos ? -1 : (x->pos > y->pos);
}

static bool c_isspace(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Splits text into raw fragments and special tokens. User-defined tokens
 * always split; control and unknown tokens only with parse_special. Like
 * llama.cpp, higher-priority tokens claim their occurrences first and an
 * occurrence overlapping a claimed one is dropped. */
static int partition(const hr_tokenizer *t, const char *text, size_t len, bool parse_special,
                     frags *out) {
    occurrences oc = {0};
    unsigned char *claimed = NULL;
    int rc = 0;

    const uint64_t *lens = t->special_lens[parse_special ? 1 : 0];
    for (size_t p = 0; t->n_special > 0 && p < len && !rc; p++) {
        uint64_t mask = lens[(unsigned char)text[p]];
        for (uint64_t m = mask & ~(uint64_t)1; m && !rc; m &= m - 1)
            rc = try_special(t, text, len, p, (size_t)__builtin_ctzll(m), parse_special, &oc);
        for (int32_t k = 0; (mask & 1) && k < t->n_long_lens && !rc; k++)
            rc = try_special(t, text, len, p, t->long_lens[k], parse_special, &oc);
    }
    if (rc || oc.n == 0) {
        if (!rc && len)
            rc = frags_push(out, 0, len, -1);
        goto done;
    }

    occurrence *occ = oc.v;
    qsort(occ, oc.n, sizeof(*occ), cmp_occ_priority);
    claimed = calloc(len, 1);
    if (!claimed) {
        rc = HR_ENOMEM;
        goto done;
    }
    size_t n_keep = 0;
    for (size_t i = 0; i < oc.n; i++) {
        bool free_span = true;
        for (size_t j = 0; j < occ[i].len && free_span; j++)
            free_span = !claimed[occ[i].pos + j];
        if (!free_span)
            continue;
        memset(claimed + occ[i].pos, 1, occ[i].len);
        occ[n_keep++] = occ[i];
    }
    qsort(occ, n_keep, sizeof(*occ), cmp_occ_pos);

    size_t start = 0; /* raw text after the previous token */
    bool rstrip = false;
    for (size_t i = 0; i <= n_keep && !rc; i++) {
        size_t end = i < n_keep ? occ[i].pos : len;
        if (rstrip)
            while (start < end && c_isspace(text[start]))
                start++;
        if (i < n_keep && (t->tok[occ[i].id].flags & HR_TOKF_LSTRIP))
            while (end > start && c_isspace(text[end - 1]))
                end--;
        if (end > start)
            rc = frags_push(out, start, end - start, -1);
        if (i < n_keep && !rc) {
            rc = frags_push(out, occ[i].pos, occ[i].len, occ[i].id);
            start = occ[i].pos + occ[i].len;
            rstrip = (t->tok[occ[i].id].flags & HR_TOKF_RSTRIP) != 0;
        }
    }

done:
    free(claimed);
    free(oc.v);
    return rc;
}

/* ---- encoding ---- */

int hr_tokenizer_encode(const hr_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t *ids, int cap, int *n) {
    if (!t || (!text && len) || !n || cap < 0 || (!ids && cap > 0))
        return HR_EINVAL;
    *n = 0;
    hr_tok_ids out = {0};
    frags fr = {0};
    int rc = 0;

    if (add_bos && t->bos >= 0)
        rc = hr_tok_ids_push(&out, t->bos);
    if (!rc)
        rc = partition(t, text, len, parse_special, &fr);

    bool prev_special = true; /* SPM: space prefix at the start and after specials */
    for (size_t i = 0; i < fr.n && !rc; i++) {
        const frag *f = &fr.v[i];
        if (f->id >= 0) {
            rc = hr_tok_ids_push(&out, f->id);
            prev_special = true;
        } else if (t->kind == HR_TOK_SPM) {
            rc = hr_tok_spm_encode(t, text + f->off, f->len, t->add_space_prefix && prev_special,
                                   &out);
            prev_special = false;
        } else {
            rc = hr_tok_bpe_encode(t, text + f->off, f->len, &out);
        }
    }
    if (!rc && out.n > (size_t)INT_MAX)
        rc = HR_ERANGE;
    if (!rc) {
        size_t k = out.n < (size_t)cap ? out.n : (size_t)cap;
        if (k)
            memcpy(ids, out.v, k * sizeof(*ids));
        *n = (int)out.n;
    }
    free(fr.v);
    free(out.v);
    return rc;
}

/* ---- decoding ---- */

/* Output cursor for a piece: bytes at logical positions < skip are
 * dropped, the rest written while they fit in cap; n counts them all. */
typedef struct {
    char *buf;
    size_t cap, skip, n;
} sink;

static void sink_put(sink *o, const char *p, size_t k) {
    for (size_t i = 0; i < k; i++, o->n++) {
        if (o->n >= o->skip && o->n - o->skip < o->cap)
            o->buf[o->n - o->skip] = p[i];
    }
}

/* Writes the piece of id, minus its first skip bytes, into buf (what fits
 * of cap); returns the piece's length minus skip. */
static size_t piece(const hr_tokenizer *t, int32_t id, bool show_special, size_t skip, char *buf,
                    size_t cap) {
    const hr_tok_entry *e = &t->tok[id];
    const char *s = t->text + e->off;
    sink o = {buf, cap, skip, 0};
    int type = e->type;
    if (type == HR_TOKEN_BYTE && t->kind != HR_TOK_SPM)
        type = HR_TOKEN_NORMAL; /* BPE byte tokens are spelled in the byte alphabet */

    switch (type) {
    case HR_TOKEN_BYTE:
        sink_put(&o, (const char *)&e->byte, 1);
        break;
    case HR_TOKEN_CONTROL:
    case HR_TOKEN_UNKNOWN:
        if (show_special)
            sink_put(&o, s, e->len);
        break;
    case HR_TOKEN_USER_DEFINED:
        if (t->kind != HR_TOK_SPM) {
            sink_put(&o, s, e->len);
            break;
        }
        /* an SPM vocabulary's own pieces (gemma3's runs of spaces) spell a
         * space as U+2581 like its normal ones */
        __attribute__((fallthrough));
    case HR_TOKEN_NORMAL:
        if (t->kind == HR_TOK_SPM) {
            for (size_t i = 0; i < e->len;) {
                if (e->len - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                    sink_put(&o, " ", 1);
                    i += 3;
                } else {
                    sink_put(&o, s + i, 1);
                    i++;
                }
            }
        } else {
            for (size_t i = 0; i < e->len;) {
                size_t at = i;
                int b = hr_bytelevel_byte(hr_utf8_next(s, e->len, &i));
                if (b >= 0) {
                    char c = (char)b;
                    sink_put(&o, &c, 1);
                } else {
                    sink_put(&o, s + at, i - at); /* outside the alphabet: keep as is */
                }
            }
        }
        break;
    default: /* unused, undefined */
        break;
    }
    return o.n > skip ? o.n - skip : 0;
}

/* 1 if the piece of id starts with the space SPM prepends, else 0. */
static size_t leading_space(const hr_tokenizer *t, int32_t id, bool show_special) {
    char c;
    return piece(t, id, show_special, 0, &c, 1) > 0 && c == ' ';
}

int hr_tokenizer_piece(const hr_tokenizer *t, int32_t id, bool show_special, char *buf,
                       size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab || (!buf && cap))
        return HR_EINVAL;
    size_t n = piece(t, id, show_special, 0, buf, cap);
    if (n < cap)
        buf[n] = '\0';
    return (int)n; /* token strings are < INT32_MAX / 4 bytes */
}

int hr_tokenizer_decode(const hr_tokenizer *t, const int32_t *ids, int n, bool show_special,
                        bool strip_leading_space, char *buf, size_t cap) {
    if (!t || n < 0 || (!ids && n) || (!buf && cap))
        return HR_EINVAL;
    bool strip = strip_leading_space && hr_tokenizer_add_space_prefix(t);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return HR_EINVAL;
        size_t skip = 0;
        if (strip) {
            if (piece(t, ids[i], show_special, 0, NULL, 0) == 0)
                continue; /* empty pieces do not count as the first */
            skip = leading_space(t, ids[i], show_special);
            strip = false;
        }
        size_t room = total < cap ? cap - total : 0;
        size_t k = piece(t, ids[i], show_special, skip, room ? buf + total : NULL, room);
        if (total + k > (size_t)INT_MAX)
            return HR_ERANGE;
        total += k;
    }
    if (total < cap)
        buf[total] = '\0';
    return (int)total;
}

void hr_detok_init(hr_detok *d, bool strip_leading_space) {
    memset(d, 0, sizeof(*d));
    d->first = true;
    d->strip_leading_space = strip_leading_space;
}

static const char k_replacement[3] = {'\xEF', '\xBF', '\xBD'}; /* U+FFFD */

int hr_detok_push(hr_detok *d, const hr_tokenizer *t, int32_t id, char *out, size_t cap) {
    if (!d || !t || id < 0 || id >= t->n_vocab || (!out && cap) || d->n_pending < 0 ||
        d->n_pending > 3)
        return HR_EINVAL;
    char local[256];
    size_t np = (size_t)d->n_pending;
    memcpy(local, d->pending, np);
    char *s = local;
    size_t k = piece(t, id, false, 0, local + np, sizeof(local) - np);
    if (np + k > sizeof(local)) { /* a long token: rare */
        s = malloc(np + k);
        if (!s)
            return HR_ENOMEM;
        memcpy(s, d->pending, np);
        piece(t, id, false, 0, s + np, k);
    }
    size_t total = np + k, i = 0, w = 0;
    bool first = d->first;
    int rc = 0;
    if (k > 0 && first) {
        if (d->strip_leading_space && hr_tokenizer_add_space_prefix(t) && s[np] == ' ') {
            memmove(s + np, s + np + 1, k - 1);
            total--;
        }
        first = false;
    }
    while (i < total) {
        int q = hr_utf8_seq((const unsigned char *)s + i, total - i);
        if (q == 0)
            break; /* incomplete character at the end: hold it back */
        const char *src = q > 0 ? s + i : k_replacement;
        size_t m = q > 0 ? (size_t)q : 3;
        if (w + m > cap) {
            rc = HR_ERANGE;
            break;
        }
        memcpy(out + w, src, m);
        w += m;
        i += q > 0 ? (size_t)q : 1;
    }
    if (!rc) {
        d->n_pending = (int)(total - i);
        memcpy(d->pending, s + i, total - i);
        d->first = first;
    }
    if (s != local)
        free(s);
    return rc ? rc : (int)w;
}

int hr_detok_flush(hr_detok *d, char *out, size_t cap) {
    if (!d || (!out && cap))
        return HR_EINVAL;
    if (d->n_pending <= 0)
        return 0;
    if (cap < 3)
        return HR_ERANGE;
    memcpy(out, k_replacement, 3);
    d->n_pending = 0;
    return 3;
}
