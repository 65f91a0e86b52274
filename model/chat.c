/* chat.c - built-in chat templates (ChatML, Llama 3, Llama 2, Mistral,
 * Gemma, Phi-3, harmony),
 * their recognition from tokenizer.chat_template, and rendering of whole
 * conversations or of the tail a KV cache still lacks. */
#include "model/chat.h"

#include "common/log.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define TAG "chat"

static const char *const k_names[HR_CHAT_COUNT] = {"chatml", "llama3", "llama2", "mistral",
                                                   "gemma",  "phi3",   "harmony"};

const char *hr_chat_kind_name(hr_chat_kind k) {
    return (int)k >= 0 && k < HR_CHAT_COUNT ? k_names[k] : "?";
}

int hr_chat_kind_parse(const char *name, hr_chat_kind *out, char err[HR_ERR_LEN]) {
    static const struct {
        const char *name;
        hr_chat_kind kind;
    } alias[] = {
        {"chatml", HR_CHAT_CHATML},   {"qwen", HR_CHAT_CHATML},     {"qwen2", HR_CHAT_CHATML},
        {"llama3", HR_CHAT_LLAMA3},   {"llama-3", HR_CHAT_LLAMA3},  {"llama2", HR_CHAT_LLAMA2},
        {"llama-2", HR_CHAT_LLAMA2},  {"mistral", HR_CHAT_MISTRAL}, {"gemma", HR_CHAT_GEMMA},
        {"gemma3", HR_CHAT_GEMMA},    {"phi3", HR_CHAT_PHI3},       {"phi-3", HR_CHAT_PHI3},
        {"harmony", HR_CHAT_HARMONY}, {"gpt-oss", HR_CHAT_HARMONY},
    };
    for (size_t i = 0; name && i < sizeof alias / sizeof alias[0]; i++) {
        if (strcasecmp(name, alias[i].name) == 0) {
            *out = alias[i].kind;
            return 0;
        }
    }
    return hr_seterr(err, HR_EINVAL,
                     "unknown chat template '%s' (known: chatml, llama3, llama2, mistral, gemma, "
                     "phi3, harmony)",
                     name ? name : "(null)");
}

static void hr_copy_token(char dst[HR_CHAT_TOKEN_LEN], const char *src) {
    snprintf(dst, HR_CHAT_TOKEN_LEN, "%s", src ? src : "");
}

hr_chat_template hr_chat_template_init(hr_chat_kind k) {
    hr_chat_template t;
    memset(&t, 0, sizeof t);
    t.kind = (int)k >= 0 && k < HR_CHAT_COUNT ? k : HR_CHAT_CHATML;
    if (t.kind == HR_CHAT_LLAMA3) {
        hr_copy_token(t.bos, "<|begin_of_text|>");
    } else if (t.kind == HR_CHAT_GEMMA) {
        hr_copy_token(t.bos, "<bos>");
    } else if (t.kind == HR_CHAT_LLAMA2 || t.kind == HR_CHAT_MISTRAL) {
        hr_copy_token(t.bos, "<s>");
        hr_copy_token(t.eos, "</s>");
    }
    return t;
}

int hr_chat_detect(const char *jinja, hr_chat_kind *out) {
    if (!jinja)
        return HR_ENOENT;
    if (strstr(jinja, "<|im_start|>"))
        *out = HR_CHAT_CHATML;
    else if (strstr(jinja, "<|start_header_id|>"))
        *out = HR_CHAT_LLAMA3;
    else if (strstr(jinja, "[INST]"))
        *out = strstr(jinja, "<<SYS>>") ? HR_CHAT_LLAMA2 : HR_CHAT_MISTRAL;
    else if (strstr(jinja, "<start_of_turn>"))
        *out = HR_CHAT_GEMMA;
    else if (strstr(jinja, "<|channel|>"))
        *out = HR_CHAT_HARMONY;
    else if (strstr(jinja, "<|assistant|>"))
        *out = HR_CHAT_PHI3;
    else
        return HR_ENOENT;
    return 0;
}

int hr_chat_template_pick(hr_chat_template *out, const hr_gguf *g, const hr_tokenizer *tok,
                          const char *name, char err[HR_ERR_LEN]) {
    hr_chat_kind k = HR_CHAT_CHATML;
    if (name) {
        int rc = hr_chat_kind_parse(name, &k, err);
        if (rc)
            return rc;
    } else {
        const char *jinja = NULL;
        if (g && hr_gguf_get_str(g, "tokenizer.chat_template", &jinja) != 0)
            jinja = NULL;
        if (hr_chat_detect(jinja, &k) == 0) {
            HR_LOG_INFO(TAG, "chat template recognized as %s", hr_chat_kind_name(k));
        } else {
            const char *why = jinja ? "is not one of the built-in formats" : "is absent";
            if (tok && hr_tokenizer_find(tok, "<|start_header_id|>") >= 0 &&
                hr_tokenizer_find(tok, "<|im_start|>") < 0)
                k = HR_CHAT_LLAMA3;
            HR_LOG_WARN(TAG,
                        "tokenizer.chat_template %s; using %s (choose one by name to override)",
                        why, hr_chat_kind_name(k));
        }
    }
    *out = hr_chat_template_init(k);
    if (tok && (k == HR_CHAT_LLAMA3 || k == HR_CHAT_LLAMA2 || k == HR_CHAT_MISTRAL ||
                k == HR_CHAT_GEMMA)) {
        int32_t bos = hr_tokenizer_bos(tok), eos = hr_tokenizer_eos(tok);
        const char *bt = bos >= 0 ? hr_tokenizer_token_text(tok, bos) : NULL;
        const char *et = eos >= 0 ? hr_tokenizer_token_text(tok, eos) : NULL;
        hr_copy_token(out->bos, bt);
        if (k != HR_CHAT_LLAMA3 && et)
            hr_copy_token(out->eos, et);
    }
    return 0;
}

/* ---- rendering ---- */

/* Output sink that drops the first `skip` bytes and counts everything. */
typedef struct {
    char *buf;
    size_t cap;
    size_t pos;  /* bytes produced so far, skipped ones included */
    size_t skip; /* leading bytes to drop */
} hr_sink;

static void hr_put(hr_sink *w, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++, w->pos++) {
        if (w->pos < w->skip)
            continue;
        size_t o = w->pos - w->skip;
        if (o + 1 < w->cap)
            w->buf[o] = s[i];
    }
}

static void hr_puts(hr_sink *w, const char *s) { hr_put(w, s, strlen(s)); }

static bool hr_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Content with leading and trailing whitespace removed (Jinja's trim). */
static void hr_put_trimmed(hr_sink *w, const char *s) {
    size_t n = strlen(s), b = 0;
    while (b < n && hr_is_space(s[b]))
        b++;
    while (n > b && hr_is_space(s[n - 1]))
        n--;
    hr_put(w, s + b, n - b);
}

static bool hr_role_is(const hr_chat_msg *m, const char *role) {
    return strcmp(m->role, role) == 0;
}

/* Length of the end-of-turn text of an assistant reply that a context
 * holding the generated reply still lacks. */
static size_t hr_close_len(const hr_chat_template *t) {
    switch (t->kind) {
    case HR_CHAT_CHATML:
        return strlen("<|im_end|>\n");
    case HR_CHAT_LLAMA3:
        return strlen("<|eot_id|>");
    case HR_CHAT_GEMMA:
        return strlen("<end_of_turn>\n");
    case HR_CHAT_PHI3:
        return strlen("<|end|>\n");
    case HR_CHAT_HARMONY:
        return strlen("<|end|>");
    default:
        return strlen(t->eos);
    }
}

static int hr_check_msgs(const hr_chat_template *t, const hr_chat_msg *msgs, int n,
                         char err[HR_ERR_LEN]) {
    if (n < 0 || (n > 0 && !msgs))
        return hr_seterr(err, HR_EINVAL, "chat: bad message list");
    if ((int)t->kind < 0 || t->kind >= HR_CHAT_COUNT)
        return hr_seterr(err, HR_EINVAL, "chat: bad template kind %d", (int)t->kind);
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !*r || !msgs[i].content)
            return hr_seterr(err, HR_EINVAL, "chat: message %d has no role or no content", i);
        if (t->kind == HR_CHAT_LLAMA2 || t->kind == HR_CHAT_MISTRAL || t->kind == HR_CHAT_GEMMA) {
            if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
                return hr_seterr(err, HR_EINVAL,
                                 "chat: the %s template has no role '%s' (message %d)",
                                 hr_chat_kind_name(t->kind), r, i);
        } else if (strpbrk(r, "<>\n")) {
            return hr_seterr(err, HR_EINVAL, "chat: bad role name in message %d", i);
        }
    }
    return 0;
}

/* Llama 2 / Mistral fold system messages into the next user turn. */
static void hr_put_inst(hr_sink *w, const hr_chat_template *t, const hr_chat_msg *msgs,
                        int sys_begin, int sys_end, const char *user) {
    if (t->kind == HR_CHAT_LLAMA2) {
        hr_puts(w, t->bos);
        hr_puts(w, "[INST] ");
        if (sys_end > sys_begin) {
            hr_puts(w, "<<SYS>>\n");
            for (int i = sys_begin; i < sys_end; i++) {
                if (i > sys_begin)
                    hr_puts(w, "\n");
                hr_puts(w, msgs[i].content);
            }
            hr_puts(w, "\n<</SYS>>\n\n");
        }
        hr_put_trimmed(w, user);
        hr_puts(w, " [/INST]");
    } else {
        hr_puts(w, "[INST] ");
        for (int i = sys_begin; i < sys_end; i++) {
            hr_puts(w, msgs[i].content);
            hr_puts(w, "\n\n");
        }
        hr_puts(w, user);
        hr_puts(w, " [/INST]");
    }
}

/* gpt-oss's system preamble (its template's, without the optional date) */
#define HR_HARMONY_SYSTEM                                                                          \
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"       \
    "Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, "   \
    "final. Channel must be included for every message.<|end|>"

static void hr_render_harmony(const hr_chat_msg *msgs, int n, bool add_gen, hr_sink *w) {
    hr_puts(w, HR_HARMONY_SYSTEM);
    for (int i = 0; i < n; i++) {
        if (hr_role_is(&msgs[i], "system")) {
            hr_puts(w, "<|start|>developer<|message|># Instructions\n\n");
            hr_puts(w, msgs[i].content);
        } else if (hr_role_is(&msgs[i], "assistant")) {
            hr_puts(w, "<|start|>assistant<|channel|>final<|message|>");
            hr_puts(w, msgs[i].content);
        } else {
            hr_puts(w, "<|start|>");
            hr_puts(w, msgs[i].role);
            hr_puts(w, "<|message|>");
            hr_puts(w, msgs[i].content);
        }
        hr_puts(w, "<|end|>");
    }
    if (add_gen)
        hr_puts(w, "<|start|>assistant");
}

/* Gemma: system text folded into the first user turn, the assistant is
 * "model", every turn trimmed. */
static void hr_render_gemma(const hr_chat_template *t, const hr_chat_msg *msgs, int n, bool add_gen,
                            hr_sink *w) {
    hr_puts(w, t->bos);
    int sys_begin = 0;
    for (int i = 0; i < n; i++) {
        if (hr_role_is(&msgs[i], "system"))
            continue;
        bool user = hr_role_is(&msgs[i], "user");
        hr_puts(w, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        for (int j = sys_begin; user && j < i; j++) {
            hr_put_trimmed(w, msgs[j].content);
            hr_puts(w, "\n\n");
        }
        hr_put_trimmed(w, msgs[i].content);
        hr_puts(w, "<end_of_turn>\n");
        sys_begin = i + 1;
    }
    if (add_gen)
        hr_puts(w, "<start_of_turn>model\n");
}

/* Formats that write every message as open + role + mid + content + close,
 * untrimmed, the reply's header as open + "assistant" + mid (ChatML, Phi-3) */
static void hr_render_tagged(const hr_chat_msg *msgs, int n, bool add_gen, const char *open,
                             const char *mid, const char *close, hr_sink *w) {
    for (int i = 0; i < n; i++) {
        hr_puts(w, open);
        hr_puts(w, msgs[i].role);
        hr_puts(w, mid);
        hr_puts(w, msgs[i].content);
        hr_puts(w, close);
    }
    if (add_gen) {
        hr_puts(w, open);
        hr_puts(w, "assistant");
        hr_puts(w, mid);
    }
}

static void hr_render(const hr_chat_template *t, const hr_chat_msg *msgs, int n, bool add_gen,
                      hr_sink *w) {
    switch (t->kind) {
    case HR_CHAT_HARMONY:
        hr_render_harmony(msgs, n, add_gen, w);
        return;
    case HR_CHAT_GEMMA:
        hr_render_gemma(t, msgs, n, add_gen, w);
        return;
    case HR_CHAT_PHI3:
        hr_render_tagged(msgs, n, add_gen, "<|", "|>\n", "<|end|>\n", w);
        return;
    case HR_CHAT_CHATML:
        hr_render_tagged(msgs, n, add_gen, "<|im_start|>", "\n", "<|im_end|>\n", w);
        return;
    case HR_CHAT_LLAMA3:
        for (int i = 0; i < n; i++) {
            if (i == 0)
                hr_puts(w, t->bos);
            hr_puts(w, "<|start_header_id|>");
            hr_puts(w, msgs[i].role);
            hr_puts(w, "<|end_header_id|>\n\n");
            hr_put_trimmed(w, msgs[i].content);
            hr_puts(w, "<|eot_id|>");
        }
        if (add_gen)
            hr_puts(w, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        return;
    case HR_CHAT_LLAMA2:
    case HR_CHAT_MISTRAL: {
        bool l2 = t->kind == HR_CHAT_LLAMA2;
        if (!l2)
            hr_puts(w, t->bos);
        int sys_begin = 0; /* pending system messages: [sys_begin, i) */
        for (int i = 0; i < n; i++) {
            if (hr_role_is(&msgs[i], "system"))
                continue;
            if (hr_role_is(&msgs[i], "user")) {
                hr_put_inst(w, t, msgs, sys_begin, i, msgs[i].content);
            } else { /* assistant */
                if (l2) {
                    hr_puts(w, " ");
                    hr_put_trimmed(w, msgs[i].content);
                    hr_puts(w, " ");
                } else {
                    hr_puts(w, msgs[i].content);
                }
                hr_puts(w, t->eos);
            }
            sys_begin = i + 1;
        }
        /* system text still pending at the end opens a turn of its own */
        if (add_gen && sys_begin < n)
            hr_put_inst(w, t, msgs, sys_begin, n, "");
        return;
    }
    default:
        return;
    }
}

static int hr_finish_sink(const hr_sink *w, char *buf, size_t cap) {
    size_t len = w->pos > w->skip ? w->pos - w->skip : 0;
    if (cap > 0)
        buf[len < cap ? len : cap - 1] = 0;
    if (len > INT32_MAX)
        return HR_ERANGE;
    return (int)len;
}

int hr_chat_render(const hr_chat_template *t, const hr_chat_msg *msgs, int n,
                   bool add_generation_prompt, char *buf, size_t cap, char err[HR_ERR_LEN]) {
    return hr_chat_render_continue(t, msgs, 0, n, add_generation_prompt, buf, cap, err);
}

int hr_chat_render_continue(const hr_chat_template *t, const hr_chat_msg *msgs, int n_done, int n,
                            bool add_generation_prompt, char *buf, size_t cap,
                            char err[HR_ERR_LEN]) {
    if (!t || (cap > 0 && !buf))
        return hr_seterr(err, HR_EINVAL, "chat: no template or no buffer");
    int rc = hr_check_msgs(t, msgs, n, err);
    if (rc)
        return rc;
    if (n_done < 0 || n_done > n)
        return hr_seterr(err, HR_EINVAL, "chat: %d messages done out of %d", n_done, n);
    size_t skip = 0;
    if (n_done > 0) {
        hr_sink pre = {NULL, 0, 0, 0};
        hr_render(t, msgs, n_done, false, &pre);
        skip = pre.pos;
        if (hr_role_is(&msgs[n_done - 1], "assistant"))
            skip -= hr_close_len(t); /* the rendering ends with the close */
    }
    hr_sink w = {buf, cap, 0, skip};
    hr_render(t, msgs, n, add_generation_prompt, &w);
    return hr_finish_sink(&w, buf, cap);
}
