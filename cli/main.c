/* main.c - `hearth` entry point: the command table (one row per command)
 * and the dispatch to the command's entry function after its options are
 * parsed. */
#include "cli/cli.h"
#include "kernels/quant.h"

#include "common/log.h"
#include "model/sampler.h"

#include <stdio.h>
#include <string.h>

/* The commands: X(name, one-line summary, usage); the entry function is
 * hr_cmd_<name> and the option list hr_cmd_<name>_opts (HR_CLI_COMMAND). */
#define HR_CLI_COMMANDS(X)                                                                         \
    X(run, "generate text, streamed to stdout; speeds go to stderr",                               \
      "run -m MODEL (-p PROMPT | -f FILE) [-n N] [-t T] [--ctx C] [sampling] [--stop S]")          \
    X(chat, "interactive multi-turn chat on stdin/stdout (piped stdin: one user turn a line)",     \
      "chat -m MODEL [--template NAME] [--system TEXT] [--stop S] [--max-tokens N] [sampling]")    \
    X(logits, "teacher-forced logits, float32 rows of n_vocab per position",                       \
      "logits -m MODEL --ids 1,2,3 -o OUT [--compare REF]")                                        \
    X(tokenize, "print the token ids of TEXT on one line",                                         \
      "tokenize -m MODEL [--bos] [--special] TEXT | -f FILE")                                      \
    X(info, "compute devices; a model's architecture, sizes, tensor types",                        \
      "info [-m MODEL] [--kv]")                                                                    \
    X(mkmodel, "write a random-weight model",                                                      \
      "mkmodel -o OUT [--shape tinyllama] [--type q4_0] [--arch llama] [--vocab GGUF]\n"           \
      "       [--embd N --layers N --heads N --heads-kv N --ffn N --vocab-size N] [--seed S]")     \
    X(bench, "prompt and generation tokens/s, weight bytes per token, memory bandwidth",           \
      "bench -m MODEL [-t T] [-P 128] [-N 64] [-r 3] [--groups N | --numa | --parallel N]")        \
    X(agent, "cluster daemon: every machine runs one; the head is the one others join",            \
      "agent [-m MODEL] [--listen ADDR:PORT] [--head ADDR:PORT | --peers A,B] [--name N]\n"        \
      "       [--cluster NAME] [--no-discovery] [--join TOKEN] [--cache-dir DIR --cache-gb G]\n"   \
      "       [--mem-limit GiB] [-t T] [--k K --windows 2,1] [--wire f16|f32] [--no-prefetch]\n"   \
      "       [--gpu N --gpu-layers N]\n"                                                          \
      "       [--api-listen ADDR:PORT [--api-key KEY] [--api-queue N] [--api-max-tokens N]\n"      \
      "        [--api-max-conns N] [--api-max-conns-per-ip N] [--api-read-timeout S]\n"            \
      "        [--api-grace S] [--api-model-alias NAME]]")                                         \
    X(prompt, "ask the cluster; the answer streams to stdout",                                     \
      "prompt [--head ADDR:PORT] [-n N] [sampling] \"TEXT\"")                                      \
    X(status, "every device of the cluster, its layers and figures",                               \
      "status [--head ADDR:PORT] [--json]")                                                        \
    X(discover, "list the heads beaconing on this machine's networks",                             \
      "discover [--timeout S] [--json] [--discovery-port P]")                                      \
    X(key, "this machine's public key (made on first use) / the head's join token",                \
      "key show | key token | key rotate-join [HOURS] [--key-dir DIR]")                            \
    X(trust, "let the agent with that key join (or be joined); revoke it; list trusted keys",      \
      "trust add NAME PUBKEY | trust remove NAME | trust list [--key-dir DIR]")                    \
    X(plan, "plan a ring offline from saved profiles (the first is the head)",                     \
      "plan --model MODEL PROFILE.json... [--ctx N] [--k K] [--json]")                             \
    X(profile, "device, model and link profiles and the predicted decode time per layer/token",    \
      "profile [-m MODEL] [-t T] [--json] [-o FILE] [--quick] [--no-cache] [--peer ENDPOINT]")

#define HR_CLI_EXTERN(x, summary, usage)                                                           \
    extern const hr_cli_opt hr_cmd_##x##_opts[];                                                   \
    int hr_cmd_##x(hr_cli *o);
HR_CLI_COMMANDS(HR_CLI_EXTERN)

#define HR_CLI_ROW(x, summary, usage) {#x, hr_cmd_##x, hr_cmd_##x##_opts, summary, usage},
static const hr_cli_cmd hr_cli_cmds[] = {HR_CLI_COMMANDS(HR_CLI_ROW)};

#define HR_N_CMDS (sizeof hr_cli_cmds / sizeof hr_cli_cmds[0])

static const hr_cli_cmd *hr_cmd_find(const char *name) {
    for (size_t i = 0; i < HR_N_CMDS; i++)
        if (strcmp(name, hr_cli_cmds[i].name) == 0)
            return &hr_cli_cmds[i];
    return NULL;
}

static void hr_usage(FILE *f) {
    fprintf(f, "usage: hearth COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < HR_N_CMDS; i++)
        fprintf(f, "  %-10s %s\n", hr_cli_cmds[i].name, hr_cli_cmds[i].summary);
    fprintf(f, "\n`hearth COMMAND --help` (or `hearth help COMMAND`) shows a command's usage "
               "and options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        if (argc > 2 && strcmp(argv[1], "help") == 0) {
            const hr_cli_cmd *c = hr_cmd_find(argv[2]);
            if (!c) {
                hr_cli_fail("unknown command '%s' (see hearth --help)", argv[2]);
                return 2;
            }
            hr_cli_help(c, stdout);
            return 0;
        }
        hr_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("hearth 0.1.0\n");
        return 0;
    }
    const hr_cli_cmd *cmd = hr_cmd_find(argv[1]);
    if (!cmd) {
        hr_cli_fail("unknown command '%s' (see hearth --help)", argv[1]);
        return 2;
    }
    const hr_sampler_params sp = hr_sampler_params_default();
    hr_cli cli = {.n_predict = 128,
                  .threads = -1, /* not given: 0 after the checks below */
                  .batch = 64,
                  .temp = sp.temperature,
                  .top_k = sp.top_k,
                  .top_p = sp.top_p,
                  .min_p = sp.min_p,
                  .repeat_penalty = sp.repeat_penalty,
                  .seed = -1,
                  .n_prompt = 128,
                  .n_gen = 64,
                  .reps = 3,
                  .api_grace = -1,
                  .gpu_layers = -1};
    if (hr_cli_parse(&cli, cmd, argc - 2, argv + 2))
        return 2;
    if (cli.help) {
        hr_cli_help(cmd, stdout);
        return 0;
    }
    if (hr_cli_check(&cli, cmd))
        return 2;
    if (cli.verbose)
        hr_log_set_level(HR_LOG_LEVEL_INFO);
    if (cli.exact)
        hr_kernels_set_exact(true);
    if (cli.log_level) {
        hr_log_level lv;
        if (hr_log_parse_level(cli.log_level, &lv)) {
            hr_cli_fail("unknown log level '%s'", cli.log_level);
            return 2;
        }
        hr_log_set_level(lv);
    }
    return cmd->fn(&cli);
}
