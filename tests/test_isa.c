/* test_isa.c - every kernel table this CPU runs on every shared fixture:
 * `hearth logits` (HR_BIN) with each table forced by HR_ISA, against the
 * scalar table's logits and against llama.cpp's reference logits.
 *
 * Every table (scalar, avx2, avx512; aarch64: neon, dotprod, i8mm)
 * follows one canonical float order (kernels/canon-impl.h), so its logits
 * must equal the scalar ones bit for bit (and so lie within the 1e-4
 * acceptance bound): a last-bit difference in a dot product can move an
 * activation across a q8 rounding step, which these random-weight fixtures
 * amplify to ~2e-2 in the logits, so nothing looser would catch a kernel
 * that sums in another order. Every table is also held to test_model's
 * bounds from llama.cpp (quantized 1e-2 with every argmax equal, float
 * 2e-3). The canonical order is llama.cpp's x86 (AVX2) one, so on the
 * quantized fixtures the canonical tables must also land within 1e-5 of
 * llama.cpp's logits with the argmax equal at every position (the worst
 * over those tables is printed per fixture). All of that in exact mode
 * (--exact); a table whose default mode sums in a free order (the AVX-512
 * prompt panels) is run that way too and held to the default bounds.
 * Differences are per position, max |a - b| / max |b|, worst over
 * positions; each is printed. */
#include "tests/check.h"
#include "tests/fixtures.h"
#include "tests/tables.h"

#include "kernels/quant.h"

#include <jansson.h>
#include <unistd.h>

/* the fixture's prompt ids as "1,2,3"; their count */
static int prompt_ids(const char *name, char *out, size_t cap) {
    char rel[160], path[512];
    snprintf(rel, sizeof rel, "reference/%s.json", name);
    json_error_t je;
    json_t *root = json_load_file(hr_shared_path(rel, path, sizeof path), 0, &je);
    json_t *arr = root ? json_object_get(root, "prompt_ids") : NULL;
    size_t len = 0;
    int n = 0;
    out[0] = 0;
    for (size_t i = 0; arr && i < json_array_size(arr) && len + 16 < cap; i++, n++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? "," : "",
                                (long long)json_integer_value(json_array_get(arr, i)));
    json_decref(root);
    return n;
}

static int g_pairs, g_default;

/* `HR_ISA=isa hearth logits` of the fixture into out, in exact mode
 * (--exact) or the default one; the command's status */
static int run_logits(const char *bin, const char *isa, bool exact, const char *name,
                      const char *ids, const char *out) {
    char rel[160], model[512], cmd[4096];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    snprintf(cmd, sizeof cmd,
             "HR_ISA=%s '%s' logits%s -m '%s' --ids %s -t 1 -o '%s' >/dev/null 2>&1", isa, bin,
             exact ? " --exact" : "", hr_shared_path(rel, model, sizeof model), ids, out);
    return system(cmd);
}

/* A table's default mode where it sums in a free order: float fixtures
 * within 1e-4 of the scalar path, quantized ones within 3e-2 of llama.cpp
 * with at least 95% of the argmaxes (kernels/quant.h). */
static void check_default(const char *bin, const char *dir, const hr_fixture *fx, hr_isa isa,
                          const char *ids, const float *ref, const float *llama, int n, int nv) {
    const hr_kernels *k = hr_kernels_fast_for_isa(isa);
    if (!k || k->canonical)
        return; /* the same table as in exact mode */
    const char *iname = hr_isa_name(isa);
    char got_path[600];
    snprintf(got_path, sizeof got_path, "%s/%s.%s.default", dir, fx->name, iname);
    CHECK_EQ(run_logits(bin, iname, false, fx->name, ids, got_path), 0);
    size_t ng = 0;
    float *got = read_floats(got_path, &ng);
    CHECK_EQ(ng, (size_t)n * (size_t)nv);
    if (got && ng == (size_t)n * (size_t)nv) {
        const hr_logits_cmp cs = hr_compare_logits(got, ref, n, nv);
        const hr_logits_cmp cl = hr_compare_logits(got, llama, n, nv);
        printf("%-20s %-8s default (free order) vs llama.cpp %.3e (argmax %d/%d); vs scalar "
               "%.3e\n",
               fx->name, iname, cl.rel, cl.agree, n, cs.rel);
        if (fx->quantized) {
            CHECK(cl.rel <= 3e-2);
            CHECK(cl.agree * 100 >= 95 * n);
        } else {
            CHECK(cs.rel <= 1e-4);
            CHECK_EQ(cs.agree, n);
        }
        g_default++;
    }
    free(got);
    unlink(got_path);
}

/* test_model's bounds from llama.cpp */
static void check_llama(const hr_fixture *fx, hr_logits_cmp c, int n) {
    if (fx->quantized) {
        CHECK(c.rel <= 1e-2);
        CHECK_EQ(c.agree, n);
    } else {
        CHECK(c.rel <= 1e-4);
        CHECK_EQ(c.agree, n);
    }
}

/* canonical tables on quantized fixtures: llama.cpp's float order */
static void check_canon_llama(const hr_fixture *fx, hr_logits_cmp c, int n, double *worst) {
    if (!fx->quantized)
        return;
    CHECK(c.rel <= 1e-5);
    CHECK_EQ(c.agree, n);
    *worst = fmax(*worst, c.rel);
}

static void test_fixture(const char *bin, const char *dir, const hr_fixture *fx) {
    char rel[160], path[512], ids[4096], ref_path[600];
    snprintf(rel, sizeof rel, "models/%s.gguf", fx->name);
    if (access(hr_shared_path(rel, path, sizeof path), R_OK) != 0) {
        char what[256];
        snprintf(what, sizeof what, "%s: no model in the shared fixtures", fx->name);
        hr_check_skip(what);
        return;
    }
    const int n = prompt_ids(fx->name, ids, sizeof ids);
    CHECK(n > 0);
    snprintf(rel, sizeof rel, "reference/%s.logits", fx->name);
    size_t n_llama = 0;
    float *llama = read_floats(hr_shared_path(rel, path, sizeof path), &n_llama);
    CHECK(llama != NULL && n > 0 && n_llama % (size_t)n == 0);
    if (!llama || n <= 0 || n_llama % (size_t)n != 0) {
        free(llama);
        return;
    }
    const int nv = (int)(n_llama / (size_t)n);
    double canon_worst = 0.0;
    int n_canon = 0;

    snprintf(ref_path, sizeof ref_path, "%s/%s.scalar", dir, fx->name);
    CHECK_EQ(run_logits(bin, "scalar", true, fx->name, ids, ref_path), 0);
    size_t nr = 0;
    float *ref = read_floats(ref_path, &nr);
    CHECK_EQ(nr, n_llama);
    if (ref && nr == n_llama) {
        const hr_logits_cmp cl = hr_compare_logits(ref, llama, n, nv);
        printf("%-20s %-8s vs llama.cpp %.3e (argmax %d/%d)\n", fx->name, "scalar", cl.rel,
               cl.agree, n);
        check_llama(fx, cl, n);
        check_canon_llama(fx, cl, n, &canon_worst);
        n_canon++;
    }
    for (int isa = HR_ISA_SCALAR + 1; ref && nr == n_llama && isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        if (!k)
            continue;
        const char *iname = hr_isa_name((hr_isa)isa);
        char got_path[600];
        snprintf(got_path, sizeof got_path, "%s/%s.%s", dir, fx->name, iname);
        CHECK_EQ(run_logits(bin, iname, true, fx->name, ids, got_path), 0);
        size_t ng = 0;
        float *got = read_floats(got_path, &ng);
        CHECK_EQ(ng, nr);
        if (got && ng == nr) {
            const hr_logits_cmp cs = hr_compare_logits(got, ref, n, nv);
            const hr_logits_cmp cl = hr_compare_logits(got, llama, n, nv);
            const bool same = memcmp(got, ref, nr * sizeof(float)) == 0;
            const char *note = same ? ", bit-identical" : "";
            printf("%-20s %-8s vs llama.cpp %.3e (argmax %d/%d); vs scalar max rel diff %.3e "
                   "(argmax %d/%d)%s\n",
                   fx->name, iname, cl.rel, cl.agree, n, cs.rel, cs.agree, n, note);
            check_llama(fx, cl, n);
            /* one float order: the same bits */
            CHECK(k->canonical);
            CHECK(same);
            CHECK(cs.rel <= 1e-4);
            check_canon_llama(fx, cl, n, &canon_worst);
            n_canon++;
            g_pairs++;
        }
        free(got);
        unlink(got_path);
        check_default(bin, dir, fx, (hr_isa)isa, ids, ref, llama, n, nv);
    }
    if (fx->quantized && n_canon > 0)
        printf("%-20s canonical tables (%d) vs llama.cpp worst %.3e (bound 1e-5)\n", fx->name,
               n_canon, canon_worst);
    free(ref);
    free(llama);
    unlink(ref_path);
}

int main(void) {
    const char *bin = getenv("HR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        hr_check_skip("HR_BIN not set to the hearth binary");
        return hr_check_finish("test_isa");
    }
    printf("cpu features: %s\n", hr_isa_features());
    char dir[] = "/tmp/hr-test-isa-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++)
        test_fixture(bin, dir, &fixtures[f]);
    rmdir(dir);
    if (g_pairs == 0)
        hr_check_skip("no SIMD kernel table on this CPU: only scalar ran");
    printf("%d (fixture, table) pairs compared with scalar in exact mode, %d in the default "
           "mode's free order\n",
           g_pairs, g_default);
    hr_skip_unrunnable_tables("isa kernels");
    return hr_check_finish("test_isa");
}
