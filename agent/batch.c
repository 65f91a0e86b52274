/* batch.c - the head's generation engine (hr_head_serve): every request,
 * alone (--parallel 1) or with others in flight at once, runs here. Every
 * request owns a KV slot on every device; the
 * running requests are spread over micro-batches, and the micro-batches
 * travel the ring one after another as BATCH frames (ring.h), so that
 * while device 2 computes micro-batch A, device 1 computes B. A step of a
 * micro-batch carries one decode row per member request, or a prompt
 * chunk of n_batch tokens (the chunks a single request's prefill uses), so
 * every request computes exactly what it computes alone (model.h: a row's
 * output does not depend on who shares the step). Requests join and leave
 * between steps. A lost device or an adaptive re-plan costs a new plan and
 * a replay of every running request's history (hr_bs_recover,
 * hr_bs_adapt), never a different answer. */
#include "agent/head-impl.h"

#include "common/log.h"
#include "common/sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "head"

/* One running request in its KV slot. */
typedef struct {
    hr_gen_req *r; /* NULL: the slot is free */
    int mb;        /* its micro-batch */
    int32_t *hist; /* [n_prompt + max_tokens + 1] prompt, then generated tokens */
    int n_hist, n_prompt, max_tokens;
    int fed;       /* positions computed on the ring (the KV length everywhere) */
    int sent;      /* positions sent around the ring (fed + those on the way) */
    int n_fly;     /* its steps on the ring now (several: prompt chunks in a row) */
    int exact;     /* positions [0, exact) hold what a cold prefill computes (prompt cache) */
    int replay_to; /* positions [n_prompt, replay_to): generated tokens replayed after a
                      re-plan, n_batch decode rows a step (hr_seq_pos.decode) where
                      hr_bsess.replay_dec, else one a step */
    bool zombie;   /* handed back while flying: the slot frees when its rows come home */
    bool refresh;  /* no request (r NULL): its answer's KV is computed again as prompt
                      rows (hr_bs_refresh), then the slot frees */
    bool sampled;  /* its first token was sampled (prompt time taken) */
    int32_t last;  /* the latest token sampled (the last one is not fed) */
    hr_sampler *smp;
    hr_detok dt;
    double t0, t1; /* s, monotonic: admitted, first token */
} hr_bseq;

/* A micro-batch: its members (hr_bseq.mb) and the step on the ring. */
typedef struct {
    int n_members;
    bool flying;
    int round;                            /* of the step on the ring */
    int n_rows;                           /* rows of that step */
    int n_step;                           /* requests in it ... */
    int step_seq[HR_AGENT_MAX_PARALLEL];  /* ... their slots */
    int step_n[HR_AGENT_MAX_PARALLEL];    /* ... their rows */
    int step_pos[HR_AGENT_MAX_PARALLEL];  /* ... and first positions */
    bool step_dec[HR_AGENT_MAX_PARALLEL]; /* ... as decode rows (a replay) */
    double sent;                          /* s, monotonic, of its last frame */
} hr_bmb;

/* Micro-batches: [0, n_mb) hold the members, the rest carry prompt
 * chunks of one request that follow its first around the ring. */
#define HR_BS_MAX_MB HR_AGENT_MAX_PARALLEL

typedef struct {
    hr_agent *a;
    const hr_gen_feed *f;
    int n_seq, n_mb, n_rows_max;
    int depth;        /* prompt chunks of one request on the ring at once */
    double replay_t0; /* s, monotonic: a replay began (0: none running) */
    int replay_pos;   /* ... of this many positions */
    bool replay_dec;  /* ... its generated tokens as decode rows, n_batch a step */
    uint64_t session; /* the request id of this session's frames */
    hr_bseq seq[HR_AGENT_MAX_PARALLEL];
    hr_bmb mb[HR_BS_MAX_MB];
    int n_running;
    /* step buffers, [n_rows_max] each (allocated once per session) */
    int32_t *ids, *slot, *pos;
    hr_seq_pos *rows;
    int *out_idx;                              /* [n_seq] rows whose logits are sampled */
    float *logits;                             /* [n_seq][n_vocab] */
    int n_refresh;                             /* slots in refresh */
    hr_gen_req *parked[HR_AGENT_MAX_PARALLEL]; /* taken, waiting for slot s's refresh */
    bool evict[HR_AGENT_MAX_PARALLEL];         /* slot s's refresh ends unfinished once its rows are
                                                  home: parked[s] needs the slot, not its KV */
} hr_bsess;

/* ---- requests joining and leaving ---- */

static void hr_bs_free_slot(hr_bseq *q) {
    hr_sampler_destroy(q->smp);
    free(q->hist);
    memset(q, 0, sizeof *q);
}

/* The prompt cache of q's slot holds what q's KV holds exactly. */
static void hr_bs_remember(hr_bsess *b, const hr_bseq *q) {
    hr_slot_cache *c = &b->a->head->cache[q - b->seq];
    if (!c->tok || q->exact > b->a->head->cache_ctx)
        return;
    memcpy(c->tok, q->hist, (size_t)q->exact * sizeof *c->tok);
    c->n_exact = q->exact;
    c->used = hr_now_s();
}

/* After request q ended well: where its generated tokens' KV is not what a
 * cold prefill of the same text computes (a decode row that sums in another
 * order than a prompt chunk: GPU layers, see decode_exact), the slot stays busy without
 * a request and feeds those positions again as prompt rows, so that a
 * follow-up turn starting with the whole conversation reuses it instead
 * of evaluating the answer again. The last token, sampled but never fed,
 * goes in too (with F32 weights, where decode rows are exact, it is all
 * there is to feed). Returns true when q went into refresh. */
static bool hr_bs_refresh(hr_bsess *b, hr_bseq *q) {
    const hr_head *hd = b->a->head;
    int end = q->n_hist + (q->last >= 0);
    if (q->n_fly > 0 || q->fed != q->n_hist || end > hd->cache_ctx || q->exact >= end ||
        q->exact < q->n_prompt - 1 || !hd->cache[q - b->seq].tok)
        return false;
    if (end > q->n_hist)
        q->hist[q->n_hist++] = q->last;
    q->r = NULL;
    q->refresh = true;
    q->n_prompt = q->n_hist;
    q->sent = q->fed = q->exact;
    b->n_refresh++;
    return true;
}

/* Hands request q back with rc (err when rc != 0); the slot frees now, or
 * when its rows come home. */
static void hr_bs_finish(hr_bsess *b, hr_bseq *q, int rc, const char *err) {
    hr_gen_req *r = q->r;
    if (!r || q->zombie)
        return;
    if (rc == 0) {
        char piece[512];
        int nb = hr_detok_flush(&q->dt, piece, sizeof piece);
        if (nb > 0 && r->on_token)
            r->on_token(r->ud, -1, piece, nb);
    }
    r->rc = rc;
    if (rc)
        snprintf(r->err, sizeof r->err, "%s", err ? err : hr_strerror(rc));
    if (rc == HR_ECANCELED)
        HR_LOG_INFO(TAG, "batched request in slot %d canceled", (int)(q - b->seq));
    else if (rc)
        HR_LOG_ERROR(TAG, "batched request in slot %d failed: %s", (int)(q - b->seq), r->err);
    if (r->st.n_gen > 0)
        r->st.gen_s = hr_now_s() - q->t1;
    if (rc == 0 || rc == HR_ECANCELED)
        hr_bs_remember(b, q);
    b->n_running--;
    b->f->done(b->f->ud, r);
    if (rc == 0 && hr_bs_refresh(b, q))
        return;
    b->mb[q->mb].n_members--;
    if (q->n_fly > 0) {
        q->zombie = true;
        hr_sampler_destroy(q->smp);
        q->smp = NULL;
    } else {
        hr_bs_free_slot(q);
    }
}

/* Hands back request r that never ran (parked) with rc. */
static void hr_bs_refuse(hr_bsess *b, hr_gen_req *r, int rc, const char *err) {
    memset(&r->st, 0, sizeof r->st);
    r->rc = rc;
    snprintf(r->err, sizeof r->err, "%s", err ? err : hr_strerror(rc));
    b->f->done(b->f->ud, r);
}

static void hr_bs_fail_all(hr_bsess *b, int rc, const char *err) {
    for (int s = 0; s < b->n_seq; s++) {
        if (b->seq[s].r && !b->seq[s].zombie)
            hr_bs_finish(b, &b->seq[s], rc, err);
        if (b->parked[s])
            hr_bs_refuse(b, b->parked[s], rc, err);
        b->parked[s] = NULL;
    }
}

/* The micro-batch with the fewest members. */
static int hr_bs_pick_mb(const hr_bsess *b) {
    int best = 0;
    for (int g = 1; g < b->n_mb; g++)
        if (b->mb[g].n_members < b->mb[best].n_members)
            best = g;
    return best;
}

/* Leading tokens a[0..na) and b[0..nb) share. */
static int hr_bs_common(const int32_t *a, int na, const int32_t *b, int nb) {
    int l = 0;
    while (a && l < na && l < nb && a[l] == b[l])
        l++;
    return l;
}

/* Shared prefixes shorter than this take the least recently used slot
 * rather than evict a longer conversation for a few tokens. */
#define HR_CACHE_MIN_REUSE 8

/* The free slot for a request of ids[n]: the one whose cache shares the
 * longest prefix with it (HR_CACHE_MIN_REUSE tokens at least), else slot 0
 * when it is free (a request alone there runs the single-sequence path),
 * else the least recently used. *cached: the
 * positions it may keep, at most n - 1 (the last prompt token is always
 * computed, for its logits), and never leaving a lone row where a cold
 * prefill's chunk has more (its numbers would differ). */
static int hr_bs_pick_slot(const hr_bsess *b, const int32_t *ids, int n, int *cached) {
    const hr_head *hd = b->a->head;
    int best = -1, best_l = -1, lru = -1, lru_l = 0;
    for (int s = 0; s < b->n_seq; s++) {
        if (b->seq[s].r || b->seq[s].refresh)
            continue;
        const hr_slot_cache *c = &hd->cache[s];
        int l = hr_bs_common(c->tok, c->n_exact, ids, n);
        if (l > best_l) {
            best = s;
            best_l = l;
        }
        if (lru < 0 || c->used < hd->cache[lru].used) {
            lru = s;
            lru_l = l;
        }
    }
    if (best_l < HR_CACHE_MIN_REUSE) { /* a chance match (BOS, a word): spare the others */
        best = lru;
        best_l = lru_l;
        if (!b->seq[0].r && !b->seq[0].refresh) { /* slot 0 first: a request alone there runs
                                                     the one-row kernels */
            best = 0;
            best_l = hr_bs_common(hd->cache[0].tok, hd->cache[0].n_exact, ids, n);
        }
    }
    int p = best_l < n - 1 ? best_l : n - 1, nb = b->a->lp.n_batch;
    if (p > 0 && p % nb != 0) {
        int end = (p / nb + 1) * nb;
        if ((end < n ? end : n) - p == 1)
            p--;
    }
    *cached = p > 0 ? p : 0;
    return best;
}

/* Slot s's refresh (none of its rows on the ring) is given up: its cache
 * keeps what hr_bs_finish recorded (the positions before the refresh's;
 * the one it may have fed again got the same numbers). */
static void hr_bs_drop_refresh(hr_bsess *b, int s) {
    b->evict[s] = false;
    b->mb[b->seq[s].mb].n_members--;
    b->n_refresh--;
    hr_bs_free_slot(&b->seq[s]);
}

static void hr_bs_drop_refreshes(hr_bsess *b) {
    for (int s = 0; s < b->n_seq; s++)
        if (b->seq[s].refresh)
            hr_bs_drop_refresh(b, s);
}

/* The slot in refresh whose tokens share more than `cached` (and at least
 * HR_CACHE_MIN_REUSE) leading tokens with ids[n], with no request waiting
 * for it yet; -1 if none. */
static int hr_bs_refresh_match(const hr_bsess *b, const int32_t *ids, int n, int cached) {
    int best = -1, best_l = cached > HR_CACHE_MIN_REUSE - 1 ? cached : HR_CACHE_MIN_REUSE - 1;
    for (int s = 0; s < b->n_seq; s++) {
        const hr_bseq *q = &b->seq[s];
        if (!q->refresh || b->parked[s])
            continue;
        int l = hr_bs_common(q->hist, q->n_hist, ids, n - 1);
        if (l > best_l) {
            best = s;
            best_l = l;
        }
    }
    return best;
}

/* Request r runs in free slot s, keeping `cached` positions of its KV. */
static void hr_bs_join(hr_bsess *b, hr_gen_req *r, int s, int cached) {
    const hr_local_plan *lp = &b->a->lp;
    const hr_hparams *hp = hr_model_hparams(b->a->m);
    hr_bseq *q = &b->seq[s];
    memset(&r->st, 0, sizeof r->st);
    atomic_store(&r->n_gen, 0);
    r->rc = 0;
    r->err[0] = 0;
    int max = r->max_tokens;
    if (r->logits) /* every position's logits: computed, not taken from the cache */
        cached = 0;
    if (r->n_ids < 1 || r->n_ids > lp->n_ctx || (r->n_ids == lp->n_ctx && !r->logits)) {
        char e[HR_ERR_LEN];
        snprintf(e, sizeof e, "prompt has %d tokens but the context holds %d", r->n_ids, lp->n_ctx);
        hr_bs_refuse(b, r, r->n_ids < 1 ? HR_EINVAL : HR_ERANGE, r->n_ids < 1 ? "empty prompt" : e);
        return;
    }
    if (max < 0 || r->n_ids + max > lp->n_ctx)
        max = lp->n_ctx - r->n_ids;
    if (r->logits)
        max = 0;
    memset(q, 0, sizeof *q);
    q->smp = hr_sampler_create(&r->sp, hp->n_vocab);
    q->hist = malloc(((size_t)r->n_ids + (size_t)max + 1) * sizeof *q->hist);
    if (!q->smp || !q->hist) {
        hr_bs_free_slot(q);
        hr_bs_refuse(b, r, HR_ENOMEM, "out of memory");
        return;
    }
    q->r = r;
    q->last = -1;
    q->n_prompt = q->n_hist = r->n_ids;
    q->max_tokens = max;
    memcpy(q->hist, r->ids, (size_t)r->n_ids * sizeof *q->hist);
    for (int i = 0; i < r->n_ids; i++)
        hr_sampler_accept(q->smp, r->ids[i]);
    hr_detok_init(&q->dt, false);
    q->fed = q->sent = q->exact = cached; /* KV of [0, cached) is on every device */
    r->st.n_cached = cached;
    b->a->head->cache[s].n_exact = 0; /* rewritten from `cached` on */
    b->a->head->cache[s].used = hr_now_s();
    q->t0 = hr_now_s();
    q->mb = hr_bs_pick_mb(b);
    b->mb[q->mb].n_members++;
    b->n_running++;
    r->st.n_prompt = r->n_ids;
    HR_LOG_DEBUG(TAG,
                 "session %llu: a request of %d tokens joins slot %d (%d cached), "
                 "micro-batch %d",
                 (unsigned long long)b->session, r->n_ids, s, cached, q->mb);
}

/* Takes waiting requests into free slots: first those parked for a slot
 * whose refresh is over, then new ones; a new one whose conversation a
 * slot in refresh holds waits for it. */
static void hr_bs_admit(hr_bsess *b) {
    for (int s = 0; s < b->n_seq; s++) {
        hr_gen_req *r = b->parked[s];
        if (!r || b->seq[s].refresh)
            continue;
        b->parked[s] = NULL;
        int cached = 0, t = hr_bs_pick_slot(b, r->ids, r->n_ids, &cached);
        hr_bs_join(b, r, t, cached);
    }
    for (;;) {
        int free_slots = 0, spare = -1;
        for (int s = 0; s < b->n_seq; s++) {
            const hr_bseq *q = &b->seq[s];
            free_slots += q->r == NULL && !q->refresh;
            if (q->refresh && q->n_fly == 0 && !b->parked[s] &&
                (spare < 0 || q->n_hist - q->fed > b->seq[spare].n_hist - b->seq[spare].fed))
                spare = s; /* the one with the most left to do */
        }
        if (free_slots == 0 && spare < 0)
            return;
        hr_gen_req *r = b->f->take(b->f->ud);
        if (!r)
            return;
        int cached = 0, s = free_slots > 0 ? hr_bs_pick_slot(b, r->ids, r->n_ids, &cached) : -1;
        int w = hr_bs_refresh_match(b, r->ids, r->n_ids, cached);
        if (w >= 0) {
            HR_LOG_DEBUG(TAG, "session %llu: a request of %d tokens waits for slot %d's refresh",
                         (unsigned long long)b->session, r->n_ids, w);
            b->parked[w] = r;
            continue;
        }
        if (s < 0 && b->seq[spare].n_fly > 0) { /* a refresh gives way once its rows are home */
            b->parked[spare] = r;
            b->evict[spare] = true;
            continue;
        }
        if (s < 0) { /* a refresh gives way: its cache keeps what it had before */
            hr_bs_drop_refresh(b, spare);
            s = hr_bs_pick_slot(b, r->ids, r->n_ids, &cached);
        }
        hr_bs_join(b, r, s, cached);
    }
}

/* Slot q's refresh is over: the cache holds its conversation, the slot is
 * free. */
static void hr_bs_refresh_done(hr_bsess *b, hr_bseq *q) {
    hr_bs_remember(b, q);
    hr_bs_drop_refresh(b, (int)(q - b->seq));
}

/* Requests whose cancel flag is set leave at once. */
static void hr_bs_cancels(hr_bsess *b) {
    for (int s = 0; s < b->n_seq; s++) {
        hr_bseq *q = &b->seq[s];
        if (q->r && !q->zombie && q->r->cancel && atomic_load(q->r->cancel))
            hr_bs_finish(b, q, HR_ECANCELED, "canceled");
        hr_gen_req *r = b->parked[s];
        if (r && r->cancel && atomic_load(r->cancel)) {
            b->parked[s] = NULL;
            hr_bs_refuse(b, r, HR_ECANCELED, "canceled");
        }
    }
}

/* ---- steps ---- */

/* A sampled token for request q from its logits; hands it back when it
 * ends. */
static void hr_bs_token(hr_bsess *b, hr_bseq *q, float *logits) {
    hr_gen_req *r = q->r;
    const hr_tokenizer *tok = b->a->tok;
    double now = hr_now_s();
    if (!q->sampled) {
        q->sampled = true;
        q->t1 = now;
        r->st.prompt_s = now - q->t0;
    }
    int32_t id = hr_sampler_sample(q->smp, logits);
    hr_sampler_accept(q->smp, id);
    q->last = id;
    bool eog = hr_tokenizer_is_eog(tok, id);
    char piece[512];
    int nb = eog ? 0 : hr_detok_push(&q->dt, tok, id, piece, sizeof piece);
    r->st.n_gen++;
    r->st.gen_s = now - q->t1;
    atomic_store(&r->n_gen, r->st.n_gen);
    if ((r->on_token && r->on_token(r->ud, id, piece, nb > 0 ? nb : 0)) || eog ||
        r->st.n_gen >= q->max_tokens) {
        hr_bs_finish(b, q, 0, NULL);
        return;
    }
    if (r->cancel && atomic_load(r->cancel)) {
        hr_bs_finish(b, q, HR_ECANCELED, "canceled");
        return;
    }
    q->hist[q->n_hist++] = id;
}

/* Request q asked for its prompt only (logits, or no tokens): it is
 * computed, q is handed back. */
static void hr_bs_prompt_done(hr_bsess *b, hr_bseq *q) {
    q->r->st.prompt_s = hr_now_s() - q->t0;
    hr_bs_finish(b, q, 0, NULL);
}

/* May refresh slot s send rows now? When a request waits for it (parked,
 * not to evict it), yes; otherwise only on an idle ring (no request
 * running) and one refreshing slot at a time, so that a request arriving
 * finds little on the ring before its own rows. */
static bool hr_bs_refresh_may(const hr_bsess *b, int s) {
    if (b->evict[s])
        return false;
    if (b->parked[s])
        return true;
    if (b->n_running > 0)
        return false;
    for (int t = 0; t < b->n_seq; t++)
        if (t != s && b->seq[t].refresh && b->seq[t].n_fly > 0)
            return false;
    return true;
}

/* Where request q's rows stop going in chunks (several to a step): its
 * prompt, and in a replay its generated tokens as decode rows. */
static int hr_bs_chunk_end(const hr_bsess *b, const hr_bseq *q) {
    return b->replay_dec && q->replay_to > q->n_prompt ? q->replay_to : q->n_prompt;
}

/* Adds request s's next rows to the step of micro-batch g being built
 * (n rows so far): one decode row, or its next prompt chunk up to the next
 * n_batch boundary (a cold prefill's chunks, so its numbers are those of
 * a prefill alone). Returns the rows after it, n when they do not fit. */
static int hr_bs_add(hr_bsess *b, int g, int s, int n) {
    const hr_local_plan *lp = &b->a->lp;
    hr_bmb *m = &b->mb[g];
    hr_bseq *q = &b->seq[s];
    int want = 1, p0 = q->sent;
    bool dec = false;
    if (q->sent < q->n_prompt) {
        int end = (q->sent / lp->n_batch + 1) * lp->n_batch;
        want = (end < q->n_prompt ? end : q->n_prompt) - q->sent;
    } else if (q->sent < hr_bs_chunk_end(b, q)) { /* decode rows, as first computed */
        int end = hr_bs_chunk_end(b, q);
        want = end - q->sent < lp->n_batch ? end - q->sent : lp->n_batch;
        dec = want > 1;
    }
    if (q->refresh && !hr_bs_refresh_may(b, s))
        return n;
    if (q->refresh && want == 1 && p0 > 0) { /* no lone row: a decode row's numbers */
        p0--;
        want = 2;
    }
    if (n + want > b->n_rows_max)
        return n;
    for (int i = 0; i < want; i++) {
        b->ids[n + i] = q->hist[p0 + i];
        b->slot[n + i] = s | (dec ? HR_RING_ROW_DECODE : 0);
        b->pos[n + i] = p0 + i;
        b->rows[n + i] = (hr_seq_pos){.seq = s, .pos = p0 + i, .decode = dec};
    }
    m->step_seq[m->n_step] = s;
    m->step_n[m->n_step] = want;
    m->step_pos[m->n_step] = p0;
    m->step_dec[m->n_step] = dec;
    m->n_step++;
    q->sent = p0 + want;
    q->n_fly++;
    return n + want;
}

/* Builds the next step of micro-batch g into the step buffers: its
 * members that have nothing on the ring, or (only >= 0) request `only`'s
 * next prompt chunk alone. Returns the rows (0: nothing to do). */
static int hr_bs_build(hr_bsess *b, int g, int only) {
    hr_bmb *m = &b->mb[g];
    int n = 0;
    m->n_step = 0;
    if (only >= 0) {
        n = hr_bs_add(b, g, only, 0);
    } else {
        for (int s = 0; s < b->n_seq; s++) {
            hr_bseq *q = &b->seq[s];
            if ((q->r || q->refresh) && !q->zombie && q->mb == g && q->n_fly == 0 &&
                q->sent < q->n_hist)
                n = hr_bs_add(b, g, s, n);
        }
    }
    m->n_rows = n;
    return n;
}

/* The head's window of round r over micro-batch g (rows in the step
 * buffers, hidden states in lp->hid). */
static int hr_bs_window(hr_bsess *b, int g, int r, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    hr_local_plan *lp = &a->lp;
    if (!lp->ctx[r]) /* no layers here this round */
        return 0;
    double t0 = hr_now_s();
    hr_node_window_start(a, b->mb[g].n_rows);
    int rc = hr_ctx_step(lp->ctx[r], lp->hid, b->rows, b->mb[g].n_rows, err);
    if (rc == 0) {
        hr_node_test_slow(a);
        hr_node_stats_round(a, (hr_now_s() - t0) * 1000.0, b->mb[g].n_rows, false);
    }
    return rc;
}

/* Sends micro-batch g's hidden states of round r to the next device. */
static int hr_bs_send(hr_bsess *b, int g, int r, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    hr_local_plan *lp = &a->lp;
    hr_bmb *m = &b->mb[g];
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    size_t rt = (size_t)m->n_rows * HR_RING_ROW_SIZE;
    hr_ring_rows_write(lp->frame + HR_RING_HDR_SIZE, b->slot, b->pos, m->n_rows);
    long len =
        hr_ring_pack(lp->frame + HR_RING_HDR_SIZE + rt, lp->frame_cap - HR_RING_HDR_SIZE - rt,
                     lp->hid, (size_t)m->n_rows * E, lp->dtype);
    if (len < 0)
        return hr_seterr(err, (int)len, "cannot pack %d rows", m->n_rows);
    hr_ring_hdr h = {.type = HR_RING_BATCH,
                     .dtype = (uint8_t)lp->dtype,
                     .round = (uint16_t)r,
                     .n_tok = (uint16_t)m->n_rows,
                     .pos = g,
                     .plan_id = lp->plan_id,
                     .req_id = b->session,
                     .len = (uint32_t)(rt + (size_t)len)};
    int rc = hr_ring_send(a->push, NULL, 0, lp->frame, &h, err);
    if (rc) {
        /* the next device is gone or stuck: give the heartbeats time to name it */
        double until = hr_now_s() + a->p.hb_timeout_ms / 1000.0 + 0.5;
        while (hr_now_s() < until && !atomic_load(&a->head->lost)) {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        return atomic_load(&a->head->lost) ? hr_head_lost_err(a->head, err) : rc;
    }
    m->flying = true;
    m->round = r;
    m->sent = hr_now_s();
    hr_node_after_window(a, lp, r, m->n_rows); /* after the send: off the ring's critical path */
    return 0;
}

/* Logs the end of a replay: every running request fed its history again. */
static void hr_bs_replayed(hr_bsess *b) {
    if (b->replay_t0 <= 0)
        return;
    for (int s = 0; s < b->n_seq; s++)
        if (b->seq[s].r && !b->seq[s].zombie && b->seq[s].fed < b->seq[s].replay_to)
            return;
    HR_LOG_INFO(TAG, "session %llu: replayed %d positions in %.2f s (%s)",
                (unsigned long long)b->session, b->replay_pos, hr_now_s() - b->replay_t0,
                b->replay_dec ? "generated tokens as decode rows, n_batch a step"
                              : "generated tokens one a step");
    b->replay_t0 = 0;
}

/* Micro-batch g's step came back from its last round (hidden states in
 * lp->hid): logits for the rows that end what a request had to feed,
 * sampling, and the requests move on. */
static void hr_bs_step_done(hr_bsess *b, int g) {
    hr_agent *a = b->a;
    hr_local_plan *lp = &a->lp;
    hr_bmb *m = &b->mb[g];
    size_t nv = (size_t)hr_model_hparams(a->m)->n_vocab;
    int n_out = 0, row = 0;
    for (int i = 0; i < m->n_step; i++) {
        hr_bseq *q = &b->seq[m->step_seq[i]];
        int p0 = m->step_pos[i], nr = m->step_n[i];
        if (q->r && !q->zombie && q->r->logits) /* the run's rows as a cold prefill's chunk */
            hr_ctx_output(lp->out_ctx, lp->hid, row, nr, q->r->logits + (size_t)p0 * nv);
        else if (q->r && !q->zombie && q->max_tokens > 0 && p0 + nr == q->n_hist)
            b->out_idx[n_out++] = row + nr - 1;
        row += nr;
    }
    if (n_out > 0)
        hr_ctx_output_rows(lp->out_ctx, lp->hid, b->out_idx, n_out, b->logits);
    hr_lock(&a->st.mu, HR_RANK_STATS);
    a->st.tokens += (uint64_t)m->n_rows;
    hr_unlock(&a->st.mu, HR_RANK_STATS);
    m->flying = false;
    int o = 0;
    for (int i = 0; i < m->n_step; i++) {
        hr_bseq *q = &b->seq[m->step_seq[i]];
        q->n_fly--;
        if (q->zombie) {
            if (q->n_fly == 0)
                hr_bs_free_slot(q);
            continue;
        }
        if (q->refresh && b->evict[m->step_seq[i]]) {
            if (q->n_fly == 0)
                hr_bs_drop_refresh(b, m->step_seq[i]);
            continue;
        }
        int p0 = m->step_pos[i], end = p0 + m->step_n[i];
        if (p0 > q->fed || end <= q->fed) /* steps come home in the order they left */
            HR_LOG_ERROR(TAG, "slot %d: a step at %d came home at %d", m->step_seq[i], p0, q->fed);
        /* rows of a chunk of two or more are a cold prefill's bit for bit (the
         * gemm tiles do not depend on the chunk's shape); a lone row, or a
         * replay's decode rows, are decode rows, the same where decode_exact
         * and no GPU runs layers */
        bool dec = m->step_n[i] < 2 || m->step_dec[i];
        if (q->exact >= p0 && (!dec || (a->head->decode_exact && !a->head->plan_gpu)))
            q->exact = end > q->exact ? end : q->exact;
        q->fed = end;
        if (q->fed == q->n_hist && q->refresh)
            hr_bs_refresh_done(b, q);
        else if (q->fed == q->n_hist && q->max_tokens == 0)
            hr_bs_prompt_done(b, q);
        else if (q->fed == q->n_hist)
            hr_bs_token(b, q, b->logits + (size_t)o++ * nv);
    }
    hr_bs_replayed(b);
}

/* Starts micro-batch g's next step (only: see hr_bs_build); on a single device (or a ring of the
 * head alone) it runs all rounds here and finishes. */
static int hr_bs_launch(hr_bsess *b, int g, int only, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    hr_local_plan *lp = &a->lp;
    int n = hr_bs_build(b, g, only);
    if (n == 0)
        return 0;
    int rc = hr_model_embed(a->m, b->ids, n, lp->hid, err);
    if (lp->n_active <= 1) {
        for (int r = 0; rc == 0 && r < lp->k; r++) {
            rc = hr_bs_window(b, g, r, err);
            hr_node_after_window(a, lp, r, n);
        }
        if (rc == 0)
            hr_bs_step_done(b, g);
        return rc;
    }
    if (rc == 0)
        rc = hr_bs_window(b, g, 0, err);
    if (rc == 0) {
        hr_node_push_connect(a);
        rc = hr_bs_send(b, g, 0, err);
    }
    return rc;
}

/* A frame came back: the next round of its micro-batch, or the end of
 * its step. Frames that are not ours are dropped. */
static int hr_bs_frame(hr_bsess *b, const hr_ring_hdr *h, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    hr_local_plan *lp = &a->lp;
    size_t E = (size_t)hr_model_hparams(a->m)->n_embd;
    int g = h->pos;
    if (h->type != HR_RING_BATCH || h->plan_id != lp->plan_id || h->req_id != b->session || g < 0 ||
        g >= HR_BS_MAX_MB || !b->mb[g].flying || h->round != b->mb[g].round ||
        h->n_tok != b->mb[g].n_rows || h->dtype != lp->dtype ||
        (size_t)h->len !=
            (size_t)h->n_tok * (HR_RING_ROW_SIZE + E * hr_ring_dtype_size(h->dtype))) {
        HR_LOG_WARN(TAG, "dropped unexpected %s frame on the data port (req %llu tag %d round %u)",
                    hr_ring_type_name(h->type), (unsigned long long)h->req_id, h->pos, h->round);
        return 0;
    }
    /* the rows are ours; put them back in the step buffers for the next window */
    hr_bmb *m = &b->mb[g];
    int n = 0;
    for (int i = 0; i < m->n_step; i++) {
        int s = m->step_seq[i], p0 = m->step_pos[i];
        bool dec = m->step_dec[i];
        for (int j = 0; j < m->step_n[i]; j++, n++) {
            b->slot[n] = s | (dec ? HR_RING_ROW_DECODE : 0);
            b->pos[n] = p0 + j;
            b->rows[n] = (hr_seq_pos){.seq = s, .pos = p0 + j, .decode = dec};
        }
    }
    size_t rt = (size_t)h->n_tok * HR_RING_ROW_SIZE;
    int rc = hr_ring_unpack(lp->hid, (size_t)h->n_tok * E, lp->rx + HR_RING_HDR_SIZE + rt,
                            h->len - rt, h->dtype);
    if (rc)
        return hr_seterr(err, rc, "bad hidden states from the ring");
    int r = h->round + 1;
    if (r == lp->k) {
        m->flying = false;
        hr_bs_step_done(b, g);
        return 0;
    }
    if ((rc = hr_bs_window(b, g, r, err)))
        return rc;
    return hr_bs_send(b, g, r, err);
}

/* ---- the prompt cache ---- */

void hr_head_cache_forget(hr_head *hd, int slot) {
    for (int s = 0; s < HR_AGENT_MAX_PARALLEL; s++)
        if (slot < 0 || s == slot)
            hd->cache[s].n_exact = 0;
}

/* The cache's token lists hold n_ctx (hr_bs_restart matches the cache to the plan in use). */
static int hr_bs_cache_check(hr_bsess *b, char err[HR_ERR_LEN]) {
    hr_head *hd = b->a->head;
    const hr_local_plan *lp = &b->a->lp;
    if (hd->cache_ctx != lp->n_ctx) {
        for (int s = 0; s < HR_AGENT_MAX_PARALLEL; s++) {
            free(hd->cache[s].tok);
            hd->cache[s] = (hr_slot_cache){0};
        }
        hd->cache_ctx = 0;
        for (int s = 0; s < b->n_seq; s++)
            if (!(hd->cache[s].tok = malloc((size_t)lp->n_ctx * sizeof *hd->cache[s].tok)))
                return hr_seterr(err, HR_ENOMEM, "out of memory for the prompt cache");
        hd->cache_ctx = lp->n_ctx;
    }
    return 0; /* a new plan's KV is forgotten by hr_bs_restart, which every session runs */
}

/* ---- plans: a lost device, an adaptive re-plan ---- */

/* A new plan is in use (KV empty everywhere): every running request feeds
 * its history again under a new session, in the same chunks. */
static void hr_bs_restart(hr_bsess *b) {
    hr_agent *a = b->a;
    b->session = a->head->next_req++;
    hr_head_post_simple(a, HR_RING_START, b->session);
    if (a->head->cache_plan != a->lp.plan_id) /* a new plan: fresh KV everywhere */
        hr_head_cache_forget(a->head, -1);
    a->head->cache_plan = a->lp.plan_id;
    int n_mb = a->lp.n_mb > 0 ? a->lp.n_mb : a->lp.n_active;
    b->n_mb = n_mb < 1 ? 1 : n_mb > b->n_seq ? b->n_seq : n_mb;
    /* a device that streams its weights reads each window once per step: the
     * chunks then go one at a time, in the order of the rounds */
    int depth = a->p.prefill_depth > 0 ? a->p.prefill_depth
                : a->lp.ring_streams   ? 1
                                       : a->lp.n_active * a->lp.k;
    b->depth = depth < 1 ? 1 : depth > HR_BS_MAX_MB - b->n_mb ? HR_BS_MAX_MB - b->n_mb : depth;
    hr_bs_drop_refreshes(b); /* a new plan's KV is empty: nothing to refresh */
    memset(b->mb, 0, sizeof b->mb);
    b->replay_pos = 0;
    /* generated tokens go again as decode rows, n_batch a step: what each
     * row computed first, bit for bit; GPU layers take them one token a
     * step (their decode and batch kernels differ) */
    b->replay_dec = !a->head->plan_gpu;
    for (int s = 0; s < b->n_seq; s++) {
        hr_bseq *q = &b->seq[s];
        if (q->zombie)
            hr_bs_free_slot(q);
        if (!q->r)
            continue;
        b->replay_t0 = hr_now_s();
        q->fed = q->sent = q->exact = 0;
        q->n_fly = 0;
        q->replay_to = q->n_hist;
        b->replay_pos += q->n_hist;
        q->mb = hr_bs_pick_mb(b);
        b->mb[q->mb].n_members++;
    }
}

static bool hr_bs_flying(const hr_bsess *b) {
    for (int g = 0; g < HR_BS_MAX_MB; g++)
        if (b->mb[g].flying)
            return true;
    return false;
}

/* After a lost device (rc from the ring): a plan over the devices that
 * remain, then the replay. */
static int hr_bs_recover(hr_bsess *b, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    uint32_t old = a->lp.plan_id;
    HR_LOG_WARN(TAG, "session %llu: %s; re-planning, then replaying %d requests",
                (unsigned long long)b->session, err, b->n_running);
    hr_head_post_simple(a, HR_RING_CANCEL, b->session);
    hr_local_plan np;
    int rc = hr_head_recover_wait(a->head, old, &np, err);
    if (rc == 0)
        rc = hr_head_gen_apply(a, &np, err);
    if (rc)
        return rc;
    hr_bs_restart(b);
    HR_LOG_INFO(TAG, "session %llu: recovered on plan %u; replaying",
                (unsigned long long)b->session, a->lp.plan_id);
    return 0;
}

/* The control thread asked for an adaptive re-plan of the plan in use and
 * nothing is on the ring: leave it, take the new one, replay. */
static int hr_bs_adapt(hr_bsess *b, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    uint32_t old = a->lp.plan_id;
    hr_head_post_simple(a, HR_RING_CANCEL, b->session);
    hr_local_plan np;
    int rc = hr_head_adapt_wait(a->head, old, &np, err);
    if (rc == 0)
        rc = hr_head_gen_apply(a, &np, err);
    if (rc)
        return rc;
    hr_bs_restart(b);
    HR_LOG_INFO(TAG, "session %llu: adaptive re-plan: plan %u -> %u; replaying %d requests",
                (unsigned long long)b->session, old, a->lp.plan_id, b->n_running);
    return 0;
}

static bool hr_bs_lost(hr_agent *a, int rc) {
    return (rc == HR_ENET || rc == HR_ETIMEDOUT) && atomic_load(&a->head->lost) != 0;
}

/* ---- the session ---- */

static void hr_bs_report(hr_bsess *b) {
    if (!b->f->batches)
        return;
    int rows[HR_AGENT_MAX_PARALLEL];
    for (int g = 0; g < b->n_mb; g++)
        rows[g] = b->mb[g].n_members > 0 ? b->mb[g].n_rows : 0;
    b->f->batches(b->f->ud, rows, b->n_mb);
}

static void hr_bs_progress(hr_bsess *b) {
    int done = 0, left = 0, hist = 0;
    for (int s = 0; s < b->n_seq; s++)
        if (b->seq[s].r && !b->seq[s].zombie) {
            done += b->seq[s].r->st.n_gen;
            left += b->seq[s].max_tokens - b->seq[s].r->st.n_gen;
            hist += b->seq[s].n_hist;
        }
    atomic_store(&b->a->head->gen_done, done); /* for head_adapt.c */
    atomic_store(&b->a->head->gen_left, left);
    atomic_store(&b->a->head->gen_hist, hist);
}

/* One turn: admit, launch idle micro-batches, take one frame. */
static int hr_bs_turn(hr_bsess *b, double *last_frame, char err[HR_ERR_LEN]) {
    hr_agent *a = b->a;
    hr_local_plan *lp = &a->lp;
    hr_bs_cancels(b);
    hr_bs_admit(b);
    bool adapt = atomic_load(&a->head->adapt) == lp->plan_id && lp->plan_id != 0;
    if (adapt && !hr_bs_flying(b) && b->n_running > 0)
        return hr_bs_adapt(b, err);
    if (adapt && !hr_bs_flying(b)) /* only refreshes left: give them up, the re-plan waits */
        hr_bs_drop_refreshes(b);
    int rc = 0;
    for (int g = 0; !adapt && g < b->n_mb && rc == 0; g++)
        if (!b->mb[g].flying && b->mb[g].n_members > 0) {
            rc = hr_bs_launch(b, g, -1, err);
            if (b->mb[g].flying)
                *last_frame = hr_now_s();
        }
    /* pipelined prefill: a prompt's next chunks follow its first around
     * the ring, up to depth on the way, each in a micro-batch of its own */
    for (int s = 0; !adapt && s < b->n_seq && rc == 0 && lp->n_active > 1; s++) {
        hr_bseq *q = &b->seq[s];
        for (int g = b->n_mb; g < HR_BS_MAX_MB && rc == 0; g++) {
            /* an idle-time refresh keeps one chunk on the ring: a request
             * arriving waits for little */
            int depth = q->refresh && !b->parked[s] ? 1 : b->depth;
            if ((!q->r && !q->refresh) || q->zombie || q->sent >= hr_bs_chunk_end(b, q) ||
                q->n_fly >= depth)
                break;
            if (b->mb[g].flying)
                continue;
            rc = hr_bs_launch(b, g, s, err);
            *last_frame = hr_now_s();
        }
    }
    if (rc)
        return rc;
    hr_bs_report(b);
    hr_bs_progress(b);
    if (!hr_bs_flying(b))
        return 0;
    if (atomic_load(&a->head->lost))
        return hr_head_lost_err(a->head, err);
    hr_ring_hdr h;
    char e2[HR_ERR_LEN] = "";
    long n = hr_ring_recv(a->pull, NULL, NULL, lp->rx, lp->frame_cap, 20, &h, e2);
    if (n < 0)
        HR_LOG_WARN(TAG, "rejected frame on the data port: %s", e2);
    if (n > 0) {
        *last_frame = hr_now_s();
        return hr_bs_frame(b, &h, err);
    }
    if (hr_now_s() - *last_frame > a->p.data_timeout_ms / 1000.0)
        return hr_seterr(err, HR_ETIMEDOUT, "no hidden state back from the ring within %d ms",
                         a->p.data_timeout_ms);
    return 0;
}

int hr_head_serve(hr_agent *a, const hr_gen_feed *feed, char err[HR_ERR_LEN]) {
    if (!a->is_head || !a->head)
        return hr_seterr(err, HR_EINVAL, "not a head");
    int rc = hr_head_gen_begin(a, err);
    if (rc)
        return rc;
    hr_local_plan *lp = &a->lp;
    hr_bsess *b = calloc(1, sizeof *b);
    size_t nv = (size_t)hr_model_hparams(a->m)->n_vocab;
    if (b) {
        b->a = a;
        b->f = feed;
        b->n_seq = lp->n_seq;
        b->n_rows_max = hr_local_plan_rows(lp);
        b->ids = malloc((size_t)b->n_rows_max * sizeof *b->ids);
        b->slot = malloc((size_t)b->n_rows_max * sizeof *b->slot);
        b->pos = malloc((size_t)b->n_rows_max * sizeof *b->pos);
        b->rows = malloc((size_t)b->n_rows_max * sizeof *b->rows);
        b->out_idx = malloc((size_t)b->n_seq * sizeof *b->out_idx);
        b->logits = malloc((size_t)b->n_seq * nv * sizeof *b->logits);
    }
    if (!b || !b->ids || !b->slot || !b->pos || !b->rows || !b->out_idx || !b->logits) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory for a batch session");
    } else if ((rc = hr_bs_cache_check(b, err)) == 0) {
        hr_bs_restart(b);
        double last_frame = hr_now_s();
        int recoveries = 0;
        for (;;) {
            if (atomic_load(&a->stop)) {
                hr_bs_fail_all(b, HR_ECANCELED, "agent stopping");
                break;
            }
            rc = hr_bs_turn(b, &last_frame, err);
            while (rc && hr_bs_lost(a, rc) && recoveries++ < HR_AGENT_MAX_DEV * 4)
                rc = hr_bs_recover(b, err);
            if (rc) {
                hr_bs_fail_all(b, rc, err);
                hr_head_cache_forget(a->head, -1); /* what the devices hold is unknown now */
                hr_head_post_simple(a, HR_RING_CANCEL, b->session); /* its frames are dropped */
                rc = 0;
                break;
            }
            if (b->n_running == 0 && b->n_refresh == 0 && !hr_bs_flying(b)) {
                hr_bs_admit(b);
                if (b->n_running == 0)
                    break;
            }
        }
        hr_bs_report(b);
    }
    if (b) {
        for (int s = 0; s < b->n_seq; s++)
            if (b->seq[s].r || b->seq[s].hist)
                hr_bs_free_slot(&b->seq[s]);
        free(b->ids);
        free(b->slot);
        free(b->pos);
        free(b->rows);
        free(b->out_idx);
        free(b->logits);
        free(b);
    }
    atomic_store(&a->head->gen_done, 0);
    atomic_store(&a->head->gen_left, 0);
    atomic_store(&a->head->gen_hist, 0);
    hr_head_gen_end(a);
    return rc;
}

/* ---- one request: a session of one ---- */

typedef struct {
    hr_gen_req r;
    bool taken;
} hr_bs_one;

static hr_gen_req *hr_bs_one_take(void *ud) {
    hr_bs_one *o = ud;
    if (o->taken)
        return NULL;
    o->taken = true;
    return &o->r;
}

static void hr_bs_one_done(void *ud, hr_gen_req *r) {
    (void)ud;
    (void)r; /* rc, err and st are read when the session returns */
}

/* Runs o's request in a session of its own; its rc, err with it. */
static int hr_bs_one_run(hr_agent *a, hr_bs_one *o, char err[HR_ERR_LEN]) {
    hr_gen_feed f = {.take = hr_bs_one_take, .done = hr_bs_one_done, .ud = o};
    int rc = hr_head_serve(a, &f, err);
    if (rc)
        return rc;
    if (!o->taken) /* the session ended before taking it (the agent stops) */
        return hr_seterr(err, HR_ECANCELED, "agent stopping");
    if (o->r.rc)
        snprintf(err, HR_ERR_LEN, "%s", o->r.err);
    return o->r.rc;
}

int hr_head_generate(hr_agent *a, const int32_t *ids, int n_ids, const hr_sampler_params *sp,
                     int max_tokens, hr_head_token_fn on_token, void *ud, const atomic_int *cancel,
                     hr_head_stats *stats, char err[HR_ERR_LEN]) {
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!a->is_head || !a->head)
        return hr_seterr(err, HR_EINVAL, "not a head");
    if (n_ids < 1)
        return hr_seterr(err, HR_EINVAL, "empty prompt");
    hr_bs_one o = {.r = {.ids = ids,
                         .n_ids = n_ids,
                         .sp = *sp,
                         .max_tokens = max_tokens,
                         .on_token = on_token,
                         .ud = ud,
                         .cancel = cancel}};
    int rc = hr_bs_one_run(a, &o, err);
    if (stats)
        *stats = o.r.st;
    return rc;
}

int hr_head_logits(hr_agent *a, const int32_t *ids, int n, float *logits, char err[HR_ERR_LEN]) {
    if (!a->is_head || !a->head)
        return hr_seterr(err, HR_EINVAL, "not a head");
    if (n < 1)
        return hr_seterr(err, HR_EINVAL, "no tokens");
    hr_bs_one o = {
        .r = {.ids = ids, .n_ids = n, .sp = hr_sampler_params_default(), .logits = logits}};
    return hr_bs_one_run(a, &o, err);
}
