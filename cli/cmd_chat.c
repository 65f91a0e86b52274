/* cmd_chat.c - `hearth chat`: a multi-turn chat on stdin/stdout that keeps
 * the KV cache between turns, so each turn evaluates only its new tokens
 * (the end of the previous reply, the user's message and the assistant
 * header). Also the --stop parsing shared with `hearth run`. */
#include "cli/cli.h"

#include "common/log.h"
#include "common/sync.h"
#include "mmap/gguf.h"
#include "model/chat.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define TAG "chat"

void hr_cli_stop_free(char **v, int n) {
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

int hr_cli_stop_list(const hr_cli *o, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    if (o->stop.n == 0)
        return 0;
    char **v = calloc(HR_GEN_MAX_STOP, sizeof *v);
    if (!v)
        return hr_cli_fail("out of memory");
    int k = 0;
    for (int i = 0; i < o->stop.n; i++) {
        const char *s = o->stop.v[i];
        size_t len = strlen(s);
        char *cur = malloc(len + 1);
        size_t cl = 0;
        if (!cur) {
            hr_cli_stop_free(v, k);
            return hr_cli_fail("out of memory");
        }
        for (size_t j = 0; j <= len; j++) {
            char c = s[j];
            if (c == '\\' && j + 1 < len) {
                char e = s[++j];
                if (e == 'n' || e == 't' || e == 'r')
                    cur[cl++] = e == 'n' ? '\n' : e == 't' ? '\t' : '\r';
                else if (e == ',' || e == '\\')
                    cur[cl++] = e;
                else { /* unknown escape: kept as written */
                    cur[cl++] = '\\';
                    cur[cl++] = e;
                }
                continue;
            }
            if (c != ',' && c != 0) {
                cur[cl++] = c;
                continue;
            }
            if (cl > 0) {
                if (k == HR_GEN_MAX_STOP) {
                    free(cur);
                    hr_cli_stop_free(v, k);
                    return hr_cli_fail("at most %d stop strings", HR_GEN_MAX_STOP);
                }
                cur[cl] = 0;
                v[k] = malloc(cl + 1);
                if (!v[k]) {
                    free(cur);
                    hr_cli_stop_free(v, k);
                    return hr_cli_fail("out of memory");
                }
                memcpy(v[k++], cur, cl + 1);
            }
            cl = 0;
        }
        free(cur);
    }
    *out = v;
    *n = k;
    return 0;
}

/* The conversation: messages with owned content. */
typedef struct {
    hr_chat_msg *m;
    int n, cap;
} hr_convo;

static int hr_convo_add(hr_convo *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        hr_chat_msg *m = realloc(c->m, (size_t)cap * sizeof *m);
        if (!m)
            return HR_ENOMEM;
        c->m = m;
        c->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s)
        return HR_ENOMEM;
    memcpy(s, content, len);
    s[len] = 0;
    c->m[c->n++] = (hr_chat_msg){role, s};
    return 0;
}

static void hr_convo_truncate(hr_convo *c, int n) {
    while (c->n > n)
        free((char *)c->m[--c->n].content);
}

/* Everything the chat holds. */
typedef struct {
    hr_gguf *g;
    hr_model *m;
    hr_tokenizer *tok;
    hr_ctx *ctx;
    hr_sampler *smp;
    hr_gen *gen;
    hr_chat_template tmpl;
    float *logits; /* [n_vocab] */
    char *text;    /* rendered turn */
    size_t text_cap;
    int32_t *ids; /* tokens of the rendered turn */
    int ids_cap;
    int n_ctx;
    int n_past; /* positions the KV cache holds */
} hr_sess;

static void hr_sess_close(hr_sess *c) {
    hr_gen_destroy(c->gen);
    hr_sampler_destroy(c->smp);
    hr_ctx_destroy(c->ctx);
    hr_tokenizer_destroy(c->tok);
    hr_model_free(c->m);
    hr_gguf_close(c->g);
    free(c->logits);
    free(c->text);
    free(c->ids);
}

static int hr_sess_open(hr_sess *c, const hr_cli *o, char **stops, int n_stops) {
    char err[HR_ERR_LEN] = "";
    if (!o->model)
        return hr_cli_fail("no model given (use -m MODEL.gguf)");
    if (hr_gguf_open(&c->g, o->model, err))
        return hr_cli_fail("cannot open model: %s", err);
    if (hr_model_load(&c->m, c->g, err))
        return hr_cli_fail("%s: %s", o->model, err);
    if (hr_tokenizer_create(&c->tok, c->g, err))
        return hr_cli_fail("%s: tokenizer: %s", o->model, err);
    if (hr_chat_template_pick(&c->tmpl, c->g, c->tok, o->chat_template, err))
        return hr_cli_fail("%s", err);
    const hr_hparams *hp = hr_model_hparams(c->m);
    c->n_ctx = hr_hparams_ctx(hp, o->ctx);
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = c->n_ctx;
    cp.n_batch = o->batch > 0 ? o->batch : 64;
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    cp.n_threads = o->threads > 0 ? o->threads : nproc > 0 ? (int)(nproc > 64 ? 64 : nproc) : 1;
    if (hr_ctx_create(&c->ctx, c->m, &cp, err))
        return hr_cli_fail("%s", err);
    HR_LOG_INFO(TAG, "context %d tokens (the model was trained on %d), %d thread%s%s", c->n_ctx,
                hp->n_ctx_train, cp.n_threads, cp.n_threads == 1 ? "" : "s",
                o->threads > 0 ? "" : " (every online core, at most 64)");
    hr_sampler_params sp = hr_cli_sampler(o);
    c->smp = hr_sampler_create(&sp, hp->n_vocab);
    c->logits = malloc((size_t)hp->n_vocab * sizeof *c->logits);
    c->ids_cap = 256;
    c->ids = malloc((size_t)c->ids_cap * sizeof *c->ids);
    if (!c->smp || !c->logits || !c->ids)
        return hr_cli_fail("out of memory");
    hr_gen_params gp = hr_gen_params_default();
    gp.stop = (const char *const *)stops;
    gp.n_stop = n_stops;
    gp.max_tokens = o->max_tokens > 0 ? o->max_tokens : 0;
    gp.strip_leading_space = true;
    if (hr_gen_create(&c->gen, c->tok, &gp, err))
        return hr_cli_fail("%s", err);
    HR_LOG_INFO(TAG, "template %s, context %d tokens", hr_chat_kind_name(c->tmpl.kind), c->n_ctx);
    return 0;
}

/* Renders and tokenizes what the cache lacks for msgs[n_done..n) plus the
 * assistant header into c->ids; returns the count or -1 (error printed). */
static int hr_sess_turn_ids(hr_sess *c, const hr_convo *cv, int n_done) {
    char err[HR_ERR_LEN] = "";
    int len = hr_chat_render_continue(&c->tmpl, cv->m, n_done, cv->n, true, NULL, 0, err);
    if (len < 0) {
        hr_cli_fail("%s", err);
        return -1;
    }
    if ((size_t)len + 1 > c->text_cap) {
        char *t = realloc(c->text, (size_t)len + 1);
        if (!t) {
            hr_cli_fail("out of memory");
            return -1;
        }
        c->text = t;
        c->text_cap = (size_t)len + 1;
    }
    hr_chat_render_continue(&c->tmpl, cv->m, n_done, cv->n, true, c->text, c->text_cap, err);
    int32_t bos = hr_tokenizer_bos(c->tok);
    bool add_bos = c->n_past == 0 && bos >= 0 && hr_tokenizer_add_bos(c->tok);
    for (;;) {
        int n = 0;
        int cap = c->ids_cap - 1; /* room for a BOS in front */
        if (hr_tokenizer_encode(c->tok, c->text, (size_t)len, false, true, c->ids + 1, cap, &n)) {
            hr_cli_fail("cannot tokenize the conversation");
            return -1;
        }
        if (n <= cap) {
            if (add_bos && (n == 0 || c->ids[1] != bos)) {
                c->ids[0] = bos;
                return n + 1;
            }
            memmove(c->ids, c->ids + 1, (size_t)n * sizeof *c->ids);
            return n;
        }
        int32_t *ids = realloc(c->ids, ((size_t)n + 1) * sizeof *ids);
        if (!ids) {
            hr_cli_fail("out of memory");
            return -1;
        }
        c->ids = ids;
        c->ids_cap = n + 1;
    }
}

/* Ctrl-C: stops the reply being written (or drops the line being typed);
 * the conversation stays. */
static volatile sig_atomic_t hr_chat_intr;

static void hr_chat_on_sigint(int sig) {
    (void)sig;
    hr_chat_intr = 1;
}

/* Reads one user message: a line, continued on the next while it ends in
 * a backslash. Returns its length, or -1 at end of input. Ctrl-C drops
 * what was typed and asks again. */
static long hr_read_message(char **buf, size_t *cap, bool tty) {
    size_t len = 0;
    char *line = NULL;
    size_t lcap = 0;
    if (tty) {
        fputs("> ", stdout);
        fflush(stdout);
    }
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &lcap, stdin);
        if (got < 0 && errno == EINTR && hr_chat_intr) {
            hr_chat_intr = 0;
            clearerr(stdin);
            len = 0;
            fputs("\n(Ctrl-C: /exit or Ctrl-D quits)\n", stderr);
            if (tty) {
                fputs("> ", stdout);
                fflush(stdout);
            }
            continue;
        }
        if (got < 0) {
            free(line);
            return len > 0 ? (long)len : -1;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        bool more = got > 0 && line[got - 1] == '\\';
        if (more)
            line[--got] = '\n';
        if (len + (size_t)got + 1 > *cap) {
            size_t nc = (len + (size_t)got + 1) * 2;
            char *nb = realloc(*buf, nc);
            if (!nb) {
                free(line);
                return -1;
            }
            *buf = nb;
            *cap = nc;
        }
        memcpy(*buf + len, line, (size_t)got);
        len += (size_t)got;
        (*buf)[len] = 0;
        if (!more)
            break;
        if (tty) {
            fputs(". ", stdout);
            fflush(stdout);
        }
    }
    free(line);
    return (long)len;
}

/* Evaluates ids at the cache's end, leaving the last token's logits. */
static int hr_sess_eval(hr_sess *c, const int32_t *ids, int n) {
    char err[HR_ERR_LEN] = "";
    if (hr_ctx_eval(c->ctx, ids, n, c->n_past, c->logits, false, err))
        return hr_cli_fail("evaluation failed: %s", err);
    c->n_past += n;
    return 0;
}

/* One assistant reply, streamed to stdout. Returns 0 or 1 (error). */
static int hr_sess_reply(hr_sess *c, bool *ctx_full, bool *interrupted, int *n_reply) {
    hr_gen_begin(c->gen);
    hr_finish fin = HR_FINISH_NONE;
    size_t nb;
    const char *d;
    while (fin == HR_FINISH_NONE) {
        if (hr_chat_intr) { /* Ctrl-C: the reply ends here, the conversation goes on */
            hr_gen_finish(c->gen, HR_FINISH_STOP);
            *interrupted = true;
            break;
        }
        if (c->n_past >= c->n_ctx) {
            hr_gen_finish(c->gen, HR_FINISH_LENGTH);
            *ctx_full = true;
            break;
        }
        int32_t id = hr_sampler_sample(c->smp, c->logits);
        hr_sampler_accept(c->smp, id);
        if (hr_gen_push(c->gen, id, &fin))
            return hr_cli_fail("cannot decode token %d", (int)id);
        d = hr_gen_delta(c->gen, &nb);
        if (nb) {
            fwrite(d, 1, nb, stdout);
            fflush(stdout);
        }
        /* the cache keeps every reply token but an end-of-turn one: the
         * next turn's text starts with the end-of-turn marker */
        if ((fin == HR_FINISH_NONE || fin == HR_FINISH_LENGTH) && c->n_past < c->n_ctx &&
            hr_sess_eval(c, &id, 1))
            return 1;
    }
    d = hr_gen_delta(c->gen, &nb);
    if (nb)
        fwrite(d, 1, nb, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    *n_reply = hr_gen_n_tokens(c->gen);
    return 0;
}

/* need: tokens the refused turn needed (0 when a reply filled the context). */
static void hr_sess_full(const hr_sess *c, int need) {
    if (need > 0)
        fprintf(stderr,
                "hearth: the context is full: this message needs %d tokens and %d of %d are "
                "free; type /reset to start over, or restart with a larger --ctx\n",
                need + 1, c->n_ctx - c->n_past, c->n_ctx);
    else
        fprintf(stderr,
                "hearth: the context is full (%d of %d tokens); type /reset to start over, or "
                "restart with a larger --ctx\n",
                c->n_past, c->n_ctx);
}

const hr_cli_opt hr_cmd_chat_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_model),
    HR_CLI_OPT("template", 0, STR, chat_template, "NAME",
               "chatml, llama3, llama2, mistral, gemma, phi3 or harmony (default: from the model)"),
    HR_CLI_OPT("system", 0, STR, system, "TEXT", "system message"),
    HR_CLI_OPT("ctx", 'c', COUNT, ctx, "N", "context size in tokens (default min(train, 4096))"),
    HR_CLI_OPT("batch", 'b', COUNT, batch, "N", "prompt batch size (default 64)"),
    HR_CLI_OPTS(hr_cli_opts_threads),
    HR_CLI_OPTS(hr_cli_opts_sampling),
    HR_CLI_OPTS(hr_cli_opts_penalties),
    HR_CLI_OPTS(hr_cli_opts_reply),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(chat) {
    hr_sess c;
    memset(&c, 0, sizeof c);
    hr_convo cv = {NULL, 0, 0};
    char **stops = NULL;
    int n_stops = 0, rc = 1;
    char *line = NULL;
    size_t line_cap = 0;
    struct termios tio0; /* the terminal's settings, restored at the end */
    bool tio_set = false;
    if (hr_cli_stop_list(o, &stops, &n_stops) || hr_sess_open(&c, o, stops, n_stops))
        goto done;
    bool tty = isatty(STDIN_FILENO) != 0;
    if (tty)
        fprintf(stderr,
                "hearth chat (%s template, %d-token context): /help lists the commands; "
                "Ctrl-C stops a reply, /exit or Ctrl-D quits\n",
                hr_chat_kind_name(c.tmpl.kind), c.n_ctx);
    /* NOFLSH: the terminal would otherwise drop what is written just after
     * Ctrl-C (the end of the reply, its statistics) */
    if (tty && tcgetattr(STDIN_FILENO, &tio0) == 0) {
        struct termios t = tio0;
        t.c_lflag |= NOFLSH;
        tio_set = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hr_chat_on_sigint; /* no SA_RESTART: Ctrl-C interrupts reading a line */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    int n_base = 0; /* messages every conversation starts with */
    if (o->system && o->system[0]) {
        if (hr_convo_add(&cv, "system", o->system, strlen(o->system))) {
            hr_cli_fail("out of memory");
            goto done;
        }
        n_base = 1;
    }
    int n_done = 0, turn = 0;
    bool ctx_full = false;
    for (;;) {
        long len = hr_read_message(&line, &line_cap, tty);
        if (len < 0) {
            if (tty)
                fputc('\n', stdout);
            break;
        }
        if (len == 0)
            continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0)
            break;
        if (strcmp(line, "/help") == 0 || strcmp(line, "/?") == 0) {
            fprintf(stderr, "/reset   start a new conversation (the system message stays)\n"
                            "/exit    quit (also /quit, Ctrl-D)\n"
                            "/help    this list\n"
                            "Ctrl-C   stop the reply being written; the conversation goes on\n"
                            "a line ending in \\ continues on the next; //text sends /text\n");
            continue;
        }
        if (line[0] == '/' && line[1] == '/') { /* an escaped slash: the message is /... */
            memmove(line, line + 1, (size_t)len);
            len--;
        } else if (line[0] == '/' && strcmp(line, "/reset") != 0) {
            fprintf(stderr,
                    "unknown command %s (type /help; to send a message that starts with /, "
                    "write //)\n",
                    line);
            continue;
        }
        if (strcmp(line, "/reset") == 0) {
            hr_convo_truncate(&cv, n_base);
            n_done = 0;
            c.n_past = 0;
            ctx_full = false;
            hr_sampler_reset(c.smp);
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (ctx_full) {
            hr_sess_full(&c, 0);
            continue;
        }
        if (hr_convo_add(&cv, "user", line, (size_t)len)) {
            hr_cli_fail("out of memory");
            goto done;
        }
        int n_new = hr_sess_turn_ids(&c, &cv, n_done);
        if (n_new < 0)
            goto done;
        if (c.n_past + n_new >= c.n_ctx) { /* the turn and one reply token must fit */
            hr_convo_truncate(&cv, cv.n - 1);
            hr_sess_full(&c, n_new);
            continue;
        }
        turn++;
        HR_LOG_INFO(TAG, "turn %d: %d new tokens at position %d", turn, n_new, c.n_past);
        for (int i = 0; i < n_new; i++)
            hr_sampler_accept(c.smp, c.ids[i]);
        double t0 = hr_now_s();
        if (n_new > 0 && hr_sess_eval(&c, c.ids, n_new))
            goto done;
        double t1 = hr_now_s();
        int n_reply = 0;
        bool interrupted = false;
        if (hr_sess_reply(&c, &ctx_full, &interrupted, &n_reply))
            goto done;
        hr_chat_intr = 0;
        double t2 = hr_now_s();
        size_t rlen = 0;
        const char *reply = hr_gen_text(c.gen, &rlen);
        if (hr_convo_add(&cv, "assistant", reply, rlen)) {
            hr_cli_fail("out of memory");
            goto done;
        }
        n_done = cv.n;
        fprintf(stderr,
                "[prompt %d tokens, %.1f tokens/s | reply %d tokens, %.1f tokens/s | %s | "
                "context %d/%d]\n",
                n_new, n_new / (t1 - t0 > 0 ? t1 - t0 : 1e-9), n_reply,
                n_reply / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
                interrupted ? "stopped by Ctrl-C" : hr_finish_name(hr_gen_finish_reason(c.gen)),
                c.n_past, c.n_ctx);
        if (ctx_full)
            hr_sess_full(&c, 0);
    }
    rc = 0;
done:
    if (tio_set)
        tcsetattr(STDIN_FILENO, TCSANOW, &tio0);
    free(line);
    hr_convo_truncate(&cv, 0);
    free(cv.m);
    hr_cli_stop_free(stops, n_stops);
    hr_sess_close(&c);
    return rc;
}
