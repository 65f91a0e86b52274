/* tokenizer_spm.c - SentencePiece-style encoding, llama.cpp-compatible:
 * spaces become U+2581 ("▁"), the text is split into UTF-8 characters, and
 * the adjacent pair whose concatenation is the highest-scoring vocabulary
 * token is merged repeatedly (ties: leftmost first). Characters left
 * outside the vocabulary fall back to <0xNN> byte tokens.
 * Cost: O(n log n) in the fragment length. */
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer-impl.h"

typedef struct {
    uint32_t start; /* byte offset in the escaped text */
    uint32_t n;     /* bytes; 0 once merged into the left neighbour */
    int32_t prev, next;
    int32_t id; /* token id once known, -1 otherwise */
} spm_sym;

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued */
    int32_t id;    /* token of the merged text */
} spm_bigram;

typedef struct {
    spm_bigram *v;
    size_t n, cap;
} spm_heap;

/* a before b: higher score first, then leftmost. */
static bool bigram_before(const spm_bigram *a, const spm_bigram *b) {
    if (a->score != b->score)
        return a->score > b->score;
    return a->left < b->left;
}

static int heap_push(spm_heap *h, spm_bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_bigram *v = realloc(h->v, cap * sizeof(*v));
        if (!v)
            return HR_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return 0;
}

static spm_bigram heap_pop(spm_heap *h) {
    spm_bigram top = h->v[0];
    spm_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

static int try_bigram(const hr_tokenizer *t, const char *s, const spm_sym *sym, int32_t left,
                      int32_t right, spm_heap *h) {
    if (left < 0 || right < 0)
        return 0;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = hr_tok_lookup(t, s + sym[left].start, size);
    if (id < 0)
        return 0;
    spm_bigram b = {t->tok[id].score, left, right, size, id};
    return heap_push(h, b);
}

/* Emits one final symbol: its token, or one byte token per byte. */
static int emit_symbol(const hr_tokenizer *t, const char *s, const spm_sym *sym, hr_tok_ids *out) {
    int32_t id = sym->id >= 0 ? sym->id : hr_tok_lookup(t, s + sym->start, sym->n);
    if (id >= 0)
        return hr_tok_ids_push(out, id);
    for (uint32_t j = 0; j < sym->n; j++) {
        int32_t b = t->byte_tok[(unsigned char)s[sym->start + j]];
        if (b < 0)
            b = t->unk;
        if (b < 0)
            continue;
        int rc = hr_tok_ids_push(out, b);
        if (rc)
            return rc;
    }
    return 0;
}

int hr_tok_spm_encode(const hr_tokenizer *t, const char *text, size_t len, bool space_prefix,
                      hr_tok_ids *out) {
    static const char ws[] = "\xE2\x96\x81"; /* U+2581 */
    if (len > (size_t)INT32_MAX / 4)
        return HR_ERANGE; /* offsets below are 32-bit */
    size_t n_space = 0;
    for (size_t i = 0; i < len; i++)
        n_space += text[i] == ' ';

    size_t n = len + 2 * n_space + (space_prefix ? 3 : 0); /* ' ' -> 3 bytes */
    char *s = malloc(n ? n : 1);
    spm_sym *sym = malloc((n ? n : 1) * sizeof(*sym));
    spm_heap h = {0};
    int rc = 0;
    if (!s || !sym) {
        rc = HR_ENOMEM;
        goto done;
    }

    size_t k = 0;
    if (space_prefix) {
        memcpy(s, ws, 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + k, ws, 3);
            k += 3;
        } else {
            s[k++] = text[i];
        }
    }

    /* One symbol per UTF-8 character (lead-byte length, clipped at the end). */
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = (size_t)hr_utf8_len((unsigned char)s[off]);
        if (cl > n - off)
            cl = n - off;
        sym[n_sym].start = (uint32_t)off;
        sym[n_sym].n = (uint32_t)cl;
        sym[n_sym].prev = n_sym - 1;
        off += cl;
        sym[n_sym].next = off == n ? -1 : n_sym + 1;
        sym[n_sym].id = -1;
        n_sym++;
    }
    if (n_sym == 0)
        goto done;

    for (int32_t i = 1; i < n_sym; i++) {
        rc = try_bigram(t, s, sym, i - 1, i, &h);
        if (rc)
            goto done;
    }
    while (h.n > 0) {
        spm_bigram b = heap_pop(&h);
        spm_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side merged since */
        l->n += r->n;
        l->id = b.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        rc = try_bigram(t, s, sym, l->prev, b.left, &h);
        if (!rc)
            rc = try_bigram(t, s, sym, b.left, l->next, &h);
        if (rc)
            goto done;
    }
    for (int32_t i = 0; i != -1; i = sym[i].next) {
        rc = emit_symbol(t, s, &sym[i], out);
        if (rc)
            goto done;
    }

done:
    free(h.v);
    free(sym);
    free(s);
    return rc;
}
