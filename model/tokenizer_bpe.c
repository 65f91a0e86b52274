/* tokenizer_bpe.c - byte-level BPE ("gpt2" tokenizers), llama.cpp-compatible.
 *
 * Encoding a fragment: (1) malformed UTF-8 becomes U+FFFD; (2) the
 * pre-tokenizer's regexes (PCRE2, UTF + Unicode properties) split the text
 * into words, each regex refining the pieces left by the previous one,
 * keeping both matches and the gaps between them; (3) each word's bytes
 * become GPT-2 byte-level symbols and the adjacent pair with the lowest
 * merge rank is merged until no rule applies (ties: leftmost first).
 * Cost: O(n log n) per word; the regexes are linear on ordinary text. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/tokenizer-impl.h"

#define TAG "tokenizer"

/* ---- pre-tokenizers ---- */

static const struct {
    const char *name;
    hr_tok_pre pre;
} k_pre_names[] = {
    {"default", HR_PRE_DEFAULT},
    {"gpt-2", HR_PRE_GPT2},
    {"phi-2", HR_PRE_GPT2},
    {"jina-es", HR_PRE_GPT2},
    {"jina-de", HR_PRE_GPT2},
    {"jina-v2-es", HR_PRE_GPT2},
    {"jina-v2-de", HR_PRE_GPT2},
    {"llama-bpe", HR_PRE_LLAMA3},
    {"llama3", HR_PRE_LLAMA3},
    {"llama-v3", HR_PRE_LLAMA3},
    {"falcon3", HR_PRE_LLAMA3},
    {"qwen2", HR_PRE_QWEN2},
    {"deepseek-r1-qwen", HR_PRE_QWEN2},
    {"deepseek-llm", HR_PRE_DEEPSEEK_LLM},
    {"falcon", HR_PRE_FALCON},
    {"gpt-4o", HR_PRE_GPT4O},
    {"o200k", HR_PRE_GPT4O},
};

int hr_tok_bpe_pre_from_name(const char *name, hr_tok_pre *out) {
    for (size_t i = 0; i < sizeof(k_pre_names) / sizeof(k_pre_names[0]); i++) {
        if (strcmp(name, k_pre_names[i].name) == 0) {
            *out = k_pre_names[i].pre;
            return 0;
        }
    }
    return HR_EUNSUPPORTED;
}

/* The regexes are llama.cpp's, written with \x{...} escapes. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3_HEAD                                                                             \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const k_re_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+",
                                           "[0-9][0-9][0-9]", NULL};
static const char *const k_re_gpt2[] = {RE_GPT2, NULL};
static const char *const k_re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]",
                                          NULL};
static const char *const k_re_llama3[] = {RE_LLAMA3_HEAD "\\p{N}{1,3}|" RE_LLAMA3_TAIL, NULL};
static const char *const k_re_qwen2[] = {RE_LLAMA3_HEAD "\\p{N}|" RE_LLAMA3_TAIL, NULL};
static const char *const k_re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{00B5}\\x{00C0}-\\x{00D6}\\x{00D8}-\\x{00F6}\\x{00F8}-\\x{01BA}\\x{01BC}-"
    "\\x{01BF}\\x{01C4}-\\x{0293}\\x{0295}-\\x{02AF}\\x{0370}-\\x{0373}\\x{0376}\\x{0377}"
    "\\x{037B}-\\x{037D}\\x{037F}\\x{0386}\\x{0388}-\\x{038A}\\x{038C}\\x{038E}-\\x{03A1}"
    "\\x{03A3}-\\x{03F5}\\x{03F7}-\\x{0481}\\x{048A}-\\x{052F}\\x{0531}-\\x{0556}\\x{10A0}-"
    "\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-"
    "\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}"
    "\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-"
    "\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-"
    "\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-"
    "\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
    "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
    NULL,
};

/* o200k: words of a case run (an upper-case run, then lower-case letters,
 * or lower-case letters), each with an optional English contraction in any
 * case; numbers of up to 3 digits; punctuation runs with trailing newlines
 * or slashes; newline runs; other white space */
#define RE_O200K_L "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_O200K_S "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_O200K_C "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
static const char *const k_re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" RE_O200K_L "*" RE_O200K_S "+" RE_O200K_C
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_O200K_L "+" RE_O200K_S "*" RE_O200K_C
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};

static const char *const *regexes_for(hr_tok_pre pre) {
    switch (pre) {
    case HR_PRE_GPT2:
        return k_re_gpt2;
    case HR_PRE_LLAMA3:
        return k_re_llama3;
    case HR_PRE_QWEN2:
        return k_re_qwen2;
    case HR_PRE_DEEPSEEK_LLM:
        return k_re_deepseek_llm;
    case HR_PRE_FALCON:
        return k_re_falcon;
    case HR_PRE_GPT4O:
        return k_re_gpt4o;
    case HR_PRE_DEFAULT:
        break;
    }
    return k_re_default;
}

int hr_tok_bpe_compile(hr_tokenizer *t, char err[HR_ERR_LEN]) {
    const char *const *pats = regexes_for(t->pre);
    for (int i = 0; pats[i]; i++) {
        if (t->n_re == HR_TOK_MAX_REGEX)
            return hr_seterr(err, HR_EINTERNAL, "tokenizer: too many pre-tokenizer regexes");
        int ec;
        PCRE2_SIZE eoff;
        /* DOLLAR_ENDONLY: "$" means end of subject, as in std::regex. */
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)pats[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eoff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            return hr_seterr(err, HR_EINTERNAL, "tokenizer: regex %d does not compile at %zu: %s",
                             i, (size_t)eoff, (const char *)msg);
        }
        t->re[t->n_re++] = re;
        if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
            HR_LOG_DEBUG(TAG, "PCRE2 JIT unavailable for regex %d; using the interpreter", i);
    }
    return 0;
}

void hr_tok_bpe_free(hr_tokenizer *t) {
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    t->n_re = 0;
}

/* ---- merges ---- */

static uint32_t pair_hash(int32_t a, int32_t b) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

static const hr_tok_merge *merge_find(const hr_tokenizer *t, int32_t a, int32_t b) {
    if (!t->merges)
        return NULL;
    for (uint32_t i = pair_hash(a, b) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const hr_tok_merge *m = &t->merges[i];
        if (m->left < 0)
            return NULL;
        if (m->left == a && m->right == b)
            return m;
    }
}

int hr_tok_bpe_load_merges(hr_tokenizer *t, const hr_gguf *g, char err[HR_ERR_LEN]) {
    static const char *key = "tokenizer.ggml.merges";
    int64_t kv = hr_gguf_find_key(g, key);
    if (kv < 0)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: gpt2 vocabulary without %s", key);
    if (hr_gguf_kv_type(g, kv) != HR_GGUF_ARRAY || hr_gguf_arr_type(g, kv) != HR_GGUF_STRING)
        return hr_seterr(err, HR_EFORMAT, "tokenizer: %s is not an array of strings", key);
    uint64_t n = hr_gguf_arr_len(g, kv);
    if (n > (uint64_t)INT32_MAX / 4)
        return hr_seterr(err, HR_ERANGE, "tokenizer: %s has too many entries (%llu)", key,
                         (unsigned long long)n);

    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    t->merges = malloc((size_t)cap * sizeof(*t->merges));
    if (!t->merges)
        return hr_seterr(err, HR_ENOMEM, "tokenizer: no memory for %llu merges",
                         (unsigned long long)n);
    for (uint32_t i = 0; i < cap; i++)
        t->merges[i].left = t->merges[i].right = -1;
    t->merge_mask = cap - 1;

    char *joined = NULL;
    size_t joined_cap = 0;
    int rc = 0;
    for (uint64_t j = 0; j < n; j++) {
        const char *s;
        size_t len;
        rc = hr_gguf_arr_str(g, kv, j, &s, &len);
        if (rc) {
            rc = hr_seterr(err, rc, "tokenizer: cannot read %s[%llu]", key, (unsigned long long)j);
            break;
        }
        /* Split at the first space after the first byte, as llama.cpp does. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || sp + 1 == s + len) {
            rc = hr_seterr(err, HR_EFORMAT, "tokenizer: %s[%llu] \"%.64s\" is not \"left right\"",
                           key, (unsigned long long)j, s);
            break;
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t a = hr_tok_lookup(t, s, ll), b = hr_tok_lookup(t, sp + 1, rl);
        if (a < 0 || b < 0) {
            rc = hr_seterr(err, HR_EFORMAT,
                           "tokenizer: %s[%llu] \"%.64s\" names a token that is not in the "
                           "vocabulary (\"%.*s\")",
                           key, (unsigned long long)j, s,
                           (int)(a < 0 ? (ll > 64 ? 64 : ll) : (rl > 64 ? 64 : rl)),
                           a < 0 ? s : sp + 1);
            break;
        }
        if (ll + rl > joined_cap) {
            size_t nc = 2 * (ll + rl);
            char *p = realloc(joined, nc);
            if (!p) {
                rc = hr_seterr(err, HR_ENOMEM, "tokenizer: no memory");
                break;
            }
            joined = p;
            joined_cap = nc;
        }
        memcpy(joined, s, ll);
        memcpy(joined + ll, sp + 1, rl);
        int32_t res = hr_tok_lookup(t, joined, ll + rl);

        uint32_t i = pair_hash(a, b) & t->merge_mask;
        while (t->merges[i].left >= 0 && !(t->merges[i].left == a && t->merges[i].right == b))
            i = (i + 1) & t->merge_mask;
        if (t->merges[i].left >= 0)
            continue; /* duplicate rule: the first (lowest rank) wins */
        t->merges[i] = (hr_tok_merge){a, b, (int32_t)j, res};
        t->n_merges++;
    }
    free(joined);
    return rc;
}

/* ---- encoding ---- */

typedef struct {
    size_t off, len;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, size_t off, size_t len) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return HR_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){off, len};
    return 0;
}

typedef struct {
    int32_t prev, next;
    uint32_t n; /* bytes of the word this symbol covers; 0 once merged away */
    int32_t id; /* token id, -1 if the text is not a token */
} bpe_sym;

typedef struct {
    int32_t rank, left, right;
    uint32_t size; /* bytes of left + right when queued */
    int32_t id;    /* token of the merged text */
} bpe_bigram;

/* Per-call scratch, grown as needed and reused across words. */
typedef struct {
    bpe_sym *sym;
    size_t sym_cap;
    bpe_bigram *heap;
    size_t heap_n, heap_cap;
    char *word; /* byte-level spelling of a word */
    size_t word_cap;
} bpe_scratch;

static bool bigram_before(const bpe_bigram *a, const bpe_bigram *b) {
    if (a->rank != b->rank)
        return a->rank < b->rank;
    return a->left < b->left;
}

static int heap_push(bpe_scratch *sc, bpe_bigram b) {
    if (sc->heap_n == sc->heap_cap) {
        size_t cap = sc->heap_cap ? sc->heap_cap * 2 : 64;
        bpe_bigram *v = realloc(sc->heap, cap * sizeof(*v));
        if (!v)
            return HR_ENOMEM;
        sc->heap = v;
        sc->heap_cap = cap;
    }
    size_t i = sc->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &sc->heap[p]))
            break;
        sc->heap[i] = sc->heap[p];
        i = p;
    }
    sc->heap[i] = b;
    return 0;
}

static bpe_bigram heap_pop(bpe_scratch *sc) {
    bpe_bigram *h = sc->heap;
    bpe_bigram top = h[0];
    bpe_bigram last = h[--sc->heap_n];
    size_t n = sc->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&h[c + 1], &h[c]))
            c++;
        if (!bigram_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0)
        h[i] = last;
    return top;
}

static int add_bigram(const hr_tokenizer *t, bpe_scratch *sc, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return 0;
    const bpe_sym *l = &sc->sym[left], *r = &sc->sym[right];
    if (l->id < 0 || r->id < 0)
        return 0;
    const hr_tok_merge *m = merge_find(t, l->id, r->id);
    if (!m)
        return 0;
    return heap_push(sc, (bpe_bigram){m->rank, left, right, l->n + r->n, m->result});
}

/* A symbol whose text is not a token: like llama.cpp, look up each byte of
 * its byte-level spelling alone; only printable ASCII can match. */
static int emit_fallback(const hr_tokenizer *t, const unsigned char *w, size_t n, hr_tok_ids *out) {
    for (size_t i = 0; i < n; i++) {
        if (w[i] < 0x21 || w[i] > 0x7E || t->byte_tok[w[i]] < 0)
            continue;
        int rc = hr_tok_ids_push(out, t->byte_tok[w[i]]);
        if (rc)
            return rc;
    }
    return 0;
}

static int bpe_word(const hr_tokenizer *t, const unsigned char *w, size_t n, bpe_scratch *sc,
                    hr_tok_ids *out) {
    if (t->ignore_merges) {
        /* Whole word already a token: take it without merging. */
        if (2 * n > sc->word_cap) {
            char *p = realloc(sc->word, 2 * n);
            if (!p)
                return HR_ENOMEM;
            sc->word = p;
            sc->word_cap = 2 * n;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += (size_t)hr_utf8_put(hr_bytelevel_cpt(w[i]), sc->word + k);
        int32_t id = hr_tok_lookup(t, sc->word, k);
        if (id >= 0)
            return hr_tok_ids_push(out, id);
    }
    if (n > sc->sym_cap) {
        bpe_sym *p = realloc(sc->sym, n * sizeof(*p));
        if (!p)
            return HR_ENOMEM;
        sc->sym = p;
        sc->sym_cap = n;
    }
    bpe_sym *sym = sc->sym;
    for (size_t i = 0; i < n; i++) {
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 == n ? -1 : (int32_t)i + 1;
        sym[i].n = 1;
        sym[i].id = t->byte_tok[w[i]];
    }
    sc->heap_n = 0;
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        rc = add_bigram(t, sc, (int32_t)i - 1, (int32_t)i);
    while (!rc && sc->heap_n > 0) {
        bpe_bigram b = heap_pop(sc);
        bpe_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side merged since */
        l->n += r->n;
        l->id = b.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        rc = add_bigram(t, sc, l->prev, b.left);
        if (!rc)
            rc = add_bigram(t, sc, b.left, l->next);
    }
    /* Symbol i starts at byte i of the word (symbols begin one per byte). */
    for (int32_t i = 0; !rc && i != -1; i = sym[i].next) {
        if (sym[i].id >= 0)
            rc = hr_tok_ids_push(out, sym[i].id);
        else
            rc = emit_fallback(t, w + i, sym[i].n, out);
    }
    return rc;
}

/* Splits every span of in by re into out: matches and the gaps between. */
static int regex_split(const pcre2_code *re, const char *buf, const spans *in, spans *out,
                       pcre2_match_data *md) {
    out->n = 0;
    for (size_t f = 0; f < in->n; f++) {
        const char *subj = buf + in->v[f].off;
        size_t l = in->v[f].len, pos = 0, gap = 0;
        while (pos < l) {
            int mrc = pcre2_match(re, (PCRE2_SPTR)subj, l, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (mrc == PCRE2_ERROR_NOMATCH)
                break;
            if (mrc < 0) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(mrc, msg, sizeof(msg));
                HR_LOG_ERROR(TAG, "pre-tokenizer regex failed: %s", (const char *)msg);
                return HR_ERANGE;
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) { /* empty match: step over one character */
                pos = ms + (size_t)hr_utf8_len((unsigned char)subj[ms]);
                continue;
            }
            int rc = 0;
            if (ms > gap)
                rc = spans_push(out, in->v[f].off + gap, ms - gap);
            if (!rc)
                rc = spans_push(out, in->v[f].off + ms, me - ms);
            if (rc)
                return rc;
            gap = pos = me;
        }
        if (gap < l) {
            int rc = spans_push(out, in->v[f].off + gap, l - gap);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int hr_tok_bpe_encode(const hr_tokenizer *t, const char *text, size_t len, hr_tok_ids *out) {
    if (len > (size_t)INT32_MAX / 4)
        return HR_ERANGE;
    int rc = 0;
    spans a = {0}, b = {0};
    bpe_scratch sc = {0};
    pcre2_match_data *md = NULL;

    /* Normalize to valid UTF-8 (PCRE2 requires it): bad bytes -> U+FFFD. */
    char *buf = malloc(3 * len + 1);
    if (!buf)
        return HR_ENOMEM;
    size_t m = 0;
    for (size_t pos = 0; pos < len;) {
        if ((unsigned char)text[pos] < 0x80) {
            buf[m++] = text[pos++];
            continue;
        }
        m += (size_t)hr_utf8_put(hr_utf8_next(text, len, &pos), buf + m);
    }

    md = pcre2_match_data_create(4, NULL);
    if (!md) {
        rc = HR_ENOMEM;
        goto done;
    }
    rc = spans_push(&a, 0, m);
    for (int i = 0; !rc && i < t->n_re; i++) {
        rc = regex_split(t->re[i], buf, &a, &b, md);
        spans tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t i = 0; !rc && i < a.n; i++)
        rc = bpe_word(t, (const unsigned char *)buf + a.v[i].off, a.v[i].len, &sc, out);

done:
    pcre2_match_data_free(md);
    free(sc.sym);
    free(sc.heap);
    free(sc.word);
    free(a.v);
    free(b.v);
    free(buf);
    return rc;
}
