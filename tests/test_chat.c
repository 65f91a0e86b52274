/* test_chat.c - chat templates (exact renderings, continuation tails,
 * recognition from published chat_template strings, control tokens through
 * the real vocabularies), the generation tracker (stop strings across
 * tokens and UTF-8, budgets, finish reasons), --stop parsing, and `hearth
 * chat` / `hearth run --stop` end to end on the tiny model. */
#include "tests/check.h"

#include "cli/cli.h"
#include "mmap/gguf.h"
#include "model/chat.h"
#include "model/generate.h"
#include "model/tokenizer.h"

#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- templates ---- */

static const hr_chat_msg k_conv[] = {
    {"system", "You are helpful."},
    {"user", "Hi!"},
    {"assistant", "Hello! How can I help?"},
    {"user", "Tell me a joke."},
};

/* gpt-oss's system message as its published template writes it (no date) */
#define HARMONY_SYS                                                                                \
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"       \
    "Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, "   \
    "final. Channel must be included for every message.<|end|>"

static const struct {
    hr_chat_kind kind;
    const char *full;   /* k_conv with the generation prompt */
    const char *cont;   /* continuation after the assistant reply (n_done 3) */
    const char *first;  /* k_conv[0..2) with the generation prompt */
    const char *no_sys; /* k_conv[1..4) with the generation prompt */
} k_want[] = {
    {HR_CHAT_CHATML,
     "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
     "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n<|im_start|>user\nTell me a "
     "joke.<|im_end|>\n<|im_start|>assistant\n",
     "<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
     "<|im_start|>assistant\n",
     "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello! How can I "
     "help?<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n"},
    {HR_CHAT_LLAMA3,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
     "helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
     "helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {HR_CHAT_LLAMA2,
     "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi! [/INST] Hello! How can I help? "
     "</s><s>[INST] Tell me a joke. [/INST]",
     "</s><s>[INST] Tell me a joke. [/INST]",
     "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi! [/INST]",
     "<s>[INST] Hi! [/INST] Hello! How can I help? </s><s>[INST] Tell me a joke. [/INST]"},
    {HR_CHAT_MISTRAL,
     "<s>[INST] You are helpful.\n\nHi! [/INST]Hello! How can I help?</s>[INST] Tell me a "
     "joke. [/INST]",
     "</s>[INST] Tell me a joke. [/INST]", "<s>[INST] You are helpful.\n\nHi! [/INST]",
     "<s>[INST] Hi! [/INST]Hello! How can I help?</s>[INST] Tell me a joke. [/INST]"},
    {HR_CHAT_GEMMA,
     "<bos><start_of_turn>user\nYou are helpful.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello! "
     "How can I help?<end_of_turn>\n<start_of_turn>user\nTell me a joke.<end_of_turn>\n"
     "<start_of_turn>model\n",
     "<end_of_turn>\n<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n",
     "<bos><start_of_turn>user\nYou are helpful.\n\nHi!<end_of_turn>\n<start_of_turn>model\n",
     "<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\nHello! How can I "
     "help?<end_of_turn>\n<start_of_turn>user\nTell me a joke.<end_of_turn>\n"
     "<start_of_turn>model\n"},
    {HR_CHAT_PHI3,
     "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\nHello! How can I "
     "help?<|end|>\n<|user|>\nTell me a joke.<|end|>\n<|assistant|>\n",
     "<|end|>\n<|user|>\nTell me a joke.<|end|>\n<|assistant|>\n",
     "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n",
     "<|user|>\nHi!<|end|>\n<|assistant|>\nHello! How can I help?<|end|>\n<|user|>\nTell me a "
     "joke.<|end|>\n<|assistant|>\n"},
    {HR_CHAT_HARMONY,
     HARMONY_SYS "<|start|>developer<|message|># Instructions\n\nYou are helpful.<|end|>"
                 "<|start|>user<|message|>Hi!<|end|><|start|>assistant<|channel|>final<|message|>"
                 "Hello! How can I help?<|end|><|start|>user<|message|>Tell me a joke.<|end|>"
                 "<|start|>assistant",
     "<|end|><|start|>user<|message|>Tell me a joke.<|end|><|start|>assistant",
     HARMONY_SYS "<|start|>developer<|message|># Instructions\n\nYou are helpful.<|end|>"
                 "<|start|>user<|message|>Hi!<|end|><|start|>assistant",
     HARMONY_SYS "<|start|>user<|message|>Hi!<|end|><|start|>assistant<|channel|>final<|message|>"
                 "Hello! How can I help?<|end|><|start|>user<|message|>Tell me a joke.<|end|>"
                 "<|start|>assistant"},
};

static char *render(const hr_chat_template *t, const hr_chat_msg *m, int n_done, int n, bool gen) {
    static char buf[8][4096];
    static int slot = 0;
    char *b = buf[slot++ % 8];
    char err[HR_ERR_LEN] = "";
    int len = hr_chat_render_continue(t, m, n_done, n, gen, b, 4096, err);
    if (len < 0) {
        fprintf(stderr, "render: %s\n", err);
        return NULL;
    }
    CHECK_EQ((size_t)len, strlen(b));
    return b;
}

static void test_render(void) {
    char err[HR_ERR_LEN];
    for (size_t i = 0; i < sizeof k_want / sizeof k_want[0]; i++) {
        hr_chat_template t = hr_chat_template_init(k_want[i].kind);
        CHECK_STR(render(&t, k_conv, 0, 4, true), k_want[i].full);
        CHECK_STR(render(&t, k_conv, 3, 4, true), k_want[i].cont);
        CHECK_STR(render(&t, k_conv, 0, 2, true), k_want[i].first);
        CHECK_STR(render(&t, k_conv + 1, 0, 3, true), k_want[i].no_sys);
        /* the first turn, then its continuation, give the full text but
         * the close of the reply (which a generated reply lacks) */
        char joined[8192];
        const char *turn1 = render(&t, k_conv, 0, 2, true);
        snprintf(joined, sizeof joined, "%s%s%s", turn1 ? turn1 : "", k_conv[2].content,
                 k_want[i].cont);
        if (k_want[i].kind == HR_CHAT_LLAMA2) /* " reply " around the content */
            snprintf(joined, sizeof joined, "%s %s %s", turn1 ? turn1 : "", k_conv[2].content,
                     k_want[i].cont);
        if (k_want[i].kind == HR_CHAT_HARMONY) /* the reply names its channel */
            snprintf(joined, sizeof joined, "%s<|channel|>final<|message|>%s%s", turn1 ? turn1 : "",
                     k_conv[2].content, k_want[i].cont);
        CHECK_STR(joined, k_want[i].full);
        /* prefix-stable without the generation prompt */
        const char *a = render(&t, k_conv, 0, 2, false), *b = render(&t, k_conv, 0, 4, false);
        CHECK(a && b && strncmp(a, b, strlen(a)) == 0);
        /* continuing after a user message (no reply yet) */
        const char *tail = render(&t, k_conv, 2, 4, true);
        CHECK(a && tail);
        if (a && tail) {
            snprintf(joined, sizeof joined, "%s%s", a, tail);
            CHECK_STR(joined, k_want[i].full);
        }
        /* snprintf-like truncation */
        char small[10];
        int len = hr_chat_render(&t, k_conv, 4, true, small, sizeof small, err);
        CHECK_EQ(len, (int)strlen(k_want[i].full));
        CHECK_EQ(strlen(small), sizeof small - 1);
        CHECK(strncmp(small, k_want[i].full, sizeof small - 1) == 0);
        CHECK_EQ(hr_chat_render(&t, k_conv, 4, true, NULL, 0, err), len);
        /* no messages */
        CHECK(hr_chat_render(&t, k_conv, 0, false, small, sizeof small, err) >= 0);
    }
    /* Llama 2 trims its content; Llama 3 trims too; ChatML keeps it */
    hr_chat_msg spaced[] = {{"user", "  hi  \n"}};
    hr_chat_template l2 = hr_chat_template_init(HR_CHAT_LLAMA2);
    hr_chat_template l3 = hr_chat_template_init(HR_CHAT_LLAMA3);
    hr_chat_template cm = hr_chat_template_init(HR_CHAT_CHATML);
    CHECK_STR(render(&l2, spaced, 0, 1, true), "<s>[INST] hi [/INST]");
    CHECK_STR(render(&l3, spaced, 0, 1, false),
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
    CHECK_STR(render(&cm, spaced, 0, 1, false), "<|im_start|>user\n  hi  \n<|im_end|>\n");
    /* a system message alone with a generation prompt opens a turn */
    CHECK_STR(render(&l2, k_conv, 0, 1, true),
              "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\n [/INST]");
    CHECK_STR(render(&l2, k_conv, 0, 1, false), "");
    /* other roles: ChatML and Llama 3 take any name, [INST] formats refuse */
    hr_chat_msg tool[] = {{"tool", "42"}};
    CHECK_STR(render(&cm, tool, 0, 1, false), "<|im_start|>tool\n42<|im_end|>\n");
    err[0] = 0;
    CHECK_EQ(hr_chat_render(&l2, tool, 1, false, NULL, 0, err), HR_EINVAL);
    CHECK(strstr(err, "tool") != NULL);
    hr_chat_msg bad[] = {{"user", NULL}};
    CHECK_EQ(hr_chat_render(&cm, bad, 1, false, NULL, 0, NULL), HR_EINVAL);
    hr_chat_msg bad_role[] = {{"us<er", "x"}};
    CHECK_EQ(hr_chat_render(&cm, bad_role, 1, false, NULL, 0, NULL), HR_EINVAL);
    CHECK_EQ(hr_chat_render_continue(&cm, k_conv, 5, 4, true, NULL, 0, NULL), HR_EINVAL);
    CHECK_EQ(hr_chat_render_continue(&cm, k_conv, -1, 4, true, NULL, 0, NULL), HR_EINVAL);
    /* other BOS / EOS texts */
    hr_chat_template custom = hr_chat_template_init(HR_CHAT_MISTRAL);
    snprintf(custom.bos, sizeof custom.bos, "<BOS>");
    snprintf(custom.eos, sizeof custom.eos, "<EOS>");
    CHECK_STR(render(&custom, k_conv + 1, 0, 3, true),
              "<BOS>[INST] Hi! [/INST]Hello! How can I help?<EOS>[INST] Tell me a joke. [/INST]");
    CHECK_STR(render(&custom, k_conv + 1, 2, 3, true), "<EOS>[INST] Tell me a joke. [/INST]");
}

/* ---- recognition ---- */

/* Published chat_template strings (tokenizer_config.json of each model). */
static const char k_qwen2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif "
    "%}{{'<|im_start|>' "
    "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
static const char k_llama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
static const char k_llama2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 "
    "and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% "
    "endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' "
    "[/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";
static const char k_mistral[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
static const char k_gemma[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') "
    "%}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% "
    "endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";

static void test_detect(void) {
    hr_chat_kind k = HR_CHAT_COUNT;
    CHECK_EQ(hr_chat_detect(k_qwen2, &k), 0);
    CHECK_EQ(k, HR_CHAT_CHATML);
    CHECK_EQ(hr_chat_detect(k_llama3, &k), 0);
    CHECK_EQ(k, HR_CHAT_LLAMA3);
    CHECK_EQ(hr_chat_detect(k_llama2, &k), 0);
    CHECK_EQ(k, HR_CHAT_LLAMA2);
    CHECK_EQ(hr_chat_detect(k_mistral, &k), 0);
    CHECK_EQ(k, HR_CHAT_MISTRAL);
    CHECK_EQ(hr_chat_detect(k_gemma, &k), 0);
    CHECK_EQ(k, HR_CHAT_GEMMA);
    CHECK_EQ(hr_chat_detect("{{'<|start|>assistant<|channel|>final<|message|>'}}", &k), 0);
    CHECK_EQ(k, HR_CHAT_HARMONY);
    CHECK_EQ(hr_chat_detect("{{'<|user|>\n' + m + '<|end|>\n<|assistant|>\n'}}", &k), 0);
    CHECK_EQ(k, HR_CHAT_PHI3);
    CHECK_EQ(hr_chat_detect("{{ messages }}", &k), HR_ENOENT);
    CHECK_EQ(hr_chat_detect(NULL, &k), HR_ENOENT);
    CHECK_EQ(hr_chat_detect("", &k), HR_ENOENT);

    char err[HR_ERR_LEN];
    const char *names[] = {"chatml",  "qwen",   "ChatML",  "llama3",
                           "llama-3", "llama2", "llama-2", "mistral"};
    const hr_chat_kind kinds[] = {HR_CHAT_CHATML, HR_CHAT_CHATML, HR_CHAT_CHATML, HR_CHAT_LLAMA3,
                                  HR_CHAT_LLAMA3, HR_CHAT_LLAMA2, HR_CHAT_LLAMA2, HR_CHAT_MISTRAL};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK_EQ(hr_chat_kind_parse(names[i], &k, err), 0);
        CHECK_EQ(k, kinds[i]);
    }
    for (int i = 0; i < HR_CHAT_COUNT; i++) {
        CHECK_EQ(hr_chat_kind_parse(hr_chat_kind_name((hr_chat_kind)i), &k, err), 0);
        CHECK_EQ(k, i);
    }
    err[0] = 0;
    CHECK_EQ(hr_chat_kind_parse("vicuna", &k, err), HR_EINVAL);
    CHECK(strstr(err, "vicuna") && strstr(err, "chatml"));
    CHECK_STR(hr_chat_kind_name(HR_CHAT_COUNT), "?");

    /* from GGUF metadata: a vocabulary-only file with each template */
    char tmpl_path[] = "/tmp/hearth-chat-XXXXXX";
    int fd = mkstemp(tmpl_path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    char vpath[512];
    hr_gguf *src = NULL;
    CHECK_EQ(
        hr_gguf_open(
            &src, hr_shared_path("tokenizer/ggml-vocab-llama-spm.gguf", vpath, sizeof vpath), err),
        0);
    const char *jinja[] = {k_qwen2, k_llama3, k_llama2, k_mistral, k_gemma, NULL};
    const hr_chat_kind want[] = {HR_CHAT_CHATML,  HR_CHAT_LLAMA3, HR_CHAT_LLAMA2,
                                 HR_CHAT_MISTRAL, HR_CHAT_GEMMA,  HR_CHAT_CHATML};
    for (size_t i = 0; src && i < sizeof jinja / sizeof jinja[0]; i++) {
        hr_gguf_writer *w = hr_gguf_writer_create();
        CHECK_EQ(hr_gguf_writer_copy_kv(w, src, "tokenizer."), 0);
        if (jinja[i])
            CHECK_EQ(hr_gguf_writer_set_str(w, "tokenizer.chat_template", jinja[i]), 0);
        CHECK_EQ(hr_gguf_writer_write(w, tmpl_path, err), 0);
        hr_gguf_writer_destroy(w);
        hr_gguf *g = NULL;
        hr_tokenizer *tok = NULL;
        CHECK_EQ(hr_gguf_open(&g, tmpl_path, err), 0);
        CHECK_EQ(hr_tokenizer_create(&tok, g, err), 0);
        hr_chat_template t;
        CHECK_EQ(hr_chat_template_pick(&t, g, tok, NULL, err), 0);
        CHECK_EQ(t.kind, want[i]);
        if (t.kind == HR_CHAT_LLAMA2) {
            CHECK_STR(t.bos, "<s>");
            CHECK_STR(t.eos, "</s>");
        }
        CHECK_EQ(hr_chat_template_pick(&t, g, tok, "mistral", err), 0);
        CHECK_EQ(t.kind, HR_CHAT_MISTRAL);
        CHECK_EQ(hr_chat_template_pick(&t, g, tok, "nope", err), HR_EINVAL);
        hr_tokenizer_destroy(tok);
        hr_gguf_close(g);
    }
    hr_gguf_close(src);
    unlink(tmpl_path);

    /* the Phi-3 vocabulary carries its own template */
    hr_gguf *g = NULL;
    CHECK_EQ(hr_gguf_open(
                 &g, hr_shared_path("tokenizer/ggml-vocab-phi-3.gguf", vpath, sizeof vpath), err),
             0);
    hr_chat_template t;
    CHECK_EQ(hr_chat_template_pick(&t, g, NULL, NULL, err), 0);
    CHECK_EQ(t.kind, HR_CHAT_PHI3);
    hr_gguf_close(g);
    CHECK_EQ(hr_chat_template_pick(&t, NULL, NULL, NULL, err), 0);
    CHECK_EQ(t.kind, HR_CHAT_CHATML);
}

/* ---- control tokens through real vocabularies ---- */

static hr_tokenizer *open_vocab(const char *rel, hr_gguf **g) {
    char path[512], err[HR_ERR_LEN];
    hr_tokenizer *tok = NULL;
    *g = NULL;
    if (hr_gguf_open(g, hr_shared_path(rel, path, sizeof path), err) ||
        hr_tokenizer_create(&tok, *g, err)) {
        fprintf(stderr, "%s: %s\n", rel, err);
        CHECK(0);
        return NULL;
    }
    return tok;
}

static int encode(const hr_tokenizer *tok, const char *text, bool special, int32_t *ids, int cap) {
    int n = 0;
    CHECK_EQ(hr_tokenizer_encode(tok, text, strlen(text), false, special, ids, cap, &n), 0);
    CHECK(n <= cap);
    return n;
}

static int count_id(const int32_t *ids, int n, int32_t id) {
    int c = 0;
    for (int i = 0; i < n; i++)
        c += ids[i] == id;
    return c;
}

/* decode(encode(text)) == text with control tokens shown */
static void check_roundtrip(const hr_tokenizer *tok, const int32_t *ids, int n, const char *text,
                            bool strip) {
    static char back[8192];
    int len = hr_tokenizer_decode(tok, ids, n, true, strip, back, sizeof back);
    CHECK(len >= 0 && (size_t)len < sizeof back);
    CHECK_STR(back, text);
}

static void test_control_tokens(void) {
    int32_t ids[1024];
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_chat_template t;

    /* Qwen2: <|im_start|> 151644, <|im_end|> 151645 (EOG), "\n" 198 */
    hr_tokenizer *tok = open_vocab("tokenizer/vocab-qwen2.gguf", &g);
    if (tok) {
        CHECK_EQ(hr_chat_template_pick(&t, g, tok, NULL, err), 0);
        CHECK_EQ(t.kind, HR_CHAT_CHATML);
        const char *text = render(&t, k_conv, 0, 4, true);
        int n = encode(tok, text, true, ids, 1024);
        CHECK_EQ(ids[0], 151644);
        CHECK_EQ(ids[1], hr_tokenizer_find(tok, "system"));
        CHECK_EQ(ids[2], 198);
        CHECK_EQ(count_id(ids, n, 151644), 5);
        CHECK_EQ(count_id(ids, n, 151645), 4);
        CHECK_EQ(ids[n - 1], 198); /* "<|im_start|>assistant\n" */
        CHECK_EQ(ids[n - 2], hr_tokenizer_find(tok, "assistant"));
        CHECK_EQ(ids[n - 3], 151644);
        CHECK(hr_tokenizer_is_eog(tok, 151645));
        check_roundtrip(tok, ids, n, text, false);
        /* without parse_special the markers are plain text */
        int m = encode(tok, text, false, ids, 1024);
        CHECK_EQ(count_id(ids, m, 151644), 0);
        CHECK(m > n);
        /* the continuation starts with the end-of-turn token */
        n = encode(tok, render(&t, k_conv, 3, 4, true), true, ids, 1024);
        CHECK_EQ(ids[0], 151645);
        CHECK_EQ(ids[1], 198);
        CHECK_EQ(ids[2], 151644);
        hr_tokenizer_destroy(tok);
        hr_gguf_close(g);
    }

    /* Llama 3: 128000 BOS, 128006/128007 header, 128009 <|eot_id|> (EOG) */
    tok = open_vocab("tokenizer/vocab-llama-bpe.gguf", &g);
    if (tok) {
        CHECK_EQ(hr_chat_template_pick(&t, g, tok, NULL, err), 0); /* from the vocabulary */
        CHECK_EQ(t.kind, HR_CHAT_LLAMA3);
        CHECK_STR(t.bos, "<|begin_of_text|>");
        const char *text = render(&t, k_conv, 0, 4, true);
        int n = encode(tok, text, true, ids, 1024);
        CHECK_EQ(ids[0], 128000);
        CHECK_EQ(ids[0], hr_tokenizer_bos(tok)); /* no second BOS needed */
        CHECK_EQ(ids[1], 128006);
        CHECK_EQ(ids[2], hr_tokenizer_find(tok, "system"));
        CHECK_EQ(ids[3], 128007);
        CHECK_EQ(ids[4], hr_tokenizer_find(tok, "\xC4\x8A\xC4\x8A")); /* "\n\n" */
        CHECK_EQ(count_id(ids, n, 128006), 5);
        CHECK_EQ(count_id(ids, n, 128007), 5);
        CHECK_EQ(count_id(ids, n, 128009), 4);
        CHECK_EQ(count_id(ids, n, 128000), 1);
        CHECK_EQ(ids[n - 2], 128007);
        CHECK(hr_tokenizer_is_eog(tok, 128009));
        check_roundtrip(tok, ids, n, text, false);
        n = encode(tok, render(&t, k_conv, 3, 4, true), true, ids, 1024);
        CHECK_EQ(ids[0], 128009);
        CHECK_EQ(ids[1], 128006);
        hr_tokenizer_destroy(tok);
        hr_gguf_close(g);
    }

    /* Llama 2 / Mistral on the SPM vocabulary: <s> 1, </s> 2 */
    tok = open_vocab("tokenizer/ggml-vocab-llama-spm.gguf", &g);
    if (tok) {
        const char *names[] = {"llama2", "mistral"};
        for (int k = 0; k < 2; k++) {
            CHECK_EQ(hr_chat_template_pick(&t, g, tok, names[k], err), 0);
            const char *text = render(&t, k_conv, 0, 4, true);
            int n = encode(tok, text, true, ids, 1024);
            CHECK_EQ(ids[0], 1);
            CHECK_EQ(count_id(ids, n, 1), k == 0 ? 2 : 1);
            CHECK_EQ(count_id(ids, n, 2), 1);
            CHECK(hr_tokenizer_is_eog(tok, 2));
            /* "[INST]" is text here: no single token for it */
            CHECK_EQ(hr_tokenizer_find(tok, "[INST]"), -1);
            n = encode(tok, render(&t, k_conv, 3, 4, true), true, ids, 1024);
            CHECK_EQ(ids[0], 2);
        }
        hr_tokenizer_destroy(tok);
        hr_gguf_close(g);
    }
}

/* ---- generation tracker ---- */

typedef struct {
    hr_gen *g;
    char out[1024]; /* concatenated deltas */
    size_t n;
} stream;

static hr_finish push(stream *s, const char *text) {
    hr_finish f = HR_FINISH_NONE;
    CHECK_EQ(hr_gen_push_text(s->g, text, strlen(text), &f), 0);
    size_t n;
    const char *d = hr_gen_delta(s->g, &n);
    if (s->n + n < sizeof s->out) {
        memcpy(s->out + s->n, d, n);
        s->n += n;
        s->out[s->n] = 0;
    }
    return f;
}

static void stream_open(stream *s, const char *const *stops, int n_stop, int max_tokens) {
    char err[HR_ERR_LEN];
    hr_gen_params p = hr_gen_params_default();
    p.stop = stops;
    p.n_stop = n_stop;
    p.max_tokens = max_tokens;
    memset(s, 0, sizeof *s);
    CHECK_EQ(hr_gen_create(&s->g, NULL, &p, err), 0);
}

static void test_stop_strings(void) {
    stream s;
    const char *end[] = {"END"};
    stream_open(&s, end, 1, 0);
    CHECK_EQ(push(&s, "abc"), HR_FINISH_NONE);
    CHECK_STR(s.out, "abc");
    CHECK_EQ(push(&s, "E"), HR_FINISH_NONE);
    CHECK_STR(s.out, "abc"); /* held: might start END */
    CHECK_EQ(push(&s, "N"), HR_FINISH_NONE);
    CHECK_STR(s.out, "abc");
    CHECK_EQ(push(&s, "Dxyz"), HR_FINISH_STOP);
    CHECK_STR(s.out, "abc");
    CHECK_STR(hr_gen_text(s.g, NULL), "abc");
    CHECK_EQ(hr_gen_stop_index(s.g), 0);
    CHECK_EQ(push(&s, "more"), HR_FINISH_STOP); /* ignored after the end */
    CHECK_STR(s.out, "abc");
    /* a false start is released once it cannot match */
    hr_gen_begin(s.g);
    s.n = 0;
    s.out[0] = 0;
    CHECK_EQ(push(&s, "EN"), HR_FINISH_NONE);
    CHECK_STR(s.out, "");
    CHECK_EQ(push(&s, "JOY"), HR_FINISH_NONE);
    CHECK_STR(s.out, "ENJOY");
    CHECK_EQ(hr_gen_n_tokens(s.g), 2);
    /* held text is released when the reply ends otherwise */
    CHECK_EQ(push(&s, " THE E"), HR_FINISH_NONE);
    CHECK_STR(s.out, "ENJOY THE ");
    hr_gen_finish(s.g, HR_FINISH_EOS);
    push(&s, "");
    CHECK_STR(s.out, "ENJOY THE E");
    CHECK_EQ(hr_gen_finish_reason(s.g), HR_FINISH_EOS);
    /* the stop string at the very start */
    hr_gen_begin(s.g);
    s.n = 0;
    s.out[0] = 0;
    CHECK_EQ(push(&s, "END"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "");
    hr_gen_destroy(s.g);

    /* spans tokens; several stop strings: the earliest occurrence wins */
    const char *two[] = {"\nUser:", "lo w", ""};
    stream_open(&s, two, 3, 0);
    CHECK_EQ(push(&s, "ok\nUs"), HR_FINISH_NONE);
    CHECK_STR(s.out, "ok");
    CHECK_EQ(push(&s, "er: hi"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "ok");
    hr_gen_begin(s.g);
    s.n = 0;
    CHECK_EQ(push(&s, "hello world\nUser:"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "hel");
    CHECK_EQ(hr_gen_stop_index(s.g), 1);
    hr_gen_destroy(s.g);

    /* self-overlapping stop string: "aab" inside "aaab" */
    const char *aab[] = {"aab"};
    stream_open(&s, aab, 1, 0);
    CHECK_EQ(push(&s, "a"), HR_FINISH_NONE);
    CHECK_EQ(push(&s, "a"), HR_FINISH_NONE);
    CHECK_EQ(push(&s, "a"), HR_FINISH_NONE);
    CHECK_STR(s.out, "a");
    CHECK_EQ(push(&s, "b"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "a");
    hr_gen_destroy(s.g);

    /* max tokens; a stop string matched by the last token wins */
    const char *xyz[] = {"XYZ"};
    stream_open(&s, xyz, 1, 3);
    CHECK_EQ(push(&s, "a"), HR_FINISH_NONE);
    CHECK_EQ(push(&s, "b"), HR_FINISH_NONE);
    CHECK_EQ(push(&s, "cXY"), HR_FINISH_LENGTH);
    CHECK_STR(s.out, "abcXY"); /* released at the end */
    hr_gen_begin(s.g);
    s.n = 0;
    CHECK_EQ(push(&s, "a"), HR_FINISH_NONE);
    CHECK_EQ(push(&s, "X"), HR_FINISH_NONE);
    CHECK_EQ(push(&s, "YZ"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "a");
    hr_gen_destroy(s.g);

    /* UTF-8: a multi-byte stop string split inside a character, and held
     * text never split inside one */
    const char *utf[] = {"\xC3\xA9t\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC"}; /* "été", "日本" */
    stream_open(&s, utf, 2, 0);
    CHECK_EQ(push(&s, "un \xC3"), HR_FINISH_NONE);
    CHECK_STR(s.out, "un ");
    CHECK_EQ(push(&s, "\xA9t"), HR_FINISH_NONE);
    CHECK_STR(s.out, "un ");
    CHECK_EQ(push(&s, "\xC3\xA9 chaud"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "un ");
    hr_gen_begin(s.g);
    s.n = 0;
    s.out[0] = 0;
    CHECK_EQ(push(&s, "\xE6\x97\xA5"), HR_FINISH_NONE);
    CHECK_STR(s.out, "");
    CHECK_EQ(push(&s, "\xE6\x97\xA5"), HR_FINISH_NONE); /* "日日": the first is safe */
    CHECK_STR(s.out, "\xE6\x97\xA5");
    CHECK_EQ(push(&s, "\xE6\x9C\xAC"), HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(s.g, NULL), "\xE6\x97\xA5");
    hr_gen_destroy(s.g);

    /* names; bad parameters */
    CHECK_STR(hr_finish_name(HR_FINISH_STOP), "stop");
    CHECK_STR(hr_finish_name(HR_FINISH_LENGTH), "length");
    CHECK_STR(hr_finish_name(HR_FINISH_EOS), "eos");
    CHECK_STR(hr_finish_name(HR_FINISH_NONE), "");
    hr_gen *g = NULL;
    hr_gen_params p = hr_gen_params_default();
    p.n_stop = HR_GEN_MAX_STOP + 1;
    p.stop = end;
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_gen_create(&g, NULL, &p, err), HR_EINVAL);
    CHECK(g == NULL);
    CHECK_EQ(hr_gen_create(&g, NULL, NULL, err), 0);
    CHECK_EQ(hr_gen_push(g, 5, NULL), HR_EINVAL); /* no tokenizer */
    hr_gen_destroy(g);
    hr_gen_destroy(NULL);
}

/* Token ids through the SPM vocabulary: byte tokens that split "é", EOS. */
static void test_gen_tokens(void) {
    hr_gguf *gg = NULL;
    hr_tokenizer *tok = open_vocab("tokenizer/ggml-vocab-llama-spm.gguf", &gg);
    if (!tok)
        return;
    char err[HR_ERR_LEN];
    const char *stops[] = {"\xC3\xA9", "o w"};
    hr_gen_params p = hr_gen_params_default();
    p.stop = stops;
    p.n_stop = 2;
    p.strip_leading_space = true;
    hr_gen *g = NULL;
    CHECK_EQ(hr_gen_create(&g, tok, &p, err), 0);
    int32_t ids[64];
    int n = encode(tok, "Hello world", false, ids, 64);
    hr_finish f = HR_FINISH_NONE;
    for (int i = 0; i < n && f == HR_FINISH_NONE; i++)
        CHECK_EQ(hr_gen_push(g, ids[i], &f), 0);
    CHECK_EQ(f, HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(g, NULL), "Hell"); /* leading space stripped */

    int32_t c3 = hr_tokenizer_find(tok, "<0xC3>"), a9 = hr_tokenizer_find(tok, "<0xA9>");
    CHECK(c3 >= 0 && a9 >= 0);
    hr_gen_begin(g);
    n = encode(tok, "caf", false, ids, 64);
    for (int i = 0; i < n; i++)
        CHECK_EQ(hr_gen_push(g, ids[i], &f), 0);
    CHECK_EQ(hr_gen_push(g, c3, &f), 0);
    CHECK_EQ(f, HR_FINISH_NONE);
    CHECK_EQ(hr_gen_push(g, a9, &f), 0);
    CHECK_EQ(f, HR_FINISH_STOP);
    CHECK_STR(hr_gen_text(g, NULL), "caf");

    /* EOS ends the reply; its text is not part of it; a dangling byte
     * becomes U+FFFD */
    hr_gen_begin(g);
    n = encode(tok, "ok", false, ids, 64);
    for (int i = 0; i < n; i++)
        CHECK_EQ(hr_gen_push(g, ids[i], &f), 0);
    CHECK_EQ(hr_gen_push(g, c3, &f), 0);
    CHECK_EQ(hr_gen_push(g, hr_tokenizer_eos(tok), &f), 0);
    CHECK_EQ(f, HR_FINISH_EOS);
    CHECK_STR(hr_gen_text(g, NULL), "ok\xEF\xBF\xBD");
    CHECK_EQ(hr_gen_n_tokens(g), n + 2);
    CHECK_EQ(hr_gen_push(g, -1, &f), 0); /* finished: ignored */
    hr_gen_begin(g);
    CHECK_EQ(hr_gen_push(g, -1, &f), HR_EINVAL);
    CHECK_EQ(hr_gen_push(g, hr_tokenizer_n_vocab(tok), &f), HR_EINVAL);
    hr_gen_destroy(g);
    hr_tokenizer_destroy(tok);
    hr_gguf_close(gg);
}

/* gpt-oss (harmony): the reply is the final channel's text; the analysis
 * channel, the headers and <|end|> (not an end of generation there) stay
 * out of it, unless all channels are asked for */
static void test_harmony_channels(void) {
    const char *dir = getenv("HR_FIXTURES");
    char cmd[1024], path[] = "/tmp/hearth-harmony-XXXXXX", err[HR_ERR_LEN];
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/vocab/gpt-oss.gguf.gz' > '%s'",
             dir ? dir : "tests/fixtures", path);
    CHECK_EQ(system(cmd), 0);
    hr_gguf *g = NULL;
    hr_tokenizer *tok = NULL;
    CHECK_EQ(hr_gguf_open(&g, path, err), 0);
    CHECK_EQ(hr_tokenizer_create(&tok, g, err), 0);
    unlink(path);
    if (!tok)
        return;
    const char *reply =
        "<|channel|>analysis<|message|>User greets. Answer briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How are you?<|return|>";
    int32_t ids[128];
    int n = encode(tok, reply, true, ids, 128);
    for (int all = 0; all < 2; all++) {
        hr_gen_params p = hr_gen_params_default();
        p.all_channels = all;
        hr_gen *gen = NULL;
        CHECK_EQ(hr_gen_create(&gen, tok, &p, err), 0);
        hr_finish f = HR_FINISH_NONE;
        int pushed = 0;
        for (int i = 0; i < n && f == HR_FINISH_NONE; i++, pushed++)
            CHECK_EQ(hr_gen_push(gen, ids[i], &f), 0);
        CHECK_EQ(f, HR_FINISH_EOS); /* at <|return|>, not at the first <|end|> */
        CHECK_EQ(pushed, n);
        const char *text = hr_gen_text(gen, NULL);
        if (all)
            CHECK(strstr(text, "User greets.") && strstr(text, "Hello! How are you?"));
        else
            CHECK_STR(text, "Hello! How are you?");
        /* a message that names no channel is the reply */
        hr_gen_begin(gen);
        n = encode(tok, "<|message|>Plain.<|return|>", true, ids, 128);
        for (int i = 0; i < n; i++)
            CHECK_EQ(hr_gen_push(gen, ids[i], &f), 0);
        CHECK_STR(hr_gen_text(gen, NULL), "Plain.");
        n = encode(tok, reply, true, ids, 128);
        hr_gen_destroy(gen);
    }
    hr_tokenizer_destroy(tok);
    hr_gguf_close(g);
}

/* --stop parsing: repeatable, comma lists, escapes */
static void test_stop_option(void) {
    hr_cli o;
    memset(&o, 0, sizeof o);
    o.stop.v[o.stop.n++] = "a,b";
    o.stop.v[o.stop.n++] = "\\n\\nUser:";
    o.stop.v[o.stop.n++] = "x\\,y,,\\\\z\\q";
    char **v = NULL;
    int n = 0;
    CHECK_EQ(hr_cli_stop_list(&o, &v, &n), 0);
    CHECK_EQ(n, 5);
    if (n == 5) {
        CHECK_STR(v[0], "a");
        CHECK_STR(v[1], "b");
        CHECK_STR(v[2], "\n\nUser:");
        CHECK_STR(v[3], "x,y");
        CHECK_STR(v[4], "\\z\\q");
    }
    hr_cli_stop_free(v, n);
    memset(&o, 0, sizeof o);
    CHECK_EQ(hr_cli_stop_list(&o, &v, &n), 0);
    CHECK_EQ(n, 0);
    o.stop.v[o.stop.n++] = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17";
    fprintf(stderr, "(an error line about stop strings is expected next)\n");
    CHECK_EQ(hr_cli_stop_list(&o, &v, &n), 1);
}

/* ---- end to end ---- */

static char tmpdir[256];

static int sh(char *out, size_t cap, char *errout, size_t ecap, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int sh(char *out, size_t cap, char *errout, size_t ecap, const char *fmt, ...) {
    static char cmd[8192], full[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "(%s) >%s/out.txt 2>%s/err.txt", cmd, tmpdir, tmpdir);
    int st = system(full);
    char path[300];
    snprintf(path, sizeof path, "%s/out.txt", tmpdir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/err.txt", tmpdir);
    f = fopen(path, "r");
    n = f ? fread(errout, 1, ecap - 1, f) : 0;
    errout[n] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Token count of a continuation text on the model's vocabulary. */
static int tokens_of(const hr_tokenizer *tok, const char *text) {
    int32_t ids[4096];
    return encode(tok, text, true, ids, 4096);
}

static void test_cli_chat(void) {
    const char *bin = getenv("HR_BIN");
    if (!bin)
        bin = "./hearth";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hearth-chat-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        CHECK(0);
        return;
    }
    static char out[1 << 16], err[1 << 16];
    char model[512];
    hr_shared_path("models/tiny-llama-f32.gguf", model, sizeof model);
    hr_gguf *g = NULL;
    hr_tokenizer *tok = NULL;
    char e[HR_ERR_LEN];
    CHECK_EQ(hr_gguf_open(&g, model, e), 0);
    CHECK_EQ(hr_tokenizer_create(&tok, g, e), 0);
    if (!tok)
        return;

    /* two turns, piped: the second evaluates only its own tokens */
    const char *u1 = "Hello there", *u2 = "What is your name?";
    int rc = sh(out, sizeof out, err, sizeof err,
                "printf '%s\\n%s\\n' | %s chat -m %s --temp 0 --max-tokens 8 -t 2 -v", u1, u2, bin,
                model);
    CHECK_EQ(rc, 0);
    CHECK_EQ(count_lines(out), 2);
    CHECK(strstr(err, "using chatml") != NULL); /* no template in the file */
    int n1 = -1, p1 = -1, n2 = -1, p2 = -1, r1 = -1;
    const char *l1 = strstr(err, "turn 1: "), *l2 = strstr(err, "turn 2: ");
    CHECK(l1 && l2);
    if (l1)
        sscanf(l1, "turn 1: %d new tokens at position %d", &n1, &p1);
    if (l2)
        sscanf(l2, "turn 2: %d new tokens at position %d", &n2, &p2);
    const char *st = strstr(err, "| reply ");
    if (st)
        sscanf(st, "| reply %d tokens", &r1);
    const char *fin = st ? strstr(st, "tokens/s | ") : NULL;
    bool eos1 = fin && strncmp(fin + 11, "eos", 3) == 0;
    hr_chat_template t = hr_chat_template_init(HR_CHAT_CHATML);
    hr_chat_msg conv[] = {{"user", u1}, {"assistant", "(reply)"}, {"user", u2}};
    CHECK_EQ(p1, 0);
    CHECK_EQ(n1, 1 + tokens_of(tok, render(&t, conv, 0, 1, true))); /* BOS + turn 1 */
    CHECK_EQ(r1, 8);
    CHECK_EQ(p2, n1 + r1 - (eos1 ? 1 : 0)); /* the cache kept turn 1 and its reply */
    CHECK_EQ(n2, tokens_of(tok, render(&t, conv, 2, 3, true)));
    CHECK(n2 < tokens_of(tok, render(&t, conv, 0, 3, true)));
    CHECK(strstr(err, "tokens/s") != NULL);
    if (rc || n2 < 0)
        fprintf(stderr, "chat stderr:\n%s\n", err);

    /* greedy and deterministic: the same input gives the same replies */
    static char out2[1 << 16];
    memcpy(out2, out, sizeof out2);
    rc = sh(out, sizeof out, err, sizeof err,
            "printf '%s\\n%s\\n' | %s chat -m %s --temp 0 --max-tokens 8 -t 1", u1, u2, bin, model);
    CHECK_EQ(rc, 0);
    CHECK_STR(out, out2);

    /* named template, system message, sampling options, a stop string */
    rc = sh(out, sizeof out, err, sizeof err,
            "printf 'one\\ntwo\\nthree\\n' | %s chat -m %s --template llama2 --system 'Be brief.' "
            "--temp 0.7 --top-k 20 --seed 5 --max-tokens 6 --stop 'xyz,\\n' -t 2 -v",
            bin, model);
    CHECK_EQ(rc, 0);
    CHECK_EQ(count_lines(out), 3);
    CHECK(strstr(err, "template llama2") != NULL);
    CHECK(strstr(err, "turn 3: ") != NULL);

    /* context full: a clear message, then /reset starts over */
    rc = sh(out, sizeof out, err, sizeof err,
            "printf 'hello\\nhello again and again and again\\n/reset\\nhi\\n' | %s chat -m %s "
            "--temp 0 --max-tokens 4 --ctx 48 -t 2 -v",
            bin, model);
    CHECK_EQ(rc, 0);
    CHECK(strstr(err, "context is full") != NULL);
    CHECK(strstr(err, "conversation cleared") != NULL);
    l2 = strstr(err, "turn 2: ");
    CHECK(l2 != NULL);
    if (l2) {
        sscanf(l2, "turn 2: %d new tokens at position %d", &n2, &p2);
        CHECK_EQ(p2, 0); /* after /reset */
    }

    /* a reply that runs into the end of the context */
    rc = sh(out, sizeof out, err, sizeof err,
            "printf 'hello\\nmore\\n' | %s chat -m %s --temp 0 --ctx 40 -t 2", bin, model);
    CHECK_EQ(rc, 0);
    CHECK(strstr(err, "| length | context 40/40]") != NULL);
    CHECK(strstr(err, "the context is full (40 of 40 tokens)") != NULL);

    /* EOF at once; /exit; bad template name */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s chat -m %s -t 1 </dev/null", bin, model), 0);
    CHECK_STR(out, "");
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "printf '/exit\\nhello\\n' | %s chat -m %s -t 1 -v", bin, model),
             0);
    CHECK(strstr(err, "turn 1") == NULL);
    CHECK(sh(out, sizeof out, err, sizeof err, "echo hi | %s chat -m %s --template nope", bin,
             model) != 0);
    CHECK_EQ(count_lines(err), 1);
    CHECK(strstr(err, "nope") != NULL);
    CHECK(sh(out, sizeof out, err, sizeof err, "echo hi | %s chat", bin) != 0);

    /* run --stop: the greedy reference text cut before a string that
     * spans two tokens */
    char refj[512];
    hr_shared_path("reference/tiny-llama-f32.json", refj, sizeof refj);
    FILE *f = fopen(refj, "r");
    static char json[1 << 16];
    size_t jn = f ? fread(json, 1, sizeof json - 1, f) : 0;
    json[jn] = 0;
    if (f)
        fclose(f);
    const char *pk = strstr(json, "\"prompt\": \"");
    char prompt[512] = "";
    if (pk)
        sscanf(pk + 11, "%511[^\"]", prompt);
    CHECK(prompt[0] != 0);
    rc = sh(out, sizeof out, err, sizeof err, "%s run -m %s -p '%s' -n 32 --temp 0 -t 2", bin,
            model, prompt);
    CHECK_EQ(rc, 0);
    static char full[1 << 16];
    snprintf(full, sizeof full, "%s", out);
    const char *cut = strstr(full, "ility eng");
    CHECK(cut != NULL);
    rc = sh(out, sizeof out, err, sizeof err,
            "%s run -m %s -p '%s' -n 32 --temp 0 -t 2 --stop 'zzz' --stop 'ility eng' -v", bin,
            model, prompt);
    CHECK_EQ(rc, 0);
    if (cut) {
        char want[4096];
        snprintf(want, sizeof want, "%.*s\n", (int)(cut - full), full);
        CHECK_STR(out, want);
    }
    CHECK(strstr(err, "finish reason: stop") != NULL);
    rc = sh(out, sizeof out, err, sizeof err,
            "%s run -m %s -p '%s' -n 32 --max-tokens 5 --temp 0 -t 2 -v", bin, model, prompt);
    CHECK(strstr(err, "generation: 5 tokens") != NULL);
    CHECK(strstr(err, "finish reason: length") != NULL);
    CHECK(strlen(out) < strlen(full));

    hr_tokenizer_destroy(tok);
    hr_gguf_close(g);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
}

int main(void) {
    test_render();
    test_detect();
    test_control_tokens();
    test_stop_strings();
    test_gen_tokens();
    test_harmony_channels();
    test_stop_option();
    test_cli_chat();
    return hr_check_finish("chat");
}
