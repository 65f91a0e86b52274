/* main.c - `hearth` entry point: parses the shared option table and
 * dispatches to a subcommand. */
#include "cli/cli.h"

#include "common/log.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    HR_OPT_STR,
    HR_OPT_INT,
    HR_OPT_I64,
    HR_OPT_FLOAT,
    HR_OPT_FLAG,
    HR_OPT_LIST
} hr_opt_kind;

typedef struct {
    const char *lname;
    char sname;
    hr_opt_kind kind;
    size_t off;
    const char *arg;
    const char *help;
} hr_opt;

#define O(f) offsetof(hr_cli, f)
static const hr_opt hr_opts[] = {
    {"model", 'm', HR_OPT_STR, O(model), "FILE", "GGUF model file"},
    {"prompt", 'p', HR_OPT_STR, O(prompt), "TEXT", "prompt text"},
    {"file", 'f', HR_OPT_STR, O(prompt_file), "FILE", "read the prompt from a file"},
    {"n-predict", 'n', HR_OPT_INT, O(n_predict), "N", "tokens to generate (run; default 128)"},
    {"threads", 't', HR_OPT_INT, O(threads), "N", "worker threads (default: all cores)"},
    {"threads-decode", 0, HR_OPT_INT, O(threads_decode), "N", "threads for decode (default -t)"},
    {"groups", 0, HR_OPT_INT, O(groups), "N", "run, bench: N NUMA thread groups (-1 = per node)"},
    {"numa", 0, HR_OPT_FLAG, O(numa), NULL, "run, bench: one thread group per NUMA node"},
    {"tp-reduce", 0, HR_OPT_FLAG, O(tp_reduce), NULL, "groups: column split + partial sums"},
    {"ctx", 'c', HR_OPT_INT, O(ctx), "N", "context size in tokens (default min(train, 4096))"},
    {"batch", 'b', HR_OPT_INT, O(batch), "N", "prompt batch size (default 64)"},
    {"temp", 0, HR_OPT_FLOAT, O(temp), "T", "sampling temperature, 0 = greedy (default 0.8)"},
    {"top-k", 0, HR_OPT_INT, O(top_k), "K", "top-k filter, 0 = off (default 40)"},
    {"top-p", 0, HR_OPT_FLOAT, O(top_p), "P", "top-p filter, 1 = off (default 0.95)"},
    {"min-p", 0, HR_OPT_FLOAT, O(min_p), "P", "min-p filter, 0 = off (default 0.05)"},
    {"repeat-penalty", 0, HR_OPT_FLOAT, O(repeat_penalty), "X", "repetition penalty (1 = off)"},
    {"presence-penalty", 0, HR_OPT_FLOAT, O(presence_penalty), "X", "presence penalty"},
    {"frequency-penalty", 0, HR_OPT_FLOAT, O(frequency_penalty), "X", "frequency penalty"},
    {"seed", 's', HR_OPT_I64, O(seed), "S", "RNG seed (default: time)"},
    {"ids", 0, HR_OPT_STR, O(ids), "1,2,3", "token ids (logits)"},
    {"out", 'o', HR_OPT_STR, O(out), "FILE", "output file"},
    {"compare", 0, HR_OPT_STR, O(compare), "FILE", "reference logits to compare with (logits)"},
    {"arch", 0, HR_OPT_STR, O(arch), "NAME", "mkmodel: llama or qwen2 (default llama)"},
    {"type", 0, HR_OPT_STR, O(type), "TYPE", "mkmodel: weight type, e.g. q4_0, q4_k_m, f16"},
    {"shape", 0, HR_OPT_STR, O(shape), "NAME", "mkmodel: tinyllama, small, tiny, llama7b"},
    {"vocab", 0, HR_OPT_STR, O(vocab), "FILE", "mkmodel: copy the tokenizer from this GGUF"},
    {"embd", 0, HR_OPT_INT, O(embd), "N", "mkmodel: embedding width"},
    {"layers", 0, HR_OPT_INT, O(layers), "N", "mkmodel: layer count"},
    {"heads", 0, HR_OPT_INT, O(heads), "N", "mkmodel: attention heads"},
    {"heads-kv", 0, HR_OPT_INT, O(heads_kv), "N", "mkmodel: KV heads"},
    {"ffn", 0, HR_OPT_INT, O(ffn), "N", "mkmodel: feed-forward width"},
    {"vocab-size", 0, HR_OPT_INT, O(vocab_size), "N", "mkmodel: vocabulary size"},
    {"n-prompt", 'P', HR_OPT_INT, O(n_prompt), "N", "bench: prompt tokens (default 128)"},
    {"n-gen", 'N', HR_OPT_INT, O(n_gen), "N", "bench: generated tokens (default 64)"},
    {"reps", 'r', HR_OPT_INT, O(reps), "N", "bench: repetitions (default 3)"},
    {"kv", 0, HR_OPT_FLAG, O(kv), NULL, "info: print every metadata key"},
    {"bos", 0, HR_OPT_FLAG, O(bos), NULL, "tokenize: prepend BOS"},
    {"special", 0, HR_OPT_FLAG, O(special), NULL, "tokenize: parse control tokens in the text"},
    {"json", 0, HR_OPT_FLAG, O(json), NULL, "profile: print JSON (schema hearth.profile v1)"},
    {"quick", 0, HR_OPT_FLAG, O(quick), NULL, "profile: quick device profile (under 2 s)"},
    {"no-cache", 0, HR_OPT_FLAG, O(no_cache), NULL, "profile: measure again, refresh the cache"},
    {"cache-dir", 0, HR_OPT_STR, O(cache_dir), "DIR", "profile: cache folder"},
    {"peer", 0, HR_OPT_STR, O(peer), "ENDPOINT", "profile: measure the link to this echo peer"},
    {"template", 0, HR_OPT_STR, O(chat_template), "NAME",
     "chat: chatml, llama3, llama2 or mistral (default: from the model)"},
    {"system", 0, HR_OPT_STR, O(system), "TEXT", "chat: system message"},
    {"stop", 0, HR_OPT_LIST, O(stop), "STR", "run, chat: stop string (repeatable, a,b list)"},
    {"max-tokens", 0, HR_OPT_INT, O(max_tokens), "N", "run, chat: most tokens per reply"},
    {"listen", 0, HR_OPT_STR, O(listen), "ADDR:PORT", "agent: control port (data on +1)"},
    {"head", 0, HR_OPT_STR, O(head), "ADDR:PORT", "agent: join this head; prompt/status: ask it"},
    {"peers", 0, HR_OPT_STR, O(peers), "A,B,..", "agent: be the head, invite these agents"},
    {"name", 0, HR_OPT_STR, O(name), "NAME", "agent: device name"},
    {"mem-limit", 0, HR_OPT_FLOAT, O(mem_limit), "GiB", "agent: memory offered for weights"},
    {"k", 0, HR_OPT_INT, O(k), "K", "agent (head): force k rounds around the ring"},
    {"windows", 0, HR_OPT_STR, O(windows), "2,1,1", "agent (head): force window sizes"},
    {"expect", 0, HR_OPT_INT, O(expect), "N", "agent (head): workers to wait for"},
    {"wire", 0, HR_OPT_STR, O(wire), "f16|f32", "agent (head): hidden states on the wire"},
    {"no-prefetch", 0, HR_OPT_FLAG, O(no_prefetch), NULL, "agent: no prefetch of next window"},
    {"release", 0, HR_OPT_STR, O(release), "auto|on|off", "agent: release finished windows"},
    {"no-profile", 0, HR_OPT_FLAG, O(no_profile), NULL, "agent: join without a profile"},
    {"api-listen", 0, HR_OPT_STR, O(api_listen), "ADDR:PORT", "agent (head): serve the HTTP API"},
    {"api-key", 0, HR_OPT_STR, O(api_key), "KEY", "agent (head): API key (or $HEARTH_API_KEY)"},
    {"api-queue", 0, HR_OPT_INT, O(api_queue), "N", "agent (head): API requests waiting (8)"},
    {"api-max-tokens", 0, HR_OPT_INT, O(api_max_tokens), "N", "agent (head): tokens per request"},
    {"timeout", 0, HR_OPT_INT, O(timeout_s), "S", "prompt/status: seconds to wait"},
    {"key-dir", 0, HR_OPT_STR, O(key_dir), "DIR", "key folder (default ~/.config/hearth)"},
    {"head-key", 0, HR_OPT_STR, O(head_key), "KEY|NAME", "the head's public key or trusted name"},
    {"join", 0, HR_OPT_STR, O(join), "TOKEN", "agent: pair with the head by its join token"},
    {"insecure", 0, HR_OPT_FLAG, O(insecure), NULL, "no encryption/authentication (benchmarks)"},
    {"log", 0, HR_OPT_STR, O(log_level), "LEVEL", "log level: debug info warn error"},
    {"verbose", 'v', HR_OPT_FLAG, O(verbose), NULL, "log at info level"},
    {"help", 'h', HR_OPT_FLAG, O(help), NULL, "show help"},
};
#undef O

static const struct {
    const char *name;
    hr_cmd_fn fn;
    const char *usage;
} hr_cmds[] = {
    {"run", hr_cmd_run,
     "run -m MODEL -p PROMPT [-n N] [-t T] [--temp T --top-k K --top-p P --seed S] [--ctx C]\n"
     "      [--stop S]\n"
     "      generate text, streamed to stdout; speeds go to stderr"},
    {"chat", hr_cmd_chat,
     "chat -m MODEL [--template NAME] [--system TEXT] [--stop S] [--max-tokens N] [sampling]\n"
     "      interactive multi-turn chat on stdin/stdout (piped stdin: one user turn a line)"},
    {"logits", hr_cmd_logits,
     "logits -m MODEL --ids 1,2,3 -o OUT [--compare REF]\n"
     "      teacher-forced logits, float32 rows of n_vocab per position"},
    {"tokenize", hr_cmd_tokenize,
     "tokenize -m MODEL [--bos] [--special] TEXT | -f FILE\n"
     "      print the token ids of TEXT on one line"},
    {"info", hr_cmd_info, "info -m MODEL [--kv]\n      architecture, sizes, tensor types"},
    {"mkmodel", hr_cmd_mkmodel,
     "mkmodel -o OUT [--shape tinyllama] [--type q4_0] [--arch llama] [--vocab GGUF]\n"
     "      [--embd N --layers N --heads N --heads-kv N --ffn N --vocab-size N] [--seed S]\n"
     "      write a random-weight model"},
    {"bench", hr_cmd_bench,
     "bench -m MODEL [-t T] [-P 128] [-N 64] [-r 3]\n"
     "      prompt and generation tokens/s, weight bytes per token, memory bandwidth"},
    {"agent", hr_cmd_agent,
     "agent -m MODEL [--listen ADDR:PORT] [--head ADDR:PORT | --peers A,B] [--name N]\n"
     "      [--mem-limit GiB] [-t T] [--k K --windows 2,1] [--wire f16|f32] [--no-prefetch]\n"
     "      [--api-listen ADDR:PORT [--api-key KEY] [--api-queue N] [--api-max-tokens N]]\n"
     "      cluster daemon: every machine runs one; the head is the one others join"},
    {"prompt", hr_cmd_prompt,
     "prompt [--head ADDR:PORT] [-n N] [--temp T ...] \"TEXT\"\n"
     "      ask the cluster; the answer streams to stdout"},
    {"status", hr_cmd_status,
     "status [--head ADDR:PORT] [--json]\n      every device of the cluster, its layers and "
     "figures"},
    {"key", hr_cmd_key,
     "key show | key token [--key-dir DIR]\n"
     "      this machine's public key (made on first use) / the head's join token"},
    {"trust", hr_cmd_trust,
     "trust add NAME PUBKEY | trust list [--key-dir DIR]\n"
     "      let the agent with that key join (or be joined); list trusted keys"},
    {"plan", hr_cmd_plan,
     "plan --model MODEL PROFILE.json... [--ctx N] [--k K] [--json]\n"
     "      plan a ring offline from saved profiles (the first is the head)"},
    {"profile", hr_cmd_profile,
     "profile [-m MODEL] [-t T] [--json] [-o FILE] [--quick] [--no-cache] [--peer ENDPOINT]\n"
     "      device, model and link profiles and the predicted decode time per layer/token"},
};

static void hr_usage(FILE *f) {
    fprintf(f, "usage: hearth COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof hr_cmds / sizeof hr_cmds[0]; i++)
        fprintf(f, "  %s\n", hr_cmds[i].usage);
    fprintf(f, "\noptions:\n");
    for (size_t i = 0; i < sizeof hr_opts / sizeof hr_opts[0]; i++) {
        const hr_opt *o = &hr_opts[i];
        char left[64];
        if (o->sname)
            snprintf(left, sizeof left, "-%c, --%s %s", o->sname, o->lname, o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "    --%s %s", o->lname, o->arg ? o->arg : "");
        fprintf(f, "  %-30s %s\n", left, o->help);
    }
}

static int hr_set_opt(hr_cli *cli, const hr_opt *o, const char *val) {
    char *end = NULL;
    void *dst = (char *)cli + o->off;
    errno = 0;
    switch (o->kind) {
    case HR_OPT_STR:
        *(const char **)dst = val;
        return 0;
    case HR_OPT_INT: {
        long v = strtol(val, &end, 10);
        if (errno || !*val || *end || v < -1000000000L || v > 1000000000L)
            return hr_cli_fail("option --%s: '%s' is not an integer", o->lname, val);
        *(int *)dst = (int)v;
        return 0;
    }
    case HR_OPT_I64: {
        long long v = strtoll(val, &end, 10);
        if (errno || !*val || *end)
            return hr_cli_fail("option --%s: '%s' is not an integer", o->lname, val);
        *(int64_t *)dst = v;
        return 0;
    }
    case HR_OPT_FLOAT: {
        float v = strtof(val, &end);
        if (errno || !*val || *end)
            return hr_cli_fail("option --%s: '%s' is not a number", o->lname, val);
        *(float *)dst = v;
        return 0;
    }
    case HR_OPT_FLAG:
        *(bool *)dst = true;
        return 0;
    case HR_OPT_LIST: {
        hr_cli_list *l = dst;
        if (l->n >= HR_CLI_LIST_MAX)
            return hr_cli_fail("option --%s: at most %d values", o->lname, HR_CLI_LIST_MAX);
        l->v[l->n++] = val;
        return 0;
    }
    }
    return 1;
}

static int hr_parse(hr_cli *cli, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const hr_opt *o = NULL;
        const char *inline_val = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (size_t k = 0; k < sizeof hr_opts / sizeof hr_opts[0]; k++)
                if (strlen(hr_opts[k].lname) == len && strncmp(hr_opts[k].lname, name, len) == 0)
                    o = &hr_opts[k];
            if (!o)
                return hr_cli_fail("unknown option '%s' (see hearth --help)", a);
            if (eq)
                inline_val = eq + 1;
        } else if (a[0] == '-' && a[1] && !a[2] && !(a[1] >= '0' && a[1] <= '9')) {
            for (size_t k = 0; k < sizeof hr_opts / sizeof hr_opts[0]; k++)
                if (hr_opts[k].sname == a[1])
                    o = &hr_opts[k];
            if (!o)
                return hr_cli_fail("unknown option '%s' (see hearth --help)", a);
        } else {
            if (cli->n_args >= 16)
                return hr_cli_fail("too many arguments");
            cli->args[cli->n_args++] = a;
            continue;
        }
        if (o->kind == HR_OPT_FLAG) {
            if (hr_set_opt(cli, o, ""))
                return 1;
            continue;
        }
        const char *val = inline_val;
        if (!val) {
            if (i + 1 >= argc)
                return hr_cli_fail("option --%s needs a value (%s)", o->lname, o->arg);
            val = argv[++i];
        }
        if (hr_set_opt(cli, o, val))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        hr_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("hearth 0.1.0\n");
        return 0;
    }
    hr_cli cli = {.n_predict = 128,
                  .threads = 0,
                  .batch = 64,
                  .temp = 0.8f,
                  .top_k = 40,
                  .top_p = 0.95f,
                  .min_p = 0.05f,
                  .repeat_penalty = 1.0f,
                  .seed = -1,
                  .n_prompt = 128,
                  .n_gen = 64,
                  .reps = 3};
    for (size_t i = 0; i < sizeof hr_cmds / sizeof hr_cmds[0]; i++) {
        if (strcmp(argv[1], hr_cmds[i].name) != 0)
            continue;
        if (hr_parse(&cli, argc - 2, argv + 2))
            return 2;
        if (cli.help) {
            printf("usage: hearth %s\n", hr_cmds[i].usage);
            return 0;
        }
        if (cli.verbose)
            hr_log_set_level(HR_LOG_LEVEL_INFO);
        if (cli.log_level) {
            hr_log_level lv;
            if (hr_log_parse_level(cli.log_level, &lv))
                return hr_cli_fail("unknown log level '%s'", cli.log_level) ? 2 : 2;
            hr_log_set_level(lv);
        }
        return hr_cmds[i].fn(&cli);
    }
    hr_cli_fail("unknown command '%s' (see hearth --help)", argv[1]);
    return 2;
}
