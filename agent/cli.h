/* cli.h - the `hearth` command line: one option table shared by every
 * subcommand, and the subcommand entry points. Internal to agent/. */
#ifndef HR_AGENT_CLI_H
#define HR_AGENT_CLI_H

#include <stdbool.h>
#include <stdint.h>

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
    const char *peer;      /* profile: echo responder to measure the link to */
    const char *cache_dir; /* profile: cache folder */
    bool json;             /* profile: JSON instead of the table */
    bool quick;            /* profile: quick device profile */
    bool no_cache;         /* profile: measure again (and refresh the cache) */
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

/* Prints "hearth: <msg>" to stderr (one clear line) and returns 1. */
int hr_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double hr_cli_now(void);
bool hr_cli_is_tty(void);

#endif
