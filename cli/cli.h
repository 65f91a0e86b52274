/* cli.h - the `hearth` command line: the parsed option values (hr_cli),
 * the option and command tables, and the command entry points. Internal to
 * cli/.
 *
 * Each command declares the options it accepts; anything else is a usage
 * error (exit 2, the command's usage on stderr). The table of commands is
 * HR_CLI_COMMANDS in main.c: name, one-line summary, usage synopsis (the
 * entry function hr_cmd_<name> and option list hr_cmd_<name>_opts follow
 * from the name).
 *
 * Adding a command `hearth x`:
 *   1. cli/cmd_x.c with `HR_CLI_COMMAND(x) { ... }` and its option list
 *      `const hr_cli_opt hr_cmd_x_opts[]`: its own rows (HR_CLI_OPT) and the
 *      shared groups it takes (HR_CLI_OPTS(hr_cli_opts_model), ...), ended by
 *      HR_CLI_OPT_END. A new value gets a field in hr_cli (defaults are set
 *      in main.c).
 *   2. One row in HR_CLI_COMMANDS (main.c): name, summary, usage.
 * -v/--verbose, --log LEVEL, --exact and -h/--help are accepted by every command
 * without being listed. `hearth x --help` prints the usage and the options
 * from the list; the help of every command also checks that no option name
 * is declared twice in its list. Re-run cmake after adding the file. */
#ifndef HR_CLI_CLI_H
#define HR_CLI_CLI_H

#include "model/sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A repeatable option's values, in command-line order. */
#define HR_CLI_LIST_MAX 16
typedef struct {
    const char *v[HR_CLI_LIST_MAX];
    int n;
} hr_cli_list;

/* The parsed values of every command's options. A command reads the fields
 * of the options it declares; the others keep main.c's defaults. */
typedef struct {
    const char *model;
    const char *prompt;
    const char *prompt_file;
    const char *ids;
    const char *out;
    const char *compare;
    const char *arch;
    const char *type;
    const char *shape;
    const char *vocab;
    const char *log_level;
    int n_predict;
    int threads;
    int threads_decode; /* run, bench: decode threads (0 = threads) */
    int groups;         /* run, bench: tensor-parallel thread groups (0 = plain) */
    bool numa;          /* run, bench: one group per NUMA node (groups = -1) */
    bool tp_reduce;     /* run, bench: column split with partial sums */
    const char *gpu;    /* run, logits, bench: Vulkan device (N, auto, any, none; NULL = HR_GPU) */
    int gpu_layers;     /* run, logits, bench, agent: the first N layers (agent: of each window)
                           on that device; -1 = not given (CPU only; agent: the plan's) */
    int ctx;
    int batch;
    int n_prompt;
    int n_gen;
    int reps;
    const char *isa;   /* bench: kernel tables to compare (comma list, "all"; NULL = best) */
    int parallel;      /* bench: concurrent sequences (0 = single-sequence bench); agent (head):
                          requests generating at once (0 = chosen from memory) */
    int ring_batches;  /* agent (head): micro-batches in flight around the ring (0 = one per
                          ring device) */
    int prefill_depth; /* agent (head): prompt chunks of a request on the ring at once */
    int embd, layers, heads, heads_kv, ffn, vocab_size;
    int experts, experts_used, expert_ffn, shared_ffn;
    int head_dim, window, window_pattern; /* mkmodel */
    float temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int top_k;
    int64_t seed;
    bool kv;
    bool bos;
    bool special;
    const char *peer;          /* profile: echo responder to measure the link to */
    const char *cache_dir;     /* profile: cache folder; agent (worker without -m): where the
                                  model bytes fetched from the head go */
    bool json;                 /* profile: JSON instead of the table */
    bool quick;                /* profile: quick device profile */
    bool no_cache;             /* profile: measure again (and refresh the cache) */
    const char *chat_template; /* chat: template name (chatml, llama3, llama2, mistral) */
    const char *system;        /* chat: system message */
    hr_cli_list stop;          /* run, chat: stop strings (repeatable, comma lists) */
    int max_tokens;            /* run, chat: tokens per reply (0 = run's -n / unlimited) */
    /* cluster (agent, prompt, status) */
    const char *listen;     /* agent: control host:port (data on port + 1) */
    const char *head;       /* agent: join this head; prompt/status: head to ask */
    const char *peers;      /* agent: be the head and invite these agents */
    const char *name;       /* agent: device name */
    const char *windows;    /* agent (head): force window sizes per ring position */
    const char *wire;       /* agent (head): f16 or f32 hidden states */
    const char *release;    /* agent: release finished windows: auto, on, off */
    float mem_limit;        /* agent: GiB reported available for weights */
    int k;                  /* agent (head): force k rounds */
    int expect;             /* agent (head): workers to wait for */
    int timeout_s;          /* prompt/status: seconds to wait */
    bool no_prefetch;       /* agent: no madvise(WILLNEED) of the next window */
    bool no_profile;        /* agent: join without measuring a device profile */
    const char *api_listen; /* agent (head): serve the HTTP API on ADDR:PORT */
    const char *api_key;    /* agent (head): require Authorization: Bearer KEY */
    int api_queue;          /* agent (head): requests waiting at most (0 = default) */
    int api_max_tokens;     /* agent (head): most tokens per request (0 = context) */
    int api_max_conns;      /* agent (head): HTTP connections at most (0 = default) */
    int api_max_conns_ip;   /* agent (head): HTTP connections per client address (0 = default) */
    int api_read_timeout;   /* agent (head): seconds for a request to arrive (0 = default) */
    int api_grace;          /* agent (head): seconds running requests get at shutdown (-1 =
                               default) */
    hr_cli_list api_alias;  /* agent (head): more accepted "model" names */
    const char *key_dir;    /* agent, prompt, status, key, trust: key folder */
    const char *head_key;   /* agent, prompt, status: the head's public key or trusted name */
    const char *join;       /* agent: the head's join token (first pairing) */
    bool insecure;          /* agent, prompt, status: no CURVE (benchmarks only) */
    bool verbose;
    bool exact; /* every command: hr_kernels_set_exact */
    bool help;
    int n_args;
    const char *args[16]; /* positional arguments */
    /* agent: send this device profile (JSON) instead of measuring */
    const char *profile_file;
    /* discovery and fetching (agent, discover) */
    const char *cluster; /* agent (head): name beaconed; worker / discover: the one to join */
    bool no_discovery;   /* agent: no beacon (head), no listening (worker) */
    int discovery_port;  /* UDP port of beacons (0 = default) */
    float cache_gb;      /* agent (worker without -m): GiB kept there at most (0 = no limit) */
} hr_cli;

typedef int (*hr_cmd_fn)(hr_cli *o);

/* What an option stores: a string (borrowed from argv), an int, a count (an
 * int >= 0: "-n -5" is refused), an int64, a float, true (a flag, no value),
 * one more value of a repeatable option; or a row that stands for a shared
 * group of options (INCLUDE), or the end. */
typedef enum {
    HR_CLI_END = 0,
    HR_CLI_STR,
    HR_CLI_INT,
    HR_CLI_COUNT,
    HR_CLI_I64,
    HR_CLI_FLOAT,
    HR_CLI_FLAG,
    HR_CLI_LIST,
    HR_CLI_INCLUDE
} hr_cli_kind;

typedef struct hr_cli_opt {
    const char *lname;              /* long name without "--" */
    char sname;                     /* short name, 0 = none */
    hr_cli_kind kind;               /* what it stores */
    size_t off;                     /* offsetof(hr_cli, field) */
    const char *arg;                /* the value in the help (NULL for flags) */
    const char *help;               /* one line */
    const struct hr_cli_opt *group; /* HR_CLI_INCLUDE: the group's rows */
} hr_cli_opt;

/* HR_CLI_OPT("top-k", 0, INT, top_k, "K", "top-k filter"): one option. */
#define HR_CLI_OPT(lname, sname, kind, field, arg, help)                                           \
    { lname, sname, HR_CLI_##kind, offsetof(hr_cli, field), arg, help, NULL }
/* Every option of a shared group (groups may include groups). */
#define HR_CLI_OPTS(group)                                                                         \
    { NULL, 0, HR_CLI_INCLUDE, 0, NULL, NULL, group }
#define HR_CLI_OPT_END                                                                             \
    { NULL, 0, HR_CLI_END, 0, NULL, NULL, NULL }

/* Shared option groups, declared once in options.c. */
extern const hr_cli_opt hr_cli_opts_common[];    /* every command: -v, --log, -h */
extern const hr_cli_opt hr_cli_opts_model[];     /* -m/--model */
extern const hr_cli_opt hr_cli_opts_threads[];   /* -t (all cores by default) */
extern const hr_cli_opt hr_cli_opts_engine[];    /* -t, --threads-decode, --groups, --numa, ... */
extern const hr_cli_opt hr_cli_opts_sampling[];  /* --temp --top-k --top-p --min-p ... --seed */
extern const hr_cli_opt hr_cli_opts_penalties[]; /* --presence-penalty --frequency-penalty */
extern const hr_cli_opt hr_cli_opts_reply[];     /* --stop, --max-tokens */
extern const hr_cli_opt hr_cli_opts_key_dir[];   /* --key-dir */
extern const hr_cli_opt hr_cli_opts_security[];  /* --key-dir, --head-key, --insecure */
extern const hr_cli_opt hr_cli_opts_client[];    /* --head, --timeout, security */

/* One row of the command table. */
typedef struct {
    const char *name;
    hr_cmd_fn fn;
    const hr_cli_opt *opts; /* the options it accepts besides the common ones */
    const char *summary;    /* one line for `hearth --help` */
    const char *usage;      /* synopsis after "hearth " */
} hr_cli_cmd;

/* Parses argv (the words after the command name) into cli, accepting only
 * cmd's options and the common ones; the other words are positional. Returns
 * 0, or 2 after printing the error (and, for an unknown option or a missing
 * value, cmd's usage) on stderr. */
int hr_cli_parse(hr_cli *cli, const hr_cli_cmd *cmd, int argc, char **argv);

/* Prints cmd's usage, summary and options to f. Aborts when cmd's list
 * declares an option name twice (a broken table). */
void hr_cli_help(const hr_cli_cmd *cmd, FILE *f);
/* Checks values that parse but make no sense (-t 0, --top-p outside (0, 1],
 * -p with -f), warns about doubtful ones (-t above the online cores) and
 * resolves -t not given to 0 (every core). 0, or 1 after printing why. */
int hr_cli_check(hr_cli *o, const hr_cli_cmd *cmd);

/* Defines command x's entry function, declaring it and its option list
 * (`const hr_cli_opt hr_cmd_x_opts[]`, in the same file) on the way:
 *   HR_CLI_COMMAND(x) { ...uses o... }                                  */
#define HR_CLI_COMMAND(x)                                                                          \
    extern const hr_cli_opt hr_cmd_##x##_opts[];                                                   \
    int hr_cmd_##x(hr_cli *o);                                                                     \
    int hr_cmd_##x(hr_cli *o)

/* The --stop values split at unescaped commas, with \n \t \r \, \\ decoded:
 * *out is a malloc'ed array of *n malloc'ed strings (free with
 * hr_cli_stop_free). Returns 0 or 1 after printing the error. */
int hr_cli_stop_list(const hr_cli *o, char ***out, int *n);
void hr_cli_stop_free(char **v, int n);

/* The sampler the sampling options describe (hr_sampler_params_default()
 * for what they leave out; seed -1: the time). */
hr_sampler_params hr_cli_sampler(const hr_cli *o);

/* Prints "hearth: <msg>" to stderr (one clear line) and returns 1. */
int hr_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool hr_cli_is_tty(void);

#endif
