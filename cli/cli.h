/* cli.h - the `hearth` command line: one option table shared by every
 * subcommand, and the subcommand entry points. Internal to cli/. */
#ifndef HR_CLI_CLI_H
#define HR_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>

/* A repeatable option's values, in command-line order. */
#define HR_CLI_LIST_MAX 16
typedef struct {
    const char *v[HR_CLI_LIST_MAX];
    int n;
} hr_cli_list;

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
    int ctx;
    int batch;
    int n_prompt;
    int n_gen;
    int reps;
    int embd, layers, heads, heads_kv, ffn, vocab_size;
    float temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int top_k;
    int64_t seed;
    bool kv;
    bool bos;
    bool special;
    const char *peer;          /* profile: echo responder to measure the link to */
    const char *cache_dir;     /* profile: cache folder */
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
    const char *key_dir;    /* agent, prompt, status, key, trust: key folder */
    const char *head_key;   /* agent, prompt, status: the head's public key or trusted name */
    const char *join;       /* agent: the head's join token (first pairing) */
    bool insecure;          /* agent, prompt, status: no CURVE (benchmarks only) */
    bool verbose;
    bool help;
    int n_args;
    const char *args[16]; /* positional arguments */
} hr_cli;

typedef int (*hr_cmd_fn)(hr_cli *o);

int hr_cmd_run(hr_cli *o);
int hr_cmd_logits(hr_cli *o);
int hr_cmd_info(hr_cli *o);
int hr_cmd_mkmodel(hr_cli *o);
int hr_cmd_bench(hr_cli *o);
int hr_cmd_tokenize(hr_cli *o);
int hr_cmd_profile(hr_cli *o);
int hr_cmd_plan(hr_cli *o);
int hr_cmd_agent(hr_cli *o);
int hr_cmd_prompt(hr_cli *o);
int hr_cmd_status(hr_cli *o);
int hr_cmd_chat(hr_cli *o);
int hr_cmd_key(hr_cli *o);   /* cmd_trust.c */
int hr_cmd_trust(hr_cli *o); /* cmd_trust.c */

/* The --stop values split at unescaped commas, with \n \t \r \, \\ decoded:
 * *out is a malloc'ed array of *n malloc'ed strings (free with
 * hr_cli_stop_free). Returns 0 or 1 after printing the error. */
int hr_cli_stop_list(const hr_cli *o, char ***out, int *n);
void hr_cli_stop_free(char **v, int n);

/* Prints "hearth: <msg>" to stderr (one clear line) and returns 1. */
int hr_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool hr_cli_is_tty(void);

#endif
