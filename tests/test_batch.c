/* test_batch.c - several sequences in one context (continuous batching):
 * 1..8 sequences of different prompts and lengths decoded together, joining
 * and leaving mid-way (slots reused), prompt chunks in the same steps as
 * other sequences' decode rows, rows in scrambled order. Every sequence's
 * logits must equal, bit for bit, those of its solo run through the
 * single-sequence API (hr_ctx_eval in a fresh context), and its greedy ids
 * must be the same; on the shared fixtures and on generated models. Also
 * the sequence table's rules (slots, gaps, runs) and prefix reuse
 * (hr_ctx_seq_clear). */
#include "tests/check.h"

#include "mmap/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"

#include <string.h>
#include <unistd.h>

#define MAX_SEQ 12
#define N_SLOT 8
#define N_BATCH 64
#define MAX_GEN 12

typedef struct {
    int32_t prompt[100];
    int n_prompt, n_gen, join; /* join: step at which it is added */
    /* solo: logits after the prompt and after each generated token */
    float *solo; /* [n_gen][n_vocab] */
    int32_t solo_ids[MAX_GEN];
    /* batched */
    float *got; /* [n_gen][n_vocab] */
    int32_t ids[MAX_GEN];
    int slot, fed, n_out; /* prompt tokens fed, logits rows produced */
} hr_tseq;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}

static int same_bits(const float *a, const float *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* The solo run: prompt through hr_ctx_eval (chunks of N_BATCH), then greedy
 * decode one token at a time, in a context of its own. */
static void solo_run(const hr_model *m, hr_tseq *s) {
    const hr_hparams *hp = hr_model_hparams(m);
    char err[HR_ERR_LEN] = "";
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 128;
    cp.n_batch = N_BATCH;
    cp.n_threads = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (!c)
        return;
    size_t nv = (size_t)hp->n_vocab;
    CHECK_EQ(hr_ctx_eval(c, s->prompt, s->n_prompt, 0, s->solo, false, err), 0);
    for (int g = 0; g < s->n_gen; g++) {
        s->solo_ids[g] = hr_argmax(s->solo + g * nv, hp->n_vocab);
        if (g + 1 < s->n_gen)
            CHECK_EQ(hr_ctx_eval(c, &s->solo_ids[g], 1, s->n_prompt + g, s->solo + (g + 1) * nv,
                                 false, err),
                     0);
    }
    hr_ctx_destroy(c);
}

/* Runs the sequences through one context of N_SLOT slots: each joins at
 * its step (when a slot is free, else later), feeds its prompt in chunks of
 * up to N_BATCH in the same steps as the others' decode rows, decodes
 * greedily and leaves after n_gen logits rows. Rows of a step are placed in
 * a scrambled order of runs. */
static void batched_run(const hr_model *m, hr_tseq *sq, int n_sq, int n_threads) {
    const hr_hparams *hp = hr_model_hparams(m);
    char err[HR_ERR_LEN] = "";
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 128;
    cp.n_seq = N_SLOT;
    cp.n_batch = N_BATCH + N_SLOT;
    cp.n_threads = n_threads;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (!c)
        return;
    CHECK_EQ(hr_ctx_n_seq(c), N_SLOT);
    size_t nv = (size_t)hp->n_vocab;
    int32_t ids[N_BATCH + N_SLOT];
    hr_seq_pos rows[N_BATCH + N_SLOT];
    float *logits = malloc(sizeof(float) * N_SLOT * nv);
    int order[MAX_SEQ], done = 0, max_active = 0;
    for (int i = 0; i < n_sq; i++) {
        sq[i].slot = -1;
        sq[i].fed = sq[i].n_out = 0;
    }
    for (int step = 0; done < n_sq && step < 400; step++) {
        for (int i = 0; i < n_sq; i++)
            if (sq[i].slot < 0 && sq[i].n_out == 0 && step >= sq[i].join) {
                int slot = hr_ctx_seq_add(c, -1);
                if (slot >= 0) {
                    sq[i].slot = slot;
                    CHECK_EQ(hr_ctx_seq_len(c, slot), 0);
                }
            }
        /* this step's runs, in a scrambled order */
        int na = 0;
        for (int i = 0; i < n_sq; i++)
            if (sq[i].slot >= 0)
                order[na++] = i;
        for (int i = na - 1; i > 0; i--) {
            int j = (int)(rnd() % (uint32_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        max_active = na > max_active ? na : max_active;
        int n = 0, ni = 0;
        bool chunk = false; /* one prompt chunk per step; other prompts wait */
        for (int k = 0; k < na; k++) {
            hr_tseq *s = &sq[order[k]];
            if (s->fed < s->n_prompt && chunk)
                continue;
            order[ni++] = order[k];
            if (s->fed < s->n_prompt) { /* a prompt chunk, cut as hr_ctx_eval cuts it */
                chunk = true;
                int len = s->n_prompt - s->fed < N_BATCH ? s->n_prompt - s->fed : N_BATCH;
                for (int t = 0; t < len; t++) {
                    ids[n] = s->prompt[s->fed + t];
                    rows[n++] = (hr_seq_pos){.seq = s->slot, .pos = s->fed + t};
                }
            } else { /* decode: the last greedy id */
                ids[n] = s->ids[s->n_out - 1];
                rows[n++] = (hr_seq_pos){.seq = s->slot, .pos = s->n_prompt + s->n_out - 1};
            }
        }
        if (n == 0)
            continue;
        int nl = 0;
        int rc = hr_ctx_eval_batch(c, ids, rows, n, logits, &nl, err);
        CHECK_EQ(rc, 0);
        if (rc) {
            fprintf(stderr, "step %d: %s\n", step, err);
            break;
        }
        CHECK_EQ(nl, ni);
        for (int k = 0; k < ni && k < nl; k++) {
            hr_tseq *s = &sq[order[k]];
            if (s->fed < s->n_prompt) {
                s->fed += s->n_prompt - s->fed < N_BATCH ? s->n_prompt - s->fed : N_BATCH;
                if (s->fed < s->n_prompt)
                    continue; /* logits of a chunk that is not the prompt's last */
            }
            memcpy(s->got + (size_t)s->n_out * nv, logits + (size_t)k * nv, nv * sizeof(float));
            s->ids[s->n_out] = hr_argmax(logits + (size_t)k * nv, hp->n_vocab);
            CHECK_EQ(hr_ctx_seq_len(c, s->slot), s->n_prompt + s->n_out);
            if (++s->n_out == s->n_gen) { /* leaves: its slot is free for the next */
                hr_ctx_seq_remove(c, s->slot);
                CHECK_EQ(hr_ctx_seq_len(c, s->slot), HR_EINVAL);
                s->slot = -1;
                done++;
            }
        }
    }
    CHECK_EQ(done, n_sq);
    if (n_sq > 1)
        CHECK(max_active > 1);
    free(logits);
    hr_ctx_destroy(c);
}

/* n_sq sequences with prompts of different lengths (1 .. 100 tokens) and
 * generation lengths, joining at different steps. */
static void check_batch(const hr_model *m, const char *name, int n_sq, int n_threads) {
    const hr_hparams *hp = hr_model_hparams(m);
    size_t nv = (size_t)hp->n_vocab;
    hr_tseq *sq = calloc(MAX_SEQ, sizeof *sq);
    CHECK(sq);
    const int lens[MAX_SEQ] = {7, 1, 23, 70, 2, 40, 13, 5, 31, 3, 64, 9};
    for (int i = 0; i < n_sq; i++) {
        hr_tseq *s = &sq[i];
        s->n_prompt = lens[(i + n_sq) % MAX_SEQ];
        for (int t = 0; t < s->n_prompt; t++)
            s->prompt[t] = (int32_t)(1 + rnd() % (uint32_t)(hp->n_vocab - 1));
        s->n_gen = 2 + (int)(rnd() % (MAX_GEN - 1));
        s->join = i < 4 ? 0 : (int)(rnd() % 8);
        s->solo = malloc(sizeof(float) * MAX_GEN * nv);
        s->got = malloc(sizeof(float) * MAX_GEN * nv);
        CHECK(s->solo && s->got);
        solo_run(m, s);
    }
    batched_run(m, sq, n_sq, n_threads);
    int bad_logits = 0, bad_ids = 0;
    for (int i = 0; i < n_sq; i++) {
        hr_tseq *s = &sq[i];
        for (int g = 0; g < s->n_out && g < s->n_gen; g++) {
            bad_logits += !same_bits(s->got + g * nv, s->solo + g * nv, hp->n_vocab);
            bad_ids += s->ids[g] != s->solo_ids[g];
        }
        CHECK_EQ(s->n_out, s->n_gen);
        free(s->solo);
        free(s->got);
    }
    if (bad_logits || bad_ids)
        fprintf(stderr,
                "%s, %d sequences, %d threads: %d logits rows and %d ids differ from solo\n", name,
                n_sq, n_threads, bad_logits, bad_ids);
    CHECK_EQ(bad_logits, 0);
    CHECK_EQ(bad_ids, 0);
    free(sq);
}

/* The sequence table's rules, and prefix reuse: after hr_ctx_seq_clear a
 * sequence continues from the kept prefix exactly as a fresh run would. */
static void check_rules(const hr_model *m) {
    const hr_hparams *hp = hr_model_hparams(m);
    char err[HR_ERR_LEN] = "";
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 64;
    cp.n_seq = 3;
    cp.n_batch = 16;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (!c)
        return;
    float *lg = malloc(sizeof(float) * 4 * hp->n_vocab), *ref = malloc(sizeof(float) * hp->n_vocab);
    int32_t ids[8] = {1, 17, 300, 42, 5, 99, 7, 8};
    hr_seq_pos rows[8];
    int nl = 0;
    CHECK_EQ(hr_ctx_seq_add(c, 1), 1);
    CHECK_EQ(hr_ctx_seq_add(c, 1), HR_EAGAIN);
    CHECK_EQ(hr_ctx_seq_add(c, 3), HR_EINVAL);
    CHECK_EQ(hr_ctx_seq_add(c, -1), 0);
    CHECK_EQ(hr_ctx_seq_add(c, -1), 2);
    CHECK_EQ(hr_ctx_seq_add(c, -1), HR_EAGAIN);
    hr_ctx_seq_remove(c, 2);
    CHECK_EQ(hr_ctx_seq_len(c, 2), HR_EINVAL);
    /* a gap: sequence 1 is empty, its first row must be at 0 */
    rows[0] = (hr_seq_pos){.seq = 1, .pos = 1};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 1, lg, &nl, err), HR_ERANGE);
    CHECK(strstr(err, "gap") != NULL);
    /* a slot not in use */
    rows[0] = (hr_seq_pos){.seq = 2, .pos = 0};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 1, lg, &nl, err), HR_EINVAL);
    /* two runs of one sequence, and positions that do not follow */
    rows[0] = (hr_seq_pos){.seq = 1, .pos = 0};
    rows[1] = (hr_seq_pos){.seq = 0, .pos = 0};
    rows[2] = (hr_seq_pos){.seq = 1, .pos = 1};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 3, lg, &nl, err), HR_EINVAL);
    rows[1] = (hr_seq_pos){.seq = 1, .pos = 2};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 2, lg, &nl, err), HR_EINVAL);
    rows[0] = (hr_seq_pos){.seq = 1, .pos = 64};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 1, lg, &nl, err), HR_ERANGE);
    CHECK_EQ(hr_ctx_seq_len(c, 1), 0); /* refused steps leave nothing behind */
    /* sequence 1: 6 tokens; keep 3, then feed tokens 3..5 again as 3 decode
     * steps: the same logits as a fresh sequence 0 fed the same way */
    for (int t = 0; t < 6; t++)
        rows[t] = (hr_seq_pos){.seq = 1, .pos = t};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 6, lg, &nl, err), 0);
    CHECK_EQ(nl, 1);
    CHECK_EQ(hr_ctx_seq_len(c, 1), 6);
    CHECK_EQ(hr_ctx_seq_clear(c, 1, 3), 0);
    CHECK_EQ(hr_ctx_seq_len(c, 1), 3);
    CHECK_EQ(hr_ctx_seq_clear(c, 2, 0), HR_EINVAL);
    for (int t = 0; t < 3; t++)
        rows[t] = (hr_seq_pos){.seq = 0, .pos = t};
    CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, 3, lg, &nl, err), 0);
    for (int t = 3; t < 6; t++) {
        hr_seq_pos two[2] = {{.seq = 1, .pos = t}, {.seq = 0, .pos = t}};
        int32_t tid[2] = {ids[t], ids[t]};
        CHECK_EQ(hr_ctx_eval_batch(c, tid, two, 2, lg, &nl, err), 0);
        CHECK_EQ(nl, 2);
        CHECK(same_bits(lg, lg + hp->n_vocab, hp->n_vocab));
    }
    /* the single-sequence API on slot 0 of a batched context: as solo */
    hr_ctx_params sp = cp;
    sp.n_seq = 1;
    hr_ctx *solo = NULL;
    CHECK_EQ(hr_ctx_create(&solo, m, &sp, err), 0);
    CHECK_EQ(hr_ctx_eval(solo, ids, 8, 0, ref, false, err), 0);
    CHECK_EQ(hr_ctx_eval(c, ids, 8, 0, lg, false, err), 0);
    CHECK(same_bits(lg, ref, hp->n_vocab));
    hr_ctx_destroy(solo);
    free(lg);
    free(ref);
    hr_ctx_destroy(c);
}

/* Decode rows (hr_seq_pos.decode): a sequence's generated tokens fed
 * again in one step, each a run of its own, give bit for bit the hidden
 * states and logits of feeding them one step each, and leave the same KV
 * behind (the next token's match too); in a plain context and in one with
 * two thread groups (which takes them one run at a time). */
static void check_decode_rows(const hr_model *m, const char *name, int n_groups) {
    const hr_hparams *hp = hr_model_hparams(m);
    enum { NP = 7, NG = 12, NT = NP + NG + 1 };
    char err[HR_ERR_LEN] = "";
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 128;
    cp.n_batch = N_BATCH;
    cp.n_threads = 2;
    cp.n_seq = n_groups > 1 ? 1 : 2;
    cp.n_groups = n_groups;
    size_t E = (size_t)hp->n_embd, V = (size_t)hp->n_vocab;
    hr_ctx *one = NULL, *many = NULL;
    CHECK_EQ(hr_ctx_create(&one, m, &cp, err), 0);
    CHECK_EQ(hr_ctx_create(&many, m, &cp, err), 0);
    float *ha = malloc(sizeof(float) * NT * E), *hb = malloc(sizeof(float) * NT * E);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    int32_t ids[NT];
    hr_seq_pos rows[NT];
    for (int t = 0; t < NT; t++)
        ids[t] = (int32_t)(1 + rnd() % (uint32_t)(hp->n_vocab - 1));
    if (!one || !many || !ha || !hb || !la || !lb || hr_model_embed(m, ids, NT, ha, err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        goto done;
    }
    memcpy(hb, ha, sizeof(float) * NT * E);
    int s = cp.n_seq - 1; /* slot 1 where there are two */
    for (int t = 0; t < NP; t++)
        rows[t] = (hr_seq_pos){.seq = s, .pos = t};
    CHECK_EQ(hr_ctx_seq_add(one, s), s);
    CHECK_EQ(hr_ctx_seq_add(many, s), s);
    CHECK_EQ(hr_ctx_step(one, ha, rows, NP, err), 0);
    CHECK_EQ(hr_ctx_step(many, hb, rows, NP, err), 0);
    for (int g = 0; g < NG; g++) { /* one token a step */
        rows[0] = (hr_seq_pos){.seq = s, .pos = NP + g};
        CHECK_EQ(hr_ctx_step(one, ha + (NP + g) * E, rows, 1, err), 0);
    }
    for (int g = 0; g < NG; g++) /* all in one step */
        rows[g] = (hr_seq_pos){.seq = s, .pos = NP + g, .decode = true};
    CHECK_EQ(hr_ctx_step(many, hb + NP * E, rows, NG, err), 0);
    int same = 0, same_logits = 0;
    for (int g = NP; g < NP + NG; g++) {
        same += same_bits(ha + g * E, hb + g * E, (int)E);
        CHECK_EQ(hr_ctx_output(one, ha, g, 1, la), 0);
        CHECK_EQ(hr_ctx_output(many, hb, g, 1, lb), 0);
        same_logits += same_bits(la, lb, (int)V);
    }
    CHECK_INT(same, ==, NG);
    CHECK_INT(same_logits, ==, NG);
    rows[0] = (hr_seq_pos){.seq = s, .pos = NP + NG};
    CHECK_EQ(hr_ctx_step(one, ha + (NT - 1) * E, rows, 1, err), 0);
    CHECK_EQ(hr_ctx_step(many, hb + (NT - 1) * E, rows, 1, err), 0);
    CHECK(same_bits(ha + (NT - 1) * E, hb + (NT - 1) * E, (int)E));
    /* decode rows must still follow one another */
    rows[0] = (hr_seq_pos){.seq = s, .pos = 3, .decode = true};
    rows[1] = (hr_seq_pos){.seq = s, .pos = 5, .decode = true};
    CHECK_EQ(hr_ctx_step(many, hb, rows, 2, err), HR_EINVAL);
    printf("%s: %d decode rows in one step equal %d steps of one (%s)\n", name, NG, NG,
           n_groups > 1 ? "two thread groups" : "one context");
done:
    free(ha);
    free(hb);
    free(la);
    free(lb);
    hr_ctx_destroy(one);
    hr_ctx_destroy(many);
}

static void run_model(const char *path, const char *name, bool rules) {
    char err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (hr_gguf_open(&g, path, err) || hr_model_load(&m, g, err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        CHECK(0);
        hr_gguf_close(g);
        return;
    }
    const int counts[] = {1, 2, 3, 5, 8, 12};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        check_batch(m, name, counts[i], 1 + (int)(i % 2));
    if (rules)
        check_rules(m);
    check_decode_rows(m, name, 1);
    if (rules)
        check_decode_rows(m, name, 2);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* A generated model whose Q4_0 rows end in partial groups of 4 blocks
 * (n_ff 1376 = 43 blocks), the tail the multi-column kernel handles. */
static void run_generated(const char *arch, const char *ftype) {
    char path[160], err[HR_ERR_LEN] = "";
    snprintf(path, sizeof path, "/tmp/hearth-test-batch-%d-%s-%s.gguf", (int)getpid(), arch, ftype);
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    mp.arch = arch;
    mp.ftype = ftype;
    mp.n_embd = 512;
    mp.n_layer = 2;
    mp.n_head = 8;
    mp.n_head_kv = 2;
    mp.n_ff = 1376;
    mp.n_vocab = 1024;
    mp.n_ctx = 256;
    int rc = hr_mkmodel_write(&mp, path, NULL, NULL, err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return;
    }
    char name[64];
    snprintf(name, sizeof name, "generated %s %s", arch, ftype);
    run_model(path, name, false);
    unlink(path);
}

int main(void) {
    const char *shared = getenv("HR_SHARED");
    const char *models[] = {"small-llama-q4_0", "small-llama-q4_k_m", "small-qwen2-f16",
                            "tiny-llama-f32"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s.gguf", shared ? shared : "../shared", models[i]);
        run_model(path, models[i], i == 0);
    }
    run_generated("llama", "q4_0");
    run_generated("qwen2", "q8_0");
    return hr_check_finish("batch");
}
