/* generate.c - reply text tracking: streaming detokenization, stop strings
 * matched across token boundaries with held-back text, token budget and
 * finish reason. */
#include "model/generate.h"

#include <stdlib.h>
#include <string.h>

/* A growable byte buffer, kept NUL-terminated. */
typedef struct {
    char *p;
    size_t len, cap;
} hr_buf;

static int hr_buf_reserve(hr_buf *b, size_t need) {
    if (need + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return HR_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int hr_buf_append(hr_buf *b, const char *s, size_t n) {
    int rc = hr_buf_reserve(b, b->len + n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

struct hr_gen {
    const hr_tokenizer *tok;
    char *stop[HR_GEN_MAX_STOP];
    size_t stop_len[HR_GEN_MAX_STOP];
    int n_stop;
    int max_tokens;
    bool strip;
    hr_detok dt;
    hr_buf text;    /* released reply */
    hr_buf hold;    /* decoded but held back: may start a stop string */
    hr_buf scratch; /* one token's bytes */
    size_t delta_from;
    int n_tokens;
    hr_finish finish;
    int stop_idx;
    /* harmony channels (hm_channel -1: not a harmony vocabulary, or all
     * channels wanted) */
    int32_t hm_channel, hm_message, hm_start, hm_end;
    enum { HM_TEXT, HM_HEADER, HM_NAME, HM_HIDDEN } hm;
    char hm_name[16];
    size_t hm_len;
};

const char *hr_finish_name(hr_finish f) {
    switch (f) {
    case HR_FINISH_STOP:
        return "stop";
    case HR_FINISH_LENGTH:
        return "length";
    case HR_FINISH_EOS:
        return "eos";
    default:
        return "";
    }
}

hr_gen_params hr_gen_params_default(void) {
    return (hr_gen_params){
        .stop = NULL, .n_stop = 0, .max_tokens = 0, .strip_leading_space = false};
}

int hr_gen_create(hr_gen **out, const hr_tokenizer *tok, const hr_gen_params *p,
                  char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_gen_params d = hr_gen_params_default();
    if (!p)
        p = &d;
    if (p->n_stop < 0 || p->n_stop > HR_GEN_MAX_STOP || (p->n_stop > 0 && !p->stop))
        return hr_seterr(err, HR_EINVAL, "generate: %d stop strings (at most %d)", p->n_stop,
                         HR_GEN_MAX_STOP);
    hr_gen *g = calloc(1, sizeof *g);
    if (!g)
        return hr_seterr(err, HR_ENOMEM, "generate: out of memory");
    g->tok = tok;
    g->max_tokens = p->max_tokens;
    g->strip = p->strip_leading_space;
    g->hm_channel = -1;
    if (tok && !p->all_channels) {
        g->hm_message = hr_tokenizer_find(tok, "<|message|>");
        g->hm_start = hr_tokenizer_find(tok, "<|start|>");
        g->hm_end = hr_tokenizer_find(tok, "<|end|>");
        int32_t ch = hr_tokenizer_find(tok, "<|channel|>");
        if (g->hm_message >= 0 && g->hm_start >= 0 && g->hm_end >= 0)
            g->hm_channel = ch;
    }
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !p->stop[i][0])
            continue;
        size_t n = strlen(p->stop[i]);
        g->stop[g->n_stop] = malloc(n + 1);
        if (!g->stop[g->n_stop]) {
            hr_gen_destroy(g);
            return hr_seterr(err, HR_ENOMEM, "generate: out of memory");
        }
        memcpy(g->stop[g->n_stop], p->stop[i], n + 1);
        g->stop_len[g->n_stop++] = n;
    }
    if (hr_buf_reserve(&g->text, 4096) || hr_buf_reserve(&g->hold, 256) ||
        hr_buf_reserve(&g->scratch, 256)) {
        hr_gen_destroy(g);
        return hr_seterr(err, HR_ENOMEM, "generate: out of memory");
    }
    hr_gen_begin(g);
    *out = g;
    return 0;
}

void hr_gen_destroy(hr_gen *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->text.p);
    free(g->hold.p);
    free(g->scratch.p);
    free(g);
}

void hr_gen_begin(hr_gen *g) {
    hr_detok_init(&g->dt, g->strip);
    g->text.len = g->hold.len = 0;
    g->text.p[0] = g->hold.p[0] = 0;
    g->delta_from = 0;
    g->n_tokens = 0;
    g->finish = HR_FINISH_NONE;
    g->stop_idx = -1;
    g->hm = HM_TEXT;
    g->hm_len = 0;
}

/* Harmony: whether id belongs to what the reply leaves out (a control
 * token of the message structure, a header, a channel's name, a message
 * outside the final channel), moving the channel state along. */
static bool hr_gen_hidden(hr_gen *g, int32_t id) {
    if (id == g->hm_channel) {
        g->hm = HM_NAME;
        g->hm_len = 0;
        return true;
    }
    if (id == g->hm_message) {
        bool final = g->hm != HM_NAME || (g->hm_len >= 5 && memcmp(g->hm_name, "final", 5) == 0);
        g->hm = final ? HM_TEXT : HM_HIDDEN;
        return true;
    }
    if (id == g->hm_start || id == g->hm_end) {
        g->hm = HM_HEADER;
        return true;
    }
    if (g->hm == HM_NAME) {
        const char *t = hr_tokenizer_token_text(g->tok, id);
        for (; t && *t && g->hm_len < sizeof g->hm_name; t++)
            g->hm_name[g->hm_len++] = *t;
    }
    return g->hm != HM_TEXT;
}

/* Moves hold[0..n) to the released text. */
static int hr_release(hr_gen *g, size_t n) {
    int rc = hr_buf_append(&g->text, g->hold.p, n);
    if (rc)
        return rc;
    memmove(g->hold.p, g->hold.p + n, g->hold.len - n);
    g->hold.len -= n;
    g->hold.p[g->hold.len] = 0;
    return 0;
}

/* Appends decoded bytes, ends the reply at the first complete stop string,
 * and releases everything that cannot begin one. */
static int hr_feed(hr_gen *g, const char *s, size_t n) {
    int rc = hr_buf_append(&g->hold, s, n);
    if (rc || g->n_stop == 0)
        return rc ? rc : hr_release(g, g->hold.len);
    const char *h = g->hold.p;
    size_t hl = g->hold.len;
    /* earliest complete occurrence (held text only: released text was
     * checked to start none) */
    for (size_t p = 0; p < hl; p++) {
        for (int k = 0; k < g->n_stop; k++) {
            if (g->stop_len[k] <= hl - p && memcmp(h + p, g->stop[k], g->stop_len[k]) == 0) {
                rc = hr_release(g, p);
                g->hold.len = 0;
                g->hold.p[0] = 0;
                g->finish = HR_FINISH_STOP;
                g->stop_idx = k;
                return rc;
            }
        }
    }
    /* earliest position whose tail is a proper prefix of a stop string */
    size_t keep = hl;
    for (size_t p = 0; p < hl && keep == hl; p++)
        for (int k = 0; k < g->n_stop; k++)
            if (g->stop_len[k] > hl - p && memcmp(h + p, g->stop[k], hl - p) == 0) {
                keep = p;
                break;
            }
    while (keep > 0 && keep < hl && ((unsigned char)h[keep] & 0xC0) == 0x80)
        keep--; /* never split a UTF-8 character */
    return hr_release(g, keep);
}

/* Flushes the detokenizer, releases what is held and sets the reason
 * (unless the flushed bytes completed a stop string). */
static int hr_end(hr_gen *g, hr_finish reason) {
    char tail[8];
    int nb = hr_detok_flush(&g->dt, tail, sizeof tail);
    int rc = nb > 0 ? hr_feed(g, tail, (size_t)nb) : 0;
    if (g->finish != HR_FINISH_NONE)
        return rc;
    int rc2 = hr_release(g, g->hold.len);
    g->finish = reason;
    return rc ? rc : rc2;
}

static int hr_after_token(hr_gen *g, int rc, hr_finish *finish) {
    if (rc == 0 && g->finish == HR_FINISH_NONE && g->max_tokens > 0 && g->n_tokens >= g->max_tokens)
        rc = hr_end(g, HR_FINISH_LENGTH);
    if (finish)
        *finish = g->finish;
    return rc;
}

int hr_gen_push(hr_gen *g, int32_t id, hr_finish *finish) {
    if (g->finish != HR_FINISH_NONE) {
        if (finish)
            *finish = g->finish;
        return 0;
    }
    if (!g->tok || id < 0 || id >= hr_tokenizer_n_vocab(g->tok))
        return HR_EINVAL;
    g->n_tokens++;
    if (hr_tokenizer_is_eog(g->tok, id)) {
        int rc = hr_end(g, HR_FINISH_EOS);
        if (finish)
            *finish = g->finish;
        return rc;
    }
    if (g->hm_channel >= 0 && hr_gen_hidden(g, id))
        return hr_after_token(g, 0, finish);
    int nb;
    for (;;) {
        nb = hr_detok_push(&g->dt, g->tok, id, g->scratch.p, g->scratch.cap);
        if (nb != HR_ERANGE)
            break;
        if (g->scratch.cap > ((size_t)1 << 24) || hr_buf_reserve(&g->scratch, g->scratch.cap * 2))
            return HR_ENOMEM;
    }
    if (nb < 0)
        return nb;
    return hr_after_token(g, hr_feed(g, g->scratch.p, (size_t)nb), finish);
}

int hr_gen_push_text(hr_gen *g, const char *text, size_t len, hr_finish *finish) {
    if (g->finish != HR_FINISH_NONE) {
        if (finish)
            *finish = g->finish;
        return 0;
    }
    if (!text && len)
        return HR_EINVAL;
    g->n_tokens++;
    return hr_after_token(g, hr_feed(g, text, len), finish);
}

void hr_gen_finish(hr_gen *g, hr_finish reason) {
    if (g->finish == HR_FINISH_NONE)
        (void)hr_end(g, reason == HR_FINISH_NONE ? HR_FINISH_LENGTH : reason);
}

const char *hr_gen_delta(hr_gen *g, size_t *len) {
    const char *d = g->text.p + g->delta_from;
    *len = g->text.len - g->delta_from;
    g->delta_from = g->text.len;
    return d;
}

const char *hr_gen_text(const hr_gen *g, size_t *len) {
    if (len)
        *len = g->text.len;
    return g->text.p;
}

hr_finish hr_gen_finish_reason(const hr_gen *g) { return g->finish; }
int hr_gen_n_tokens(const hr_gen *g) { return g->n_tokens; }
int hr_gen_stop_index(const hr_gen *g) { return g->stop_idx; }
