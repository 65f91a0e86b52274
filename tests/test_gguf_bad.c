/* test_gguf_bad.c - the GGUF reader on hostile input: truncation at every
 * offset of a generated file and at many of a real model, seeded byte
 * flips (opened copies are walked end to end), and one crafted file per
 * validation rule, each checked for its error code and message. Nothing
 * may crash or read outside the buffer (the sanitizer build runs this). */
#include "tests/test_gguf_util.h"

static bool known_code(int rc) {
    return rc == HR_EFORMAT || rc == HR_EUNSUPPORTED || rc == HR_ENOMEM;
}

/* Opens b and checks the return code and that err mentions want. */
static void expect(const char *label, const buf_t *b, int code, const char *want) {
    hr_gguf *g = NULL;
    char err[HR_ERR_LEN] = "";
    int rc = open_copy(&g, b->p, b->len, err);
    if (rc != code || (want && !strstr(err, want)))
        fprintf(stderr, "case '%s': rc %d (want %d), err \"%s\" (want \"%s\")\n", label, rc, code,
                err, want ? want : "");
    CHECK_EQ(rc, code);
    if (want)
        CHECK(strstr(err, want) != NULL);
    if (rc == 0) {
        walk(g);
        close_copy(g);
    } else {
        CHECK(g == NULL);
    }
}

/* ---- hostile inputs ---- */

static void test_truncation(void) {
    size_t size = 0;
    uint8_t *bytes = write_small("trunc.gguf", &size);
    CHECK(bytes != NULL);
    if (!bytes)
        return;
    int bad = 0;
    char err[HR_ERR_LEN];
    /* every prefix of the small file */
    for (size_t n = 0; n < size; n++) {
        hr_gguf *g = NULL;
        err[0] = '\0';
        int rc = open_copy(&g, bytes, n, err);
        if (rc != HR_EFORMAT || !err[0] || g) {
            if (bad++ < 5)
                fprintf(stderr, "truncated at %zu: rc %d err '%s'\n", n, rc, err);
            close_copy(g);
        }
    }
    CHECK_EQ(bad, 0);
    free(bytes);

    /* a spread of offsets across a real model */
    char path[1024];
    bytes =
        (uint8_t *)slurp(hr_shared_path("models/tiny-llama-f32.gguf", path, sizeof path), &size);
    CHECK(bytes != NULL);
    if (!bytes)
        return;
    hr_gguf *g = NULL;
    CHECK_EQ(hr_gguf_open_memory(&g, bytes, size, err), 0);
    size_t hdr = g ? (size_t)hr_gguf_data_offset(g) : 4096;
    hr_gguf_close(g);
    bad = 0;
    size_t cuts[1200];
    size_t nc = 0;
    for (size_t n = 0; n < 512; n++)
        cuts[nc++] = n; /* header, first kvs */
    for (size_t n = hdr - 400; n < hdr; n++)
        cuts[nc++] = n; /* tensor infos and padding */
    for (int i = 0; i < 200; i++)
        cuts[nc++] = 512 + (size_t)(rnd() % (hdr - 912)); /* inside the token arrays */
    for (int i = 0; i < 88; i++)
        cuts[nc++] = hdr + (size_t)(rnd() % (size - hdr)); /* tensor data */
    for (size_t i = 0; i < nc; i++) {
        size_t n = cuts[i];
        err[0] = '\0';
        int rc = n < hdr ? open_copy(&g, bytes, n, err) : hr_gguf_open_memory(&g, bytes, n, err);
        if (rc != HR_EFORMAT || !err[0]) {
            if (bad++ < 5)
                fprintf(stderr, "tiny-llama truncated at %zu: rc %d err '%s'\n", n, rc, err);
            if (rc == 0 && n < hdr)
                close_copy(g);
            else if (rc == 0)
                hr_gguf_close(g);
        }
        if (n >= hdr && !strstr(err, "extends past end of file"))
            bad++;
    }
    CHECK_EQ(bad, 0);
    printf("truncation: %zu offsets of tiny-llama-f32.gguf, all refused\n", nc);
    free(bytes);
}

/* Flips 1..max_flips random bytes within [lo, hi) biased to hot, opens an
 * exact copy, walks it if it opens, and checks errors are clean. */
static void flip_run(const char *label, uint8_t *bytes, size_t size, size_t hot_hi, size_t flip_hi,
                     int iters, int max_flips) {
    int opened = 0, failed = 0, bad = 0;
    uint64_t sink = 0;
    char err[HR_ERR_LEN];
    size_t pos[8];
    uint8_t old[8];
    for (int it = 0; it < iters; it++) {
        int nf = 1 + (int)(rnd() % (uint64_t)max_flips);
        for (int k = 0; k < nf; k++) {
            size_t hi = rnd() % 2 ? hot_hi : flip_hi;
            pos[k] = (size_t)(rnd() % hi);
            old[k] = bytes[pos[k]];
            uint64_t r = rnd();
            bytes[pos[k]] = r % 3 == 0   ? (uint8_t)(1u << (r >> 8) % 8) ^ old[k]
                            : r % 3 == 1 ? (uint8_t)(r >> 16)
                                         : (uint8_t)(r % 2 ? 0xff : 0);
        }
        hr_gguf *g = NULL;
        err[0] = '\0';
        int rc = size < (1u << 20) ? open_copy(&g, bytes, size, err)
                                   : hr_gguf_open_memory(&g, bytes, size, err);
        if (rc == 0) {
            opened++;
            sink += walk(g);
            if (size < (1u << 20))
                close_copy(g);
            else
                hr_gguf_close(g);
        } else {
            failed++;
            if (!known_code(rc) || !err[0] || g) {
                if (bad++ < 5)
                    fprintf(stderr, "%s: iteration %d: rc %d err '%s'\n", label, it, rc, err);
            }
        }
        for (int k = nf - 1; k >= 0; k--)
            bytes[pos[k]] = old[k];
    }
    CHECK_EQ(bad, 0);
    printf("byte flips %s: %d iterations, %d opened, %d refused (sink %llu)\n", label, iters,
           opened, failed, (unsigned long long)(sink & 0xff));
}

static void test_flips(void) {
    size_t size = 0;
    uint8_t *bytes = write_small("flip.gguf", &size);
    CHECK(bytes != NULL);
    if (bytes) {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_gguf_open_memory(&g, bytes, size, err), 0);
        size_t hdr = g ? (size_t)hr_gguf_data_offset(g) : size;
        hr_gguf_close(g);
        flip_run("small generated file", bytes, size, hdr, size, 20000, 4);
        free(bytes);
    }
    /* the header region of a real model, the whole file in memory */
    char path[1024];
    bytes =
        (uint8_t *)slurp(hr_shared_path("models/tiny-llama-f32.gguf", path, sizeof path), &size);
    CHECK(bytes != NULL);
    if (bytes) {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_gguf_open_memory(&g, bytes, size, err), 0);
        size_t hdr = g ? (size_t)hr_gguf_data_offset(g) : 4096;
        hr_gguf_close(g);
        /* a heap copy of exactly the file so overreads are caught */
        flip_run("tiny-llama-f32 header", bytes, size, 2048, hdr, 4000, 3);
        free(bytes);
    }
}

static void test_crafted(void) {
    buf_t b = {0};
    uint64_t ne1[1] = {8};

    b.len = 0;
    expect("empty file", &b, HR_EFORMAT, "truncated header magic");
    b_put(&b, "GGU", 3);
    expect("short magic", &b, HR_EFORMAT, "truncated header magic");
    b.len = 0;
    b_put(&b, "GGML", 4);
    b_u32(&b, 3);
    expect("bad magic", &b, HR_EFORMAT, "bad magic");
    b.len = 0;
    b_put(&b, "FUGG", 4);
    expect("swapped magic", &b, HR_EUNSUPPORTED, "big-endian");
    b_hdr(&b, 1, 0, 0);
    expect("v1", &b, HR_EUNSUPPORTED, "unsupported version 1");
    b_hdr(&b, 4, 0, 0);
    expect("v4", &b, HR_EUNSUPPORTED, "unsupported version 4");
    b_hdr(&b, 0x03000000u, 0, 0);
    expect("big-endian v3", &b, HR_EUNSUPPORTED, "big-endian");
    b_hdr(&b, 0x02000000u, 0, 0);
    expect("big-endian v2", &b, HR_EUNSUPPORTED, "byte-swapped version 0x02000000");
    b_hdr(&b, 3, 0, 0);
    b.len = 13;
    expect("truncated counts", &b, HR_EFORMAT, "truncated tensor count");
    b_hdr(&b, 3, 0, 0);
    b.len = 20;
    expect("truncated kv count", &b, HR_EFORMAT, "truncated kv count");
    b_hdr(&b, 3, 0, 0);
    expect("empty v3", &b, 0, NULL);
    b_hdr(&b, 2, 0, 1);
    b_kv_u32(&b, "a", 1);
    expect("v2 ok", &b, 0, NULL);

    /* hostile counts */
    b_hdr(&b, 3, 0, 1ull << 63);
    expect("n_kv 2^63", &b, HR_EFORMAT, "n_kv 9223372036854775808 exceeds");
    b_hdr(&b, 3, UINT64_MAX, 0);
    expect("n_tensors max", &b, HR_EFORMAT, "n_tensors 18446744073709551615 exceeds");
    b_hdr(&b, 3, 0, 2);
    b_kv_u32(&b, "a", 1);
    b_kv_u32(&b, "b", 2);
    b.len -= 1;
    expect("truncated kv value", &b, HR_EFORMAT, "truncated uint32");
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 1ull << 62);
    b_put(&b, "key", 3);
    b_zeros(&b, 9);
    expect("key length", &b, HR_EFORMAT, "key length 4611686018427387904 exceeds remaining");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, HR_GGUF_UINT8);
    b_u8(&b, 1);
    b_zeros(&b, 4);
    expect("empty key", &b, HR_EFORMAT, "empty key");
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 3);
    b_put(&b, "a\0b", 3);
    b_u32(&b, HR_GGUF_UINT8);
    b_u8(&b, 1);
    expect("NUL in key", &b, HR_EFORMAT, "key contains a NUL byte");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "x.y");
    b_u32(&b, 13);
    b_u32(&b, 0);
    expect("value type 13", &b, HR_EFORMAT, "unknown value type 13");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "general.name");
    b_u32(&b, HR_GGUF_STRING);
    b_u64(&b, 9999999);
    b_put(&b, "abcdefghijkl", 12);
    expect("string length", &b, HR_EFORMAT,
           "'general.name': string length 9999999 exceeds remaining 12 bytes");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_UINT32);
    b_u64(&b, 1ull << 62);
    b_zeros(&b, 16);
    expect("u32 array length", &b, HR_EFORMAT, "array length 4611686018427387904 exceeds");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_STRING);
    b_u64(&b, 1ull << 40);
    b_zeros(&b, 16);
    expect("string array length", &b, HR_EFORMAT, "array length 1099511627776 exceeds");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "tokenizer.ggml.tokens");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_STRING);
    b_u64(&b, 4);
    b_str(&b, "a");
    b_str(&b, "b");
    b_u64(&b, 1000);
    b_zeros(&b, 20);
    expect("string element length", &b, HR_EFORMAT,
           "'tokenizer.ggml.tokens' element 2: string length 1000 exceeds remaining");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, 42);
    b_u64(&b, 0);
    expect("array element type", &b, HR_EFORMAT, "unknown array element type 42");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_ARRAY);
    b_u64(&b, 3);
    b_u32(&b, HR_GGUF_UINT8);
    b_u64(&b, 0);
    expect("nested truncated", &b, HR_EFORMAT, "exceeds");

    /* nesting depth: HR_GGUF_MAX_NESTING levels open, one more does not */
    for (int levels = HR_GGUF_MAX_NESTING; levels <= HR_GGUF_MAX_NESTING + 1; levels++) {
        b_hdr(&b, 3, 0, 1);
        b_str(&b, "deep");
        b_u32(&b, HR_GGUF_ARRAY);
        for (int l = 0; l < levels - 1; l++) {
            b_u32(&b, HR_GGUF_ARRAY);
            b_u64(&b, 1);
        }
        b_u32(&b, HR_GGUF_UINT8);
        b_u64(&b, 1);
        b_u8(&b, 7);
        if (levels == HR_GGUF_MAX_NESTING)
            expect("max nesting", &b, 0, NULL);
        else
            expect("too deep", &b, HR_EUNSUPPORTED, "nested deeper than");
    }
    /* a hostile chain of nested arrays deeper than the limit (stack) */
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "deep");
    b_u32(&b, HR_GGUF_ARRAY);
    for (int l = 0; l < 100000; l++) {
        b_u32(&b, HR_GGUF_ARRAY);
        b_u64(&b, 1);
    }
    expect("very deep", &b, HR_EUNSUPPORTED, "nested deeper than");

    b_hdr(&b, 3, 0, 3);
    b_kv_u32(&b, "a.b", 1);
    b_kv_u32(&b, "c", 2);
    b_kv_u32(&b, "a.b", 3);
    expect("duplicate key", &b, HR_EFORMAT, "duplicate key 'a.b' (kv 0 and kv 2)");

    /* alignment */
    b_hdr(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 0);
    expect("alignment 0", &b, HR_EFORMAT, "general.alignment 0 is not a power of two");
    b_hdr(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 48);
    expect("alignment 48", &b, HR_EFORMAT, "general.alignment 48 is not a power of two");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, HR_GGUF_STRING);
    b_str(&b, "32");
    expect("alignment string", &b, HR_EFORMAT, "general.alignment has type string");
    b_hdr(&b, 3, 1, 1);
    b_kv_u32(&b, "general.alignment", 256);
    b_tensor(&b, "t", 1, ne1, HR_TYPE_F32, 0);
    b_pad(&b, 256);
    size_t want_data = b.len;
    b_zeros(&b, 32);
    {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(open_copy(&g, b.p, b.len, err), 0);
        if (g) {
            CHECK_EQ(hr_gguf_alignment(g), 256);
            CHECK_EQ(hr_gguf_data_offset(g), want_data);
            CHECK_EQ(hr_gguf_tensor_at(g, 0)->offset, want_data);
            close_copy(g);
        }
    }

    /* tensor infos */
    struct {
        const char *label;
        uint32_t n_dims;
        uint64_t ne[5];
        uint32_t type;
        uint64_t offset;
        int code;
        const char *want;
    } tcases[] = {
        {"n_dims 0", 0, {8}, HR_TYPE_F32, 0, HR_EFORMAT, "n_dims 0 outside 1..4"},
        {"n_dims 5", 5, {8, 1, 1, 1, 1}, HR_TYPE_F32, 0, HR_EFORMAT, "n_dims 5 outside 1..4"},
        {"dim 0", 2, {8, 0}, HR_TYPE_F32, 0, HR_EFORMAT, "ne[1] = 0 is not positive"},
        {"dim negative", 1, {UINT64_MAX}, HR_TYPE_F32, 0, HR_EFORMAT, "ne[0] = -1 is not positive"},
        {"element overflow",
         2,
         {1ull << 32, 1ull << 32},
         HR_TYPE_F32,
         0,
         HR_EFORMAT,
         "element count"},
        {"byte overflow",
         1,
         {1ull << 62},
         HR_TYPE_F32,
         0,
         HR_EFORMAT,
         "byte size of 4611686018427387904 elements of type"},
        {"block multiple",
         1,
         {33},
         HR_TYPE_Q4_0,
         0,
         HR_EFORMAT,
         "ne[0] = 33 is not a multiple of the block size 32"},
        {"unknown type", 1, {8}, 99, 0, HR_EUNSUPPORTED, "unknown tensor type id 99"},
        {"type 4", 1, {32}, 4, 0, HR_EUNSUPPORTED, "unknown tensor type id 4"},
        {"huge type", 1, {8}, 0x80000001u, 0, HR_EUNSUPPORTED, "unknown tensor type id"},
        {"unaligned",
         1,
         {8},
         HR_TYPE_F32,
         4,
         HR_EFORMAT,
         "data offset 4 is not a multiple of the alignment 32"},
        {"past end", 1, {16}, HR_TYPE_F32, 0, HR_EFORMAT, "extends past end of file"},
        {"offset past end",
         1,
         {8},
         HR_TYPE_F32,
         1ull << 63,
         HR_EFORMAT,
         "extends past end of file"},
        {"ok", 1, {8}, HR_TYPE_F32, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
        b_hdr(&b, 3, 1, 0);
        b_tensor(&b, "blk.3.attn_q.weight", tcases[i].n_dims, tcases[i].ne, tcases[i].type,
                 tcases[i].offset);
        b_pad(&b, 32);
        b_zeros(&b, 32); /* room for 8 floats */
        expect(tcases[i].label, &b, tcases[i].code, tcases[i].want);
    }
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "blk.3.attn_q.weight", 1, (uint64_t[]){16}, HR_TYPE_F32, 0);
    b_pad(&b, 32);
    size_t dstart = b.len;
    b_zeros(&b, 32);
    char want[160];
    snprintf(want, sizeof want,
             "tensor 'blk.3.attn_q.weight' data [%zu, %zu) extends past end of file (size %zu)",
             dstart, dstart + 64, b.len);
    expect("past end message", &b, HR_EFORMAT, want);

    b_hdr(&b, 3, 2, 0);
    b_tensor(&b, "w", 1, ne1, HR_TYPE_F32, 0);
    b_tensor(&b, "w", 1, ne1, HR_TYPE_F32, 32);
    b_pad(&b, 32);
    b_zeros(&b, 64);
    expect("duplicate tensor", &b, HR_EFORMAT, "duplicate tensor name 'w' (tensors 0 and 1)");
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "", 1, ne1, HR_TYPE_F32, 0);
    b_zeros(&b, 64);
    expect("empty tensor name", &b, HR_EFORMAT, "empty tensor name");
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "blk.0.some_long_name", 3, (uint64_t[]){8, 1, 1}, HR_TYPE_F32, 0);
    b.len -= 20; /* cut inside the dims */
    expect("truncated dims", &b, HR_EFORMAT, "truncated dims: need 24 bytes, 16 remain");
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "w", 3, (uint64_t[]){8, 1, 1}, HR_TYPE_F32, 0);
    /* header is complete, but n_tensors' minimum size check passes and the
     * data section is missing */
    expect("no data", &b, HR_EFORMAT, "extends past end of file");

    /* the layer index ignores non-numeric and huge layer numbers */
    b_hdr(&b, 3, 4, 0);
    b_tensor(&b, "blk.x.w", 1, ne1, HR_TYPE_F32, 0);
    b_tensor(&b, "blk.1234567890.w", 1, ne1, HR_TYPE_F32, 32);
    b_tensor(&b, "blk.7.w", 1, ne1, HR_TYPE_F32, 64);
    b_tensor(&b, "blk.7", 1, ne1, HR_TYPE_F32, 96);
    b_pad(&b, 32);
    b_zeros(&b, 128);
    {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(open_copy(&g, b.p, b.len, err), 0);
        if (g) {
            CHECK_EQ(hr_gguf_n_layers_seen(g), 8);
            uint64_t lb, le;
            CHECK_EQ(hr_gguf_layer_range(g, 7, &lb, &le), 0);
            CHECK_EQ(le - lb, 32);
            CHECK_EQ(hr_gguf_layer_range(g, 6, &lb, &le), HR_ENOENT);
            close_copy(g);
        }
    }
    free(b.p);

    /* files */
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    CHECK_EQ(hr_gguf_open(&g, "/nonexistent/model.gguf", err), HR_ENOENT);
    CHECK(strstr(err, "/nonexistent/model.gguf") != NULL);
    CHECK_EQ(hr_gguf_open(&g, tmpdir, err), HR_EINVAL);
    char path[1024];
    FILE *f = fopen(tmp_path("empty.gguf", path, sizeof path), "wb");
    if (f)
        fclose(f);
    CHECK_EQ(hr_gguf_open(&g, path, err), HR_EFORMAT);
    CHECK(strstr(err, "empty.gguf: offset 0: truncated header magic") != NULL);
    CHECK_EQ(hr_gguf_open_memory(&g, NULL, 5, err), HR_EINVAL);
}

int main(void) {
    if (!make_tmpdir("hr_test_gguf_bad"))
        return 1;
    double t0 = now_s();
    test_crafted();
    test_truncation();
    test_flips();
    printf("test_gguf_bad: %.1f s\n", now_s() - t0);
    cleanup();
    free_round_data();
    return hr_check_finish("test_gguf_bad");
}
