/* chat.h - chat templates: a conversation (role, content) rendered to the
 * prompt text a chat model was trained on.
 *
 * Built in (no Jinja interpreter): ChatML (Qwen and many others), Llama 3,
 * Llama 2 ([INST] with <<SYS>>), Mistral ([INST], system text folded
 * into the first user turn), Gemma (system text folded into the first user
 * turn, the assistant called "model"), Phi-3 and gpt-oss's harmony format
 * (its fixed system preamble first, a system message as the developer's
 * instructions, earlier replies in the final channel; a reply is
 * generated from "<|start|>assistant", analysis channel included). The format of a model is
 * recognized from markers in its tokenizer.chat_template string, or chosen by name.
 *
 * The rendered text holds control tokens as text ("<|im_start|>", "<s>");
 * encode it with parse_special = true and add_bos = false, then prepend BOS
 * only if the vocabulary wants one and the text did not start with it.
 *
 * Rendering is prefix-stable: rendering a longer conversation extends the
 * rendering of a shorter one, so a chat can keep its KV cache and evaluate
 * only hr_chat_render_continue()'s text for a new turn.
 *
 * Everything here is pure (no global state): thread-safe. */
#ifndef HR_MODEL_CHAT_H
#define HR_MODEL_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "mmap/gguf.h"
#include "model/tokenizer.h"

typedef enum {
    HR_CHAT_CHATML = 0,  /* <|im_start|>role\ncontent<|im_end|>\n */
    HR_CHAT_LLAMA3 = 1,  /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    HR_CHAT_LLAMA2 = 2,  /* <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] reply </s> */
    HR_CHAT_MISTRAL = 3, /* <s>[INST] user [/INST]reply</s> */
    HR_CHAT_GEMMA = 4,   /* <start_of_turn>user\ncontent<end_of_turn>\n, "model" replies */
    HR_CHAT_PHI3 = 5,    /* <|user|>\ncontent<|end|>\n */
    HR_CHAT_HARMONY = 6, /* gpt-oss: <|start|>user<|message|>content<|end|> */
    HR_CHAT_COUNT
} hr_chat_kind;

#define HR_CHAT_TOKEN_LEN 48

/* A template: its kind and the texts of the BOS / EOS tokens it writes
 * (bos: Llama 2, Mistral, Llama 3; eos: Llama 2, Mistral). Plain value. */
typedef struct {
    hr_chat_kind kind;
    char bos[HR_CHAT_TOKEN_LEN];
    char eos[HR_CHAT_TOKEN_LEN];
} hr_chat_template;

/* One message; both strings are borrowed. Roles: "system", "user",
 * "assistant" (ChatML and Llama 3 accept any other role name too). */
typedef struct {
    const char *role;
    const char *content;
} hr_chat_msg;

/* "chatml", "llama3", "llama2", "mistral", "gemma", "phi3", "harmony"; "?"
 * for a bad kind. */
const char *hr_chat_kind_name(hr_chat_kind k);
/* Parses a template name (also "qwen", "llama-3", "llama-2", case
 * insensitive). Returns 0 or HR_EINVAL (err lists the names). */
int hr_chat_kind_parse(const char *name, hr_chat_kind *out, char err[HR_ERR_LEN]);
/* The kind with its usual token texts (<s>, </s>, <|begin_of_text|>). */
hr_chat_template hr_chat_template_init(hr_chat_kind k);

/* Recognizes a Jinja chat template by its markers: "<|im_start|>" ->
 * ChatML, "<|start_header_id|>" -> Llama 3, "[INST]" with "<<SYS>>" ->
 * Llama 2, "[INST]" alone -> Mistral, "<start_of_turn>" -> Gemma,
 * "<|assistant|>" -> Phi-3, "<|channel|>" -> harmony. Returns 0, or
 * HR_ENOENT when jinja is
 * NULL or holds none of them. */
int hr_chat_detect(const char *jinja, hr_chat_kind *out);

/* The template for a model: by name when name is not NULL (HR_EINVAL for
 * an unknown name), else recognized from the GGUF's
 * tokenizer.chat_template (g may be NULL), else guessed from the
 * vocabulary's control tokens, else ChatML; the last two log a warning.
 * BOS / EOS texts come from tok when given. */
int hr_chat_template_pick(hr_chat_template *out, const hr_gguf *g, const hr_tokenizer *tok,
                          const char *name, char err[HR_ERR_LEN]);

/* Renders msgs[0..n) and, with add_generation_prompt, the header of the
 * assistant's reply. Like snprintf: writes at most cap bytes (NUL-terminated
 * when cap > 0) and returns the full length, or HR_EINVAL (bad message or
 * role, with err filled when not NULL). buf may be NULL when cap is 0. */
int hr_chat_render(const hr_chat_template *t, const hr_chat_msg *msgs, int n,
                   bool add_generation_prompt, char *buf, size_t cap, char err[HR_ERR_LEN]);

/* The text to evaluate after a context that already holds the rendering of
 * msgs[0..n_done) -- where, when msgs[n_done-1] is an assistant reply, the
 * context holds it as generated, without its end-of-turn marker (the model
 * stopped there). Returns that marker, then msgs[n_done..n), then the
 * generation prompt: the tail of hr_chat_render(msgs, n) (Llama 2 drops
 * the space it writes before </s>, which a generated reply does not
 * have). n_done = 0 is the full rendering. Same buffer rules as
 * hr_chat_render. */
int hr_chat_render_continue(const hr_chat_template *t, const hr_chat_msg *msgs, int n_done, int n,
                            bool add_generation_prompt, char *buf, size_t cap,
                            char err[HR_ERR_LEN]);

#endif
